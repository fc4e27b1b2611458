package weir.compat;

import java.time.Duration;
import java.util.function.BooleanSupplier;

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
}
