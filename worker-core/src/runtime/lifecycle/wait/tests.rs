//! The waiting rules as rows: not-before, moves to the delay topic, attempts across moves,
//! admission against the limits and keys, shutdown and lost locks while waiting.

use std::time::Duration;

use super::super::tests::{
    Ms, arrive_later, arrive_later_from, arrive_later_in, delaying, effects, facts, life, lost,
    policy, rules,
};
use super::super::*;
use crate::policy::Cause;

#[test]
fn a_record_due_soon_waits_in_the_worker_and_then_is_admitted() {
    let p = policy();
    let (mut l, s) = arrive_later(Duration::from_secs(3), 1, delaying(&p));
    assert_eq!(l.phase, Phase::Delayed { until: Ms(4_000) });
    assert_eq!(effects(&s), vec![Effect::Wait]);
    assert_eq!(facts(&s), vec![Fact::Delayed]);
    let due = Rules {
        now: Ms(4_000),
        ..delaying(&p)
    };
    let s = l.step(Event::Due, due);
    assert_eq!(
        (l.phase, effects(&s)),
        (Phase::Admitting, vec![Effect::Admit])
    );
    // Without a delay sink a wait is held until it is due, up to max_delay.
    let (l, _) = arrive_later(Duration::from_secs(3_600), 1, rules(&p));
    assert_eq!(
        l.phase,
        Phase::Delayed {
            until: Ms(3_601_000)
        }
    );
}

#[test]
fn a_wait_past_max_delay_is_dead_lettered_at_once_naming_the_header() {
    let p = policy();
    for r in [rules(&p), delaying(&p)] {
        let (l, s) = arrive_later(Duration::from_secs(3_600 * 24 + 1), 1, r);
        assert_eq!(l.phase, Phase::DeadLettering(DlqReason::NotBefore));
        let effects = effects(&s);
        let [Effect::WriteDeadLetter { reason, error }] = effects.as_slice() else {
            panic!("a letter: {s:?}");
        };
        assert_eq!(*reason, DlqReason::NotBefore);
        assert!(
            error.contains("\"2026-12-24T18:00:00Z\"") && error.contains("max_delay"),
            "{error}"
        );
    }
    // Exactly max_delay ahead still waits.
    let (l, _) = arrive_later(Duration::from_secs(3_600 * 24), 1, rules(&p));
    assert!(matches!(l.phase, Phase::Delayed { .. }));
}

#[test]
fn without_a_delay_sink_or_room_a_wait_is_released_but_never_into_the_archive() {
    let p = policy();
    let full = Rules {
        can_hold: false,
        ..rules(&p)
    };
    // Attempts 1 and 2 may be spent waiting for another worker with room.
    for delivery in [1, 2] {
        let (l, s) = arrive_later(Duration::from_secs(60), delivery, full);
        assert_eq!(l.phase, Phase::Acking(AckKind::Release), "{delivery}");
        assert_eq!(facts(&s), vec![Fact::HeldOverflow]);
    }
    // On the last attempt a release would leave only the dead-letter hand-off: the letter now.
    let (l, s) = arrive_later(Duration::from_secs(60), 3, full);
    assert_eq!(l.phase, Phase::DeadLettering(DlqReason::NotBefore));
    let effects = effects(&s);
    let [Effect::WriteDeadLetter { error, .. }] = effects.as_slice() else {
        panic!("a letter: {s:?}");
    };
    assert!(error.contains("no room to hold it"), "{error}");
}

#[test]
fn a_far_or_unholdable_wait_moves_to_the_delay_topic_keeping_its_attempts() {
    let p = policy();
    // Later than max_hold: moved at once, carrying its not-before and no used attempt (its
    // delivery ran nothing).
    let (l, s) = arrive_later(Duration::from_secs(60), 1, delaying(&p));
    assert_eq!(l.phase, Phase::Moving(MoveReason::NotBefore));
    assert_eq!(
        effects(&s),
        vec![Effect::Move {
            reason: MoveReason::NotBefore,
            attempts: 0,
            wait: MoveWait::Kept
        }]
    );
    // Soon, but max_held records are held.
    let full = Rules {
        can_hold: false,
        ..delaying(&p)
    };
    let (l, _) = arrive_later(Duration::from_secs(3), 1, full);
    assert_eq!(l.phase, Phase::Moving(MoveReason::NotBefore));
    // Confirmed: the original is accepted; a copy written after the lock was lost is a possible
    // duplicate, never an accept.
    let mut l = life(Phase::Moving(MoveReason::NotBefore), 1);
    let s = l.step(Event::Moved, rules(&p));
    assert_eq!(effects(&s), vec![Effect::Acknowledge(AckKind::Accept)]);
    assert_eq!(facts(&s), vec![Fact::Moved(MoveReason::NotBefore)]);
    let mut l = lost(Phase::Moving(MoveReason::Retry));
    let s = l.step(Event::Moved, rules(&p));
    assert_eq!(effects(&s), vec![Effect::Forget]);
    assert!(facts(&s).contains(&Fact::PossibleDuplicate));
}

#[test]
fn a_far_delay_record_is_held_for_max_hold_then_written_back_never_released() {
    let p = policy();
    let (mut l, s) = arrive_later_from(Duration::from_secs(60), 1, true, delaying(&p));
    assert_eq!(l.phase, Phase::Delayed { until: Ms(11_000) });
    assert_eq!(effects(&s), vec![Effect::Wait]);
    let later = Rules {
        now: Ms(11_000),
        ..delaying(&p)
    };
    let s = l.step(Event::Due, later);
    assert_eq!(
        effects(&s),
        vec![Effect::Move {
            reason: MoveReason::NotBefore,
            attempts: 0,
            wait: MoveWait::Kept
        }]
    );
    // Half of max_held is kept for records that come due: beyond it a far one is written back
    // at once (the dispatcher then rests the delay topic), while one due soon is still held.
    let far_full = Rules {
        can_hold_far: false,
        ..delaying(&p)
    };
    let (l, _) = arrive_later_from(Duration::from_secs(60), 1, true, far_full);
    assert_eq!(l.phase, Phase::Moving(MoveReason::NotBefore));
    let (l, _) = arrive_later_from(Duration::from_secs(5), 1, true, far_full);
    assert_eq!(l.phase, Phase::Delayed { until: Ms(6_000) });
    // With no room at all, written back at once too (the delay topics are paused meanwhile).
    let full = Rules {
        can_hold: false,
        ..far_full
    };
    let (l, _) = arrive_later_from(Duration::from_secs(5), 1, true, full);
    assert_eq!(l.phase, Phase::Moving(MoveReason::NotBefore));
}

#[test]
fn a_delay_record_read_from_another_tier_moves_on_at_once_unless_it_is_due_within_max_hold() {
    let p = policy();
    let from_other_tier = |wait| arrive_later_in(wait, 1, true, false, delaying(&p));
    // Not held for max_hold first, though there is room: it moves to its own tier now.
    let (l, s) = from_other_tier(Duration::from_secs(60));
    assert_eq!(l.phase, Phase::Moving(MoveReason::NotBefore));
    assert_eq!(
        effects(&s),
        vec![Effect::Move {
            reason: MoveReason::NotBefore,
            attempts: 0,
            wait: MoveWait::Kept
        }]
    );
    // Due within max_hold, it is held where it is, as any record is.
    let (l, _) = from_other_tier(Duration::from_secs(5));
    assert_eq!(l.phase, Phase::Delayed { until: Ms(6_000) });
}

#[test]
fn a_long_retry_moves_and_counts_its_attempt() {
    let p = policy();
    let retry = Outcome::retry_after(Duration::from_secs(120), "429");
    let finished = Event::Finished {
        outcome: &retry,
        cause: Cause::Handler,
    };
    // The backoff is capped at the policy's max (8 s) here: below max_hold it is held.
    let mut l = life(Phase::Running, 1);
    l.step(finished, delaying(&p));
    assert_eq!(l.phase, Phase::Held { until: Ms(9_000) });
    let short = Rules {
        max_hold: Duration::from_secs(5),
        ..delaying(&p)
    };
    let mut l = life(Phase::Running, 2);
    let s = l.step(finished, short);
    assert_eq!(l.phase, Phase::Moving(MoveReason::Retry));
    assert_eq!(
        effects(&s),
        vec![Effect::Move {
            reason: MoveReason::Retry,
            attempts: 2,
            wait: MoveWait::For(Duration::from_secs(8))
        }]
    );
    assert!(facts(&s).contains(&Fact::Retried));
    // A retry that would have been released at once for want of room moves instead.
    let mut l = life(Phase::Running, 1);
    l.step(
        finished,
        Rules {
            can_hold: false,
            ..delaying(&p)
        },
    );
    assert_eq!(l.phase, Phase::Moving(MoveReason::Retry));
}

#[test]
fn a_copy_back_from_the_delay_topic_counts_the_attempts_it_used() {
    let p = policy();
    // Attempts 1..=3 are the handler's. A copy that used two comes back as attempt 3 and runs.
    let arrival = |attempt, delivery_count| {
        Life::arrive(
            Arrival {
                attempt,
                delivery_count,
                undecodable: None,
                routed: true,
                wait: None,
                not_before_text: None,
                from_delay: true,
                in_its_tier: true,
            },
            delaying(&p),
        )
    };
    let (l, _) = arrival(3, 1);
    assert_eq!((l.phase, l.attempt), (Phase::Admitting, 3));
    // Its handler fails on the last attempt: the DLQ, never a release.
    let mut l = l;
    l.step(Event::Admission(Admission::Go), delaying(&p));
    l.step(Event::Ready, delaying(&p));
    l.step(
        Event::Finished {
            outcome: &Outcome::retry("x"),
            cause: Cause::Handler,
        },
        delaying(&p),
    );
    assert_eq!(l.phase, Phase::DeadLettering(DlqReason::HandlerError));
    // A copy delivered once more after a crash is past its attempts: the DLQ without a handler.
    let (l, s) = arrival(4, 2);
    assert_eq!(l.phase, Phase::DeadLettering(DlqReason::DeliveryLimit));
    assert!(matches!(
        effects(&s).as_slice(),
        [Effect::WriteDeadLetter { .. }]
    ));
}

#[test]
fn over_a_limit_a_record_waits_and_a_hot_key_moves_aside() {
    let p = policy();
    let admit = |admission, r| {
        let mut l = life(Phase::Admitting, 1);
        let s = l.step(Event::Admission(admission), r);
        (l, effects(&s), facts(&s))
    };
    let (l, e, f) = admit(
        Admission::Limited {
            limit: LimitKind::Route,
            wait: Duration::from_millis(100),
            room: true,
        },
        delaying(&p),
    );
    assert_eq!(l.phase, Phase::Throttled { until: Ms(1_100) });
    assert_eq!(e, vec![Effect::Wait]);
    assert_eq!(f, vec![Fact::RateLimited(LimitKind::Route)]);
    // No effect releases it: waiting never raises the delivery count.
    assert!(!e.iter().any(|e| matches!(e, Effect::Acknowledge(_))));
    let mut l = l;
    let s = l.step(Event::Due, delaying(&p));
    assert_eq!(effects(&s), vec![Effect::Admit]);
    // Too many of its key wait: moved with the limiter's wait as its not-before.
    let limited = Admission::Limited {
        limit: LimitKind::Key,
        wait: Duration::from_secs(2),
        room: false,
    };
    let (l, e, _) = admit(limited, delaying(&p));
    assert_eq!(l.phase, Phase::Moving(MoveReason::RateLimit));
    assert_eq!(
        e,
        vec![Effect::Move {
            reason: MoveReason::RateLimit,
            attempts: 0,
            wait: MoveWait::For(Duration::from_secs(2))
        }]
    );
    // Without a delay sink it waits anyway.
    let (l, _, _) = admit(limited, rules(&p));
    assert_eq!(l.phase, Phase::Throttled { until: Ms(3_000) });
}

#[test]
fn a_busy_key_waits_for_its_turn_without_holding_back_others() {
    let p = policy();
    let mut l = life(Phase::Admitting, 1);
    let busy = Admission::KeyBusy {
        wait: Duration::from_secs(1),
        room: true,
    };
    let s = l.step(Event::Admission(busy), delaying(&p));
    assert_eq!(
        (l.phase, effects(&s)),
        (Phase::KeyWait, vec![Effect::WaitForKey])
    );
    assert_eq!(facts(&s), vec![Fact::KeyBusy]);
    let s = l.step(Event::KeyFreed, delaying(&p));
    assert_eq!(
        (l.phase, effects(&s)),
        (Phase::Admitting, vec![Effect::Admit])
    );
    let mut l = life(Phase::Admitting, 1);
    let crowded = Admission::KeyBusy {
        wait: Duration::from_secs(1),
        room: false,
    };
    l.step(Event::Admission(crowded), delaying(&p));
    assert_eq!(l.phase, Phase::Moving(MoveReason::KeyBusy));
}

#[test]
fn shutdown_moves_waiting_records_with_a_delay_sink_and_releases_them_without() {
    let p = policy();
    for phase in [
        Phase::Delayed { until: Ms(5_000) },
        Phase::Throttled { until: Ms(1_100) },
        Phase::KeyWait,
    ] {
        let mut l = life(phase, 2);
        let stopping = Rules {
            stopping: true,
            ..delaying(&p)
        };
        let s = l.step(Event::ShutdownStarted, stopping);
        assert_eq!(l.phase, Phase::Moving(MoveReason::Shutdown), "{phase:?}");
        assert!(matches!(
            effects(&s).as_slice(),
            [Effect::Move {
                reason: MoveReason::Shutdown,
                attempts: 1,
                ..
            }]
        ));
        let mut l = life(phase, 2);
        let s = l.step(
            Event::ShutdownStarted,
            Rules {
                stopping: true,
                ..rules(&p)
            },
        );
        assert_eq!(effects(&s), vec![Effect::Acknowledge(AckKind::Release)]);
    }
    // A move still unconfirmed at the end of the grace period, or refused for good, is released:
    // never accepted without its copy.
    for event in [Event::GraceOver, Event::Refused] {
        let mut l = life(Phase::Moving(MoveReason::Retry), 1);
        let s = l.step(event, delaying(&p));
        assert_eq!(effects(&s), vec![Effect::Acknowledge(AckKind::Release)]);
        assert_eq!(facts(&s), vec![Fact::MoveAbandoned]);
    }
}

#[test]
fn a_lost_lock_while_waiting_forgets_the_record_and_a_move_still_writes() {
    let p = policy();
    for phase in [
        Phase::Delayed { until: Ms(5_000) },
        Phase::Throttled { until: Ms(1_100) },
        Phase::KeyWait,
    ] {
        let mut l = life(phase, 1);
        let s = l.step(Event::RenewalFailed(&AckError::LockLost), delaying(&p));
        assert_eq!(effects(&s), vec![Effect::Forget], "{phase:?}");
    }
    let mut l = life(Phase::Moving(MoveReason::NotBefore), 1);
    let s = l.step(Event::RenewalFailed(&AckError::LockLost), delaying(&p));
    assert!(l.lost && effects(&s).is_empty());
    // A lost record is never admitted.
    let mut l = lost(Phase::Admitting);
    let s = l.step(Event::Admission(Admission::Go), delaying(&p));
    assert_eq!(effects(&s), vec![Effect::Forget]);
}
