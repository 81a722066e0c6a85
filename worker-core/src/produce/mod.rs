//! The producing side: [`JobProducer`] enqueues jobs for workers, typed.
//!
//! One idempotent `acks=all` librdkafka producer (the same code writes the worker's dead letters
//! and its moves to the delay topics), secured like every other connection by a
//! [`Security`](crate::security::Security). An enqueue returns once the broker confirmed the
//! record, with where it landed.
//!
//! - [`JobProducer::enqueue`] writes a serde payload as JSON (what a handler's [`Json<T>`] reads);
//!   [`enqueue_in`](JobProducer::enqueue_in) and [`enqueue_at`](JobProducer::enqueue_at) add
//!   [`share.not-before`](crate::delay::headers::NOT_BEFORE), so no worker runs it earlier;
//!   [`enqueue_with`](JobProducer::enqueue_with) takes a key, headers and a time in
//!   [`EnqueueOptions`].
//! - A `#[handler]` job has a typed enqueue generated from its signature:
//!   `send_sms::enqueue(&producer, &Sms { .. })` writes to the job's topic with the job's
//!   payload type, so a payload of the wrong type is a compile error ([`Payload`]).
//! - The current span's trace context goes along as a W3C `traceparent` header (and
//!   `tracestate`), so the job's `process` span continues the trace that enqueued it.
//!
//! ```no_run
//! use std::time::Duration;
//! use serde::Serialize;
//! use worker_core::produce::{EnqueueOptions, JobProducer};
//!
//! #[derive(Serialize)]
//! struct Sms {
//!     to: String,
//!     text: String,
//! }
//!
//! # async fn run() -> worker_core::Result<()> {
//! let producer = JobProducer::builder("127.0.0.1:9092").build()?;
//! let sms = Sms { to: "+4915112345678".into(), text: "hi".into() };
//! producer.enqueue("sms", &sms).await?;
//! producer.enqueue_in("sms", &sms, Duration::from_secs(30)).await?;
//! // One key per phone number: a route's `rate-per-key` and `key-concurrency` go by it.
//! let options = EnqueueOptions::new().key(sms.to.clone()).header("source", "signup");
//! let landed = producer.enqueue_with("sms", &sms, options).await?;
//! println!("enqueued at {}/{}@{}", landed.topic, landed.partition, landed.offset);
//! # Ok(()) }
//! ```
//!
//! [`Json<T>`]: crate::handler::Json

mod builder;
pub(crate) mod client;
mod options;
mod payload;
mod producer;

pub use builder::JobProducerBuilder;
pub use options::EnqueueOptions;
pub use payload::Payload;
pub use producer::{Enqueued, JobProducer};
