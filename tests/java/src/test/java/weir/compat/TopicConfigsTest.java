package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.junit.jupiter.api.Test;

/**
 * Every topic config Kafka 4.1 accepts, taken from Kafka's own
 * {@code LogConfig} in the kafka-storage jar (not a list typed here): each
 * is accepted by CreateTopics and IncrementalAlterConfigs with a value
 * Kafka's own validator accepts, refused with values it refuses, and
 * reported by DescribeConfigs with Kafka's default and source.
 */
class TopicConfigsTest extends OneNode {
    /** weir's defaults that differ from Kafka's, reported as the node's. */
    static final Map<String, String> NODE_DEFAULTS = Map.of("min.insync.replicas", "2");

    static ConfigDef.ConfigKey key(String name) {
        return LogConfig.configKeys().get(name);
    }

    /** Whether Kafka's own ConfigDef takes {@code value} for {@code name}. */
    static boolean kafkaTakes(String name, String value) {
        var k = key(name);
        try {
            Object parsed = ConfigDef.parseType(name, value, k.type);
            if (k.validator != null) {
                k.validator.ensureValid(name, parsed);
            }
            return true;
        } catch (ConfigException e) {
            return false;
        }
    }

    static String kafkaDefault(String name) {
        var k = key(name);
        return ConfigDef.convertToString(k.defaultValue, k.type);
    }

    /**
     * A value Kafka takes for the config, other than its default where
     * one exists ({@code remote.storage.enable=true} aside: no broker
     * without tiered storage takes it, tested below).
     */
    static String validValue(String name) {
        var k = key(name);
        List<String> candidates = switch (k.type) {
            case BOOLEAN -> List.of("true", "false");
            case DOUBLE -> List.of("0.25");
            case STRING, LIST -> new ArrayList<>(List.of("lz4", "LogAppendTime", "compact", "0:1,1:2"));
            default -> List.of("1048576", "5", "2", "1", "0", "-1");
        };
        String dflt = kafkaDefault(name);
        return candidates.stream()
                .filter(v -> kafkaTakes(name, v) && !v.equals(dflt))
                .filter(v -> !(name.equals("remote.storage.enable") && v.equals("true")))
                .findFirst()
                .orElse(dflt);
    }

    /** Values Kafka refuses: a word for any type, and past a range's least. */
    static List<String> invalidValues(String name) {
        var out = new ArrayList<String>();
        out.add("not-a-value");
        String range = String.valueOf(key(name).validator);
        if (range.startsWith("[") && range.contains(",...")) {
            String least = range.substring(1, range.indexOf(','));
            try {
                out.add(Long.toString(Long.parseLong(least) - 1));
            } catch (NumberFormatException e) {
                // not a numeric range
            }
        }
        out.removeIf(v -> kafkaTakes(name, v));
        return out;
    }

    static Config describe(String topic) throws Exception {
        var r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        return admin.describeConfigs(List.of(r)).all().get().get(r);
    }

    /** Kafka writes lists without spaces and doubles as Java does. */
    static String normal(String name, String value) {
        return switch (key(name).type) {
            case DOUBLE -> Double.toString(Double.parseDouble(value));
            case LIST -> String.join(",", new TreeSet<>(List.of(value.split("\\s*,\\s*"))));
            case BOOLEAN, STRING -> value.toLowerCase();
            default -> value;
        };
    }

    @Test
    void describesEveryConfigWithKafkasDefault() throws Exception {
        admin.createTopics(List.of(new NewTopic("cfg-defaults", 1, (short) 1))).all().get();
        Config c = describe("cfg-defaults");
        Set<String> described = c.entries().stream().map(ConfigEntry::name).collect(Collectors.toCollection(TreeSet::new));
        assertEquals(new TreeSet<>(LogConfig.nonInternalConfigNames()), described,
                "DescribeConfigs names every config Kafka 4.1 has, and no other");
        var wrong = new TreeMap<String, String>();
        for (ConfigEntry e : c.entries()) {
            String want = NODE_DEFAULTS.getOrDefault(e.name(), kafkaDefault(e.name()));
            var source = NODE_DEFAULTS.containsKey(e.name())
                    ? ConfigEntry.ConfigSource.STATIC_BROKER_CONFIG
                    : ConfigEntry.ConfigSource.DEFAULT_CONFIG;
            if (!normal(e.name(), want).equals(normal(e.name(), e.value())) || e.source() != source
                    || e.isReadOnly() || e.isSensitive()) {
                wrong.put(e.name(), e.value() + " from " + e.source() + " (want " + want + " from " + source + ")");
            }
        }
        assertEquals(Map.of(), wrong, "configs not described as Kafka describes them");
    }

    @Test
    void createTopicsTakesEveryConfigKafkaTakesAndRefusesWhatItRefuses() throws Exception {
        var refusedGood = new TreeMap<String, String>();
        var tookBad = new TreeMap<String, String>();
        int i = 0;
        for (String name : LogConfig.configNames()) {
            String topic = "cfg-" + i++;
            String value = validValue(name);
            try {
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1).configs(Map.of(name, value)))).all().get();
                ConfigEntry e = describe(topic).get(name);
                if (e == null || !normal(name, value).equals(normal(name, e.value()))
                        || e.source() != ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG) {
                    refusedGood.put(name, value + " described as " + e);
                }
            } catch (ExecutionException e) {
                refusedGood.put(name, value + ": " + e.getCause());
            }
            for (String bad : invalidValues(name)) {
                String badTopic = "cfg-bad-" + i++;
                var err = assertThrows(Exception.class, () -> admin.createTopics(List.of(
                        new NewTopic(badTopic, 1, (short) 1).configs(Map.of(name, bad)))).all().get(),
                        name + "=" + bad);
                if (!(err.getCause() instanceof InvalidConfigurationException)) {
                    tookBad.put(name + "=" + bad, String.valueOf(err.getCause()));
                }
            }
        }
        assertEquals(Map.of(), refusedGood, "values Kafka takes, refused or not kept");
        assertEquals(Map.of(), tookBad, "values Kafka refuses, not refused with INVALID_CONFIG");

        var unknown = assertThrows(ExecutionException.class, () -> admin.createTopics(List.of(
                new NewTopic("cfg-unknown", 1, (short) 1).configs(Map.of("no.such.config", "1")))).all().get());
        assertInstanceOf(InvalidConfigurationException.class, unknown.getCause());
        var tiered = assertThrows(ExecutionException.class, () -> admin.createTopics(List.of(
                new NewTopic("cfg-tiered", 1, (short) 1).configs(Map.of("remote.storage.enable", "true")))).all().get());
        assertTrue(tiered.getCause().getMessage().contains("Tiered Storage"), tiered.getCause().getMessage());
    }

    @Test
    void incrementalAlterConfigsSetsEveryConfigAndPutsItBack() throws Exception {
        admin.createTopics(List.of(new NewTopic("cfg-alter", 1, (short) 1))).all().get();
        var r = new ConfigResource(ConfigResource.Type.TOPIC, "cfg-alter");
        var values = new TreeMap<String, String>();
        for (String name : LogConfig.configNames()) {
            values.put(name, validValue(name));
        }
        // segment.bytes' least is 1 MiB, so internal.segment.bytes (which
        // wins over it) is set to it too.
        List<AlterConfigOp> ops = values.entrySet().stream()
                .map(e -> new AlterConfigOp(new ConfigEntry(e.getKey(), e.getValue()), AlterConfigOp.OpType.SET))
                .toList();
        admin.incrementalAlterConfigs(Map.of(r, ops)).all().get();
        Config c = describe("cfg-alter");
        var differ = new TreeMap<String, String>();
        values.forEach((name, v) -> {
            ConfigEntry e = c.get(name);
            if (e == null || !normal(name, v).equals(normal(name, e.value()))) {
                differ.put(name, v + " described as " + e);
            }
        });
        assertEquals(Map.of(), differ);

        // One refused value refuses the whole change.
        var bad = List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "1"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("compression.type", "brotli"), AlterConfigOp.OpType.SET));
        var err = assertThrows(ExecutionException.class, () -> admin.incrementalAlterConfigs(Map.of(r, bad)).all().get());
        assertInstanceOf(InvalidConfigurationException.class, err.getCause());
        assertEquals(normal("retention.ms", values.get("retention.ms")), describe("cfg-alter").get("retention.ms").value());

        // APPEND and SUBTRACT on a list config.
        admin.incrementalAlterConfigs(Map.of(r, List.of(new AlterConfigOp(
                new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.SUBTRACT)))).all().get();
        admin.incrementalAlterConfigs(Map.of(r, List.of(new AlterConfigOp(
                new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.APPEND)))).all().get();
        assertEquals("delete", describe("cfg-alter").get("cleanup.policy").value());

        // DELETE puts each back to its default.
        List<AlterConfigOp> deletes = values.keySet().stream()
                .map(n -> new AlterConfigOp(new ConfigEntry(n, null), AlterConfigOp.OpType.DELETE))
                .toList();
        admin.incrementalAlterConfigs(Map.of(r, deletes)).all().get();
        Optional<ConfigEntry> own = describe("cfg-alter").entries().stream()
                .filter(e -> e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG)
                .findAny();
        assertEquals(Optional.empty(), own, "every config back to its default");
    }
}
