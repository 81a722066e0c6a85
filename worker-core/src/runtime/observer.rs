//! [`Observer`]: the one place that turns what happens to records into the [`Summary`], the
//! metrics, the record spans' fields and the log. The lifecycle decides; the dispatcher performs;
//! this reports.

use std::sync::Arc;
use std::time::Duration;

use tracing::Span;

use crate::source::{Delivery, DeliveryId};
use crate::telemetry::metrics::Metrics;

use super::lifecycle::{Effect, Ending, Event, Fact, LetterPath, PhaseKind, Step};
use super::summary::Summary;

/// What one record step is reported against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject<'a> {
    pub(crate) id: &'a DeliveryId,
    pub(crate) span: &'a Span,
}

/// Reports the worker's activity.
#[derive(Debug)]
pub(crate) struct Observer {
    pub(crate) summary: Summary,
    pub(crate) metrics: Metrics,
    /// The broker writes the letters of what the worker REJECTs without a sink (KIP-1191).
    broker_writes_letters: bool,
}

impl Observer {
    pub(crate) fn new(metrics: Metrics, broker_writes_letters: bool) -> Self {
        Self {
            summary: Summary::default(),
            metrics,
            broker_writes_letters,
        }
    }

    /// A fetch ended after `took`: `records` records, or an error.
    pub(crate) fn fetch_ended(&mut self, took: Duration, records: Option<&[Delivery]>) {
        self.metrics.fetch_ended(took, records.is_some());
        let Some(batch) = records else {
            self.summary.fetch_errors += 1;
            return;
        };
        self.summary.fetched += batch.len() as u64;
        // One metric update per run of records of the same topic.
        let mut start = 0;
        while let Some(first) = batch.get(start) {
            let topic = &first.id.topic;
            let run = batch[start..]
                .iter()
                .take_while(|d| d.id.topic == *topic)
                .count();
            self.metrics.fetched(topic, run as u64);
            start += run;
        }
    }

    /// A record arrived with this delivery count.
    pub(crate) fn arrived(&self, topic: &Arc<str>, attempt: u16) {
        self.metrics.delivered(topic, attempt);
    }

    /// A renewal was sent.
    pub(crate) fn renewal_sent(&mut self, topic: &Arc<str>) {
        self.summary.renewals += 1;
        self.metrics.renewed(topic);
    }

    /// A dead-letter write failed (the letter waits for another try, or was refused for good).
    pub(crate) fn dead_letter_failed(&mut self, began_failing: bool) {
        self.summary.dlq_failures += 1;
        if began_failing {
            self.summary.dlq_pauses += 1;
        }
        self.metrics.dlq_failed();
    }

    /// The dispatcher's loop ran `late` (every runtime thread busy or blocked).
    pub(crate) fn dispatcher_stalled(&mut self, late: Duration) {
        self.summary.dispatcher_stalls += 1;
        self.metrics.dispatcher_stalled(late);
    }

    /// The sink confirmed a letter.
    pub(crate) fn dead_letter_confirmed(&mut self) {
        self.summary.dlq_written += 1;
    }

    /// Reports one step of one record: `event` (`None` on arrival) led to `step`; `took` is how
    /// long its handler ran, when it finished.
    pub(crate) fn step(
        &mut self,
        subject: Subject<'_>,
        event: Option<&Event<'_>>,
        step: &Step,
        took: Duration,
    ) {
        let Subject { id, span } = subject;
        let topic = &id.topic;
        for fact in step.facts.iter() {
            match fact {
                Fact::ReleasedOnShutdown => {
                    self.summary.released_on_shutdown += 1;
                    record_outcome(span, "released_on_shutdown");
                }
                Fact::Unrouted => {
                    self.summary.unrouted += 1;
                    record_outcome(span, "unrouted");
                    tracing::warn!(parent: span, record = %id, "no route for this topic: releasing the record");
                }
                Fact::DeadLettered { reason, path } => {
                    self.summary.dead_letters.count(*reason);
                    if event.is_none() {
                        record_outcome(span, reason.as_str());
                    }
                    let reason = *reason;
                    match path {
                        LetterPath::Sink => {
                            let error = dead_letter_error(step);
                            tracing::warn!(parent: span, record = %id, reason = reason.as_str(), error, "dead-lettering the record");
                        }
                        LetterPath::Reject { error } if self.broker_writes_letters => {
                            self.summary.dlq_broker_handoffs += 1;
                            self.metrics.handed_to_broker_dlq(topic, reason);
                            tracing::warn!(
                                parent: span,
                                record = %id,
                                topic = %id.topic,
                                partition = id.partition,
                                offset = id.offset,
                                reason = reason.as_str(),
                                error = error.as_str(),
                                "REJECTING the record for the broker's dead-letter queue: the broker writes the letter, without this reason and error"
                            );
                        }
                        LetterPath::Reject { error } => {
                            self.summary.rejected_without_dlq += 1;
                            tracing::error!(parent: span, record = %id, reason = reason.as_str(), error = error.as_str(), "no dead-letter sink configured: REJECTING the record, the broker archives it and its payload is kept nowhere");
                        }
                    }
                }
                Fact::Completed(ending) => {
                    match ending {
                        Ending::Panic => self.summary.panicked += 1,
                        Ending::Timeout => self.summary.timed_out += 1,
                        Ending::Cancelled => self.summary.cancelled += 1,
                        _ => {}
                    }
                    self.metrics.completed(topic, ending.as_str(), took);
                    record_outcome(span, ending.as_str());
                    span.record(
                        "share_worker.handler_ms",
                        i64::try_from(took.as_millis()).unwrap_or(i64::MAX),
                    );
                    if let Some(Event::Finished { outcome, .. }) = event
                        && let Some(reason) = outcome.reason()
                    {
                        // One line per record: DEBUG (the binary reports counts at INFO).
                        tracing::debug!(parent: span, record = %id, reason, "{}", outcome.as_str());
                    }
                }
                Fact::LateOutcomeDropped => {
                    self.summary.late_acks_dropped += 1;
                    tracing::warn!(parent: span, record = %id, "the lock was lost before the handler finished: outcome dropped, the record may be processed again");
                }
                Fact::Accepted => self.summary.accepted += 1,
                Fact::RejectedByHandler => self.summary.rejected += 1,
                Fact::Retried => self.summary.retried += 1,
                Fact::HoldStarted => {
                    self.summary.retries_scheduled += 1;
                    tracing::debug!(parent: span, record = %id, "holding the record for its retry backoff");
                }
                Fact::Delayed => {
                    self.summary.delayed += 1;
                    tracing::debug!(parent: span, record = %id, "holding the record until its not-before");
                }
                Fact::RateLimited(limit) => {
                    self.summary.rate_limited += 1;
                    self.metrics.rate_limited(topic, limit.as_str());
                }
                Fact::KeyBusy => {
                    self.summary.key_waits += 1;
                    self.metrics.key_waited(topic);
                }
                Fact::Moving(reason) => {
                    tracing::debug!(parent: span, record = %id, reason = reason.as_str(), "moving the record to its delay topic");
                }
                Fact::Moved(reason) => {
                    self.summary.moved += 1;
                    if *reason == super::lifecycle::MoveReason::Retry {
                        self.summary.moved_retries += 1;
                    }
                    self.metrics.moved(topic, reason.as_str());
                    record_outcome(span, "moved");
                }
                Fact::MoveAbandoned => {
                    self.summary.moves_abandoned += 1;
                    tracing::error!(parent: span, record = %id, "not moved to the delay topic: releasing it (the broker delivers it again, with its delivery count raised)");
                }
                Fact::HeldOverflow => {
                    self.summary.held_overflow += 1;
                    tracing::debug!(parent: span, record = %id, "too many retries held: releasing without a backoff");
                }
                Fact::LockLost(phase) => {
                    self.metrics.lock_lost(topic);
                    let what = match phase {
                        PhaseKind::Queued | PhaseKind::Running | PhaseKind::Admitting => {
                            "renewal failed: the lock is lost, cancelling the job"
                        }
                        PhaseKind::Delayed | PhaseKind::Throttled | PhaseKind::KeyWait => {
                            "renewal failed while the record waited: the broker delivers it again"
                        }
                        PhaseKind::Moving => {
                            "renewal failed while the record was being moved: still writing its copy, it may run twice"
                        }
                        PhaseKind::Held => {
                            "renewal failed while the record waited for its retry: the broker delivers it again"
                        }
                        PhaseKind::DeadLettering => {
                            "renewal failed while the record waited for the dead-letter sink: still writing it, it may be dead-lettered twice"
                        }
                        PhaseKind::Acking => "renewal failed while acknowledging",
                    };
                    tracing::warn!(parent: span, record = %id, "{what}");
                }
                Fact::RenewalFailed => {
                    self.summary.renewal_failures += 1;
                    if let Some(Event::RenewalFailed(err)) = event {
                        self.metrics.renewal_failed(topic, err);
                    }
                }
                Fact::DeadLetterWritten(reason) => {
                    self.metrics.dead_lettered(topic, *reason);
                }
                Fact::DeadLetterAbandoned => {
                    self.summary.dlq_released_on_shutdown += 1;
                    record_outcome(span, "dlq_released_on_shutdown");
                    tracing::error!(parent: span, record = %id, "not dead-lettered: releasing it (neither accepted nor rejected; the broker delivers it again, and archives it if this was its last delivery)");
                }
                Fact::PossibleDuplicate => {
                    self.summary.possible_duplicates += 1;
                    self.metrics.possible_duplicate(topic);
                }
                Fact::Acked { kind, failed } => {
                    self.metrics
                        .acked(topic, *kind, failed.as_ref().map_or(Ok(()), Err));
                    if let Some(err) = failed {
                        self.summary.ack_failures.count(err);
                        tracing::warn!(parent: span, record = %id, error = %err, ack = kind.as_str(), "acknowledgement failed: the broker will deliver the record again");
                    }
                }
            }
        }
    }
}

/// The error a dead-letter step writes, for the log.
fn dead_letter_error(step: &Step) -> &str {
    step.effects
        .iter()
        .find_map(|e| match e {
            Effect::WriteDeadLetter { error, .. } => Some(error.as_str()),
            _ => None,
        })
        .unwrap_or("")
}

/// Records how a record ended on its span: `share_worker.outcome`, and for anything but an accept
/// or a release without an outcome, `error.type` and an error status.
pub(crate) fn record_outcome(span: &Span, outcome: &'static str) {
    span.record("share_worker.outcome", outcome);
    if !matches!(
        outcome,
        "accept" | "unrouted" | "released_on_shutdown" | "moved"
    ) {
        span.record("error.type", outcome);
        span.record("otel.status_code", "error");
    }
}
