//! [`Job`]: what a handler service is called with.

use bytes::Bytes;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::source::{Delivery, DeliveryId, Header};

/// One record to process: the request every handler [`Service`](tower::Service) receives.
///
/// It carries the [`Delivery`] (payload, key, headers, where it came from, how often it was
/// delivered) and a [`CancellationToken`] that fires when the handler should stop: the record's
/// lock was lost (another worker may get it), its job timeout passed, or the worker is shutting
/// down and the grace period ran out. A handler that watches the token can stop early; one that
/// does not is dropped (timeout, shutdown) or has its late outcome ignored (lock lost).
#[derive(Debug)]
pub struct Job {
    delivery: Delivery,
    cancel: CancellationToken,
    attempt: u16,
    /// For a record back from the delay topic: the topic, partition and offset it was moved from.
    origin: Option<(std::sync::Arc<str>, i32, i64)>,
}

impl Job {
    /// A job for `delivery`, cancelled through `cancel`. The runtime makes these; build your own to
    /// call a handler service directly in a test.
    pub fn new(delivery: Delivery, cancel: CancellationToken) -> Self {
        let attempt = delivery.delivery_count;
        Self {
            delivery,
            cancel,
            attempt,
            origin: None,
        }
    }

    /// The job as a record back from the delay topic, moved from `topic`/`partition`@`offset`.
    pub(crate) fn with_origin(
        mut self,
        topic: std::sync::Arc<str>,
        partition: i32,
        offset: i64,
    ) -> Self {
        self.origin = Some((topic, partition, offset));
        self
    }

    /// Where the job was enqueued: its record's topic, partition and offset, or, for a record back
    /// from the delay topic ([`crate::delay`]), those of the record it was moved from. The same
    /// for every attempt of a job however often it moved: a good idempotency key.
    pub fn origin(&self) -> (&str, i32, i64) {
        match &self.origin {
            Some((topic, partition, offset)) => (topic, *partition, *offset),
            None => (
                &self.delivery.id.topic,
                self.delivery.id.partition,
                self.delivery.id.offset,
            ),
        }
    }

    /// The job as attempt `attempt` (a record back from the delay topic: the attempts it used
    /// before it was moved, plus its delivery count).
    pub(crate) fn with_attempt(mut self, attempt: u16) -> Self {
        self.attempt = attempt;
        self
    }

    /// The record.
    pub fn delivery(&self) -> &Delivery {
        &self.delivery
    }

    /// Which record and acquisition this is.
    pub fn id(&self) -> &DeliveryId {
        &self.delivery.id
    }

    /// The topic the record came from.
    pub fn topic(&self) -> &str {
        &self.delivery.id.topic
    }

    /// The record value (the job payload), `None` for a null value.
    pub fn payload(&self) -> Option<&Bytes> {
        self.delivery.value.as_ref()
    }

    /// The record key, `None` for a null key.
    pub fn key(&self) -> Option<&Bytes> {
        self.delivery.key.as_ref()
    }

    /// The record headers, in order.
    pub fn headers(&self) -> &[Header] {
        &self.delivery.headers
    }

    /// Which attempt this is: the broker's delivery count, 1 on the first delivery, plus, for a
    /// record back from the delay topic, the attempts it used before it was moved there. Shared by
    /// every worker in the group and kept across restarts.
    pub fn attempt(&self) -> u16 {
        self.attempt
    }

    /// The token that fires when the handler should stop.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the handler has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves when the handler is asked to stop; use it in `tokio::select!`.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    /// The delivery and the token, for handlers that take the job apart.
    pub fn into_parts(self) -> (Delivery, CancellationToken) {
        (self.delivery, self.cancel)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::source::Lease;

    #[tokio::test]
    async fn a_job_exposes_its_record_and_cancellation() {
        let delivery = Delivery {
            id: DeliveryId {
                topic: "sms".into(),
                partition: 2,
                offset: 7,
                lease: Lease::new(1, 0),
            },
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
            headers: vec![Header {
                key: Arc::from("h"),
                value: None,
            }],
            timestamp: 0,
            delivery_count: 3,
            lock_duration: Duration::from_secs(30),
            acquired_at: tokio::time::Instant::now(),
            undecodable: None,
        };
        let token = CancellationToken::new();
        let job = Job::new(delivery, token.clone());
        assert_eq!((job.topic(), job.id().offset, job.attempt()), ("sms", 7, 3));
        assert_eq!(job.payload().map(|b| &b[..]), Some(&b"v"[..]));
        assert_eq!(job.key().map(|b| &b[..]), Some(&b"k"[..]));
        assert_eq!(job.headers().len(), 1);
        assert!(!job.is_cancelled());
        token.cancel();
        job.cancelled().await;
        assert!(job.is_cancelled());
        let (delivery, _) = job.into_parts();
        assert_eq!(delivery.id.partition, 2);
    }
}
