//! Rate limits and per-key concurrency against the MemoryBroker in virtual time: records over a
//! limit wait (never released), a hot key never starves the others, and two records of one key
//! never run at once under `key-concurrency = 1`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::support::{handler, run_until};
use crate::Outcome;
use crate::Route;
use crate::fleet::{Fleet, FleetView};
use crate::runtime::{RateLimit, Worker};
use crate::testing::{MemoryBroker, ProducedRecord};

/// A route limited to 5/s with bursts of 1 starts its records 200 ms apart, and none is
/// delivered twice for it.
#[tokio::test(start_paused = true)]
async fn a_route_limit_spaces_its_records_without_redelivering_any() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(1))
        .build();
    for n in 0..20 {
        broker.produce("jobs", n.to_string());
    }
    let starts = Arc::new(Mutex::new(Vec::new()));
    let seen = starts.clone();
    let worker = Worker::builder(broker.member("a"))
        .add_route(
            Route::new(
                "jobs",
                handler(move |job| {
                    let seen = seen.clone();
                    async move {
                        seen.lock().unwrap().push((Instant::now(), job.attempt()));
                        Outcome::Accept
                    }
                }),
            )
            .rate_limit(RateLimit::per_second(5).burst(1)),
        )
        .concurrency(8)
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, Duration::from_secs(60), "all", move || {
        b.counts().acknowledged == 20
    })
    .await;
    let starts = starts.lock().unwrap().clone();
    assert!(starts.iter().all(|(_, attempt)| *attempt == 1));
    for pair in starts.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(gap >= Duration::from_millis(199), "{gap:?}");
    }
    let total = starts[19].0 - starts[0].0;
    assert!(
        total < Duration::from_millis(4_000),
        "19 gaps of 200 ms took {total:?}"
    );
    let stats = broker.stats();
    assert_eq!((stats.releases, stats.lock_expiries), (0, 0));
    assert!(summary.rate_limited > 0);
}

/// With a fleet, a route's rate is the fleet's: two workers assigned the topic each start
/// records at half the rate, and when the other one leaves this one takes the whole rate.
#[tokio::test(start_paused = true)]
async fn a_route_rate_is_shared_with_the_fleet_and_taken_up_when_it_shrinks() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(5))
        .build();
    for n in 0..20 {
        broker.produce("jobs", n.to_string());
    }
    let assigned = vec![("jobs".to_owned(), 0)];
    let (fleet, sender) = Fleet::manual(FleetView::from_assignments([&assigned, &assigned]));
    let sender = Arc::new(sender);
    let starts = Arc::new(Mutex::new(Vec::new()));
    let seen = starts.clone();
    let worker = Worker::builder(broker.member("a"))
        .add_route(
            Route::new(
                "jobs",
                handler(move |_job| {
                    let seen = seen.clone();
                    let sender = sender.clone();
                    let assigned = vec![("jobs".to_owned(), 0)];
                    async move {
                        let mut seen = seen.lock().unwrap();
                        seen.push(Instant::now());
                        if seen.len() == 10 {
                            sender.set(FleetView::from_assignments([&assigned]));
                        }
                        Outcome::Accept
                    }
                }),
            )
            .rate_limit(RateLimit::per_second(10).burst(1)),
        )
        .fleet(fleet)
        .concurrency(8)
        .build()
        .unwrap();
    let b = broker.clone();
    run_until(worker, Duration::from_secs(60), "all", move || {
        b.counts().acknowledged == 20
    })
    .await;
    let starts = starts.lock().unwrap().clone();
    let gaps: Vec<Duration> = starts.windows(2).map(|p| p[1] - p[0]).collect();
    for gap in &gaps[..9] {
        assert!(*gap >= Duration::from_millis(199), "half of 10/s: {gaps:?}");
    }
    for gap in &gaps[10..] {
        assert!(
            *gap >= Duration::from_millis(99) && *gap < Duration::from_millis(150),
            "all of 10/s: {gaps:?}"
        );
    }
    assert_eq!(broker.stats().releases, 0);
}

/// With a fleet, a key's rate is shared by the workers that have records of its partition:
/// two of them, each takes half; when the other goes, this one takes it all.
#[tokio::test(start_paused = true)]
async fn a_per_key_rate_is_shared_per_partition_and_taken_up_when_the_fleet_shrinks() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(5))
        .build();
    for n in 0..40 {
        broker.produce_record("jobs", ProducedRecord::new(n.to_string()).key("+1000"));
    }
    let (fleet, sender) = Fleet::manual(FleetView::of_claims([("jobs/0", 2)]));
    let sender = Arc::new(sender);
    let starts = Arc::new(Mutex::new(Vec::new()));
    let seen = starts.clone();
    let worker = Worker::builder(broker.member("a"))
        .add_route(
            Route::new(
                "jobs",
                handler(move |_job| {
                    let seen = seen.clone();
                    let sender = sender.clone();
                    async move {
                        let mut seen = seen.lock().unwrap();
                        seen.push(Instant::now());
                        if seen.len() == 10 {
                            sender.set(FleetView::of_claims([("jobs/0", 1)]));
                        }
                        Outcome::Accept
                    }
                }),
            )
            .key_rate_limit(RateLimit::per_second(10).burst(1)),
        )
        .fleet(fleet)
        .concurrency(8)
        .build()
        .unwrap();
    let b = broker.clone();
    run_until(worker, Duration::from_secs(60), "all", move || {
        b.counts().acknowledged == 40
    })
    .await;
    let starts = starts.lock().unwrap().clone();
    let gaps: Vec<Duration> = starts.windows(2).map(|p| p[1] - p[0]).collect();
    for gap in &gaps[..9] {
        assert!(*gap >= Duration::from_millis(199), "half of 10/s: {gaps:?}");
    }
    for gap in &gaps[11..] {
        assert!(
            *gap >= Duration::from_millis(99) && *gap < Duration::from_millis(150),
            "all of 10/s: {gaps:?}"
        );
    }
}

/// One key limited to 10/s with 200 records ahead of 50 records of other keys: the others are all
/// handled within 5 s (the hot key's extra records move aside to the delay topic), the hot key
/// keeps its rate, and no record is delivered twice.
#[tokio::test(start_paused = true)]
async fn a_hot_key_at_its_limit_never_starves_the_other_keys() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(2))
        .build();
    for n in 0..200 {
        broker.produce_record("sms", ProducedRecord::new(format!("hot {n}")).key("+1000"));
    }
    for n in 0..50 {
        broker.produce_record(
            "sms",
            ProducedRecord::new(format!("cold {n}")).key(format!("+2{n:03}")),
        );
    }
    let start = Instant::now();
    let log: Arc<Mutex<Vec<(Duration, bool, u16)>>> = Arc::default();
    let seen = log.clone();
    let worker = Worker::builder(broker.member("a"))
        .add_route(
            Route::new(
                "sms",
                handler(move |job| {
                    let seen = seen.clone();
                    async move {
                        let hot = job.key().map(|k| &k[..]) == Some(&b"+1000"[..]);
                        seen.lock().unwrap().push((
                            start.elapsed(),
                            hot,
                            job.delivery().delivery_count,
                        ));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Outcome::Accept
                    }
                }),
            )
            .key_rate_limit(RateLimit::per_second(10)),
        )
        .concurrency(32)
        .delay(broker.clone())
        .build()
        .unwrap();
    let l = log.clone();
    let summary = run_until(
        worker,
        Duration::from_secs(120),
        "every record",
        move || l.lock().unwrap().len() == 250,
    )
    .await;
    let log = log.lock().unwrap().clone();
    let cold_done = log
        .iter()
        .filter(|(_, hot, _)| !hot)
        .map(|(at, _, _)| *at)
        .max()
        .unwrap();
    assert!(
        cold_done < Duration::from_secs(5),
        "the other keys took {cold_done:?}"
    );
    let hot: Vec<Duration> = log
        .iter()
        .filter(|(_, hot, _)| *hot)
        .map(|(at, _, _)| *at)
        .collect();
    // 10/s with a burst of 10: never more than 10 + 10·t in the first t seconds.
    for (n, at) in hot.iter().enumerate() {
        let allowed = 10.0 + 10.0 * at.as_secs_f64() + 1.0;
        assert!((n as f64) < allowed, "hot record {n} at {at:?}");
    }
    let last = hot.last().copied().unwrap();
    assert!(
        last < Duration::from_secs(25),
        "the hot key kept its rate: done at {last:?}"
    );
    assert!(
        log.iter().all(|(_, _, count)| *count == 1),
        "nothing delivered twice"
    );
    assert_eq!(broker.stats().releases, 0);
    assert!(summary.moved > 0, "{summary:?}");
}

/// Without a delay topic a hot key's records can only wait in their slots: its partition is
/// paused at the source once a key's share of waiting records is taken, so the records of the
/// other partition still come and run at once, and the hot key keeps its rate.
#[tokio::test(start_paused = true)]
async fn without_a_delay_topic_a_hot_keys_partition_is_paused_so_the_other_partition_flows() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_secs(2))
        .build();
    broker.create_topic("sms", 2);
    for n in 0..100 {
        let hot = ProducedRecord::new(format!("hot {n}")).key("+1000");
        broker.produce_record("sms", hot.partition(0));
    }
    for n in 0..50 {
        let cold = ProducedRecord::new(format!("cold {n}")).key(format!("+2{n:03}"));
        broker.produce_record("sms", cold.partition(1));
    }
    let start = Instant::now();
    let log: Arc<Mutex<Vec<(Duration, bool)>>> = Arc::default();
    let seen = log.clone();
    let worker = Worker::builder(broker.member("a"))
        .add_route(
            Route::new(
                "sms",
                handler(move |job| {
                    let seen = seen.clone();
                    async move {
                        let hot = job.delivery().id.partition == 0;
                        seen.lock().unwrap().push((start.elapsed(), hot));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Outcome::Accept
                    }
                }),
            )
            .key_rate_limit(RateLimit::per_second(10)),
        )
        .concurrency(8)
        .build()
        .unwrap();
    let l = log.clone();
    let summary = run_until(worker, Duration::from_secs(60), "every record", move || {
        l.lock().unwrap().len() == 150
    })
    .await;
    let log = log.lock().unwrap().clone();
    let last = |hot: bool| {
        log.iter()
            .filter(|(_, h)| *h == hot)
            .map(|(at, _)| *at)
            .max()
            .unwrap()
    };
    // Without the pause the hot records fill the slots, and each slot one frees is refilled
    // from either partition: the cold records trickle in at the hot key's pace (4 s here, 0.3 s
    // with the pause).
    assert!(
        last(false) < Duration::from_secs(1),
        "the other partition took {:?}",
        last(false)
    );
    // 10/s with a burst of 10: 100 records in about 9 s.
    assert!(
        last(true) < Duration::from_secs(11),
        "the hot key kept its rate: done at {:?}",
        last(true)
    );
    assert_eq!(broker.stats().releases, 0, "nothing released to wait");
    assert_eq!(summary.moved, 0, "{summary:?}");
}

/// Under `key-concurrency = 1` two records of one key never run at once, while different keys
/// run side by side.
#[tokio::test(start_paused = true)]
async fn key_concurrency_one_never_runs_a_key_twice_at_once() {
    let broker = MemoryBroker::new();
    for n in 0..60 {
        broker.produce_record(
            "jobs",
            ProducedRecord::new(n.to_string()).key(format!("key-{}", n % 4)),
        );
    }
    let running: Arc<Mutex<HashMap<Vec<u8>, usize>>> = Arc::default();
    let overlaps = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (r, o, m) = (running.clone(), overlaps.clone(), most.clone());
    let worker = Worker::builder(broker.member("a"))
        .add_route(
            Route::new(
                "jobs",
                handler(move |job| {
                    let (running, overlaps, most) = (r.clone(), o.clone(), m.clone());
                    async move {
                        let key = job.key().unwrap().to_vec();
                        {
                            let mut running = running.lock().unwrap();
                            let n = running.entry(key.clone()).or_default();
                            *n += 1;
                            if *n > 1 {
                                overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            let total: usize = running.values().sum();
                            most.fetch_max(total, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        *running.lock().unwrap().get_mut(&key).unwrap() -= 1;
                        Outcome::Accept
                    }
                }),
            )
            .key_concurrency(1),
        )
        .concurrency(16)
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(worker, Duration::from_secs(60), "all", move || {
        b.counts().acknowledged == 60
    })
    .await;
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(
        most.load(Ordering::SeqCst),
        4,
        "the four keys ran side by side"
    );
    assert_eq!(broker.stats().releases, 0);
    assert!(summary.key_waits > 0);
}

/// Limits are checked when the worker is built: a zero rate or key concurrency is an error
/// naming the route and the setting.
#[test]
fn limits_are_checked_at_build() {
    let broker = MemoryBroker::new();
    let route = || Route::new("jobs", handler(|_job| async { Outcome::Accept }));
    let err = Worker::builder(broker.member("a"))
        .add_route(route().key_rate_limit(RateLimit::per_second(0)))
        .build()
        .unwrap_err();
    assert!(
        err.message().contains("route `jobs`: `key_rate_limit`"),
        "{err}"
    );
    let err = Worker::builder(broker.member("a"))
        .add_route(route().key_concurrency(0))
        .build()
        .unwrap_err();
    assert!(
        err.message()
            .contains("route `jobs`: `key_concurrency`: expected at least 1"),
        "{err}"
    );
}
