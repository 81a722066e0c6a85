//! A record's life in the worker as one pure state machine: a typed [`Phase`] per record and
//! [`Life::step`], which turns an [`Event`] into the [`Effect`]s the dispatcher performs and the
//! [`Fact`]s the observer reports. No I/O and no clock of its own (the instant type is a
//! parameter), so every rule of ARCHITECTURE's "Semantics" is a row of the tests below.
//!
//! | phase | event | becomes | effects |
//! |---|---|---|---|
//! | (arrival) | shutting down | `Acking(Release)` | release |
//! | (arrival) | did not decode / past its attempts | `DeadLettering` | write the letter (or reject without a sink) |
//! | (arrival) | routed / unrouted | `Queued` / `Acking(Release)` | queue / release |
//! | `Queued` | service ready | `Running` | call (forget if its lock was lost) |
//! | `Running` | finished | per the [policy](crate::policy) | accept, hold, reject, dead-letter (forget if lost) |
//! | `Held` | hold ended | `Acking(Release)` | release |
//! | `DeadLettering` | written | `Acking(Reject)` | reject (forget if lost) |
//! | `DeadLettering` | refused for good | `Acking(Release)` | release (forget if lost) |
//! | any but `Acking` | renewal failed | lost: `Queued`/`Running` cancelled, `Held` forgotten | |
//! | `Queued` / `Held` | shutdown | `Acking(Release)` | release |
//! | `Running` / `DeadLettering` | grace over | `Acking(Release)` | cancel (running), release |
//! | `Acking` | answered | (gone) | free the slot |

use std::ops::Add;
use std::time::Duration;

use crate::Outcome;
use crate::dlq::DlqReason;
use crate::policy::{Cause, Policy, Verdict};
use crate::source::{AckError, AckKind};

/// Where a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase<T> {
    /// Fetched, waiting for its route's service to be ready.
    Queued,
    /// Its handler runs.
    Running,
    /// A retry waiting out its backoff until `until`, its lock renewed; then it is released.
    Held { until: T },
    /// Waiting for the dead-letter sink to confirm its letter, its lock renewed; then rejected.
    DeadLettering(DlqReason),
    /// Its acknowledgement is on the way.
    Acking(AckKind),
}

/// One record's state: its phase, whether its lock was lost, and its attempt (the broker's
/// delivery count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Life<T> {
    pub(crate) phase: Phase<T>,
    /// A renewal failed: the lock is gone and its outcome will not be acknowledged.
    pub(crate) lost: bool,
    pub(crate) attempt: u16,
}

/// What is known of a record as it arrives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival<'a> {
    pub(crate) attempt: u16,
    /// Why the source could not decode it, if it could not.
    pub(crate) undecodable: Option<&'a str>,
    /// Whether a route handles its topic.
    pub(crate) routed: bool,
}

/// Something that happened to a record.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event<'a> {
    /// Its route's service is ready to take it.
    Ready,
    /// Its handler ended with `outcome` (a panic or the job timeout are retries by `cause`).
    Finished { outcome: &'a Outcome, cause: Cause },
    /// Its retry backoff ended.
    HoldEnded,
    /// Renewing its lock failed.
    RenewalFailed(&'a AckError),
    /// The dead-letter sink confirmed its letter.
    Written,
    /// The dead-letter sink refused its letter for good (the worker stops).
    Refused,
    /// The worker began shutting down.
    ShutdownStarted,
    /// The shutdown grace period ended.
    GraceOver,
    /// The broker answered its acknowledgement.
    Answered(Result<(), &'a AckError>),
}

/// What the dispatcher does for a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Queue it for its route's service.
    Enqueue,
    /// Call the handler.
    Call,
    /// Hand the acknowledgement to the source.
    Acknowledge(AckKind),
    /// Wait out a retry backoff (until the phase's `until`).
    Hold,
    /// Write the letter to the dead-letter sink.
    WriteDeadLetter { reason: DlqReason, error: String },
    /// Fire the running handler's cancellation token.
    Cancel,
    /// Free the slot without acknowledging (the lock is gone or never was ours to settle).
    Forget,
    /// Free the slot: the acknowledgement was answered.
    Free,
}

/// What a step means, for the summary, the metrics, the span and the log: reporting reads these
/// and nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fact {
    /// Released unstarted (or unfinished) at shutdown.
    ReleasedOnShutdown,
    /// Released: no route handles its topic.
    Unrouted,
    /// Sent down the dead-letter path; `sink` false: rejected at once for want of a sink.
    DeadLettered { reason: DlqReason, sink: bool },
    /// Its handler ended this way.
    Completed(Ending),
    /// The outcome came after its lock was lost: dropped, the record may run again.
    LateOutcomeDropped,
    /// Accepted.
    Accepted,
    /// Rejected by its handler.
    RejectedByHandler,
    /// A retryable failure below the last attempt.
    Retried,
    /// Held for its backoff.
    HoldStarted,
    /// Released at once: `max_held` records were already held.
    HeldOverflow,
    /// Its lock was lost (a renewal failed) in this phase.
    LockLost(PhaseKind),
    /// A renewal failed (counted in every phase).
    RenewalFailed,
    /// Its letter was confirmed.
    DeadLetterWritten(DlqReason),
    /// Released at shutdown (or when the sink refused for good) while waiting for the sink.
    DeadLetterAbandoned,
    /// The record may be processed again (a late outcome, a failed ACCEPT, a letter written
    /// after the lock was lost).
    PossibleDuplicate,
    /// The broker answered its acknowledgement.
    Acked {
        kind: AckKind,
        failed: Option<AckError>,
    },
}

/// How a handler call ended, for reports: the kind of its outcome, or a panic or the job timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    Accept,
    Retry,
    Reject,
    Undecodable,
    Panic,
    Timeout,
}

impl Ending {
    fn of(outcome: &Outcome, cause: Cause) -> Self {
        match (cause, outcome) {
            (Cause::Panic, _) => Ending::Panic,
            (Cause::Timeout, _) => Ending::Timeout,
            (Cause::Handler, Outcome::Accept) => Ending::Accept,
            (Cause::Handler, Outcome::Retry { .. }) => Ending::Retry,
            (Cause::Handler, Outcome::Reject { .. }) => Ending::Reject,
            (Cause::Handler, Outcome::Undecodable { .. }) => Ending::Undecodable,
        }
    }

    /// The label in metrics and spans.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Ending::Accept => "accept",
            Ending::Retry => "retry",
            Ending::Reject => "reject",
            Ending::Undecodable => "undecodable",
            Ending::Panic => "panic",
            Ending::Timeout => "timeout",
        }
    }
}

/// A phase without its data, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PhaseKind {
    Queued,
    Running,
    Held,
    DeadLettering,
    Acking,
}

impl<T> Phase<T> {
    pub(crate) fn kind(&self) -> PhaseKind {
        match self {
            Phase::Queued => PhaseKind::Queued,
            Phase::Running => PhaseKind::Running,
            Phase::Held { .. } => PhaseKind::Held,
            Phase::DeadLettering(_) => PhaseKind::DeadLettering,
            Phase::Acking(_) => PhaseKind::Acking,
        }
    }
}

/// The world the rules look at when a record steps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rules<'a, T> {
    pub(crate) policy: &'a Policy,
    /// Now, for holds.
    pub(crate) now: T,
    /// The worker is shutting down.
    pub(crate) stopping: bool,
    /// A dead-letter sink is configured.
    pub(crate) sink: bool,
    /// Another record may be held for a backoff (`max_held` not reached).
    pub(crate) can_hold: bool,
}

/// At most `N` items, inline: steps allocate nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Few<I, const N: usize> {
    items: [Option<I>; N],
}

impl<I, const N: usize> Default for Few<I, N> {
    fn default() -> Self {
        Self {
            items: std::array::from_fn(|_| None),
        }
    }
}

impl<I, const N: usize> Few<I, N> {
    fn push(&mut self, item: I) {
        let slot = self.items.iter_mut().find(|s| s.is_none());
        debug_assert!(slot.is_some(), "a step holds at most {N} of these");
        if let Some(slot) = slot {
            *slot = Some(item);
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &I> {
        self.items.iter().flatten()
    }
}

impl<I, const N: usize> IntoIterator for Few<I, N> {
    type Item = I;
    type IntoIter = std::iter::Flatten<std::array::IntoIter<Option<I>, N>>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter().flatten()
    }
}

/// What one step asks for and means.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) effects: Few<Effect, 2>,
    pub(crate) facts: Few<Fact, 3>,
}

impl Step {
    fn effect(mut self, effect: Effect) -> Self {
        self.effects.push(effect);
        self
    }

    fn fact(mut self, fact: Fact) -> Self {
        self.facts.push(fact);
        self
    }
}

impl<T: Copy + Add<Duration, Output = T>> Life<T> {
    /// A record arriving: its first phase and what to do.
    pub(crate) fn arrive(arrival: Arrival<'_>, rules: Rules<'_, T>) -> (Self, Step) {
        let mut life = Life {
            phase: Phase::Queued,
            lost: false,
            attempt: arrival.attempt,
        };
        let step = if rules.stopping {
            life.release().fact(Fact::ReleasedOnShutdown)
        } else if let Some(why) = arrival.undecodable {
            let error = format!("the record did not decode: {why}");
            life.dead_letter(DlqReason::Decode, error, rules)
        } else if rules.policy.exhausted(arrival.attempt) {
            let error = format!(
                "delivered {} times without an outcome (attempts allowed: {}): earlier attempts crashed or lost their lock",
                arrival.attempt,
                rules.policy.last_attempt()
            );
            life.dead_letter(DlqReason::DeliveryLimit, error, rules)
        } else if arrival.routed {
            Step::default().effect(Effect::Enqueue)
        } else {
            life.release().fact(Fact::Unrouted)
        };
        (life, step)
    }

    /// Whether its lock is to be renewed: it is ours and not yet being acknowledged.
    pub(crate) fn renewable(&self) -> bool {
        !self.lost && !matches!(self.phase, Phase::Acking(_))
    }

    /// Applies `event`; returns what to do and what it means.
    pub(crate) fn step(&mut self, event: Event<'_>, rules: Rules<'_, T>) -> Step {
        match (event, self.phase) {
            (Event::Ready, Phase::Queued) if self.lost => Step::default().effect(Effect::Forget),
            (Event::Ready, Phase::Queued) => {
                self.phase = Phase::Running;
                Step::default().effect(Effect::Call)
            }
            (Event::Finished { outcome, cause }, Phase::Running) => {
                self.finished(outcome, cause, rules)
            }
            (Event::HoldEnded, Phase::Held { .. }) => self.release(),
            (Event::RenewalFailed(_), phase) => self.renewal_failed(phase.kind()),
            (Event::Written, Phase::DeadLettering(reason)) => {
                if self.lost {
                    Step::default()
                        .effect(Effect::Forget)
                        .fact(Fact::DeadLetterWritten(reason))
                        .fact(Fact::PossibleDuplicate)
                } else {
                    self.acknowledge(AckKind::Reject)
                        .fact(Fact::DeadLetterWritten(reason))
                }
            }
            (Event::Refused | Event::GraceOver, Phase::DeadLettering(_)) => {
                if self.lost {
                    Step::default().effect(Effect::Forget)
                } else {
                    self.release().fact(Fact::DeadLetterAbandoned)
                }
            }
            (Event::ShutdownStarted, Phase::Queued) => {
                if self.lost {
                    Step::default().effect(Effect::Forget)
                } else {
                    self.release().fact(Fact::ReleasedOnShutdown)
                }
            }
            (Event::ShutdownStarted, Phase::Held { .. }) => self.release(),
            (Event::GraceOver, Phase::Running) => {
                // Cancel first: forgetting frees the slot that holds the token.
                let cancel = Step::default().effect(Effect::Cancel);
                if self.lost {
                    cancel.effect(Effect::Forget)
                } else {
                    self.phase = Phase::Acking(AckKind::Release);
                    cancel
                        .effect(Effect::Acknowledge(AckKind::Release))
                        .fact(Fact::ReleasedOnShutdown)
                }
            }
            (Event::Answered(result), Phase::Acking(kind)) => {
                let failed = result.err().cloned();
                let duplicate = failed.is_some() && kind == AckKind::Accept;
                let step = Step::default()
                    .effect(Effect::Free)
                    .fact(Fact::Acked { kind, failed });
                if duplicate {
                    step.fact(Fact::PossibleDuplicate)
                } else {
                    step
                }
            }
            // Anything else does not apply to the phase (a late event for a record that moved
            // on): nothing happens.
            _ => Step::default(),
        }
    }

    fn finished(&mut self, outcome: &Outcome, cause: Cause, rules: Rules<'_, T>) -> Step {
        let ending = Ending::of(outcome, cause);
        if self.lost {
            return Step::default()
                .effect(Effect::Forget)
                .fact(Fact::Completed(ending))
                .fact(Fact::LateOutcomeDropped)
                .fact(Fact::PossibleDuplicate);
        }
        let step = match rules.policy.decide(outcome, cause, self.attempt) {
            Verdict::Accept => self.acknowledge(AckKind::Accept).fact(Fact::Accepted),
            Verdict::Retry(delay) => self.hold(delay, rules).fact(Fact::Retried),
            Verdict::Reject => self.acknowledge(AckKind::Reject),
            Verdict::DeadLetter(reason) => {
                let error = outcome.reason().unwrap_or_default().to_owned();
                self.dead_letter(reason, error, rules)
            }
        };
        let step = step.fact(Fact::Completed(ending));
        if ending == Ending::Reject {
            step.fact(Fact::RejectedByHandler)
        } else {
            step
        }
    }

    /// Holds a retry for `delay` (its lock renewed), then releases it; at once when the delay is
    /// zero, when shutting down, or when `max_held` records are already held.
    fn hold(&mut self, delay: Duration, rules: Rules<'_, T>) -> Step {
        if delay.is_zero() || rules.stopping {
            return self.release();
        }
        if !rules.can_hold {
            return self.release().fact(Fact::HeldOverflow);
        }
        self.phase = Phase::Held {
            until: rules.now + delay,
        };
        Step::default().effect(Effect::Hold).fact(Fact::HoldStarted)
    }

    /// To the dead-letter sink (rejected once it confirms), or without one straight to REJECT.
    fn dead_letter(&mut self, reason: DlqReason, error: String, rules: Rules<'_, T>) -> Step {
        let fact = Fact::DeadLettered {
            reason,
            sink: rules.sink,
        };
        if !rules.sink {
            return self.acknowledge(AckKind::Reject).fact(fact);
        }
        self.phase = Phase::DeadLettering(reason);
        Step::default()
            .effect(Effect::WriteDeadLetter { reason, error })
            .fact(fact)
    }

    fn renewal_failed(&mut self, phase: PhaseKind) -> Step {
        let step = Step::default().fact(Fact::RenewalFailed);
        if self.lost || phase == PhaseKind::Acking {
            return step;
        }
        let step = step.fact(Fact::LockLost(phase));
        match phase {
            PhaseKind::Queued | PhaseKind::DeadLettering => {
                // A queued record never starts; a letter is still written: if its lock ran out
                // at the delivery limit the broker archives the record, and the letter is then
                // its only copy (a second letter is possible, never none).
                self.lost = true;
                step
            }
            PhaseKind::Running => {
                self.lost = true;
                step.effect(Effect::Cancel)
            }
            PhaseKind::Held => step.effect(Effect::Forget),
            PhaseKind::Acking => step,
        }
    }

    fn release(&mut self) -> Step {
        self.acknowledge(AckKind::Release)
    }

    fn acknowledge(&mut self, kind: AckKind) -> Step {
        self.phase = Phase::Acking(kind);
        Step::default().effect(Effect::Acknowledge(kind))
    }
}

#[cfg(test)]
mod tests;
