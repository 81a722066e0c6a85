//! Running the binary, scratch files, configs and reading records back.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::process::{Child, Command};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_share-worker");
/// No command of a test may take longer.
pub(crate) const DEADLINE: Duration = Duration::from_secs(120);

pub(crate) use tests::{bootstrap, reserve_port, unique};

/// A scratch directory removed at the end of the test.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn new() -> Self {
        let dir = std::env::temp_dir().join(unique("share-worker-cli"));
        std::fs::create_dir_all(&dir).expect("creating a scratch dir");
        Self(dir)
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("writing a scratch file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // To read a failed run's worker logs and configs afterwards.
        if std::env::var_os("SHARE_WORKER_KEEP_SCRATCH").is_some() {
            eprintln!("scratch kept: {}", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `share-worker ARGS` in the background, its stderr to `log`; killed when dropped.
pub(crate) fn spawn(args: &[&str], log: &Path) -> Child {
    spawn_with_env(args, &[], log)
}

/// [`spawn`] with `env` added to the binary's environment.
pub(crate) fn spawn_with_env(args: &[&str], env: &[(&str, &str)], log: &Path) -> Child {
    let stderr = std::fs::File::create(log).expect("a log file");
    Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("starting share-worker")
}

/// Runs the binary with `args` (and `env`) to completion within the deadline.
pub(crate) async fn share_worker(args: &[&str], env: &[(&str, &str)]) -> Output {
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

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
pub(crate) fn assert_ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
}

/// A config with one route on `topic` (the route's keys after `handler`), a DLQ and fast retries.
pub(crate) fn config(group: &str, topic: &str, route: &str) -> String {
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
pub(crate) async fn setup_produce_run(
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
pub(crate) async fn setup_and_produce(
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

pub(crate) async fn run_until_idle(scratch: &Scratch, cfg: &str) -> Value {
    run_until_idle_with(scratch, cfg, &[]).await
}

/// [`run_until_idle`] with `env` set on the worker process.
pub(crate) async fn run_until_idle_with(
    scratch: &Scratch,
    cfg: &str,
    env: &[(&str, &str)],
) -> Value {
    run_until_idle_logged(scratch, cfg, env).await.0
}

/// [`run_until_idle_with`], and what the worker logged (its stderr).
pub(crate) async fn run_until_idle_logged(
    scratch: &Scratch,
    cfg: &str,
    env: &[(&str, &str)],
) -> (Value, String) {
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
        env,
    )
    .await;
    assert_ok(&out, "run");
    assert!(
        text(&out.stderr).contains("share-worker: processed"),
        "no summary line: {}",
        text(&out.stderr)
    );
    let json = std::fs::read_to_string(&stats).expect("the stats file");
    let stats = serde_json::from_str(&json).expect("stats JSON");
    (stats, text(&out.stderr))
}

pub(crate) fn count(stats: &Value, key: &str) -> u64 {
    stats[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {stats}"))
}

/// The headers of the first `count` records of partition 0 of `topic`, from the beginning
/// (waiting for them).
pub(crate) async fn read_headers(topic: &str, count: usize) -> Vec<Vec<(String, Vec<u8>)>> {
    use rdkafka::message::{Headers, Message};
    let records = tests::read_records(topic.to_owned(), count, Duration::ZERO)
        .await
        .unwrap_or_else(|err| panic!("reading {topic}: {err:#}"));
    records
        .iter()
        .take(count)
        .map(|message| {
            message.headers().map_or_else(Vec::new, |headers| {
                headers
                    .iter()
                    .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                    .collect()
            })
        })
        .collect()
}

pub(crate) fn header_value(headers: &[(String, Vec<u8>)], key: &str) -> Option<String> {
    headers
        .iter()
        .rfind(|(k, _)| k == key)
        .map(|(_, v)| text(v))
}

/// The lines of `path`, 0 while it does not exist.
pub(crate) fn lines_in(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |text| text.lines().count())
}

/// One record as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) headers: Vec<(String, Option<Vec<u8>>)>,
    /// The record's timestamp, ms since the epoch (`None` without one).
    pub(crate) timestamp: Option<i64>,
}

impl Record {
    pub(crate) fn header(&self, key: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .rfind(|(k, _)| k == key)
            .map(|(_, v)| v.as_deref().unwrap_or_default())
    }

    pub(crate) fn value_text(&self) -> String {
        text(self.value.as_deref().unwrap_or_default())
    }
}

/// Every record of `topic` up to its current end, partition by partition.
pub(crate) async fn records(topic: &str) -> Vec<Record> {
    records_at(&bootstrap(), topic).await
}

/// [`records`] on the broker at `bootstrap`.
pub(crate) async fn records_at(bootstrap: &str, topic: &str) -> Vec<Record> {
    use rdkafka::message::{Headers, Message};
    let messages = tests::read_all_at(bootstrap, topic.to_owned())
        .await
        .unwrap_or_else(|err| panic!("reading {topic}: {err:#}"));
    messages
        .iter()
        .map(|message| Record {
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            value: message.payload().map(<[u8]>::to_vec),
            headers: message.headers().map_or_else(Vec::new, |h| {
                h.iter()
                    .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            }),
            timestamp: message.timestamp().to_millis(),
        })
        .collect()
}

/// GETs `url`: the status and body, or `None` if nothing answers.
pub(crate) async fn get(url: &str) -> Option<(u16, String)> {
    let response = reqwest::get(url).await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

/// Polls `url` until it answers 200, within the deadline.
pub(crate) async fn wait_ok(url: &str) -> String {
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

/// Stops `child` cleanly (SIGTERM, as Kubernetes does) and waits for it to exit, within 30 s.
pub(crate) async fn terminate(mut child: Child) -> std::process::ExitStatus {
    let pid = child.id().expect("a running process");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -TERM {pid}");
    tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the process stops within 30 s")
        .expect("its exit status")
}

/// [`config`] with a `[control]` table: the group's control topic, `{group}.control`.
pub(crate) fn control_config(group: &str, topic: &str, route: &str) -> String {
    config(group, topic, route).replace("[dlq]", "[control]\n\n[dlq]")
}

/// Waits until every log of `logs` has `line`, within `limit`.
pub(crate) async fn wait_logged(logs: &[&Path], line: &str, limit: Duration) {
    tests::wait_for(&format!("{line:?} in every log"), limit, async || {
        Ok(logs
            .iter()
            .all(|log| std::fs::read_to_string(log).is_ok_and(|text| text.contains(line))))
    })
    .await
    .expect("every process logged it");
}

/// An rdkafka admin client of the broker at `bootstrap` (plaintext).
pub(crate) fn admin_client(
    bootstrap: &str,
) -> rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("an rdkafka admin client")
}

/// The value of `topic`'s config `key` on the test broker, as the broker describes it.
pub(crate) async fn topic_config(topic: &str, key: &str) -> Option<String> {
    let results = admin_client(&bootstrap())
        .describe_configs(
            [&rdkafka::admin::ResourceSpecifier::Topic(topic)],
            &rdkafka::admin::AdminOptions::new(),
        )
        .await
        .unwrap_or_else(|err| panic!("describing {topic}: {err}"));
    let resource = results.into_iter().next()?.ok()?;
    resource.get(key).and_then(|entry| entry.value.clone())
}

/// Writes `input` (one record per line) to `topic` with Kafka's Java console producer, with
/// the producer's `extra` arguments (a `--command-config`, `--property parse.key=true`).
pub(crate) async fn console_produce(bootstrap: &str, topic: &str, extra: &[&str], input: Vec<u8>) {
    use tokio::io::AsyncWriteExt;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/kafka.sh");
    let mut child = Command::new("bash")
        .arg(script)
        .args(["tool", "org.apache.kafka.tools.ConsoleProducer"])
        .args(["--bootstrap-server", bootstrap, "--topic", topic])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run {script}: {err}"));
    let mut stdin = child.stdin.take().expect("the producer's stdin");
    let output = tokio::time::timeout(DEADLINE, async move {
        let (written, output) = tokio::join!(
            async move {
                let written = stdin.write_all(&input).await;
                drop(stdin);
                written
            },
            child.wait_with_output()
        );
        written.expect("writing the records to the console producer");
        output
    })
    .await;
    let output = match output {
        Ok(Ok(output)) => output,
        Ok(Err(err)) => panic!("the console producer failed: {err}"),
        Err(_) => panic!("the console producer did not finish within {DEADLINE:?}"),
    };
    assert_ok(&output, "the Java console producer");
}
