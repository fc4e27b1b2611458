"""Bounded memory: what clients that never read, send slowly or send large
requests all at once can make the node hold. Each shard lets request frames
hold at most --request-memory-bytes and fetch answers not yet sent at most
--answer-memory-bytes; past --socket-timeout-ms a client that does not take
its answer, or does not finish sending its request, is disconnected with a
line in the log saying which. Meanwhile other clients are served.

The node here runs with small limits so the tests are quick; the node's
resident size at a larger scale is `bench/memory_bound.py`'s.
"""
import socket
import struct
import threading
import time
import urllib.request

from confluent_kafka import Producer

import rawkafka
from conftest import consume_all, create_topic

MiB = 1 << 20
REQUEST_MEMORY = 32 * MiB
ANSWER_MEMORY = 8 * MiB
LIMITS = ["--max-request-bytes", str(16 * MiB), "--request-memory-bytes", str(REQUEST_MEMORY),
          "--fetch-max-bytes", str(4 * MiB), "--answer-memory-bytes", str(ANSWER_MEMORY),
          "--cache-bytes-per-shard", str(4 * MiB), "--socket-timeout-ms", "2000"]


def memory(node):
    """{(shard, kind, what): bytes} of the weir_memory_* gauges."""
    out = {}
    with urllib.request.urlopen(node.http + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            for what in ("held", "peak", "limit"):
                prefix = f"weir_memory_{what}_bytes{{"
                if line.startswith(prefix):
                    labels = dict(kv.split("=") for kv in line[len(prefix):line.index("}")].split(","))
                    out[(labels["shard"].strip('"'), labels["kind"].strip('"'), what)] = \
                        int(line.rsplit(" ", 1)[1])
    return out


def held(node, kind):
    return sum(v for (_, k, what), v in memory(node).items() if k == kind and what == "held")


def assert_within_limits(node, batch=0):
    """Peaks within the limits; answers may pass theirs by one `batch`
    (a read always returns its first batch, however large)."""
    m = memory(node)
    for (shard, kind, what), v in m.items():
        if what == "peak":
            slack = batch if kind == "answers" else 0
            assert v <= m[(shard, kind, "limit")] + slack, f"shard {shard} {kind}: peak {v} over its limit"


def peak_rss_mib(node):
    with open(f"/proc/{node.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) // 1024


def closed_by_node(sock, timeout=30):
    """Whether the node closed the connection within `timeout` seconds: the
    client reads (and drops) what the node sent up to the end of the
    stream, or the node's side of the socket has left ESTABLISHED. (A
    client that shrank its receive buffer can keep the window shut, so the
    node's FIN waits behind unread answers while the kernel's zero-window
    probes back off for minutes; the node has closed all the same.)"""
    port = sock.getsockname()[1]
    sock.setblocking(False)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            try:
                if not sock.recv(1 << 20):
                    return True
                continue
            except BlockingIOError:
                pass
            if node_side_closed(port):
                return True
            time.sleep(0.05)
    except ConnectionResetError:
        return True
    return False


def node_side_closed(client_port):
    """Whether the node's end of the client's connection (the socket whose
    peer is `client_port`) is gone or past ESTABLISHED."""
    import subprocess
    out = subprocess.run(["ss", "-tnH", "state", "all", f"( dport = :{client_port} )"],
                         capture_output=True, text=True).stdout.split()
    return not out or out[0] != "ESTAB"


def node_side_gone(client_port):
    """Whether the node holds no socket to `client_port` at all."""
    import subprocess
    return not subprocess.run(["ss", "-tnH", "state", "all", f"( dport = :{client_port} )"],
                              capture_output=True, text=True).stdout.strip()


def socket_state(sock):
    """`ss`'s line for the connection, for a failure's message."""
    import subprocess
    port = sock.getsockname()[1]
    return subprocess.run(["ss", "-tn", f"( sport = :{port} or dport = :{port} )"],
                          capture_output=True, text=True).stdout


def wait_until(check, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def fill(bootstrap, topic, count, size):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, bytes([i % 256]) * size)
        p.poll(0)
    assert p.flush(60) == 0


def test_a_client_that_reads_no_answers_holds_one_fetch_and_is_disconnected(make_node):
    node = make_node(extra=LIMITS)
    create_topic(node.bootstrap, "deep")
    fill(node.bootstrap, "deep", 300, 100_000)  # 30 MB, past what the cache keeps
    # Thirty pipelined fetches of 4 MiB each from different places, none of
    # whose answers is ever read.
    stalled = rawkafka.connect(node.bootstrap)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    for cid in range(30):
        stalled.sendall(rawkafka.request(1, 4, rawkafka.fetch_v4("deep", 0, cid * 9, 4 * MiB),
                                         correlation_id=cid))
    # The node holds at most one of them, not thirty.
    assert wait_until(lambda: held(node, "answers") > 0)
    assert held(node, "answers") <= 4 * MiB + 200_000
    # Another consumer reads the whole topic meanwhile.
    consume_all(node.bootstrap, "deep", 1, expected=300)
    assert node.await_log("was not taken within 2000 ms", timeout=30), "".join(node.log[-20:])
    assert closed_by_node(stalled), socket_state(stalled)
    assert wait_until(lambda: held(node, "answers") == 0)
    assert_within_limits(node)


def test_a_client_that_reads_nothing_is_closed_abortively(make_node):
    """The node gives up on a client that takes none of its answer, and
    its socket goes at once, with the answer still in its send buffer: an
    RST rather than a FIN queued behind unsent bytes, which the kernel
    would keep probing a shut window for minutes to deliver."""
    node = make_node(extra=LIMITS)
    create_topic(node.bootstrap, "deep")
    fill(node.bootstrap, "deep", 60, 100_000)
    stalled = rawkafka.connect(node.bootstrap)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    # Two requests, both read by the node (none left unread in its socket,
    # which would make any close an RST), and none of their answers taken.
    for cid in range(2):
        stalled.sendall(rawkafka.request(1, 4, rawkafka.fetch_v4("deep", 0, 0, 4 * MiB),
                                         correlation_id=cid))
    assert node.await_log("was not taken within 2000 ms", timeout=30), "".join(node.log[-20:])
    port = stalled.getsockname()[1]
    assert wait_until(lambda: node_side_gone(port), timeout=10), socket_state(stalled)
    # The client, reading at last, finds the connection reset.
    assert closed_by_node(stalled), socket_state(stalled)


def test_requests_sent_a_byte_at_a_time_are_refused_and_small_ones_pass(make_node):
    node = make_node(extra=LIMITS)
    create_topic(node.bootstrap, "wide")
    # Eight 16 MiB frames announced and then sent a byte at a time: two fit
    # in each shard's 32 MiB, the rest wait unread.
    slow = []
    for _ in range(8):
        s = rawkafka.connect(node.bootstrap)
        s.sendall(struct.pack(">i", 16 * MiB) + b"\0")
        slow.append(s)
    assert wait_until(lambda: held(node, "requests") >= 2 * 16 * MiB)
    # Small requests pass them.
    fill(node.bootstrap, "wide", 100, 1000)
    for s in slow:
        assert closed_by_node(s), socket_state(s)
    assert node.await_log("did not arrive within 2000 ms")
    assert wait_until(lambda: held(node, "requests") == 0)
    consume_all(node.bootstrap, "wide", 1, expected=100)
    assert_within_limits(node)


def test_large_requests_at_once_wait_for_room_and_are_all_appended(make_node):
    limits = LIMITS[:-1] + ["30000"]  # time to wait their turn
    node = make_node(extra=limits)
    create_topic(node.bootstrap, "large", config={"max.message.bytes": str(16 * MiB)})
    # Twelve 12 MB produce requests at once: two at a time fit in a shard.
    batch = rawkafka.large_record_batch([bytes([i]) * 1_000_000 for i in range(12)])
    frame = rawkafka.request(0, 3, rawkafka.produce_v3("large", 0, batch))
    answers = []

    def send_large():
        s = rawkafka.connect(node.bootstrap, timeout=60)
        s.sendall(frame)
        _cid, parts = rawkafka.parse_produce_v3_response(rawkafka.read_frame(s))
        answers.append(parts[0][2])
        s.close()

    senders = [threading.Thread(target=send_large) for _ in range(12)]
    for t in senders:
        t.start()
    for t in senders:
        t.join(60)
    assert answers == [0] * 12
    records = consume_all(node.bootstrap, "large", 1, expected=12 * 12)
    assert sorted(m.value()[0] for m in records) == sorted(list(range(12)) * 12)
    assert wait_until(lambda: held(node, "requests") == 0)
    assert_within_limits(node, batch=len(batch))
    # Two shards' budgets, the tail caches and the node's own (a fresh node
    # holds about 50 MiB) well inside 400 MiB; the twelve requests alone
    # are 144 MB.
    assert peak_rss_mib(node) < 400


def test_an_sql_body_sent_slowly_is_refused_and_other_statements_answer(make_node):
    node = make_node(extra=LIMITS)
    slow = socket.create_connection(("127.0.0.1", node.http_port))
    slow.sendall(b"POST /sql HTTP/1.1\r\nHost: weir\r\nContent-Length: 1000000\r\n\r\nSELECT ")
    # The body's bytes are the shard's request memory while it arrives.
    assert wait_until(lambda: held(node, "requests") >= 1_000_000)
    with urllib.request.urlopen(urllib.request.Request(
            node.http + "/sql", data=b"SELECT 1 AS one", method="POST"), timeout=10) as r:
        assert r.status == 200
    assert closed_by_node(slow), socket_state(slow)
    assert node.await_log("an SQL body of 1000000 bytes did not arrive within 2000 ms")
    assert wait_until(lambda: held(node, "requests") == 0)
