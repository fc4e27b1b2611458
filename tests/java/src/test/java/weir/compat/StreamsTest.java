package weir.compat;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Kafka Streams' word count on one node (`WordCount`), at least once and
 * exactly once.
 */
class StreamsTest extends OneNode {
    @ParameterizedTest
    @ValueSource(strings = {"at_least_once", "exactly_once_v2"})
    void wordCount(String guarantee) throws Exception {
        WordCount.run(node, admin, guarantee, 2, "wc-" + guarantee.replace('_', '-'));
    }
}
