//! [`Keys`]: which record keys run in this worker and which records wait for a key — the
//! bookkeeping behind a route's `key-concurrency` and the bound on records waiting per key.
//!
//! Keys are untrusted bytes, kept as 64-bit hashes keyed per worker (two keys that collide share
//! a turn: stricter, never looser). An entry lives only while a record of its key runs or waits,
//! so the table never holds more entries than the worker holds records.

use std::collections::hash_map::{Entry, RandomState};
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;

use super::slots::SlotKey;

/// One route's key.
type RouteKey = (usize, u64);

#[derive(Debug, Default)]
struct KeyState {
    /// Records of the key admitted (queued or running) under `key-concurrency`.
    running: usize,
    /// Records waiting for the key, in arrival order.
    waiting: VecDeque<SlotKey>,
    /// Records of the key waiting for its rate limit, in the order they came: the first takes
    /// the key's next permit.
    throttled: VecDeque<SlotKey>,
}

impl KeyState {
    fn is_idle(&self) -> bool {
        self.running == 0 && self.waiting.is_empty() && self.throttled.is_empty()
    }
}

/// The keys of one worker.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    keys: HashMap<RouteKey, KeyState>,
    hasher: RandomState,
    /// Records waiting for a key or a key's rate limit, over all keys.
    waiting: usize,
}

impl Keys {
    /// The hash a record key is kept as.
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Records of `key` admitted and not ended.
    pub(crate) fn running(&self, route: usize, key: u64) -> usize {
        self.keys
            .get(&(route, key))
            .map_or(0, |state| state.running)
    }

    /// Records of `key` waiting (for the key or for its rate limit).
    pub(crate) fn waiting_for(&self, route: usize, key: u64) -> usize {
        self.keys
            .get(&(route, key))
            .map_or(0, |state| state.waiting.len() + state.throttled.len())
    }

    /// Records waiting for any key or key limit.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting
    }

    /// A record of `key` was admitted.
    pub(crate) fn acquire(&mut self, route: usize, key: u64) {
        self.keys.entry((route, key)).or_default().running += 1;
    }

    /// A record of `key` ended: the next record waiting for the key, if any, is taken out of the
    /// queue and returned (it is its turn).
    pub(crate) fn release(&mut self, route: usize, key: u64) -> Option<SlotKey> {
        let Entry::Occupied(mut entry) = self.keys.entry((route, key)) else {
            return None;
        };
        let state = entry.get_mut();
        state.running = state.running.saturating_sub(1);
        let next = state.waiting.pop_front();
        if next.is_some() {
            self.waiting = self.waiting.saturating_sub(1);
        }
        if state.is_idle() {
            entry.remove();
        }
        next
    }

    /// `slot` waits for `key`.
    pub(crate) fn wait(&mut self, route: usize, key: u64, slot: SlotKey) {
        self.keys
            .entry((route, key))
            .or_default()
            .waiting
            .push_back(slot);
        self.waiting += 1;
    }

    /// `slot` stopped waiting for `key` (it moved, was lost, or the worker stops).
    pub(crate) fn stop_waiting(&mut self, route: usize, key: u64, slot: SlotKey) {
        let Entry::Occupied(mut entry) = self.keys.entry((route, key)) else {
            return;
        };
        let state = entry.get_mut();
        let before = state.waiting.len();
        state.waiting.retain(|waiting| *waiting != slot);
        self.waiting = self.waiting.saturating_sub(before - state.waiting.len());
        if state.is_idle() {
            entry.remove();
        }
    }

    /// Where `slot` stands in the line for `key`'s rate limit (0: first); it joins at the end
    /// when it is not in it.
    pub(crate) fn stand(&mut self, route: usize, key: u64, slot: SlotKey) -> usize {
        let line = &mut self.keys.entry((route, key)).or_default().throttled;
        match line.iter().position(|s| *s == slot) {
            Some(at) => at,
            None => {
                line.push_back(slot);
                self.waiting += 1;
                line.len() - 1
            }
        }
    }

    /// `slot` leaves the line for `key`'s rate limit (it took a permit, or stopped waiting);
    /// returns the record first in line after it, when `slot` was first.
    pub(crate) fn leave_line(&mut self, route: usize, key: u64, slot: SlotKey) -> Option<SlotKey> {
        let Entry::Occupied(mut entry) = self.keys.entry((route, key)) else {
            return None;
        };
        let state = entry.get_mut();
        let at = state.throttled.iter().position(|s| *s == slot)?;
        state.throttled.remove(at);
        self.waiting = self.waiting.saturating_sub(1);
        let next = if at == 0 {
            state.throttled.front().copied()
        } else {
            None
        };
        if state.is_idle() {
            entry.remove();
        }
        next
    }

    /// Every record waiting for a key (shutdown); they are no longer in the queues.
    pub(crate) fn drain_waiting(&mut self) -> Vec<SlotKey> {
        let mut out = Vec::new();
        for state in self.keys.values_mut() {
            self.waiting = self.waiting.saturating_sub(state.waiting.len());
            out.extend(state.waiting.drain(..));
        }
        self.keys.retain(|_, state| !state.is_idle());
        out
    }

    /// Keys with an entry now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::slots::{Slots, tests::job};

    #[test]
    fn a_key_s_waiters_get_their_turn_in_order_and_entries_go_when_idle() {
        let mut slots = Slots::new(4);
        let (a, b, c) = (
            slots.insert(job()).unwrap(),
            slots.insert(job()).unwrap(),
            slots.insert(job()).unwrap(),
        );
        let mut keys = Keys::default();
        let k = keys.hash(b"+4915112345678");
        assert_ne!(k, keys.hash(b"+4915112345679"));
        keys.acquire(0, k);
        assert_eq!(keys.running(0, k), 1);
        assert_eq!(keys.running(1, k), 0, "routes keep their keys apart");
        keys.wait(0, k, a);
        keys.wait(0, k, b);
        assert_eq!(keys.stand(0, k, c), 0, "first in the key's rate line");
        assert_eq!(keys.stand(0, k, c), 0, "standing again keeps the place");
        assert_eq!((keys.waiting_for(0, k), keys.waiting()), (3, 3));
        keys.stop_waiting(0, k, a);
        assert_eq!(keys.release(0, k), Some(b));
        assert_eq!(keys.leave_line(0, k, c), None);
        assert_eq!((keys.waiting_for(0, k), keys.waiting()), (0, 0));
        assert_eq!(keys.len(), 0, "nothing runs or waits: the entry is gone");
        keys.wait(1, k, c);
        assert_eq!(keys.drain_waiting(), vec![c]);
        assert_eq!((keys.len(), keys.waiting()), (0, 0));
    }
}
