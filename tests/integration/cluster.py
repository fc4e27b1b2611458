"""Several real weir nodes on this machine making one cluster: each its own
process, data directory and loopback ports (Kafka, HTTP, peer), unpinned
(`--cpus none`) so three share two cores, one shard each."""
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

import rawkafka
from conftest import Node, free_port


class Cluster:
    """`hosts`: each node's own loopback address (all its ports there, and
    its calls to other nodes leave from it), so rules on address pairs cut
    nodes apart; default: all on 127.0.0.1."""

    def __init__(self, base_dir, size=3, extra=(), env=None, hosts=None, session_ms=3000):
        self.hosts = hosts or ["127.0.0.1"] * size
        self.peer_ports = [free_port(host) for host in self.hosts]
        self.voters = ",".join(f"{i + 1}@{self.hosts[i]}:{p}" for i, p in enumerate(self.peer_ports))
        self.nodes = []
        for i in range(size):
            self.nodes.append(Node(base_dir / f"node{i + 1}", cores=1, host=self.hosts[i],
                                   extra=["--node-id", str(i + 1), "--voters", self.voters,
                                          "--cpus", "none", "--node-session-timeout-ms", str(session_ms),
                                          *extra], env=env))
        # free_port() frees what it found: two picks may meet. Pick again
        # until every port of the cluster is its own.
        while len(set(self.ports())) < len(self.ports()):
            for n in self.nodes:
                n.kafka_port, n.http_port = free_port(n.host), free_port(n.host)

    def ports(self):
        return self.peer_ports + [p for n in self.nodes for p in (n.kafka_port, n.http_port)]

    def node(self, node_id):
        return self.nodes[node_id - 1]

    def start(self, brokers=None, **conf):
        """Starts every node and waits until each names `brokers` (default:
        one per node) and the same controller."""
        for n in self.nodes:
            n.spawn()
        try:
            for n in self.nodes:
                n.ready.wait(30)
                if n.proc.poll() is not None or not any("weir serving" in line for line in n.log):
                    raise RuntimeError("weir did not start:\n" + "".join(n.log))
            self.await_brokers(brokers or len(self.nodes), **conf)
        except BaseException:
            self.stop()  # no node outlives a start that failed
            raise
        return self

    def stop(self):
        for n in self.nodes:
            if n.proc and n.proc.poll() is None:
                n.kill()

    def metadata(self, node, topic=None, **conf):
        admin = AdminClient({"bootstrap.servers": node.bootstrap, **conf})
        return admin.list_topics(topic=topic, timeout=10)

    def live_brokers(self, node, **conf):
        """The brokers `node` names as not fenced and its controller id (-1
        for none), from DescribeCluster v2 (librdkafka's describe_cluster
        asks Metadata, which names fenced brokers too). `conf`: client
        settings; SASL/PLAIN sign-in and TLS (`ssl.ca.location`) are
        understood."""
        with rawkafka.connect(node.bootstrap) as plain:
            sock = plain
            if "ssl.ca.location" in conf:
                import ssl
                ctx = ssl.create_default_context(cafile=conf["ssl.ca.location"])
                sock = ctx.wrap_socket(plain, server_hostname=node.host)
            if conf:
                assert conf.get("sasl.mechanism") == "PLAIN", f"cannot sign in with {conf}"
                rawkafka.sasl_plain(sock, conf["sasl.username"], conf["sasl.password"])
            controller, brokers = rawkafka.describe_cluster_v2(sock)
        return sorted(b for b, fenced in brokers.items() if not fenced), controller

    def await_brokers(self, count, among=None, timeout=30, **conf):
        """Waits until every node of `among` (default: all) names `count`
        brokers not fenced and a controller in DescribeCluster (asked with
        the client settings `conf`); returns the controller. (Metadata
        names fenced brokers too.)"""
        among = among or self.nodes
        deadline = time.time() + timeout
        seen = None
        while time.time() < deadline:
            seen = []
            for n in among:
                try:
                    seen.append(self.live_brokers(n, **conf))
                except (KafkaException, OSError) as e:
                    seen.append((str(e), -1))
            if all(isinstance(b, list) and len(b) == count and c > 0 for b, c in seen) and len({c for _, c in seen}) == 1:
                return seen[0][1]
            time.sleep(0.1)
        raise AssertionError(f"brokers and controllers seen: {seen}")


def remove_stale_cuts():
    """Removes the cuts of test runs no longer alive: a run killed in the
    middle of a fault leaves its table behind, and its drops would cut
    every later run's nodes on the same addresses."""
    import os
    import subprocess
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, timeout=10).stdout
    for line in out.splitlines():
        name = line.split()[-1] if line.startswith("table inet weir_partition_") else ""
        pid = name.rsplit("_", 1)[-1]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            subprocess.run(["nft", "delete", "table", "inet", name], capture_output=True, timeout=10)


class Partition:
    """Cuts nodes apart with nftables: packets between the addresses of
    `side` and those of every other node (or of `others` only) are dropped
    (both ways; with `one_way`, only those leaving `side`; with `loss`,
    only that share of them, at random; `side` None: between every two
    nodes), until `heal`. Client traffic (from 127.0.0.1) still reaches
    every node. The table is the test's own and removed on heal."""

    def __init__(self, cluster, side, one_way=False, loss=None, others=None):
        import os
        self.table = f"weir_partition_{os.getpid()}"
        inside = {cluster.hosts[n - 1] for n in side} if side else set(cluster.hosts)
        outside = set(cluster.hosts) - inside if side else inside
        if others:
            outside = {cluster.hosts[n - 1] for n in others}
        assert inside and outside and "127.0.0.1" not in inside | outside
        one_way = one_way or not side
        a, b = "{ " + ", ".join(sorted(inside)) + " }", "{ " + ", ".join(sorted(outside)) + " }"
        drop = "drop" if loss is None else f"numgen random mod 100 < {int(loss * 100)} drop"
        rules = [f"ip saddr {a} ip daddr {b} {drop}"]
        if not one_way:
            rules.append(f"ip saddr {b} ip daddr {a} {drop}")
        body = "\n        ".join(rules)
        self.rules = f"""
table inet {self.table} {{
    chain output {{
        type filter hook output priority 0; policy accept;
        {body}
    }}
}}
"""

    def __enter__(self):
        import subprocess
        remove_stale_cuts()
        subprocess.run(["nft", "-f", "-"], input=self.rules, text=True, check=True, timeout=10)
        return self

    def heal(self):
        import subprocess
        subprocess.run(["nft", "delete", "table", "inet", self.table], capture_output=True, timeout=10)

    def __exit__(self, *exc):
        self.heal()
