//! `share-worker produce`: enqueue generated jobs or one job per line of a file.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rdkafka::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::progress::Progress;

/// What to produce.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["count", "file"]))]
pub(crate) struct ProduceArgs {
    /// Comma-separated host:port list.
    #[arg(long)]
    bootstrap: String,
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

pub(crate) async fn produce(args: ProduceArgs) -> anyhow::Result<()> {
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
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &args.bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create()
        .context("creating the producer")?;
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
            settle(pending.next().await, &args.topic)?;
            done += 1;
        }
        progress.update(done);
    }
    while let Some(result) = pending.next().await {
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

fn settle(result: Option<Delivery>, topic: &str) -> anyhow::Result<()> {
    match result {
        Some(Ok(Ok(_))) | None => Ok(()),
        Some(Ok(Err((err, _)))) => Err(anyhow::anyhow!("producing to {topic}: {err}")),
        Some(Err(_)) => Err(anyhow::anyhow!("the producer dropped a record for {topic}")),
    }
}
