//! The broker's bookkeeping: records, their states and locks, members. Synchronous; the public
//! handles lock it for each operation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::source::{AckError, AckKind, Delivery, DeliveryId, Header, Lease, Undecodable};

use super::{BrokerStats, FetchLog, RecordState, StateCounts};

/// Settings of a [`MemoryBroker`](super::MemoryBroker).
#[derive(Clone, Debug)]
pub(crate) struct BrokerSettings {
    pub(crate) lock_duration: Duration,
    pub(crate) delivery_limit: u16,
    pub(crate) fetch_wait: Duration,
    pub(crate) ack_latency: Duration,
}

/// Where a record lives: indexes into the state's tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct RecordRef {
    topic: usize,
    partition: usize,
    offset: usize,
}

/// A lock's place in the expiry index: when it ends, and a tie-breaker.
type LockKey = (Instant, u64);

#[derive(Debug)]
struct Record {
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<Header>,
    timestamp: i64,
    undecodable: Option<Arc<Undecodable>>,
    state: RecordState,
    delivery_count: u16,
    holder: Option<Holder>,
}

#[derive(Clone, Copy, Debug)]
struct Holder {
    member: usize,
    session: u32,
    lock: LockKey,
}

#[derive(Debug, Default)]
struct Partition {
    records: Vec<Record>,
    available: BTreeSet<usize>,
}

#[derive(Debug)]
struct Topic {
    partitions: Vec<Partition>,
    next_partition: usize,
}

#[derive(Debug)]
struct Member {
    name: Arc<str>,
    session: u32,
    closed: bool,
    /// Topics this member does not fetch from for now.
    paused: std::collections::HashSet<Arc<str>>,
    /// Partitions (topic index, partition) this member does not fetch from for now.
    paused_partitions: std::collections::HashSet<(usize, usize)>,
}

/// One record to append, as given to [`MemoryBroker::produce_record`](super::MemoryBroker::produce_record).
#[derive(Debug)]
pub(crate) struct NewRecord {
    pub(crate) partition: Option<i32>,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Vec<Header>,
    pub(crate) timestamp: i64,
    pub(crate) undecodable: Option<Arc<Undecodable>>,
}

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) config: BrokerSettings,
    topic_names: Vec<Arc<str>>,
    topics: Vec<Topic>,
    topic_index: HashMap<Arc<str>, usize>,
    members: Vec<Member>,
    /// Every acquired record, ordered by when its lock ends.
    locks: BTreeMap<LockKey, RecordRef>,
    next_lock: u64,
    next_partition: usize,
    counts: StateCounts,
    stats: BrokerStats,
    fetches: Vec<FetchLog>,
    pub(crate) fail_renewals: bool,
    pub(crate) fail_limit_reads: bool,
    pub(crate) fail_fetches: Option<crate::ErrorKind>,
    /// Writes through the broker as a delay sink fail with this kind while set.
    pub(crate) fail_delay_writes: Option<crate::ErrorKind>,
}

impl State {
    pub(crate) fn new(config: BrokerSettings) -> Self {
        Self {
            config,
            topic_names: Vec::new(),
            topics: Vec::new(),
            topic_index: HashMap::new(),
            members: Vec::new(),
            locks: BTreeMap::new(),
            next_lock: 0,
            next_partition: 0,
            counts: StateCounts::default(),
            stats: BrokerStats::default(),
            fetches: Vec::new(),
            fail_renewals: false,
            fail_limit_reads: false,
            fail_fetches: None,
            fail_delay_writes: None,
        }
    }

    /// Creates `name` with `partitions` partitions, or adds partitions up to that number.
    pub(crate) fn create_topic(&mut self, name: &str, partitions: usize) -> usize {
        let index = match self.topic_index.get(name) {
            Some(&index) => index,
            None => {
                let name: Arc<str> = Arc::from(name);
                self.topic_names.push(name.clone());
                self.topics.push(Topic {
                    partitions: Vec::new(),
                    next_partition: 0,
                });
                self.topic_index.insert(name, self.topics.len() - 1);
                self.topics.len() - 1
            }
        };
        let topic = &mut self.topics[index];
        while topic.partitions.len() < partitions.max(1) {
            topic.partitions.push(Partition::default());
        }
        index
    }

    /// Appends a record; returns its partition and offset, or `None` for a partition that does not
    /// exist.
    pub(crate) fn produce(&mut self, topic: &str, record: NewRecord) -> Option<(i32, i64)> {
        let t = self.create_topic(topic, 1);
        let topic = &mut self.topics[t];
        let partition = match record.partition {
            Some(p) => usize::try_from(p)
                .ok()
                .filter(|&p| p < topic.partitions.len())?,
            None => {
                let p = topic.next_partition % topic.partitions.len();
                topic.next_partition = topic.next_partition.wrapping_add(1);
                p
            }
        };
        let part = &mut topic.partitions[partition];
        let offset = part.records.len();
        part.records.push(Record {
            key: record.key,
            value: record.value,
            headers: record.headers,
            timestamp: record.timestamp,
            undecodable: record.undecodable,
            state: RecordState::Available,
            delivery_count: 0,
            holder: None,
        });
        part.available.insert(offset);
        self.counts.available += 1;
        Some((to_i32(partition), to_i64(offset)))
    }

    pub(crate) fn add_member(&mut self, name: &str) -> usize {
        self.members.push(Member {
            name: Arc::from(name),
            session: 0,
            closed: false,
            paused: std::collections::HashSet::new(),
            paused_partitions: std::collections::HashSet::new(),
        });
        self.members.len() - 1
    }

    pub(crate) fn member_name(&self, member: usize) -> Arc<str> {
        self.members[member].name.clone()
    }

    pub(crate) fn is_closed(&self, member: usize) -> bool {
        self.members[member].closed
    }

    /// Makes every record whose lock ended by `now` available again (or archives it at the
    /// delivery limit). Returns whether any record became available.
    pub(crate) fn expire(&mut self, now: Instant) -> bool {
        let mut freed = false;
        while let Some(entry) = self.locks.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let at = entry.remove();
            self.stats.lock_expiries += 1;
            freed |= self.end_acquisition(at, AckKind::Release);
        }
        freed
    }

    /// When the next lock ends, if any record is acquired.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.locks.first_key_value().map(|(key, _)| key.0)
    }

    /// Acquires up to `max` available records for `member`, lowest offsets first, starting with
    /// a different partition each call.
    /// Stops (or resumes) fetching `topic`'s records for `member`.
    pub(crate) fn pause(&mut self, member: usize, topic: &str, paused: bool) {
        let set = &mut self.members[member].paused;
        if paused {
            set.insert(Arc::from(topic));
        } else {
            set.remove(topic);
        }
    }

    /// Stops (or resumes) fetching `topic`'s `partition` for `member`; a topic or partition it
    /// does not have is ignored.
    pub(crate) fn pause_partition(
        &mut self,
        member: usize,
        topic: &str,
        partition: i32,
        paused: bool,
    ) {
        let Some(t) = self.topic_names.iter().position(|name| &**name == topic) else {
            return;
        };
        let Ok(p) = usize::try_from(partition) else {
            return;
        };
        let set = &mut self.members[member].paused_partitions;
        if paused {
            set.insert((t, p));
        } else {
            set.remove(&(t, p));
        }
    }

    pub(crate) fn acquire(&mut self, member: usize, max: u32, now: Instant) -> Vec<Delivery> {
        let mut out = Vec::new();
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        let paused = &self.members[member].paused;
        let paused_partitions = &self.members[member].paused_partitions;
        let all: Vec<(usize, usize)> = self
            .topics
            .iter()
            .enumerate()
            .filter(|(t, _)| !paused.contains(&self.topic_names[*t]))
            .flat_map(|(t, topic)| (0..topic.partitions.len()).map(move |p| (t, p)))
            .filter(|tp| !paused_partitions.contains(tp))
            .collect();
        if all.is_empty() || max == 0 {
            return out;
        }
        let start = self.next_partition % all.len();
        self.next_partition = self.next_partition.wrapping_add(1);
        let session = self.members[member].session;
        let lease = Lease::new(to_i32(member), session);
        for i in 0..all.len() {
            if out.len() >= max {
                break;
            }
            let (t, p) = all[(start + i) % all.len()];
            while out.len() < max {
                let Some(offset) = self.topics[t].partitions[p].available.pop_first() else {
                    break;
                };
                let lock = (now + self.config.lock_duration, self.next_lock);
                self.next_lock += 1;
                let at = RecordRef {
                    topic: t,
                    partition: p,
                    offset,
                };
                self.locks.insert(lock, at);
                let record = &mut self.topics[t].partitions[p].records[offset];
                record.delivery_count = record.delivery_count.saturating_add(1);
                record.holder = Some(Holder {
                    member,
                    session,
                    lock,
                });
                record.state = RecordState::Acquired;
                self.counts.available -= 1;
                self.counts.acquired += 1;
                out.push(Delivery {
                    id: DeliveryId {
                        topic: self.topic_names[t].clone(),
                        partition: to_i32(p),
                        offset: to_i64(offset),
                        lease,
                    },
                    key: record.key.clone(),
                    value: record.value.clone(),
                    headers: record.headers.clone(),
                    timestamp: record.timestamp,
                    delivery_count: record.delivery_count,
                    lock_duration: self.config.lock_duration,
                    acquired_at: now,
                    undecodable: record.undecodable.clone(),
                });
            }
        }
        out
    }

    pub(crate) fn log_fetch(
        &mut self,
        member: usize,
        requested: u32,
        returned: usize,
        now: Instant,
    ) {
        self.stats.fetches += 1;
        self.fetches.push(FetchLog {
            member: self.members[member].name.clone(),
            requested,
            returned,
            at: now,
        });
    }

    /// Settles one delivery held by `member`.
    pub(crate) fn acknowledge(
        &mut self,
        member: usize,
        id: &DeliveryId,
        kind: AckKind,
    ) -> Result<bool, AckError> {
        let at = self.held(member, id)?;
        let Some(holder) = self.record(at).and_then(|r| r.holder) else {
            return Err(AckError::LockLost);
        };
        self.locks.remove(&holder.lock);
        match kind {
            AckKind::Accept => self.stats.accepts += 1,
            AckKind::Release => self.stats.releases += 1,
            AckKind::Reject => self.stats.rejects += 1,
        }
        Ok(self.end_acquisition(at, kind))
    }

    /// Restarts the lock of one delivery held by `member`.
    pub(crate) fn renew(
        &mut self,
        member: usize,
        id: &DeliveryId,
        now: Instant,
    ) -> Result<(), AckError> {
        if self.fail_renewals {
            self.stats.renew_failures += 1;
            return Err(AckError::LockLost);
        }
        let at = match self.held(member, id) {
            Ok(at) => at,
            Err(err) => {
                self.stats.renew_failures += 1;
                return Err(err);
            }
        };
        let lock = (now + self.config.lock_duration, self.next_lock);
        self.next_lock += 1;
        let Some(holder) = self.record_mut(at).and_then(|r| r.holder.as_mut()) else {
            return Err(AckError::LockLost);
        };
        let old = std::mem::replace(&mut holder.lock, lock);
        self.locks.remove(&old);
        self.locks.insert(lock, at);
        self.stats.renewals += 1;
        Ok(())
    }

    /// Closes `member` (or only its session when `close` is false): every record it holds becomes
    /// available again at once. Returns whether any did.
    pub(crate) fn release_member(&mut self, member: usize, close: bool) -> bool {
        let held: Vec<(LockKey, RecordRef)> = self
            .locks
            .iter()
            .filter(|(_, at)| {
                self.record(**at)
                    .and_then(|r| r.holder)
                    .is_some_and(|h| h.member == member)
            })
            .map(|(k, at)| (*k, *at))
            .collect();
        let mut freed = false;
        for (key, at) in held {
            self.locks.remove(&key);
            freed |= self.end_acquisition(at, AckKind::Release);
        }
        let m = &mut self.members[member];
        if close {
            m.closed = true;
        } else {
            m.session = m.session.wrapping_add(1);
        }
        freed
    }

    /// Finds the record `id` names and checks that `member` holds it in its current session.
    fn held(&self, member: usize, id: &DeliveryId) -> Result<RecordRef, AckError> {
        let m = &self.members[member];
        if m.closed {
            return Err(AckError::Closed);
        }
        if id.lease.node() != to_i32(member) || id.lease.session() != m.session {
            return Err(AckError::SessionLost);
        }
        let at = self
            .locate(&id.topic, id.partition, id.offset)
            .ok_or(AckError::Broker {
                code: 3,
                message: "UNKNOWN_TOPIC_OR_PARTITION".into(),
            })?;
        match self.record(at).and_then(|r| r.holder) {
            Some(h) if h.member == member && h.session == m.session => Ok(at),
            _ => Err(AckError::LockLost),
        }
    }

    /// Ends the current acquisition of a record (its lock entry is already removed). Returns
    /// whether the record became available.
    fn end_acquisition(&mut self, at: RecordRef, kind: AckKind) -> bool {
        let limit = self.config.delivery_limit;
        let Some(record) = self.record_mut(at) else {
            return false;
        };
        record.holder = None;
        let next = match kind {
            AckKind::Accept => RecordState::Acknowledged,
            AckKind::Reject => RecordState::Archived,
            AckKind::Release if record.delivery_count >= limit => RecordState::Archived,
            AckKind::Release => RecordState::Available,
        };
        record.state = next;
        self.counts.acquired -= 1;
        match next {
            RecordState::Available => {
                self.counts.available += 1;
                self.topics[at.topic].partitions[at.partition]
                    .available
                    .insert(at.offset);
                true
            }
            RecordState::Acknowledged => {
                self.counts.acknowledged += 1;
                false
            }
            RecordState::Archived => {
                self.counts.archived += 1;
                false
            }
            RecordState::Acquired => false,
        }
    }

    fn locate(&self, topic: &str, partition: i32, offset: i64) -> Option<RecordRef> {
        let t = *self.topic_index.get(topic)?;
        let p = usize::try_from(partition).ok()?;
        let o = usize::try_from(offset).ok()?;
        let part = self.topics[t].partitions.get(p)?;
        part.records.get(o)?;
        Some(RecordRef {
            topic: t,
            partition: p,
            offset: o,
        })
    }

    fn record(&self, at: RecordRef) -> Option<&Record> {
        self.topics
            .get(at.topic)?
            .partitions
            .get(at.partition)?
            .records
            .get(at.offset)
    }

    fn record_mut(&mut self, at: RecordRef) -> Option<&mut Record> {
        self.topics
            .get_mut(at.topic)?
            .partitions
            .get_mut(at.partition)?
            .records
            .get_mut(at.offset)
    }

    pub(crate) fn record_info(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Option<(RecordState, u16)> {
        let at = self.locate(topic, partition, offset)?;
        self.record(at).map(|r| (r.state, r.delivery_count))
    }

    pub(crate) fn record_headers(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Option<Vec<Header>> {
        let at = self.locate(topic, partition, offset)?;
        self.record(at).map(|r| r.headers.clone())
    }

    /// Every record of `topic`: (partition, offset, state).
    pub(crate) fn records_of(&self, topic: &str) -> Vec<(i32, i64, RecordState)> {
        let Some(&index) = self.topic_index.get(topic) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (p, partition) in self.topics[index].partitions.iter().enumerate() {
            for (o, record) in partition.records.iter().enumerate() {
                out.push((
                    i32::try_from(p).unwrap_or(i32::MAX),
                    i64::try_from(o).unwrap_or(i64::MAX),
                    record.state,
                ));
            }
        }
        out
    }

    pub(crate) fn counts(&self) -> StateCounts {
        self.counts
    }

    pub(crate) fn stats(&self) -> BrokerStats {
        self.stats
    }

    pub(crate) fn fetches(&self) -> &[FetchLog] {
        &self.fetches
    }

    /// How many records `member` holds right now.
    pub(crate) fn held_by(&self, member: usize) -> usize {
        self.locks
            .values()
            .filter(|at| {
                self.record(**at)
                    .and_then(|r| r.holder)
                    .is_some_and(|h| h.member == member)
            })
            .count()
    }
}

fn to_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
