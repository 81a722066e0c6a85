//! `cargo run -p examples --bin webhook_notifier -- [BOOTSTRAP] [GROUP]`: delivers the events of
//! topic `webhooks` through tower layers (2 s timeout, 500 deliveries/s) until ctrl-c.

use std::time::Duration;

use examples::demo_backoff;
use examples::webhook::{FakeEndpoints, service};
use worker_core::Worker;
use worker_core::dlq::KafkaDlqSink;
use worker_core::kafka::{KafkaSource, OffsetReset};

#[tokio::main]
async fn main() -> worker_core::Result<()> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9092".into());
    let group = args.next().unwrap_or_else(|| "webhook-notifiers".into());
    let source = KafkaSource::builder(&bootstrap, &group)
        .topic("webhooks")
        .offset_reset(OffsetReset::Earliest)
        .build()
        .await?;
    let dlq = KafkaDlqSink::builder(&bootstrap, &group)
        .worker("webhook-notifier")
        .build()?;
    let endpoints = FakeEndpoints::new(Duration::from_millis(30), 50);
    let summary = Worker::builder(source)
        .route("webhooks", service(endpoints, Duration::from_secs(2), 500))
        .concurrency(100)
        .backoff(demo_backoff())
        .dlq(dlq)
        .build()?
        .run_until_signal()
        .await?;
    eprintln!("{summary:?}");
    Ok(())
}
