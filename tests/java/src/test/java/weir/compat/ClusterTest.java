package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Kafka's Java clients against a cluster of three nodes (one shard each,
 * unpinned): admin through any node, the metadata quorum described, an
 * idempotent producer through one node and a group through another.
 */
class ClusterTest {
    static final List<WeirNode> nodes = new ArrayList<>();

    @BeforeAll
    static void startCluster() throws Exception {
        List<String> voters = new ArrayList<>();
        for (int i = 1; i <= 3; i++) {
            voters.add(i + "@127.0.0.1:" + WeirNode.freePort());
        }
        for (int i = 1; i <= 3; i++) {
            nodes.add(WeirNode.startWithCores(1, "--node-id", Integer.toString(i),
                    "--voters", String.join(",", voters), "--cpus", "none"));
        }
        for (WeirNode n : nodes) {
            try (Admin admin = Admin.create(n.props())) {
                Wait.until(() -> {
                    try {
                        var c = admin.describeCluster();
                        return c.nodes().get().size() == 3 && c.controller().get().id() > 0;
                    } catch (Exception e) {
                        return false;
                    }
                }, Duration.ofSeconds(30), n.bootstrap() + " names three brokers and a controller");
            }
        }
    }

    @AfterAll
    static void stopCluster() throws Exception {
        for (WeirNode n : nodes) {
            n.close();
        }
    }

    @Test
    void theMetadataQuorumIsDescribedFromAnyNode() throws Exception {
        for (WeirNode n : nodes) {
            try (Admin admin = Admin.create(n.props())) {
                QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get();
                Set<Integer> voters = q.voters().stream().map(QuorumInfo.ReplicaState::replicaId)
                        .collect(Collectors.toSet());
                assertEquals(Set.of(1, 2, 3), voters);
                assertTrue(voters.contains(q.leaderId()), "the leader is a voter: " + q);
                assertTrue(q.highWatermark() > 0, q.toString());
                int controller = admin.describeCluster().controller().get().id();
                assertEquals(controller, q.leaderId());
            }
        }
    }

    /**
     * Runs one of Kafka's command-line tools as its script does (a JVM of
     * its own, `kafka-run-class.sh`'s main class and arguments); its
     * standard output, after checking it exited 0.
     */
    static String tool(String mainClass, String... args) throws Exception {
        List<String> command = new ArrayList<>(List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-cp", System.getProperty("java.class.path"), mainClass));
        command.addAll(List.of(args));
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS), mainClass + " did not end");
        assertEquals(0, p.exitValue(), mainClass + " " + String.join(" ", args) + " failed:\n" + out);
        return out;
    }

    /**
     * kafka-topics.sh, kafka-acls.sh and kafka-metadata-quorum.sh, each
     * through a different node than the one that made the change.
     */
    @Test
    void kafkasOwnToolsWorkThroughAnyNode() throws Exception {
        String topics = "org.apache.kafka.tools.TopicCommand";
        String created = tool(topics, "--bootstrap-server", nodes.get(2).bootstrap(), "--create",
                "--topic", "tools-made", "--partitions", "6", "--replication-factor", "1");
        assertTrue(created.contains("Created topic tools-made"), created);
        String described = tool(topics, "--bootstrap-server", nodes.get(0).bootstrap(),
                "--describe", "--topic", "tools-made");
        Set<String> leaders = new HashSet<>();
        var m = java.util.regex.Pattern.compile("Leader: (\\d+)").matcher(described);
        while (m.find()) {
            leaders.add(m.group(1));
        }
        assertEquals(Set.of("1", "2", "3"), leaders, described);
        String listed = tool(topics, "--bootstrap-server", nodes.get(1).bootstrap(), "--list");
        assertTrue(listed.lines().anyMatch("tools-made"::equals), listed);

        String acls = "org.apache.kafka.tools.AclCommand";
        tool(acls, "--bootstrap-server", nodes.get(0).bootstrap(), "--add", "--allow-principal",
                "User:tool-reader", "--operation", "Read", "--topic", "tools-made");
        String granted = tool(acls, "--bootstrap-server", nodes.get(2).bootstrap(), "--list",
                "--topic", "tools-made");
        assertTrue(granted.contains("principal=User:tool-reader") && granted.contains("operation=READ"),
                granted);

        String quorum = "org.apache.kafka.tools.MetadataQuorumCommand";
        int controller;
        try (Admin admin = Admin.create(nodes.get(0).props())) {
            controller = admin.describeCluster().controller().get().id();
        }
        for (WeirNode n : nodes) {
            String status = tool(quorum, "--bootstrap-server", n.bootstrap(), "describe", "--status");
            assertTrue(status.contains("LeaderId:") && status.lines().anyMatch(
                    l -> l.matches("LeaderId:\\s+" + controller)), status);
            String replication = tool(quorum, "--bootstrap-server", n.bootstrap(), "describe",
                    "--replication");
            for (int id = 1; id <= 3; id++) {
                int voter = id;
                assertTrue(replication.lines().anyMatch(l -> l.matches("\\s*" + voter + "\\s.*")),
                        replication);
            }
        }
    }

    /**
     * kafka-leader-election.sh (ElectLeaders): a preferred election of a
     * partition its preferred replica leads already is not needed, and the
     * tool says so; an unclean one of a partition with a live leader too.
     */
    @Test
    void kafkasLeaderElectionToolElectsThroughAnyNode() throws Exception {
        try (Admin admin = Admin.create(nodes.get(0).props())) {
            admin.createTopics(List.of(new NewTopic("elected", 3, (short) 3))).all().get();
            Wait.until(() -> {
                try {
                    var d = admin.describeTopics(List.of("elected")).allTopicNames().get().get("elected");
                    return d.partitions().stream().allMatch(p -> p.isr().size() == 3 && p.leader() != null);
                } catch (Exception e) {
                    return false;
                }
            }, Duration.ofSeconds(30), "three replicas, all in sync, for each partition");
        }
        String election = "org.apache.kafka.tools.LeaderElectionCommand";
        for (String type : List.of("preferred", "unclean")) {
            String out = tool(election, "--bootstrap-server", nodes.get(1).bootstrap(), "--election-type", type,
                    "--topic", "elected", "--partition", "1");
            assertTrue(out.contains("Valid replica already elected for partitions elected-1"), out);
        }
    }

    /**
     * Exactly-once Kafka Streams through node 2: its input, output,
     * repartition and changelog partitions dealt over the three nodes, its
     * group and transactional ids coordinated wherever their slots are, so
     * each transaction's markers and offsets reach other nodes.
     */
    @Test
    void exactlyOnceStreamsSpanTheNodes() throws Exception {
        try (Admin admin = Admin.create(nodes.get(0).props())) {
            WordCount.run(nodes.get(1), admin, "exactly_once_v2", 6, "cluster-wc");
            var d = admin.describeTopics(List.of("cluster-wc-out")).allTopicNames().get()
                    .get("cluster-wc-out");
            Set<Integer> leaders = d.partitions().stream().map(p -> p.leader().id())
                    .collect(Collectors.toSet());
            assertEquals(Set.of(1, 2, 3), leaders);
        }
    }

    @Test
    void aTopicDealtOverTheNodesIsProducedAndConsumedThroughAnyOfThem() throws Exception {
        try (Admin admin = Admin.create(nodes.get(2).props())) {
            admin.createTopics(List.of(new NewTopic("java-cluster", 12, (short) 1))).all().get();
        }
        Map<Integer, Integer> led = new HashMap<>();
        try (Admin admin = Admin.create(nodes.get(0).props())) {
            var d = admin.describeTopics(List.of("java-cluster")).allTopicNames().get().get("java-cluster");
            for (var p : d.partitions()) {
                Node leader = p.leader();
                led.merge(leader.id(), 1, Integer::sum);
            }
        }
        // Each node leads a share: placement evens out the leaders of every
        // topic (the other tests' topics and the groups topic among them).
        assertEquals(Set.of(1, 2, 3), led.keySet());
        assertTrue(led.values().stream().allMatch(n -> n >= 3 && n <= 5), "leaders per node: " + led);

        var pp = nodes.get(1).props("acks", "all", "enable.idempotence", "true");
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        Set<String> sent = new HashSet<>();
        try (var producer = new KafkaProducer<String, String>(pp)) {
            for (int i = 0; i < 600; i++) {
                String v = "j" + i;
                producer.send(new ProducerRecord<>("java-cluster", v, v)).get();
                sent.add(v);
            }
        }
        var cp = nodes.get(0).props("group.id", "java-cluster-readers", "auto.offset.reset", "earliest");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        Set<String> read = new HashSet<>();
        try (var consumer = new KafkaConsumer<String, String>(cp)) {
            consumer.subscribe(List.of("java-cluster"));
            Wait.polling(List.of(consumer), () -> read.size() == sent.size(), "every record read",
                    r -> read.add(r.value()));
            consumer.commitSync();
        }
        assertEquals(sent, read);
    }

    @Test
    void aReplicatedTopicIsDescribedWithItsReplicasAndTakesAcksAll() throws Exception {
        try (Admin admin = Admin.create(nodes.get(0).props())) {
            admin.createTopics(List.of(new NewTopic("java-replicated", 3, (short) 3))).all().get();
            Wait.until(() -> {
                try {
                    var d = admin.describeTopics(List.of("java-replicated")).allTopicNames().get()
                            .get("java-replicated");
                    return d.partitions().stream().allMatch(p -> p.replicas().size() == 3
                            && p.isr().size() == 3 && p.leader() != null);
                } catch (Exception e) {
                    return false;
                }
            }, Duration.ofSeconds(30), "three replicas, all in sync, for each partition");
        }
        var pp = nodes.get(2).props("acks", "all", "enable.idempotence", "true");
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        Set<String> sent = new HashSet<>();
        try (var producer = new KafkaProducer<String, String>(pp)) {
            for (int i = 0; i < 300; i++) {
                String v = "r" + i;
                producer.send(new ProducerRecord<>("java-replicated", v, v)).get();
                sent.add(v);
            }
        }
        var cp = nodes.get(1).props("group.id", "java-replicated-readers", "auto.offset.reset", "earliest");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        Set<String> read = new HashSet<>();
        try (var consumer = new KafkaConsumer<String, String>(cp)) {
            consumer.subscribe(List.of("java-replicated"));
            Wait.polling(List.of(consumer), () -> read.size() == sent.size(), "every record read",
                    r -> read.add(r.value()));
        }
        assertEquals(sent, read);
    }
}
