//! Fleet-wide pauses (the control topic's commands, here driven by hand): a paused route is not
//! fetched from, its running records finish, the ones not started wait, nothing is released for
//! a pause, and a resume or the end of a timed pause starts fetching again; a circuit breaker
//! and a cool-down pause a route through the same commands.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use super::support::{handler, wait_until};
use crate::Outcome;
use crate::control::{Cancel, Controls, JOB_ID, Pause};
use crate::runtime::Worker;
use crate::source::ShareSource;
use crate::testing::{MemoryBroker, ProducedRecord, RecordState};

fn pause(topic: &str, until: Option<SystemTime>) -> Pause {
    Pause {
        topic: topic.to_owned(),
        until,
        reason: "provider outage".to_owned(),
        by: "test".to_owned(),
        at: SystemTime::now(),
        probe: None,
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
    let handled = started.load(Ordering::SeqCst);
    assert_eq!(
        counts.acknowledged, handled,
        "every record that ran was accepted: {counts:?}"
    );
    assert!(
        handled < 50,
        "fetching stopped at the pause ({handled} handled)"
    );
    assert_eq!(
        counts.acquired + counts.acknowledged + counts.available,
        50,
        "the records fetched ahead wait, their locks renewed: {counts:?}"
    );
    assert_eq!(broker.stats().releases, 0, "a pause releases nothing");
    assert_eq!(broker.stats().lock_expiries, 0);
    sender.resume("sms");
    let b = broker.clone();
    wait_until(
        Duration::from_secs(600),
        "every record after the resume",
        move || b.counts().acknowledged == 50,
    )
    .await;
    assert_eq!(broker.stats().releases, 0);
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

/// Waits up to `limit` for `n` records of `broker` to be accepted.
async fn accepted(broker: &MemoryBroker, n: usize, limit: Duration) {
    let b = broker.clone();
    wait_until(limit, "every record accepted", move || {
        b.counts().acknowledged == n
    })
    .await;
}

/// Stops the worker and asserts that nothing was dead-lettered: not by the worker, and not
/// archived by the broker.
async fn stopped_without_dead_letters(
    shutdown: crate::runtime::ShutdownHandle,
    run: tokio::task::JoinHandle<crate::Result<crate::runtime::Summary>>,
    broker: &MemoryBroker,
) {
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    assert_eq!(summary.dead_letters.total(), 0, "{summary:?}");
    assert_eq!(broker.counts().archived, 0);
}

/// The pause of `topic` once the controls have one, within `limit`.
async fn paused_within(controls: &Controls, topic: &str, limit: Duration) -> Pause {
    let c = controls.clone();
    let t = topic.to_owned();
    wait_until(limit, "the route to be paused", move || {
        c.state().paused(&t, SystemTime::now()).is_some()
    })
    .await;
    controls
        .state()
        .paused(topic, SystemTime::now())
        .cloned()
        .expect("paused")
}

/// A handler that fails while `failing` is set and counts its calls.
fn flaky(
    failing: Arc<std::sync::atomic::AtomicBool>,
    calls: Arc<AtomicUsize>,
    outcome: fn() -> Outcome,
) -> impl tower::Service<crate::Job, Response = Outcome, Error = std::convert::Infallible, Future: Send>
+ Send
+ Clone
+ 'static {
    handler(move |_| {
        calls.fetch_add(1, Ordering::SeqCst);
        let failing = failing.load(Ordering::SeqCst);
        let outcome = outcome;
        async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            if failing { outcome() } else { Outcome::Accept }
        }
    })
}

/// On the real clock (pauses end at wall-clock times): an outage trips the breaker, which pauses
/// the route; the records that fail meanwhile use up no attempt (none is dead-lettered with only
/// 2 attempts allowed: a failure that would dead-letter its record opens the breaker before
/// `min_calls`), calls stop, probes run after `open_for`, and once the endpoint is back a
/// probe resumes the route and everything is accepted.
#[tokio::test]
async fn a_circuit_breaker_pauses_the_route_and_its_probe_resumes_it() {
    breaker_outage(false, 2).await;
}

/// The same with a second route, so nothing is fetched ahead: the prober holds 3 records, fewer
/// than PROBE_CALLS, and judges on those (or the pause would lapse unjudged and their last
/// attempts dead-letter them). 3 attempts: with 3 records a second attempt could fail on a window
/// of 4 calls, before the breaker may open.
#[tokio::test]
async fn a_prober_holding_fewer_records_than_its_probes_judges_on_those() {
    breaker_outage(true, 3).await;
}

async fn breaker_outage(second_route: bool, attempts: u16) {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(5))
        .build();
    for i in 0..60 {
        broker.produce("sms", i.to_string());
    }
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let calls = Arc::new(AtomicUsize::new(0));
    let (controls, sender) = Controls::manual();
    let breaker = crate::Breaker::new(0.5, 20, Duration::from_secs(10), Duration::from_secs(1));
    let mut builder = Worker::builder(broker.member("w")).add_route(
        crate::Route::new(
            "sms",
            flaky(failing.clone(), calls.clone(), || Outcome::retry("503")),
        )
        .breaker(breaker),
    );
    if second_route {
        builder = builder.route("emails", handler(|_| async { Outcome::Accept }));
    }
    let worker = builder
        .concurrency(4)
        .max_attempts(attempts)
        .backoff(crate::policy::Backoff::exponential(
            Duration::from_millis(100),
            Duration::from_millis(100),
        ))
        .controls(controls.clone())
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let pause = paused_within(&controls, "sms", Duration::from_secs(10)).await;
    assert!(pause.reason.contains("circuit breaker"), "{pause:?}");
    assert!(pause.by.starts_with("breaker@"), "{pause:?}");
    assert!(pause.probe.is_some(), "{pause:?}");
    // Four open periods of the outage: each ends in PROBE_CALLS probes that fail.
    let at_trip = calls.load(Ordering::SeqCst);
    assert!(at_trip <= 20 + 4, "calls before the trip: {at_trip}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during = calls.load(Ordering::SeqCst) - at_trip;
    assert!(
        during <= 4 * crate::runtime::PROBE_CALLS as usize,
        "calls while open: {during}"
    );
    failing.store(false, Ordering::SeqCst);
    accepted(&broker, 60, Duration::from_secs(20)).await;
    assert!(controls.state().paused("sms", SystemTime::now()).is_none());
    stopped_without_dead_letters(shutdown, run, &broker).await;
    drop(sender);
}

/// A worker that joins an outage late gets records whose earlier attempts failed elsewhere (here
/// two deliveries that never finished): their last attempts fail before its window holds enough
/// calls to judge. Each waits once for the breaker's verdict, the breaker opens on the fifth, and
/// none is dead-lettered for the outage.
#[tokio::test]
async fn last_attempts_wait_for_a_breaker_too_young_to_judge() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(5))
        .build();
    for i in 0..8 {
        broker.produce("sms", i.to_string());
    }
    let crashing = broker.member("crashing");
    for _ in 0..2 {
        assert_eq!(crashing.fetch(8).await.unwrap().len(), 8);
        crashing.reset_session();
    }
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let calls = Arc::new(AtomicUsize::new(0));
    let (controls, _sender) = Controls::manual();
    let breaker = crate::Breaker::new(0.5, 20, Duration::from_secs(10), Duration::from_secs(1));
    let worker = Worker::builder(broker.member("w"))
        .add_route(
            crate::Route::new(
                "sms",
                flaky(failing.clone(), calls.clone(), || Outcome::retry("503")),
            )
            .breaker(breaker),
        )
        .concurrency(8)
        .max_attempts(3)
        .controls(controls.clone())
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let pause = paused_within(&controls, "sms", Duration::from_secs(10)).await;
    assert!(pause.reason.contains("circuit breaker"), "{pause:?}");
    failing.store(false, Ordering::SeqCst);
    accepted(&broker, 8, Duration::from_secs(20)).await;
    stopped_without_dead_letters(shutdown, run, &broker).await;
}

/// An outage spread thin over a fleet: this worker holds 2 records on their last attempt, too
/// few calls for its own window to judge, while 4 other workers' tallies on the control topic
/// count 1 failed call each. The fleet's evidence opens the breaker instead of dead-lettering
/// the records, and both are served once the endpoint is back. Without the tallies the same
/// records are dead-lettered after one wait, as a poison record is.
#[tokio::test]
async fn the_fleets_tallies_open_the_breaker_before_last_attempts_are_dead_lettered() {
    let (dead, paused) = thin_outage(0).await;
    assert_eq!((dead, paused), (2, false), "alone, too few calls to judge");
    let (dead, paused) = thin_outage(4).await;
    assert_eq!((dead, paused), (0, true), "the fleet's tallies decide");
}

/// Two records failing their only attempt on a worker that reads `others` tallies of one failed
/// call each; returns how many were dead-lettered and whether the breaker paused the route.
async fn thin_outage(others: usize) -> (usize, bool) {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(5))
        .build();
    for i in 0..2 {
        broker.produce("sms", i.to_string());
    }
    let (controls, sender) = Controls::manual();
    let now = SystemTime::now();
    for n in 0..others {
        let tally = crate::control::Tally {
            topic: "sms".to_owned(),
            worker: format!("other{n}"),
            calls: 1,
            failed: 1,
            at: now,
            until: now + Duration::from_secs(30),
        };
        let (key, value) = crate::control::command::encode_tally(&tally).expect("encodes");
        assert!(sender.apply_record(Some(key.as_bytes()), Some(&value), "control@0"));
    }
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let calls = Arc::new(AtomicUsize::new(0));
    let breaker = crate::Breaker::new(0.5, 20, Duration::from_secs(30), Duration::from_secs(1));
    let worker = Worker::builder(broker.member("w"))
        .add_route(
            crate::Route::new(
                "sms",
                flaky(failing.clone(), calls.clone(), || Outcome::retry("503")),
            )
            .breaker(breaker),
        )
        .concurrency(2)
        .max_attempts(1)
        .controls(controls.clone())
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let c = controls.clone();
    let b = broker.clone();
    wait_until(
        Duration::from_secs(10),
        "a pause or both dead-lettered",
        move || c.state().paused("sms", SystemTime::now()).is_some() || b.counts().archived == 2,
    )
    .await;
    let paused = controls.state().paused("sms", SystemTime::now()).is_some();
    failing.store(false, Ordering::SeqCst);
    let b = broker.clone();
    wait_until(
        Duration::from_secs(10),
        "every record finished",
        move || b.counts().acknowledged + b.counts().archived == 2,
    )
    .await;
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    drop(sender);
    (
        broker
            .counts()
            .archived
            .max(summary.dead_letters.total() as usize),
        paused,
    )
}

/// A handler's `retry_after` on a route with `cool_down` pauses the route for that long: the
/// record asked to wait runs again after it, with the same attempt.
#[tokio::test]
async fn a_retry_after_cools_the_route_down() {
    let broker = MemoryBroker::new();
    for i in 0..10 {
        broker.produce("sms", i.to_string());
    }
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let calls = Arc::new(AtomicUsize::new(0));
    let (controls, _sender) = Controls::manual();
    let first = failing.clone();
    let worker = Worker::builder(broker.member("w"))
        .add_route(
            crate::Route::new(
                "sms",
                handler(move |_| {
                    let failing = first.swap(false, Ordering::SeqCst);
                    async move {
                        if failing {
                            Outcome::retry_after(Duration::from_secs(2), "429")
                        } else {
                            Outcome::Accept
                        }
                    }
                }),
            )
            .cool_down(),
        )
        .concurrency(1)
        .max_attempts(1)
        .controls(controls.clone())
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let pause = paused_within(&controls, "sms", Duration::from_secs(5)).await;
    let started = std::time::Instant::now();
    assert!(pause.reason.contains("cool-down"), "{pause:?}");
    assert!(pause.probe.is_none());
    accepted(&broker, 10, Duration::from_secs(10)).await;
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "nothing ran during the cool-down ({:?})",
        started.elapsed()
    );
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();
    assert_eq!(
        summary.dead_letters.total(),
        0,
        "one attempt, not spent on the 429: {summary:?}"
    );
    drop(calls);
}

/// Fast handlers get records fetched ahead, which wait in the route's queue: when a cool-down
/// pauses the route, those wait for its end too. With one handler, the call after the 429 comes
/// only once the pause is over.
#[tokio::test]
async fn records_waiting_in_the_queue_do_not_start_inside_a_pause() {
    const ASKS: usize = 300;
    let broker = MemoryBroker::new();
    for i in 0..400 {
        broker.produce("sms", i.to_string());
    }
    let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (controls, _sender) = Controls::manual();
    let seen = starts.clone();
    let worker = Worker::builder(broker.member("w"))
        .add_route(
            crate::Route::new(
                "sms",
                handler(move |_| {
                    let mut starts = seen.lock().unwrap();
                    starts.push(std::time::Instant::now());
                    let outcome = if starts.len() == ASKS {
                        Outcome::retry_after(Duration::from_secs(1), "429")
                    } else {
                        Outcome::Accept
                    };
                    async move { outcome }
                }),
            )
            .cool_down(),
        )
        .concurrency(1)
        .max_attempts(1)
        .controls(controls.clone())
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    accepted(&broker, 400, Duration::from_secs(20)).await;
    stopped_without_dead_letters(shutdown, run, &broker).await;
    let starts = starts.lock().unwrap();
    let (asked, next) = (starts[ASKS - 1], starts[ASKS]);
    assert!(
        next.duration_since(asked) >= Duration::from_millis(900),
        "the next call came {:?} after the 429",
        next.duration_since(asked)
    );
}
