"""An idle node with N long-polling consumers: the node's CPU use.

    .venv/bin/python bench/idle_consumers.py --brokers 127.0.0.1:9092 --pid PID [--consumers 100] [--seconds 10]

Each consumer (librdkafka, fetch.wait.max.ms 500) is parked at the end of an
empty topic; the node's CPU time (utime + stime from /proc) over the window
is reported as a fraction of one core.
"""
import argparse
import threading
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from proc_cpu import cpu_seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--consumers", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=10)
    a = ap.parse_args()
    admin = AdminClient({"bootstrap.servers": a.brokers})
    try:
        admin.create_topics([NewTopic("idle", num_partitions=1, replication_factor=1)])["idle"].result(10)
    except Exception:
        pass
    consumers = []
    for i in range(a.consumers):
        c = Consumer({"bootstrap.servers": a.brokers, "group.id": f"idle-{i}", "enable.auto.commit": False})
        c.assign([TopicPartition("idle", 0, 0)])
        consumers.append(c)
    stop = threading.Event()

    def poll_all():
        while not stop.is_set():
            for c in consumers:
                c.poll(0)
            time.sleep(0.05)

    t = threading.Thread(target=poll_all)
    t.start()
    time.sleep(3)  # every consumer has connected and is parked in a fetch
    before = cpu_seconds(a.pid)
    time.sleep(a.seconds)
    used = cpu_seconds(a.pid) - before
    stop.set()
    t.join()
    for c in consumers:
        c.close()
    print(f"{a.consumers} idle long-polling consumers: node CPU {used:.2f} s in {a.seconds:.0f} s = "
          f"{100 * used / a.seconds:.2f}% of a core")


if __name__ == "__main__":
    main()
