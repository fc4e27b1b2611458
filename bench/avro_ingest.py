"""What an Avro table costs at ingest: the same records produced into a raw
topic, a JSON table and an Avro table, and what reading them as rows costs.

    .venv/bin/python bench/avro_ingest.py --brokers 127.0.0.1:9092 --http 127.0.0.1:8080 \
        --pid PID [--messages 500000] [--size 1024] [--partitions 4] [--rounds 3]

Registers `{"n": long, "pad": string}` under the subject `avro_ingest-value`
in the node's registry, then each round makes three topics of
`--partitions` partitions: a raw topic (CreateTopics), a JSON table
`(n BIGINT, pad VARCHAR)` and an Avro table whose columns come from the
subject, and fills each with `weir-bench produce` (acks=all, `--size`-byte
values: bytes, the JSON object, the framed Avro datum), in an order that
turns each round. For each it records MB/s and the node's CPU over the run,
then times `SELECT sum(n)` over the two tables (rows made from the stored
JSON rows, and from the Avro records as they are read), and drops the
three. It prints each round and the medians, with the Avro table as ratios
to the raw topic and to the JSON table.
"""
import argparse
import json
import os
import statistics
import subprocess
import time
import urllib.request

from proc_cpu import cpu_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "target", "release", "weir-bench")
SUBJECT = "avro_ingest-value"
SCHEMA = {"type": "record", "name": "Row", "fields": [
    {"name": "n", "type": "long"}, {"name": "pad", "type": "string"}]}


def http(addr, method, path, body):
    req = urllib.request.Request(f"http://{addr}{path}", data=body.encode(), method=method)
    if path != "/sql":
        req.add_header("Content-Type", "application/vnd.schemaregistry.v1+json")
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def sql(addr, text):
    return http(addr, "POST", "/sql", text)


def produce(a, topic, extra):
    started = cpu_seconds(a.pid)
    out = subprocess.run([BENCH, "produce", "--brokers", a.brokers, "--topic", topic,
                          "--messages", str(a.messages), "--size", str(a.size), "--acks", "all",
                          "--json", *extra], check=True, capture_output=True, text=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    return {"mb_s": report["mb_per_sec"], "cpu_s": cpu_seconds(a.pid) - started}


def scan(a, table):
    started = time.monotonic()
    got = sql(a.http, f"SELECT sum(n) AS s, count(*) AS c FROM {table}")
    assert got == [{"s": 12345 * a.messages, "c": a.messages}], got
    return time.monotonic() - started


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--http", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    sid = http(a.http, "POST", f"/subjects/{SUBJECT}/versions",
               json.dumps({"schema": json.dumps(SCHEMA)}))["id"]
    kinds = ["raw", "json", "avro"]
    results = {k: [] for k in kinds}
    scans = {"json": [], "avro": []}
    for r in range(a.rounds):
        names = {k: f"ingest_{k}_{r}" for k in kinds}
        sql(a.http, f"CREATE TABLE {names['json']} (n BIGINT, pad VARCHAR) "
                    f"WITH (partitions = {a.partitions})")
        sql(a.http, f"CREATE TABLE {names['avro']} WITH (format = 'avro', "
                    f"subject = '{SUBJECT}', partitions = {a.partitions})")
        extra = {"raw": ["--create-topic", "--partitions", str(a.partitions)],
                 "json": ["--json-values"],
                 "avro": ["--avro-schema-id", str(sid)]}
        order = kinds[r % 3:] + kinds[:r % 3]
        for k in order:
            results[k].append(produce(a, names[k], extra[k]))
        for k in ("json", "avro"):
            scans[k].append(scan(a, names[k]))
        print(f"round {r + 1} ({', '.join(order)}): " + "; ".join(
            f"{k} {results[k][-1]['mb_s']:.0f} MB/s, {results[k][-1]['cpu_s']:.2f} s CPU"
            for k in kinds) + "; " + "; ".join(f"SELECT {k} {scans[k][-1]:.2f} s" for k in scans),
            flush=True)
        sql(a.http, f"DROP TABLE {', '.join(names.values())}")
    med = {k: statistics.median(x["mb_s"] for x in results[k]) for k in kinds}
    cpu = {k: statistics.median(x["cpu_s"] for x in results[k]) for k in kinds}
    scan_med = {k: statistics.median(v) for k, v in scans.items()}
    print(json.dumps({
        "mb_s": med, "node_cpu_s": cpu, "select_s": scan_med,
        "avro_vs_raw": {"mb_s": med["avro"] / med["raw"], "cpu": cpu["avro"] / cpu["raw"]},
        "avro_vs_json": {"mb_s": med["avro"] / med["json"], "cpu": cpu["avro"] / cpu["json"],
                         "select": scan_med["avro"] / scan_med["json"]},
    }, indent=1))


if __name__ == "__main__":
    main()
