"""What a restart costs a large keyed table: its rows from their snapshots
(`keyed-rows-*.rkyv`, mapped) and the log's tail, against the same rows
rebuilt from the whole log (the snapshots moved aside).

    .venv/bin/python bench/keyed_restart.py --bin target/release/weir --data /work/kr \
        [--keys 10000000] [--rounds 3] [--baseline-bin /path/to/older/weir]

Fills a one-partition keyed table `big (id BIGINT PRIMARY KEY, v BIGINT,
s TEXT)` with --keys rows through librdkafka (once: a data directory that
holds it is reused), stops the node cleanly (which snapshots the rest),
then --rounds times: starts the node and times its first Metadata answer,
the first `SELECT count(*)` (which loads the rows) and the same statement
again (the rows held: what the statement itself costs). The restart's cost
is the first minus the second. Then the same with the snapshot files moved
aside, so the rows are rebuilt from the log (by --baseline-bin when given:
a build from before snapshots, for the before/after figure), and the
files put back.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

from confluent_kafka import Producer

# The tests' port picker.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "integration"))
from ports import free_ports  # noqa: E402


class Node:
    def __init__(self, binary, data):
        self.binary, self.data = binary, data
        self.kafka, self.http = free_ports(2)

    def start(self, *extra):
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [self.binary, "serve", self.data, "--kafka", f"127.0.0.1:{self.kafka}",
             "--addr", f"127.0.0.1:{self.http}", *extra],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.data, "..", "node.log"), "a"))
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/stats", timeout=5):
                    break
            except OSError:
                if self.proc.poll() is not None:
                    sys.exit("the node exited at start-up: see node.log beside the data directory")
                time.sleep(0.005)
        return time.monotonic() - t0

    def stop(self):
        t0 = time.monotonic()
        self.proc.terminate()
        self.proc.wait(600)
        return time.monotonic() - t0

    def sql(self, text):
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}/sql", data=text.encode(), method="POST")
        t0 = time.monotonic()
        with urllib.request.urlopen(req, timeout=600) as r:
            out = json.loads(r.read())
        return out, time.monotonic() - t0


def fill(node, keys):
    node.sql("CREATE TABLE big (id BIGINT PRIMARY KEY, v BIGINT, s TEXT)")
    p = Producer({"bootstrap.servers": f"127.0.0.1:{node.kafka}", "acks": "all",
                  "linger.ms": 20, "batch.size": 1000000, "compression.type": "lz4",
                  "queue.buffering.max.messages": 2000000})
    t0 = time.monotonic()
    for i in range(keys):
        while True:
            try:
                p.produce("big", key=b'{"id":%d}' % i, value=b'{"id":%d,"v":%d,"s":"row %d"}' % (i, i * 7, i))
                break
            except BufferError:
                p.poll(0.05)
        if i % 100000 == 0:
            p.poll(0)
    assert p.flush(600) == 0
    secs = time.monotonic() - t0
    print(f"filled {keys} keys in {secs:.1f} s ({keys / secs:,.0f}/s)", flush=True)


def partition_dir(data):
    [part] = [root for root, _, files in os.walk(os.path.join(data, "topics"))
              if any(f.endswith(".log") for f in files)]
    return part


def newest_snapshot(part):
    """The offset the newest snapshot file holds the rows up to (-1: none)."""
    ends = [int(f[len("keyed-rows-"):-len(".rkyv")]) for f in os.listdir(part)
            if f.startswith("keyed-rows-") and f.endswith(".rkyv")]
    return max(ends, default=-1)


def rounds(node, n, label):
    out = []
    for r in range(n):
        up = node.start()
        (first, t1) = node.sql("SELECT count(*) AS n FROM big")
        (second, t2) = node.sql("SELECT count(*) AS n FROM big")
        assert first == second, (first, second)
        down = node.stop()
        print(f"{label} round {r + 1}: start {up * 1000:.0f} ms, first SELECT {t1:.2f} s, "
              f"again {t2:.2f} s, restart cost {t1 - t2:.2f} s, stop {down:.2f} s ({first})", flush=True)
        out.append(t1 - t2)
    out.sort()
    return out[len(out) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline-bin", help="the binary for the log-replay rounds (default: --bin)")
    a = ap.parse_args()
    node = Node(a.bin, a.data)
    if not os.path.isdir(a.data):
        os.makedirs(a.data)
        node.start()
        fill(node, a.keys)
        # The node snapshots in the background as the rows come (its first
        # snapshot of a table loads the rows from the log first): wait for
        # one that holds every key, as a table written earlier would have.
        # Under TAIL_RECORDS (core/src/table/keyed.rs, 100,000 records) no
        # snapshot is due: a restart reads at most that much of the log by
        # design, and the snapshot rounds then measure that replay.
        if a.keys >= 100_000:
            t0 = time.monotonic()
            part = partition_dir(a.data)
            while newest_snapshot(part) < a.keys:
                time.sleep(0.5)
            print(f"the snapshot caught up {time.monotonic() - t0:.1f} s after the fill", flush=True)
        print(f"stop after the fill: {node.stop():.1f} s", flush=True)
    part = partition_dir(a.data)
    snaps = [os.path.join(part, f) for f in os.listdir(part) if f.startswith("keyed-rows-")]
    size = lambda suffix: sum(os.path.getsize(os.path.join(part, f)) for f in os.listdir(part) if f.endswith(suffix))
    print(f"log {size('.log') / 1e6:.0f} MB, snapshots {size('.rkyv') / 1e6:.0f} MB in {len(snaps)} file(s)",
          flush=True)
    with_snapshot = rounds(node, a.rounds, "snapshot")
    aside = os.path.join(os.path.dirname(a.data), "snapshots-aside")
    os.makedirs(aside, exist_ok=True)
    snaps = [f for f in os.listdir(part) if f.startswith("keyed-rows-")]
    for f in snaps:
        os.rename(os.path.join(part, f), os.path.join(aside, f))
    try:
        # A clean stop would snapshot: kill this node instead, and keep it
        # from snapshotting meanwhile (its background check).
        node.binary = a.baseline_bin or a.bin
        without = []
        for r in range(a.rounds):
            # Snapshots a round took in the background are not this
            # measurement's: each round starts from the log alone.
            for f in os.listdir(part):
                if f.startswith("keyed-rows-"):
                    os.remove(os.path.join(part, f))
            up = node.start("--compaction-check-ms", "3600000")
            (first, t1) = node.sql("SELECT count(*) AS n FROM big")
            (_, t2) = node.sql("SELECT count(*) AS n FROM big")
            node.proc.kill()
            node.proc.wait()
            print(f"log replay round {r + 1}: start {up * 1000:.0f} ms, first SELECT {t1:.2f} s, "
                  f"again {t2:.2f} s, restart cost {t1 - t2:.2f} s ({first})", flush=True)
            without.append(t1 - t2)
        without.sort()
    finally:
        node.binary = a.bin
        for f in os.listdir(part):
            if f.startswith("keyed-rows-"):
                os.remove(os.path.join(part, f))
        for f in snaps:
            os.rename(os.path.join(aside, f), os.path.join(part, f))
    print(f"restart cost, median: from the snapshots {with_snapshot:.2f} s, "
          f"from the log {without[len(without) // 2]:.2f} s")


if __name__ == "__main__":
    main()
