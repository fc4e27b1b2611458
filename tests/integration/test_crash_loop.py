"""Crash loop: clients that stay connected while the node is killed again and
again, as an operator's restart policy and users' clients behave.

One idempotent librdkafka producer (acks=all, lz4, linger 2 ms, reconnect
backoff up to 200 ms) sends all the time and one group member consumes and
commits synchronously after each batch. Both live across every kill. The node
(`--cores 2`, a 4-partition topic) is killed with SIGKILL after 0.5-2.5 s of
serving, a third of the time after a SIGSTOP of 0.2-1 s, and started again on
the same data directory and ports within 0-0.5 s (often at once), while two
busy loops load both cores. After every restart a checker requires:

- the node answers Kafka (ApiVersions) and HTTP (/health) within
  ANSWER_WITHIN seconds of its process start;
- every record acknowledged before the kill is in the log exactly once, at
  its acknowledged offset; offsets are dense; no value appears twice; the log
  never shrinks; every record the consumer was given is still where it was;
- every group commit acknowledged before the kill is kept;
- the log reads back whole: a fresh consumer reads it from its start to
  the high watermarks sampled first, all four partitions at once (so
  every fetch spans both cores and hops are dropped once one core
  answers), failing after STALL_AFTER seconds without a record, or at
  once with the node's panic or its allocator's abort if it died.

WEIR_CRASH_CYCLES (default 40) and WEIR_CRASH_SEED (default random, printed)
set the run; the seed replays the same schedule of kills. WEIR_CRASH_RATE
sets the producer's records per second (0: as fast as it goes);
WEIR_CRASH_ALLOCATOR the node's allocator (`system`, the default here, or
`mimalloc`).
"""
import gc
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.request

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

import rawkafka
from conftest import Node, create_topic

CYCLES = int(os.environ.get("WEIR_CRASH_CYCLES", "40"))
SEED = int(os.environ.get("WEIR_CRASH_SEED", str(random.randrange(1 << 32))))
# From the new process's start to its first Kafka and HTTP answers.
ANSWER_WITHIN = 10.0
# The checker's read of the whole log fails after this long without a record.
STALL_AFTER = 30.0
# The node's allocator (src/allocator.rs): the C library's by default here,
# whose checks abort the process at a double free or a corrupted heap
# where mimalloc (the node's default) carries on with the damage: with it
# this loop caught glommio's double free on 2867814 within 30 cycles, and
# with mimalloc it passed 69.
ALLOCATOR = os.environ.get("WEIR_CRASH_ALLOCATOR", "system")
TOPIC = "crashloop"
PARTITIONS = 4
# The producer's pace: records per second (enough for many flushes per
# cycle, few enough that the checker reads the log in a moment).
RATE = int(os.environ.get("WEIR_CRASH_RATE", "5000"))


def answers_kafka(bootstrap):
    """One ApiVersions v0 round trip, answered without error."""
    try:
        with rawkafka.connect(bootstrap, timeout=0.5) as s:
            s.sendall(rawkafka.request(18, 0, b"", correlation_id=7))
            frame = rawkafka.read_frame(s)
            return frame is not None and struct.unpack_from(">ih", frame) == (7, 0)
    except OSError:
        return False


def answers_http(base):
    try:
        with urllib.request.urlopen(base + "/health", timeout=0.5) as r:
            return r.status == 200
    except OSError:
        return False


def panic_of(node):
    """Why the node's process ended, if it did: its exit status, its panic
    report (a panic aborts the process: src/panics.rs) or the C library's
    word on a corrupted heap, and its last lines."""
    code = node.proc.poll()
    if code is None:
        return ""
    panics = [line for line in node.log if "panicked" in line]
    return (f"\nthe node's process ended with status {code}"
            + (":\n" + "".join(panics[:5]) if panics else "")
            + "\nits last lines:\n" + "".join(node.log[-15:]))


def diagnose(node):
    """What a stuck node's threads are doing, and what its rings hold."""
    pid = node.proc.pid
    out = [f"pid {pid}"]
    try:
        for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
            base = f"/proc/{pid}/task/{tid}"
            comm = open(f"{base}/comm").read().strip()
            state = open(f"{base}/stat").read().rsplit(")", 1)[1].split()[0]
            wchan = open(f"{base}/wchan").read().strip()
            out.append(f"  thread {tid} {comm} {state} {wchan}")
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if "io_uring" in target:
                info = open(f"/proc/{pid}/fdinfo/{fd}").read()
                out.append(f"  fd {fd} {target}:\n    " + info.replace("\n", "\n    "))
    except OSError as e:
        out.append(f"  /proc: {e}")
    try:
        ss = subprocess.run(["ss", "-tanp", f"sport = :{node.kafka_port}"], capture_output=True, text=True)
        out.append(ss.stdout)
    except OSError as e:
        out.append(f"ss: {e}")
    out.append("node log:\n" + "".join(node.log[-20:]))
    return "\n".join(out)


class Clients:
    """The producer and the group member, living across every kill."""

    def __init__(self, bootstrap):
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.lock = threading.Lock()
        # (partition, offset, record number) since the last `take`: the
        # checker verifies each once, so a check costs what is new.
        self.acked = []
        self.consumed = []
        self.acked_total = 0
        self.commits = {}  # partition -> highest acknowledged commit
        self.failures = []  # delivery failures and fatal client errors
        self.threads = [threading.Thread(target=self.produce, daemon=True),
                        threading.Thread(target=self.consume, daemon=True)]

    def start(self):
        for t in self.threads:
            t.start()

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def take(self):
        """What was acknowledged and consumed since the last call, and the
        acknowledged commits."""
        with self.lock:
            acked, consumed = self.acked, self.consumed
            self.acked, self.consumed = [], []
            return acked, consumed, dict(self.commits)

    def on_error(self, err):
        if err.fatal():
            with self.lock:
                self.failures.append(f"fatal: {err}")

    def on_delivery(self, err, msg):
        with self.lock:
            if err is not None:
                self.failures.append(f"delivery: {err}")
            else:
                self.acked.append((msg.partition(), msg.offset(), int(msg.value()[2:])))
                self.acked_total += 1

    def produce(self):
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                      "compression.type": "lz4", "linger.ms": 2, "reconnect.backoff.ms": 10,
                      "reconnect.backoff.max.ms": 200, "message.timeout.ms": 300000,
                      "error_cb": self.on_error})
        i = 0
        began = time.monotonic()
        while not self.stop.is_set():
            try:
                p.produce(TOPIC, key=b"k%d" % (i % 97), value=b"v-%d" % i, on_delivery=self.on_delivery)
                i += 1
            except BufferError:
                p.poll(0.05)
                continue
            if i % 50 == 0:
                p.poll(0)
                if RATE == 0:
                    continue  # as fast as the client goes
                ahead = i / RATE - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)  # pacing, not waiting for an event
        p.flush(60)

    def consume(self):
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "crashloop",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                      "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 200,
                      "error_cb": self.on_error})
        c.subscribe([TOPIC])
        while not self.stop.is_set():
            try:
                msgs = c.consume(500, 0.5)
            except KafkaException:
                continue
            ends = {}
            for m in msgs:
                if m.error() is not None:
                    continue
                with self.lock:
                    self.consumed.append((m.partition(), m.offset(), int(m.value()[2:])))
                ends[m.partition()] = m.offset() + 1
            if not ends:
                continue
            try:
                done = c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in ends.items()],
                                asynchronous=False)
            except KafkaException:
                continue  # not acknowledged: the node went away meanwhile
            with self.lock:
                for tp in done:
                    if tp.error is None:
                        self.commits[tp.partition] = max(self.commits.get(tp.partition, 0), tp.offset)
        c.close()


class Checker:
    """The log as read so far: per partition, the record number at each
    offset (the list index), read incrementally after every restart."""

    def __init__(self, node):
        self.node = node
        self.bootstrap = node.bootstrap
        self.log = {p: [] for p in range(PARTITIONS)}
        self.seen = set()

    def read_all(self):
        """Reads every partition from the log's start up to the high
        watermarks sampled first, as a fresh consumer would (one consumer
        fetching all four partitions, so each fetch spans both shards and
        hops are dropped once one shard answers): records already read must
        be where they were; those past them are appended. Fails after
        STALL_AFTER seconds without a record, with the node's panic if it
        had one."""
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "crashloop-checker",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 50})
        try:
            ends = {}
            for p in range(PARTITIONS):
                ends[p] = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
                assert ends[p] >= len(self.log[p]), \
                    f"partition {p} shrank: its end is {ends[p]}, {len(self.log[p])} records were read before"
            c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
            at = {p: 0 for p in range(PARTITIONS)}
            progressed = time.monotonic()
            error = None
            while any(at[p] < ends[p] for p in ends):
                assert self.node.proc.poll() is None, \
                    f"the node died while the log was read back (at {at} of {ends}):{panic_of(self.node)}"
                if time.monotonic() - progressed > STALL_AFTER:
                    raise AssertionError(
                        f"no record for {STALL_AFTER} s reading to the ends {ends}: at {at} "
                        f"(last error {error}){panic_of(self.node)}\n{diagnose(self.node)}")
                try:
                    msgs = c.consume(5000, 0.5)
                except KafkaException as e:
                    error = e
                    continue
                for m in msgs:
                    if m.error() is not None:
                        error = m.error()
                        continue
                    p, o = m.partition(), m.offset()
                    if o >= ends[p]:
                        continue
                    assert o == at[p], f"partition {p}: offset {o} after {at[p]}"
                    n = int(m.value()[2:])
                    known = self.log[p]
                    if o < len(known):
                        assert known[o] == n, f"partition {p}/{o} held record {known[o]}, now {n}"
                    else:
                        assert n not in self.seen, f"record {n} is in the log twice (again at {p}/{o})"
                        self.seen.add(n)
                        known.append(n)
                    at[p] = o + 1
                    progressed = time.monotonic()
        finally:
            c.close()

    def check(self, acked, consumed):
        for what, records in (("acknowledged", acked), ("consumed", consumed)):
            lost = [(p, o, n) for p, o, n in records
                    if o >= len(self.log[p]) or self.log[p][o] != n]
            assert not lost, f"{len(lost)} {what} records missing or moved, e.g. {sorted(lost)[:5]}"

    def check_commits(self, acked_commits, group="crashloop"):
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group})
        try:
            got = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
        finally:
            c.close()
        kept = {tp.partition: tp.offset for tp in got}
        lost = {p: (o, kept.get(p)) for p, o in acked_commits.items() if kept.get(p, -1) < o}
        assert not lost, f"acknowledged commits of {group} lost (acked, now): {lost}"


def wait_until_answering(node, began):
    """Seconds from the process's start to its first Kafka and HTTP answers."""
    kafka = http = None
    while time.monotonic() - began < ANSWER_WITHIN:
        assert node.proc.poll() is None, "weir exited:" + panic_of(node)
        if kafka is None and answers_kafka(node.bootstrap):
            kafka = time.monotonic() - began
        if http is None and answers_http(node.http):
            http = time.monotonic() - began
        if kafka is not None and http is not None:
            return max(kafka, http)
    raise AssertionError(f"the node did not answer Kafka ({kafka}) and HTTP ({http}) within "
                         f"{ANSWER_WITHIN} s of its start:\n{diagnose(node)}")


def busy_loops(n):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def tear_down(clients, load, node):
    """Stops the clients and the busy loops and kills the node (woken
    first if it was left stopped)."""
    gc.enable()
    clients.stop.set()
    for p in load:
        p.kill()
    if node.proc.poll() is None:
        node.proc.send_signal(signal.SIGCONT)
        node.kill()


def test_crash_loop_keeps_every_acknowledged_record(tmp_path):
    rng = random.Random(SEED)
    # Millions of small records in dicts: the cyclic collector would walk
    # them all, again and again, while the clients need the interpreter
    # (these structures hold no cycles; reference counting frees them).
    gc.disable()
    print(f"crash loop: {CYCLES} cycles, seed {SEED} (WEIR_CRASH_SEED={SEED} replays it)")
    node = Node(tmp_path / "data", cores=2, extra=["--group-initial-rebalance-delay-ms", "0"],
                env={"WEIR_ALLOCATOR": ALLOCATOR}).start()
    if ALLOCATOR == "system":
        assert node.await_log("the system's allocator serves this process"), "".join(node.log)
    create_topic(node.bootstrap, TOPIC, partitions=PARTITIONS)
    clients = Clients(node.bootstrap)
    checker = Checker(node)
    load = busy_loops(2)
    answer_times = []
    lost_wakeups = []  # the watchdog's lines (core/src/watchdog.rs), any run
    try:
        clients.start()
        for cycle in range(CYCLES):
            time.sleep(rng.uniform(0.5, 2.5))  # the schedule of kills
            if rng.random() < 1 / 3:
                node.proc.send_signal(signal.SIGSTOP)
                time.sleep(rng.uniform(0.2, 1.0))
            acked, consumed, commits = clients.take()
            node.kill()
            lost_wakeups += [line for line in node.log if "lost wake-up" in line]
            if rng.random() < 0.5:
                time.sleep(rng.uniform(0.001, 0.5))
            began = time.monotonic()
            node.log = []
            node.spawn()
            answer_times.append(wait_until_answering(node, began))
            checker.read_all()
            checker.check(acked, consumed)
            checker.check_commits(commits)
            with clients.lock:
                assert not clients.failures, f"cycle {cycle}: client failures {clients.failures[:5]}"
            print(f"cycle {cycle}: answered after {answer_times[-1]:.3f} s; "
                  f"{sum(len(v) for v in checker.log.values())} records in the log, "
                  f"{clients.acked_total} acknowledged, commits {commits}")
        clients.join()
        acked, consumed, commits = clients.take()
        checker.read_all()
        checker.check(acked, consumed)
        acked_total = clients.acked_total
        assert acked_total > CYCLES * 500, f"only {acked_total} records acknowledged"
        assert commits, "no group commit was acknowledged"
        lost_wakeups += [line for line in node.log if "lost wake-up" in line]
        print(f"crash loop seed {SEED}: {CYCLES} cycles, {acked_total} records acknowledged, "
              f"first answer after restart: median {statistics.median(answer_times):.3f} s, "
              f"max {max(answer_times):.3f} s; lost wake-ups woken by the watchdog: {len(lost_wakeups)}")
        for line in lost_wakeups:
            print(line.rstrip())
    finally:
        tear_down(clients, load, node)
