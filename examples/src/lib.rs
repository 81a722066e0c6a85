//! Runnable share-group workers, each a library module (so the integration tests drive the same
//! code) and a binary in `src/bin/`:
//!
//! - [`sms`]: an SMS sender written as a `#[handler]` fn taking a JSON payload; its gateway is slow,
//!   sometimes answers 429 (retried after the gateway's `Retry-After`) and refuses invalid numbers
//!   (dead-lettered).
//! - [`webhook`]: a webhook notifier written as a plain async fn wrapped in tower layers (a timeout
//!   and a rate limit); an endpoint that hangs is cut off by the timeout and retried.
//! - [`email`]: a bulk e-mail sender written as a batch handler (`#[handler(batch(...))]`): up to
//!   50 messages per call to a bulk API that answers per message.
//! - [`secured`]: a notification worker on a secured cluster (TLS, SASL), configured from
//!   environment variables; the source and the dead-letter sink share one security setting.
//!
//! The SMS and webhook examples simulate their remote service in-process so they run anywhere the
//! local broker runs.

/// The Rust examples of the docs, compiled as doc tests so that they cannot drift (here, where
/// they can use the examples' gateway and job types).
#[cfg(doctest)]
mod docs {
    #[doc = include_str!("../../docs/library.md")]
    struct Library;
    #[doc = include_str!("../../docs/handlers.md")]
    struct Handlers;
    #[doc = include_str!("../../docs/jobs.md")]
    struct Jobs;
    #[doc = include_str!("../../docs/security.md")]
    struct Security;
    #[doc = include_str!("../../docs/observability.md")]
    struct Observability;
    #[doc = include_str!("../../docs/control.md")]
    struct Control;
    #[doc = include_str!("../../docs/lanes.md")]
    struct Lanes;
    #[doc = include_str!("../../docs/batches.md")]
    struct Batches;
    #[doc = include_str!("../../docs/cron.md")]
    struct Cron;
}

pub mod email;
pub mod secured;
pub mod sms;
pub mod webhook;

use std::time::Duration;

use worker_core::policy::Backoff;

/// The retry backoff both examples use: short, so that a demo finishes quickly.
pub fn demo_backoff() -> Backoff {
    Backoff::exponential(Duration::from_millis(200), Duration::from_secs(5))
}
