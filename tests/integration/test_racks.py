"""Racks on three real nodes (loopback, unpinned): nodes 1 and 2 in rack
"east", node 3 in rack "west". A replicated topic's partitions each keep a
copy in both racks, and a consumer with `client.rack` set to "west" reads
every partition from node 3 (KIP-392: the leader names the replica in the
consumer's rack, which serves it as a follower up to the high watermark),
which node 3's follower-read counters show. `weir.partitions` tells the
same placement through every node."""
import time

from confluent_kafka import Consumer, Producer

from cluster import Cluster
from test_cluster import rows
from test_leaders import metrics
from test_replication import await_partitions, create_replicated

TOPIC = "racked"
PARTITIONS = 6


def follower_reads(node, topic):
    """Consumer fetches `node` served as a follower, by partition."""
    out = {}
    for key, value in metrics(node).items():
        if key.startswith("weir_partition_follower_reads_total{") and f'topic="{topic}"' in key:
            p = int(key.split('partition="')[1].split('"')[0])
            out[p] = value
    return out


def test_replicas_spread_over_racks_and_a_consumer_reads_from_its_own(tmp_path):
    cluster = Cluster(tmp_path)
    for n, rack in zip(cluster.nodes, ["east", "east", "west"]):
        n.extra += ["--rack", rack]
    cluster.start()
    try:
        one, three = cluster.node(1), cluster.node(3)
        create_replicated(one, TOPIC, partitions=PARTITIONS, rf=2)
        # Every partition in both racks: node 3 (the only one in "west")
        # keeps a copy of each, all in sync.
        seen = await_partitions(cluster, TOPIC, lambda ps: all(
            len(isr) == 2 and leader >= 0 for leader, _, isr in ps.values()))
        assert all(3 in replicas for _, replicas, _ in seen.values()), seen
        followed = {p for p, (leader, _, _) in seen.items() if leader != 3}
        assert followed, f"node 3 leads every partition: {seen}"

        producer = Producer({"bootstrap.servers": one.bootstrap, "acks": "all", "enable.idempotence": True})
        acked = {}

        def on(err, m):
            if err is None:
                acked[(m.partition(), m.offset())] = m.value()

        for i in range(600):
            producer.produce(TOPIC, value=f"r{i}".encode(), partition=i % PARTITIONS, on_delivery=on)
        assert producer.flush(60) == 0 and len(acked) == 600

        # weir.partitions tells the same story through every node: the
        # catalog's leaders, replicas and ISRs, and each leader's log.
        for n in cluster.nodes:
            table = rows(n, f"SELECT partition, leader, replicas, isr, log_start_offset, log_end_offset, "
                            f"size_bytes FROM weir.partitions WHERE topic = '{TOPIC}' ORDER BY partition")
            assert [r["partition"] for r in table] == list(range(PARTITIONS)), table
            for r in table:
                leader, replicas, isr = seen[r["partition"]]
                assert r["leader"] == leader, (r, seen)
                assert sorted(int(x) for x in r["replicas"].split(",")) == replicas, (r, seen)
                assert sorted(int(x) for x in r["isr"].split(",")) == isr, (r, seen)
                assert (r["log_start_offset"], r["log_end_offset"]) == (0, 100), r
                assert r["size_bytes"] > 0, r
            nodes = rows(n, "SELECT node_id, rack, fenced, controller, leaders, replicas FROM weir.nodes "
                            "ORDER BY node_id")
            assert [(r["node_id"], r["rack"], r["fenced"]) for r in nodes] == [
                (1, "east", False), (2, "east", False), (3, "west", False)], nodes
            assert sum(r["controller"] for r in nodes) == 1, nodes
            led = {i: sum(1 for leader, _, _ in seen.values() if leader == i) for i in (1, 2, 3)}
            assert {r["node_id"]: r["leaders"] for r in nodes} == led, (nodes, seen)
            # Node 3 keeps a copy of every partition (and of nothing else).
            assert {r["node_id"]: r["replicas"] for r in nodes}[3] == PARTITIONS, nodes

        consumer = Consumer({"bootstrap.servers": one.bootstrap, "group.id": "west-readers",
                             "client.rack": "west", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe([TOPIC])
        read = {}
        deadline = time.time() + 60
        try:
            while len(read) < len(acked):
                assert time.time() < deadline, f"read {len(read)} of {len(acked)}"
                m = consumer.poll(0.2)
                if m is not None and m.error() is None:
                    read[(m.partition(), m.offset())] = m.value()
        finally:
            consumer.close()
        assert read == acked
        # Node 3 served the partitions it follows itself.
        served = follower_reads(three, TOPIC)
        assert all(served.get(p, 0) > 0 for p in followed), (served, followed)
        # Leaders in "east" served none of their own as followers.
        for n in cluster.nodes[:2]:
            assert sum(follower_reads(n, TOPIC).values()) == 0
    finally:
        cluster.stop()
