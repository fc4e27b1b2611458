"""A panic on any shard ends the node's process (src/panics.rs), so that its
supervisor restarts it and recovery runs, rather than a process that looks
alive while one shard's partitions and groups wait forever.

`WEIR_PANIC_AT=fetch:TOPIC` makes the shard that owns a partition of TOPIC
panic as it reads it for a fetch (storage/src/crash_point.rs), as a bug in
that shard would.
"""
import signal

from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import Node, create_topic

RECORDS = 2000


def test_a_shard_panic_ends_the_process_and_a_restart_serves_what_was_acknowledged(tmp_path):
    node = Node(tmp_path / "data", cores=2, env={"WEIR_PANIC_AT": "fetch:boom"}).start()
    create_topic(node.bootstrap, "data", partitions=4)
    create_topic(node.bootstrap, "boom", partitions=1)

    acked = []
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        p.produce("data", key=b"k%d" % i, value=b"v-%d" % i,
                  on_delivery=lambda err, m: acked.append((m.partition(), m.offset(), m.value()))
                  if err is None else None)
    assert p.flush(30) == 0
    assert len(acked) == RECORDS, f"{len(acked)} of {RECORDS} acknowledged"

    # A fetch of the topic makes its owner shard panic.
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "panic", "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition("boom", 0, 0)])
        c.poll(1.0)
        code = node.proc.wait(30)
    finally:
        c.close()
    assert code == -signal.SIGABRT, f"the node ended with {code}, not by abort"
    log = "".join(node.log)
    assert "panic point fetch:boom reached" in log, log[-3000:]
    assert "aborting the process so that it is restarted" in log, log[-3000:]
    assert "weir_core::shard" in log, "the panic's backtrace names the shard's code:\n" + log[-3000:]

    # Restarted (as a supervisor would, without the panic point), the node
    # serves every acknowledged record where it was acknowledged.
    node.env.pop("WEIR_PANIC_AT")
    node.log = []
    node.start()
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "after", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("data", q, 0) for q in range(4)])
        ends = {q: c.get_watermark_offsets(TopicPartition("data", q), timeout=10)[1] for q in range(4)}
        got = {}
        while len(got) < sum(ends.values()):
            m = c.poll(10)
            assert m is not None, f"read {len(got)} of {sum(ends.values())} records"
            assert m.error() is None, m.error()
            got[(m.partition(), m.offset())] = m.value()
    finally:
        c.close()
    missing = [(q, o) for q, o, v in acked if got.get((q, o)) != v]
    assert not missing, f"{len(missing)} acknowledged records missing, e.g. {missing[:5]}"
    node.stop()
