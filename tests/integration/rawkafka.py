"""A tiny Kafka wire client for tests that must send exact bytes."""
import socket
import struct


def connect(bootstrap, timeout=10):
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


def string(s):
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def request(api_key, version, body, correlation_id=1, client_id="raw"):
    """A non-flexible (header v1) request frame."""
    payload = struct.pack(">hhi", api_key, version, correlation_id) + string(client_id) + body
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock):
    head = recv_exact(sock, 4)
    if head is None:
        return None
    (n,) = struct.unpack(">i", head)
    return recv_exact(sock, n)


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def produce_v3(topic, partition, records, acks=-1, timeout_ms=10000):
    """Produce v3 body for one partition."""
    return (string(None) + struct.pack(">hi", acks, timeout_ms) + struct.pack(">i", 1) + string(topic)
            + struct.pack(">i", 1) + struct.pack(">i", partition) + struct.pack(">i", len(records)) + records)


def fetch_v4(topic, partition, offset, max_bytes, max_wait_ms=500):
    """Fetch v4 body for one partition (read_uncommitted)."""
    return (struct.pack(">iiiib", -1, max_wait_ms, 1, max_bytes, 0) + struct.pack(">i", 1) + string(topic)
            + struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, max_bytes))


def one_partition_error(frame, head):
    """The error code of a response naming one topic and one partition,
    whose body starts with `head` bytes before the topic array (each
    partition entry led by its index, then its error code)."""
    at = 4 + head + 4
    (tlen,) = struct.unpack_from(">h", frame, at)
    at += 2 + tlen + 4 + 4
    (error,) = struct.unpack_from(">h", frame, at)
    return error


def fetch_v4_error(sock, topic, partition, offset):
    """A consumer's Fetch v4 of one partition: its error code."""
    sock.sendall(request(1, 4, fetch_v4(topic, partition, offset, 1 << 20, max_wait_ms=0)))
    return one_partition_error(read_frame(sock), head=4)


def list_offsets_v1(sock, topic, partition, timestamp=-1):
    """ListOffsets v1 of one partition (-1: latest, -2: earliest):
    (error code, offset)."""
    body = (struct.pack(">i", -1) + struct.pack(">i", 1) + string(topic) + struct.pack(">i", 1)
            + struct.pack(">iq", partition, timestamp))
    sock.sendall(request(2, 1, body))
    frame = read_frame(sock)
    error = one_partition_error(frame, head=0)
    (offset,) = struct.unpack_from(">q", frame, len(frame) - 8)
    return error, offset


def offset_for_leader_epoch_v2(sock, topic, partition, current_epoch, epoch):
    """OffsetForLeaderEpoch v2 of one partition, as a consumer validating
    its position asks: (error code, leader epoch, end offset)."""
    body = (struct.pack(">i", 1) + string(topic) + struct.pack(">i", 1)
            + struct.pack(">iii", partition, current_epoch, epoch))
    sock.sendall(request(23, 2, body))
    frame = read_frame(sock)
    # Each partition entry leads with its error code, then its index.
    at = 4 + 4 + 4
    (tlen,) = struct.unpack_from(">h", frame, at)
    at += 2 + tlen + 4
    error, _partition, leader_epoch, end = struct.unpack_from(">hiiq", frame, at)
    return error, leader_epoch, end


def large_record_batch(values):
    """A valid v2 record batch of any size (`record_batch` stops at 1 MiB)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=sum(len(v) for v in values) + (1 << 20))
    for i, v in enumerate(values):
        assert b.append(i, timestamp=None, key=None, value=v, headers=[]) is not None
    return bytes(b.build())


def parse_produce_v3_response(frame):
    """-> (correlation_id, [(topic, partition, error_code, base_offset)])"""
    cid, ntopics = struct.unpack_from(">ii", frame, 0)
    at = 8
    out = []
    for _ in range(ntopics):
        (tlen,) = struct.unpack_from(">h", frame, at)
        at += 2
        topic = frame[at:at + tlen].decode()
        at += tlen
        (nparts,) = struct.unpack_from(">i", frame, at)
        at += 4
        for _ in range(nparts):
            part, err, base, _log_append_time = struct.unpack_from(">ihqq", frame, at)
            at += 22
            out.append((topic, part, err, base))
    return cid, out


def metadata_v0_brokers(sock):
    """Sends Metadata v0 (every topic) and returns the brokers it names as
    [(node_id, host, port)]."""
    sock.sendall(request(3, 0, struct.pack(">i", 0)))
    frame = read_frame(sock)
    (_cid, n) = struct.unpack_from(">ii", frame, 0)
    at, out = 8, []
    for _ in range(n):
        (node_id, hlen) = struct.unpack_from(">ih", frame, at)
        at += 6
        host = frame[at:at + hlen].decode()
        at += hlen
        (port,) = struct.unpack_from(">i", frame, at)
        at += 4
        out.append((node_id, host, port))
    return out


def uvarint(frame, at):
    """An unsigned varint of `frame` at `at`: (value, next offset)."""
    value, shift = 0, 0
    while True:
        b = frame[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7


def compact_string(frame, at):
    """A compact nullable string: (text or None, next offset)."""
    n, at = uvarint(frame, at)
    if n == 0:
        return None, at
    return frame[at:at + n - 1].decode(), at + n - 1


def sasl_plain(sock, username, password):
    """Signs the connection in with SASL/PLAIN: SaslHandshake v1, then
    SaslAuthenticate v0 (both non-flexible)."""
    sock.sendall(request(17, 1, string("PLAIN")))
    frame = read_frame(sock)
    (error,) = struct.unpack_from(">h", frame, 4)
    assert error == 0, f"SaslHandshake refused PLAIN: {error}"
    token = b"\x00" + username.encode() + b"\x00" + password.encode()
    sock.sendall(request(36, 0, struct.pack(">i", len(token)) + token, correlation_id=2))
    frame = read_frame(sock)
    (error,) = struct.unpack_from(">h", frame, 4)
    assert error == 0, f"SaslAuthenticate refused {username}: {error}"


def describe_cluster_v2(sock):
    """Sends DescribeCluster v2 asking for fenced brokers too (KIP-1073) and
    returns (controller id, {broker id: fenced}). Flexible: header v2."""
    payload = (struct.pack(">hhi", 60, 2, 1) + string("raw") + b"\x00"
               + struct.pack(">?b?", False, 1, True) + b"\x00")
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    frame = read_frame(sock)
    at = 4
    _tags, at = uvarint(frame, at)
    (_throttle, error) = struct.unpack_from(">ih", frame, at)
    at += 6
    message, at = compact_string(frame, at)
    assert error == 0, (error, message)
    at += 1  # endpoint type
    _cluster_id, at = compact_string(frame, at)
    (controller,) = struct.unpack_from(">i", frame, at)
    at += 4
    n, at = uvarint(frame, at)
    brokers = {}
    for _ in range(n - 1):
        (broker,) = struct.unpack_from(">i", frame, at)
        _host, at = compact_string(frame, at + 4)
        at += 4  # port
        _rack, at = compact_string(frame, at)
        (fenced,) = struct.unpack_from(">?", frame, at)
        _tags, at = uvarint(frame, at + 1)
        brokers[broker] = fenced
    return controller, brokers


def record_batch(values, key=None):
    """A valid v2 record batch, built by kafka-python's own encoder."""
    from kafka.record.default_records import DefaultRecordBatchBuilder
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=None, key=key, value=v, headers=[])
    return bytes(b.build())
