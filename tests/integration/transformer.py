"""Seed 003's consume-transform-produce loop, as a process of its own:
reads `input` from the group's committed offsets, writes each record's
value upper-cased to `output` and the consumed offsets in one transaction
per batch (confluent-kafka, `send_offsets_to_transaction`).

    transformer.py BOOTSTRAP TXN_ID INPUT OUTPUT GROUP PAUSE_AFTER

After PAUSE_AFTER committed batches (-1: never) it produces the next batch,
flushes it, prints "PAUSED" and waits for a line on stdin before committing
(the test kills it there, or lets it try to commit after another instance
took its transactional id: then it prints "FENCED" and exits 3). With
nothing left to read for 3 s it prints "DONE" and exits 0."""
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main():
    bootstrap, txn_id, source, sink, group, pause_after = sys.argv[1:7]
    pause_after = int(pause_after)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest"})
    md = consumer.list_topics(source, timeout=15)
    # Assigned, not subscribed: a paused instance holds no group membership
    # that would stall the next one; offsets still start where the group's
    # committed ones are.
    consumer.assign([TopicPartition(source, p) for p in md.topics[source].partitions])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    print("READY", flush=True)
    batches, idle_since = 0, time.time()
    while True:
        msgs = [m for m in consumer.consume(num_messages=20, timeout=0.5) if m.error() is None]
        if not msgs:
            if time.time() - idle_since > 3:
                print("DONE", flush=True)
                return 0
            continue
        idle_since = time.time()
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, m.value().upper(), key=m.value())
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        if batches == pause_after:
            producer.flush(30)
            print("PAUSED", flush=True)
            sys.stdin.readline()
        try:
            producer.commit_transaction(30)
        except KafkaException as e:
            print("FENCED", e, flush=True)
            return 3
        batches += 1
        print("COMMITTED", batches, flush=True)


if __name__ == "__main__":
    sys.exit(main())
