//! A record's life in the worker as one pure state machine: a typed [`Phase`] per record and
//! [`Life::step`], which turns an [`Event`] into the [`Effect`]s the dispatcher performs and the
//! [`Fact`]s the observer reports. No I/O and no clock of its own (the instant type is a
//! parameter), so every rule of `docs/architecture.md`'s "Semantics" is a row of the tests below.
//!
//! | phase | event | becomes | effects |
//! |---|---|---|---|
//! | (arrival) | shutting down | `Acking(Release)` | release |
//! | (arrival) | did not decode / past its attempts | `DeadLettering` | write the letter (or reject without a sink) |
//! | (arrival) | unrouted | `Acking(Release)` | release |
//! | (arrival) | not before later | `Delayed` / `Moving` | wait / move to the delay topic ([`wait`]) |
//! | (arrival) | not before past `max_delay`, or no room to wait and its last delivery | `DeadLettering` | write the letter (reason `not_before`) |
//! | (arrival) | not before later, no room to wait, no delay sink | `Acking(Release)` | release |
//! | (arrival) | routed, due | `Admitting` | check the limits and the key |
//! | `Admitting` | admitted / over a limit / key busy | `Queued` / `Throttled` / `KeyWait`, or `Moving` | queue / wait / move |
//! | `Delayed` / `Throttled` | due | `Admitting` | check again |
//! | `KeyWait` | key freed | `Admitting` | check again |
//! | `Queued` | service ready | `Running` | call (forget if its lock was lost) |
//! | `Queued` | its route paused | `Throttled` | wait for the pause's end, then check again |
//! | `Running` | finished | per the [policy](crate::policy) | accept, hold, move, reject, dead-letter (forget if lost) |
//! | `Running` | failed while its route is paused | `Throttled` (same attempt) | wait for the pause's end |
//! | `Held` | hold ended | `Acking(Release)` | release |
//! | `Moving` | written | `Acking(Accept)` | accept the original (forget if lost) |
//! | `Moving` | refused for good / grace over | `Acking(Release)` | release |
//! | `Delayed` / `Throttled` / `KeyWait` | shutdown | `Moving` (with a delay sink) or `Acking(Release)` | move / release |
//! | `DeadLettering` | written | `Acking(Reject)` | reject (forget if lost) |
//! | `DeadLettering` | refused for good | `Acking(Release)` | release (forget if lost) |
//! | any but `Acking` | renewal failed | lost: `Queued`/`Running` cancelled, waiting ones forgotten | |
//! | `Queued` / `Held` | shutdown | `Acking(Release)` | release |
//! | `Running` / `DeadLettering` | grace over | `Acking(Release)` | cancel (running), release |
//! | `Acking` | answered | (gone) | free the slot |

mod wait;

use std::ops::Add;
use std::time::Duration;

use crate::Outcome;
use crate::dlq::DlqReason;
use crate::policy::{Cause, Policy, Verdict};
use crate::source::{AckError, AckKind};

pub(crate) use wait::{Admission, LimitKind, MoveReason, MoveWait};

/// Where a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase<T> {
    /// Not to run before `until` (its `share.not-before`, or for a far delay-topic record the end
    /// of its hold): its lock renewed meanwhile.
    Delayed { until: T },
    /// Being checked against the rate limits and its key (the dispatcher answers at once).
    Admitting,
    /// Over a rate limit until `until`, its lock renewed; then checked again.
    Throttled { until: T },
    /// Its key runs in this worker as often as the route allows; checked again when it is free.
    KeyWait,
    /// Admitted, waiting for its route's service to be ready.
    Queued,
    /// Its handler runs.
    Running,
    /// A retry waiting out its backoff until `until`, its lock renewed; then it is released.
    Held { until: T },
    /// Waiting for the delay sink to confirm its copy, its lock renewed; then accepted.
    Moving(MoveReason),
    /// Waiting for the dead-letter sink to confirm its letter, its lock renewed; then rejected.
    DeadLettering(DlqReason),
    /// Its acknowledgement is on the way.
    Acking(AckKind),
}

/// One record's state: its phase, whether its lock was lost, its attempt and when it may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Life<T> {
    pub(crate) phase: Phase<T>,
    /// A renewal failed: the lock is gone and its outcome will not be acknowledged.
    pub(crate) lost: bool,
    /// The attempt this delivery is: the broker's delivery count, plus the attempts a delay-topic
    /// record used before it was moved.
    pub(crate) attempt: u16,
    /// When it may run, if it said (`share.not-before`).
    pub(crate) not_before: Option<T>,
}

/// What is known of a record as it arrives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival<'a> {
    /// Its attempt: the broker's delivery count plus the attempts used before a move.
    pub(crate) attempt: u16,
    /// The broker's delivery count alone, checked against the group's delivery limit.
    pub(crate) delivery_count: u16,
    /// Why the source could not decode it (or its delay headers do not parse), if so.
    pub(crate) undecodable: Option<&'a str>,
    /// Whether a route handles its topic.
    pub(crate) routed: bool,
    /// How long until it may run (`share.not-before` in the future), if it must wait.
    pub(crate) wait: Option<Duration>,
    /// Its `share.not-before` as written, for the error when it cannot wait.
    pub(crate) not_before_text: Option<&'a str>,
    /// It came from a delay topic.
    pub(crate) from_delay: bool,
    /// It came from the delay topic its wait calls for (see [`TIERS`](crate::delay::TIERS)):
    /// one from another tier moves on to its own at once instead of being held there.
    pub(crate) in_its_tier: bool,
}

/// Something that happened to a record.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event<'a> {
    /// What the limits and its key say about running it now (answers [`Effect::Admit`]).
    Admission(Admission),
    /// Its wait (`Delayed`, `Throttled`) ended.
    Due,
    /// A record of its key ended: it may be its turn.
    KeyFreed,
    /// Its route's service is ready to take it.
    Ready,
    /// Its route was paused while it waited in the queue: it waits `wait` for the pause to end,
    /// then is checked again like any record that arrives (a record fetched ahead never starts
    /// inside a pause).
    RoutePaused { wait: Duration },
    /// Its handler ended with `outcome` (a panic or the job timeout are retries by `cause`).
    Finished { outcome: &'a Outcome, cause: Cause },
    /// Its handler failed (a retry) while its route is paused: it waits `wait` for the pause to
    /// end and runs again with the same attempt, so an outage uses up no attempts.
    FailedWhilePaused {
        outcome: &'a Outcome,
        cause: Cause,
        wait: Duration,
    },
    /// Its retry backoff ended.
    HoldEnded,
    /// Renewing its lock failed.
    RenewalFailed(&'a AckError),
    /// The dead-letter sink confirmed its letter.
    Written,
    /// The delay sink confirmed its copy.
    Moved,
    /// The dead-letter or delay sink refused it for good (the worker stops).
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
    /// Check it against the rate limits and its key; answer with [`Event::Admission`].
    Admit,
    /// Wait until the phase's `until` (`Delayed`, `Throttled`), then step [`Event::Due`].
    Wait,
    /// Wait for its key: step [`Event::KeyFreed`] when a record of that key ends.
    WaitForKey,
    /// Write its copy to the delay topic, with `attempts` as `share.attempt`.
    Move {
        reason: MoveReason,
        attempts: u16,
        wait: MoveWait,
    },
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

/// Where a dead letter goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LetterPath {
    /// To the sink; the error rides on [`Effect::WriteDeadLetter`].
    Sink,
    /// No sink writes it: the record is REJECTed at once (a broker with its own dead-letter queue
    /// writes the letter then). The error is kept here for the log, the only place it goes.
    Reject { error: String },
}

/// What a step means, for the summary, the metrics, the span and the log: reporting reads these
/// and nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fact {
    /// Released unstarted (or unfinished) at shutdown.
    ReleasedOnShutdown,
    /// Released: no route handles its topic.
    Unrouted,
    /// Sent down the dead-letter path.
    DeadLettered { reason: DlqReason, path: LetterPath },
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
    /// Waiting for its `share.not-before`.
    Delayed,
    /// Over a rate limit: waiting for a permit.
    RateLimited(LimitKind),
    /// Its key is busy: waiting for it.
    KeyBusy,
    /// Its copy is being written to the delay topic.
    Moving(MoveReason),
    /// Its copy is in the delay topic.
    Moved(MoveReason),
    /// Released at shutdown (or when the sink refused for good) while its copy was being written.
    MoveAbandoned,
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
    /// Cancelled through the controls: acknowledged without running.
    Cancelled,
}

impl Ending {
    fn of(outcome: &Outcome, cause: Cause) -> Self {
        match (cause, outcome) {
            (Cause::Panic, _) => Ending::Panic,
            (Cause::Timeout, _) => Ending::Timeout,
            (Cause::Cancelled, _) => Ending::Cancelled,
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
            Ending::Cancelled => "cancelled",
        }
    }
}

/// A phase without its data, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PhaseKind {
    Delayed,
    Admitting,
    Throttled,
    KeyWait,
    Queued,
    Running,
    Held,
    Moving,
    DeadLettering,
    Acking,
}

impl<T> Phase<T> {
    pub(crate) fn kind(&self) -> PhaseKind {
        match self {
            Phase::Delayed { .. } => PhaseKind::Delayed,
            Phase::Admitting => PhaseKind::Admitting,
            Phase::Throttled { .. } => PhaseKind::Throttled,
            Phase::KeyWait => PhaseKind::KeyWait,
            Phase::Moving(_) => PhaseKind::Moving,
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
    /// Another record may be held for a backoff or its not-before (`max_held` not reached).
    pub(crate) can_hold: bool,
    /// A far delay-topic record may be held for `max_hold` before it is written back: under
    /// half of `max_held` is held, the rest is kept for records that come due.
    pub(crate) can_hold_far: bool,
    /// A delay sink is configured: long waits move to the delay topic.
    pub(crate) delay_sink: bool,
    /// The longest wait held in the worker when a delay sink is configured.
    pub(crate) max_hold: Duration,
    /// The furthest ahead a record may ask to wait: beyond it, it is dead-lettered at once.
    pub(crate) max_delay: Duration,
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

impl<T: Copy + PartialOrd + Add<Duration, Output = T>> Life<T> {
    /// A record arriving: its first phase and what to do.
    pub(crate) fn arrive(arrival: Arrival<'_>, rules: Rules<'_, T>) -> (Self, Step) {
        let mut life = Life {
            phase: Phase::Admitting,
            lost: false,
            attempt: arrival.attempt,
            not_before: arrival.wait.map(|wait| rules.now + wait),
        };
        let step = if rules.stopping {
            life.release().fact(Fact::ReleasedOnShutdown)
        } else if let Some(why) = arrival.undecodable {
            let error = format!("the record did not decode: {why}");
            life.dead_letter(DlqReason::Decode, error, rules)
        } else if rules
            .policy
            .exhausted(arrival.attempt, arrival.delivery_count)
        {
            let error = format!(
                "delivered {} times without an outcome (attempt {}, attempts allowed: {}): earlier attempts crashed or lost their lock",
                arrival.delivery_count,
                arrival.attempt,
                rules.policy.last_attempt()
            );
            life.dead_letter(DlqReason::DeliveryLimit, error, rules)
        } else if !arrival.routed {
            life.release().fact(Fact::Unrouted)
        } else if let Some(wait) = arrival.wait {
            life.wait_until(wait, &arrival, rules)
        } else {
            life.admit()
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
            (Event::Admission(_), Phase::Admitting) if self.lost => {
                Step::default().effect(Effect::Forget)
            }
            (Event::Admission(_), Phase::Admitting) if rules.stopping => {
                self.release().fact(Fact::ReleasedOnShutdown)
            }
            (Event::Admission(admission), Phase::Admitting) => self.admitted(admission, rules),
            (Event::Due, Phase::Delayed { .. }) => self.delay_ended(rules),
            (Event::Due, Phase::Throttled { .. }) | (Event::KeyFreed, Phase::KeyWait) => {
                self.admit()
            }
            (Event::Moved, Phase::Moving(reason)) => {
                if self.lost {
                    Step::default()
                        .effect(Effect::Forget)
                        .fact(Fact::Moved(reason))
                        .fact(Fact::PossibleDuplicate)
                } else {
                    self.acknowledge(AckKind::Accept).fact(Fact::Moved(reason))
                }
            }
            (Event::Refused | Event::GraceOver, Phase::Moving(_)) => {
                if self.lost {
                    Step::default().effect(Effect::Forget)
                } else {
                    self.release().fact(Fact::MoveAbandoned)
                }
            }
            (
                Event::ShutdownStarted,
                Phase::Delayed { .. } | Phase::Throttled { .. } | Phase::KeyWait,
            ) => self.shutdown_waiting(rules),
            (Event::Ready, Phase::Queued) if self.lost => Step::default().effect(Effect::Forget),
            (Event::Ready, Phase::Queued) => {
                self.phase = Phase::Running;
                Step::default().effect(Effect::Call)
            }
            (Event::RoutePaused { .. }, Phase::Queued) if self.lost => {
                Step::default().effect(Effect::Forget)
            }
            (Event::RoutePaused { .. }, Phase::Queued) if rules.stopping => {
                self.release().fact(Fact::ReleasedOnShutdown)
            }
            (Event::RoutePaused { wait }, Phase::Queued) => {
                self.phase = Phase::Throttled {
                    until: rules.now + wait,
                };
                Step::default()
                    .effect(Effect::Wait)
                    .fact(Fact::RateLimited(LimitKind::Paused))
            }
            (Event::Finished { outcome, cause }, Phase::Running) => {
                self.finished(outcome, cause, rules)
            }
            (
                Event::FailedWhilePaused {
                    outcome,
                    cause,
                    wait,
                },
                Phase::Running,
            ) => {
                if self.lost || rules.stopping {
                    return self.finished(outcome, cause, rules);
                }
                self.phase = Phase::Throttled {
                    until: rules.now + wait,
                };
                Step::default()
                    .effect(Effect::Wait)
                    .fact(Fact::Completed(Ending::of(outcome, cause)))
                    .fact(Fact::RateLimited(LimitKind::Paused))
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
    /// zero or when shutting down. With a delay sink a delay longer than `max_hold`, or one that
    /// finds `max_held` records already held, moves the record to the delay topic instead;
    /// without one the latter is released at once.
    fn hold(&mut self, delay: Duration, rules: Rules<'_, T>) -> Step {
        if delay.is_zero() || rules.stopping {
            return self.release();
        }
        if rules.delay_sink && (delay > rules.max_hold || !rules.can_hold) {
            // This delivery ran its handler: it counts.
            return self.move_to_delay(MoveReason::Retry, self.attempt, MoveWait::For(delay));
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
        if !rules.sink {
            let path = LetterPath::Reject { error };
            return self
                .acknowledge(AckKind::Reject)
                .fact(Fact::DeadLettered { reason, path });
        }
        self.phase = Phase::DeadLettering(reason);
        Step::default()
            .effect(Effect::WriteDeadLetter { reason, error })
            .fact(Fact::DeadLettered {
                reason,
                path: LetterPath::Sink,
            })
    }

    fn renewal_failed(&mut self, phase: PhaseKind) -> Step {
        let step = Step::default().fact(Fact::RenewalFailed);
        if self.lost || phase == PhaseKind::Acking {
            return step;
        }
        let step = step.fact(Fact::LockLost(phase));
        match phase {
            PhaseKind::Queued | PhaseKind::Admitting | PhaseKind::DeadLettering => {
                // A queued record never starts; a letter is still written: if its lock ran out
                // at the delivery limit the broker archives the record, and the letter is then
                // its only copy (a second letter is possible, never none).
                self.lost = true;
                step
            }
            PhaseKind::Moving => {
                // The copy is still written: the broker delivers the original again, so the job
                // may run twice, never zero times.
                self.lost = true;
                step
            }
            PhaseKind::Delayed | PhaseKind::Throttled | PhaseKind::KeyWait => {
                // Nothing ran: the broker delivers it again.
                step.effect(Effect::Forget)
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
