package weir.compat;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.common.TopicPartition;

/**
 * What a group member was given and asked to give back, in order (empty
 * callbacks left out), so a test can tell an incremental rebalance from an
 * eager one.
 */
final class Rebalances implements ConsumerRebalanceListener {
    final List<Set<TopicPartition>> revoked = new ArrayList<>();
    final List<Set<TopicPartition>> assigned = new ArrayList<>();

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        if (!partitions.isEmpty()) {
            revoked.add(new HashSet<>(partitions));
        }
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
        if (!partitions.isEmpty()) {
            assigned.add(new HashSet<>(partitions));
        }
    }
}
