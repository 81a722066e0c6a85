//! [`RenewScheduler`]: in-flight records ordered by when their lock must be renewed.

use std::collections::BTreeSet;

use tokio::time::Instant;

use super::slots::SlotKey;

/// Renewal times of in-flight records. The dispatcher takes every due renewal at once, so they go
/// to the source together and ride in one request per broker.
#[derive(Debug, Default)]
pub(crate) struct RenewScheduler {
    due: BTreeSet<(Instant, SlotKey)>,
}

impl RenewScheduler {
    /// Renew `key` at `at`.
    pub(crate) fn schedule(&mut self, key: SlotKey, at: Instant) {
        self.due.insert((at, key));
    }

    /// Forgets the renewal of `key` planned for `at`.
    pub(crate) fn cancel(&mut self, key: SlotKey, at: Instant) {
        self.due.remove(&(at, key));
    }

    /// When the next renewal is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.due.first().map(|(at, _)| *at)
    }

    /// Takes every renewal due by `now`, earliest first.
    pub(crate) fn take_due(&mut self, now: Instant, into: &mut Vec<(Instant, SlotKey)>) {
        while let Some(&(at, key)) = self.due.first() {
            if at > now {
                break;
            }
            self.due.pop_first();
            into.push((at, key));
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.due.len()
    }
}
