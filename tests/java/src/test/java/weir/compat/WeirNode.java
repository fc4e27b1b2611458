package weir.compat;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A real weir node for a test: the binary named by WEIR_BIN (default: the
 * workspace's release build) serving a fresh data directory on free ports,
 * stopped (SIGKILL) by {@link #close}. Its log is kept for failure messages.
 */
public final class WeirNode implements AutoCloseable {
    private Process process;
    private final Path dataDir;
    private final List<String> command;
    /** How many of `command`'s words are the node's fixed ones (before its extra flags). */
    private final int fixedArgs;
    private final Map<String, String> env;
    private final List<String> log = new ArrayList<>();
    public final int kafkaPort;
    public final int httpPort;

    public static WeirNode start(String... extra) throws Exception {
        return new WeirNode(2, Map.of(), extra);
    }

    /** A node with `cores` shards. */
    public static WeirNode startWithCores(int cores, String... extra) throws Exception {
        return new WeirNode(cores, Map.of(), extra);
    }

    /** A node with these environment variables set (its role tokens). */
    public static WeirNode startWithEnv(Map<String, String> env, String... extra) throws Exception {
        return new WeirNode(2, env, extra);
    }

    private WeirNode(int cores, Map<String, String> env, String... extra) throws Exception {
        kafkaPort = freePort();
        httpPort = freePort();
        dataDir = Files.createTempDirectory(Paths.get(targetDir()), "weir-node-");
        command = new ArrayList<>(List.of(
                binary(), "serve", dataDir.toString(),
                "--kafka", "127.0.0.1:" + kafkaPort,
                "--addr", "127.0.0.1:" + httpPort,
                "--cores", Integer.toString(cores)));
        fixedArgs = command.size();
        command.addAll(List.of(extra));
        this.env = env;
        launch();
    }

    /** Kills the node (kill -9) and starts it again on the same data and ports. */
    public void restart() throws Exception {
        process.destroyForcibly();
        process.waitFor(30, TimeUnit.SECONDS);
        launch();
    }

    /** Kills the node (kill -9) and starts it again on the same data and ports with `extra` as its flags. */
    public void restartWith(String... extra) throws Exception {
        command.subList(fixedArgs, command.size()).clear();
        command.addAll(List.of(extra));
        restart();
    }

    private void launch() throws Exception {
        ProcessBuilder builder = new ProcessBuilder(command).redirectOutput(ProcessBuilder.Redirect.DISCARD);
        builder.environment().putAll(env);
        Process started = builder.start();
        process = started;
        CountDownLatch serving = new CountDownLatch(1);
        Thread drain = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(
                    new InputStreamReader(started.getErrorStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    synchronized (log) {
                        log.add(line);
                    }
                    if (line.contains("weir serving")) {
                        serving.countDown();
                    }
                }
            } catch (IOException ignored) {
                // The process ended; its log so far is kept.
            }
            serving.countDown();
        }, "weir-log-" + kafkaPort);
        drain.setDaemon(true);
        drain.start();
        if (!serving.await(60, TimeUnit.SECONDS) || !started.isAlive()) {
            started.destroyForcibly();
            throw new IllegalStateException("weir did not start:\n" + log());
        }
    }

    public String bootstrap() {
        return "127.0.0.1:" + kafkaPort;
    }

    /** Client properties for this node, with `more` as key, value pairs. */
    public Properties props(Object... more) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap());
        for (int i = 0; i + 1 < more.length; i += 2) {
            p.put(more[i].toString(), more[i + 1]);
        }
        return p;
    }

    public String log() {
        synchronized (log) {
            return String.join("\n", log);
        }
    }

    @Override
    public void close() throws Exception {
        process.destroyForcibly();
        process.waitFor(30, TimeUnit.SECONDS);
        try (var files = Files.walk(dataDir)) {
            files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        }
    }

    private static String binary() {
        String bin = System.getenv("WEIR_BIN");
        if (bin != null && !bin.isEmpty()) {
            return bin;
        }
        return Paths.get(System.getProperty("user.dir"), "..", "..", "target", "release", "weir")
                .normalize().toString();
    }

    /** Not /tmp: tmpfs has no O_DIRECT, which the node's log needs. */
    private static String targetDir() throws IOException {
        Path dir = Paths.get(System.getProperty("user.dir"), "target", "nodes");
        Files.createDirectories(dir);
        return dir.toString();
    }

    private static final java.util.Set<Integer> PORTS_GIVEN = new java.util.HashSet<>();
    private static final java.util.Random PORTS = new java.util.Random();

    /**
     * A port free on 127.0.0.1 for a node (or a worker, or PostgreSQL) to
     * listen on, drawn below the kernel's range for the ports of outgoing
     * connections: a port from that range (what binding to port 0 answers)
     * can be taken meanwhile by a connection leaving from the same address,
     * such as a cluster node's own calls to the others, and the node could
     * not listen there. No port is handed out twice in one run, so the
     * ports of one cluster never meet.
     */
    static synchronized int freePort() throws IOException {
        int firstOutgoing = 32768;
        try {
            String[] range = Files.readString(Paths.get("/proc/sys/net/ipv4/ip_local_port_range"))
                    .trim().split("\\s+");
            firstOutgoing = Math.max(11000, Integer.parseInt(range[0]));
        } catch (IOException | RuntimeException e) {
            // Keep Linux's default.
        }
        for (int tries = 0; tries < 1000; tries++) {
            int port = 10000 + PORTS.nextInt(firstOutgoing - 10000);
            if (PORTS_GIVEN.contains(port)) {
                continue;
            }
            try (ServerSocket s = new ServerSocket()) {
                s.bind(new java.net.InetSocketAddress("127.0.0.1", port));
            } catch (IOException taken) {
                continue;
            }
            PORTS_GIVEN.add(port);
            return port;
        }
        throw new IOException("no free port found below the outgoing range in 1000 tries");
    }
}
