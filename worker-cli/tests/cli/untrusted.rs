//! The http and exec handlers against hostile or unlucky input: redirects, floods on stderr,
//! secrets in the worker's environment, keys that are no text, commands that leave processes
//! behind.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::process::Command;

use crate::fake_http::redirecting;
use crate::support::*;

/// The redirect target the fake endpoint names: a line separator, then far too long.
fn hostile_location(addr: std::net::SocketAddr) -> Vec<u8> {
    let mut location = format!("http://{addr}/landing?next=").into_bytes();
    location.extend_from_slice("\u{2028}".as_bytes());
    location.extend(std::iter::repeat_n(b'a', 5000));
    location
}

/// Runs an http route whose endpoint answers 302 to `/send` (the route's keys after `url`); the
/// stats, the requested paths and the dead letter's headers.
async fn redirected(
    name: &str,
    extra: &str,
) -> (Value, Vec<String>, Vec<(String, Vec<u8>)>, String) {
    let scratch = Scratch::new();
    let topic = unique(name);
    let group = unique(&format!("{name}-group"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let addr = listener.local_addr().expect("an address");
    let paths = Arc::new(Mutex::new(Vec::new()));
    let server = tokio::spawn(redirecting(listener, hostile_location(addr), paths.clone()));
    let route =
        format!("handler = \"http\"\nurl = \"http://{addr}/send\"\ntimeout = \"5s\"\n{extra}");
    let cfg = scratch.write("worker.toml", &config(&group, &topic, &route));
    let cfg = cfg.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, cfg, &topic, 1, &["job-1"], &[]).await;
    let stats = run_until_idle(&scratch, cfg).await;
    server.abort();
    let letter = read_headers(&format!("{topic}.dlq"), 1).await.remove(0);
    let paths = paths.lock().expect("the paths lock").clone();
    (stats, paths, letter, format!("http://{addr}/landing?next="))
}

#[track_caller]
fn assert_redirect_error(letter: &[(String, Vec<u8>)], landing: &str) {
    let error = header_value(letter, "share.dlq.error").expect("share.dlq.error");
    let quoted = format!("HTTP 302 Found, not followed; Location: {landing}\\u{{2028}}aaa");
    assert!(error.starts_with(&quoted), "{error}");
    assert!(error.ends_with("a…"), "the Location is cut: {error}");
    assert!(error.len() < 400, "{} bytes: {error}", error.len());
}

#[tokio::test]
async fn http_retries_a_redirect_and_never_follows_it() {
    let (stats, paths, letter, landing) = redirected("cli-redirect", "").await;
    assert_eq!(count(&stats, "accepted"), 0, "{stats}");
    assert_eq!(count(&stats, "dlq"), 1, "{stats}");
    assert!(paths.len() >= 2, "retried: {paths:?}");
    assert!(paths.iter().all(|p| p == "/send"), "followed: {paths:?}");
    assert_eq!(
        count(&stats, "released") as usize,
        paths.len() - 1,
        "every attempt but the last was released: {stats}"
    );
    assert_eq!(
        header_value(&letter, "share.dlq.reason").as_deref(),
        Some("handler_error")
    );
    assert_redirect_error(&letter, &landing);
}

#[tokio::test]
async fn http_rejects_a_redirect_at_once_when_told_to() {
    let (stats, paths, letter, landing) =
        redirected("cli-redirect-reject", "on-redirect = \"reject\"").await;
    assert_eq!(count(&stats, "accepted"), 0, "{stats}");
    assert_eq!(count(&stats, "rejected"), 1, "{stats}");
    assert_eq!(count(&stats, "dlq"), 1, "{stats}");
    assert_eq!(count(&stats, "released"), 0, "{stats}");
    assert_eq!(paths, ["/send"]);
    assert_eq!(
        header_value(&letter, "share.dlq.reason").as_deref(),
        Some("rejected")
    );
    assert_redirect_error(&letter, &landing);
}

/// `setup` with one partition.
async fn setup(cfg: &str) {
    let out = share_worker(&["setup", "--config", cfg, "--partitions", "1"], &[]).await;
    assert_ok(&out, "setup");
}

/// Runs the worker until idle like [`run_until_idle`], sampling its peak resident memory (VmHWM)
/// meanwhile; the stats and the peak in KiB.
async fn run_measuring_memory(scratch: &Scratch, cfg: &str) -> (Value, u64) {
    let stats = scratch.0.join("stats.json");
    let mut worker = Command::new(BIN)
        .args(["run", "--config", cfg, "--exit-when-idle", "3s"])
        .arg("--stats-json")
        .arg(&stats)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starting share-worker");
    let status = format!("/proc/{}/status", worker.id().expect("a pid"));
    let deadline = Instant::now() + DEADLINE;
    let mut peak = 0;
    let exit = loop {
        let hwm = std::fs::read_to_string(&status).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        });
        peak = peak.max(hwm.unwrap_or(0));
        if let Some(exit) = worker.try_wait().expect("the worker's state") {
            break exit;
        }
        assert!(Instant::now() < deadline, "the worker did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "run failed: {exit}");
    let json = std::fs::read_to_string(&stats).expect("the stats file");
    (serde_json::from_str(&json).expect("stats JSON"), peak)
}

#[tokio::test]
async fn exec_keeps_only_the_tail_of_a_flood_on_stderr() {
    const FLOOD_MIB: u64 = 128;
    let scratch = Scratch::new();
    let topic = unique("cli-exec-flood");
    let group = unique("cli-exec-flood-group");
    let script = format!(
        r"head -c {} /dev/zero | tr '\0' x >&2; echo >&2; echo last words >&2; exit 3",
        FLOOD_MIB << 20
    );
    let route = format!(
        "handler = \"exec\"\ncommand = [\"sh\", \"-c\", '''{script}''']\nreject-exit-codes = [3]"
    );
    let cfg = scratch.write("worker.toml", &config(&group, &topic, &route));
    let cfg = cfg.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, cfg, &topic, 1, &["loud"], &[]).await;
    let (stats, peak_kib) = run_measuring_memory(&scratch, cfg).await;
    assert_eq!(count(&stats, "rejected"), 1, "{stats}");
    assert!(
        peak_kib < (FLOOD_MIB << 10) / 2,
        "the worker's memory peaked at {peak_kib} KiB"
    );
    let letter = read_headers(&format!("{topic}.dlq"), 1).await.remove(0);
    let error = header_value(&letter, "share.dlq.error").expect("share.dlq.error");
    assert!(error.starts_with("exit code 3: xxx"), "{error}");
    assert!(error.ends_with("x\\nlast words"), "{error}");
    assert!(error.len() < 300, "{} bytes: {error}", error.len());
}

#[tokio::test]
async fn exec_withholds_the_workers_environment() {
    let scratch = Scratch::new();
    let topic = unique("cli-exec-env");
    let group = unique("cli-exec-env-group");
    let seen = scratch.0.join("env.txt");
    let route = format!(
        "handler = \"exec\"\ncommand = [\"sh\", \"-c\", 'env > {}']",
        seen.display()
    );
    let cfg = scratch.write("worker.toml", &config(&group, &topic, &route));
    let cfg = cfg.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, cfg, &topic, 1, &["one"], &[]).await;
    let env = [
        ("SHARE_WORKER_TEST_SECRET", "hunter2"),
        // A configuration override: it may carry credentials too.
        ("SHARE_WORKER__WORKER__SHUTDOWN_GRACE", "29s"),
        ("LANG", "C.UTF-8"),
    ];
    let stats = run_until_idle_with(&scratch, cfg, &env).await;
    assert_eq!(count(&stats, "accepted"), 1, "{stats}");
    let seen = std::fs::read_to_string(&seen).expect("the command's environment");
    let names: BTreeSet<&str> = seen.lines().filter_map(|l| l.split('=').next()).collect();
    assert!(!seen.contains("hunter2"), "{seen}");
    assert!(!names.contains("SHARE_WORKER_TEST_SECRET"), "{seen}");
    assert!(
        !names.contains("SHARE_WORKER__WORKER__SHUTDOWN_GRACE"),
        "{seen}"
    );
    assert!(names.contains("PATH"), "{seen}");
    assert!(seen.lines().any(|l| l == "LANG=C.UTF-8"), "{seen}");
    assert!(
        seen.lines()
            .any(|l| l == format!("SHARE_WORKER_TOPIC={topic}")),
        "{seen}"
    );
}

#[tokio::test]
async fn exec_accepts_records_whose_keys_are_not_text() {
    use rdkafka::producer::{FutureProducer, FutureRecord};

    let scratch = Scratch::new();
    let topic = unique("cli-exec-keys");
    let group = unique("cli-exec-keys-group");
    let out = scratch.0.join("out");
    std::fs::create_dir_all(&out).expect("the output dir");
    let script = format!(
        r#"printf '%s|%s|%s' "${{SHARE_WORKER_KEY-unset}}" "${{SHARE_WORKER_KEY_HEX-unset}}" "$(cat)" > {}/$SHARE_WORKER_OFFSET"#,
        out.display()
    );
    let route = format!("handler = \"exec\"\ncommand = [\"sh\", \"-c\", '''{script}''']");
    let cfg = scratch.write("worker.toml", &config(&group, &topic, &route));
    let cfg = cfg.to_str().expect("utf-8 path");
    setup(cfg).await;

    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .expect("a producer");
    let records: [(Option<&[u8]>, &[u8]); 4] = [
        (Some(b"nul\0key"), b"a"),
        (Some(b"bad\xffutf8"), b"b"),
        (Some(b"plain-key"), b"c"),
        (None, b"d"),
    ];
    for (key, payload) in records {
        let mut record = FutureRecord::<[u8], [u8]>::to(&topic).payload(payload);
        if let Some(key) = key {
            record = record.key(key);
        }
        producer
            .send(record, Duration::from_secs(30))
            .await
            .expect("producing a record");
    }

    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!(count(&stats, "accepted"), 4, "{stats}");
    assert_eq!(count(&stats, "dlq"), 0, "{stats}");
    let seen: BTreeSet<String> = std::fs::read_dir(&out)
        .expect("the output dir")
        .map(|entry| std::fs::read_to_string(entry.expect("an entry").path()).expect("an output"))
        .collect();
    let expected: BTreeSet<String> = [
        "unset|6e756c006b6579|a",
        "unset|626164ff75746638|b",
        "plain-key|unset|c",
        "unset|unset|d",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(seen, expected);
}

/// Whether `pid` is a running `sleep` (not a zombie, not a reused pid).
fn sleeping(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.contains("(sleep) ") && !stat.contains("(sleep) Z"))
}

#[tokio::test]
async fn exec_timeout_kills_what_the_command_started() {
    let scratch = Scratch::new();
    let topic = unique("cli-exec-group-kill");
    let group = unique("cli-exec-group-kill-group");
    let pids = scratch.0.join("pids");
    let p = pids.display();
    let route = format!(
        "handler = \"exec\"\ncommand = [\"sh\", \"-c\", '''sleep 300 & echo $! >> {p}; sleep 300 & echo $! >> {p}; wait''']\ntimeout = \"1s\""
    );
    let cfg = scratch.write("worker.toml", &config(&group, &topic, &route));
    let cfg = cfg.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, cfg, &topic, 1, &["stuck"], &[]).await;
    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!(count(&stats, "accepted"), 0, "{stats}");
    assert_eq!(count(&stats, "dlq"), 1, "{stats}");
    let started = std::fs::read_to_string(&pids).expect("the pids");
    let started: Vec<&str> = started.lines().collect();
    assert!(started.len() >= 4, "{started:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left: Vec<_> = started.iter().filter(|pid| sleeping(pid)).collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still running: {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let letter = read_headers(&format!("{topic}.dlq"), 1).await.remove(0);
    let error = header_value(&letter, "share.dlq.error").expect("share.dlq.error");
    assert!(error.starts_with("killed after 1s"), "{error}");
}
