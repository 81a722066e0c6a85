//! [`KafkaDlqSinkBuilder`]: the settings of a [`KafkaDlqSink`] and the producer they make.

use std::sync::OnceLock;
use std::time::Duration;

use super::KafkaDlqSink;
use super::missing::MissingTopics;
use crate::dlq::DlqTopic;
use crate::produce::client::{Producer, producer_config};
use crate::security::Security;
use crate::{Error, ErrorKind, Result};

/// librdkafka's default `message.max.bytes`.
const DEFAULT_MESSAGE_MAX_BYTES: usize = 1_000_000;
/// How long a dead-letter topic may be missing before the sink gives up, by default.
const DEFAULT_MISSING_TOPIC_GRACE: Duration = Duration::from_secs(5 * 60);
/// The longest wait for the cluster to say whether a topic exists.
const MAX_METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings for a [`KafkaDlqSink`].
#[derive(Debug)]
pub struct KafkaDlqSinkBuilder {
    bootstrap: String,
    group: String,
    worker: String,
    topic: DlqTopic,
    delivery_timeout: Duration,
    missing_topic_grace: Duration,
    security: Security,
    options: Vec<(String, String)>,
}

impl KafkaDlqSinkBuilder {
    pub(super) fn new(bootstrap: String, group: String) -> Self {
        Self {
            bootstrap,
            worker: format!("{group}-worker"),
            group,
            topic: DlqTopic::default(),
            delivery_timeout: Duration::from_secs(30),
            missing_topic_grace: DEFAULT_MISSING_TOPIC_GRACE,
            security: Security::plaintext(),
            options: Vec::new(),
        }
    }

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
    /// default 30 s). A write to a topic that does not exist fails after at most this long.
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.delivery_timeout = timeout;
        self
    }

    /// How long a dead-letter topic may be missing before the sink gives up on it (default
    /// 5 minutes): operators sometimes create the topic after starting the workers.
    ///
    /// Within the grace period a write to a missing topic fails as
    /// [`Unavailable`](crate::dlq::DlqErrorKind::Unavailable) (the worker keeps the records locked,
    /// stops fetching and tries again); once the topic has been missing for longer, as
    /// [`Permanent`](crate::dlq::DlqErrorKind::Permanent) ("dead-letter topic X does not exist
    /// (auto-create off?) for Ns": the worker stops). The clock starts with the first write that
    /// found the topic missing and starts over once it exists. `Duration::ZERO` gives up at once.
    pub fn missing_topic_grace(mut self, grace: Duration) -> Self {
        self.missing_topic_grace = grace;
        self
    }

    /// Secures the producers' connections (TLS, SASL) like every other Kafka connection of the
    /// worker; default plain TCP.
    ///
    /// A broker that refuses the producers (a wrong password, a certificate it does not trust) makes
    /// a write fail as [`Permanent`](crate::dlq::DlqErrorKind::Permanent), in the broker's words,
    /// as soon as librdkafka reports it (not at the delivery timeout).
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// Any other librdkafka producer setting, applied over the [`security`](Self::security)
    /// settings. Idempotence and `acks=all` cannot be turned off.
    ///
    /// `message.max.bytes` (default 1,000,000) is also the size a letter too large for its topic is
    /// first cut to.
    pub fn option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.push((key.into(), value.into()));
        self
    }

    /// Creates the producer.
    pub fn build(self) -> Result<KafkaDlqSink> {
        let mut config = producer_config(
            &self.security,
            &self.bootstrap,
            &self.worker,
            self.delivery_timeout,
            &self.options,
        )?;
        let max_message_bytes = match config.get("message.max.bytes") {
            None => DEFAULT_MESSAGE_MAX_BYTES,
            Some(text) => text.trim().parse::<usize>().map_err(|_| {
                Error::new(
                    ErrorKind::Config,
                    format!(
                        "dead-letter producer option `message.max.bytes`: expected a number of bytes, got {text:?}"
                    ),
                )
            })?,
        };
        config.set("message.max.bytes", max_message_bytes.to_string());
        let producer = Producer::new(&config, &self.security).map_err(|err| {
            Error::new(ErrorKind::Config, "creating the dead-letter producer").with_source(err)
        })?;
        Ok(KafkaDlqSink {
            producer,
            alone: OnceLock::new(),
            config,
            security: self.security,
            max_message_bytes,
            metadata_timeout: self
                .delivery_timeout
                .clamp(Duration::from_secs(1), MAX_METADATA_TIMEOUT),
            missing: MissingTopics::new(self.missing_topic_grace),
            topic: self.topic,
            group: self.group.into(),
            worker: self.worker.into(),
        })
    }
}
