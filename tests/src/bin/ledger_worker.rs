//! A worker process for the fault tests: it handles `{seq}:{checksum}` records by sleeping, then
//! appending `{seq} {partition} {unix millis} {offset} {attempt}` to a ledger file before it returns success, with a
//! dead-letter topic `{topic}.dlq`. Tests SIGKILL it (or the brokers under it) and start it again.
//!
//! `ledger_worker BOOTSTRAP GROUP TOPIC LEDGER DELAY_MS CONCURRENCY [faults]`
//!
//! With `faults`, the handler panics on the first attempt of every record whose sequence number is
//! a multiple of 100 (1 %), and a record produced as `{seq}:{checksum}:poison` always fails (it
//! ends in the DLQ after its attempts).
//!
//! The ledger line is written with one `write(2)` to a file opened for appending: once written it
//! is in the kernel and survives the process being killed (the tests kill processes, not machines).

use std::convert::Infallible;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use tests::checksum;
use tower::service_fn;
use worker_core::dlq::KafkaDlqSink;
use worker_core::kafka::KafkaSource;
use worker_core::policy::Backoff;
use worker_core::{Job, Outcome, Worker};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // The runtime's warnings (failed acknowledgements, lost locks, fetch errors) go to stderr,
    // which the tests keep as the worker's log.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (bootstrap, group, topic, ledger, delay_ms, concurrency, faults) = match &args[..] {
        [b, g, t, l, d, c] => (b, g, t, l, d, c, false),
        [b, g, t, l, d, c, f] if f == "faults" => (b, g, t, l, d, c, true),
        _ => {
            bail!("usage: ledger_worker BOOTSTRAP GROUP TOPIC LEDGER DELAY_MS CONCURRENCY [faults]")
        }
    };
    let delay = Duration::from_millis(delay_ms.parse().context("DELAY_MS")?);
    let concurrency: usize = concurrency.parse().context("CONCURRENCY")?;
    let ledger = OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)
        .with_context(|| format!("opening the ledger {ledger}"))?;
    let ledger = Arc::new(Mutex::new(ledger));
    let source = KafkaSource::builder(bootstrap.as_str(), group.as_str())
        .topic(topic.as_str())
        .build()
        .await?;
    let dlq = KafkaDlqSink::builder(bootstrap.as_str(), group.as_str()).build()?;
    let worker = Worker::builder(source)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| handle(job, delay, faults, ledger.clone())),
        )
        .concurrency(concurrency)
        .backoff(Backoff::exponential(
            Duration::from_millis(200),
            Duration::from_secs(2),
        ))
        .dlq(dlq)
        .build()?;
    let summary = worker.run_until_signal().await?;
    eprintln!("ledger_worker: {summary:?}");
    Ok(())
}

async fn handle(
    job: Job,
    delay: Duration,
    faults: bool,
    ledger: Arc<Mutex<File>>,
) -> Result<Outcome, Infallible> {
    let text = job.payload().and_then(|p| std::str::from_utf8(p).ok());
    let mut fields = text.unwrap_or_default().split(':');
    let (Some(seq), Some(sum), poison) = (fields.next(), fields.next(), fields.next()) else {
        return Ok(Outcome::undecodable("not a {seq}:{checksum} record"));
    };
    let Some(number) = seq
        .parse::<u64>()
        .ok()
        .filter(|_| sum == checksum(seq).to_string())
    else {
        return Ok(Outcome::undecodable("the checksum does not match"));
    };
    tokio::time::sleep(delay).await;
    if faults && poison == Some("poison") {
        return Ok(Outcome::retry("poison: this record always fails"));
    }
    if faults && number % 100 == 0 && job.attempt() == 1 {
        panic!("the first attempt of record {number} panics");
    }
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let line = format!(
        "{number} {} {millis} {} {}\n",
        job.id().partition,
        job.id().offset,
        job.attempt()
    );
    let written = ledger
        .lock()
        .map_err(|_| ())
        .and_then(|mut file| file.write_all(line.as_bytes()).map_err(|_| ()));
    Ok(match written {
        Ok(()) => Outcome::Accept,
        Err(()) => Outcome::retry("cannot write the ledger"),
    })
}
