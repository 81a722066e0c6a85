//! A native Apache Kafka share-group client (KIP-932), in pure Rust.
//!
//! It speaks the share RPCs itself: ShareGroupHeartbeat membership, one share session per leader
//! broker, ShareFetch v2 in `record_limit` mode sized to what the caller asks for, acknowledgements
//! piggy-backed on fetches or sent with ShareAcknowledge v2, and RENEW. Fetches and
//! acknowledgements are pipelined: records may be settled in any order while further fetches go
//! on. See `docs/protocol.md` for the wire facts.
//!
//! Its connections are secured by one [`security::Security`] (TLS with rustls, SASL PLAIN,
//! SCRAM and OAUTHBEARER). [`Admin`] reads and sets what a share-group worker needs: group
//! configs, offsets and lag, topics, the broker-side dead-letter queue. `worker-core` runs its
//! worker on this client through the `ShareSource` port.
//!
//! ```no_run
//! # async fn run() -> worker_kafka::Result<()> {
//! use worker_kafka::{AckKind, Admin, KafkaSource};
//!
//! // Job queues want every record, including those produced before the group first fetched.
//! let admin = Admin::connect("127.0.0.1:9092").await?;
//! admin.set_group_config("sms-workers", "share.auto.offset.reset", "earliest").await?;
//!
//! let source = KafkaSource::builder("127.0.0.1:9092", "sms-workers").topic("sms").build().await?;
//! for delivery in source.fetch(10).await? {
//!     // ... handle it, then settle it; the ack rides on the next fetch.
//!     let receipt = source.acknowledge(&delivery.id, AckKind::Accept);
//!     tokio::spawn(async move {
//!         if let Err(e) = receipt.await {
//!             eprintln!("possible duplicate: {e}");
//!         }
//!     });
//! }
//! source.close().await?;
//! # Ok(()) }
//! ```

mod ack_queue;
mod acks;
mod admin;
mod authenticate;
pub mod defaults;
mod delivery;
mod error;
mod receipt;
pub mod security;
/// Entry points for this workspace's criterion benchmarks (feature `bench-internals`); not a
/// stable API.
#[cfg(feature = "bench-internals")]
pub mod bench {
    pub use super::bench_support::{decode_acquired, sample_records};
}
#[cfg(feature = "bench-internals")]
mod bench_support;
mod cluster;
mod codec;
mod config;
mod connection;
mod error_codes;
mod fetch_response;
mod fetches;
mod membership;
mod messages;
mod records;
mod session;
mod share_session;
mod source;
#[cfg(feature = "test-util")]
pub mod test_util;
mod transport;
mod wire;

#[cfg(test)]
mod fuzz;

pub use admin::{
    Admin, BrokerDlq, DeliveryLimit, DeliveryLimitSource, DlqTopicState, GroupRenewal, LagSource,
    PartitionOffsets, ShareGroupDescription, ShareGroupMember,
};
pub use config::{KafkaConfig, KafkaSourceBuilder, OffsetReset};
pub use delivery::{
    AckError, AckKind, BrokerDeadLetters, Delivery, DeliveryId, Header, Lease, Recovered, Renewal,
    Undecodable,
};
pub use error::{Error, ErrorKind, Result};
pub use receipt::{AckReceipt, AckSender};
pub use source::KafkaSource;
