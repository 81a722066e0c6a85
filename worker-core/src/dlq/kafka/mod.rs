//! [`KafkaDlqSink`]: dead letters to a Kafka topic through an idempotent `acks=all` producer.
//!
//! A failed write is classified by its error code ([`classify`]): a letter too large is cut
//! ([`truncate`]) and written again; a write that is not allowed, to an invalid topic name, or
//! refused for good is [`Permanent`](crate::dlq::DlqErrorKind::Permanent); a topic that does not
//! exist is [`Unavailable`](crate::dlq::DlqErrorKind::Unavailable) for a grace period
//! ([`missing`]), then permanent; a broker that refuses the producer (authentication, TLS) is
//! permanent, in the broker's words; anything else is unavailable.

mod builder;
mod classify;
mod letter;
mod missing;
mod truncate;

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer as _;

use self::classify::{Class, TopicState, classify, classify_error, topic_state};
use self::letter::Letter;
use self::missing::{Missing, MissingTopics};
use self::truncate::{Cut, next_cut};
use super::{DeadLetter, DlqError, DlqSink, DlqTopic};
use crate::checks::topic_name as check_topic_name;
use crate::produce::client::{Failure, Producer};
use crate::security::Security;
use crate::{Error, ErrorKind};

pub use builder::KafkaDlqSinkBuilder;

/// Writes dead letters to Kafka: original key, value, timestamp and headers, plus the provenance
/// headers. `send` returns once the broker has acknowledged the write with `acks=all`.
///
/// A letter larger than the producer's `message.max.bytes` or the topic's `max.message.bytes` is
/// written truncated, never dropped: its value cut (then the record's own headers dropped, then its
/// key cut, if even an empty value does not fit), marked with
/// [`share.dlq.truncated`](crate::dlq::headers::TRUNCATED) and [`share.dlq.original.size`](crate::dlq::headers::ORIGINAL_SIZE),
/// and logged at warn level. A write that is not allowed, to a topic name Kafka rejects, or to a
/// topic missing for longer than [`missing_topic_grace`](KafkaDlqSinkBuilder::missing_topic_grace)
/// fails as [`Permanent`](crate::dlq::DlqErrorKind::Permanent): the worker stops instead of
/// pausing forever.
pub struct KafkaDlqSink {
    producer: Producer,
    /// Made on first use: a producer that sends every letter in a batch of its own, for letters the
    /// broker found too large (another letter in the same batch may have been the reason).
    alone: OnceLock<Producer>,
    config: ClientConfig,
    security: Security,
    max_message_bytes: usize,
    metadata_timeout: Duration,
    missing: MissingTopics,
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
            .field("max_message_bytes", &self.max_message_bytes)
            .field("missing_topic_grace", &self.missing.grace())
            .finish_non_exhaustive()
    }
}

impl KafkaDlqSink {
    /// A sink for the share group `group`, writing through the brokers at `bootstrap`.
    pub fn builder(bootstrap: impl Into<String>, group: impl Into<String>) -> KafkaDlqSinkBuilder {
        KafkaDlqSinkBuilder::new(bootstrap.into(), group.into())
    }

    /// Where dead letters of `topic` go.
    pub fn destination(&self, topic: &str) -> String {
        self.topic.render(topic, &self.group)
    }

    /// The producer that sends every letter alone, made on first use.
    fn alone(&self) -> Result<&Producer, DlqError> {
        if let Some(producer) = self.alone.get() {
            return Ok(producer);
        }
        let mut config = self.config.clone();
        config.set("batch.num.messages", "1").set("linger.ms", "0");
        let producer = Producer::new(&config, &self.security).map_err(|err| {
            DlqError::unavailable(
                Error::new(
                    ErrorKind::Dlq,
                    "creating the dead-letter producer for letters too large",
                )
                .with_source(err),
            )
        })?;
        Ok(self.alone.get_or_init(|| producer))
    }

    /// Writes `letter` once, cut as `cut` says (`None`: whole): until the broker confirms it, or
    /// refuses the producer.
    async fn write(
        &self,
        producer: &Producer,
        destination: &str,
        letter: &Letter<'_>,
        cut: Option<Cut>,
    ) -> Result<(), Failure> {
        producer
            .write(letter.record(destination, cut))
            .await
            .map(|_| ())
    }

    /// The error for a write that failed for good (`class` is permanent).
    fn refused(
        &self,
        producer: &Producer,
        class: Class,
        writing: String,
        error: KafkaError,
    ) -> DlqError {
        let (kind, message) = match class {
            Class::Denied => (ErrorKind::Authorization, format!("not allowed: {writing}")),
            Class::InvalidTopic => (
                ErrorKind::Dlq,
                format!("the broker says the topic name is invalid: {writing}"),
            ),
            _ if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) => {
                let why = producer
                    .inner
                    .client()
                    .fatal_error()
                    .map(|(code, text)| format!(" ({code}: {text})"))
                    .unwrap_or_default();
                (
                    ErrorKind::Dlq,
                    format!("the dead-letter producer failed for good{why}: {writing}"),
                )
            }
            _ => (
                ErrorKind::Dlq,
                format!("the topic refuses the letter for good: {writing}"),
            ),
        };
        DlqError::permanent(Error::new(kind, message).with_source(error))
    }

    /// The error for a write that timed out or found its topic unknown: asks the cluster whether
    /// the topic exists; a missing topic may pass by itself until the grace period is over.
    async fn missing_or_unavailable(
        &self,
        destination: &str,
        writing: String,
        error: KafkaError,
        began: Instant,
    ) -> DlqError {
        match self.topic_state(destination).await {
            Ok(TopicState::Missing) => {
                match self.missing.missing(destination, began, Instant::now()) {
                    Missing::GaveUp(missing) => DlqError::permanent(
                        Error::new(
                            ErrorKind::Dlq,
                            format!(
                                "dead-letter topic {destination} does not exist (auto-create off?) for {}s: {writing}",
                                missing.as_secs()
                            ),
                        )
                        .with_source(error),
                    ),
                    Missing::Waiting(missing) => DlqError::unavailable(
                        Error::new(
                            ErrorKind::Dlq,
                            format!(
                                "dead-letter topic {destination} does not exist (auto-create off?) for {}s; the worker stops if it still does not after {}: {writing}",
                                missing.as_secs(),
                                humantime::format_duration(self.missing.grace())
                            ),
                        )
                        .with_source(error),
                    ),
                }
            }
            Ok(TopicState::Exists) => {
                self.missing.found(destination);
                DlqError::unavailable(Error::new(ErrorKind::Dlq, writing).with_source(error))
            }
            Ok(TopicState::Error(code)) => {
                let class = classify(code);
                let writing = format!("{writing} (the topic's metadata says {code})");
                if class.is_permanent() {
                    self.refused(&self.producer, class, writing, error)
                } else {
                    DlqError::unavailable(Error::new(ErrorKind::Dlq, writing).with_source(error))
                }
            }
            Err(why) => DlqError::unavailable(
                Error::new(
                    ErrorKind::Dlq,
                    format!("{writing} (asking whether the topic exists failed: {why})"),
                )
                .with_source(error),
            ),
        }
    }

    /// Whether `topic` exists, from the cluster's metadata.
    async fn topic_state(&self, topic: &str) -> Result<TopicState, String> {
        let producer = self.producer.inner.clone();
        let name = topic.to_owned();
        let timeout = self.metadata_timeout;
        let metadata = tokio::task::spawn_blocking(move || {
            producer.client().fetch_metadata(Some(&name), timeout)
        })
        .await
        .map_err(|err| err.to_string())?
        .map_err(|err| err.to_string())?;
        let found = metadata
            .topics()
            .iter()
            .find(|found| found.name() == topic)
            .ok_or_else(|| "the broker did not describe it".to_owned())?;
        Ok(topic_state(found.error().map(RDKafkaErrorCode::from)))
    }

    /// The next cut of a letter refused as too large as `cut` (`None`: whole).
    fn cut_further(
        &self,
        letter: &Letter<'_>,
        cut: Option<Cut>,
        what: String,
        error: KafkaError,
    ) -> Result<Cut, DlqError> {
        let refused = cut.unwrap_or_else(|| Cut::whole(&letter.sizes));
        next_cut(&letter.sizes, refused, self.max_message_bytes).ok_or_else(|| {
            DlqError::permanent(
                Error::new(
                    ErrorKind::Dlq,
                    format!(
                        "the topic refuses even an emptied letter (value, key and the record's headers cut, the provenance headers left): {what}"
                    ),
                )
                .with_source(error),
            )
        })
    }

    /// The error for a write that failed with anything but "too large".
    async fn failed(
        &self,
        producer: &Producer,
        class: Class,
        destination: &str,
        what: String,
        error: KafkaError,
        began: Instant,
    ) -> DlqError {
        match class {
            class if class.is_permanent() => self.refused(producer, class, what, error),
            Class::MaybeMissing => {
                self.missing_or_unavailable(destination, what, error, began)
                    .await
            }
            _ => DlqError::unavailable(Error::new(ErrorKind::Dlq, what).with_source(error)),
        }
    }

    /// A letter was written: its topic exists, and a cut one is logged.
    fn written(&self, letter: &Letter<'_>, destination: &str, cut: Option<Cut>) {
        self.missing.found(destination);
        if let Some(cut) = cut {
            tracing::warn!(
                record = %letter.delivery.id,
                dlq_topic = %destination,
                original_value_size = letter.sizes.value,
                written_value_size = cut.value,
                original_key_size = letter.sizes.key,
                written_key_size = cut.key,
                own_headers_dropped = !cut.own_headers,
                "the dead letter was too large for its topic: written truncated"
            );
        }
    }
}

#[async_trait::async_trait]
impl DlqSink for KafkaDlqSink {
    async fn send(&self, letter: &DeadLetter) -> std::result::Result<(), DlqError> {
        let id = &letter.delivery.id;
        let destination = self.destination(&id.topic);
        if let Err(why) = check_topic_name(&destination) {
            return Err(DlqError::permanent(Error::new(
                ErrorKind::Dlq,
                format!(
                    "dead-letter topic {destination:?} for {id} is not a valid Kafka topic name: {why}"
                ),
            )));
        }
        let began = Instant::now();
        let parts = Letter::new(letter, &self.group, &self.worker);
        let mut cut: Option<Cut> = None;
        let mut alone = false;
        loop {
            let producer = if alone { self.alone()? } else { &self.producer };
            let failure = match self.write(producer, &destination, &parts, cut).await {
                Ok(()) => {
                    self.written(&parts, &destination, cut);
                    return Ok(());
                }
                Err(failure) => failure,
            };
            let what = match cut {
                None => format!("writing {id} to dead-letter topic {destination}"),
                Some(cut) => format!(
                    "writing {id} to dead-letter topic {destination} (truncated to {} of {} value bytes)",
                    cut.value, parts.sizes.value
                ),
            };
            let (error, at_broker) = match failure {
                Failure::Queue(error) => (error, false),
                Failure::Delivery(error) => (error, true),
                Failure::Dropped => {
                    return Err(DlqError::unavailable(Error::new(
                        ErrorKind::Dlq,
                        format!("the dead-letter producer dropped the letter: {what}"),
                    )));
                }
                // Credentials and certificates do not fix themselves: the worker stops and says so.
                Failure::Refused(said) => {
                    return Err(DlqError::permanent(Error::new(
                        ErrorKind::Authentication,
                        format!("{what}: the broker refused the dead-letter producer: {said}"),
                    )));
                }
            };
            match classify_error(&error) {
                // It may have shared its batch with other letters: try it alone first.
                Class::TooLarge if at_broker && !alone => alone = true,
                Class::TooLarge => {
                    alone = true;
                    cut = Some(self.cut_further(&parts, cut, what, error)?);
                }
                class => {
                    return Err(self
                        .failed(producer, class, &destination, what, error, began)
                        .await);
                }
            }
        }
    }
}
