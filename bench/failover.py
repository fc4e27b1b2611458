"""What a leader's death costs a producer: kill -9 of a partition leader of
a three-node cluster under a steady acks=all load, and the time until
acknowledgements resume on the partitions it led.

    .venv/bin/python bench/failover.py --brokers H:P,H:P,H:P \
        --pids 1:PID,2:PID,3:PID [--partitions 12] [--rate 2000] [--warmup 5]

Works on any Kafka-protocol cluster (bench/cluster.sh for weir,
bench/kafka_cluster.sh for Kafka: each prints or keeps its nodes' PIDs).
Makes a topic of PARTITIONS partitions with three replicas, runs an
idempotent acks=all producer (confluent-kafka, linger 5 ms) at RATE
records/s spread over the partitions, and after WARMUP seconds kills -9
the node leading partition 0. For each partition that node led, the
failover time is from the kill to the first acknowledgement of a record
sent after it; prints the largest (every partition served again) and the
median, in milliseconds, and how many records were acknowledged in all.
The killed node stays down: restart the cluster for the next run.
"""
import argparse
import os
import signal
import statistics
import threading
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--pids", required=True, help="node id:PID pairs, comma-separated")
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--timeout", type=float, default=60, help="give up this long after the kill")
    a = ap.parse_args()
    pids = {int(n): int(p) for n, p in (x.split(":") for x in a.pids.split(","))}

    topic = f"failover-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": a.brokers})
    admin.create_topics([NewTopic(topic, a.partitions, 3)])[topic].result(30)
    deadline = time.time() + 30
    while True:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        if md.error is None and len(md.partitions) == a.partitions and all(
                p.leader >= 0 and len(p.isrs) == 3 for p in md.partitions.values()):
            break
        assert time.time() < deadline, f"{topic} did not get {a.partitions} partitions with 3 in sync"
        time.sleep(0.1)

    acks = []  # (partition, sent at, acknowledged at)
    failed = []
    stopping = threading.Event()
    p = Producer({"bootstrap.servers": a.brokers, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": int(a.timeout * 1000)})

    def run():
        i, start = 0, time.time()
        value = b"x" * 1024
        while not stopping.is_set():
            due = start + i / a.rate
            now = time.time()
            if now < due:
                p.poll(min(due - now, 0.001))
                continue
            part = i % a.partitions

            def done(err, _msg, part=part, sent=now):
                if err:
                    failed.append(err)
                else:
                    acks.append((part, sent, time.time()))
            p.produce(topic, value=value, partition=part, on_delivery=done)
            p.poll(0)
            i += 1

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(a.warmup)  # the load's steady state, before the fault
    md = admin.list_topics(topic, timeout=10).topics[topic]
    victim = md.partitions[0].leader
    led = sorted(pid for pid, pm in md.partitions.items() if pm.leader == victim)
    killed_at = time.time()
    os.kill(pids[victim], signal.SIGKILL)
    resumed, seen = {}, 0
    deadline = killed_at + a.timeout
    while len(resumed) < len(led) and time.time() < deadline:
        new, seen = acks[seen:], len(acks)
        for part, sent, at in new:
            if part in led and sent > killed_at and part not in resumed:
                resumed[part] = at - killed_at
        time.sleep(0.01)
    stopping.set()
    t.join(10)
    p.flush(a.timeout)
    assert len(resumed) == len(led), f"partitions {sorted(set(led) - set(resumed))} had no ack within {a.timeout} s"
    ms = sorted(1000 * v for v in resumed.values())
    print(f"killed node {victim} (leader of partitions {led}); acks resumed on all of them after "
          f"{ms[-1]:.0f} ms (median {statistics.median(ms):.0f} ms); {len(acks)} acknowledged, "
          f"{len(failed)} failed")


if __name__ == "__main__":
    main()
