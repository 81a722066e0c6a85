//! Graceful shutdown on the MemoryBroker.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::support::{handler, seq, wait_until};
use crate::runtime::Worker;
use crate::source::ShareSource;
use crate::testing::{MemoryBroker, RecordState};
use crate::{ErrorKind, Outcome};

/// Shutdown with work in flight: finished records accepted, unfinished ones cancelled and
/// released (another member gets them at once), the worker returns within grace, the source is
/// closed.
#[tokio::test(start_paused = true)]
async fn shutdown_accepts_finished_work_and_releases_the_rest() {
    let broker = MemoryBroker::new();
    for i in 0..20 {
        broker.produce("jobs", i.to_string());
    }
    let cancelled = Arc::new(AtomicUsize::new(0));
    let seen = cancelled.clone();
    let worker = Worker::builder(broker.member("first"))
        .route(
            "jobs",
            handler(move |job| {
                let seen = seen.clone();
                async move {
                    let token = job.cancellation().clone();
                    tokio::spawn(async move {
                        token.cancelled().await;
                        seen.fetch_add(1, Ordering::SeqCst);
                    });
                    // Even records are quick; odd ones finish during the grace period or never.
                    let ms = match seq(&job) {
                        n if n.is_multiple_of(2) => 100,
                        1 => 1_500,
                        _ => 600_000,
                    };
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Outcome::Accept
                }
            }),
        )
        .concurrency(20)
        .shutdown_grace(Duration::from_secs(2))
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(5), "quick ones accepted", move || {
        b.counts().acknowledged == 10
    })
    .await;

    let start = Instant::now();
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    assert!(
        start.elapsed() <= Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(summary.accepted, 11);
    assert_eq!(summary.released_on_shutdown, 9);
    assert_eq!(cancelled.load(Ordering::SeqCst), 9);
    let counts = broker.counts();
    assert_eq!(
        (counts.acknowledged, counts.available, counts.acquired),
        (11, 9, 0)
    );

    // A second member picks the released records up at once.
    let second = broker.member("second");
    let start = Instant::now();
    let batch = second.fetch(100).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(batch.len(), 9);
    assert!(batch.iter().all(|d| d.delivery_count == 2));
    assert_eq!(
        broker.record_state("jobs", 0, 1),
        Some(RecordState::Acknowledged)
    );
}

/// An idle worker stops at once (after its in-flight fetch's short wait) and closes its source.
#[tokio::test(start_paused = true)]
async fn an_idle_worker_stops_promptly() {
    let broker = MemoryBroker::builder()
        .fetch_wait(Duration::from_millis(200))
        .build();
    let member = broker.member("w");
    let worker = Worker::builder(member)
        .route("jobs", handler(|_| async { Outcome::Accept }))
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = Instant::now();
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    assert!(start.elapsed() <= Duration::from_millis(200));
    assert_eq!(summary.fetched, 0);
    // Records produced after shutdown stay for other members.
    broker.produce("jobs", "0");
    assert_eq!(broker.counts().available, 1);
}

/// Records fetched while stopping are released without running.
#[tokio::test(start_paused = true)]
async fn a_fetch_that_lands_during_shutdown_is_released() {
    let broker = MemoryBroker::builder()
        .fetch_wait(Duration::from_secs(1))
        .build();
    let worker = Worker::builder(broker.member("w"))
        .route("jobs", handler(|_| async { panic!("must not run") }))
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The worker's fetch is waiting: signal shutdown, then give it a record in the same instant.
    shutdown.shutdown();
    broker.produce("jobs", "0");
    let summary = run.await.unwrap().unwrap();
    assert_eq!(summary.fetched, 1);
    assert_eq!(summary.released_on_shutdown, 1);
    assert_eq!(summary.panicked, 0);
    assert_eq!(broker.counts().available, 1);
}

/// A source that closes under the worker ends the run with an error.
#[tokio::test(start_paused = true)]
async fn a_closed_source_ends_the_run_with_an_error() {
    let broker = MemoryBroker::new();
    let member = broker.member("w");
    member.close().await.unwrap();
    let worker = Worker::builder(member)
        .route("jobs", handler(|_| async { Outcome::Accept }))
        .build()
        .unwrap();
    let err = worker.run().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
}

/// Every record still held at shutdown is accounted for when the grace period is zero.
#[tokio::test(start_paused = true)]
async fn zero_grace_releases_everything_running() {
    let broker = MemoryBroker::new();
    for i in 0..5 {
        broker.produce("jobs", i.to_string());
    }
    let worker = Worker::builder(broker.member("w"))
        .route(
            "jobs",
            handler(|_| async {
                std::future::pending::<()>().await;
                Outcome::Accept
            }),
        )
        .shutdown_grace(Duration::ZERO)
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(5), "all running", move || {
        b.counts().acquired == 5
    })
    .await;
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    assert_eq!(summary.released_on_shutdown, 5);
    assert_eq!(broker.counts().available, 5);
}

/// Two workers in one group: the first shuts down with 200 records in flight; it returns within
/// grace + 1 s, accepts what finished, and the second worker picks the rest up at once.
#[tokio::test(start_paused = true)]
async fn a_second_worker_picks_up_what_the_first_released() {
    let broker = MemoryBroker::new();
    for i in 0..400 {
        broker.produce("jobs", i.to_string());
    }
    let first = Worker::builder(broker.member("first"))
        .route(
            "jobs",
            handler(|job| async move {
                // One in four finishes within the grace period; the rest would take minutes.
                let ms = if seq(&job).is_multiple_of(4) {
                    500
                } else {
                    300_000
                };
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Outcome::Accept
            }),
        )
        .concurrency(200)
        .shutdown_grace(Duration::from_secs(2))
        .build()
        .unwrap();
    let stop_first = first.shutdown_handle();
    let first = tokio::spawn(first.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(5), "200 in flight", move || {
        b.counts().acquired == 200
    })
    .await;

    let start = Instant::now();
    stop_first.shutdown();
    let summary = first.await.unwrap().unwrap();
    assert!(
        start.elapsed() <= Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(summary.accepted, 50);
    assert_eq!(summary.released_on_shutdown, 150);
    assert_eq!(broker.counts().acquired, 0);

    let second = Worker::builder(broker.member("second"))
        .route("jobs", handler(|_| async { Outcome::Accept }))
        .concurrency(200)
        .build()
        .unwrap();
    let stop_second = second.shutdown_handle();
    let start = Instant::now();
    let second = tokio::spawn(second.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(5), "all accepted", move || {
        b.counts().acknowledged == 400
    })
    .await;
    assert!(
        start.elapsed() <= Duration::from_millis(5),
        "{:?}",
        start.elapsed()
    );
    stop_second.shutdown();
    let summary = second.await.unwrap().unwrap();
    assert_eq!(summary.accepted, 350);
    let redelivered = (0..400)
        .filter(|&o| broker.delivery_count("jobs", 0, o) == Some(2))
        .count();
    assert_eq!(redelivered, 150);
}

/// An answer no retry can change (access refused, the group of another type, share groups off)
/// stops the worker with that error instead of retrying forever: records that never started are
/// released, running handlers finish within the grace period and are acknowledged.
#[tokio::test(start_paused = true)]
async fn a_fatal_fetch_error_stops_the_worker_with_it() {
    let broker = MemoryBroker::new();
    for i in 0..4 {
        broker.produce("t", i.to_string());
    }
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(|_| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Outcome::Accept
            }),
        )
        .concurrency(2)
        .build()
        .unwrap();
    let health = worker.health();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(5), "two running", move || {
        b.counts().acquired == 2
    })
    .await;
    broker.fail_fetches(Some(ErrorKind::Authorization));
    let err = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the worker stops by itself")
        .unwrap()
        .expect_err("the fatal error comes back");
    assert_eq!(err.kind(), ErrorKind::Authorization);
    let c = broker.counts();
    assert_eq!((c.acknowledged, c.acquired), (2, 0), "{c:?}");
    assert!(health.readiness().is_err());
}

/// Any other fetch error is retried with backoff; readiness says why meanwhile and clears once
/// fetching works again.
#[tokio::test(start_paused = true)]
async fn a_passing_fetch_error_is_retried_and_shown_in_readiness() {
    let broker = MemoryBroker::new();
    broker.fail_fetches(Some(ErrorKind::Io));
    let worker = Worker::builder(broker.member("a"))
        .route("t", handler(|_| async { Outcome::Accept }))
        .build()
        .unwrap();
    let health = worker.health();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let h = health.clone();
    wait_until(Duration::from_secs(5), "readiness to fail", move || {
        h.readiness()
            .is_err_and(|why| why.contains("fetching fails"))
    })
    .await;
    broker.fail_fetches(None);
    broker.produce("t", "0");
    let (b, h) = (broker.clone(), health.clone());
    wait_until(Duration::from_secs(30), "recovered", move || {
        b.counts().acknowledged == 1 && h.readiness().is_ok()
    })
    .await;
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    assert!(summary.fetch_errors >= 1);
}
