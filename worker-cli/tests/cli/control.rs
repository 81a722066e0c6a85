//! Fleet-wide pause and resume through the group's control topic, with three worker processes of
//! one group against the real broker: no worker fetches a paused route, the pause survives a
//! restart of every worker, malformed commands change nothing, and a resume or the end of a
//! timed pause starts the fleet again.

use std::time::Duration;

use rdkafka::Message;
use tokio::process::Child;
use tokio::time::Instant;

use crate::fake_http::Endpoint;
use crate::support::*;

const WORKERS: usize = 3;
/// How soon every worker obeys a command once the broker confirmed it.
const OBEYED_WITHIN: Duration = Duration::from_secs(2);

/// `WORKERS` `share-worker run` processes, killed when dropped; `generation` names their logs.
fn start_fleet(scratch: &Scratch, cfg: &str, generation: &str) -> Vec<(Child, std::path::PathBuf)> {
    (0..WORKERS)
        .map(|n| {
            let log = scratch.0.join(format!("worker-{generation}-{n}.log"));
            (spawn(&["run", "--config", cfg], &log), log)
        })
        .collect()
}

/// Fails if a request arrives within `window`.
async fn none_handled_for(endpoint: &Endpoint, window: Duration, what: &str) {
    let before = endpoint.handled();
    let end = Instant::now() + window;
    while Instant::now() < end {
        assert_eq!(
            endpoint.handled(),
            before,
            "{what}: a record of the paused route was handled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn produce_batch(topic: &str, prefix: &str, n: usize) {
    let producer = tests::producer(&[]).expect("a producer");
    let values: Vec<String> = (0..n).map(|i| format!("ok-{prefix}{i}")).collect();
    tests::produce(&producer, topic, None, &values)
        .await
        .expect("producing");
}

/// Waits until every worker of `fleet` logged `line`, within `limit`.
async fn every_worker_logged(fleet: &[(Child, std::path::PathBuf)], line: &str, limit: Duration) {
    let logs: Vec<&std::path::Path> = fleet.iter().map(|(_, log)| log.as_path()).collect();
    wait_logged(&logs, line, limit).await;
}

#[tokio::test]
async fn a_pause_holds_for_every_worker_of_the_group_across_restarts_until_it_is_resumed() {
    let scratch = Scratch::new();
    let topic = unique("fleet-pause");
    let group = unique("fleet-pause-group");
    let endpoint = Endpoint::start().await;
    let cfg = scratch.write(
        "worker.toml",
        &control_config(&group, &topic, &endpoint.route()),
    );
    let cfg = cfg.to_str().expect("utf-8 path");
    let out = share_worker(&["setup", "--config", cfg, "--partitions", "3"], &[]).await;
    assert_ok(&out, "setup");
    assert!(
        text(&out.stdout).contains(&format!("topic {group}.control: created (control topic")),
        "{}",
        text(&out.stdout)
    );

    let fleet = start_fleet(&scratch, cfg, "first");
    produce_batch(&topic, "a", 30).await;
    tests::wait_for(
        "the first 30 records",
        Duration::from_secs(60),
        async || Ok(endpoint.handled() >= 30),
    )
    .await
    .expect("the fleet handles records");

    let out = share_worker(
        &[
            "pause",
            "--config",
            cfg,
            "--topic",
            &topic,
            "--reason",
            "provider outage",
            "--by",
            "ops",
        ],
        &[],
    )
    .await;
    assert_ok(&out, "pause");
    every_worker_logged(&fleet, "route paused fleet-wide", OBEYED_WITHIN).await;
    produce_batch(&topic, "b", 30).await;
    none_handled_for(&endpoint, Duration::from_secs(5), "paused").await;
    assert_eq!(endpoint.handled(), 30);

    let out = share_worker(&["status", "--config", cfg], &[]).await;
    assert_ok(&out, "status");
    let status = text(&out.stdout);
    assert!(
        status.contains("PAUSED-TOPIC")
            && status.contains(&topic)
            && status.contains("provider outage"),
        "{status}"
    );

    // Every worker restarts: the new ones read the pause before their first fetch.
    drop(fleet);
    let fleet = start_fleet(&scratch, cfg, "second");
    every_worker_logged(&fleet, "control topic read", Duration::from_secs(30)).await;
    // Commands that are not commands: refused, counted, and the pause still holds.
    let producer = tests::producer(&[]).expect("a producer");
    for (key, value) in [
        ("pause/other", "not json"),
        ("drop/everything", "{}"),
        ("pause/../../etc", "{}"),
    ] {
        tests::produce_keyed(&producer, &format!("{group}.control"), key, value)
            .await
            .expect("writing a malformed command");
    }
    every_worker_logged(&fleet, "control command refused", Duration::from_secs(10)).await;
    none_handled_for(
        &endpoint,
        Duration::from_secs(5),
        "paused after the restart",
    )
    .await;

    let out = share_worker(&["resume", "--config", cfg, "--topic", &topic], &[]).await;
    assert_ok(&out, "resume");
    tests::wait_for(
        "a record within 2 s of the resume",
        OBEYED_WITHIN,
        async || Ok(endpoint.handled() > 30),
    )
    .await
    .expect("the fleet resumes");
    tests::wait_for("every record", Duration::from_secs(60), async || {
        Ok(endpoint.handled() >= 60)
    })
    .await
    .expect("the fleet drains the route");

    // A timed pause ends by itself.
    let out = share_worker(
        &[
            "pause", "--config", cfg, "--topic", &topic, "--for", "3s", "--reason", "window",
        ],
        &[],
    )
    .await;
    assert_ok(&out, "pause --for");
    let paused = Instant::now();
    every_worker_logged(&fleet, "route paused fleet-wide", OBEYED_WITHIN).await;
    produce_batch(&topic, "c", 10).await;
    tests::wait_for(
        "the records after the timed pause",
        Duration::from_secs(30),
        async || Ok(endpoint.handled() >= 70),
    )
    .await
    .expect("the timed pause ends");
    assert!(
        paused.elapsed() >= Duration::from_secs(2),
        "handled {:?} into a 3 s pause",
        paused.elapsed()
    );
    drop(fleet);
}

/// A fresh topic of one partition with its group's control topic, set up from `worker.toml` in
/// the returned scratch directory; the endpoint its route posts to.
async fn one_worker_setup(name: &str) -> (Scratch, String, String, Endpoint) {
    let scratch = Scratch::new();
    let topic = unique(name);
    let group = unique(&format!("{name}-group"));
    let endpoint = Endpoint::start().await;
    let cfg = scratch.write(
        "worker.toml",
        &control_config(&group, &topic, &endpoint.route()),
    );
    let cfg = cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg, "--partitions", "1"], &[]).await,
        "setup",
    );
    (scratch, topic, group, endpoint)
}

/// A cancellation that lapsed is tombstoned by the next worker to start (its first sweep comes
/// a few seconds after it read the topic), so compaction removes it: no command keeps a record
/// per command forever.
#[tokio::test]
async fn a_lapsed_cancellation_is_replaced_by_a_tombstone() {
    let (scratch, _topic, group, _endpoint) = one_worker_setup("lapsed-cancel").await;
    let cfg = scratch.0.join("worker.toml");
    let cfg = cfg.to_str().expect("utf-8 path");
    let job = "reminder-7";
    let out = share_worker(
        &["cancel", "--config", cfg, "--job-id", job, "--for", "1s"],
        &[],
    )
    .await;
    assert_ok(&out, "cancel");
    let log = scratch.0.join("worker.log");
    let worker = spawn(&["run", "--config", cfg], &log);
    let control = format!("{group}.control");
    let key = format!("cancel/{job}");
    tests::wait_for(
        "the lapsed cancellation's tombstone",
        Duration::from_secs(30),
        async || {
            let records = tests::read_all(control.clone()).await?;
            let of_job: Vec<bool> = records
                .iter()
                .filter(|m| m.key() == Some(key.as_bytes()))
                .map(|m| m.payload().is_none())
                .collect();
            Ok(of_job == [false, true])
        },
    )
    .await
    .expect("a worker tombstones what lapsed");
    assert!(terminate(worker).await.success(), "a clean stop");
}

/// 500,000 records of junk on the control topic, written by Kafka's console producer, delay a
/// worker's start by the seconds they take to read (within 30 s), are counted, and are warned
/// of once: one line with their count and the first one's reason, none per record.
#[tokio::test]
async fn a_control_topic_full_of_junk_is_read_within_30_s_and_warned_of_once() {
    const JUNK: usize = 500_000;
    let (scratch, topic, group, endpoint) = one_worker_setup("junk-control").await;
    let cfg = scratch.0.join("worker.toml");
    let cfg = cfg.to_str().expect("utf-8 path");
    let mut junk = String::with_capacity(JUNK * 24);
    for n in 0..JUNK {
        match n % 3 {
            0 => junk.push_str(&format!("junk-{n}\t{{\"v\":1}}\n")),
            1 => junk.push_str(&format!("pause/{topic}\tnot json {n}\n")),
            _ => junk.push_str(&format!("cancel/{n}\t{{\"v\":1,\"command\":\"cancel\"}}\n")),
        }
    }
    let control = format!("{group}.control");
    console_produce(
        &bootstrap(),
        &control,
        &["--property", "parse.key=true"],
        junk.into_bytes(),
    )
    .await;
    let log = scratch.0.join("worker.log");
    let started = std::time::Instant::now();
    let worker = spawn(&["run", "--config", cfg], &log);
    wait_logged(
        &[log.as_path()],
        "control topic read",
        Duration::from_secs(30),
    )
    .await;
    let took = started.elapsed();
    let text = std::fs::read_to_string(&log).expect("the log");
    let warned: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("no valid command"))
        .collect();
    eprintln!("{JUNK} junk records read in {took:?}: {warned:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains(&format!("refused={JUNK}")),
        "{}",
        warned[0]
    );
    assert!(warned[0].contains("first="), "{}", warned[0]);
    assert!(
        !text.contains("control command refused"),
        "a line per refusal while reading"
    );
    // The worker runs: a job is served.
    produce_batch(&topic, "after-junk-", 1).await;
    tests::wait_for("the job served", Duration::from_secs(30), async || {
        Ok(endpoint.handled() >= 1)
    })
    .await
    .expect("the worker runs");
    assert!(terminate(worker).await.success(), "a clean stop");
}
