//! The built `share-worker` binary against the real broker (`KAFKA_BOOTSTRAP`, default
//! 127.0.0.1:9092; `scripts/kafka.sh start` runs one). Each test uses its own topics and group.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_share-worker");
/// No command of a test may take longer.
const DEADLINE: Duration = Duration::from_secs(120);

fn bootstrap() -> String {
    std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// A scratch directory removed at the end of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(unique("share-worker-cli"));
        std::fs::create_dir_all(&dir).expect("creating a scratch dir");
        Self(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("writing a scratch file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the binary with `args` (and `env`) to completion within the deadline.
async fn share_worker(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    match tokio::time::timeout(DEADLINE, command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(err)) => panic!("cannot run {BIN}: {err}"),
        Err(_) => panic!("share-worker {args:?} did not finish within {DEADLINE:?}"),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
fn assert_ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
}

/// A config with one route on `topic` (the route's keys after `handler`), a DLQ and fast retries.
fn config(group: &str, topic: &str, route: &str) -> String {
    format!(
        r#"
[kafka]
bootstrap = "{bootstrap}"
client-id = "cli-test"

[worker]
group = "{group}"
concurrency = 8
lock-duration = "20s"

[retry]
backoff-initial = "100ms"
backoff-max = "1s"

[dlq]
topic = "{{topic}}.dlq"

[[route]]
topic = "{topic}"
{route}
"#,
        bootstrap = bootstrap()
    )
}

/// setup, produce `lines` through `--file`, run until idle; the stats JSON.
async fn setup_produce_run(
    scratch: &Scratch,
    config_path: &Path,
    topic: &str,
    lines: &[&str],
) -> Value {
    let cfg = config_path.to_str().expect("utf-8 path");
    setup_and_produce(scratch, cfg, topic, 2, lines, &[]).await;
    run_until_idle(scratch, cfg).await
}

/// `setup` with `partitions` partitions, then `produce` one record per line of `lines` (with the
/// `extra` produce arguments, e.g. headers).
async fn setup_and_produce(
    scratch: &Scratch,
    cfg: &str,
    topic: &str,
    partitions: u32,
    lines: &[&str],
    extra: &[&str],
) {
    let partitions = partitions.to_string();
    let out = share_worker(
        &["setup", "--config", cfg, "--partitions", &partitions],
        &[],
    )
    .await;
    assert_ok(&out, "setup");
    let jobs = scratch.write("jobs.txt", &lines.join("\n"));
    let jobs = jobs.to_str().expect("utf-8 path");
    let bootstrap = bootstrap();
    let produce = [
        "produce",
        "--bootstrap",
        &bootstrap,
        "--topic",
        topic,
        "--file",
        jobs,
    ];
    let out = share_worker(&[&produce[..], extra].concat(), &[]).await;
    assert_ok(&out, "produce");
    assert!(
        text(&out.stdout).contains(&format!("produced {} records", lines.len())),
        "{}",
        text(&out.stdout)
    );
}

async fn run_until_idle(scratch: &Scratch, cfg: &str) -> Value {
    let stats = scratch.0.join("stats.json");
    let out = share_worker(
        &[
            "run",
            "--config",
            cfg,
            "--exit-when-idle",
            "3s",
            "--stats-json",
            stats.to_str().expect("utf-8 path"),
        ],
        &[],
    )
    .await;
    assert_ok(&out, "run");
    assert!(
        text(&out.stderr).contains("share-worker: processed"),
        "no summary line: {}",
        text(&out.stderr)
    );
    let json = std::fs::read_to_string(&stats).expect("the stats file");
    serde_json::from_str(&json).expect("stats JSON")
}

fn count(stats: &Value, key: &str) -> u64 {
    stats[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {stats}"))
}

#[tokio::test]
async fn noop_processes_everything_produced_then_exits_when_idle() {
    let scratch = Scratch::new();
    let topic = unique("cli-noop");
    let group = unique("cli-noop-group");
    let cfg = scratch.write(
        "worker.toml",
        &config(&group, &topic, "handler = \"noop\"\ndelay = \"1ms\""),
    );
    let out = share_worker(&["setup", "--config", cfg.to_str().unwrap()], &[]).await;
    assert_ok(&out, "setup");
    let out = share_worker(
        &[
            "produce",
            "--bootstrap",
            &bootstrap(),
            "--topic",
            &topic,
            "--count",
            "300",
            "--size",
            "64",
        ],
        &[],
    )
    .await;
    assert_ok(&out, "produce");
    assert!(
        text(&out.stdout).contains("records/s"),
        "{}",
        text(&out.stdout)
    );
    let stats = run_until_idle(&scratch, cfg.to_str().unwrap()).await;
    assert_eq!(count(&stats, "accepted"), 300, "{stats}");
    assert_eq!(count(&stats, "processed"), 300, "{stats}");
    for key in ["released", "rejected", "dlq", "renewed", "ack_failures"] {
        assert_eq!(count(&stats, key), 0, "{key}: {stats}");
    }
    assert!(
        stats["duration_s"].as_f64().is_some_and(|d| d > 0.0),
        "{stats}"
    );
}

#[tokio::test]
async fn exec_accepts_rejects_and_sees_the_record() {
    let scratch = Scratch::new();
    let topic = unique("cli-exec");
    let group = unique("cli-exec-group");
    // Rejects payloads starting with "bad" (exit 3); checks its environment (exit 9 would retry).
    let script = r#"payload=$(cat); [ "$SHARE_WORKER_TOPIC" = "$EXPECTED_TOPIC" ] || exit 9; [ -n "$SHARE_WORKER_OFFSET" ] || exit 9; case "$payload" in bad*) exit 3;; esac; exit 0"#;
    let route = format!(
        "handler = \"exec\"\ncommand = [\"sh\", \"-c\", '''EXPECTED_TOPIC={topic}; {script}''']\nreject-exit-codes = [3]\ntimeout = \"10s\""
    );
    let cfg = scratch.write("worker.toml", &config(&group, &topic, &route));
    let lines = ["ok-1", "bad-1", "ok-2", "ok-3", "bad-2", "ok-4"];
    let stats = setup_produce_run(&scratch, &cfg, &topic, &lines).await;
    assert_eq!(count(&stats, "accepted"), 4, "{stats}");
    assert_eq!(count(&stats, "rejected"), 2, "{stats}");
    assert_eq!(
        count(&stats, "dlq"),
        2,
        "the rejects went to {topic}.dlq: {stats}"
    );
    assert_eq!(count(&stats, "released"), 0, "{stats}");

    // The dead letters go back to their topic: a dry run first, then for real.
    let cfg = cfg.to_str().unwrap();
    let dlq = format!("{topic}.dlq");
    let replay = [
        "dlq", "replay", "--config", cfg, "--topic", &dlq, "--idle", "3s",
    ];
    let out = share_worker(
        &[&replay[..], &["--reason", "rejected", "--dry-run"]].concat(),
        &[],
    )
    .await;
    assert_ok(&out, "dlq replay --dry-run");
    assert!(
        text(&out.stdout).contains("would replay 2, skipped 0"),
        "{}",
        text(&out.stdout)
    );
    let out = share_worker(&[&replay[..], &["--reason", "rejected"]].concat(), &[]).await;
    assert_ok(&out, "dlq replay");
    assert!(
        text(&out.stdout).contains("replayed 2, skipped 0, failed 0"),
        "{}",
        text(&out.stdout)
    );
    let again = run_until_idle(&scratch, cfg).await;
    assert_eq!(
        count(&again, "rejected"),
        2,
        "the replayed records came back: {again}"
    );
    assert_eq!(count(&again, "accepted"), 0, "{again}");
}

/// What the test HTTP server saw.
#[derive(Default, Debug)]
struct Seen {
    requests: Vec<(String, String)>,
}

/// Answers 200 to "ok…", 400 to "bad…", 429 (Retry-After: 1) to the first "slow…" then 200, and
/// 200 to "sleepy…" after 1.5 s.
async fn serve(listener: TcpListener, seen: Arc<Mutex<Seen>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(connection(stream, seen.clone()));
    }
}

/// Reads the next HTTP/1.1 request from `stream` (bytes left over stay in `buffer`): its head,
/// lowercased, and its body. `None` once the peer closed.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<(String, Vec<u8>)> {
    let head_end = loop {
        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = text(&buffer[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    let body = buffer[head_end..head_end + length].to_vec();
    buffer.drain(..head_end + length);
    Some((head, body))
}

async fn connection(mut stream: TcpStream, seen: Arc<Mutex<Seen>>) {
    let mut buffer = Vec::new();
    while let Some((head, body)) = read_request(&mut stream, &mut buffer).await {
        let body = text(&body);
        let key = head
            .lines()
            .find_map(|l| l.strip_prefix("idempotency-key:"))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default();
        let status = {
            let mut seen = seen.lock().expect("the seen lock");
            let first_slow =
                body.starts_with("slow") && !seen.requests.iter().any(|(b, _)| *b == body);
            let topic_ok =
                head.contains("x-share-topic:") && head.contains("x-share-delivery-count:");
            seen.requests.push((body.clone(), key));
            match () {
                _ if !topic_ok => "500 Internal Server Error",
                _ if body.starts_with("bad") => "400 Bad Request",
                _ if first_slow => "429 Too Many Requests\r\nRetry-After: 1",
                _ => "200 OK",
            }
        };
        if body.starts_with("sleepy") {
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        let response = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn http_accepts_2xx_retries_429_and_rejects_400() {
    let scratch = Scratch::new();
    let topic = unique("cli-http");
    let group = unique("cli-http-group");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let addr = listener.local_addr().expect("an address");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let server = tokio::spawn(serve(listener, seen.clone()));
    let route = format!("handler = \"http\"\nurl = \"http://{addr}/send\"\ntimeout = \"5s\"");
    let cfg = scratch.write("worker.toml", &config(&group, &topic, &route));
    let lines = ["ok-1", "slow-1", "bad-1", "ok-2"];
    let stats = setup_produce_run(&scratch, &cfg, &topic, &lines).await;
    server.abort();
    assert_eq!(count(&stats, "accepted"), 3, "{stats}");
    assert_eq!(count(&stats, "rejected"), 1, "{stats}");
    assert_eq!(count(&stats, "dlq"), 1, "{stats}");
    assert_eq!(count(&stats, "released"), 1, "the 429 was retried: {stats}");
    let seen = seen.lock().expect("the seen lock");
    let slow: Vec<_> = seen
        .requests
        .iter()
        .filter(|(b, _)| b == "slow-1")
        .collect();
    assert_eq!(slow.len(), 2, "{seen:?}");
    assert_eq!(
        slow[0].1, slow[1].1,
        "the same idempotency key on the retry"
    );
    assert!(slow[0].1.starts_with(&format!("{topic}-")), "{seen:?}");
}

#[tokio::test]
async fn check_prints_the_effective_config_or_names_what_is_wrong() {
    let scratch = Scratch::new();
    let topic = unique("cli-check");
    let group = unique("cli-check-group");
    let good = scratch.write("good.toml", &config(&group, &topic, "handler = \"noop\""));
    let good = good.to_str().unwrap();
    // Before setup the route topic is missing.
    let out = share_worker(&["check", "--config", good], &[]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("share-worker setup"),
        "{}",
        text(&out.stderr)
    );
    assert_ok(
        &share_worker(&["setup", "--config", good], &[]).await,
        "setup",
    );
    let out = share_worker(
        &["check", "--config", good],
        &[("SHARE_WORKER__WORKER__CONCURRENCY", "5")],
    )
    .await;
    assert_ok(&out, "check");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("share groups with RENEW (ShareFetch/ShareAcknowledge v2): supported"),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("group = \"{group}\"")), "{stdout}");
    assert!(
        stdout.contains("concurrency = 5"),
        "the override applies: {stdout}"
    );
    // A broken file names the file, the line and the key.
    let broken = config(&group, &topic, "handler = \"ftp\"");
    let line = broken.lines().position(|l| l.contains("ftp")).unwrap() + 1;
    let bad = scratch.write("bad.toml", &broken);
    let out = share_worker(&["check", "--config", bad.to_str().unwrap()], &[]).await;
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "bad.toml:{line}: `route[0].handler`: unknown value \"ftp\""
        )),
        "{stderr}"
    );
}

/// GETs `url`: the status and body, or `None` if nothing answers.
async fn get(url: &str) -> Option<(u16, String)> {
    let response = reqwest::get(url).await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

/// Polls `url` until it answers 200, within the deadline.
async fn wait_ok(url: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = get(url).await;
        if let Some((200, body)) = &answer {
            return body.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{url} never answered 200; last: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One sample of the Prometheus text: name, labels, value.
type Sample = (String, std::collections::BTreeMap<String, String>, f64);

fn parse_prometheus(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
                .collect();
            Some((name.to_owned(), labels, value))
        })
        .collect()
}

/// The sum of `name` over the samples whose labels include `with`; `None` when there is none.
fn metric(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> Option<f64> {
    let mut matching = samples
        .iter()
        .filter(|(n, labels, _)| {
            n == name
                && with
                    .iter()
                    .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .peekable();
    matching.peek()?;
    Some(matching.map(|(_, _, v)| v).sum())
}

/// A real run scraped every 50 ms: accepts, a 429 retried after its hold, a 400 rejected into
/// the DLQ, a handler slower than the 1 s lock (renewed). Every metric the run can move moves as
/// documented; lost locks, failed renewals and acknowledgements, and dead-letter failures cannot
/// be provoked on a healthy broker and are checked against the in-memory broker in the runtime's
/// telemetry tests.
#[tokio::test]
async fn metrics_move_during_a_run_with_retries_and_dead_letters() {
    let scratch = Scratch::new();
    let topic = unique("cli-telemetry");
    let group = unique("cli-telemetry-group");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let addr = listener.local_addr().expect("an address");
    let server = tokio::spawn(serve(listener, Arc::new(Mutex::new(Seen::default()))));
    let route = format!("handler = \"http\"\nurl = \"http://{addr}/send\"\ntimeout = \"10s\"");
    let text_cfg = config(&group, &topic, &route)
        .replace("lock-duration = \"20s\"", "lock-duration = \"1s\"")
        .replace(
            "[dlq]",
            &format!(
                "[telemetry]\nlisten = \"127.0.0.1:{port}\"\nlag-interval = \"200ms\"\n\n[dlq]"
            ),
        );
    let cfg = scratch.write("worker.toml", &text_cfg);
    let cfg = cfg.to_str().unwrap();
    let lines = ["ok-1", "ok-2", "slow-1", "bad-1", "sleepy-1"];
    setup_and_produce(&scratch, cfg, &topic, 2, &lines, &[]).await;

    let mut run = Command::new(BIN);
    run.args(["run", "--config", cfg, "--exit-when-idle", "5s"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = run.spawn().expect("starting share-worker run");
    let base = format!("http://127.0.0.1:{port}");
    assert_eq!(wait_ok(&format!("{base}/healthz")).await, "ok\n");
    assert_eq!(wait_ok(&format!("{base}/readyz")).await, "ready\n");

    let (mut max_in_flight, mut max_held, mut max_lag) = (0.0_f64, 0.0_f64, 0.0_f64);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let samples = loop {
        let text = wait_ok(&format!("{base}/metrics")).await;
        let samples = parse_prometheus(&text);
        let gauge = |name| metric(&samples, name, &[]).unwrap_or(0.0);
        max_in_flight = max_in_flight.max(gauge("share_worker_records_in_flight"));
        max_held = max_held.max(gauge("share_worker_records_held"));
        let lag = metric(&samples, "share_worker_group_lag", &[("topic", &topic)]);
        max_lag = max_lag.max(lag.unwrap_or(0.0));
        let accepted = metric(
            &samples,
            "share_worker_records_completed_total",
            &[("outcome", "accept")],
        );
        if accepted == Some(4.0) && max_lag > 0.0 && lag == Some(0.0) {
            break samples;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run did not settle: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let t = ("topic", topic.as_str());
    let get = |name: &str, with: &[(&str, &str)]| metric(&samples, name, with).unwrap_or(0.0);
    let all = format!("{samples:#?}");

    assert_eq!(
        get("share_worker_records_fetched_total", &[t]),
        6.0,
        "{all}"
    );
    assert_eq!(get("share_worker_delivery_count_count", &[t]), 6.0, "{all}");
    assert_eq!(
        get("share_worker_delivery_count_sum", &[t]),
        7.0,
        "slow-1 came twice"
    );
    for (outcome, n) in [("accept", 4.0), ("retry", 1.0), ("reject", 1.0)] {
        let with = [t, ("outcome", outcome)];
        assert_eq!(
            get("share_worker_records_completed_total", &with),
            n,
            "{outcome}: {all}"
        );
        assert_eq!(
            get("share_worker_handler_duration_seconds_count", &with),
            n,
            "{outcome}"
        );
    }
    let accept_time = get(
        "share_worker_handler_duration_seconds_sum",
        &[t, ("outcome", "accept")],
    );
    assert!(accept_time >= 1.5, "sleepy-1 took 1.5 s: {accept_time}");
    for (ack, n) in [("accept", 4.0), ("release", 1.0), ("reject", 1.0)] {
        assert_eq!(
            get("share_worker_acks_total", &[t, ("ack", ack)]),
            n,
            "{ack}: {all}"
        );
    }
    assert_eq!(
        get(
            "share_worker_dlq_writes_total",
            &[t, ("reason", "rejected")]
        ),
        1.0,
        "{all}"
    );
    assert!(
        get("share_worker_lock_renewals_total", &[t]) >= 1.0,
        "{all}"
    );
    assert!(
        get(
            "share_worker_fetch_duration_seconds_count",
            &[("result", "ok")]
        ) >= 1.0
    );
    assert!(max_in_flight >= 1.0, "in flight never above 0");
    assert!(max_held >= 1.0, "the 429 was never held: {all}");
    assert!(max_lag >= 1.0);
    assert_eq!(get("share_worker_records_in_flight", &[]), 0.0, "{all}");
    assert_eq!(get("share_worker_records_held", &[]), 0.0, "{all}");
    assert_eq!(
        metric(&samples, "share_worker_group_lag", &[t, ("group", &group)]),
        Some(0.0)
    );
    assert_eq!(get("share_worker_partitions_assigned", &[]), 2.0, "{all}");
    for quiet in [
        "share_worker_locks_lost_total",
        "share_worker_ack_failures_total",
        "share_worker_possible_duplicates_total",
        "share_worker_dlq_failures_total",
    ] {
        assert_eq!(get(quiet, &[]), 0.0, "{quiet}: {all}");
    }

    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .expect("the run exits when idle")
        .expect("waiting for share-worker");
    assert!(status.success(), "{status}");
    server.abort();
}

/// What a fake OTLP/HTTP collector received: (path, protobuf body) per request.
type Exports = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A collector that keeps every export and answers 200 with an empty (valid) response.
async fn collector(listener: TcpListener, exports: Exports) {
    while let Ok((mut stream, _)) = listener.accept().await {
        let exports = exports.clone();
        tokio::spawn(async move {
            let mut buffer = Vec::new();
            while let Some((head, body)) = read_request(&mut stream, &mut buffer).await {
                let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
                exports.lock().expect("the exports lock").push((path, body));
                let response = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
                if stream.write_all(response.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// The headers of the first `count` records of partition 0 of `topic`, from the beginning.
fn read_headers(topic: &str, count: usize) -> Vec<Vec<(String, Vec<u8>)>> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("cli-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("a consumer");
    let mut assignment = rdkafka::TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .expect("an assignment");
    consumer.assign(&assignment).expect("assigning");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    while out.len() < count {
        assert!(
            std::time::Instant::now() < deadline,
            "read {} of {count} records of {topic}",
            out.len()
        );
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.expect("a record");
        let headers = message.headers().map_or_else(Vec::new, |headers| {
            headers
                .iter()
                .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                .collect()
        });
        out.push(headers);
    }
    out
}

fn header_value(headers: &[(String, Vec<u8>)], key: &str) -> Option<String> {
    headers
        .iter()
        .rfind(|(k, _)| k == key)
        .map(|(_, v)| text(v))
}

/// Records produced with a `traceparent` are processed in spans of that trace, exported over
/// OTLP/HTTP with the documented attributes (metrics too); the dead letter points at the span of
/// the attempt that failed it, and a replay carries that on.
#[tokio::test]
async fn spans_and_metrics_reach_an_otlp_collector_and_dead_letters_keep_the_trace() {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message as _;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";
    let scratch = Scratch::new();
    let topic = unique("cli-otlp");
    let group = unique("cli-otlp-group");
    let exports = Exports::default();
    let otlp = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let otlp_addr = otlp.local_addr().expect("an address");
    let collector = tokio::spawn(collector(otlp, exports.clone()));
    let http = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let http_addr = http.local_addr().expect("an address");
    let server = tokio::spawn(serve(http, Arc::new(Mutex::new(Seen::default()))));
    let route = format!("handler = \"http\"\nurl = \"http://{http_addr}/send\"");
    let text_cfg = config(&group, &topic, &route).replace(
        "[dlq]",
        &format!(
            "[telemetry]\notlp-endpoint = \"http://{otlp_addr}\"\notlp-interval = \"200ms\"\nservice-name = \"otlp-test\"\n\n[dlq]"
        ),
    );
    let cfg = scratch.write("worker.toml", &text_cfg);
    let cfg = cfg.to_str().unwrap();
    let traceparent = format!("traceparent=00-{TRACE}-{PARENT}-01");
    let headers = ["--header", &traceparent, "--header", "tracestate=vendor=7"];
    setup_and_produce(&scratch, cfg, &topic, 1, &["ok-1", "bad-1"], &headers).await;
    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!((count(&stats, "accepted"), count(&stats, "dlq")), (1, 1));

    // The run flushed its spans on exit.
    let exported = exports.lock().expect("the exports lock").clone();
    let mut spans = Vec::new();
    let mut metric_names = std::collections::BTreeSet::new();
    for (path, body) in &exported {
        match path.as_str() {
            "/v1/traces" => {
                let request = ExportTraceServiceRequest::decode(&body[..]).expect("OTLP traces");
                for resource in request.resource_spans {
                    let service = resource
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|kv| kv.key == "service.name")
                        .and_then(|kv| kv.value.clone())
                        .and_then(|v| v.value);
                    assert_eq!(service, Some(Any::StringValue("otlp-test".into())));
                    spans.extend(resource.scope_spans.into_iter().flat_map(|s| s.spans));
                }
            }
            "/v1/metrics" => {
                let request = ExportMetricsServiceRequest::decode(&body[..]).expect("OTLP metrics");
                for resource in request.resource_metrics {
                    for scope in resource.scope_metrics {
                        metric_names.extend(scope.metrics.into_iter().map(|m| m.name));
                    }
                }
            }
            other => panic!("unexpected export path {other}"),
        }
    }
    for name in [
        "share_worker.records.fetched",
        "share_worker.records.completed",
        "share_worker.handler.duration",
        "share_worker.dlq.writes",
    ] {
        assert!(
            metric_names.contains(name),
            "{name} not exported: {metric_names:?}"
        );
    }
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let attribute = |span: &opentelemetry_proto::tonic::trace::v1::Span, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value)
    };
    let processed: Vec<_> = spans.iter().filter(|s| s.name == "process").collect();
    assert_eq!(processed.len(), 2, "{spans:#?}");
    let mut reject_span = None;
    for span in &processed {
        assert_eq!(hex(&span.trace_id), TRACE);
        assert_eq!(hex(&span.parent_span_id), PARENT);
        assert_eq!(span.kind, 5, "SPAN_KIND_CONSUMER");
        assert_eq!(
            attribute(span, "messaging.system"),
            Some(Any::StringValue("kafka".into()))
        );
        assert_eq!(
            attribute(span, "messaging.destination.name"),
            Some(Any::StringValue(topic.clone()))
        );
        assert_eq!(
            attribute(span, "messaging.consumer.group.name"),
            Some(Any::StringValue(group.clone()))
        );
        assert_eq!(
            attribute(span, "messaging.destination.partition.id"),
            Some(Any::IntValue(0))
        );
        assert_eq!(
            attribute(span, "share_worker.delivery_count"),
            Some(Any::IntValue(1))
        );
        match attribute(span, "share_worker.outcome") {
            Some(Any::StringValue(o)) if o == "accept" => {}
            Some(Any::StringValue(o)) if o == "reject" => reject_span = Some(hex(&span.span_id)),
            other => panic!("outcome {other:?}"),
        }
    }
    let reject_span = reject_span.expect("the rejected record's span");

    // The dead letter continues from the failed attempt's span, with the original tracestate.
    let dlq = format!("{topic}.dlq");
    let letter = read_headers(&dlq, 1).remove(0);
    let carried = format!("00-{TRACE}-{reject_span}-01");
    assert_eq!(header_value(&letter, "traceparent"), Some(carried.clone()));
    assert_eq!(
        header_value(&letter, "tracestate").as_deref(),
        Some("vendor=7")
    );

    // A replay puts it back on its topic with the same context.
    let out = share_worker(
        &[
            "dlq", "replay", "--config", cfg, "--topic", &dlq, "--idle", "3s",
        ],
        &[],
    )
    .await;
    assert_ok(&out, "dlq replay");
    let records = read_headers(&topic, 3);
    assert_eq!(header_value(&records[2], "traceparent"), Some(carried));
    collector.abort();
    server.abort();
}

/// The lines of `path`, 0 while it does not exist.
fn lines_in(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |text| text.lines().count())
}

/// A record whose worker is killed (SIGKILL) in the middle of its handler on every delivery reaches
/// the group's delivery-count limit. It must end in the dead-letter topic with reason
/// `delivery_limit`, its handler not run again, and never in the broker's silent archive.
#[tokio::test]
async fn a_record_whose_worker_keeps_dying_ends_in_the_dlq() {
    use rdkafka::Message;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Headers;

    let scratch = Scratch::new();
    let topic = unique("cli-kill");
    let group = unique("cli-kill-group");
    let started = scratch.0.join("started");
    let route = format!(
        "handler = \"exec\"\ncommand = [\"sh\", \"-c\", '''echo started >> {}; exec sleep 100''']\ntimeout = \"5m\"",
        started.display()
    );
    let cfg_path = scratch.write("worker.toml", &config(&group, &topic, &route));
    let cfg = cfg_path.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, cfg, &topic, 1, &["stuck"], &[]).await;

    let admin = worker_core::kafka::Admin::connect(bootstrap())
        .await
        .expect("the broker");
    let limit = admin
        .delivery_count_limit(&group)
        .await
        .expect("the delivery limit") as usize;
    for delivery in 1..limit {
        let mut worker = Command::new(BIN)
            .args(["run", "--config", cfg])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting share-worker");
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while lines_in(&started) < delivery {
            assert!(
                tokio::time::Instant::now() < deadline,
                "delivery {delivery} never reached the handler"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        worker.kill().await.expect("SIGKILL share-worker");
    }

    // The last delivery the broker allows goes straight to the dead-letter topic.
    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!(count(&stats, "dlq"), 1, "{stats}");
    assert_eq!(count(&stats, "accepted"), 0, "{stats}");
    assert_eq!(
        lines_in(&started),
        limit - 1,
        "the handler never ran on the last delivery"
    );

    let reader: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("cli-kill-reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("a DLQ reader");
    reader
        .subscribe(&[&format!("{topic}.dlq")])
        .expect("subscribing to the DLQ");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let letter = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no dead letter in {topic}.dlq"
        );
        if let Some(message) = reader.poll(Duration::from_millis(200)) {
            break message.expect("a dead letter").detach();
        }
    };
    let header = |key: &str| {
        letter
            .headers()
            .and_then(|h| h.iter().find(|h| h.key == key).and_then(|h| h.value))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    assert_eq!(letter.payload(), Some(&b"stuck"[..]));
    assert_eq!(
        header("share.dlq.reason").as_deref(),
        Some("delivery_limit")
    );
    assert_eq!(header("share.dlq.delivery.count"), Some(limit.to_string()));
    assert_eq!(header("share.dlq.topic"), Some(topic.clone()));
}

/// Runs a Kafka tool class through `scripts/kafka.sh tool` within the deadline; its stdout.
async fn kafka_tool(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/kafka.sh");
    let mut command = Command::new("bash");
    command
        .arg(script)
        .arg("tool")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = match tokio::time::timeout(DEADLINE, command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(err)) => panic!("cannot run {script}: {err}"),
        Err(_) => panic!("kafka.sh tool {args:?} did not finish within {DEADLINE:?}"),
    };
    assert_ok(&output, "kafka.sh tool");
    text(&output.stdout)
}

/// The rows of a whitespace-separated table whose header line starts with the columns `first`, as
/// header → cell maps (cells hold no spaces in these tables).
/// The (partition, start offset, lag) rows of a `--describe --offsets` table that `keep` selects,
/// sorted.
fn offset_rows(
    table: &str,
    keep: impl Fn(&std::collections::HashMap<String, String>) -> bool,
) -> Vec<(i64, String, String)> {
    let mut rows: Vec<(i64, String, String)> = parse_table(table, &["GROUP", "TOPIC"])
        .into_iter()
        .filter(|row| keep(row))
        .map(|row| {
            (
                row["PARTITION"].parse().expect("a partition number"),
                row["START-OFFSET"].clone(),
                row["LAG"].clone(),
            )
        })
        .collect();
    rows.sort();
    rows
}

fn parse_table(out: &str, first: &[&str]) -> Vec<std::collections::HashMap<String, String>> {
    let mut lines = out
        .lines()
        .skip_while(|l| !l.split_whitespace().collect::<Vec<_>>().starts_with(first));
    let header: Vec<String> = match lines.next() {
        Some(h) => h.split_whitespace().map(str::to_owned).collect(),
        None => panic!("no table headed {first:?} in:\n{out}"),
    };
    lines
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(cells.len(), header.len(), "row {l:?} under {header:?}");
            header
                .iter()
                .cloned()
                .zip(cells.into_iter().map(str::to_owned))
                .collect()
        })
        .collect()
}

/// `(partition, start offset, lag)` per partition of `topic` in `status --json` (`-` for null).
fn status_offsets(status: &Value, topic: &str) -> Vec<(i64, String, String)> {
    let cell = |v: &Value| match v.as_i64() {
        Some(n) => n.to_string(),
        None => "-".to_owned(),
    };
    let mut rows: Vec<(i64, String, String)> = status["offsets"]
        .as_array()
        .unwrap_or_else(|| panic!("no offsets in {status}"))
        .iter()
        .filter(|o| o["topic"] == topic)
        .map(|o| {
            (
                o["partition"].as_i64().expect("a partition"),
                cell(&o["start_offset"]),
                cell(&o["lag"]),
            )
        })
        .collect();
    rows.sort();
    rows
}

#[tokio::test]
async fn status_matches_kafkas_share_group_command() {
    let scratch = Scratch::new();
    let topic = unique("cli-status");
    let group = unique("cli-status-group");
    let cfg_path = scratch.write(
        "worker.toml",
        &config(&group, &topic, "handler = \"noop\"\ndelay = \"1ms\""),
    );
    let cfg = cfg_path.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg, "--partitions", "2"], &[]).await,
        "setup",
    );
    let produce = |count: &'static str| {
        let bootstrap = bootstrap();
        let topic = topic.clone();
        async move {
            let out = share_worker(
                &[
                    "produce",
                    "--bootstrap",
                    &bootstrap,
                    "--topic",
                    &topic,
                    "--count",
                    count,
                ],
                &[],
            )
            .await;
            assert_ok(&out, "produce");
        }
    };
    // 40 records consumed, then 25 more left waiting: start offsets past 0 and lag on both
    // partitions (keys 0..n spread over both).
    produce("40").await;
    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!(count(&stats, "accepted"), 40, "{stats}");
    produce("25").await;

    // The broker's lag counts the 25 new records once they are in the high watermarks. (The start
    // offset is the persisted share-partition state, which may trail what was acknowledged, so only
    // the lag has a known value; the comparison below is what matters.)
    let status_json = || async {
        let out = share_worker(&["status", "--config", cfg, "--json"], &[]).await;
        assert_ok(&out, "status --json");
        serde_json::from_str::<Value>(&text(&out.stdout)).expect("status JSON")
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let status = status_json().await;
        let rows = status_offsets(&status, &topic);
        let lags: i64 = rows.iter().filter_map(|r| r.2.parse::<i64>().ok()).sum();
        if rows.len() == 2 && rows.iter().all(|r| r.1 != "-") && lags == 25 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "status never showed a lag of 25 over 2 partitions: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Kafka's tool and ours, read back to back, until both see the same settled state.
    let addr = bootstrap();
    let tool = "org.apache.kafka.tools.consumer.group.ShareGroupCommand";
    let (status, theirs) = loop {
        let offsets = kafka_tool(&[
            tool,
            "--bootstrap-server",
            &addr,
            "--describe",
            "--group",
            &group,
            "--offsets",
        ])
        .await;
        let theirs = offset_rows(&offsets, |row| {
            row["GROUP"] == group && row["TOPIC"] == topic
        });
        let status = status_json().await;
        let ours = status_offsets(&status, &topic);
        if ours == theirs {
            break (status, theirs);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "share-worker status {ours:?} vs ShareGroupCommand --offsets {theirs:?}:\n{offsets}"
        );
    };
    assert_eq!(theirs.len(), 2, "{theirs:?}");
    assert_eq!(status["group"], group.as_str(), "{status}");
    assert_eq!(status["members"], serde_json::json!([]), "{status}");

    let state = kafka_tool(&[
        tool,
        "--bootstrap-server",
        &addr,
        "--describe",
        "--group",
        &group,
        "--state",
    ])
    .await;
    let rows = parse_table(&state, &["GROUP", "COORDINATOR"]);
    assert_eq!(rows.len(), 1, "{state}");
    assert_eq!(status["state"], rows[0]["STATE"].as_str(), "{state}");
    assert_eq!(rows[0]["#MEMBERS"], "0", "{state}");

    // The tables name the same numbers.
    let out = share_worker(&["status", "--config", cfg], &[]).await;
    assert_ok(&out, "status");
    let tables = text(&out.stdout);
    let ours = offset_rows(&tables, |_| true);
    assert_eq!(ours, theirs, "{tables}");
    assert!(tables.contains("has no active members"), "{tables}");
}
