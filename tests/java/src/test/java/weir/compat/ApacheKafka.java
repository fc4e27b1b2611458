package weir.compat;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;

/**
 * An Apache Kafka 4.1.2 broker (KRaft, broker and controller in one JVM)
 * from the jars on the test classpath, as bench/kafka.sh runs it: its log
 * dir formatted by kafka.tools.StorageTool, then kafka.Kafka in a JVM of
 * its own. Killed by {@link #close}.
 */
final class ApacheKafka implements AutoCloseable {
    final int port;
    private final Path dir;
    private final Process process;

    private ApacheKafka(int port, Path dir, Process process) {
        this.port = port;
        this.dir = dir;
        this.process = process;
    }

    String bootstrap() {
        return "127.0.0.1:" + port;
    }

    static ApacheKafka start() throws Exception {
        int port = WeirNode.freePort();
        int controller = WeirNode.freePort();
        Path dir = Files.createTempDirectory("apache-kafka");
        Path config = dir.resolve("server.properties");
        Files.writeString(config, String.join("\n",
                "process.roles=broker,controller",
                "node.id=1",
                "controller.quorum.voters=1@127.0.0.1:" + controller,
                "listeners=PLAINTEXT://127.0.0.1:" + port + ",CONTROLLER://127.0.0.1:" + controller,
                "advertised.listeners=PLAINTEXT://127.0.0.1:" + port,
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "log.dirs=" + dir.resolve("data"),
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0", ""));
        ClusterTest.tool("kafka.tools.StorageTool", "format", "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg",
                "--config", config.toString());
        List<String> command = new ArrayList<>(List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-Xmx512m",
                "-cp", System.getProperty("java.class.path"), "kafka.Kafka", config.toString()));
        Process p = new ProcessBuilder(command).redirectErrorStream(true)
                .redirectOutput(dir.resolve("kafka.log").toFile()).start();
        var kafka = new ApacheKafka(port, dir, p);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", kafka.bootstrap(),
                "default.api.timeout.ms", "5000", "request.timeout.ms", "3000"))) {
            while (true) {
                try {
                    admin.describeCluster().nodes().get(5, TimeUnit.SECONDS);
                    return kafka;
                } catch (Exception notYet) {
                    if (!p.isAlive() || System.nanoTime() > deadline) {
                        kafka.close();
                        throw new IllegalStateException("Apache Kafka did not start:\n" + kafka.log());
                    }
                }
            }
        }
    }

    String log() {
        try {
            List<String> lines = Files.readAllLines(dir.resolve("kafka.log"));
            return String.join("\n", lines.subList(Math.max(0, lines.size() - 40), lines.size()));
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    Properties props(Object... more) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap());
        for (int i = 0; i + 1 < more.length; i += 2) {
            p.put(more[i].toString(), more[i + 1]);
        }
        return p;
    }

    @Override
    public void close() throws Exception {
        process.destroyForcibly();
        process.waitFor(30, TimeUnit.SECONDS);
        try (var files = Files.walk(dir)) {
            files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        }
    }
}
