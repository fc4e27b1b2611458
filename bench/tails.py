#!/usr/bin/env python3
"""Attributes an e2e run's slow records to what the node was doing then.

    weir serve DATA --timeline /tmp/node.tl ...
    weir-bench e2e --brokers ... --rate 20000 --seconds 15 --timeline /tmp/client.tl
    bench/tails.py /tmp/client.tl /tmp/node.tl [--slow-us US] [--show N]

A record is slow when its send-to-receipt latency is above --slow-us
(default: 3 × the run's p99, the issue's bound for p99.9). Slow records
whose [send, receipt] spans overlap form one episode; each episode is laid
beside the node's events (`weir_storage::timeline`) that overlap it and
given the cause whose events cover most of it (a shard that was late, or
a roll, seal or compaction, for 1 ms or more of it before the device: a
write also looks slow while its shard does not run to reap it):

  device      a flush's or the journal's write took long (flush_write,
              journal_write): the disk, or the shard not reaping it
  roll        a segment roll (its snapshot, directory syncs, new file)
  seal        a segment being sealed
  compaction  a cleaning pass
  scheduler   the shard's 1 ms timer fired late and the thread spent most
              of that waiting for a CPU (run-queue): the machine's
              scheduler gave the core to another thread
  busy        the timer fired late while the thread had the CPU: the
              shard ran one long piece of work
  asleep      the timer fired late while the thread neither ran nor
              waited for a CPU: it slept in a blocking call, or its
              wake-up came late
  node        only the node's produce requests (or flush waits) overlap:
              the node was slow, by nothing it wrote down
  outside     nothing of the node's overlaps: the client, its threads'
              scheduling, or the network stack

Prints one line per episode (the --show longest) and a table: cause,
episodes, slow records, their share.
"""
import argparse
import sys


def read_client(path):
    epoch = None
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("# epoch_unix_ns"):
                epoch = int(line.split()[2])
                continue
            if line.startswith("#"):
                continue
            try:
                i, sent, acked, got = map(int, line.split())
            except ValueError:
                continue  # a line cut short
            rows.append((i, sent, acked, got))
    if epoch is None:
        sys.exit(f"{path}: no '# epoch_unix_ns' line (weir-bench from before tails.py?)")
    return epoch, rows


def read_node(path, epoch):
    events = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            parts = line.rstrip("\n").split(" ", 4)
            try:
                shard, kind, start, dur = int(parts[0]), parts[1], int(parts[2]), int(parts[3])
            except (IndexError, ValueError):
                continue  # a line the node was still writing
            detail = parts[4] if len(parts) > 4 else ""
            start -= epoch
            events.append((start, start + dur, shard, kind, detail))
    events.sort()
    return events


def cause_of(kind, detail, dur):
    if kind in ("flush_write", "journal_write", "zeros", "preallocate"):
        return "device"
    if kind in ("roll", "seal", "compaction"):
        return kind
    if kind == "late":
        # "on-cpu N us run-queue M us": what the thread did around the
        # probe (since the probe before, about 1 ms more than `dur`).
        w = detail.split()
        try:
            ran, queued = int(w[1]) * 1000, int(w[4]) * 1000
        except (IndexError, ValueError):
            ran, queued = 0, 0
        if queued * 2 >= dur:
            return "scheduler"
        if ran * 2 >= dur:
            return "busy"
        return "asleep"
    return None  # produce, flush_wait: symptoms, not causes


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("client")
    ap.add_argument("node")
    ap.add_argument("--slow-us", type=float)
    ap.add_argument("--show", type=int, default=15)
    a = ap.parse_args()
    epoch, rows = read_client(a.client)
    events = read_node(a.node, epoch)
    if not rows:
        sys.exit(f"{a.client}: no records")
    lat = sorted(got - sent for _, sent, _, got in rows)
    p99, p999 = percentile(lat, 0.99), percentile(lat, 0.999)
    slow_ns = a.slow_us * 1000 if a.slow_us else 3 * p99
    print(f"{len(rows)} records: p99 {p99 / 1e3:.0f} us, p99.9 {p999 / 1e3:.0f} us "
          f"({p999 / p99:.1f}x p99); slow: above {slow_ns / 1e3:.0f} us")
    slow = sorted((r for r in rows if r[3] - r[1] > slow_ns), key=lambda r: r[1])
    episodes = []
    for r in slow:
        if episodes and r[1] <= episodes[-1]["end"]:
            e = episodes[-1]
            e["records"].append(r)
            e["end"] = max(e["end"], r[3])
        else:
            episodes.append({"start": r[1], "end": r[3], "records": [r]})
    totals = {}
    lines = []
    for e in episodes:
        s, t = e["start"], e["end"]
        cover = {}
        seen = []
        for (es, ee, shard, kind, detail) in events:
            if es > t:
                break
            if ee < s:
                continue
            overlap = min(ee, t) - max(es, s)
            seen.append(f"{kind}@{shard} {(ee - es) / 1e3:.0f}us {detail}".strip())
            c = cause_of(kind, detail, ee - es)
            if c:
                cover[c] = cover.get(c, 0) + overlap
        # A write looks slow too while its shard does not run to reap it:
        # a shard that was late (or a roll, seal or compaction) explains
        # the episode before the device does.
        first = {c: v for c, v in cover.items() if c != "device" and v >= 1_000_000}
        pick = first or cover
        if pick:
            cause = max(pick, key=pick.get)
        elif seen:
            cause = "node"  # only produce requests or flush waits: slow, cause not seen
        else:
            cause = "outside"
        recs = e["records"]
        worst = max(r[3] - r[1] for r in recs)
        ack = max(r[2] - r[1] for r in recs)
        wake = max(r[3] - r[2] for r in recs)
        part = "ack" if ack >= wake else "wake"
        tot = totals.setdefault(cause, [0, 0])
        tot[0] += 1
        tot[1] += len(recs)
        lines.append((worst, f"t={s / 1e9:7.3f}s {len(recs):5d} slow, worst {worst / 1e3:6.0f} us "
                      f"(mostly {part}): {cause:10s} | {'; '.join(seen[:6])}"))
    for _, line in sorted(lines, reverse=True)[: a.show]:
        print(line)
    print(f"{'cause':12s} {'episodes':>8s} {'records':>8s} {'share':>6s}")
    n = max(1, len(slow))
    for cause, (eps, recs) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"{cause:12s} {eps:8d} {recs:8d} {100 * recs / n:5.1f}%")


if __name__ == "__main__":
    main()
