package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;

/**
 * Client quotas: set, described and removed with kafka-configs.sh and the
 * Admin client, kept across a kill -9, and enforced: a producer and a
 * consumer held to 1 MiB/s move 1 MiB/s (± 15%) over 20 s, told so by
 * the throttle time in their answers.
 */
class QuotasTest extends OneNode {
    static final String CONFIGS = "kafka.admin.ConfigCommand";
    static final double MIB = 1024 * 1024;
    static final long MEASURED_MS = 20_000;

    static Map<ClientQuotaEntity, Map<String, Double>> quotas() throws Exception {
        return admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
    }

    static void setClientQuota(String clientId, String key, double value) throws Exception {
        var entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, clientId));
        admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity,
                List.of(new ClientQuotaAlteration.Op(key, value))))).all().get();
    }

    static void removeClientQuota(String clientId, String key) throws Exception {
        var entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, clientId));
        admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity,
                List.of(new ClientQuotaAlteration.Op(key, null))))).all().get();
    }

    /** The largest value a client metric of this name took (0 if none). */
    static double metricMax(Map<MetricName, ? extends Metric> metrics, String name) {
        return metrics.entrySet().stream().filter(e -> e.getKey().name().equals(name))
                .mapToDouble(e -> ((Number) e.getValue().metricValue()).doubleValue())
                .filter(v -> !Double.isNaN(v)).max().orElse(0);
    }

    @Test
    void kafkaConfigsSetsDescribesAndRemovesQuotasKeptAcrossACrash() throws Exception {
        String bootstrap = node.bootstrap();
        ClusterTest.tool(CONFIGS, "--bootstrap-server", bootstrap, "--alter",
                "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-name", "app",
                "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048");
        ClusterTest.tool(CONFIGS, "--bootstrap-server", bootstrap, "--alter",
                "--entity-type", "clients", "--entity-default", "--add-config", "request_percentage=50");
        ClusterTest.tool(CONFIGS, "--bootstrap-server", bootstrap, "--alter",
                "--entity-type", "users", "--entity-default", "--add-config", "producer_byte_rate=4096");

        String described = ClusterTest.tool(CONFIGS, "--bootstrap-server", bootstrap, "--describe",
                "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-name", "app");
        assertTrue(described.contains("producer_byte_rate=1024.0"), described);
        assertTrue(described.contains("consumer_byte_rate=2048.0"), described);
        String clients = ClusterTest.tool(CONFIGS, "--bootstrap-server", bootstrap, "--describe",
                "--entity-type", "clients", "--entity-default");
        assertTrue(clients.contains("request_percentage=50.0"), clients);

        var aliceApp = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, "alice", ClientQuotaEntity.CLIENT_ID, "app"));
        var defaultUser = new ClientQuotaEntity(java.util.Collections.singletonMap(ClientQuotaEntity.USER, null));
        assertEquals(Map.of("producer_byte_rate", 1024.0, "consumer_byte_rate", 2048.0), quotas().get(aliceApp));
        assertEquals(Map.of("producer_byte_rate", 4096.0), quotas().get(defaultUser));
        // Only the user entities: a filter on the user type.
        var users = admin.describeClientQuotas(ClientQuotaFilter.containsOnly(List.of(
                org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntityType(ClientQuotaEntity.USER))))
                .entities().get();
        assertEquals(java.util.Set.of(defaultUser), users.keySet());

        // Refused as Kafka refuses them, and ones weir does not enforce.
        var fractional = assertThrows(ExecutionException.class, () -> setClientQuota("app", "producer_byte_rate", 1.5));
        assertInstanceOf(InvalidRequestException.class, fractional.getCause());
        var unknown = assertThrows(ExecutionException.class, () -> setClientQuota("app", "bytes_per_fortnight", 1));
        assertTrue(unknown.getCause().getMessage().contains("Invalid configuration key"), unknown.getCause().getMessage());
        var mutations = assertThrows(ExecutionException.class,
                () -> setClientQuota("app", "controller_mutation_rate", 10));
        assertTrue(mutations.getCause().getMessage().contains("does not enforce"), mutations.getCause().getMessage());

        node.restart();
        try (Admin again = Admin.create(node.props())) {
            var kept = again.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
            assertEquals(Map.of("producer_byte_rate", 1024.0, "consumer_byte_rate", 2048.0), kept.get(aliceApp));
        }
        admin.close();
        admin = Admin.create(node.props());

        ClusterTest.tool(CONFIGS, "--bootstrap-server", bootstrap, "--alter",
                "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-name", "app",
                "--delete-config", "producer_byte_rate,consumer_byte_rate");
        ClusterTest.tool(CONFIGS, "--bootstrap-server", bootstrap, "--alter",
                "--entity-type", "clients", "--entity-default", "--delete-config", "request_percentage");
        ClusterTest.tool(CONFIGS, "--bootstrap-server", bootstrap, "--alter",
                "--entity-type", "users", "--entity-default", "--delete-config", "producer_byte_rate");
        assertEquals(Map.of(), quotas());
    }

    /**
     * Two producers of one client id share its limit, wherever their
     * connections land among the node's shards.
     */
    @Test
    void producersHeldToOneMibPerSecondMoveOneMibPerSecondTogether() throws Exception {
        admin.createTopics(List.of(new NewTopic("quota-in", 2, (short) 1))).all().get();
        setClientQuota("quota-producer", "producer_byte_rate", MIB);
        try {
            byte[] value = new byte[1024];
            AtomicLong firstAck = new AtomicLong();
            AtomicLong measured = new AtomicLong();
            long window = TimeUnit.MILLISECONDS.toNanos(MEASURED_MS);
            List<KafkaProducer<byte[], byte[]>> producers = new java.util.ArrayList<>();
            for (int i = 0; i < 2; i++) {
                producers.add(new KafkaProducer<>(node.props("client.id", "quota-producer", "acks", "all",
                        "buffer.memory", 65536, "max.block.ms", 60000),
                        new ByteArraySerializer(), new ByteArraySerializer()));
            }
            List<Thread> senders = new java.util.ArrayList<>();
            for (int i = 0; i < producers.size(); i++) {
                var producer = producers.get(i);
                int partition = i;
                Thread t = new Thread(() -> {
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
                    while (System.nanoTime() < deadline) {
                        long first = firstAck.get();
                        if (first != 0 && System.nanoTime() - first > window) {
                            return;
                        }
                        producer.send(new ProducerRecord<>("quota-in", partition, null, value), (meta, error) -> {
                            long now = System.nanoTime();
                            if (error == null && (firstAck.compareAndSet(0, now) || now - firstAck.get() <= window)) {
                                measured.addAndGet(value.length);
                            }
                        });
                    }
                });
                t.start();
                senders.add(t);
            }
            for (Thread t : senders) {
                t.join(TimeUnit.SECONDS.toMillis(120));
            }
            assertTrue(firstAck.get() != 0, "nothing acknowledged");
            for (var producer : producers) {
                assertTrue(metricMax(producer.metrics(), "produce-throttle-time-max") > 0,
                        "a producer was never told to wait");
                producer.close(Duration.ZERO);
            }
            double rate = measured.get() / (MEASURED_MS / 1000.0) / MIB;
            System.out.printf("two producers held to 1 MiB/s: %.3f MiB/s over %d ms%n", rate, MEASURED_MS);
            assertTrue(rate > 0.85 && rate < 1.15, "the producers moved " + rate + " MiB/s held to 1");
        } finally {
            removeClientQuota("quota-producer", "producer_byte_rate");
        }
    }

    @Test
    void aConsumerHeldToOneMibPerSecondMovesOneMibPerSecond() throws Exception {
        admin.createTopics(List.of(new NewTopic("quota-out", 1, (short) 1))).all().get();
        byte[] value = new byte[4096];
        long filled = 40 * (long) MIB;
        try (var producer = new KafkaProducer<byte[], byte[]>(node.props("client.id", "quota-filler",
                "linger.ms", 20, "batch.size", 262144), new ByteArraySerializer(), new ByteArraySerializer())) {
            for (long sent = 0; sent < filled; sent += value.length) {
                producer.send(new ProducerRecord<>("quota-out", value));
            }
            producer.flush();
        }
        setClientQuota("quota-consumer", "consumer_byte_rate", MIB);
        long measured = 0;
        try {
            try (var consumer = new KafkaConsumer<byte[], byte[]>(node.props("client.id", "quota-consumer"),
                    new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                var tp = new TopicPartition("quota-out", 0);
                consumer.assign(List.of(tp));
                consumer.seekToBeginning(List.of(tp));
                long first = 0;
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
                while (System.nanoTime() < deadline) {
                    var records = consumer.poll(Duration.ofMillis(200));
                    long now = System.nanoTime();
                    if (first == 0 && !records.isEmpty()) {
                        first = now;
                    }
                    if (first != 0 && now - first > TimeUnit.MILLISECONDS.toNanos(MEASURED_MS)) {
                        break;
                    }
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        measured += r.value().length;
                    }
                }
                assertTrue(first != 0, "nothing consumed");
                assertFalse(measured >= filled, "the consumer read all it could: the quota was not reached");
                assertTrue(metricMax(consumer.metrics(), "fetch-throttle-time-max") > 0,
                        "the consumer was never told to wait");
            }
        } finally {
            removeClientQuota("quota-consumer", "consumer_byte_rate");
        }
        double rate = measured / (MEASURED_MS / 1000.0) / MIB;
        System.out.printf("consumer held to 1 MiB/s: %.3f MiB/s over %d ms%n", rate, MEASURED_MS);
        assertTrue(rate > 0.85 && rate < 1.15, "the consumer moved " + rate + " MiB/s held to 1");
    }

    @Test
    void aClientHeldToAShareOfACoreIsThrottledAndServed() throws Exception {
        admin.createTopics(List.of(new NewTopic("quota-time", 1, (short) 1))).all().get();
        setClientQuota("quota-busy", "request_percentage", 0.1);
        int sent = 0;
        try {
            try (var producer = new KafkaProducer<byte[], byte[]>(node.props("client.id", "quota-busy",
                    "linger.ms", 0, "acks", "all"), new ByteArraySerializer(), new ByteArraySerializer())) {
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                while (metricMax(producer.metrics(), "produce-throttle-time-max") == 0 && System.nanoTime() < deadline) {
                    producer.send(new ProducerRecord<>("quota-time", new byte[16])).get(30, TimeUnit.SECONDS);
                    sent++;
                }
                assertTrue(metricMax(producer.metrics(), "produce-throttle-time-max") > 0,
                        "a producer past 0.1% of a core was never told to wait (" + sent + " records sent)");
                // Held back, and still served.
                producer.send(new ProducerRecord<>("quota-time", new byte[16])).get(30, TimeUnit.SECONDS);
                sent++;
            }
        } finally {
            removeClientQuota("quota-busy", "request_percentage");
        }
        var tp = new TopicPartition("quota-time", 0);
        assertEquals(sent, admin.listOffsets(Map.of(tp, org.apache.kafka.clients.admin.OffsetSpec.latest()))
                .all().get().get(tp).offset(), "every record was kept");
    }
}
