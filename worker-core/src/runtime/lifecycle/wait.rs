//! The waiting rules of a record's life: its not-before, the rate limits, its key, and the moves
//! to the delay topic that keep long waits out of the worker.
//!
//! - **Not before.** A record may ask to wait at most `max_delay` (default 30 days): one due
//!   later is dead-lettered at once (reason `not_before`, the header's value in the error), so a
//!   producer cannot park records in the worker or the delay topic for ever. A record due within
//!   `max_hold` is held (`Delayed`, its lock renewed) if `max_held` leaves room; otherwise, with
//!   a delay sink, it is moved to the delay topic of the tier its wait calls for (see
//!   `delay::TIERS`). A delay-topic record read from another tier than its wait calls for moves
//!   there at once. One in its tier and not due within
//!   `max_hold` is held for `max_hold` and then written back, so that a worker does not spin
//!   through far-away records, but only while under half of `max_held` is held: the other half
//!   stays for records that come due, and a far record beyond it is written back at once (the
//!   dispatcher then rests the delay topic, see `write_backs`). Without
//!   a delay sink a record is held until it is due while there is room; with none it is released
//!   (another worker may have room) unless that would spend the last delivery its handler could
//!   have, in which case it is dead-lettered (reason `not_before`): never archived by the broker.
//!   Waiting records do not count against the fetch room: they never take the handlers' work.
//! - **Admission.** A due record is checked against its key and the rate limits. Over a limit it
//!   waits (`Throttled`) for the time the limiter names; with its key busy it waits (`KeyWait`)
//!   until a record of that key ends. When too many records of one key already wait
//!   (`room: false`) it is moved to the delay topic instead, so a hot key never takes the slots
//!   the other keys need. Waiting never raises the delivery count: nothing is released for it.
//! - **Shutdown.** Waiting records are moved when a delay sink is configured (their attempt is
//!   not used up), released otherwise.
//!
//! A move writes `share.attempt` = the attempts used: the attempt that moves it when its handler
//! ran (a retry), one less when it only waited (its delivery ran nothing).

use std::ops::Add;
use std::time::Duration;

use super::{Arrival, Effect, Fact, Life, Phase, Rules, Step};
use crate::dlq::DlqReason;

/// What the limits and a record's key say (the dispatcher checks them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// It may run now (its key is taken for it, its permits used).
    Go,
    /// Over `limit` for `wait`; `room`: it may wait here (false when too many records of its key
    /// already wait).
    Limited {
        limit: LimitKind,
        wait: Duration,
        room: bool,
    },
    /// Its key runs as often as the route allows; `room` as above, `wait` an estimate of when it
    /// is free, for a move.
    KeyBusy { wait: Duration, room: bool },
}

/// Which rate limit a record is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LimitKind {
    /// The worker's own.
    Global,
    /// Its route's.
    Route,
    /// Its route's limit for its key.
    Key,
    /// Its route is paused (by the controls, a circuit breaker or a cool-down).
    Paused,
}

impl LimitKind {
    /// The label in metrics.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LimitKind::Global => "global",
            LimitKind::Route => "route",
            LimitKind::Key => "key",
            LimitKind::Paused => "paused",
        }
    }
}

/// Why a record moves to the delay topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MoveReason {
    /// A retry whose backoff is longer than `max_hold`, or finds `max_held` records held.
    Retry,
    /// Its not-before is too far away to hold it.
    NotBefore,
    /// Over its key's rate limit with too many records of its key waiting.
    RateLimit,
    /// Its key is busy with too many records of its key waiting.
    KeyBusy,
    /// The worker shuts down while it waits.
    Shutdown,
}

impl MoveReason {
    /// The label in metrics and logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MoveReason::Retry => "retry",
            MoveReason::NotBefore => "not_before",
            MoveReason::RateLimit => "rate_limit",
            MoveReason::KeyBusy => "key_busy",
            MoveReason::Shutdown => "shutdown",
        }
    }
}

/// The not-before a moved copy carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MoveWait {
    /// This long from now.
    For(Duration),
    /// The record's own `share.not-before`.
    Kept,
}

impl<T: Copy + PartialOrd + Add<Duration, Output = T>> Life<T> {
    /// Plans a throttled record's wait again to end by `until` (its limit changed); `false` when
    /// the record does not wait for a limit.
    pub(crate) fn rewait(&mut self, until: T) -> bool {
        match &mut self.phase {
            Phase::Throttled { until: planned } => {
                *planned = until;
                true
            }
            _ => false,
        }
    }

    /// To the admission check (answered at once by the dispatcher).
    pub(super) fn admit(&mut self) -> Step {
        self.phase = Phase::Admitting;
        Step::default().effect(Effect::Admit)
    }

    /// What the admission check said.
    pub(super) fn admitted(&mut self, admission: Admission, rules: Rules<'_, T>) -> Step {
        // A record that only waited used no attempt with this delivery.
        let waited = self.attempt.saturating_sub(1);
        match admission {
            Admission::Go => {
                self.phase = Phase::Queued;
                Step::default().effect(Effect::Enqueue)
            }
            Admission::Limited {
                wait, room: false, ..
            } if rules.delay_sink => {
                self.move_to_delay(MoveReason::RateLimit, waited, MoveWait::For(wait))
            }
            Admission::Limited { limit, wait, .. } => {
                self.phase = Phase::Throttled {
                    until: rules.now + wait,
                };
                Step::default()
                    .effect(Effect::Wait)
                    .fact(Fact::RateLimited(limit))
            }
            Admission::KeyBusy { wait, room: false } if rules.delay_sink => {
                self.move_to_delay(MoveReason::KeyBusy, waited, MoveWait::For(wait))
            }
            Admission::KeyBusy { .. } => {
                self.phase = Phase::KeyWait;
                Step::default()
                    .effect(Effect::WaitForKey)
                    .fact(Fact::KeyBusy)
            }
        }
    }

    /// A record that may not run for `wait` yet (see the module docs).
    pub(super) fn wait_until(
        &mut self,
        wait: Duration,
        arrival: &Arrival<'_>,
        rules: Rules<'_, T>,
    ) -> Step {
        let written = arrival.not_before_text.unwrap_or("?");
        if wait > rules.max_delay {
            let error = format!(
                "share.not-before {written:?} is {} ahead, further than max_delay ({})",
                humantime::format_duration(Duration::from_secs(wait.as_secs())),
                humantime::format_duration(rules.max_delay)
            );
            return self.dead_letter(DlqReason::NotBefore, error, rules);
        }
        let waited = self.attempt.saturating_sub(1);
        let holdable = !rules.delay_sink || wait <= rules.max_hold;
        if holdable && rules.can_hold {
            self.phase = Phase::Delayed {
                until: rules.now + wait,
            };
            return Step::default().effect(Effect::Wait).fact(Fact::Delayed);
        }
        if rules.delay_sink && arrival.from_delay && arrival.in_its_tier && rules.can_hold_far {
            // Far away: look again after a hold, then write it back.
            self.phase = Phase::Delayed {
                until: rules.now + rules.max_hold,
            };
            return Step::default().effect(Effect::Wait).fact(Fact::Delayed);
        }
        if rules.delay_sink {
            return self.move_to_delay(MoveReason::NotBefore, waited, MoveWait::Kept);
        }
        // Released, it comes back one delivery further: at the last handler attempt, the next
        // delivery would only be the dead-letter hand-off.
        let next_attempt = arrival.attempt.saturating_add(1);
        let next_delivery = arrival.delivery_count.saturating_add(1);
        if rules.policy.exhausted(next_attempt, next_delivery) {
            let error = format!(
                "share.not-before {written:?}: no room to hold it (max_held records wait already) and no delay topic, and releasing it would spend its last delivery"
            );
            return self.dead_letter(DlqReason::NotBefore, error, rules);
        }
        self.release().fact(Fact::HeldOverflow)
    }

    /// A `Delayed` record's wait ended: it runs if it is due, else (a far delay-topic record) it
    /// is written back.
    pub(super) fn delay_ended(&mut self, rules: Rules<'_, T>) -> Step {
        match self.not_before {
            Some(at) if at > rules.now && rules.delay_sink => {
                let waited = self.attempt.saturating_sub(1);
                self.move_to_delay(MoveReason::NotBefore, waited, MoveWait::Kept)
            }
            Some(at) if at > rules.now => {
                self.phase = Phase::Delayed { until: at };
                Step::default().effect(Effect::Wait)
            }
            _ => self.admit(),
        }
    }

    /// Shutdown found it waiting: moved (its attempt kept) with a delay sink, released otherwise.
    pub(super) fn shutdown_waiting(&mut self, rules: Rules<'_, T>) -> Step {
        if self.lost {
            return Step::default().effect(Effect::Forget);
        }
        if !rules.delay_sink {
            return self.release().fact(Fact::ReleasedOnShutdown);
        }
        let wait = if self.not_before.is_some_and(|at| at > rules.now) {
            MoveWait::Kept
        } else {
            MoveWait::For(Duration::ZERO)
        };
        let waited = self.attempt.saturating_sub(1);
        self.move_to_delay(MoveReason::Shutdown, waited, wait)
    }

    /// Writes its copy to the delay topic; the original is accepted once that is confirmed.
    pub(super) fn move_to_delay(
        &mut self,
        reason: MoveReason,
        attempts: u16,
        wait: MoveWait,
    ) -> Step {
        self.phase = Phase::Moving(reason);
        Step::default()
            .effect(Effect::Move {
                reason,
                attempts,
                wait,
            })
            .fact(Fact::Moving(reason))
    }
}

#[cfg(test)]
mod tests;
