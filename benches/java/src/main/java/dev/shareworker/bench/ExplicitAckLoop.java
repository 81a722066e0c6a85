package dev.shareworker.bench;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The share-consumer loop users write today: {@code share.acknowledgement.mode=explicit}, poll,
 * run the handler on each record in turn, {@code acknowledge(record, ACCEPT)}, {@code commitAsync()}
 * once per poll. {@code --threads K} runs K such loops, each with its own consumer (the usual way to
 * get concurrency out of the Java client).
 *
 * <p>Stops when {@code --records N} records were handled (0 = never), after {@code --idle-timeout-ms}
 * without records, or on SIGTERM; the rest of the current batch is released unprocessed, then
 * {@code commitSync()}, {@code close()}, and one JSON line on
 * stdout. Latency is from the record's timestamp (CreateTime, i.e. produce time) to its acknowledge
 * call; on a pre-filled topic that includes the time the record waited in the topic. With
 * {@code --latency-basis commit} it is from the record's timestamp to the acknowledgement commit
 * callback reporting that record's acknowledgement as committed without error (the callback runs on
 * the loop's thread, inside a later {@code poll} or {@code commit} call).
 *
 * <pre>
 * --bootstrap-server B --topic T --group G [--records N] [--threads 1] [--max-poll-records 500]
 * [--handler noop|sleep:MS|heavy:FAST:SLOW:PCT|cpu:US] [--acquire-mode batch_optimized|record_limit]
 * [--idle-timeout-ms 60000] [--label NAME] [--latency-basis acknowledge|commit] [--property k=v ...]
 * [--command-config FILE]
 * </pre>
 *
 * <p>{@code --command-config FILE} loads client properties from a file first (as Kafka's own tools
 * do), e.g. {@code security.protocol=SASL_SSL} with its SASL and truststore settings; the options
 * above and {@code --property} override it.
 */
public final class ExplicitAckLoop {
    private static final List<String> OPTIONS = List.of("bootstrap-server", "topic", "group", "records",
        "threads", "max-poll-records", "handler", "acquire-mode", "idle-timeout-ms", "label", "check-duplicates", "latency-basis",
        "command-config");

    private final AtomicBoolean stopping = new AtomicBoolean();
    private final AtomicLong handled = new AtomicLong();
    private final AtomicLong redelivered = new AtomicLong();
    private final AtomicLong commitFailures = new AtomicLong();
    private final AtomicLong lastRecordNanos = new AtomicLong();
    private final AtomicLong duplicates = new AtomicLong();
    /** (partition, offset) pairs seen, only with --check-duplicates true (it costs memory). */
    private java.util.Set<String> seen;
    /** When any thread last received records: the idle timeout is for the whole process. */
    private final AtomicLong lastPollWithRecordsMs = new AtomicLong(System.currentTimeMillis());

    public static void main(String[] argv) throws InterruptedException, java.io.IOException {
        Args args;
        try {
            args = new Args(argv, OPTIONS);
        } catch (IllegalArgumentException e) {
            System.err.println("ExplicitAckLoop: " + e.getMessage());
            System.exit(2);
            return;
        }
        new ExplicitAckLoop().run(args);
    }

    private void run(Args args) throws InterruptedException, java.io.IOException {
        long startNanos = System.nanoTime();
        String topic = args.required("topic");
        long target = args.getLong("records", 0);
        int threads = args.getInt("threads", 1);
        int maxPollRecords = args.getInt("max-poll-records", 500);
        long idleTimeoutMs = args.getLong("idle-timeout-ms", 60_000);
        Handler handler = Handler.parse(args.get("handler", "noop"));
        String acquireMode = args.get("acquire-mode", "");
        boolean commitBasis = args.get("latency-basis", "acknowledge").equals("commit");
        if (Boolean.parseBoolean(args.get("check-duplicates", "false"))) {
            seen = java.util.concurrent.ConcurrentHashMap.newKeySet();
        }

        Properties props = new Properties();
        String commandConfig = args.get("command-config", "");
        if (!commandConfig.isEmpty()) {
            try (java.io.Reader in = java.nio.file.Files.newBufferedReader(java.nio.file.Path.of(commandConfig))) {
                props.load(in);
            }
        }
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.required("bootstrap-server"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args.required("group"));
        props.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.toString(maxPollRecords));
        if (!acquireMode.isEmpty()) {
            props.put(ConsumerConfig.SHARE_ACQUIRE_MODE_CONFIG, acquireMode);
        }
        for (String kv : args.properties()) {
            int eq = kv.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("--property k=v, got " + kv);
            }
            props.put(kv.substring(0, eq), kv.substring(eq + 1));
        }

        List<KafkaShareConsumer<byte[], byte[]>> consumers = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            Properties own = new Properties();
            own.putAll(props);
            own.put(ConsumerConfig.CLIENT_ID_CONFIG, args.required("group") + "-" + i);
            consumers.add(new KafkaShareConsumer<>(own, new ByteArrayDeserializer(), new ByteArrayDeserializer()));
        }

        List<LatencyHistogram> histograms = new ArrayList<>();
        CountDownLatch reported = new CountDownLatch(1);
        List<Thread> workers = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            LatencyHistogram histogram = new LatencyHistogram();
            histograms.add(histogram);
            KafkaShareConsumer<byte[], byte[]> consumer = consumers.get(i);
            Thread worker = new Thread(() -> loop(consumer, topic, handler, target, idleTimeoutMs, histogram, commitBasis),
                "share-loop-" + i);
            workers.add(worker);
        }

        Thread hook = new Thread(() -> {
            stopping.set(true);
            consumers.forEach(KafkaShareConsumer::wakeup);
            try {
                // The JVM halts when this hook returns: wait until main has printed the summary.
                reported.await(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        Runtime.getRuntime().addShutdownHook(hook);

        workers.forEach(Thread::start);
        for (Thread worker : workers) {
            worker.join();
        }
        long endNanos = System.nanoTime();

        LatencyHistogram all = new LatencyHistogram();
        histograms.forEach(all::add);
        long records = handled.get();
        long lastNanos = lastRecordNanos.get() == 0 ? endNanos : lastRecordNanos.get();
        double elapsed = (endNanos - startNanos) / 1e9;
        double activeElapsed = (lastNanos - startNanos) / 1e9;
        System.out.printf(java.util.Locale.ROOT,
            "{\"contender\":\"%s\",\"ack_mode\":\"explicit\",\"threads\":%d,\"max_poll_records\":%d,"
                + "\"acquire_mode\":\"%s\",\"handler\":\"%s\",\"records\":%d,\"redelivered\":%d,"
                + "\"commit_failures\":%d,\"duplicates\":%s,\"elapsed_s\":%.3f,\"last_ack_s\":%.3f,\"records_per_s\":%.1f,"
                + "\"latency_basis\":\"%s\",\"latency_ms\":%s}%n",
            args.get("label", "java-explicit"), threads, maxPollRecords,
            acquireMode.isEmpty() ? "client default" : acquireMode, handler.spec(), records,
            redelivered.get(), commitFailures.get(), seen == null ? "null" : Long.toString(duplicates.get()), elapsed, activeElapsed,
            activeElapsed > 0 ? records / activeElapsed : 0.0,
            commitBasis ? "record timestamp to the commit callback for its acknowledgement"
                : "record timestamp to acknowledge", all.toJson());
        System.out.flush();
        reported.countDown();
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException e) {
            // Already shutting down (SIGTERM): the hook is running and has seen the workers finish.
        }
    }

    private void loop(KafkaShareConsumer<byte[], byte[]> consumer, String topic, Handler handler, long target,
                      long idleTimeoutMs, LatencyHistogram histogram, boolean commitBasis) {
        // With --latency-basis commit: record timestamps by partition and offset, from acknowledge
        // until the commit callback reports the acknowledgement (the callback runs on this thread).
        java.util.Map<Integer, java.util.Map<Long, Long>> pending = new java.util.HashMap<>();
        consumer.setAcknowledgementCommitCallback((offsets, exception) -> {
            if (exception != null) {
                commitFailures.incrementAndGet();
            }
            if (!commitBasis) {
                return;
            }
            long now = System.currentTimeMillis();
            offsets.forEach((partition, acked) -> {
                java.util.Map<Long, Long> byOffset = pending.get(partition.partition());
                if (byOffset == null) {
                    return;
                }
                for (Long offset : acked) {
                    Long timestamp = byOffset.remove(offset);
                    if (timestamp != null && exception == null) {
                        histogram.record(now - timestamp);
                    }
                }
            });
        });
        consumer.subscribe(List.of(topic));
        try {
            while (!stopping.get()) {
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = consumer.poll(Duration.ofMillis(100));
                } catch (WakeupException e) {
                    break;
                }
                long now = System.currentTimeMillis();
                if (records.isEmpty()) {
                    if (now - lastPollWithRecordsMs.get() > idleTimeoutMs) {
                        System.err.println("ExplicitAckLoop: no records for " + idleTimeoutMs + " ms, stopping");
                        stopping.set(true);
                    }
                    continue;
                }
                lastPollWithRecordsMs.set(now);
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    if (stopping.get()) {
                        // Target reached or SIGTERM: hand the rest of the batch back unprocessed.
                        consumer.acknowledge(record, AcknowledgeType.RELEASE);
                        continue;
                    }
                    try {
                        handler.handle(record.partition(), record.offset());
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        consumer.acknowledge(record, AcknowledgeType.RELEASE);
                        continue;
                    }
                    consumer.acknowledge(record, AcknowledgeType.ACCEPT);
                    if (commitBasis) {
                        pending.computeIfAbsent(record.partition(), p -> new java.util.HashMap<>())
                            .put(record.offset(), record.timestamp());
                    } else {
                        histogram.record(System.currentTimeMillis() - record.timestamp());
                    }
                    if (seen != null && !seen.add(record.partition() + ":" + record.offset())) {
                        duplicates.incrementAndGet();
                        System.err.println("ExplicitAckLoop: duplicate " + record.partition() + ":" + record.offset()
                            + " delivery count " + record.deliveryCount());
                    }
                    if (record.deliveryCount().orElse((short) 1) > 1) {
                        redelivered.incrementAndGet();
                    }
                    lastRecordNanos.set(System.nanoTime());
                    if (handled.incrementAndGet() == target) {
                        stopping.set(true);
                    }
                }
                consumer.commitAsync();
            }
        } finally {
            try {
                consumer.commitSync(Duration.ofSeconds(10)).forEach((partition, failure) -> {
                    if (failure.isPresent()) {
                        commitFailures.incrementAndGet();
                        System.err.println("ExplicitAckLoop: final commit for " + partition + ": " + failure.get());
                    }
                });
            } catch (RuntimeException e) {
                System.err.println("ExplicitAckLoop: final commitSync failed: " + e);
            }
            consumer.close(Duration.ofSeconds(10));
        }
    }
}
