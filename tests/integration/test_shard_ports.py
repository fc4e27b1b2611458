"""`--shard-ports BASE`: every shard is a broker of its own on port BASE+i,
leading the partitions and coordinating the groups it owns, so real clients
send each request straight to the core that serves it."""
import re
import socket

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient

from conftest import Node, consume_all, create_topic
from rawkafka import (connect, metadata_v0_brokers, parse_produce_v3_response, produce_v3, read_frame,
                      record_batch, request)


def free_port_range(n, avoid=()):
    """A base port with n free ports after it (each checked by binding),
    none of them in `avoid`. Bases are drawn at random from the ephemeral
    range: asking the kernel for port 0 again and again may hand back the
    same port (one just freed), and a loop waiting for another would never
    end."""
    import random
    for _ in range(200):
        base = random.randint(20000, 60000 - n)
        if any(p in avoid for p in range(base, base + n)):
            continue
        socks = []
        try:
            for p in range(base, base + n):
                t = socket.socket()
                socks.append(t)
                t.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise RuntimeError("no free port range")


def hops(node):
    return sum(s["hops_sent"] for s in node.stats())


def leaders(bootstrap, topic):
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=15)
    return md, {p: m.leader for p, m in md.topics[topic].partitions.items()}


def test_each_shard_is_a_broker_and_clients_need_no_hop(make_node):
    base = free_port_range(2)
    node = make_node(cores=2, extra=["--shard-ports", str(base)])
    create_topic(node.bootstrap, "spread", partitions=4)
    md, lead = leaders(node.bootstrap, "spread")
    assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {
        0: ("127.0.0.1", base), 1: ("127.0.0.1", base + 1)}
    # Partitions are spread over both shards, and each shard leads exactly
    # the partitions it owns (its /stats count).
    by_shard = {s["shard"]: s["partitions"] for s in node.stats()}
    assert sorted(lead.values()).count(0) == by_shard[0] > 0
    assert sorted(lead.values()).count(1) == by_shard[1] > 0

    before = hops(node)
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 5})
    delivered = []
    for i in range(200):
        p.produce("spread", key=f"k{i}", value=f"v{i}".encode(), partition=i % 4,
                  on_delivery=lambda err, m: delivered.append((err, m.partition())))
    assert p.flush(30) == 0
    assert all(err is None for err, _ in delivered) and len(delivered) == 200

    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "spread-readers",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["spread"])
    got = []
    while len(got) < 200:
        m = c.poll(30)
        assert m is not None, f"only {len(got)} of 200 records arrived"
        assert m.error() is None, m.error()
        got.append(m.value().decode())
    c.commit(asynchronous=False)
    c.close()
    assert sorted(got) == sorted(f"v{i}" for i in range(200))
    # Produce, fetch, list offsets and the group's join, sync, heartbeats
    # and commits all went to the shard that serves them.
    assert hops(node) == before
    served = [s["partition_appends"] for s in node.stats()]
    assert all(n > 0 for n in served), served

    # The committed offsets are there for the group (read on its coordinator).
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("spread-readers")])
    offsets = {tp.partition: tp.offset for tp in res["spread-readers"].result(15).topic_partitions}
    assert offsets == {0: 50, 1: 50, 2: 50, 3: 50}


def test_a_request_sent_to_another_shard_is_still_served(make_node):
    base = free_port_range(2)
    node = make_node(cores=2, extra=["--shard-ports", str(base)])
    create_topic(node.bootstrap, "elsewhere", partitions=2)
    _, lead = leaders(node.bootstrap, "elsewhere")
    # Partition 0's records sent to the port of the shard that does not own it.
    wrong = base + (1 - lead[0])
    before = hops(node)
    sock = connect(f"127.0.0.1:{wrong}")
    sock.sendall(request(0, 3, produce_v3("elsewhere", 0, record_batch([b"a", b"b"]))))
    _, parts = parse_produce_v3_response(read_frame(sock))
    sock.close()
    assert parts == [("elsewhere", 0, 0, 0)]
    assert hops(node) == before + 1
    assert [m.value() for m in consume_all(node.bootstrap, "elsewhere", 2, expected=2)] == [b"a", b"b"]


def test_restart_with_other_cores_moves_leaders_and_keeps_records(make_node, tmp_path):
    base = free_port_range(2)
    node = make_node(cores=2, extra=["--shard-ports", str(base)], data_dir=tmp_path / "d")
    create_topic(node.bootstrap, "moved", partitions=3)
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
    for i in range(30):
        p.produce("moved", value=str(i).encode(), partition=i % 3)
    assert p.flush(30) == 0
    node.stop()
    node.cores = 1
    node.start()
    md, lead = leaders(node.bootstrap, "moved")
    assert list(md.brokers) == [0] and set(lead.values()) == {0}
    values = sorted(int(m.value()) for m in consume_all(node.bootstrap, "moved", 3, expected=30))
    assert values == list(range(30))


def test_every_broker_named_listens_from_the_first_answer(make_node, tmp_path):
    # Shards open their partitions at their own pace on start-up; none may
    # answer before every shard's port listens, or a client told of a broker
    # by the first one to answer finds it refusing connections (librdkafka
    # reports that to the application as a transport failure).
    import subprocess
    import time
    from conftest import WEIR
    base = free_port_range(2)
    node = make_node(cores=2, extra=["--shard-ports", str(base)], data_dir=tmp_path / "d")
    create_topic(node.bootstrap, "full", partitions=4)
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "1", "linger.ms": 20})
    value = b"x" * 1000
    for i in range(40_000):
        p.produce("full", value=value, partition=i % 4)
        p.poll(0)
    assert p.flush(60) == 0
    node.stop()

    for attempt in range(3):
        proc = subprocess.Popen([WEIR, "serve", node.data_dir, "--kafka", node.bootstrap,
                                 "--addr", f"127.0.0.1:{node.http_port}", "--cores", "2",
                                 "--shard-ports", str(base)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            # The first moment any Kafka port answers (polling its connect:
            # the event is the port coming up).
            deadline = time.monotonic() + 30
            brokers = None
            while brokers is None:
                assert proc.poll() is None, "weir exited during start-up"
                assert time.monotonic() < deadline, "no Kafka port answered in 30 s"
                for port in (node.kafka_port, base, base + 1):
                    try:
                        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                            brokers = metadata_v0_brokers(s)
                        break
                    except ConnectionRefusedError:
                        continue
            assert {b[0] for b in brokers} == {0, 1}, brokers
            for node_id, host, port in brokers:
                with socket.create_connection((host, port), timeout=30) as s:
                    assert metadata_v0_brokers(s) == brokers, f"broker {node_id} at {host}:{port}"
        finally:
            proc.terminate()
            assert proc.wait(30) == 0


@pytest.mark.parametrize("why", ["past 65535", "overlaps --kafka"])
def test_bad_shard_ports_are_refused(tmp_path, why):
    n = Node(tmp_path / "d", cores=2)
    base = 65535 if why == "past 65535" else n.kafka_port
    n.extra = ["--shard-ports", str(base)]
    with pytest.raises(RuntimeError) as e:
        n.start()
    assert f"--shard-ports {base}" in str(e.value), str(e.value)


def test_one_port_for_kafka_and_http_is_refused(tmp_path):
    # Both listeners take SO_REUSEPORT: on one port the kernel would hand
    # Kafka clients to HTTP and back, so the node refuses to start.
    n = Node(tmp_path / "d", cores=2)
    n.http_port = n.kafka_port
    with pytest.raises(RuntimeError) as e:
        n.start()
    assert "are the same port" in str(e.value), str(e.value)


def test_kafka_python_and_kcat_use_the_shard_brokers(make_node):
    import subprocess
    from kafka import KafkaConsumer, KafkaProducer
    base = free_port_range(2)
    node = make_node(cores=2, extra=["--shard-ports", str(base)])
    create_topic(node.bootstrap, "kp", partitions=4)
    # kafka-python is idempotent by default: its InitProducerId goes to
    # whichever broker it picks, and producer ids come from shard 0 (one hop
    # per producer, before its first batch). Count from after that.
    p = KafkaProducer(bootstrap_servers=node.bootstrap, acks="all")
    p.send("kp", value=b"0", partition=0)
    p.flush(30)
    before = hops(node)
    for i in range(1, 40):
        p.send("kp", value=str(i).encode(), partition=i % 4)
    p.flush(30)
    p.close()
    c = KafkaConsumer("kp", bootstrap_servers=node.bootstrap, group_id="kp-readers",
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=15000)
    got = []
    for m in c:
        got.append(int(m.value))
        if len(got) == 40:
            break
    c.commit()
    c.close()
    assert sorted(got) == list(range(40))
    # kafka-python too sent each request to the shard that serves it.
    assert hops(node) == before
    out = subprocess.run(["kcat", "-L", "-b", node.bootstrap, "-t", "kp"], capture_output=True,
                         text=True, timeout=30).stdout
    assert f"broker 0 at 127.0.0.1:{base}" in out and f"broker 1 at 127.0.0.1:{base + 1}" in out
    shown = {int(m[1]): int(m[2]) for m in re.finditer(r"partition (\d+), leader (\d+)", out)}
    _, lead = leaders(node.bootstrap, "kp")
    assert shown == lead and len(shown) == 4
