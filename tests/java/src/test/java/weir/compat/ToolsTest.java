package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * Kafka's own command-line tools (the classes its scripts run, from the
 * 4.1.2 jars) against one node: kafka-producer-perf-test,
 * kafka-consumer-perf-test, kafka-verifiable-producer and -consumer,
 * kafka-consumer-groups (describe, every reset, delete-offsets, delete),
 * kafka-get-offsets, kafka-delete-records, kafka-log-dirs and
 * kafka-transactions.
 */
class ToolsTest extends OneNode {
    static String tool(String mainClass, String... args) throws Exception {
        return ClusterTest.tool("org.apache.kafka.tools." + mainClass, args);
    }

    static int sumOf(String out, String regex) {
        Matcher m = Pattern.compile(regex).matcher(out);
        int sum = 0;
        while (m.find()) {
            sum += Integer.parseInt(m.group(1));
        }
        return sum;
    }

    @Test
    void perfTestsAndVerifiableClients() throws Exception {
        admin.createTopics(List.of(new NewTopic("tools-perf", 3, (short) 1),
                new NewTopic("tools-verify", 2, (short) 1))).all().get();
        String produced = tool("ProducerPerformance", "--topic", "tools-perf", "--num-records", "20000",
                "--record-size", "100", "--throughput", "-1", "--producer-props",
                "bootstrap.servers=" + node.bootstrap(), "acks=all");
        assertTrue(produced.contains("20000 records sent"), produced);
        String consumed = tool("ConsumerPerformance", "--bootstrap-server", node.bootstrap(),
                "--topic", "tools-perf", "--messages", "20000", "--timeout", "60000");
        // The header, then one line: ..., data.consumed.in.nMsg, ...
        List<String> lines = consumed.lines().filter(l -> !l.isBlank()).toList();
        int header = lines.indexOf(lines.stream().filter(l -> l.startsWith("start.time")).findFirst().orElseThrow());
        List<String> names = List.of(lines.get(header).split(",\\s*"));
        List<String> values = List.of(lines.get(header + 1).split(",\\s*"));
        assertEquals("20000", values.get(names.indexOf("data.consumed.in.nMsg")), consumed);

        String vp = tool("VerifiableProducer", "--bootstrap-server", node.bootstrap(), "--topic", "tools-verify",
                "--max-messages", "500", "--acks", "-1");
        assertEquals(500, countOf(vp, "\"name\":\"producer_send_success\""), vp.lines().limit(5).toList().toString());
        assertTrue(vp.contains("\"acked\":500"), vp.lines().filter(l -> l.contains("tool_data")).toList().toString());
        String vc = tool("VerifiableConsumer", "--bootstrap-server", node.bootstrap(), "--topic", "tools-verify",
                "--group-id", "tools-vc", "--max-messages", "500");
        assertEquals(500, sumOf(vc, "\"name\":\"records_consumed\",\"count\":(\\d+)"), vc);
    }

    static int countOf(String out, String word) {
        return (int) out.lines().filter(l -> l.contains(word)).count();
    }

    @Test
    void consumerGroupsOffsetsDeleteRecordsLogDirsAndTransactions() throws Exception {
        admin.createTopics(List.of(new NewTopic("tools-cg", 2, (short) 1))).all().get();
        try (var p = AdminTest.producer()) {
            for (int i = 0; i < 100; i++) {
                p.send(new ProducerRecord<>("tools-cg", i % 2, null, "v" + i));
            }
        }
        try (var c = AdminTest.consumer("group.id", "tools-g", "auto.offset.reset", "earliest",
                "enable.auto.commit", "false")) {
            c.subscribe(List.of("tools-cg"));
            int got = 0;
            long deadline = System.currentTimeMillis() + 30_000;
            while (got < 100 && System.currentTimeMillis() < deadline) {
                got += c.poll(Duration.ofMillis(200)).count();
            }
            assertEquals(100, got);
            c.commitSync();
        }
        String groups = "consumer.group.ConsumerGroupCommand";
        String b = node.bootstrap();
        assertTrue(tool(groups, "--bootstrap-server", b, "--list").contains("tools-g"));
        String described = tool(groups, "--bootstrap-server", b, "--describe", "--group", "tools-g");
        assertTrue(described.matches("(?s).*tools-cg\\s+0\\s+50\\s+50\\s+0.*"), described);

        Map<String, Integer> resets = new java.util.LinkedHashMap<>();
        resets.put("--to-earliest", 0);
        resets.put("--to-offset=10", 10);
        resets.put("--shift-by=5", 15);
        resets.put("--to-latest", 50);
        resets.put("--shift-by=-60", 0);
        resets.put("--to-datetime=2000-01-01T00:00:00.000", 0);
        resets.put("--by-duration=PT1H", 0);
        for (var r : resets.entrySet()) {
            String[] opt = r.getKey().split("=", 2);
            var args = new java.util.ArrayList<>(List.of("--bootstrap-server", b, "--reset-offsets", "--group",
                    "tools-g", "--topic", "tools-cg", "--execute", opt[0]));
            if (opt.length == 2) {
                args.add(opt[1]);
            }
            tool(groups, args.toArray(String[]::new));
            Map<TopicPartition, OffsetAndMetadata> now = admin.listConsumerGroupOffsets("tools-g")
                    .partitionsToOffsetAndMetadata().get();
            for (int part = 0; part < 2; part++) {
                assertEquals(r.getValue().longValue(), now.get(new TopicPartition("tools-cg", part)).offset(),
                        r.getKey() + " on partition " + part);
            }
        }

        // kafka-get-offsets, then kafka-delete-records moves partition 0's start.
        String latest = tool("GetOffsetShell", "--bootstrap-server", b, "--topic", "tools-cg");
        assertEquals(List.of("tools-cg:0:50", "tools-cg:1:50"), latest.lines().sorted().toList());
        Path json = Files.createTempFile("delete-records", ".json");
        Files.writeString(json, "{\"partitions\":[{\"topic\":\"tools-cg\",\"partition\":0,\"offset\":20}],\"version\":1}");
        String deleted = tool("DeleteRecordsCommand", "--bootstrap-server", b, "--offset-json-file", json.toString());
        assertTrue(deleted.contains("low_watermark: 20"), deleted);
        String earliest = tool("GetOffsetShell", "--bootstrap-server", b, "--topic", "tools-cg", "--time", "-2");
        assertEquals(List.of("tools-cg:0:20", "tools-cg:1:0"), earliest.lines().sorted().toList());

        String dirs = tool("LogDirsCommand", "--bootstrap-server", b, "--describe", "--topic-list", "tools-cg");
        assertTrue(dirs.contains("\"partition\":\"tools-cg-0\"") && dirs.contains("\"partition\":\"tools-cg-1\""), dirs);

        tool(groups, "--bootstrap-server", b, "--delete-offsets", "--group", "tools-g", "--topic", "tools-cg");
        assertTrue(admin.listConsumerGroupOffsets("tools-g").partitionsToOffsetAndMetadata().get().isEmpty());
        tool(groups, "--bootstrap-server", b, "--delete", "--group", "tools-g");
        assertFalse(tool(groups, "--bootstrap-server", b, "--list").contains("tools-g"));

        // kafka-transactions: a committed transaction's id, listed and described.
        try (var p = AdminTest.producer("transactional.id", "tools-txn")) {
            p.initTransactions();
            p.beginTransaction();
            p.send(new ProducerRecord<>("tools-cg", 1, null, "in a transaction"));
            p.commitTransaction();
        }
        String listed = tool("TransactionsCommand", "--bootstrap-server", b, "list");
        assertTrue(listed.contains("tools-txn"), listed);
        String txn = tool("TransactionsCommand", "--bootstrap-server", b, "describe", "--transactional-id", "tools-txn");
        assertTrue(txn.contains("tools-txn") && txn.contains("CompleteCommit"), txn);
    }
}
