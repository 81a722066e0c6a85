//! Fleet-wide pause and resume through the group's control topic, with three worker processes of
//! one group against the real broker: no worker fetches a paused route, the pause survives a
//! restart of every worker, malformed commands change nothing, and a resume or the end of a
//! timed pause starts the fleet again.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::process::Child;
use tokio::time::Instant;

use crate::fake_http::{Seen, serve};
use crate::support::*;

const WORKERS: usize = 3;
/// How soon every worker obeys a command once the broker confirmed it.
const OBEYED_WITHIN: Duration = Duration::from_secs(2);

fn fleet_config(group: &str, topic: &str, addr: SocketAddr) -> String {
    config(
        group,
        topic,
        &format!("handler = \"http\"\nurl = \"http://{addr}/send\"\ntimeout = \"5s\""),
    )
    .replace("[dlq]", "[control]\n\n[dlq]")
}

/// `WORKERS` `share-worker run` processes, killed when dropped; `generation` names their logs.
fn start_fleet(scratch: &Scratch, cfg: &str, generation: &str) -> Vec<(Child, std::path::PathBuf)> {
    (0..WORKERS)
        .map(|n| {
            let log = scratch.0.join(format!("worker-{generation}-{n}.log"));
            (spawn(&["run", "--config", cfg], &log), log)
        })
        .collect()
}

fn handled(seen: &Mutex<Seen>) -> usize {
    seen.lock().expect("the seen lock").requests.len()
}

/// Fails if a request arrives within `window`.
async fn none_handled_for(seen: &Mutex<Seen>, window: Duration, what: &str) {
    let before = handled(seen);
    let end = Instant::now() + window;
    while Instant::now() < end {
        assert_eq!(
            handled(seen),
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
    tests::wait_for(
        &format!("every worker to log {line:?}"),
        limit,
        async || {
            Ok(fleet
                .iter()
                .all(|(_, log)| std::fs::read_to_string(log).is_ok_and(|text| text.contains(line))))
        },
    )
    .await
    .expect("every worker obeyed");
}

#[tokio::test]
async fn a_pause_holds_for_every_worker_of_the_group_across_restarts_until_it_is_resumed() {
    let scratch = Scratch::new();
    let topic = unique("fleet-pause");
    let group = unique("fleet-pause-group");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let addr = listener.local_addr().expect("an address");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let server = tokio::spawn(serve(listener, seen.clone()));
    let cfg = scratch.write("worker.toml", &fleet_config(&group, &topic, addr));
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
        async || Ok(handled(&seen) >= 30),
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
    none_handled_for(&seen, Duration::from_secs(5), "paused").await;
    assert_eq!(handled(&seen), 30);

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
    none_handled_for(&seen, Duration::from_secs(5), "paused after the restart").await;

    let out = share_worker(&["resume", "--config", cfg, "--topic", &topic], &[]).await;
    assert_ok(&out, "resume");
    tests::wait_for(
        "a record within 2 s of the resume",
        OBEYED_WITHIN,
        async || Ok(handled(&seen) > 30),
    )
    .await
    .expect("the fleet resumes");
    tests::wait_for("every record", Duration::from_secs(60), async || {
        Ok(handled(&seen) >= 60)
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
        async || Ok(handled(&seen) >= 70),
    )
    .await
    .expect("the timed pause ends");
    assert!(
        paused.elapsed() >= Duration::from_secs(2),
        "handled {:?} into a 3 s pause",
        paused.elapsed()
    );
    drop(fleet);
    server.abort();
}
