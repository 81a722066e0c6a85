//! Every delivery guarantee as a row: a record in a phase, an event, and what must follow. No
//! runtime and no clock: instants are plain milliseconds.

use std::time::Duration;

use super::*;
use crate::policy::{Backoff, PolicyConfig};

/// Milliseconds since an arbitrary start: enough of an instant for the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Ms(pub(super) u64);

impl Add<Duration> for Ms {
    type Output = Ms;
    fn add(self, d: Duration) -> Ms {
        Ms(self.0 + u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// Delivery limit 4: handlers get attempts 1 to 3, backoff 1 s doubling, no jitter.
pub(super) fn policy() -> Policy {
    let config = PolicyConfig {
        backoff: Backoff::exponential(Duration::from_secs(1), Duration::from_secs(8)).jitter(false),
        ..PolicyConfig::default()
    };
    Policy::new(&config, Some(4))
}

pub(super) fn rules(policy: &Policy) -> Rules<'_, Ms> {
    Rules {
        policy,
        now: Ms(1_000),
        stopping: false,
        sink: true,
        can_hold: true,
        can_hold_far: true,
        delay_sink: false,
        max_hold: Duration::from_secs(10),
        max_delay: Duration::from_secs(3_600 * 24),
    }
}

/// The rules of a worker with a delay sink (`max_hold` 10 s).
pub(super) fn delaying(policy: &Policy) -> Rules<'_, Ms> {
    Rules {
        delay_sink: true,
        ..rules(policy)
    }
}

pub(super) fn life(phase: Phase<Ms>, attempt: u16) -> Life<Ms> {
    Life {
        phase,
        lost: false,
        attempt,
        not_before: None,
    }
}

pub(super) fn lost(phase: Phase<Ms>) -> Life<Ms> {
    Life {
        lost: true,
        ..life(phase, 1)
    }
}

pub(super) fn effects(step: &Step) -> Vec<Effect> {
    step.effects.iter().cloned().collect()
}

pub(super) fn facts(step: &Step) -> Vec<Fact> {
    step.facts.iter().cloned().collect()
}

fn arrive(
    attempt: u16,
    undecodable: Option<&str>,
    routed: bool,
    r: Rules<'_, Ms>,
) -> (Life<Ms>, Step) {
    Life::arrive(
        Arrival {
            attempt,
            delivery_count: attempt,
            undecodable,
            routed,
            wait: None,
            not_before_text: None,
            from_delay: false,
            in_its_tier: false,
        },
        r,
    )
}

/// A record arriving that may not run for `wait`.
/// A record on its `delivery`th delivery (attempt the same) that may not run for `wait`.
pub(super) fn arrive_later(wait: Duration, delivery: u16, r: Rules<'_, Ms>) -> (Life<Ms>, Step) {
    arrive_later_from(wait, delivery, false, r)
}

/// [`arrive_later`], read from a delay topic (the tier its wait calls for) when `from_delay`.
pub(super) fn arrive_later_from(
    wait: Duration,
    delivery: u16,
    from_delay: bool,
    r: Rules<'_, Ms>,
) -> (Life<Ms>, Step) {
    arrive_later_in(wait, delivery, from_delay, from_delay, r)
}

/// [`arrive_later_from`], from the tier its wait calls for when `in_its_tier`.
pub(super) fn arrive_later_in(
    wait: Duration,
    delivery: u16,
    from_delay: bool,
    in_its_tier: bool,
    r: Rules<'_, Ms>,
) -> (Life<Ms>, Step) {
    Life::arrive(
        Arrival {
            attempt: delivery,
            delivery_count: delivery,
            undecodable: None,
            routed: true,
            wait: Some(wait),
            not_before_text: Some("2026-12-24T18:00:00Z"),
            from_delay,
            in_its_tier,
        },
        r,
    )
}

#[test]
fn arrivals_are_queued_released_or_dead_lettered() {
    let p = policy();
    let (mut l, s) = arrive(1, None, true, rules(&p));
    assert_eq!(
        (l.phase, effects(&s)),
        (Phase::Admitting, vec![Effect::Admit])
    );
    let s = l.step(Event::Admission(Admission::Go), rules(&p));
    assert_eq!(
        (l.phase, effects(&s)),
        (Phase::Queued, vec![Effect::Enqueue])
    );

    let (l, s) = arrive(1, None, false, rules(&p));
    assert_eq!(l.phase, Phase::Acking(AckKind::Release));
    assert_eq!(effects(&s), vec![Effect::Acknowledge(AckKind::Release)]);
    assert_eq!(facts(&s), vec![Fact::Unrouted]);

    let stopping = Rules {
        stopping: true,
        ..rules(&p)
    };
    let (l, s) = arrive(1, None, true, stopping);
    assert_eq!(l.phase, Phase::Acking(AckKind::Release));
    assert_eq!(facts(&s), vec![Fact::ReleasedOnShutdown]);
}

#[test]
fn a_record_that_did_not_decode_is_dead_lettered_without_a_handler() {
    let p = policy();
    let (l, s) = arrive(1, Some("CRC mismatch"), true, rules(&p));
    assert_eq!(l.phase, Phase::DeadLettering(DlqReason::Decode));
    match effects(&s).as_slice() {
        [
            Effect::WriteDeadLetter {
                reason: DlqReason::Decode,
                error,
            },
        ] => {
            assert!(error.contains("CRC mismatch"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        facts(&s),
        vec![Fact::DeadLettered {
            reason: DlqReason::Decode,
            path: LetterPath::Sink
        }]
    );
}

#[test]
fn a_record_past_its_attempts_goes_to_the_sink_without_its_handler() {
    let p = policy();
    // Attempts 1..=3 are the handler's; delivery 4 is the last, reserved for the hand-off.
    let (l, _) = arrive(3, None, true, rules(&p));
    assert_eq!(l.phase, Phase::Admitting);
    let (l, s) = arrive(4, None, true, rules(&p));
    assert_eq!(l.phase, Phase::DeadLettering(DlqReason::DeliveryLimit));
    assert!(matches!(
        effects(&s).as_slice(),
        [Effect::WriteDeadLetter {
            reason: DlqReason::DeliveryLimit,
            ..
        }]
    ));
}

#[test]
fn without_a_sink_a_dead_letter_is_a_reject_that_keeps_its_error() {
    let p = policy();
    let no_sink = Rules {
        sink: false,
        ..rules(&p)
    };
    let (l, s) = arrive(1, Some("bad"), true, no_sink);
    assert_eq!(l.phase, Phase::Acking(AckKind::Reject));
    assert_eq!(
        facts(&s),
        vec![Fact::DeadLettered {
            reason: DlqReason::Decode,
            path: LetterPath::Reject {
                error: "the record did not decode: bad".to_owned()
            }
        }]
    );
}

#[test]
fn a_ready_service_runs_the_record_unless_its_lock_was_lost() {
    let p = policy();
    let mut l = life(Phase::Queued, 1);
    assert_eq!(
        effects(&l.step(Event::Ready, rules(&p))),
        vec![Effect::Call]
    );
    assert_eq!(l.phase, Phase::Running);
    let mut l = lost(Phase::Queued);
    assert_eq!(
        effects(&l.step(Event::Ready, rules(&p))),
        vec![Effect::Forget]
    );
}

#[test]
fn a_queued_record_whose_route_pauses_waits_for_the_pause_and_keeps_its_attempt() {
    let p = policy();
    let paused = Event::RoutePaused {
        wait: Duration::from_secs(2),
    };
    let mut l = life(Phase::Queued, 2);
    let s = l.step(paused, rules(&p));
    assert_eq!(effects(&s), vec![Effect::Wait]);
    assert_eq!(facts(&s), vec![Fact::RateLimited(LimitKind::Paused)]);
    assert_eq!(l.phase, Phase::Throttled { until: Ms(3_000) });
    assert_eq!(l.attempt, 2);
    // Checked again when the wait ends.
    assert_eq!(effects(&l.step(Event::Due, rules(&p))), vec![Effect::Admit]);
    let mut l = lost(Phase::Queued);
    assert_eq!(effects(&l.step(paused, rules(&p))), vec![Effect::Forget]);
}

#[test]
fn outcomes_follow_the_policy() {
    let p = policy();
    let finished = |outcome: &Outcome, cause, attempt| {
        let mut l = life(Phase::Running, attempt);
        let s = l.step(Event::Finished { outcome, cause }, rules(&p));
        (l.phase, effects(&s), facts(&s))
    };
    // Accepted.
    let (phase, e, f) = finished(&Outcome::Accept, Cause::Handler, 1);
    assert_eq!(phase, Phase::Acking(AckKind::Accept));
    assert_eq!(e, vec![Effect::Acknowledge(AckKind::Accept)]);
    assert_eq!(f, vec![Fact::Accepted, Fact::Completed(Ending::Accept)]);
    // A retry below the last attempt is held for its backoff (1 s after attempt 1).
    let (phase, e, f) = finished(&Outcome::retry("503"), Cause::Handler, 1);
    assert_eq!(phase, Phase::Held { until: Ms(2_000) });
    assert_eq!(e, vec![Effect::Hold]);
    assert_eq!(
        f,
        vec![
            Fact::HoldStarted,
            Fact::Retried,
            Fact::Completed(Ending::Retry)
        ]
    );
    // On the last attempt it goes to the sink, with the cause as reason.
    for (cause, reason, label) in [
        (Cause::Handler, DlqReason::HandlerError, Ending::Retry),
        (Cause::Panic, DlqReason::Panic, Ending::Panic),
        (Cause::Timeout, DlqReason::Timeout, Ending::Timeout),
    ] {
        let (phase, e, f) = finished(&Outcome::retry("boom"), cause, 3);
        assert_eq!(phase, Phase::DeadLettering(reason));
        assert!(
            matches!(e.as_slice(), [Effect::WriteDeadLetter { reason: r, .. }] if *r == reason)
        );
        assert_eq!(
            f,
            vec![
                Fact::DeadLettered {
                    reason,
                    path: LetterPath::Sink
                },
                Fact::Completed(label)
            ]
        );
    }
    // Rejects and undecodable payloads go to the sink on any attempt.
    let (phase, _, f) = finished(&Outcome::reject("no"), Cause::Handler, 1);
    assert_eq!(phase, Phase::DeadLettering(DlqReason::Rejected));
    assert!(f.contains(&Fact::RejectedByHandler));
    let (phase, _, _) = finished(&Outcome::undecodable("json"), Cause::Handler, 1);
    assert_eq!(phase, Phase::DeadLettering(DlqReason::Decode));
}

#[test]
fn a_retry_is_released_at_once_when_no_hold_is_possible() {
    let p = policy();
    let retry = Outcome::retry("503");
    let event = Event::Finished {
        outcome: &retry,
        cause: Cause::Handler,
    };
    let mut l = life(Phase::Running, 1);
    let s = l.step(
        event,
        Rules {
            can_hold: false,
            ..rules(&p)
        },
    );
    assert_eq!(l.phase, Phase::Acking(AckKind::Release));
    assert!(facts(&s).contains(&Fact::HeldOverflow));
    let mut l = life(Phase::Running, 1);
    let s = l.step(
        event,
        Rules {
            stopping: true,
            ..rules(&p)
        },
    );
    assert_eq!(l.phase, Phase::Acking(AckKind::Release));
    assert!(!facts(&s).contains(&Fact::HeldOverflow));
}

#[test]
fn never_released_on_the_last_attempt_never_accepted_without_success() {
    let p = policy();
    // Whatever a failing handler does on the last attempt, the record is neither released (the
    // broker would archive it) nor accepted: it goes to the sink.
    for outcome in [
        Outcome::retry("x"),
        Outcome::retry_after(Duration::from_secs(1), "x"),
        Outcome::reject("x"),
    ] {
        for cause in [Cause::Handler, Cause::Panic, Cause::Timeout] {
            let mut l = life(Phase::Running, 3);
            let s = l.step(
                Event::Finished {
                    outcome: &outcome,
                    cause,
                },
                rules(&p),
            );
            assert!(
                matches!(l.phase, Phase::DeadLettering(_)),
                "{outcome:?} {cause:?}"
            );
            assert!(
                !effects(&s)
                    .iter()
                    .any(|e| matches!(e, Effect::Acknowledge(_)))
            );
        }
    }
}

#[test]
fn a_late_outcome_after_a_lost_lock_is_dropped() {
    let p = policy();
    let mut l = lost(Phase::Running);
    let s = l.step(
        Event::Finished {
            outcome: &Outcome::Accept,
            cause: Cause::Handler,
        },
        rules(&p),
    );
    assert_eq!(effects(&s), vec![Effect::Forget]);
    assert_eq!(
        facts(&s),
        vec![
            Fact::Completed(Ending::Accept),
            Fact::LateOutcomeDropped,
            Fact::PossibleDuplicate
        ]
    );
}

#[test]
fn a_hold_ends_in_a_release() {
    let p = policy();
    let mut l = life(Phase::Held { until: Ms(5) }, 1);
    assert_eq!(
        effects(&l.step(Event::HoldEnded, rules(&p))),
        vec![Effect::Acknowledge(AckKind::Release)]
    );
}

#[test]
fn a_failed_renewal_loses_the_lock_in_every_phase_but_acking() {
    let p = policy();
    let renewal = |phase| {
        let mut l = life(phase, 1);
        let s = l.step(Event::RenewalFailed(&AckError::LockLost), rules(&p));
        (l, effects(&s), facts(&s))
    };
    let (l, e, f) = renewal(Phase::Running);
    assert!(l.lost && !l.renewable());
    assert_eq!(e, vec![Effect::Cancel]);
    assert_eq!(
        f,
        vec![Fact::RenewalFailed, Fact::LockLost(PhaseKind::Running)]
    );
    let (l, e, _) = renewal(Phase::Queued);
    assert!(l.lost && e.is_empty());
    // A held retry is forgotten: the broker delivers it again.
    let (_, e, _) = renewal(Phase::Held { until: Ms(9) });
    assert_eq!(e, vec![Effect::Forget]);
    // A letter is still written: it may be the record's only copy.
    let (l, e, _) = renewal(Phase::DeadLettering(DlqReason::Panic));
    assert!(l.lost && e.is_empty());
    assert_eq!(l.phase, Phase::DeadLettering(DlqReason::Panic));
    let (l, e, f) = renewal(Phase::Acking(AckKind::Accept));
    assert!(!l.lost && e.is_empty());
    assert_eq!(f, vec![Fact::RenewalFailed]);
}

#[test]
fn a_record_is_rejected_only_after_its_letter_is_confirmed() {
    let p = policy();
    let mut l = life(Phase::DeadLettering(DlqReason::Rejected), 1);
    let s = l.step(Event::Written, rules(&p));
    assert_eq!(effects(&s), vec![Effect::Acknowledge(AckKind::Reject)]);
    assert_eq!(
        facts(&s),
        vec![Fact::DeadLetterWritten(DlqReason::Rejected)]
    );
    // Written after its lock was lost: not rejected (another delivery will come), and counted.
    let mut l = lost(Phase::DeadLettering(DlqReason::Rejected));
    let s = l.step(Event::Written, rules(&p));
    assert_eq!(effects(&s), vec![Effect::Forget]);
    assert!(facts(&s).contains(&Fact::PossibleDuplicate));
}

#[test]
fn a_refused_or_abandoned_letter_releases_its_record_never_rejects_it() {
    let p = policy();
    for event in [Event::Refused, Event::GraceOver] {
        let mut l = life(Phase::DeadLettering(DlqReason::HandlerError), 3);
        let s = l.step(event, rules(&p));
        assert_eq!(effects(&s), vec![Effect::Acknowledge(AckKind::Release)]);
        assert_eq!(facts(&s), vec![Fact::DeadLetterAbandoned]);
    }
}

#[test]
fn shutdown_releases_what_never_started_and_the_held_retries() {
    let p = policy();
    let mut l = life(Phase::Queued, 1);
    let s = l.step(Event::ShutdownStarted, rules(&p));
    assert_eq!(effects(&s), vec![Effect::Acknowledge(AckKind::Release)]);
    assert_eq!(facts(&s), vec![Fact::ReleasedOnShutdown]);
    let mut l = life(Phase::Held { until: Ms(9) }, 1);
    assert_eq!(
        effects(&l.step(Event::ShutdownStarted, rules(&p))),
        vec![Effect::Acknowledge(AckKind::Release)]
    );
    // A running handler goes on until the grace period ends.
    let mut l = life(Phase::Running, 1);
    assert!(effects(&l.step(Event::ShutdownStarted, rules(&p))).is_empty());
    let s = l.step(Event::GraceOver, rules(&p));
    assert_eq!(
        effects(&s),
        vec![Effect::Cancel, Effect::Acknowledge(AckKind::Release)]
    );
    let mut l = lost(Phase::Running);
    assert_eq!(
        effects(&l.step(Event::GraceOver, rules(&p))),
        vec![Effect::Cancel, Effect::Forget]
    );
}

#[test]
fn an_answer_frees_the_slot_and_a_failed_accept_may_run_again() {
    let p = policy();
    let mut l = life(Phase::Acking(AckKind::Accept), 1);
    let s = l.step(Event::Answered(Ok(())), rules(&p));
    assert_eq!(effects(&s), vec![Effect::Free]);
    assert_eq!(
        facts(&s),
        vec![Fact::Acked {
            kind: AckKind::Accept,
            failed: None
        }]
    );
    let err = AckError::SessionLost;
    let mut l = life(Phase::Acking(AckKind::Accept), 1);
    let s = l.step(Event::Answered(Err(&err)), rules(&p));
    assert_eq!(
        facts(&s),
        vec![
            Fact::Acked {
                kind: AckKind::Accept,
                failed: Some(AckError::SessionLost)
            },
            Fact::PossibleDuplicate,
        ]
    );
    let mut l = life(Phase::Acking(AckKind::Release), 1);
    let s = l.step(Event::Answered(Err(&err)), rules(&p));
    assert!(!facts(&s).contains(&Fact::PossibleDuplicate));
}

#[test]
fn events_that_do_not_apply_change_nothing() {
    let p = policy();
    for phase in [
        Phase::Queued,
        Phase::Held { until: Ms(1) },
        Phase::Delayed { until: Ms(1) },
        Phase::Throttled { until: Ms(1) },
        Phase::KeyWait,
        Phase::Moving(MoveReason::Retry),
        Phase::Acking(AckKind::Accept),
    ] {
        let mut l = life(phase, 1);
        let s = l.step(Event::Written, rules(&p));
        assert_eq!((l.phase, effects(&s)), (phase, vec![]));
        let s = l.step(
            Event::Finished {
                outcome: &Outcome::Accept,
                cause: Cause::Handler,
            },
            rules(&p),
        );
        assert_eq!((l.phase, effects(&s)), (phase, vec![]));
    }
}
