//! `cargo run -p examples --bin sms_worker -- [BOOTSTRAP] [GROUP]`: sends the SMS jobs of topic
//! `sms` through a fake gateway (50 ms per message, 429s, invalid numbers) until ctrl-c.
//!
//! Produce jobs with e.g. `{"to":"+4915112345678","text":"hi"}` lines on topic `sms`; undeliverable
//! ones land in `sms.dlq`.

use std::time::Duration;

use examples::demo_backoff;
use examples::sms::{FakeGateway, send_sms};
use worker_core::Worker;
use worker_core::dlq::KafkaDlqSink;
use worker_core::handler::NamedJob;
use worker_core::kafka::{KafkaSource, OffsetReset};

#[tokio::main]
async fn main() -> worker_core::Result<()> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9092".into());
    let group = args.next().unwrap_or_else(|| "sms-senders".into());
    let source = KafkaSource::builder(&bootstrap, &group)
        .topic(send_sms.topic())
        .offset_reset(OffsetReset::Earliest)
        .build()
        .await?;
    let dlq = KafkaDlqSink::builder(&bootstrap, &group)
        .worker("sms-worker")
        .build()?;
    let gateway = FakeGateway::new(Duration::from_millis(50), Duration::from_secs(1));
    let summary = Worker::builder(source)
        .job(send_sms, gateway)
        .concurrency(200)
        .backoff(demo_backoff())
        .dlq(dlq)
        .build()?
        .run_until_signal()
        .await?;
    eprintln!("{summary:?}");
    Ok(())
}
