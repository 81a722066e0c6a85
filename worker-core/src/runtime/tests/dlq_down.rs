//! A failing dead-letter sink: records for it keep their slots and locks, nothing is accepted or
//! rejected before the sink confirms, fetching pauses, and everything lands once it recovers.

use std::time::Duration;

use super::support::{handler, run_until, seq, wait_until};
use crate::Outcome;
use crate::dlq::DlqReason;
use crate::policy::Backoff;
use crate::runtime::Worker;
use crate::testing::{MemoryBroker, MemoryDlq, RecordState};

/// Records 0..3 are poison (undecodable); the rest are fine.
fn worker(broker: &MemoryBroker, dlq: &MemoryDlq) -> Worker<crate::testing::MemoryMember> {
    Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(|job| async move {
                if seq(&job) < 3 {
                    Outcome::undecodable("not a number we like")
                } else {
                    Outcome::Accept
                }
            }),
        )
        .concurrency(4)
        .dlq(dlq.clone())
        .dlq_backoff(Backoff::exponential(
            Duration::from_millis(200),
            Duration::from_secs(2),
        ))
        .shutdown_grace(Duration::from_secs(2))
        .build()
        .unwrap()
}

fn broker() -> MemoryBroker {
    // Short locks, so a record that is not renewed while it waits would expire.
    MemoryBroker::builder()
        .lock_duration(Duration::from_secs(1))
        .delivery_limit(3)
        .build()
}

#[tokio::test(start_paused = true)]
async fn a_failing_dlq_pauses_fetching_and_everything_lands_when_it_recovers() {
    let broker = broker();
    for i in 0..3 {
        broker.produce("t", i.to_string());
    }
    let dlq = MemoryDlq::new();
    dlq.fail_writes(true);
    let worker = worker(&broker, &dlq);
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());

    let d = dlq.clone();
    wait_until(Duration::from_secs(5), "the sink tried", move || {
        d.attempts() >= 3
    })
    .await;
    // Let the fetch that was already waiting when the sink began failing run out.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let fetches = broker.fetches().len();
    for i in 3..8 {
        broker.produce("t", i.to_string());
    }
    // Half a minute of a failing sink: retries with backoff, locks renewed, nothing fetched.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        dlq.attempts() > 10,
        "writes are retried: {}",
        dlq.attempts()
    );
    assert_eq!(broker.fetches().len(), fetches, "fetching is paused");
    let stats = broker.stats();
    assert_eq!((stats.accepts, stats.rejects, stats.releases), (0, 0, 0));
    assert_eq!(stats.lock_expiries, 0, "their locks are renewed");
    for offset in 0..3 {
        assert_eq!(
            broker.record_state("t", 0, offset),
            Some(RecordState::Acquired)
        );
        assert_eq!(broker.delivery_count("t", 0, offset), Some(1));
    }
    for offset in 3..8 {
        assert_eq!(
            broker.record_state("t", 0, offset),
            Some(RecordState::Available)
        );
    }

    dlq.fail_writes(false);
    let b = broker.clone();
    wait_until(Duration::from_secs(10), "everything settled", move || {
        let c = b.counts();
        (c.archived, c.acknowledged) == (3, 5)
    })
    .await;
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    let mut offsets = dlq.offsets();
    offsets.sort_by_key(|l| l.2);
    assert_eq!(
        offsets,
        (0..3)
            .map(|o| ("t".to_owned(), 0, o, DlqReason::Decode))
            .collect::<Vec<_>>(),
        "each exactly once"
    );
    assert_eq!(summary.dlq_written, 3);
    assert_eq!(summary.dlq_pauses, 1);
    assert!(summary.dlq_failures >= 3 * 5, "{summary:?}");
    assert_eq!(summary.accepted, 5);
    assert_eq!(broker.stats().lock_expiries, 0);
}

/// A write that fails once is tried again; the record is rejected only after it lands.
#[tokio::test(start_paused = true)]
async fn a_failed_write_is_retried_before_the_reject() {
    let broker = broker();
    broker.produce("t", "0");
    let dlq = MemoryDlq::new();
    dlq.fail_next(2);
    let worker = worker(&broker, &dlq);
    let b = broker.clone();
    let summary = run_until(worker, Duration::from_secs(10), "archived", move || {
        b.counts().archived == 1
    })
    .await;
    assert_eq!((dlq.attempts(), dlq.len()), (3, 1));
    assert_eq!((summary.dlq_failures, summary.dlq_written), (2, 1));
}

/// Shutdown with the sink still failing: the records are released (never accepted or rejected)
/// when the grace period ends, and counted.
#[tokio::test(start_paused = true)]
async fn shutdown_with_a_failing_dlq_releases_its_records() {
    let broker = broker();
    for i in 0..3 {
        broker.produce("t", i.to_string());
    }
    let dlq = MemoryDlq::new();
    dlq.fail_writes(true);
    let worker = worker(&broker, &dlq);
    let d = dlq.clone();
    let summary = run_until(
        worker,
        Duration::from_secs(5),
        "the sink tried",
        move || d.attempts() >= 3,
    )
    .await;
    assert_eq!(summary.dlq_released_on_shutdown, 3);
    let stats = broker.stats();
    assert_eq!((stats.accepts, stats.rejects, stats.releases), (0, 0, 3));
    for offset in 0..3 {
        assert_eq!(
            broker.record_state("t", 0, offset),
            Some(RecordState::Available)
        );
    }
    assert!(dlq.is_empty());
}

/// A record whose lock is lost while it waits for the sink is still written (it may be archived
/// at the broker by now, and the letter its only copy), but not rejected: it comes back and is
/// dead-lettered again. Twice, never zero times.
#[tokio::test(start_paused = true)]
async fn a_lock_lost_while_dead_lettering_still_writes_the_letter() {
    let broker = broker();
    broker.produce("t", "0");
    let dlq = MemoryDlq::new();
    dlq.fail_writes(true);
    let b = broker.clone();
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(move |_| {
                let b = b.clone();
                async move {
                    b.fail_renewals(true);
                    Outcome::undecodable("bad")
                }
            }),
        )
        .dlq(dlq.clone())
        .dlq_backoff(Backoff::exponential(
            Duration::from_millis(200),
            Duration::from_secs(1),
        ))
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(10), "the lock expired", move || {
        b.stats().lock_expiries == 1
    })
    .await;
    assert_eq!(broker.record_state("t", 0, 0), Some(RecordState::Available));
    dlq.fail_writes(false);
    let b = broker.clone();
    wait_until(Duration::from_secs(10), "archived", move || {
        b.counts().archived == 1
    })
    .await;
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    let counts: Vec<u16> = dlq
        .letters()
        .iter()
        .map(|l| l.delivery.delivery_count)
        .collect();
    assert_eq!(counts, [1, 2]);
    assert_eq!(
        broker.stats().rejects,
        1,
        "only the second delivery is rejected"
    );
    assert_eq!(summary.possible_duplicates, 1);
    assert!(summary.renewal_failures >= 1);
}

/// A sink that refuses for good (not authorised, no such topic): the worker does not pause
/// forever. It releases the records waiting for the sink (never accepting or rejecting them),
/// finishes the rest gracefully and stops with the sink's error; readiness says why meanwhile.
#[tokio::test(start_paused = true)]
async fn a_sink_that_refuses_for_good_stops_the_worker_with_its_error() {
    let broker = broker();
    for i in 0..6 {
        broker.produce("t", i.to_string());
    }
    let dlq = MemoryDlq::new();
    dlq.fail_permanently(true);
    let worker = worker(&broker, &dlq);
    let health = worker.health();
    let run = tokio::spawn(worker.run());
    let err = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the worker stops by itself")
        .unwrap()
        .expect_err("a refused dead letter is an error");
    assert_eq!(err.kind(), crate::ErrorKind::Dlq);
    assert!(
        err.message().contains("injected permanent failure"),
        "{err}"
    );
    assert!(dlq.is_empty());
    let stats = broker.stats();
    assert_eq!(stats.rejects, 0, "nothing rejected without its letter");
    for offset in 0..3 {
        assert_eq!(
            broker.record_state("t", 0, offset),
            Some(RecordState::Available),
            "poison record {offset} released"
        );
    }
    let why = health.readiness().unwrap_err();
    assert!(
        why.contains("shutting down") || why.contains("dead-letter"),
        "{why}"
    );
}

/// Readiness names a failing sink while it fails, and clears once it recovers.
#[tokio::test(start_paused = true)]
async fn readiness_reports_a_failing_sink_until_it_recovers() {
    let broker = broker();
    broker.produce("t", "0");
    let dlq = MemoryDlq::new();
    dlq.fail_writes(true);
    let worker = worker(&broker, &dlq);
    let health = worker.health();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let h = health.clone();
    wait_until(Duration::from_secs(5), "readiness to fail", move || {
        h.readiness()
            .is_err_and(|why| why.contains("injected failure"))
    })
    .await;
    assert_eq!(health.liveness(Duration::from_secs(2)), Ok(()));
    dlq.fail_writes(false);
    let h = health.clone();
    wait_until(Duration::from_secs(10), "readiness to recover", move || {
        h.readiness().is_ok()
    })
    .await;
    shutdown.shutdown();
    run.await.unwrap().unwrap();
}
