//! The broker handle: topics, producing, members, introspection and fault injection.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;

use crate::source::{Header, Recovered, Undecodable};

use super::member::MemoryMember;
use super::state::{BrokerSettings, NewRecord, State};
use super::{BrokerStats, FetchLog, RecordState, StateCounts};

/// A share-group broker in memory, for tests. Cheap to clone: clones share the same records.
///
/// See the [module docs](super) for the model and an example.
#[derive(Clone)]
pub struct MemoryBroker {
    pub(super) shared: Arc<Shared>,
}

/// What every handle of one broker shares.
#[derive(Debug)]
pub(super) struct Shared {
    state: Mutex<State>,
    /// Woken when records become available.
    pub(super) available: Notify,
}

impl Shared {
    /// Locks the state. A panic while it was held (in a test) does not poison other tests' view.
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Settings for a [`MemoryBroker`].
#[derive(Clone, Debug)]
pub struct MemoryBrokerBuilder {
    config: BrokerSettings,
}

impl MemoryBrokerBuilder {
    /// How long an acquisition lock runs (Kafka's `share.record.lock.duration.ms`). Default 30 s.
    pub fn lock_duration(mut self, duration: Duration) -> Self {
        self.config.lock_duration = duration;
        self
    }

    /// The delivery-count limit (Kafka's `share.delivery.count.limit`). A record released, or whose
    /// lock ends, at this many deliveries is archived. Default 5; at least 1.
    pub fn delivery_limit(mut self, limit: u16) -> Self {
        self.config.delivery_limit = limit.max(1);
        self
    }

    /// How long a fetch waits for records when none is available (Kafka's `fetch.max.wait.ms`).
    /// Default 500 ms.
    pub fn fetch_wait(mut self, wait: Duration) -> Self {
        self.config.fetch_wait = wait;
        self
    }

    /// How long the broker takes to answer an acknowledgement or renewal: the effect is immediate,
    /// the [`AckReceipt`](crate::source::AckReceipt) resolves this much later (as when it rides on
    /// the next request). Default zero: receipts are ready at once. Needs a tokio runtime when set.
    pub fn ack_latency(mut self, latency: Duration) -> Self {
        self.config.ack_latency = latency;
        self
    }

    /// The broker.
    pub fn build(self) -> MemoryBroker {
        MemoryBroker {
            shared: Arc::new(Shared {
                state: Mutex::new(State::new(self.config)),
                available: Notify::new(),
            }),
        }
    }
}

impl Default for MemoryBrokerBuilder {
    fn default() -> Self {
        Self {
            config: BrokerSettings {
                lock_duration: Duration::from_secs(30),
                delivery_limit: 5,
                fetch_wait: Duration::from_millis(500),
                ack_latency: Duration::ZERO,
            },
        }
    }
}

impl Default for MemoryBroker {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBroker {
    /// A broker with the default settings (30 s locks, delivery limit 5, 500 ms fetch wait).
    pub fn new() -> Self {
        MemoryBrokerBuilder::default().build()
    }

    /// Settings for a broker.
    pub fn builder() -> MemoryBrokerBuilder {
        MemoryBrokerBuilder::default()
    }

    /// Creates a topic with `partitions` partitions (at least 1), or grows an existing one to that
    /// many. Producing to an unknown topic creates it with one partition.
    pub fn create_topic(&self, topic: &str, partitions: usize) {
        self.shared.state().create_topic(topic, partitions);
    }

    /// Appends a record with this value to `topic`, spreading records over its partitions in turn.
    /// Returns the record's partition and offset.
    pub fn produce(&self, topic: &str, value: impl Into<Bytes>) -> (i32, i64) {
        self.produce_record(topic, ProducedRecord::new(value))
            .unwrap_or((0, 0))
    }

    /// Appends a record; returns its partition and offset, or `None` if it names a partition the
    /// topic does not have.
    pub fn produce_record(&self, topic: &str, record: ProducedRecord) -> Option<(i32, i64)> {
        let position = self.shared.state().produce(topic, record.0)?;
        self.shared.available.notify_waiters();
        Some(position)
    }

    /// A new member of the share group: it fetches from every topic. Members acquire records
    /// independently; a record is locked for one member at a time.
    pub fn member(&self, name: &str) -> MemoryMember {
        let index = self.shared.state().add_member(name);
        MemoryMember::new(self.clone(), index)
    }

    /// The state of one record, `None` if there is no such record.
    pub fn record_state(&self, topic: &str, partition: i32, offset: i64) -> Option<RecordState> {
        self.record_info(topic, partition, offset).map(|i| i.0)
    }

    /// How many times one record has been delivered, `None` if there is no such record.
    pub fn delivery_count(&self, topic: &str, partition: i32, offset: i64) -> Option<u16> {
        self.record_info(topic, partition, offset).map(|i| i.1)
    }

    fn record_info(&self, topic: &str, partition: i32, offset: i64) -> Option<(RecordState, u16)> {
        let mut state = self.shared.state();
        state.expire(tokio::time::Instant::now());
        state.record_info(topic, partition, offset)
    }

    /// The headers of one record, `None` if there is no such record.
    pub fn record_headers(&self, topic: &str, partition: i32, offset: i64) -> Option<Vec<Header>> {
        self.shared.state().record_headers(topic, partition, offset)
    }

    /// Every record of `topic` with its partition, offset and state (locks that have ended
    /// count as ended); empty for a topic that does not exist.
    pub fn records(&self, topic: &str) -> Vec<(i32, i64, RecordState)> {
        let mut state = self.shared.state();
        state.expire(tokio::time::Instant::now());
        state.records_of(topic)
    }

    /// How many records are in each state now (locks that have ended count as ended).
    pub fn counts(&self) -> StateCounts {
        let mut state = self.shared.state();
        state.expire(tokio::time::Instant::now());
        state.counts()
    }

    /// Totals of fetches, acknowledgements, renewals and lock expiries.
    pub fn stats(&self) -> BrokerStats {
        let mut state = self.shared.state();
        state.expire(tokio::time::Instant::now());
        state.stats()
    }

    /// Every fetch answered so far, in order.
    pub fn fetches(&self) -> Vec<FetchLog> {
        self.shared.state().fetches().to_vec()
    }

    /// Fault injection: while `fail` is true every renewal fails with
    /// [`AckError::LockLost`](crate::source::AckError::LockLost) and the lock is not extended.
    pub fn fail_renewals(&self, fail: bool) {
        self.shared.state().fail_renewals = fail;
    }

    /// Changes the delivery-count limit while members run, as an operator changing the group's
    /// `share.delivery.count.limit` does. It applies to deliveries from now on.
    pub fn set_delivery_limit(&self, limit: u16) {
        self.shared.state().config.delivery_limit = limit;
    }

    /// Fault injection: while `Some`, every fetch fails with an error of that kind, as a broker
    /// that is down ([`ErrorKind::Io`](crate::ErrorKind::Io)) or refuses access
    /// ([`ErrorKind::Authorization`](crate::ErrorKind::Authorization)) answers.
    pub fn fail_fetches(&self, kind: Option<crate::ErrorKind>) {
        self.shared.state().fail_fetches = kind;
    }

    /// Fault injection: while `Some`, every write through the broker as a
    /// [`DelaySink`](crate::delay::DelaySink) fails with an error of that kind (a delay topic
    /// that is down, [`ErrorKind::Io`](crate::ErrorKind::Io), or not writable,
    /// [`ErrorKind::Authorization`](crate::ErrorKind::Authorization)).
    pub fn fail_delay_writes(&self, kind: Option<crate::ErrorKind>) {
        self.shared.state().fail_delay_writes = kind;
    }

    /// Fault injection: while `fail` is true, asking a member for the delivery-count limit
    /// ([`ShareSource::delivery_limit`](crate::source::ShareSource::delivery_limit)) fails, as a
    /// worker without permission to describe the group's configs sees it.
    pub fn fail_limit_reads(&self, fail: bool) {
        self.shared.state().fail_limit_reads = fail;
    }
}

/// The broker as the worker's delay sink: a moved record is produced to its delay topic (created
/// with one partition if it does not exist), where every member fetches it like any other.
#[async_trait::async_trait]
impl crate::delay::DelaySink for MemoryBroker {
    async fn send(&self, record: &crate::delay::DelayedRecord) -> crate::Result<()> {
        if let Some(kind) = self.shared.state().fail_delay_writes {
            return Err(crate::Error::new(
                kind,
                format!("writing to {} failed (injected)", record.topic),
            ));
        }
        let produced = ProducedRecord(NewRecord {
            partition: None,
            key: record.key.clone(),
            value: record.value.clone(),
            headers: record.headers.clone(),
            timestamp: 0,
            undecodable: None,
        });
        self.produce_record(&record.topic, produced);
        Ok(())
    }
}

impl fmt::Debug for MemoryBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state();
        f.debug_struct("MemoryBroker")
            .field("config", &state.config)
            .field("counts", &state.counts())
            .finish()
    }
}

/// A record to [`produce`](MemoryBroker::produce_record), with key, headers, partition and
/// timestamp when the defaults will not do.
#[derive(Debug)]
pub struct ProducedRecord(NewRecord);

impl ProducedRecord {
    /// A record with this value, no key, no headers and timestamp 0.
    pub fn new(value: impl Into<Bytes>) -> Self {
        Self(NewRecord {
            partition: None,
            key: None,
            value: Some(value.into()),
            headers: Vec::new(),
            timestamp: 0,
            undecodable: None,
        })
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.0.key = Some(key.into());
        self
    }

    /// Writes to this partition instead of the next one in turn.
    pub fn partition(mut self, partition: i32) -> Self {
        self.0.partition = Some(partition);
        self
    }

    /// Adds a header.
    pub fn header(mut self, key: &str, value: impl Into<Bytes>) -> Self {
        self.0.headers.push(Header {
            key: Arc::from(key),
            value: Some(value.into()),
        });
        self
    }

    /// Sets the timestamp (milliseconds since the Unix epoch).
    pub fn timestamp(mut self, timestamp: i64) -> Self {
        self.0.timestamp = timestamp;
        self
    }

    /// Makes the record one the source could not decode, as a Kafka source reports a corrupt
    /// batch: delivered with [`Delivery::undecodable`](crate::source::Delivery::undecodable) set
    /// (and whatever value it has standing for the raw bytes), so the worker dead-letters it.
    pub fn undecodable(mut self, error: impl Into<String>, recovered: Recovered) -> Self {
        self.0.undecodable = Some(Arc::new(Undecodable {
            error: error.into(),
            recovered,
        }));
        self
    }
}
