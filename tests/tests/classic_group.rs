//! A fatal answer from the broker: the group id belongs to a classic consumer group. The share
//! worker must stop with an error that says so (kind `Group`, naming the group) within 15 s,
//! instead of retrying forever, and must not acknowledge anything.

#[allow(dead_code, unused_imports)]
mod policy_support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, ensure};
use policy_support::{Ledger, Recorded};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use tests::{client_config, create_topic, produce, producer, unique};
use tower::service_fn;
use worker_core::kafka::KafkaSource;
use worker_core::{ErrorKind, Job, Outcome, Worker};

/// A member of classic consumer group `group`: subscribed to `topic`, it read one record and
/// committed its offset. Kept alive (and so in the group) until dropped.
fn classic_member(group: &str, topic: &str) -> anyhow::Result<BaseConsumer> {
    let consumer: BaseConsumer = client_config()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()?;
    consumer.subscribe(&[topic])?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let offset = loop {
        ensure!(
            std::time::Instant::now() < deadline,
            "the classic consumer read nothing from {topic} within 30 s"
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            break message?.offset();
        }
    };
    let mut commit = TopicPartitionList::new();
    commit.add_partition_offset(topic, 0, Offset::Offset(offset + 1))?;
    consumer.commit(&commit, CommitMode::Sync)?;
    Ok(consumer)
}

/// A topic with three records, and a classic consumer group on it that committed an offset.
async fn classic_group() -> anyhow::Result<(String, String, BaseConsumer)> {
    let topic = unique("classic");
    let group = unique("classic-group");
    create_topic(&topic, 1).await?;
    produce(&producer(&[])?, &topic, Some(0), ["a", "b", "c"]).await?;
    let member = {
        let (group, topic) = (group.clone(), topic.clone());
        tokio::task::spawn_blocking(move || classic_member(&group, &topic)).await??
    };
    Ok((topic, group, member))
}

/// The broker's answer itself, without the runtime: the source's fetch fails with a `Group` error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_reports_a_classic_group_id_as_a_group_error() -> anyhow::Result<()> {
    let (topic, group, member) = classic_group().await?;
    let source = KafkaSource::builder(tests::bootstrap(), &group)
        .topic(&topic)
        .max_wait(Duration::from_millis(100))
        .build()
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let err = loop {
        match source.fetch(10).await {
            Err(err) => break err,
            Ok(records) => assert!(records.is_empty(), "fetched {records:?}"),
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the source fetched for 15 s without an error"
        );
    };
    tokio::task::spawn_blocking(move || drop(member)).await?;
    let message = err.to_string();
    assert_eq!(err.kind(), worker_kafka::ErrorKind::Group, "{message}");
    assert!(message.contains(&group), "names the group: {message}");
    assert!(message.contains("consumer or classic group"), "{message}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_consumer_group_id_stops_the_worker_with_a_group_error() -> anyhow::Result<()> {
    let (topic, group, member) = classic_group().await?;
    let ledger = Arc::new(Ledger::default());
    let source = Recorded {
        inner: KafkaSource::builder(tests::bootstrap(), &group)
            .topic(&topic)
            .max_wait(Duration::from_millis(100))
            .build()
            .await?,
        ledger: ledger.clone(),
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let worker = Worker::builder(source)
        .route(
            topic.as_str(),
            service_fn(move |_job: Job| {
                counted.fetch_add(1, Ordering::Relaxed);
                async { Ok::<_, Infallible>(Outcome::Accept) }
            }),
        )
        .build()?;
    let shutdown = worker.shutdown_handle();
    let mut running = tokio::spawn(worker.run());
    let outcome = tokio::time::timeout(Duration::from_secs(15), &mut running).await;
    if outcome.is_err() {
        shutdown.shutdown();
        let _ = tokio::time::timeout(Duration::from_secs(10), running).await;
    }
    tokio::task::spawn_blocking(move || drop(member)).await?;
    let result = outcome
        .context("the worker still runs 15 s after joining a classic group's id")?
        .context("the worker task")?;
    let err = match result {
        Ok(summary) => anyhow::bail!("the worker ended without an error: {summary:?}"),
        Err(err) => err,
    };
    let message = err.to_string();
    assert_eq!(err.kind(), ErrorKind::Group, "{message}");
    assert!(message.contains(&group), "names the group: {message}");
    assert!(
        message.contains("consumer or classic group"),
        "says what the group is: {message}"
    );
    assert_eq!(
        *ledger.acks.lock().expect("ledger"),
        [],
        "nothing acknowledged"
    );
    assert_eq!(ledger.fetched(), 0, "nothing fetched");
    assert_eq!(calls.load(Ordering::Relaxed), 0, "no handler ran");
    Ok(())
}
