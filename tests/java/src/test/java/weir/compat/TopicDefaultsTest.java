package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConfigEntry.ConfigSource;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;

/**
 * A node's own topic defaults, from its flags and environment (Kafka's
 * server.properties): followed by every topic that does not set the config,
 * reported as STATIC_BROKER_CONFIG, outranked by the defaults set at run
 * time (the cluster-wide one, then the node's own), and followed anew when
 * the node starts with other flags.
 */
class TopicDefaultsTest {
    static ConfigEntry config(Admin admin, ConfigResource.Type type, String name, String key) throws Exception {
        var r = new ConfigResource(type, name);
        return admin.describeConfigs(List.of(r)).all().get().get(r).get(key);
    }

    static void assertTopic(Admin admin, String topic, String key, String value, ConfigSource source)
            throws Exception {
        ConfigEntry e = config(admin, ConfigResource.Type.TOPIC, topic, key);
        assertEquals(value, e.value(), topic + " " + key);
        assertEquals(source, e.source(), topic + " " + key);
    }

    static void alter(Admin admin, String broker, String key, String value) throws Exception {
        var r = new ConfigResource(ConfigResource.Type.BROKER, broker);
        var op = value == null
                ? new AlterConfigOp(new ConfigEntry(key, ""), AlterConfigOp.OpType.DELETE)
                : new AlterConfigOp(new ConfigEntry(key, value), AlterConfigOp.OpType.SET);
        admin.incrementalAlterConfigs(Map.of(r, List.of(op))).all().get();
    }

    @Test
    void aNodesFlagsSetTopicDefaultsBelowTheRunTimeOnes() throws Exception {
        try (WeirNode node = WeirNode.startWithEnv(Map.of("WEIR_DEFAULT_COMPRESSION_TYPE", "zstd"),
                "--default-retention-ms", "86400000", "--default-max-message-bytes", "20000");
                Admin admin = Admin.create(node.props())) {
            String id = String.valueOf(admin.describeCluster().nodes().get().iterator().next().id());
            admin.createTopics(List.of(new NewTopic("td-follows", 1, (short) 1),
                    new NewTopic("td-own", 1, (short) 1).configs(Map.of("retention.ms", "1000")))).all().get();

            assertTopic(admin, "td-follows", "retention.ms", "86400000", ConfigSource.STATIC_BROKER_CONFIG);
            assertTopic(admin, "td-follows", "compression.type", "zstd", ConfigSource.STATIC_BROKER_CONFIG);
            assertTopic(admin, "td-follows", "segment.ms", "604800000", ConfigSource.DEFAULT_CONFIG);
            assertTopic(admin, "td-own", "retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG);
            ConfigEntry nodeDefault = config(admin, ConfigResource.Type.BROKER, id, "log.retention.ms");
            assertEquals("86400000", nodeDefault.value());
            assertEquals(ConfigSource.STATIC_BROKER_CONFIG, nodeDefault.source());

            // The flag's max.message.bytes holds: a 30,000-byte record is
            // refused, a 10,000-byte one taken.
            try (var producer = new KafkaProducer<>(node.props("acks", "all", "retries", 0),
                    new ByteArraySerializer(), new ByteArraySerializer())) {
                producer.send(new ProducerRecord<>("td-follows", new byte[10_000])).get();
                var tooLarge = assertThrows(ExecutionException.class,
                        () -> producer.send(new ProducerRecord<>("td-follows", new byte[30_000])).get());
                assertInstanceOf(RecordTooLargeException.class, tooLarge.getCause());
            }

            // Set at run time: the cluster-wide default outranks the flag,
            // and the node's own outranks that.
            alter(admin, "", "log.retention.ms", "7200000");
            assertTopic(admin, "td-follows", "retention.ms", "7200000",
                    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG);
            alter(admin, id, "log.retention.ms", "3600000");
            assertTopic(admin, "td-follows", "retention.ms", "3600000", ConfigSource.DYNAMIC_BROKER_CONFIG);
            assertEquals(ConfigSource.DYNAMIC_BROKER_CONFIG,
                    config(admin, ConfigResource.Type.BROKER, id, "log.retention.ms").source());
            // Except the one the quorum's elections read: no one node's.
            var refused = assertThrows(ExecutionException.class,
                    () -> alter(admin, id, "unclean.leader.election.enable", "true"));
            assertInstanceOf(InvalidConfigurationException.class, refused.getCause());
            alter(admin, id, "log.retention.ms", null);
            assertTopic(admin, "td-follows", "retention.ms", "7200000",
                    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG);
            alter(admin, "", "log.retention.ms", null);
            assertTopic(admin, "td-follows", "retention.ms", "86400000", ConfigSource.STATIC_BROKER_CONFIG);
            assertTopic(admin, "td-own", "retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG);

            // Started again with other flags: the topics follow those.
            node.restartWith("--default-retention-ms", "172800000");
            assertTopic(admin, "td-follows", "retention.ms", "172800000", ConfigSource.STATIC_BROKER_CONFIG);
            assertTopic(admin, "td-follows", "max.message.bytes", "1048588", ConfigSource.DEFAULT_CONFIG);
            assertTopic(admin, "td-follows", "compression.type", "zstd", ConfigSource.STATIC_BROKER_CONFIG);
            assertTopic(admin, "td-own", "retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG);
            try (var producer = new KafkaProducer<>(node.props("acks", "all"),
                    new ByteArraySerializer(), new ByteArraySerializer())) {
                producer.send(new ProducerRecord<>("td-follows", new byte[30_000])).get();
            }
        }
    }
}
