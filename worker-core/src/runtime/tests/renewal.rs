//! RENEW in virtual time: slow handlers keep their lock; a lost lock cancels the job and drops
//! its late outcome.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::support::{Checked, handler, run_until, wait_until};
use crate::Outcome;
use crate::runtime::Worker;
use crate::testing::{MemoryBroker, RecordState};

fn broker() -> MemoryBroker {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(1))
        .build();
    broker.produce("jobs", "0");
    broker
}

/// Lock 1 s, handler 5 s: renewed every 0.5 s, delivered once.
#[tokio::test(start_paused = true)]
async fn a_slow_handler_keeps_its_lock() {
    let broker = broker();
    let source = Checked::new(broker.member("w"), 4);
    let renewals = source.renewals.clone();
    let worker = Worker::builder(source)
        .route(
            "jobs",
            handler(|_| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Outcome::Accept
            }),
        )
        .concurrency(4)
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let start = Instant::now();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(30), "accepted", move || {
        b.counts().acknowledged == 1
    })
    .await;
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();

    let at: Vec<u128> = renewals
        .lock()
        .unwrap()
        .iter()
        .map(|t| (*t - start).as_millis())
        .collect();
    assert_eq!(at, (1..=9).map(|i| i * 500).collect::<Vec<_>>());
    assert_eq!(
        broker.record_state("jobs", 0, 0),
        Some(RecordState::Acknowledged)
    );
    assert_eq!(broker.delivery_count("jobs", 0, 0), Some(1));
    let stats = broker.stats();
    assert_eq!((stats.renewals, stats.lock_expiries), (9, 0));
    assert_eq!((summary.renewals, summary.renewal_failures), (9, 0));
    assert_eq!(summary.possible_duplicates, 0);
}

/// Renewals failing: the job's token fires at the first renewal, its late outcome is dropped and
/// counted, and the record is delivered again.
#[tokio::test(start_paused = true)]
async fn a_lost_lock_cancels_the_job_and_drops_its_late_outcome() {
    let broker = broker();
    broker.fail_renewals(true);
    let cancelled_at = Arc::new(Mutex::new(None));
    let seen = cancelled_at.clone();
    let start = Instant::now();
    let worker = Worker::builder(broker.member("w"))
        .route(
            "jobs",
            handler(move |job| {
                let seen = seen.clone();
                async move {
                    if job.attempt() == 1 {
                        // Notices the cancellation but finishes anyway: a late outcome.
                        tokio::select! {
                            () = job.cancelled() => *seen.lock().unwrap() = Some(Instant::now()),
                            () = tokio::time::sleep(Duration::from_secs(5)) => {}
                        }
                        tokio::time::sleep_until(start + Duration::from_secs(5)).await;
                    }
                    Outcome::Accept
                }
            }),
        )
        .concurrency(1)
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, Duration::from_secs(30), "accepted", move || {
        b.counts().acknowledged == 1
    })
    .await;

    let cancelled_at = cancelled_at.lock().unwrap().expect("the token fired");
    assert_eq!(cancelled_at - start, Duration::from_millis(500));
    assert_eq!(summary.renewal_failures, 1);
    assert_eq!(summary.late_acks_dropped, 1);
    assert_eq!(summary.possible_duplicates, 1);
    assert_eq!(
        summary.accepted, 1,
        "only the second delivery's outcome is acknowledged"
    );
    let stats = broker.stats();
    assert_eq!((stats.accepts, stats.lock_expiries), (1, 1));
    assert_eq!(broker.delivery_count("jobs", 0, 0), Some(2));
}

/// Many slow records at once (lock 2 s, handlers 3× the lock, concurrency 256): every lock is
/// kept, every delivery count stays 1, and renewals due together go out together.
#[tokio::test(start_paused = true)]
async fn many_slow_records_all_keep_their_locks() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(2))
        .build();
    broker.create_topic("jobs", 3);
    for i in 0..600 {
        broker.produce("jobs", i.to_string());
    }
    let source = Checked::new(broker.member("w"), 256);
    let renewals = source.renewals.clone();
    let worker = Worker::builder(source)
        .route(
            "jobs",
            handler(|_| async {
                tokio::time::sleep(Duration::from_secs(6)).await;
                Outcome::Accept
            }),
        )
        .concurrency(256)
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, Duration::from_secs(60), "accepted", move || {
        b.counts().acknowledged == 600
    })
    .await;

    assert!((0..3).all(|p| (0..200).all(|o| broker.delivery_count("jobs", p, o) == Some(1))));
    let stats = broker.stats();
    assert_eq!((stats.lock_expiries, stats.renew_failures), (0, 0));
    // Each record is renewed at 1 s, 2 s, ... 5 s of its 6 s, and perhaps at 6 s when the
    // renewal and the handler's end fall on the same instant.
    assert!(
        (600 * 5..=600 * 6).contains(&summary.renewals),
        "{} renewals",
        summary.renewals
    );
    // Records fetched together are renewed together: few distinct instants.
    let mut instants = renewals.lock().unwrap().clone();
    instants.dedup();
    // Three waves of fetches (256, 256, 88 records), each renewed at up to six instants.
    assert!(
        instants.len() <= 3 * 6,
        "{} renewal instants",
        instants.len()
    );
}
