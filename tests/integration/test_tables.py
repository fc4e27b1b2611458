"""Topics are tables: every table example of seeds 000 and 001, run as
written against a running node with the clients they use, with the outputs
they show; the refusals; restarts; SQL over HTTP and `weir sql`."""
import json
import subprocess
import time
import urllib.error
import urllib.request

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from conftest import WEIR, consume_all, create_topic


def sql(node, text):
    """POST /sql: (status, parsed JSON body)."""
    req = urllib.request.Request(node.http + "/sql", data=text.encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def rows(node, text):
    status, body = sql(node, text)
    assert status == 200, body
    return body


def weir_sql(node, text, *flags):
    out = subprocess.run([WEIR, "sql", "--addr", node.http.split("//")[1], *flags, text],
                         capture_output=True, text=True, timeout=30)
    return out.returncode, out.stdout, out.stderr


def end_offset(node, topic, partition=0):
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "watermarks"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        c.close()


def test_orders_example(node):
    assert rows(node, "CREATE TABLE orders (id BIGINT, item VARCHAR, amount DOUBLE);") == []
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=node.bootstrap)
    for row in ({"id": 1, "item": "tea", "amount": 7.5}, {"id": 2, "item": "cake", "amount": 4.5}):
        producer.send("orders", json.dumps(row).encode())
    producer.flush()
    producer.close()
    status, body = sql(node, "SELECT * FROM orders ORDER BY id;")
    assert status == 200
    assert json.dumps(body, separators=(",", ":")) == \
        '[{"id":1,"item":"tea","amount":7.5},{"id":2,"item":"cake","amount":4.5}]'


def test_notes_keep_raw_values(node):
    rows(node, "CREATE TABLE notes (_key VARCHAR, _timestamp TIMESTAMP, _value VARCHAR);")
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=node.bootstrap)
    producer.send("notes", key=b"n1", value=b"plain text, not json")
    producer.flush()
    producer.close()
    assert rows(node, "SELECT _key, _value FROM notes;") == [{"_key": "n1", "_value": "plain text, not json"}]
    [ts] = rows(node, "SELECT _timestamp FROM notes")
    assert ts["_timestamp"].startswith(time.strftime("%Y-%m-%d", time.gmtime()))


def bytes_text(b):
    """How SQL shows a VARCHAR _key or _value: its text if it is UTF-8,
    otherwise \\x and hex (PostgreSQL's bytea form)."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return "\\x" + b.hex()


def test_value_tables_keep_bytes_headers_and_keys_exactly(node):
    """A _value table keeps each record as produced: consumers get the
    bytes and headers back exactly (through any codec), SQL shows text or
    \\x-hex, and BYTES columns always hex."""
    import os
    import random
    rows(node, "CREATE TABLE blobs (_key VARCHAR, _value VARCHAR, _timestamp TIMESTAMP);")
    rows(node, "CREATE TABLE raw_blobs (_key BYTES, _value BYTES);")
    rnd = random.Random(22)
    sent = []
    for i in range(300):
        if i % 3 == 0:
            value = f"text {i} \u00e9\u2603".encode()  # valid UTF-8
        else:
            value = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(1, 600)))
        key = os.urandom(8) if i % 2 else f"k{i}".encode()
        headers = [("trace", os.urandom(4)), ("n", str(i).encode()), ("n", None)] if i % 5 else []
        sent.append((key, value, headers))
    for codec in ("lz4", "zstd"):
        for table in ("blobs", "raw_blobs"):
            p = Producer({"bootstrap.servers": node.bootstrap, "compression.type": codec, "linger.ms": 5})
            for key, value, headers in sent:
                p.produce(table, key=key, value=value, headers=headers)
            assert p.flush(30) == 0
    for table in ("blobs", "raw_blobs"):
        got = consume_all(node.bootstrap, table, 1, expected=2 * len(sent))
        for m, (key, value, headers) in zip(got, sent + sent):
            assert (m.key(), m.value()) == (key, value)
            assert (m.headers() or []) == headers
    shown = rows(node, "SELECT _key, _value FROM blobs")
    assert shown == [{"_key": bytes_text(k), "_value": bytes_text(v)} for k, v, _ in sent + sent]
    assert any(r["_value"].startswith("\\x") for r in shown) and any(r["_value"].startswith("text") for r in shown)
    hexed = rows(node, "SELECT _key, _value FROM raw_blobs")
    assert hexed == [{"_key": "\\x" + k.hex(), "_value": "\\x" + v.hex()} for k, v, _ in sent + sent]
    described = {r["column"]: r["type"] for r in rows(node, "DESCRIBE raw_blobs")}
    assert described == {"_key": "BYTES", "_value": "BYTES"}


def test_keyed_value_table_keeps_the_latest_record_per_key(node):
    rows(node, "CREATE TABLE latest (_key VARCHAR PRIMARY KEY, _value VARCHAR);")
    p = Producer({"bootstrap.servers": node.bootstrap})
    for key, value in [(b"a", b"1"), (b"b", b"\xff\x00"), (b"a", b"2"), (b"c", b"3"), (b"c", None)]:
        p.produce("latest", key=key, value=value)
    assert p.flush(10) == 0
    assert rows(node, "SELECT _key, _value FROM latest ORDER BY _key") == [
        {"_key": "a", "_value": "2"}, {"_key": "b", "_value": "\\xff00"}]
    # Consumers read every record as produced, the tombstone too.
    got = consume_all(node.bootstrap, "latest", 1, expected=5)
    assert [(m.key(), m.value()) for m in got][-1] == (b"c", None)
    # A record with no key cannot name its row: the batch is refused.
    errors = delivery_errors(node.bootstrap, "latest", [(None, b"lost")])
    assert [e.code() for e in errors] == [KafkaError.INVALID_RECORD]
    assert end_offset(node, "latest") == 5
    status, body = sql(node, "CREATE TABLE odd (id BIGINT PRIMARY KEY, _value VARCHAR)")
    assert status == 400 and "PRIMARY KEY can only be _key" in body["error"], body


def test_typed_tables_keep_headers_and_bytes_columns(node):
    rows(node, "CREATE TABLE docs (id BIGINT, body BYTES, title VARCHAR);")
    headers = [("source", b"crm"), ("trace", bytes(range(256))), ("empty", b""), ("nothing", None),
               ("source", b"dup")]
    p = Producer({"bootstrap.servers": node.bootstrap, "compression.type": "snappy"})
    p.produce("docs", value=json.dumps({"id": 1, "body": "AAH/", "title": "a"}).encode(), headers=headers)
    p.produce("docs", value=json.dumps({"id": 2, "body": "\\x00ff", "title": "b"}).encode())
    assert p.flush(10) == 0
    [first, second] = consume_all(node.bootstrap, "docs", 1, expected=2)
    assert first.headers() == headers
    assert second.headers() is None
    assert rows(node, "SELECT id, body FROM docs ORDER BY id") == [
        {"id": 1, "body": "\\x0001ff"}, {"id": 2, "body": "\\x00ff"}]
    errors = delivery_errors(node.bootstrap, "docs", [(None, b'{"id": 3, "body": "not base64!"}')])
    assert [e.code() for e in errors] == [KafkaError.INVALID_RECORD]


def test_sql_insert_and_delete_write_records(node):
    """INSERT appends rows as records a producer could have sent (upserts in
    a keyed table), DELETE writes tombstones; consumers see both, and a
    keyed record lands where librdkafka's partitioner puts the same key."""
    rows(node, "CREATE TABLE people (id BIGINT PRIMARY KEY, name VARCHAR NOT NULL, age INT) "
               "WITH (partitions = 4)")
    placed = rows(node, "INSERT INTO people (id, name, age) VALUES (1, 'ann', 30), (2, 'bo', 40), (3, 'cy', NULL)")
    assert [sorted(r) for r in placed] == [["_offset", "_partition"]] * 3
    # The same key bytes from a librdkafka producer go to the same partition.
    p = Producer({"bootstrap.servers": node.bootstrap, "partitioner": "murmur2_random"})
    for i in (1, 2, 3):
        p.produce("people", key=b'{"id":%d}' % i, value=json.dumps({"id": i, "name": "via kafka"}).encode())
    assert p.flush(10) == 0
    by_kafka = {json.loads(m.key())["id"]: m.partition() for m in consume_all(node.bootstrap, "people", 4)
                if json.loads(m.value())["name"] == "via kafka"}
    assert by_kafka == {i: r["_partition"] for i, r in zip((1, 2, 3), placed)}
    rows(node, "INSERT INTO people VALUES (1, 'ann', 31), (2, 'bo', 41), (3, 'cy', 50)")
    assert rows(node, "SELECT id, name, age FROM people ORDER BY id") == [
        {"id": 1, "name": "ann", "age": 31}, {"id": 2, "name": "bo", "age": 41}, {"id": 3, "name": "cy", "age": 50}]
    deleted = rows(node, "DELETE FROM people WHERE id = 2")
    assert deleted == [{"_partition": placed[1]["_partition"], "_offset": deleted[0]["_offset"]}]
    rows(node, "DELETE FROM people WHERE id IN (1, 9) OR (id = 3)")
    assert rows(node, "SELECT * FROM people") == []
    records = consume_all(node.bootstrap, "people", 4, expected=9 + 4)
    tombstones = sorted(m.key() for m in records if m.value() is None)
    assert tombstones == [b'{"id":1}', b'{"id":2}', b'{"id":3}', b'{"id":9}']
    # Refusals name what is wrong and write nothing.
    for bad, why in [
        ("INSERT INTO people (id, name) VALUES (4, 'ok'), ('abc', 'x')", 'row 2: failed to parse "abc" as BIGINT'),
        ("INSERT INTO people (id, age) VALUES (5, 1)", "row 1: name is NOT NULL"),
        ("INSERT INTO people (id, name) VALUES (6)", "row 1 has 1 values for 2 columns"),
        ("INSERT INTO people (id, nope) VALUES (6, 1)", "unknown column nope"),
        ("INSERT INTO nowhere VALUES (1)", "no table nowhere"),
        ("DELETE FROM people WHERE name = 'ann'", "names rows by every key column (id): id is missing"),
        ("DELETE FROM people WHERE id = 1 AND name = 'ann'", "names rows by their key (id) only, not name"),
        ("DELETE FROM people", "needs WHERE naming its key (id)"),
        ("DELETE FROM people WHERE id > 3", "compared to constants"),
        # Combinations are bounded: 400 x 400 keys would be 160,000 rows.
        ("DELETE FROM people WHERE id IN (%s) AND id IN (%s)" % (",".join(map(str, range(400))),
                                                               ",".join(map(str, range(400)))),
         "DELETE names at most 100000 rows a statement"),
    ]:
        status, body = sql(node, bad)
        assert status == 400 and why in body["error"], (bad, body)
    assert sum(end_offset(node, "people", p) for p in range(4)) == 13
    rows(node, "CREATE TABLE log_only (n BIGINT)")
    status, body = sql(node, "DELETE FROM log_only WHERE n = 1")
    assert status == 400 and "DELETE needs a keyed table" in body["error"], body


def test_a_keyed_table_of_several_partitions_keeps_one_row_per_key(node):
    """Producers spell a key their own way (`7`, `{"id": 7}`, Kafka Connect's
    schema envelope) and place it with their own partitioner (librdkafka's
    default hashes with CRC-32, not murmur2), so one key's writes land in
    several partitions. The table still has one row per key: the newest
    write, whatever WHERE, ORDER BY, LIMIT or GROUP BY does; deletions and
    SQL writes reach the copies where they are."""
    rows(node, "CREATE TABLE accounts (id BIGINT PRIMARY KEY, owner VARCHAR, balance BIGINT) "
               "WITH (partitions = 4)")
    schema = {"type": "struct", "optional": False, "fields": [{"field": "id", "type": "int64"}]}
    spellings = [lambda i: b"%d" % i, lambda i: b'{"id": %d}' % i,
                 lambda i: json.dumps({"schema": schema, "payload": {"id": i}}).encode()]
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5})
    base = int(time.time() * 1000)
    for version, spell in enumerate(spellings):
        for i in range(60):
            value = {"id": i, "owner": f"v{version}", "balance": 10 * i + version}
            p.produce("accounts", key=spell(i), value=json.dumps(value).encode(),
                      timestamp=base + version)
    assert p.flush(10) == 0
    where = {}
    for m in consume_all(node.bootstrap, "accounts", 4, expected=180):
        where.setdefault(json.loads(m.value())["id"], set()).add(m.partition())
    assert sum(len(ps) > 1 for ps in where.values()) >= 30, where

    latest = [{"id": i, "owner": "v2", "balance": 10 * i + 2} for i in range(60)]
    assert rows(node, "SELECT id, owner, balance FROM accounts ORDER BY id") == latest
    assert rows(node, "SELECT count(*) AS n FROM accounts") == [{"n": 60}]
    # An older copy that passes WHERE is still hidden by the newer one.
    assert rows(node, "SELECT id FROM accounts WHERE owner <> 'v2'") == []
    assert rows(node, "SELECT owner, count(*) AS n FROM accounts GROUP BY owner") == [
        {"owner": "v2", "n": 60}]
    assert rows(node, "SELECT id FROM accounts ORDER BY balance DESC LIMIT 3") == [
        {"id": 59}, {"id": 58}, {"id": 57}]
    assert len(rows(node, "SELECT * FROM accounts LIMIT 10")) == 10

    # A tombstone in the envelope's spelling deletes the row wherever it is.
    p.produce("accounts", key=spellings[2](7), value=None, timestamp=base + 3)
    assert p.flush(10) == 0
    assert rows(node, "SELECT id FROM accounts WHERE id IN (6, 7, 8) ORDER BY id") == [
        {"id": 6}, {"id": 8}]
    # SQL DELETE writes a tombstone into every partition with a live copy.
    deleted = rows(node, "DELETE FROM accounts WHERE id = 8")
    assert {r["_partition"] for r in deleted} == where[8]
    assert rows(node, "SELECT count(*) AS n FROM accounts") == [{"n": 58}]
    # SQL INSERT writes where the key's newest copy is.
    newest = [m.partition() for m in consume_all(node.bootstrap, "accounts", 4)
              if m.value() is not None and json.loads(m.value()) == {**latest[9], "id": 9}]
    placed = rows(node, "INSERT INTO accounts VALUES (9, 'sql', 0)")
    assert [r["_partition"] for r in placed] == newest
    assert rows(node, "SELECT owner FROM accounts WHERE id = 9") == [{"owner": "sql"}]
    # A later write in yet another spelling wins again.
    p.produce("accounts", key=b"9", value=b'{"id": 9, "owner": "later", "balance": 1}',
              timestamp=int(time.time() * 1000) + 1000)
    assert p.flush(10) == 0
    assert rows(node, "SELECT owner FROM accounts WHERE id = 9") == [{"owner": "later"}]
    assert rows(node, "SELECT count(*) AS n FROM accounts") == [{"n": 58}]


def test_sql_insert_into_value_and_raw_tables_writes_exact_records(node):
    rows(node, "CREATE TABLE memo (_key VARCHAR, _value VARCHAR)")
    rows(node, "CREATE TABLE bin (_key BYTES, _value BYTES)")
    create_topic(node.bootstrap, "plain_log", partitions=2)
    rows(node, "INSERT INTO memo VALUES ('k1', 'hello'), (NULL, 'no key')")
    rows(node, "INSERT INTO bin (_key, _value) VALUES ('AAE=', '\\x6869ff')")
    placed = rows(node, "INSERT INTO plain_log (_key, _value, _headers, _partition, _timestamp) "
                        "VALUES ('k', 'v', '{\"trace\": \"t1\", \"none\": null}', 1, '2026-01-02 03:04:05')")
    assert placed == [{"_partition": 1, "_offset": 0}]
    assert [(m.key(), m.value()) for m in consume_all(node.bootstrap, "memo", 1, expected=2)] == \
        [(b"k1", b"hello"), (None, b"no key")]
    [b] = consume_all(node.bootstrap, "bin", 1, expected=1)
    assert (b.key(), b.value()) == (b"\x00\x01", b"hi\xff")
    [m] = consume_all(node.bootstrap, "plain_log", 2, expected=1)
    assert (m.partition(), m.key(), m.value(), m.headers()) == (1, b"k", b"v", [("trace", b"t1"), ("none", None)])
    assert m.timestamp()[1] == 1767323045000
    status, body = sql(node, "INSERT INTO plain_log (_offset) VALUES (3)")
    assert status == 400 and "_offset is given by the log" in body["error"], body


def users_000(node):
    rows(node, "CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR, plan VARCHAR);")

    def event(op, before, after):
        return json.dumps({"op": op, "before": before, "after": after}).encode()

    producer = Producer({"bootstrap.servers": node.bootstrap})
    producer.produce("users", key=b'{"id": 1}', value=event("c", None, {"id": 1, "name": "ann", "plan": "free"}))
    producer.produce("users", key=b'{"id": 2}', value=event("c", None, {"id": 2, "name": "bo", "plan": "free"}))
    producer.produce("users", key=b'{"id": 1}', value=event("u", {"id": 1}, {"id": 1, "name": "ann", "plan": "pro"}))
    producer.produce("users", key=b'{"id": 2}', value=None)
    assert producer.flush(10) == 0


def read_log_kafka_python(node, topic):
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(topic, bootstrap_servers=node.bootstrap, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=3000)
    out = [(m.offset, m.key, m.value) for m in consumer]
    consumer.close()
    return out


def test_users_change_data_and_its_log(node):
    users_000(node)
    assert rows(node, "SELECT * FROM users ORDER BY id;") == [{"id": 1, "name": "ann", "plan": "pro"}]
    log = read_log_kafka_python(node, "users")
    assert [(k, v) for _, k, v in log] == [
        (b'{"id":1}', b'{"id":1,"name":"ann","plan":"free"}'),
        (b'{"id":2}', b'{"id":2,"name":"bo","plan":"free"}'),
        (b'{"id":1}', b'{"id":1,"name":"ann","plan":"pro"}'),
        (b'{"id":2}', None),
    ]
    assert [o for o, _, _ in log] == [0, 1, 2, 3], "offsets are dense"


def test_events_guide_example_and_weir_sql(node):
    rows(node, "CREATE TABLE events (user VARCHAR, amount BIGINT, _key VARCHAR, _timestamp TIMESTAMP);")
    producer = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True})
    for i in range(5):
        producer.produce("events", key=f"u{i % 2}", value=json.dumps({"user": f"u{i % 2}", "amount": i}))
    assert producer.flush(10) == 0
    code, out, err = weir_sql(node, "SELECT user, amount, _key FROM events ORDER BY amount;")
    assert code == 0, err
    assert out == ("user  amount  _key\n"
                   "u0    0       u0\n"
                   "u1    1       u1\n"
                   "u0    2       u0\n"
                   "u1    3       u1\n"
                   "u0    4       u0\n")
    code, out, _ = weir_sql(node, "SELECT count(*) AS n FROM events", "--json")
    assert code == 0 and json.loads(out) == [{"n": 5}]
    code, _, err = weir_sql(node, "SELECT nothing FROM events")
    assert code == 1 and "unknown column" in err


def test_users_debezium_guide_example(node):
    rows(node, "CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR, score DOUBLE);")

    def change(op, before, after):
        return json.dumps({"op": op, "before": before, "after": after, "source": {"db": "shop"}})

    producer = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True})
    producer.produce("users", key=json.dumps({"id": 1}), value=change("c", None, {"id": 1, "name": "ann", "score": 1.0}))
    producer.produce("users", key=json.dumps({"id": 2}), value=change("c", None, {"id": 2, "name": "bob", "score": 2.0}))
    producer.produce("users", key=json.dumps({"id": 1}), value=change("u", {"id": 1}, {"id": 1, "name": "ann", "score": 10.0}))
    producer.produce("users", key=json.dumps({"id": 2}), value=change("d", {"id": 2, "name": "bob", "score": 2.0}, None))
    producer.produce("users", key=json.dumps({"id": 2}), value=None)     # Debezium's tombstone after a delete
    assert producer.flush(10) == 0
    code, out, err = weir_sql(node, "SELECT * FROM users ORDER BY id;")
    assert code == 0, err
    assert out == "id  name  score\n1   ann   10.0\n"

    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "billing",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["users"])
    seen = []
    while len(seen) < 5:
        message = consumer.poll(5.0)
        if message is None:
            break
        if message.error() is None:
            seen.append((message.key(), message.value()))
    consumer.commit()
    consumer.close()
    expected = [(b'{"id":1}', b'{"id":1,"name":"ann","score":1.0}'),
                (b'{"id":2}', b'{"id":2,"name":"bob","score":2.0}'),
                (b'{"id":1}', b'{"id":1,"name":"ann","score":10.0}'),
                (b'{"id":2}', None),
                (b'{"id":2}', None)]
    assert seen == expected
    assert [(k, v) for _, k, v in read_log_kafka_python(node, "users")] == expected


def test_lines_json_functions(node):
    rows(node, "CREATE TABLE lines (_key VARCHAR, _value VARCHAR, _timestamp TIMESTAMP);")
    producer = Producer({"bootstrap.servers": node.bootstrap})
    producer.produce("lines", key=b"k1", value=b"plain text, not JSON")
    producer.produce("lines", key=b"k2", value=b'{"event": "click", "n": 3}')
    assert producer.flush(10) == 0
    code, out, err = weir_sql(
        node, "SELECT _key, _value->>'event' AS event, json_get_int(_value, 'n') AS n FROM lines ORDER BY _key;")
    assert code == 0, err
    assert out == "_key  event  n\nk1    NULL   NULL\nk2    click  3\n"
    assert rows(node, "SELECT _value->'n' AS n, json_get_str(_value, 'event') AS e, "
                      "json_get_float(_value, 'n') AS f FROM lines WHERE _key = 'k2'") == \
        [{"n": 3, "e": "click", "f": 3.0}]


def delivery_errors(bootstrap, topic, records, **conf):
    """Produces (key, value) pairs as one batch; the delivery errors."""
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, "retries": 0, **conf})
    for k, v in records:
        p.produce(topic, key=k, value=v, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(10) == 0
    return errors


def test_refused_batches_write_nothing(node):
    rows(node, "CREATE TABLE strict (id BIGINT, name VARCHAR NOT NULL, score DOUBLE DEFAULT 1.5)")
    rows(node, "CREATE TABLE plain (id BIGINT)")
    ok = (None, json.dumps({"id": 1, "name": "fine"}).encode())
    cases = [
        ("strict", (None, b'{"id": "abc", "name": "x"}'), 'failed to parse "abc" as BIGINT'),
        ("strict", (None, b"not json at all"), "is not JSON"),
        ("strict", (None, b"[1, 2]"), "not a JSON object"),
        ("strict", (None, b'{"id": 3}'), "name is NOT NULL"),
        ("plain", (None, json.dumps({"op": "d", "before": {"id": 1}, "after": None}).encode()),
         "needs a table with a PRIMARY KEY"),
    ]
    for table, bad, reason in cases:
        before, lines_before = end_offset(node, table), len(node.log)
        errors = delivery_errors(node.bootstrap, table, [ok, bad, ok])
        assert len(errors) == 3 and all(e is not None for e in errors), errors
        assert all(e.code() == 87 or "INVALID_RECORD" in e.name() for e in errors), errors
        assert end_offset(node, table) == before, "nothing of the batch is written"
        # One line says why: the table, the record, the reason, its value.
        logged = [line for line in node.log[lines_before:] if reason in line]
        assert len(logged) == 1, logged
        assert f"table {table}: record 1: " in logged[0], logged
        assert "value " + json.dumps(bad[1].decode()) in logged[0], logged
    # The good record alone goes in, with its DEFAULT.
    assert delivery_errors(node.bootstrap, "strict", [ok]) == [None]
    assert rows(node, "SELECT * FROM strict") == [{"id": 1, "name": "fine", "score": 1.5}]
    assert rows(node, "SELECT count(*) AS n FROM plain") == [{"n": 0}]


def test_tables_and_keyed_state_survive_restart_and_kill_9(make_node):
    node = make_node()
    users_000(node)
    rows(node, "CREATE TABLE counts (n BIGINT NOT NULL) WITH (partitions = 4, retention_ms = 86400000)")
    p = Producer({"bootstrap.servers": node.bootstrap})
    for n in range(100):
        p.produce("counts", value=json.dumps({"n": n}), partition=n % 4)
    assert p.flush(10) == 0
    node.restart()
    assert rows(node, "SELECT * FROM users") == [{"id": 1, "name": "ann", "plan": "pro"}]
    assert rows(node, "SELECT count(*) AS c, sum(n) AS s FROM counts") == [{"c": 100, "s": 4950}]
    # More changes, then kill -9: what was acknowledged is there.
    p = Producer({"bootstrap.servers": node.bootstrap})
    p.produce("users", key=b"3", value=json.dumps({"id": 3, "name": "cy", "plan": "team"}))
    p.produce("users", key=b"1", value=None)
    assert p.flush(10) == 0
    assert rows(node, "SELECT id FROM users") == [{"id": 3}]
    node.kill()
    node.start()
    assert rows(node, "SELECT id, name, plan FROM users") == [{"id": 3, "name": "cy", "plan": "team"}]
    described = {r["column"]: r for r in rows(node, "DESCRIBE users")}
    assert described["id"]["primary_key"] is True and described["name"]["type"] == "VARCHAR"
    from confluent_kafka.admin import AdminClient, ConfigResource
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, "counts")
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["retention.ms"].value == "86400000"
    assert len(admin.list_topics(timeout=10).topics["counts"].partitions) == 4


def test_sql_surface(node):
    rows(node, "CREATE TABLE t (id BIGINT PRIMARY KEY, user VARCHAR, score DOUBLE, ok BOOLEAN, "
               "meta JSON, at TIMESTAMP, tag TEXT DEFAULT 'none')")
    assert rows(node, "CREATE TABLE IF NOT EXISTS t (x INT)") == []
    status, body = sql(node, "CREATE TABLE t (x INT)")
    assert status == 400 and "already exists" in body["error"]
    p = Producer({"bootstrap.servers": node.bootstrap})
    data = [
        {"id": 1, "user": "ann", "score": 3.5, "ok": True, "meta": {"a": [1, 2]}, "at": "2026-01-02T03:04:05Z"},
        {"id": 2, "user": "bob", "score": 1, "ok": False, "meta": None, "at": 1767322800000, "tag": "x"},
        {"id": 3, "user": "cy", "score": None, "ok": None},
        {"id": 4, "user": "ann", "score": 2.5},
    ]
    for d in data:
        p.produce("t", key=str(d["id"]), value=json.dumps(d))
    assert p.flush(10) == 0
    assert rows(node, "SELECT id FROM t WHERE user = 'ann' AND score > 3") == [{"id": 1}]
    assert rows(node, "SELECT id FROM t WHERE score IS NULL") == [{"id": 3}]
    assert rows(node, "SELECT id FROM t WHERE NOT ok ORDER BY id") == [{"id": 2}]
    assert rows(node, "SELECT id FROM t WHERE user IN ('bob', 'cy') ORDER BY id DESC") == [{"id": 3}, {"id": 2}]
    assert rows(node, "SELECT id FROM t WHERE user LIKE 'a%' OR user LIKE '_o_' ORDER BY id") == \
        [{"id": 1}, {"id": 2}, {"id": 4}]
    # NULLs sort first descending, as in PostgreSQL.
    assert rows(node, "SELECT id, tag FROM t ORDER BY score DESC, id LIMIT 2 OFFSET 1") == \
        [{"id": 1, "tag": "none"}, {"id": 4, "tag": "none"}]
    assert rows(node, "SELECT id FROM t ORDER BY score DESC NULLS LAST LIMIT 1") == [{"id": 1}]
    assert rows(node, "SELECT user, count(*) AS n, min(score) AS lo, max(score) AS hi, avg(score) AS mean "
                      "FROM t GROUP BY user ORDER BY n DESC, user") == [
        {"user": "ann", "n": 2, "lo": 2.5, "hi": 3.5, "mean": 3.0},
        {"user": "bob", "n": 1, "lo": 1.0, "hi": 1.0, "mean": 1.0},
        {"user": "cy", "n": 1, "lo": None, "hi": None, "mean": None},
    ]
    assert rows(node, "SELECT meta->'a' AS a, meta->'a'->>1 AS second, at FROM t WHERE id = 1") == \
        [{"a": [1, 2], "second": "2", "at": "2026-01-02 03:04:05.000"}]
    assert rows(node, "SELECT at FROM t WHERE id = 2") == [{"at": "2026-01-02 03:00:00.000"}]
    assert rows(node, "SELECT id * 10 + 1 AS x, upper(user) AS u FROM t WHERE id = 2") == [{"x": 21, "u": "BOB"}]
    assert rows(node, "SELECT 1 + 1 AS two") == [{"two": 2}]
    assert rows(node, "SELECT count(*) AS n FROM t WHERE id > 100") == [{"n": 0}]
    assert {r["name"]: r["kind"] for r in rows(node, "SHOW TABLES")} == {"t": "keyed"}
    for bad, why in [("SELEC 1", "sql parser error"), ("SELECT * FROM nowhere", "no table nowhere"),
                     ("SELECT nope FROM t", "unknown column"), ("CREATE TABLE u (x UUID)", "not supported"),
                     ("SELECT sum(*) FROM t", "not allowed"), ("SELECT id FROM t WHERE count(*) > 1", "WHERE")]:
        status, body = sql(node, bad)
        assert status == 400 and why in body["error"], (bad, body)
    # Several statements: the last one's rows.
    assert rows(node, "CREATE TABLE a (x INT); CREATE TABLE b (y INT); SHOW TABLES") == [
        {"name": "a", "kind": "table", "partitions": 1, "format": "json", "subject": None},
        {"name": "b", "kind": "table", "partitions": 1, "format": "json", "subject": None},
        {"name": "t", "kind": "keyed", "partitions": 1, "format": "json", "subject": None},
    ]
    assert rows(node, "DROP TABLE a; DROP TABLE IF EXISTS a; DROP TABLE IF EXISTS b") == []
    status, body = sql(node, "DROP TABLE a")
    assert status == 400 and "no table a" in body["error"]
    assert [r["name"] for r in rows(node, "SHOW TABLES")] == ["t"]


def test_a_raw_topic_is_a_table(node):
    create_topic(node.bootstrap, "raw", partitions=2)
    p = Producer({"bootstrap.servers": node.bootstrap, "compression.type": "zstd"})
    p.produce("raw", key=b"k", value=b'{"x": 1}', partition=0, headers=[("h", b"v")])
    p.produce("raw", value=b"second", partition=1)
    assert p.flush(10) == 0
    got = rows(node, "SELECT _partition, _offset, _key, _value, _headers FROM raw ORDER BY _partition")
    assert got == [
        {"_partition": 0, "_offset": 0, "_key": "k", "_value": '{"x": 1}', "_headers": {"h": "v"}},
        {"_partition": 1, "_offset": 0, "_key": None, "_value": "second", "_headers": {}},
    ]
    assert rows(node, "SELECT json_get_int(_value, 'x') AS x FROM raw WHERE _key = 'k'") == [{"x": 1}]
    assert [r["column"] for r in rows(node, "DESCRIBE raw")] == \
        ["_partition", "_offset", "_timestamp", "_key", "_value", "_headers"]


def test_scans_read_only_what_the_statement_needs(node):
    """A LIMIT with nothing that needs every row first stops each
    partition's scan after OFFSET + LIMIT kept rows; the answer must be the
    same slice of the full scan (partition, then offset order), with WHERE
    applied before counting, and ORDER BY, aggregates and DISTINCT still
    seeing every row. Scans fill only the columns a statement names
    (anywhere: WHERE, GROUP BY, HAVING, ORDER BY), so each clause must
    still see its columns."""
    create_topic(node.bootstrap, "many", partitions=3)
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0})
    for i in range(300):
        p.produce("many", key=str(i), value=json.dumps({"i": i}), partition=i % 3)
        if i % 50 == 0:
            p.flush(10)  # several batches per partition
    assert p.flush(10) == 0
    every = rows(node, "SELECT _partition, _offset, _value FROM many")
    assert len(every) == 300
    assert [(r["_partition"], r["_offset"]) for r in every] == sorted((r["_partition"], r["_offset"]) for r in every)
    for limit, offset in [(1, 0), (7, 0), (5, 98), (10, 95), (3, 299), (4, 300), (0, 0), (1000, 0)]:
        got = rows(node, f"SELECT _partition, _offset, _value FROM many LIMIT {limit} OFFSET {offset}")
        assert got == every[offset:offset + limit], (limit, offset)
    even = [r for r in every if json.loads(r["_value"])["i"] % 2 == 0]
    got = rows(node, "SELECT _partition, _offset, _value FROM many "
                     "WHERE json_get_int(_value, 'i') % 2 = 0 LIMIT 6 OFFSET 48")
    assert got == even[48:54]
    assert rows(node, "SELECT count(*) AS n FROM many LIMIT 1") == [{"n": 300}]
    assert rows(node, "SELECT _offset FROM many ORDER BY _offset DESC, _partition LIMIT 2") == \
        [{"_offset": 99}, {"_offset": 99}]
    assert len(rows(node, "SELECT DISTINCT _partition FROM many LIMIT 3")) == 3
    # ORDER BY with LIMIT keeps each partition's best rows only; ties keep
    # partition, then offset order, as the full sort does.
    by_offset = rows(node, "SELECT _partition, _offset FROM many ORDER BY _offset DESC")
    for limit, offset in [(5, 2), (1, 0), (7, 290), (3, 300)]:
        assert rows(node, f"SELECT _partition, _offset FROM many ORDER BY _offset DESC LIMIT {limit} OFFSET {offset}") \
            == by_offset[offset:offset + limit], (limit, offset)
    assert rows(node, "SELECT json_get_int(_value, 'i') AS i FROM many ORDER BY i DESC LIMIT 3") == \
        [{"i": 299}, {"i": 298}, {"i": 297}]
    assert rows(node, "SELECT _offset, _partition FROM many ORDER BY 2 DESC, 1 LIMIT 2") == \
        [{"_offset": 0, "_partition": 2}, {"_offset": 1, "_partition": 2}]
    assert rows(node, "SELECT count(*) AS n, count(_key) AS k, max(json_get_int(_value, 'i')) AS top "
                      "FROM many") == [{"n": 300, "k": 300, "top": 299}]
    assert rows(node, "SELECT count(*) AS n FROM many GROUP BY _partition") == [{"n": 100}] * 3
    assert rows(node, "SELECT _partition AS p FROM many GROUP BY _partition "
                      "HAVING min(json_get_int(_value, 'i')) = 1") == [{"p": 1}]
    assert rows(node, "SELECT _offset FROM many WHERE _key = '7' ORDER BY _timestamp, _offset") == \
        [{"_offset": 2}]
    assert rows(node, "SELECT _offset AS o FROM many WHERE _partition = 2 ORDER BY _value DESC LIMIT 1") == \
        [{"o": 32}]  # partition 2 holds i = 3 * offset + 2; '{"i": 98}' sorts last
    # A keyed table: its current rows, in the order they were last written.
    rows(node, "CREATE TABLE kv (id BIGINT PRIMARY KEY, v VARCHAR)")
    for i in range(20):
        p.produce("kv", key=str(i % 8), value=json.dumps({"id": i % 8, "v": f"v{i}"}))
    assert p.flush(10) == 0
    kv = rows(node, "SELECT id, v FROM kv")
    assert len(kv) == 8
    assert rows(node, "SELECT id, v FROM kv LIMIT 3 OFFSET 2") == kv[2:5]


def test_a_select_past_the_scan_limit_is_refused_and_the_node_serves_on(make_node):
    """--sql-max-scan-bytes bounds what one SELECT gathers: a statement that
    would hold more rows is refused with a 400 naming the limit; a LIMIT
    that fits still answers, and aggregates, folded as the rows are read,
    answer over any number of rows."""
    node = make_node(extra=["--sql-max-scan-bytes", "100000"])
    create_topic(node.bootstrap, "wide", partitions=2)
    p = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(1000):
        p.produce("wide", value=json.dumps({"i": i, "pad": "x" * 1000}), partition=i % 2)
    assert p.flush(10) == 0
    for too_wide in ("SELECT * FROM wide", "SELECT _offset FROM wide"):
        status, body = sql(node, too_wide)
        assert status == 400 and "--sql-max-scan-bytes" in body["error"] and "50000" in body["error"], body
    assert rows(node, "SELECT count(*) AS n, sum(json_get_int(_value, 'i')) AS total FROM wide") == \
        [{"n": 1000, "total": 499500}]
    assert rows(node, "SELECT _partition AS p, count(*) AS n FROM wide GROUP BY _partition ORDER BY p") == \
        [{"p": 0, "n": 500}, {"p": 1, "n": 500}]
    assert len(rows(node, "SELECT * FROM wide LIMIT 20")) == 20
    # The latest rows by a key: each partition holds its best few only.
    assert [json.loads(r["_value"])["i"] for r in
            rows(node, "SELECT * FROM wide ORDER BY json_get_int(_value, 'i') DESC LIMIT 3")] == [999, 998, 997]
    assert rows(node, "SELECT json_get_int(_value, 'i') AS i FROM wide WHERE _partition = 1 AND _offset = 3") == \
        [{"i": 7}]


def test_groups_merge_across_partitions(node):
    """Each partition folds its own rows into groups; the merged answer is
    the one a single pass over all rows in partition order gives: the same
    groups and first rows, counts and sums added, an integer sum that
    overflows turning to a float, MIN/MAX across partitions, and a
    non-number refused."""
    create_topic(node.bootstrap, "spread", partitions=3)
    p = Producer({"bootstrap.servers": node.bootstrap})
    big = 9223372036854775807
    records = [(0, "a", {"n": 1, "s": "x"}), (1, "b", {"n": 2, "s": "y"}), (2, "a", {"n": 3, "s": "z"}),
               (1, "a", {"n": None, "s": "w"}), (2, "c", {"n": big, "s": "v"}), (0, "c", {"n": 5, "s": "u"})]
    for partition, key, value in records:
        p.produce("spread", key=key, value=json.dumps(value), partition=partition)
    assert p.flush(10) == 0
    n = "json_get_int(_value, 'n')"
    got = rows(node, f"SELECT _key AS k, count(*) AS c, count({n}) AS cn, sum({n}) AS s, min({n}) AS lo, "
                     f"max(json_get_str(_value, 's')) AS hi, avg({n}) AS mean FROM spread GROUP BY _key")
    # Groups in order of first appearance: partition 0 (a, c), then b.
    assert got == [
        {"k": "a", "c": 3, "cn": 2, "s": 4, "lo": 1, "hi": "z", "mean": 2.0},
        {"k": "c", "c": 2, "cn": 2, "s": float(big + 5), "lo": 5, "hi": "v", "mean": (big + 5) / 2},
        {"k": "b", "c": 1, "cn": 1, "s": 2, "lo": 2, "hi": "y", "mean": 2.0},
    ]
    assert rows(node, f"SELECT _key AS k FROM spread GROUP BY _key HAVING sum({n}) > 3 AND count(*) > 2") == \
        [{"k": "a"}]
    assert rows(node, "SELECT _key AS k, count(*) AS c FROM spread GROUP BY _key ORDER BY count(*) DESC, k") == \
        [{"k": "a", "c": 3}, {"k": "c", "c": 2}, {"k": "b", "c": 1}]
    assert rows(node, "SELECT count(*) AS n, max(_offset) AS top FROM spread WHERE _key = 'none'") == \
        [{"n": 0, "top": None}]
    status, body = sql(node, "SELECT sum(json_get_str(_value, 's')) FROM spread")
    assert status == 400 and "non-number" in body["error"], body


def test_idempotent_producer_survives_batches_that_make_no_rows(node):
    """A tombstone into an unkeyed table, or a Debezium truncate, stores
    nothing; an idempotent producer's next batch must still follow on."""
    rows(node, "CREATE TABLE plain (n BIGINT)")
    errors = []
    p = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True})

    def send(value):
        p.produce("plain", value=value, on_delivery=lambda err, msg: errors.append(err))
        assert p.flush(10) == 0  # each its own batch

    send(json.dumps({"n": 1}))
    send(None)  # skipped: no row, no offset
    send(json.dumps({"op": "t", "before": None, "after": None}))  # a truncate: skipped
    send(json.dumps({"n": 2}))
    assert errors == [None, None, None, None]
    assert rows(node, "SELECT n FROM plain ORDER BY n") == [{"n": 1}, {"n": 2}]
    assert end_offset(node, "plain") == 2, "skipped records take no offsets"


def test_a_producers_pipelined_records_land_in_the_order_sent(node):
    """One connection, many produce requests in flight, into a table whose
    records are converted on the partitions' owners (two shards): each
    partition's log holds them in the order sent, and one key's latest row
    is its last write."""
    # Small segments: a roll is an await inside an append, where a request
    # run beside another could overtake it.
    rows(node, "CREATE TABLE seq (k VARCHAR PRIMARY KEY, n BIGINT) "
               "WITH (partitions = 4, internal_segment_bytes = 16384)")
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0, "batch.num.messages": 20,
                  "max.in.flight.requests.per.connection": 5, "acks": "all"})
    total = 20_000
    for n in range(total):
        p.produce("seq", value=json.dumps({"k": f"k{n % 4}", "n": n}), partition=n % 4)
        p.poll(0)
    assert p.flush(30) == 0
    got = consume_all(node.bootstrap, "seq", 4, expected=total)
    by_partition = {}
    for m in got:
        by_partition.setdefault(m.partition(), []).append(json.loads(m.value())["n"])
    for part, ns in by_partition.items():
        assert ns == sorted(ns), f"partition {part} out of order"
    assert rows(node, "SELECT k, n FROM seq ORDER BY k") == [
        {"k": f"k{i}", "n": total - 4 + i} for i in range(4)]
