//! Kafka share groups (KIP-932) as a job queue.
//!
//! `worker-core` keeps up to N handlers busy at all times: it fetches exactly as many records as it
//! has free slots, acknowledges each record the moment its handler finishes, renews the locks of slow
//! handlers automatically and never lets the broker silently archive a record.
//!
//! - [`Worker`] runs tower services ([`Job`] → [`Outcome`]) over a [`source::ShareSource`]: see
//!   [`runtime`] for the model (slots, renewal, shutdown).
//! - [`policy`]: retries with backoff, the last attempt to the dead-letter sink ([`dlq`]).
//! - [`testing::MemoryBroker`] is a share-group broker in memory, for tests without Kafka, and
//!   [`testing::MemoryDlq`] a dead-letter sink in memory.
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use tower::service_fn;
//! use worker_core::testing::MemoryBroker;
//! use worker_core::{Job, Outcome, Worker};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> worker_core::Result<()> {
//! let broker = MemoryBroker::new();
//! for n in 0..100 {
//!     broker.produce("webhooks", format!("event {n}"));
//! }
//!
//! async fn deliver(job: Job) -> Result<Outcome, Infallible> {
//!     tokio::time::sleep(Duration::from_millis(50)).await; // the HTTP call
//!     Ok(match job.attempt() {
//!         1..=3 => Outcome::Accept,
//!         _ => Outcome::reject("gave up"),
//!     })
//! }
//!
//! let worker = Worker::builder(broker.member("worker-1"))
//!     .route("webhooks", service_fn(deliver))
//!     .concurrency(32)
//!     .build()?;
//! let shutdown = worker.shutdown_handle(); // or `worker.run_until_signal()`
//! let running = tokio::spawn(worker.run());
//!
//! while broker.counts().acknowledged < 100 {
//!     tokio::time::sleep(Duration::from_millis(10)).await;
//! }
//! shutdown.shutdown();
//! let summary = running.await.expect("the worker task")?;
//! assert_eq!(summary.accepted, 100);
//! # Ok(())
//! # }
//! ```

pub mod config;
pub mod dlq;
mod error;
mod job;
pub mod kafka;
mod outcome;
pub mod policy;
pub mod runtime;
pub mod source;
pub mod testing;

pub use error::{Error, ErrorKind, Result};
pub use job::Job;
pub use outcome::Outcome;
pub use runtime::{ShutdownHandle, Summary, Worker, WorkerBuilder};
