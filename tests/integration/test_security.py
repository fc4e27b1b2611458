"""Sign-in and authorization with real clients: role tokens over
SASL/PLAIN, users over PLAIN and SCRAM-SHA-256/512 (confluent-kafka and
kafka-python), grants, HTTP Bearer and Basic, refusals that close the
connection, and users, tokens and grants that survive kill -9."""
import base64
import json
import struct
import threading
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

import rawkafka

ADMIN, WRITER, READER = "admin-token-1", "writer-token-2", "reader-token-3"
TOKENS = {"WEIR_ADMIN_TOKEN": ADMIN, "WEIR_WRITER_TOKEN": WRITER, "WEIR_READER_TOKEN": READER}
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def sasl(node, user, password, mechanism="PLAIN"):
    return {"bootstrap.servers": node.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def sql(node, statement, token=None, basic=None):
    """POST /sql; returns (status, parsed body)."""
    req = urllib.request.Request(node.http + "/sql", data=statement.encode(), method="POST")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if basic:
        req.add_header("Authorization", "Basic " + base64.b64encode(basic.encode()).decode())
    try:
        with node.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def produce(conf, topic, values):
    """Produces `values`; returns each delivery's error or offset."""
    p = Producer(conf)
    out = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda e, m: out.append(e if e else m.offset()))
    assert p.flush(30) == 0
    return out


def consume(conf, topic, count, group):
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    for _ in range(60):
        m = c.poll(1)
        if m is not None:
            assert m.error() is None, m.error()
            got.append(m.value())
        if len(got) >= count:
            break
    c.close()
    return got


@pytest.fixture
def secured(make_node):
    return make_node(env=TOKENS)


def test_role_tokens_sign_in_as_their_role(secured):
    admin = AdminClient(sasl(secured, "admin", ADMIN))
    admin.create_topics([NewTopic("events", 2)])["events"].result(15)
    # The writer produces; the reader consumes with a group but may not produce.
    delivered = produce(sasl(secured, "writer", WRITER), "events", [b"a", b"b"])
    assert all(isinstance(o, int) for o in delivered), delivered
    assert sorted(consume(sasl(secured, "reader", READER), "events", 2, "g1")) == [b"a", b"b"]
    refused = produce(sasl(secured, "reader", READER), "events", [b"nope"])
    assert refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Only the admin creates topics.
    writer_admin = AdminClient(sasl(secured, "writer", WRITER))
    with pytest.raises(Exception) as e:
        writer_admin.create_topics([NewTopic("more", 1)])["more"].result(15)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(e.value)
    # A token is its role's only.
    errors = []
    p = Producer({**sasl(secured, "admin", WRITER), "error_cb": lambda e: errors.append(e)})
    p.poll(3)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def handshake(sock, mechanism, version=1):
    sock.sendall(rawkafka.request(17, version, rawkafka.string(mechanism)))
    frame = rawkafka.read_frame(sock)
    (_cid, code, n) = struct.unpack_from(">ihi", frame, 0)
    at, names = 10, []
    for _ in range(n):
        (ln,) = struct.unpack_from(">h", frame, at)
        names.append(frame[at + 2:at + 2 + ln].decode())
        at += 2 + ln
    return code, names


def authenticate(sock, auth_bytes):
    """SaslAuthenticate v1: (error code, message, server bytes)."""
    sock.sendall(rawkafka.request(36, 1, struct.pack(">i", len(auth_bytes)) + auth_bytes))
    frame = rawkafka.read_frame(sock)
    (_cid, code, mlen) = struct.unpack_from(">ihh", frame, 0)
    at = 8
    message = None
    if mlen >= 0:
        message = frame[at:at + mlen].decode()
        at += mlen
    (blen,) = struct.unpack_from(">i", frame, at)
    return code, message, frame[at + 4:at + 4 + blen]


def test_refusals_close_the_connection(secured):
    # No SASL: the first request other than ApiVersions closes it.
    s = rawkafka.connect(secured.bootstrap)
    s.sendall(rawkafka.request(3, 0, struct.pack(">i", 0)))
    assert rawkafka.read_frame(s) is None
    # An unknown mechanism names the enabled ones.
    s = rawkafka.connect(secured.bootstrap)
    code, names = handshake(s, "GSSAPI")
    assert code == 33 and names == MECHANISMS
    # A wrong password: SASL_AUTHENTICATION_FAILED with why, then closed.
    s = rawkafka.connect(secured.bootstrap)
    assert handshake(s, "PLAIN")[0] == 0
    code, message, _ = authenticate(s, b"\0writer\0wrong")
    assert code == 58 and "wrong user name or password" in message
    assert rawkafka.read_frame(s) is None
    # Garbage where a SCRAM first message belongs: refused, closed.
    s = rawkafka.connect(secured.bootstrap)
    assert handshake(s, "SCRAM-SHA-256")[0] == 0
    code, _, _ = authenticate(s, b"\xff\x00garbage")
    assert code == 58
    assert rawkafka.read_frame(s) is None
    # SaslAuthenticate with no handshake.
    s = rawkafka.connect(secured.bootstrap)
    code, message, _ = authenticate(s, b"\0writer\0" + WRITER.encode())
    assert code == 34 and "before a SaslHandshake" in message
    # SaslHandshake v0: the exchange runs in raw frames, then requests.
    s = rawkafka.connect(secured.bootstrap)
    assert handshake(s, "PLAIN", version=0)[0] == 0
    token = b"\0reader\0" + READER.encode()
    s.sendall(struct.pack(">i", len(token)) + token)
    assert rawkafka.read_frame(s) == b""
    assert rawkafka.metadata_v0_brokers(s), "served once signed in"
    # The node serves on.
    admin = AdminClient(sasl(secured, "admin", ADMIN))
    admin.create_topics([NewTopic("after", 1)])["after"].result(15)
    assert produce(sasl(secured, "writer", WRITER), "after", [b"x"]) == [0]


def test_users_sign_in_with_plain_and_scram_under_their_grants(secured):
    assert sql(secured, "CREATE USER alice WITH PASSWORD 'wonder land'", token=ADMIN) == (200, [])
    for table in ("orders", "secrets"):
        assert sql(secured, f"CREATE TABLE {table} (id INT, item VARCHAR)", token=ADMIN)[0] == 200
    assert sql(secured, "GRANT INSERT, SELECT ON orders TO alice", token=ADMIN)[0] == 200
    status, grants = sql(secured, "SHOW GRANTS FOR alice", token=ADMIN)
    assert status == 200
    assert sorted(g["privilege"] for g in grants) == ["INSERT", "SELECT"]
    for mech in MECHANISMS:
        conf = sasl(secured, "alice", "wonder land", mech)
        row = json.dumps({"id": 1, "item": mech}).encode()
        assert isinstance(produce(conf, "orders", [row])[0], int), mech
        kp = KafkaProducer(bootstrap_servers=secured.bootstrap, security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism=mech, sasl_plain_username="alice",
                           sasl_plain_password="wonder land")
        assert kp.send("orders", row).get(timeout=15).offset >= 0
        kp.close()
        # No grant on secrets: refused, whatever the mechanism.
        assert produce(conf, "secrets", [row])[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # A wrong password is refused.
        errors = []
        p = Producer({**sasl(secured, "alice", "wonder", mech), "error_cb": errors.append})
        p.poll(3)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), (mech, errors)
    conf = sasl(secured, "alice", "wonder land", "SCRAM-SHA-512")
    rows = consume(conf, "orders", 6, "billing")
    assert len(rows) == 6
    # Metadata lists what alice may describe.
    md = AdminClient(conf).list_topics(timeout=15)
    assert "orders" in md.topics and "secrets" not in md.topics
    # SQL as alice: her table, not the other.
    assert sql(secured, "SELECT count(*) AS n FROM orders", basic="alice:wonder land") == (200, [{"n": 6}])
    status, body = sql(secured, "SELECT * FROM secrets", basic="alice:wonder land")
    assert status == 403 and "may not select from table secrets" in body["error"]
    # Offsets of a topic alice may not read cannot be committed, and its
    # configs cannot be read.
    from confluent_kafka import TopicPartition as TP
    from confluent_kafka.admin import ConfigResource
    c = Consumer({**conf, "group.id": "alices"})
    with pytest.raises(Exception) as e:
        c.commit(offsets=[TP("secrets", 0, 1)], asynchronous=False)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(e.value)
    c.close()
    admin = AdminClient(conf)
    fs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "secrets")])
    with pytest.raises(Exception) as e:
        list(fs.values())[0].result(15)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(e.value)
    # Revoked: refused from then on.
    assert sql(secured, "REVOKE INSERT ON orders FROM alice", token=ADMIN)[0] == 200
    assert produce(sasl(secured, "alice", "wonder land"), "orders", [b"{}"])[0].code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_http_sign_in(secured):
    status, body = sql(secured, "SHOW TABLES")
    assert status == 401 and "Bearer" in body["error"]
    assert sql(secured, "SHOW TABLES", token="not-a-token")[0] == 401
    assert sql(secured, "SHOW TABLES", basic="admin:" + ADMIN)[0] == 200
    assert sql(secured, "CREATE TABLE t (a INT)", token=WRITER)[0] == 403
    assert sql(secured, "CREATE TABLE t (a INT)", token=ADMIN)[0] == 200
    status, body = sql(secured, "DROP TABLE t", token=READER)
    assert status == 403 and "reader may not drop table t" in body["error"]
    # SQL writes are Kafka's WRITE: a writer may, a reader may not.
    status, body = sql(secured, "INSERT INTO t VALUES (1)", token=READER)
    assert status == 403 and "reader may not insert into table t" in body["error"]
    assert sql(secured, "INSERT INTO t VALUES (1)", token=WRITER) == (200, [{"_partition": 0, "_offset": 0}])
    assert sql(secured, "SELECT a FROM t", token=READER) == (200, [{"a": 1}])
    assert sql(secured, "CREATE USER bob WITH PASSWORD 'pw'", token=WRITER)[0] == 403
    # A user's token signs in over HTTP and Kafka; dropped, it no longer does.
    assert sql(secured, "CREATE USER bob WITH PASSWORD 'pw'", token=ADMIN)[0] == 200
    status, rows = sql(secured, "CREATE TOKEN FOR bob", token=ADMIN)
    token = rows[0]["token"]
    assert sql(secured, "GRANT SELECT ON t TO bob", token=ADMIN)[0] == 200
    assert sql(secured, "SELECT * FROM t", token=token) == (200, [{"a": 1}])
    assert isinstance(consume(sasl(secured, "bob", token), "t", 0, "g"), list)
    status, users = sql(secured, "SHOW USERS", token=ADMIN)
    assert users == [{"name": "bob", "tokens": 1}]
    assert sql(secured, f"DROP TOKEN '{token}'", token=ADMIN)[0] == 200
    assert sql(secured, "SELECT * FROM t", token=token)[0] == 401
    # /health stays open.
    with urllib.request.urlopen(secured.http + "/health", timeout=10) as r:
        assert r.status == 200


def test_users_and_grants_survive_kill(secured):
    assert sql(secured, "CREATE USER carol WITH PASSWORD 'c4rol'", token=ADMIN)[0] == 200
    assert sql(secured, "CREATE TABLE ledger (id INT)", token=ADMIN)[0] == 200
    assert sql(secured, "GRANT ALL ON ledger TO carol", token=ADMIN)[0] == 200
    token = sql(secured, "CREATE TOKEN FOR carol", token=ADMIN)[1][0]["token"]
    secured.kill()
    secured.start()
    conf = sasl(secured, "carol", "c4rol", "SCRAM-SHA-256")
    assert isinstance(produce(conf, "ledger", [b'{"id": 7}'])[0], int)
    assert sql(secured, "SELECT id FROM ledger", token=token) == (200, [{"id": 7}])
    # Nothing kept gives a password or a token back.
    catalog = open(f"{secured.data_dir}/catalog.json").read()
    assert "c4rol" not in catalog and token not in catalog


def test_wrong_passwords_do_not_stop_signed_in_clients(secured):
    admin = AdminClient(sasl(secured, "admin", ADMIN))
    admin.create_topics([NewTopic("busy", 1)])["busy"].result(15)
    failures = []

    def attack():
        for _ in range(4):
            s = rawkafka.connect(secured.bootstrap, timeout=60)
            handshake(s, "PLAIN")
            code, _, _ = authenticate(s, b"\0writer\0guess")
            failures.append(code)
            s.close()

    # 1,000 wrong passwords from one address, 250 connections at a time.
    threads = [threading.Thread(target=attack) for _ in range(250)]
    for t in threads:
        t.start()
    # Meanwhile a signed-in producer's records are all acknowledged.
    offsets = produce(sasl(secured, "writer", WRITER), "busy", [b"r%d" % i for i in range(2000)])
    for t in threads:
        t.join()
    assert offsets == list(range(2000))
    assert failures == [58] * 1000


def test_kafka_acl_apis_share_the_grants(secured):
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                       AclPermissionType, ResourcePatternType, ResourceType)
    admin = AdminClient(sasl(secured, "admin", ADMIN))
    admin.create_topics([NewTopic("logs-app", 1), NewTopic("logs-secret", 1)])["logs-app"].result(15)
    assert sql(secured, "CREATE USER dana WITH PASSWORD 'd'", token=ADMIN)[0] == 200
    allow = AclBinding(ResourceType.TOPIC, "logs-", ResourcePatternType.PREFIXED, "User:dana", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)
    deny = AclBinding(ResourceType.TOPIC, "logs-secret", ResourcePatternType.LITERAL, "User:dana", "*",
                      AclOperation.ALL, AclPermissionType.DENY)
    for f in admin.create_acls([allow, deny]).values():
        assert f.result(15) is None
    # The prefix allows, the deny wins.
    dana = sasl(secured, "dana", "d", "SCRAM-SHA-256")
    assert produce(dana, "logs-app", [b"x"]) == [0]
    assert produce(dana, "logs-secret", [b"x"])[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # A grant made in SQL is an ACL the Kafka API lists, and the other way round.
    assert sql(secured, 'GRANT SELECT ON "logs-app" TO dana', token=ADMIN)[0] == 200
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    listed = admin.describe_acls(everything).result(15)
    assert {(b.name, b.operation) for b in listed} == {
        ("logs-", AclOperation.WRITE), ("logs-secret", AclOperation.ALL), ("logs-app", AclOperation.READ)}
    status, grants = sql(secured, "SHOW GRANTS FOR dana", token=ADMIN)
    assert {(g["name"], g["pattern"], g["permission"]) for g in grants} == {
        ("logs-", "prefixed", "allow"), ("logs-secret", "literal", "deny"), ("logs-app", "literal", "allow")}
    # MATCH selects what applies to one name.
    applies = AclBindingFilter(ResourceType.TOPIC, "logs-secret", ResourcePatternType.MATCH, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
    assert {b.name for b in admin.describe_acls(applies).result(15)} == {"logs-", "logs-secret"}
    # Deleting the deny lets dana write there.
    only_deny = AclBindingFilter(ResourceType.TOPIC, "logs-secret", ResourcePatternType.LITERAL, None, None,
                                 AclOperation.ANY, AclPermissionType.DENY)
    deleted = list(admin.delete_acls([only_deny]).values())[0].result(15)
    assert [b.name for b in deleted] == ["logs-secret"]
    assert produce(dana, "logs-secret", [b"y"]) == [0]
    # Only the admin manages ACLs.
    writer = AdminClient(sasl(secured, "writer", WRITER))
    with pytest.raises(Exception) as e:
        list(writer.create_acls([allow]).values())[0].result(15)
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(e.value)


def test_admin_clients_manage_scram_credentials(secured):
    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)
    admin = AdminClient(sasl(secured, "admin", ADMIN))
    admin.create_topics([NewTopic("erin-topic", 1)])["erin-topic"].result(15)
    assert sql(secured, "CREATE USER erin WITH PASSWORD 'unused'", token=ADMIN)[0] == 200
    assert sql(secured, 'GRANT INSERT ON "erin-topic" TO erin', token=ADMIN)[0] == 200
    ups = [UserScramCredentialUpsertion("erin", ScramCredentialInfo(m, 8192), b"s3cret")
           for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for f in admin.alter_user_scram_credentials(ups).values():
        assert f.result(15) is None
    described = admin.describe_user_scram_credentials(["erin"])["erin"].result(15)
    infos = {(i.mechanism, i.iterations) for i in described.scram_credential_infos}
    assert infos == {(ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 8192)}
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        assert produce(sasl(secured, "erin", "s3cret", mech), "erin-topic", [b"x"])[0] >= 0
    # Deleting one mechanism leaves the other.
    gone = UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_256)
    for f in admin.alter_user_scram_credentials([gone]).values():
        assert f.result(15) is None
    errors = []
    p = Producer({**sasl(secured, "erin", "s3cret", "SCRAM-SHA-256"), "error_cb": errors.append})
    p.poll(3)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert produce(sasl(secured, "erin", "s3cret", "SCRAM-SHA-512"), "erin-topic", [b"y"])[0] >= 0
    # Too few iterations, and a user that does not exist.
    weak = UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 10), b"x")
    with pytest.raises(Exception) as e:
        list(admin.alter_user_scram_credentials([weak]).values())[0].result(15)
    assert "UNACCEPTABLE_CREDENTIAL" in str(e.value), e.value
    with pytest.raises(Exception) as e:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(15)
    assert "RESOURCE_NOT_FOUND" in str(e.value), e.value


def test_a_session_not_renewed_ends_its_connection(make_node):
    """KIP-368 with --max-reauth-ms: the sign-in answers the session's
    lifetime; signing in again on the connection renews it (as the same
    principal only); a connection whose session ended is closed at its
    next request, which is not served."""
    lifetime_ms = 1500
    n = make_node(env=TOKENS, extra=["--max-reauth-ms", str(lifetime_ms)])

    def sign_in(sock, user, token):
        assert handshake(sock, "PLAIN")[0] == 0
        sock.sendall(rawkafka.request(36, 1, struct.pack(">i", 2 + len(user) + len(token))
                                      + b"\0" + user.encode() + b"\0" + token.encode()))
        frame = rawkafka.read_frame(sock)
        (_cid, code, mlen) = struct.unpack_from(">ihh", frame, 0)
        at = 8 + max(mlen, 0)
        (blen,) = struct.unpack_from(">i", frame, at)
        (lifetime,) = struct.unpack_from(">q", frame, at + 4 + blen)
        return code, lifetime, time.monotonic()

    s = rawkafka.connect(n.bootstrap)
    code, lifetime, signed_at = sign_in(s, "writer", WRITER)
    assert (code, lifetime) == (0, lifetime_ms)
    assert rawkafka.metadata_v0_brokers(s), "served while the session lasts"
    # Signing in again renews the session, as the same principal only.
    code, lifetime, signed_at = sign_in(s, "writer", WRITER)
    assert (code, lifetime) == (0, lifetime_ms)
    assert rawkafka.metadata_v0_brokers(s)
    other = rawkafka.connect(n.bootstrap)
    assert sign_in(other, "writer", WRITER)[0] == 0
    assert sign_in(other, "reader", READER)[0] == 58, "a connection keeps its principal"
    assert rawkafka.read_frame(other) is None
    # Past the session's end (the time under test itself), the next
    # request closes the connection unanswered.
    time.sleep(max(0.0, signed_at + lifetime_ms / 1000 + 0.2 - time.monotonic()))
    s.sendall(rawkafka.request(3, 0, struct.pack(">i", 0), correlation_id=9))
    assert rawkafka.read_frame(s) is None
    assert n.await_log("did not sign in again")
