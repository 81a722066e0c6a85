package dev.shareworker.bench;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

/**
 * The simulated job. Specs: {@code noop}, {@code sleep:MS}, {@code heavy:FAST_MS:SLOW_MS:SLOW_PERCENT}
 * (e.g. {@code heavy:20:2000:5} = 95% take 20 ms, 5% take 2 s), {@code cpu:US}.
 *
 * <p>{@code cpu:US} burns US microseconds of CPU per record on the thread that runs the handler,
 * synchronously: it spins until the thread's own CPU time ({@link ThreadMXBean#getCurrentThreadCpuTime()},
 * on Linux {@code clock_gettime(CLOCK_THREAD_CPUTIME_ID)}) has advanced by US µs, so time the thread
 * spends preempted does not count. Our worker's {@code cpu:US} is the same loop on the same clock.
 *
 * <p>Which records are slow is a pure function of (partition, offset), so every contender sees the
 * same slow records in the same topic.
 */
final class Handler {
    private final String spec;
    private final long fastMs;
    private final long slowMs;
    private final int slowPercent;
    /** {@code cpu:US}: nanoseconds of thread CPU time per record; 0 for the other handlers. */
    private final long cpuNanos;
    private final ThreadMXBean threads;

    private Handler(String spec, long fastMs, long slowMs, int slowPercent) {
        this(spec, fastMs, slowMs, slowPercent, 0);
    }

    private Handler(String spec, long fastMs, long slowMs, int slowPercent, long cpuNanos) {
        this.spec = spec;
        this.fastMs = fastMs;
        this.slowMs = slowMs;
        this.slowPercent = slowPercent;
        this.cpuNanos = cpuNanos;
        this.threads = cpuNanos > 0 ? ManagementFactory.getThreadMXBean() : null;
        if (threads != null && !threads.isCurrentThreadCpuTimeSupported()) {
            throw new IllegalArgumentException("cpu:US needs thread CPU time, which this JVM does not support");
        }
    }

    static Handler parse(String spec) {
        String[] parts = spec.split(":");
        switch (parts[0]) {
            case "noop":
                return new Handler(spec, 0, 0, 0);
            case "sleep":
                if (parts.length != 2) {
                    throw new IllegalArgumentException("sleep:MS, got " + spec);
                }
                long ms = Long.parseLong(parts[1]);
                return new Handler(spec, ms, ms, 0);
            case "heavy":
                if (parts.length != 4) {
                    throw new IllegalArgumentException("heavy:FAST_MS:SLOW_MS:SLOW_PERCENT, got " + spec);
                }
                return new Handler(spec, Long.parseLong(parts[1]), Long.parseLong(parts[2]), Integer.parseInt(parts[3]));
            case "cpu":
                if (parts.length != 2) {
                    throw new IllegalArgumentException("cpu:US, got " + spec);
                }
                long us = Long.parseLong(parts[1]);
                if (us <= 0) {
                    throw new IllegalArgumentException("cpu:US needs US > 0, got " + spec);
                }
                return new Handler(spec, 0, 0, 0, us * 1_000);
            default:
                throw new IllegalArgumentException("handler must be noop, sleep:MS, heavy:FAST:SLOW:PCT or cpu:US, got " + spec);
        }
    }

    /** The milliseconds this record's job takes. */
    long durationMs(int partition, long offset) {
        if (slowPercent == 0) {
            return fastMs;
        }
        return isSlow(partition, offset) ? slowMs : fastMs;
    }

    /** Runs the job for one record. */
    void handle(int partition, long offset) throws InterruptedException {
        if (cpuNanos > 0) {
            burnCpu();
            return;
        }
        long ms = durationMs(partition, offset);
        if (ms > 0) {
            Thread.sleep(ms);
        }
    }

    /** Spins until this thread's CPU time has advanced by {@code cpuNanos}. */
    private void burnCpu() {
        long start = threads.getCurrentThreadCpuTime();
        while (threads.getCurrentThreadCpuTime() - start < cpuNanos) {
            Thread.onSpinWait();
        }
    }

    String spec() {
        return spec;
    }

    private boolean isSlow(int partition, long offset) {
        // SplitMix64 finaliser: a fixed, well-mixed hash, the same in every contender.
        long z = offset * 0x9E3779B97F4A7C15L + partition;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        z = z ^ (z >>> 31);
        return Long.remainderUnsigned(z, 100) < slowPercent;
    }
}
