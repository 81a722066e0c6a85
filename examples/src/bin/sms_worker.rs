//! `cargo run -p examples --bin sms_worker -- [BOOTSTRAP] [GROUP] [JOBS]`: enqueues `JOBS`
//! (default 100) demo SMS jobs on topic `sms` with the job's typed enqueue, then sends every job
//! of the topic through a fake gateway (50 ms per message, 429s, invalid numbers) until ctrl-c:
//! one message per second per number at most, long waits in `sms.delay`, undeliverable ones in
//! `sms.dlq` (create the three topics first, e.g. with `share-worker setup`).

use std::time::Duration;

use examples::demo_backoff;
use examples::sms::{FakeGateway, demo_jobs, enqueue_demo, send_sms};
use worker_core::delay::DelayTopic;
use worker_core::dlq::KafkaDlqSink;
use worker_core::handler::NamedJob;
use worker_core::kafka::{DelayTopics, KafkaSource, OffsetReset};
use worker_core::produce::JobProducer;
use worker_core::{RateLimit, Route, Worker};

#[tokio::main]
async fn main() -> worker_core::Result<()> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9092".into());
    let group = args.next().unwrap_or_else(|| "sms-senders".into());
    let jobs: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(100);
    let producer = JobProducer::builder(&bootstrap).build()?;
    enqueue_demo(&producer, send_sms.topic(), &demo_jobs(jobs)).await?;
    eprintln!("enqueued {jobs} jobs on {}", send_sms.topic());
    let source = KafkaSource::builder(&bootstrap, &group)
        .topic(send_sms.topic())
        .delay_topics(DelayTopic::default())
        .offset_reset(OffsetReset::Earliest)
        .build()
        .await?;
    let dlq = KafkaDlqSink::builder(&bootstrap, &group)
        .worker("sms-worker")
        .build()?;
    let gateway = FakeGateway::new(Duration::from_millis(50), Duration::from_secs(1));
    let summary = Worker::builder(source)
        .add_route(Route::job(send_sms, gateway).key_rate_limit(RateLimit::per_second(1)))
        .concurrency(200)
        .backoff(demo_backoff())
        .delay(producer)
        .dlq(dlq)
        .build()?
        .run_until_signal()
        .await?;
    eprintln!("{summary:?}");
    Ok(())
}
