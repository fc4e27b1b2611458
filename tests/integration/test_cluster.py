"""A cluster of three weir nodes (one metadata quorum, partitions dealt over
the nodes): real clients through any bootstrap node, the controller killed
and back, a single node's data directory seeding a cluster, and bad input
on the peer port."""
import json
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster import Cluster, Partition
from conftest import Node, consume_all, create_topic


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path).start()
    yield c
    c.stop()


def leaders(cluster, node, topic):
    md = cluster.metadata(node, topic)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def await_leaders(cluster, node, topic, want, timeout=30):
    """Waits until `node` tells `want` as `topic`'s partition leaders (a
    node back from a fault learns the catalog it missed from the quorum)."""
    deadline = time.time() + timeout
    while (seen := leaders(cluster, node, topic)) != want:
        assert time.time() < deadline, f"{node.bootstrap} tells {seen} for {topic}, not {want}"
        time.sleep(0.05)


def produce(bootstrap, topic, values, **conf):
    """Produces `values` (acks=all) and answers those acknowledged, each
    with its partition."""
    acked, failed = [], []

    def done(err, msg):
        (failed if err else acked).append((msg.value().decode(), msg.partition()) if not err else err)

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", **conf})
    for v in values:
        p.produce(topic, key=v, value=v, on_delivery=done)
        p.poll(0)
    assert p.flush(30) == 0
    assert failed == []
    return acked


def read_as_group(bootstrap, topic, group, count, timeout=60):
    """Reads `count` values of `topic` as a member of `group` (from the
    earliest offset) and commits them; the values read."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    deadline = time.time() + timeout
    while len(got) < count and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
    c.commit(asynchronous=False)
    c.close()
    return got


def test_a_topic_is_dealt_over_the_nodes_and_served_through_any_of_them(cluster):
    from kafka import KafkaProducer
    create_topic(cluster.node(3).bootstrap, "dealt", partitions=12)
    # Every node tells the same leaders; each node leads a third.
    seen = [leaders(cluster, n, "dealt") for n in cluster.nodes]
    assert seen[0] == seen[1] == seen[2]
    per_node = {}
    for leader in seen[0].values():
        per_node[leader] = per_node.get(leader, 0) + 1
    assert per_node == {1: 4, 2: 4, 3: 4}

    # confluent-kafka through each node, kafka-python through node 2.
    acked = []
    for n in cluster.nodes:
        acked += produce(n.bootstrap, "dealt", [f"{n.kafka_port}-{i}" for i in range(300)])
    kp = KafkaProducer(bootstrap_servers=cluster.node(2).bootstrap, acks="all")
    futures = [(f"kp-{i}", kp.send("dealt", key=f"kp-{i}".encode(), value=f"kp-{i}".encode()))
               for i in range(300)]
    for v, f in futures:
        acked.append((v, f.get(timeout=30).partition))
    kp.close()
    assert len({p for _, p in acked}) == 12

    # Every acknowledged record is read back once, where it was acked.
    records = consume_all(cluster.node(1).bootstrap, "dealt", 12)
    read = sorted((m.value().decode(), m.partition()) for m in records)
    assert read == sorted(acked)


def test_a_group_is_coordinated_by_the_node_its_key_belongs_to(cluster):
    create_topic(cluster.node(1).bootstrap, "grouped", partitions=6)
    acked = produce(cluster.node(1).bootstrap, "grouped", [str(i) for i in range(600)])
    admin = AdminClient({"bootstrap.servers": cluster.node(1).bootstrap})
    # A group whose coordinator is not node 1, which the consumer
    # bootstraps from.
    group = None
    for i in range(40):
        g = f"readers-{i}"
        d = admin.describe_consumer_groups([g])[g].result(10)
        if d.coordinator.id != 1:
            group, coordinator = g, d.coordinator.id
            break
    assert group is not None
    got = read_as_group(cluster.node(1).bootstrap, "grouped", group, len(acked))
    assert sorted(got) == sorted(v for v, _ in acked)
    d = admin.describe_consumer_groups([group])[group].result(10)
    assert d.coordinator.id == coordinator
    # The committed offsets are the coordinator's: any node's client reads them.
    c = Consumer({"bootstrap.servers": cluster.node(3).bootstrap, "group.id": group})
    committed = c.committed([TopicPartition("grouped", p) for p in range(6)], timeout=10)
    c.close()
    ends = {}
    for _, p in acked:
        ends[p] = ends.get(p, 0) + 1
    assert {tp.partition: tp.offset for tp in committed} == {p: ends.get(p, 0) for p in range(6)}
    # SQL's system tables on any node show the group where it is
    # coordinated, and each offset's lag against its partition's leader.
    assert same_on_every_node(cluster, f"SELECT group_id, state FROM weir.groups "
                                       f"WHERE group_id = '{group}'") == [
        {"group_id": group, "state": "Empty"}]
    assert same_on_every_node(cluster, f"SELECT partition, committed_offset AS c, "
                                       f"log_end_offset AS e, lag FROM weir.group_offsets "
                                       f"WHERE group_id = '{group}' ORDER BY partition") == [
        {"partition": p, "c": ends[p], "e": ends[p], "lag": 0} for p in sorted(ends)]


def test_the_controller_killed_a_new_one_takes_over_and_the_node_catches_up(cluster):
    controller = cluster.await_brokers(3)
    killed = cluster.node(controller)
    rest = [n for n in cluster.nodes if n is not killed]
    create_topic(rest[0].bootstrap, "before", partitions=6)
    killed.kill()
    began = time.time()
    new = None
    while time.time() - began < 15:
        ids = {cluster.metadata(n).controller_id for n in rest}
        if len(ids) == 1 and ids.pop() not in (-1, controller):
            new = cluster.metadata(rest[0]).controller_id
            break
        time.sleep(0.05)
    assert new is not None, "no new controller within 15 s"
    # Metadata changes keep working with two of three voters.
    create_topic(rest[1].bootstrap, "meanwhile", partitions=4)
    assert set(leaders(cluster, rest[0], "meanwhile")) == {0, 1, 2, 3}
    # The killed node is fenced once silent past its session timeout: left
    # out of DescribeCluster, its partitions without a leader; Metadata
    # still names it (a client that drops a broker it loses from Metadata
    # strands what it had there when the node comes back).
    cluster.await_brokers(2, among=rest)
    md = cluster.metadata(rest[0], "before")
    assert controller in md.brokers
    without = [p for p in md.topics["before"].partitions.values() if p.leader == -1]
    assert without and all(p.replicas == [controller] for p in without)
    # Partitions on the living nodes take records meanwhile.
    living = [p for p, leader in leaders(cluster, rest[0], "meanwhile").items() if leader > 0]
    p = Producer({"bootstrap.servers": rest[0].bootstrap, "acks": "all"})
    for part in living:
        p.produce("meanwhile", value=b"x", partition=part)
    assert p.flush(30) == 0

    killed.start()
    cluster.await_brokers(3)
    # It learnt of the topic made while it was down, and serves its part.
    await_leaders(cluster, killed, "meanwhile", leaders(cluster, rest[0], "meanwhile"))
    acked = produce(killed.bootstrap, "meanwhile", [str(i) for i in range(100)])
    assert len(acked) == 100


def test_a_single_nodes_data_becomes_node_1_of_a_cluster(tmp_path):
    single = Node(tmp_path / "node1", cores=1).start()
    create_topic(single.bootstrap, "kept", partitions=3)
    acked = produce(single.bootstrap, "kept", [str(i) for i in range(90)])
    c = Consumer({"bootstrap.servers": single.bootstrap, "group.id": "old-readers",
                  "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("kept", p, 5) for p in range(3)], asynchronous=False)
    c.close()
    single.stop()

    cluster = Cluster(tmp_path)
    # Only the first voter brings a single node's data: as node 2 it is
    # refused, saying why, and nothing there is touched.
    as_two = Node(single.data_dir, cores=1, extra=["--node-id", "2", "--voters", cluster.voters,
                                                   "--cpus", "none"]).spawn()
    assert as_two.proc.wait(30) != 0
    assert as_two.await_log("only the first voter (node 1) brings its data")
    cluster.nodes[0].data_dir = single.data_dir
    cluster.start()
    try:
        for n in cluster.nodes:
            assert leaders(cluster, n, "kept") == {0: 1, 1: 1, 2: 1}
        records = consume_all(cluster.node(2).bootstrap, "kept", 3)
        assert sorted(m.value().decode() for m in records) == sorted(v for v, _ in acked)
        c = Consumer({"bootstrap.servers": cluster.node(3).bootstrap, "group.id": "old-readers"})
        committed = c.committed([TopicPartition("kept", p) for p in range(3)], timeout=10)
        c.close()
        assert [tp.offset for tp in committed] == [5, 5, 5]
        # New partitions go to the nodes leading fewest: node 1 leads 3.
        create_topic(cluster.node(2).bootstrap, "new", partitions=3)
        assert set(leaders(cluster, cluster.node(1), "new").values()) == {2, 3}
        create_topic(cluster.node(3).bootstrap, "newer", partitions=6)
        led = {}
        for topic in ("kept", "new", "newer"):
            for leader in leaders(cluster, cluster.node(1), topic).values():
                led[leader] = led.get(leader, 0) + 1
        assert led == {1: 4, 2: 4, 3: 4}
    finally:
        cluster.stop()


def peer_call(port, body, refused=True):
    """One frame to a node's peer port; the answer frame as JSON, or None
    if the node closed the connection without one. A refused call's
    connection is closed after the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">I", len(body)) + body)
        head = s.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return None
        n = struct.unpack(">I", head)[0]
        data = b""
        while len(data) < n:
            chunk = s.recv(n - len(data))
            assert chunk
            data += chunk
        if refused:
            assert s.recv(1) == b""
        return json.loads(data)


def test_bad_input_on_the_peer_port_is_refused_and_logged(cluster):
    n = cluster.node(2)
    port = cluster.peer_ports[1]
    garbage = peer_call(port, b"\x00\x01garbage")
    assert "not a peer request" in garbage["Refused"]
    stranger = peer_call(port, json.dumps({"from": 99, "call": "Heartbeat"}).encode())
    assert "node 99 is not a member" in stranger["Refused"]
    # A frame longer than any taken is refused before it is read.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">I", 0xFFFFFFFF))
        head = s.recv(4, socket.MSG_WAITALL)
        answer = json.loads(s.recv(struct.unpack(">I", head)[0], socket.MSG_WAITALL))
    assert "longer than" in answer["Refused"]
    # Entries from a leader of a term long past are refused with the newer vote.
    stale = {"from": 1, "call": {"Append": {
        "vote": {"leader_id": {"term": 0, "node_id": 1}, "committed": True},
        "prev_log_id": None, "entries": [], "leader_commit": None}}}
    reply = peer_call(port, json.dumps(stale).encode(), refused=False)
    assert "HigherVote" in json.dumps(reply["Append"]["Ok"])
    assert n.await_log("refused entries from node 1")
    assert n.await_log("node 99 is not a member")
    # Nothing was lost: the node still serves, the cluster still changes.
    create_topic(n.bootstrap, "still", partitions=3)
    assert set(leaders(cluster, n, "still")) == {0, 1, 2}


def test_users_and_grants_made_on_one_node_sign_in_on_another(tmp_path):
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    from test_security import ADMIN, TOKENS, sasl, sql
    cluster = Cluster(tmp_path, env=TOKENS)
    admin_conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                  "sasl.username": "admin", "sasl.password": ADMIN}
    cluster.start(**admin_conf)
    try:
        one, two, three = cluster.nodes
        admin3 = AdminClient(sasl(three, "admin", ADMIN))
        admin3.create_topics([NewTopic("billing", 6, 1)])["billing"].result(15)
        assert sql(one, "CREATE USER erin WITH PASSWORD 'unused'", token=ADMIN)[0] == 200
        assert sql(one, 'GRANT INSERT ON "billing" TO erin', token=ADMIN)[0] == 200
        up = UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                          b"s3cret")
        admin2 = AdminClient(sasl(two, "admin", ADMIN))
        for f in admin2.alter_user_scram_credentials([up]).values():
            assert f.result(15) is None
        # Erin signs in on node 3 and on every leader of the topic's
        # partitions (all three nodes), and writes to each.
        acked = produce(three.bootstrap, "billing", [str(i) for i in range(60)],
                        **{k: v for k, v in sasl(three, "erin", "s3cret", "SCRAM-SHA-256").items()
                           if k != "bootstrap.servers"})
        assert {p for _, p in acked} == set(range(6))
        # Erin may not read: refused on whichever node is asked.
        c = Consumer({**sasl(two, "erin", "s3cret", "SCRAM-SHA-256"), "group.id": "erin"})
        c.assign([TopicPartition("billing", 0, 0)])
        m = c.poll(10)
        c.close()
        assert m is not None and m.error() is not None
        assert m.error().code() in (29, 30), m.error()  # TOPIC_/GROUP_AUTHORIZATION_FAILED
    finally:
        cluster.stop()


def test_the_controller_paused_a_new_one_takes_over_and_it_rejoins(cluster):
    import signal
    controller = cluster.await_brokers(3)
    paused = cluster.node(controller)
    rest = [n for n in cluster.nodes if n is not paused]
    paused.proc.send_signal(signal.SIGSTOP)
    try:
        began = time.time()
        new = None
        while time.time() - began < 15:
            ids = {cluster.metadata(n).controller_id for n in rest}
            if len(ids) == 1 and (i := ids.pop()) not in (-1, controller):
                new = i
                break
            time.sleep(0.05)
        assert new is not None, "no new controller within 15 s"
        create_topic(rest[0].bootstrap, "while-paused", partitions=2)
    finally:
        paused.proc.send_signal(signal.SIGCONT)
    # Back, the old controller follows the new one and learns what it missed.
    assert cluster.await_brokers(3) == new
    await_leaders(cluster, paused, "while-paused", leaders(cluster, rest[0], "while-paused"))


def test_a_controller_stopped_briefly_fences_no_one_for_its_own_silence(tmp_path):
    """A controller stopped for longer than half a session, but too
    briefly for the others to elect a new one, finds every other node
    unheard when it resumes: that silence is its own, and it fences no one
    (fencing them would move every partition to it alone)."""
    import signal
    c = Cluster(tmp_path, session_ms=500).start()
    try:
        controller = c.await_brokers(3)
        n = c.node(controller)
        before = len(n.log)
        n.proc.send_signal(signal.SIGSTOP)
        # The fault's length (under the 1 s election timeout), not a wait.
        time.sleep(0.7)
        n.proc.send_signal(signal.SIGCONT)
        assert n.await_log("every node's session starts again", timeout=10), "".join(n.log[before:])
        assert c.await_brokers(3) == controller
        fenced = [line for line in n.log[before:] if "fencing node" in line]
        assert not fenced, fenced
    finally:
        c.stop()


def registry(node, method, path, body=None):
    import urllib.request
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(node.http + path, data=data, method=method,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with node.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_the_schema_registry_answers_on_every_node(cluster):
    # Each node registers a subject: the first makes the registry's topic
    # (placed on some node), and every node's request is answered there.
    ids = {}
    for n in cluster.nodes:
        schema = {"type": "record", "name": f"r{n.kafka_port}", "fields": [{"name": "a", "type": "int"}]}
        ids[n.kafka_port] = registry(n, "POST", f"/subjects/s-{n.kafka_port}/versions",
                                     {"schema": json.dumps(schema)})["id"]
    assert sorted(ids.values()) == [1, 2, 3]
    for n in cluster.nodes:
        assert sorted(registry(n, "GET", "/subjects")) == sorted(f"s-{p}" for p in ids)
        for port, sid in ids.items():
            assert f"r{port}" in registry(n, "GET", f"/schemas/ids/{sid}")["schema"]


def sql(node, text):
    """POST /sql on `node`: (status, parsed JSON body)."""
    import urllib.error
    import urllib.request
    req = urllib.request.Request(node.http + "/sql", data=text.encode(), method="POST")
    try:
        with node.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def rows(node, text):
    status, body = sql(node, text)
    assert status == 200, (node.bootstrap, text, body)
    return body


def same_on_every_node(cluster, text):
    """The rows `text` answers, the same on every node."""
    answers = [rows(n, text) for n in cluster.nodes]
    for n, a in zip(cluster.nodes[1:], answers[1:]):
        assert a == answers[0], (text, n.bootstrap, a, answers[0])
    return answers[0]


def test_sql_answers_for_the_whole_cluster_on_every_node(cluster):
    one, two, three = cluster.nodes
    # A table of 6 partitions made through node 1 is dealt over the three.
    rows(one, "CREATE TABLE events (id BIGINT, kind VARCHAR) WITH (partitions = 6)")
    await_leaders(cluster, three, "events", leaders(cluster, one, "events"))
    assert set(leaders(cluster, one, "events").values()) == {1, 2, 3}
    # INSERT through node 2 is carried to each partition's leader.
    values = ", ".join(f"({i}, '{'even' if i % 2 == 0 else 'odd'}')" for i in range(60))
    placed = rows(two, f"INSERT INTO events VALUES {values}")
    assert len(placed) == 60 and {r["_partition"] for r in placed} == set(range(6))
    # A Kafka producer's records are rows too.
    produce(three.bootstrap, "events", [json.dumps({"id": 100 + i, "kind": "kafka"}) for i in range(30)])

    everything = [{"id": i, "kind": "even" if i % 2 == 0 else "odd"} for i in range(60)] + [
        {"id": 100 + i, "kind": "kafka"} for i in range(30)]
    assert same_on_every_node(cluster, "SELECT id, kind FROM events ORDER BY id") == everything
    assert same_on_every_node(cluster, "SELECT count(*) AS n, sum(id) AS s FROM events") == [
        {"n": 90, "s": sum(r["id"] for r in everything)}]
    assert same_on_every_node(cluster, "SELECT kind, count(*) AS n FROM events GROUP BY kind "
                                       "ORDER BY kind") == [
        {"kind": "even", "n": 30}, {"kind": "kafka", "n": 30}, {"kind": "odd", "n": 30}]
    assert same_on_every_node(cluster, "SELECT id FROM events WHERE kind = 'odd' "
                                       "ORDER BY id DESC LIMIT 3") == [{"id": 59}, {"id": 57}, {"id": 55}]
    # A topic without a table's schema reads as its records, each where
    # it was acknowledged.
    create_topic(one.bootstrap, "raw", partitions=6)
    acked = produce(two.bootstrap, "raw", [f"r{i}" for i in range(120)])
    per_partition = {}
    for _, partition in acked:
        per_partition[partition] = per_partition.get(partition, 0) + 1
    assert same_on_every_node(cluster, "SELECT _partition AS p, count(*) AS n FROM raw "
                                        "GROUP BY _partition ORDER BY _partition") == [
        {"p": p, "n": n} for p, n in sorted(per_partition.items())]
    assert same_on_every_node(cluster, "SELECT _value AS v FROM raw WHERE _key = 'r7'") == [{"v": "r7"}]

    # A keyed table: rows written through every node, a key written again
    # by a Kafka producer into another partition than its home (newer, so
    # it wins wherever its copies are), a DELETE through node 3.
    rows(one, "CREATE TABLE accounts (id BIGINT PRIMARY KEY, owner VARCHAR) WITH (partitions = 6)")
    await_leaders(cluster, three, "accounts", leaders(cluster, one, "accounts"))
    for i, n in enumerate(cluster.nodes):
        rows(n, "INSERT INTO accounts VALUES " + ", ".join(
            f"({k}, 'v{i}')" for k in range(20)))
    p = Producer({"bootstrap.servers": two.bootstrap, "acks": "all"})
    later = int(time.time() * 1000) + 60_000
    for k in range(5):
        # Partition (k + 3) % 6 is not k's home for most k; either way
        # the newest write is the row, and the old copy is hidden.
        p.produce("accounts", key=b"%d" % k, value=json.dumps({"id": k, "owner": "kafka"}).encode(),
                  partition=(k + 3) % 6, timestamp=later)
    assert p.flush(30) == 0
    rows(three, "DELETE FROM accounts WHERE id IN (18, 19)")
    want = [{"id": k, "owner": "kafka" if k < 5 else "v2"} for k in range(18)]
    assert same_on_every_node(cluster, "SELECT id, owner FROM accounts ORDER BY id") == want
    assert same_on_every_node(cluster, "SELECT owner, count(*) AS n FROM accounts GROUP BY owner "
                                       "ORDER BY owner") == [{"owner": "kafka", "n": 5},
                                                             {"owner": "v2", "n": 13}]

    # An Avro table on nodes that do not lead the registry's topic: its
    # writer schemas come from the registry's node.
    trade = {"type": "record", "name": "trade", "fields": [
        {"name": "id", "type": "long"}, {"name": "symbol", "type": "string"}]}
    registry(three, "POST", "/subjects/trades-value/versions", {"schema": json.dumps(trade)})
    rows(two, "CREATE TABLE trades WITH (format = 'avro', subject = 'trades-value', partitions = 3)")
    await_leaders(cluster, one, "trades", leaders(cluster, two, "trades"))
    for i, n in enumerate(cluster.nodes):
        rows(n, f"INSERT INTO trades VALUES ({i}, 'S{i}'), ({10 + i}, 'T{i}')")
    assert same_on_every_node(cluster, "SELECT id, symbol FROM trades ORDER BY id") == [
        {"id": i, "symbol": f"S{i}"} for i in range(3)] + [
        {"id": 10 + i, "symbol": f"T{i}"} for i in range(3)]


def test_a_node_that_is_not_a_voter_joins_and_takes_partitions(cluster, tmp_path):
    from conftest import free_port
    fourth = Node(tmp_path / "node4", cores=1,
                  extra=["--node-id", "4", "--join", f"127.0.0.1:{cluster.peer_ports[0]}",
                         "--peer-addr", f"127.0.0.1:{free_port()}", "--cpus", "none"])
    cluster.nodes.append(fourth)
    try:
        fourth.start()
        cluster.await_brokers(4)
        create_topic(cluster.node(2).bootstrap, "four", partitions=8)
        assert sorted(set(leaders(cluster, fourth, "four").values())) == [1, 2, 3, 4]
        acked = produce(fourth.bootstrap, "four", [str(i) for i in range(80)])
        assert {p for _, p in acked} == set(range(8))
        # It follows the quorum without a vote: an observer.
        from confluent_kafka.admin import AdminClient as Admin
        assert len(Admin({"bootstrap.servers": fourth.bootstrap}).list_topics(timeout=10).brokers) == 4
    finally:
        fourth.kill()


def coordinated_by(admin, prefix, want):
    """A group id (or transactional id: they share the group slots) whose
    coordinator is a node `want` accepts."""
    return next(g for g in (f"{prefix}-{i}" for i in range(200))
                if want(admin.describe_consumer_groups([g])[g].result(10).coordinator.id))


def read_committed(bootstrap, topic, partitions, timeout=30):
    """Every committed value of `topic`, read_committed to each partition's
    end (librdkafka's end-of-partition event: the last stable offset)."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "committed-reader",
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values, ended = [], set()
    deadline = time.time() + timeout
    while len(ended) < partitions and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error() is not None:
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            ended.add(m.partition())
        else:
            values.append(m.value().decode())
    c.close()
    assert len(ended) == partitions, f"partitions {set(range(partitions)) - ended} did not end"
    return values


def test_a_transaction_spanning_nodes_commits_and_aborts_on_every_node(cluster):
    """Consume-transform-produce as Kafka Streams' exactly-once does it: the
    transaction's coordinator is node 1, its output partitions are led by
    all three nodes and its input group is coordinated by another node; the
    markers and the offsets reach them (Kafka's WriteTxnMarkers)."""
    one = cluster.node(1)
    create_topic(one.bootstrap, "tx-in", partitions=1)
    create_topic(one.bootstrap, "tx", partitions=6)
    await_leaders(cluster, cluster.node(3), "tx", leaders(cluster, one, "tx"))
    assert set(leaders(cluster, one, "tx").values()) == {1, 2, 3}
    produce(one.bootstrap, "tx-in", [f"in-{i}" for i in range(20)])
    admin = AdminClient({"bootstrap.servers": one.bootstrap})
    tid = coordinated_by(admin, "tx", lambda n: n == 1)
    group = coordinated_by(admin, "tx-readers", lambda n: n != 1)

    consumer = Consumer({"bootstrap.servers": cluster.node(2).bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("tx-in", 0, 0)])
    producer = Producer({"bootstrap.servers": one.bootstrap, "transactional.id": tid})
    producer.init_transactions(15)

    def transform(count, tag, commit):
        read = []
        deadline = time.time() + 30
        while len(read) < count and time.time() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                read.append(m)
        assert len(read) == count
        producer.begin_transaction()
        for m in read:
            for p in range(6):
                producer.produce("tx", value=f"{tag}:{m.value().decode()}".encode(), partition=p)
        producer.send_offsets_to_transaction(
            [TopicPartition("tx-in", 0, read[-1].offset() + 1)],
            consumer.consumer_group_metadata(), 15)
        if commit:
            producer.commit_transaction(15)
        else:
            producer.abort_transaction(15)
            consumer.seek(TopicPartition("tx-in", 0, read[0].offset()))

    transform(10, "aborted", commit=False)
    transform(10, "committed", commit=True)
    transform(10, "last", commit=True)
    consumer.close()

    # Every partition, read_committed through each node: the committed
    # transactions' records, none of the aborted one's.
    want = sorted(f"{tag}:in-{i}" for tag, r in (("committed", range(10)), ("last", range(10, 20)))
                  for i in r) * 6
    for n in cluster.nodes:
        assert sorted(read_committed(n.bootstrap, "tx", 6)) == sorted(want)
    # The group's offset is the committed transactions' last, told by
    # the node coordinating it to a client of any node.
    c = Consumer({"bootstrap.servers": cluster.node(3).bootstrap, "group.id": group})
    assert c.committed([TopicPartition("tx-in", 0)], timeout=10)[0].offset == 20
    c.close()


def test_with_shard_ports_each_nodes_shards_are_brokers(tmp_path):
    """`--shard-ports` in a cluster: node N's shard s is broker N×1000000+s
    on its own port; partitions are led by the shard brokers of every
    node, and clients reach each shard directly (no hop between shards)."""
    from test_shard_ports import free_port_range, hops
    c = Cluster(tmp_path)
    bases = {}
    for i, n in enumerate(c.nodes):
        taken = set(c.ports()) | {b + s for b in bases.values() for s in range(2)}
        bases[i + 1] = base = free_port_range(2, avoid=taken)
        n.cores = 2
        n.extra = [*n.extra, "--shard-ports", str(base)]
    c.start(brokers=6)
    try:
        want = {node * 1_000_000 + s: ("127.0.0.1", base + s) for node, base in bases.items()
                for s in range(2)}
        for n in c.nodes:
            md = c.metadata(n)
            assert {b.id: (b.host, b.port) for b in md.brokers.values()} == want
            assert md.controller_id in (1_000_000, 2_000_000, 3_000_000)
        create_topic(c.node(1).bootstrap, "sharded", partitions=12)
        await_leaders(c, c.node(3), "sharded", leaders(c, c.node(1), "sharded"))
        led = leaders(c, c.node(2), "sharded")
        assert set(led.values()) == set(want), led

        # The group's coordinator: a shard broker of the node its slot is
        # dealt to (the first FindCoordinator deals the slots, a catalog
        # change that each node's shard 0 installs on its other shard).
        group = "sharded-readers"
        admin = AdminClient({"bootstrap.servers": c.node(1).bootstrap})
        coordinator = admin.describe_consumer_groups([group])[group].result(10).coordinator
        assert coordinator.id in want and (coordinator.host, coordinator.port) == want[coordinator.id]

        before = [hops(n) for n in c.nodes]
        acked = produce(c.node(2).bootstrap, "sharded", [f"s{i}" for i in range(600)])
        assert {p for _, p in acked} == set(range(12))
        got = read_as_group(c.node(3).bootstrap, "sharded", group, len(acked))
        assert sorted(got) == sorted(v for v, _ in acked)
        # Produce, fetch and the group's requests each went to the shard
        # (of the node) that serves them.
        assert [hops(n) for n in c.nodes] == before

        # A transaction over every shard broker's partitions, its offsets
        # for a group another node coordinates: markers and offsets reach
        # the nodes (not the brokers' ids) that have them.
        tid = coordinated_by(admin, "sharded-tx", lambda b: b // 1_000_000 == 1)
        tx_group = coordinated_by(admin, "sharded-tx-readers", lambda b: b // 1_000_000 != 1)
        producer = Producer({"bootstrap.servers": c.node(1).bootstrap, "transactional.id": tid})
        producer.init_transactions(15)
        producer.begin_transaction()
        for p in range(12):
            producer.produce("sharded", value=f"tx-{p}".encode(), partition=p)
        reader = Consumer({"bootstrap.servers": c.node(2).bootstrap, "group.id": tx_group})
        producer.send_offsets_to_transaction([TopicPartition("sharded", 0, 7)],
                                             reader.consumer_group_metadata(), 15)
        producer.commit_transaction(15)
        values = read_committed(c.node(3).bootstrap, "sharded", 12)
        assert sorted(v for v in values if v.startswith("tx-")) == sorted(f"tx-{p}" for p in range(12))
        assert reader.committed([TopicPartition("sharded", 0)], timeout=10)[0].offset == 7
        reader.close()
    finally:
        c.stop()


def test_a_replication_factor_above_the_live_nodes_is_refused(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.node(1).bootstrap})
    f = admin.create_topics([NewTopic("too-many", 1, 4)])["too-many"]
    with pytest.raises(KafkaException) as e:
        f.result(15)
    assert e.value.args[0].code() == 38  # INVALID_REPLICATION_FACTOR
    assert "live node" in e.value.args[0].str()


class LiveProducer:
    """Produces (acks=all, idempotent) from a thread of its own until
    stopped, keeping what was acknowledged: a client that stays across the
    faults, as users' do."""

    def __init__(self, bootstrap, topic):
        import threading
        self.acked, self.failed = [], []
        self.stopping = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5})
        self.thread = threading.Thread(target=self.run, args=(topic,), daemon=True)
        self.thread.start()

    def run(self, topic):
        i = 0
        while not self.stopping.is_set():
            v = f"live-{i}"
            self.producer.produce(topic, value=v, on_delivery=self.done)
            self.producer.poll(0.005)
            i += 1

    def done(self, err, msg):
        if err:
            self.failed.append(err)
        else:
            self.acked.append(msg.value().decode())

    def stop(self):
        self.stopping.set()
        self.thread.join(10)
        assert self.producer.flush(60) == 0
        return self.acked


def test_a_controller_cut_off_from_the_others_loses_nothing_acknowledged(tmp_path):
    """Jepsen's way: the controller is cut off from both other nodes (an
    nftables partition) while a producer writes; the majority elects a new
    controller and keeps changing metadata; the cut-off node is fenced.
    Healed, all agree again, and every record and every topic acknowledged
    is there."""
    cluster = Cluster(tmp_path, hosts=["127.0.0.11", "127.0.0.12", "127.0.0.13"]).start()
    try:
        create_topic(cluster.node(1).bootstrap, "jepsen", partitions=6)
        controller = cluster.await_brokers(3)
        rest = [n for n in cluster.nodes if n is not cluster.node(controller)]
        live = LiveProducer(rest[0].bootstrap, "jepsen")
        with Partition(cluster, [controller]) as cut:
            # The majority elects another controller and fences the cut-off
            # node (its heartbeats no longer arrive).
            new = cluster.await_brokers(2, among=rest, timeout=20)
            assert new != controller
            create_topic(rest[1].bootstrap, "during-the-cut", partitions=3)
            assert set(leaders(cluster, rest[0], "during-the-cut").values()) <= {n for n in (1, 2, 3)
                                                                               if n != controller}
            cut.heal()
        # Healed: everyone names the same controller and all three brokers,
        # and the cut-off node learnt what was made meanwhile.
        cluster.await_brokers(3, timeout=30)
        back = cluster.node(controller)
        await_leaders(cluster, back, "during-the-cut", leaders(cluster, rest[0], "during-the-cut"))
        acked = live.stop()
        assert len(acked) > 0 and live.failed == []
        read = [m.value().decode() for m in consume_all(rest[1].bootstrap, "jepsen", 6, timeout=60)]
        missing = set(acked) - set(read)
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
        # Idempotent: none written twice.
        assert len(read) == len(set(read))
    finally:
        cluster.stop()


def test_each_node_holds_topics_to_its_own_defaults(tmp_path):
    """A topic's configs are kept once for the cluster, but a default from
    a node's flags or set on its own BROKER resource is that node's, as in
    Kafka: each node follows its own in the catalog it installs, so the
    partitions it leads take records as its defaults say."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    cluster = Cluster(tmp_path)
    cluster.node(3).extra += ["--default-max-message-bytes", "20000"]
    cluster.start()
    try:
        create_topic(cluster.node(1).bootstrap, "sized", partitions=6)
        led = leaders(cluster, cluster.node(1), "sized")
        for n in cluster.nodes:
            await_leaders(cluster, n, "sized", led)
        by_node = {n: min(p for p, leader in led.items() if leader == n) for n in (1, 2, 3)}

        def taken(size):
            """Per node, whether a record of `size` bytes is taken by the
            partition it leads (each sent on its own, acks=all)."""
            out = {}
            p = Producer({"bootstrap.servers": cluster.node(1).bootstrap, "acks": "all",
                          "message.max.bytes": 1 << 20})
            for n, partition in by_node.items():
                result = []
                p.produce("sized", value=b"x" * size, partition=partition,
                          on_delivery=lambda err, msg: result.append(err))
                assert p.flush(30) == 0
                err = result[0]
                assert err is None or err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
                out[n] = err is None
            return out

        # Node 3's flag holds on its partitions only.
        assert taken(30_000) == {1: True, 2: True, 3: False}
        assert taken(15_000) == {1: True, 2: True, 3: True}
        # Set at run time on node 1's resource: node 1's own default.
        # Node 1 commits the catalog with its values; nodes 2 and 3 keep
        # theirs as they install it.
        admin = AdminClient({"bootstrap.servers": cluster.node(2).bootstrap})
        res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
            ConfigEntry("message.max.bytes", "25000", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(15)
        deadline = time.time() + 30
        while (seen := taken(30_000)) != {1: False, 2: True, 3: False}:
            assert time.time() < deadline, f"30,000-byte records taken per node: {seen}"
            time.sleep(0.05)
        assert taken(22_000) == {1: True, 2: True, 3: False}
    finally:
        cluster.stop()
