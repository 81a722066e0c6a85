//! `share-worker scaler` called by KEDA's own gRPC client (a Go program on the client KEDA
//! generates, `tests/keda-client`), against the real broker: inactive with nothing waiting, the
//! backlog of a new group before any worker ran (so KEDA scales from zero), the metric following
//! the lag while a worker drains it, inactive again at 0 with the stream saying so within a few
//! seconds, and clear gRPC errors for bad metadata, an unknown group and an unknown topic.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::OnceCell;

use crate::support::*;

const BACKLOG: usize = 3_000;

/// Builds the Go client once per test run (the Go module proxy provides KEDA's module).
async fn keda_client() -> &'static PathBuf {
    static CLIENT: OnceCell<PathBuf> = OnceCell::const_new();
    CLIENT
        .get_or_init(|| async {
            let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("keda-client");
            let built = Command::new("go")
                .args(["build", "-o"])
                .arg(&out)
                .arg(".")
                .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/keda-client"))
                .output()
                .await
                .expect("running go build");
            assert!(
                built.status.success(),
                "go build of the KEDA client: {}",
                text(&built.stderr)
            );
            out
        })
        .await
}

/// One call of the client: its JSON answer (or `{"code", "message"}` for a gRPC error).
async fn call(addr: &str, op: &str, meta: &str) -> Value {
    let out = Command::new(keda_client().await)
        .args(["-addr", addr, "-op", op, "-meta", meta])
        .output()
        .await
        .expect("running the KEDA client");
    assert!(out.status.success(), "keda-client: {}", text(&out.stderr));
    let line = text(&out.stdout);
    serde_json::from_str(line.lines().next().unwrap_or_default())
        .unwrap_or_else(|err| panic!("{err}: {line}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn kedas_client_scales_on_the_share_group_backlog_from_zero() {
    let scratch = Scratch::new();
    let topic = unique("scaler");
    let group = unique("scaler-group");
    let cfg = scratch.write(
        "worker.toml",
        &config(&group, &topic, "handler = \"noop\"\ndelay = \"5ms\""),
    );
    let cfg = cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg, "--partitions", "2"], &[]).await,
        "setup",
    );
    let port = reserve_port();
    let addr = format!("127.0.0.1:{port}");
    let scaler_log = scratch.0.join("scaler.log");
    let scaler = spawn(&["scaler", "--config", cfg, "--listen", &addr], &scaler_log);
    wait_logged(
        &[&scaler_log],
        "KEDA external scaler listening",
        Duration::from_secs(30),
    )
    .await;
    keda_client().await;
    let meta = format!("group={group};topics={topic};lagThreshold=50;scalerAddress={addr}");

    // Nothing waits: inactive, and the metric's target is the threshold.
    assert_eq!(call(&addr, "is-active", &meta).await["active"], false);
    let spec = call(&addr, "metric-spec", &meta).await;
    assert_eq!(spec["target"], 50, "{spec}");
    assert!(
        spec["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("share-group-lag-scaler-group-")),
        "{spec}"
    );

    // Errors say what is wrong.
    let bad = call(&addr, "is-active", &format!("topics={topic}")).await;
    assert_eq!(bad["code"], "InvalidArgument", "{bad}");
    assert!(
        bad["message"].as_str().unwrap_or("").contains("`group`"),
        "{bad}"
    );
    let bad = call(&addr, "metrics", &format!("{meta};lagThreshold=many")).await;
    assert_eq!(bad["code"], "InvalidArgument", "{bad}");
    let unknown = call(
        &addr,
        "metrics",
        &format!("group={};topics={topic}", unique("nobody")),
    )
    .await;
    assert_eq!(unknown["code"], "NotFound", "{unknown}");
    assert!(
        unknown["message"]
            .as_str()
            .unwrap_or("")
            .contains("not found"),
        "{unknown}"
    );
    let missing = call(
        &addr,
        "metrics",
        &format!("group={group};topics={}", unique("no-topic")),
    )
    .await;
    assert_eq!(missing["code"], "NotFound", "{missing}");

    // A stream, read in the background: every line it prints (an answer, or the gRPC error that
    // ended it), with when it came.
    let stream_lines: Arc<Mutex<Vec<(Value, Instant)>>> = Arc::default();
    let mut stream = Command::new(keda_client().await)
        .args([
            "-addr", &addr, "-op", "stream", "-for", "300s", "-meta", &meta,
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the stream client");
    let mut lines = BufReader::new(stream.stdout.take().expect("its stdout")).lines();
    let seen = stream_lines.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let value = serde_json::from_str(&line).unwrap_or(Value::String(line));
            seen.lock()
                .expect("the lines")
                .push((value, Instant::now()));
        }
    });
    let streamed = |active: bool, after: Instant| {
        stream_lines
            .lock()
            .expect("the lines")
            .iter()
            .any(|(line, at)| line["active"] == active && *at >= after)
    };
    // What the stream said and what the scaler logged, for a failure's message.
    let story = |since: Instant| {
        let said: Vec<String> = stream_lines
            .lock()
            .expect("the lines")
            .iter()
            .map(|(line, at)| format!("{:?}: {line}", at.saturating_duration_since(since)))
            .collect();
        let log = std::fs::read_to_string(&scaler_log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        format!("stream: {said:#?}\nscaler log, last lines first: {tail:#?}")
    };
    // The stream reads every second, each read bounded at 3 s: on a loaded machine two slow reads
    // in a row take it to ~7 s.
    let within = Duration::from_secs(10);
    tests::wait_for("the stream's first answer", within, async || {
        Ok(!stream_lines.lock().expect("the lines").is_empty())
    })
    .await
    .expect("the stream answers at once");
    assert_eq!(
        stream_lines.lock().expect("the lines")[0].0["active"],
        false,
        "inactive first"
    );

    // A backlog, no worker yet: active, and the metric is the whole backlog.
    let producer = tests::producer(&[]).expect("a producer");
    let values: Vec<String> = (0..BACKLOG).map(|i| format!("job-{i}")).collect();
    tests::produce(&producer, &topic, None, &values)
        .await
        .expect("producing");
    let produced = Instant::now();
    // The scaler gives a value read within the last 500 ms again: the first answers after the
    // produce may still be the empty topic's.
    let mut seen = Vec::new();
    tests::wait_for("active, with the whole backlog", within, async || {
        let active = call(&addr, "is-active", &meta).await["active"] == true;
        let value = call(&addr, "metrics", &meta).await["value"].as_i64();
        seen.push(value);
        Ok(active && value == Some(BACKLOG as i64))
    })
    .await
    .unwrap_or_else(|err| panic!("{err}: metrics {seen:?}"));
    assert!(
        seen.iter()
            .all(|v| *v == Some(0) || *v == Some(BACKLOG as i64)),
        "the empty topic's 0, then the whole backlog: {seen:?}"
    );
    tests::wait_for("the stream to say active", within, async || {
        Ok(streamed(true, produced))
    })
    .await
    .unwrap_or_else(|err| panic!("{err}: {}", story(produced)));

    // A worker drains it: the metric follows the lag down to 0.
    let worker = spawn(&["run", "--config", cfg], &scratch.0.join("worker.log"));
    let mut metrics = Vec::new();
    tests::wait_for(
        "the backlog drained",
        Duration::from_secs(120),
        async || {
            let value = call(&addr, "metrics", &meta).await["value"]
                .as_i64()
                .unwrap_or(-1);
            metrics.push(value);
            Ok(value == 0)
        },
    )
    .await
    .expect("the metric reaches 0");
    let drained = Instant::now();
    assert!(
        metrics.iter().any(|v| *v > 0 && *v < BACKLOG as i64),
        "the metric followed the lag down: {metrics:?}"
    );
    assert!(
        metrics.iter().all(|v| (0..=BACKLOG as i64).contains(v)),
        "{metrics:?}"
    );
    tests::wait_for("inactive", within, async || {
        Ok(call(&addr, "is-active", &meta).await["active"] == false)
    })
    .await
    .expect("inactive once the backlog is drained");
    // The stream sends only changes: once it said active, its last answer says inactive. (It may
    // have said so before this test's own calls saw the 0: they and the stream read apart.)
    tests::wait_for("the stream to say inactive", within, async || {
        let lines = stream_lines.lock().expect("the lines");
        let said_active = lines
            .iter()
            .any(|(line, at)| line["active"] == true && *at >= produced);
        Ok(said_active
            && lines
                .last()
                .is_some_and(|(line, _)| line["active"] == false))
    })
    .await
    .unwrap_or_else(|err| panic!("{err}: {}", story(produced)));
    eprintln!(
        "metric while draining: {metrics:?}; drained {:?} after producing; {}",
        drained.saturating_duration_since(produced),
        story(produced)
    );

    assert!(
        terminate(worker).await.success(),
        "the worker stops cleanly"
    );
    assert!(
        terminate(scaler).await.success(),
        "the scaler stops cleanly"
    );
    let _ = stream.kill().await;
}
