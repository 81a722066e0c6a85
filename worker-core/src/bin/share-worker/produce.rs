//! `share-worker produce`: enqueue generated jobs or one job per line of a file.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use worker_core::config::Config;
use worker_core::security::{KafkaContext, Security};

use crate::librdkafka;
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
}

fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected KEY=VALUE, found {text:?}")),
    }
}

/// Records awaiting the broker's acknowledgement at most.
const WINDOW: usize = 10_000;

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
    let (producer, context) = librdkafka::producer(
        &security,
        &bootstrap,
        &[
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("message.timeout.ms", "30000"),
        ],
        "the producer",
    )?;
    let started = Instant::now();
    let mut progress = Progress::new("records", total);
    let mut pending = FuturesUnordered::new();
    let mut done = 0u64;
    for (n, payload) in payloads.enumerate() {
        let key = n.to_string();
        let mut record = FutureRecord::to(&args.topic).key(&key).payload(&payload);
        if !args.headers.is_empty() {
            let headers = args.headers.iter().fold(
                OwnedHeaders::new_with_capacity(args.headers.len()),
                |headers, (key, value)| {
                    headers.insert(Header {
                        key,
                        value: Some(value.as_bytes()),
                    })
                },
            );
            record = record.headers(headers);
        }
        let queued = producer
            .send_result(record)
            .map_err(|(err, _)| anyhow::anyhow!("queueing a record for {}: {err}", args.topic))?;
        pending.push(queued);
        while pending.len() >= WINDOW {
            settle(
                next(&mut pending, &context, &args.topic).await?,
                &args.topic,
            )?;
            done += 1;
        }
        progress.update(done);
    }
    while let Some(result) = next(&mut pending, &context, &args.topic).await? {
        settle(Some(result), &args.topic)?;
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

type Delivery = Result<
    rdkafka::producer::future_producer::OwnedDeliveryResult,
    futures::channel::oneshot::Canceled,
>;

/// The next delivery of `pending`, unless a broker refuses the producer first.
async fn next(
    pending: &mut FuturesUnordered<impl std::future::Future<Output = Delivery>>,
    context: &KafkaContext,
    topic: &str,
) -> anyhow::Result<Option<Delivery>> {
    let delivery = librdkafka::unless_refused(pending.next(), context)
        .await
        .map_err(|said| anyhow::anyhow!("producing to {topic}: {said}"))?;
    if let Some(Ok(Ok(_))) = &delivery {
        context.accepted();
    }
    Ok(delivery)
}

fn settle(result: Option<Delivery>, topic: &str) -> anyhow::Result<()> {
    match result {
        Some(Ok(Ok(_))) | None => Ok(()),
        Some(Ok(Err((err, _)))) => Err(anyhow::anyhow!("producing to {topic}: {err}")),
        Some(Err(_)) => Err(anyhow::anyhow!("the producer dropped a record for {topic}")),
    }
}
