"""What a metadata change costs in a cluster: the time from a CreateTopics
request to every node's Metadata showing the topic.

    .venv/bin/python bench/metadata_change.py [--topics 50] [--nodes 3]

Starts a cluster of NODES weir nodes on loopback (one shard each,
unpinned, data under target/bench-metadata), then creates TOPICS topics of
3 partitions one at a time, each through the next node in turn (so most
go through a node that is not the controller and are carried to it). For
each it measures (a) the CreateTopics round trip (confluent-kafka's
AdminClient) and (b) the time until every node answers a Metadata v1
request for the topic with its partitions, asked over plain sockets every
millisecond. Prints the median and the largest of both, in milliseconds.
"""
import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WEIR = os.path.join(ROOT, "target", "release", "weir")
# The tests' raw Kafka frames and port picker.
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import rawkafka  # noqa: E402
from ports import free_ports  # noqa: E402


def metadata_has(port, topic):
    """Whether the node on `port` names `topic` with partitions (v1)."""
    name = topic.encode()
    body = (struct.pack(">hhih", 3, 1, 1, 5) + b"bench" + struct.pack(">ih", 1, len(name)) + name)
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        head = s.recv(4, socket.MSG_WAITALL)
        n = struct.unpack(">i", head)[0]
        buf = s.recv(n, socket.MSG_WAITALL)
    # The topic's name follows its error code; a known topic has code 0.
    at = buf.find(struct.pack(">h", len(name)) + name)
    return at >= 2 and struct.unpack(">h", buf[at - 2:at])[0] == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=50)
    ap.add_argument("--nodes", type=int, default=3)
    args = ap.parse_args()
    from confluent_kafka.admin import AdminClient, NewTopic

    base = os.path.join(ROOT, "target", "bench-metadata")
    shutil.rmtree(base, ignore_errors=True)
    ports = free_ports(3 * args.nodes)
    peers, kafkas, https = ports[:args.nodes], ports[args.nodes:2 * args.nodes], ports[2 * args.nodes:]
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(peers))
    procs = []
    try:
        for i in range(args.nodes):
            procs.append(subprocess.Popen(
                [WEIR, "serve", os.path.join(base, f"n{i + 1}"), "--node-id", str(i + 1),
                 "--voters", voters, "--kafka", f"127.0.0.1:{kafkas[i]}",
                 "--addr", f"127.0.0.1:{https[i]}", "--cores", "1", "--cpus", "none"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        admins = [AdminClient({"bootstrap.servers": f"127.0.0.1:{k}"}) for k in kafkas]
        # Formed when every node names all of them as brokers not fenced (a
        # node registers fenced at start, and CreateTopics places replicas
        # only on brokers not fenced). Asked of each node with DescribeCluster
        # v2 over a plain socket: Metadata names fenced brokers too, and
        # librdkafka's describe_cluster named them here as well (it sends a
        # Metadata request), so waiting on it let CreateTopics come first.
        deadline = time.time() + 30
        for k in kafkas:
            while True:
                try:
                    with rawkafka.connect(f"127.0.0.1:{k}") as s:
                        controller, fenced = rawkafka.describe_cluster_v2(s)
                    if controller > 0 and len(fenced) == args.nodes and not any(fenced.values()):
                        break
                except OSError:
                    pass
                assert time.time() < deadline, "the cluster did not form in 30 s"
                time.sleep(0.05)
        created, everywhere = [], []
        for t in range(args.topics):
            topic = f"m{t}"
            began = time.perf_counter()
            admins[t % args.nodes].create_topics([NewTopic(topic, 3, 1)])[topic].result(15)
            created.append((time.perf_counter() - began) * 1000)
            pending = set(kafkas)
            while pending:
                pending = {k for k in pending if not metadata_has(k, topic)}
                if pending:
                    time.sleep(0.001)
            everywhere.append((time.perf_counter() - began) * 1000)
        print(f"{args.topics} topics through {args.nodes} nodes in turn (ms):")
        print(f"  CreateTopics answered:      median {statistics.median(created):.1f}, max {max(created):.1f}")
        print(f"  every node's Metadata has it: median {statistics.median(everywhere):.1f}, "
              f"max {max(everywhere):.1f}")
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
