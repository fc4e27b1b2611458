"""Starts real weir nodes for the integration tests.

A node is the release binary run as a child process on free loopback ports
with its own data directory. Start-up is awaited by reading the node's own
"weir serving" line, never by sleeping.
"""
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WEIR = os.environ.get("WEIR_BIN", os.path.join(ROOT, "target", "release", "weir"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, data_dir, cores=2, extra=(), env=None):
        self.data_dir = str(data_dir)
        self.cores = cores
        self.extra = list(extra)
        self.env = {**os.environ, **(env or {})}
        self.kafka_port = free_port()
        self.http_port = free_port()
        self.proc = None
        self.log = []

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def http(self):
        return f"http://127.0.0.1:{self.http_port}"

    def spawn(self):
        """Starts the process and returns at once; `self.ready` is set when
        the node logs that it serves (or its stderr ends)."""
        cmd = [WEIR, "serve", self.data_dir, "--kafka", self.bootstrap,
               "--addr", f"127.0.0.1:{self.http_port}", "--cores", str(self.cores), *self.extra]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                     env=self.env)
        ready = self.ready = threading.Event()

        def drain(proc):
            for line in proc.stderr:
                self.log.append(line)
                if "weir serving" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=drain, args=(self.proc,), daemon=True).start()
        return self

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
        import urllib.request
        with urllib.request.urlopen(self.http + "/stats", timeout=10) as r:
            return json.loads(r.read())


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "data").start()
    yield n
    if n.proc.poll() is None:
        n.stop()


@pytest.fixture
def make_node(tmp_path):
    nodes = []

    def make(cores=2, extra=(), data_dir=None, env=None):
        n = Node(data_dir or tmp_path / f"data{len(nodes)}", cores=cores, extra=extra, env=env)
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
