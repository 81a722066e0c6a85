//! [`KafkaDlqSink`]: dead letters to a Kafka topic through an idempotent `acks=all` producer.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::headers::{self, is_provenance};
use super::{DeadLetter, DlqError, DlqSink, DlqTopic};
use crate::{Error, ErrorKind, Result};

/// Writes dead letters to Kafka: original key, value, timestamp and headers, plus the provenance
/// headers. `send` returns once the broker has acknowledged the write with `acks=all`.
pub struct KafkaDlqSink {
    producer: FutureProducer,
    topic: DlqTopic,
    group: Arc<str>,
    worker: Arc<str>,
}

impl fmt::Debug for KafkaDlqSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaDlqSink")
            .field("topic", &self.topic.template())
            .field("group", &self.group)
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

/// Settings for a [`KafkaDlqSink`].
#[derive(Debug)]
pub struct KafkaDlqSinkBuilder {
    bootstrap: String,
    group: String,
    worker: String,
    topic: DlqTopic,
    delivery_timeout: Duration,
    options: Vec<(String, String)>,
}

impl KafkaDlqSink {
    /// A sink for the share group `group`, writing through the brokers at `bootstrap`.
    pub fn builder(bootstrap: impl Into<String>, group: impl Into<String>) -> KafkaDlqSinkBuilder {
        let group = group.into();
        KafkaDlqSinkBuilder {
            bootstrap: bootstrap.into(),
            worker: format!("{group}-worker"),
            group,
            topic: DlqTopic::default(),
            delivery_timeout: Duration::from_secs(30),
            options: Vec::new(),
        }
    }

    /// Where dead letters of `topic` go.
    pub fn destination(&self, topic: &str) -> String {
        self.topic.render(topic, &self.group)
    }
}

impl KafkaDlqSinkBuilder {
    /// The dead-letter topic template (default `{topic}.dlq`).
    pub fn topic(mut self, topic: DlqTopic) -> Self {
        self.topic = topic;
        self
    }

    /// The name written as `share.dlq.worker` (default `{group}-worker`); also the client id.
    pub fn worker(mut self, worker: impl Into<String>) -> Self {
        self.worker = worker.into();
        self
    }

    /// How long one write may take before it counts as failed (librdkafka `message.timeout.ms`,
    /// default 30 s). A missing topic fails after this long.
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.delivery_timeout = timeout;
        self
    }

    /// Any other librdkafka producer setting. Idempotence and `acks=all` cannot be turned off.
    pub fn option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.push((key.into(), value.into()));
        self
    }

    /// Creates the producer.
    pub fn build(self) -> Result<KafkaDlqSink> {
        let mut config = ClientConfig::new();
        for (key, value) in &self.options {
            config.set(key, value);
        }
        let timeout_ms = self.delivery_timeout.as_millis().clamp(1, i32::MAX as u128);
        config
            .set("bootstrap.servers", &self.bootstrap)
            .set("client.id", &self.worker)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("message.timeout.ms", timeout_ms.to_string());
        let producer = config.create().map_err(|err| {
            Error::new(ErrorKind::Config, "creating the dead-letter producer").with_source(err)
        })?;
        Ok(KafkaDlqSink {
            producer,
            topic: self.topic,
            group: self.group.into(),
            worker: self.worker.into(),
        })
    }
}

#[async_trait::async_trait]
impl DlqSink for KafkaDlqSink {
    async fn send(&self, letter: &DeadLetter) -> std::result::Result<(), DlqError> {
        let delivery = &letter.delivery;
        let destination = self.destination(&delivery.id.topic);
        let mut record_headers = OwnedHeaders::new_with_capacity(delivery.headers.len() + 10);
        for header in delivery.headers.iter().filter(|h| !is_provenance(&h.key)) {
            record_headers = record_headers.insert(Header {
                key: &header.key,
                value: header.value.as_deref(),
            });
        }
        for (key, value) in headers::provenance(letter, &self.group, &self.worker) {
            record_headers = record_headers.insert(Header {
                key,
                value: Some(&value),
            });
        }
        let mut record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&destination).headers(record_headers);
        if let Some(key) = &delivery.key {
            record = record.key(key);
        }
        if let Some(value) = &delivery.value {
            record = record.payload(value);
        }
        if delivery.timestamp >= 0 {
            record = record.timestamp(delivery.timestamp);
        }
        let queued = self.producer.send_result(record).map_err(|(err, _)| {
            Error::new(
                ErrorKind::Dlq,
                format!(
                    "queueing {} for dead-letter topic {destination}",
                    delivery.id
                ),
            )
            .with_source(err)
        })?;
        match queued.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err((err, _))) => Err(Error::new(
                ErrorKind::Dlq,
                format!("writing {} to dead-letter topic {destination}", delivery.id),
            )
            .with_source(err)
            .into()),
            Err(_) => Err(Error::new(
                ErrorKind::Dlq,
                format!(
                    "the dead-letter producer dropped {} for {destination}",
                    delivery.id
                ),
            )
            .into()),
        }
    }
}
