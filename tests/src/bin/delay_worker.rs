//! A worker process for the durable-retry tests: each record's first attempt fails with a retry
//! after `BACKOFF_MS`, later attempts succeed; each call appends `{fail|ok} {offset-of-origin}
//! {attempt} {unix millis}` to a ledger first. Waits longer than `MAX_HOLD_MS` move to the delay
//! topic `{topic}.delay` through a `JobProducer`, which the worker consumes too; dead letters go
//! to `{topic}.dlq`. Tests SIGKILL it during the wait and start it again.
//!
//! `delay_worker BOOTSTRAP GROUP TOPIC LEDGER MAX_HOLD_MS BACKOFF_MS`

use std::convert::Infallible;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use tower::service_fn;
use worker_core::delay::DelayTopic;
use worker_core::dlq::KafkaDlqSink;
use worker_core::kafka::{DelayTopics, KafkaSource};
use worker_core::policy::Backoff;
use worker_core::produce::JobProducer;
use worker_core::{Job, Outcome, Worker};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, group, topic, ledger, max_hold, backoff] = &args[..] else {
        bail!("usage: delay_worker BOOTSTRAP GROUP TOPIC LEDGER MAX_HOLD_MS BACKOFF_MS");
    };
    let max_hold = Duration::from_millis(max_hold.parse().context("MAX_HOLD_MS")?);
    let backoff = Duration::from_millis(backoff.parse().context("BACKOFF_MS")?);
    let ledger = OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)
        .with_context(|| format!("opening the ledger {ledger}"))?;
    let ledger = Arc::new(Mutex::new(ledger));
    let source = KafkaSource::builder(bootstrap.as_str(), group.as_str())
        .topic(topic.as_str())
        .delay_topics(DelayTopic::default())
        .build()
        .await?;
    let dlq = KafkaDlqSink::builder(bootstrap.as_str(), group.as_str()).build()?;
    let producer = JobProducer::builder(bootstrap.as_str()).build()?;
    let worker = Worker::builder(source)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| handle(job, backoff, ledger.clone())),
        )
        .backoff(Backoff::exponential(
            Duration::from_millis(200),
            backoff * 2,
        ))
        .max_hold(max_hold)
        .delay(producer)
        .dlq(dlq)
        .build()?;
    let summary = worker.run_until_signal().await?;
    eprintln!("delay_worker: {summary:?}");
    Ok(())
}

async fn handle(
    job: Job,
    backoff: Duration,
    ledger: Arc<Mutex<File>>,
) -> Result<Outcome, Infallible> {
    let origin = job
        .headers()
        .iter()
        .rev()
        .find(|h| &*h.key == worker_core::delay::headers::ORIGIN_OFFSET)
        .and_then(|h| h.value.as_deref())
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_owned)
        .unwrap_or_else(|| job.id().offset.to_string());
    let first = job.attempt() == 1;
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let line = format!(
        "{} {origin} {} {millis}\n",
        if first { "fail" } else { "ok" },
        job.attempt()
    );
    let written = ledger
        .lock()
        .map_err(|_| ())
        .and_then(|mut file| file.write_all(line.as_bytes()).map_err(|_| ()));
    Ok(match (written, first) {
        (Err(()), _) => Outcome::retry("cannot write the ledger"),
        (Ok(()), true) => Outcome::retry_after(backoff, "the first attempt always fails"),
        (Ok(()), false) => Outcome::Accept,
    })
}
