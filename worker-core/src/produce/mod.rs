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

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde::Serialize;

use crate::delay::{DelaySink, DelayedRecord, headers};
use crate::telemetry::{TRACEPARENT, TRACESTATE};
use crate::{Error, ErrorKind, Result};

use self::client::Producer;

pub use builder::JobProducerBuilder;
pub use options::EnqueueOptions;
pub use payload::Payload;

/// Enqueues jobs: see the [module docs](self). Cheap to clone; clones share one producer.
#[derive(Clone)]
pub struct JobProducer {
    inner: Arc<Inner>,
}

struct Inner {
    producer: Producer,
    client_id: String,
}

impl fmt::Debug for JobProducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobProducer")
            .field("client_id", &self.inner.client_id)
            .finish_non_exhaustive()
    }
}

/// Where an enqueued record landed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Enqueued {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
}

impl JobProducer {
    /// A producer for the brokers at `bootstrap` (comma-separated `host:port`).
    pub fn builder(bootstrap: impl Into<String>) -> JobProducerBuilder {
        JobProducerBuilder::new(bootstrap.into())
    }

    /// Enqueues `payload` as JSON on `topic`, to run as soon as a worker takes it.
    pub async fn enqueue<T: Serialize + ?Sized>(
        &self,
        topic: &str,
        payload: &T,
    ) -> Result<Enqueued> {
        self.enqueue_with(topic, payload, EnqueueOptions::new())
            .await
    }

    /// Enqueues `payload` as JSON on `topic`, to run no earlier than `delay` from now.
    pub async fn enqueue_in<T: Serialize + ?Sized>(
        &self,
        topic: &str,
        payload: &T,
        delay: Duration,
    ) -> Result<Enqueued> {
        self.enqueue_with(topic, payload, EnqueueOptions::new().delay(delay))
            .await
    }

    /// Enqueues `payload` as JSON on `topic`, to run no earlier than `at`.
    pub async fn enqueue_at<T: Serialize + ?Sized>(
        &self,
        topic: &str,
        payload: &T,
        at: SystemTime,
    ) -> Result<Enqueued> {
        self.enqueue_with(topic, payload, EnqueueOptions::new().at(at))
            .await
    }

    /// Enqueues `payload` as JSON with a key, headers or a time (`options`); on `options`'
    /// topic if it names one, else on `topic`.
    pub async fn enqueue_with<T: Serialize + ?Sized>(
        &self,
        topic: &str,
        payload: &T,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let value = encode_json(topic, payload)?;
        self.send(topic, Some(value), options).await
    }

    /// Enqueues a payload of the type job `P` takes (`Json<T>`: `T` as JSON; `String`: text;
    /// `Bytes`: raw bytes). What the code `#[handler]` generates calls.
    pub async fn enqueue_as<P: Payload>(
        &self,
        topic: &str,
        payload: &P::Value,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let value = P::encode(payload).map_err(|err| {
            Error::new(
                ErrorKind::Config,
                format!("encoding a job for {topic}: {err}"),
            )
        })?;
        self.send(topic, Some(value), options).await
    }

    /// Writes one record with value `value` (any bytes) to `topic` (or `options`' topic).
    pub async fn send(
        &self,
        topic: &str,
        value: Option<Bytes>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let topic = options.topic.as_deref().unwrap_or(topic);
        let mut headers: Vec<(String, Bytes)> = options.headers;
        if let Some(at) = options.not_before.map(|at| at.resolve(SystemTime::now())) {
            headers.retain(|(key, _)| key != headers::NOT_BEFORE);
            headers.push((
                headers::NOT_BEFORE.to_owned(),
                Bytes::from(headers::format_not_before(at)),
            ));
        }
        if !headers.iter().any(|(key, _)| key == TRACEPARENT)
            && let Some((parent, state)) = crate::telemetry::current_trace_context()
        {
            headers.push((TRACEPARENT.to_owned(), Bytes::from(parent)));
            if let Some(state) = state {
                headers.push((TRACESTATE.to_owned(), Bytes::from(state)));
            }
        }
        let record_headers = headers.iter().fold(
            OwnedHeaders::new_with_capacity(headers.len()),
            |all, (key, value)| {
                all.insert(KafkaHeader {
                    key,
                    value: Some(&value[..]),
                })
            },
        );
        let mut record = FutureRecord::to(topic).headers(record_headers);
        if let Some(key) = &options.key {
            record = record.key(&key[..]);
        }
        if let Some(value) = &value {
            record = record.payload(&value[..]);
        }
        let landed = self
            .inner
            .producer
            .write(record)
            .await
            .map_err(|failure| failure.into_error(&format!("enqueueing a job on {topic}")))?;
        Ok(Enqueued {
            topic: topic.to_owned(),
            partition: landed.partition,
            offset: landed.offset,
        })
    }
}

fn encode_json<T: Serialize + ?Sized>(topic: &str, payload: &T) -> Result<Bytes> {
    serde_json::to_vec(payload).map(Bytes::from).map_err(|err| {
        Error::new(
            ErrorKind::Config,
            format!("encoding a job for {topic} as JSON: {err}"),
        )
    })
}

/// The worker's moves to the delay topics go through the same producer.
#[async_trait::async_trait]
impl DelaySink for JobProducer {
    async fn send(&self, record: &DelayedRecord) -> Result<()> {
        let record_headers = record.headers.iter().fold(
            OwnedHeaders::new_with_capacity(record.headers.len()),
            |all, header| {
                all.insert(KafkaHeader {
                    key: &header.key,
                    value: header.value.as_deref(),
                })
            },
        );
        let mut out = FutureRecord::to(&record.topic).headers(record_headers);
        if let Some(key) = &record.key {
            out = out.key(&key[..]);
        }
        if let Some(value) = &record.value {
            out = out.payload(&value[..]);
        }
        self.inner
            .producer
            .write(out)
            .await
            .map(|_| ())
            .map_err(|failure| {
                failure.into_error(&format!("moving a record to delay topic {}", record.topic))
            })
    }
}
