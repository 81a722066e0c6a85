//! The failure policy against the MemoryBroker in virtual time: the backoff schedule, the held
//! bound, the last-attempt rule, the delivery limit, decode errors and rejects.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::support::{handler, seq, wait_until};
use crate::dlq::DlqReason;
use crate::policy::Backoff;
use crate::runtime::Worker;
use crate::source::ShareSource;
use crate::testing::{MemoryBroker, MemoryDlq, RecordState};
use crate::{Outcome, Summary};

/// Runs `worker` until `done` holds, then shuts it down and returns its summary.
async fn run_until(
    worker: Worker<crate::testing::MemoryMember>,
    what: &str,
    done: impl FnMut() -> bool,
) -> Summary {
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    wait_until(Duration::from_secs(120), what, done).await;
    shutdown.shutdown();
    run.await.unwrap().unwrap()
}

/// Each retry waits for its backoff — inside `[d(n), 2·d(n))` with jitter — while the record keeps
/// its lock (renewed: 1 s locks, holds up to 8 s, no lock ever expires).
#[tokio::test(start_paused = true)]
async fn retries_follow_the_backoff_schedule_and_keep_their_locks() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(1))
        .delivery_limit(6)
        .build();
    broker.produce("t", "0");
    let backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(4));
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let seen = attempts.clone();
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(move |job| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push((job.attempt(), Instant::now()));
                    if job.attempt() < 5 {
                        Outcome::retry("flaky")
                    } else {
                        Outcome::Accept
                    }
                }
            }),
        )
        .backoff(backoff)
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, "accepted", move || b.counts().acknowledged == 1).await;

    let attempts = attempts.lock().unwrap().clone();
    assert_eq!(
        attempts.iter().map(|a| a.0).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    for pair in attempts.windows(2) {
        let (attempt, gap) = (pair[0].0, pair[1].1 - pair[0].1);
        let (low, high) = backoff.window(attempt);
        // The redelivery itself takes a moment (the release wakes the waiting fetch).
        let slack = Duration::from_millis(20);
        assert!(
            gap >= low && gap < high + slack,
            "attempt {attempt}: gap {gap:?} outside [{low:?}, {high:?})"
        );
    }
    assert_eq!(
        (summary.retried, summary.retries_scheduled, summary.accepted),
        (4, 4, 1)
    );
    let stats = broker.stats();
    assert_eq!(stats.lock_expiries, 0, "held records keep their locks");
    assert_eq!(stats.releases, 4);
    assert!(summary.renewals >= 4, "renewed while held: {summary:?}");
}

/// A handler's `retry_after` replaces the backoff.
#[tokio::test(start_paused = true)]
async fn retry_after_sets_the_hold() {
    let broker = MemoryBroker::new();
    broker.produce("t", "0");
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let seen = attempts.clone();
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(move |job| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(Instant::now());
                    match job.attempt() {
                        1 => Outcome::retry_after(Duration::from_secs(7), "429"),
                        _ => Outcome::Accept,
                    }
                }
            }),
        )
        .build()
        .unwrap();
    let b = broker.clone();
    run_until(worker, "accepted", move || b.counts().acknowledged == 1).await;
    let attempts = attempts.lock().unwrap();
    let gap = attempts[1] - attempts[0];
    assert!(
        gap >= Duration::from_secs(7) && gap < Duration::from_millis(7020),
        "{gap:?}"
    );
}

/// At most `max_held` retries wait out a backoff; the others are released at once and counted.
#[tokio::test(start_paused = true)]
async fn held_retries_are_bounded() {
    let broker = MemoryBroker::new();
    for i in 0..6 {
        broker.produce("t", i.to_string());
    }
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(|job| async move {
                match job.attempt() {
                    1 => Outcome::retry("later"),
                    _ => Outcome::Accept,
                }
            }),
        )
        .concurrency(8)
        .max_held(2)
        .backoff(
            Backoff::exponential(Duration::from_secs(10), Duration::from_secs(10)).jitter(false),
        )
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(5), "the overflow accepted", move || {
        b.counts().acknowledged == 4
    })
    .await;
    let counts = broker.counts();
    assert_eq!(counts.acquired, 2, "two retries held, locked: {counts:?}");
    let b = broker.clone();
    wait_until(Duration::from_secs(15), "all accepted", move || {
        b.counts().acknowledged == 6
    })
    .await;
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    assert_eq!(
        (
            summary.retried,
            summary.retries_scheduled,
            summary.held_overflow
        ),
        (6, 2, 4)
    );
    assert!((0..6).all(|o| broker.delivery_count("t", 0, o) == Some(2)));
}

/// Failures on the last attempt (limit 3: attempts 1 and 2) go to the DLQ with the reason of the
/// failure and are rejected; no record is ever delivered a third time, so none reaches the broker's
/// silent archive.
#[tokio::test(start_paused = true)]
async fn the_last_attempt_goes_to_the_dlq() {
    let broker = MemoryBroker::builder().delivery_limit(3).build();
    for i in 0..4 {
        broker.produce("t", i.to_string());
    }
    let dlq = MemoryDlq::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(move |job| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    match seq(&job) {
                        0 => Outcome::retry("downstream 503"),
                        1 => panic!("handler bug"),
                        2 => std::future::pending().await,
                        _ => Outcome::Accept,
                    }
                }
            }),
        )
        .job_timeout(Duration::from_secs(2))
        .backoff(Backoff::exponential(
            Duration::from_millis(100),
            Duration::from_secs(1),
        ))
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, "three dead letters", move || {
        b.counts().archived == 3
    })
    .await;

    let mut letters = dlq.offsets();
    letters.sort_by_key(|l| l.2);
    let expected = [
        DlqReason::HandlerError,
        DlqReason::Panic,
        DlqReason::Timeout,
    ];
    assert_eq!(letters.len(), 3);
    for (letter, (offset, reason)) in letters.iter().zip((0..).zip(expected)) {
        assert_eq!(
            (letter.0.as_str(), letter.1, letter.2, letter.3),
            ("t", 0, offset, reason)
        );
    }
    for letter in dlq.letters() {
        assert_eq!(letter.delivery.delivery_count, 2);
        assert_eq!(&*letter.handler, "t");
    }
    let by_offset = |o| {
        dlq.letters()
            .into_iter()
            .find(|l| l.delivery.id.offset == o)
            .unwrap()
    };
    assert_eq!(by_offset(0).error, "downstream 503");
    assert_eq!(by_offset(1).error, "handler panicked: handler bug");
    assert_eq!(by_offset(2).error, "the job timed out");
    for offset in 0..3 {
        assert_eq!(broker.delivery_count("t", 0, offset), Some(2));
        assert_eq!(
            broker.record_state("t", 0, offset),
            Some(RecordState::Archived)
        );
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        7,
        "two attempts each, one for the good record"
    );
    assert_eq!(broker.stats().rejects, 3);
    let d = summary.dead_letters;
    assert_eq!(
        (d.handler_error, d.panic, d.timeout, d.total()),
        (1, 1, 1, 3)
    );
    assert_eq!((summary.dlq_written, summary.dlq_failures), (3, 0));
}

/// A record that arrives with its attempts used up (earlier deliveries never finished) goes to the
/// DLQ with reason `delivery_limit` and its handler is not called.
#[tokio::test(start_paused = true)]
async fn a_delivery_at_the_limit_is_dead_lettered_without_the_handler() {
    let broker = MemoryBroker::builder().delivery_limit(3).build();
    broker.produce("t", "0");
    // Two deliveries that never finish: a worker that crashed twice.
    let crashing = broker.member("crashing");
    for _ in 0..2 {
        assert_eq!(crashing.fetch(1).await.unwrap().len(), 1);
        crashing.reset_session();
    }
    assert_eq!(broker.delivery_count("t", 0, 0), Some(2));

    let dlq = MemoryDlq::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
                async { Outcome::Accept }
            }),
        )
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, "archived", move || b.counts().archived == 1).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        dlq.offsets(),
        [("t".to_owned(), 0, 0, DlqReason::DeliveryLimit)]
    );
    assert_eq!(dlq.letters()[0].delivery.delivery_count, 3);
    assert!(dlq.letters()[0].error.contains("delivered 3 times"));
    assert_eq!(summary.dead_letters.delivery_limit, 1);
    assert_eq!(broker.stats().rejects, 1);
}

/// An undecodable payload goes to the DLQ (`decode`) on its first attempt: no retry.
#[tokio::test(start_paused = true)]
async fn undecodable_payloads_go_to_the_dlq_at_once() {
    let broker = MemoryBroker::new();
    broker.produce("t", "{not json");
    let dlq = MemoryDlq::new();
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(|_| async { Outcome::undecodable("expected value at line 1 column 2") }),
        )
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, "archived", move || b.counts().archived == 1).await;
    assert_eq!(dlq.offsets(), [("t".to_owned(), 0, 0, DlqReason::Decode)]);
    let letter = &dlq.letters()[0];
    assert_eq!(letter.error, "expected value at line 1 column 2");
    assert_eq!(letter.delivery.value.as_deref(), Some(&b"{not json"[..]));
    assert_eq!(broker.delivery_count("t", 0, 0), Some(1));
    assert_eq!((summary.dead_letters.decode, summary.retried), (1, 0));
}

/// An explicit reject is dead-lettered (`rejected`) before its REJECT, or with `dlq_on_reject(false)`
/// just rejected.
#[tokio::test(start_paused = true)]
async fn rejects_go_to_the_dlq_unless_switched_off() {
    for on in [true, false] {
        let broker = MemoryBroker::new();
        broker.produce("t", "0");
        let dlq = MemoryDlq::new();
        let worker = Worker::builder(broker.member("a"))
            .route(
                "t",
                handler(|_| async { Outcome::reject("unknown customer") }),
            )
            .dlq(dlq.clone())
            .dlq_on_reject(on)
            .build()
            .unwrap();
        let b = broker.clone();
        let summary = run_until(worker, "archived", move || b.counts().archived == 1).await;
        assert_eq!(summary.rejected, 1);
        assert_eq!(broker.stats().rejects, 1);
        if on {
            assert_eq!(dlq.offsets(), [("t".to_owned(), 0, 0, DlqReason::Rejected)]);
            assert_eq!(dlq.letters()[0].error, "unknown customer");
        } else {
            assert!(dlq.is_empty());
            assert_eq!(summary.dead_letters.total(), 0);
        }
    }
}

/// Without a sink, what would go to the DLQ is rejected (and counted).
#[tokio::test(start_paused = true)]
async fn without_a_sink_dead_letters_are_rejected() {
    let broker = MemoryBroker::new();
    broker.produce("t", "0");
    let worker = Worker::builder(broker.member("a"))
        .route("t", handler(|_| async { Outcome::undecodable("bad") }))
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, "archived", move || b.counts().archived == 1).await;
    assert_eq!(
        (summary.rejected_without_dlq, summary.dead_letters.decode),
        (1, 1)
    );
}

#[test]
fn build_checks_policy_settings() {
    let broker = MemoryBroker::new();
    let err = Worker::builder(broker.member("a"))
        .route("t", handler(|_| async { Outcome::Accept }))
        .max_attempts(0)
        .build()
        .unwrap_err();
    assert!(err.message().contains("max_attempts"), "{err}");
    let err = Worker::builder(broker.member("a"))
        .route("t", handler(|_| async { Outcome::Accept }))
        .dlq_backoff(Backoff::exponential(Duration::ZERO, Duration::from_secs(1)))
        .build()
        .unwrap_err();
    assert!(err.message().contains("dlq_backoff"), "{err}");
}

/// `max_attempts` below the limit: the handler runs that many times, then the DLQ.
#[tokio::test(start_paused = true)]
async fn max_attempts_overrides_the_limit() {
    let broker = MemoryBroker::builder().delivery_limit(10).build();
    broker.produce("t", "0");
    let dlq = MemoryDlq::new();
    let worker = Worker::builder(broker.member("a"))
        .route("t", handler(|_| async { Outcome::retry("no") }))
        .max_attempts(2)
        .backoff(Backoff::exponential(
            Duration::from_millis(10),
            Duration::from_millis(10),
        ))
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let b = broker.clone();
    run_until(worker, "archived", move || b.counts().archived == 1).await;
    assert_eq!(broker.delivery_count("t", 0, 0), Some(2));
    assert_eq!(
        dlq.offsets(),
        [("t".to_owned(), 0, 0, DlqReason::HandlerError)]
    );
}

/// A held retry whose lock renewal fails is dropped from the hold (not released: the lock is gone);
/// the broker delivers it again when the lock runs out.
#[tokio::test(start_paused = true)]
async fn a_held_retry_that_loses_its_lock_comes_back_when_the_lock_ends() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(1))
        .build();
    broker.produce("t", "0");
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let seen = attempts.clone();
    let b = broker.clone();
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(move |job| {
                let (seen, b) = (seen.clone(), b.clone());
                async move {
                    seen.lock().unwrap().push(Instant::now());
                    if job.attempt() == 1 {
                        b.fail_renewals(true);
                        Outcome::retry("later")
                    } else {
                        Outcome::Accept
                    }
                }
            }),
        )
        .backoff(
            Backoff::exponential(Duration::from_secs(10), Duration::from_secs(10)).jitter(false),
        )
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, "accepted", move || b.counts().acknowledged == 1).await;
    let attempts = attempts.lock().unwrap();
    let gap = attempts[1] - attempts[0];
    assert!(
        gap <= Duration::from_millis(1100),
        "back after the lock, not the hold: {gap:?}"
    );
    let stats = broker.stats();
    assert_eq!((stats.releases, stats.lock_expiries), (0, 1));
    assert_eq!(summary.retries_scheduled, 1);
    assert!(summary.renewal_failures >= 1);
}

/// A record the source could not decode goes to the dead-letter sink (reason `decode`) with what
/// was recovered, is rejected once the sink confirmed, and never reaches a handler — even on a
/// topic without a route. Its neighbours are handled as usual.
#[tokio::test(start_paused = true)]
async fn undecodable_records_are_dead_lettered_without_a_handler() {
    use crate::source::Recovered;
    use crate::testing::ProducedRecord;
    let broker = MemoryBroker::new();
    broker.produce("t", "0");
    broker.produce_record(
        "t",
        ProducedRecord::new("raw record bytes")
            .undecodable("offset 1: header 0 key is not UTF-8", Recovered::RawRecord),
    );
    broker.produce("t", "2");
    broker.produce_record(
        "unrouted",
        ProducedRecord::new("").undecodable("record batch 0..=0: CRC mismatch", Recovered::Nothing),
    );
    let dlq = MemoryDlq::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(move |_| {
                counted.fetch_add(1, Ordering::Relaxed);
                async { Outcome::Accept }
            }),
        )
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, "all settled", move || {
        let c = b.counts();
        (c.acknowledged, c.archived) == (2, 2)
    })
    .await;
    assert_eq!(
        calls.load(Ordering::Relaxed),
        2,
        "only the good records ran"
    );
    let letters = dlq.letters();
    assert_eq!(letters.len(), 2);
    for letter in &letters {
        assert_eq!(letter.reason, DlqReason::Decode);
        assert!(letter.error.contains("did not decode"), "{}", letter.error);
    }
    let raw = letters
        .iter()
        .find(|l| l.delivery.id.topic.as_ref() == "t")
        .expect("the letter of t");
    assert_eq!(raw.delivery.id.offset, 1);
    assert_eq!(
        raw.delivery.value.as_deref(),
        Some(&b"raw record bytes"[..])
    );
    assert!(raw.error.contains("not UTF-8"), "{}", raw.error);
    assert_eq!(summary.dead_letters.decode, 2);
    assert_eq!(summary.accepted, 2);
}

/// A worker that cannot read the group's delivery-count limit does not start on a guess: it fails
/// with an error that says how to fix it, and leaves nothing acquired.
#[tokio::test(start_paused = true)]
async fn an_unreadable_delivery_limit_stops_the_start_unless_one_is_assumed() {
    let broker = MemoryBroker::new();
    broker.produce("t", "0");
    broker.fail_limit_reads(true);
    let worker = Worker::builder(broker.member("a"))
        .route("t", handler(|_| async { Outcome::Accept }))
        .build()
        .unwrap();
    let err = worker.run().await.expect_err("no limit, no start");
    assert_eq!(err.kind(), crate::ErrorKind::Config);
    assert!(
        err.message().contains("delivery-count limit")
            && err.message().contains("assume-delivery-limit"),
        "{err}"
    );
    assert_eq!(broker.counts().acquired, 0);

    // With an assumed limit of 2, one attempt is left to handlers: a failing record goes to the
    // dead-letter sink on its first delivery.
    let dlq = MemoryDlq::new();
    let worker = Worker::builder(broker.member("b"))
        .route("t", handler(|_| async { Outcome::retry("down") }))
        .assume_delivery_limit(2)
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let b = broker.clone();
    run_until(worker, "dead-lettered", move || b.counts().archived == 1).await;
    assert_eq!(dlq.offsets()[0].3, DlqReason::HandlerError);
    assert_eq!(dlq.letters()[0].delivery.delivery_count, 1);
}

/// The limit is read again while the worker runs: lowered from 6 to 3, the next failure on
/// attempt 2 is the last one, so it goes to the dead-letter sink instead of a retry the broker
/// would archive.
#[tokio::test(start_paused = true)]
async fn a_changed_delivery_limit_applies_while_the_worker_runs() {
    let broker = MemoryBroker::builder().delivery_limit(6).build();
    let dlq = MemoryDlq::new();
    let worker = Worker::builder(broker.member("a"))
        .route("t", handler(|_| async { Outcome::retry("down") }))
        .backoff(
            Backoff::exponential(Duration::from_millis(100), Duration::from_millis(100))
                .jitter(false),
        )
        .delivery_limit_refresh(Duration::from_secs(5))
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    broker.set_delivery_limit(3);
    tokio::time::sleep(Duration::from_secs(6)).await;
    broker.produce("t", "0");
    let b = broker.clone();
    wait_until(Duration::from_secs(30), "dead-lettered", move || {
        b.counts().archived == 1
    })
    .await;
    shutdown.shutdown();
    run.await.unwrap().unwrap();
    let letters = dlq.letters();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        letters[0].delivery.delivery_count, 2,
        "attempt 2 was the last"
    );
    assert_eq!(letters[0].reason, DlqReason::HandlerError);
}

/// Broker mode needs the broker to write the group's dead letters; a source that has no broker
/// dead-letter queue (the MemoryBroker has none) is refused at start, naming the group and why,
/// before any record is fetched.
#[tokio::test(start_paused = true)]
async fn broker_mode_is_refused_by_a_source_without_a_broker_dead_letter_queue() {
    let broker = MemoryBroker::new();
    broker.produce("t", "0");
    let worker = Worker::builder(broker.member("a"))
        .route("t", handler(|_| async { Outcome::reject("no") }))
        .broker_dlq()
        .build()
        .unwrap();
    let err = worker.run().await.unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Config);
    let text = err.to_string();
    assert!(
        text.contains("broker dead letters") && text.contains("no broker-side dead-letter queue"),
        "{text}"
    );
    assert_eq!(broker.stats().fetches, 0, "nothing was fetched");
}
