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
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.jose4j.jwk.JsonWebKeySet;
import org.jose4j.jwk.RsaJsonWebKey;
import org.jose4j.jwk.RsaJwkGenerator;
import org.jose4j.jws.AlgorithmIdentifiers;
import org.jose4j.jws.JsonWebSignature;
import org.jose4j.jwt.JwtClaims;
import org.jose4j.jwt.NumericDate;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * SASL/OAUTHBEARER with Kafka's own login handler: the Java client reads a
 * JWT from a file (Kafka's file token endpoint) that a test "identity
 * provider" signed with its RSA key; the node checks it against the
 * provider's JWK set file, its issuer and audience, and takes the
 * principal from `sub`. Unsigned, foreign, expired and wrongly issued
 * tokens are refused. With --max-reauth-ms the client signs in again on
 * its connections (KIP-368) and keeps working.
 */
class OAuthTest {
    static final String ADMIN_TOKEN = "admin-token-oauth";
    static final String ISSUER = "https://idp.weir.test";
    static final String AUDIENCE = "weir";
    static WeirNode node;
    static Path dir;
    static RsaJsonWebKey key;
    static int tokens;

    @BeforeAll
    static void startNode() throws Exception {
        dir = Files.createTempDirectory("weir-oauth");
        key = RsaJwkGenerator.generateJwk(2048);
        key.setKeyId("idp-key-1");
        Files.writeString(dir.resolve("jwks.json"), new JsonWebKeySet(key).toJson());
        node = WeirNode.startWithEnv(Map.of("WEIR_ADMIN_TOKEN", ADMIN_TOKEN),
                "--oauth-jwks", dir.resolve("jwks.json").toString(), "--oauth-issuer", ISSUER,
                "--oauth-audience", AUDIENCE + ",other", "--max-reauth-ms", "3000");
        var admin = new Properties();
        admin.put("bootstrap.servers", node.bootstrap());
        admin.put("security.protocol", "SASL_PLAINTEXT");
        admin.put("sasl.mechanism", "PLAIN");
        admin.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required "
                + "username=\"admin\" password=\"" + ADMIN_TOKEN + "\";");
        try (Admin a = Admin.create(admin)) {
            a.createTopics(List.of(new NewTopic("oauth-orders", 1, (short) 1))).all().get();
            var topic = new ResourcePattern(ResourceType.TOPIC, "oauth-orders", PatternType.LITERAL);
            var group = new ResourcePattern(ResourceType.GROUP, "oauth-readers", PatternType.LITERAL);
            var acls = new ArrayList<AclBinding>();
            for (AclOperation op : List.of(AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)) {
                acls.add(new AclBinding(topic, new AccessControlEntry("User:alice", "*", op, AclPermissionType.ALLOW)));
            }
            acls.add(new AclBinding(group, new AccessControlEntry("User:alice", "*", AclOperation.READ,
                    AclPermissionType.ALLOW)));
            a.createAcls(acls).all().get();
        }
    }

    @AfterAll
    static void stopNode() throws Exception {
        node.close();
    }

    /** A JWT for `sub`, signed by `signer` (null: unsigned), expiring in `expiresInS`. */
    static String jwt(String sub, String issuer, String audience, long expiresInS, RsaJsonWebKey signer)
            throws Exception {
        var claims = new JwtClaims();
        claims.setSubject(sub);
        claims.setIssuer(issuer);
        claims.setAudience(audience);
        claims.setIssuedAtToNow();
        claims.setExpirationTime(NumericDate.fromSeconds(NumericDate.now().getValue() + expiresInS));
        var jws = new JsonWebSignature();
        jws.setPayload(claims.toJson());
        if (signer == null) {
            // alg none, with something where the signature goes (Kafka's
            // client will not send a token of two sections).
            var b64 = java.util.Base64.getUrlEncoder().withoutPadding();
            return b64.encodeToString("{\"alg\":\"none\",\"typ\":\"JWT\"}".getBytes())
                    + "." + b64.encodeToString(claims.toJson().getBytes()) + ".AAAA";
        }
        jws.setKey(signer.getPrivateKey());
        jws.setKeyIdHeaderValue(signer.getKeyId());
        jws.setAlgorithmHeaderValue(AlgorithmIdentifiers.RSA_USING_SHA256);
        return jws.getCompactSerialization();
    }

    /** A client signing in with `token`, read by Kafka's login handler from a file. */
    static Properties client(String token) throws Exception {
        Path file = dir.resolve("token-" + (tokens++) + ".jwt");
        Files.writeString(file, token);
        String url = file.toUri().toString();
        String allowed = System.getProperty("org.apache.kafka.sasl.oauthbearer.allowed.urls", "");
        System.setProperty("org.apache.kafka.sasl.oauthbearer.allowed.urls",
                allowed.isEmpty() ? url : allowed + "," + url);
        var p = new Properties();
        p.put("bootstrap.servers", node.bootstrap());
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "OAUTHBEARER");
        p.put("sasl.oauthbearer.token.endpoint.url", url);
        p.put("sasl.login.callback.handler.class",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("max.block.ms", "15000");
        return p;
    }

    static double metric(Map<org.apache.kafka.common.MetricName, ? extends org.apache.kafka.common.Metric> metrics,
            String name) {
        return metrics.entrySet().stream().filter(e -> e.getKey().name().equals(name))
                .mapToDouble(e -> ((Number) e.getValue().metricValue()).doubleValue()).sum();
    }

    @Test
    void aSignedTokenSignsInAndSignsInAgainOnItsConnections() throws Exception {
        String token = jwt("alice", ISSUER, AUDIENCE, 3600, key);
        List<String> sent = new ArrayList<>();
        try (var producer = new KafkaProducer<String, String>(client(token))) {
            // Past several 3 s sessions: the client signs in again on its
            // connection before each ends, and keeps being served.
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (System.nanoTime() < until || metric(producer.metrics(), "successful-reauthentication-total") < 1) {
                String v = "order " + sent.size();
                producer.send(new ProducerRecord<>("oauth-orders", v)).get(30, TimeUnit.SECONDS);
                sent.add(v);
                assertTrue(sent.size() < 100_000, "no re-authentication seen");
                Thread.sleep(20);
            }
            assertTrue(metric(producer.metrics(), "successful-reauthentication-total") >= 1,
                    "the client never signed in again");
            assertEquals(0, metric(producer.metrics(), "failed-reauthentication-total"));
        }
        var c = client(token);
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.put("group.id", "oauth-readers");
        c.put("auto.offset.reset", "earliest");
        var got = new ArrayList<String>();
        try (var consumer = new KafkaConsumer<String, String>(c)) {
            consumer.subscribe(List.of("oauth-orders"));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (got.size() < sent.size() && System.nanoTime() < deadline) {
                consumer.poll(Duration.ofMillis(200)).forEach(r -> got.add(r.value()));
            }
        }
        assertEquals(sent, got);
    }

    @Test
    void unsignedForeignExpiredAndMisissuedTokensAreRefused() throws Exception {
        RsaJsonWebKey stranger = RsaJwkGenerator.generateJwk(2048);
        stranger.setKeyId("idp-key-1");
        Map<String, String> refused = Map.of(
                "unsigned", jwt("mallory", ISSUER, AUDIENCE, 3600, null),
                "foreign key", jwt("mallory", ISSUER, AUDIENCE, 3600, stranger),
                "other issuer", jwt("mallory", "https://elsewhere.test", AUDIENCE, 3600, key),
                "other audience", jwt("mallory", ISSUER, "someone-else", 3600, key),
                "expired", jwt("mallory", ISSUER, AUDIENCE, -120, key));
        for (var e : refused.entrySet()) {
            try (var producer = new KafkaProducer<String, String>(client(e.getValue()))) {
                var thrown = assertThrows(Exception.class,
                        () -> producer.send(new ProducerRecord<>("oauth-orders", "x")).get(30, TimeUnit.SECONDS),
                        e.getKey() + " token was let in");
                Throwable cause = thrown instanceof ExecutionException ? thrown.getCause() : thrown;
                assertInstanceOf(AuthenticationException.class, cause, e.getKey() + ": " + cause);
            }
        }
        String log = node.log();
        for (String why : List.of("unsigned token", "InvalidSignature", "InvalidIssuer", "InvalidAudience",
                "ExpiredSignature")) {
            assertTrue(log.contains(why), "the node's log says " + why + ":\n" + log);
        }
    }
}
