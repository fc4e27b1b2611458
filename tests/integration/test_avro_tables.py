"""Avro tables: records framed with a schema id of the node's registry (as
confluent-kafka's AvroSerializer writes them) are produced into a table,
kept as produced for consumers, and read as rows with SQL. Seed 003's trade
flow adapted to confluent-kafka; schema evolution; keyed Avro tables with
tombstones across restart and kill -9; and every kind of bad record refused
with INVALID_RECORD, nothing of its batch written."""
import json
import struct

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from conftest import consume_all
from test_tables import delivery_errors, end_offset, rows, sql

# Seed 003's trade schema, and a compatible evolution of it: a field with a
# default.
TRADE_FIELDS = [
    {"name": "id", "type": "long"},
    {"name": "symbol", "type": "string"},
    {"name": "quantity", "type": "int"},
    {"name": "price", "type": "double"},
]
TRADE = json.dumps({"type": "record", "name": "Trade", "namespace": "market",
                    "fields": TRADE_FIELDS})
TRADE_V2 = json.dumps({"type": "record", "name": "Trade", "namespace": "market",
                       "fields": TRADE_FIELDS + [
                           {"name": "venue", "type": ["null", "string"], "default": None}]})


def serializer(node, schema=TRADE, subject_auto=True):
    sr = SchemaRegistryClient({"url": node.http})
    return sr, AvroSerializer(sr, schema, conf={"auto.register.schemas": subject_auto})


def produce_trades(node, topic, trades, schema=TRADE, keys=None):
    _, ser = serializer(node, schema)
    p = Producer({"bootstrap.servers": node.bootstrap})
    errors = []
    for i, t in enumerate(trades):
        value = None if t is None else ser(t, SerializationContext(topic, MessageField.VALUE))
        key = None if keys is None else keys[i]
        p.produce(topic, key=key, value=value, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(15) == 0
    assert errors == [None] * len(trades), errors


def trade(i, symbol="ACME"):
    return {"id": i, "symbol": symbol, "quantity": 10 + i, "price": 12.5 + i}


def test_seed_003_trades_become_rows_and_stay_framed_for_consumers(node):
    sr, _ = serializer(node)
    sid = sr.register_schema("trades-value", Schema(TRADE, "AVRO"))
    # The table's columns come from the subject's latest schema.
    rows(node, "CREATE TABLE trades WITH (format = 'avro', subject = 'trades-value', partitions = 2)")
    described = rows(node, "DESCRIBE trades")
    assert [(r["column"], r["type"]) for r in described] == [
        ("id", "BIGINT"), ("symbol", "VARCHAR"), ("quantity", "INT"), ("price", "DOUBLE")]
    assert [t for t in rows(node, "SHOW TABLES") if t["name"] == "trades"] == [
        {"name": "trades", "kind": "table", "partitions": 2, "format": "avro",
         "subject": "trades-value"}]
    trades = [trade(i, "ACME" if i % 2 else "WEIR") for i in range(40)]
    produce_trades(node, "trades", trades)
    # SQL reads rows.
    assert rows(node, "SELECT * FROM trades ORDER BY id") == trades
    assert rows(node, "SELECT symbol, sum(quantity) AS q, count(*) AS n FROM trades "
                      "GROUP BY symbol ORDER BY symbol") == [
        {"symbol": "ACME", "q": sum(10 + i for i in range(1, 40, 2)), "n": 20},
        {"symbol": "WEIR", "q": sum(10 + i for i in range(0, 40, 2)), "n": 20}]
    # Consumers read the records as produced: framed with the id, which
    # the deserializer resolves through the node's registry.
    got = consume_all(node.bootstrap, "trades", 2, expected=40)
    assert all(m.value()[0] == 0 and struct.unpack(">I", m.value()[1:5])[0] == sid for m in got)
    de = AvroDeserializer(sr)
    decoded = [de(m.value(), SerializationContext("trades", MessageField.VALUE)) for m in got]
    assert sorted(decoded, key=lambda t: t["id"]) == trades

    # The subject evolves: records of either version read as rows; a field
    # the table lacks is passed over.
    produce_trades(node, "trades", [dict(trade(100), venue="XNAS")], schema=TRADE_V2)
    assert rows(node, "SELECT * FROM trades WHERE id = 100") == [trade(100)]

    # A table declared with a column the first version lacks: its DEFAULT
    # fills it for records written with that version.
    rows(node, "CREATE TABLE venues (id BIGINT, venue VARCHAR DEFAULT 'XNYS', _timestamp TIMESTAMP) "
               "WITH (format = 'avro', subject = 'trades-value')")
    produce_trades(node, "venues", [trade(1)])
    produce_trades(node, "venues", [dict(trade(2), venue="XNAS")], schema=TRADE_V2)
    got = rows(node, "SELECT id, venue FROM venues ORDER BY id")
    assert got == [{"id": 1, "venue": "XNYS"}, {"id": 2, "venue": "XNAS"}]
    # An unkeyed table passes tombstones over.
    produce_trades(node, "venues", [None])
    assert rows(node, "SELECT count(*) AS n FROM venues") == [{"n": 2}]
    # INSERT writes each row as a datum of the subject's latest schema,
    # which consumers decode as any producer's record.
    rows(node, "INSERT INTO trades VALUES (500, 'SQL', 5, 1.5)")
    assert rows(node, "SELECT * FROM trades WHERE id = 500") == [
        {"id": 500, "symbol": "SQL", "quantity": 5, "price": 1.5}]
    last = [m for m in consume_all(node.bootstrap, "trades", 2) if m.value()[5:] and
            de(m.value(), SerializationContext("trades", MessageField.VALUE))["id"] == 500]
    assert de(last[0].value(), SerializationContext("trades", MessageField.VALUE)) == {
        "id": 500, "symbol": "SQL", "quantity": 5, "price": 1.5, "venue": None}


def test_a_table_needs_its_subject_or_its_columns(node):
    status, body = sql(node, "CREATE TABLE orders WITH (format = 'avro')")
    assert status == 400 and "orders-value has no schema in the registry" in body["error"], body
    status, body = sql(node, "CREATE TABLE t2 (id BIGINT) WITH (subject = 'x')")
    assert status == 400 and "format = 'avro'" in body["error"], body
    status, body = sql(node, "CREATE TABLE t3 (id BIGINT) WITH (format = 'protobuf')")
    assert status == 400 and "not served" in body["error"], body
    status, body = sql(node, "CREATE TABLE t4 (id BIGINT PRIMARY KEY) WITH (format = 'avro')")
    assert status == 400 and "can only be _key" in body["error"], body
    # Declared columns need no schema yet: the subject's default name is
    # the table's, as TopicNameStrategy names it.
    rows(node, "CREATE TABLE orders (id BIGINT, symbol VARCHAR) WITH (format = 'avro')")
    produce_trades(node, "orders", [trade(5)])
    assert rows(node, "SELECT * FROM orders") == [{"id": 5, "symbol": "ACME"}]
    # An INSERT names what the subject's latest schema lacks a value for.
    status, body = sql(node, "INSERT INTO orders VALUES (6, 'X')")
    assert status == 400 and "field quantity: null (no value and no default)" in body["error"], body
    status, body = sql(node, "CREATE TABLE blank (id BIGINT) WITH (format = 'avro')")
    status, body = sql(node, "INSERT INTO blank VALUES (1)")
    assert status == 400 and "subject blank-value has no schema in the registry" in body["error"], body


def test_bad_records_are_refused_and_nothing_of_their_batch_is_written(node):
    sr, ser = serializer(node)
    sid = sr.register_schema("trades-value", Schema(TRADE, "AVRO"))
    other = sr.register_schema("other-value", Schema(json.dumps(
        {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "long"}]}), "AVRO"))
    json_id = sr.register_schema("trades-value-json", Schema('{"type": "object"}', "JSON"))
    rows(node, "CREATE TABLE trades WITH (format = 'avro', subject = 'trades-value')")
    good = ser(trade(1), SerializationContext("trades", MessageField.VALUE))
    datum = good[5:]
    frame = lambda i: b"\x00" + struct.pack(">I", i)
    cases = [
        (b"\x01" + good[1:], "not the schema registry's magic byte 0"),
        (b"\x00\x00\x01", "too short for the schema registry's framing"),
        (frame(9999) + datum, "schema id 9999 is not registered"),
        (good + b"\x00", "1 trailing bytes after the datum"),
        (good[:-4], "field price: the datum ends"),
        (frame(other) + b"\x02", f"schema id {other} is not a version of subject \"trades-value\""),
        (frame(json_id) + b"{}", f"schema id {json_id} is a JSON schema, not Avro"),
        (frame(sid) + b"\x02\x04\xff\xfe", "field symbol: a string that is not UTF-8"),
    ]
    for bad, reason in cases:
        before, lines_before = end_offset(node, "trades"), len(node.log)
        errors = delivery_errors(node.bootstrap, "trades", [(None, good), (None, bad), (None, good)])
        assert len(errors) == 3 and all(e is not None for e in errors), (reason, errors)
        assert all(e.code() == 87 or "INVALID_RECORD" in e.name() for e in errors), errors
        assert end_offset(node, "trades") == before, "nothing of the batch is written"
        logged = [line for line in node.log[lines_before:] if reason in line]
        assert len(logged) == 1, (reason, node.log[lines_before:])
        assert "table trades: record 1: " in logged[0], logged
    assert delivery_errors(node.bootstrap, "trades", [(None, good)]) == [None]
    assert rows(node, "SELECT * FROM trades") == [trade(1)]


def test_keyed_avro_table_deletes_by_tombstone_across_restart_and_kill_9(make_node):
    node = make_node()
    rows(node, "CREATE TABLE book (_key VARCHAR PRIMARY KEY, id BIGINT, symbol VARCHAR, quantity INT, "
               "price DOUBLE) "
               "WITH (format = 'avro', subject = 'book-value', partitions = 3)")
    keys = [f"k{i}".encode() for i in range(30)]
    produce_trades(node, "book", [trade(i) for i in range(30)], keys=keys)
    # Updates and deletes: k0..k9 updated, k10..k14 tombstoned.
    produce_trades(node, "book", [dict(trade(i), price=99.0) for i in range(10)], keys=keys[:10])
    produce_trades(node, "book", [None] * 5, keys=keys[10:15])
    # A keyed table's record needs a key.
    errors = delivery_errors(node.bootstrap, "book", [(None, serializer(node)[1](
        trade(1), SerializationContext("book", MessageField.VALUE)))])
    assert errors[0] is not None and errors[0].code() == 87, errors
    # And SQL names rows by their key, writing and deleting.
    rows(node, "INSERT INTO book (_key, id, symbol, quantity, price) VALUES ('k30', 30, 'SQL', 3, 1.0)")
    rows(node, "DELETE FROM book WHERE _key = 'k29'")

    def expected():
        out = {}
        for i in range(29):
            if 10 <= i < 15:
                continue
            out[f"k{i}"] = {"_key": f"k{i}", "id": i, "symbol": "ACME", "quantity": 10 + i,
                            "price": 99.0 if i < 10 else 12.5 + i}
        out["k30"] = {"_key": "k30", "id": 30, "symbol": "SQL", "quantity": 3, "price": 1.0}
        return sorted(out.values(), key=lambda r: r["id"])

    assert rows(node, "SELECT * FROM book ORDER BY id") == expected()
    node.restart()
    assert rows(node, "SELECT * FROM book ORDER BY id") == expected()
    node.kill()
    node.start()
    assert rows(node, "SELECT * FROM book ORDER BY id") == expected()
    # Consumers still read every record as produced (deletes as tombstones).
    got = consume_all(node.bootstrap, "book", 3, expected=30 + 10 + 5 + 1 + 1)
    assert sum(1 for m in got if m.value() is None) == 6


# A Debezium change event's schema as its AvroConverter registers it: the
# row record defined in `before`, named in `after`.
USERS_ENVELOPE = json.dumps({
    "type": "record", "name": "Envelope", "namespace": "users_cdc",
    "fields": [
        {"name": "before", "type": ["null", {
            "type": "record", "name": "Value",
            "fields": [{"name": "id", "type": "int"},
                       {"name": "name", "type": ["null", "string"], "default": None}]}],
         "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
})
USERS_KEY = json.dumps({"type": "record", "name": "Key", "namespace": "users_cdc",
                        "fields": [{"name": "id", "type": "int"}]})


def test_debezium_change_events_in_avro_become_the_latest_rows(node):
    sr = SchemaRegistryClient({"url": node.http})
    sr.register_schema("users_cdc-value", Schema(USERS_ENVELOPE, "AVRO"))
    # The row's columns, not the envelope's, come from the subject.
    rows(node, "CREATE TABLE users_cdc (_key BYTES PRIMARY KEY) "
               "WITH (format = 'avro', subject = 'users_cdc-value')")
    assert [r["column"] for r in rows(node, "DESCRIBE users_cdc")] == ["_key", "id", "name"]
    value = AvroSerializer(sr, USERS_ENVELOPE)
    key = AvroSerializer(sr, USERS_KEY)
    ctx_v = SerializationContext("users_cdc", MessageField.VALUE)
    ctx_k = SerializationContext("users_cdc", MessageField.KEY)

    def event(op, before, after):
        row = lambda i, n: None if i is None else {"id": i, "name": n}
        return {"before": row(*before), "after": row(*after), "op": op, "ts_ms": 1}

    p = Producer({"bootstrap.servers": node.bootstrap})
    errors = []
    for k, v in [
        (1, event("r", (None, None), (1, "ann"))),
        (2, event("c", (None, None), (2, "bob"))),
        (1, event("u", (1, "ann"), (1, "ann2"))),
        (2, event("d", (2, "bob"), (None, None))),
        (2, None),  # the tombstone Debezium sends after a delete
    ]:
        p.produce("users_cdc", key=key({"id": k}, ctx_k),
                  value=None if v is None else value(v, ctx_v),
                  on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(15) == 0 and errors == [None] * 5, errors
    assert rows(node, "SELECT id, name FROM users_cdc") == [{"id": 1, "name": "ann2"}]


def test_a_connections_pipelined_produces_append_in_the_order_sent(node):
    """The first of a producer's pipelined requests names a schema id the
    partition's core has not fetched yet (a hop to the registry before it
    can be checked), the ones after it an id already held: they still land
    behind it, in the order sent."""
    sr = SchemaRegistryClient({"url": node.http})
    sr.register_schema("seqtab-value", Schema(TRADE, "AVRO"))
    sr.register_schema("seqtab-value", Schema(TRADE_V2, "AVRO"))
    rows(node, "CREATE TABLE seqtab (id BIGINT) WITH (format = 'avro', subject = 'seqtab-value')")
    # The partition's core holds the second version's schema, not the first's.
    produce_trades(node, "seqtab", [dict(trade(0), venue="X")], schema=TRADE_V2)
    _, v1 = serializer(node, TRADE)
    _, v2 = serializer(node, TRADE_V2)
    ctx = SerializationContext("seqtab", MessageField.VALUE)
    values = [v1(trade(1), ctx)] + [v2(dict(trade(i), venue="X"), ctx) for i in range(2, 60)]
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0, "batch.num.messages": 1,
                  "max.in.flight.requests.per.connection": 5})
    errors = []
    for v in values:
        p.produce("seqtab", value=v, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(15) == 0 and errors == [None] * len(values), errors
    got = consume_all(node.bootstrap, "seqtab", 1, expected=60)
    de = AvroDeserializer(sr)
    assert [de(m.value(), ctx)["id"] for m in got] == list(range(60))
