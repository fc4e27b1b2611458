"""Several real weir nodes on this machine making one cluster: each its own
process, data directory and loopback ports (Kafka, HTTP, peer), unpinned
(`--cpus none`) so three share two cores, one shard each."""
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from conftest import Node, free_port


class Cluster:
    def __init__(self, base_dir, size=3, extra=()):
        self.peer_ports = [free_port() for _ in range(size)]
        self.voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(self.peer_ports))
        self.nodes = []
        for i in range(size):
            self.nodes.append(Node(base_dir / f"node{i + 1}", cores=1,
                                   extra=["--node-id", str(i + 1), "--voters", self.voters,
                                          "--cpus", "none", "--node-session-timeout-ms", "3000",
                                          *extra]))

    def node(self, node_id):
        return self.nodes[node_id - 1]

    def start(self):
        for n in self.nodes:
            n.spawn()
        for n in self.nodes:
            n.ready.wait(30)
            if n.proc.poll() is not None or not any("weir serving" in line for line in n.log):
                raise RuntimeError("weir did not start:\n" + "".join(n.log))
        self.await_brokers(len(self.nodes))
        return self

    def stop(self):
        for n in self.nodes:
            if n.proc and n.proc.poll() is None:
                n.kill()

    def metadata(self, node, topic=None):
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        return admin.list_topics(topic=topic, timeout=10)

    def await_brokers(self, count, among=None, timeout=30):
        """Waits until every node of `among` (default: all) names `count`
        brokers and a controller in its Metadata; returns the controller."""
        among = among or self.nodes
        deadline = time.time() + timeout
        seen = None
        while time.time() < deadline:
            seen = []
            for n in among:
                try:
                    md = self.metadata(n)
                except KafkaException as e:
                    seen.append((str(e), -1))
                    continue
                seen.append((sorted(md.brokers), md.controller_id))
            if all(isinstance(b, list) and len(b) == count and c > 0 for b, c in seen) and len({c for _, c in seen}) == 1:
                return seen[0][1]
            time.sleep(0.1)
        raise AssertionError(f"brokers and controllers seen: {seen}")
