//! Fetching from every leader at once: one ShareFetch in flight per broker, their record limits
//! together never more than the free slots the runtime offered.
//!
//! A broker answers one request per connection at a time, and an idle broker holds a fetch for
//! up to `max_wait`. With one fetch in flight overall, that long poll would delay the records of
//! every busy broker; here each broker has its own, and a fetch call returns as soon as any of
//! them answers. What the others acquire meanwhile stays in flight (counted against the slots)
//! until a later call collects it.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio::sync::oneshot;

use super::session::FetchOutcome;
use crate::{Error, ErrorKind, Result};

/// One broker's fetch in flight.
#[derive(Debug)]
struct InFlight {
    node: i32,
    /// The record limit it was sent with: slots reserved until it answers.
    budget: u32,
    reply: oneshot::Receiver<Result<FetchOutcome>>,
}

/// The fetches in flight, one per broker at most, and what each broker last yielded.
#[derive(Debug, Default)]
pub(crate) struct Fetches {
    in_flight: Vec<InFlight>,
    /// Records each broker's last answer carried: a broker that had records gets a larger share
    /// of the next fetch's slots, an idle one a small share to long-poll with.
    last_yield: HashMap<i32, u32>,
    /// Rotates which idle brokers are asked when there are fewer slots than brokers.
    turn: usize,
    /// A broker's error that arrived together with another broker's records: reported by the
    /// next call, so the records are not lost behind it.
    deferred: Option<Error>,
}

/// A broker's answer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) node: i32,
    pub(crate) outcome: Result<FetchOutcome>,
}

impl Fetches {
    /// Slots reserved by fetches in flight.
    pub(crate) fn outstanding(&self) -> u32 {
        self.in_flight
            .iter()
            .fold(0u32, |sum, f| sum.saturating_add(f.budget))
    }

    /// Whether a fetch to `node` is in flight.
    pub(crate) fn busy(&self, node: i32) -> bool {
        self.in_flight.iter().any(|f| f.node == node)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }

    pub(crate) fn take_deferred(&mut self) -> Option<Error> {
        self.deferred.take()
    }

    /// How `room` free slots are shared among the `idle` brokers (each with no fetch in flight):
    /// every broker asked gets at least one, the rest goes by weight, a broker's weight being twice
    /// what its last answer carried (at least 1), so a busy broker's share doubles each round trip
    /// while idle ones keep long-polling with a single slot. With fewer slots than brokers, the
    /// brokers asked take turns. The shares sum to `room` exactly (none when `room` is 0).
    pub(crate) fn plan(&mut self, room: u32, idle: &[i32]) -> Vec<(i32, u32)> {
        let count = u32::try_from(idle.len()).unwrap_or(u32::MAX);
        if room == 0 || count == 0 {
            return Vec::new();
        }
        if room < count {
            let start = self.turn % idle.len();
            self.turn = self.turn.wrapping_add(1);
            return idle
                .iter()
                .cycle()
                .skip(start)
                .take(room as usize)
                .map(|&node| (node, 1))
                .collect();
        }
        let weights: Vec<u64> = idle
            .iter()
            .map(|node| {
                let last = self.last_yield.get(node).copied().unwrap_or(0);
                u64::from(last).saturating_mul(2).max(1)
            })
            .collect();
        let total: u64 = weights.iter().sum::<u64>().max(1);
        let spare = u64::from(room - count);
        let mut plan: Vec<(i32, u32)> = idle
            .iter()
            .zip(&weights)
            .map(|(&node, &w)| {
                let share = spare.saturating_mul(w) / total;
                (node, 1 + u32::try_from(share).unwrap_or(0))
            })
            .collect();
        // What rounding left over goes to the heaviest broker.
        let given: u32 = plan.iter().map(|(_, b)| *b).sum();
        let heaviest = weights
            .iter()
            .enumerate()
            .max_by_key(|(_, w)| **w)
            .map(|(i, _)| i)
            .unwrap_or(0);
        if let Some((_, budget)) = plan.get_mut(heaviest) {
            *budget += room.saturating_sub(given);
        }
        plan
    }

    /// Records a fetch sent to `node` with record limit `budget`.
    pub(crate) fn sent(
        &mut self,
        node: i32,
        budget: u32,
        reply: oneshot::Receiver<Result<FetchOutcome>>,
    ) {
        self.in_flight.push(InFlight {
            node,
            budget,
            reply,
        });
    }

    /// Waits for the first answer, then takes every other one already there. Cancel-safe: an
    /// answer not yet taken stays in flight.
    pub(crate) async fn answers(&mut self) -> Vec<Answer> {
        let answers = std::future::poll_fn(|cx| {
            let mut ready = Vec::new();
            self.in_flight
                .retain_mut(|f| match Pin::new(&mut f.reply).poll(cx) {
                    Poll::Ready(outcome) => {
                        ready.push(Answer {
                            node: f.node,
                            outcome: outcome.unwrap_or_else(|_| {
                                Err(Error::new(ErrorKind::Closed, "the source is closed"))
                            }),
                        });
                        false
                    }
                    Poll::Pending => true,
                });
            if ready.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(ready)
            }
        })
        .await;
        for answer in &answers {
            let got = answer
                .outcome
                .as_ref()
                .map(|o| u32::try_from(o.records.len()).unwrap_or(u32::MAX))
                .unwrap_or(0);
            self.last_yield.insert(answer.node, got);
        }
        answers
    }

    /// Keeps `err` for the next call (the first one kept wins).
    pub(crate) fn defer(&mut self, err: Error) {
        self.deferred.get_or_insert(err);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(plan: &[(i32, u32)]) -> u32 {
        plan.iter().map(|(_, b)| b).sum()
    }

    #[test]
    fn one_broker_gets_every_free_slot() {
        let mut f = Fetches::default();
        assert_eq!(f.plan(64, &[1]), vec![(1, 64)]);
        assert_eq!(f.plan(0, &[1]), vec![]);
        assert_eq!(f.plan(5, &[]), vec![]);
    }

    #[test]
    fn unknown_brokers_share_evenly_and_the_shares_sum_to_the_room() {
        let mut f = Fetches::default();
        let plan = f.plan(10, &[1, 2, 3]);
        assert_eq!(sum(&plan), 10);
        assert!(plan.iter().all(|(_, b)| (3..=4).contains(b)), "{plan:?}");
    }

    #[test]
    fn a_busy_broker_gets_most_and_idle_ones_keep_one_slot() {
        let mut f = Fetches::default();
        f.last_yield.insert(1, 30);
        let plan = f.plan(64, &[1, 2, 3]);
        assert_eq!(sum(&plan), 64);
        let of = |n| plan.iter().find(|(m, _)| *m == n).map(|(_, b)| *b).unwrap();
        assert!(of(1) >= 60, "{plan:?}");
        assert_eq!(of(2), 1);
        assert_eq!(of(3), 1);
    }

    #[test]
    fn fewer_slots_than_brokers_take_turns() {
        let mut f = Fetches::default();
        let mut asked = Vec::new();
        for _ in 0..3 {
            let plan = f.plan(1, &[1, 2, 3]);
            assert_eq!(plan.len(), 1);
            asked.push(plan[0].0);
        }
        asked.sort();
        assert_eq!(asked, vec![1, 2, 3]);
        let plan = f.plan(2, &[1, 2, 3]);
        assert_eq!(sum(&plan), 2);
        assert_ne!(plan[0].0, plan[1].0);
    }

    #[test]
    fn shares_never_exceed_the_room_whatever_was_yielded() {
        let mut f = Fetches::default();
        for (node, last) in [(1, u32::MAX), (2, u32::MAX), (3, 0), (4, 7)] {
            f.last_yield.insert(node, last);
        }
        for room in [4, 5, 17, 1000, u32::MAX] {
            let plan = f.plan(room, &[1, 2, 3, 4]);
            assert_eq!(
                plan.iter().map(|(_, b)| u64::from(*b)).sum::<u64>(),
                u64::from(room)
            );
            assert!(plan.iter().all(|(_, b)| *b >= 1));
        }
    }

    #[tokio::test]
    async fn answers_return_the_first_and_keep_the_rest_in_flight() {
        let mut f = Fetches::default();
        let (tx1, rx1) = oneshot::channel();
        let (_tx2, rx2) = oneshot::channel();
        f.sent(1, 5, rx1);
        f.sent(2, 7, rx2);
        assert_eq!(f.outstanding(), 12);
        tx1.send(Ok(FetchOutcome::default())).unwrap();
        let answers = f.answers().await;
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0].node, 1);
        assert!(f.busy(2) && !f.busy(1));
        assert_eq!(f.outstanding(), 7);
    }

    #[tokio::test]
    async fn a_vanished_session_answers_closed() {
        let mut f = Fetches::default();
        let (tx, rx) = oneshot::channel::<Result<FetchOutcome>>();
        f.sent(3, 1, rx);
        drop(tx);
        let answers = f.answers().await;
        assert_eq!(
            answers[0].outcome.as_ref().unwrap_err().kind(),
            ErrorKind::Closed
        );
        assert!(f.is_empty());
    }
}
