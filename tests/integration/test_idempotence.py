"""Idempotent producers: exactly one offset per record, resends recognised
(also after a restart), gaps and stale epochs refused."""
import struct

from confluent_kafka import Producer
from kafka import KafkaProducer

from conftest import consume_all, create_topic
from rawkafka import connect, parse_produce_v3_response, produce_v3, read_frame, request, string


def init_producer_id(node):
    with connect(node.bootstrap) as s:
        s.sendall(request(22, 0, string(None) + struct.pack(">i", 60000)))
        _cid, _throttle, err, pid, epoch = struct.unpack(">iihqh", read_frame(s))
    assert err == 0
    return pid, epoch


def batch(pid, epoch, seq, values):
    from kafka.record.default_records import DefaultRecordBatchBuilder
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=None, key=None, value=v, headers=[])
    return bytes(b.build())


def produce(sock, topic, records, cid=1):
    sock.sendall(request(0, 3, produce_v3(topic, 0, records), correlation_id=cid))
    _, parts = parse_produce_v3_response(read_frame(sock))
    return parts[0][2], parts[0][3]  # error, base offset


def test_kafka_python_default_producer_writes_each_record_once(node):
    create_topic(node.bootstrap, "idem-kp", partitions=3)
    p = KafkaProducer(bootstrap_servers=node.bootstrap)  # idempotent by default
    futures = [p.send("idem-kp", key=b"%d" % i, value=b"%d" % i) for i in range(10_000)]
    p.flush()
    metas = [f.get(30) for f in futures]
    p.close()
    offsets = sorted((m.partition, m.offset) for m in metas)
    assert len(set(offsets)) == 10_000
    got = consume_all(node.bootstrap, "idem-kp", 3, 10_000)
    assert sorted((m.partition(), m.offset()) for m in got) == offsets


def test_librdkafka_idempotent_producer_writes_each_record_once(node):
    create_topic(node.bootstrap, "idem-rd", partitions=4)
    p = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True, "linger.ms": 2})
    reports = []
    for i in range(10_000):
        p.produce("idem-rd", key=b"%d" % i, value=b"v%d" % i,
                  on_delivery=lambda e, m: reports.append((e, m.partition(), m.offset())))
        p.poll(0)
    assert p.flush(30) == 0
    assert all(e is None for e, _, _ in reports)
    assert len({(p_, o) for _, p_, o in reports}) == 10_000
    got = consume_all(node.bootstrap, "idem-rd", 4, 10_000)
    assert len(got) == 10_000


def test_resend_gap_and_epoch_on_the_wire_and_after_restart(make_node):
    n = make_node()
    create_topic(n.bootstrap, "idem-raw")
    pid, epoch = init_producer_id(n)
    first = batch(pid, epoch, 0, [b"a", b"b", b"c"])
    with connect(n.bootstrap) as s:
        assert produce(s, "idem-raw", first) == (0, 0)
        # The same batch again: success, its original offset, not stored twice.
        assert produce(s, "idem-raw", first) == (0, 0)
        assert produce(s, "idem-raw", batch(pid, epoch, 3, [b"d"])) == (0, 3)
        # A gap: sequence 5 when 4 is expected.
        err, _ = produce(s, "idem-raw", batch(pid, epoch, 5, [b"x"]))
        assert err == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert [m.value() for m in consume_all(n.bootstrap, "idem-raw", 1)] == [b"a", b"b", b"c", b"d"]

    n.restart()
    with connect(n.bootstrap) as s:
        # Recognised after the restart: rebuilt from the log.
        assert produce(s, "idem-raw", batch(pid, epoch, 3, [b"d"])) == (0, 3)
        err, _ = produce(s, "idem-raw", batch(pid, epoch, 7, [b"x"]))
        assert err == 45
        assert produce(s, "idem-raw", batch(pid, epoch, 4, [b"e"])) == (0, 4)
        # A newer epoch restarts at 0; the old epoch is then refused.
        assert produce(s, "idem-raw", batch(pid, epoch + 1, 0, [b"f"])) == (0, 5)
        err, _ = produce(s, "idem-raw", batch(pid, epoch, 5, [b"g"]))
        assert err == 47  # INVALID_PRODUCER_EPOCH
    assert [m.value() for m in consume_all(n.bootstrap, "idem-raw", 1)] == [b"a", b"b", b"c", b"d", b"e", b"f"]
    # Producer ids are never reused across restarts.
    pid2, _ = init_producer_id(n)
    assert pid2 != pid
