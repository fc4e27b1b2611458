package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;

/**
 * MirrorMaker 2 (Kafka's own, in dedicated mode: Connect's mirror
 * connectors) between an Apache Kafka 4.1.2 broker and weir, both ways:
 * a topic's records, its configs and a group's committed offsets copied
 * from Kafka into weir, and from weir into Kafka.
 */
class MirrorMakerTest {
    static final long DEADLINE_S = 120;

    static void produce(Properties props, String topic, int count) throws Exception {
        try (var producer = new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, "k" + i, topic + " " + i));
            }
            producer.flush();
        }
    }

    /** Every value in `topic` read from its start, waiting for `count`. */
    static List<String> readAll(Properties props, String topic, int count) {
        var got = new ArrayList<String>();
        try (var consumer = new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            var tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (got.size() < count && System.nanoTime() < deadline) {
                consumer.poll(Duration.ofMillis(200)).forEach(r -> got.add(r.value()));
            }
        }
        return got;
    }

    /** Waits for `check` to hold, asking again every half second. */
    static void await(String what, java.util.concurrent.Callable<Boolean> check, Process mm2, Path log)
            throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(DEADLINE_S);
        while (true) {
            try {
                if (check.call()) {
                    return;
                }
            } catch (Exception notYet) {
                // Not there yet (an unknown topic or group).
            }
            if (!mm2.isAlive() || System.nanoTime() > deadline) {
                List<String> lines = Files.readAllLines(log);
                throw new AssertionError(what + " within " + DEADLINE_S + " s; MirrorMaker's log ends:\n"
                        + String.join("\n", lines.subList(Math.max(0, lines.size() - 60), lines.size())));
            }
            Thread.sleep(500);
        }
    }

    /**
     * Waits until `remote` (a topic copied by MirrorMaker) holds `count`
     * records in order, its `retention.ms` and `group`'s offset at its end.
     */
    static void awaitMirrored(Properties to, Admin toAdmin, String remote, int count, String retention,
            String group, Process mm2, Path log) throws Exception {
        String source = remote.substring(remote.indexOf('.') + 1);
        await(remote + " with " + count + " records", () -> readAll(to, remote, count).size() == count, mm2, log);
        var copied = readAll(to, remote, count);
        assertEquals(source + " 0", copied.get(0));
        assertEquals(source + " " + (count - 1), copied.get(count - 1));
        var resource = new ConfigResource(ConfigResource.Type.TOPIC, remote);
        await(remote + "'s retention.ms", () -> retention.equals(toAdmin.describeConfigs(List.of(resource))
                .all().get().get(resource).get("retention.ms").value()), mm2, log);
        var tp = new TopicPartition(remote, 0);
        await(group + "'s offset of " + remote, () -> {
            var offsets = toAdmin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            return offsets.containsKey(tp) && offsets.get(tp).offset() == count;
        }, mm2, log);
    }

    @Test
    void topicsConfigsAndGroupOffsetsCopyFromKafkaIntoWeirAndBack() throws Exception {
        try (ApacheKafka kafka = ApacheKafka.start(); WeirNode weir = WeirNode.start();
                Admin kafkaAdmin = Admin.create(kafka.props()); Admin weirAdmin = Admin.create(weir.props())) {
            kafkaAdmin.createTopics(List.of(new NewTopic("mm-orders", 1, (short) 1)
                    .configs(Map.of("retention.ms", "123456789", "cleanup.policy", "delete")))).all().get();
            produce(kafka.props(), "mm-orders", 100);
            var upstream = new TopicPartition("mm-orders", 0);
            // A group that read all 100 records: MirrorMaker translates an
            // offset exactly where it has an offset sync (the end here), and
            // conservatively (never past the records read) between them.
            kafkaAdmin.alterConsumerGroupOffsets("mm-readers", Map.of(upstream, new OffsetAndMetadata(100))).all().get();
            weirAdmin.createTopics(List.of(new NewTopic("back-events", 1, (short) 1)
                    .configs(Map.of("retention.ms", "7654321")))).all().get();
            produce(weir.props(), "back-events", 50);
            weirAdmin.alterConsumerGroupOffsets("back-readers",
                    Map.of(new TopicPartition("back-events", 0), new OffsetAndMetadata(50))).all().get();

            Path dir = Files.createTempDirectory("mm2");
            Path config = dir.resolve("mm2.properties");
            Files.writeString(config, String.join("\n",
                    "clusters=kafka,weir",
                    "kafka.bootstrap.servers=" + kafka.bootstrap(),
                    "weir.bootstrap.servers=" + weir.bootstrap(),
                    "kafka->weir.enabled=true",
                    "kafka->weir.topics=mm-.*",
                    "kafka->weir.groups=mm-.*",
                    "weir->kafka.enabled=true",
                    "weir->kafka.topics=back-.*",
                    "weir->kafka.groups=back-.*",
                    "sync.group.offsets.enabled=true",
                    "sync.group.offsets.interval.seconds=1",
                    "emit.checkpoints.interval.seconds=1",
                    "sync.topic.configs.interval.seconds=1",
                    "refresh.topics.interval.seconds=1",
                    "refresh.groups.interval.seconds=1",
                    "offset.lag.max=0",
                    "replication.factor=1",
                    "checkpoints.topic.replication.factor=1",
                    "heartbeats.topic.replication.factor=1",
                    "offset-syncs.topic.replication.factor=1",
                    "offset.storage.replication.factor=1",
                    "status.storage.replication.factor=1",
                    "config.storage.replication.factor=1", ""));
            Path log = dir.resolve("mm2.log");
            Process mm2 = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    "-Xmx512m", "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.connect.mirror=info",
                    "-cp", System.getProperty("java.class.path"),
                    "org.apache.kafka.connect.mirror.MirrorMaker", config.toString())
                    .redirectErrorStream(true).redirectOutput(log.toFile()).start();
            try {
                // Kafka into weir, and back, under MirrorMaker's prefixes.
                awaitMirrored(weir.props(), weirAdmin, "kafka.mm-orders", 100, "123456789", "mm-readers", mm2, log);
                awaitMirrored(kafka.props(), kafkaAdmin, "weir.back-events", 50, "7654321", "back-readers", mm2,
                        log);
                assertTrue(mm2.isAlive(), "MirrorMaker still runs");
            } finally {
                mm2.destroyForcibly();
                mm2.waitFor(30, TimeUnit.SECONDS);
                try (var files = Files.walk(dir)) {
                    files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
                }
            }
        }
    }
}
