//! Workers killed with SIGKILL mid-run (RELIABILITY scenarios 2 and 12): the `ledger_worker`
//! process appends each record's sequence number to a ledger before it returns success, and after
//! everything stops `produced ⊆ ledger ∪ DLQ`, the broker reports lag 0, and the duplicates stay
//! within what was in flight at the kills.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, ensure};
use rdkafka::Message;
use tests::{create_topic, ledger_record, produce, producer, read_all, unique, wait_for};
use tokio::process::{Child, Command};
use worker_core::kafka::Admin;

const WORKER: &str = env!("CARGO_BIN_EXE_ledger_worker");

/// A scratch directory for ledgers and worker logs, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Self> {
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
async fn prepared(partitions: i32, records: usize) -> anyhow::Result<(Admin, String, String)> {
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
fn spawn_worker(
    topic: &str,
    group: &str,
    ledger: &Path,
    delay_ms: u64,
    concurrency: usize,
) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger.with_extension("log"))?;
    Command::new(WORKER)
        .args([&tests::bootstrap(), group, topic])
        .arg(ledger)
        .args([delay_ms.to_string(), concurrency.to_string()])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("starting ledger_worker")
}

/// The sequence numbers in a ledger, in order (empty before the file exists).
fn ledger(path: &Path) -> Vec<usize> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.parse().ok())
        .collect()
}

/// Stops a worker with SIGTERM and checks that it exits cleanly.
async fn terminate(mut child: Child, log: &Path) -> anyhow::Result<()> {
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

async fn kill(mut child: Child) -> anyhow::Result<()> {
    child.start_kill()?;
    child.wait().await?;
    Ok(())
}

/// The sequence numbers of the dead letters of `topic`.
async fn dead_letters(topic: &str) -> anyhow::Result<HashSet<usize>> {
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
fn check_no_loss(records: usize, ledger: &[usize], dlq: &HashSet<usize>) -> anyhow::Result<usize> {
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

/// Scenario 2: a 50 ms handler at concurrency 200 is SIGKILLed five times, each time after it made
/// progress, and restarted; the last run drains the topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_five_times_loses_nothing() -> anyhow::Result<()> {
    const RECORDS: usize = 6_000;
    const CONCURRENCY: usize = 200;
    const KILLS: usize = 5;
    let scratch = Scratch::new()?;
    let (admin, topic, group) = prepared(4, RECORDS).await?;
    let path = scratch.0.join("ledger");
    for _ in 0..KILLS {
        let before = ledger(&path).len();
        let worker = spawn_worker(&topic, &group, &path, 50, CONCURRENCY)?;
        wait_for(
            "the worker to make progress",
            Duration::from_secs(60),
            async || Ok(ledger(&path).len() >= before + 300),
        )
        .await?;
        kill(worker).await?;
    }
    let killed_at = ledger(&path).len();
    ensure!(killed_at < RECORDS, "the kills came too late to matter");
    let worker = spawn_worker(&topic, &group, &path, 50, CONCURRENCY)?;
    wait_for("the lag to reach 0", Duration::from_secs(120), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    terminate(worker, &path.with_extension("log")).await?;

    let dlq = dead_letters(&topic).await?;
    let duplicates = check_no_loss(RECORDS, &ledger(&path), &dlq)?;
    ensure!(
        duplicates <= KILLS * CONCURRENCY,
        "{duplicates} duplicates, more than the {} records in flight at the kills",
        KILLS * CONCURRENCY
    );
    eprintln!(
        "{KILLS} kills: {killed_at} ledger lines before the last run, {duplicates} duplicates, {} dead letters",
        dlq.len()
    );
    Ok(())
}

/// Scenario 12: two workers share one partition; one is SIGKILLed mid-run and the other finishes
/// the work, including what the killed one held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_on_one_partition_survive_the_loss_of_one() -> anyhow::Result<()> {
    const RECORDS: usize = 3_000;
    const CONCURRENCY: usize = 50;
    let scratch = Scratch::new()?;
    let (admin, topic, group) = prepared(1, RECORDS).await?;
    let (path_a, path_b) = (scratch.0.join("a"), scratch.0.join("b"));
    let a = spawn_worker(&topic, &group, &path_a, 20, CONCURRENCY)?;
    let b = spawn_worker(&topic, &group, &path_b, 20, CONCURRENCY)?;
    wait_for(
        "both workers to make progress",
        Duration::from_secs(60),
        async || Ok(ledger(&path_a).len() >= 200 && ledger(&path_b).len() >= 200),
    )
    .await?;
    kill(a).await?;
    let a_did = ledger(&path_a).len();
    ensure!(a_did < RECORDS, "worker a finished before it was killed");
    wait_for("the lag to reach 0", Duration::from_secs(120), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    terminate(b, &path_b.with_extension("log")).await?;

    let mut union = ledger(&path_a);
    let b_did = ledger(&path_b).len();
    union.extend(ledger(&path_b));
    let dlq = dead_letters(&topic).await?;
    let duplicates = check_no_loss(RECORDS, &union, &dlq)?;
    ensure!(
        duplicates <= CONCURRENCY,
        "{duplicates} duplicates, more than the {CONCURRENCY} records the killed worker held"
    );
    ensure!(b_did > 200, "worker b did no work after the kill");
    eprintln!(
        "a handled {a_did}, b {b_did}, {duplicates} duplicates, {} dead letters",
        dlq.len()
    );
    Ok(())
}
