"""Replicated partitions on three real nodes (loopback, unpinned), Kafka's
protocol between them: followers fetch from leaders, acks=all waits for
the in-sync replicas, a leader's death elects another from the ISR in a
new epoch. Live clients run across each fault; a checker then reads every
partition back and compares it with what was acknowledged."""
import threading
import time

import pytest
import requests
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

import rawkafka
from cluster import Cluster
from conftest import consume_all
from rawkafka import connect, parse_produce_v3_response, produce_v3, read_frame, record_batch, request


@pytest.fixture
def cluster(tmp_path):
    # The default session timeout (1.5 s): a failover as users get it.
    c = Cluster(tmp_path, session_ms=1500).start()
    yield c
    c.stop()


def create_replicated(node, topic, partitions=6, rf=3, **config):
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    f = admin.create_topics([NewTopic(topic, partitions, rf, config=config)])[topic]
    f.result(30)


def partitions(cluster, node, topic):
    """Each partition as `node` tells it: (leader, replicas, isr)."""
    md = cluster.metadata(node, topic)
    return {p.id: (p.leader, sorted(p.replicas), sorted(p.isrs))
            for p in md.topics[topic].partitions.values()}


def await_partitions(cluster, topic, check, timeout=30, among=None):
    """Waits until every node of `among` tells partitions that pass
    `check`; answers the last view."""
    deadline = time.time() + timeout
    seen = None
    while time.time() < deadline:
        seen = []
        for n in among or cluster.nodes:
            try:
                seen.append(partitions(cluster, n, topic))
            except KafkaException as e:
                seen.append(str(e))
        if all(isinstance(s, dict) and check(s) for s in seen):
            return seen[0]
        time.sleep(0.05)
    raise AssertionError(f"partitions seen: {seen}")


def log_ends(node, topic, which="end"):
    """Each partition's log end (or `which="start"`) on `node` (its own
    copy, leader or not), from its /metrics."""
    with node.urlopen(f"{node.http}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(f"weir_partition_log_{which}_offset{{") and f'topic="{topic}"' in line:
            part = int(line.split('partition="')[1].split('"')[0])
            out[part] = int(float(line.rsplit(" ", 1)[1]))
    return out


def await_log_ends(nodes, topic, want, timeout=10):
    """Waits until each of `nodes` holds its own copy of `topic` up to
    `want` ({partition: log end}), copied from the leaders."""
    for n in nodes:
        deadline = time.time() + timeout
        while (seen := log_ends(n, topic)) != want:
            assert time.time() < deadline, f"node {n.bootstrap} holds {seen}, not {want}"
            time.sleep(0.05)


def test_an_acks_all_produce_waits_no_longer_than_its_timeout(cluster):
    """acks=all waits for the in-sync replicas at most the produce's
    timeout_ms (then REQUEST_TIMED_OUT, as Kafka's DelayedProduce): with a
    follower stopped but still in sync, a 200 ms produce times out; once
    the stopped node is fenced and leaves the ISR, one with 10 s is
    acknowledged."""
    create_replicated(cluster.node(1), "timed", partitions=1, rf=3)
    leader = await_partitions(cluster, "timed", lambda s: s[0][0] > 0 and s[0][2] == [1, 2, 3])[0][0]
    follower = cluster.node(next(i for i in (1, 2, 3) if i != leader))
    conn = connect(cluster.node(leader).bootstrap, timeout=30)
    pause(follower)
    try:
        conn.sendall(request(0, 3, produce_v3("timed", 0, record_batch([b"short"]), timeout_ms=200),
                             correlation_id=1))
        [(_, _, err, _)] = parse_produce_v3_response(read_frame(conn))[1]
        assert err == 7, f"error {err}, not REQUEST_TIMED_OUT"
        conn.sendall(request(0, 3, produce_v3("timed", 0, record_batch([b"long"]), timeout_ms=10000),
                             correlation_id=2))
        [(_, _, err, base)] = parse_produce_v3_response(read_frame(conn))[1]
        assert err == 0 and base >= 0, f"error {err}"
    finally:
        resume(follower)
        conn.close()


def replication_state(cluster, topic):
    """What each node says of `topic`'s partitions, for a failure's
    message: its Metadata (leader, replicas, ISR) and, from its /metrics,
    each partition's high watermark and log end on that node."""
    out = {}
    for n in cluster.nodes:
        try:
            md = partitions(cluster, n, topic)
            text = requests.get(f"http://{n.host}:{n.http_port}/metrics", timeout=10).text
        except Exception as e:  # a node down or stopped: say so and go on
            out[n.data_dir] = repr(e)
            continue
        local = {}
        for line in text.splitlines():
            for name in ("high_watermark", "log_end_offset"):
                if line.startswith(f"weir_partition_{name}{{") and f'topic="{topic}"' in line:
                    part = int(line.split('partition="')[1].split('"')[0])
                    local.setdefault(part, {})[name] = int(float(line.rsplit(" ", 1)[1]))
        out[n.data_dir] = {"metadata": md, "local": local}
    return out


class LiveProducer:
    """An idempotent acks=all producer on a thread of its own until
    stopped, keeping each acknowledged record's partition and offset, and
    the times acknowledgements arrived."""

    def __init__(self, bootstrap, topic, **conf):
        self.acked, self.failed, self.ack_times = {}, [], []
        self.stopping = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 2, **conf})
        self.thread = threading.Thread(target=self.run, args=(topic,), daemon=True)
        self.thread.start()

    def run(self, topic):
        i = 0
        while not self.stopping.is_set():
            self.producer.produce(topic, value=f"live-{i}", on_delivery=self.done)
            self.producer.poll(0.002)
            i += 1

    def done(self, err, msg):
        if err:
            self.failed.append(err)
        else:
            self.acked[msg.value().decode()] = (msg.partition(), msg.offset())
            self.ack_times.append(time.time())

    def stop(self):
        self.stopping.set()
        self.thread.join(10)
        assert self.producer.flush(60) == 0
        return self.acked


def check_every_acknowledged_record(bootstrap, topic, partitions, acked):
    """The checker: every acknowledged record is in the log exactly once,
    at the offset it was acknowledged at."""
    read = consume_all(bootstrap, topic, partitions, timeout=60)
    at = {}
    for m in read:
        v = m.value().decode()
        assert v not in at, f"{v} read twice: at {at[v]} and {(m.partition(), m.offset())}"
        at[v] = (m.partition(), m.offset())
    lost = [v for v in acked if v not in at]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    moved = [(v, acked[v], at[v]) for v in acked if acked[v] != at[v]]
    assert not moved, f"records read elsewhere than acknowledged: {moved[:5]}"
    return read


def test_a_replicated_topic_copies_every_record_to_every_replica(cluster):
    create_replicated(cluster.node(1), "copied", partitions=6, rf=3)
    view = await_partitions(cluster, "copied", lambda s: len(s) == 6)
    for leader, replicas, isr in view.values():
        assert replicas == [1, 2, 3] and isr == [1, 2, 3] and leader in replicas
    # Leaders are spread: each node leads two.
    assert sorted(leader for leader, _, _ in view.values()) == [1, 1, 2, 2, 3, 3]
    p = Producer({"bootstrap.servers": cluster.node(2).bootstrap, "acks": "all"})
    acked = {}

    def done(err, msg):
        assert err is None, err
        acked[msg.value().decode()] = (msg.partition(), msg.offset())

    for i in range(600):
        p.produce("copied", value=f"v{i}", partition=i % 6, on_delivery=done)
        p.poll(0)
    assert p.flush(30) == 0 and len(acked) == 600
    ends = {}
    for part in range(6):
        ends[part] = 1 + max(o for (pp, o) in acked.values() if pp == part)
    # Every replica's own log reaches what was acknowledged (acks=all: all
    # three were in sync).
    await_log_ends(cluster.nodes, "copied", ends)
    check_every_acknowledged_record(cluster.node(3).bootstrap, "copied", 6, acked)


def test_a_restarted_leader_serves_no_reads_before_it_leads_again(cluster):
    """A node restarted while it cannot reach the quorum finds itself named
    leader in the catalog it replays, but leads nothing until the quorum
    takes its new run: a consumer's ListOffsets, Fetch and
    OffsetForLeaderEpoch there are told NOT_LEADER_OR_FOLLOWER (which
    clients retry elsewhere), never a high watermark its copy does not
    know yet (it starts at the log start) or an epoch's end from a replica
    that does not lead it (one with no epoch written answers "none", which
    a consumer takes for a truncation and skips to the end)."""
    create_replicated(cluster.node(1), "restarted", partitions=3, rf=3)
    view = await_partitions(cluster, "restarted", lambda s: len(s) == 3)
    part = next(p for p, (leader, _, _) in view.items() if leader == 1)
    p = Producer({"bootstrap.servers": cluster.node(1).bootstrap, "acks": "all"})
    for i in range(100):
        p.produce("restarted", value=f"v{i}", partition=part)
    assert p.flush(30) == 0
    for n in cluster.nodes:
        n.kill()
    # Node 1 alone: no quorum to register with.
    one = cluster.node(1).start()
    not_leader = 6
    with connect(one.bootstrap) as sock:
        assert rawkafka.list_offsets_v1(sock, "restarted", part)[0] == not_leader
        assert rawkafka.fetch_v4_error(sock, "restarted", part, 50) == not_leader
        # Where epoch 0 ended, the current epoch left unsaid (-1).
        answer = rawkafka.offset_for_leader_epoch_v2(sock, "restarted", part, -1, 0)
        assert answer[0] == not_leader, answer
    # With a quorum again, a leader in a new epoch tells the truth.
    cluster.node(2).start()
    cluster.node(3).start()
    cluster.await_brokers(3)
    await_partitions(cluster, "restarted", lambda s: all(isr == [1, 2, 3] for _, _, isr in s.values()))
    # The leader as Metadata names it (asked again each time: the view may
    # lag the election) tells the latest offset of everything acknowledged.
    deadline = time.time() + 10
    while True:
        leader = partitions(cluster, one, "restarted")[part][0]
        latest = None
        if leader > 0:
            with connect(cluster.node(leader).bootstrap) as sock:
                latest = rawkafka.list_offsets_v1(sock, "restarted", part)
        if latest == (0, 100):
            break
        assert time.time() < deadline, (leader, latest)
        time.sleep(0.05)


def test_followers_sign_in_to_their_leaders_where_sign_in_is_required(tmp_path):
    """With sign-in on, a follower signs in to its leader's Kafka port as
    `admin` with its node's admin token (Kafka's inter-broker principal):
    acks=all writes to a replicated topic are taken and every replica
    holds them. A node given another admin token is refused by the
    others, says so in its log, and its copies stay behind."""
    from test_security import ADMIN, TOKENS, WRITER, sasl
    cluster = Cluster(tmp_path, env=TOKENS)
    cluster.node(3).env["WEIR_ADMIN_TOKEN"] = "another-admin-token"
    # Waited for as the writer, whose token every node shares.
    cluster.start(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                     "sasl.username": "writer", "sasl.password": WRITER})
    try:
        one = cluster.node(1)
        admin = AdminClient(sasl(one, "admin", ADMIN))
        admin.create_topics([NewTopic("signed", 2, replica_assignment=[[1, 2], [2, 1]])])["signed"].result(30)
        p = Producer({**sasl(one, "admin", ADMIN), "acks": "all"})
        acked = []
        for i in range(200):
            p.produce("signed", value=f"v{i}", partition=i % 2,
                      on_delivery=lambda err, msg: acked.append(msg.partition()) if err is None else None)
        assert p.flush(30) == 0 and len(acked) == 200
        await_log_ends([cluster.node(1), cluster.node(2)], "signed", {0: 100, 1: 100})
        # Node 3, with another admin token, follows a partition of node 1:
        # refused, it says why, and holds none of what node 1 took.
        admin.create_topics([NewTopic("unsigned", 1, replica_assignment=[[1, 3]])])["unsigned"].result(30)
        # acks=1: with its follower refused, acks=all would wait for the
        # ISR to shrink and then be refused NOT_ENOUGH_REPLICAS.
        p1 = Producer({**sasl(one, "admin", ADMIN), "acks": "1"})
        p1.produce("unsigned", value=b"x", partition=0)
        assert p1.flush(30) == 0
        assert cluster.node(3).await_log("replica fetcher: signing in to broker 1", timeout=10)
        assert log_ends(one, "unsigned") == {0: 1}
        assert log_ends(cluster.node(3), "unsigned") == {0: 0}
    finally:
        cluster.stop()


def test_a_killed_leader_is_replaced_from_the_isr_and_nothing_acknowledged_is_lost(cluster):
    create_replicated(cluster.node(1), "failover", partitions=3, rf=3)
    await_partitions(cluster, "failover", lambda s: len(s) == 3)
    controller = cluster.await_brokers(3)
    # A leader that is not the controller, so its death is noticed by the
    # controller's session timeout alone.
    view = partitions(cluster, cluster.node(1), "failover")
    victim = next(leader for leader, _, _ in view.values() if leader != controller)
    led = [p for p, (leader, _, _) in view.items() if leader == victim]
    rest = [n for n in cluster.nodes if n is not cluster.node(victim)]
    live = LiveProducer(rest[0].bootstrap, "failover")
    while len(live.acked) < 200:
        time.sleep(0.01)
    killed_at = time.time()
    cluster.node(victim).kill()
    # A new leader from the ISR for each partition it led, in a new epoch.
    after = await_partitions(
        cluster, "failover",
        lambda s: all(s[p][0] not in (victim, -1) and victim not in s[p][2] for p in led),
        among=rest)
    while not [t for t in live.ack_times if t > killed_at + 0.05]:
        assert time.time() < killed_at + 30, "no acknowledgement since the kill"
        time.sleep(0.01)
    resumed = min(t for t in live.ack_times if t > killed_at + 0.05) - killed_at
    print(f"acks=all resumed {resumed:.2f} s after the leader's kill -9")
    time.sleep(0.5)
    acked = live.stop()
    assert live.failed == []
    check_every_acknowledged_record(rest[1].bootstrap, "failover", 3, acked)
    # Back, the killed node catches up and rejoins every ISR.
    cluster.node(victim).start()
    await_partitions(cluster, "failover", lambda s: all(isr == [1, 2, 3] for _, _, isr in s.values()))
    assert all(after[p][0] != victim for p in led)


def test_acks_all_needs_min_insync_replicas_and_acks_1_does_not(cluster):
    create_replicated(cluster.node(1), "strict", partitions=1, rf=3, **{"min.insync.replicas": "3"})
    view = await_partitions(cluster, "strict", lambda s: len(s) == 1)
    leader = view[0][0]
    controller = cluster.await_brokers(3)
    gone = next(n for n in (1, 2, 3) if n not in (leader, controller))
    cluster.node(gone).kill()
    # Fenced, it leaves the ISR: two in sync, fewer than 3.
    await_partitions(cluster, "strict", lambda s: s[0][2] == sorted({1, 2, 3} - {gone}),
                     among=[cluster.node(leader)])
    outcome = {}

    def send(acks):
        p = Producer({"bootstrap.servers": cluster.node(leader).bootstrap, "acks": acks,
                      "message.timeout.ms": 3000, "retries": 0})
        p.produce("strict", value=acks.encode(), on_delivery=lambda err, msg: outcome.update({acks: err}))
        p.flush(15)

    send("all")
    assert outcome["all"] is not None and outcome["all"].code() == 19, outcome  # NOT_ENOUGH_REPLICAS
    send("1")
    assert outcome["1"] is None, outcome


def within(seconds, call):
    """Runs a client call on a thread of its own and waits for it at most
    `seconds`: answers (True, its result), or (False, where it is stuck);
    what it raises, it raises here.
    For librdkafka calls with no bound of their own (a consumer's close
    waits for its group with none; a transactional call can wait past its
    timeout on a coordinator handle gone stale: confluentinc/librdkafka#5456),
    which an application would leave to a watchdog too."""
    import sys
    import traceback
    answer, raised = [], []

    def run():
        try:
            answer.append(call())
        except Exception as e:
            raised.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        frame = sys._current_frames().get(t.ident)
        return False, "".join(traceback.format_stack(frame)) if frame else "(ended)"
    if raised:
        raise raised[0]
    return True, answer[0]


class LiveReader:
    """A consumer assigned every partition from the start, on a thread of
    its own, keeping what it read: each partition's offsets must grow in
    its polls, and each record read must be in the final log at the offset
    it was read from."""

    def __init__(self, bootstrap, topic, partitions, **conf):
        from confluent_kafka import Consumer, TopicPartition
        self.read = []
        self.errors = []
        # What the client told besides records (a truncation it detected,
        # an offset reset), with the last offset read before: for a
        # failure's message.
        self.told = []
        self.stopping = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "live-reader",
                                  "enable.auto.commit": False, **conf})
        # From offset 0 (every log here starts there), not BEGINNING: a
        # logical offset is asked of the leader with ListOffsets, and
        # librdkafka answers a stale answer to that (a request to a leader
        # killed meanwhile, retried until it came back, "Local: Outdated")
        # by asking for BEGINNING again even after it moved on, which took
        # a reader back to offset 0 after it had read 200 records from the
        # new leader (rdkafka_partition.c, rd_kafka_toppar_handle_Offset;
        # seen with seed 1796475800, whose first fault kills a leader).
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        last = {}
        while not self.stopping.is_set():
            m = self.consumer.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                self.told.append(f"partition {m.partition()} after offset {last.get(m.partition())}: {m.error()}")
                continue
            p, o = m.partition(), m.offset()
            if o <= last.get(p, -1):
                told = [t for t in self.told if t.startswith(f"partition {p} ")][-3:]
                self.errors.append(f"partition {p}: offset {o} read after {last[p]} (the client told {told})")
            last[p] = o
            self.read.append((m.value().decode(), p, o))

    def stop(self):
        self.stopping.set()
        self.thread.join(10)
        closed, where = within(60, self.consumer.close)
        if not closed:
            print(f"a reader's close hung (left behind), at:\n{where}")
        return self.read


class LiveTransformer:
    """Kafka's exactly-once loop on a thread of its own: a consumer of the
    group `transformers` (read_committed) takes records from `source`,
    and a transactional producer writes each as `out-<value>` to the same
    partition of `sink` and commits the consumer's offsets in the same
    transaction. Any error in a round (a coordinator or leader moving, a
    fence) ends it: the transaction is aborted (or the producer made
    again, which fences and aborts it) and the consumer made again from
    the group's committed offsets, as an application would.

    A supervisor replaces a loop stuck in a client call (none begun for
    STUCK_AFTER seconds, three times every call's own timeout) with a new
    one, as an application's watchdog would: the new producer of the same
    transactional id fences the stuck one and aborts its open
    transaction. librdkafka's send_offsets_to_transaction can hang for
    good when the group coordinator's broker left Metadata (fenced) and
    came back: its coordinator request waits on the decommissioned broker
    handle and ignores its own timeout (confluentinc/librdkafka#5511 and
    #5456, open); Kafka fences brokers out of Metadata too. Where each
    loop was stuck is kept in `stuck`."""

    STUCK_AFTER = 90

    def __init__(self, bootstrap, source, sink):
        self.bootstrap, self.source, self.sink = bootstrap, source, sink
        self.committed, self.restarts, self.errors, self.stuck = 0, 0, [], []
        self.closing = []
        self.stopping = threading.Event()
        self.loop = self.Loop(self)
        self.watchdog = threading.Thread(target=self.supervise, daemon=True)
        self.watchdog.start()

    class Loop:
        """One run of the loop: its own consumer, producer and thread."""

        def __init__(self, outer):
            self.outer = outer
            self.consumer = self.producer = None
            self.beat = time.time()
            self.retired = threading.Event()
            self.thread = threading.Thread(target=self.run, daemon=True)
            self.thread.start()

        def start(self):
            from confluent_kafka import Consumer
            o = self.outer
            if self.producer is None:
                self.producer = Producer({"bootstrap.servers": o.bootstrap, "transactional.id": "transformer",
                                          "transaction.timeout.ms": 30000})
                self.producer.init_transactions(30)
            self.consumer = Consumer({"bootstrap.servers": o.bootstrap, "group.id": "transformers",
                                      "enable.auto.commit": False, "isolation.level": "read_committed",
                                      "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
            self.consumer.subscribe([o.source])

        def round(self):
            from confluent_kafka import TopicPartition
            o = self.outer
            msgs = [m for m in self.consumer.consume(200, 0.5) if m.error() is None]
            if not msgs:
                return
            self.producer.begin_transaction()
            nxt = {}
            for m in msgs:
                self.producer.produce(o.sink, value=b"out-" + m.value(), partition=m.partition())
                nxt[m.partition()] = m.offset() + 1
            self.beat = time.time()
            self.producer.send_offsets_to_transaction([TopicPartition(o.source, p, o_) for p, o_ in nxt.items()],
                                                      self.consumer.consumer_group_metadata(), 30)
            self.beat = time.time()
            self.producer.commit_transaction(30)
            if not self.retired.is_set():
                o.committed += 1

        def restart(self):
            self.beat = time.time()
            self.outer.restarts += 1
            try:
                self.producer.abort_transaction(10)
            except Exception:
                self.producer = None  # made again: init_transactions fences and aborts
            self.outer.close_aside(self.consumer)
            self.consumer = None

        def run(self):
            from confluent_kafka import KafkaException
            o = self.outer
            while not o.stopping.is_set() and not self.retired.is_set():
                self.beat = time.time()
                try:
                    if self.consumer is None:
                        self.start()
                    self.round()
                except KafkaException:
                    if not self.retired.is_set():
                        self.restart()
                except Exception as e:  # a bug of the loop itself
                    if not self.retired.is_set():  # (a retired one's consumer is closed under it)
                        o.errors.append(repr(e))
                    return

        def where(self):
            import sys
            import traceback
            frame = sys._current_frames().get(self.thread.ident)
            return "".join(traceback.format_stack(frame)) if frame else "(ended)"

    def supervise(self):
        while not self.stopping.wait(1):
            loop = self.loop
            if loop.thread.is_alive() and time.time() - loop.beat > self.STUCK_AFTER:
                self.retire(loop)
                self.loop = self.Loop(self)

    def retire(self, loop):
        """Sets a stuck loop aside: the next producer of its
        transactional id fences it; its consumer leaves the group."""
        loop.retired.set()
        self.stuck.append(loop.where())
        self.close_aside(loop.consumer)

    def close_aside(self, consumer):
        """Closes a consumer on a thread of its own: librdkafka's close
        waits for the group (its LeaveGroup, the last rebalance) with no
        bound of its own, and the loop must go on (or stop) meanwhile."""
        if consumer is not None:
            self.closing.append(threading.Thread(target=consumer.close, daemon=True))
            self.closing[-1].start()

    def stop(self):
        """Ends the loop, then fences its transactional id with a last
        producer, so the checkers see a settled state: a loop still stuck
        after STUCK_AFTER seconds, or one whose last round failed and
        whose abort failed too (its producer dropped), may have left a
        transaction open, its offsets pending in the group (OffsetFetch
        answers UNSTABLE_OFFSET_COMMIT to read_committed clients until
        the coordinator's timeout aborts it). InitProducerId aborts it
        and answers once the abort is written, as Kafka's does."""
        self.stopping.set()
        self.watchdog.join(10)
        loop = self.loop
        loop.thread.join(self.STUCK_AFTER)
        if loop.thread.is_alive():
            self.retire(loop)
        else:
            self.close_aside(loop.consumer)
        # A fence stuck past its own timeout (its client's coordinator
        # handle gone stale) is left, and a new client fences instead.
        from confluent_kafka import KafkaException
        for _ in range(3):
            fence = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "transformer",
                              "transaction.timeout.ms": 30000})
            try:
                fenced, where = within(90, lambda: fence.init_transactions(60))
            except KafkaException as e:
                fenced, where = False, repr(e)
            if fenced:
                break
            self.stuck.append(where)
        assert fenced, "three producers in a row could not fence the exactly-once loop's transactional id"
        assert self.errors == [], self.errors
        assert self.committed > 0, "the exactly-once loop committed no transaction"


def consume_committed(bootstrap, topic, partitions, timeout=60):
    """Every partition read under read_committed, from its start until the
    consumer's position reaches its end (markers and aborted records are
    never delivered, so the last record delivered need not be the end)."""
    from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "committed-reader", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = c.poll(0.2)
        if m is not None:
            assert m.error() is None, m.error()
            out.append(m)
        at = {tp.partition: tp.offset for tp in c.position(tps)}
        if all(end == 0 or at[p] >= end for p, end in ends.items()):
            break
    else:
        raise AssertionError(f"read {len(out)} records; positions {at}, ends {ends}")
    c.close()
    return out


def check_transformed(bootstrap, source, source_at, sink, partitions):
    """Exactly once: the group's committed offset of each source partition
    splits it in two; every record below it has its output in `sink`
    (committed, read_committed) exactly once and in order, none above it
    has one, and no output comes from nowhere. Returns the sink as read."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "transformers", "enable.auto.commit": False})
    committed = {tp.partition: tp.offset
                 for tp in c.committed([TopicPartition(source, p) for p in range(partitions)], timeout=30)}
    c.close()
    out = consume_committed(bootstrap, sink, partitions)
    sources = {}
    last = {}
    for m in out:
        v = m.value().decode()
        assert v.startswith("out-") and v[4:] in source_at, f"an output of nothing: {v}"
        p, o = source_at[v[4:]]
        assert v not in sources, f"{v} written twice: at {sources[v]} and {(m.partition(), m.offset())}"
        sources[v] = (m.partition(), m.offset())
        assert m.partition() == p and o > last.get(p, -1), f"{v} out of order in partition {p}"
        last[p] = o
    for v, (p, o) in source_at.items():
        below = o < max(committed[p], 0)
        assert below == (f"out-{v}" in sources), \
            f"{v} at {p}/{o}, committed {committed[p]}: output {'missing' if below else 'without a commit'}"
    return out


def pause(node):
    node.proc.send_signal(__import__("signal").SIGSTOP)


def resume(node):
    node.proc.send_signal(__import__("signal").SIGCONT)


NEMESIS_SECONDS = float(__import__("os").environ.get("WEIR_NEMESIS_SECONDS", 300))


# The faults' time, then the last heal, the clients' stops and the checkers.
@pytest.mark.bound(NEMESIS_SECONDS + 900)
def test_faults_one_after_another_lose_nothing_acknowledged(tmp_path):
    """Jepsen's way, with a seeded random order of faults for
    WEIR_NEMESIS_SECONDS (default 300): kill -9 of a node (leading some
    partitions, following others; sometimes the controller), SIGSTOP of
    one past its session, one cut off from the others by nftables while a
    client still reaches it (what it takes then is never acknowledged and
    is gone once it is back), one whose packets to the others are lost
    (one way), 30% of the packets between nodes lost, and all three killed
    at once. A producer (idempotent, acks=all), a reader, Kafka's
    exactly-once loop (a committing group and a transactional producer)
    and a read_committed reader of its output run throughout; after every
    fault the cluster heals back to every replica in sync, and the
    checkers read the topics back against every acknowledgement, every
    read and every committed transaction."""
    import os
    import random
    from cluster import Partition
    seed = int(os.environ.get("WEIR_NEMESIS_SEED", time.time()))
    duration = NEMESIS_SECONDS
    print(f"nemesis seed {seed}, {duration:.0f} s")
    rng = random.Random(seed)
    cluster = Cluster(tmp_path, hosts=["127.0.0.21", "127.0.0.22", "127.0.0.23"], session_ms=1500).start()
    topic, sink, parts = "nemesis", "nemesis-out", 6
    everyone = ",".join(n.bootstrap for n in cluster.nodes)
    try:
        create_replicated(cluster.node(1), topic, partitions=parts, rf=3)
        create_replicated(cluster.node(1), sink, partitions=parts, rf=3)
        all_in_sync = lambda s: len(s) == parts and all(isr == [1, 2, 3] and leader > 0
                                                        for leader, _, isr in s.values())
        for t in (topic, sink):
            await_partitions(cluster, t, all_in_sync)
        # One request in flight per connection: with more, librdkafka
        # answers an OUT_OF_ORDER_SEQUENCE_NUMBER behind a failed request
        # (a new leader lacking the old one's unreplicated batches, as
        # Kafka answers it too) by bumping the producer's epoch for every
        # partition and sending again, under new sequence numbers, records
        # another partition's old leader had written and answered
        # NOT_LEADER_OR_FOLLOWER for: a duplicate no broker can tell apart
        # (confluentinc/librdkafka#4953, its fix #4972 not merged). Seen
        # here once in 30 minutes (seed 20261206).
        live = LiveProducer(everyone, topic, **{"message.timeout.ms": 120000,
                                                "max.in.flight.requests.per.connection": 1})
        reader = LiveReader(everyone, topic, parts)
        # The exactly-once loop and a read_committed reader of its output.
        transformer = LiveTransformer(everyone, topic, sink)
        committed_reader = LiveReader(everyone, sink, parts, **{"isolation.level": "read_committed",
                                                               "group.id": "committed-live-reader"})
        never_acked = []
        # Connections to a cut-off leader with writes awaiting its answer.
        cut_off = []

        def kill_one():
            n = cluster.node(rng.randint(1, 3))
            n.kill()
            time.sleep(rng.uniform(0.5, 3))
            n.start()

        def pause_one():
            n = cluster.node(rng.randint(1, 3))
            pause(n)
            time.sleep(rng.uniform(2, 4))
            resume(n)

        def isolate_one():
            victim = rng.randint(1, 3)
            led = [p for p, (leader, _, _) in partitions(cluster, cluster.node(victim), topic).items()
                   if leader == victim]
            with Partition(cluster, [victim]):
                others = [n for n in cluster.nodes if n is not cluster.node(victim)]
                # The majority fences it and elects other leaders.
                await_partitions(cluster, topic, lambda s: all(s[p][0] not in (victim, -1) for p in led),
                                 among=others, timeout=20)
                # The cut-off node still thinks it leads: what it takes now
                # must never be acknowledged. Sent over the wire to it alone
                # (a client on its side of the cut, or with metadata from
                # before it): a Kafka client would ask another node for
                # metadata and find the new leaders.
                if led:
                    conn = connect(cluster.node(victim).bootstrap, timeout=10)
                    for part in led:
                        v = f"cut-off-{victim}-{part}-{time.time()}"
                        conn.sendall(request(0, 3, produce_v3(topic, part, record_batch([v.encode()])),
                                             correlation_id=part))
                        never_acked.append(v)
                    cut_off.append((conn, led))
            # Healed: the deposed leader answers what it took, never
            # with success (bounded: its replication timeout is 30 s).
            for conn, led in cut_off:
                conn.settimeout(40)
                answers = [parse_produce_v3_response(read_frame(conn)) for _ in led]
                conn.close()
                acked = [(p, base) for _, [(_, p, err, base)] in answers if err == 0]
                assert not acked, f"a cut-off leader acknowledged writes to (partition, offset) {acked}"
            cut_off.clear()

        def one_way():
            # Its packets to the others are lost; theirs still arrive.
            with Partition(cluster, [rng.randint(1, 3)], one_way=True):
                time.sleep(rng.uniform(3, 6))

        def lossy():
            # 30% of the packets between any two nodes lost, at random.
            with Partition(cluster, None, loss=0.3):
                time.sleep(rng.uniform(4, 8))

        def kill_all():
            for n in cluster.nodes:
                n.kill()
            for n in cluster.nodes:
                n.spawn()
            for n in cluster.nodes:
                n.ready.wait(30)

        every = {f.__name__: f for f in (kill_one, pause_one, isolate_one, one_way, lossy, kill_all)}
        # WEIR_NEMESIS_FAULTS names the faults drawn from (default: all).
        only = os.environ.get("WEIR_NEMESIS_FAULTS", ",".join(every))
        faults = [every[name] for name in only.split(",")]
        end = time.time() + duration
        done = []
        while time.time() < end or not done:
            fault = rng.choice(faults)
            fault()
            done.append(fault.__name__)
            await_partitions(cluster, topic, all_in_sync, timeout=60)
            # Acknowledgements resume.
            have = len(live.acked)
            deadline = time.time() + 30
            while len(live.acked) <= have:
                assert time.time() < deadline, \
                    f"no acknowledgement for 30 s after {fault.__name__}: {replication_state(cluster, topic)}"
                time.sleep(0.05)
        print(f"faults: {done}")
        acked = live.stop()
        transformer.stop()
        read = reader.stop()
        read_committed = committed_reader.stop()
        assert reader.errors == [] and committed_reader.errors == [], (reader.errors + committed_reader.errors)[:5]
        final = check_every_acknowledged_record(everyone, topic, parts, acked)
        at = {m.value().decode(): (m.partition(), m.offset()) for m in final}
        dirty = [(v, p, o) for v, p, o in read if at.get(v) != (p, o)]
        assert not dirty, f"records read that are not in the final log there: {dirty[:5]}"
        # Exactly once through the transactional loop, and no aborted or
        # uncommitted output read under read_committed.
        out = check_transformed(everyone, topic, at, sink, parts)
        out_at = {m.value().decode(): (m.partition(), m.offset()) for m in out}
        dirty = [(v, p, o) for v, p, o in read_committed if out_at.get(v) != (p, o)]
        assert not dirty, f"read_committed read what is not committed there: {dirty[:5]}"
        print(f"{transformer.committed} transactions committed ({len(out)} outputs), "
              f"{transformer.restarts} rounds ended by a fault")
        for where in transformer.stuck:
            print(f"a transactional client stuck in a call was left and replaced (librdkafka#5511), at:\n{where}")
        kept = [v for v in never_acked if v in at]
        assert not kept, f"writes a cut-off leader took are in the log: {kept}"
        # Every replica holds the same log end.
        ends = [log_ends(n, topic) for n in cluster.nodes]
        assert ends[0] == ends[1] == ends[2], ends
        print(f"{len(acked)} acknowledged, {len(read)} read live, {len(never_acked)} refused while cut off")
    finally:
        for n in cluster.nodes:
            if n.proc and n.proc.poll() is None:
                resume(n)
        cluster.stop()


def test_a_follower_behind_its_leaders_log_start_starts_over_there(cluster):
    """Kafka's truncateFullyAndStartAt: a follower away while its leader
    deleted (DeleteRecords) past the follower's log end finds its fetch
    out of range, empties its log and copies from the leader's log start,
    then rejoins the ISR with the leader's log."""
    from confluent_kafka import TopicPartition
    create_replicated(cluster.node(1), "gone", partitions=1, rf=3)
    view = await_partitions(cluster, "gone", lambda s: s[0][2] == [1, 2, 3] and s[0][0] > 0)
    leader = view[0][0]
    away = next(n for n in (1, 2, 3) if n != leader)
    others = [n for n in cluster.nodes if n is not cluster.node(away)]
    everyone = ",".join(n.bootstrap for n in cluster.nodes)
    p = Producer({"bootstrap.servers": everyone, "acks": "all"})
    for i in range(100):
        p.produce("gone", value=f"a{i}", partition=0)
    assert p.flush(30) == 0
    cluster.node(away).kill()
    await_partitions(cluster, "gone", lambda s: away not in s[0][2], among=others)
    for i in range(100, 300):
        p.produce("gone", value=f"a{i}", partition=0)
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": cluster.node(leader).bootstrap})
    admin.delete_records([TopicPartition("gone", 0, 250)])[TopicPartition("gone", 0, 250)].result(30)
    cluster.node(away).start()
    await_partitions(cluster, "gone", lambda s: s[0][2] == [1, 2, 3])
    assert log_ends(cluster.node(away), "gone") == log_ends(cluster.node(leader), "gone") == {0: 300}
    assert log_ends(cluster.node(away), "gone", "start") == {0: 250}
    assert cluster.node(away).await_log("(the log ended at 100; the leader's starts there)")


def test_a_coordinators_death_moves_its_groups_and_transactions_with_their_state(cluster):
    """Group and transaction coordinators fail over: their state lives in
    the replicated groups topic, whose partition leaders coordinate. The
    node coordinating a group (and a transactional id) is killed; a member
    of another node finds the new coordinator, which has the group's
    committed offsets, and the transactional id's next producer fences the
    old epoch and commits."""
    from confluent_kafka import Consumer, TopicPartition
    create_replicated(cluster.node(1), "work", partitions=3, rf=3)
    await_partitions(cluster, "work", lambda s: len(s) == 3)
    everyone = ",".join(n.bootstrap for n in cluster.nodes)
    p = Producer({"bootstrap.servers": everyone, "acks": "all"})
    for i in range(300):
        p.produce("work", value=f"w{i}", partition=i % 3)
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": everyone})
    c = Consumer({"bootstrap.servers": everyone, "group.id": "survivors",
                  "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("work", part, 10 + part) for part in range(3)], asynchronous=False)
    c.close()
    coordinator = admin.describe_consumer_groups(["survivors"])["survivors"].result(10).coordinator.id
    # A transactional id coordinated by the same node, mid-life.
    tid = next(f"tx-{i}" for i in range(1000)
               if admin.describe_consumer_groups([f"tx-{i}"])[f"tx-{i}"].result(10).coordinator.id == coordinator)
    old = Producer({"bootstrap.servers": everyone, "transactional.id": tid})
    old.init_transactions(15)
    old.begin_transaction()
    old.produce("work", value=b"committed-before", partition=0)
    old.commit_transaction(15)
    # Every slot's partition in sync before the kill (no acknowledged
    # group write is on one replica only).
    await_partitions(cluster, "__weir_groups", lambda s: all(isr == [1, 2, 3] for _, _, isr in s.values()))
    killed_at = time.time()
    cluster.node(coordinator).kill()
    rest = [n for n in cluster.nodes if n is not cluster.node(coordinator)]
    bootstrap = ",".join(n.bootstrap for n in rest)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "survivors", "enable.auto.commit": False})
    deadline = time.time() + 30
    committed = None
    while time.time() < deadline:
        try:
            committed = c.committed([TopicPartition("work", part) for part in range(3)], timeout=5)
            if all(t.offset >= 0 for t in committed):
                break
        except KafkaException:
            pass
        time.sleep(0.1)
    print(f"the group's offsets were served again {time.time() - killed_at:.2f} s after its coordinator's kill -9")
    c.close()
    assert [t.offset for t in committed] == [10, 11, 12]
    new = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    new.init_transactions(30)
    new.begin_transaction()
    new.produce("work", value=b"committed-after", partition=1)
    new.commit_transaction(30)
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "committed-reader",
                       "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    reader.assign([TopicPartition("work", part, 0) for part in range(3)])
    want, seen = {b"committed-before", b"committed-after"}, set()
    deadline = time.time() + 30
    while not want <= seen and time.time() < deadline:
        m = reader.poll(0.5)
        if m is not None and m.error() is None:
            seen.add(m.value())
    reader.close()
    assert want <= seen, f"read committed: {sorted(v for v in seen if v.startswith(b'committed'))}"


def test_an_unclean_election_waits_for_the_topics_config_and_loses_only_what_it_says(tmp_path):
    """The partition's follower is cut off from its leader by nftables (it
    stays in the quorum, live, but falls out of the ISR) while the leader
    takes more records alone (min.insync.replicas 1); then the leader is
    killed. With only the follower live, the partition waits without a
    leader, as Kafka does while `unclean.leader.election.enable` is false;
    turned on, the follower leads at once, with what it had (the records
    only the dead leader held are lost, as the config says). The old
    leader, back, drops what it alone held (its log diverged in an older
    epoch) and follows."""
    from cluster import Partition
    cluster = Cluster(tmp_path, hosts=["127.0.0.31", "127.0.0.32", "127.0.0.33"], session_ms=1500,
                      extra=["--replica-lag-time-max-ms", "2000"]).start()
    try:
        controller = cluster.await_brokers(3)
        # Leader and follower are the two nodes not the controller, which
        # with the follower keeps the quorum once the leader is killed.
        leader, follower = [n for n in (1, 2, 3) if n != controller]
        third = cluster.node(controller)
        admin = AdminClient({"bootstrap.servers": third.bootstrap})
        admin.create_topics([NewTopic("unclean", 1, replica_assignment=[[leader, follower]],
                                      config={"min.insync.replicas": "1"})])["unclean"].result(30)
        await_partitions(cluster, "unclean", lambda s: s[0][0] == leader and s[0][2] == sorted([leader, follower]))

        def produce(values):
            p = Producer({"bootstrap.servers": third.bootstrap, "acks": "all", "message.timeout.ms": 20000})
            failed = []
            for v in values:
                p.produce("unclean", value=v, on_delivery=lambda err, msg: err and failed.append(err))
            assert p.flush(30) == 0 and failed == [], failed
        before = [f"before-{i}" for i in range(100)]
        produce(before)
        with Partition(cluster, side=[follower], others=[leader]):
            # Its fetches unanswered, the follower leaves the ISR; the
            # leader takes records alone, then dies.
            await_partitions(cluster, "unclean", lambda s: s[0][2] == [leader], among=[third])
            alone = [f"alone-{i}" for i in range(100)]
            produce(alone)
            cluster.node(leader).kill()
            # Its death known, the follower live: no leader, for the topic
            # refuses an unclean election.
            await_partitions(cluster, "unclean", lambda s: s[0][0] == -1, among=[third])
            assert cluster.live_brokers(third)[0] == sorted([controller, follower])
            assert partitions(cluster, third, "unclean")[0][:2] == (-1, sorted([leader, follower]))

        res = ConfigResource(ConfigResource.Type.TOPIC, "unclean", incremental_configs=[
            ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(15)
        await_partitions(cluster, "unclean", lambda s: s[0][0] == follower and s[0][2] == [follower],
                         among=[third, cluster.node(follower)])
        read = sorted(m.value().decode() for m in consume_all(third.bootstrap, "unclean", 1))
        assert read == sorted(before), "the follower leads with what it had, the records it lacked lost"
        after = [f"after-{i}" for i in range(100)]
        produce(after)

        # The old leader, back, truncates what only it held and follows;
        # leading again (the follower killed), it serves the new leader's log.
        cluster.node(leader).start()
        await_partitions(cluster, "unclean", lambda s: s[0][2] == sorted([leader, follower]),
                         among=[third])
        cluster.node(follower).kill()
        await_partitions(cluster, "unclean", lambda s: s[0][0] == leader, among=[third])
        read = [m.value().decode() for m in consume_all(third.bootstrap, "unclean", 1)]
        assert read == before + after
    finally:
        cluster.stop()
