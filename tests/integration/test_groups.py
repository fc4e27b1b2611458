"""Consumer groups against a running node: seed 000's `ticks` example,
rebalances when members join, leave or go quiet, static membership, the
admin APIs, and the commit rules on the wire."""
import itertools
import json
import signal
import struct
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import rawkafka
from conftest import create_topic

# Short sessions so a quiet member is noticed quickly (the node's minimum is
# lowered to allow them); heartbeats often enough for them.
FAST = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 300}
FAST_NODE = ["--group-min-session-timeout-ms", "1000"]


def produce_numbers(bootstrap, topic, numbers, partitions=None):
    p = Producer({"bootstrap.servers": bootstrap})
    for n in numbers:
        kw = {} if partitions is None else {"partition": n % partitions}
        p.produce(topic, json.dumps({"n": n}).encode(), **kw)
    assert p.flush(10) == 0


def read(bootstrap, topic, group, count):
    """Seed 000's `read`, as written there."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen, deadline = [], time.time() + 20
    while len(seen) < count and time.time() < deadline:
        message = consumer.poll(1.0)
        if message is not None and not message.error():
            seen.append(json.loads(message.value())["n"])
    consumer.commit(asynchronous=False)
    consumer.close()
    return seen


def test_ticks_example_and_resume_after_restart(make_node):
    node = make_node()  # Kafka's defaults, including the 3 s initial delay
    create_topic(node.bootstrap, "ticks")
    produce_numbers(node.bootstrap, "ticks", range(5))
    assert read(node.bootstrap, "ticks", "reports", 3) == [0, 1, 2]
    assert read(node.bootstrap, "ticks", "reports", 2) == [3, 4]
    assert read(node.bootstrap, "ticks", "audit", 5) == [0, 1, 2, 3, 4]

    node.restart()
    produce_numbers(node.bootstrap, "ticks", range(5, 7))
    assert read(node.bootstrap, "ticks", "reports", 2) == [5, 6]
    assert read(node.bootstrap, "ticks", "audit", 2) == [5, 6]


def test_offsets_survive_kill_9(make_node):
    node = make_node()
    create_topic(node.bootstrap, "ticks")
    produce_numbers(node.bootstrap, "ticks", range(10))
    assert read(node.bootstrap, "ticks", "g", 4) == [0, 1, 2, 3]
    node.kill()
    node.start()
    assert read(node.bootstrap, "ticks", "g", 6) == [4, 5, 6, 7, 8, 9]


class Member:
    """A confluent-kafka group member that records its assignment."""

    def __init__(self, bootstrap, group, topic, **conf):
        self.assigned = set()
        self.assignments = 0
        self.revocations = 0
        self.values = []
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           **FAST, **conf})
        self.c.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke)

    def _assign(self, _c, parts):
        self.assignments += 1
        self.assigned = {p.partition for p in parts}

    def _revoke(self, _c, parts):
        self.revocations += 1
        self.assigned = set()

    def poll(self):
        m = self.c.poll(0.05)
        if m is not None and m.error() is None:
            self.values.append((m.partition(), json.loads(m.value())["n"]))


def poll_until(members, done, timeout=30, what="the group to settle"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for m in members:
            m.poll()
        if done():
            return
    raise AssertionError(f"timed out waiting for {what}: "
                         + ", ".join(str(sorted(m.assigned)) for m in members))


MEMBER_SCRIPT = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "session.timeout.ms": 2000, "heartbeat.interval.ms": 300})
def assigned(_c, parts):
    print("assigned", sorted(p.partition for p in parts), flush=True)
c.subscribe([sys.argv[3]], on_assign=assigned)
while True:
    c.poll(0.1)
"""


def test_two_members_split_partitions_and_one_takes_over(make_node):
    node = make_node(extra=FAST_NODE)
    create_topic(node.bootstrap, "work", partitions=4)
    produce_numbers(node.bootstrap, "work", range(40), partitions=4)

    start = time.time()
    a = Member(node.bootstrap, "workers", "work")
    b = Member(node.bootstrap, "workers", "work")
    poll_until([a, b], lambda: len(a.assigned) == 2 and len(b.assigned) == 2
               and len(a.values) + len(b.values) == 40)
    stable = time.time() - start
    assert a.assigned | b.assigned == {0, 1, 2, 3}
    # Each read exactly the records of its own partitions.
    for m in (a, b):
        assert {p for p, _ in m.values} == m.assigned
    assert sorted(n for _, n in a.values + b.values) == list(range(40))

    # b leaves (LeaveGroup on close): a takes all four.
    start = time.time()
    b.c.close()
    poll_until([a], lambda: a.assigned == {0, 1, 2, 3}, what="a to take all partitions")
    after_leave = time.time() - start

    # A third member joins in another process, then dies without leaving:
    # its session runs out and a takes everything again.
    proc = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, node.bootstrap, "workers", "work"],
                            stdout=subprocess.PIPE, text=True)
    try:
        seen = []
        deadline = time.time() + 30
        while time.time() < deadline and len(a.assigned) != 2:
            a.poll()
        assert len(a.assigned) == 2, a.assigned
        # A line that never comes must not hang the suite: killing the
        # member ends its output, and the assertion below fails.
        watchdog = threading.Timer(30, proc.kill)
        watchdog.start()
        line = proc.stdout.readline()
        while line and "[]" in line:  # an empty first assignment, if any
            line = proc.stdout.readline()
        watchdog.cancel()
        seen.append(line)
        assert line.startswith("assigned"), seen
        assert set(json.loads(line.split(" ", 1)[1])) == {0, 1, 2, 3} - a.assigned
        start = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        poll_until([a], lambda: a.assigned == {0, 1, 2, 3}, what="a to take over after a crash")
        after_crash = time.time() - start
    finally:
        if proc.poll() is None:
            proc.kill()
    a.c.close()
    print(f"\ntwo members stable after {stable:.2f} s; one takes all {after_leave:.2f} s after "
          f"the other leaves, {after_crash:.2f} s after it dies (2 s session)")


def test_static_member_restart_keeps_its_partitions(make_node):
    node = make_node(extra=FAST_NODE)
    create_topic(node.bootstrap, "work", partitions=4)
    a = Member(node.bootstrap, "static", "work", **{"group.instance.id": "a", "session.timeout.ms": 10000})
    b = Member(node.bootstrap, "static", "work", **{"group.instance.id": "b", "session.timeout.ms": 10000})
    poll_until([a, b], lambda: len(a.assigned) == 2 and len(b.assigned) == 2)
    before = set(a.assigned)
    b_assignments = b.assignments

    # A static member does not leave when it closes; restarted with the same
    # instance id within its session it gets its partitions back, and the
    # other member sees no rebalance.
    a.c.close()
    a2 = Member(node.bootstrap, "static", "work", **{"group.instance.id": "a", "session.timeout.ms": 10000})
    poll_until([a2, b], lambda: a2.assigned == before, what="a to get its partitions back")
    deadline = time.time() + 2
    while time.time() < deadline:  # give a rebalance, were there one, time to show
        b.poll()
        a2.poll()
    assert b.assignments == b_assignments and b.revocations == 0, "b was not disturbed"
    assert a2.assigned == before

    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    desc = admin.describe_consumer_groups(["static"])["static"].result(10)
    assert desc.state == ConsumerGroupState.STABLE
    assert sorted(m.group_instance_id for m in desc.members) == ["a", "b"]
    a2.c.close()
    b.c.close()


def sql_rows(node, text):
    """POST /sql, answered 200: its rows."""
    import urllib.request
    req = urllib.request.Request(node.http + "/sql", data=text.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
        return json.loads(r.read())


def test_groups_and_their_lag_are_tables(make_node):
    """weir.groups and weir.group_offsets: read with SELECT, lag moving as
    records arrive and as the group commits."""
    node = make_node(extra=FAST_NODE)
    create_topic(node.bootstrap, "ticks", partitions=2)
    produce_numbers(node.bootstrap, "ticks", range(10), partitions=2)
    assert len(read(node.bootstrap, "ticks", "done", 10)) == 10

    def lag():
        return sql_rows(node, "SELECT partition, committed_offset, log_end_offset, lag FROM weir.group_offsets "
                              "WHERE group_id = 'done' AND topic = 'ticks' ORDER BY partition")
    assert lag() == [{"partition": p, "committed_offset": 5, "log_end_offset": 5, "lag": 0} for p in (0, 1)]
    produce_numbers(node.bootstrap, "ticks", range(10, 16), partitions=2)
    assert lag() == [{"partition": p, "committed_offset": 5, "log_end_offset": 8, "lag": 3} for p in (0, 1)]
    assert sql_rows(node, "SELECT group_id, sum(lag) AS total FROM weir.group_offsets GROUP BY group_id") == \
        [{"group_id": "done", "total": 6}]
    # The group catches up and commits: its lag is gone.
    assert len(read(node.bootstrap, "ticks", "done", 6)) == 6
    assert [r["lag"] for r in lag()] == [0, 0]

    live = Member(node.bootstrap, "live", "ticks")
    poll_until([live], lambda: live.assigned == {0, 1})
    assert sql_rows(node, "SELECT group_id, kind, state, protocol_type, protocol, members FROM weir.groups "
                          "ORDER BY group_id") == [
        {"group_id": "done", "kind": "classic", "state": "Empty", "protocol_type": "consumer", "protocol": "",
         "members": 0},
        {"group_id": "live", "kind": "classic", "state": "Stable", "protocol_type": "consumer",
         "protocol": "range", "members": 1}]
    live.c.close()
    assert [r["column"] for r in sql_rows(node, "DESCRIBE weir.group_offsets")] == \
        ["group_id", "topic", "partition", "committed_offset", "log_end_offset", "lag"]


def test_admin_lists_describes_and_deletes_groups(make_node):
    node = make_node(extra=FAST_NODE)
    create_topic(node.bootstrap, "ticks", partitions=2)
    produce_numbers(node.bootstrap, "ticks", range(6), partitions=2)
    assert len(read(node.bootstrap, "ticks", "done", 6)) == 6

    live = Member(node.bootstrap, "live", "ticks")
    poll_until([live], lambda: live.assigned == {0, 1})

    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    listed = admin.list_consumer_groups().result(10)
    states = {g.group_id: g.state for g in listed.valid}
    assert states["done"] == ConsumerGroupState.EMPTY
    assert states["live"] == ConsumerGroupState.STABLE
    stable_only = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(10)
    assert [g.group_id for g in stable_only.valid] == ["live"]

    desc = admin.describe_consumer_groups(["live", "done"])
    live_desc = desc["live"].result(10)
    assert live_desc.state == ConsumerGroupState.STABLE
    assert live_desc.partition_assignor == "range"
    [member] = live_desc.members
    assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]
    assert member.host.startswith("/127.0.0.1")
    assert desc["done"].result(10).state == ConsumerGroupState.EMPTY

    offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("done")])["done"].result(10)
    assert {(tp.partition, tp.offset) for tp in offsets.topic_partitions} == {(0, 3), (1, 3)}

    # Rewinding a group is a normal operation.
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "done", [TopicPartition("ticks", 0, 1)])])["done"].result(10)
    offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("done", [TopicPartition("ticks", 0)])])["done"].result(10)
    assert offsets.topic_partitions[0].offset == 1

    # A group with members cannot be deleted; an empty one can, with its offsets.
    res = admin.delete_consumer_groups(["live", "done"])
    try:
        res["live"].result(10)
        raise AssertionError("deleting a live group must fail")
    except Exception as e:  # KafkaException(NON_EMPTY_GROUP)
        assert "NON_EMPTY_GROUP" in str(e), e
    res["done"].result(10)
    names = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    assert "done" not in names and "live" in names
    assert read(node.bootstrap, "ticks", "done", 6) != [], "deleted offsets: reads from the start again"
    live.c.close()

    # The same through kafka-python's admin client, with OffsetDelete and
    # LeaveGroup for several members at once.
    from kafka import KafkaAdminClient
    from kafka.admin import MemberToRemove
    kadmin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    listed = {g["group_id"]: g["group_state"] for g in kadmin.list_groups()}
    assert listed == {"done": "Empty", "live": "Empty"}, listed
    assert [g["group_id"] for g in kadmin.list_groups(states_filter=["Stable"])] == []
    offs = kadmin.list_group_offsets({"done": None})["done"]
    assert {tp.partition: om.offset for tp, om in offs.items()} == {0: 3, 1: 3}
    from kafka import TopicPartition as KTP
    deleted = kadmin.delete_group_offsets("done", [KTP("ticks", 0)])
    assert [e.__name__ for e in deleted.values()] == ["NoError"]
    offs = kadmin.list_group_offsets({"done": None})["done"]
    assert {tp.partition: om.offset for tp, om in offs.items()} == {1: 3}
    removed = kadmin.remove_group_members("live", [MemberToRemove(member_id="a"),
                                                  MemberToRemove(group_instance_id="b")])
    assert {k: e.__name__ for k, e in removed.items()} == {"a": "UnknownMemberIdError",
                                                          "b": "UnknownMemberIdError"}, removed
    assert kadmin.delete_groups(["done", "nope"]) == {"done": "OK", "nope": "GroupIdNotFoundError"}
    assert kadmin.list_group_offsets({"done": None})["done"] == {}
    kadmin.close()


def test_kafka_python_group_commits_and_resumes(make_node):
    from kafka import KafkaConsumer
    node = make_node()
    create_topic(node.bootstrap, "kp", partitions=2)
    produce_numbers(node.bootstrap, "kp", range(10), partitions=2)

    def consume(count):
        c = KafkaConsumer("kp", bootstrap_servers=node.bootstrap, group_id="kp-group",
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          consumer_timeout_ms=15000, max_poll_records=1)
        got = []
        for m in c:
            got.append(json.loads(m.value)["n"])
            if len(got) == count:
                break
        c.commit()
        c.close()
        return got

    first = consume(4)
    rest = consume(6)
    assert sorted(first + rest) == list(range(10))
    node.restart()
    produce_numbers(node.bootstrap, "kp", range(10, 12), partitions=2)
    assert sorted(consume(2)) == [10, 11]


# ---- the wire ------------------------------------------------------------

def string(s):
    return rawkafka.string(s)


CORRELATION = itertools.count(1)


def call(sock, key, version, body):
    cid = next(CORRELATION)
    sock.sendall(rawkafka.request(key, version, body, correlation_id=cid))
    frame = rawkafka.read_frame(sock)
    assert frame is not None, "connection closed"
    (got,) = struct.unpack_from(">i", frame, 0)
    assert got == cid
    return frame[4:]


def read_string(b, at):
    (n,) = struct.unpack_from(">h", b, at)
    at += 2
    return b[at:at + max(n, 0)].decode(), at + max(n, 0)


def join_v0(sock, group, member=""):
    body = (string(group) + struct.pack(">i", 10000) + string(member) + string("consumer")
            + struct.pack(">i", 1) + string("range") + struct.pack(">i", 4) + b"meta")
    r = call(sock, 11, 0, body)
    err, gen = struct.unpack_from(">hi", r, 0)
    _proto, at = read_string(r, 6)
    leader, at = read_string(r, at)
    member_id, at = read_string(r, at)
    return err, gen, leader, member_id


def sync_v0(sock, group, gen, member, assignments):
    body = string(group) + struct.pack(">i", gen) + string(member) + struct.pack(">i", len(assignments))
    for m, a in assignments:
        body += string(m) + struct.pack(">i", len(a)) + a
    r = call(sock, 14, 0, body)
    (err,) = struct.unpack_from(">h", r, 0)
    return err


def heartbeat_v0(sock, group, gen, member):
    r = call(sock, 12, 0, string(group) + struct.pack(">i", gen) + string(member))
    return struct.unpack_from(">h", r, 0)[0]


def commit_v2(sock, group, gen, member, topic, partition, offset, metadata=""):
    body = (string(group) + struct.pack(">i", gen) + string(member) + struct.pack(">q", -1)
            + struct.pack(">i", 1) + string(topic) + struct.pack(">i", 1)
            + struct.pack(">iq", partition, offset) + string(metadata))
    r = call(sock, 8, 2, body)
    # topics[1]: name, partitions[1]: partition, error
    _name, at = read_string(r, 4)
    _part, err = struct.unpack_from(">ih", r, at + 4)
    return err


def fetch_v1(sock, group, topic, partition):
    body = string(group) + struct.pack(">i", 1) + string(topic) + struct.pack(">ii", 1, partition)
    r = call(sock, 9, 1, body)
    _name, at = read_string(r, 4)
    _part, offset = struct.unpack_from(">iq", r, at + 4)
    _meta, at = read_string(r, at + 16)
    (err,) = struct.unpack_from(">h", r, at)
    assert err == 0
    return offset


def test_commit_rules_and_rebalance_on_the_wire(make_node):
    node = make_node(extra=["--group-initial-rebalance-delay-ms", "0"])
    create_topic(node.bootstrap, "t", partitions=2)
    a = rawkafka.connect(node.bootstrap)
    assert fetch_v1(a, "g", "t", 0) == -1, "nothing committed yet"

    err, gen, leader, m1 = join_v0(a, "g")
    assert (err, gen, leader) == (0, 1, m1)
    assert sync_v0(a, "g", gen, m1, [(m1, b"both")]) == 0
    assert commit_v2(a, "g", gen, m1, "t", 0, 5, "first") == 0
    assert fetch_v1(a, "g", "t", 0) == 5
    assert commit_v2(a, "g", gen, m1, "t", 0, 2) == 0, "a commit may move an offset back"
    assert fetch_v1(a, "g", "t", 0) == 2
    assert commit_v2(a, "g", gen - 1, m1, "t", 0, 9) == 22, "ILLEGAL_GENERATION"
    assert commit_v2(a, "g", gen, "stranger", "t", 0, 9) == 25, "UNKNOWN_MEMBER_ID"
    assert commit_v2(a, "g", gen, m1, "t", 7, 9) == 3, "UNKNOWN_TOPIC_OR_PARTITION"
    assert commit_v2(a, "g", gen, m1, "t", 0, 9, "x" * 5000) == 12, "OFFSET_METADATA_TOO_LARGE"
    assert commit_v2(a, "g", -1, "", "t", 0, 9) == 22, "a group with members refuses simple commits"
    assert fetch_v1(a, "g", "t", 0) == 2, "refused commits change nothing"

    # A second member's join waits for the first to rejoin.
    b = rawkafka.connect(node.bootstrap)
    b.settimeout(30)
    joined = {}
    t = threading.Thread(target=lambda: joined.update(b=join_v0(b, "g")))
    t.start()
    deadline = time.time() + 10
    while heartbeat_v0(a, "g", gen, m1) != 27:  # REBALANCE_IN_PROGRESS
        assert time.time() < deadline, "no rebalance started"
    assert commit_v2(a, "g", gen, m1, "t", 1, 4) == 0, "commits still work while rebalancing"
    err, gen2, leader2, m1b = join_v0(a, "g", m1)
    t.join(10)
    assert (err, gen2, leader2, m1b) == (0, 2, m1, m1)
    assert joined["b"][:3] == (0, 2, m1)
    m2 = joined["b"][3]
    assert commit_v2(a, "g", gen, m1, "t", 0, 9) == 22, "the old generation is stale"
    assert commit_v2(a, "g", gen2, m1, "t", 0, 9) == 27, "not synced yet: REBALANCE_IN_PROGRESS"
    assert sync_v0(a, "g", gen2, m1, [(m1, b"p0"), (m2, b"p1")]) == 0
    assert sync_v0(b, "g", gen2, m2, []) == 0
    assert commit_v2(b, "g", gen2, m2, "t", 1, 7) == 0

    node.kill()
    node.start()
    c = rawkafka.connect(node.bootstrap)
    assert fetch_v1(c, "g", "t", 0) == 2
    assert fetch_v1(c, "g", "t", 1) == 7
    # Members are not kept across a restart: they rejoin.
    assert heartbeat_v0(c, "g", gen2, m1) == 25
    assert commit_v2(c, "g", gen2, m1, "t", 0, 3) == 25
    assert commit_v2(c, "g", -1, "", "t", 0, 3) == 0, "an empty group takes simple commits"
    assert fetch_v1(c, "g", "t", 0) == 3
