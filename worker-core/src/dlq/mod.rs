//! The dead-letter path: where records go that must never be retried again, and never be lost.
//!
//! A [`DeadLetter`] is the original record plus why it failed. A [`DlqSink`] writes it somewhere
//! durable and returns only once the write is confirmed; the runtime REJECTs the source record only
//! after that. [`KafkaDlqSink`] writes to a Kafka topic (by default `{topic}.dlq`) with an idempotent,
//! `acks=all` producer, keeping the original key, value, timestamp and headers and adding the
//! provenance headers listed in [`headers`].
//!
//! A letter too large for its topic is written truncated, never dropped: its value cut to fit and
//! marked with [`headers::TRUNCATED`] and [`headers::ORIGINAL_SIZE`]. A failed write is
//! [`Unavailable`](DlqErrorKind::Unavailable) when it may pass by itself (a broker down or slow, a
//! topic not created yet) and [`Permanent`](DlqErrorKind::Permanent) when it cannot (not
//! authorized, an invalid topic name, a topic missing for longer than
//! [`missing_topic_grace`](KafkaDlqSinkBuilder::missing_topic_grace)): the worker then stops
//! instead of pausing forever.

mod error;
pub mod headers;
#[cfg(feature = "rdkafka")]
mod kafka;
mod reason;
mod topic;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::SystemTime;

use crate::source::Delivery;

pub use error::{DlqError, DlqErrorKind};
#[cfg(feature = "rdkafka")]
pub use kafka::{KafkaDlqSink, KafkaDlqSinkBuilder};
pub use reason::DlqReason;
pub use topic::DlqTopic;

/// A record on its way to the dead-letter topic, with the reason it got there.
#[derive(Clone, Debug)]
pub struct DeadLetter {
    /// The record as it was delivered (its payload is written unchanged, unless it is too large
    /// for the dead-letter topic: see [`headers::TRUNCATED`]).
    pub delivery: Delivery,
    /// Why it is dead-lettered.
    pub reason: DlqReason,
    /// The last error, for people (bounded to [`headers::MAX_ERROR_LEN`] bytes when written).
    pub error: String,
    /// The name of the handler (route) that failed on it.
    pub handler: Arc<str>,
    /// When it was given up on.
    pub failed_at: SystemTime,
}

/// Somewhere durable to put records that must not be retried again.
///
/// `send` returns `Ok` only once the letter is stored for good (for Kafka: the producer has the
/// broker's acknowledgement with `acks=all`). An `Err` means nothing is known to be stored. Its
/// [`DlqErrorKind`] says what the worker does: [`Unavailable`](DlqErrorKind::Unavailable) keeps the
/// record locked and tries again later (an [`Error`](crate::Error) converts into that);
/// [`Permanent`](DlqErrorKind::Permanent) stops the worker, since no retry can succeed. A letter
/// too large for the destination is the sink's to shorten, never to drop.
#[async_trait::async_trait]
pub trait DlqSink: Debug + Send + Sync + 'static {
    /// Writes one dead letter and waits for it to be confirmed.
    async fn send(&self, letter: &DeadLetter) -> Result<(), DlqError>;
}

/// A shared sink is a sink: one sink object may serve several workers.
#[async_trait::async_trait]
impl<T: DlqSink + ?Sized> DlqSink for Arc<T> {
    async fn send(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        (**self).send(letter).await
    }
}
