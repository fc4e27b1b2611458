package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.junit.jupiter.api.Test;

/**
 * A node's configs under Kafka's names, through kafka-configs.sh: its
 * settings described, and the topic config defaults (log.retention.ms,
 * compression.type, …) changed at run time on the cluster-wide default
 * resource, followed by every topic that does not set its own.
 */
class NodeConfigsTest extends OneNode {
    static final String CONFIGS = "kafka.admin.ConfigCommand";

    static ConfigEntry topicConfig(String topic, String name) throws Exception {
        var r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        return admin.describeConfigs(List.of(r)).all().get().get(r).get(name);
    }

    @Test
    void topicDefaultsChangeAtRunTimeForEveryTopicThatFollowsThem() throws Exception {
        String id = String.valueOf(admin.describeCluster().nodes().get().iterator().next().id());
        String described = ClusterTest.tool(CONFIGS, "--bootstrap-server", node.bootstrap(),
                "--describe", "--entity-type", "brokers", "--entity-name", id, "--all");
        for (String line : List.of("log.retention.ms=604800000", "num.partitions=", "message.max.bytes=1048588",
                "min.insync.replicas=2", "log.cleanup.policy=delete", "auto.create.topics.enable=")) {
            assertTrue(described.contains(line), line + " in:\n" + described);
        }

        admin.createTopics(List.of(new NewTopic("nc-follows", 1, (short) 1),
                new NewTopic("nc-own", 1, (short) 1).configs(Map.of("retention.ms", "1000")))).all().get();
        ClusterTest.tool(CONFIGS, "--bootstrap-server", node.bootstrap(), "--alter", "--entity-type", "brokers",
                "--entity-default", "--add-config", "log.retention.ms=3600000,compression.type=zstd");
        String defaults = ClusterTest.tool(CONFIGS, "--bootstrap-server", node.bootstrap(),
                "--describe", "--entity-type", "brokers", "--entity-default");
        assertTrue(defaults.contains("log.retention.ms=3600000"), defaults);

        ConfigEntry follows = topicConfig("nc-follows", "retention.ms");
        assertEquals("3600000", follows.value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, follows.source());
        assertEquals("zstd", topicConfig("nc-follows", "compression.type").value());
        assertEquals("1000", topicConfig("nc-own", "retention.ms").value(), "a topic's own config stays");
        admin.createTopics(List.of(new NewTopic("nc-later", 1, (short) 1))).all().get();
        assertEquals("3600000", topicConfig("nc-later", "retention.ms").value(), "a new topic takes the default");

        // A bad value is refused as the topic config refuses it.
        var bad = new ConfigResource(ConfigResource.Type.BROKER, "");
        var badValue = assertThrows(ExecutionException.class, () -> admin.incrementalAlterConfigs(Map.of(bad,
                List.of(new AlterConfigOp(new ConfigEntry("log.segment.bytes", "1000"), AlterConfigOp.OpType.SET))))
                .all().get());
        assertInstanceOf(InvalidConfigurationException.class, badValue.getCause());

        ClusterTest.tool(CONFIGS, "--bootstrap-server", node.bootstrap(), "--alter", "--entity-type", "brokers",
                "--entity-default", "--delete-config", "log.retention.ms,compression.type");
        ConfigEntry back = topicConfig("nc-follows", "retention.ms");
        assertEquals("604800000", back.value());
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, back.source());
        assertEquals("producer", topicConfig("nc-later", "compression.type").value());

        String topic = ClusterTest.tool(CONFIGS, "--bootstrap-server", node.bootstrap(),
                "--describe", "--entity-type", "topics", "--entity-name", "nc-own");
        assertTrue(topic.contains("retention.ms=1000"), topic);
    }
}
