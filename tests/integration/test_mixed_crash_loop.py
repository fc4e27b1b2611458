"""The mixed crash loop: every kind of work the node serves, killed again and
again at random moments, start-up recovery included, with a checker after
every restart. The clients live across every kill, as users' clients do:

- an idempotent producer and a committing group (`test_crash_loop`'s
  `Clients`) on `crashloop`, and a second group committing there too;
- a transactional producer writing transactions of 20 records to `txn`;
- a keyed table `accounts` (compacted, small segments, so cleaning passes
  run between kills) written by a producer (keys 0-49) and by SQL INSERT
  (keys 50-99), each key's balance growing with every write;
- a topic with 2 s retention and small segments, written all the time.

A third of the kills come during start-up: the new process is killed again
0-300 ms after it was started, before it answers. After every restart:

- `crashloop`: every acknowledged record once at its offset, offsets dense,
  every acknowledged commit of both groups kept;
- `txn` read_committed: every committed transaction's records once, none
  of an aborted one;
- `accounts`: SELECT between the latest row per key in its log read just
  before and just after it (balances only grow; the writers go on), and
  each key's balance between its last acknowledged write and its last
  attempt;
- the retention topic's log start never goes back.

WEIR_CRASH_CYCLES (default 8 here) and WEIR_CRASH_SEED (default random,
printed) set the run.
"""
import gc
import http.client
import json
import os
import random
import signal
import threading
import time
import urllib.request

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from conftest import Node, create_topic
from test_crash_loop import Checker, Clients, busy_loops, tear_down, wait_until_answering

CYCLES = int(os.environ.get("WEIR_CRASH_CYCLES", "8"))
SEED = int(os.environ.get("WEIR_CRASH_SEED", str(random.randrange(1 << 32))))
TXN_PARTITIONS = 2
KEYS = 100


def sql(node, text, timeout=5):
    req = urllib.request.Request(node.http + "/sql", data=text.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class SecondGroup:
    """Another group on `crashloop`, committing after each batch."""

    def __init__(self, bootstrap, stop):
        self.bootstrap, self.stop = bootstrap, stop
        self.lock = threading.Lock()
        self.commits = {}
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "second",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                      "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 200})
        c.subscribe(["crashloop"])
        while not self.stop.is_set():
            try:
                msgs = c.consume(200, 0.5)
                ends = {m.partition(): m.offset() + 1 for m in msgs if m.error() is None}
                if not ends:
                    continue
                done = c.commit(offsets=[TopicPartition("crashloop", p, o) for p, o in ends.items()],
                                asynchronous=False)
            except KafkaException:
                continue
            with self.lock:
                for tp in done:
                    if tp.error is None:
                        self.commits[tp.partition] = max(self.commits.get(tp.partition, 0), tp.offset)
        c.close()

    def acked(self):
        with self.lock:
            return dict(self.commits)


class Transactions:
    """Transactions of 20 records; each ends committed, aborted, or (when
    the node died in its commit) unknown."""

    def __init__(self, bootstrap, stop):
        self.bootstrap, self.stop = bootstrap, stop
        self.lock = threading.Lock()
        self.committed, self.aborted, self.unknown = set(), set(), set()
        # The transaction being written: visible once its commit is
        # durable, which may be before commit_transaction returns.
        self.in_flight = set()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def producer(self):
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "mixed-txn",
                      "transaction.timeout.ms": 60000, "reconnect.backoff.ms": 10,
                      "reconnect.backoff.max.ms": 200, "message.timeout.ms": 60000})
        while not self.stop.is_set():
            try:
                p.init_transactions(30)
                return p
            except KafkaException:
                continue
        return None

    def run(self):
        p = self.producer()
        n = 0
        while p is not None and not self.stop.is_set():
            values = [b"t-%d" % (n + i) for i in range(20)]
            n += 20
            with self.lock:
                self.in_flight = set(values)
            try:
                p.begin_transaction()
                for i, v in enumerate(values):
                    p.produce("txn", v, partition=i % TXN_PARTITIONS)
                p.commit_transaction(30)
                outcome = self.committed
            except KafkaException as e:
                err = e.args[0]
                if err.txn_requires_abort():
                    try:
                        p.abort_transaction(30)
                        outcome = self.aborted
                    except KafkaException:
                        outcome = self.unknown
                        p = self.producer()
                else:
                    # Fatal, or the commit's fate unknown: a new producer
                    # fences this one; the coordinator finishes or aborts.
                    outcome = self.unknown
                    p = self.producer()
            with self.lock:
                outcome.update(values)
                self.in_flight = set()

    def outcomes(self):
        with self.lock:
            return set(self.committed), set(self.aborted), set(self.unknown)

    def may_be_visible(self):
        """What a reader may see now beyond what was committed before."""
        with self.lock:
            return self.committed | self.unknown | self.in_flight


class TableWriter:
    """Writes the keyed table: keys 0-49 by producer, 50-99 by SQL INSERT;
    each key's balance grows by one a write. Remembers each key's last
    acknowledged balance and last attempted one. Also keeps the retention
    topic written."""

    def __init__(self, node, stop, rng):
        self.node, self.stop = node, stop
        self.rng = random.Random(rng.random())
        self.lock = threading.Lock()
        self.acked = {}
        self.attempted = {}
        self.threads = [threading.Thread(target=self.produce, daemon=True),
                        threading.Thread(target=self.insert, daemon=True)]

    def produce(self):
        def report(err, msg):
            if err is None and msg.topic() == "accounts":
                k, b = json.loads(msg.key())["id"], json.loads(msg.value())["balance"]
                with self.lock:
                    self.acked[k] = max(self.acked.get(k, -1), b)

        p = Producer({"bootstrap.servers": self.node.bootstrap, "enable.idempotence": True,
                      "acks": "all", "linger.ms": 5, "reconnect.backoff.ms": 10,
                      "reconnect.backoff.max.ms": 200, "message.timeout.ms": 300000})
        balance = {}
        while not self.stop.is_set():
            k = self.rng.randrange(KEYS // 2)
            b = balance[k] = balance.get(k, 0) + 1
            with self.lock:
                self.attempted[k] = b
            p.produce("accounts", key=json.dumps({"id": k}).encode(),
                      value=json.dumps({"id": k, "balance": b}).encode(), on_delivery=report)
            p.produce("short", b"r" * 100)
            p.poll(0)
            time.sleep(0.002)  # pacing
        p.flush(60)

    def insert(self):
        balance = {}
        while not self.stop.is_set():
            k = KEYS // 2 + self.rng.randrange(KEYS // 2)
            b = balance[k] = balance.get(k, 0) + 1
            with self.lock:
                self.attempted[k] = b
            try:
                sql(self.node, f"INSERT INTO accounts (id, balance) VALUES ({k}, {b})")
            except (OSError, http.client.HTTPException, ValueError):
                # The node went down before, during or after the statement
                # (an answer cut short): its fate is unknown.
                time.sleep(0.05)
                continue
            with self.lock:
                self.acked[k] = max(self.acked.get(k, -1), b)

    def bounds(self):
        with self.lock:
            return dict(self.acked), dict(self.attempted)


def read_all(bootstrap, topic, partitions, committed=False, starts=None):
    """Every record from `starts` (default: the log start) to the high
    watermark as it is when reading begins; with `committed`, read as
    read_committed (up to the last stable offset, which passes that high
    watermark once the transactions open then have ended)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                  "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted"})
    try:
        ends, first = {}, {}
        for p in range(partitions):
            first[p], ends[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        if starts is not None:
            first = {p: max(first[p], starts.get(p, 0)) for p in first}
        c.assign([TopicPartition(topic, p, first[p]) for p in range(partitions)])
        out = []
        last = {p: -1 for p in range(partitions)}
        deadline = time.monotonic() + 120
        while True:
            positions = c.position([TopicPartition(topic, p) for p in range(partitions)])
            if all(ends[tp.partition] <= first[tp.partition] or tp.offset >= ends[tp.partition]
                   for tp in positions):
                return out
            assert time.monotonic() < deadline, f"{topic}: could not read to {ends}"
            m = c.poll(0.5)
            if m is None or m.error() is not None:
                continue
            assert m.offset() > last[m.partition()], f"{topic}: offsets went back"
            last[m.partition()] = m.offset()
            out.append(m)
    finally:
        c.close()


class TransactionChecker:
    """`txn` as read_committed so far, read on from where it stopped."""

    def __init__(self, bootstrap):
        self.bootstrap = bootstrap
        self.seen = set()
        self.next = {}

    def check(self, committed, aborted, worker):
        for m in read_all(self.bootstrap, "txn", TXN_PARTITIONS, committed=True, starts=self.next):
            v = m.value()
            assert v not in self.seen, f"{v!r} read twice"
            self.seen.add(v)
            self.next[m.partition()] = m.offset() + 1
        seen = self.seen
        assert not (seen & aborted), f"aborted records visible: {sorted(seen & aborted)[:5]}"
        assert committed <= seen, f"committed records missing: {sorted(committed - seen)[:5]}"
        # Read after the reading: transactions went on committing meanwhile.
        visible = worker.may_be_visible()
        assert seen <= visible, f"never committed: {sorted(seen - visible)[:5]}"


def latest_rows(bootstrap):
    """Each key's latest balance in the `accounts` log."""
    latest = {}
    for m in read_all(bootstrap, "accounts", 2):
        k = json.loads(m.key())["id"]
        latest[k] = None if m.value() is None else json.loads(m.value())["balance"]
    return {k: b for k, b in latest.items() if b is not None}


def check_table(node, acked, writer):
    """SELECT against the log read just before and just after it (the
    writers go on meanwhile, and balances only grow), and against what was
    acknowledged and attempted."""
    before = latest_rows(node.bootstrap)
    rows = {r["id"]: r["balance"] for r in sql(node, "SELECT id, balance FROM accounts", timeout=30)}
    after = latest_rows(node.bootstrap)
    _, attempted = writer.bounds()
    assert len(rows) == len(set(rows)), "a key twice"
    for k in set(before) | set(rows) | set(after):
        assert before.get(k, -1) <= rows.get(k, -1) <= after.get(k, -1), \
            f"key {k}: SELECT {rows.get(k)} outside the log's {before.get(k)} .. {after.get(k)}"
    for k, b in acked.items():
        assert b <= rows.get(k, -1) <= attempted[k], f"key {k}: {rows.get(k)} not in [{b}, {attempted[k]}]"


def test_mixed_crash_loop_keeps_every_acknowledged_write(tmp_path):
    rng = random.Random(SEED)
    gc.disable()
    print(f"mixed crash loop: {CYCLES} cycles, seed {SEED} (WEIR_CRASH_SEED={SEED} replays it)")
    node = Node(tmp_path / "data", cores=2, extra=[
        "--group-initial-rebalance-delay-ms", "0", "--compaction-check-ms", "300",
        "--retention-check-ms", "300"]).start()
    create_topic(node.bootstrap, "crashloop", partitions=4)
    create_topic(node.bootstrap, "txn", partitions=TXN_PARTITIONS)
    create_topic(node.bootstrap, "short", config={"retention.ms": "2000", "internal.segment.bytes": "65536"})
    sql(node, "CREATE TABLE accounts (id INT PRIMARY KEY, balance INT) WITH (partitions = 2, "
              "internal_segment_bytes = 65536, min_cleanable_dirty_ratio = 0.01)")
    clients = Clients(node.bootstrap)
    checker = Checker(node)
    second = SecondGroup(node.bootstrap, clients.stop)
    txns = Transactions(node.bootstrap, clients.stop)
    table = TableWriter(node, clients.stop, rng)
    txn_checker = TransactionChecker(node.bootstrap)
    load = busy_loops(1)
    short_start = 0
    cleaned = retained = 0  # passes that ran, from the node's log lines

    def count_passes():
        nonlocal cleaned, retained
        cleaned += sum("accounts-" in line and "compaction rewrote" in line for line in node.log)
        retained += sum("short-0: retention removed" in line for line in node.log)

    try:
        clients.start()
        workers = [*clients.threads, second.thread, txns.thread, *table.threads]
        for t in workers[len(clients.threads):]:
            t.start()
        for cycle in range(CYCLES):
            time.sleep(rng.uniform(0.5, 2.5))
            if rng.random() < 1 / 4:
                node.proc.send_signal(signal.SIGSTOP)
                time.sleep(rng.uniform(0.1, 0.5))
            acked, consumed, commits = clients.take()
            commits2 = second.acked()
            committed, aborted, unknown = txns.outcomes()
            table_acked, _ = table.bounds()
            node.kill()
            count_passes()
            node.log = []
            node.spawn()
            if rng.random() < 1 / 3:
                time.sleep(rng.uniform(0, 0.3))  # killed again in its recovery
                node.kill()
                count_passes()
                node.log = []
                node.spawn()
            began = time.monotonic()
            wait_until_answering(node, began)
            checker.read_all()
            checker.check(acked, consumed)
            checker.check_commits(commits)
            checker.check_commits(commits2, group="second")
            txn_checker.check(committed, aborted, txns)
            check_table(node, table_acked, table)
            short_start = check_retention(node, short_start)
            with clients.lock:
                assert not clients.failures, f"cycle {cycle}: client failures {clients.failures[:5]}"
            dead = [t.name for t in workers if not t.is_alive()]
            assert not dead, f"cycle {cycle}: client threads ended: {dead}"
            print(f"cycle {cycle}: {clients.acked_total} acknowledged, {len(committed)} in committed "
                  f"transactions, {len(table_acked)} keys acknowledged, retention start {short_start}, "
                  f"cleaning passes {cleaned}, retention passes {retained}")
        assert clients.acked_total > 0 and committed and table_acked
        assert cleaned > 0 and retained > 0, "compaction and retention ran between the kills"
    finally:
        tear_down(clients, load, node)


def check_retention(node, previous_start):
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "check-short"})
    try:
        start, end = c.get_watermark_offsets(TopicPartition("short", 0), timeout=30)
    finally:
        c.close()
    assert start >= previous_start, f"the retention topic's start went back: {previous_start} -> {start}"
    assert start <= end
    return start
