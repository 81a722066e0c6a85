//! Resting a delay topic after a far record was written back unheld.
//!
//! A delay topic is read in offset order, not in due order, so the worker finds the records that
//! come due among far ones by reading on. A far record is held for `max_hold` before it is
//! written back while under half of `max_held` is held (see the lifecycle's wait rules); beyond
//! that it is written back at once, and the route's delay topic then rests for [`REST`]: no
//! fetch takes its records until the rest ends. Without the rest a far record written back would
//! come straight back to be written again, as fast as the broker takes it, and a flood of them
//! would have every worker rewrite the topic in a loop.
//!
//! So one worker writes back at most one fetch's records per route and [`REST`] (a lone far
//! record: once per [`REST`]), and a flood of `F` far records is read through once every
//! `F / n` rests, `n` being the records of a fetch. A real job among them is seen at least that
//! often and held from `max_hold` before it is due as long as one pass takes less than
//! `max_hold`; it is late by at most that pass beyond `max_hold`, plus one [`REST`]. Records due
//! further ahead than `max_delay` never reach the topic again: they are dead-lettered.

use std::time::Duration;

use tokio::time::Instant;

/// How long a route's delay topic rests after a far record was written back unheld.
pub(super) const REST: Duration = Duration::from_secs(1);

/// Until when each route's delay topic rests, if it does.
#[derive(Debug)]
pub(super) struct WriteBacks {
    resting_until: Vec<Option<Instant>>,
}

impl WriteBacks {
    pub(super) fn new(routes: usize) -> Self {
        Self {
            resting_until: vec![None; routes],
        }
    }

    /// A record of route `route` was written back unheld at `now`: `true` when that begins a
    /// rest (none was under way).
    pub(super) fn wrote_back(&mut self, route: usize, now: Instant) -> bool {
        match self.resting_until.get_mut(route) {
            Some(rest @ None) => {
                *rest = Some(now + REST);
                true
            }
            _ => false,
        }
    }

    /// Whether route `route`'s delay topic rests.
    pub(super) fn resting(&self, route: usize) -> bool {
        self.resting_until
            .get(route)
            .is_some_and(|rest| rest.is_some())
    }

    /// When the next rest ends.
    pub(super) fn next_end(&self) -> Option<Instant> {
        self.resting_until.iter().flatten().min().copied()
    }

    /// Ends every rest due by `now`; pushes the routes whose rest ended.
    pub(super) fn end_due(&mut self, now: Instant, ended: &mut Vec<usize>) {
        for (route, rest) in self.resting_until.iter_mut().enumerate() {
            if rest.is_some_and(|at| at <= now) {
                *rest = None;
                ended.push(route);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_rests_after_a_write_back_and_resumes_when_the_rest_ends() {
        let mut pace = WriteBacks::new(2);
        let now = Instant::now();
        assert!(
            pace.wrote_back(0, now),
            "the first write-back begins a rest"
        );
        assert!(!pace.wrote_back(0, now), "one under way is not begun again");
        assert!(pace.resting(0) && !pace.resting(1), "routes rest apart");
        assert_eq!(pace.next_end(), Some(now + REST));
        let mut ended = Vec::new();
        pace.end_due(now + REST - Duration::from_millis(1), &mut ended);
        assert!(ended.is_empty() && pace.resting(0));
        pace.end_due(now + REST, &mut ended);
        assert_eq!(ended, vec![0]);
        assert!(!pace.resting(0) && pace.next_end().is_none());
        assert!(!pace.wrote_back(7, now), "no such route");
    }
}
