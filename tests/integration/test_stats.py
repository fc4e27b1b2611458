"""The node's latency histograms: GET /stats (per shard), GET /stats/latency
(all shards merged) and POST /stats/reset, checked against what a real
client produced and measured."""
import json
import time
import urllib.request

from confluent_kafka import Producer

from conftest import create_topic


def get(node, path):
    with urllib.request.urlopen(node.http + path, timeout=10) as r:
        return json.loads(r.read())


def post(node, path):
    req = urllib.request.Request(node.http + path, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def wait_for_end(node, topic, partition, end, timeout=30):
    """Whether the partition's log end reaches `end` within `timeout` s."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "watermarks"})
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1] >= end:
                return True
            time.sleep(0.05)
        return False
    finally:
        c.close()


def ordered(p):
    return p["p50"] <= p["p90"] <= p["p99"] <= p["p999"] <= p["max"]


def test_produce_and_flush_times_are_counted_merged_and_reset(node):
    create_topic(node.bootstrap, "timed", partitions=2)
    post(node, "/stats/reset")
    assert get(node, "/stats/latency")["produce"]["count"] == 0

    # One acks=all request at a time: each is one produce request, answered
    # only after a flush that covers it, and timed by the client around it.
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 0})
    client_us = []
    for i in range(40):
        start = time.perf_counter()
        p.produce("timed", value=b"v%d" % i, partition=i % 2)
        assert p.flush(10) == 0
        client_us.append((time.perf_counter() - start) * 1e6)

    merged = get(node, "/stats/latency")
    produce, write, wait = merged["produce"], merged["flush_write"], merged["flush_wait"]
    assert produce["count"] == 40, merged
    # Every acked request needed a flush of its own (the next one waited
    # for the answer): at least 40, each with its durable write and its
    # wait for an earlier flush (none here: one at a time).
    assert write["count"] >= 40 and wait["count"] == write["count"], merged
    for h in (produce, write, wait):
        assert h["max"] >= 1 and ordered(h), h
    # The node's time is inside each client round trip (histograms keep 3
    # significant digits, so allow them 1% above).
    client_us.sort()
    assert produce["p50"] <= client_us[len(client_us) // 2] * 1.01, (produce, client_us)
    assert produce["max"] <= client_us[-1] * 1.01, (produce, client_us)
    # The per-shard histograms add up to the merged ones (a flusher may
    # still end between two reads: counts only grow, so the sum lies
    # between a merged read before and one after).
    shards = node.stats()
    later = get(node, "/stats/latency")
    assert sum(s["latency_us"]["produce"]["count"] for s in shards) == 40
    per_shard = sum(s["latency_us"]["flush_write"]["count"] for s in shards)
    assert write["count"] <= per_shard <= later["flush_write"]["count"]

    # acks=0 requests get no answer, so they are not timed as produce
    # requests (their appends are still flushed).
    p0 = Producer({"bootstrap.servers": node.bootstrap, "acks": 0, "linger.ms": 0})
    for i in range(10):
        p0.produce("timed", value=b"fire-and-forget", partition=0)
        p0.flush(10)
    # The client is done once they are sent; the node, once partition 0
    # holds them (20 acknowledged records and these 10).
    assert wait_for_end(node, "timed", 0, 30), "the acks=0 records were not all appended"
    assert get(node, "/stats/latency")["produce"]["count"] == 40

    # A reset empties the histograms of every shard, and only them.
    requests_before = sum(s["partition_appends"] for s in node.stats())
    assert requests_before == 50
    assert post(node, "/stats/reset") == {"reset": "latency_us"}
    after = get(node, "/stats/latency")
    assert after["produce"]["count"] == 0, after
    # The acks=0 records' flushes run on their own: those still in flight
    # (at most two per partition) may end after the reset.
    assert after["flush_write"]["count"] <= 4, after
    shards = node.stats()
    assert all(s["latency_us"]["produce"]["count"] == 0 for s in shards)
    assert sum(s["partition_appends"] for s in shards) == requests_before
