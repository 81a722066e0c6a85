//! The ledger worker process and how the fault tests judge it: spawn, kill, terminate, read the
//! ledger and the DLQ, and check `produced ⊆ ledger ∪ DLQ`.

#![allow(dead_code, unreachable_pub)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, ensure};
use rdkafka::Message;
use tests::{create_topic, ledger_record, produce, producer, read_all, unique};
use tokio::process::{Child, Command};
use worker_core::kafka::Admin;

pub const WORKER: &str = env!("CARGO_BIN_EXE_ledger_worker");

/// A scratch directory for ledgers and worker logs, removed at the end.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(unique("worker-kills"));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The topic, its DLQ and the group, with records `0..records` on `partitions` partitions and a
/// 2 s lock, so the records of a killed worker come back quickly.
pub async fn prepared(partitions: i32, records: usize) -> anyhow::Result<(Admin, String, String)> {
    let admin = Admin::connect(tests::bootstrap()).await?;
    let topic = unique("kills");
    let group = unique("kills-group");
    create_topic(&topic, partitions).await?;
    create_topic(&format!("{topic}.dlq"), 1).await?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    admin
        .set_group_config(&group, "share.record.lock.duration.ms", "2000")
        .await?;
    let values = (0..records).map(ledger_record);
    produce(&producer(&[("linger.ms", "5")])?, &topic, None, values).await?;
    Ok((admin, topic, group))
}

/// One `ledger_worker` process, its output in `{ledger}.log`.
pub fn spawn_worker(
    topic: &str,
    group: &str,
    ledger: &Path,
    delay_ms: u64,
    concurrency: usize,
    faults: bool,
) -> anyhow::Result<Child> {
    spawn_worker_at(
        &tests::bootstrap(),
        topic,
        group,
        ledger,
        delay_ms,
        concurrency,
        faults,
    )
}

/// [`spawn_worker`] against the cluster at `bootstrap`.
pub fn spawn_worker_at(
    bootstrap: &str,
    topic: &str,
    group: &str,
    ledger: &Path,
    delay_ms: u64,
    concurrency: usize,
    faults: bool,
) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger.with_extension("log"))?;
    Command::new(WORKER)
        .args([bootstrap, group, topic])
        .arg(ledger)
        .args([delay_ms.to_string(), concurrency.to_string()])
        .args(faults.then_some("faults"))
        // LEDGER_WORKER_LOG (a tracing filter) says more when a run is being taken apart.
        .env(
            "RUST_LOG",
            std::env::var("LEDGER_WORKER_LOG").unwrap_or_else(|_| "warn".to_owned()),
        )
        // A backtrace per panic would load the debug info (100+ MiB) and hide the worker's own
        // memory behaviour.
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("starting ledger_worker")
}

/// The sequence numbers in a ledger, in order (empty before the file exists).
pub fn ledger(path: &Path) -> Vec<usize> {
    entries(path).into_iter().map(|e| e.seq).collect()
}

/// One ledger line: a record handled.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub seq: usize,
    pub partition: i32,
    /// When it was handled, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The record's offset and the attempt that handled it (absent from a line cut by a kill).
    pub offset: Option<i64>,
    pub attempt: Option<u16>,
}

/// The ledger's lines, in order (a line cut by a kill is skipped).
pub fn entries(path: &Path) -> Vec<Entry> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            Some(Entry {
                seq: fields.next()?.parse().ok()?,
                partition: fields.next()?.parse().ok()?,
                at_ms: fields.next()?.parse().ok()?,
                offset: fields.next().and_then(|f| f.parse().ok()),
                attempt: fields.next().and_then(|f| f.parse().ok()),
            })
        })
        .collect()
}

/// Now, in milliseconds since the Unix epoch (the ledger's clock).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Stops a worker with SIGTERM and checks that it exits cleanly.
pub async fn terminate(mut child: Child, log: &Path) -> anyhow::Result<()> {
    let pid = child.id().context("the worker's pid")?;
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await?;
    ensure!(status.success(), "kill -TERM {pid} failed");
    let exit = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .context("the worker did not stop within 60 s of SIGTERM")??;
    ensure!(
        exit.success(),
        "the worker exited with {exit}: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    Ok(())
}

pub async fn kill(mut child: Child) -> anyhow::Result<()> {
    child.start_kill()?;
    child.wait().await?;
    Ok(())
}

/// The sequence numbers of the dead letters of `topic`.
pub async fn dead_letters(topic: &str) -> anyhow::Result<HashSet<usize>> {
    let letters = read_all(format!("{topic}.dlq")).await?;
    Ok(letters
        .iter()
        .filter_map(|m| m.payload())
        .filter_map(|p| std::str::from_utf8(p).ok())
        .filter_map(|p| p.split_once(':'))
        .filter_map(|(seq, _)| seq.parse().ok())
        .collect())
}

/// `produced ⊆ ledger ∪ dlq`, and the number of duplicates in the ledger.
pub fn check_no_loss(
    records: usize,
    ledger: &[usize],
    dlq: &HashSet<usize>,
) -> anyhow::Result<usize> {
    let mut counts: HashMap<usize, usize> = HashMap::new();
    for seq in ledger {
        *counts.entry(*seq).or_default() += 1;
    }
    let lost: Vec<usize> = (0..records)
        .filter(|seq| !counts.contains_key(seq) && !dlq.contains(seq))
        .take(20)
        .collect();
    ensure!(lost.is_empty(), "records lost (first 20): {lost:?}");
    ensure!(
        counts.keys().all(|seq| *seq < records),
        "the ledger holds records never produced"
    );
    Ok(ledger.len() - counts.len())
}
