"""TLS on the Kafka and HTTP ports with real clients: SASL_SSL with PLAIN
and SCRAM (confluent-kafka, kafka-python, kcat), SSL with a client
certificate whose CN is the principal, HTTPS /sql and `weir sql --ca`,
`--shard-ports` over TLS, and what a wrong client gets: plaintext, garbage,
an untrusted certificate, a stalled handshake — each closes only its own
connection."""
import os
import ssl
import subprocess
import http.client
import urllib.error
import urllib.request

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)
from kafka import KafkaConsumer, KafkaProducer

import rawkafka
from conftest import WEIR, free_port, make_certs
from test_security import ADMIN, MECHANISMS, READER, TOKENS, consume, produce, sasl, sql
from test_shard_ports import free_port_range


@pytest.fixture
def certs(tmp_path):
    return make_certs(tmp_path / "certs")


def tls_args(certs, client_ca=True):
    args = ["--tls-cert", certs["node.pem"], "--tls-key", certs["node.key"]]
    return args + (["--tls-client-ca", certs["ca.pem"]] if client_ca else [])


@pytest.fixture
def tls_node(make_node, certs):
    return make_node(env=TOKENS, extra=tls_args(certs), ca=certs["ca.pem"])


def sasl_ssl(node, user, password, mechanism="PLAIN"):
    return {**sasl(node, user, password, mechanism), "security.protocol": "SASL_SSL",
            "ssl.ca.location": node.ca}


def with_certificate(node, certs):
    """SSL, signed in by the client certificate in `certs`."""
    return {"bootstrap.servers": node.bootstrap, "security.protocol": "SSL",
            "ssl.ca.location": node.ca, "ssl.certificate.location": certs["billing.pem"],
            "ssl.key.location": certs["billing.key"]}


def tls_socket(node, cert=None, key=None):
    """A raw TLS connection to the Kafka port (Python's ssl module)."""
    ctx = ssl.create_default_context(cafile=node.ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx.wrap_socket(rawkafka.connect(node.bootstrap), server_hostname="127.0.0.1")


def metadata_v0(sock):
    """Metadata v0 for all topics; the answer's frame, or None if closed."""
    import struct
    sock.sendall(rawkafka.request(3, 0, struct.pack(">i", 0)))
    try:
        return rawkafka.read_frame(sock)
    except (ssl.SSLError, ConnectionResetError):
        return None


def test_sasl_ssl_with_every_client(tls_node, certs):
    admin = AdminClient(sasl_ssl(tls_node, "admin", ADMIN))
    admin.create_topics([NewTopic("orders", 1)])["orders"].result(15)
    for statement in ("CREATE USER alice WITH PASSWORD 'wonder land'",
                      "GRANT INSERT, SELECT ON orders TO alice"):
        assert sql(tls_node, statement, token=ADMIN) == (200, []), statement
    sent = []
    for mech in MECHANISMS:
        value = f"confluent {mech}".encode()
        assert isinstance(produce(sasl_ssl(tls_node, "alice", "wonder land", mech), "orders",
                                  [value])[0], int), mech
        sent.append(value)
        kp = KafkaProducer(bootstrap_servers=tls_node.bootstrap, security_protocol="SASL_SSL",
                           ssl_cafile=tls_node.ca, sasl_mechanism=mech,
                           sasl_plain_username="alice", sasl_plain_password="wonder land")
        value = f"kafka-python {mech}".encode()
        assert kp.send("orders", value).get(timeout=15).offset >= 0
        kp.close()
        sent.append(value)
    # Debian's kcat links librdkafka 2.0.2, whose SCRAM repeats its nonce
    # (refused, as by Kafka 4, with a message that says so): PLAIN over TLS.
    kcat = ["kcat", "-b", tls_node.bootstrap, "-X", "security.protocol=SASL_SSL",
            "-X", f"ssl.ca.location={tls_node.ca}", "-X", "sasl.mechanism=PLAIN",
            "-X", "sasl.username=alice", "-X", "sasl.password=wonder land", "-t", "orders"]
    subprocess.run(kcat + ["-P"], input=b"kcat\n", check=True, timeout=60)
    old_scram = [a.replace("=PLAIN", "=SCRAM-SHA-512") for a in kcat]
    out = subprocess.run(old_scram + ["-P"], input=b"never\n", timeout=60, capture_output=True)
    assert out.returncode != 0 and b"before 2.6.1" in out.stderr, out
    sent.append(b"kcat")
    out = subprocess.run(kcat + ["-C", "-o", "beginning", "-e", "-q"], check=True, timeout=60,
                         capture_output=True).stdout
    assert sorted(out.split(b"\n")[:-1]) == sorted(sent)
    conf = sasl_ssl(tls_node, "alice", "wonder land", "SCRAM-SHA-256")
    assert sorted(consume(conf, "orders", len(sent), "alices")) == sorted(sent)
    kc = KafkaConsumer("orders", bootstrap_servers=tls_node.bootstrap, security_protocol="SASL_SSL",
                       ssl_cafile=tls_node.ca, sasl_mechanism="SCRAM-SHA-512",
                       sasl_plain_username="alice", sasl_plain_password="wonder land",
                       auto_offset_reset="earliest", consumer_timeout_ms=10000)
    assert sorted(m.value for m in kc) == sorted(sent)
    kc.close()
    # Roles and refusals are as on a plain port.
    refused = produce(sasl_ssl(tls_node, "reader", READER), "orders", [b"nope"])
    assert refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    errors = []
    p = Producer({**sasl_ssl(tls_node, "alice", "wonder"), "error_cb": errors.append})
    p.poll(3)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_client_certificate_signs_in_as_its_cn(tls_node, certs, tmp_path):
    admin = AdminClient(sasl_ssl(tls_node, "admin", ADMIN))
    for t in ("invoices", "payroll"):
        admin.create_topics([NewTopic(t, 1)])[t].result(15)
    acls = [AclBinding(ResourceType.TOPIC, "invoices", ResourcePatternType.LITERAL, "User:billing",
                       "*", op, AclPermissionType.ALLOW)
            for op in (AclOperation.WRITE, AclOperation.READ)]
    for f in admin.create_acls(acls).values():
        f.result(15)
    conf = with_certificate(tls_node, certs)
    delivered = produce(conf, "invoices", [b"inv-1", b"inv-2"])
    assert all(isinstance(o, int) for o in delivered), delivered
    assert produce(conf, "payroll", [b"no"])[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    kp = KafkaProducer(bootstrap_servers=tls_node.bootstrap, security_protocol="SSL",
                       ssl_cafile=tls_node.ca, ssl_certfile=certs["billing.pem"],
                       ssl_keyfile=certs["billing.key"])
    assert kp.send("invoices", b"inv-3").get(timeout=15).offset == 2
    kp.close()
    assert consume(conf, "invoices", 3, "billing-readers") == [b"inv-1", b"inv-2", b"inv-3"]
    # No certificate and no SASL: not signed in, so closed at its first
    # request other than ApiVersions.
    s = tls_socket(tls_node)
    assert metadata_v0(s) is None
    # A certificate the node's client CA did not sign, though its CN is the
    # same: the handshake fails and nothing is served.
    rogue = make_certs(tmp_path / "rogue")
    try:
        s = tls_socket(tls_node, rogue["billing.pem"], rogue["billing.key"])
        # TLS 1.3: the client learns of the refusal at its first read.
        answer = metadata_v0(s)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        answer = None
    assert answer is None
    assert tls_node.await_log("TLS handshake failed")
    # The certificate's own connection is served.
    s = tls_socket(tls_node, certs["billing.pem"], certs["billing.key"])
    assert metadata_v0(s) is not None


def closed_by_node(sock):
    """Reads until the node closes the connection (a TLS alert may come
    first); a timeout fails the test."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def test_wrong_clients_close_only_their_connection(tls_node, certs):
    stalled = rawkafka.connect(tls_node.bootstrap)  # connects, never says hello
    plain = rawkafka.connect(tls_node.bootstrap)
    plain.sendall(rawkafka.request(18, 0, b""))
    assert closed_by_node(plain)
    assert tls_node.await_log("plaintext on the TLS port")
    garbage = rawkafka.connect(tls_node.bootstrap)
    garbage.sendall(b"\x16\x03\x01\xff\xff" + os.urandom(100_000))
    assert closed_by_node(garbage)
    # A handshake cut off half way.
    cut = rawkafka.connect(tls_node.bootstrap)
    cut.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    cut.close()
    # Signed-in clients are served all along.
    admin = AdminClient(sasl_ssl(tls_node, "admin", ADMIN))
    admin.create_topics([NewTopic("after", 1)])["after"].result(15)
    assert produce(sasl_ssl(tls_node, "admin", ADMIN), "after", [b"x"]) == [0]
    stalled.close()


def test_https_and_weir_sql(tls_node):
    assert sql(tls_node, "SHOW TABLES")[0] == 401
    assert sql(tls_node, "CREATE TABLE t (a INT)", token=ADMIN) == (200, [])
    assert sql(tls_node, "SHOW TABLES", basic="admin:" + ADMIN)[0] == 200
    out = subprocess.run([WEIR, "sql", "--addr", f"127.0.0.1:{tls_node.http_port}", "--ca",
                          tls_node.ca, "--token", ADMIN, "SHOW TABLES"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "t" in out.stdout.split(), out
    # Plain HTTP to the HTTPS port gets no answer.
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{tls_node.http_port}/health", timeout=10)
    # `weir sql` without --ca does not reach it either, and says so.
    out = subprocess.run([WEIR, "sql", "--addr", f"127.0.0.1:{tls_node.http_port}", "--token",
                          ADMIN, "SHOW TABLES"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and out.stderr.startswith("error:"), out


def test_shard_ports_speak_tls(make_node, certs):
    base = free_port_range(2)
    node = make_node(env=TOKENS, ca=certs["ca.pem"],
                     extra=tls_args(certs) + ["--shard-ports", str(base)])
    admin = AdminClient(sasl_ssl(node, "admin", ADMIN))
    admin.create_topics([NewTopic("spread", 4)])["spread"].result(15)
    md = admin.list_topics("spread", timeout=15)
    assert sorted(b.port for b in md.brokers.values()) == [base, base + 1]
    conf = sasl_ssl(node, "admin", ADMIN, "PLAIN")
    p = Producer(conf)
    for i in range(40):
        p.produce("spread", f"r{i}".encode(), partition=i % 4)
    assert p.flush(30) == 0
    got = consume(conf, "spread", 40, "spreaders")
    assert sorted(got) == sorted(f"r{i}".encode() for i in range(40))


def test_start_up_refuses_what_would_be_unsafe_or_wrong(tmp_path, certs):
    def serve(*extra):
        cmd = [WEIR, "serve", str(tmp_path / "data"), "--kafka", f"127.0.0.1:{free_port()}",
               "--addr", f"127.0.0.1:{free_port()}", *extra]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30)

    out = serve("--require-client-tls")
    assert out.returncode == 2 and "--require-client-tls: the Kafka port would be in the clear" \
        in out.stderr, out
    # The key where the certificate belongs.
    out = serve("--tls-cert", certs["node.key"], "--tls-key", certs["node.key"])
    assert out.returncode == 2 and "--tls-cert" in out.stderr and "no PEM certificate" \
        in out.stderr, out
    # A key that is not the certificate's.
    out = serve("--tls-cert", certs["node.pem"], "--tls-key", certs["billing.key"])
    assert out.returncode == 2 and "--tls-key" in out.stderr, out
    out = serve("--tls-key", certs["node.key"])
    assert out.returncode == 2 and "--tls-cert" in out.stderr, out


def test_required_tls_node_starts_with_a_certificate(make_node, certs):
    node = make_node(extra=tls_args(certs, client_ca=False) + ["--require-client-tls"],
                     ca=certs["ca.pem"])
    # An open node: anyone reaches it over TLS, nobody in the clear.
    conf = {"bootstrap.servers": node.bootstrap, "security.protocol": "SSL",
            "ssl.ca.location": node.ca}
    admin = AdminClient(conf)
    admin.create_topics([NewTopic("open", 1)])["open"].result(15)
    assert produce(conf, "open", [b"a"]) == [0]
    s = rawkafka.connect(node.bootstrap)
    assert metadata_v0(s) is None
    with node.urlopen(node.http + "/health") as r:
        assert r.status == 200


def test_a_cluster_over_tls_copies_to_every_replica(tmp_path, certs):
    """Three nodes whose Kafka ports speak TLS, with sign-in on: each
    node's followers reach their leaders over TLS, trusting the authority
    in --tls-peer-ca, and sign in as admin; acks=all writes from a
    SASL_SSL client reach every replica."""
    from cluster import Cluster
    from test_replication import await_log_ends
    cluster = Cluster(tmp_path, env=TOKENS,
                      extra=[*tls_args(certs, client_ca=False), "--tls-peer-ca", certs["ca.pem"]])
    for n in cluster.nodes:
        n.ca = certs["ca.pem"]
    conf = {k: v for k, v in sasl_ssl(cluster.node(1), "admin", ADMIN).items() if k != "bootstrap.servers"}
    cluster.start(**conf)
    try:
        one = cluster.node(1)
        admin = AdminClient(sasl_ssl(one, "admin", ADMIN))
        admin.create_topics([NewTopic("over-tls", 3, 3)])["over-tls"].result(30)
        p = Producer({**sasl_ssl(one, "admin", ADMIN), "acks": "all"})
        acked = []
        for i in range(300):
            p.produce("over-tls", value=f"v{i}", partition=i % 3,
                      on_delivery=lambda err, msg: acked.append(msg.offset()) if err is None else None)
        assert p.flush(30) == 0 and len(acked) == 300
        await_log_ends(cluster.nodes, "over-tls", {0: 100, 1: 100, 2: 100})
    finally:
        cluster.stop()


def test_a_cluster_node_with_tls_needs_an_authority_to_trust_the_others(tmp_path, certs):
    """A cluster node whose Kafka port speaks TLS must be told which
    authority signs the other nodes' certificates: without --tls-peer-ca
    or --tls-client-ca it refuses to start, saying so."""
    out = subprocess.run([WEIR, "serve", str(tmp_path / "d"), "--node-id", "1",
                          "--voters", f"1@127.0.0.1:{free_port()}", *tls_args(certs, client_ca=False)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--tls-peer-ca" in out.stderr, out.stderr
