//! Resting a delay topic after a far record was written back unheld.
//!
//! A delay topic is read in offset order, not in due order, so the worker finds the records that
//! come due among far ones by reading on. A far record is held for `max_hold` before it is
//! written back while under half of `max_held` is held (see the lifecycle's wait rules); beyond
//! that it is written back at once, and that delay topic (one tier of one route) then rests for
//! [`REST`]: no fetch takes its records until the rest ends. Without the rest a far record
//! written back would come straight back to be written again, as fast as the broker takes it,
//! and a flood of them would have every worker rewrite the topic in a loop. The other tiers go on
//! meanwhile: a flood of records due in days never slows the topic of those due within the hour.
//!
//! So one worker writes back at most one fetch's records per delay topic and [`REST`] (a lone
//! far record: once per [`REST`]), and a flood of `F` far records is read through once every
//! `F / n` rests, `n` being the records of a fetch. A record among them is seen at least that
//! often, and moves to the nearer tier it comes into on that sighting: it is on time as long as
//! one pass over its tier takes less than the reach of the tier below, less `max_hold` (see
//! [`TIERS`](crate::delay::TIERS)). Records due further ahead than `max_delay` never reach a
//! delay topic again: they are dead-lettered.

use std::time::Duration;

use tokio::time::Instant;

use crate::delay::TIERS;

/// How long a route's delay topic rests after a far record was written back unheld.
pub(super) const REST: Duration = Duration::from_secs(1);

/// Until when each delay topic (each tier of each route) rests, if it does.
#[derive(Debug)]
pub(super) struct WriteBacks {
    resting_until: Vec<Option<Instant>>,
}

/// A route's delay topic: the route and the tier.
pub(super) type TierOf = (usize, usize);

impl WriteBacks {
    pub(super) fn new(routes: usize) -> Self {
        Self {
            resting_until: vec![None; routes * TIERS.len()],
        }
    }

    fn index((route, tier): TierOf) -> Option<usize> {
        (tier < TIERS.len()).then(|| route * TIERS.len() + tier)
    }

    /// A record of delay topic `topic` was written back unheld at `now`: `true` when that begins
    /// a rest (none was under way).
    pub(super) fn wrote_back(&mut self, topic: TierOf, now: Instant) -> bool {
        match Self::index(topic).and_then(|at| self.resting_until.get_mut(at)) {
            Some(rest @ None) => {
                *rest = Some(now + REST);
                true
            }
            _ => false,
        }
    }

    /// Whether delay topic `topic` rests.
    pub(super) fn resting(&self, topic: TierOf) -> bool {
        Self::index(topic)
            .and_then(|at| self.resting_until.get(at))
            .is_some_and(|rest| rest.is_some())
    }

    /// When the next rest ends.
    pub(super) fn next_end(&self) -> Option<Instant> {
        self.resting_until.iter().flatten().min().copied()
    }

    /// Ends every rest due by `now`; pushes the routes whose rest ended.
    pub(super) fn end_due(&mut self, now: Instant, ended: &mut Vec<usize>) {
        for (at, rest) in self.resting_until.iter_mut().enumerate() {
            if rest.is_some_and(|until| until <= now) {
                *rest = None;
                let route = at / TIERS.len();
                if ended.last() != Some(&route) {
                    ended.push(route);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_topic_rests_after_a_write_back_and_resumes_when_the_rest_ends() {
        let mut pace = WriteBacks::new(2);
        let now = Instant::now();
        assert!(
            pace.wrote_back((0, 2), now),
            "the first write-back begins a rest"
        );
        assert!(
            !pace.wrote_back((0, 2), now),
            "one under way is not begun again"
        );
        assert!(pace.resting((0, 2)), "it rests");
        assert!(
            !pace.resting((0, 0)) && !pace.resting((1, 2)),
            "other tiers and other routes go on"
        );
        assert_eq!(pace.next_end(), Some(now + REST));
        let mut ended = Vec::new();
        pace.end_due(now + REST - Duration::from_millis(1), &mut ended);
        assert!(ended.is_empty() && pace.resting((0, 2)));
        pace.end_due(now + REST, &mut ended);
        assert_eq!(ended, vec![0]);
        assert!(!pace.resting((0, 2)) && pace.next_end().is_none());
        assert!(!pace.wrote_back((7, 0), now), "no such route");
        assert!(!pace.wrote_back((0, TIERS.len()), now), "no such tier");
    }
}
