//! Decompression memory against the real broker: a worker holding C records of 1 MiB, each out of
//! a gzip batch of 48 such records (48 MiB inflated, ~50 KB on the wire), stays within
//! `baseline + C × (1 MiB + 4 KiB) + the decompression budget + slack` of resident memory at its
//! peak.
//!
//! The records are acquired two at a time (`max_poll_records` 2), so every fetch inflates a whole
//! 48 MiB batch to keep two records of it. Without copying small records out of large inflated
//! batches, each fetch would pin its 48 MiB: C = 16 records would hold 8 batches, 384 MiB.
//!
//! The worker is a separate process (`inflate_worker`, built from the library) so its memory can
//! be read from `/proc/<pid>/status`: `VmRSS` before any record exists (the baseline), and `VmHWM`
//! (the peak) once it holds C records.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, ensure};
use tests::{create_raw_batch_topic, produce_batch, unique, wait_for};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use worker_core::kafka::Admin;
use worker_kafka::test_util::{RawCompression, RawRecordSpec, encode_batch};

const WORKER: &str = env!("CARGO_BIN_EXE_inflate_worker");

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;
/// Records held at once.
const CONCURRENCY: u64 = 16;
/// Records per fetch.
const MAX_POLL: u64 = 2;
const RECORD_BYTES: usize = 1 << 20;
const RECORDS_PER_BATCH: usize = 48;
const BATCHES: usize = 3;
/// The batch cap: a 48 MiB batch fits.
const MAX_BATCH_BYTES: u64 = 64 * MIB;
/// The decompression budget of one fetch response (the smallest allowed: the batch cap).
const BUDGET: u64 = MAX_BATCH_BYTES;
/// What a held record may cost beyond its payload.
const PER_RECORD: u64 = 4 * KIB;
/// Room for everything else that grows once records flow: the compressed response, allocator
/// arenas, connection buffers, task and timer state.
const SLACK: u64 = 16 * MIB;

/// `VmRSS` and `VmHWM` of process `pid`, in bytes.
fn memory(pid: u32) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .with_context(|| format!("{name} in /proc/{pid}/status"))?;
        let kib: u64 = line
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .with_context(|| format!("{name} {line:?}"))?;
        Ok(kib * KIB)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// What the worker said last: whether it joined, and how many records it holds.
#[derive(Clone, Copy, Debug, Default)]
struct Said {
    joined: bool,
    held: u64,
    exited: bool,
}

fn spawn_worker(
    topic: &str,
    group: &str,
) -> anyhow::Result<(
    Child,
    watch::Receiver<Said>,
    tokio::task::JoinHandle<String>,
)> {
    let mut child = Command::new(WORKER)
        .args([&tests::bootstrap(), group, topic])
        .args([CONCURRENCY, MAX_POLL, MAX_BATCH_BYTES, BUDGET].map(|n| n.to_string()))
        .env("RUST_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting inflate_worker")?;
    let stdout = child.stdout.take().context("its stdout")?;
    let stderr = child.stderr.take().context("its stderr")?;
    let (tx, rx) = watch::channel(Said::default());
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line == "joined" {
                tx.send_modify(|s| s.joined = true);
            } else if let Some(n) = line
                .strip_prefix("held ")
                .and_then(|rest| rest.split(' ').next())
                .and_then(|n| n.parse().ok())
            {
                tx.send_modify(|s| s.held = s.held.max(n));
            }
        }
        tx.send_modify(|s| s.exited = true);
    });
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    Ok((child, rx, errors))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_held_out_of_large_inflated_batches_cost_their_payload_not_their_batch()
-> anyhow::Result<()> {
    let admin = Admin::connect(tests::bootstrap()).await?;
    let topic = unique("inflate");
    let group = unique("inflate-workers");
    create_raw_batch_topic(&topic).await?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    let batch = tokio::task::spawn_blocking(|| {
        let zeros = RawRecordSpec::value(vec![0u8; RECORD_BYTES]);
        encode_batch(0, &vec![zeros; RECORDS_PER_BATCH], RawCompression::Gzip)
    })
    .await??;
    ensure!(
        batch.len() < 256 << 10,
        "a 48 MiB batch of zeros is small on the wire ({} bytes)",
        batch.len()
    );

    let (mut child, said, errors) = spawn_worker(&topic, &group)?;
    let pid = child.id().context("the worker's pid")?;
    let watching = said.clone();
    wait_for("the worker to join", Duration::from_secs(30), async || {
        let now = *watching.borrow();
        ensure!(!now.exited, "the worker exited");
        Ok(now.joined)
    })
    .await?;
    let (baseline, baseline_peak) = memory(pid)?;

    for _ in 0..BATCHES {
        produce_batch(&topic, batch.clone()).await?;
    }
    let watching = said.clone();
    let held = wait_for(
        "the worker to hold its records",
        Duration::from_secs(45),
        async || {
            let now = *watching.borrow();
            ensure!(!now.exited, "the worker exited");
            Ok(now.held >= CONCURRENCY)
        },
    )
    .await;
    let measured = memory(pid);
    child.start_kill()?;
    child.wait().await?;
    if let Err(err) = held {
        return Err(err.context(errors.await.unwrap_or_default()));
    }
    let (rss, peak) = measured?;

    let mib = |b: u64| b as f64 / MIB as f64;
    let bound = baseline + CONCURRENCY * (RECORD_BYTES as u64 + PER_RECORD) + BUDGET + SLACK;
    eprintln!(
        "inflate_worker RSS: baseline {:.1} MiB (peak so far {:.1} MiB); holding {CONCURRENCY} \
         records of 1 MiB: RSS {:.1} MiB, peak {:.1} MiB; bound {:.1} MiB",
        mib(baseline),
        mib(baseline_peak),
        mib(rss),
        mib(peak),
        mib(bound)
    );
    assert!(
        peak <= bound,
        "peak RSS {:.1} MiB over baseline {:.1} MiB + {CONCURRENCY} × (1 MiB + 4 KiB) + the \
         {:.0} MiB budget + {:.0} MiB slack",
        mib(peak),
        mib(baseline),
        mib(BUDGET),
        mib(SLACK)
    );
    Ok(())
}
