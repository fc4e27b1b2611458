"""Restarts and crashes: nothing acknowledged is lost."""
import re
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Producer

from conftest import consume_all, create_topic


def test_clean_restart_keeps_everything(make_node, tmp_path):
    data = tmp_path / "restart"
    n = make_node(data_dir=data)
    create_topic(n.bootstrap, "kept", partitions=3, config={"retention.ms": "86400000"})
    p = Producer({"bootstrap.servers": n.bootstrap, "linger.ms": 5})
    for i in range(5000):
        p.produce("kept", key=b"%d" % i, value=b"value-%d" % i, headers=[("h", b"%d" % i)])
        p.poll(0)
    assert p.flush(30) == 0
    before = sorted((m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers()))
                    for m in consume_all(n.bootstrap, "kept", 3, 5000))
    assert len(before) == 5000
    n.stop()
    # A clean stop leaves each partition's active segment state beside it;
    # the next start loads it (no scan) and removes it.
    states = sorted(data.glob("topics/kept*/*/*.clean"))
    assert len(states) == 3, states
    n.start()
    assert not any(s.exists() for s in states)
    after = sorted((m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers()))
                   for m in consume_all(n.bootstrap, "kept", 3, 5000))
    assert after == before
    # Offsets continue where they stopped, and configs survived.
    ends = {}
    for part, off, *_ in before:
        ends[part] = max(ends.get(part, -1), off)
    reports = []
    p = Producer({"bootstrap.servers": n.bootstrap})
    for part in range(3):
        p.produce("kept", value=b"more", partition=part, on_delivery=lambda e, m: reports.append((e, m)))
    assert p.flush(30) == 0
    assert sorted((m.partition(), m.offset()) for e, m in reports) == [(q, ends[q] + 1) for q in range(3)]
    # A crash after that start: no state is trusted, the segments are
    # scanned, and everything acknowledged is there.
    n.kill()
    n.start()
    assert len(consume_all(n.bootstrap, "kept", 3, 5003)) == 5003
    from confluent_kafka.admin import AdminClient, ConfigResource
    admin = AdminClient({"bootstrap.servers": n.bootstrap})
    res = admin.describe_configs([ConfigResource("topic", "kept")])
    configs = list(res.values())[0].result(10)
    assert configs["retention.ms"].value == "86400000"


@pytest.mark.parametrize("journal", [False, True], ids=["own-syncs", "journal"])
@pytest.mark.parametrize("how", ["kill", "term"])
def test_a_stop_under_acks_all_load_loses_nothing_acknowledged(make_node, tmp_path, how, journal):
    """kill -9, or SIGTERM (a clean stop: it must exit 0, within its 30 s
    bound, having answered or failed every produce in flight), while an
    acks=all producer keeps sending. With `--journal` the acknowledged
    records of the segments not yet synced come back from the journal."""
    data = tmp_path / "crash"
    n = make_node(data_dir=data, extra=["--journal"] if journal else ())
    create_topic(n.bootstrap, "crash", partitions=4)
    acked = {}
    lock = threading.Lock()
    stop = threading.Event()
    enough = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            with lock:
                acked[(msg.partition(), msg.offset())] = msg.value()
                if len(acked) >= 20_000:
                    enough.set()

    def produce():
        p = Producer({"bootstrap.servers": n.bootstrap, "acks": "all", "linger.ms": 1,
                      "message.timeout.ms": 5000, "retries": 0})
        i = 0
        while not stop.is_set():
            try:
                # ~1 KiB values: flushes large enough to end in padding
                # (storage/src/segment.rs), so recovery scans across it.
                p.produce("crash", value=(b"record-%d-" % i).ljust(1000, b"x"),
                          on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            p.poll(0)
        p.flush(10)

    t = threading.Thread(target=produce)
    t.start()
    assert enough.wait(60), "the producer did not get 20,000 acks"
    if journal:
        # The journal carried them: its counters in /metrics (per shard)
        # hold at least the acknowledged bytes.
        with urllib.request.urlopen(n.http + "/metrics", timeout=10) as r:
            text = r.read().decode()
        writes = sum(float(v) for v in re.findall(r"^weir_journal_writes_total\{[^}]*\} (\S+)$", text, re.M))
        written = sum(float(v) for v in re.findall(r"^weir_journal_written_bytes_total\{[^}]*\} (\S+)$", text, re.M))
        assert writes > 0, "no journal write in /metrics"
        assert written >= 20_000 * 1000, f"the journal wrote {written} bytes for 20,000 acknowledged 1 KB records"
    if how == "kill":
        n.kill()  # SIGKILL while the producer keeps sending
    else:
        n.stop()  # SIGTERM while it keeps sending: exits 0 (asserted)
    stop.set()
    t.join(30)
    with lock:
        acked_now = dict(acked)
    n.start()
    if journal and how == "kill":
        assert any("journal replayed" in line for line in n.log), "".join(n.log[-20:])
    got = consume_all(n.bootstrap, "crash", 4, timeout=60)
    stored = {(m.partition(), m.offset()): m.value() for m in got}
    missing = [k for k in acked_now if stored.get(k) != acked_now[k]]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    # Offsets stay dense after recovery.
    for part in range(4):
        offs = sorted(o for p, o in stored if p == part)
        assert offs == list(range(len(offs)))
    # And the recovered logs take new records right after their ends.
    ends = {part: sum(1 for p, _ in stored if p == part) for part in range(4)}
    placed = {}
    p = Producer({"bootstrap.servers": n.bootstrap, "acks": "all"})
    for part in range(4):
        for i in range(10):
            p.produce("crash", value=b"after-%d" % i, partition=part,
                      on_delivery=lambda err, msg: placed.setdefault(
                          (msg.partition(), msg.offset()), err))
    assert p.flush(30) == 0
    assert all(err is None for err in placed.values()), placed
    assert sorted(placed) == sorted((part, ends[part] + i) for part in range(4) for i in range(10))
