"""GET /metrics: Prometheus' own parser (prometheus_client's OpenMetrics
parser) reads it, and what it says follows what clients do: records in,
requests by API, connections, and a group's lag falling as it consumes."""
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import create_topic


def scrape(node):
    with urllib.request.urlopen(node.http + "/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("application/openmetrics-text")
        text = r.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        samples.setdefault(family.name, [])
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def total(samples, name, **labels):
    return sum(v for l, v in samples.get(name, []) if all(l.get(k) == x for k, x in labels.items()))


def test_metrics_follow_produce_fetch_and_lag(node):
    create_topic(node.bootstrap, "metered", partitions=2)
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(1000):
        p.produce("metered", key=b"k%d" % i, value=b"v" * 100, partition=i % 2)
    assert p.flush(30) == 0

    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "lagger",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition("metered", 0, 0), TopicPartition("metered", 1, 0)])
    got = []
    while len(got) < 300:
        m = c.poll(5)
        assert m is not None and m.error() is None
        got.append(m)
    c.commit(asynchronous=False)
    # Only partitions with a commit have an offset (and a lag).
    mine = [t.offset for t in c.committed(
        [TopicPartition("metered", 0), TopicPartition("metered", 1)], timeout=10) if t.offset >= 0]
    committed = sum(mine)
    assert committed == 300

    s = scrape(node)
    assert total(s, "weir_partition_high_watermark", topic="metered") == 1000
    assert total(s, "weir_partition_log_end_offset", topic="metered") == 1000
    assert total(s, "weir_partition_in_records_total", topic="metered") == 1000
    assert total(s, "weir_partition_in_bytes_total", topic="metered") > 100_000
    assert total(s, "weir_partition_out_bytes_total", topic="metered") > 0
    assert total(s, "weir_partition_log_size_bytes", topic="metered") > 100_000
    assert total(s, "weir_group_committed_offset", group="lagger") == committed
    assert total(s, "weir_group_lag", group="lagger") == 500 * len(mine) - committed
    assert total(s, "weir_connections_open") >= 1
    assert total(s, "weir_data_dir_free_bytes") > 0
    assert total(s, "weir_request_duration_seconds_count", api="Produce") >= 1
    assert total(s, "weir_request_duration_seconds_count", api="Fetch") >= 1
    assert total(s, "weir_produce_duration_seconds_count") >= 1
    # Buckets are cumulative and end at +Inf with the count.
    produce_buckets = [(l["le"], v) for l, v in s["weir_request_duration_seconds_bucket"]
                       if l["api"] == "Produce"]
    assert produce_buckets[-1] == ("+Inf", total(s, "weir_request_duration_seconds_count", api="Produce"))
    values = [v for _, v in produce_buckets]
    assert values == sorted(values)

    # The rest consumed and committed: the lag falls to 0.
    while len(got) < 1000:
        m = c.poll(5)
        assert m is not None and m.error() is None
        got.append(m)
    c.commit(asynchronous=False)
    s = scrape(node)
    assert total(s, "weir_group_committed_offset", group="lagger") == 1000
    assert total(s, "weir_group_lag", group="lagger") == 0
    # Each record was delivered once: the records read are the records.
    assert total(s, "weir_partition_out_records_total", topic="metered") == 1000
    c.close()

    # Errors of any API are counted by their Kafka name: creating the topic
    # again is CreateTopics' TOPIC_ALREADY_EXISTS.
    before = total(s, "weir_errors_total", api="CreateTopics", error="TopicAlreadyExists")
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    fs = admin.create_topics([NewTopic("metered", num_partitions=2)])
    with pytest.raises(KafkaException) as refused:
        fs["metered"].result(10)
    assert refused.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    s = scrape(node)
    assert total(s, "weir_errors_total", api="CreateTopics", error="TopicAlreadyExists") == before + 1

    # A fetch past the end is answered OFFSET_OUT_OF_RANGE: counted by API
    # and error. A consumer at the end long-polls: its waits expire.
    late = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "late",
                     "auto.offset.reset": "error", "fetch.wait.max.ms": 100})
    late.assign([TopicPartition("metered", 0, 5000), TopicPartition("metered", 1, 500)])
    deadline = time.time() + 30
    while time.time() < deadline:
        late.poll(0.2)
        s = scrape(node)
        if (total(s, "weir_errors_total", api="Fetch", error="OffsetOutOfRange") >= 1
                and total(s, "weir_fetch_expiries_total") >= 1):
            break
    late.close()
    assert total(s, "weir_errors_total", api="Fetch", error="OffsetOutOfRange") >= 1
    assert total(s, "weir_fetch_waits_total") >= total(s, "weir_fetch_expiries_total") >= 1


def test_the_dashboard_asks_only_for_metrics_the_node_serves(node):
    """deploy/grafana-dashboard.json's queries name metrics /metrics has."""
    import json
    import os
    import re
    from conftest import ROOT
    create_topic(node.bootstrap, "dash")
    p = Producer({"bootstrap.servers": node.bootstrap})
    p.produce("dash", b"x")
    assert p.flush(30) == 0
    served = set(scrape(node))
    with open(os.path.join(ROOT, "deploy", "grafana-dashboard.json")) as f:
        dashboard = json.load(f)
    asked = {name for panel in dashboard["panels"] for t in panel["targets"]
             for name in re.findall(r"weir_[a-z_]+", t["expr"])}
    assert asked, "the dashboard queries weir's metrics"
    assert asked <= served, f"not served: {sorted(asked - served)}"
