"""kcat, built on Debian's librdkafka 2.0.2: an older client against the node."""
import shutil
import subprocess

import pytest

from conftest import create_topic

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def kcat(node, *args, input=None):
    return subprocess.run([KCAT, "-b", node.bootstrap, *args], input=input, capture_output=True,
                          timeout=60, check=True)


def test_kcat_lists_produces_and_consumes(node):
    assert KCAT, "kcat is not installed (.ci/run installs it)"
    create_topic(node.bootstrap, "kc", partitions=2)
    listing = kcat(node, "-L").stdout.decode()
    assert 'topic "kc" with 2 partitions' in listing
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
        lines = "".join(f"{codec}:{i}\n" for i in range(100)).encode()
        kcat(node, "-P", "-t", "kc", "-z", codec, "-K", ":", input=lines)
    out = kcat(node, "-C", "-t", "kc", "-e", "-o", "beginning", "-f", "%k=%s\\n").stdout.decode().split()
    expected = [f"{c}={i}" for c in ["none", "gzip", "snappy", "lz4", "zstd"] for i in range(100)]
    assert sorted(out) == sorted(expected)


def test_kcat_balanced_consumer_reads_a_table_and_commits(make_node):
    assert KCAT, "kcat is not installed (.ci/run installs it)"
    node = make_node(extra=["--group-initial-rebalance-delay-ms", "0"])
    import json
    import urllib.request
    req = urllib.request.Request(node.http + "/sql", method="POST",
                                 data=b"CREATE TABLE kt (n BIGINT) WITH (partitions = 2)")
    assert urllib.request.urlopen(req, timeout=10).status == 200
    kcat(node, "-P", "-t", "kt", input=b"".join(b'{"n": %d, "extra": 1}\n' % i for i in range(4)))
    # A balanced consumer (-G, unbuffered output): joins the group, gets both partitions, reads
    # the rows, and commits what it read when it is stopped.
    proc = subprocess.Popen([KCAT, "-b", node.bootstrap, "-u", "-G", "kgroup", "-o", "beginning",
                             "-f", "%p %s\\n", "kt"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    import threading
    watchdog = threading.Timer(30, proc.kill)  # a read that never comes ends the pipe
    watchdog.start()
    try:
        lines = [proc.stdout.readline().decode().split(" ", 1) for _ in range(4)]
    finally:
        watchdog.cancel()
        proc.terminate()
        proc.wait(30)
    assert all(len(x) == 2 for x in lines), f"kcat printed {lines}"
    assert sorted(json.loads(v)["n"] for _, v in lines) == [0, 1, 2, 3]
    assert all(v.strip() == json.dumps({"n": json.loads(v)["n"]}, separators=(",", ":")) for _, v in lines), \
        "rows as stored, the unknown field dropped"
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    committed = admin.list_group_offsets({"kgroup": None})["kgroup"]
    admin.close()
    per_partition = {}
    for p, _ in lines:
        per_partition[int(p)] = per_partition.get(int(p), 0) + 1
    assert {tp.partition: om.offset for tp, om in committed.items()} == per_partition
