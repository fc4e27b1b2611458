"""Starts real weir nodes for the integration tests.

A node is the release binary run as a child process on free loopback ports
with its own data directory. Start-up is awaited by reading the node's own
"weir serving" line, never by sleeping.
"""
import os
import signal
import subprocess
import threading
import time

import pytest

from ports import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WEIR = os.environ.get("WEIR_BIN", os.path.join(ROOT, "target", "release", "weir"))


# Every node made, in order: a failed test's report shows the logs of the
# nodes it made (see pytest_runtest_makereport).
NODES = []


class Node:
    """`ca`: the authority of the node's --tls-cert, for HTTPS to --addr."""

    def __init__(self, data_dir, cores=2, extra=(), env=None, ca=None, host="127.0.0.1"):
        NODES.append(self)
        # Its Kafka and HTTP addresses' host (any of 127/8 is this machine).
        self.host = host
        self.data_dir = str(data_dir)
        self.ca = ca
        self.cores = cores
        self.extra = list(extra)
        self.env = {**os.environ, **(env or {})}
        self.kafka_port = free_port(host)
        # Two free ports in a row can be the same one (each socket is
        # closed before the next asks), and the node, which listens with
        # SO_REUSEPORT, then refuses it (both listeners on one port).
        self.http_port = free_port(host)
        while self.http_port == self.kafka_port:
            self.http_port = free_port(host)
        self.proc = None
        self.log = []
        self.logged = threading.Condition()

    @property
    def bootstrap(self):
        return f"{self.host}:{self.kafka_port}"

    @property
    def http(self):
        scheme = "https" if self.ca else "http"
        return f"{scheme}://{self.host}:{self.http_port}"

    def urlopen(self, request, timeout=30):
        """urllib's urlopen, trusting the node's authority over HTTPS."""
        import ssl
        import urllib.request
        context = ssl.create_default_context(cafile=self.ca) if self.ca else None
        return urllib.request.urlopen(request, timeout=timeout, context=context)

    def spawn(self):
        """Starts the process and returns at once; `self.ready` is set when
        the node logs that it serves (or its stderr ends)."""
        cmd = [WEIR, "serve", self.data_dir, "--kafka", self.bootstrap,
               "--addr", f"{self.host}:{self.http_port}", "--cores", str(self.cores), *self.extra]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                     env=self.env)
        ready = self.ready = threading.Event()
        # Every line kept beside the data directory too (the report shows
        # only the last ones), across restarts; best effort: a test that
        # fills the data directory's disk fills that file's too.
        kept = [open(self.data_dir.rstrip("/") + ".log", "ab", buffering=0)]

        def drain(proc):
            for line in proc.stderr:
                with self.logged:
                    self.log.append(line)
                    self.logged.notify_all()
                try:
                    if kept:
                        kept[0].write(line.encode())
                except OSError:
                    kept.pop().close()
                if "weir serving" in line:
                    ready.set()
            for f in kept:
                f.close()
            ready.set()

        threading.Thread(target=drain, args=(self.proc,), daemon=True).start()
        return self

    def await_log(self, text, timeout=10):
        """Whether the node logs a line containing `text` within `timeout`
        seconds (lines arrive through a pipe, after the event)."""
        with self.logged:
            return self.logged.wait_for(lambda: any(text in line for line in self.log), timeout)

    def start(self, timeout=30):
        self.spawn()
        self.ready.wait(timeout)
        if self.proc.poll() is not None or not any("weir serving" in l for l in self.log):
            raise RuntimeError("weir did not start:\n" + "".join(self.log))
        return self

    def stop(self, timeout=30):
        """SIGTERM and wait: a clean stop exits 0."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        assert code == 0, f"weir exited {code}:\n" + "".join(self.log[-30:])

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def restart(self):
        self.stop()
        return self.start()

    def stats(self):
        import json
        with self.urlopen(self.http + "/stats", timeout=10) as r:
            return json.loads(r.read())


# Every test is bounded in time: one that has not ended after this many
# seconds (or its own `@pytest.mark.bound(seconds)`) is a hang, of the
# node or of a client library, and the run ends there with what shows it.
BOUND_SECONDS = 600


def _end_a_hung_run(item, seconds, first):
    """Prints every thread's stack and the last lines of every node the
    test made, kills those nodes and ends the run: a thread blocked in a
    client library's C code cannot be interrupted, and CI's own limit
    would end the run without saying which test hung or where."""
    import faulthandler
    import sys
    # pytest holds file descriptor 2 while a test runs: give it back.
    item.config.pluginmanager.getplugin("capturemanager").suspend_global_capture(in_=True)
    out = sys.__stderr__
    out.write(f"\n\n{item.nodeid} has not ended after {seconds} s: every thread's stack follows\n")
    out.flush()
    faulthandler.dump_traceback(file=out, all_threads=True)
    for n in NODES[first:]:
        out.write(f"\n-- weir node {n.data_dir} (last 60 lines)\n{''.join(n.log[-60:])}")
        if n.proc and n.proc.poll() is None:
            n.proc.kill()
    out.flush()
    os._exit(3)


def pytest_configure(config):
    config.addinivalue_line("markers", "bound(seconds): the test's own time bound (default BOUND_SECONDS)")


@pytest.fixture(autouse=True)
def _nodes_made_here(request):
    """Marks where this test's nodes begin in NODES, and bounds the test
    in time (see BOUND_SECONDS)."""
    first = request.node.weir_nodes_from = len(NODES)
    mark = request.node.get_closest_marker("bound")
    seconds = mark.args[0] if mark else BOUND_SECONDS
    timer = threading.Timer(seconds, _end_a_hung_run, args=(request.node, seconds, first))
    timer.daemon = True
    timer.start()
    yield
    timer.cancel()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report ends with the last lines each node it made
    logged (a node that stopped answering says why there)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when in ("setup", "call"):
        for n in NODES[getattr(item, "weir_nodes_from", len(NODES)):]:
            report.sections.append((f"weir node {n.data_dir} (last 60 lines)", "".join(n.log[-60:])))


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "data").start()
    yield n
    if n.proc.poll() is None:
        n.stop()


@pytest.fixture
def make_node(tmp_path):
    nodes = []

    def make(cores=2, extra=(), data_dir=None, env=None, ca=None):
        n = Node(data_dir or tmp_path / f"data{len(nodes)}", cores=cores, extra=extra, env=env,
                 ca=ca)
        nodes.append(n)
        return n.start()

    yield make
    for n in nodes:
        if n.proc and n.proc.poll() is None:
            n.kill()


def create_topic(bootstrap, name, partitions=1, config=None):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                       config=config or {})])
    fs[name].result(15)


def consume_all(bootstrap, topic, partitions, expected=None, timeout=30, **conf):
    """Reads every partition from its start to its high watermark (as it is
    when reading starts). With `expected`, also checks the total."""
    from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  **conf})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    done = {p for p, end in ends.items() if end == 0}
    deadline = time.time() + timeout
    while len(done) < partitions and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append(m)
        if m.offset() + 1 >= ends[m.partition()]:
            done.add(m.partition())
    c.close()
    assert len(done) == partitions, f"read {len(out)} records; partitions {sorted(set(ends) - done)} not to their end {ends}"
    if expected is not None:
        assert len(out) == expected
    return out


def make_certs(directory):
    """A certificate authority, a node certificate it signs for 127.0.0.1
    and localhost, and a client certificate with subject CN `billing`, made
    with the openssl command; returns their PEM files' paths by name."""
    d = str(directory)
    os.makedirs(d, exist_ok=True)
    path = {name: os.path.join(d, name) for name in (
        "ca.pem", "ca.key", "node.pem", "node.key", "billing.pem", "billing.key")}

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=weir test CA",
            "-keyout", path["ca.key"], "-out", path["ca.pem"])
    # X.509 v3 certificates with their uses named, as a real authority's.
    uses = {"node": "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
            "billing": "extendedKeyUsage=clientAuth\n"}
    for name, subject in (("node", "/CN=localhost"), ("billing", "/O=acme/CN=billing")):
        csr, ext = os.path.join(d, name + ".csr"), os.path.join(d, name + ".ext")
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\n" + uses[name])
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                "-keyout", path[name + ".key"], "-out", csr)
        openssl("x509", "-req", "-in", csr, "-CA", path["ca.pem"], "-CAkey", path["ca.key"],
                "-CAcreateserial", "-days", "2", "-out", path[name + ".pem"], "-extfile", ext)
    return path
