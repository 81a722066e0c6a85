//! The failure policy: what happens to a record whose handler did not succeed.
//!
//! The broker's delivery count is the attempt counter: it is shared by every worker of the group
//! and survives restarts. With the group's delivery-count limit `L` (read from the broker through
//! [`ShareSource::delivery_limit`](crate::source::ShareSource::delivery_limit) when the worker
//! starts), handlers get at most `max_attempts` = `L − 1` attempts (fewer if you configure fewer):
//! **the last delivery is reserved for the dead-letter hand-off**, so no record ever reaches the
//! broker's silent archive while a worker is alive.
//!
//! | the handler's result                         | below the last attempt       | on the last attempt            |
//! |----------------------------------------------|------------------------------|--------------------------------|
//! | [`Outcome::Accept`]                          | ACCEPT                       | ACCEPT                         |
//! | [`Outcome::Retry`], a panic, the job timeout | hold for a backoff, RELEASE  | DLQ (`handler_error`, `panic`, `timeout`), then REJECT |
//! | [`Outcome::Reject`]                          | DLQ (`rejected`), then REJECT | the same                      |
//! | [`Outcome::Undecodable`]                     | DLQ (`decode`), then REJECT  | the same                       |
//!
//! A record that *arrives* with a delivery count above `max_attempts` (earlier attempts crashed or
//! lost their lock) goes to the DLQ with reason `delivery_limit` without calling the handler: it may
//! be what crashes the worker. With `dlq_on_reject(false)` an explicit reject is a plain REJECT.
//!
//! - **Holding a retry.** The record keeps its slot and its lock (renewed) for the backoff
//!   ([`Backoff`], from the delivery count, or the handler's `retry_after` capped at the backoff's
//!   max), then it is RELEASEd and the broker delivers it again, to any worker, with its delivery
//!   count + 1. At most `max_held` records are held at once; a retry beyond that is released at once
//!   and counted in [`Summary::held_overflow`](crate::Summary::held_overflow).
//! - **Dead letters.** The record keeps its slot and its lock until the
//!   [`DlqSink`] confirms the write; only then is it REJECTed. A failed write
//!   is retried with the DLQ backoff, and **while the sink fails the worker fetches nothing new**
//!   (logged at error level, counted in [`Summary::dlq_pauses`](crate::Summary::dlq_pauses)); work
//!   resumes by itself once a write succeeds. A record still waiting for the sink when the shutdown
//!   grace period ends is RELEASEd (never accepted or rejected) and counted.
//! - **No sink configured.** The DLQ is optional. Without one, every record that would go to the
//!   DLQ is **REJECTed — archived by the broker, its payload kept nowhere —** with an error log and
//!   [`Summary::rejected_without_dlq`](crate::Summary::rejected_without_dlq). That is the behaviour
//!   of a plain share consumer and fine for tests; in production configure a sink
//!   ([`WorkerBuilder::dlq`](crate::WorkerBuilder::dlq)), e.g. a
//!   [`KafkaDlqSink`](crate::dlq::KafkaDlqSink).
//! - **The broker's own dead-letter queue** (Kafka 4.4+, KIP-1191,
//!   [`WorkerBuilder::broker_dlq`](crate::WorkerBuilder::broker_dlq)). Every record that would
//!   go to the sink is REJECTed at once, and the broker writes its letter to the group's
//!   `errors.deadletterqueue.topic.name`. The broker's letter says only "rejected by client", so
//!   the worker's reason and error go to the log line of that REJECT (topic, partition, offset)
//!   and to `share_worker_dlq_broker_handoffs_total{topic,reason}`. The broker does not confirm the
//!   write before it archives the record (a failed write is only in its log): the worker checks
//!   at start that the broker would write, and refuses to start otherwise.

mod backoff;

use std::sync::Arc;
use std::time::Duration;

use crate::checks;
use crate::dlq::{DlqReason, DlqSink};
use crate::{Error, ErrorKind, Outcome, Result};

pub use backoff::Backoff;

/// Kafka's default `group.share.delivery.count.limit`, assumed when the source cannot say.
pub const DEFAULT_DELIVERY_LIMIT: u16 = 5;

/// The policy settings as given to the builder.
#[derive(Clone, Debug)]
pub(crate) struct PolicyConfig {
    /// Handler attempts at most; `None`: the group's delivery limit − 1.
    pub(crate) max_attempts: Option<u16>,
    pub(crate) backoff: Backoff,
    /// Records held for a backoff at most; `None`: half the concurrency (at least 1).
    pub(crate) max_held: Option<usize>,
    pub(crate) dlq: Option<Arc<dyn DlqSink>>,
    /// The broker writes dead letters itself (Kafka 4.4's KIP-1191): records for the dead-letter
    /// path are REJECTed at once and the broker writes their letters.
    pub(crate) broker_dlq: bool,
    pub(crate) dlq_on_reject: bool,
    pub(crate) dlq_backoff: Backoff,
    pub(crate) dlq_timeout: Duration,
    /// The delivery-count limit to use when the source cannot read it; `None`: fail instead.
    pub(crate) assumed_limit: Option<u16>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            max_attempts: None,
            backoff: Backoff::default(),
            max_held: None,
            dlq: None,
            broker_dlq: false,
            dlq_on_reject: true,
            dlq_backoff: Backoff::exponential(Duration::from_millis(500), Duration::from_secs(30)),
            dlq_timeout: Duration::from_secs(60),
            assumed_limit: None,
        }
    }
}

impl PolicyConfig {
    /// Checks every setting; the error names the setting.
    pub(crate) fn validate(&self) -> Result<()> {
        let named =
            |name: &str, why: String| Error::new(ErrorKind::Config, format!("`{name}`: {why}"));
        if let Some(attempts) = self.max_attempts {
            checks::max_attempts(attempts).map_err(|why| named("max_attempts", why))?;
        }
        if let Some(limit) = self.assumed_limit {
            checks::assumed_delivery_limit(limit)
                .map_err(|why| named("assume_delivery_limit", why))?;
        }
        if self.broker_dlq && self.dlq.is_some() {
            return Err(Error::new(
                ErrorKind::Config,
                "`dlq` and `broker_dlq`: choose one; with both every dead letter would be written twice (by the sink, then by the broker for the REJECT that follows it)",
            ));
        }
        if self.broker_dlq && !self.dlq_on_reject {
            return Err(Error::new(
                ErrorKind::Config,
                "`dlq_on_reject(false)` with `broker_dlq`: the broker dead-letters every REJECT, so a plain reject cannot be had",
            ));
        }
        if self.dlq_timeout.is_zero() {
            return Err(Error::new(
                ErrorKind::Config,
                "`dlq_timeout`: expected a duration above 0",
            ));
        }
        self.backoff.validate("backoff")?;
        self.dlq_backoff.validate("dlq_backoff")
    }
}

/// What a failure was, for the dead-letter reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The handler returned its outcome.
    Handler,
    /// The handler panicked.
    Panic,
    /// The handler ran past the job timeout.
    Timeout,
    /// The job was cancelled through the controls: it was acknowledged without running.
    Cancelled,
}

/// What to do with a finished record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// ACCEPT.
    Accept,
    /// Hold this long (renewing the lock), then RELEASE; zero releases at once.
    Retry(Duration),
    /// Write to the DLQ, then REJECT.
    DeadLetter(DlqReason),
    /// Plain REJECT.
    Reject,
}

/// The policy as one worker applies it, with the delivery limit known.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    /// The last attempt on which the handler runs.
    last_attempt: u16,
    /// The last broker delivery count on which the handler runs: the group's limit − 1, so the
    /// last delivery of any record (a delay-topic copy too) is left for the dead-letter hand-off.
    last_delivery: u16,
    backoff: Backoff,
    dlq_on_reject: bool,
}

impl Policy {
    /// Resolves the settings against the group's delivery limit (`None`: unknown, Kafka's default
    /// assumed unless `max_attempts` is set).
    pub(crate) fn new(config: &PolicyConfig, limit: Option<u16>) -> Self {
        let last_attempt = match (config.max_attempts, limit) {
            (Some(max), Some(limit)) => max.min(limit.saturating_sub(1)),
            (None, Some(limit)) => limit.saturating_sub(1),
            (Some(max), None) => max,
            (None, None) => DEFAULT_DELIVERY_LIMIT - 1,
        };
        Self {
            last_attempt,
            last_delivery: limit.map_or(last_attempt, |limit| limit.saturating_sub(1)),
            backoff: config.backoff,
            dlq_on_reject: config.dlq_on_reject,
        }
    }

    /// The longest wait a handler's `retry_after` is granted.
    pub(crate) fn longest_wait(&self) -> Duration {
        self.backoff.max()
    }

    /// The last delivery count on which the handler runs.
    pub(crate) fn last_attempt(&self) -> u16 {
        self.last_attempt
    }

    /// The group's delivery-count limit as this policy applies it: the last delivery count on
    /// which a handler runs, plus the one reserved for the dead-letter hand-off.
    pub(crate) fn delivery_limit(&self) -> u16 {
        self.last_delivery.saturating_add(1)
    }

    /// Whether a delivery that is attempt `attempt` (its delivery count plus the attempts used
    /// before a move to the delay topic) with broker delivery count `delivery_count` has used up
    /// its attempts: it goes to the DLQ with reason `delivery_limit` and its handler is not
    /// called.
    pub(crate) fn exhausted(&self, attempt: u16, delivery_count: u16) -> bool {
        attempt > self.last_attempt || delivery_count > self.last_delivery
    }

    /// What to do with a record whose handler ended with `outcome` on attempt `attempt`.
    pub(crate) fn decide(&self, outcome: &Outcome, cause: Cause, attempt: u16) -> Verdict {
        match outcome {
            Outcome::Accept => Verdict::Accept,
            Outcome::Retry { after, .. } if attempt < self.last_attempt => {
                let delay = match after {
                    Some(after) => (*after).min(self.backoff.max()),
                    None => self.backoff.delay(attempt),
                };
                Verdict::Retry(delay)
            }
            Outcome::Retry { .. } => Verdict::DeadLetter(match cause {
                Cause::Handler => DlqReason::HandlerError,
                Cause::Panic => DlqReason::Panic,
                Cause::Timeout => DlqReason::Timeout,
                // A cancelled job ends as Accept: never here.
                Cause::Cancelled => DlqReason::HandlerError,
            }),
            Outcome::Reject { .. } if self.dlq_on_reject => {
                Verdict::DeadLetter(DlqReason::Rejected)
            }
            Outcome::Reject { .. } => Verdict::Reject,
            Outcome::Undecodable { .. } => Verdict::DeadLetter(DlqReason::Decode),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_attempts: Option<u16>, limit: Option<u16>) -> Policy {
        let config = PolicyConfig {
            max_attempts,
            backoff: Backoff::exponential(Duration::from_secs(1), Duration::from_secs(8))
                .jitter(false),
            ..PolicyConfig::default()
        };
        Policy::new(&config, limit)
    }

    #[test]
    fn attempts_come_from_the_delivery_limit() {
        assert_eq!(policy(None, Some(5)).last_attempt(), 4);
        assert_eq!(policy(Some(2), Some(5)).last_attempt(), 2);
        assert_eq!(
            policy(Some(9), Some(5)).last_attempt(),
            4,
            "the limit caps it"
        );
        assert_eq!(policy(Some(7), None).last_attempt(), 7);
        assert_eq!(policy(None, None).last_attempt(), 4);
        let p = policy(None, Some(3));
        assert!(!p.exhausted(2, 2));
        assert!(p.exhausted(3, 3));
    }

    #[test]
    fn attempts_before_a_move_count_and_the_broker_s_last_delivery_stays_reserved() {
        // Two attempts allowed, the group's limit 5.
        let p = policy(Some(2), Some(5));
        // A delay-topic copy of a record that used one attempt: its first delivery is attempt 2.
        assert!(!p.exhausted(2, 1));
        assert!(p.exhausted(3, 2));
        // However few attempts were used before (a copy that only waited carries 0), the copy's
        // own last delivery is the hand-off's: a copy that keeps crashing the worker goes to the
        // DLQ, never to the broker's archive.
        let p = policy(None, Some(5));
        assert!(!p.exhausted(4, 4));
        assert!(p.exhausted(5, 5));
    }

    #[test]
    fn retries_back_off_until_the_last_attempt() {
        let p = policy(None, Some(4));
        let retry = Outcome::retry("flaky");
        assert_eq!(
            p.decide(&retry, Cause::Handler, 1),
            Verdict::Retry(Duration::from_secs(1))
        );
        assert_eq!(
            p.decide(&retry, Cause::Handler, 2),
            Verdict::Retry(Duration::from_secs(2))
        );
        assert_eq!(
            p.decide(&retry, Cause::Handler, 3),
            Verdict::DeadLetter(DlqReason::HandlerError)
        );
        assert_eq!(
            p.decide(&retry, Cause::Panic, 3),
            Verdict::DeadLetter(DlqReason::Panic)
        );
        assert_eq!(
            p.decide(&retry, Cause::Timeout, 3),
            Verdict::DeadLetter(DlqReason::Timeout)
        );
        let hinted = Outcome::retry_after(Duration::from_secs(3), "429");
        assert_eq!(
            p.decide(&hinted, Cause::Handler, 1),
            Verdict::Retry(Duration::from_secs(3))
        );
        let long = Outcome::retry_after(Duration::from_secs(3600), "429");
        assert_eq!(
            p.decide(&long, Cause::Handler, 1),
            Verdict::Retry(Duration::from_secs(8)),
            "capped at the backoff's max"
        );
    }

    #[test]
    fn rejects_and_decode_errors_go_to_the_dlq() {
        let p = policy(None, Some(5));
        assert_eq!(
            p.decide(&Outcome::Accept, Cause::Handler, 4),
            Verdict::Accept
        );
        assert_eq!(
            p.decide(&Outcome::reject("no"), Cause::Handler, 1),
            Verdict::DeadLetter(DlqReason::Rejected)
        );
        assert_eq!(
            p.decide(&Outcome::undecodable("bad json"), Cause::Handler, 1),
            Verdict::DeadLetter(DlqReason::Decode)
        );
        let plain = Policy::new(
            &PolicyConfig {
                dlq_on_reject: false,
                ..PolicyConfig::default()
            },
            Some(5),
        );
        assert_eq!(
            plain.decide(&Outcome::reject("no"), Cause::Handler, 1),
            Verdict::Reject
        );
    }

    #[test]
    fn validation_names_the_setting() {
        let err = PolicyConfig {
            max_attempts: Some(0),
            ..PolicyConfig::default()
        }
        .validate()
        .unwrap_err();
        assert!(err.message().contains("max_attempts"), "{err}");
        PolicyConfig::default().validate().unwrap();
    }

    #[test]
    fn broker_dead_letters_exclude_a_sink_and_plain_rejects() {
        let broker = PolicyConfig {
            broker_dlq: true,
            ..PolicyConfig::default()
        };
        broker.validate().unwrap();
        let both = PolicyConfig {
            dlq: Some(Arc::new(crate::testing::MemoryDlq::new())),
            ..broker.clone()
        };
        let err = both.validate().unwrap_err();
        assert!(err.message().contains("`dlq` and `broker_dlq`"), "{err}");
        let plain = PolicyConfig {
            dlq_on_reject: false,
            ..broker
        };
        let err = plain.validate().unwrap_err();
        assert!(err.message().contains("dlq_on_reject"), "{err}");
    }
}
