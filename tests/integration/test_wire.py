"""Exact bytes on the wire: refusals, malformed frames, version negotiation."""
import struct

from rawkafka import (connect, parse_produce_v3_response, produce_v3, read_frame, record_batch,
                      request, string)
from conftest import create_topic


def api_versions_ok(node):
    with connect(node.bootstrap) as s:
        s.sendall(request(18, 0, b""))
        frame = read_frame(s)
        cid, err = struct.unpack_from(">ih", frame, 0)
        return err == 0


def produce(node, topic, records, partition=0):
    with connect(node.bootstrap) as s:
        s.sendall(request(0, 3, produce_v3(topic, partition, records), correlation_id=42))
        cid, parts = parse_produce_v3_response(read_frame(s))
        assert cid == 42
        return parts[0]


def test_unknown_topic_is_refused_and_not_created(node):
    _, _, err, base = produce(node, "missing", record_batch([b"x"]))
    assert (err, base) == (3, -1)  # UNKNOWN_TOPIC_OR_PARTITION
    with connect(node.bootstrap) as s:
        # Metadata v1 for that name: still unknown.
        s.sendall(request(3, 1, struct.pack(">i", 1) + string("missing")))
        frame = read_frame(s)
    assert b"missing" in frame
    assert struct.pack(">h", 3) + string("missing") in frame


def test_bad_crc_is_corrupt_message_and_nothing_is_written(node):
    create_topic(node.bootstrap, "crc")
    batch = bytearray(record_batch([b"hello"]))
    batch[-1] ^= 0xFF
    _, _, err, _ = produce(node, "crc", bytes(batch))
    assert err == 2  # CORRUPT_MESSAGE
    _, _, err, base = produce(node, "crc", record_batch([b"fine"]))
    assert (err, base) == (0, 0)  # the refused batch took no offset


def test_batch_over_max_message_bytes_is_refused(node):
    create_topic(node.bootstrap, "small", config={"max.message.bytes": "1000"})
    _, _, err, _ = produce(node, "small", record_batch([b"x" * 5000]))
    assert err == 10  # MESSAGE_TOO_LARGE
    _, _, err, base = produce(node, "small", record_batch([b"x" * 100]))
    assert (err, base) == (0, 0)


def test_unknown_api_versions_version_gets_v0_body_with_unsupported_version(node):
    with connect(node.bootstrap) as s:
        s.sendall(request(18, 99, b""))
        frame = read_frame(s)
    cid, err, count = struct.unpack_from(">ihi", frame, 0)
    assert err == 35
    keys = {struct.unpack_from(">hhh", frame, 10 + 6 * i) for i in range(count)}
    assert (18, 0, 4) in keys and (0, 3, 13) in keys and (1, 4, 18) in keys


def test_malformed_frames_close_only_their_connection(node):
    cases = [
        struct.pack(">i", 3) + b"\x00\x03\x00",                       # too short for a header
        request(3, 1, struct.pack(">i", 0x7FFFFFFF)),                 # claims 2^31 topics
        request(0, 3, string(None) + struct.pack(">hii", 1, 1000, 0x7FFFFFFF)),
        request(12345, 0, b""),                                       # unknown API key
        struct.pack(">i", 1 << 30) + b"\x00" * 16,                    # over the frame limit
        struct.pack(">i", -5),                                        # negative length
    ]
    with connect(node.bootstrap) as keep:
        for frame in cases:
            with connect(node.bootstrap) as s:
                s.sendall(frame)
                assert read_frame(s) is None, frame[:16]
        # Other connections, old and new, are served.
        keep.sendall(request(18, 0, b""))
        assert read_frame(keep) is not None
    assert api_versions_ok(node)


def test_pipelined_requests_are_answered_in_order(node):
    create_topic(node.bootstrap, "pipe", partitions=2)
    with connect(node.bootstrap) as s:
        frames = b"".join(
            request(0, 3, produce_v3("pipe", i % 2, record_batch([b"v%d" % i])), correlation_id=i)
            for i in range(50))
        s.sendall(frames)
        ids = [parse_produce_v3_response(read_frame(s))[0] for _ in range(50)]
    assert ids == list(range(50))


def test_a_large_frame_arriving_in_small_pieces_is_read_whole(node):
    """A 2.7 MB produce frame (over the 1 MiB a frame's memory grows by)
    sent in odd-sized pieces, then a second frame sent with the first's last
    piece: the node reads both exactly, and every byte of every record is
    stored."""
    import hashlib
    import socket
    from conftest import consume_all
    create_topic(node.bootstrap, "pieces", partitions=3)
    values = [hashlib.sha256(b"%d" % p).digest() * (900_000 // 32) for p in range(3)]
    parts = b"".join(struct.pack(">i", p) + struct.pack(">i", len(b)) + b
                     for p, b in ((p, record_batch([values[p]])) for p in range(3)))
    body = (string(None) + struct.pack(">hi", -1, 10000) + struct.pack(">i", 1) + string("pieces")
            + struct.pack(">i", 3) + parts)
    first = request(0, 3, body, correlation_id=1)
    second = request(0, 3, produce_v3("pieces", 0, record_batch([b"after"])), correlation_id=2)
    with connect(node.bootstrap) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = first + second
        # The first piece ends inside the length prefix.
        cuts = [2] + list(range(7919, len(first), 7919)) + [len(data)]
        at = 0
        for cut in cuts:
            s.sendall(data[at:cut])
            at = cut
        cid1, r1 = parse_produce_v3_response(read_frame(s))
        cid2, r2 = parse_produce_v3_response(read_frame(s))
    assert (cid1, cid2) == (1, 2)
    assert sorted((p, err) for _, p, err, _ in r1) == [(0, 0), (1, 0), (2, 0)]
    assert r2 == [("pieces", 0, 0, 1)]
    got = consume_all(node.bootstrap, "pieces", 3, expected=4)
    by_partition = {}
    for m in got:
        by_partition.setdefault(m.partition(), []).append(m.value())
    assert by_partition == {0: [values[0], b"after"], 1: [values[1]], 2: [values[2]]}


def test_connections_past_the_limit_wait_until_one_closes(make_node):
    """--max-connections 2 on one shard: a third client is not served while
    two are connected (it waits in the listen backlog, as with Kafka's
    max.connections), and is served as soon as one of them closes."""
    import select
    node = make_node(cores=1, extra=["--max-connections", "2"])
    a, b = connect(node.bootstrap), connect(node.bootstrap)
    for s in (a, b):
        s.sendall(request(18, 0, b""))
        assert struct.unpack_from(">ih", read_frame(s), 0)[1] == 0
    c = connect(node.bootstrap)  # the kernel completes the handshake
    c.sendall(request(18, 0, b"", correlation_id=3))
    readable, _, _ = select.select([c], [], [], 1.0)
    assert readable == [], "a third connection was served past the limit"
    assert [s["connections"] for s in node.stats()] == [2]
    a.close()
    frame = read_frame(c)  # answered once a slot is free (blocking read)
    assert struct.unpack_from(">ih", frame, 0) == (3, 0)
    assert any("the limit (--max-connections)" in l for l in node.log)
    b.close()
    c.close()
