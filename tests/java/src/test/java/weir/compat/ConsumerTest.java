package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;

/** KafkaConsumer: groups with both kinds of assignor, static members, seeks. */
class ConsumerTest extends OneNode {
    static void topic(String name, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1))).all().get();
    }

    static KafkaConsumer<String, String> consumer(Object... more) {
        var p = node.props(more);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.putIfAbsent("auto.offset.reset", "earliest");
        return new KafkaConsumer<>(p);
    }

    static KafkaProducer<String, String> producer() {
        var p = node.props("key.serializer", StringSerializer.class.getName(),
                "value.serializer", StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }


    static void pollUntil(List<KafkaConsumer<String, String>> cs, java.util.function.BooleanSupplier done,
            String what) {
        Wait.polling(cs, done, what, r -> { });
    }

    @Test
    void cooperativeStickyMovesOnlyWhatChangesHands() throws Exception {
        topic("coop", 4);
        var la = new Rebalances();
        var lb = new Rebalances();
        try (var a = consumer("group.id", "coop-g", "partition.assignment.strategy",
                CooperativeStickyAssignor.class.getName());
             var b = consumer("group.id", "coop-g", "partition.assignment.strategy",
                CooperativeStickyAssignor.class.getName())) {
            a.subscribe(List.of("coop"), la);
            pollUntil(List.of(a), () -> a.assignment().size() == 4, "a owns all 4");
            b.subscribe(List.of("coop"), lb);
            pollUntil(List.of(a, b), () -> a.assignment().size() == 2 && b.assignment().size() == 2,
                    "a and b own 2 each");
            Set<TopicPartition> union = new HashSet<>(a.assignment());
            union.addAll(b.assignment());
            assertEquals(4, union.size());
            // Incremental: a gave up exactly the two b took, never all four.
            Set<TopicPartition> given = new HashSet<>();
            la.revoked.forEach(given::addAll);
            assertEquals(b.assignment(), given);
            assertTrue(la.revoked.stream().noneMatch(r -> r.size() == 4), la.revoked.toString());
        }
    }

    @Test
    void rangeRebalancesEagerly() throws Exception {
        topic("range", 4);
        var la = new Rebalances();
        try (var a = consumer("group.id", "range-g", "partition.assignment.strategy",
                RangeAssignor.class.getName());
             var b = consumer("group.id", "range-g", "partition.assignment.strategy",
                RangeAssignor.class.getName())) {
            a.subscribe(List.of("range"), la);
            pollUntil(List.of(a), () -> a.assignment().size() == 4, "a owns all 4");
            b.subscribe(List.of("range"));
            pollUntil(List.of(a, b), () -> a.assignment().size() == 2 && b.assignment().size() == 2,
                    "a and b own 2 each");
            // Eager: a gave back everything before the new assignment, and
            // the range assignor gives each member a contiguous range.
            assertTrue(la.revoked.contains(Set.of(
                    new TopicPartition("range", 0), new TopicPartition("range", 1),
                    new TopicPartition("range", 2), new TopicPartition("range", 3))), la.revoked.toString());
            var first = a.assignment().stream().mapToInt(TopicPartition::partition).sorted().toArray();
            assertEquals(first[0] + 1, first[1]);
        }
    }

    @Test
    void aStaticMemberComesBackToItsPartitionsWithoutARebalance() throws Exception {
        topic("static", 4);
        var lb = new Rebalances();
        var a = consumer("group.id", "static-g", "group.instance.id", "member-a",
                "session.timeout.ms", "30000");
        try (var b = consumer("group.id", "static-g", "group.instance.id", "member-b",
                "session.timeout.ms", "30000")) {
            a.subscribe(List.of("static"));
            b.subscribe(List.of("static"), lb);
            pollUntil(List.of(a, b), () -> a.assignment().size() == 2 && b.assignment().size() == 2,
                    "a and b own 2 each");
            Set<TopicPartition> owned = new HashSet<>(a.assignment());
            int generation = b.groupMetadata().generationId();
            int revokedBefore = lb.revoked.size();
            // A static member's close does not leave the group.
            a.close();
            try (var back = consumer("group.id", "static-g", "group.instance.id", "member-a",
                    "session.timeout.ms", "30000")) {
                back.subscribe(List.of("static"));
                pollUntil(List.of(back, b), () -> back.assignment().size() == 2, "a is back");
                assertEquals(owned, back.assignment());
                assertEquals(generation, b.groupMetadata().generationId());
                assertEquals(revokedBefore, lb.revoked.size(), "b was never asked to give anything back");
            }
        }
    }

    @Test
    void seekPauseResumeAndOffsetsForTimes() throws Exception {
        topic("seeks", 1);
        var tp = new TopicPartition("seeks", 0);
        long t0 = System.currentTimeMillis() - 100_000;
        try (var p = producer()) {
            for (int i = 0; i < 20; i++) {
                p.send(new ProducerRecord<>("seeks", 0, t0 + i * 1_000L, "k" + i, "v" + i));
            }
            p.flush();
        }
        try (var c = consumer("group.id", "seeker")) {
            c.assign(List.of(tp));
            Map<TopicPartition, OffsetAndTimestamp> at = c.offsetsForTimes(Map.of(tp, t0 + 9_500L));
            assertEquals(10, at.get(tp).offset());
            assertEquals(t0 + 10_000L, at.get(tp).timestamp());
            c.seek(tp, at.get(tp).offset());
            List<ConsumerRecord<String, String>> got = new ArrayList<>();
            pollUntil(List.of(c), () -> {
                c.poll(Duration.ofMillis(100)).forEach(got::add);
                return !got.isEmpty();
            }, "a record after the seek");
            assertEquals("v10", got.get(0).value());
            // Paused: nothing is returned however long it polls; resumed:
            // it reads on from where it was.
            c.seek(tp, 15);
            c.pause(List.of(tp));
            assertEquals(Set.of(tp), c.paused());
            for (int i = 0; i < 5; i++) {
                assertTrue(c.poll(Duration.ofMillis(100)).isEmpty());
            }
            c.resume(List.of(tp));
            got.clear();
            pollUntil(List.of(c), () -> {
                c.poll(Duration.ofMillis(100)).forEach(got::add);
                return !got.isEmpty();
            }, "records after resume");
            assertEquals(15, got.get(0).offset());
            c.seekToEnd(List.of(tp));
            assertEquals(20, c.position(tp));
            c.seekToBeginning(List.of(tp));
            assertEquals(0, c.position(tp));
        }
    }
}
