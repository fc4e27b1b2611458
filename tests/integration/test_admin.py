"""Topic administration through the admin clients."""
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from confluent_kafka.admin import ConfigResource as CConfigResource
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import InvalidTopicError, TopicAlreadyExistsError


def admin(node):
    return AdminClient({"bootstrap.servers": node.bootstrap})


def error_of(future):
    with pytest.raises(KafkaException) as e:
        future.result(10)
    return e.value.args[0]


def test_create_describe_grow_delete(node):
    a = admin(node)
    fs = a.create_topics([NewTopic("adm", num_partitions=2, replication_factor=1,
                                   config={"retention.ms": "3600000", "retention.bytes": "1048576",
                                           "max.message.bytes": "2000", "segment.bytes": "2097152"})])
    fs["adm"].result(10)
    md = a.list_topics(timeout=10)
    assert len(md.topics["adm"].partitions) == 2
    configs = list(a.describe_configs([CConfigResource("topic", "adm")]).values())[0].result(10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.bytes"].value == "1048576"
    assert configs["max.message.bytes"].value == "2000"
    assert configs["segment.bytes"].value == "2097152"
    assert configs["segment.ms"].is_default

    assert error_of(a.create_topics([NewTopic("adm", 1, 1)])["adm"]).code() == 36  # TOPIC_ALREADY_EXISTS
    assert error_of(a.create_topics([NewTopic("bad name!", 1, 1)])["bad name!"]).code() == 17
    assert error_of(a.create_topics([NewTopic("zero", 0, 1)])["zero"]).code() == 37
    assert error_of(a.create_topics([NewTopic("bad-config", 1, 1, config={"retention.ms": "soon"})])["bad-config"]).code() == 40

    # validate_only creates nothing.
    a.create_topics([NewTopic("dry", 1, 1)], validate_only=True)["dry"].result(10)
    assert "dry" not in a.list_topics(timeout=10).topics

    a.create_partitions([NewPartitions("adm", 5)])["adm"].result(10)
    assert len(a.list_topics(timeout=10).topics["adm"].partitions) == 5
    assert error_of(a.create_partitions([NewPartitions("adm", 3)])["adm"]).code() == 37
    p = Producer({"bootstrap.servers": node.bootstrap})
    reports = []
    p.produce("adm", value=b"x", partition=4, on_delivery=lambda e, m: reports.append((e, m.offset())))
    assert p.flush(10) == 0 and reports == [(None, 0)]

    a.delete_topics(["adm"])["adm"].result(10)
    assert "adm" not in a.list_topics(timeout=10).topics
    import os
    topics_dir = os.path.join(node.data_dir, "topics")
    assert not [d for d in os.listdir(topics_dir) if d.startswith("adm~")], "the topic's files are gone"
    assert error_of(a.delete_topics(["adm"])["adm"]).code() == 3
    # The name can be used again, empty.
    a.create_topics([NewTopic("adm", 1, 1)])["adm"].result(10)
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "x"})
    assert c.get_watermark_offsets(TopicPartition("adm", 0), timeout=10) == (0, 0)
    c.close()


def test_kafka_python_admin(node):
    a = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    a.create_topics([KNewTopic("kp-admin", 3, 1, topic_configs={"retention.ms": "1234"})])
    configs = a.describe_configs([ConfigResource("TOPIC", "kp-admin")])["topic"]["kp-admin"]
    assert configs["retention.ms"]["value"] == "1234"
    with pytest.raises(TopicAlreadyExistsError):
        a.create_topics([KNewTopic("kp-admin", 3, 1, topic_configs={"retention.ms": "1234"})])
    configs = a.describe_configs([ConfigResource("TOPIC", "kp-admin")])["topic"]["kp-admin"]
    assert configs["retention.ms"]["value"] == "1234"
    with pytest.raises(InvalidTopicError):
        a.create_topics([KNewTopic("x" * 300, 1, 1)])
    assert "kp-admin" in a.list_topics()
    cluster = a.describe_cluster()
    assert len(cluster["brokers"]) == 1
    a.delete_topics(["kp-admin"])
    assert "kp-admin" not in a.list_topics()
    a.close()


def test_incremental_alter_configs_take_effect(make_node):
    """Configs changed at run time apply to the partitions: a small
    segment size (Kafka's testing-only internal.segment.bytes: segment.bytes
    is at least 1 MiB) and retention.bytes make retention move the log start."""
    import time
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    n = make_node(extra=["--retention-check-ms", "200"])
    a = admin(n)
    a.create_topics([NewTopic("alt", 1, 1)])["alt"].result(10)

    def alter(*entries):
        res = CConfigResource("topic", "alt", incremental_configs=list(entries))
        a.incremental_alter_configs([res])[res].result(10)

    def configs():
        return list(a.describe_configs([CConfigResource("topic", "alt")]).values())[0].result(10)

    alter(ConfigEntry("internal.segment.bytes", "4096", incremental_operation=AlterConfigOpType.SET),
          ConfigEntry("retention.bytes", "8192", incremental_operation=AlterConfigOpType.SET),
          ConfigEntry("retention.ms", "1234", incremental_operation=AlterConfigOpType.SET))
    assert configs()["internal.segment.bytes"].value == "4096"
    alter(ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE))
    assert configs()["retention.ms"].is_default
    res = CConfigResource("topic", "alt", incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    assert error_of(a.incremental_alter_configs([res])[res]).code() == 40  # INVALID_CONFIG

    p = Producer({"bootstrap.servers": n.bootstrap, "linger.ms": 0})
    for i in range(200):
        p.produce("alt", value=b"x" * 500)
        p.flush(10)  # one batch per record: many small segments
    c = Consumer({"bootstrap.servers": n.bootstrap, "group.id": "alt"})
    deadline = time.time() + 20
    low, high = c.get_watermark_offsets(TopicPartition("alt", 0), timeout=10)
    while low == 0 and time.time() < deadline:
        time.sleep(0.1)  # retention runs every 200 ms on its own schedule
        low, high = c.get_watermark_offsets(TopicPartition("alt", 0), timeout=10)
    c.close()
    assert high == 200
    assert low > 0, "retention.bytes moved the log start"


def test_legacy_alter_configs_replace_a_topics_configs_whole(node):
    """AlterConfigs (key 33), which kafka-python, Sarama and many operators
    still send: what the request names is set and every other config of
    the topic goes back to its default, as Kafka replaces the resource's
    configs; a bad value or an unknown name refuses the whole change."""
    a = admin(node)
    a.create_topics([NewTopic("legacy", 1, 1, config={"retention.ms": "3600000",
                                                       "segment.bytes": "2097152"})])["legacy"].result(10)

    def configs():
        return list(a.describe_configs([CConfigResource("topic", "legacy")]).values())[0].result(10)

    def alter(**values):
        res = CConfigResource("topic", "legacy", set_config=values)
        return a.alter_configs([res])[res]

    alter(**{"retention.bytes": "1048576"}).result(10)
    now = configs()
    assert now["retention.bytes"].value == "1048576" and not now["retention.bytes"].is_default
    assert now["retention.ms"].is_default and now["segment.bytes"].is_default, \
        (now["retention.ms"], now["segment.bytes"])
    assert error_of(alter(**{"retention.ms": "soon"})).code() == 40  # INVALID_CONFIG
    assert error_of(alter(**{"no.such.config": "1"})).code() == 40
    assert configs()["retention.bytes"].value == "1048576", "a refused change changed nothing"
    # kafka-python, told to send AlterConfigs rather than the incremental call.
    kp = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    try:
        out = kp.alter_configs([ConfigResource("TOPIC", "legacy", configs={"retention.ms": "7200000"})],
                               incremental=False, raise_on_unknown=False)
    finally:
        kp.close()
    assert out == {"topic": {"legacy": "OK"}}, out
    now = configs()
    assert now["retention.ms"].value == "7200000" and not now["retention.ms"].is_default
    # Both clients sent AlterConfigs itself: librdkafka three times above,
    # kafka-python once.
    with node.urlopen(f"{node.http}/metrics") as r:
        served = [line for line in r.read().decode().splitlines()
                  if line.startswith('weir_request_duration_seconds_count{api="AlterConfigs"}')]
    assert served and int(float(served[0].split()[-1])) == 4, served


def test_cleanup_policy_compact_keeps_every_record(make_node):
    """Kafka Connect creates its internal topics with cleanup.policy=compact
    (and refuses to start otherwise). weir accepts the policy; not compacting
    yet, such a topic keeps every record: retention deletes nothing from it
    while a `delete` topic beside it loses its old segments."""
    import time
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    # One shard: one retention pass judges both topics together.
    n = make_node(cores=1, extra=["--retention-check-ms", "200"])
    a = admin(n)
    small = {"internal.segment.bytes": "4096", "retention.bytes": "8192", "retention.ms": "1"}
    a.create_topics([NewTopic("kept", 1, 1, config={"cleanup.policy": "compact", **small}),
                     NewTopic("aged", 1, 1, config=small)])["kept"].result(10)
    kp = KafkaAdminClient(bootstrap_servers=n.bootstrap)
    kp.create_topics([KNewTopic("connect-offsets", 1, 1, topic_configs={"cleanup.policy": "compact"})])
    policy = kp.describe_configs([ConfigResource("TOPIC", "connect-offsets")])["topic"]["connect-offsets"]
    assert policy["cleanup.policy"]["value"] == "compact"
    kp.close()
    configs = list(a.describe_configs([CConfigResource("topic", "kept")]).values())[0].result(10)
    assert configs["cleanup.policy"].value == "compact" and not configs["cleanup.policy"].is_default
    bad = a.create_topics([NewTopic("bad-policy", 1, 1, config={"cleanup.policy": "shred"})])["bad-policy"]
    assert error_of(bad).code() == 40  # INVALID_CONFIG
    unknown = a.create_topics([NewTopic("bad-name", 1, 1, config={"no.such.config": "x"})])["bad-name"]
    assert "Unknown topic config name: no.such.config" in error_of(unknown).str()

    p = Producer({"bootstrap.servers": n.bootstrap, "linger.ms": 0})
    for i in range(100):
        for t in ("kept", "aged"):
            p.produce(t, key=f"k{i % 10}", value=b"x" * 500)
        p.flush(10)  # one batch per record: many small segments
    # A compacted topic keeps the latest record per key: one without a key
    # is refused, as Kafka refuses it, and nothing is written.
    from confluent_kafka import KafkaError
    errors = []
    p.produce("kept", value=b"no key", on_delivery=lambda e, m: errors.append(e))
    assert p.flush(10) == 0
    assert [e.code() for e in errors] == [KafkaError.INVALID_RECORD], errors
    # The reason goes back in the produce response (v8+) and to the log.
    assert n.await_log("Compacted topic cannot accept message without key in topic partition kept-0")
    c = Consumer({"bootstrap.servers": n.bootstrap, "group.id": "policy"})

    def low(topic):
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]

    deadline = time.time() + 20
    while low("aged") == 0:
        assert time.time() < deadline, "retention never ran on the delete topic"
        time.sleep(0.1)  # retention runs every 200 ms on its own schedule
    assert low("kept") == 0, "retention deleted from a compact topic"
    assert c.get_watermark_offsets(TopicPartition("kept", 0), timeout=10)[1] == 100

    # compact,delete: retention applies again.
    res = CConfigResource("topic", "kept", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact,delete", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(10)
    while low("kept") == 0:
        assert time.time() < deadline + 20, "retention never ran under compact,delete"
        time.sleep(0.1)
    c.close()


def test_delete_records_moves_the_start_and_survives_restart(node):
    from confluent_kafka import Consumer, TopicPartition

    def produce_and_delete():
        a = admin(node)
        a.create_topics([NewTopic("dr", 2, 1)])["dr"].result(10)
        p = Producer({"bootstrap.servers": node.bootstrap})
        for i in range(20):
            p.produce("dr", value=b"%d" % i, partition=0)
        assert p.flush(10) == 0
        fs = a.delete_records([TopicPartition("dr", 0, 12)])
        assert list(fs.values())[0].result(10).low_watermark == 12
        too_far = a.delete_records([TopicPartition("dr", 0, 99)])
        assert error_of(list(too_far.values())[0]).code() == 1  # OFFSET_OUT_OF_RANGE

    produce_and_delete()
    node.restart()
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "dr", "enable.auto.commit": False})
    assert c.get_watermark_offsets(TopicPartition("dr", 0), timeout=10) == (12, 20)
    c.assign([TopicPartition("dr", 0, 12)])
    got = []
    while len(got) < 8:
        m = c.poll(5)
        assert m is not None and m.error() is None
        if m.offset() >= 12:  # a batch holding 12 may start earlier, as in Kafka
            got.append(int(m.value()))
    c.close()
    assert got == list(range(12, 20))
