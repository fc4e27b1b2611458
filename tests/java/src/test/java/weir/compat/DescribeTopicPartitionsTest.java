package weir.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.Test;

/**
 * Kafka 4.x's Admin describes topics with DescribeTopicPartitions (key 75,
 * KIP-966) and pages through them with its cursor: a small page size
 * still yields every partition of every topic, in order.
 */
class DescribeTopicPartitionsTest extends OneNode {
    /** How many DescribeTopicPartitions requests the node has served. */
    static long served() throws Exception {
        var r = HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + node.httpPort + "/metrics")).build(),
                HttpResponse.BodyHandlers.ofString());
        return r.body().lines()
                .filter(l -> l.startsWith("weir_request_duration_seconds_count{api=\"DescribeTopicPartitions\"}"))
                .mapToLong(l -> (long) Double.parseDouble(l.substring(l.lastIndexOf(' ') + 1)))
                .sum();
    }

    @Test
    void pagesThroughLargeTopicsWithItsCursor() throws Exception {
        var names = List.of("dtp-a", "dtp-b", "dtp-c");
        var sizes = Map.of("dtp-a", 7, "dtp-b", 1, "dtp-c", 12);
        var topics = new ArrayList<NewTopic>();
        names.forEach(n -> topics.add(new NewTopic(n, sizes.get(n), (short) 1)));
        admin.createTopics(topics).all().get();

        long before = served();
        Map<String, TopicDescription> d = admin.describeTopics(names,
                new DescribeTopicsOptions().partitionSizeLimitPerResponse(3)).allTopicNames().get();
        long requests = served() - before;
        for (String n : names) {
            List<Integer> got = d.get(n).partitions().stream().map(TopicPartitionInfo::partition).toList();
            assertEquals(IntStream.range(0, sizes.get(n)).boxed().toList(), got, n);
            for (TopicPartitionInfo p : d.get(n).partitions()) {
                assertTrue(p.leader() != null && !p.leader().isEmpty(), n + "-" + p.partition() + " has a leader");
                assertEquals(List.of(p.leader()), p.isr(), n + "-" + p.partition());
            }
        }
        // 20 partitions, 3 a page: at least 7 requests, each one served
        // by DescribeTopicPartitions itself.
        assertTrue(requests >= 7, "DescribeTopicPartitions requests: " + requests);

        // The whole cluster's topics, paged too.
        var all = admin.describeTopics(admin.listTopics().names().get(),
                new DescribeTopicsOptions().partitionSizeLimitPerResponse(5)).allTopicNames().get();
        assertEquals(12, all.get("dtp-c").partitions().size());

        var missing = assertThrows(ExecutionException.class,
                () -> admin.describeTopics(List.of("dtp-none")).allTopicNames().get());
        assertInstanceOf(UnknownTopicOrPartitionException.class, missing.getCause());
    }
}
