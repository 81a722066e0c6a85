//! A circuit breaker for the whole fleet, against the real broker: three worker processes of one
//! group post to an endpoint that answers 503 for 60 s, then 200. With `breaker` on the route,
//! the first workers to see the failures pause the route through the control topic, the
//! endpoint gets a bounded number of calls during the outage (the calls before the breaker
//! opened, then a few probes every `open-for`), and no record is dead-lettered. Without it, the
//! same outage dead-letters every record after its attempts. An outage spread so thin that no
//! worker can judge it alone (six workers holding one or two records on their only attempt) is
//! judged on the fleet's tallies, and dead-letters nothing either. And a 429's `Retry-After` on a
//! route with `cool-down` pauses every worker for that long.

use std::time::Duration;

use tokio::process::Child;

use crate::fake_http::Endpoint;
use crate::support::*;

const WORKERS: usize = 3;
const RECORDS: usize = 300;
const OUTAGE: Duration = Duration::from_secs(60);
const MIN_CALLS: usize = 20;
const OPEN_FOR_SECS: u64 = 10;
/// `concurrency` in the test configuration: the calls in flight when a worker's breaker opens.
const CONCURRENCY: usize = 8;
/// The most calls during the outage: each worker's own before its breaker opens (or it reads
/// another's pause) — its `min-calls` plus what is in flight — then one round of probes per
/// `open-for`.
const MOST_CALLS: usize = WORKERS * (MIN_CALLS + CONCURRENCY)
    + worker_core::runtime::PROBE_CALLS as usize * (OUTAGE.as_secs() / OPEN_FOR_SECS + 1) as usize;

/// How a fleet meets an outage.
struct Outage {
    workers: usize,
    records: usize,
    lasting: Duration,
    attempts: u32,
    concurrency: usize,
}

/// [`WORKERS`] workers, [`RECORDS`] records, three attempts each, down for [`OUTAGE`].
const BROAD: Outage = Outage {
    workers: WORKERS,
    records: RECORDS,
    lasting: OUTAGE,
    attempts: 3,
    concurrency: CONCURRENCY,
};

/// Workers on one partition of a fresh topic, the endpoint down from just before the records
/// are produced; `route` adds to the route's lines.
async fn fleet_in_an_outage(
    scratch: &Scratch,
    name: &str,
    route: &str,
    outage: &Outage,
) -> (Endpoint, String, Vec<Child>, Vec<std::path::PathBuf>) {
    let topic = unique(name);
    let group = unique(&format!("{name}-group"));
    let endpoint = Endpoint::start().await;
    let config = control_config(&group, &topic, &format!("{}\n{route}", endpoint.route()))
        .replace(
            "[retry]\n",
            &format!("[retry]\nmax-attempts = {}\n", outage.attempts),
        )
        .replace(
            &format!("concurrency = {CONCURRENCY}\n"),
            &format!("concurrency = {}\n", outage.concurrency),
        );
    let cfg = scratch.write(&format!("{name}.toml"), &config);
    let cfg = cfg.to_str().expect("utf-8 path");
    let out = share_worker(&["setup", "--config", cfg, "--partitions", "1"], &[]).await;
    assert_ok(&out, "setup");
    let logs: Vec<_> = (0..outage.workers)
        .map(|n| scratch.0.join(format!("{name}-{n}.log")))
        .collect();
    let fleet = logs
        .iter()
        .map(|log| spawn(&["run", "--config", cfg], log))
        .collect();
    let every_log: Vec<&std::path::Path> = logs.iter().map(|log| log.as_path()).collect();
    wait_logged(&every_log, "control topic read", Duration::from_secs(60)).await;
    endpoint.down_for(outage.lasting);
    let producer = tests::producer(&[]).expect("a producer");
    let values: Vec<String> = (0..outage.records).map(|i| format!("ok-{i}")).collect();
    tests::produce(&producer, &topic, None, &values)
        .await
        .expect("producing");
    (endpoint, topic, fleet, logs)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_breaker_pauses_the_fleet_through_an_outage_and_nothing_is_dead_lettered() {
    let scratch = Scratch::new();
    let (endpoint, topic, fleet, logs) = fleet_in_an_outage(
        &scratch,
        "breaker",
        &format!(
            "breaker = {{ failure-ratio = 0.5, min-calls = {MIN_CALLS}, window = \"30s\", open-for = \"{OPEN_FOR_SECS}s\" }}"
        ),
        &BROAD,
    )
    .await;
    tests::wait_for(
        "every record served after the outage",
        OUTAGE + Duration::from_secs(120),
        async || Ok(endpoint.served_after_outage().len() >= RECORDS),
    )
    .await
    .expect("the fleet resumes the route once the endpoint is back");
    let calls = endpoint.during_outage();
    let letters = tests::read_all(format!("{topic}.dlq"))
        .await
        .expect("reading the DLQ");
    let text_of = |log: &std::path::PathBuf| std::fs::read_to_string(log).unwrap_or_default();
    let logged = |line: &str| {
        logs.iter()
            .filter(|log| text_of(log).contains(line))
            .count()
    };
    eprintln!(
        "with the breaker: {calls} calls during the {OUTAGE:?} outage (bound {MOST_CALLS}), {} dead-lettered; {} of {WORKERS} workers opened it, probes by {}",
        letters.len(),
        logged("pausing the route for the whole fleet"),
        logged("circuit breaker half-open"),
    );
    assert_eq!(letters.len(), 0, "an outage dead-letters nothing");
    assert!(
        calls <= MOST_CALLS,
        "{calls} calls during the outage (at most {MOST_CALLS})"
    );
    assert!(logged("pausing the route for the whole fleet") >= 1);
    assert!(logged("resuming the route for the whole fleet") >= 1);
    assert!(
        logs.iter()
            .all(|log| text_of(log).contains("route paused fleet-wide")),
        "every worker obeyed the pause"
    );
    for child in fleet {
        assert!(terminate(child).await.success(), "a clean stop");
    }
}

/// Six workers of `concurrency = 1` hold at most two records each of nine, on their only
/// attempt: no worker's own window ever holds the 5 calls a breaker needs to judge a failure
/// that would dead-letter its record. Each writes its tally to the control topic while its
/// records wait for a verdict, the sum opens the breaker for the fleet, and not one record is
/// dead-lettered while it is open; once the endpoint is back, a probe resumes the route and
/// every record is served.
#[tokio::test(flavor = "multi_thread")]
async fn an_outage_spread_thin_over_six_workers_opens_the_breaker_on_the_fleets_tallies() {
    const THIN: Outage = Outage {
        workers: 6,
        records: 9,
        lasting: Duration::from_secs(15),
        attempts: 1,
        concurrency: 1,
    };
    let scratch = Scratch::new();
    let (endpoint, topic, fleet, logs) = fleet_in_an_outage(
        &scratch,
        "thin-outage",
        "breaker = { failure-ratio = 0.5, min-calls = 20, window = \"30s\", open-for = \"3s\" }",
        &THIN,
    )
    .await;
    tests::wait_for(
        "every record served after the outage",
        THIN.lasting + Duration::from_secs(60),
        async || Ok(endpoint.served_after_outage().len() >= THIN.records),
    )
    .await
    .expect("the fleet resumes the route once the endpoint is back");
    let letters = tests::read_all(format!("{topic}.dlq"))
        .await
        .expect("reading the DLQ");
    let texts: Vec<String> = logs
        .iter()
        .map(|log| std::fs::read_to_string(log).unwrap_or_default())
        .collect();
    let opened: Vec<&str> = texts
        .iter()
        .flat_map(|text| text.lines())
        .filter(|line| line.contains("pausing the route for the whole fleet"))
        .collect();
    eprintln!(
        "thin outage: {} calls during it, {} dead-lettered; pauses: {opened:#?}",
        endpoint.during_outage(),
        letters.len()
    );
    assert_eq!(letters.len(), 0, "an outage dead-letters nothing");
    assert!(
        opened
            .iter()
            .any(|line| line.contains("calls failed across the fleet")),
        "the breaker opened on the fleet's tallies: {opened:?}"
    );
    assert!(
        !opened
            .iter()
            .any(|line| line.contains("calls failed within")),
        "no worker could judge alone: {opened:?}"
    );
    for child in fleet {
        assert!(terminate(child).await.success(), "a clean stop");
    }
}

/// The same outage without a breaker: each record's attempts are spent on it, and every record
/// is dead-lettered.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_breaker_the_same_outage_dead_letters_every_record() {
    let scratch = Scratch::new();
    let (endpoint, topic, fleet, _) = fleet_in_an_outage(&scratch, "no-breaker", "", &BROAD).await;
    let dlq = format!("{topic}.dlq");
    tests::wait_for("every record dead-lettered", OUTAGE, async || {
        Ok(tests::read_all(dlq.clone()).await?.len() >= RECORDS)
    })
    .await
    .expect("the outage dead-letters the records");
    let calls = endpoint.during_outage();
    eprintln!("without a breaker: {calls} calls during the outage, {RECORDS} dead-lettered");
    assert!(calls >= RECORDS * 3, "three attempts each: {calls}");
    for child in fleet {
        assert!(terminate(child).await.success(), "a clean stop");
    }
}

/// A 429 with `Retry-After: 3` on a route with `cool-down`: no worker calls the endpoint for
/// those 3 s (after the first second, which the other workers need to read the pause), then
/// every record is served and the one that got the 429 runs again without being dead-lettered.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_cools_the_whole_fleet_down() {
    let scratch = Scratch::new();
    let topic = unique("cool-down");
    let group = unique("cool-down-group");
    let endpoint = Endpoint::start().await;
    let config = control_config(
        &group,
        &topic,
        &format!("{}\nrate = \"30/s\"\ncool-down = true", endpoint.route()),
    )
    .replace("backoff-max = \"1s\"", "backoff-max = \"10s\"");
    let cfg = scratch.write("worker.toml", &config);
    let cfg = cfg.to_str().expect("utf-8 path");
    let out = share_worker(&["setup", "--config", cfg, "--partitions", "1"], &[]).await;
    assert_ok(&out, "setup");
    let logs: Vec<_> = (0..WORKERS)
        .map(|n| scratch.0.join(format!("worker-{n}.log")))
        .collect();
    let fleet: Vec<_> = logs
        .iter()
        .map(|log| spawn(&["run", "--config", cfg], log))
        .collect();
    let every_log: Vec<&std::path::Path> = logs.iter().map(|log| log.as_path()).collect();
    // The workers take their shares of the rate once records wait; they need the topic read.
    wait_logged(&every_log, "control topic read", Duration::from_secs(60)).await;
    // At 30/s, ~10 s of work, the 429 a second into it.
    let mut values: Vec<String> = (0..300).map(|i| format!("ok-{i}")).collect();
    values.insert(30, "cool-0".to_owned());
    let producer = tests::producer(&[]).expect("a producer");
    tests::produce(&producer, &topic, None, &values)
        .await
        .expect("producing");
    tests::wait_for(
        "every record served",
        Duration::from_secs(120),
        async || {
            let served: std::collections::HashSet<String> = endpoint.bodies().into_iter().collect();
            Ok(served.len() >= values.len())
        },
    )
    .await
    .expect("the fleet serves every record");
    let timeline = endpoint.timeline();
    let limited = timeline
        .iter()
        .find(|(body, _)| body == "cool-0")
        .map(|(_, at)| *at)
        .expect("the 429");
    let quiet: Vec<_> = timeline
        .iter()
        .filter(|(_, at)| {
            *at >= limited + Duration::from_secs(1) && *at < limited + Duration::from_millis(2_900)
        })
        .map(|(body, at)| (body.clone(), at.duration_since(limited)))
        .collect();
    let retried = timeline
        .iter()
        .filter(|(body, _)| body == "cool-0")
        .nth(1)
        .map(|(_, at)| at.duration_since(limited));
    let last_early = timeline
        .iter()
        .filter(|(_, at)| *at > limited && *at < limited + Duration::from_secs(1))
        .map(|(_, at)| at.duration_since(limited))
        .max();
    eprintln!(
        "cool-down: last call {last_early:?} after the 429; calls between 1 s and 2.9 s after it: {quiet:?}; its record ran again after {retried:?}"
    );
    assert!(quiet.is_empty(), "calls during the cool-down: {quiet:?}");
    assert!(
        retried.is_some_and(|after| after >= Duration::from_millis(2_900)),
        "ran again after the cool-down: {retried:?}"
    );
    assert!(
        logs.iter().all(|log| std::fs::read_to_string(log)
            .is_ok_and(|text| text.contains("route paused fleet-wide"))),
        "every worker obeyed the cool-down"
    );
    let letters = tests::read_all(format!("{topic}.dlq"))
        .await
        .expect("reading the DLQ");
    assert_eq!(letters.len(), 0);
    for child in fleet {
        assert!(terminate(child).await.success(), "a clean stop");
    }
}
