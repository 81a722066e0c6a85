//! [`Holds`]: records waiting out a retry backoff or their not-before, ordered by when the wait
//! ends.

use tokio::time::Instant;

use super::deadlines::Deadlines;
use super::slots::SlotKey;

/// Records held for a backoff or until their not-before. Bounded by `max_held` (the lifecycle asks
/// [`has_room`](Self::has_room) first); each holds its slot and its lock meanwhile.
#[derive(Debug)]
pub(crate) struct Holds {
    due: Deadlines,
    max: usize,
}

impl Holds {
    /// At most `max` records held at once.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            due: Deadlines::default(),
            max,
        }
    }

    /// Whether another record may be held.
    pub(crate) fn has_room(&self) -> bool {
        self.due.len() < self.max
    }

    /// Whether a far delay-topic record may be held: under half of `max_held` is, so the other
    /// half stays for records that come due.
    pub(crate) fn has_room_for_far(&self) -> bool {
        self.due.len() < self.max / 2
    }

    /// Holds `key` until `until` (the lifecycle asked for room first).
    pub(crate) fn hold(&mut self, key: SlotKey, until: Instant) {
        self.due.schedule(key, until);
    }

    /// Stops holding `key` (held until `until`).
    pub(crate) fn cancel(&mut self, key: SlotKey, until: Instant) {
        self.due.cancel(key, until);
    }

    /// When the next hold ends.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.due.next_due()
    }

    /// Takes every hold that ended by `now`, earliest first.
    pub(crate) fn take_due(&mut self, now: Instant, into: &mut Vec<(Instant, SlotKey)>) {
        self.due.take_due(now, into);
    }

    /// Takes every hold (shutdown).
    pub(crate) fn take_all(&mut self, into: &mut Vec<(Instant, SlotKey)>) {
        self.due.take_all(into);
    }

    /// Records held now.
    pub(crate) fn len(&self) -> usize {
        self.due.len()
    }
}
