"""Transactions with real clients: commit and abort across partitions of
two topics (confluent-kafka, kafka-python), read_committed against
read_uncommitted readers, seed 003's consume-transform-produce loop across
a SIGKILL and a takeover that fences the old instance, a transaction
abandoned across a node's kill -9 aborted by its timeout, and raw frames a
client may send wrong."""
import os
import struct
import subprocess
import sys
import threading
import time

import pytest

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer

import rawkafka
from conftest import create_topic

HERE = os.path.dirname(os.path.abspath(__file__))


def read_all(bootstrap, topic, partitions, isolation, expect=None, timeout=30):
    """Every record of `topic` from the start, as (partition, offset, value),
    read at `isolation` until each partition's end (or `expect` records)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}-{topic}",
                  "isolation.level": isolation, "enable.partition.eof": True,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, ends = [], set()
    deadline = time.time() + timeout
    while time.time() < deadline:
        if expect is None and len(ends) == partitions:
            break
        if expect is not None and len(got) >= expect:
            break
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            ends.add(m.partition())
            continue
        got.append((m.partition(), m.offset(), m.value()))
    c.close()
    return got


def high_watermarks(bootstrap, topic, partitions):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw"})
    out = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
           for p in range(partitions)]
    c.close()
    return out


def test_commit_and_abort_across_partitions_of_two_topics(node):
    create_topic(node.bootstrap, "orders", partitions=2)
    create_topic(node.bootstrap, "audit", partitions=1)
    targets = [("orders", 0), ("orders", 1), ("audit", 0)]
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "shop-1"})
    p.init_transactions(30)
    expected = []
    for n, outcome in enumerate(["commit", "abort", "commit"]):
        p.begin_transaction()
        for i, (topic, part) in enumerate(targets * 2):
            value = f"{outcome}-{n}-{i}".encode()
            p.produce(topic, value, partition=part)
            if outcome == "commit":
                expected.append((topic, value))
        # Sent before the abort (an abort drops what is still queued).
        assert p.flush(30) == 0
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    committed = read_all(node.bootstrap, "orders", 2, "read_committed") + \
        [(p_, o, v) for p_, o, v in read_all(node.bootstrap, "audit", 1, "read_committed")]
    assert sorted(v for _, _, v in committed) == sorted(v for _, v in expected)
    everything = read_all(node.bootstrap, "orders", 2, "read_uncommitted") + \
        read_all(node.bootstrap, "audit", 1, "read_uncommitted")
    values = [v for _, _, v in everything]
    # Every data record, aborted ones too; no marker ever reaches a client.
    assert len(values) == 18 and len(set(values)) == 18
    assert sum(v.startswith(b"abort") for v in values) == 6
    # Offsets are dense apart from the markers: each partition holds its
    # 6 records and one marker per transaction.
    for topic, parts in (("orders", 2), ("audit", 1)):
        for part, hw in enumerate(high_watermarks(node.bootstrap, topic, parts)):
            offsets = sorted(o for p_, o, _ in (read_all(node.bootstrap, topic, parts,
                                                         "read_uncommitted"))
                             if p_ == part)
            assert len(offsets) == 6 and hw == 6 + 3, (topic, part, offsets, hw)
            gaps = sum(1 for a, b in zip(offsets, offsets[1:]) if b != a + 1)
            assert gaps == 2 and offsets[0] == 0, offsets


def test_kafka_python_transactional_producer(node):
    create_topic(node.bootstrap, "kp", partitions=1)
    kp = KafkaProducer(bootstrap_servers=node.bootstrap, transactional_id="kp-1")
    kp.init_transactions()
    kp.begin_transaction()
    kp.send("kp", b"kept")
    kp.commit_transaction()
    kp.begin_transaction()
    kp.send("kp", b"dropped")
    kp.flush()
    kp.abort_transaction()
    kp.close()
    assert [v for _, _, v in read_all(node.bootstrap, "kp", 1, "read_committed")] == [b"kept"]
    assert sorted(v for _, _, v in read_all(node.bootstrap, "kp", 1, "read_uncommitted")) == \
        [b"dropped", b"kept"]


class Transformer:
    """tests/integration/transformer.py as a process, its lines read as
    they come."""

    def __init__(self, node, pause_after):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "transformer.py"), node.bootstrap, "xform",
             "raw-in", "upper-out", "xformers", str(pause_after)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.lines = []
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line.strip())
                self.changed.notify_all()
        with self.changed:
            self.lines.append("EXIT")
            self.changed.notify_all()

    def wait_for(self, word, timeout=90):
        with self.changed:
            ok = self.changed.wait_for(
                lambda: any(l.startswith(word) or l == "EXIT" for l in self.lines), timeout)
        assert ok and any(l.startswith(word) for l in self.lines), (word, self.lines)


def test_transform_loop_is_exactly_once_across_a_kill_and_a_takeover(make_node):
    node = make_node(extra=["--group-initial-rebalance-delay-ms", "0"])
    create_topic(node.bootstrap, "raw-in", partitions=2)
    create_topic(node.bootstrap, "upper-out", partitions=2)
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 50})
    inputs = [f"r{i:03}".encode() for i in range(300)]
    for i, v in enumerate(inputs):
        p.produce("raw-in", v, partition=i % 2)
    assert p.flush(30) == 0
    # The first instance commits two batches, then is killed with its third
    # transaction open (its records written, not committed).
    first = Transformer(node, pause_after=2)
    first.wait_for("PAUSED")
    first.proc.kill()
    first.proc.wait(30)
    # The second commits a batch and stops mid-transaction too; a third
    # takes the transactional id over (aborting that transaction and
    # fencing the second) and finishes the input.
    second = Transformer(node, pause_after=1)
    second.wait_for("PAUSED")
    third = Transformer(node, pause_after=-1)
    third.wait_for("DONE")
    assert third.proc.wait(30) == 0
    # The second, fenced, may not commit.
    second.proc.stdin.write("go\n")
    second.proc.stdin.flush()
    second.wait_for("FENCED")
    assert second.proc.wait(30) == 3
    out = read_all(node.bootstrap, "upper-out", 2, "read_committed")
    values = sorted(v for _, _, v in out)
    assert values == sorted(v.upper() for v in inputs), (len(values), len(set(values)))
    # The group's committed offsets are at the end of the input.
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "xformers"})
    ends = c.committed([TopicPartition("raw-in", 0), TopicPartition("raw-in", 1)], timeout=15)
    c.close()
    assert [tp.offset for tp in ends] == [150, 150]


def test_abandoned_transaction_is_aborted_by_timeout_after_kill(make_node, tmp_path):
    node = make_node(data_dir=tmp_path / "d")
    create_topic(node.bootstrap, "ledger", partitions=1)
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "abandoned",
                  "transaction.timeout.ms": 4000, "message.timeout.ms": 4000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("ledger", b"never-committed")
    assert p.flush(30) == 0
    plain = Producer({"bootstrap.servers": node.bootstrap})
    plain.produce("ledger", b"after")
    assert plain.flush(30) == 0
    # The open transaction holds read_committed readers back.
    assert read_all(node.bootstrap, "ledger", 1, "read_committed", timeout=5) == []
    node.kill()
    node.start()
    # A read_committed consumer parked at the stable offset is woken when
    # the coordinator aborts the transaction on its timeout, and reads on.
    got = read_all(node.bootstrap, "ledger", 1, "read_committed", expect=1, timeout=40)
    assert [v for _, _, v in got] == [b"after"]
    assert node.await_log("ran past its timeout")
    # The abandoned producer, fenced by the abort's epoch, cannot commit.
    try:
        p.commit_transaction(10)
        committed = True
    except KafkaException:
        committed = False
    assert not committed
    assert [v for _, _, v in read_all(node.bootstrap, "ledger", 1, "read_committed")] == [b"after"]


@pytest.mark.parametrize("point", ["txn-prepared", "txn-marked"])
def test_commit_cut_by_a_crash_completes_after_restart(make_node, tmp_path, point):
    """The node dies (WEIR_CRASH_AT: an abort, as a kill -9) inside EndTxn:
    with the commit decided but no marker written, or with every marker
    written but the transaction not completed. Restarted, it completes the
    commit on its own; a read_committed consumer parked at the stable
    offset across the crash is woken and reads each record once; the
    producer, retrying its commit as librdkafka lets it, is told it
    committed."""
    node = make_node(data_dir=tmp_path / "d", env={"WEIR_CRASH_AT": point})
    create_topic(node.bootstrap, "left", partitions=2)
    create_topic(node.bootstrap, "right", partitions=1)
    targets = [("left", 0), ("left", 1), ("right", 0)]
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "cut-" + point})
    p.init_transactions(30)
    p.begin_transaction()
    sent = []
    for i, (topic, part) in enumerate(targets * 2):
        sent.append(f"{point}-{i}".encode())
        p.produce(topic, sent[-1], partition=part)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "parked",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(t, part, 0) for t, part in targets])
    assert c.poll(1) is None  # parked at the stable offset: the transaction is open

    outcome = {}

    def commit():
        # A user's loop: a retriable failure (the coordinator went away)
        # is retried; anything else is the answer.
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                p.commit_transaction(10)
                outcome["committed"] = True
                return
            except KafkaException as e:
                if not e.args[0].retriable():
                    outcome["error"] = e.args[0]
                    return
        outcome["error"] = "not committed in 60 s"

    committer = threading.Thread(target=commit)
    committer.start()
    assert node.proc.wait(30) != 0
    assert node.await_log(f"crash point {point} reached")
    del node.env["WEIR_CRASH_AT"]
    node.start()
    got = []
    deadline = time.time() + 30
    while len(got) < len(sent) and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    # Each committed record exactly once, nothing else, then quiet.
    assert sorted(got) == sorted(sent)
    assert c.poll(2) is None
    c.close()
    committer.join(70)
    assert outcome == {"committed": True}, outcome
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    state = admin.describe_transactions(["cut-" + point])["cut-" + point].state
    admin.close()
    assert state == "CompleteCommit"


def init_producer_id(sock, txn_id, timeout_ms=60000):
    sock.sendall(rawkafka.request(22, 1, rawkafka.string(txn_id) + struct.pack(">i", timeout_ms)))
    frame = rawkafka.read_frame(sock)
    _cid, _throttle, code, pid, epoch = struct.unpack_from(">iihqh", frame, 0)
    return code, pid, epoch


def end_txn(sock, txn_id, pid, epoch, commit=True):
    body = rawkafka.string(txn_id) + struct.pack(">qh?", pid, epoch, commit)
    sock.sendall(rawkafka.request(26, 1, body))
    frame = rawkafka.read_frame(sock)
    return struct.unpack_from(">iih", frame, 0)[2]


def test_wrong_transactional_requests_get_their_errors(node):
    create_topic(node.bootstrap, "raw-txn", partitions=1)
    s = rawkafka.connect(node.bootstrap)
    # An id no producer ever initialized.
    assert end_txn(s, "nobody", 1, 0) == 49  # INVALID_PRODUCER_ID_MAPPING
    code, pid, epoch = init_producer_id(s, "raw-1")
    assert code == 0 and pid >= 0 and epoch == 0
    assert end_txn(s, "raw-1", pid, epoch) == 48  # INVALID_TXN_STATE: none open
    assert end_txn(s, "raw-1", pid + 1000, epoch) == 49
    code, pid2, epoch2 = init_producer_id(s, "raw-1")
    assert (code, pid2, epoch2) == (0, pid, epoch + 1)
    assert end_txn(s, "raw-1", pid, epoch) == 47  # the old epoch: fenced (v1)
    # A control batch from a client: refused, never stored.
    from kafka.record.util import calc_crc32c
    batch = bytearray(rawkafka.record_batch([b"\x00\x00\x00\x01"]))
    batch[21:23] = struct.pack(">h", 0x30)  # transactional | control
    batch[17:21] = struct.pack(">I", calc_crc32c(bytes(batch[21:])))
    s.sendall(rawkafka.request(0, 3, rawkafka.produce_v3("raw-txn", 0, bytes(batch))))
    _cid, results = rawkafka.parse_produce_v3_response(rawkafka.read_frame(s))
    assert results[0][2] == 87  # INVALID_RECORD
    assert read_all(node.bootstrap, "raw-txn", 1, "read_uncommitted") == []


def test_admin_clients_see_open_transactions_and_their_producers(node):
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    create_topic(node.bootstrap, "watched", partitions=1)
    plain = Producer({"bootstrap.servers": node.bootstrap})
    plain.produce("watched", b"before")
    assert plain.flush(30) == 0
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "watched-1"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("watched", b"inside")
    assert p.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)

    def listed(**filters):
        """(id, state) of every transaction every broker lists."""
        per_broker = admin.list_transactions(**filters)
        return sorted((t.transactional_id, t.state) for ts in per_broker.values() for t in ts)

    assert listed() == [("watched-1", "Ongoing")]
    # v2's pattern matches the whole id (as Java's Matcher.matches does).
    assert listed(transactional_id_pattern="watch.*-[0-9]") == [("watched-1", "Ongoing")]
    assert listed(transactional_id_pattern="watched") == []
    with pytest.raises(Exception, match="error_code=128"):  # INVALID_REGULAR_EXPRESSION
        listed(transactional_id_pattern="(unclosed")
    described = admin.describe_transactions(["watched-1"])["watched-1"]
    assert described.state == "Ongoing" and described.producer_id >= 0
    assert {(tp.topic, tp.partition) for tp in described.topic_partitions} == {("watched", 0)}
    producers = admin.describe_producers([KTP("watched", 0)])[KTP("watched", 0)]
    open_txn = [s for s in producers.active_producers if s.current_transaction_start_offset >= 0]
    assert [(s.producer_id, s.current_transaction_start_offset) for s in open_txn] == \
        [(described.producer_id, 1)], producers
    assert listed(state_filters=["CompleteCommit"]) == []
    p.commit_transaction(30)
    assert listed(state_filters=["CompleteCommit"]) == [("watched-1", "CompleteCommit")]
    producers = admin.describe_producers([KTP("watched", 0)])[KTP("watched", 0)]
    assert all(s.current_transaction_start_offset == -1 for s in producers.active_producers)
    # The commit's marker carried its coordinator's epoch, which the
    # partition keeps for the producer (-1 before any marker).
    mine = [s for s in producers.active_producers if s.producer_id == described.producer_id]
    assert len(mine) == 1 and mine[0].coordinator_epoch >= 0, producers
    admin.close()


def test_sql_shows_committed_rows_only(node):
    import json
    import urllib.request

    def select(text):
        req = urllib.request.Request(node.http + "/sql", data=text.encode(), method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    select("CREATE TABLE payments (id BIGINT, amount DOUBLE)")
    select("CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance DOUBLE)")
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "payments-1"})
    p.init_transactions(30)

    def txn(rows, end):
        p.begin_transaction()
        for r in rows:
            p.produce("payments", json.dumps(r).encode())
            p.produce("accounts", json.dumps({"id": r["id"], "balance": r["amount"]}).encode(),
                      key=json.dumps({"id": r["id"]}).encode())
        assert p.flush(30) == 0
        if end == "commit":
            p.commit_transaction(30)
        elif end == "abort":
            p.abort_transaction(30)

    txn([{"id": 1, "amount": 10.0}, {"id": 2, "amount": 20.0}], "commit")
    txn([{"id": 1, "amount": 999.0}, {"id": 3, "amount": 30.0}], "abort")
    txn([{"id": 2, "amount": 25.0}], "commit")
    # Open, its records written: not shown until it commits.
    txn([{"id": 4, "amount": 40.0}], "open")
    assert select("SELECT id, amount FROM payments ORDER BY id, amount") == [
        {"id": 1, "amount": 10.0}, {"id": 2, "amount": 20.0}, {"id": 2, "amount": 25.0}]
    assert select("SELECT * FROM accounts ORDER BY id") == [
        {"id": 1, "balance": 10.0}, {"id": 2, "balance": 25.0}]
    p.commit_transaction(30)
    assert select("SELECT count(*) AS n FROM payments") == [{"n": 4}]
    assert select("SELECT * FROM accounts ORDER BY id") == [
        {"id": 1, "balance": 10.0}, {"id": 2, "balance": 25.0}, {"id": 4, "balance": 40.0}]
