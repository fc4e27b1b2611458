package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The Java client signing in as the reference documents' Java example
 * does: a JAAS config (`sasl.jaas.config`) with Kafka's own login modules,
 * PLAIN and both SCRAMs, over SASL_SSL (the node's certificate made by the
 * openssl command, trusted as a PEM file). The SCRAM user is made with
 * Kafka's AlterUserScramCredentials and given ACLs with CreateAcls, as an
 * operator does on Kafka.
 */
class JaasSignInTest {
    static final String ADMIN_TOKEN = "admin-token-java";
    static WeirNode node;
    static Path certs;

    static void openssl(String... args) throws Exception {
        var command = new ArrayList<>(List.of("openssl"));
        command.addAll(List.of(args));
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "openssl did not end");
        assertEquals(0, p.exitValue(), String.join(" ", command) + ":\n" + out);
    }

    @BeforeAll
    static void startNode() throws Exception {
        certs = Files.createTempDirectory("weir-jaas-certs");
        String ca = certs.resolve("ca.pem").toString();
        String caKey = certs.resolve("ca.key").toString();
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=weir test CA",
                "-keyout", caKey, "-out", ca);
        Path ext = certs.resolve("node.ext");
        Files.writeString(ext, "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
                + "extendedKeyUsage=serverAuth\n");
        String key = certs.resolve("node.key").toString();
        String csr = certs.resolve("node.csr").toString();
        String cert = certs.resolve("node.pem").toString();
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", key, "-out", csr);
        openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", caKey, "-CAcreateserial", "-days", "2",
                "-out", cert, "-extfile", ext.toString());
        node = WeirNode.startWithEnv(Map.of("WEIR_ADMIN_TOKEN", ADMIN_TOKEN), "--tls-cert", cert, "--tls-key", key);
    }

    @AfterAll
    static void stopNode() throws Exception {
        node.close();
    }

    static String jaas(String mechanism, String user, String password) {
        String module = mechanism.equals("PLAIN")
                ? "org.apache.kafka.common.security.plain.PlainLoginModule"
                : "org.apache.kafka.common.security.scram.ScramLoginModule";
        return module + " required username=\"" + user + "\" password=\"" + password + "\";";
    }

    static Properties signedIn(String mechanism, String user, String password) {
        var p = new Properties();
        p.put("bootstrap.servers", node.bootstrap());
        p.put("security.protocol", "SASL_SSL");
        p.put("ssl.truststore.type", "PEM");
        p.put("ssl.truststore.location", certs.resolve("ca.pem").toString());
        p.put("sasl.mechanism", mechanism);
        p.put("sasl.jaas.config", jaas(mechanism, user, password));
        return p;
    }

    @Test
    void plainAndScramThroughJaasOverTls() throws Exception {
        try (Admin admin = Admin.create(signedIn("PLAIN", "admin", ADMIN_TOKEN))) {
            admin.createTopics(List.of(new NewTopic("jaas-orders", 1, (short) 1))).all().get();
            admin.alterUserScramCredentials(List.of(
                    new UserScramCredentialUpsertion("carol", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                            "sesame seed"),
                    new UserScramCredentialUpsertion("carol", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                            "sesame seed"))).all().get();
            var topic = new ResourcePattern(ResourceType.TOPIC, "jaas-orders", PatternType.LITERAL);
            var group = new ResourcePattern(ResourceType.GROUP, "jaas-readers", PatternType.LITERAL);
            admin.createAcls(List.of(
                    new AclBinding(topic, new AccessControlEntry("User:carol", "*", AclOperation.WRITE, AclPermissionType.ALLOW)),
                    new AclBinding(topic, new AccessControlEntry("User:carol", "*", AclOperation.READ, AclPermissionType.ALLOW)),
                    new AclBinding(topic, new AccessControlEntry("User:carol", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)),
                    new AclBinding(group, new AccessControlEntry("User:carol", "*", AclOperation.READ, AclPermissionType.ALLOW))))
                    .all().get();
        }
        var sent = new ArrayList<String>();
        for (String mechanism : List.of("SCRAM-SHA-256", "SCRAM-SHA-512")) {
            var p = signedIn(mechanism, "carol", "sesame seed");
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            try (var producer = new KafkaProducer<String, String>(p)) {
                String value = "signed in with " + mechanism;
                producer.send(new ProducerRecord<>("jaas-orders", value)).get(30, TimeUnit.SECONDS);
                sent.add(value);
            }
        }
        var c = signedIn("SCRAM-SHA-512", "carol", "sesame seed");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.put("group.id", "jaas-readers");
        c.put("auto.offset.reset", "earliest");
        var got = new ArrayList<String>();
        try (var consumer = new KafkaConsumer<String, String>(c)) {
            consumer.subscribe(List.of("jaas-orders"));
            long deadline = System.currentTimeMillis() + 30_000;
            while (got.size() < sent.size() && System.currentTimeMillis() < deadline) {
                consumer.poll(Duration.ofMillis(200)).forEach(r -> got.add(r.value()));
            }
        }
        assertEquals(sent, got);

        // A wrong password is refused at sign-in, saying so.
        var wrong = signedIn("SCRAM-SHA-256", "carol", "not it");
        try (Admin admin = Admin.create(wrong)) {
            var e = assertThrows(ExecutionException.class, () -> admin.listTopics().names().get(30, TimeUnit.SECONDS));
            assertInstanceOf(SaslAuthenticationException.class, e.getCause());
        }
    }
}
