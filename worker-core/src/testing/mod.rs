//! Test your handlers without Kafka: [`MemoryBroker`] has share-group semantics in memory.
//!
//! The broker keeps topics and partitions of records and gives each record the states a Kafka
//! share partition gives it: **available**, **acquired** (locked for one member until its
//! acquisition lock ends), **acknowledged** and **archived**. It counts deliveries and archives a
//! record instead of making it available again once its delivery count reaches the limit. It runs on
//! tokio time, so `#[tokio::test(start_paused = true)]` tests run hours of lock expiry in
//! milliseconds.
//!
//! Each [`MemoryBroker::member`] is one consumer of the share group and implements
//! [`ShareSource`](crate::source::ShareSource): hand it to a [`Worker`](crate::runtime::Worker).
//!
//! - **Producing:** [`MemoryBroker::create_topic`], [`MemoryBroker::produce`] and
//!   [`MemoryBroker::produce_record`] (key, headers, partition, timestamp).
//! - **Looking inside:** [`MemoryBroker::record_state`], [`MemoryBroker::delivery_count`],
//!   [`MemoryBroker::counts`] (records per state), [`MemoryBroker::stats`] (acknowledgements,
//!   renewals, lock expiries), [`MemoryBroker::fetches`] (every fetch's size), and
//!   [`MemoryMember::held`].
//! - **Faults:** [`MemoryBroker::fail_renewals`] (locks get lost), [`MemoryMember::reset_session`]
//!   (a disconnect), [`MemoryBrokerBuilder::ack_latency`] (slow acknowledgements),
//!   [`ShareSource::close`](crate::source::ShareSource::close) on a member (it leaves the group).
//!
//! [`MemoryDlq`] is a dead-letter sink in memory (with failure injection) to go with it.
//!
//! Every member fetches from every topic; records are acquired lowest offset first, each fetch
//! starting at the next partition in turn.
//!
//! ```
//! use std::time::Duration;
//! use worker_core::source::{AckKind, ShareSource};
//! use worker_core::testing::{MemoryBroker, RecordState};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> worker_core::Result<()> {
//! let broker = MemoryBroker::builder()
//!     .lock_duration(Duration::from_secs(1))
//!     .build();
//! broker.produce("sms", "hello");
//!
//! let member = broker.member("worker-1");
//! let batch = member.fetch(10).await?;
//! assert_eq!(batch.len(), 1);
//! assert_eq!(broker.record_state("sms", 0, 0), Some(RecordState::Acquired));
//!
//! member.acknowledge(&batch[0].id, AckKind::Accept).await.unwrap();
//! assert_eq!(broker.record_state("sms", 0, 0), Some(RecordState::Acknowledged));
//! # Ok(())
//! # }
//! ```

mod broker;
mod dlq;
mod member;
mod state;

pub use broker::{MemoryBroker, MemoryBrokerBuilder, ProducedRecord};
pub use dlq::MemoryDlq;
pub use member::MemoryMember;

use std::sync::Arc;

use tokio::time::Instant;

/// Where a record is in its share-group life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordState {
    /// Waiting to be acquired by any member.
    Available,
    /// Locked for one member until it is acknowledged or its lock ends.
    Acquired,
    /// Accepted: done for good.
    Acknowledged,
    /// Rejected, or released (or its lock ended) at the delivery limit: never delivered again.
    Archived,
}

/// How many records are in each [`RecordState`], over all topics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateCounts {
    /// Records waiting to be acquired.
    pub available: usize,
    /// Records locked for a member.
    pub acquired: usize,
    /// Records accepted.
    pub acknowledged: usize,
    /// Records archived.
    pub archived: usize,
}

/// Totals of what the broker was asked to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BrokerStats {
    /// Fetches answered.
    pub fetches: u64,
    /// Acknowledgements of kind ACCEPT that took effect.
    pub accepts: u64,
    /// Acknowledgements of kind RELEASE that took effect.
    pub releases: u64,
    /// Acknowledgements of kind REJECT that took effect.
    pub rejects: u64,
    /// Renewals that took effect.
    pub renewals: u64,
    /// Renewals that failed (lock lost, injected failure, ...).
    pub renew_failures: u64,
    /// Acquisition locks that ended without an acknowledgement.
    pub lock_expiries: u64,
}

/// One fetch as the broker saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchLog {
    /// The member's name.
    pub member: Arc<str>,
    /// The `max_records` it asked for.
    pub requested: u32,
    /// How many records it got.
    pub returned: usize,
    /// When the fetch returned.
    pub at: Instant,
}

#[cfg(test)]
mod tests;
