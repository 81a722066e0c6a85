//! Partitions paused while their records wait for their keys. Without a delay topic a record
//! over its key's limit (its per-key rate, its turn) can only wait in its slot; the next records
//! of its partition most likely belong to the same busy keys and would wait too, until waiting
//! records hold every slot and a key of another partition this worker was given starves. So
//! once `most` records of one partition wait for their keys, the partition is paused at the
//! source (left out of the share fetch, its records left to the group's other members) until
//! one of them stops waiting. The fetch right after a resume asks for at most `most` records: a
//! full-sized one could refill the resumed partition far past `most` in one answer, and those
//! records would again hold the slots for as long as their keys take to start them. With a delay
//! topic the records a key cannot hold move there instead, and nothing is paused.

use std::collections::HashMap;
use std::sync::Arc;

/// How many records of each partition wait for their keys, and the pause that follows.
#[derive(Debug, Default)]
pub(super) struct KeyWaits {
    /// A partition is paused while this many of its records wait; 0: never.
    most: usize,
    /// By (topic, partition): the records waiting (none are kept at 0).
    waiting: HashMap<(Arc<str>, i32), usize>,
    /// A partition was resumed since the last fetch.
    resumed: bool,
}

/// What a change of the count asks of the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Turn {
    Pause,
    Resume,
}

impl KeyWaits {
    /// Pauses a partition at `most` waiting records (0: never).
    pub(super) fn new(most: usize) -> Self {
        Self {
            most,
            waiting: HashMap::new(),
            resumed: false,
        }
    }

    /// The most records the fetch about to start may ask for, when a partition was resumed since
    /// the last one.
    pub(super) fn take_fetch_limit(&mut self) -> Option<usize> {
        std::mem::take(&mut self.resumed).then_some(self.most)
    }

    /// One more record of `topic`'s `partition` waits for its key (`waits`), or one stopped.
    pub(super) fn count(&mut self, topic: &Arc<str>, partition: i32, waits: bool) -> Option<Turn> {
        if self.most == 0 {
            return None;
        }
        let at = (topic.clone(), partition);
        let n = self.waiting.entry(at.clone()).or_default();
        let before = *n;
        *n = if waits {
            n.saturating_add(1)
        } else {
            n.saturating_sub(1)
        };
        let after = *n;
        if after == 0 {
            self.waiting.remove(&at);
        }
        match (before >= self.most, after >= self.most) {
            (false, true) => Some(Turn::Pause),
            (true, false) => {
                self.resumed = true;
                Some(Turn::Resume)
            }
            _ => None,
        }
    }

    /// The partitions paused now.
    #[cfg(test)]
    fn paused(&self) -> usize {
        self.waiting.values().filter(|n| **n >= self.most).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_paused_at_its_most_and_resumed_below_it() {
        let (a, b): (Arc<str>, Arc<str>) = ("sms".into(), "mail".into());
        let mut waits = KeyWaits::new(2);
        assert_eq!(waits.count(&a, 0, true), None);
        assert_eq!(waits.count(&a, 0, true), Some(Turn::Pause));
        // Over the most: still paused, told once.
        assert_eq!(waits.count(&a, 0, true), None);
        // Another partition, another topic's partition 0: counted apart.
        assert_eq!(waits.count(&a, 1, true), None);
        assert_eq!(waits.count(&b, 0, true), None);
        assert_eq!(waits.paused(), 1);
        assert_eq!(waits.take_fetch_limit(), None, "nothing resumed yet");
        assert_eq!(waits.count(&a, 0, false), None);
        assert_eq!(waits.count(&a, 0, false), Some(Turn::Resume));
        // The next fetch asks for at most 2, the one after it for what it likes.
        assert_eq!(waits.take_fetch_limit(), Some(2));
        assert_eq!(waits.take_fetch_limit(), None);
        assert_eq!(waits.count(&a, 0, true), Some(Turn::Pause));
        assert_eq!(waits.paused(), 1);
    }

    #[test]
    fn nothing_is_paused_with_no_most_and_counts_never_go_below_zero() {
        let t: Arc<str> = "sms".into();
        let mut never = KeyWaits::new(0);
        for _ in 0..10 {
            assert_eq!(never.count(&t, 0, true), None);
        }
        let mut waits = KeyWaits::new(1);
        assert_eq!(waits.count(&t, 0, false), None);
        assert!(waits.waiting.is_empty(), "no count kept at 0");
        assert_eq!(waits.count(&t, 0, true), Some(Turn::Pause));
        assert_eq!(waits.count(&t, 0, false), Some(Turn::Resume));
        assert!(waits.waiting.is_empty());
    }
}
