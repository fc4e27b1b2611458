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
                // Kafka into weir: the records, the topic's configs and the
                // group's offset, under MirrorMaker's `kafka.` prefix.
                await("kafka.mm-orders on weir with 100 records",
                        () -> readAll(weir.props(), "kafka.mm-orders", 100).size() == 100, mm2, log);
                var copied = readAll(weir.props(), "kafka.mm-orders", 100);
                assertEquals("mm-orders 0", copied.get(0));
                assertEquals("mm-orders 99", copied.get(99));
                var resource = new ConfigResource(ConfigResource.Type.TOPIC, "kafka.mm-orders");
                await("kafka.mm-orders' retention.ms on weir", () -> "123456789".equals(weirAdmin
                        .describeConfigs(List.of(resource)).all().get().get(resource).get("retention.ms").value()),
                        mm2, log);
                var downstream = new TopicPartition("kafka.mm-orders", 0);
                await("mm-readers' offset on weir", () -> {
                    var offsets = weirAdmin.listConsumerGroupOffsets("mm-readers")
                            .partitionsToOffsetAndMetadata().get();
                    return offsets.containsKey(downstream) && offsets.get(downstream).offset() == 100;
                }, mm2, log);

                // weir into Kafka.
                await("weir.back-events on Kafka with 50 records",
                        () -> readAll(kafka.props(), "weir.back-events", 50).size() == 50, mm2, log);
                var back = readAll(kafka.props(), "weir.back-events", 50);
                assertEquals("back-events 0", back.get(0));
                assertEquals("back-events 49", back.get(49));
                var backResource = new ConfigResource(ConfigResource.Type.TOPIC, "weir.back-events");
                await("weir.back-events' retention.ms on Kafka", () -> "7654321".equals(kafkaAdmin
                        .describeConfigs(List.of(backResource)).all().get().get(backResource)
                        .get("retention.ms").value()), mm2, log);
                var backDownstream = new TopicPartition("weir.back-events", 0);
                await("back-readers' offset on Kafka", () -> {
                    var offsets = kafkaAdmin.listConsumerGroupOffsets("back-readers")
                            .partitionsToOffsetAndMetadata().get();
                    return offsets.containsKey(backDownstream) && offsets.get(backDownstream).offset() == 50;
                }, mm2, log);
                assertTrue(mm2.isAlive(), "MirrorMaker still runs");
            } finally {
                mm2.destroyForcibly();
                mm2.waitFor(30, TimeUnit.SECONDS);
            }
        }
    }
}
