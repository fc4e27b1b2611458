"""The node's resident memory under the loads that could grow it without
bound: many partitions, many connections, consumers that never read their
sockets, and large requests that arrive slowly or all at once.

    .venv/bin/python bench/memory_bound.py --brokers 127.0.0.1:9092 --pid PID [--http 127.0.0.1:8080] \
        [--partitions 10000] [--connections 10000] [--stalled-fetchers 20] \
        [--slow-requests 200] [--fast-requests 40]

Each stage adds its load to the ones before and prints the node's resident
size (VmRSS) and its high-water mark (VmHWM) once the load is in place:

1. `--partitions` partitions (topic `mem-wide`), each written once;
2. `--connections` idle connections that each asked ApiVersions;
3. `--stalled-fetchers` connections that pipeline fetches of a topic of
   200 MB (`mem-deep`) from its start and never read a byte of the answers;
4. `--slow-requests` connections that each announce a 100 MiB request and
   send a byte a second;
5. `--fast-requests` connections that each send a 100 MiB produce request
   as fast as the node takes it, all at once; how they were answered
   (accepted, refused with an error, closed) is counted.

The client needs a descriptor per connection: raise `ulimit -n`.
"""
import argparse
import resource
import socket
import struct
import sys
import threading
import time
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/tests/integration")
import rawkafka  # noqa: E402


def rss(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) // 1024
    return out


HTTP = None


def held():
    """MiB of request and answer memory the shards hold (`/metrics`)."""
    if HTTP is None:
        return ""
    text = urllib.request.urlopen(f"http://{HTTP}/metrics", timeout=30).read().decode()
    total = {"requests": 0, "answers": 0}
    for line in text.splitlines():
        if line.startswith("weir_memory_held_bytes{"):
            kind = line.split('kind="')[1].split('"')[0]
            total[kind] += int(line.rsplit(" ", 1)[1])
    return f"  (held: requests {total['requests'] >> 20} MiB, answers {total['answers'] >> 20} MiB)"


def report(pid, stage):
    m = rss(pid)
    print(f"{stage:<58} RSS {m['VmRSS']:>6} MiB  high-water {m['VmHWM']:>6} MiB{held()}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--http", help="the node's HTTP address, to show the memory it holds")
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--connections", type=int, default=10_000)
    ap.add_argument("--stalled-fetchers", type=int, default=20)
    ap.add_argument("--slow-requests", type=int, default=200)
    ap.add_argument("--fast-requests", type=int, default=40)
    a = ap.parse_args()
    global HTTP
    HTTP = a.http
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    report(a.pid, "0. started")

    admin = AdminClient({"bootstrap.servers": a.brokers})
    topics = admin.list_topics(timeout=10).topics
    fresh = [NewTopic(t, num_partitions=n, replication_factor=1, config=c)
             for t, n, c in (("mem-wide", a.partitions, {}),
                             ("mem-deep", 1, {"max.message.bytes": str(100 << 20)})) if t not in topics]
    if fresh:
        for f in admin.create_topics(fresh, operation_timeout=300).values():
            f.result(300)
    p = Producer({"bootstrap.servers": a.brokers, "linger.ms": 50, "batch.num.messages": 100_000,
                  "queue.buffering.max.messages": 1_000_000})
    for i in range(a.partitions):
        p.produce("mem-wide", b"x" * 100, partition=i)
        p.poll(0)
    p.flush(300)
    report(a.pid, f"1. {a.partitions} partitions, each written")

    conns = []
    for i in range(a.connections):
        s = rawkafka.connect(a.brokers)
        s.sendall(rawkafka.request(18, 0, b"", correlation_id=i))
        conns.append(s)
    for s in conns:
        rawkafka.read_frame(s)
    report(a.pid, f"2. + {a.connections} idle connections")

    value = b"v" * 100_000
    for _ in range(2_000):
        p.produce("mem-deep", value, partition=0)
        p.poll(0)
    p.flush(300)
    stalled = []
    for i in range(a.stalled_fetchers):
        s = rawkafka.connect(a.brokers)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        sent = 0
        for cid in range(64):
            frame = rawkafka.request(1, 4, rawkafka.fetch_v4("mem-deep", 0, (cid * 97) % 1_900, 55 << 20),
                                     correlation_id=cid)
            try:
                s.sendall(frame)
                sent += 1
            except BlockingIOError:
                break
        stalled.append(s)
    time.sleep(5)  # the node reads what it was sent and answers into full sockets
    report(a.pid, f"3. + {a.stalled_fetchers} fetchers that never read (200 MB topic)")

    slow = []
    for i in range(a.slow_requests):
        s = rawkafka.connect(a.brokers)
        s.sendall(struct.pack(">i", 100 << 20))
        slow.append(s)
    stop = threading.Event()

    def drip():
        while not stop.is_set():
            for s in slow:
                try:
                    s.send(b"\0")
                except OSError:
                    pass
            stop.wait(1)

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    time.sleep(5)
    report(a.pid, f"4. + {a.slow_requests} 100 MiB requests at a byte a second")

    batch = rawkafka.large_record_batch([b"b" * 1_000_000] * 100)
    big = rawkafka.request(0, 3, rawkafka.produce_v3("mem-deep", 0, batch))
    assert len(big) > 100_000_000
    outcome = {"answered": 0, "refused": 0, "closed": 0}
    lock = threading.Lock()

    def send_big(i):
        try:
            s = rawkafka.connect(a.brokers, timeout=120)
            s.sendall(big)
            frame = rawkafka.read_frame(s)
            if frame is None:
                kind = "closed"
            else:
                _cid, parts = rawkafka.parse_produce_v3_response(frame)
                kind = "answered" if parts[0][2] == 0 else "refused"
        except OSError:
            kind = "closed"
        with lock:
            outcome[kind] += 1

    peak = [0]

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], rss(a.pid)["VmRSS"])
            done.wait(0.05)

    done = threading.Event()
    watcher = threading.Thread(target=watch)
    watcher.start()
    senders = [threading.Thread(target=send_big, args=(i,)) for i in range(a.fast_requests)]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    done.set()
    watcher.join()
    report(a.pid, f"5. + {a.fast_requests} 100 MiB produce requests at once")
    print(f"   while they arrived: RSS peaked at {peak[0]} MiB; "
          f"answered {outcome['answered']}, refused {outcome['refused']}, closed {outcome['closed']}")
    stop.set()
    for s in conns + stalled + slow:
        s.close()


if __name__ == "__main__":
    main()
