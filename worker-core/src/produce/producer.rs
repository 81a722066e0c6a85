//! [`JobProducer`]: one librdkafka producer that enqueues jobs and moves records to delay topics.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde::Serialize;

use crate::checks;
use crate::control::{Cancel, JOB_ID, cancel_record};
use crate::delay::{DelaySink, DelayedRecord, headers};
use crate::telemetry::{TRACEPARENT, TRACESTATE};
use crate::{Error, ErrorKind, Result};

use super::client::Producer;
use super::{EnqueueOptions, JobProducerBuilder, Payload};

/// Enqueues jobs: see the [module docs](super). Cheap to clone; clones share one producer.
#[derive(Clone)]
pub struct JobProducer {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) producer: Producer,
    pub(super) client_id: String,
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
    /// The job's id (its `share.job-id` header), to cancel it with.
    pub job_id: String,
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
        let job_id = match options.job_id {
            Some(id) => {
                checks::job_id(&id).map_err(|why| {
                    Error::new(
                        ErrorKind::Config,
                        format!("enqueueing a job on {topic}: {why}"),
                    )
                })?;
                id
            }
            None => uuid::Uuid::new_v4().simple().to_string(),
        };
        headers.retain(|(key, _)| key != JOB_ID);
        headers.push((JOB_ID.to_owned(), Bytes::from(job_id.clone())));
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
            job_id,
        })
    }

    /// Cancels job `job_id` for every worker of the group whose control topic is
    /// `control_topic` (`{group}.control` unless configured otherwise), for `ttl`: not started
    /// yet, it is acknowledged without running; running, its cancellation token fires. Returns
    /// once the broker confirmed the command.
    pub async fn cancel(
        &self,
        control_topic: &str,
        job_id: &str,
        ttl: Duration,
        reason: &str,
    ) -> Result<Cancel> {
        let invalid = |why: String| {
            Error::new(
                ErrorKind::Config,
                format!("cancelling job {job_id:?} on {control_topic}: {why}"),
            )
        };
        let cancel = Cancel::lasting(job_id, ttl, reason, "JobProducer").map_err(invalid)?;
        let (key, value) = cancel_record(&cancel).map_err(invalid)?;
        self.inner
            .producer
            .write(
                FutureRecord::to(control_topic)
                    .key(key.as_bytes())
                    .payload(&value[..]),
            )
            .await
            .map_err(|failure| {
                failure.into_error(&format!("cancelling job {job_id} on {control_topic}"))
            })?;
        Ok(cancel)
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
