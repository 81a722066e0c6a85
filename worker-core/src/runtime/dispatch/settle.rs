//! Settling records: outcome → [failure policy](crate::policy) → acknowledgement, retry hold or
//! dead letter; and the answers to acknowledgements and dead-letter writes.

use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tower::Service;

use crate::dlq::{DeadLetter, DlqError, DlqReason};
use crate::policy::dead_letters::{DeadLetters, Written};
use crate::policy::{Cause, Verdict};
use crate::source::{AckError, AckKind, Delivery, ShareSource};
use crate::telemetry;
use crate::{Error, ErrorKind, Job, Outcome};

use super::super::receipt::SlotReceipt;
use super::super::run_job::Finished;
use super::super::slots::{Phase, SlotKey};
use super::Dispatcher;

impl<S, Svc> Dispatcher<'_, S, Svc>
where
    S: ShareSource,
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
{
    /// A handler ended: count its outcome and apply the policy (unless its lock was lost).
    pub(super) fn on_finished(&mut self, key: SlotKey, finished: Finished, took: Duration) {
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        let (outcome, cause, label) = match finished {
            Finished::Done(outcome) => {
                let label = outcome.as_str();
                (outcome, Cause::Handler, label)
            }
            Finished::Panicked(message) => {
                self.summary.panicked += 1;
                tracing::warn!(parent: &job.span, record = %job.id, panic = %message, "handler panicked");
                (
                    Outcome::retry(format!("handler panicked: {message}")),
                    Cause::Panic,
                    "panic",
                )
            }
            Finished::TimedOut => {
                job.cancel.cancel();
                self.summary.timed_out += 1;
                tracing::warn!(parent: &job.span, record = %job.id, timeout = ?self.config.job_timeout, "handler timed out");
                (
                    Outcome::retry("the job timed out"),
                    Cause::Timeout,
                    "timeout",
                )
            }
        };
        self.metrics.completed(&job.id.topic, label, took);
        super::record_outcome(&job.span, label);
        job.span.record(
            "share_worker.handler_ms",
            i64::try_from(took.as_millis()).unwrap_or(i64::MAX),
        );
        if let Some(reason) = outcome.reason() {
            tracing::info!(parent: &job.span, record = %job.id, reason, "{}", outcome.as_str());
        }
        if job.lost {
            self.summary.late_acks_dropped += 1;
            self.summary.possible_duplicates += 1;
            self.metrics.possible_duplicate(&job.id.topic);
            tracing::warn!(parent: &job.span, record = %job.id, "the lock was lost before the handler finished: outcome dropped, the record may be processed again");
            self.forget(key);
            return;
        }
        let attempt = job.delivery_count;
        if matches!(outcome, Outcome::Reject { .. }) {
            self.summary.rejected += 1;
        }
        match self.policy.decide(&outcome, cause, attempt) {
            Verdict::Accept => {
                self.summary.accepted += 1;
                self.acknowledge(key, AckKind::Accept);
            }
            Verdict::Retry(delay) => {
                self.summary.retried += 1;
                self.hold(key, delay);
            }
            Verdict::Reject => self.acknowledge(key, AckKind::Reject),
            Verdict::DeadLetter(reason) => {
                let error = outcome.reason().unwrap_or_default().to_owned();
                self.dead_letter(key, reason, error, None);
            }
        }
    }

    /// Holds a retry for `delay`, renewing its lock, then releases it; at once when the delay is
    /// zero, when shutting down, or when `max_held` records are already held.
    fn hold(&mut self, key: SlotKey, delay: Duration) {
        if delay.is_zero() || self.stopping.is_some() {
            self.acknowledge(key, AckKind::Release);
            return;
        }
        let until = Instant::now() + delay;
        if !self.holds.hold(key, until) {
            self.summary.held_overflow += 1;
            if let Some(job) = self.slots.get(key) {
                tracing::debug!(parent: &job.span, record = %job.id, max_held = self.holds.len(), "too many retries held: releasing without a backoff");
            }
            self.acknowledge(key, AckKind::Release);
            return;
        }
        self.summary.retries_scheduled += 1;
        if let Some(job) = self.slots.get_mut(key) {
            job.phase = Phase::Held;
            job.held_until = Some(until);
            tracing::debug!(parent: &job.span, record = %job.id, ?delay, "holding the record for its retry backoff");
        }
    }

    /// Releases every held retry whose backoff ended by `now`.
    pub(super) fn release_held(&mut self, now: Instant) -> bool {
        if self.holds.next_due().is_none_or(|at| at > now) {
            return false;
        }
        let mut due = std::mem::take(&mut self.due);
        self.holds.take_due(now, &mut due);
        for (at, key) in due.drain(..) {
            if let Some(job) = self.slots.get_mut(key)
                && job.phase == Phase::Held
                && job.held_until == Some(at)
            {
                job.held_until = None;
                self.acknowledge(key, AckKind::Release);
            }
        }
        self.due = due;
        true
    }

    /// Sends a record down the dead-letter path: to the sink (REJECTed once it confirms), or with
    /// no sink configured straight to REJECT. `delivery` is the record when the slot does not keep
    /// a copy (it arrived past its attempts).
    pub(super) fn dead_letter(
        &mut self,
        key: SlotKey,
        reason: DlqReason,
        error: String,
        delivery: Option<Delivery>,
    ) {
        self.summary.dead_letters.count(reason);
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        let Some(writer) = self.dead_letters.as_mut() else {
            self.summary.rejected_without_dlq += 1;
            tracing::error!(parent: &job.span, record = %job.id, reason = reason.as_str(), error = %error, "no dead-letter sink configured: REJECTING the record, the broker archives it and its payload is kept nowhere");
            self.acknowledge(key, AckKind::Reject);
            return;
        };
        let Some(mut delivery) = delivery.or_else(|| job.record.take()) else {
            // Not reached: a slot keeps its record whenever a sink is configured.
            tracing::error!(parent: &job.span, record = %job.id, "the record to dead-letter was not kept: releasing it");
            self.acknowledge(key, AckKind::Release);
            return;
        };
        job.phase = Phase::DeadLettering;
        job.dlq_reason = Some(reason);
        telemetry::stamp(&job.span, &mut delivery.headers);
        tracing::warn!(parent: &job.span, record = %job.id, reason = reason.as_str(), error = %error, "dead-lettering the record");
        let letter = DeadLetter {
            delivery,
            reason,
            error,
            handler: job.id.topic.clone(),
            failed_at: SystemTime::now(),
        };
        writer.write(key, letter);
    }

    /// A dead-letter write ended: REJECT the record once the sink confirmed; otherwise it waits,
    /// locked, for the next try.
    pub(super) fn on_written(&mut self, written: Written, now: Instant) {
        match written {
            Written::Confirmed(key) => {
                self.summary.dlq_written += 1;
                if self.dlq_paused && !self.dead_letters.as_ref().is_some_and(|w| w.is_failing()) {
                    self.dlq_paused = false;
                    self.health.set_dlq_failure(None);
                    tracing::info!("the dead-letter sink recovered: fetching resumes");
                }
                let Some(job) = self.slots.get(key) else {
                    return;
                };
                if let Some(reason) = job.dlq_reason {
                    self.metrics.dead_lettered(&job.id.topic, reason);
                }
                if job.phase != Phase::DeadLettering {
                    return;
                }
                if job.lost {
                    tracing::warn!(parent: &job.span, record = %job.id, "dead-lettered, but the lock was lost meanwhile: not rejecting, the broker may deliver it again");
                    self.summary.possible_duplicates += 1;
                    self.metrics.possible_duplicate(&job.id.topic);
                    self.forget(key);
                    return;
                }
                self.acknowledge(key, AckKind::Reject);
            }
            Written::Failed {
                key,
                error,
                began_failing,
            } => {
                self.summary.dlq_failures += 1;
                self.metrics.dlq_failed();
                if began_failing {
                    self.summary.dlq_pauses += 1;
                    self.dlq_paused = true;
                    self.health.set_dlq_failure(Some(error.to_string()));
                    tracing::error!(error = %error, "the dead-letter sink is failing: fetching paused; records for it keep their locks until it recovers");
                } else if let Some(job) = self.slots.get(key) {
                    tracing::debug!(parent: &job.span, record = %job.id, error = %error, "dead-letter write failed: trying again");
                }
            }
            Written::Refused { key, error } => {
                self.summary.dlq_failures += 1;
                self.metrics.dlq_failed();
                self.health.set_dlq_failure(Some(error.to_string()));
                self.refuse_dead_letters(key, error, now);
            }
        }
    }

    /// The sink refused a letter for good: no retry can succeed, so the worker stops with that
    /// error. The records waiting for the sink are released at once (a release on the last
    /// delivery lets the broker archive the record: logged with its offset), the rest shuts down
    /// gracefully.
    fn refuse_dead_letters(&mut self, key: SlotKey, error: DlqError, now: Instant) {
        let waiting = self
            .dead_letters
            .as_mut()
            .map(DeadLetters::give_up_waiting)
            .unwrap_or_default();
        if self.fatal.is_none() {
            tracing::error!(error = %error, "the dead-letter sink refused a letter for good: releasing what the worker holds and stopping");
            self.fatal = Some(Error::new(
                ErrorKind::Dlq,
                format!("the dead-letter sink cannot write: {error}"),
            ));
        }
        self.begin_shutdown(now);
        for key in std::iter::once(key).chain(waiting) {
            let Some(job) = self.slots.get(key) else {
                continue;
            };
            if job.phase != Phase::DeadLettering {
                continue;
            }
            if job.lost {
                self.forget(key);
                continue;
            }
            tracing::error!(parent: &job.span, record = %job.id, delivery_count = job.delivery_count, "not dead-lettered: releasing it (the broker archives it if this was its last delivery)");
            self.summary.dlq_released_on_shutdown += 1;
            self.release_for(key, "dlq_released_on_shutdown");
        }
    }

    /// Hands the acknowledgement to the source at once; the slot stays held until it is answered.
    pub(super) fn acknowledge(&mut self, key: SlotKey, kind: AckKind) {
        self.unschedule(key);
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        job.phase = Phase::Acking(kind);
        job.record = None;
        let receipt = self.source.acknowledge(&job.id, kind);
        self.acking.push(SlotReceipt::new(key, receipt));
    }

    pub(super) fn on_acked(&mut self, key: SlotKey, result: std::result::Result<(), AckError>) {
        let Some(job) = self.slots.remove(key) else {
            return;
        };
        let kind = match job.phase {
            Phase::Acking(kind) => kind,
            _ => AckKind::Release,
        };
        self.metrics
            .acked(&job.id.topic, kind, result.as_ref().map(|_| ()));
        if let Err(err) = result {
            self.summary.ack_failures.count(&err);
            if kind == AckKind::Accept {
                self.summary.possible_duplicates += 1;
                self.metrics.possible_duplicate(&job.id.topic);
            }
            tracing::warn!(parent: &job.span, record = %job.id, error = %err, ack = kind.as_str(), "acknowledgement failed: the broker will deliver the record again");
        }
    }

    /// Releases a record that has no outcome of its own; `why` becomes its span's outcome.
    pub(super) fn release_for(&mut self, key: SlotKey, why: &'static str) {
        if let Some(job) = self.slots.get(key) {
            super::record_outcome(&job.span, why);
        }
        self.acknowledge(key, AckKind::Release);
    }
}
