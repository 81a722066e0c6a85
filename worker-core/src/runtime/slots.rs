//! The table of in-flight records: one slot per record from fetch until its acknowledgement is
//! answered. It holds three times the most unfinished records (the concurrency and those fetched
//! ahead of it): the fetch loop keeps the records not yet being acknowledged within that; those
//! being acknowledged take up to as many again; and a
//! fetch leaves room for the records a source may add for acknowledgements queued while it waits
//! (see `start_fetch`). With the third, that room is only taken from a fetch while the broker is
//! slow to answer acknowledgements. Records waiting for their not-before have `max_held` slots
//! more, apart from all that. Entries are made on first use.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Span;

use crate::source::{Delivery, DeliveryId};

use super::lifecycle::{Life, LimitKind};

/// Names one occupancy of one slot: a slot reused for a later record gets a new `seq`, so late
/// events for the earlier record are recognised and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SlotKey {
    index: u32,
    seq: u32,
}

#[cfg(test)]
impl SlotKey {
    /// A key for tests that hold no slot table.
    pub(crate) fn for_test(index: u32) -> Self {
        Self { index, seq: 0 }
    }
}

/// One record in flight: its lifecycle state, and what the dispatcher keeps for it.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub(crate) id: DeliveryId,
    pub(crate) life: Life<Instant>,
    /// Fires when the handler should stop (lock lost, job timeout, end of the grace period).
    pub(crate) cancel: CancellationToken,
    /// How often the lock is renewed, `None` when it is not.
    pub(crate) renew_every: Option<Duration>,
    /// When the next renewal is scheduled, if one is.
    pub(crate) next_renewal: Option<Instant>,
    /// A copy of the record for the dead-letter sink (kept only when one is configured, until
    /// the record is acknowledged).
    pub(crate) letter: Option<Delivery>,
    /// The route whose service handles it, if any.
    pub(crate) route: Option<usize>,
    pub(crate) span: Span,
    /// The record while it waits to be admitted (not-before, a rate limit, its key).
    pub(crate) parked: Option<Delivery>,
    /// The hash of its key, when its route limits or serialises records by key.
    pub(crate) key: Option<u64>,
    /// It holds a turn of its key (`key-concurrency`) while queued or running.
    pub(crate) holds_key: bool,
    /// The limit it waits for while throttled (set by the admission check).
    pub(crate) throttle: Option<LimitKind>,
    /// It is one of the records a circuit breaker's prober runs (half-open).
    pub(crate) probe: bool,
    /// It failed its last attempt once already while its route's breaker was too young to judge.
    pub(crate) awaited_verdict: bool,
    /// What the dispatcher counts it in now.
    pub(crate) counted: Counted,
    /// Where a delay-topic record was moved from.
    pub(crate) origin: Option<Origin>,
    /// Its `share.not-before`, written again when it moves.
    pub(crate) not_before: Option<SystemTime>,
    /// Its `share.job-id` once its handler runs, for a cancellation that arrives meanwhile.
    pub(crate) job_id: Option<Arc<str>>,
}

/// Which of the dispatcher's counts a record is in.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counted {
    /// Waiting for its not-before.
    pub(crate) delayed: bool,
    /// Waiting for a permit of [`InFlight::throttle`].
    pub(crate) throttled: bool,
    /// Waiting for its key.
    pub(crate) key_wait: bool,
    /// Waiting for its key or its key's rate: counted against its partition's pause.
    pub(crate) for_key: bool,
    /// Permits it took and has not used yet (a later limit refused it).
    pub(crate) permits: Permits,
    /// The limiter whose line it stands in.
    pub(crate) in_line: Option<super::lifecycle::LimitKind>,
}

/// The permits a record waiting for a later limit already holds.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Permits {
    /// Of its key's rate limit.
    pub(crate) key: bool,
    /// Of its route's rate limit.
    pub(crate) route: bool,
}

/// Where a delay-topic record came from (its `share.origin.*` headers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
}

#[derive(Debug)]
struct Entry {
    seq: u32,
    job: Option<InFlight>,
}

/// The slot table. Entries are made when first needed, so slots never used cost no memory.
#[derive(Debug)]
pub(crate) struct Slots {
    entries: Vec<Entry>,
    /// Entries made and not held.
    free: Vec<u32>,
    capacity: u32,
}

impl Slots {
    /// `capacity` free slots (at most `u32::MAX`, checked by the config).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: Vec::new(),
            free: Vec::new(),
            capacity: u32::try_from(capacity).unwrap_or(u32::MAX),
        }
    }

    /// Raises the capacity to `capacity` (never lowers it).
    pub(crate) fn grow(&mut self, capacity: usize) {
        self.capacity = self
            .capacity
            .max(u32::try_from(capacity).unwrap_or(u32::MAX));
    }

    pub(crate) fn free(&self) -> usize {
        self.capacity as usize - self.held()
    }

    pub(crate) fn held(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// Takes a free slot for `job`; `None` when every slot is held.
    pub(crate) fn insert(&mut self, job: InFlight) -> Option<SlotKey> {
        let index = match self.free.pop() {
            Some(index) => index,
            None if self.entries.len() < self.capacity as usize => {
                self.entries.push(Entry { seq: 0, job: None });
                u32::try_from(self.entries.len() - 1).ok()?
            }
            None => return None,
        };
        let entry = &mut self.entries[index as usize];
        entry.seq = entry.seq.wrapping_add(1);
        entry.job = Some(job);
        Some(SlotKey {
            index,
            seq: entry.seq,
        })
    }

    pub(crate) fn get(&self, key: SlotKey) -> Option<&InFlight> {
        let entry = self.entries.get(key.index as usize)?;
        if entry.seq == key.seq {
            entry.job.as_ref()
        } else {
            None
        }
    }

    pub(crate) fn get_mut(&mut self, key: SlotKey) -> Option<&mut InFlight> {
        let entry = self.entries.get_mut(key.index as usize)?;
        if entry.seq == key.seq {
            entry.job.as_mut()
        } else {
            None
        }
    }

    /// Frees the slot `key` names, if it still holds that record.
    pub(crate) fn remove(&mut self, key: SlotKey) -> Option<InFlight> {
        let entry = self.entries.get_mut(key.index as usize)?;
        if entry.seq != key.seq {
            return None;
        }
        let job = entry.job.take()?;
        self.free.push(key.index);
        Some(job)
    }

    /// Every record in flight, with its key.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (SlotKey, &mut InFlight)> {
        self.entries.iter_mut().enumerate().filter_map(|(i, e)| {
            let key = SlotKey {
                index: u32::try_from(i).unwrap_or(u32::MAX),
                seq: e.seq,
            };
            e.job.as_mut().map(|job| (key, job))
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::runtime::lifecycle::Phase;
    use crate::source::Lease;

    pub(crate) fn job() -> InFlight {
        InFlight {
            id: DeliveryId {
                topic: "t".into(),
                partition: 0,
                offset: 0,
                lease: Lease::default(),
            },
            life: Life {
                phase: Phase::Queued,
                lost: false,
                attempt: 1,
                not_before: None,
            },
            cancel: CancellationToken::new(),
            renew_every: None,
            next_renewal: None,
            letter: None,
            route: None,
            span: Span::none(),
            parked: None,
            key: None,
            holds_key: false,
            throttle: None,
            probe: false,
            awaited_verdict: false,
            counted: Counted::default(),
            origin: None,
            not_before: None,
            job_id: None,
        }
    }

    #[test]
    fn slots_are_bounded_and_reused_with_new_keys() {
        let mut slots = Slots::new(2);
        let a = slots.insert(job()).unwrap();
        let b = slots.insert(job()).unwrap();
        assert!(slots.insert(job()).is_none());
        assert_eq!((slots.free(), slots.held()), (0, 2));
        assert!(slots.remove(a).is_some());
        assert!(slots.remove(a).is_none());
        let c = slots.insert(job()).unwrap();
        assert_ne!(a, c);
        assert!(slots.get(a).is_none());
        assert!(slots.get(c).is_some());
        assert_eq!(slots.iter_mut().count(), 2);
        assert!(slots.get_mut(b).is_some());
    }
}
