"""The schema registry the node serves on its HTTP port, driven by
confluent-kafka's own SchemaRegistryClient and Avro serializers: register,
look up, evolve, refuse an incompatible change (409), delete; framed Avro
records produced and read back by id; the registry's state across a clean
restart and kill -9; bad input answered with the registry's errors; and
Basic and Bearer sign-in under the node's grants."""
import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from conftest import create_topic

CT = "application/vnd.schemaregistry.v1+json"

TRADE_V1 = json.dumps({
    "type": "record", "name": "Trade", "namespace": "market",
    "fields": [
        {"name": "symbol", "type": "string"},
        {"name": "price", "type": "double"},
        {"name": "qty", "type": "long"},
    ],
})
# Adds a field with a default: BACKWARD compatible.
TRADE_V2 = json.dumps({
    "type": "record", "name": "Trade", "namespace": "market",
    "fields": [
        {"name": "symbol", "type": "string"},
        {"name": "price", "type": "double"},
        {"name": "qty", "type": "long"},
        {"name": "venue", "type": "string", "default": "XNYS"},
    ],
})
# Adds a field without a default: not BACKWARD compatible.
TRADE_BAD = json.dumps({
    "type": "record", "name": "Trade", "namespace": "market",
    "fields": [
        {"name": "symbol", "type": "string"},
        {"name": "side", "type": "string"},
    ],
})


def client(node, **conf):
    return SchemaRegistryClient({"url": node.http, **conf})


def call(node, method, path, body=None, headers=None):
    """One raw request; returns (status, parsed body)."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(node.http + path, data=data, method=method)
    req.add_header("Content-Type", CT)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with node.urlopen(req, timeout=30) as r:
            assert path == "/sql" or r.headers["Content-Type"] == CT
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_register_look_up_evolve_refuse_and_delete(node):
    sr = client(node)
    id1 = sr.register_schema("trades-value", Schema(TRADE_V1, "AVRO"))
    # The same schema again (another spelling of it too) is the same id.
    assert sr.register_schema("trades-value", Schema(TRADE_V1, "AVRO")) == id1
    spaced = json.dumps(json.loads(TRADE_V1), indent=2)
    assert sr.register_schema("trades-value", Schema(spaced, "AVRO")) == id1
    found = sr.lookup_schema("trades-value", Schema(TRADE_V1, "AVRO"))
    assert (found.schema_id, found.version) == (id1, 1)
    assert sr.test_compatibility("trades-value", Schema(TRADE_V2, "AVRO")) is True
    assert sr.test_compatibility("trades-value", Schema(TRADE_BAD, "AVRO")) is False
    id2 = sr.register_schema("trades-value", Schema(TRADE_V2, "AVRO"))
    assert id2 != id1
    with pytest.raises(SchemaRegistryError) as e:
        sr.register_schema("trades-value", Schema(TRADE_BAD, "AVRO"))
    assert e.value.http_status_code == 409 and "venue" not in e.value.error_message
    assert "incompatible" in e.value.error_message
    latest = sr.get_latest_version("trades-value")
    assert (latest.version, latest.schema_id) == (2, id2)
    assert json.loads(latest.schema.schema_str)["fields"][3]["name"] == "venue"
    assert sr.get_versions("trades-value") == [1, 2]
    assert json.loads(sr.get_schema(id1).schema_str) == json.loads(TRADE_V1)
    # The same schema under another subject keeps its id.
    assert sr.register_schema("other-value", Schema(TRADE_V1, "AVRO")) == id1
    assert sorted(sr.get_subjects()) == ["other-value", "trades-value"]
    # Levels: NONE lets anything in; per subject, and back to the global.
    assert sr.set_compatibility("trades-value", "NONE")["compatibility"] == "NONE"
    id3 = sr.register_schema("trades-value", Schema(TRADE_BAD, "AVRO"))
    assert sr.get_compatibility("trades-value") == "NONE"
    assert sr.get_compatibility() == "BACKWARD"
    # Deletes: a version softly, then for good; the subject likewise.
    assert sr.delete_version("trades-value", 3) == 3
    assert sr.get_versions("trades-value") == [1, 2]
    assert sr.delete_version("trades-value", 3, permanent=True) == 3
    with pytest.raises(SchemaRegistryError) as e:
        sr.get_schema(id3)
    assert e.value.error_code == 40403
    assert sr.delete_subject("other-value") == [1]
    assert sr.get_subjects() == ["trades-value"]
    with pytest.raises(SchemaRegistryError) as e:
        sr.get_versions("other-value")
    assert e.value.error_code == 40401
    assert sr.delete_subject("other-value", permanent=True) == [1]
    # id1 is still trades-value's version 1; a new schema gets a new id.
    assert sr.get_schema(id1).schema_str
    fresh = json.dumps({"type": "record", "name": "Fresh", "fields": [{"name": "x", "type": "int"}]})
    assert sr.register_schema("fresh-value", Schema(fresh, "AVRO")) > id3


def test_avro_records_round_trip_by_id(node):
    """Seed 003's trade flow with confluent-kafka: the serializer registers
    under trades-value, records are framed (magic 0 and the id), and the
    deserializer reads them back with the writer's schema by id."""
    sr = client(node)
    serialize = AvroSerializer(sr, TRADE_V1)
    ctx = SerializationContext("trades", MessageField.VALUE)
    trades = [{"symbol": f"S{i}", "price": 10.0 + i, "qty": i} for i in range(50)]
    create_topic(node.bootstrap, "trades")
    p = Producer({"bootstrap.servers": node.bootstrap})
    failed = []
    for t in trades:
        p.produce("trades", value=serialize(t, ctx), on_delivery=lambda e, m: e and failed.append(e))
    assert p.flush(30) == 0 and failed == []
    registered = sr.get_latest_version("trades-value")
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    c.subscribe(["trades"])
    deserialize = AvroDeserializer(sr)
    got = []
    while len(got) < len(trades):
        m = c.poll(10)
        assert m is not None and m.error() is None
        raw = m.value()
        assert raw[0] == 0 and int.from_bytes(raw[1:5], "big") == registered.schema_id
        got.append(deserialize(raw, ctx))
    c.close()
    assert got == trades
    # The registry's own records are in the compacted topic _schemas.
    status, rows = call(node, "POST", "/sql", b"SELECT count(*) AS n FROM _schemas")
    assert status == 200 and rows[0]["n"] >= 1


def test_the_registry_survives_restart_and_kill(node):
    sr = client(node)
    id1 = sr.register_schema("a-value", Schema(TRADE_V1, "AVRO"))
    id2 = sr.register_schema("a-value", Schema(TRADE_V2, "AVRO"))
    sr.set_compatibility("a-value", "FULL")
    sr.register_schema("b-value", Schema('{"type": "string"}', "AVRO"))
    sr.delete_subject("b-value")
    node.restart()
    sr = client(node)
    assert sr.get_versions("a-value") == [1, 2]
    assert sr.get_compatibility("a-value") == "FULL"
    assert sr.get_subjects() == ["a-value"]
    assert call(node, "GET", "/subjects?deleted=true")[1] == ["a-value", "b-value"]
    node.kill()
    node.start()
    sr = client(node)
    assert sr.get_latest_version("a-value").schema_id == id2
    assert json.loads(sr.get_schema(id1).schema_str) == json.loads(TRADE_V1)
    # Ids go on past every id given before the kill.
    id3 = sr.register_schema("c-value", Schema('{"type": "long"}', "AVRO"))
    assert id3 > max(id1, id2) + 1


def test_bad_input_gets_the_registry_errors(node):
    bad = b'{"schema": '
    status, body = call(node, "POST", "/subjects/x/versions", bad)
    assert status == 400 and "malformed JSON" in body["message"]
    status, body = call(node, "POST", "/subjects/x/versions", {"schema": '{"type": "recrd"}'})
    assert status == 422 and body["error_code"] == 42201
    status, body = call(node, "POST", "/subjects/x/versions", {"schema": "{}", "schemaType": "XML"})
    assert status == 422 and "XML" in body["message"]
    huge = {"schema": json.dumps({"type": "enum", "name": "E", "symbols": [f"S{i}" for i in range(200_000)]})}
    status, body = call(node, "POST", "/subjects/x/versions", huge)
    assert status == 413 and "limit" in body["message"]
    status, body = call(node, "GET", "/schemas/ids/999999")
    assert status == 404 and body["error_code"] == 40403
    status, body = call(node, "GET", "/subjects/nope/versions/1")
    assert status == 404 and body["error_code"] == 40401
    status, body = call(node, "GET", "/subjects/nope/versions/zero")
    assert status == 422 and body["error_code"] == 42202
    status, body = call(node, "PUT", "/config", {"compatibility": "SIDEWAYS"})
    assert status == 422 and body["error_code"] == 42203
    status, body = call(node, "POST", "/subjects/x/versions",
                        {"schema": '"string"', "references": [{"name": "T", "subject": "y", "version": 1}]})
    assert status == 422 and "reference" in body["message"]
    # The node serves on, and the registry is empty still.
    assert call(node, "GET", "/subjects") == (200, [])
    # JSON and PROTOBUF schemas are kept and served (not checked for
    # compatibility).
    status, body = call(node, "POST", "/subjects/j/versions",
                        {"schemaType": "JSON", "schema": '{"type": "object"}'})
    assert status == 200
    assert call(node, "GET", f"/schemas/ids/{body['id']}")[1]["schemaType"] == "JSON"
    assert call(node, "GET", "/schemas/types")[1] == ["JSON", "PROTOBUF", "AVRO"]


def test_read_only_mode_refuses_changes(node):
    sr = client(node)
    sr.register_schema("m-value", Schema(TRADE_V1, "AVRO"))
    assert call(node, "PUT", "/mode", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    status, body = call(node, "POST", "/subjects/m-value/versions", {"schema": TRADE_V2})
    assert status == 422 and body["error_code"] == 42205
    assert call(node, "PUT", "/mode", {"mode": "READWRITE"})[0] == 200
    assert sr.register_schema("m-value", Schema(TRADE_V2, "AVRO")) > 0


ADMIN, WRITER, READER = "admin-token-1", "writer-token-2", "reader-token-3"


@pytest.fixture
def secured(make_node):
    return make_node(env={"WEIR_ADMIN_TOKEN": ADMIN, "WEIR_WRITER_TOKEN": WRITER,
                          "WEIR_READER_TOKEN": READER})


def test_basic_and_bearer_sign_in_under_the_grants(secured):
    with pytest.raises(SchemaRegistryError) as e:
        client(secured).get_subjects()
    assert e.value.http_status_code == 401
    writer = client(secured, **{"basic.auth.user.info": f"writer:{WRITER}"})
    sid = writer.register_schema("s-value", Schema(TRADE_V1, "AVRO"))
    bearer = {"bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": READER,
              "bearer.auth.logical.cluster": "weir", "bearer.auth.identity.pool.id": "weir"}
    reader = client(secured, **bearer)
    assert reader.get_schema(sid).schema_str
    assert reader.get_subjects() == ["s-value"]
    # A reader may read but not register.
    with pytest.raises(SchemaRegistryError) as e:
        reader.register_schema("s-value", Schema(TRADE_V2, "AVRO"))
    assert e.value.http_status_code == 403 and "_schemas" in e.value.error_message
