package weir.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The idempotent Java producer with each codec, keys and headers. */
class ProducerTest {
    static WeirNode node;

    @BeforeAll
    static void start() throws Exception {
        node = WeirNode.start();
    }

    @AfterAll
    static void stop() throws Exception {
        node.close();
    }

    @ParameterizedTest
    @ValueSource(strings = {"none", "gzip", "snappy", "lz4", "zstd"})
    void everyCodecKeepsKeysValuesAndHeaders(String codec) throws Exception {
        String topic = "codec-" + codec;
        try (Admin admin = Admin.create(node.props())) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
        }
        Properties pp = node.props("enable.idempotence", "true", "acks", "all",
                "compression.type", codec, "linger.ms", "20",
                "key.serializer", ByteArraySerializer.class.getName(),
                "value.serializer", ByteArraySerializer.class.getName());
        List<ProducerRecord<byte[], byte[]>> sent = new ArrayList<>();
        try (var p = new KafkaProducer<byte[], byte[]>(pp)) {
            List<java.util.concurrent.Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < 500; i++) {
                List<Header> headers = List.of(
                        new RecordHeader("trace", ("t-" + i).getBytes(StandardCharsets.UTF_8)),
                        new RecordHeader("trace", new byte[] {0, (byte) 0xff, (byte) i}),
                        new RecordHeader("empty", null));
                // A repetitive value, so every codec has something to do.
                byte[] value = ("value " + i + " ").repeat(20).getBytes(StandardCharsets.UTF_8);
                var r = new ProducerRecord<>(topic, i % 2, ("k" + i).getBytes(StandardCharsets.UTF_8),
                        value, headers);
                sent.add(r);
                acks.add(p.send(r));
            }
            p.flush();
            for (int i = 0; i < acks.size(); i++) {
                // Offsets dense per partition, in the order sent.
                assertEquals(i / 2, acks.get(i).get().offset());
            }
        }
        Properties cp = node.props("key.deserializer", ByteArrayDeserializer.class.getName(),
                "value.deserializer", ByteArrayDeserializer.class.getName());
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        try (var c = new KafkaConsumer<byte[], byte[]>(cp)) {
            var parts = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
            c.assign(parts);
            c.seekToBeginning(parts);
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (got.size() < sent.size() && System.nanoTime() < deadline) {
                c.poll(Duration.ofMillis(200)).forEach(got::add);
            }
        }
        assertEquals(sent.size(), got.size());
        for (var r : got) {
            int i = (int) (r.offset() * 2 + r.partition());
            var s = sent.get(i);
            assertArrayEquals(s.key(), r.key());
            assertArrayEquals(s.value(), r.value());
            Header[] want = s.headers().toArray();
            Header[] have = r.headers().toArray();
            assertEquals(want.length, have.length);
            for (int h = 0; h < want.length; h++) {
                assertEquals(want[h].key(), have[h].key());
                assertArrayEquals(want[h].value(), have[h].value());
            }
        }
    }
}
