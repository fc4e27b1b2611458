package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.TopicPartitionInfo;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Growing and shrinking a cluster with Kafka's own tools while a producer
 * and a committing group run: a fourth node joins, a third of a topic's
 * replicas move to it with `kafka-reassign-partitions.sh` under a
 * throttle, then node 1 is unregistered with `kafka-cluster.sh`, which
 * drains its replicas first. Every acknowledged record is read back
 * afterwards, at its offset.
 */
class ReassignTest {
    static final List<WeirNode> nodes = new ArrayList<>();
    static int firstPeerPort;

    @BeforeAll
    static void startCluster() throws Exception {
        List<String> voters = new ArrayList<>();
        for (int i = 1; i <= 3; i++) {
            int port = WeirNode.freePort();
            if (i == 1) {
                firstPeerPort = port;
            }
            voters.add(i + "@127.0.0.1:" + port);
        }
        for (int i = 1; i <= 3; i++) {
            nodes.add(WeirNode.startWithCores(1, "--node-id", Integer.toString(i),
                    "--voters", String.join(",", voters), "--cpus", "none"));
        }
        awaitBrokers(nodes.get(0), 3);
    }

    @AfterAll
    static void stopCluster() throws Exception {
        for (WeirNode n : nodes) {
            n.close();
        }
    }

    static void awaitBrokers(WeirNode n, int count) throws Exception {
        try (Admin admin = Admin.create(n.props())) {
            Wait.until(() -> {
                try {
                    var c = admin.describeCluster();
                    return c.nodes().get().size() == count && c.controller().get().id() > 0;
                } catch (Exception e) {
                    return false;
                }
            }, Duration.ofSeconds(30), n.bootstrap() + " names " + count + " brokers and a controller");
        }
    }

    static TopicDescription describe(Admin admin, String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
    }

    static List<Integer> ids(List<Node> nodes) {
        return nodes.stream().map(Node::id).collect(Collectors.toList());
    }

    /** A producer of acks=all records sent as fast as they are acknowledged. */
    static final class LiveProducer implements AutoCloseable {
        final Map<TopicPartition, Map<Long, String>> acked = new ConcurrentHashMap<>();
        final List<Exception> failed = Collections.synchronizedList(new ArrayList<>());
        final AtomicLong retriable = new AtomicLong();
        final AtomicBoolean stop = new AtomicBoolean();
        final Thread thread;

        LiveProducer(WeirNode via, String topic) {
            var pp = via.props("acks", "all", "enable.idempotence", "true", "linger.ms", "5");
            pp.put("key.serializer", StringSerializer.class.getName());
            pp.put("value.serializer", StringSerializer.class.getName());
            thread = new Thread(() -> {
                try (var producer = new KafkaProducer<String, String>(pp)) {
                    for (long i = 0; !stop.get(); i++) {
                        String v = "live-" + i;
                        producer.send(new ProducerRecord<>(topic, v, v), (md, e) -> {
                            if (e == null) {
                                acked.computeIfAbsent(new TopicPartition(md.topic(), md.partition()),
                                        k -> new ConcurrentHashMap<>()).put(md.offset(), v);
                            } else if (e instanceof RetriableException) {
                                retriable.incrementAndGet();
                            } else {
                                failed.add(e);
                            }
                        });
                        if (i % 200 == 199) {
                            producer.flush();
                        }
                    }
                    producer.flush();
                }
            }, "live-producer");
            thread.start();
        }

        long count() {
            return acked.values().stream().mapToLong(Map::size).sum();
        }

        @Override
        public void close() throws Exception {
            stop.set(true);
            thread.join(120_000);
        }
    }

    /** A group member committing after every poll. */
    static final class CommittingGroup implements AutoCloseable {
        final AtomicBoolean stop = new AtomicBoolean();
        final AtomicLong read = new AtomicLong();
        final AtomicReference<Exception> failed = new AtomicReference<>();
        final Thread thread;

        CommittingGroup(WeirNode via, String topic, String group) {
            var cp = via.props("group.id", group, "auto.offset.reset", "earliest",
                    "enable.auto.commit", "false");
            cp.put("key.deserializer", StringDeserializer.class.getName());
            cp.put("value.deserializer", StringDeserializer.class.getName());
            thread = new Thread(() -> {
                try (var consumer = new KafkaConsumer<String, String>(cp)) {
                    consumer.subscribe(List.of(topic));
                    while (!stop.get()) {
                        var records = consumer.poll(Duration.ofMillis(200));
                        read.addAndGet(records.count());
                        if (!records.isEmpty()) {
                            try {
                                consumer.commitSync(Duration.ofSeconds(30));
                            } catch (RetriableException e) {
                                // Committed again after the next poll.
                            }
                        }
                    }
                } catch (Exception e) {
                    failed.set(e);
                }
            }, "committing-group");
            thread.start();
        }

        @Override
        public void close() throws Exception {
            stop.set(true);
            thread.join(60_000);
        }
    }

    @Test
    void aClusterGrowsMovesReplicasAndDrainsANodeWithKafkasToolsUnderLoad() throws Exception {
        String topic = "moving";
        String reassign = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand";
        WeirNode two = nodes.get(1);
        try (Admin admin = Admin.create(two.props())) {
            admin.createTopics(List.of(new NewTopic(topic, 6, (short) 3))).all().get();
            Wait.until(() -> {
                try {
                    return describe(admin, topic).partitions().stream()
                            .allMatch(p -> p.isr().size() == 3 && p.leader() != null);
                } catch (Exception e) {
                    return false;
                }
            }, Duration.ofSeconds(30), "three replicas in sync for each partition");
        }
        // Data to move: about 3 MB per partition.
        var pp = two.props("acks", "all", "linger.ms", "20", "batch.size", "262144");
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        Map<TopicPartition, Map<Long, String>> preloaded = new HashMap<>();
        String pad = "x".repeat(1000);
        try (var producer = new KafkaProducer<String, String>(pp)) {
            List<java.util.concurrent.Future<org.apache.kafka.clients.producer.RecordMetadata>> sent =
                    new ArrayList<>();
            List<String> values = new ArrayList<>();
            for (int i = 0; i < 18_000; i++) {
                String v = "pre-" + i + "-" + pad;
                values.add(v);
                sent.add(producer.send(new ProducerRecord<>(topic, Integer.toString(i), v)));
            }
            for (int i = 0; i < sent.size(); i++) {
                var md = sent.get(i).get();
                preloaded.computeIfAbsent(new TopicPartition(topic, md.partition()), k -> new HashMap<>())
                        .put(md.offset(), values.get(i));
            }
        }

        try (var producer = new LiveProducer(nodes.get(2), topic);
                var group = new CommittingGroup(nodes.get(0), topic, "movers");
                Admin admin = Admin.create(two.props())) {
            Wait.until(() -> producer.count() > 500 && group.read.get() > 1000, Duration.ofSeconds(60),
                    "the producer acknowledged and the group read");

            // Grow: a fourth node joins through node 1.
            WeirNode four = WeirNode.startWithCores(1, "--node-id", "4", "--join",
                    "127.0.0.1:" + firstPeerPort, "--peer-addr", "127.0.0.1:" + WeirNode.freePort(),
                    "--cpus", "none");
            nodes.add(four);
            awaitBrokers(two, 4);

            Path dir = Files.createTempDirectory("reassign");
            Path toMove = dir.resolve("topics.json");
            Files.writeString(toMove, "{\"version\":1,\"topics\":[{\"topic\":\"" + topic + "\"}]}");
            String generated = ClusterTest.tool(reassign, "--bootstrap-server", two.bootstrap(),
                    "--topics-to-move-json-file", toMove.toString(), "--broker-list", "1,2,3,4", "--generate");
            assertTrue(generated.contains("Current partition replica assignment")
                    && generated.contains("Proposed partition reassignment configuration"), generated);

            // A third of the replicas (one of each partition's three, the
            // leader of two of them) move to node 4.
            Map<Integer, List<Integer>> target = new HashMap<>();
            StringBuilder plan = new StringBuilder("{\"version\":1,\"partitions\":[");
            for (TopicPartitionInfo p : describe(admin, topic).partitions()) {
                List<Integer> replicas = new ArrayList<>(ids(p.replicas()));
                replicas.set(p.partition() % 3, 4);
                target.put(p.partition(), replicas);
                if (p.partition() > 0) {
                    plan.append(',');
                }
                plan.append("{\"topic\":\"").append(topic).append("\",\"partition\":").append(p.partition())
                        .append(",\"replicas\":").append(replicas).append('}');
            }
            plan.append("]}");
            Path planFile = dir.resolve("plan.json");
            Files.writeString(planFile, plan.toString());
            long throttle = 4_000_000;
            long started = System.nanoTime();
            String executed = ClusterTest.tool(reassign, "--bootstrap-server", two.bootstrap(),
                    "--reassignment-json-file", planFile.toString(), "--execute", "--throttle",
                    Long.toString(throttle));
            assertTrue(executed.contains("Successfully started partition reassignments"), executed);
            try (Admin onFour = Admin.create(four.props())) {
                var rate = onFour.describeConfigs(List.of(new org.apache.kafka.common.config.ConfigResource(
                        org.apache.kafka.common.config.ConfigResource.Type.BROKER, "4"))).all().get();
                assertTrue(rate.values().iterator().next().entries().stream().anyMatch(
                        e -> e.name().equals("follower.replication.throttled.rate")
                                && e.value().equals(Long.toString(throttle))), rate.toString());
            }
            AtomicReference<String> verified = new AtomicReference<>("");
            Wait.until(() -> {
                try {
                    String out = ClusterTest.tool(reassign, "--bootstrap-server", two.bootstrap(),
                            "--reassignment-json-file", planFile.toString(), "--verify");
                    verified.set(out);
                    return !out.contains("still in progress");
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            }, Duration.ofSeconds(180), "the moves complete");
            double seconds = (System.nanoTime() - started) / 1e9;
            String out = verified.get();
            assertTrue(out.contains("Clearing broker-level throttles"), out);
            for (int p = 0; p < 6; p++) {
                assertTrue(out.contains("Reassignment of partition " + topic + "-" + p + " is completed"), out);
            }
            // What node 4 copied, against the throttle.
            long copied = admin.describeLogDirs(List.of(4)).allDescriptions().get().get(4).values().stream()
                    .flatMap(d -> d.replicaInfos().entrySet().stream())
                    .filter(e -> e.getKey().topic().equals(topic))
                    .mapToLong(e -> e.getValue().size()).sum();
            double mbps = copied / seconds / 1e6;
            System.out.printf("reassignment: %.1f MB moved to node 4 in %.1f s: %.2f MB/s against a throttle of %.2f MB/s%n",
                    copied / 1e6, seconds, mbps, throttle / 1e6);
            assertTrue(copied > 12_000_000, "node 4 holds the moved partitions: " + copied + " bytes");
            // The throttle held: a second's burst at most beyond the rate.
            assertTrue(copied <= throttle * (seconds + 1) * 1.2,
                    String.format("%.2f MB/s moved against a throttle of %.2f MB/s", mbps, throttle / 1e6));
            Wait.until(() -> {
                try {
                    return describe(admin, topic).partitions().stream().allMatch(p ->
                            ids(p.replicas()).equals(target.get(p.partition()))
                                    && p.isr().size() == 3 && p.leader() != null);
                } catch (Exception e) {
                    return false;
                }
            }, Duration.ofSeconds(30), "every partition on its target replicas, all in sync");
            assertTrue(admin.listPartitionReassignments().reassignments().get().isEmpty());
            var configs = admin.describeConfigs(List.of(new org.apache.kafka.common.config.ConfigResource(
                    org.apache.kafka.common.config.ConfigResource.Type.BROKER, "4"))).all().get();
            // (A node's configs list its settings and topic defaults too.)
            var throttles = configs.values().iterator().next().entries().stream()
                    .filter(e -> e.name().endsWith(".throttled.rate")
                            || e.name().equals("replica.alter.log.dirs.io.max.bytes.per.second"))
                    .toList();
            assertEquals(List.of(), throttles, "--verify cleared the throttle");

            // Shrink: node 1 is drained, then unregistered.
            long before = producer.count();
            String unregistered = ClusterTest.tool("org.apache.kafka.tools.ClusterTool",
                    "unregister", "--bootstrap-server", two.bootstrap(), "--id", "1");
            assertTrue(unregistered.contains("Broker 1 is no longer registered"), unregistered);
            // Answered once node 2 has the outcome; every node tells it
            // within moments (node 1, still running, no longer names
            // itself).
            for (WeirNode n : nodes) {
                try (Admin via = Admin.create(n.props())) {
                    Wait.until(() -> {
                        try {
                            return via.describeCluster().nodes().get().stream().map(Node::id)
                                    .collect(Collectors.toSet()).equals(Set.of(2, 3, 4));
                        } catch (Exception e) {
                            return false;
                        }
                    }, Duration.ofSeconds(10), n.bootstrap() + " names brokers 2, 3 and 4");
                }
            }
            for (String t : List.of(topic, "__weir_groups")) {
                for (TopicPartitionInfo p : describe(admin, t).partitions()) {
                    assertFalse(ids(p.replicas()).contains(1), t + "-" + p.partition() + ": " + p);
                    assertEquals(3, p.replicas().size(), t + "-" + p.partition() + ": " + p);
                }
            }
            Wait.until(() -> producer.count() > before + 1000, Duration.ofSeconds(60),
                    "acknowledgements go on after node 1 left");
            producer.close();
            group.close();
            assertEquals(List.of(), producer.failed, "records the producer failed to deliver");
            assertEquals(null, group.failed.get(), "the group member's failure");
            System.out.printf("under load: %d records acknowledged (%d retriable errors), %d read by the group%n",
                    producer.count(), producer.retriable.get(), group.read.get());

            // Every acknowledged record, at its offset, through node 4.
            Map<TopicPartition, Map<Long, String>> acked = new HashMap<>(preloaded);
            producer.acked.forEach((tp, m) -> acked.computeIfAbsent(tp, k -> new HashMap<>()).putAll(m));
            var cp = four.props("auto.offset.reset", "earliest", "max.partition.fetch.bytes", "4194304");
            cp.put("key.deserializer", StringDeserializer.class.getName());
            cp.put("value.deserializer", StringDeserializer.class.getName());
            Map<TopicPartition, Map<Long, String>> found = new HashMap<>();
            try (var reader = new KafkaConsumer<String, String>(cp)) {
                List<TopicPartition> parts = new ArrayList<>(acked.keySet());
                reader.assign(parts);
                reader.seekToBeginning(parts);
                Map<TopicPartition, Long> ends = reader.endOffsets(parts);
                Wait.polling(List.of(reader), () -> parts.stream().allMatch(
                        tp -> reader.position(tp) >= ends.get(tp)), "every partition read to its end",
                        r -> found.computeIfAbsent(new TopicPartition(r.topic(), r.partition()),
                                k -> new HashMap<>()).put(r.offset(), r.value()));
                var committed = admin.listConsumerGroupOffsets("movers").partitionsToOffsetAndMetadata().get();
                for (TopicPartition tp : parts) {
                    OffsetAndMetadata c = committed.get(tp);
                    assertTrue(c != null && c.offset() > 0 && c.offset() <= ends.get(tp),
                            "the group committed " + tp + ": " + c);
                }
            }
            long checked = 0;
            for (var e : acked.entrySet()) {
                for (var r : e.getValue().entrySet()) {
                    assertEquals(r.getValue(), found.getOrDefault(e.getKey(), Map.of()).get(r.getKey()),
                            "acknowledged record " + e.getKey() + "@" + r.getKey());
                    checked++;
                }
            }
            System.out.printf("every one of %d acknowledged records read back at its offset%n", checked);
        }
    }
}
