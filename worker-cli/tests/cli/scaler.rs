//! `share-worker scaler` called by KEDA's own gRPC client (a Go program on the client KEDA
//! generates, `tests/keda-client`), against the real broker: inactive with nothing waiting, the
//! backlog of a new group before any worker ran (so KEDA scales from zero), the metric following
//! the lag while a worker drains it, inactive again at 0 with the stream saying so within a few
//! seconds, and clear gRPC errors for bad metadata, an unknown group and an unknown topic. Then the
//! scaler as an attacker on the network meets it: TLS with client certificates required (KEDA's
//! `caCert`, `tlsClientCert`, `tlsClientKey`), a plain listener off loopback refused, a thousand
//! streams that cost one read per group per second, and ten thousand random group names that
//! leave its memory bounded.

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
    call_with(addr, op, meta, &[]).await
}

/// One call of the client with more flags (TLS files, load sizes).
async fn call_with(addr: &str, op: &str, meta: &str, flags: &[&str]) -> Value {
    let out = Command::new(keda_client().await)
        .args(["-addr", addr, "-op", op, "-meta", meta])
        .args(flags)
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

/// A group `share-worker setup` made known to the cluster (with its configs), on `topic`.
async fn known_group(scratch: &Scratch, group: &str, topic: &str) -> PathBuf {
    let cfg = scratch.write(
        &format!("{group}.toml"),
        &config(group, topic, "handler = \"noop\""),
    );
    let path = cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", path], &[]).await,
        "setup",
    );
    cfg
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scaler_speaks_mutual_tls_and_refuses_clients_without_a_certificate() {
    let scratch = Scratch::new();
    let pki = crate::https::Pki::new(&scratch);
    let topic = unique("scaler-tls");
    let group = unique("scaler-tls-group");
    let cfg = known_group(&scratch, &group, &topic).await;
    let cfg = cfg.to_str().expect("utf-8 path");
    let path = |p: &PathBuf| p.to_str().expect("utf-8 path").to_owned();
    let (ca, cert, key) = (path(&pki.ca), path(&pki.server_cert), path(&pki.server_key));
    let (client_cert, client_key) = (path(&pki.client_cert), path(&pki.client_key));

    // Plain gRPC off loopback is refused before anything is served, saying the ways out.
    let open = share_worker(
        &[
            "scaler",
            "--config",
            cfg,
            "--listen",
            &format!("0.0.0.0:{}", reserve_port()),
        ],
        &[],
    )
    .await;
    assert!(!open.status.success(), "plain off loopback must be refused");
    let said = text(&open.stderr);
    assert!(
        said.contains("--tls-cert") && said.contains("--allow-plaintext"),
        "{said}"
    );
    // A key that is not a key is named.
    let bad = share_worker(
        &[
            "scaler",
            "--config",
            cfg,
            "--listen",
            &format!("127.0.0.1:{}", reserve_port()),
            "--tls-cert",
            &cert,
            "--tls-key",
            &ca,
        ],
        &[],
    )
    .await;
    assert!(!bad.status.success());
    let said = text(&bad.stderr);
    assert!(said.contains(&ca) && said.contains("private key"), "{said}");

    let addr = format!("127.0.0.1:{}", reserve_port());
    let health = format!("127.0.0.1:{}", reserve_port());
    let log = scratch.0.join("scaler.log");
    let scaler = spawn(
        &[
            "scaler",
            "--config",
            cfg,
            "--listen",
            &addr,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--client-ca",
            &ca,
            "--health-listen",
            &health,
        ],
        &log,
    );
    wait_logged(
        &[&log],
        "KEDA external scaler listening",
        Duration::from_secs(30),
    )
    .await;
    let meta = format!("group={group};topics={topic}");

    // KEDA with its TriggerAuthentication's caCert, tlsClientCert and tlsClientKey is answered.
    let tls = [
        "-ca-cert",
        &ca,
        "-tls-client-cert",
        &client_cert,
        "-tls-client-key",
        &client_key,
    ];
    let answer = call_with(&addr, "is-active", &meta, &tls).await;
    assert_eq!(answer["active"], false, "{answer}");
    let answer = call_with(&addr, "metrics", &meta, &tls).await;
    assert_eq!(answer["value"], 0, "{answer}");
    // The health service, on the main port over TLS and on the probes' plain port.
    let answer = call_with(&addr, "health", "", &tls).await;
    assert_eq!(answer["status"], "SERVING", "{answer}");
    for service in ["", "externalscaler.ExternalScaler"] {
        let answer = call(&health, "health", &format!("service={service}")).await;
        assert_eq!(answer["status"], "SERVING", "{service:?}: {answer}");
    }
    // The probes' port serves nothing else.
    let answer = call(&health, "is-active", &meta).await;
    assert_eq!(answer["code"], "Unimplemented", "{answer}");

    // Without a client certificate, or in plain gRPC: refused, nothing answered.
    for (what, flags) in [
        ("no client certificate", vec!["-ca-cert", ca.as_str()]),
        ("plain gRPC", vec![]),
    ] {
        let answer = call_with(&addr, "is-active", &meta, &flags).await;
        assert!(answer.get("active").is_none(), "{what}: {answer}");
        assert_eq!(answer["code"], "Unavailable", "{what}: {answer}");
    }
    // A client certificate of its own making is refused too.
    let stranger_dir = Scratch::new();
    let stranger = crate::https::Pki::new(&stranger_dir);
    let (s_cert, s_key) = (path(&stranger.client_cert), path(&stranger.client_key));
    let forged = [
        "-ca-cert",
        &ca,
        "-tls-client-cert",
        &s_cert,
        "-tls-client-key",
        &s_key,
    ];
    let answer = call_with(&addr, "is-active", &meta, &forged).await;
    assert!(
        answer.get("active").is_none(),
        "a stranger's certificate: {answer}"
    );

    assert!(
        terminate(scaler).await.success(),
        "the scaler stops cleanly"
    );
}

/// The scaler's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Reads of each of `groups` the scaler logged so far.
fn reads_logged(log: &std::path::Path, groups: &[String]) -> Vec<usize> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    groups
        .iter()
        .map(|group| {
            text.lines()
                .filter(|line| {
                    line.contains("reading the backlog") && line.contains(group.as_str())
                })
                .count()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_streams_cost_one_read_per_group_per_second_and_random_names_stay_bounded() {
    let scratch = Scratch::new();
    let topic = unique("scaler-load");
    let groups: Vec<String> = (0..10)
        .map(|i| unique(&format!("scaler-load-{i}")))
        .collect();
    let mut cfg = PathBuf::new();
    for group in &groups {
        cfg = known_group(&scratch, group, &topic).await;
    }
    let cfg = cfg.to_str().expect("utf-8 path");
    let addr = format!("127.0.0.1:{}", reserve_port());
    let log = scratch.0.join("scaler.log");
    let scaler = spawn_with_env(
        &["scaler", "--config", cfg, "--listen", &addr],
        &[("RUST_LOG", "info,worker_scaler=debug")],
        &log,
    );
    wait_logged(
        &[&log],
        "KEDA external scaler listening",
        Duration::from_secs(30),
    )
    .await;
    let pid = scaler.id().expect("the scaler's pid");
    keda_client().await;
    let idle_rss = rss_kib(pid);

    // A thousand streams over one connection, round-robin over the ten groups, held 20 s.
    let mut streams = Command::new(keda_client().await)
        .args([
            "-addr", &addr, "-op", "streams", "-n", "1000", "-for", "20s",
        ])
        .args([
            "-groups",
            &groups.join(","),
            "-meta",
            &format!("topics={topic}"),
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the streams client");
    let mut lines = BufReader::new(streams.stdout.take().expect("its stdout")).lines();
    let summary = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("every stream answers within 30 s")
        .expect("reading the client")
        .expect("a summary line");
    let summary: Value = serde_json::from_str(&summary).expect("JSON");
    assert_eq!(summary["answered"], 1000, "{summary}");
    // While they are held: each group is read once a second, whatever the number of streams.
    let before = reads_logged(&log, &groups);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = reads_logged(&log, &groups);
    let seconds = started.elapsed().as_secs_f64();
    let streams_rss = rss_kib(pid);
    let per_group: Vec<usize> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    eprintln!("reads per group in {seconds:.1} s with 100 streams on each: {per_group:?}");
    for ((group, b), a) in groups.iter().zip(&before).zip(&after) {
        let reads = (a - b) as f64;
        assert!(
            reads <= seconds + 2.0 && reads >= seconds / 2.0,
            "{group}: {reads} reads in {seconds:.1} s with 100 streams on it"
        );
    }
    let _ = streams.kill().await;

    // Ten thousand random names: each a clear NOT_FOUND, memory flat from one flood to the next.
    let flood = async || {
        let answer = call_with(
            &addr,
            "random",
            &format!("topics={topic}"),
            &["-n", "10000", "-concurrency", "32"],
        )
        .await;
        assert_eq!(answer["codes"]["NotFound"], 10000, "{answer}");
        let message = answer["messages"]["NotFound"].as_str().unwrap_or("");
        assert!(
            message.contains("not found") && message.contains("random-"),
            "{answer}"
        );
        rss_kib(pid)
    };
    let first_flood = flood().await;
    let second_flood = flood().await;
    eprintln!(
        "scaler RSS: idle {idle_rss} KiB; 1,000 streams {streams_rss} KiB; after 10,000 random \
         names {first_flood} KiB; after 20,000 {second_flood} KiB"
    );
    assert!(
        second_flood < first_flood + 16 * 1024,
        "memory grows with the names: {first_flood} KiB, then {second_flood} KiB"
    );
    // A real group is still answered.
    let answer = call(
        &addr,
        "is-active",
        &format!("group={};topics={topic}", groups[0]),
    )
    .await;
    assert_eq!(answer["active"], false, "{answer}");
    assert!(
        terminate(scaler).await.success(),
        "the scaler stops cleanly"
    );
}
