"""How long a consumer group takes to settle, with librdkafka members.

    .venv/bin/python bench/group_rebalance.py --brokers 127.0.0.1:9092 [--rounds 5] [--partitions 4]

Each round uses a fresh group of two members on a topic of N partitions and
reports, as medians over the rounds:
- stable: from both members subscribing to each holding half the partitions;
- after leave: from one member's close (LeaveGroup) to the other holding all.
The node's group.initial.rebalance.delay.ms (3 s by default, like Kafka)
dominates "stable"; heartbeat.interval.ms (here 300 ms) bounds how fast the
remaining member hears of a rebalance.
"""
import argparse
import statistics
import time
import uuid

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic


class Member:
    def __init__(self, brokers, group, topic):
        self.assigned = set()
        self.c = Consumer({"bootstrap.servers": brokers, "group.id": group,
                           "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                           "enable.auto.commit": False})
        self.c.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke)

    def _assign(self, _c, parts):
        self.assigned = {p.partition for p in parts}

    def _revoke(self, _c, _parts):
        self.assigned = set()


def wait(members, done, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for m in members:
            m.c.poll(0.01)
        if done():
            return
    raise SystemExit("the group did not settle")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=4)
    a = ap.parse_args()
    topic = f"rebalance-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": a.brokers})
    admin.create_topics([NewTopic(topic, a.partitions, 1)])[topic].result(10)
    half = a.partitions // 2
    stable, after_leave = [], []
    for r in range(a.rounds):
        group = f"{topic}-{r}"
        t0 = time.time()
        x, y = Member(a.brokers, group, topic), Member(a.brokers, group, topic)
        wait([x, y], lambda: len(x.assigned) == half and len(y.assigned) == a.partitions - half)
        stable.append(time.time() - t0)
        t0 = time.time()
        y.c.close()
        wait([x], lambda: len(x.assigned) == a.partitions)
        after_leave.append(time.time() - t0)
        x.c.close()
    print(f"two members stable: median {statistics.median(stable):.2f} s; "
          f"one holds all after the other leaves: median {statistics.median(after_leave):.2f} s "
          f"({a.rounds} rounds)")


if __name__ == "__main__":
    main()
