//! Delayed jobs and durable retries against the MemoryBroker in virtual time: a record waits for
//! its `share.not-before`, long waits move to the delay topic and come back, attempts are counted
//! across moves, and nothing is released (or archived) for waiting.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::support::{handler, wait_until};
use crate::delay::headers::{self, format_not_before};
use crate::dlq::DlqReason;
use crate::policy::Backoff;
use crate::runtime::Worker;
use crate::source::Header;
use crate::testing::{MemoryBroker, MemoryDlq, MemoryMember, ProducedRecord, RecordState};
use crate::{ErrorKind, Outcome, Summary};

/// One handler call: when (since the test began), the attempt, the topic it came from.
type Call = (Duration, u16, String);

fn calls() -> Arc<Mutex<Vec<Call>>> {
    Arc::default()
}

/// Runs `worker` until `done` holds (virtual time, 20 min at most), then shuts it down.
async fn run_until(
    worker: Worker<MemoryMember>,
    what: &str,
    done: impl FnMut() -> bool,
) -> Summary {
    super::support::run_until(worker, Duration::from_secs(1_200), what, done).await
}

fn later(wait: Duration) -> String {
    format_not_before(SystemTime::now() + wait)
}

/// A record that may not run for 30 s runs no earlier (and is held, not released, meanwhile).
#[tokio::test(start_paused = true)]
async fn a_record_runs_no_earlier_than_its_not_before() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(2))
        .build();
    broker.produce_record(
        "jobs",
        ProducedRecord::new("hi").header(headers::NOT_BEFORE, later(Duration::from_secs(30))),
    );
    broker.produce("jobs", "now");
    let start = Instant::now();
    let seen = calls();
    let record = seen.clone();
    let worker = Worker::builder(broker.member("a"))
        .route(
            "jobs",
            handler(move |job| {
                let record = record.clone();
                async move {
                    let value = String::from_utf8_lossy(job.payload().unwrap()).into_owned();
                    record
                        .lock()
                        .unwrap()
                        .push((start.elapsed(), job.attempt(), value));
                    Outcome::Accept
                }
            }),
        )
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, "both accepted", move || {
        b.counts().acknowledged == 2
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen[0].2, "now",
        "the record without a not-before ran first"
    );
    let (at, attempt, value) = &seen[1];
    assert_eq!((value.as_str(), *attempt), ("hi", 1));
    // Wall-clock not-before, virtual test clock: allow the real milliseconds the setup took.
    assert!(
        *at >= Duration::from_millis(29_900) && *at < Duration::from_millis(30_500),
        "ran at {at:?}"
    );
    let stats = broker.stats();
    assert_eq!(stats.releases, 0, "waiting is no release");
    assert_eq!(
        stats.lock_expiries, 0,
        "its lock was renewed while it waited"
    );
    assert_eq!((summary.delayed, summary.moved), (1, 0));
}

/// A record due later than `max_hold` moves to the delay topic (copy first, then the original is
/// accepted) and runs from there when it is due, as its first attempt.
#[tokio::test(start_paused = true)]
async fn a_far_not_before_moves_to_the_delay_topic_and_runs_when_due() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(2))
        .build();
    broker.produce_record(
        "jobs",
        ProducedRecord::new("later")
            .key("k1")
            .header("own", "kept")
            .header(headers::NOT_BEFORE, later(Duration::from_secs(60))),
    );
    let start = Instant::now();
    let seen = calls();
    let record = seen.clone();
    let worker = Worker::builder(broker.member("a"))
        .route(
            "jobs",
            handler(move |job| {
                let record = record.clone();
                async move {
                    record.lock().unwrap().push((
                        start.elapsed(),
                        job.attempt(),
                        job.topic().to_owned(),
                    ));
                    assert_eq!(job.key().map(|k| &k[..]), Some(&b"k1"[..]));
                    assert_eq!(job.origin(), ("jobs", 0, 0), "where it was enqueued");
                    assert!(job.headers().iter().any(|h| &*h.key == "own"));
                    Outcome::Accept
                }
            }),
        )
        .delay(broker.clone())
        .max_hold(Duration::from_secs(10))
        .build()
        .unwrap();
    let s = seen.clone();
    let summary = run_until(worker, "it ran", move || !s.lock().unwrap().is_empty()).await;
    let (at, attempt, topic) = seen.lock().unwrap()[0].clone();
    // The not-before is wall-clock time, the test's clock virtual: the real milliseconds between
    // producing and starting the worker show as a hair of earliness here.
    assert!(
        at >= Duration::from_millis(59_900) && at < Duration::from_millis(60_500),
        "ran at {at:?}"
    );
    assert_eq!((attempt, topic.as_str()), (1, "jobs.delay"));
    assert_eq!(
        broker.record_state("jobs", 0, 0),
        Some(RecordState::Acknowledged)
    );
    // The first copy says where it came from and when it may run; held 10 s at a time, it was
    // written back until it was due.
    let first = broker.record_headers("jobs.delay", 0, 0).unwrap();
    let header = |h: &[Header], key: &str| {
        h.iter()
            .rev()
            .find(|h| &*h.key == key)
            .and_then(|h| h.value.clone())
            .map(|v| String::from_utf8(v.to_vec()).unwrap())
    };
    assert_eq!(
        header(&first, headers::ORIGIN_TOPIC).as_deref(),
        Some("jobs")
    );
    assert_eq!(header(&first, headers::ORIGIN_OFFSET).as_deref(), Some("0"));
    assert_eq!(header(&first, headers::ATTEMPT).as_deref(), Some("0"));
    assert_eq!(header(&first, "own").as_deref(), Some("kept"));
    let copies = broker.records("jobs.delay").len();
    assert!(
        (5..=8).contains(&copies),
        "{copies} copies for a 60 s wait with 10 s holds"
    );
    assert_eq!(broker.stats().releases, 0);
    assert_eq!(summary.moved as usize, copies);
}

/// A retry whose backoff is longer than `max_hold` moves; its next attempt counts the one it
/// used, and with two attempts allowed a second failure is dead-lettered, from the origin topic.
#[tokio::test(start_paused = true)]
async fn a_long_retry_moves_and_its_attempts_count_across_the_move() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(2))
        .build();
    broker.produce("jobs", "flaky");
    let dlq = MemoryDlq::new();
    let start = Instant::now();
    let seen = calls();
    let record = seen.clone();
    let worker = Worker::builder(broker.member("a"))
        .route(
            "jobs",
            handler(move |job| {
                let record = record.clone();
                async move {
                    record.lock().unwrap().push((
                        start.elapsed(),
                        job.attempt(),
                        job.topic().to_owned(),
                    ));
                    Outcome::retry_after(Duration::from_secs(120), "429")
                }
            }),
        )
        .backoff(Backoff::exponential(
            Duration::from_secs(1),
            Duration::from_secs(600),
        ))
        .max_attempts(2)
        .delay(broker.clone())
        .max_hold(Duration::from_secs(10))
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let d = dlq.clone();
    let summary = run_until(worker, "the letter", move || d.len() == 1).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (seen[0].1, seen[1].1),
        (1, 2),
        "attempts counted across the move"
    );
    let gap = seen[1].0 - seen[0].0;
    assert!(
        gap >= Duration::from_secs(120) && gap < Duration::from_millis(120_500),
        "{gap:?}"
    );
    assert_eq!(
        dlq.offsets(),
        vec![("jobs".to_owned(), 0, 0, DlqReason::HandlerError)]
    );
    let letter = &dlq.letters()[0];
    assert_eq!(letter.delivery.delivery_count, 2);
    assert!(
        !letter
            .delivery
            .headers
            .iter()
            .any(|h| headers::is_delay_header(&h.key)),
        "a replayed letter starts afresh"
    );
    assert_eq!(broker.stats().releases, 0);
    assert!(summary.moved >= 1);
}

/// A delay-topic copy delivered again and again without an outcome (a worker crashing on it, here
/// another member whose locks run out) ends in the DLQ at the group's delivery limit, never in the
/// broker's archive.
#[tokio::test(start_paused = true)]
async fn a_delay_copy_at_the_delivery_limit_goes_to_the_dlq_not_the_archive() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(1))
        .delivery_limit(3)
        .build();
    broker.produce_record(
        "jobs.delay",
        ProducedRecord::new("poison")
            .header(headers::NOT_BEFORE, format_not_before(SystemTime::now()))
            .header(headers::ATTEMPT, "0")
            .header(headers::ORIGIN_TOPIC, "jobs")
            .header(headers::ORIGIN_PARTITION, "0")
            .header(headers::ORIGIN_OFFSET, "7"),
    );
    // A member that takes the copy twice and dies with it each time.
    let crasher = broker.member("crasher");
    for _ in 0..2 {
        use crate::source::ShareSource;
        let batch = crasher.fetch(10).await.unwrap();
        assert_eq!(batch.len(), 1);
        tokio::time::advance(Duration::from_millis(1_100)).await;
    }
    assert_eq!(broker.delivery_count("jobs.delay", 0, 0), Some(2));
    let dlq = MemoryDlq::new();
    let worker = Worker::builder(broker.member("a"))
        .route("jobs", handler(|_job| async { Outcome::Accept }))
        .delay(broker.clone())
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let d = dlq.clone();
    let summary = run_until(worker, "the letter", move || d.len() == 1).await;
    assert_eq!(summary.accepted, 0, "the handler never ran");
    assert_eq!(
        dlq.offsets(),
        vec![("jobs".to_owned(), 0, 7, DlqReason::DeliveryLimit)]
    );
    assert_eq!(
        broker.record_state("jobs.delay", 0, 0),
        Some(RecordState::Archived)
    );
    assert_eq!(
        broker.stats().rejects,
        1,
        "rejected after its letter, not archived silently"
    );
}

/// A delay sink that fails for a while: the record keeps its lock and is moved once it works;
/// one that refuses for good stops the worker, releasing the record.
#[tokio::test(start_paused = true)]
async fn a_failing_delay_sink_keeps_the_lock_and_a_refusing_one_stops_the_worker() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(1))
        .build();
    broker.fail_delay_writes(Some(ErrorKind::Io));
    broker.produce_record(
        "jobs",
        ProducedRecord::new("x").header(headers::NOT_BEFORE, later(Duration::from_secs(600))),
    );
    let worker = Worker::builder(broker.member("a"))
        .route("jobs", handler(|_job| async { Outcome::Accept }))
        .delay(broker.clone())
        .max_hold(Duration::from_secs(1))
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        broker.record_state("jobs", 0, 0),
        Some(RecordState::Acquired)
    );
    assert_eq!(broker.stats().lock_expiries, 0);
    broker.fail_delay_writes(None);
    let b = broker.clone();
    wait_until(Duration::from_secs(60), "the move", move || {
        b.record_state("jobs", 0, 0) == Some(RecordState::Acknowledged)
    })
    .await;
    assert_eq!(broker.records("jobs.delay").len(), 1);
    shutdown.shutdown();
    run.await.unwrap().unwrap();

    let broker = MemoryBroker::new();
    broker.fail_delay_writes(Some(ErrorKind::Authorization));
    broker.produce_record(
        "jobs",
        ProducedRecord::new("x").header(headers::NOT_BEFORE, later(Duration::from_secs(600))),
    );
    let worker = Worker::builder(broker.member("a"))
        .route("jobs", handler(|_job| async { Outcome::Accept }))
        .delay(broker.clone())
        .build()
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(120), worker.run())
        .await
        .expect("the worker stops")
        .expect_err("with the sink's error");
    assert_eq!(err.kind(), ErrorKind::Authorization);
    assert!(err.message().contains("delay topic"), "{err}");
    assert_eq!(
        broker.record_state("jobs", 0, 0),
        Some(RecordState::Available)
    );
}

/// At shutdown a record waiting for its not-before moves to the delay topic instead of being
/// released (a release would use up one of its attempts).
#[tokio::test(start_paused = true)]
async fn shutdown_moves_a_waiting_record_instead_of_releasing_it() {
    let broker = MemoryBroker::new();
    broker.produce_record(
        "jobs",
        ProducedRecord::new("x").header(headers::NOT_BEFORE, later(Duration::from_secs(20))),
    );
    let worker = Worker::builder(broker.member("a"))
        .route("jobs", handler(|_job| async { Outcome::Accept }))
        .delay(broker.clone())
        .build()
        .unwrap();
    let b = broker.clone();
    // Its lock renewed (30 s locks, renewed at 15 s): the worker holds it waiting.
    let summary = run_until(worker, "it waits", move || b.stats().renewals >= 1).await;
    assert_eq!(
        broker.record_state("jobs", 0, 0),
        Some(RecordState::Acknowledged)
    );
    assert_eq!(broker.stats().releases, 0);
    assert_eq!(broker.records("jobs.delay").len(), 1);
    assert_eq!((summary.moved, summary.released_on_shutdown), (1, 0));
}

/// A not-before that does not parse is dead-lettered (reason `decode`), never run at a guess.
#[tokio::test(start_paused = true)]
async fn a_malformed_not_before_is_dead_lettered() {
    let broker = MemoryBroker::new();
    broker.produce_record(
        "jobs",
        ProducedRecord::new("x").header(headers::NOT_BEFORE, "next tuesday"),
    );
    let dlq = MemoryDlq::new();
    let worker = Worker::builder(broker.member("a"))
        .route("jobs", handler(|_job| async { Outcome::Accept }))
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let d = dlq.clone();
    let summary = run_until(worker, "the letter", move || d.len() == 1).await;
    assert_eq!(summary.accepted, 0);
    assert_eq!(dlq.letters()[0].reason, DlqReason::Decode);
    assert!(dlq.letters()[0].error.contains("share.not-before"));
}
