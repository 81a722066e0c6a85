//! The load scenarios on the MemoryBroker in virtual time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use super::support::{Checked, handler, run_until, seq, wait_until};
use crate::Outcome;
use crate::runtime::Worker;
use crate::source::{AckKind, ShareSource};
use crate::testing::MemoryBroker;

/// 10,000 records, concurrency 64, random latencies: every record accepted exactly once; handlers
/// running never exceed 64 and records held never exceed the free slots, checked at every handler
/// start and every fetch.
#[tokio::test(start_paused = true)]
async fn ten_thousand_records_are_each_accepted_exactly_once() {
    const RECORDS: usize = 10_000;
    const CONCURRENCY: usize = 64;
    let broker = MemoryBroker::new();
    broker.create_topic("jobs", 4);
    for i in 0..RECORDS {
        broker.produce("jobs", i.to_string());
    }
    let mut rng = StdRng::seed_from_u64(4);
    let latencies: Arc<Vec<u64>> = Arc::new(
        (0..RECORDS)
            .map(|_| {
                if rng.random_bool(0.02) {
                    rng.random_range(200..1_000)
                } else {
                    rng.random_range(1..50)
                }
            })
            .collect(),
    );
    let ledger: Arc<Vec<AtomicU32>> = Arc::new((0..RECORDS).map(|_| AtomicU32::new(0)).collect());
    let running = Arc::new(AtomicUsize::new(0));
    let max_running = Arc::new(AtomicUsize::new(0));

    let source = Checked::new(broker.member("w"), CONCURRENCY);
    let max_held = source.max_held.clone();
    let (l, r, m, lat) = (
        ledger.clone(),
        running.clone(),
        max_running.clone(),
        latencies.clone(),
    );
    let b = broker.clone();
    let worker = Worker::builder(source)
        .route(
            "jobs",
            handler(move |job| {
                let (l, r, m, lat, b) = (l.clone(), r.clone(), m.clone(), lat.clone(), b.clone());
                async move {
                    let now_running = r.fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(now_running <= CONCURRENCY, "{now_running} handlers running");
                    m.fetch_max(now_running, Ordering::SeqCst);
                    let held = b.counts().acquired;
                    assert!(held <= CONCURRENCY, "{held} records held");
                    let n = seq(&job);
                    tokio::time::sleep(Duration::from_millis(lat[n])).await;
                    l[n].fetch_add(1, Ordering::SeqCst);
                    r.fetch_sub(1, Ordering::SeqCst);
                    Outcome::Accept
                }
            }),
        )
        .concurrency(CONCURRENCY)
        .build()
        .unwrap();
    let b = broker.clone();
    let summary = run_until(
        worker,
        Duration::from_secs(600),
        "all accepted",
        move || b.counts().acknowledged == RECORDS,
    )
    .await;

    for (n, count) in ledger.iter().enumerate() {
        assert_eq!(count.load(Ordering::SeqCst), 1, "record {n}");
    }
    let stats = broker.stats();
    assert_eq!(stats.accepts, RECORDS as u64);
    assert_eq!((stats.releases, stats.lock_expiries), (0, 0));
    assert_eq!(summary.accepted, RECORDS as u64);
    assert_eq!(summary.fetched, RECORDS as u64);
    assert_eq!(summary.possible_duplicates, 0);
    assert_eq!(max_running.load(Ordering::SeqCst), CONCURRENCY);
    assert_eq!(max_held.load(Ordering::SeqCst), CONCURRENCY);
    assert!(
        broker
            .fetches()
            .iter()
            .all(|f| f.requested >= 1 && f.returned <= f.requested as usize),
        "record_limit respected"
    );
}

/// How long each record of the heavy-tail test takes: 5% (exactly 50) take 2 s, the rest 10 ms.
fn heavy_tail() -> Vec<Duration> {
    let mut latencies: Vec<Duration> = (0..1_000)
        .map(|i| {
            if i < 50 {
                Duration::from_secs(2)
            } else {
                Duration::from_millis(10)
            }
        })
        .collect();
    latencies.shuffle(&mut StdRng::seed_from_u64(7));
    latencies
}

/// The ideal pipeline: records start in order, each the moment any of `slots` is free, with no
/// fetch or acknowledgement cost. Returns when the last one ends.
fn ideal_pipeline(latencies: &[Duration], slots: usize) -> Duration {
    let mut free_at: BinaryHeap<Reverse<Duration>> =
        (0..slots).map(|_| Reverse(Duration::ZERO)).collect();
    let mut end = Duration::ZERO;
    for &latency in latencies {
        let Reverse(start) = free_at.pop().unwrap();
        end = end.max(start + latency);
        free_at.push(Reverse(start + latency));
    }
    end
}

fn produce_all(broker: &MemoryBroker, n: usize) {
    for i in 0..n {
        broker.produce("jobs", i.to_string());
    }
}

/// Heavy tail: 1,000 records, 95% 10 ms and 5% 2 s, concurrency 100. The worker's total time is
/// within 10% of the ideal pipeline and at least 3× faster than a poll-process-all-ack loop.
#[tokio::test(start_paused = true)]
async fn a_heavy_tail_does_not_stall_the_pipeline() {
    const CONCURRENCY: usize = 100;
    let latencies = Arc::new(heavy_tail());
    let ideal = ideal_pipeline(&latencies, CONCURRENCY);

    // The worker.
    let broker = MemoryBroker::new();
    produce_all(&broker, latencies.len());
    let lat = latencies.clone();
    let worker = Worker::builder(broker.member("pipeline"))
        .route(
            "jobs",
            handler(move |job| {
                let latency = lat[seq(&job)];
                async move {
                    tokio::time::sleep(latency).await;
                    Outcome::Accept
                }
            }),
        )
        .concurrency(CONCURRENCY)
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let start = Instant::now();
    let run = tokio::spawn(worker.run());
    let b = broker.clone();
    wait_until(Duration::from_secs(600), "all accepted", move || {
        b.counts().acknowledged == 1_000
    })
    .await;
    let pipeline = start.elapsed();
    shutdown.shutdown();
    run.await.unwrap().unwrap();

    // The classic share-consumer loop: poll up to `CONCURRENCY`, process the whole batch
    // concurrently, acknowledge it, poll again.
    let broker = MemoryBroker::new();
    produce_all(&broker, latencies.len());
    let member = broker.member("batch");
    let start = Instant::now();
    while broker.counts().acknowledged < 1_000 {
        let batch = member.fetch(CONCURRENCY as u32).await.unwrap();
        futures::future::join_all(batch.iter().map(|d| {
            let n: usize = std::str::from_utf8(d.value.as_deref().unwrap())
                .unwrap()
                .parse()
                .unwrap();
            tokio::time::sleep(latencies[n])
        }))
        .await;
        for d in &batch {
            member.acknowledge(&d.id, AckKind::Accept).await.unwrap();
        }
    }
    let batched = start.elapsed();

    eprintln!("heavy tail: ideal {ideal:?}, pipeline {pipeline:?}, batch loop {batched:?}");
    assert!(
        pipeline.as_secs_f64() <= ideal.as_secs_f64() * 1.1,
        "pipeline {pipeline:?} vs ideal {ideal:?}"
    );
    assert!(
        batched.as_secs_f64() >= pipeline.as_secs_f64() * 3.0,
        "batch loop {batched:?} vs pipeline {pipeline:?}"
    );
}
