"""What a `GET /metrics` scrape costs with many partitions.

    .venv/bin/python bench/metrics_scrape.py --brokers 127.0.0.1:9092 --http 127.0.0.1:8080 \
        --pid PID [--partitions 10000] [--scrapes 20]

Creates topic `scraped` with `--partitions` partitions (if it is not
there), then scrapes `--scrapes` times, one after another, and reports the
response size, the median and worst scrape time, and the node's CPU per
scrape: at one scrape a second, that is the share of one core the
scraping costs.
"""
import argparse
import statistics
import time
import urllib.request

from confluent_kafka.admin import AdminClient, NewTopic

from proc_cpu import cpu_seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--http", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--scrapes", type=int, default=20)
    a = ap.parse_args()
    admin = AdminClient({"bootstrap.servers": a.brokers})
    if "scraped" not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic("scraped", num_partitions=a.partitions,
                                      replication_factor=1)])["scraped"].result(300)
    times, size = [], 0
    cpu0 = cpu_seconds(a.pid)
    for _ in range(a.scrapes):
        t = time.perf_counter()
        with urllib.request.urlopen(f"http://{a.http}/metrics", timeout=60) as r:
            size = len(r.read())
        times.append(time.perf_counter() - t)
    cpu = (cpu_seconds(a.pid) - cpu0) / a.scrapes
    print(f"{a.partitions} partitions: {size / 1e6:.1f} MB a scrape; scrape time median "
          f"{statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms; node CPU "
          f"{cpu * 1000:.0f} ms a scrape = {100 * cpu:.1f}% of a core at one scrape a second")


if __name__ == "__main__":
    main()
