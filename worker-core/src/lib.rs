//! Kafka share groups (KIP-932) as a job queue.
//!
//! `worker-core` keeps up to N handlers busy at all times: it fetches exactly as many records as it
//! has free slots, acknowledges each record the moment its handler finishes, renews the locks of slow
//! handlers automatically and never lets the broker silently archive a record.

mod error;
pub mod kafka;
pub mod source;

pub use error::{Error, ErrorKind, Result};
