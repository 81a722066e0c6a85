//! Batch handlers against the real broker: a bulk endpoint that fails some items of each batch
//! (those retry and dead-letter on their own, the rest are accepted once), records that linger in
//! a batch past their lock (renewed), and a batch handler that panics or hangs (its records are
//! retried).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use rdkafka::Message;
use rdkafka::message::Headers;
use tests::{produce, producer, read_records, run_until_drained, unique};
use tower::service_fn;
use worker_core::dlq::KafkaDlqSink;
use worker_core::kafka::{Admin, KafkaSource};
use worker_core::policy::Backoff;
use worker_core::{Batch, Job, Outcome, Route, Worker};

/// A topic of `records` records `item-{i}` in one partition, its dead-letter topic, and a group
/// reading it from the start with `lock` locks.
async fn prepared(records: usize, lock: Duration) -> anyhow::Result<(Admin, String, String)> {
    let admin = Admin::connect(tests::bootstrap())
        .await
        .context("connecting to the broker")?;
    let topic = unique("batches");
    let group = unique("batch-workers");
    admin.create_topic(&topic, 1, 1).await?;
    admin.create_topic(&format!("{topic}.dlq"), 1, 1).await?;
    for (key, value) in [
        ("share.auto.offset.reset", "earliest".to_owned()),
        (
            "share.record.lock.duration.ms",
            lock.as_millis().to_string(),
        ),
    ] {
        admin.set_group_config(&group, key, &value).await?;
    }
    let values = (0..records).map(|i| format!("item-{i}"));
    produce(&producer(&[("linger.ms", "5")])?, &topic, Some(0), values).await?;
    Ok((admin, topic, group))
}

async fn source(topic: &str, group: &str) -> anyhow::Result<KafkaSource> {
    Ok(KafkaSource::builder(tests::bootstrap(), group)
        .topic(topic)
        .build()
        .await?)
}

fn item(job: &Job) -> usize {
    let text = job
        .payload()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    text.as_deref()
        .and_then(|t| t.strip_prefix("item-"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

fn short_backoff() -> Backoff {
    Backoff::exponential(Duration::from_millis(100), Duration::from_millis(400))
}

/// The endpoint refuses items 3 and 7 of every ten (a bulk API's per-item errors) and takes the
/// rest: the refused ones are retried on their own and dead-lettered after their last attempt,
/// every other record is accepted exactly once, and the records went in batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_items_retry_and_dead_letter_alone_and_the_rest_are_accepted_once()
-> anyhow::Result<()> {
    const RECORDS: usize = 200;
    let (admin, topic, group) = prepared(RECORDS, Duration::from_secs(30)).await?;
    let taken: Arc<Mutex<HashMap<usize, usize>>> = Arc::default();
    let sizes: Arc<Mutex<Vec<usize>>> = Arc::default();
    let (endpoint_taken, endpoint_sizes) = (taken.clone(), sizes.clone());
    let bulk = service_fn(move |jobs: Vec<Job>| {
        endpoint_sizes.lock().unwrap().push(jobs.len());
        let outcomes = jobs
            .iter()
            .map(|job| match item(job) {
                i if i % 10 == 3 || i % 10 == 7 => Outcome::retry(format!("item {i} refused")),
                i => {
                    *endpoint_taken.lock().unwrap().entry(i).or_default() += 1;
                    Outcome::Accept
                }
            })
            .collect::<Vec<_>>();
        async move { Ok::<_, Infallible>(outcomes) }
    });
    let dlq = KafkaDlqSink::builder(tests::bootstrap(), &group)
        .worker("batch-test")
        .build()?;
    let worker = Worker::builder(source(&topic, &group).await?)
        .add_route(Route::batched(
            topic.as_str(),
            Batch::new(10, Duration::from_millis(100)),
            bulk,
        ))
        .concurrency(40)
        .max_attempts(3)
        .backoff(short_backoff())
        .dlq(dlq)
        .build()?;
    let summary =
        run_until_drained(worker, &admin, &group, &topic, Duration::from_secs(60)).await?;
    let taken = taken.lock().unwrap().clone();
    let refused = |i: &usize| i % 10 == 3 || i % 10 == 7;
    let expected: Vec<usize> = (0..RECORDS).filter(|i| !refused(i)).collect();
    let mut accepted: Vec<usize> = taken.keys().copied().collect();
    accepted.sort_unstable();
    assert_eq!(accepted, expected, "every item not refused was taken");
    assert!(
        taken.values().all(|times| *times == 1),
        "an item was taken twice: {taken:?}"
    );
    let letters = read_records(format!("{topic}.dlq"), 40, Duration::from_secs(1)).await?;
    let mut lettered: Vec<usize> = letters
        .iter()
        .filter_map(|letter| {
            let offset = letter
                .headers()?
                .iter()
                .find(|h| h.key == "share.dlq.offset")?
                .value?;
            std::str::from_utf8(offset).ok()?.parse().ok()
        })
        .collect();
    lettered.sort_unstable();
    let refused_items: Vec<usize> = (0..RECORDS).filter(refused).collect();
    assert_eq!(
        lettered, refused_items,
        "the refused items, dead-lettered alone"
    );
    assert!(letters.iter().all(|l| l.payload().is_some()));
    let sizes = sizes.lock().unwrap().clone();
    assert_eq!(summary.batches, sizes.len() as u64, "{summary:?}");
    assert!(
        sizes.iter().filter(|s| **s == 10).count() >= 10,
        "the records went in full batches: {sizes:?}"
    );
    assert_eq!(
        (
            summary.accepted,
            summary.failed_batches,
            summary.possible_duplicates
        ),
        (160, 0, 0),
        "{summary:?}"
    );
    Ok(())
}

/// Records that wait 5 s for their batch to fill, under 2 s locks, keep their locks (renewed
/// while they wait and while the batch runs): each is handled once, on its first delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_lingering_in_a_batch_have_their_locks_renewed() -> anyhow::Result<()> {
    let (admin, topic, group) = prepared(5, Duration::from_secs(2)).await?;
    let attempts: Arc<Mutex<Vec<(usize, u16)>>> = Arc::default();
    let seen = attempts.clone();
    let bulk = service_fn(move |jobs: Vec<Job>| {
        seen.lock()
            .unwrap()
            .extend(jobs.iter().map(|job| (item(job), job.attempt())));
        let outcomes = vec![Outcome::Accept; jobs.len()];
        async move { Ok::<_, Infallible>(outcomes) }
    });
    let worker = Worker::builder(source(&topic, &group).await?)
        .add_route(Route::batched(
            topic.as_str(),
            Batch::new(100, Duration::from_secs(5)),
            bulk,
        ))
        .concurrency(100)
        .build()?;
    let summary =
        run_until_drained(worker, &admin, &group, &topic, Duration::from_secs(60)).await?;
    let mut attempts = attempts.lock().unwrap().clone();
    attempts.sort_unstable();
    assert_eq!(attempts, (0..5).map(|i| (i, 1)).collect::<Vec<_>>());
    assert!(summary.renewals >= 5, "{summary:?}");
    assert_eq!(
        (summary.accepted, summary.renewal_failures, summary.batches),
        (5, 0, 1),
        "{summary:?}"
    );
    Ok(())
}

/// The first call of the batch handler panics, the second hangs past the route's timeout: their
/// records are retried (attempts 2 and 3) and the third call accepts them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_handler_that_panics_or_hangs_has_its_records_retried() -> anyhow::Result<()> {
    const RECORDS: usize = 20;
    let (admin, topic, group) = prepared(RECORDS, Duration::from_secs(30)).await?;
    let calls = Arc::new(AtomicUsize::new(0));
    let accepted: Arc<Mutex<Vec<(usize, u16)>>> = Arc::default();
    let (counter, taken) = (calls.clone(), accepted.clone());
    let bulk = service_fn(move |jobs: Vec<Job>| {
        let call = counter.fetch_add(1, Ordering::SeqCst);
        let taken = taken.clone();
        async move {
            match call {
                0 => panic!("the provider's SDK gave up"),
                1 => tokio::time::sleep(Duration::from_secs(30)).await,
                _ => {}
            }
            let mut taken = taken.lock().unwrap();
            taken.extend(jobs.iter().map(|job| (item(job), job.attempt())));
            Ok::<_, Infallible>(vec![Outcome::Accept; jobs.len()])
        }
    });
    let worker = Worker::builder(source(&topic, &group).await?)
        .add_route(
            Route::batched(
                topic.as_str(),
                Batch::new(RECORDS, Duration::from_millis(500)),
                bulk,
            )
            .timeout(Duration::from_secs(2)),
        )
        .concurrency(RECORDS)
        .backoff(short_backoff())
        .build()?;
    let summary =
        run_until_drained(worker, &admin, &group, &topic, Duration::from_secs(60)).await?;
    let mut accepted = accepted.lock().unwrap().clone();
    accepted.sort_unstable();
    assert_eq!(
        accepted,
        (0..RECORDS).map(|i| (i, 3)).collect::<Vec<_>>(),
        "every record accepted once, on its third attempt"
    );
    assert_eq!(
        (
            summary.accepted,
            summary.batches,
            summary.failed_batches,
            summary.timed_out
        ),
        (RECORDS as u64, 3, 1, RECORDS as u64),
        "{summary:?}"
    );
    Ok(())
}
