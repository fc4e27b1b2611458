"""A full disk: produces are refused with a storage error, the node keeps
serving, nothing acknowledged is lost, and once space is free again the
partition takes records again (and all of it survives a restart).

The data directory is a small ext4 file system of its own (a loop mount),
so the disk really fills: direct writes, fallocate and fdatasync all meet
ENOSPC as they would in production.
"""
import os
import subprocess

import pytest
from confluent_kafka import KafkaError, Producer

from conftest import Node, consume_all, create_topic


@pytest.fixture
def small_disk(tmp_path):
    image, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(48 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def produce_until_refused(bootstrap, topic, start, limit):
    """acks=all produces of 1 KiB values numbered from `start` until one is
    refused; returns (numbers acknowledged, the refusal's error)."""
    acked, errors = [], []

    def report(err, msg):
        if err is None:
            acked.append(int(msg.value()[:12]))
        else:
            errors.append(err)

    # No retries: a refused record is reported at once, not retried until
    # the message timeout.
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "retries": 0, "enable.idempotence": False, "message.timeout.ms": 20000})
    n = start
    while not errors and n < start + limit:
        for _ in range(200):
            p.produce(topic, value=b"%012d" % n + b"x" * 1012, partition=0, on_delivery=report)
            n += 1
        p.flush(30)
    assert p.flush(30) == 0
    return acked, errors


def test_full_disk_refuses_then_recovers(small_disk):
    data = small_disk / "data"
    node = Node(data).start()
    try:
        # Small segments, so the file system fills across several of them.
        create_topic(node.bootstrap, "fill", config={"segment.bytes": str(4 << 20)})
        # Room to give back later: a file that takes a quarter of the disk.
        filler = small_disk / "filler"
        with open(filler, "wb") as f:
            f.write(b"\0" * (12 << 20))
            f.flush()
            os.fsync(f.fileno())

        acked, errors = produce_until_refused(node.bootstrap, "fill", 0, 200_000)
        assert errors, "the disk never filled"
        assert errors[0].code() == KafkaError.KAFKA_STORAGE_ERROR, errors[0]
        assert len(acked) > 1000, f"only {len(acked)} records fit before the first refusal"
        # The node still serves, and everything acknowledged reads back.
        assert node.proc.poll() is None, "".join(node.log[-20:])
        assert node.stats()
        got = [int(m.value()[:12]) for m in consume_all(node.bootstrap, "fill", 1)]
        assert set(acked) <= set(got)
        assert got == sorted(set(got)), "records out of order or twice"
        # Why it refused is in the log, naming the cause.
        assert any("No space left" in line or "short write" in line for line in node.log), \
            "".join(node.log[-20:])
        # A client that keeps trying is refused every time, but the log
        # does not take a line per refusal: the same refusal is logged once
        # per 10 s (twice, with the count of those left out, if a window
        # ends meanwhile).
        refused_before = sum("refused" in line for line in node.log)
        p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "retries": 0,
                      "enable.idempotence": False})
        failures = []
        for _ in range(30):
            p.produce("fill", value=b"x" * 1024, partition=0,
                      on_delivery=lambda err, msg: failures.append(err))
            p.flush(30)
        assert len(failures) == 30 and all(
            e is not None and e.code() == KafkaError.KAFKA_STORAGE_ERROR for e in failures), failures
        refused_lines = [line for line in node.log if "refused" in line]
        assert len(refused_lines) - refused_before <= 2, "".join(refused_lines)
        assert "produce to fill-0 refused" in refused_lines[0], refused_lines[0]

        # Space again: the same partition takes records again. ext4 reuses
        # a deleted file's blocks only once its journal has committed the
        # delete, so commit it now rather than wait for the 5 s timer.
        filler.unlink()
        os.sync()
        more, errors = produce_until_refused(node.bootstrap, "fill", 1_000_000, 400)
        assert not errors, errors
        assert len(more) == 400
        got = [int(m.value()[:12]) for m in consume_all(node.bootstrap, "fill", 1)]
        assert set(acked) | set(more) <= set(got)

        # And all of it survives a restart.
        node.restart()
        again = [int(m.value()[:12]) for m in consume_all(node.bootstrap, "fill", 1)]
        assert again == got
    finally:
        if node.proc.poll() is None:
            node.stop()
