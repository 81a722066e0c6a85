//! Helpers of the Kafka client tests: broker address, unique names, setup, producing, fetching.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio::time::Instant;
use worker_kafka::{AckKind, Admin, Delivery, KafkaSource};

pub(crate) use tests::{bootstrap, unique};

/// A fresh topic and a share group reading it from the earliest offset.
pub(crate) async fn setup(
    partitions: i32,
    lock_ms: Option<u32>,
) -> Result<(Admin, String, String)> {
    let admin = Admin::connect(bootstrap())
        .await
        .context("broker not reachable")?;
    let topic = unique("t");
    let group = unique("g");
    admin.create_topic(&topic, partitions, 1).await?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    if let Some(ms) = lock_ms {
        admin
            .set_group_config(&group, "share.record.lock.duration.ms", &ms.to_string())
            .await?;
    }
    Ok((admin, topic, group))
}

pub(crate) fn producer(extra: &[(&str, &str)]) -> Result<FutureProducer> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap())
        .set("linger.ms", "5");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    Ok(cfg.create()?)
}

pub(crate) async fn produce_with(
    p: &FutureProducer,
    topic: &str,
    range: std::ops::Range<u32>,
) -> Result<()> {
    produce_to(p, topic, 0, range).await
}

/// Writes `v-{i}` (key `k-{i}`) for each `i` of `range` to `topic`'s `partition`.
pub(crate) async fn produce_to(
    p: &FutureProducer,
    topic: &str,
    partition: i32,
    range: std::ops::Range<u32>,
) -> Result<()> {
    let sends = range.map(|i| {
        let payload = format!("v-{i}");
        let key = format!("k-{i}");
        async move {
            p.send(
                FutureRecord::to(topic)
                    .payload(&payload)
                    .key(&key)
                    .partition(partition),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
        }
    });
    for r in futures::future::join_all(sends).await {
        r?;
    }
    Ok(())
}

pub(crate) async fn produce(topic: &str, n: u32) -> Result<()> {
    let p = producer(&[])?;
    produce_with(&p, topic, 0..n).await?;
    p.flush(Duration::from_secs(10))?;
    Ok(())
}

pub(crate) async fn source(group: &str, topic: &str) -> Result<KafkaSource> {
    Ok(KafkaSource::builder(bootstrap(), group)
        .topic(topic)
        .max_wait(Duration::from_millis(200))
        .build()
        .await?)
}

/// Fetches until `want` records arrived or the deadline passes; checks the record_limit bound.
pub(crate) async fn fetch_n(
    src: &KafkaSource,
    want: usize,
    max: u32,
    within: Duration,
) -> Result<Vec<Delivery>> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < want {
        ensure!(
            Instant::now() < deadline,
            "got {} of {want} records before the deadline",
            out.len()
        );
        let ask = max.min((want - out.len()) as u32);
        let got = src.fetch(ask).await?;
        ensure!(
            got.len() <= ask as usize,
            "asked for {ask}, got {}",
            got.len()
        );
        out.extend(got);
    }
    Ok(out)
}

pub(crate) async fn wait_lag_zero(admin: &Admin, group: &str, topic: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lag = admin.share_group_lag(group, topic).await?;
        if lag == 0 {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "lag still {lag} after 30s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(crate) async fn ack_all(src: &KafkaSource, records: &[Delivery], kind: AckKind) -> Result<()> {
    let receipts: Vec<_> = records
        .iter()
        .map(|d| src.acknowledge(&d.id, kind))
        .collect();
    for (d, r) in records
        .iter()
        .zip(futures::future::join_all(receipts).await)
    {
        r.with_context(|| format!("ack of {}", d.id))?;
    }
    Ok(())
}

/// Fetches until `pred` holds for a fetched record, acknowledging nothing; returns that record and
/// everything else fetched on the way.
pub(crate) async fn fetch_until(
    src: &KafkaSource,
    within: Duration,
    mut pred: impl FnMut(&Delivery) -> bool,
) -> Result<(Delivery, Vec<Delivery>)> {
    let deadline = Instant::now() + within;
    let mut others = Vec::new();
    loop {
        ensure!(
            Instant::now() < deadline,
            "condition not met within {within:?}"
        );
        for d in src.fetch(10).await? {
            if pred(&d) {
                return Ok((d, others));
            }
            others.push(d);
        }
    }
}

/// The Java console share consumer from the broker harness, in its own process group so that the
/// JVM (a child of the harness script) can be stopped with it.
pub(crate) struct JavaShareConsumer {
    pub(crate) child: tokio::process::Child,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl JavaShareConsumer {
    pub(crate) fn start(topic: &str, group: &str) -> Result<Self> {
        let script = std::env::var("KAFKA_SH")
            .unwrap_or_else(|_| format!("{}/../scripts/kafka.sh", env!("CARGO_MANIFEST_DIR")));
        let mut child = tokio::process::Command::new("bash")
            .arg(&script)
            .args([
                "tool",
                "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
            ])
            .args([
                "--bootstrap-server",
                &bootstrap(),
                "--topic",
                topic,
                "--group",
                group,
            ])
            .args(["--timeout-ms", "8000"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {script}"))?;
        let stdout = child.stdout.take().context("stdout")?;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = seen.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(mut s) = sink.lock() {
                    s.push(line);
                }
            }
        });
        Ok(Self { child, seen })
    }

    pub(crate) fn seen(&self) -> Vec<String> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stops the whole process group (the script and its JVM).
    pub(crate) fn stop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &format!("-{pid}")])
                .status();
        }
    }
}

impl Drop for JavaShareConsumer {
    fn drop(&mut self) {
        self.stop();
    }
}
