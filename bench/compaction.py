"""What compaction costs: how fast a pass cleans, what it leaves, and what it
does to the end-to-end latency of another topic while it runs.

    .venv/bin/python bench/compaction.py --brokers 127.0.0.1:9092 --http 127.0.0.1:8080 \
        --pid PID --data DATA_DIR [--records 1000000] [--size 1024] [--keys 1000] [--seconds 20] [--rounds 3]

Run it against a node started with `--compaction-check-ms 1000`. It fills
a topic (one partition, `cleanup.policy=delete`, 64 MiB segments)
with `--records` records of `--size` bytes over `--keys` keys
(weir-bench produce), reads it back once (weir-bench consume: the node's
catch-up read rate, the yardstick of a pass that reads everything), then:

1. runs `weir-bench e2e` on another topic for `--seconds` alone;
2. runs it again and, 2 s in, alters that topic to `cleanup.policy=compact`,
   so the next check starts a pass over the whole log while it runs.

It prints the pass's read rate as a ratio to the catch-up read, the log's
size before and after, and the e2e p50/p99/max during the pass as ratios
to the run alone, with the node's CPU in each window; each of `--rounds`
rounds on a topic of its own (deleted after it), then the medians.
"""
import argparse
import json
import os
import statistics
import subprocess
import threading
import time
import urllib.request

from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                  NewTopic)

from proc_cpu import cpu_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "target", "release", "weir-bench")


def stats(http):
    with urllib.request.urlopen(f"http://{http}/stats", timeout=10) as r:
        shards = json.loads(r.read())
    return {k: sum(s[k] for s in shards) for k in
            ("compactions", "compacted_bytes_in", "compacted_bytes_out", "compacted_records_removed")}


def bench(*args):
    out = subprocess.run([BENCH, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def topic_bytes(data, topic):
    total = 0
    for d in os.listdir(os.path.join(data, "topics")):
        if d.split("~")[0] == topic:
            for root, _, files in os.walk(os.path.join(data, "topics", d)):
                total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(".log"))
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--http", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    ratios = {"pass": [], "p50": [], "p99": [], "max": []}
    for i in range(a.rounds):
        r = one_round(a, f"cbig{i}")
        for k, v in r.items():
            ratios[k].append(v)
    print("medians over %d rounds: pass rate / catch-up read %.2f; e2e during / alone: "
          "p50 %.2f, p99 %.2f, max %.2f" % (a.rounds, *(statistics.median(ratios[k])
                                                       for k in ("pass", "p50", "p99", "max"))))


def one_round(a, topic):
    admin = AdminClient({"bootstrap.servers": a.brokers})
    b = a.brokers
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                  config={"segment.bytes": str(64 << 20)})])[topic].result(15)
    bench("produce", "--brokers", b, "--topic", topic, "--messages", str(a.records),
          "--size", str(a.size), "--acks", "all", "--keys", str(a.keys))
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    consume = bench("consume", "--brokers", b, "--topic", topic, "--messages", str(a.records))
    before_bytes = topic_bytes(a.data, topic)

    def e2e():
        return bench("e2e", "--brokers", b, "--topic", "lat", "--create-topic", "--delete-topic",
                     "--rate", str(a.rate), "--seconds", str(a.seconds), "--size", "1024")

    cpu0 = cpu_seconds(a.pid)
    alone = e2e()
    cpu_alone = cpu_seconds(a.pid) - cpu0
    s0 = stats(a.http)
    passes = []

    def compact_soon():
        time.sleep(2)  # into the measured window of the e2e run
        started = time.time()
        admin.incremental_alter_configs([ConfigResource(
            ConfigResource.Type.TOPIC, topic, incremental_configs=[
                ConfigEntry("cleanup.policy", "compact",
                            incremental_operation=AlterConfigOpType.SET)])])[res].result(15)
        deadline = started + 600
        while stats(a.http)["compactions"] == s0["compactions"]:
            assert time.time() < deadline, "no pass ran within 600 s"
            time.sleep(0.05)  # polling /stats for the pass's end
        passes.append(time.time() - started)

    t = threading.Thread(target=compact_soon)
    cpu0 = cpu_seconds(a.pid)
    t.start()
    during = e2e()
    cpu_during = cpu_seconds(a.pid) - cpu0
    t.join()
    s1 = stats(a.http)
    read = s1["compacted_bytes_in"] - s0["compacted_bytes_in"]
    written = s1["compacted_bytes_out"] - s0["compacted_bytes_out"]
    seconds = passes[0]
    after_bytes = topic_bytes(a.data, topic)
    admin.delete_topics([topic])[topic].result(15)
    rate = read / 1e6 / seconds / consume["mb_per_sec"]
    print(f"{topic}: {a.records} records of {a.size} B over {a.keys} keys, {before_bytes / 1e6:.0f} MB "
          f"on disk; {after_bytes / 1e6:.1f} MB after the pass")
    print(f"  pass: read {read / 1e6:.0f} MB, wrote {written / 1e6:.1f} MB, removed "
          f"{s1['compacted_records_removed'] - s0['compacted_records_removed']} records in "
          f"{seconds:.2f} s (from the config change, check interval included) = "
          f"{read / 1e6 / seconds:.0f} MB/s; catch-up consume {consume['mb_per_sec']:.0f} MB/s; "
          f"ratio {rate:.2f}")
    out = {"pass": rate}
    for k in ("p50", "p99", "max"):
        x, y = alone["latency_us"][k], during["latency_us"][k]
        out[k] = y / max(x, 1)
        print(f"  e2e {k}: alone {x} us, during the pass {y} us, ratio {out[k]:.2f}")
    print(f"  node CPU: alone {cpu_alone:.1f} s, during {cpu_during:.1f} s in {a.seconds} s windows")
    return out


if __name__ == "__main__":
    main()
