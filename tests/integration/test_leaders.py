"""Leaderships on three real nodes (loopback, unpinned): after a node's
restart its preferred leaderships (each partition's first replica) go back
to it when asked (ElectLeaders, as `kafka-leader-election.sh` and the
admin clients send it) or by themselves (the controller's balancing).
Every acknowledged record is read back after the moves."""
import os
import time

from confluent_kafka import ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from cluster import Cluster
from test_replication import await_partitions, check_every_acknowledged_record, create_replicated, partitions

TOPIC = "led"
PARTITIONS = 6


def leaders_and_preferred(cluster, node):
    """Each partition's (leader, preferred replica, in-sync count) as
    `node` tells it (Metadata lists replicas in placement order)."""
    md = cluster.metadata(node, TOPIC)
    return {p.id: (p.leader, p.replicas[0], len(p.isrs)) for p in md.topics[TOPIC].partitions.values()}


def await_preferred_leaders(cluster, timeout=30):
    """Waits until every node tells each partition led by its preferred
    replica."""
    deadline = time.time() + timeout
    while True:
        views = [leaders_and_preferred(cluster, n) for n in cluster.nodes]
        if all(leader == pref for v in views for leader, pref, _ in v.values()):
            return
        assert time.time() < deadline, f"leaders not back where placed: {views}"
        time.sleep(0.05)


def produce(bootstrap, n, tag):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    acked = {}

    def on(err, m):
        if err is None:
            acked[m.value().decode()] = (m.partition(), m.offset())

    for i in range(n):
        p.produce(TOPIC, value=f"{tag}-{i}".encode(), partition=i % PARTITIONS, on_delivery=on)
    assert p.flush(60) == 0
    assert len(acked) == n
    return acked


def metrics(node):
    """`GET /metrics` as {"name{labels}": value}."""
    with node.urlopen(node.http + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def await_ready(node, timeout=30):
    """Polls `GET /ready` until it answers 200; a 503 says why not."""
    import urllib.error
    deadline = time.time() + timeout
    while True:
        try:
            with node.urlopen(node.http + "/ready", timeout=10) as r:
                assert r.status == 200
                return
        except urllib.error.HTTPError as e:
            assert e.code == 503, e
            why = e.read().decode()
            assert '"ready":false' in why, why
        assert time.time() < deadline, f"not ready: {why}"
        time.sleep(0.05)


def restart_with_leaderships_moved(cluster, while_down=lambda victim: None):
    """Kills the node preferred by partition 0 and starts it again; waits
    until it is back in every ISR. Answers its id and the partitions it
    prefers. `while_down(victim)` runs once its leaderships moved."""
    view = leaders_and_preferred(cluster, cluster.node(1))
    victim = view[0][1]
    preferred = [p for p, (_, pref, _) in view.items() if pref == victim]
    rest = [n for n in cluster.nodes if n is not cluster.node(victim)]
    cluster.node(victim).kill()
    await_partitions(cluster, TOPIC, lambda s: all(s[p][0] not in (victim, -1) for p in preferred), among=rest)
    while_down(victim)
    cluster.node(victim).start()
    await_partitions(cluster, TOPIC, lambda s: all(len(isr) == 3 for _, _, isr in s.values()))
    return victim, preferred


def test_a_preferred_election_gives_a_returned_node_its_leaderships_back(tmp_path):
    cluster = Cluster(tmp_path, session_ms=1500, extra=["--leader-balance-interval-ms", "0"]).start()
    try:
        create_replicated(cluster.node(1), TOPIC, partitions=PARTITIONS, rf=3)
        await_partitions(cluster, TOPIC, lambda s: len(s) == PARTITIONS)
        # Leaders as placed: each partition's first replica.
        placed = leaders_and_preferred(cluster, cluster.node(1))
        assert all(leader == pref for leader, pref, _ in placed.values()), placed
        acked = produce(cluster.node(1).bootstrap, 300, "before")

        def under_replicated(victim):
            # Its partitions' leaders say so in /metrics: out of the ISR,
            # and lagging as far as they know.
            await_partitions(cluster, TOPIC, lambda s: all(victim not in isr for _, _, isr in s.values()),
                             among=[n for n in cluster.nodes if n is not cluster.node(victim)])
            seen = [metrics(n) for n in cluster.nodes if n is not cluster.node(victim)]
            assert sum(m["weir_under_replicated_partitions"] for m in seen) >= PARTITIONS, seen
            assert sum(m["weir_under_min_isr_partitions"] for m in seen) == 0
            lag = [v for m in seen for k, v in m.items()
                   if k.startswith("weir_partition_replica_lag_records{") and f'topic="{TOPIC}"' in k
                   and f'replica="{victim}"' in k]
            assert len(lag) == PARTITIONS, lag
            # In bytes too: some exactly where records are lacking.
            for m in seen:
                for k, records in m.items():
                    if k.startswith("weir_partition_replica_lag_records{") and f'topic="{TOPIC}"' in k:
                        in_bytes = m[k.replace("_lag_records{", "_lag_bytes{")]
                        assert (in_bytes > 0) == (records > 0), (k, records, in_bytes)
        victim, preferred = restart_with_leaderships_moved(cluster, under_replicated)
        # Balancing is off: the returned node leads nothing yet.
        view = leaders_and_preferred(cluster, cluster.node(victim))
        assert all(view[p][0] != victim for p in preferred), view

        admin = AdminClient({"bootstrap.servers": cluster.node(victim).bootstrap})
        asked = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        results = admin.elect_leaders(ElectionType.PREFERRED, asked).result(30)
        outcome = {tp.partition: (e.code() if e else None) for tp, e in results.items()}
        # Those it prefers are elected; the others were led as preferred.
        assert outcome == {p: None if p in preferred else KafkaError.ELECTION_NOT_NEEDED
                           for p in range(PARTITIONS)}, outcome
        # Answered once this node installed the outcome: its Metadata says so.
        view = leaders_and_preferred(cluster, cluster.node(victim))
        assert all(view[p][0] == victim for p in preferred), view
        await_partitions(cluster, TOPIC, lambda s: all(s[p][0] == victim for p in preferred))
        # /metrics tells the same: one leader per partition, the victim
        # leading its own, one controller.
        seen = {i: metrics(cluster.node(i)) for i in (1, 2, 3)}
        for p in range(PARTITIONS):
            key = f'weir_partition_leader{{topic="{TOPIC}",partition="{p}"}}'
            leaders = [i for i, m in seen.items() if m.get(key) == 1]
            assert leaders == [view[p][0]], (p, leaders)
        assert sum(m["weir_controller"] for m in seen.values()) == 1
        assert all(m["weir_offline_partitions"] == 0 for m in seen.values())

        # Asked again, with every partition (None): nothing to do.
        assert admin.elect_leaders(ElectionType.PREFERRED, None).result(30) == {}
        # An unclean election of partitions with live leaders is not needed;
        # an unknown partition is said to be one.
        unclean = admin.elect_leaders(ElectionType.UNCLEAN,
                                      [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 99)]).result(30)
        codes = {tp.partition: e.code() for tp, e in unclean.items()}
        assert codes == {0: KafkaError.ELECTION_NOT_NEEDED, 99: KafkaError.UNKNOWN_TOPIC_OR_PART}, codes

        # The new leaders take writes, and nothing acknowledged is lost.
        acked.update(produce(cluster.node(1).bootstrap, 300, "after"))
        check_every_acknowledged_record(cluster.node(2).bootstrap, TOPIC, PARTITIONS, acked)
    finally:
        cluster.stop()


def test_a_preferred_leader_back_in_sync_leads_again_by_itself(tmp_path):
    cluster = Cluster(tmp_path, session_ms=1500, extra=["--leader-balance-interval-ms", "1000"]).start()
    try:
        create_replicated(cluster.node(1), TOPIC, partitions=PARTITIONS, rf=3)
        await_partitions(cluster, TOPIC, lambda s: len(s) == PARTITIONS)
        acked = produce(cluster.node(1).bootstrap, 300, "before")
        victim, preferred = restart_with_leaderships_moved(cluster)
        back_in_sync = time.time()
        # Within a few balancing rounds, every leadership is where it was placed.
        await_preferred_leaders(cluster, timeout=15)
        print(f"leaderships back {time.time() - back_in_sync:.1f} s after the node was in sync again")
        assert any("balancing leaders" in line for n in cluster.nodes for line in n.log)
        acked.update(produce(cluster.node(2).bootstrap, 300, "after"))
        check_every_acknowledged_record(cluster.node(3).bootstrap, TOPIC, PARTITIONS, acked)
    finally:
        cluster.stop()


def test_a_rolling_restart_under_load_costs_no_acknowledged_record_and_no_error(tmp_path):
    """Each node in turn stopped with SIGTERM (a controlled shutdown: its
    leaderships handed over before it goes), started again, and waited
    for until it is back in every ISR and leads its preferred partitions
    again, while an idempotent acks=all producer writes through all three
    nodes. No delivery fails; every acknowledged record is read back."""
    from test_replication import LiveProducer
    cluster = Cluster(tmp_path, session_ms=1500, extra=["--leader-balance-interval-ms", "1000"]).start()
    try:
        create_replicated(cluster.node(1), TOPIC, partitions=PARTITIONS, rf=3)
        await_partitions(cluster, TOPIC, lambda s: len(s) == PARTITIONS)
        everyone = ",".join(n.bootstrap for n in cluster.nodes)
        live = LiveProducer(everyone, TOPIC)
        while len(live.acked) < 200:
            time.sleep(0.01)
        for n in cluster.nodes:
            began = time.time()
            n.stop()
            stopped = time.time()
            assert any("leaderships handed over" in line for line in n.log), "".join(n.log[-20:])
            n.start()
            # /ready (the Kubernetes readiness probe) answers 200 only once
            # the node is back in every ISR: what Metadata then says.
            await_ready(n)
            me = cluster.nodes.index(n) + 1
            view = partitions(cluster, n, TOPIC)
            assert all(me in isr for _, _, isr in view.values()), view
            await_partitions(cluster, TOPIC, lambda s: all(len(isr) == 3 for _, _, isr in s.values()))
            await_preferred_leaders(cluster)
            gaps = [b - a for a, b in zip(live.ack_times, live.ack_times[1:]) if a >= began - 1]
            print(f"{os.path.basename(n.data_dir)}: stopped in {stopped - began:.2f} s, back and leading again in "
                  f"{time.time() - stopped:.2f} s; longest pause between acks {max(gaps, default=0):.3f} s")
            assert live.failed == [], live.failed[:5]
        acked = live.stop()
        assert live.failed == [], live.failed[:5]
        check_every_acknowledged_record(cluster.node(2).bootstrap, TOPIC, PARTITIONS, acked)
    finally:
        cluster.stop()
