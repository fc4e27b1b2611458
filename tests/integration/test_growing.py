"""A cluster growing by itself: three real nodes (loopback, unpinned)
with the controller's replica balancing on, a fourth joins, and replicas
move to it as reassignments (each new copy in sync before an old one
goes) until no two nodes keep more than one replica apart, as
`weir.partitions` tells. Every acknowledged record is read back after."""
import time
from collections import Counter

from cluster import Cluster
from conftest import Node, free_port
from test_cluster import rows
from test_leaders import produce, TOPIC, PARTITIONS
from test_replication import check_every_acknowledged_record, create_replicated, await_partitions


def replicas_per_node(node):
    """How many replicas each node keeps, over every topic, and whether a
    move is under way, as `node`'s weir.partitions tells."""
    table = rows(node, "SELECT replicas, adding, removing FROM weir.partitions")
    kept = Counter(int(n) for r in table for n in r["replicas"].split(",") if n)
    moving = any(r["adding"] or r["removing"] for r in table)
    return kept, moving


def test_a_node_added_takes_replicas_until_the_nodes_are_even(tmp_path):
    cluster = Cluster(tmp_path, session_ms=1500, extra=["--replica-balance-interval-ms", "300"]).start()
    fourth = None
    try:
        one = cluster.node(1)
        create_replicated(one, TOPIC, partitions=PARTITIONS, rf=2)
        await_partitions(cluster, TOPIC, lambda s: all(len(isr) == 2 for _, _, isr in s.values()))
        acked = produce(one.bootstrap, 600, "before")
        kept, moving = replicas_per_node(one)
        assert sorted(kept) == [1, 2, 3] and not moving, kept

        fourth = Node(tmp_path / "node4", cores=1,
                      extra=["--node-id", "4", "--join", f"127.0.0.1:{cluster.peer_ports[0]}",
                             "--peer-addr", f"127.0.0.1:{free_port()}", "--cpus", "none",
                             "--replica-balance-interval-ms", "300"])
        cluster.nodes.append(fourth)
        fourth.start()
        cluster.await_brokers(4)
        started = time.time()
        deadline = started + 90
        while True:
            kept, moving = replicas_per_node(fourth)
            if not moving and kept.get(4, 0) > 0 and max(kept.values()) - min(kept.values()) <= 1:
                break
            assert time.time() < deadline, f"replicas per node: {dict(kept)}, moving: {moving}"
            time.sleep(0.2)
        print(f"balanced in {time.time() - started:.1f} s: {dict(kept)}")
        # The same on every node, every partition's replicas in sync.
        for n in cluster.nodes:
            assert replicas_per_node(n) == (kept, False)
        await_partitions(cluster, TOPIC, lambda s: all(sorted(r) == isr for _, r, isr in s.values()))
        acked.update(produce(fourth.bootstrap, 300, "after"))
        check_every_acknowledged_record(fourth.bootstrap, TOPIC, PARTITIONS, acked)
    finally:
        cluster.stop()
