//! Delayed jobs and durable retries: records that must wait longer than a worker should hold them.
//!
//! A record may say when it may run: header [`share.not-before`](headers::NOT_BEFORE), an RFC 3339
//! time, set by [`JobProducer::enqueue_at`](crate::produce::JobProducer::enqueue_at) /
//! [`enqueue_in`](crate::produce::JobProducer::enqueue_in) and `share-worker produce --delay`.
//! A worker holds a record that is due within `max_hold` (default 5 min), renewing its lock,
//! exactly as it holds a retry for its backoff. Anything longer — a record due later, a retry
//! whose backoff is longer than `max_hold`, a retry that would otherwise be released at once
//! because `max_held` records are already held, and a record over a per-key limit or waiting for
//! a busy key when too many already wait — is **moved to the delay topic** of its route (by
//! default `{topic}.delay`, see [`DelayTopic`]), when the worker has a [`DelaySink`]:
//!
//! 1. the worker writes a copy (the record's key, value and headers, plus
//!    [`share.not-before`](headers::NOT_BEFORE), [`share.attempt`](headers::ATTEMPT) and the
//!    [`share.origin.*`](headers::ORIGIN_TOPIC) headers) to the delay topic, keeping the
//!    original's lock meanwhile;
//! 2. only once the write is confirmed (`acks=all`) does it ACCEPT the original.
//!
//! A crash between the two leaves both: at worst the job runs twice, never zero times. The
//! worker consumes the delay topics too (the source must subscribe to them); a delay-topic record
//! runs on the route of its origin topic once it is due. One that is not due within `max_hold` is
//! held for `max_hold` and then written back to the end of the delay topic with the same
//! not-before (a RELEASE would raise its delivery count towards the broker's archive).
//!
//! **Tiers.** A delay topic is read in offset order, not in due order, so a record that comes due
//! is found by reading through the ones that are not. Each route therefore has one delay topic
//! per [`Tier`] of due time: `{topic}.delay` keeps the records due within an hour,
//! `{topic}.delay.hours` those due within a day and `{topic}.delay.days` the rest. A record is
//! written to the tier its wait calls for, and one read from a tier its wait no longer calls for
//! moves on to the right one at once. So records due in days never stand in front of one due in
//! minutes: a pass over a tier need only be shorter than the reach of the tier below it (an hour
//! for `.hours`, a day for `.days`) for every record to reach `{topic}.delay` in time.
//!
//! A handler sees a copy as what it is — [`Job::id`](crate::Job::id) names the delay topic, its
//! partition and offset — with its key, value and headers as enqueued;
//! [`Job::origin`](crate::Job::origin) names the record it was moved from (the same for every
//! attempt, a good idempotency key) and [`Job::attempt`](crate::Job::attempt) counts every attempt
//! before.
//!
//! **Attempts are counted across moves.** `share.attempt` says how many deliveries the record
//! used before the move (the delivery that moved it included if its handler ran); a delivery of
//! the copy is attempt `share.attempt` + its own delivery count. `max_attempts` and the
//! dead-letter rules apply to that sum, and the broker's delivery count of the copy is still
//! checked against the group's limit, so a delay-topic record that keeps crashing the worker ends
//! in the dead-letter topic (reason `delivery_limit`), never in the broker's archive.

pub mod headers;

use std::fmt::Debug;
use std::time::Duration;

use bytes::Bytes;

use crate::dlq::DlqTopic;
use crate::source::Header;
use crate::{Error, ErrorKind, Result};

pub use headers::{format_not_before, parse_not_before};

/// A tier of a route's delay topics: the suffix its topic adds to the route's delay topic, and
/// the longest wait of the records it keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tier {
    /// Added to the route's delay topic (`""` for the nearest tier).
    pub suffix: &'static str,
    /// The records it keeps are due within this (and beyond the tier before it).
    pub reach: Duration,
}

/// The tiers, nearest first (see the [module docs](self)).
pub const TIERS: [Tier; 3] = [
    Tier {
        suffix: "",
        reach: Duration::from_secs(60 * 60),
    },
    Tier {
        suffix: ".hours",
        reach: Duration::from_secs(24 * 60 * 60),
    },
    Tier {
        suffix: ".days",
        reach: Duration::MAX,
    },
];

/// The tier (an index into [`TIERS`]) of a record due in `wait`.
pub fn tier_of(wait: Duration) -> usize {
    TIERS
        .iter()
        .position(|tier| wait <= tier.reach)
        .unwrap_or(TIERS.len() - 1)
}

/// The delay topic name template: `{topic}` (the route's topic) and `{group}` (the share group).
/// The default is `{topic}.delay`; the farther [`TIERS`] add their suffix to it. Several share
/// groups that read the same topic each need delay topics of their own
/// (`{topic}.{group}.delay`): a delay topic is consumed by every group subscribed to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayTopic {
    template: DlqTopic,
}

impl Default for DelayTopic {
    fn default() -> Self {
        Self {
            template: DlqTopic::checked(DEFAULT_TEMPLATE, "delay")
                .unwrap_or_else(|_| DlqTopic::default()),
        }
    }
}

/// The default delay topic template.
pub const DEFAULT_TEMPLATE: &str = "{topic}.delay";

impl DelayTopic {
    /// Checks a template: only `{topic}` and `{group}` may appear in braces, and the rest may only
    /// use the characters Kafka allows in topic names. It must contain `{topic}`: each route
    /// needs its own delay topic.
    pub fn new(template: &str) -> Result<Self> {
        let checked = DlqTopic::checked(template, "delay")?;
        if !template.contains("{topic}") {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "invalid delay topic {template:?}: it must contain {{topic}}, since every route needs a delay topic of its own"
                ),
            ));
        }
        Ok(Self { template: checked })
    }

    /// The template as written.
    pub fn template(&self) -> &str {
        self.template.template()
    }

    /// The nearest delay topic of `topic`'s route in `group`.
    pub fn render(&self, topic: &str, group: &str) -> String {
        self.template.render(topic, group)
    }

    /// The delay topic of `topic`'s route in `group` for tier `tier` (an index into [`TIERS`];
    /// beyond it, the farthest).
    pub fn render_tier(&self, topic: &str, group: &str, tier: usize) -> String {
        let suffix = TIERS.get(tier).unwrap_or(&TIERS[TIERS.len() - 1]).suffix;
        format!("{}{suffix}", self.render(topic, group))
    }

    /// Every delay topic of `topic`'s route in `group`, nearest first.
    pub fn tiers(&self, topic: &str, group: &str) -> Vec<String> {
        (0..TIERS.len())
            .map(|tier| self.render_tier(topic, group, tier))
            .collect()
    }
}

/// A record on its way to a delay topic: written, with every header it carries, by a
/// [`DelaySink`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelayedRecord {
    /// The delay topic.
    pub topic: String,
    /// The record's key.
    pub key: Option<Bytes>,
    /// The record's value.
    pub value: Option<Bytes>,
    /// Its own headers, then [`share.not-before`](headers::NOT_BEFORE),
    /// [`share.attempt`](headers::ATTEMPT) and the `share.origin.*` headers.
    pub headers: Vec<Header>,
}

impl DelayedRecord {
    /// The last value of header `key`.
    pub fn header(&self, key: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .rev()
            .find(|h| &*h.key == key)
            .and_then(|h| h.value.as_deref())
    }
}

/// Somewhere durable to put records that wait: a delay topic, written with confirmation.
///
/// `send` returns `Ok` only once the record is stored for good (for Kafka: the broker
/// acknowledged it with `acks=all`); the worker ACCEPTs the original only then. An error of kind
/// [`Authorization`](ErrorKind::Authorization), [`Authentication`](ErrorKind::Authentication) or
/// [`Config`](ErrorKind::Config) cannot pass by itself: the worker stops, releasing what it holds.
/// Any other error is tried again with backoff while the record keeps its lock.
///
/// [`JobProducer`](crate::produce::JobProducer) writes to Kafka;
/// [`MemoryBroker`](crate::testing::MemoryBroker) to its own topics, for tests.
#[async_trait::async_trait]
pub trait DelaySink: Debug + Send + Sync + 'static {
    /// Writes one record and waits for it to be confirmed.
    async fn send(&self, record: &DelayedRecord) -> Result<()>;
}

#[async_trait::async_trait]
impl<T: DelaySink + ?Sized> DelaySink for std::sync::Arc<T> {
    async fn send(&self, record: &DelayedRecord) -> Result<()> {
        (**self).send(record).await
    }
}

/// Whether a failed delay write cannot pass by itself.
pub(crate) fn is_permanent(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Authorization | ErrorKind::Authentication | ErrorKind::Config
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_topics_are_per_route() {
        assert_eq!(DelayTopic::default().render("sms", "g"), "sms.delay");
        let per_group = DelayTopic::new("{topic}.{group}.delay").expect("valid");
        assert_eq!(per_group.render("sms", "senders"), "sms.senders.delay");
        let err = DelayTopic::new("delays").expect_err("no {topic}");
        assert!(err.message().contains("{topic}"), "{err}");
        let err = DelayTopic::new("{topic} delay").expect_err("a space");
        assert!(err.message().contains("invalid delay topic"), "{err}");
    }

    #[test]
    fn each_wait_has_the_nearest_tier_that_reaches_it() {
        let hour = Duration::from_secs(3600);
        assert_eq!(tier_of(Duration::ZERO), 0);
        assert_eq!(tier_of(hour), 0);
        assert_eq!(tier_of(hour + Duration::from_millis(1)), 1);
        assert_eq!(tier_of(24 * hour), 1);
        assert_eq!(tier_of(24 * hour + Duration::from_millis(1)), 2);
        assert_eq!(tier_of(Duration::MAX), 2);
        assert_eq!(
            DelayTopic::default().tiers("sms", "g"),
            ["sms.delay", "sms.delay.hours", "sms.delay.days"]
        );
        let per_group = DelayTopic::new("{topic}.{group}.delay").expect("valid");
        assert_eq!(per_group.render_tier("sms", "g", 9), "sms.g.delay.days");
    }
}
