//! Outcomes, routing, panics and timeouts against the MemoryBroker.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::support::{handler, run_until, seq, wait_until};
use crate::runtime::Worker;
use crate::testing::{MemoryBroker, RecordState};
use crate::{ErrorKind, Outcome};

fn broker() -> MemoryBroker {
    MemoryBroker::builder()
        .lock_duration(Duration::from_secs(10))
        .delivery_limit(5)
        .build()
}

#[test]
fn run_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let broker = broker();
    let worker = Worker::builder(broker.member("a"))
        .route("t", handler(|_| async { Outcome::Accept }))
        .build()
        .unwrap();
    let run = worker.run();
    assert_send(&run);
}

#[test]
fn build_checks_routes_and_settings() {
    let broker = broker();
    let err = Worker::builder(broker.member("a")).build().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    let err = Worker::builder(broker.member("a"))
        .route("t", handler(|_| async { Outcome::Accept }))
        .route("t", handler(|_| async { Outcome::Accept }))
        .build()
        .unwrap_err();
    assert!(err.message().contains("two routes"), "{err}");
    let err = Worker::builder(broker.member("a"))
        .route("t", handler(|_| async { Outcome::Accept }))
        .renew_at(1.5)
        .build()
        .unwrap_err();
    assert!(err.message().contains("renew_at"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn outcomes_become_acknowledgements() {
    let broker = broker();
    for i in 0..4 {
        broker.produce("t", i.to_string());
    }
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(|job| async move {
                match (seq(&job), job.attempt()) {
                    (0, _) => Outcome::Accept,
                    (1, 1) => Outcome::retry("try again"),
                    (1, _) => Outcome::Accept,
                    _ => Outcome::reject("never"),
                }
            }),
        )
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, Duration::from_secs(5), "all settled", move || {
        let c = b.counts();
        c.acknowledged == 2 && c.archived == 2
    })
    .await;
    assert_eq!(
        broker.record_state("t", 0, 0),
        Some(RecordState::Acknowledged)
    );
    assert_eq!(broker.delivery_count("t", 0, 1), Some(2));
    assert_eq!(broker.record_state("t", 0, 2), Some(RecordState::Archived));
    assert_eq!(broker.record_state("t", 0, 3), Some(RecordState::Archived));
    assert_eq!(
        (summary.accepted, summary.retried, summary.rejected),
        (2, 1, 2)
    );
    // Four records, one of them delivered again for its retry.
    assert_eq!(summary.fetched, 5);
    assert_eq!(summary.ack_failures.total(), 0);
}

/// An unrouted record is released until its last delivery, which goes down the dead-letter path
/// (here: no sink, so a logged REJECT) instead of the broker's silent archive.
#[tokio::test(start_paused = true)]
async fn records_without_a_route_are_released() {
    let broker = MemoryBroker::builder().delivery_limit(2).build();
    broker.produce("unknown", "0");
    broker.produce("t", "1");
    let worker = Worker::builder(broker.member("a"))
        .route("t", handler(|_| async { Outcome::Accept }))
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(
        worker,
        Duration::from_secs(5),
        "unrouted archived",
        move || b.record_state("unknown", 0, 0) == Some(RecordState::Archived),
    )
    .await;
    assert_eq!(summary.unrouted, 1);
    assert_eq!(summary.dead_letters.delivery_limit, 1);
    assert_eq!(summary.rejected_without_dlq, 1);
    assert_eq!(summary.accepted, 1);
    assert_eq!((broker.stats().releases, broker.stats().rejects), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_is_retried_and_the_worker_lives_on() {
    let broker = broker();
    for i in 0..4 {
        broker.produce("t", i.to_string());
    }
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(|job| async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if job.attempt() == 1 && seq(&job).is_multiple_of(2) {
                    panic!("first attempt of an even record");
                }
                Outcome::Accept
            }),
        )
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, Duration::from_secs(5), "all accepted", move || {
        b.counts().acknowledged == 4
    })
    .await;
    assert_eq!(summary.panicked, 2);
    assert_eq!((summary.retried, summary.accepted), (2, 4));
    assert_eq!(broker.delivery_count("t", 0, 0), Some(2));
    assert_eq!(broker.delivery_count("t", 0, 1), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_service_that_panics_when_called_is_retried() {
    let broker = broker();
    broker.produce("t", "0");
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let service = tower::service_fn(move |_job: crate::Job| {
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("in call");
        }
        std::future::ready(Ok::<_, std::convert::Infallible>(Outcome::Accept))
    });
    let worker = Worker::builder(broker.member("a"))
        .route("t", service)
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, Duration::from_secs(5), "accepted", move || {
        b.counts().acknowledged == 1
    })
    .await;
    assert_eq!((summary.panicked, summary.accepted), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_job_past_its_timeout_is_cancelled_and_retried() {
    let broker = broker();
    broker.produce("t", "0");
    let cancelled = Arc::new(AtomicUsize::new(0));
    let seen = cancelled.clone();
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(move |job| {
                let seen = seen.clone();
                async move {
                    if job.attempt() == 1 {
                        let token = job.cancellation().clone();
                        tokio::spawn(async move {
                            token.cancelled().await;
                            seen.fetch_add(1, Ordering::SeqCst);
                        });
                        std::future::pending::<()>().await;
                    }
                    Outcome::Accept
                }
            }),
        )
        .job_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, Duration::from_secs(5), "accepted", move || {
        b.counts().acknowledged == 1
    })
    .await;
    assert_eq!(summary.timed_out, 1);
    assert_eq!(cancelled.load(Ordering::SeqCst), 1);
    assert_eq!(broker.delivery_count("t", 0, 0), Some(2));
}

#[tokio::test(start_paused = true)]
async fn routes_by_topic() {
    let broker = broker();
    broker.produce("a", "0");
    broker.produce("b", "1");
    let hits = Arc::new(AtomicUsize::new(0));
    let (ha, hb) = (hits.clone(), hits.clone());
    let worker = Worker::builder(broker.member("w"))
        .route(
            "a",
            handler(move |job| {
                let h = ha.clone();
                async move {
                    assert_eq!(job.topic(), "a");
                    h.fetch_add(1, Ordering::SeqCst);
                    Outcome::Accept
                }
            }),
        )
        .route(
            "b",
            handler(move |job| {
                let h = hb.clone();
                async move {
                    assert_eq!(job.topic(), "b");
                    h.fetch_add(10, Ordering::SeqCst);
                    Outcome::Accept
                }
            }),
        )
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(5), "accepted", move || {
        b.counts().acknowledged == 2
    })
    .await;
    shutdown.shutdown();
    run.await.unwrap().unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 11);
}

/// A finished record's acknowledgement overlaps the fetch of its successor (no round trip
/// waited), and the record keeps its slot until the broker answers: at concurrency 1 (and so at
/// most one record fetched ahead) the slot table holds 3 × 2 records, running or being
/// acknowledged.
#[tokio::test(start_paused = true)]
async fn an_acknowledgement_on_the_way_does_not_delay_the_next_fetch() {
    let broker = MemoryBroker::builder()
        .ack_latency(Duration::from_millis(100))
        .build();
    for i in 0..8 {
        broker.produce("t", i.to_string());
    }
    let worker = Worker::builder(broker.member("a"))
        .route(
            "t",
            handler(|_| async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                Outcome::Accept
            }),
        )
        .concurrency(1)
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(5), "accepted", move || {
        b.counts().acknowledged == 8
    })
    .await;
    shutdown.shutdown();
    run.await.unwrap().unwrap();
    let fetches = broker.fetches();
    let after = |i: usize| fetches[i].at - fetches[0].at;
    assert!(fetches[..8].iter().all(|f| f.requested == 1), "{fetches:?}");
    // Record 0 finished at 10 ms: record 1 is fetched at once, not when the answer comes (110 ms).
    for i in 1..6 {
        assert_eq!(
            after(i),
            Duration::from_millis(10 * i as u64),
            "{fetches:?}"
        );
    }
    // Record 5 finished at 60 ms with the answers for records 0 to 4 still out: all six slots
    // are taken until the first answer frees one at 110 ms.
    assert_eq!(after(6), Duration::from_millis(110), "{fetches:?}");
}

/// `poll_ready` is the backpressure: a route limited to 2 concurrent calls never runs more, and
/// its waiting records keep their slots (and locks) until it is ready.
#[tokio::test(start_paused = true)]
async fn a_route_that_is_not_ready_holds_its_records_back() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_millis(200))
        .build();
    for i in 0..12 {
        broker.produce("t", i.to_string());
    }
    let running = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let (r, m) = (running.clone(), max.clone());
    let service = tower::ServiceBuilder::new()
        .concurrency_limit(2)
        .service(handler(move |_| {
            let (r, m) = (r.clone(), m.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                Outcome::Accept
            }
        }));
    let worker = Worker::builder(broker.member("a"))
        .route("t", service)
        .concurrency(8)
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(5), "accepted", move || {
        b.counts().acknowledged == 12
    })
    .await;
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    assert_eq!(max.load(Ordering::SeqCst), 2);
    assert!(summary.renewals > 0, "queued records are renewed");
    let stats = broker.stats();
    assert_eq!((stats.lock_expiries, stats.releases), (0, 0));
    assert!((0..12).all(|o| broker.delivery_count("t", 0, o) == Some(1)));
}

/// A failed ACCEPT is counted by kind and as a possible duplicate.
#[tokio::test(start_paused = true)]
async fn failed_acknowledgements_are_counted() {
    let broker = broker();
    broker.produce("t", "0");
    let member = broker.member("w");
    let same = member.clone();
    let worker = Worker::builder(member)
        .route(
            "t",
            handler(move |job| {
                let same = same.clone();
                async move {
                    if job.attempt() == 1 {
                        // The member's share session is lost while the handler runs.
                        same.reset_session();
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Outcome::Accept
                }
            }),
        )
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, Duration::from_secs(5), "accepted", move || {
        b.counts().acknowledged == 1
    })
    .await;
    assert_eq!(summary.ack_failures.session_lost, 1);
    assert_eq!(summary.ack_failures.total(), 1);
    assert_eq!(summary.possible_duplicates, 1);
    assert_eq!(summary.accepted, 2);
    assert_eq!(broker.delivery_count("t", 0, 0), Some(2));
}
