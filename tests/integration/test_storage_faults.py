"""Storage faults: the node's data directory on a disk that fails writes,
fails syncs or is slow (`faultyfs.py`, a FUSE filesystem over a real
directory: this kernel has no device-mapper for dm-error, dm-flakey or
dm-delay). A partition whose writes fail refuses produce with
KAFKA_STORAGE_ERROR and acknowledges nothing that is not durable, while the
other partitions keep serving; once the disk is healthy again the partition
takes writes again, and a restart recovers everything acknowledged. A slow
disk slows acknowledgements and never reorders or loses them.
"""
import os
import pathlib
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer

import rawkafka
from conftest import consume_all, create_topic

KAFKA_STORAGE_ERROR = 56
HERE = pathlib.Path(__file__).parent


class FaultyDisk:
    def __init__(self, tmp_path):
        self.backing = tmp_path / "backing"
        self.mount = tmp_path / "mount"
        self.backing.mkdir()
        self.mount.mkdir()
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "faultyfs.py"), str(self.backing), str(self.mount)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 15
        while not os.path.ismount(self.mount):
            assert self.proc.poll() is None, self.proc.stderr.read()
            assert time.time() < deadline, "faultyfs did not mount"
            time.sleep(0.05)

    def command(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok", line

    def partition_dir(self, topic, partition):
        """The path of a partition's directory under the mount, as the
        filesystem sees it (`/topics/NAME~ID/P/`)."""
        topics = self.backing / "data" / "topics"
        (name,) = [d for d in os.listdir(topics) if d.startswith(topic + "~")]
        return f"/topics/{name}/{partition}/"

    def close(self):
        subprocess.run(["umount", "-l", str(self.mount)], check=False)
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def faulty(tmp_path):
    disk = FaultyDisk(tmp_path)
    yield disk
    disk.close()


def produce_acked(bootstrap, topic, partition, values):
    """Produces with acks=all; {value: offset} of the acknowledged ones."""
    acked, errors = {}, []

    def report(err, msg):
        if err is None:
            acked[msg.value()] = msg.offset()
        else:
            errors.append(err)

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    for v in values:
        p.produce(topic, v, partition=partition, on_delivery=report)
        p.poll(0)
    assert p.flush(60) == 0
    assert errors == []
    return acked


def raw_produce(bootstrap, topic, partition, value):
    """One record with acks=all over a raw connection: the error code."""
    s = rawkafka.connect(bootstrap, timeout=30)
    s.sendall(rawkafka.request(0, 3, rawkafka.produce_v3(topic, partition, rawkafka.record_batch([value]))))
    _cid, parts = rawkafka.parse_produce_v3_response(rawkafka.read_frame(s))
    s.close()
    return parts[0][2]


def check_log(records, acked, may_appear=()):
    """Every acknowledged value once at its offset; besides them only
    values the node refused may appear (a refused write can land once the
    disk heals: the client was told it failed, as Kafka would tell it)."""
    seen = {}
    for m in records:
        assert m.value() not in seen, f"{m.value()!r} twice"
        seen[m.value()] = m.offset()
    for v, off in acked.items():
        assert seen.get(v) == off, f"{v!r} acknowledged at {off}, read at {seen.get(v)}"
    extra = set(seen) - set(acked)
    assert extra <= set(may_appear), f"never sent: {sorted(extra - set(may_appear))[:5]}"
    offsets = sorted(seen.values())
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), "offsets not dense"


@pytest.mark.parametrize("fault", ["fail-writes", "fail-syncs"])
def test_a_failing_disk_takes_its_partition_offline_and_loses_nothing_acknowledged(
        faulty, make_node, fault):
    node = make_node(data_dir=faulty.mount / "data")
    create_topic(node.bootstrap, "t", partitions=2)
    acked = {p: produce_acked(node.bootstrap, "t", p, [b"before-%d-%d" % (p, i) for i in range(200)])
             for p in (0, 1)}
    faulty.command(f"{fault} {faulty.partition_dir('t', 0)}")
    refused = [b"refused-%d" % i for i in range(3)]
    for v in refused:
        assert raw_produce(node.bootstrap, "t", 0, v) == KAFKA_STORAGE_ERROR
    assert node.await_log("Input/output error")
    # The other partition is written and read as before.
    acked[1].update(produce_acked(node.bootstrap, "t", 1, [b"during-1-%d" % i for i in range(200)]))
    check_log([m for m in consume_all(node.bootstrap, "t", 2) if m.partition() == 1], acked[1])
    # Healthy again: the partition takes writes again.
    faulty.command("heal")
    acked[0].update(produce_acked(node.bootstrap, "t", 0, [b"after-0-%d" % i for i in range(200)]))
    # Killed and started on the healthy disk: everything acknowledged.
    node.kill()
    node.start()
    records = consume_all(node.bootstrap, "t", 2)
    for p in (0, 1):
        check_log([m for m in records if m.partition() == p], acked[p], may_appear=refused)


def test_a_slow_disk_slows_acknowledgements_and_keeps_their_order(faulty, make_node):
    node = make_node(data_dir=faulty.mount / "data")
    create_topic(node.bootstrap, "t")
    faulty.command("delay-writes 20")
    order = []

    def report(err, msg):
        assert err is None, err
        order.append((msg.value(), msg.offset()))

    # Thirty requests of ten records, five in flight at once (librdkafka's
    # default), each waiting on the slow disk.
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 0, "batch.num.messages": 10,
                  "max.in.flight.requests.per.connection": 5, "enable.idempotence": True})
    values = [b"slow-%04d" % i for i in range(300)]
    for v in values:
        p.produce("t", v, on_delivery=report)
        p.poll(0)
    assert p.flush(120) == 0
    assert [v for v, _ in order] == values
    assert [o for _, o in order] == list(range(300))
    faulty.command("heal")
    node.kill()
    node.start()
    assert [m.value() for m in consume_all(node.bootstrap, "t", 1)] == values
