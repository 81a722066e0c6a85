//! The presence ledger: one worker's account of who shares the fleet's rates, kept from the
//! presence records on the control topic (see the [module docs](super) for the rules and why
//! they hold). Pure: records and instants in, views and heartbeats out, so every rule is tested
//! in virtual time.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::member::{self, Heartbeat};
use super::{FleetView, Lease};

/// The most other members a ledger counts; presence records of more are refused (counted), so
/// junk under made-up ids cannot grow the table without bound.
pub(crate) const MAX_MEMBERS: usize = 1024;
/// The most own heartbeats remembered while they are not read back.
const MAX_SENT: usize = 64;

/// The presence timings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    /// How often a member writes its heartbeat.
    pub(crate) heartbeat: Duration,
    /// A heartbeat renews the lease only if it is read back within this.
    pub(crate) ack: Duration,
    /// How long a read-back heartbeat keeps the lease.
    pub(crate) lease: Duration,
    /// How long a member gone silent stays before its key is tombstoned.
    pub(crate) forget: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        use crate::defaults::{MEMBER_ACK, MEMBER_FORGET, MEMBER_HEARTBEAT, MEMBER_LEASE};
        Self {
            heartbeat: MEMBER_HEARTBEAT,
            ack: MEMBER_ACK,
            lease: MEMBER_LEASE,
            forget: MEMBER_FORGET,
        }
    }
}

/// Another member, as this worker last read it.
#[derive(Clone, Debug)]
struct Other {
    epoch: u64,
    /// The offset of its first record of this epoch that this worker read: where it joined.
    joined: i64,
    /// Through which offset it has applied its rates (its acknowledgements).
    seen: i64,
    /// When this worker last read a record of it.
    heard: Instant,
    nonce: String,
    /// The rates it claims, each with the offset of its first record that claimed it.
    claims: BTreeMap<String, i64>,
}

impl Other {
    /// Takes up the rates of its record at `offset`.
    fn claim(&mut self, rates: Vec<String>, offset: i64) {
        self.claims.retain(|rate, _| rates.contains(rate));
        for rate in rates {
            self.claims.entry(rate).or_insert(offset);
        }
    }
}

/// What reading one presence record did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// Counted (the view may have changed).
    Counted,
    /// Under this worker's own key but not written by it.
    Forged,
    /// Not a valid presence record: why.
    Refused(String),
}

/// One worker's presence ledger.
#[derive(Debug)]
pub(crate) struct Ledger {
    me: String,
    nonce: String,
    /// The rates this worker claims, each with the offset of its first heartbeat of this
    /// epoch that claimed it, once read back.
    claims: BTreeMap<String, Option<i64>>,
    timing: Timing,
    epoch: u64,
    seq: u64,
    /// Own heartbeats written and not read back yet: seq, when sent.
    sent: VecDeque<(u64, Instant)>,
    /// The offset of this worker's first heartbeat of its epoch, once read back.
    joined: Option<i64>,
    /// Until when this worker's lease holds (its last heartbeat read back in time, plus the lease).
    lease_until: Option<Instant>,
    leaving: bool,
    others: HashMap<String, Other>,
    /// Members dropped (or found stale), and since when: their keys are tombstoned after
    /// [`Timing::forget`] unless they are heard again.
    dropped: HashMap<String, Instant>,
    /// The last offset read.
    through: i64,
    /// Grows with each change of the counts.
    version: u64,
    /// The highest `seen` this worker has written.
    acked_through: i64,
    /// What the dispatcher reads before each rate-limited start.
    lease: Arc<Lease>,
}

impl Ledger {
    /// The ledger of worker `me`, which claims no rate until [`want`](Self::want) says so.
    pub(crate) fn new(
        me: impl Into<String>,
        nonce: impl Into<String>,
        timing: Timing,
        lease: Arc<Lease>,
    ) -> Self {
        lease.fence();
        Self {
            me: me.into(),
            nonce: nonce.into(),
            claims: BTreeMap::new(),
            timing,
            epoch: 0,
            seq: 0,
            sent: VecDeque::new(),
            joined: None,
            lease_until: None,
            leaving: false,
            others: HashMap::new(),
            dropped: HashMap::new(),
            through: -1,
            version: 0,
            acked_through: -1,
            lease,
        }
    }

    /// Whether this worker may start rate-limited records at `now`.
    pub(crate) fn lease_holds(&self, now: Instant) -> bool {
        self.lease.holds(now)
    }

    /// The timings.
    pub(crate) fn timing(&self) -> Timing {
        self.timing
    }

    /// The version of the counts now.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// The heartbeat to write at `now`: key and value. It acknowledges every record read so
    /// far: a count that grew is already binding here, since the dispatcher starts nothing
    /// until it runs at the counts that include it ([`Lease::require_version`]).
    pub(crate) fn heartbeat(&mut self, now: Instant) -> (String, Vec<u8>) {
        self.expire(now);
        self.seq += 1;
        let seen = self.through;
        self.acked_through = self.acked_through.max(seen);
        self.sent.push_back((self.seq, now));
        while self.sent.len() > MAX_SENT {
            self.sent.pop_front();
        }
        let rates: Vec<String> = self.claims.keys().cloned().collect();
        let beat = Heartbeat::new(
            self.epoch,
            self.seq,
            &self.nonce,
            seen,
            &rates,
            self.leaving,
        );
        (member::key_of(&self.me), beat.encode())
    }

    /// Whether a member joined or claimed a rate that this worker has not acknowledged yet: a
    /// heartbeat now admits it sooner.
    pub(crate) fn owes_ack(&self) -> bool {
        let seen = self.through;
        let unacked = |offset: i64| offset > self.acked_through && offset <= seen;
        seen > self.acked_through
            && self
                .others
                .values()
                .any(|m| unacked(m.joined) || m.claims.values().any(|at| unacked(*at)))
    }

    /// The rates this worker has records waiting for now: it claims those, and gives up the
    /// others at once (before its next heartbeat says so). `true` when the claims changed: a
    /// heartbeat now says so sooner (a new claim is admitted sooner, a given-up share is taken
    /// by the others sooner).
    pub(crate) fn want(
        &mut self,
        wanted: &std::collections::BTreeSet<String>,
        now: Instant,
    ) -> bool {
        let before = self.counts();
        let given_up: Vec<String> = self
            .claims
            .keys()
            .filter(|rate| !wanted.contains(*rate))
            .cloned()
            .collect();
        for rate in &given_up {
            self.lease.drop_rate(rate);
            self.claims.remove(rate);
        }
        let mut changed = !given_up.is_empty();
        for rate in wanted {
            if !self.claims.contains_key(rate) {
                self.claims.insert(rate.clone(), None);
                changed = true;
            }
        }
        self.settle(before, now);
        changed
    }

    /// This worker stops starting rate-limited records and leaves: fenced at once; its next
    /// heartbeat says so.
    pub(crate) fn leave(&mut self) {
        self.leaving = true;
        self.lease.fence();
    }

    /// Reads the record at `offset` (`value` `None`: a tombstone), at `now`; `stale`: the
    /// record was written longer ago than [`Timing::forget`] (by its timestamp), so its member
    /// is gone unless heard again.
    pub(crate) fn read(
        &mut self,
        offset: i64,
        key: &[u8],
        value: Option<&[u8]>,
        stale: bool,
        now: Instant,
    ) -> Read {
        let before = self.counts();
        let read = self.read_record(offset, key, value, stale, now);
        self.through = self.through.max(offset);
        self.settle(before, now);
        read
    }

    fn read_record(
        &mut self,
        offset: i64,
        key: &[u8],
        value: Option<&[u8]>,
        stale: bool,
        now: Instant,
    ) -> Read {
        let id = match member::id_of(key) {
            Ok(id) => id.to_owned(),
            Err(why) => return Read::Refused(why),
        };
        let Some(value) = value else {
            // A tombstone: the member is gone (its own, after it left; or a survivor's, after
            // it went silent).
            if id == self.me {
                if !self.leaving && self.joined.is_some() {
                    self.lapse();
                    return Read::Forged;
                }
                return Read::Counted;
            }
            if self.others.remove(&id).is_some() {
                self.dropped.remove(&id);
            }
            return Read::Counted;
        };
        let beat = match member::decode(value) {
            Ok(beat) => beat,
            Err(why) => return Read::Refused(why),
        };
        if id == self.me {
            return self.read_own(offset, &beat, now);
        }
        if beat.leaving {
            self.others.remove(&id);
            self.dropped.insert(id, now);
            return Read::Counted;
        }
        if stale {
            if !self.others.contains_key(&id) {
                self.dropped
                    .entry(id)
                    .or_insert_with(|| now.checked_sub(self.timing.forget).unwrap_or(now));
            }
            return Read::Counted;
        }
        match self.others.get_mut(&id) {
            Some(other) if beat.epoch < other.epoch => {}
            Some(other) if beat.epoch == other.epoch && beat.nonce == other.nonce => {
                other.seen = other.seen.max(beat.seen);
                other.heard = now;
                other.claim(beat.rates, offset);
            }
            known => {
                if known.is_none() && self.others.len() >= MAX_MEMBERS {
                    return Read::Refused(format!(
                        "a member beyond the {MAX_MEMBERS} this worker counts"
                    ));
                }
                self.dropped.remove(&id);
                let mut other = Other {
                    epoch: beat.epoch,
                    joined: offset,
                    seen: beat.seen,
                    heard: now,
                    nonce: beat.nonce,
                    claims: BTreeMap::new(),
                };
                other.claim(beat.rates, offset);
                self.others.insert(id, other);
            }
        }
        Read::Counted
    }

    /// One of this worker's own records read back.
    fn read_own(&mut self, offset: i64, beat: &Heartbeat, now: Instant) -> Read {
        if beat.nonce != self.nonce {
            return Read::Forged;
        }
        if beat.epoch != self.epoch {
            return Read::Counted;
        }
        let Some(at) = self.sent.iter().position(|(seq, _)| *seq == beat.seq) else {
            return Read::Counted;
        };
        let (_, sent) = self.sent[at];
        self.sent.drain(..=at);
        let first = self.joined.is_none();
        let valid = first || self.lease_until.is_some_and(|until| sent < until);
        let took = now.saturating_duration_since(sent);
        if !valid || took > self.timing.ack {
            tracing::debug!(
                seq = beat.seq,
                ?took,
                valid,
                "fleet: own heartbeat read back too late to hold the lease"
            );
        }
        if valid && took <= self.timing.ack {
            if first {
                self.joined = Some(offset);
                // Claims count from the join on: one said in a heartbeat that did not join
                // may have been dropped by the others since.
                for since in self.claims.values_mut() {
                    *since = None;
                }
            }
            let until = sent + self.timing.lease;
            self.lease_until = Some(self.lease_until.map_or(until, |u| u.max(until)));
        }
        if self.joined.is_some() {
            for rate in &beat.rates {
                if let Some(since @ None) = self.claims.get_mut(rate) {
                    *since = Some(offset);
                }
            }
        }
        // Everything before this record is read: a member not heard since long enough before
        // it was sent cannot hold a lease any more.
        let silent = self.timing.lease + self.timing.ack;
        let gone: Vec<String> = self
            .others
            .iter()
            .filter(|(_, m)| sent.saturating_duration_since(m.heard) >= silent)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            tracing::info!(member = %id, silent_for = ?silent, "fleet: a member went silent; the others take its share");
            self.others.remove(&id);
            self.dropped.insert(id, now);
        }
        Read::Counted
    }

    /// Time passes: a lease not renewed lapses.
    pub(crate) fn tick(&mut self, now: Instant) {
        let before = self.counts();
        self.expire(now);
        self.settle(before, now);
    }

    fn expire(&mut self, now: Instant) {
        if self.joined.is_some() && self.lease_until.is_none_or(|until| until <= now) {
            self.lapse();
        }
    }

    /// The lease lapsed (or this worker's membership was voided): it joins again as a newcomer,
    /// in a new epoch.
    fn lapse(&mut self) {
        self.epoch += 1;
        self.joined = None;
        for since in self.claims.values_mut() {
            *since = None;
        }
        self.lease_until = None;
        self.sent.clear();
        self.lease.fence();
    }

    /// Keys of members gone for [`Timing::forget`]: tombstone them (they are forgotten here).
    pub(crate) fn forgotten(&mut self, now: Instant) -> Vec<String> {
        let forget = self.timing.forget;
        let mut out = Vec::new();
        self.dropped.retain(|id, since| {
            let due = now.saturating_duration_since(*since) >= forget;
            if due {
                out.push(member::key_of(id));
            }
            !due
        });
        out
    }

    /// The rates this worker may take its share of at `now`: it joined, its lease holds, it
    /// claimed the rate, and every member that was there before its claim has applied counts
    /// that include it.
    fn admitted(&self, now: Instant) -> std::collections::BTreeSet<String> {
        let holds = self.joined.is_some()
            && !self.leaving
            && self.lease_until.is_some_and(|until| now < until);
        if !holds {
            return Default::default();
        }
        self.claims
            .iter()
            .filter_map(|(rate, since)| {
                let since = (*since)?;
                self.others
                    .values()
                    .all(|m| m.joined > since || m.seen >= since)
                    .then(|| rate.clone())
            })
            .collect()
    }

    /// Why a rate this worker claims is not admitted at `now`, for the debug log: `None` when
    /// every claim is.
    pub(crate) fn waiting_for(&self, now: Instant) -> Option<String> {
        if self.leaving {
            return Some("leaving".to_owned());
        }
        if self.joined.is_none() {
            return Some(format!(
                "not joined: epoch {} has {} heartbeat(s) not read back",
                self.epoch,
                self.sent.len()
            ));
        }
        if self.lease_until.is_none_or(|until| until <= now) {
            return Some("lease lapsed".to_owned());
        }
        self.claims.iter().find_map(|(rate, since)| {
            let Some(since) = *since else {
                return Some(format!("{rate}: claim not read back"));
            };
            self.others
                .iter()
                .find(|(_, m)| m.joined <= since && m.seen < since)
                .map(|(id, m)| {
                    format!(
                        "{rate}: claimed at {since}, {id} (epoch {}) has seen only {}",
                        m.epoch, m.seen
                    )
                })
        })
    }

    /// How many members (this one included) take a share of each rate.
    fn counts(&self) -> BTreeMap<String, u32> {
        let mut counts = BTreeMap::new();
        for rate in self
            .claims
            .keys()
            .chain(self.others.values().flat_map(|m| m.claims.keys()))
        {
            *counts.entry(rate.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Records a change of the counts as a new version, and sets the lease the dispatcher reads.
    fn settle(&mut self, before: BTreeMap<String, u32>, now: Instant) {
        let after = self.counts();
        if after != before {
            self.version += 1;
            tracing::debug!(version = self.version, counts = ?after, others = ?self.others.iter().map(|(id, m)| (id, m.epoch, m.claims.keys().collect::<Vec<_>>())).collect::<Vec<_>>(), "fleet: the counts changed");
            if after
                .iter()
                .any(|(rate, n)| before.get(rate).is_none_or(|was| n > was))
            {
                // A smaller share: taken up by the dispatcher before it starts again.
                self.lease.require_version(self.version);
            }
        }
        let admitted = self.admitted(now);
        match self.lease_until {
            Some(until) if !admitted.is_empty() => self.lease.hold_until(until, admitted),
            _ => self.lease.fence(),
        }
    }

    /// The counts now, as the dispatcher takes them.
    pub(crate) fn view(&self) -> FleetView {
        let mut counts = self.counts();
        let assigned = counts.remove(member::WORKER_WIDE).unwrap_or(0);
        FleetView {
            assigned,
            by_topic: counts,
            version: self.version,
        }
    }
}

#[cfg(test)]
mod tests;
