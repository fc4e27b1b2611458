"""A keyed table's rows are snapshotted (rkyv files `keyed-rows-*.rkyv` in
each partition's directory: a full snapshot and deltas) when a segment rolls
or enough records arrive, and on a clean stop; a restart maps the snapshots
and reads only the log past them. Rows read after a kill -9 or a clean stop
are the rows read before; a damaged snapshot ends the chain and the log is
read from before it, with the same rows.
"""
import json
import random
import urllib.request

from confluent_kafka import Producer

from conftest import Node

# The node looks for partitions due a snapshot every 100 ms.
FAST = ["--compaction-check-ms", "100"]


def sql(node, text):
    req = urllib.request.Request(node.http + "/sql", data=text.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


class Table:
    """Writes rows and deletions into a keyed table with librdkafka's
    default partitioner (so keys land outside their home partition too)
    and remembers what it should hold."""

    def __init__(self, node, name):
        self.name = name
        # Batches of at most 4 KiB: the 16 KiB segments roll (which makes a
        # snapshot due) however the client batches under load; one batch
        # of a whole partition's records would never roll one.
        self.p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 5,
                           "batch.size": 4096})
        self.want = {}

    def write(self, rnd, n, keys):
        for _ in range(n):
            k = rnd.randrange(keys)
            key = json.dumps({"id": k})
            if rnd.random() < 0.1:
                self.p.produce(self.name, key=key, value=None)
                self.want.pop(k, None)
            else:
                v = rnd.randrange(1 << 30)
                self.p.produce(self.name, key=key, value=json.dumps({"id": k, "v": v}))
                self.want[k] = v
        assert self.p.flush(30) == 0

    def rows(self):
        return [{"id": k, "v": v} for k, v in sorted(self.want.items())]

    def read(self, node):
        return sql(node, f"SELECT id, v FROM {self.name} ORDER BY id")


def test_rows_come_back_from_the_snapshot_and_the_tail_after_kill_and_stop(tmp_path):
    rnd = random.Random(7)
    node = Node(tmp_path / "data", extra=FAST).start()
    sql(node, "CREATE TABLE kv (id BIGINT PRIMARY KEY, v BIGINT) "
              "WITH (partitions = 3, internal_segment_bytes = 16384)")
    t = Table(node, "kv")
    t.write(rnd, 6000, 500)
    assert node.await_log("kv-0: keyed rows snapshotted", timeout=30), "".join(node.log[-20:])
    # Writes past the snapshot: the tail a restart reads.
    t.write(rnd, 300, 700)
    assert t.read(node) == t.rows()
    node.kill()
    node.start()
    assert t.read(node) == t.rows()
    assert node.await_log("snapshot file(s) up to offset", timeout=5)
    # A clean stop snapshots what was appended since, so the next start
    # reads no tail at all.
    t.write(rnd, 200, 700)
    node.stop()
    assert any("keyed rows snapshotted" in line for line in node.log[-40:])
    node.start()
    assert t.read(node) == t.rows()
    node.stop()


def test_a_damaged_snapshot_is_ignored_and_the_log_replayed(tmp_path):
    rnd = random.Random(11)
    node = Node(tmp_path / "data", extra=FAST).start()
    sql(node, "CREATE TABLE kv (id BIGINT PRIMARY KEY, v BIGINT)")
    t = Table(node, "kv")
    t.write(rnd, 2000, 300)
    assert t.read(node) == t.rows()
    node.stop()
    files = sorted((tmp_path / "data" / "topics").glob("kv~*/0/keyed-rows-*.rkyv"))
    assert files, "no snapshot after a clean stop"
    for snapshot in files:
        body = bytearray(snapshot.read_bytes())
        body[len(body) // 3] ^= 0x40
        snapshot.write_bytes(bytes(body))
    node.start()
    assert t.read(node) == t.rows()
    assert node.await_log("fails its checksum; reading the log from before it", timeout=5)
    node.stop()
