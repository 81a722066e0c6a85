//! Kafka share groups (KIP-932) as a job queue.
//!
//! `worker-core` keeps up to N handlers busy at all times: it fetches exactly as many records as it
//! has free slots, acknowledges each record the moment its handler finishes, renews the locks of slow
//! handlers automatically and never lets the broker silently archive a record.
//!
//! - [`runtime::Worker`] runs tower services ([`Job`] → [`Outcome`]) over a
//!   [`source::ShareSource`].
//! - [`testing::MemoryBroker`] is a share-group broker in memory, for tests without Kafka.

mod error;
mod job;
mod outcome;
pub mod runtime;
pub mod source;
pub mod testing;

pub use error::{Error, ErrorKind, Result};
pub use job::Job;
pub use outcome::Outcome;
pub use runtime::{ShutdownHandle, Summary, Worker, WorkerBuilder};
