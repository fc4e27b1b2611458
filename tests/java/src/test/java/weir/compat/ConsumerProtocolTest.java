package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ListConsumerGroupsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The Java consumer with `group.protocol=consumer` (KIP-848): the node
 * assigns (uniform or range), members heartbeat, and a partition moves only
 * once its owner has given it back.
 */
class ConsumerProtocolTest {
    static WeirNode node;
    static Admin admin;

    @BeforeAll
    static void start() throws Exception {
        // Heartbeats every 500 ms (Kafka's default is 5 s), so rebalances
        // settle within the test's patience.
        node = WeirNode.start("--group-consumer-heartbeat-interval-ms", "500");
        admin = Admin.create(node.props());
    }

    @AfterAll
    static void stop() throws Exception {
        admin.close();
        node.close();
    }

    static KafkaConsumer<String, String> consumer(String group, String assignor) {
        var p = node.props("group.id", group, "group.protocol", "consumer",
                "group.remote.assignor", assignor, "auto.offset.reset", "earliest",
                "enable.auto.commit", "false",
                "key.deserializer", StringDeserializer.class.getName(),
                "value.deserializer", StringDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }


    /** Every record value any poll here returned. */
    static final Set<String> seen = java.util.concurrent.ConcurrentHashMap.newKeySet();

    static void pollUntil(List<KafkaConsumer<String, String>> cs, BooleanSupplier done, String what) {
        Wait.polling(cs, done, what, r -> seen.add(r.value()));
    }

    @Test
    void membersSharePartitionsAndMoveOnlyWhatChangesHands() throws Exception {
        admin.createTopics(List.of(new NewTopic("kip848", 4, (short) 1))).all().get();
        try (var p = new KafkaProducer<String, String>(node.props(
                "key.serializer", StringSerializer.class.getName(),
                "value.serializer", StringSerializer.class.getName()))) {
            for (int i = 0; i < 100; i++) {
                p.send(new ProducerRecord<>("kip848", i % 4, "k" + i, "v" + i));
            }
            p.flush();
        }
        var la = new Rebalances();
        try (var a = consumer("kip848-g", "uniform"); var b = consumer("kip848-g", "uniform")) {
            a.subscribe(List.of("kip848"), la);
            pollUntil(List.of(a), () -> a.assignment().size() == 4, "a owns all 4");
            b.subscribe(List.of("kip848"));
            pollUntil(List.of(a, b), () -> a.assignment().size() == 2 && b.assignment().size() == 2,
                    "a and b own 2 each");
            Set<TopicPartition> union = new HashSet<>(a.assignment());
            union.addAll(b.assignment());
            assertEquals(4, union.size());
            // Only what b took was revoked from a.
            Set<TopicPartition> given = new HashSet<>();
            la.revoked.forEach(given::addAll);
            assertEquals(b.assignment(), given);

            // Every record read between them (some while the group
            // settled), each member at the end of what it owns, committed.
            pollUntil(List.of(a, b), () -> seen.size() == 100
                    && a.assignment().stream().allMatch(tp -> a.position(tp) == 25)
                    && b.assignment().stream().allMatch(tp -> b.position(tp) == 25),
                    "100 records read, both members at the end");
            a.commitSync();
            b.commitSync();

            var listed = admin.listConsumerGroups(new ListConsumerGroupsOptions()
                    .withTypes(Set.of(GroupType.CONSUMER))).all().get();
            assertTrue(listed.stream().anyMatch(g -> g.groupId().equals("kip848-g")), listed.toString());
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of("kip848-g"))
                    .all().get().get("kip848-g");
            assertEquals(GroupType.CONSUMER, d.type());
            assertEquals(GroupState.STABLE, d.groupState());
            assertEquals(2, d.members().size());
            assertEquals("uniform", d.partitionAssignor());
            var committed = admin.listConsumerGroupOffsets("kip848-g").partitionsToOffsetAndMetadata().get();
            for (int p = 0; p < 4; p++) {
                assertEquals(25, committed.get(new TopicPartition("kip848", p)).offset());
            }

            // b leaves: a gets everything back.
            b.close();
            pollUntil(List.of(a), () -> a.assignment().size() == 4, "a owns all 4 again");
        }
    }

    @Test
    void aPatternSubscriptionFollowsTheTopics() throws Exception {
        admin.createTopics(List.of(new NewTopic("rx-a", 2, (short) 1), new NewTopic("rx-b", 1, (short) 1),
                new NewTopic("other-rx", 1, (short) 1))).all().get();
        try (var c = consumer("kip848-rx-g", "uniform")) {
            // Resolved by the node (KIP-848's SubscriptionPattern), not by
            // the client from its metadata as a java.util.regex.Pattern is.
            c.subscribe(new org.apache.kafka.clients.consumer.SubscriptionPattern("rx-.*"));
            pollUntil(List.of(c), () -> c.assignment().size() == 3, "the 3 partitions of rx-a and rx-b");
            assertTrue(c.assignment().stream().allMatch(tp -> tp.topic().startsWith("rx-")));
            // A topic made later that matches joins the subscription.
            admin.createTopics(List.of(new NewTopic("rx-c", 2, (short) 1))).all().get();
            pollUntil(List.of(c), () -> c.assignment().size() == 5, "rx-c's partitions too");
        }
    }

    @Test
    void rangeGivesEachMemberAContiguousRange() throws Exception {
        admin.createTopics(List.of(new NewTopic("kip848-range", 4, (short) 1))).all().get();
        try (var a = consumer("kip848-range-g", "range"); var b = consumer("kip848-range-g", "range")) {
            a.subscribe(List.of("kip848-range"));
            b.subscribe(List.of("kip848-range"));
            pollUntil(List.of(a, b), () -> a.assignment().size() == 2 && b.assignment().size() == 2,
                    "a and b own 2 each");
            for (var c : List.of(a, b)) {
                int[] ps = c.assignment().stream().mapToInt(TopicPartition::partition).sorted().toArray();
                assertEquals(ps[0] + 1, ps[1], c.assignment().toString());
            }
            var d = admin.describeConsumerGroups(List.of("kip848-range-g")).all().get()
                    .get("kip848-range-g");
            assertEquals("range", d.partitionAssignor());
            Map<String, Set<TopicPartition>> owned = new java.util.HashMap<>();
            d.members().forEach(m -> owned.put(m.consumerId(), m.assignment().topicPartitions()));
            assertEquals(2, owned.size());
        }
    }
}
