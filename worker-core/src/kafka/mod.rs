//! The native share-group client (KIP-932) behind [`ShareSource`](crate::source::ShareSource).
//!
//! It speaks the share RPCs itself: ShareGroupHeartbeat membership, one share session per leader
//! broker, ShareFetch v2 in `record_limit` mode sized to what the caller asks for, acknowledgements
//! piggy-backed on fetches or sent with ShareAcknowledge v2, and RENEW. Fetches and
//! acknowledgements are pipelined: records may be settled in any order while further fetches go
//! on. See `shared/design/PROTOCOL.md` for the wire facts.

mod ack_queue;
mod acks;
mod admin;
#[doc(hidden)]
pub mod __bench {
    //! Benchmark entry points; not public API.
    pub use super::bench_support::{decode_acquired, sample_records};
}
mod bench_support;
mod cluster;
mod codec;
mod config;
mod connection;
mod membership;
mod messages;
mod records;
mod session;
mod source;
mod wire;

#[cfg(test)]
mod fuzz;

pub use admin::Admin;
pub use config::{KafkaConfig, KafkaSourceBuilder};
pub use source::KafkaSource;
