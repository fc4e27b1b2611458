package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;

/** Kafka's AdminClient against one node. */
class AdminTest extends OneNode {
    static KafkaProducer<String, String> producer(Object... more) {
        var p = node.props(more);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    static KafkaConsumer<String, String> consumer(Object... more) {
        var p = node.props(more);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    @Test
    void topicsTheirConfigsAndPartitions() throws Exception {
        admin.createTopics(List.of(new NewTopic("admin-cfg", 2, (short) 1)
                .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "delete")))).all().get();
        TopicDescription d = admin.describeTopics(List.of("admin-cfg")).allTopicNames().get().get("admin-cfg");
        assertEquals(2, d.partitions().size());
        assertFalse(d.topicId().equals(Uuid.ZERO_UUID), "a topic has an id");

        var resource = new ConfigResource(ConfigResource.Type.TOPIC, "admin-cfg");
        assertEquals("3600000", admin.describeConfigs(List.of(resource)).all().get()
                .get(resource).get("retention.ms").value());
        admin.incrementalAlterConfigs(Map.of(resource, List.of(new AlterConfigOp(
                new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET)))).all().get();
        assertEquals("7200000", admin.describeConfigs(List.of(resource)).all().get()
                .get(resource).get("retention.ms").value());

        admin.createPartitions(Map.of("admin-cfg", NewPartitions.increaseTo(4))).all().get();
        assertEquals(4, admin.describeTopics(List.of("admin-cfg")).allTopicNames().get()
                .get("admin-cfg").partitions().size());

        assertTrue(admin.listTopics().names().get().contains("admin-cfg"));
        admin.deleteTopics(List.of("admin-cfg")).all().get();
        Wait.until(() -> {
            try {
                return !admin.listTopics().names().get().contains("admin-cfg");
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }, Duration.ofSeconds(15), "the deleted topic is no longer listed");
    }

    @Test
    void listOffsetsEveryWayAndDeleteRecords() throws Exception {
        admin.createTopics(List.of(new NewTopic("admin-offsets", 1, (short) 1))).all().get();
        var tp = new TopicPartition("admin-offsets", 0);
        long t0 = System.currentTimeMillis() - 60_000;
        // One batch (linger) whose largest timestamp is its second record:
        // the max-timestamp spec answers that record's offset, not the
        // batch's last (KAFKA-16310).
        long[] stamps = {t0, t0 + 5_000, t0 + 1_000, t0 + 2_000, t0 + 3_000, t0 + 4_000};
        try (var p = producer("linger.ms", "200")) {
            for (long ts : stamps) {
                p.send(new ProducerRecord<>("admin-offsets", 0, ts, "k", "v" + ts));
            }
            p.flush();
        }
        assertEquals(0, offset(tp, OffsetSpec.earliest()).offset());
        assertEquals(6, offset(tp, OffsetSpec.latest()).offset());
        ListOffsetsResultInfo max = offset(tp, OffsetSpec.maxTimestamp());
        assertEquals(1, max.offset());
        assertEquals(t0 + 5_000, max.timestamp());
        // The first record at or after the time, in offset order.
        assertEquals(1, offset(tp, OffsetSpec.forTimestamp(t0 + 2_500)).offset());
        assertEquals(0, offset(tp, OffsetSpec.forTimestamp(t0)).offset());
        assertEquals(-1, offset(tp, OffsetSpec.forTimestamp(t0 + 60_000)).offset());

        assertEquals(4, admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4)))
                .lowWatermarks().get(tp).get().lowWatermark());
        assertEquals(4, offset(tp, OffsetSpec.earliest()).offset());
    }

    static ListOffsetsResultInfo offset(TopicPartition tp, OffsetSpec spec) throws Exception {
        return admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get();
    }

    @Test
    void logDirsWithEachPartitionsSize() throws Exception {
        admin.createTopics(List.of(new NewTopic("admin-dirs", 2, (short) 1))).all().get();
        try (var p = producer()) {
            for (int i = 0; i < 100; i++) {
                p.send(new ProducerRecord<>("admin-dirs", 0, "k", "x".repeat(1000)));
            }
            p.flush();
        }
        int broker = admin.describeCluster().nodes().get().iterator().next().id();
        var dirs = admin.describeLogDirs(List.of(broker)).allDescriptions().get().get(broker);
        assertEquals(1, dirs.size());
        var dir = dirs.values().iterator().next();
        assertTrue(dir.totalBytes().isPresent() && dir.usableBytes().isPresent());
        assertTrue(dir.usableBytes().getAsLong() <= dir.totalBytes().getAsLong());
        var written = dir.replicaInfos().get(new TopicPartition("admin-dirs", 0));
        var empty = dir.replicaInfos().get(new TopicPartition("admin-dirs", 1));
        assertTrue(written.size() >= 100_000, "100 records of 1 KB: " + written.size());
        assertEquals(0, empty.size());
        assertEquals(0, written.offsetLag());
        // Asked for one partition: that one.
        var one = admin.describeReplicaLogDirs(List.of(new org.apache.kafka.common.TopicPartitionReplica(
                "admin-dirs", 0, broker))).all().get();
        assertEquals(dirs.keySet().iterator().next(), one.values().iterator().next().getCurrentReplicaLogDir());
    }

    @Test
    void describeCluster() throws Exception {
        DescribeClusterResult c = admin.describeCluster();
        assertNotNull(c.clusterId().get());
        assertEquals(1, c.nodes().get().size());
        assertEquals(node.kafkaPort, c.nodes().get().iterator().next().port());
        assertNotNull(c.controller().get());
    }

    @Test
    void consumerGroupsListedDescribedTheirOffsetsAlteredAndDeleted() throws Exception {
        admin.createTopics(List.of(new NewTopic("admin-group-topic", 2, (short) 1))).all().get();
        try (var p = producer()) {
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>("admin-group-topic", i % 2, "k" + i, "v" + i));
            }
            p.flush();
        }
        try (var c = consumer("group.id", "admin-g", "auto.offset.reset", "earliest",
                "enable.auto.commit", "false")) {
            c.subscribe(List.of("admin-group-topic"));
            int seen = 0;
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (seen < 10 && System.nanoTime() < deadline) {
                ConsumerRecords<String, String> got = c.poll(Duration.ofMillis(200));
                seen += got.count();
            }
            assertEquals(10, seen);
            // While it is a member: listed Stable, described with it.
            ConsumerGroupDescription live = admin.describeConsumerGroups(List.of("admin-g"))
                    .all().get().get("admin-g");
            assertEquals(GroupState.STABLE, live.groupState());
            assertEquals(1, live.members().size());
            assertEquals(2, live.members().iterator().next().assignment().topicPartitions().size());
            c.commitSync();
        }
        Collection<String> listed = admin.listConsumerGroups().all().get().stream()
                .map(g -> g.groupId()).collect(Collectors.toList());
        assertTrue(listed.contains("admin-g"), listed.toString());
        ConsumerGroupDescription empty = admin.describeConsumerGroups(List.of("admin-g"))
                .all().get().get("admin-g");
        assertEquals(GroupState.EMPTY, empty.groupState());

        var t0 = new TopicPartition("admin-group-topic", 0);
        var t1 = new TopicPartition("admin-group-topic", 1);
        Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets("admin-g").partitionsToOffsetAndMetadata().get();
        assertEquals(5, committed.get(t0).offset());
        assertEquals(5, committed.get(t1).offset());

        admin.alterConsumerGroupOffsets("admin-g", Map.of(t0, new OffsetAndMetadata(2))).all().get();
        admin.deleteConsumerGroupOffsets("admin-g", Set.of(t1)).all().get();
        committed = admin.listConsumerGroupOffsets("admin-g").partitionsToOffsetAndMetadata().get();
        assertEquals(2, committed.get(t0).offset());
        assertFalse(committed.containsKey(t1) && committed.get(t1) != null, committed.toString());

        admin.deleteConsumerGroups(List.of("admin-g")).all().get();
        assertFalse(admin.listConsumerGroups().all().get().stream()
                .anyMatch(g -> g.groupId().equals("admin-g")));
        // DescribeGroups v6 (KIP-1043): a group the node does not know.
        var missing = assertThrows(ExecutionException.class,
                () -> admin.describeConsumerGroups(List.of("admin-g")).all().get());
        assertTrue(missing.getCause() instanceof GroupIdNotFoundException, missing.toString());
    }
}
