//! Every default of the worker's settings, written once: the builders start from these, and the
//! binary's TOML model (worker-cli) refers to them, so the two cannot disagree.

use std::time::Duration;

/// Handlers running at most (`WorkerBuilder::concurrency`, TOML `worker.concurrency`).
pub const CONCURRENCY: usize = 64;
/// The most records one fetch asks for (`max_poll_records`, `worker.max-poll-records`).
pub const MAX_POLL_RECORDS: u32 = 500;
/// When a running record's lock is renewed, as a fraction of the lock (`renew_at`,
/// `worker.renew-at`), and how often after that.
pub const RENEW_AT: f64 = 0.5;
/// How long one handler may run (`job_timeout`, `worker.job-timeout`).
pub const JOB_TIMEOUT: Duration = Duration::from_secs(300);
/// How long shutdown waits for running handlers (`shutdown_grace`, `worker.shutdown-grace`).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// How often a running worker reads the group's delivery-count limit again
/// (`WorkerBuilder::delivery_limit_refresh`).
pub const DELIVERY_LIMIT_REFRESH: Duration = Duration::from_secs(60);
/// The longest wait held in the worker when a delay sink is configured (`max_hold`,
/// `delay.max-hold`).
pub const MAX_HOLD: Duration = Duration::from_secs(300);
/// The furthest ahead a record's `share.not-before` may be (`max_delay`, `worker.max-delay`):
/// one due later is dead-lettered at once.
pub const MAX_DELAY: Duration = Duration::from_secs(30 * 24 * 3600);
/// The first retry's backoff (`Backoff::default`, `retry.backoff-initial`).
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// The longest backoff (`retry.backoff-max`).
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How much each backoff grows over the one before (`Backoff::factor`,
/// `retry.backoff-multiplier`).
pub const BACKOFF_FACTOR: f32 = 2.0;
/// The native client's defaults: client id, fetch wait, request timeout.
pub use worker_kafka::defaults::{CLIENT_ID, MAX_WAIT, REQUEST_TIMEOUT};
/// How often a worker reads its group's membership to share the rate limits among the workers
/// of the fleet (`fleet::Fleet::follow`): a worker that joins or leaves changes every other
/// worker's share within this.
pub const FLEET_REFRESH: Duration = Duration::from_secs(2);
/// How often a worker writes its presence heartbeat on the control topic, when it shares rates
/// through it (`fleet` presence).
pub const MEMBER_HEARTBEAT: Duration = Duration::from_secs(1);
/// A presence heartbeat renews the lease only if it is read back within this.
pub const MEMBER_ACK: Duration = Duration::from_secs(1);
/// How long a presence heartbeat read back in time lets the worker start rate-limited records:
/// the membership interval. A member silent for this plus [`MEMBER_ACK`] is dropped by the
/// others, who then take its share: a member killed mid-run gives its share back within two of
/// these.
pub const MEMBER_LEASE: Duration = Duration::from_secs(3);
/// How long a member gone silent stays on the control topic before a survivor tombstones its
/// key (compaction then removes it).
pub const MEMBER_FORGET: Duration = Duration::from_secs(60);
/// How long a job cancellation stays in force (`share-worker cancel --for`,
/// `ControlTopic::cancel`): long enough for a job enqueued a week ahead.
pub const CANCEL_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// A circuit breaker's defaults (`Breaker::default`, `route.breaker`): half of at least 20
/// calls within 30 s failing opens it for 30 s.
pub const BREAKER_FAILURE_RATIO: f64 = 0.5;
/// See [`BREAKER_FAILURE_RATIO`].
pub const BREAKER_MIN_CALLS: u32 = 20;
/// See [`BREAKER_FAILURE_RATIO`].
pub const BREAKER_WINDOW: Duration = Duration::from_secs(30);
/// See [`BREAKER_FAILURE_RATIO`].
pub const BREAKER_OPEN_FOR: Duration = Duration::from_secs(30);
/// How often the lag gauge is sampled while the group's lag changes (`LagMonitor`); once it
/// holds still, every `telemetry.lag-interval`.
pub const LAG_WHILE_CHANGING: Duration = Duration::from_secs(2);
