package weir.compat;

import java.time.Duration;
import java.util.List;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;

/** Waiting for a condition the test can check (never a fixed sleep). */
final class Wait {
    private Wait() {}

    /** Checks `done` every 50 ms until it holds; fails after `within`. */
    static void until(BooleanSupplier done, Duration within, String what) throws InterruptedException {
        long deadline = System.nanoTime() + within.toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("not within " + within + ": " + what);
            }
            Thread.sleep(50);
        }
    }

    /**
     * Polls every consumer in turn (a consumer makes progress in its
     * group only while polled) until `done` holds, handing each record
     * to `records`; fails after 60 s.
     */
    static <K, V> void polling(List<KafkaConsumer<K, V>> consumers, BooleanSupplier done, String what,
            Consumer<ConsumerRecord<K, V>> records) {
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("not within 60 s: " + what);
            }
            for (var c : consumers) {
                c.poll(Duration.ofMillis(100)).forEach(records);
            }
        }
    }
}
