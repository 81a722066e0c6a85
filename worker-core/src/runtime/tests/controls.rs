//! Fleet-wide pauses (the control topic's commands, here driven by hand): a paused route is not
//! fetched from, its records already acquired finish, nothing is released for a pause, and a
//! resume or the end of a timed pause starts fetching again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use super::support::{handler, wait_until};
use crate::Outcome;
use crate::control::{Cancel, Controls, JOB_ID, Pause};
use crate::runtime::Worker;
use crate::testing::{MemoryBroker, ProducedRecord, RecordState};

fn pause(topic: &str, until: Option<SystemTime>) -> Pause {
    Pause {
        topic: topic.to_owned(),
        until,
        reason: "provider outage".to_owned(),
        by: "test".to_owned(),
        at: SystemTime::now(),
    }
}

fn states(broker: &MemoryBroker, topic: &str, n: i64, state: RecordState) -> bool {
    (0..n).all(|i| broker.record_state(topic, 0, i) == Some(state))
}

#[tokio::test(start_paused = true)]
async fn a_paused_route_is_not_fetched_until_it_is_resumed() {
    let broker = MemoryBroker::new();
    for i in 0..20 {
        broker.produce("sms", i.to_string());
        broker.produce("emails", i.to_string());
    }
    let (controls, sender) = Controls::manual();
    sender.pause(pause("sms", None));
    let worker = Worker::builder(broker.member("w"))
        .route("sms", handler(|_| async { Outcome::Accept }))
        .route("emails", handler(|_| async { Outcome::Accept }))
        .controls(controls)
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(30), "the emails", move || {
        states(&b, "emails", 20, RecordState::Acknowledged)
    })
    .await;
    // Long after: not one record of the paused route was acquired.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(states(&broker, "sms", 20, RecordState::Available));
    assert_eq!(broker.delivery_count("sms", 0, 0), Some(0));

    sender.resume("sms");
    let b = broker.clone();
    wait_until(
        Duration::from_secs(30),
        "the sms after the resume",
        move || states(&b, "sms", 20, RecordState::Acknowledged),
    )
    .await;
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    assert_eq!(summary.accepted, 40, "{summary:?}");
    assert_eq!(broker.stats().releases, 0);
}

#[tokio::test(start_paused = true)]
async fn records_acquired_before_a_pause_finish_and_none_is_released() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(30))
        .build();
    for i in 0..50 {
        broker.produce("sms", i.to_string());
    }
    let started = Arc::new(AtomicUsize::new(0));
    let counted = started.clone();
    let (controls, sender) = Controls::manual();
    let worker = Worker::builder(broker.member("w"))
        .route(
            "sms",
            handler(move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
                async {
                    // Past half the lock: each is renewed while it runs.
                    tokio::time::sleep(Duration::from_secs(20)).await;
                    Outcome::Accept
                }
            }),
        )
        .concurrency(4)
        .controls(controls)
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let s = started.clone();
    wait_until(Duration::from_secs(10), "the first handlers", move || {
        s.load(Ordering::SeqCst) >= 4
    })
    .await;
    sender.pause(pause("sms", None));
    tokio::time::sleep(Duration::from_secs(120)).await;
    let counts = broker.counts();
    assert_eq!(
        counts.acquired, 0,
        "everything acquired finished: {counts:?}"
    );
    let handled = started.load(Ordering::SeqCst);
    assert_eq!(
        counts.acknowledged, handled,
        "every record acquired ran and was accepted: {counts:?}"
    );
    assert!(
        handled < 50,
        "fetching stopped at the pause ({handled} handled)"
    );
    assert_eq!(broker.stats().releases, 0, "a pause releases nothing");
    assert_eq!(broker.stats().lock_expiries, 0);
    shutdown.shutdown();
    run.await.unwrap().unwrap();
}

/// On the real clock: a pause's `until` is a wall-clock time.
#[tokio::test]
async fn a_timed_pause_ends_by_itself() {
    let broker = MemoryBroker::new();
    for i in 0..10 {
        broker.produce("sms", i.to_string());
    }
    let (controls, sender) = Controls::manual();
    sender.pause(pause(
        "sms",
        Some(SystemTime::now() + Duration::from_millis(1500)),
    ));
    let worker = Worker::builder(broker.member("w"))
        .route("sms", handler(|_| async { Outcome::Accept }))
        .controls(controls)
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        states(&broker, "sms", 10, RecordState::Available),
        "still paused"
    );
    let b = broker.clone();
    wait_until(
        Duration::from_secs(5),
        "the sms after the pause ended",
        move || states(&b, "sms", 10, RecordState::Acknowledged),
    )
    .await;
    shutdown.shutdown();
    run.await.unwrap().unwrap();
}

fn cancel(job_id: &str) -> Cancel {
    Cancel {
        job_id: job_id.to_owned(),
        until: SystemTime::now() + Duration::from_secs(3600),
        reason: "appointment cancelled".to_owned(),
        by: "test".to_owned(),
        at: SystemTime::now(),
    }
}

/// A cancelled job is acknowledged without running; a running one sees its cancellation token
/// fire; a record without a (valid) job id runs as usual.
#[tokio::test(start_paused = true)]
async fn cancelled_jobs_never_run_and_running_ones_are_told_to_stop() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(30))
        .build();
    for (value, id) in [
        ("cancelled-before", Some("job-a")),
        ("cancelled-while-running", Some("job-b")),
        ("plain", None),
        ("bad-id", Some("not a job id")),
    ] {
        let mut record = ProducedRecord::new(value);
        if let Some(id) = id {
            record = record.header(JOB_ID, id.to_owned());
        }
        broker.produce_record("sms", record);
    }
    let (controls, sender) = Controls::manual();
    sender.cancel(cancel("job-a"));
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = ran.clone();
    let worker = Worker::builder(broker.member("w"))
        .route(
            "sms",
            handler(move |job| {
                let seen = seen.clone();
                async move {
                    let value = String::from_utf8_lossy(job.payload().map_or(&[][..], |b| &b[..]))
                        .into_owned();
                    if value == "cancelled-while-running" {
                        tokio::select! {
                            () = job.cancellation().cancelled() => {
                                seen.lock().unwrap().push(format!("{value}: stopped"));
                                return Outcome::Accept;
                            }
                            () = tokio::time::sleep(Duration::from_secs(600)) => {}
                        }
                    }
                    seen.lock().unwrap().push(value);
                    Outcome::Accept
                }
            }),
        )
        .controls(controls)
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let r = ran.clone();
    wait_until(Duration::from_secs(30), "the plain jobs", move || {
        r.lock().unwrap().len() == 2
    })
    .await;
    sender.cancel(cancel("job-b"));
    let b = broker.clone();
    wait_until(Duration::from_secs(30), "every record settled", move || {
        states(&b, "sms", 4, RecordState::Acknowledged)
    })
    .await;
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    let mut ran = ran.lock().unwrap().clone();
    ran.sort();
    assert_eq!(ran, ["bad-id", "cancelled-while-running: stopped", "plain"]);
    assert_eq!(summary.cancelled, 1, "{summary:?}");
    assert_eq!(summary.accepted, 4, "{summary:?}");
}
