"""Damage at rest: a flipped bit in a closed segment or its index is found
by its CRC-32C, never served as data, logged and counted in /metrics; what
lies before and after the damage is still served."""
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import create_topic


def partition_dir(node, topic, partition):
    from pathlib import Path
    [d] = [p for p in Path(node.data_dir, "topics").glob(f"{topic}*/{partition}") if p.is_dir()]
    return d


def flip_bit(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ 0x10]))


def read_from(node, topic, offset, until):
    """Records of partition 0 from `offset`, until `until(records)` holds
    (or 20 s pass)."""
    import time
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "damage",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, offset)])
    got = []
    deadline = time.time() + 20
    while not until(got) and time.time() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m)
    c.close()
    return got


def corrupt_count(node):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
    with urllib.request.urlopen(node.http + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "weir_partition_corrupt_batches_total" and s.labels["topic"] == "rot")


def stopped_node_with_segments(make_node, data_dir, records):
    """A node, stopped, whose topic `rot` holds `records` records in
    batches of 10 and segments of 16 KiB."""
    n = make_node(data_dir=data_dir)
    create_topic(n.bootstrap, "rot", partitions=1, config={"internal.segment.bytes": "16384"})
    p = Producer({"bootstrap.servers": n.bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    for i in range(records):
        p.produce("rot", value=b"value-%06d" % i + b"x" * 90, partition=0)
        if i % 10 == 9:
            p.flush(10)
    assert p.flush(30) == 0
    n.stop()
    return n


def test_a_flipped_bit_in_a_closed_segment_is_refused_not_served(make_node, tmp_path):
    n = stopped_node_with_segments(make_node, tmp_path / "rot", 2000)
    segments = sorted(partition_dir(n, "rot", 0).glob("*.log"))
    assert len(segments) >= 4, segments
    damaged = int(segments[2].stem)
    after = int(segments[3].stem)
    flip_bit(segments[2], 40)  # in the first batch's CRC-covered header
    n.start()

    # Everything before the damage is served; the reader goes on asking
    # until the node has refused the damaged batch (it logs and counts it),
    # and never gets a record of it.
    got = read_from(n, "rot", 0, lambda g: len(g) >= damaged and corrupt_count(n) == 1)
    assert [m.offset() for m in got] == list(range(damaged))
    assert n.await_log("fails its CRC-32C check")
    assert corrupt_count(n) == 1
    # A reader past the damaged batch gets the rest, byte for byte.
    rest = read_from(n, "rot", after, lambda g: len(g) >= 2000 - after)
    assert [(m.offset(), m.value()[:12]) for m in rest] == [
        (o, b"value-%06d" % o) for o in range(after, 2000)]
    # The node serves on: a new record is appended and read.
    p = Producer({"bootstrap.servers": n.bootstrap})
    p.produce("rot", value=b"after the damage", partition=0)
    assert p.flush(10) == 0
    assert read_from(n, "rot", 2000, lambda g: len(g) >= 1)[0].value() == b"after the damage"


def test_a_damaged_index_is_rebuilt(make_node, tmp_path):
    n = stopped_node_with_segments(make_node, tmp_path / "idx", 1000)
    indexes = sorted(partition_dir(n, "rot", 0).glob("*.index"))
    assert len(indexes) >= 2, indexes
    for idx in indexes:
        with open(idx, "r+b") as f:
            f.seek(16)
            f.write(b"\0" * 16)
    n.start()
    assert n.await_log("rebuilt the indexes")
    got = read_from(n, "rot", 0, lambda g: len(g) >= 1000)
    assert [(m.offset(), m.value()[:12]) for m in got] == [(o, b"value-%06d" % o) for o in range(1000)]
    assert corrupt_count(n) == 0


def test_a_damaged_catalog_gives_way_to_the_one_before_its_last_change(make_node, tmp_path):
    from pathlib import Path
    from confluent_kafka.admin import AdminClient

    from conftest import consume_all
    n = make_node(data_dir=tmp_path / "cat")
    create_topic(n.bootstrap, "kept", partitions=2)
    p = Producer({"bootstrap.servers": n.bootstrap})
    for i in range(10):
        p.produce("kept", value=b"%d" % i, partition=i % 2)
    assert p.flush(10) == 0
    create_topic(n.bootstrap, "last", partitions=1)
    n.stop()
    catalog = Path(n.data_dir, "catalog.json")
    text = catalog.read_bytes()
    flip_bit(catalog, text.index(b'"last"') + 2)
    n.start()
    assert n.await_log("catalog.json is damaged: its CRC-32C does not match")
    topics = AdminClient({"bootstrap.servers": n.bootstrap}).list_topics(timeout=10).topics
    assert "kept" in topics and "last" not in topics
    assert sorted(int(m.value()) for m in consume_all(n.bootstrap, "kept", 2, expected=10)) == list(range(10))
    assert Path(n.data_dir, "catalog.json.damaged").read_bytes() != text
