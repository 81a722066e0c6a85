//! Fleet-wide rates that hold in every window: several `share-worker` processes of one group,
//! sharing a route's `rate` (or its `rate-per-key`) through the control topic's presence
//! records, with the work waiting before the first process starts. Every 1-second window holds
//! at most `rate + burst` starts (measured at the endpoint, see `check_bounds`), from the
//! fleet's first second; every 5-second window from
//! 2 s after the processes start holds at least 90 % of the rate while work waits — through a
//! process joining, one leaving (SIGTERM) and one killed (SIGKILL), whose share the others take
//! back within two membership intervals.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::process::Child;

use crate::fake_http::Endpoint;
use crate::support::*;

/// Two membership intervals (the presence lease, 3 s): how soon the others take back a killed
/// process's share.
const TAKEN_BACK_WITHIN: Duration = Duration::from_secs(6);
/// The keys of a per-key run: the producer's partitioner (CRC32 of the key) puts these three on
/// partitions 0, 2 and 1 of six. Keys that share a partition share its fetches while their
/// records wait in the slots (without a delay topic, see docs/jobs.md), which is not what these
/// tests measure.
const KEYS: [&str; 3] = ["key-0", "key-1", "key-4"];
/// The low bound is measured from this long after the processes start.
const WARM_UP: Duration = Duration::from_secs(2);

/// What a run does to its fleet, in seconds after the first record arrived.
#[derive(Clone, Copy, Debug)]
enum Event {
    Join(u64),
    Leave(u64),
    Kill(u64),
}

struct Run {
    processes: usize,
    partitions: u32,
    rate: usize,
    burst: usize,
    /// `Some(keys)`: the rate is per key (`rate-per-key`), over this many keys.
    keys: Option<usize>,
    /// How long the fleet runs with work waiting, from the first arrival.
    seconds: u64,
    events: &'static [Event],
}

/// Arrivals in each window `[t, t + width)`, `t` from `from` in steps of 50 ms while
/// `t + width <= to`: (window start, count).
fn windows(
    times: &[Instant],
    from: Instant,
    to: Instant,
    width: Duration,
) -> Vec<(Instant, usize)> {
    let mut out = Vec::new();
    let mut start = from;
    while start + width <= to {
        let lo = times.partition_point(|t| *t < start);
        let hi = times.partition_point(|t| *t < start + width);
        out.push((start, hi - lo));
        start += Duration::from_millis(50);
    }
    out
}

/// Checks both bounds over `times` (sorted) of one rate; `quiet`: the spans where the low bound
/// is not asked (a killed process's share not yet taken back).
fn check_bounds(
    what: &str,
    times: &[Instant],
    run: &Run,
    started: Instant,
    until: Instant,
    quiet: &[(Instant, Instant)],
) {
    let first = times[0];
    // Starts are counted where the provider sees them, at the endpoint: a second of arrivals
    // holds the starts of a second plus the spread of the HTTP call's latency (up to 150 ms
    // here while ten processes start on two cores) and one call in flight, so the bound on
    // starts allows that much more.
    let most = run.rate + run.burst + (run.rate * 15).div_ceil(100) + 1;
    let busiest = windows(
        times,
        first - Duration::from_secs(1),
        until,
        Duration::from_secs(1),
    );
    let over: Vec<_> = busiest
        .iter()
        .filter(|(_, n)| *n > most)
        .map(|(at, n)| (at.saturating_duration_since(first), *n))
        .collect();
    let least = run.rate * 5 * 9 / 10;
    let five = windows(times, started + WARM_UP, until, Duration::from_secs(5));
    let under: Vec<_> = five
        .iter()
        .filter(|(at, _)| {
            !quiet
                .iter()
                .any(|(from, to)| *at < *to && *at + Duration::from_secs(5) > *from)
        })
        .filter(|(_, n)| *n < least)
        .map(|(at, n)| (at.saturating_duration_since(first), *n))
        .collect();
    let span = until.saturating_duration_since(first).as_secs_f64();
    eprintln!(
        "{what}: {} arrivals ({:.1}/s from the first); busiest 1-s window {:?} (bound {most}); quietest 5-s window {:?} (bound {least}); first arrival {:?} after the start",
        times.len(),
        times.len() as f64 / span.max(1.0),
        busiest.iter().map(|(_, n)| n).max(),
        five.iter().map(|(_, n)| n).min(),
        first.saturating_duration_since(started),
    );
    let seconds: Vec<usize> = windows(times, first, until, Duration::from_secs(1))
        .into_iter()
        .step_by(20)
        .map(|(_, n)| n)
        .collect();
    eprintln!("{what}: per second from the first arrival: {seconds:?}");
    assert!(
        over.is_empty(),
        "{what}: 1-s windows above {most}: {over:?}"
    );
    assert!(
        !five.is_empty(),
        "{what}: the run is too short for a 5-s window"
    );
    assert!(
        under.is_empty(),
        "{what}: 5-s windows below {least}: {under:?}"
    );
}

async fn fleet_rate(run: Run) {
    let scratch = Scratch::new();
    let topic = unique("fleet-exact");
    let group = unique("fleet-exact-group");
    let endpoint = Endpoint::start().await;
    let rate = match run.keys {
        Some(_) => format!(
            "rate-per-key = \"{}/s\"\nburst-per-key = {}",
            run.rate, run.burst
        ),
        None => format!("rate = \"{}/s\"\nburst = {}", run.rate, run.burst),
    };
    let cfg = scratch.write(
        "worker.toml",
        &control_config(&group, &topic, &format!("{}\n{rate}", endpoint.route())),
    );
    let cfg = cfg.to_str().expect("utf-8 path");
    let partitions = run.partitions.to_string();
    let out = share_worker(
        &["setup", "--config", cfg, "--partitions", &partitions],
        &[],
    )
    .await;
    assert_ok(&out, "setup");

    // The work waits before the first process starts, with room to spare.
    let keys = run.keys.unwrap_or(1);
    let per_key = run.rate * (run.seconds as usize + 10);
    let producer = tests::producer(&[]).expect("a producer");
    let mut pending = Vec::new();
    for i in 0..per_key {
        for name in &KEYS[..keys] {
            // A route's rate: a key per record, so every partition has work; a per-key rate:
            // a few keys, each in one partition.
            let key = match run.keys {
                Some(_) => (*name).to_owned(),
                None => format!("record-{i}"),
            };
            let value = format!("{name} {i}");
            let queued = producer
                .send_result(
                    rdkafka::producer::FutureRecord::to(&topic)
                        .key(&key)
                        .payload(&value),
                )
                .map_err(|(err, _)| err)
                .expect("queued");
            pending.push(queued);
        }
    }
    for sent in pending {
        sent.await.expect("delivered").expect("written");
    }

    let log = |n: usize| scratch.0.join(format!("worker-{n}.log"));
    let started = Instant::now();
    let mut fleet: Vec<(Option<Child>, PathBuf)> = (0..run.processes)
        .map(|n| (Some(spawn(&["run", "--config", cfg], &log(n))), log(n)))
        .collect();
    tests::wait_for("the first arrival", Duration::from_secs(60), async || {
        Ok(!endpoint.arrivals().is_empty())
    })
    .await
    .expect("the fleet starts");
    let first = endpoint.arrivals()[0];
    let mut quiet = Vec::new();
    for event in run.events {
        let at = match event {
            Event::Join(s) | Event::Leave(s) | Event::Kill(s) => first + Duration::from_secs(*s),
        };
        tokio::time::sleep_until(at.into()).await;
        match event {
            Event::Join(_) => {
                let n = fleet.len();
                fleet.push((Some(spawn(&["run", "--config", cfg], &log(n))), log(n)));
            }
            Event::Leave(_) => {
                let child = fleet[0].0.take().expect("a running process");
                let exit = terminate(child).await;
                assert!(exit.success(), "a clean stop: {exit:?}");
            }
            Event::Kill(_) => {
                let mut child = fleet[1].0.take().expect("a running process");
                child.start_kill().expect("SIGKILL");
                let _ = child.wait().await;
                quiet.push((Instant::now(), Instant::now() + TAKEN_BACK_WITHIN));
            }
        }
    }
    let until = first + Duration::from_secs(run.seconds);
    tokio::time::sleep_until(until.into()).await;
    let timeline = endpoint.timeline();
    for (_, log) in &fleet {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        assert!(!text.contains("panicked at"), "{}: {text}", log.display());
    }
    drop(fleet);

    let mut by_key: BTreeMap<String, Vec<Instant>> = BTreeMap::new();
    for (body, at) in timeline {
        let key = body.split(' ').next().unwrap_or_default().to_owned();
        by_key.entry(key).or_default().push(at);
    }
    assert_eq!(by_key.len(), keys, "every key ran: {:?}", by_key.keys());
    for (key, mut times) in by_key {
        times.sort_unstable();
        times.retain(|t| *t < until);
        check_bounds(&key, &times, &run, started, until, &quiet);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn three_processes_hold_a_route_rate_through_a_join_a_leave_and_a_kill() {
    fleet_rate(Run {
        processes: 3,
        partitions: 1,
        rate: 30,
        burst: 10,
        keys: None,
        seconds: 30,
        events: &[Event::Join(6), Event::Leave(12), Event::Kill(18)],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_processes_hold_a_route_rate_on_six_partitions() {
    fleet_rate(Run {
        processes: 10,
        partitions: 6,
        rate: 40,
        burst: 20,
        keys: None,
        seconds: 14,
        events: &[],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn three_processes_hold_a_per_key_rate_on_six_partitions() {
    fleet_rate(Run {
        processes: 3,
        partitions: 6,
        rate: 12,
        burst: 3,
        keys: Some(3),
        seconds: 14,
        events: &[],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_processes_hold_a_per_key_rate_on_one_partition_through_a_join() {
    fleet_rate(Run {
        processes: 10,
        partitions: 1,
        rate: 20,
        burst: 10,
        keys: Some(2),
        seconds: 16,
        events: &[Event::Join(5)],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_process_holds_a_route_rate_alone() {
    fleet_rate(Run {
        processes: 1,
        partitions: 1,
        rate: 25,
        burst: 5,
        keys: None,
        seconds: 10,
        events: &[],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_process_holds_a_per_key_rate_on_six_partitions() {
    fleet_rate(Run {
        processes: 1,
        partitions: 6,
        rate: 12,
        burst: 3,
        keys: Some(3),
        seconds: 12,
        events: &[],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn three_processes_hold_a_route_rate_on_six_partitions() {
    fleet_rate(Run {
        processes: 3,
        partitions: 6,
        rate: 30,
        burst: 10,
        keys: None,
        seconds: 12,
        events: &[],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_processes_hold_a_route_rate_on_one_partition() {
    fleet_rate(Run {
        processes: 10,
        partitions: 1,
        rate: 40,
        burst: 20,
        keys: None,
        seconds: 12,
        events: &[],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn three_processes_hold_a_per_key_rate_on_one_partition_through_a_join_a_leave_and_a_kill() {
    fleet_rate(Run {
        processes: 3,
        partitions: 1,
        rate: 12,
        burst: 3,
        keys: Some(2),
        seconds: 24,
        events: &[Event::Join(5), Event::Leave(10), Event::Kill(15)],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_processes_hold_a_per_key_rate_on_six_partitions() {
    fleet_rate(Run {
        processes: 10,
        partitions: 6,
        rate: 12,
        burst: 3,
        keys: Some(3),
        seconds: 14,
        events: &[],
    })
    .await;
}
