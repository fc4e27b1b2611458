package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.utils.Utils;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.connect.cli.ConnectDistributed;
import org.apache.kafka.connect.runtime.Connect;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Seed 000's Debezium example for real: PostgreSQL (a private cluster with
 * logical decoding, started here), a Kafka Connect distributed worker (its
 * config, offset and status topics on weir) running Debezium's PostgreSQL
 * connector, and a weir keyed table that SELECT shows inserts, updates and
 * deletes in.
 */
class ConnectDebeziumTest {
    static WeirNode node;
    static Postgres pg;

    @BeforeAll
    static void start() throws Exception {
        node = WeirNode.start();
        pg = Postgres.start();
    }

    @AfterAll
    static void stop() throws Exception {
        if (pg != null) {
            pg.close();
        }
        node.close();
    }

    @Test
    void postgresChangesReachAKeyedTable() throws Exception {
        try (Connection db = pg.connect(); Statement st = db.createStatement()) {
            st.execute("CREATE TABLE customers (id INT PRIMARY KEY, name TEXT, email TEXT)");
            st.execute("INSERT INTO customers VALUES (1, 'ann', 'ann@example.com'),"
                    + " (2, 'bob', 'bob@example.com'), (3, 'cy', 'cy@example.com')");
            st.execute("INSERT INTO customers SELECT g, 'c' || g, 'c' || g || '@example.com'"
                    + " FROM generate_series(5, 24) g");
        }
        // Four partitions, and keys in Kafka Connect's schema envelope: the
        // connector's producer places each key by murmur2 of the envelope's
        // bytes, not of the table's key, so most rows live outside their
        // key's home partition.
        sql("CREATE TABLE customers (id BIGINT PRIMARY KEY, name VARCHAR, email VARCHAR)"
                + " WITH (partitions = 4)");

        int rest = WeirNode.freePort();
        Map<String, String> worker = new HashMap<>();
        worker.put("bootstrap.servers", node.bootstrap());
        worker.put("group.id", "weir-connect");
        worker.put("config.storage.topic", "connect-configs");
        worker.put("offset.storage.topic", "connect-offsets");
        worker.put("status.storage.topic", "connect-status");
        worker.put("config.storage.replication.factor", "1");
        worker.put("offset.storage.replication.factor", "1");
        worker.put("status.storage.replication.factor", "1");
        worker.put("key.converter", "org.apache.kafka.connect.json.JsonConverter");
        worker.put("value.converter", "org.apache.kafka.connect.json.JsonConverter");
        worker.put("key.converter.schemas.enable", "true");
        worker.put("value.converter.schemas.enable", "false");
        worker.put("listeners", "http://127.0.0.1:" + rest);
        worker.put("offset.flush.interval.ms", "500");
        Connect<?> connect = new ConnectDistributed().startConnect(worker);
        try {
            String config = """
                    {"name": "pg", "config": {
                      "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                      "database.hostname": "127.0.0.1", "database.port": "%d",
                      "database.user": "postgres", "database.password": "unused",
                      "database.dbname": "postgres", "topic.prefix": "pg",
                      "plugin.name": "pgoutput", "slot.name": "weir_test",
                      "publication.autocreate.mode": "filtered",
                      "table.include.list": "public.customers",
                      "transforms": "route",
                      "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
                      "transforms.route.regex": "pg\\\\.public\\\\.(.*)",
                      "transforms.route.replacement": "$1"}}
                    """.formatted(pg.port);
            HttpClient http = HttpClient.newHttpClient();
            String created = "";
            // The worker's REST API answers once it has joined its group.
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (System.nanoTime() < deadline) {
                try {
                    var r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + rest + "/connectors"))
                            .header("Content-Type", "application/json")
                            .POST(HttpRequest.BodyPublishers.ofString(config)).build(),
                            HttpResponse.BodyHandlers.ofString());
                    created = r.statusCode() + " " + r.body();
                    if (r.statusCode() == 201 || r.statusCode() == 409) {
                        break;
                    }
                } catch (java.io.IOException notYet) {
                    created = notYet.toString();
                }
                Thread.sleep(200);
            }
            assertTrue(created.startsWith("201"), created);

            // The snapshot.
            awaitRows("SELECT count(*) AS n FROM customers", "[{\"n\":23}]");
            awaitRows("SELECT id, name FROM customers WHERE id < 4 ORDER BY id",
                    "[{\"id\":1,\"name\":\"ann\"},{\"id\":2,\"name\":\"bob\"},{\"id\":3,\"name\":\"cy\"}]");
            // Streamed changes: an insert, an update, a delete.
            try (Connection db = pg.connect(); Statement st = db.createStatement()) {
                st.execute("INSERT INTO customers VALUES (4, 'di', 'di@example.com')");
                st.execute("UPDATE customers SET name = 'anne' WHERE id = 1");
                st.execute("DELETE FROM customers WHERE id = 2");
            }
            awaitRows("SELECT id, name FROM customers WHERE id < 5 ORDER BY id",
                    "[{\"id\":1,\"name\":\"anne\"},{\"id\":3,\"name\":\"cy\"},{\"id\":4,\"name\":\"di\"}]");

            // Rows outside their key's home partition: SQL writes reach them
            // where they are, and the newest write wins.
            Map<Long, Integer> strays = strays("customers", 4, 5, 24);
            assertTrue(strays.size() >= 2, "rows outside their home partition: " + strays);
            var it = strays.entrySet().iterator();
            var gone = it.next();
            assertEquals("[{\"_partition\":" + gone.getValue(),
                    sql("DELETE FROM customers WHERE id = " + gone.getKey()).split(",")[0]);
            awaitRows("SELECT count(*) AS n FROM customers", "[{\"n\":22}]");
            var upsert = it.next();
            assertEquals("[{\"_partition\":" + upsert.getValue(), sql(
                    "INSERT INTO customers VALUES (" + upsert.getKey() + ", 'sql', 'sql@example.com')")
                    .split(",")[0]);
            awaitRows("SELECT name FROM customers WHERE id = " + upsert.getKey(), "[{\"name\":\"sql\"}]");
            try (Connection db = pg.connect(); Statement st = db.createStatement()) {
                st.execute("UPDATE customers SET name = 'pg' WHERE id = " + upsert.getKey());
            }
            awaitRows("SELECT name FROM customers WHERE id = " + upsert.getKey(), "[{\"name\":\"pg\"}]");
            awaitRows("SELECT count(*) AS n FROM customers", "[{\"n\":22}]");
        } finally {
            connect.stop();
            connect.awaitStop();
        }
        // Connect's own topics, compacted as it asks.
        try (Admin admin = Admin.create(node.props())) {
            for (String t : List.of("connect-configs", "connect-offsets", "connect-status")) {
                var resource = new ConfigResource(ConfigResource.Type.TOPIC, t);
                assertEquals("compact", admin.describeConfigs(List.of(resource)).all().get()
                        .get(resource).get("cleanup.policy").value(), t);
            }
        }
    }

    /**
     * The ids from `from` to `to` whose rows (read from `topic`'s records,
     * keyed `{"id":N}` by the table) are in another partition than Kafka's
     * default partitioner gives their key, with the partition they are in.
     */
    static Map<Long, Integer> strays(String topic, int partitions, long from, long to) {
        var props = node.props("key.deserializer", StringDeserializer.class.getName(),
                "value.deserializer", StringDeserializer.class.getName());
        Map<Long, Integer> out = new TreeMap<>();
        try (var consumer = new KafkaConsumer<String, String>(props)) {
            List<TopicPartition> all = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                all.add(new TopicPartition(topic, p));
            }
            consumer.assign(all);
            consumer.seekToBeginning(all);
            Map<TopicPartition, Long> ends = consumer.endOffsets(all);
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (all.stream().anyMatch(tp -> consumer.position(tp) < ends.get(tp))
                    && System.nanoTime() < deadline) {
                for (var r : consumer.poll(Duration.ofMillis(500))) {
                    long id = Long.parseLong(r.key().replaceAll("\\D", ""));
                    int home = Utils.toPositive(Utils.murmur2(r.key().getBytes())) % partitions;
                    if (id >= from && id <= to && r.value() != null && r.partition() != home) {
                        out.put(id, r.partition());
                    }
                }
            }
        }
        return out;
    }

    /** Waits until `query`'s JSON rows are `want` (compact JSON). */
    static void awaitRows(String query, String want) throws Exception {
        String got = "";
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (System.nanoTime() < deadline) {
            got = sql(query).replaceAll("\\s", "");
            if (got.equals(want)) {
                return;
            }
            Thread.sleep(200);
        }
        throw new AssertionError("rows of " + query + ": " + got + ", want " + want + "\n" + node.log());
    }

    static String sql(String statement) throws Exception {
        var r = HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + node.httpPort + "/sql"))
                        .POST(HttpRequest.BodyPublishers.ofString(statement)).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), statement + ": " + r.body());
        return r.body();
    }

    /**
     * A private PostgreSQL cluster with logical decoding, run as the
     * `postgres` user (the server refuses root) from Debian's packages.
     */
    static final class Postgres implements AutoCloseable {
        final Path dir;
        final int port;
        final String bin;

        private Postgres(Path dir, int port, String bin) {
            this.dir = dir;
            this.port = port;
            this.bin = bin;
        }

        static Postgres start() throws Exception {
            File[] versions = new File("/usr/lib/postgresql").listFiles();
            if (versions == null || versions.length == 0) {
                throw new IllegalStateException("PostgreSQL's server is not installed (apt-get install postgresql)");
            }
            String bin = versions[0].toPath().resolve("bin").toString();
            Path dir = Files.createTempDirectory("weir-pg-");
            run("chown", "postgres:postgres", dir.toString());
            Postgres pg = new Postgres(dir, WeirNode.freePort(), bin);
            pg.asPostgres(bin + "/initdb", "-D", dir + "/data", "-U", "postgres", "--auth=trust");
            pg.asPostgres(bin + "/pg_ctl", "-D", dir + "/data", "-l", dir + "/log", "-w", "-o",
                    "-p " + pg.port + " -k " + dir + " -c listen_addresses=127.0.0.1"
                            + " -c wal_level=logical -c max_wal_senders=4 -c max_replication_slots=4",
                    "start");
            return pg;
        }

        Connection connect() throws Exception {
            return DriverManager.getConnection("jdbc:postgresql://127.0.0.1:" + port + "/postgres", "postgres", "");
        }

        void asPostgres(String... cmd) throws Exception {
            List<String> full = new java.util.ArrayList<>(List.of("runuser", "-u", "postgres", "--"));
            full.addAll(List.of(cmd));
            run(full.toArray(String[]::new));
        }

        static void run(String... cmd) throws Exception {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes());
            if (!p.waitFor(120, TimeUnit.SECONDS) || p.exitValue() != 0) {
                throw new IllegalStateException(String.join(" ", cmd) + " failed:\n" + out);
            }
        }

        @Override
        public void close() throws Exception {
            asPostgres(bin + "/pg_ctl", "-D", dir + "/data", "-m", "immediate", "-w", "stop");
            run("rm", "-rf", dir.toString());
        }
    }
}
