//! How many records a fetch asks for beyond the free handlers.
//!
//! A handler that ends frees its slot, and the fetch for its successor then takes a round trip
//! (longer when it must wait for the fetch already in progress): with 1,000 handlers of 50 ms
//! that idle time cost a tenth of the rate. So a fetch also asks for about as many records as the
//! handlers finish in two fetch round trips. Those wait in their route's queue, their locks renewed
//! like any record's, and start the moment a handler ends; at most `concurrency` handlers run.
//!
//! Only for a worker of one route (see `Dispatcher::new`). Never more than the concurrency per
//! partition leader (a fetch sends each leader a request of its own), and none for handlers so slow
//! that their work in two round trips is less than a record: a record fetched ahead of a ten-minute
//! job would wait for it while another worker of the group sits idle. Nothing before the first
//! handler has ended and the first records have arrived, since until then neither speed is known.
//!
//! The cap is what fast handlers get: they finish a whole batch while the next fetch is on its
//! way, so with room for a batch more than the handlers hold, every fetch asks for a full batch
//! instead of what the batch before it left free. A cap of a quarter held a no-op worker to
//! about 310 records per fetch of 500 slots; at the concurrency it asks for 490. With several
//! leaders each has a fetch in flight, each holding its share of the room until it answers: a
//! cap per leader keeps each of them at a batch instead of a third of one (BENCHMARKS.md, round
//! 3).

use std::time::Duration;

use super::average::Average;

/// The records fetched ahead cover this many fetch round trips of the handlers' work.
const ROUND_TRIPS: u32 = 2;

#[derive(Debug, Default)]
pub(super) struct Ahead {
    /// How long fetches that brought records took.
    round_trip: Average,
    /// The most records fetched ahead per partition leader.
    per_leader: usize,
}

impl Ahead {
    /// At most `per_leader` records ahead per partition leader (the concurrency; 0 turns fetching
    /// ahead off).
    pub(super) fn new(per_leader: usize) -> Self {
        Ahead {
            per_leader,
            ..Ahead::default()
        }
    }

    /// The most records fetched ahead from `leaders` partition leaders.
    pub(super) fn most(&self, leaders: usize) -> usize {
        self.per_leader.saturating_mul(leaders.max(1))
    }

    /// A fetch that took `took` brought `got` records.
    pub(super) fn fetched(&mut self, took: Duration, got: usize) {
        if got > 0 {
            self.round_trip.add(took);
        }
    }

    /// How many records to fetch from `leaders` partition leaders beyond `concurrency` handlers
    /// that take `handler` on average.
    pub(super) fn records(
        &self,
        concurrency: usize,
        leaders: usize,
        handler: Option<Duration>,
    ) -> usize {
        let (Some(handler), Some(round_trip)) = (handler, self.round_trip.get()) else {
            return 0;
        };
        let work = (round_trip * ROUND_TRIPS).as_nanos() * concurrency as u128;
        let ahead = work / handler.as_nanos().max(1);
        usize::try_from(ahead)
            .unwrap_or(usize::MAX)
            .min(self.most(leaders))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn after_fetches(round_trip: Duration) -> Ahead {
        let mut ahead = Ahead::new(1000);
        ahead.fetched(round_trip, 10);
        ahead
    }

    #[test]
    fn ahead_covers_what_the_handlers_finish_in_two_round_trips() {
        // 1,000 handlers of 50 ms finish 20 records a millisecond: 120 in 2 × 3 ms.
        assert_eq!(after_fetches(3 * MS).records(1000, 1, Some(50 * MS)), 120);
        // 64 handlers of 200 ms, 2 ms round trips: 1.28 records.
        assert_eq!(after_fetches(2 * MS).records(64, 1, Some(200 * MS)), 1);
    }

    #[test]
    fn fast_handlers_get_the_concurrency_at_most() {
        let ahead = after_fetches(3 * MS);
        assert_eq!(
            ahead.records(1000, 1, Some(Duration::from_micros(20))),
            1000
        );
        assert_eq!(ahead.records(1000, 1, Some(Duration::ZERO)), 1000);
        assert_eq!(
            ahead.records(1000, 1, Some(Duration::from_micros(10_000))),
            600
        );
        // Each of three leaders gets a batch.
        assert_eq!(ahead.records(1000, 3, Some(Duration::ZERO)), 3000);
        let mut off = Ahead::new(0);
        off.fetched(3 * MS, 1);
        assert_eq!(off.records(1000, 1, Some(Duration::ZERO)), 0);
    }

    #[test]
    fn slow_handlers_get_none() {
        // Ten-minute jobs, or one handler of 50 ms: less than one record's worth.
        assert_eq!(after_fetches(3 * MS).records(64, 1, Some(600_000 * MS)), 0);
        assert_eq!(after_fetches(3 * MS).records(8, 1, Some(50 * MS)), 0);
    }

    #[test]
    fn nothing_is_fetched_ahead_before_both_speeds_are_known() {
        let mut ahead = Ahead::new(1000);
        assert_eq!(ahead.records(1000, 1, Some(50 * MS)), 0);
        // An empty fetch (a long poll) is not a round trip.
        ahead.fetched(500 * MS, 0);
        assert_eq!(ahead.records(1000, 1, Some(50 * MS)), 0);
        ahead.fetched(3 * MS, 1);
        assert_eq!(ahead.records(1000, 1, None), 0);
        assert_eq!(ahead.records(1000, 1, Some(50 * MS)), 120);
    }
}
