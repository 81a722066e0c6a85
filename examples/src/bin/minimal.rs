//! The README's library example: a worker that accepts every SMS job, with a dead-letter topic.

use std::convert::Infallible;
use tower::service_fn;
use worker_core::dlq::KafkaDlqSink;
use worker_core::kafka::{KafkaSource, OffsetReset};
use worker_core::{Job, Outcome, Worker};

#[tokio::main]
async fn main() -> worker_core::Result<()> {
    let source = KafkaSource::builder("127.0.0.1:9092", "sms-senders")
        .topic("sms")
        // Job queues want every record, not just those produced after the group first fetched.
        .offset_reset(OffsetReset::Earliest)
        .build()
        .await?;
    // Records that cannot succeed go to `sms.dlq`, confirmed before the source record is settled.
    let dlq = KafkaDlqSink::builder("127.0.0.1:9092", "sms-senders").build()?;
    let worker = Worker::builder(source)
        .route(
            "sms",
            service_fn(|job: Job| async move {
                let _payload = job.payload();
                // ... send the SMS ...
                Ok::<_, Infallible>(Outcome::Accept)
            }),
        )
        .concurrency(256)
        .dlq(dlq)
        .build()?;
    let summary = worker.run_until_signal().await?; // ctrl-c / SIGTERM: graceful shutdown
    println!("{summary:?}");
    Ok(())
}
