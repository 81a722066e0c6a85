//! A worker process for the decompression-memory test: its handler holds each record (and so its
//! payload) until the process is stopped, so the test can read the process's resident memory with
//! a known number of records in flight.
//!
//! `inflate_worker BOOTSTRAP GROUP TOPIC CONCURRENCY MAX_POLL_RECORDS MAX_BATCH_BYTES MAX_FETCH_INFLATE_BYTES`
//!
//! It prints `joined` once the group assigned it a partition, then `held N` each time a handler
//! starts (N handlers running), on stdout.
//!
//! Its own binary rather than `share-worker`: the library's source takes the batch cap and the
//! decompression budget directly (the TOML has no keys for them), and the handler can say on
//! stdout exactly when it holds a record, without a telemetry listener to poll.

use std::convert::Infallible;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use tower::service_fn;
use worker_core::kafka::KafkaSource;
use worker_core::{Job, Outcome, Worker};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [
        bootstrap,
        group,
        topic,
        concurrency,
        max_poll,
        max_batch,
        budget,
    ] = &args[..]
    else {
        bail!(
            "usage: inflate_worker BOOTSTRAP GROUP TOPIC CONCURRENCY MAX_POLL_RECORDS MAX_BATCH_BYTES MAX_FETCH_INFLATE_BYTES"
        )
    };
    let concurrency: usize = concurrency.parse().context("CONCURRENCY")?;
    let max_poll: u32 = max_poll.parse().context("MAX_POLL_RECORDS")?;
    let source = KafkaSource::builder(bootstrap.as_str(), group.as_str())
        .topic(topic.as_str())
        .max_wait(Duration::from_millis(100))
        .max_batch_bytes(max_batch.parse().context("MAX_BATCH_BYTES")?)
        .max_fetch_inflate_bytes(budget.parse().context("MAX_FETCH_INFLATE_BYTES")?)
        .build()
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while source.assignment().is_empty() {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no partition assigned within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    say("joined")?;
    let running = Arc::new(AtomicUsize::new(0));
    let worker = Worker::builder(source)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| hold(job, running.clone())),
        )
        .concurrency(concurrency)
        .max_poll_records(max_poll)
        .job_timeout(Duration::from_secs(3600))
        .build()?;
    let summary = worker.run_until_signal().await?;
    eprintln!("inflate_worker: {summary:?}");
    Ok(())
}

/// Holds the record until the worker stops.
async fn hold(job: Job, running: Arc<AtomicUsize>) -> Result<Outcome, Infallible> {
    let held = running.fetch_add(1, Ordering::SeqCst) + 1;
    let len = job.payload().map_or(0, |p| p.len());
    if say(&format!("held {held} ({len} bytes)")).is_err() {
        return Ok(Outcome::retry("cannot write to stdout"));
    }
    tokio::time::sleep(Duration::from_secs(3600)).await;
    drop(job);
    Ok(Outcome::Accept)
}

fn say(line: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}
