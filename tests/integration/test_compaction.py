"""Log compaction (`cleanup.policy=compact`) with real clients.

Many updates to a few keys, with segments small enough to roll often and
the dirty ratio low, so the node cleans while the test runs. Readers from
the beginning (confluent-kafka and kafka-python) must see, in offset order
with gaps, only records that were produced at those offsets, and the latest
record of every key. Tombstones go after delete.retention.ms; a kill -9 at
random moments (WEIR_COMPACTION_KILLS of them, default 6; WEIR_CRASH_SEED
replays a run) and at each step of a swap (by crash point) loses nothing;
a keyed table is compacted by default and reads the same after it.
"""
import json
import os
import random
import threading
import time
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from conftest import Node, create_topic

# The node looks for partitions due a pass every 100 ms.
FAST = ["--compaction-check-ms", "100"]
COMPACTED = {
    "cleanup.policy": "compact",
    "internal.segment.bytes": "8192",
    "min.cleanable.dirty.ratio": "0.01",
}


def stats_sum(node, field):
    return sum(s[field] for s in node.stats())


def wait_for(what, condition, timeout=60, step=None):
    """Polls `condition` (running `step` between tries, the workload that
    makes it come true) until it holds; fails after `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        if step:
            step()
        else:
            time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Acked:
    """Produces keyed records with acks=all and remembers each one's
    offset once acknowledged (and every value sent, acknowledged or not)."""

    def __init__(self, bootstrap, topic, **conf):
        self.topic = topic
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                           "enable.idempotence": True, "message.timeout.ms": 120000,
                           "reconnect.backoff.max.ms": 200, **conf})
        self.acked = {}
        self.sent = {}
        self.lock = threading.Lock()

    def produce(self, key, value):
        self.sent[value] = key

        def done(err, msg):
            if err is None:
                with self.lock:
                    self.acked[msg.offset()] = (key, value)
        while True:
            try:
                self.p.produce(self.topic, key=key, value=value, on_delivery=done)
                break
            except BufferError:
                self.p.poll(0.1)
        self.p.poll(0)

    def flush(self):
        assert self.p.flush(120) == 0

    def latest(self):
        """Each key's last acknowledged (offset, value), tombstones too."""
        with self.lock:
            out = {}
            for o, (k, v) in sorted(self.acked.items()):
                out[k] = (o, v)
            return out


def read_all(bootstrap, topic):
    """Every record of partition 0 from the beginning to the high
    watermark, with confluent-kafka: [(offset, key, value)]."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-reader",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.time() + 60
    while end > 0 and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == -191, m.error()  # _PARTITION_EOF
            if c.position([TopicPartition(topic, 0)])[0].offset >= end:
                break
            continue
        out.append((m.offset(), m.key(), m.value()))
        if m.offset() + 1 >= end:
            break
    c.close()
    assert end == 0 or time.time() < deadline, f"read {len(out)} records, not to {end}"
    return out


def read_all_kafka_python(bootstrap, topic):
    from kafka import KafkaConsumer, TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      consumer_timeout_ms=10000)
    tp = KTP(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    end = c.end_offsets([tp])[tp]
    out = []
    deadline = time.time() + 60
    while c.position(tp) < end and time.time() < deadline:
        for records in c.poll(timeout_ms=500).values():
            out.extend((r.offset, r.key, r.value) for r in records)
    reached = c.position(tp)
    c.close()
    assert reached >= end, f"kafka-python read to {reached}, not to {end}"
    return out, end


def check_view(view, producer, dropped_keys=()):
    """A reader's view holds only records produced at those offsets, in
    offset order, and each key's latest acknowledged record (or a later
    one of the key, produced but not known acknowledged)."""
    offsets = [o for o, _, _ in view]
    assert offsets == sorted(set(offsets)), "offsets grow"
    last_of = {}
    for o, k, v in view:
        if o in producer.acked:
            assert producer.acked[o] == (k, v), f"offset {o}: {(k, v)} is not what was acknowledged"
        else:
            assert v is None or producer.sent.get(v) == k, f"offset {o}: {(k, v)} was never produced"
        last_of[k] = (o, v)
    for k, (o, v) in producer.latest().items():
        if k in dropped_keys:
            assert k not in last_of, f"{k!r} was deleted and its tombstone is past delete.retention.ms"
            continue
        assert k in last_of and last_of[k][0] >= o, f"{k!r}: latest acknowledged at {o} is missing"
        if last_of[k][0] == o:
            assert last_of[k][1] == v


def test_compaction_keeps_the_latest_record_per_key_in_offset_order(tmp_path):
    node = Node(tmp_path / "data", extra=FAST).start()
    try:
        create_topic(node.bootstrap, "configs", config=COMPACTED)
        p = Acked(node.bootstrap, "configs", **{"compression.type": "lz4"})
        for i in range(6000):
            p.produce(b"connector-%d" % (i % 12), b"v%d-" % i + b"x" * 64)
            if i % 500 == 499:
                p.flush()
        p.flush()
        wait_for("a cleaning pass that removed records",
                 lambda: stats_sum(node, "compacted_records_removed") > 3000)
        view = read_all(node.bootstrap, "configs")
        check_view(view, p)
        assert len(view) < 3000, f"{len(view)} of 6000 records remain"
        # kafka-python reads over the same gaps (passes may have cleaned
        # more meanwhile: the node goes on as segments become cleanable).
        view2, _ = read_all_kafka_python(node.bootstrap, "configs")
        check_view(view2, p)
        assert len(view2) <= len(view)
        # DescribeConfigs shows the compaction configs.
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        res = ConfigResource(ConfigResource.Type.TOPIC, "configs")
        configs = admin.describe_configs([res])[res].result(15)
        assert configs["cleanup.policy"].value == "compact"
        assert configs["min.cleanable.dirty.ratio"].value == "0.01"
        assert configs["delete.retention.ms"].value == "86400000"
        # After a restart the log reads the same, and appends go on.
        node.stop()
        node.start()
        check_view(read_all(node.bootstrap, "configs"), p)
        p2 = Acked(node.bootstrap, "configs")
        p2.produce(b"connector-0", b"after")
        p2.flush()
        assert min(p2.acked) >= view[-1][0] + 1
    finally:
        if node.proc.poll() is None:
            node.stop()


def test_tombstones_go_after_delete_retention(tmp_path):
    node = Node(tmp_path / "data", extra=FAST).start()
    try:
        create_topic(node.bootstrap, "deletes", config={
            **COMPACTED, "delete.retention.ms": "1000", "segment.ms": "100"})
        p = Acked(node.bootstrap, "deletes")
        for i in range(400):
            p.produce(b"k%d" % (i % 20), b"v%d" % i)
        p.flush()
        for k in range(0, 20, 2):
            p.produce(b"k%d" % k, None)
        p.flush()
        dropped = {b"k%d" % k for k in range(0, 20, 2)}
        n = [0]

        def more():
            # New records roll segments (segment.ms): only sealed ones are
            # cleaned.
            p.produce(b"filler", b"f%d" % n[0])
            n[0] += 1
            p.flush()

        # First the tombstones are there (they hide their keys' values).
        wait_for("a pass", lambda: stats_sum(node, "compactions") > 0, step=more)
        view = read_all(node.bootstrap, "deletes")
        assert any(v is None for _, _, v in view), "tombstones stay for delete.retention.ms"
        # Then, as more records roll segments, they go, and their keys
        # with them.

        def gone():
            v = read_all(node.bootstrap, "deletes")
            return not any(k in dropped for _, k, _ in v)
        wait_for("the tombstones to go", gone, step=more)
        check_view(read_all(node.bootstrap, "deletes"), p, dropped_keys=dropped)
    finally:
        if node.proc.poll() is None:
            node.stop()


def test_kill_during_compaction_loses_nothing(tmp_path):
    seed = int(os.environ.get("WEIR_CRASH_SEED", str(random.randrange(1 << 32))))
    print(f"WEIR_CRASH_SEED={seed}")
    rnd = random.Random(seed)
    data = tmp_path / "data"
    node = Node(data, extra=FAST)
    ports = (node.kafka_port, node.http_port)
    node.start()
    create_topic(node.bootstrap, "killed", config=COMPACTED)
    p = Acked(node.bootstrap, "killed")
    # Crash points first (a kill between two steps of a swap), then kills
    # at random moments while records arrive and passes run.
    points = ["compaction-cleaned", "compaction-committed", "compaction-replaced"]
    cycles = points + [None] * int(os.environ.get("WEIR_COMPACTION_KILLS", "6"))
    i = 0
    for point in cycles:
        reached_at_start = False
        if point:
            node.kill()
            node = Node(data, extra=FAST, env={"WEIR_CRASH_AT": point})
            node.kafka_port, node.http_port = ports
            try:
                node.start()
            except RuntimeError:
                # The kill before can land in the middle of a swap; the
                # node then finishes it while it opens the log, through
                # the same steps, and stops at the point before it serves.
                # That is the crash asked for.
                if not node.await_log(f"crash point {point} reached", 5):
                    raise
                reached_at_start = True
        stop = threading.Event()

        def produce():
            nonlocal i
            while not stop.is_set():
                p.produce(b"key-%d" % (i % 30), b"%d-" % i + b"y" * 200)
                i += 1
                if i % 50 == 0:
                    p.p.poll(0.01)
        if reached_at_start:
            # Nothing to produce to: the node stopped while it opened.
            assert node.proc.wait(30) != 0, f"{point} was reached but the node went on"
        else:
            t = threading.Thread(target=produce)
            t.start()
            if point:
                # The node aborts itself at the point.
                try:
                    node.proc.wait(60)
                finally:
                    stop.set()
                    t.join()
                assert node.proc.returncode != 0, f"{point} was never reached"
                assert any(point in line for line in node.log), "".join(node.log[-20:])
            else:
                time.sleep(rnd.uniform(0.3, 2.0))  # the random moment of the kill
                node.kill()
                stop.set()
                t.join()
        node = Node(data, extra=FAST)
        node.kafka_port, node.http_port = ports
        node.start()
        p.flush()
        check_view(read_all(node.bootstrap, "killed"), p)
    assert stats_sum(node, "compaction_errors") == 0
    node.stop()


def sql(node, text):
    req = urllib.request.Request(node.http + "/sql", data=text.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_keyed_tables_are_compacted_and_read_the_same(tmp_path):
    node = Node(tmp_path / "data", extra=FAST).start()
    try:
        sql(node, "CREATE TABLE prices (sym TEXT PRIMARY KEY, px DOUBLE) "
                  "WITH (internal_segment_bytes = 8192, min_cleanable_dirty_ratio = 0.01)")
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        res = ConfigResource(ConfigResource.Type.TOPIC, "prices")
        assert admin.describe_configs([res])[res].result(15)["cleanup.policy"].value == "compact"
        p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 5})
        latest = {}
        for i in range(5000):
            sym = "S%d" % (i % 25)
            latest[sym] = float(i)
            # Unkeyed records: a keyed table keys its rows by its columns.
            p.produce("prices", value=json.dumps({"sym": sym, "px": float(i)}))
            if i % 1000 == 999:
                p.flush()
        p.flush()
        wait_for("a pass", lambda: stats_sum(node, "compacted_records_removed") > 2000)
        want = [{"sym": s, "px": px} for s, px in sorted(latest.items())]
        assert sql(node, "SELECT sym, px FROM prices ORDER BY sym") == want
        node.stop()
        node.start()
        assert sql(node, "SELECT sym, px FROM prices ORDER BY sym") == want
    finally:
        if node.proc.poll() is None:
            node.stop()
