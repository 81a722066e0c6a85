//! Telemetry: each metric of [`telemetry::names`] moving as the records go through. The `process`
//! span of every record is tested in `tests/record_spans.rs`, a test binary of its own: spans need
//! a global subscriber, and one installed while other tests register the same callsites on their
//! threads can miss them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

use super::support::{handler, run_until, seq, wait_until};
use crate::Outcome;
use crate::Route;
use crate::policy::Backoff;
use crate::runtime::Worker;
use crate::telemetry::names;
use crate::testing::{MemoryBroker, MemoryDlq};

/// A meter provider that keeps what it exports.
struct Metrics {
    provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

/// One exported data point: its metric, attributes, and value (a sum or gauge value, or a
/// histogram's count) and a histogram's sum.
#[derive(Debug)]
struct Point {
    name: String,
    attributes: BTreeMap<String, String>,
    value: f64,
    sum: f64,
}

fn point<'a>(name: &str, attributes: impl Iterator<Item = &'a KeyValue>, value: f64) -> Point {
    Point {
        name: name.to_owned(),
        attributes: attributes
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect(),
        value,
        sum: 0.0,
    }
}

fn points_of<T: Copy>(name: &str, data: &MetricData<T>, f: fn(T) -> f64, out: &mut Vec<Point>) {
    match data {
        MetricData::Sum(sum) => {
            for dp in sum.data_points() {
                out.push(point(name, dp.attributes(), f(dp.value())));
            }
        }
        MetricData::Gauge(gauge) => {
            for dp in gauge.data_points() {
                out.push(point(name, dp.attributes(), f(dp.value())));
            }
        }
        MetricData::Histogram(histogram) => {
            for dp in histogram.data_points() {
                let mut p = point(name, dp.attributes(), dp.count() as f64);
                p.sum = f(dp.sum());
                out.push(p);
            }
        }
        MetricData::ExponentialHistogram(_) => {}
    }
}

impl Metrics {
    fn new() -> Self {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .build();
        Self { provider, exporter }
    }

    fn meter(&self) -> Meter {
        self.provider.meter("test")
    }

    /// Every data point as of now.
    fn collect(&self) -> Vec<Point> {
        self.exporter.reset();
        self.provider.force_flush().unwrap();
        let exported = self.exporter.get_finished_metrics().unwrap();
        let mut out = Vec::new();
        if let Some(resource) = exported.last() {
            for scope in resource.scope_metrics() {
                for metric in scope.metrics() {
                    match metric.data() {
                        AggregatedMetrics::F64(data) => {
                            points_of(metric.name(), data, |v| v, &mut out);
                        }
                        AggregatedMetrics::U64(data) => {
                            points_of(metric.name(), data, |v| v as f64, &mut out);
                        }
                        AggregatedMetrics::I64(data) => {
                            points_of(metric.name(), data, |v| v as f64, &mut out);
                        }
                    }
                }
            }
        }
        out
    }
}

/// The sum of `name`'s values over the points whose attributes include `with`; histograms give
/// their count (`.0`) and sum (`.1`).
fn total(points: &[Point], name: &str, with: &[(&str, &str)]) -> (f64, f64) {
    points
        .iter()
        .filter(|p| p.name == name)
        .filter(|p| {
            with.iter()
                .all(|(k, v)| p.attributes.get(*k).map(String::as_str) == Some(*v))
        })
        .fold((0.0, 0.0), |(v, s), p| (v + p.value, s + p.sum))
}

/// Accepts, a retry, a panic, a reject through a dead-letter sink that fails once, and a handler
/// slower than the lock: every counter, histogram and gauge moves as documented.
#[tokio::test(start_paused = true)]
async fn every_metric_moves_with_the_records() {
    let metrics = Metrics::new();
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(2))
        .build();
    broker.create_topic("t", 1);
    for i in 0..5 {
        broker.produce("t", i.to_string());
    }
    let dlq = MemoryDlq::new();
    dlq.fail_next(1);
    let failed_once = Arc::new(AtomicBool::new(false));
    let failed = failed_once.clone();
    let worker = Worker::builder(broker.member("w"))
        .route(
            "t",
            handler(move |job| {
                let failed = failed.clone();
                async move {
                    let first = job.attempt() == 1;
                    match seq(&job) {
                        1 if first => {
                            failed.store(true, Ordering::SeqCst);
                            Outcome::retry("try later")
                        }
                        2 => Outcome::reject("bad"),
                        3 => {
                            tokio::time::sleep(Duration::from_secs(5)).await;
                            Outcome::Accept
                        }
                        4 if first => panic!("boom"),
                        _ => Outcome::Accept,
                    }
                }
            }),
        )
        .backoff(Backoff::exponential(Duration::from_secs(3), Duration::from_secs(3)).jitter(false))
        .dlq(dlq.clone())
        .dlq_backoff(
            Backoff::exponential(Duration::from_secs(1), Duration::from_secs(1)).jitter(false),
        )
        .meter(metrics.meter())
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());

    // Mid-run: the retry and the panic are held for their backoff, the slow record runs, the
    // reject waits for the dead-letter sink's second try.
    wait_until(Duration::from_secs(5), "the retry", || {
        failed_once.load(Ordering::SeqCst)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let now = metrics.collect();
    assert_eq!(total(&now, names::RECORDS_HELD, &[]).0, 2.0, "{now:#?}");
    assert_eq!(
        total(&now, names::RECORDS_IN_FLIGHT, &[]).0,
        4.0,
        "{now:#?}"
    );

    let b = broker.clone();
    wait_until(Duration::from_secs(30), "settled", move || {
        let c = b.counts();
        c.acknowledged + c.archived == 5
    })
    .await;
    shutdown.shutdown();
    run.await.unwrap().unwrap();
    let end = metrics.collect();
    let t = ("topic", "t");
    let count = |name: &str, with: &[(&str, &str)]| total(&end, name, with).0;

    assert_eq!(count(names::RECORDS_FETCHED, &[t]), 7.0, "{end:#?}");
    let deliveries = total(&end, names::DELIVERY_COUNT, &[t]);
    assert_eq!(deliveries, (7.0, 9.0), "two records came twice");
    for (outcome, n) in [
        ("accept", 4.0),
        ("retry", 1.0),
        ("panic", 1.0),
        ("reject", 1.0),
    ] {
        let with = [t, ("outcome", outcome)];
        assert_eq!(count(names::RECORDS_COMPLETED, &with), n, "{outcome}");
        assert_eq!(count(names::HANDLER_DURATION, &with), n, "{outcome}");
    }
    let slow = total(&end, names::HANDLER_DURATION, &[t, ("outcome", "accept")]).1;
    assert!((5.0..5.1).contains(&slow), "the slow handler's 5 s: {slow}");
    for (ack, n) in [("accept", 4.0), ("release", 2.0), ("reject", 1.0)] {
        assert_eq!(count(names::ACKS, &[t, ("ack", ack)]), n, "{ack}");
    }
    assert_eq!(count(names::DLQ_WRITES, &[t, ("reason", "rejected")]), 1.0);
    assert_eq!(count(names::DLQ_FAILURES, &[]), 1.0);
    // The slow record is renewed at 1 s, 2 s, 3 s and 4 s; the held ones while they wait.
    assert!(count(names::LOCK_RENEWALS, &[t]) >= 4.0, "{end:#?}");
    assert!(count(names::FETCH_DURATION, &[("result", "ok")]) >= 1.0);
    assert_eq!(count(names::RECORDS_IN_FLIGHT, &[]), 0.0);
    assert_eq!(count(names::RECORDS_HELD, &[]), 0.0);
    for quiet in [
        names::LOCK_RENEWAL_FAILURES,
        names::LOCKS_LOST,
        names::ACK_FAILURES,
        names::POSSIBLE_DUPLICATES,
    ] {
        assert_eq!(count(quiet, &[]), 0.0, "{quiet}");
    }
}

/// A renewal refused by the broker: the lock is lost, the job's late outcome is dropped and the
/// record comes back.
#[tokio::test(start_paused = true)]
async fn a_lost_lock_counts_the_failed_renewal_and_a_possible_duplicate() {
    let metrics = Metrics::new();
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(1))
        .build();
    broker.produce("t", "0");
    broker.fail_renewals(true);
    let worker = Worker::builder(broker.member("w"))
        .route(
            "t",
            handler(|job| async move {
                if job.attempt() == 1 {
                    // Ignores its cancellation on purpose.
                    tokio::time::sleep(Duration::from_secs(3)).await;
                }
                Outcome::Accept
            }),
        )
        .meter(metrics.meter())
        .build()
        .unwrap();
    let b = broker.clone();
    let started = tokio::time::Instant::now();
    run_until(worker, Duration::from_secs(10), "accepted", move || {
        if b.delivery_count("t", 0, 0) == Some(2) {
            b.fail_renewals(false);
        }
        b.counts().acknowledged == 1 && started.elapsed() > Duration::from_millis(3500)
    })
    .await;
    let end = metrics.collect();
    let t = ("topic", "t");
    let count = |name: &str, with: &[(&str, &str)]| total(&end, name, with).0;
    assert_eq!(count(names::LOCKS_LOST, &[t]), 1.0, "{end:#?}");
    assert_eq!(
        count(names::LOCK_RENEWAL_FAILURES, &[t, ("error", "lock_lost")]),
        1.0
    );
    assert_eq!(count(names::POSSIBLE_DUPLICATES, &[t]), 1.0);
    assert_eq!(count(names::ACKS, &[t, ("ack", "accept")]), 1.0);
}

/// An accept that the broker did not take (the session was lost meanwhile) is counted by error,
/// and as a possible duplicate.
#[tokio::test(start_paused = true)]
async fn a_failed_acknowledgement_is_counted_by_error() {
    let metrics = Metrics::new();
    let broker = MemoryBroker::new();
    broker.produce("t", "0");
    let member = broker.member("w");
    let lose = member.clone();
    let worker = Worker::builder(member)
        .add_route(Route::new(
            "t",
            handler(move |job| {
                let lose = lose.clone();
                async move {
                    if job.attempt() == 1 {
                        lose.reset_session();
                    }
                    Outcome::Accept
                }
            }),
        ))
        .meter(metrics.meter())
        .build()
        .unwrap();
    let b = broker.clone();
    run_until(worker, Duration::from_secs(10), "accepted", move || {
        b.counts().acknowledged == 1
    })
    .await;
    let end = metrics.collect();
    let t = ("topic", "t");
    let count = |name: &str, with: &[(&str, &str)]| total(&end, name, with).0;
    assert_eq!(
        count(
            names::ACK_FAILURES,
            &[t, ("ack", "accept"), ("error", "session_lost")]
        ),
        1.0,
        "{end:#?}"
    );
    assert_eq!(count(names::POSSIBLE_DUPLICATES, &[t]), 1.0);
    assert_eq!(count(names::ACKS, &[t, ("ack", "accept")]), 1.0);
    assert_eq!(count(names::RECORDS_FETCHED, &[t]), 2.0);
}

/// Before any record: every counter series known at start is there at 0 (per route topic and
/// label value), so `rate()` and dashboards work from the first scrape.
#[tokio::test(start_paused = true)]
async fn counters_are_exported_at_zero_before_the_first_record() {
    let metrics = Metrics::new();
    let broker = MemoryBroker::new();
    broker.create_topic("quiet", 1);
    let worker = Worker::builder(broker.member("w"))
        .route("quiet", handler(|_job| async { Outcome::Accept }))
        .dlq(MemoryDlq::new())
        .meter(metrics.meter())
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let points = metrics.collect();
    let has = |name: &str, with: &[(&str, &str)]| {
        points.iter().any(|p| {
            p.name == name
                && p.value == 0.0
                && with
                    .iter()
                    .all(|(k, v)| p.attributes.get(*k).map(String::as_str) == Some(*v))
        })
    };
    let t = ("topic", "quiet");
    for counter in [
        names::RECORDS_FETCHED,
        names::LOCK_RENEWALS,
        names::LOCKS_LOST,
        names::POSSIBLE_DUPLICATES,
    ] {
        assert!(has(counter, &[t]), "{counter}: {points:#?}");
    }
    for outcome in crate::telemetry::metrics::OUTCOMES {
        assert!(
            has(names::RECORDS_COMPLETED, &[t, ("outcome", outcome)]),
            "{outcome}"
        );
    }
    for reason in crate::dlq::DlqReason::ALL {
        let with = [t, ("reason", reason.as_str())];
        assert!(has(names::DLQ_WRITES, &with), "{reason:?}");
    }
    for ack in ["accept", "release", "reject"] {
        assert!(has(names::ACKS, &[t, ("ack", ack)]), "{ack}");
        assert!(has(
            names::ACK_FAILURES,
            &[t, ("ack", ack), ("error", "lock_lost")]
        ));
    }
    assert!(has(
        names::LOCK_RENEWAL_FAILURES,
        &[t, ("error", "session_lost")]
    ));
    assert!(has(names::DLQ_FAILURES, &[]));
    assert!(has(names::DISPATCHER_STALLS, &[]));
    shutdown.shutdown();
    run.await.unwrap().unwrap();
}

/// The label values zeroed at start are the ones the runtime records.
#[test]
fn the_zeroed_label_values_are_those_recorded() {
    use crate::runtime::lifecycle::Ending;
    use crate::source::AckError;
    let endings = [
        Ending::Accept,
        Ending::Retry,
        Ending::Reject,
        Ending::Undecodable,
        Ending::Panic,
        Ending::Timeout,
    ];
    assert_eq!(
        endings.map(Ending::as_str),
        crate::telemetry::metrics::OUTCOMES
    );
    let errors = [
        AckError::SessionLost,
        AckError::LockLost,
        AckError::LeaderMoved,
        AckError::Closed,
        AckError::Duplicate,
        AckError::Broker {
            code: 1,
            message: String::new(),
        },
    ];
    assert_eq!(
        errors.map(|e| e.as_str()),
        crate::telemetry::metrics::ACK_ERRORS
    );
}

/// The waiting metrics: records delayed (a gauge while they wait), moved to the delay topic (by
/// reason), and waits for a rate-limit permit (by limit) and for a key.
#[tokio::test(start_paused = true)]
async fn waiting_records_show_in_the_delay_move_and_limit_metrics() {
    use std::time::SystemTime;

    use crate::delay::headers::{NOT_BEFORE, format_not_before};
    use crate::runtime::RateLimit;
    use crate::testing::ProducedRecord;

    let metrics = Metrics::new();
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(2))
        .build();
    let soon = format_not_before(SystemTime::now() + Duration::from_secs(5));
    let later = format_not_before(SystemTime::now() + Duration::from_secs(60));
    broker.produce_record("t", ProducedRecord::new("soon").header(NOT_BEFORE, soon));
    broker.produce_record("t", ProducedRecord::new("later").header(NOT_BEFORE, later));
    for n in 0..3 {
        broker.produce_record("t", ProducedRecord::new(n.to_string()).key("k"));
    }
    let worker = Worker::builder(broker.member("a"))
        .add_route(
            Route::new("t", handler(|_job| async { Outcome::Accept }))
                .rate_limit(RateLimit::per_second(20).burst(1))
                .key_concurrency(1),
        )
        .delay(broker.clone())
        .max_hold(Duration::from_secs(10))
        .meter(metrics.meter())
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(2), "the keyed records", move || {
        b.counts().acknowledged >= 4
    })
    .await;
    let points = metrics.collect();
    assert_eq!(
        total(&points, names::RECORDS_DELAYED, &[]).0,
        2.0,
        "the record due in 5 s waits in the worker, and so does the far one's copy (for max_hold)"
    );
    assert_eq!(
        total(&points, names::RECORDS_MOVED, &[("reason", "not_before")]).0,
        1.0,
        "the record due in 60 s moved"
    );
    assert!(total(&points, names::RATE_LIMIT_WAITS, &[("limit", "route")]).0 >= 1.0);
    assert!(total(&points, names::KEY_WAITS, &[("topic", "t")]).0 >= 1.0);
    let b = broker.clone();
    wait_until(
        Duration::from_secs(30),
        "the record due in 5 s",
        move || b.counts().acknowledged >= 5,
    )
    .await;
    assert_eq!(
        total(&metrics.collect(), names::RECORDS_DELAYED, &[]).0,
        1.0,
        "only the far copy still waits"
    );
    shutdown.shutdown();
    run.await.unwrap().unwrap();
}

/// A route paused and resumed by the controls: the paused gauge follows it, and the commands are
/// counted.
#[tokio::test(start_paused = true)]
async fn the_paused_gauge_and_the_command_counter_follow_the_controls() {
    use crate::control::{Controls, Pause};

    let metrics = Metrics::new();
    let broker = MemoryBroker::new();
    broker.produce("sms", "1");
    let (controls, sender) = Controls::manual();
    let worker = Worker::builder(broker.member("w"))
        .route("sms", handler(|_| async { Outcome::Accept }))
        .controls(controls)
        .meter(metrics.meter())
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let paused =
        |metrics: &Metrics| total(&metrics.collect(), names::ROUTE_PAUSED, &[("topic", "sms")]).0;
    wait_until(Duration::from_secs(10), "the record", || {
        broker.counts().acknowledged == 1
    })
    .await;
    assert_eq!(paused(&metrics), 0.0);
    sender.pause(Pause {
        topic: "sms".to_owned(),
        until: None,
        reason: String::new(),
        by: String::new(),
        at: std::time::SystemTime::now(),
        probe: None,
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(paused(&metrics), 1.0);
    sender.resume("sms");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(paused(&metrics), 0.0);
    let points = metrics.collect();
    assert_eq!(
        total(&points, names::CONTROL_COMMANDS, &[("result", "obeyed")]).0,
        2.0
    );
    assert_eq!(
        total(&points, names::CONTROL_COMMANDS, &[("result", "refused")]).0,
        0.0
    );
    shutdown.shutdown();
    run.await.unwrap().unwrap();
}

/// The slots gauge follows the lanes: while the password lane has records that run, the
/// marketing lane's share is its floor; once they are done it may use every slot but a reserve.
#[tokio::test(start_paused = true)]
async fn the_slots_gauge_follows_the_lanes() {
    let metrics = Metrics::new();
    let broker = MemoryBroker::new();
    for i in 0..4 {
        broker.produce("otp", format!("{i}"));
    }
    let release = Arc::new(AtomicBool::new(false));
    let held = release.clone();
    let worker = Worker::builder(broker.member("w"))
        .add_route(
            Route::new(
                "otp",
                handler(move |_| {
                    let held = held.clone();
                    async move {
                        while !held.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        Outcome::Accept
                    }
                }),
            )
            .priority(0),
        )
        .add_route(Route::new("marketing", handler(|_| async { Outcome::Accept })).priority(1))
        .concurrency(32)
        .meter(metrics.meter())
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let slots = |metrics: &Metrics, topic: &str| {
        total(&metrics.collect(), names::ROUTE_SLOTS, &[("topic", topic)]).0
    };
    wait_until(Duration::from_secs(10), "the passwords running", || {
        slots(&metrics, "marketing") == 4.0
    })
    .await;
    assert_eq!(slots(&metrics, "otp"), 28.0, "a higher lane never yields");
    release.store(true, Ordering::SeqCst);
    wait_until(Duration::from_secs(10), "the passwords done", || {
        broker.counts().acknowledged == 4 && slots(&metrics, "marketing") == 28.0
    })
    .await;
    shutdown.shutdown();
    run.await.unwrap().unwrap();
}
