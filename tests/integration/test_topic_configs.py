"""Topic configs that change what the node does, as Kafka's: compression.type
recompresses what producers send, and message.timestamp.before/after.max.ms
refuse records stamped too far from the node's clock. (Every config name
Kafka 4.1 has is accepted, checked and described: the Java test
TopicConfigsTest takes them from Kafka's own LogConfig.)"""
import time

from confluent_kafka import KafkaError, Producer
from kafka import KafkaAdminClient

from conftest import consume_all, create_topic


def stored_bytes(node, topic):
    """The partition's size on the node's disk, as DescribeLogDirs reports it."""
    kp = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    try:
        out = kp.describe_log_dirs(topic_partitions=[topic])
    finally:
        kp.close()
    sizes = [p["partition_size"]
             for b in out for d in b["log_dirs"] for t in d["topics"] if t["name"] == topic
             for p in t["partitions"]]
    assert len(sizes) == 1, out
    return sizes[0]


def produce(node, topic, values, **conf):
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5, **conf})
    failed = []
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda err, m: err and failed.append(err))
    assert p.flush(30) == 0
    assert failed == [], failed


def test_compression_type_recompresses_what_producers_send(node):
    """A topic's compression.type is what it stores, whatever the producer
    sent: zstd makes uncompressed batches small, `uncompressed` makes lz4
    batches large, `producer` keeps each as sent; every record reads back
    the same from each."""
    values = [(f"record {i} " + "the same words again and again " * 30).encode() for i in range(2000)]
    topics = {
        "as-sent-none": ({}, "none"),
        "to-zstd": ({"compression.type": "zstd", "compression.zstd.level": "10"}, "none"),
        "as-sent-lz4": ({}, "lz4"),
        "to-uncompressed": ({"compression.type": "uncompressed"}, "lz4"),
        "to-gzip": ({"compression.type": "gzip", "compression.gzip.level": "1"}, "snappy"),
    }
    for topic, (config, codec) in topics.items():
        create_topic(node.bootstrap, topic, config=config)
        produce(node, topic, values, **{"compression.type": codec})
    size = {t: stored_bytes(node, t) for t in topics}
    raw = sum(len(v) for v in values)
    assert size["as-sent-none"] > raw, size
    assert size["to-zstd"] < size["as-sent-none"] / 10, size
    assert size["as-sent-lz4"] < raw / 5, size
    assert size["to-uncompressed"] > raw, size
    assert size["to-gzip"] < raw / 5, size
    for topic in topics:
        got = [m.value() for m in consume_all(node.bootstrap, topic, 1)]
        assert got == values, topic


def test_timestamps_too_far_from_the_clock_are_refused(node):
    """message.timestamp.after.max.ms (Kafka 4.1's default: one hour) and
    before.max.ms refuse a CreateTime record with INVALID_TIMESTAMP; a
    LogAppendTime topic stamps records itself and takes any."""
    create_topic(node.bootstrap, "ts-default")
    create_topic(node.bootstrap, "ts-before", config={"message.timestamp.before.max.ms": "60000"})
    create_topic(node.bootstrap, "ts-append", config={"message.timestamp.type": "LogAppendTime"})
    now = int(time.time() * 1000)
    hour = 3600 * 1000

    def send(topic, ts):
        p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0,
                      "message.send.max.retries": 0})
        out = []
        p.produce(topic, value=b"v", timestamp=ts, on_delivery=lambda err, m: out.append(err))
        assert p.flush(30) == 0
        return out[0]

    assert send("ts-default", now + 2 * hour).code() == KafkaError.INVALID_TIMESTAMP
    assert send("ts-default", now + hour // 2) is None
    assert send("ts-default", now - 1000 * hour) is None, "no before bound by default"
    assert send("ts-before", now - 2 * hour).code() == KafkaError.INVALID_TIMESTAMP
    assert send("ts-before", now - 1000) is None
    assert send("ts-append", now + 2 * hour) is None
    assert send("ts-append", now - 1000 * hour) is None
    got = consume_all(node.bootstrap, "ts-default", 1, expected=2)
    assert [m.timestamp()[1] for m in got] == [now + hour // 2, now - 1000 * hour]
    stamped = consume_all(node.bootstrap, "ts-append", 1, expected=2)
    assert all(abs(m.timestamp()[1] - now) < hour for m in stamped), "stamped by the node"
