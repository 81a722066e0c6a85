package dev.shareworker.bench;

/**
 * Latency counts in milliseconds: exact below 128 ms, then 64 buckets per power of two (≤ 1.6%
 * error). About 18 KiB per instance, so one per thread does not distort peak RSS.
 */
final class LatencyHistogram {
    private static final int EXACT = 128;
    private static final int SUB = 64;
    private static final int BUCKETS = EXACT + (63 - 7) * SUB;
    private final long[] counts = new long[BUCKETS];
    private long total;
    private long max;

    void record(long ms) {
        long v = Math.max(0, ms);
        counts[index(v)]++;
        total++;
        max = Math.max(max, v);
    }

    void add(LatencyHistogram other) {
        for (int i = 0; i < BUCKETS; i++) {
            counts[i] += other.counts[i];
        }
        total += other.total;
        max = Math.max(max, other.max);
    }

    long total() {
        return total;
    }

    /** The upper bound of the bucket holding the q-quantile (never above the maximum); -1 when empty. */
    long quantile(double q) {
        if (total == 0) {
            return -1;
        }
        long rank = Math.max(1, (long) Math.ceil(q * total));
        long seen = 0;
        for (int i = 0; i < BUCKETS; i++) {
            seen += counts[i];
            if (seen >= rank) {
                return Math.min(upperBound(i), max);
            }
        }
        return max;
    }

    String toJson() {
        if (total == 0) {
            return "null";
        }
        return String.format("{\"p50\":%d,\"p99\":%d,\"p999\":%d,\"max\":%d}",
            quantile(0.50), quantile(0.99), quantile(0.999), max);
    }

    private static int index(long v) {
        if (v < EXACT) {
            return (int) v;
        }
        int exponent = 63 - Long.numberOfLeadingZeros(v);
        int shift = exponent - 6;
        return EXACT + (exponent - 7) * SUB + (int) ((v >>> shift) - SUB);
    }

    private static long upperBound(int index) {
        if (index < EXACT) {
            return index;
        }
        int exponent = (index - EXACT) / SUB + 7;
        int shift = exponent - 6;
        long sub = (index - EXACT) % SUB + SUB;
        return ((sub + 1) << shift) - 1;
    }
}
