//! Support for the integration tests: the broker's address, unique names, topics and records.
//!
//! Every test talks to the real broker that `scripts/test.sh` starts. Nothing here skips a test when
//! the broker is missing: the first call that needs it fails with a message that says so.

pub mod cluster;
pub mod metrics;
mod ports;

pub use ports::reserve_port;

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

/// The broker's bootstrap address: `KAFKA_BOOTSTRAP`, or the one `scripts/kafka.sh` uses.
pub fn bootstrap() -> String {
    std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

/// The Kafka 4.4+ broker of the suites about the broker's own dead-letter queue (KIP-1191):
/// `KAFKA_DLQ_BOOTSTRAP`, which `scripts/test.sh` sets. Without it those tests fail saying so.
pub fn dlq_broker() -> String {
    std::env::var("KAFKA_DLQ_BOOTSTRAP").unwrap_or_else(|_| {
        panic!(
            "KAFKA_DLQ_BOOTSTRAP is not set: start a Kafka 4.4 broker with \
             `KAFKA_VERSION=4.4.0 KAFKA_PORT=9672 scripts/kafka.sh start` and set it to \
             127.0.0.1:9672 (scripts/test.sh does)"
        )
    })
}

/// `bash scripts/kafka.sh ARGS`, without the port and cluster variables of the caller's
/// environment: the caller names the broker it means with `KAFKA_PORT` (and `KAFKA_BROKERS`).
/// A `std` command, so `Drop` impls can run it; `tokio::process::Command::from` makes it async.
pub fn kafka_sh(args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new("bash");
    command
        .arg(format!(
            "{}/../scripts/kafka.sh",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args(args);
    for name in [
        "KAFKA_PORT",
        "KAFKA_BROKERS",
        "KAFKA_CONTROLLER_PORT",
        "KAFKA_SASL_SSL_PORT",
        "KAFKA_MTLS_PORT",
    ] {
        command.env_remove(name);
    }
    command
}

/// A name no other test (or earlier run) uses: `prefix` plus a random suffix.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// The checksum fault-test records carry next to their sequence number (FNV-1a, 32 bits): a
/// handler that checks it notices a corrupted or mixed-up payload.
pub fn checksum(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// The payload of fault-test record `seq`: `{seq}:{checksum}`.
pub fn ledger_record(seq: usize) -> String {
    let seq = seq.to_string();
    let sum = checksum(&seq);
    format!("{seq}:{sum}")
}

/// Every record of `topic`, read from the start up to its end as of the call, in partition and
/// offset order.
pub async fn read_all(topic: String) -> anyhow::Result<Vec<OwnedMessage>> {
    read_all_at(&bootstrap(), topic).await
}

/// [`read_all`] on the broker at `bootstrap`.
pub async fn read_all_at(bootstrap: &str, topic: String) -> anyhow::Result<Vec<OwnedMessage>> {
    let bootstrap = bootstrap.to_owned();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = client_config_at(&bootstrap)
            .set("group.id", unique("reader"))
            .set("enable.auto.commit", "false")
            .create()?;
        let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(10))?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        ensure!(!partitions.is_empty(), "{topic} has no partitions");
        let mut assignment = TopicPartitionList::new();
        let mut left = 0;
        for partition in partitions {
            let (low, high) =
                consumer.fetch_watermarks(&topic, partition, Duration::from_secs(10))?;
            if high > low {
                assignment.add_partition_offset(&topic, partition, Offset::Offset(low))?;
                left += usize::try_from(high - low)?;
            }
        }
        let mut out = Vec::new();
        if left == 0 {
            return Ok(out);
        }
        consumer.assign(&assignment)?;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while out.len() < left {
            ensure!(
                std::time::Instant::now() < deadline,
                "{} of {left} records of {topic} within 60 s",
                out.len()
            );
            if let Some(message) = consumer.poll(Duration::from_millis(200)) {
                out.push(message?.detach());
            }
        }
        out.sort_by_key(|m| (m.partition(), m.offset()));
        Ok(out)
    })
    .await?
}

/// The committed records of partition 0 of `topic` on the broker at `bootstrap`, read to its
/// end: a transaction's commit marker takes an offset of its own, so the read ends at the
/// consumer's position, not at a record count (30 s at most).
pub async fn read_committed_at(bootstrap: &str, topic: &str) -> anyhow::Result<Vec<OwnedMessage>> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = client_config_at(&bootstrap)
            .set("group.id", unique("reader"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()?;
        let (_, end) = consumer.fetch_watermarks(&topic, 0, Duration::from_secs(10))?;
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&topic, 0, Offset::Beginning)?;
        consumer.assign(&assignment)?;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut out = Vec::new();
        loop {
            let at = consumer
                .position()?
                .find_partition(&topic, 0)
                .map(|p| p.offset());
            if end == 0 || matches!(at, Some(Offset::Offset(at)) if at >= end) {
                return Ok(out);
            }
            ensure!(
                std::time::Instant::now() < deadline,
                "{topic} read to {at:?} of {end} within 30 s"
            );
            if let Some(message) = consumer.poll(Duration::from_millis(100)) {
                out.push(message?.detach());
            }
        }
    })
    .await?
}

/// The value of the last header `key` of `message`, as text (lossy).
pub fn header(message: &OwnedMessage, key: &str) -> Option<String> {
    message
        .headers()?
        .iter()
        .filter(|h| h.key == key)
        .last()
        .map(|h| String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned())
}

/// An rdkafka client configuration pointed at the test broker.
pub fn client_config() -> ClientConfig {
    client_config_at(&bootstrap())
}

/// An rdkafka client configuration pointed at the broker at `bootstrap`.
pub fn client_config_at(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    config
}

/// Creates `topic` with `partitions` partitions (replication factor 1) and waits until it exists.
pub async fn create_topic(topic: &str, partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = client_config()
        .create()
        .context("creating an rdkafka admin client")?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &options,
        )
        .await
        .with_context(|| {
            format!(
                "creating topic {topic}: is the broker at {} running?",
                bootstrap()
            )
        })?;
    for result in results {
        if let Err((name, code)) = result {
            bail!("creating topic {name} failed: {code}");
        }
    }
    Ok(())
}

/// Creates `topic` with `partitions` partitions (replication factor 1) and the given topic configs
/// (such as `max.message.bytes`), and waits until it exists.
pub async fn create_topic_with_config(
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> anyhow::Result<()> {
    create_topic_with_config_at(&bootstrap(), topic, partitions, configs).await
}

/// [`create_topic_with_config`] on the broker at `bootstrap`.
pub async fn create_topic_with_config_at(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = client_config_at(bootstrap)
        .create()
        .context("creating an rdkafka admin client")?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for (key, value) in configs {
        new_topic = new_topic.set(key, value);
    }
    let results = admin
        .create_topics(&[new_topic], &options)
        .await
        .with_context(|| {
            format!("creating topic {topic}: is the broker at {bootstrap} running?")
        })?;
    for result in results {
        if let Err((name, code)) = result {
            bail!("creating topic {name} with {configs:?} failed: {code}");
        }
    }
    Ok(())
}

/// An idempotent producer with `acks=all` and the given extra settings.
pub fn producer(extra: &[(&str, &str)]) -> anyhow::Result<FutureProducer> {
    producer_at(&bootstrap(), extra)
}

/// [`producer`] for the broker at `bootstrap`.
pub fn producer_at(bootstrap: &str, extra: &[(&str, &str)]) -> anyhow::Result<FutureProducer> {
    let mut config = client_config_at(bootstrap);
    config
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "30000");
    for (key, value) in extra {
        config.set(*key, *value);
    }
    config.create().context("creating an rdkafka producer")
}

/// Produces `values` to `topic` (partition chosen by the producer unless `partition` is given) and
/// waits until the broker confirmed every one.
pub async fn produce<V: AsRef<[u8]>>(
    producer: &FutureProducer,
    topic: &str,
    partition: Option<i32>,
    values: impl IntoIterator<Item = V>,
) -> anyhow::Result<usize> {
    let mut pending = Vec::new();
    for (index, value) in values.into_iter().enumerate() {
        let key = index.to_string();
        let mut record = FutureRecord::to(topic).key(&key).payload(value.as_ref());
        if let Some(partition) = partition {
            record = record.partition(partition);
        }
        pending.push(
            producer
                .send_result(record)
                .map_err(|(err, _)| anyhow::anyhow!("enqueueing a record for {topic}: {err}"))?,
        );
    }
    let count = pending.len();
    for delivery in pending {
        delivery
            .await
            .context("the producer dropped a record")?
            .map_err(|(err, _)| anyhow::anyhow!("producing to {topic}: {err}"))?;
    }
    Ok(count)
}

/// Writes one record with `key` and `value` to `topic` and waits for the broker's confirmation.
pub async fn produce_keyed(
    producer: &FutureProducer,
    topic: &str,
    key: &str,
    value: &str,
) -> anyhow::Result<()> {
    producer
        .send(
            FutureRecord::to(topic).key(key).payload(value),
            Duration::from_secs(30),
        )
        .await
        .map_err(|(err, _)| anyhow::anyhow!("producing to {topic}: {err}"))?;
    Ok(())
}

/// Checks `condition` every 50 ms until it holds, failing once `limit` has passed: how tests wait
/// for something to happen, instead of sleeping a fixed time.
pub async fn wait_for(
    what: &str,
    limit: Duration,
    mut condition: impl AsyncFnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if condition().await? {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads partition 0 of `topic` from the start until `expected` records arrived (60 s at most),
/// then `quiet` longer to catch any extra one.
pub async fn read_records(
    topic: String,
    expected: usize,
    quiet: Duration,
) -> anyhow::Result<Vec<OwnedMessage>> {
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = client_config()
            .set("group.id", unique("dlq-reader"))
            .set("enable.auto.commit", "false")
            .create()?;
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&topic, 0, Offset::Beginning)?;
        consumer.assign(&assignment)?;
        let mut letters = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while letters.len() < expected {
            ensure!(
                std::time::Instant::now() < deadline,
                "{} of {expected} records in {topic} within 60 s",
                letters.len()
            );
            if let Some(message) = consumer.poll(Duration::from_millis(200)) {
                letters.push(message?.detach());
            }
        }
        let quiet_until = std::time::Instant::now() + quiet;
        while std::time::Instant::now() < quiet_until {
            if let Some(message) = consumer.poll(Duration::from_millis(200)) {
                letters.push(message?.detach());
            }
        }
        Ok(letters)
    })
    .await?
}

/// Runs `worker` until the share group's lag on `topic` is 0 (at most `limit`), then shuts it down
/// gracefully and returns what it did.
pub async fn run_until_drained<S: worker_core::source::ShareSource>(
    worker: worker_core::Worker<S>,
    admin: &worker_core::kafka::Admin,
    group: &str,
    topic: &str,
    limit: Duration,
) -> anyhow::Result<worker_core::Summary> {
    run_until_all_drained(worker, admin, group, &[topic], limit).await
}

/// Runs `worker` until the share group's lag on every one of `topics` is 0, read in their order
/// in one check (at most `limit`), then shuts it down gracefully and returns what it did.
///
/// A worker that moves records to a delay topic writes the copy before it settles the original:
/// with the route's topic first and its delay topic after it, a record is always counted by one
/// of them until it is done.
pub async fn run_until_all_drained<S: worker_core::source::ShareSource>(
    worker: worker_core::Worker<S>,
    admin: &worker_core::kafka::Admin,
    group: &str,
    topics: &[&str],
    limit: Duration,
) -> anyhow::Result<worker_core::Summary> {
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for("the lag to reach 0", limit, async || {
        for topic in topics {
            if admin.share_group_lag(group, topic).await? != 0 {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await?;
    shutdown.shutdown();
    Ok(running.await.context("the worker task")??)
}

/// Creates `topic` (one partition) for batches written with
/// [`produce_raw`](worker_kafka::test_util::produce_raw) and waits until it has a leader.
/// Its retention is unlimited: raw batches carry fixed creation timestamps from 2023, and a log
/// holding only those would be deleted by time-based retention in the middle of a test.
pub async fn create_raw_batch_topic(topic: &str) -> anyhow::Result<()> {
    create_topic_with_config(topic, 1, &[("retention.ms", "-1")]).await?;
    // Creating it again through our own client is a no-op that returns once it has a leader.
    worker_core::kafka::Admin::connect(bootstrap())
        .await?
        .create_topic(topic, 1, 1)
        .await?;
    Ok(())
}

/// Writes `batch` (encoded with
/// [`encode_batch`](worker_kafka::test_util::encode_batch)) to partition 0 of `topic` as it
/// is, and returns the offset the broker gave its first record.
pub async fn produce_batch(topic: &str, batch: bytes::Bytes) -> anyhow::Result<i64> {
    worker_kafka::test_util::produce_raw(&bootstrap(), topic, 0, batch)
        .await
        .with_context(|| format!("producing a raw batch to {topic}"))
}
