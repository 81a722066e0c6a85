//! Rates for the whole fleet: three worker processes of one group on a route with
//! `rate = "30/s"` start records at 30/s together — not 30/s each — and when one of them stops,
//! the other two take up its share.

use std::time::{Duration, Instant};

use crate::fake_http::Endpoint;
use crate::support::*;

const WORKERS: usize = 3;
const RATE: usize = 30;
const RECORDS: usize = 2_000;
/// The width of the windows the rate is measured over.
const WINDOW: Duration = Duration::from_secs(5);
/// How soon the others take up a stopped worker's share.
const TAKEN_UP_WITHIN: Duration = Duration::from_secs(10);

/// The number of arrivals in each window `[t, t + WINDOW)` for `t` from `from` while
/// `t + WINDOW <= to`, in steps of 250 ms: (window start, count).
fn windows(times: &[Instant], from: Instant, to: Instant) -> Vec<(Instant, usize)> {
    let mut out = Vec::new();
    let mut start = from;
    while start + WINDOW <= to {
        let count = times
            .iter()
            .filter(|t| **t >= start && **t < start + WINDOW)
            .count();
        out.push((start, count));
        start += Duration::from_millis(250);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_route_rate_holds_for_the_whole_fleet_and_survives_a_worker_leaving() {
    let scratch = Scratch::new();
    let topic = unique("fleet-rate");
    let group = unique("fleet-rate-group");
    let endpoint = Endpoint::start().await;
    let cfg = scratch.write(
        "worker.toml",
        &config(
            &group,
            &topic,
            &format!("{}\nrate = \"{RATE}/s\"", endpoint.route()),
        ),
    );
    let cfg = cfg.to_str().expect("utf-8 path");
    // One partition: every worker is assigned it and takes records from the same backlog, as
    // share groups allow, so no worker runs dry while the others still have work.
    let out = share_worker(&["setup", "--config", cfg, "--partitions", "1"], &[]).await;
    assert_ok(&out, "setup");

    let mut fleet: Vec<_> = (0..WORKERS)
        .map(|n| {
            let log = scratch.0.join(format!("worker-{n}.log"));
            (Some(spawn(&["run", "--config", cfg], &log)), log)
        })
        .collect();
    let shared_by = |n: usize| format!("the rate is shared by {n} workers of the group");
    let logs: Vec<std::path::PathBuf> = fleet.iter().map(|(_, log)| log.clone()).collect();
    let every_log: Vec<&std::path::Path> = logs.iter().map(|log| log.as_path()).collect();
    wait_logged(&every_log, &shared_by(WORKERS), Duration::from_secs(60)).await;

    let producer = tests::producer(&[]).expect("a producer");
    let values: Vec<String> = (0..RECORDS).map(|i| format!("ok-{i}")).collect();
    tests::produce(&producer, &topic, None, &values)
        .await
        .expect("producing");

    // A third of the way through, one worker stops cleanly (SIGTERM) and leaves the group.
    tests::wait_for(
        "a third of the records",
        Duration::from_secs(120),
        async || Ok(endpoint.arrivals().len() >= RECORDS / 3),
    )
    .await
    .expect("the fleet handles records");
    let stopped_at = Instant::now();
    let exit = terminate(fleet[0].0.take().expect("a running worker")).await;
    assert!(exit.success(), "a clean stop: {exit:?}");
    wait_logged(
        &every_log[1..],
        &shared_by(WORKERS - 1),
        Duration::from_secs(60),
    )
    .await;

    tests::wait_for("every record", Duration::from_secs(180), async || {
        Ok(endpoint.arrivals().len() >= RECORDS)
    })
    .await
    .expect("the fleet drains the route");
    let times = endpoint.arrivals();
    let (first, last) = (times[0], times[times.len() - 1]);

    let rate = RATE as f64;
    let window = WINDOW.as_secs_f64();
    // Over any window: at most the rate plus one burst (the rate's count), plus 10 %.
    let most = ((rate * window + RATE as f64) * 1.1) as usize;
    let over: Vec<_> = windows(&times, first, last + WINDOW)
        .into_iter()
        .filter(|(_, n)| *n > most)
        .map(|(at, n)| (at.duration_since(first), n))
        .collect();
    assert!(over.is_empty(), "windows above {most}: {over:?}");
    // While work waits: at least 80 % of the rate, except while a stopped worker's share is
    // taken up.
    let least = (rate * window * 0.8) as usize;
    let under: Vec<_> = windows(&times, first, last - Duration::from_secs(1))
        .into_iter()
        .filter(|(at, _)| *at + WINDOW <= stopped_at || *at >= stopped_at + TAKEN_UP_WITHIN)
        .filter(|(_, n)| *n < least)
        .map(|(at, n)| (at.duration_since(first), n))
        .collect();
    assert!(under.is_empty(), "windows below {least}: {under:?}");
    let all = windows(&times, first, last - Duration::from_secs(1));
    eprintln!(
        "{} records in {:?}, a worker stopped at {:?}; 5 s windows: most {:?} (bound {most}), least away from the stop {:?} (bound {least})",
        times.len(),
        last - first,
        stopped_at - first,
        all.iter().map(|(_, n)| n).max(),
        all.iter()
            .filter(|(at, _)| *at + WINDOW <= stopped_at || *at >= stopped_at + TAKEN_UP_WITHIN)
            .min_by_key(|(_, n)| *n)
            .map(|(at, n)| (*at - first, n)),
    );
    let after: Vec<_> = windows(
        &times,
        stopped_at + TAKEN_UP_WITHIN,
        last - Duration::from_secs(1),
    );
    assert!(
        !after.is_empty(),
        "no whole window after the stop: the run was too short to see the others take up the share"
    );
    drop(fleet);
}
