//! RELIABILITY scenario 13, the soak: `SOAK_MINUTES` (default 1) of steady production — 1M records
//! per 30 minutes — with 1 % of first attempts panicking, 0.1 % poison records and a SIGKILL of
//! the worker every few minutes. Passes when nothing is lost (`produced ⊆ ledger ∪ DLQ`, every
//! poison record in the DLQ), the lag drains, and each worker process's memory stays flat.
//!
//! `scripts/test.sh` runs a 1-minute soak (one SIGKILL); `scripts/soak.sh [MINUTES]` the full one.

mod ledger_support;

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, ensure};
use ledger_support::{
    Scratch, check_no_loss, dead_letters, kill, ledger, prepared, spawn_worker, terminate,
};
use tests::{ledger_record, produce, producer, wait_for};
use tokio::time::Instant;

/// One poison record in this many.
const POISON_EVERY: usize = 1000;

/// The resident set of process `pid` in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Memory of one worker process over its life: flat when the largest sample of its last quarter
/// is at most 1.5 × (the largest of its second quarter) + 16 MiB.
fn check_flat(samples: &[u64], incarnation: usize) -> anyhow::Result<()> {
    if samples.len() < 8 {
        return Ok(());
    }
    let quarter = samples.len() / 4;
    let warm = samples[quarter..2 * quarter]
        .iter()
        .max()
        .copied()
        .unwrap_or(0);
    let last = samples[3 * quarter..].iter().max().copied().unwrap_or(0);
    ensure!(
        last <= warm * 3 / 2 + 16 * 1024,
        "worker {incarnation} grew from {warm} KiB to {last} KiB: {samples:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak() -> anyhow::Result<()> {
    let minutes: u64 = std::env::var("SOAK_MINUTES")
        .ok()
        .map(|m| m.parse().context("SOAK_MINUTES"))
        .transpose()?
        .unwrap_or(1);
    let run_for = Duration::from_secs(minutes * 60);
    let records = (1_000_000 * minutes / 30) as usize;
    let kill_every = (run_for / 10).clamp(Duration::from_secs(30), Duration::from_secs(180));
    let scratch = Scratch::new()?;
    let (admin, topic, group) = prepared(4, 0).await?;
    let path = scratch.0.join("ledger");

    // Production at a steady rate, every 100 ms a slice.
    let producing = {
        let topic = topic.clone();
        tokio::spawn(async move {
            let producer = producer(&[("linger.ms", "5")])?;
            let ticks = run_for.as_millis() as usize / 100;
            let mut next = 0;
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            for i in 1..=ticks {
                tick.tick().await;
                let until = records * i / ticks;
                let values = (next..until).map(|seq| {
                    let mut value = ledger_record(seq);
                    if seq % POISON_EVERY == 7 {
                        value.push_str(":poison");
                    }
                    value
                });
                produce(&producer, &topic, None, values).await?;
                next = until;
            }
            anyhow::Ok(next)
        })
    };

    let started = Instant::now();
    let mut incarnation = 0;
    let mut memory = Vec::new();
    let last = loop {
        incarnation += 1;
        let worker = spawn_worker(&topic, &group, &path, 5, 64, true)?;
        let pid = worker.id().context("the worker's pid")?;
        let mut samples = Vec::new();
        let born = Instant::now();
        let final_run = started.elapsed() + kill_every >= run_for;
        while born.elapsed() < kill_every || (final_run && !producing.is_finished()) {
            tokio::time::sleep(Duration::from_secs(5)).await;
            samples.extend(rss_kib(pid));
        }
        memory.push(samples);
        if final_run {
            break worker;
        }
        kill(worker).await?;
        eprintln!(
            "soak: killed worker {incarnation} at {:?}, {} ledger lines",
            started.elapsed(),
            ledger(&path).len()
        );
    };
    let produced = producing.await??;
    wait_for("the lag to reach 0", Duration::from_secs(300), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    terminate(last, &path.with_extension("log")).await?;

    let dlq = dead_letters(&topic).await?;
    let poison: HashSet<usize> = (0..produced).filter(|s| s % POISON_EVERY == 7).collect();
    let missing_poison: Vec<_> = poison.difference(&dlq).take(20).collect();
    ensure!(
        missing_poison.is_empty(),
        "poison records not in the DLQ: {missing_poison:?}"
    );
    let lines = ledger(&path);
    let duplicates = check_no_loss(produced, &lines, &dlq)?;
    for (i, samples) in memory.iter().enumerate() {
        check_flat(samples, i + 1)?;
    }
    let peaks: Vec<u64> = memory
        .iter()
        .map(|s| s.iter().max().copied().unwrap_or(0) / 1024)
        .collect();
    eprintln!(
        "soak: {minutes} min, {produced} produced, {} ledger lines ({duplicates} duplicates), {} dead letters ({} poison), {incarnation} workers, peak RSS MiB per worker {peaks:?}",
        lines.len(),
        dlq.len(),
        poison.len()
    );
    Ok(())
}
