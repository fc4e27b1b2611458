"""Produce and fetch with real clients: dense offsets, keys, headers, codecs,
watermarks, timestamps, long polling."""
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP

from conftest import consume_all, create_topic


def produce_confluent(bootstrap, topic, records, **conf):
    """Produces (key, value, headers[, partition]) tuples; returns delivery reports."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    reports = []

    def cb(err, msg):
        reports.append((err, msg))

    for r in records:
        key, value, headers = r[:3]
        kwargs = {"partition": r[3]} if len(r) > 3 else {}
        while True:
            try:
                p.produce(topic, key=key, value=value, headers=headers, on_delivery=cb, **kwargs)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(60) == 0
    return reports


def test_keyed_records_with_headers_have_dense_offsets(node):
    create_topic(node.bootstrap, "keyed", partitions=4)
    n = 20_000
    records = [(f"k{i}".encode(), f"value-{i}".encode(), [("i", str(i).encode())]) for i in range(n)]
    reports = produce_confluent(node.bootstrap, "keyed", records)
    assert len(reports) == n
    assert all(err is None for err, _ in reports)
    by_partition = {}
    sent = {}
    for _, m in reports:
        by_partition.setdefault(m.partition(), []).append(m.offset())
        sent[(m.partition(), m.offset())] = (m.key(), m.value())
    assert sorted(by_partition) == [0, 1, 2, 3]
    for p, offsets in by_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {p} offsets are not dense"

    got = consume_all(node.bootstrap, "keyed", 4, n)
    assert len(got) == n
    for m in got:
        key, value = sent[(m.partition(), m.offset())]
        assert (m.key(), m.value()) == (key, value)
        i = value.decode().split("-")[1]
        assert m.headers() == [("i", i.encode())]

    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "w"})
    for p, offsets in by_partition.items():
        assert c.get_watermark_offsets(TopicPartition("keyed", p), timeout=10) == (0, len(offsets))
    c.close()
    # Both shards owned and appended partitions.
    stats = node.stats()
    assert len(stats) == 2
    assert all(s["partitions"] > 0 and s["partition_appends"] > 0 for s in stats), stats


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_between_both_clients(node, codec):
    topic = f"codec-{codec}"
    create_topic(node.bootstrap, topic, partitions=2)
    values = [f"{codec}-{i}-".encode() * 20 for i in range(500)]
    reports = produce_confluent(node.bootstrap, topic, [(None, v, None) for v in values],
                                **{"compression.type": codec})
    assert all(err is None for err, _ in reports)
    # kafka-python's defaults: idempotent, acks=all.
    kp = KafkaProducer(bootstrap_servers=node.bootstrap, compression_type=codec)
    futures = [kp.send(topic, value=v) for v in values]
    kp.flush()
    metas = [f.get(30) for f in futures]
    kp.close()
    all_offsets = sorted([(m.partition(), m.offset()) for _, m in reports] + [(m.partition, m.offset) for m in metas])
    assert len(set(all_offsets)) == 1000
    kc = KafkaConsumer(bootstrap_servers=node.bootstrap, group_id=None, auto_offset_reset="earliest",
                       consumer_timeout_ms=5000)
    kc.assign([KTP(topic, 0), KTP(topic, 1)])
    got = sorted(m.value for m in kc)
    kc.close()
    assert got == sorted(values * 2)
    confluent_got = consume_all(node.bootstrap, topic, 2, 1000)
    assert sorted(m.value() for m in confluent_got) == sorted(values * 2)


def test_watermarks_and_offsets_for_times(node):
    create_topic(node.bootstrap, "times", partitions=1)
    base = int(time.time() * 1000) - 100_000
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 50})
    for i in range(100):
        p.produce("times", value=b"x%d" % i, timestamp=base + i * 10)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "t"})
    assert c.get_watermark_offsets(TopicPartition("times", 0), timeout=10) == (0, 100)
    found = c.offsets_for_times([TopicPartition("times", 0, base + 505)], timeout=10)
    assert found[0].offset == 51
    found = c.offsets_for_times([TopicPartition("times", 0, base)], timeout=10)
    assert found[0].offset == 0
    # Newer than everything: the end (-1 from the node, the client's "latest").
    found = c.offsets_for_times([TopicPartition("times", 0, base + 10_000_000)], timeout=10)
    assert found[0].offset in (-1, 100)
    c.close()
    kc = KafkaConsumer(bootstrap_servers=node.bootstrap, group_id=None)
    tp = KTP("times", 0)
    assert kc.beginning_offsets([tp]) == {tp: 0}
    assert kc.end_offsets([tp]) == {tp: 100}
    assert kc.offsets_for_times({tp: base + 995})[tp] is None
    assert kc.offsets_for_times({tp: base + 990})[tp].offset == 99
    kc.close()


def test_log_append_time_topic_stamps_records_on_arrival(node):
    """message.timestamp.type=LogAppendTime: the node stamps each batch with
    the time it appends it, whatever the producer said; both clients read
    that time and its type, and the delivery report carries it."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import ConfigResource as CConfigResource
    create_topic(node.bootstrap, "stamped", config={"message.timestamp.type": "LogAppendTime"})
    a = AdminClient({"bootstrap.servers": node.bootstrap})
    configs = list(a.describe_configs([CConfigResource("topic", "stamped")]).values())[0].result(10)
    assert configs["message.timestamp.type"].value == "LogAppendTime"
    long_ago = 1_000_000  # 1970: what the producer claims
    before = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5})
    reports = []
    for i in range(20):
        p.produce("stamped", key=b"k", value=b"v%d" % i, timestamp=long_ago,
                  on_delivery=lambda err, m: reports.append((err, m)))
    assert p.flush(30) == 0
    after = int(time.time() * 1000)
    assert all(err is None for err, _ in reports)
    for _, m in reports:
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after, (kind, ts)
    got = consume_all(node.bootstrap, "stamped", 1, expected=20)
    for m in got:
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after, (kind, ts)
    kc = KafkaConsumer("stamped", bootstrap_servers=node.bootstrap, auto_offset_reset="earliest",
                       consumer_timeout_ms=10_000)
    seen = []
    for r in kc:
        seen.append((r.timestamp_type, r.timestamp))
        if len(seen) == 20:
            break
    kc.close()
    assert len(seen) == 20 and all(t == 1 and before <= ts <= after for t, ts in seen), seen
    # Offsets by time follow the append time, not the producer's.
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "stamped"})
    assert c.offsets_for_times([TopicPartition("stamped", 0, long_ago)], timeout=10)[0].offset == 0
    c.close()


def test_a_fetch_asking_for_everything_gets_the_nodes_cap(make_node):
    """A consumer that asks for 2 GiB per partition is served in responses
    of at most --fetch-max-bytes (beyond the first batch), and reads all."""
    n = make_node(extra=["--fetch-max-bytes", "65536"])
    create_topic(n.bootstrap, "big-ask", partitions=2)
    p = Producer({"bootstrap.servers": n.bootstrap, "linger.ms": 5})
    for i in range(2000):
        p.produce("big-ask", value=b"%04d" % i + b"x" * 1020, partition=i % 2)
    assert p.flush(30) == 0
    kc = KafkaConsumer(bootstrap_servers=n.bootstrap, group_id=None, auto_offset_reset="earliest",
                       fetch_max_bytes=2**31 - 1, max_partition_fetch_bytes=2**31 - 1)
    kc.assign([KTP("big-ask", 0), KTP("big-ask", 1)])
    got = {0: [], 1: []}
    deadline = time.time() + 30
    while len(got[0]) + len(got[1]) < 2000:
        assert time.time() < deadline, f"only {len(got[0]) + len(got[1])} of 2000 arrived"
        for tp, records in kc.poll(timeout_ms=500).items():
            got[tp.partition].extend(int(r.value[:4]) for r in records)
    kc.close()
    assert got[0] == list(range(0, 2000, 2)) and got[1] == list(range(1, 2000, 2))


def test_waiting_consumer_is_woken_by_a_new_record(node):
    """A consumer parked in a long fetch (20 s max wait) gets a new record
    as soon as it is acknowledged, not when its fetch times out."""
    create_topic(node.bootstrap, "wake", partitions=1)
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "wake",
                  "fetch.wait.max.ms": 20000, "enable.auto.commit": False})
    # The topic is empty: fetching from 0 parks until a record arrives.
    c.assign([TopicPartition("wake", 0, 0)])
    # Wait until the node holds the consumer's fetch (its shard counted it).
    deadline = time.time() + 10
    while sum(s["fetch_parts"] for s in node.stats()) == 0 and time.time() < deadline:
        assert c.poll(0.05) is None
    before = node.stats()
    assert sum(s["fetch_parts"] for s in before) > 0
    received = {}

    def consume():
        deadline = time.time() + 19
        while time.time() < deadline:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                received["at"] = time.monotonic()
                return

    t = threading.Thread(target=consume)
    t.start()
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0, "acks": "all"})
    acked = {}
    p.produce("wake", value=b"ping", on_delivery=lambda e, m: acked.setdefault("at", time.monotonic()))
    assert p.flush(10) == 0
    t.join(25)
    assert "at" in received, "the waiting consumer never received the record"
    latency_ms = (received["at"] - acked["at"]) * 1000
    print(f"ack-to-receipt: {latency_ms:.2f} ms")
    # Far below the 20 s the fetch was allowed to wait: it was woken.
    assert latency_ms < 10_000
    # Answered, the consumer parks its next fetch, and the node counts it
    # (the count is read as that happens, so wait for it while polling).
    deadline = time.time() + 10
    while sum(s["fetch_parts"] for s in node.stats()) <= sum(s["fetch_parts"] for s in before):
        assert time.time() < deadline, "the consumer's next fetch was never counted"
        assert c.poll(0.05) is None
    c.close()


def test_produce_to_unknown_topic_is_refused_and_creates_nothing(node):
    p = Producer({"bootstrap.servers": node.bootstrap, "message.timeout.ms": 3000})
    errors = []
    p.produce("no-such-topic", value=b"x", on_delivery=lambda e, m: errors.append(e))
    p.flush(20)
    assert len(errors) == 1 and errors[0] is not None
    # librdkafka names it unknown topic, or times the message out waiting for it.
    assert errors[0].code() in (3, -188, -192)
    from confluent_kafka.admin import AdminClient
    topics = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=10).topics
    assert "no-such-topic" not in topics


def test_auto_create_when_enabled(make_node):
    n = make_node(extra=["--auto-create-topics", "--default-partitions", "3"])
    reports = produce_confluent(n.bootstrap, "auto-made", [(None, b"v", None)])
    assert reports[0][0] is None
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": n.bootstrap}).list_topics(timeout=10)
    assert len(md.topics["auto-made"].partitions) == 3
