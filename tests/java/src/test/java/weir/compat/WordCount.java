package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams' word count: a repartition topic, a state store with its
 * compacted changelog topic, and output counts, at least once or exactly
 * once (transactions, read_committed), through `node`.
 */
final class WordCount {
    private WordCount() {}

    static void run(WeirNode node, Admin admin, String guarantee, int partitions, String app)
            throws Exception {
        String in = app + "-in";
        String out = app + "-out";
        admin.createTopics(List.of(new NewTopic(in, partitions, (short) 1),
                        new NewTopic(out, partitions, (short) 1)))
                .all().get();

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(in)
                .flatMapValues(line -> Arrays.asList(line.toLowerCase().split("\\W+")))
                .groupBy((key, word) -> word)
                .count(Materialized.as("counts"))
                .toStream()
                .to(out, Produced.with(Serdes.String(), Serdes.Long()));
        Path state = Files.createTempDirectory("weir-streams-");
        Properties props = node.props(
                StreamsConfig.APPLICATION_ID_CONFIG, app,
                StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee,
                StreamsConfig.STATE_DIR_CONFIG, state.toString(),
                StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "100",
                StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName(),
                StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        Map<String, Long> expected = new HashMap<>();
        try (KafkaStreams streams = new KafkaStreams(builder.build(), props)) {
            streams.start();
            Wait.until(() -> streams.state() == KafkaStreams.State.RUNNING, Duration.ofSeconds(60),
                    "the application runs (state " + streams.state() + ")");

            String[] words = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"};
            Random random = new Random(42);
            var pp = node.props("key.serializer", StringSerializer.class.getName(),
                    "value.serializer", StringSerializer.class.getName());
            try (var p = new KafkaProducer<String, String>(pp)) {
                for (int i = 0; i < 200; i++) {
                    StringBuilder line = new StringBuilder();
                    for (int w = 0; w < 5; w++) {
                        String word = words[random.nextInt(words.length)];
                        expected.merge(word, 1L, Long::sum);
                        line.append(word).append(w % 2 == 0 ? " " : ", ");
                    }
                    p.send(new ProducerRecord<>(in, "line-" + i, line.toString()));
                }
                p.flush();
            }

            // The latest count of each word, as a read_committed reader
            // sees it: every count is the final one only once every line
            // was processed (and, exactly once, committed).
            Map<String, Long> latest = new HashMap<>();
            var cp = node.props("group.id", app + "-reader", "auto.offset.reset", "earliest",
                    "isolation.level", "read_committed",
                    "key.deserializer", StringDeserializer.class.getName(),
                    "value.deserializer", LongDeserializer.class.getName());
            try (var c = new KafkaConsumer<String, Long>(cp)) {
                c.subscribe(List.of(out));
                long deadline = System.nanoTime() + Duration.ofSeconds(90).toNanos();
                while (!latest.equals(expected) && System.nanoTime() < deadline) {
                    c.poll(Duration.ofMillis(200)).forEach(r -> latest.put(r.key(), r.value()));
                }
            }
            assertEquals(expected, latest, "streams log:\n" + node.log());
        }

        // The internal topics Streams made: a repartition topic and the
        // store's changelog, compacted.
        Set<String> internal = admin.listTopics().names().get().stream()
                .filter(t -> t.startsWith(app + "-")).collect(Collectors.toSet());
        String changelog = app + "-counts-changelog";
        assertTrue(internal.contains(changelog), internal.toString());
        assertTrue(internal.stream().anyMatch(t -> t.endsWith("-repartition")), internal.toString());
        var resource = new ConfigResource(ConfigResource.Type.TOPIC, changelog);
        assertEquals("compact", admin.describeConfigs(List.of(resource)).all().get()
                .get(resource).get("cleanup.policy").value());
    }
}
