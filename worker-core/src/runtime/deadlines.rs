//! [`Deadlines`]: slots ordered by when something is due for them.
//!
//! The dispatcher keeps two: when each in-flight record's lock must be renewed, and (in the retry
//! policy's holds) when each held record is to be released. Due entries are taken all at once, so
//! renewals go to the source together and ride in one request per broker.

use std::collections::BTreeSet;

use tokio::time::Instant;

use super::slots::SlotKey;

/// Slots with a due time each, earliest first.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    due: BTreeSet<(Instant, SlotKey)>,
}

impl Deadlines {
    /// `key` is due at `at`.
    pub(crate) fn schedule(&mut self, key: SlotKey, at: Instant) {
        self.due.insert((at, key));
    }

    /// Forgets that `key` was due at `at`.
    pub(crate) fn cancel(&mut self, key: SlotKey, at: Instant) {
        self.due.remove(&(at, key));
    }

    /// The earliest due time.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.due.first().map(|(at, _)| *at)
    }

    /// Takes every entry due by `now`, earliest first.
    pub(crate) fn take_due(&mut self, now: Instant, into: &mut Vec<(Instant, SlotKey)>) {
        while let Some(&(at, key)) = self.due.first() {
            if at > now {
                break;
            }
            self.due.pop_first();
            into.push((at, key));
        }
    }

    /// Takes every entry, due or not (shutdown).
    pub(crate) fn take_all(&mut self, into: &mut Vec<(Instant, SlotKey)>) {
        into.extend(std::mem::take(&mut self.due));
    }

    /// How many entries there are.
    pub(crate) fn len(&self) -> usize {
        self.due.len()
    }
}
