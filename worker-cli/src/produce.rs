//! `share-worker produce`: enqueue generated jobs or one job per line of a file, through the
//! library's [`JobProducer`] (idempotent, `acks=all`), optionally keyed and delayed.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use crate::config::Config;
use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use worker_core::control::JOB_ID;
use worker_core::delay::{format_not_before, headers, parse_not_before};
use worker_core::produce::{EnqueueOptions, JobProducer};
use worker_core::security::Security;

use crate::progress::Progress;

/// What to produce, and where.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["count", "file"]))]
#[command(group = clap::ArgGroup::new("brokers").required(true).args(["bootstrap", "config"]))]
pub(crate) struct ProduceArgs {
    /// Comma-separated host:port list, over plain TCP (for TLS or SASL, give --config).
    #[arg(long)]
    bootstrap: Option<String>,
    /// A worker TOML file: its `[kafka]` table says where and how to connect (`bootstrap`,
    /// `security-protocol`, `[kafka.tls]`, `[kafka.sasl]`).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The topic.
    #[arg(long)]
    topic: String,
    /// How many generated jobs.
    #[arg(long)]
    count: Option<u64>,
    /// The size of each generated payload in bytes (at least the job's number).
    #[arg(long, default_value_t = 0, requires = "count")]
    size: usize,
    /// One job per line of this file.
    #[arg(long, conflicts_with = "count")]
    file: Option<PathBuf>,
    /// A header on every record, `KEY=VALUE` (repeatable; e.g. a W3C `traceparent`).
    #[arg(long = "header", value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// The key of every record (default: the record's number), e.g. a phone number for a route's
    /// `rate-per-key` or `key-concurrency`.
    #[arg(long)]
    key: Option<String>,
    /// Run no record earlier than this long from now (header `share.not-before`), e.g. "30s".
    #[arg(long, value_parser = crate::parse_duration, conflicts_with = "at")]
    delay: Option<Duration>,
    /// Run no record earlier than this time: RFC 3339, e.g. "2026-12-24T18:00:00Z".
    #[arg(long, value_parser = parse_at)]
    at: Option<SystemTime>,
    /// The job's id (header `share.job-id`, to cancel it by), for a single job; default: a fresh
    /// one per job. The id of a single job is printed.
    #[arg(long)]
    job_id: Option<String>,
}

fn parse_at(text: &str) -> Result<SystemTime, String> {
    parse_not_before(text.as_bytes())
}

fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected KEY=VALUE, found {text:?}")),
    }
}

/// Records awaiting the broker's acknowledgement at most.
const WINDOW: usize = 10_000;

/// The producer's own headers: `--delay`/`--at` and `--job-id` set them, `--header` may not.
fn is_reserved(key: &str) -> bool {
    key == headers::NOT_BEFORE || key == JOB_ID
}

/// Where to produce and how to connect: `--config`'s `[kafka]`, or `--bootstrap` in plain TCP.
fn brokers(args: &ProduceArgs) -> anyhow::Result<(String, Security)> {
    match (&args.config, &args.bootstrap) {
        (Some(path), _) => {
            let config = Config::load(path)?;
            Ok((config.kafka.bootstrap.clone(), config.security()?))
        }
        (None, Some(bootstrap)) => Ok((bootstrap.clone(), Security::plaintext())),
        (None, None) => anyhow::bail!("give --bootstrap or --config"),
    }
}

pub(crate) async fn produce(args: ProduceArgs) -> anyhow::Result<()> {
    let (bootstrap, security) = brokers(&args)?;
    let mut total = args.count;
    let payloads: Box<dyn Iterator<Item = Vec<u8>> + Send> = match (&args.file, args.count) {
        (Some(file), _) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            let lines: Vec<Vec<u8>> = text
                .lines()
                .filter(|l| !l.is_empty())
                .map(|l| l.as_bytes().to_vec())
                .collect();
            total = Some(lines.len() as u64);
            Box::new(lines.into_iter())
        }
        (None, Some(count)) => {
            let size = args.size;
            Box::new((0..count).map(move |n| {
                let mut payload = format!("job-{n}").into_bytes();
                if payload.len() < size {
                    payload.resize(size, b'.');
                }
                payload
            }))
        }
        (None, None) => anyhow::bail!("give --count N or --file F"),
    };
    let producer = JobProducer::builder(bootstrap)
        .security(security)
        .option("linger.ms", "5")
        .build()
        .context("creating the producer")?;
    if let Some((key, _)) = args.headers.iter().find(|(key, _)| is_reserved(key)) {
        anyhow::bail!(
            "--header {key}: use --delay or --at to say when the jobs may run, --job-id to name one"
        );
    }
    if args.job_id.is_some() && total != Some(1) {
        anyhow::bail!("--job-id names a single job: give --count 1 (or a file of one line)");
    }
    // One not-before for the whole run: "30s from now" as the command starts.
    let not_before = match (args.delay, args.at) {
        (Some(delay), _) => Some(SystemTime::now() + delay),
        (None, at) => at,
    };
    let mut options = EnqueueOptions::new();
    for (key, value) in &args.headers {
        options = options.header(key.clone(), Bytes::from(value.clone()));
    }
    if let Some(at) = not_before {
        options = options.at(at);
        println!(
            "records of this run do not run before {}",
            format_not_before(at)
        );
    }
    let started = Instant::now();
    let mut progress = Progress::new("records", total);
    let mut pending = FuturesUnordered::new();
    let mut done = 0u64;
    for (n, payload) in payloads.enumerate() {
        let key = args.key.clone().unwrap_or_else(|| n.to_string());
        let mut record = options.clone().key(key);
        if let Some(id) = &args.job_id {
            record = record.job_id(id.clone());
        }
        pending.push(producer.send(&args.topic, Some(Bytes::from(payload)), record));
        while pending.len() >= WINDOW {
            if let Some(result) = pending.next().await {
                result?;
            }
            done += 1;
        }
        progress.update(done);
    }
    while let Some(result) = pending.next().await {
        let enqueued = result?;
        if total == Some(1) {
            println!("job id {}", enqueued.job_id);
        }
        done += 1;
        progress.update(done);
    }
    progress.finish();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "produced {done} records to {} in {secs:.2}s ({:.0} records/s)",
        args.topic,
        if secs > 0.0 { done as f64 / secs } else { 0.0 }
    );
    Ok(())
}
