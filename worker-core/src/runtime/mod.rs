//! The worker runtime: a continuous, bounded pipeline from a [`ShareSource`] to tower services.
//!
//! A [`Worker`] keeps up to `concurrency` handlers busy. Each record holds one slot from the fetch
//! that acquired it until the broker has answered its acknowledgement. The worker fetches exactly
//! min(`concurrency` + ahead − records not yet handed to the source for acknowledgement,
//! `max_poll_records` × the requests a fetch sends (one per partition leader)) records, never 0,
//! and a finished record's acknowledgement rides on (or overlaps) the fetch of its successor
//! instead of delaying it by a round trip. "Ahead" is what the handlers finish in about two fetch
//! round trips, measured as they run, at most `concurrency` per partition leader, 0 for handlers
//! slower than that and for workers of several routes: those records wait in their route's queue
//! (locks renewed) and start the moment a handler ends, so a finished handler's slot does not idle
//! for a round trip; a fleet-wide pause of the route takes them out of the queue to wait for its
//! end. A worker holds at most (1 + leaders) × `concurrency` unfinished records, and its slot
//! table bounds everything it holds, those whose acknowledgements are on the way included, at
//! three times that; there is no unbounded queue anywhere.
//!
//! - **Outcome → acknowledgement.** The moment a handler returns, its [`Outcome`](crate::Outcome)
//!   becomes ACCEPT, RELEASE (`Retry`) or REJECT and goes to the source, which sends it with the
//!   next request: no batch barrier, a slow record delays nobody else.
//! - **Renewal.** A record still held at `renew_at` × its lock duration (default half) is renewed,
//!   and again each time that much more has passed; due renewals are issued together. If a renewal
//!   fails the job's [`CancellationToken`](tokio_util::sync::CancellationToken) fires and its late
//!   outcome is dropped and counted as a possible duplicate: another worker may have it by now.
//! - **Failures.** Outcomes go through the [failure policy](crate::policy): a retryable failure
//!   (`Retry`, a panic, running past `job_timeout`) below the last attempt is held for a backoff
//!   (its lock renewed) and then released; a failure on the last attempt, an undecodable payload, an
//!   explicit reject and a record that arrives past its attempts go to the dead-letter sink and are
//!   rejected once it confirmed. The worker never dies of a handler. A record of a topic with no
//!   route is released with a warning.
//! - **Waiting.** A record whose `share.not-before` is later waits in its slot (lock renewed) up
//!   to `max_hold`; records over a [`RateLimit`] (the worker's, its route's or its key's) wait
//!   for a permit, and records of a busy key ([`Route::key_concurrency`]) for their turn, without
//!   ever being released for it. With a delay sink ([`WorkerBuilder::delay`]) longer waits, long
//!   retries, retries beyond `max_held` and a hot key's surplus move to the route's delay topic
//!   and come back when due, their attempts counted across the move (see [`crate::delay`]).
//!   Waiting records count against the slots; at most an eighth of the concurrency (at least 2)
//!   may wait for one key and half of it for keys in all, so a hot key never takes the slots the
//!   other keys need.
//! - **Shutdown.** On [`ShutdownHandle::shutdown`] (or ctrl-c / SIGTERM with
//!   [`Worker::run_until_signal`]) the worker stops fetching, waits up to `shutdown_grace` for
//!   running handlers, acknowledges what finished, cancels and releases the rest, then closes the
//!   source. [`Worker::run`] returns a [`Summary`].
//! - **Execution.** Every handler call runs as a tokio task of its own on the runtime the worker
//!   runs in, so handler CPU work uses every worker thread. The dispatcher's own task only
//!   fetches, hands out, renews, acknowledges and keeps deadlines: a handler that blocks its thread
//!   stops only itself. Still, move blocking work (a synchronous client, heavy CPU) to
//!   [`tokio::task::spawn_blocking`]: when every runtime thread is blocked the dispatcher cannot
//!   run either. It notices when it runs late by more than a quarter of the shortest lock (at
//!   least 500 ms), logs and counts the stall ([`WorkerHealth::stalls`],
//!   `share_worker.dispatcher.stalls`) and sends the due renewals first. Where the dispatcher
//!   itself runs is the caller's choice: `worker.run().await` inside `#[tokio::main]` keeps it on
//!   the main thread (`block_on`), which handlers never take, at the cost of a cross-thread wakeup
//!   per event; `tokio::spawn(worker.run())` puts it on the runtime's worker threads, slightly
//!   cheaper per record, sharing them with the handlers.
//! - **Fair routes.** With several routes each keeps a reserve of the slots: a route holds at most
//!   `concurrency` − (routes − 1) × max(1, `concurrency` / (4 × routes)) unfinished records, and
//!   while it does its topic is paused at the source ([`ShareSource::pause`]), so a route whose
//!   handlers are stuck leaves the other topics flowing. One route may use every slot.
//! - **Telemetry.** Every record gets a `process` span (OpenTelemetry messaging conventions, parent
//!   from its `traceparent` header) that the handler runs inside, and the worker records
//!   OpenTelemetry metrics: see [`telemetry`](crate::telemetry).
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use tower::service_fn;
//! use worker_core::runtime::Worker;
//! use worker_core::testing::MemoryBroker;
//! use worker_core::{Job, Outcome};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> worker_core::Result<()> {
//! let broker = MemoryBroker::new();
//! broker.produce("sms", "+15550100: hello");
//!
//! let worker = Worker::builder(broker.member("worker-1"))
//!     .route("sms", service_fn(|job: Job| async move {
//!         let _text = job.payload();
//!         Ok::<_, Infallible>(Outcome::Accept)
//!     }))
//!     .concurrency(16)
//!     .build()?;
//!
//! let shutdown = worker.shutdown_handle();
//! let running = tokio::spawn(worker.run());
//! while broker.counts().acknowledged < 1 {
//!     tokio::time::sleep(Duration::from_millis(10)).await;
//! }
//! shutdown.shutdown();
//! let summary = running.await.expect("the worker task")?;
//! assert_eq!(summary.accepted, 1);
//! # Ok(())
//! # }
//! ```

mod batch;
mod breaker;
mod builder;
mod deadlines;
mod delivery_limit;
mod dispatch;
mod handler_task;
mod health;
mod holds;
mod keys;
mod lifecycle;
mod observer;
mod rate;
mod receipt;
mod route;
mod routes;
mod settings;
mod shutdown;
mod slots;
mod startup;
mod summary;
mod writes;

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;

use opentelemetry::metrics::Meter;

use crate::Result;
use crate::source::ShareSource;
use crate::telemetry::metrics::Metrics;

pub use batch::Batch;
pub use breaker::{Breaker, PROBE_CALLS};
pub use builder::WorkerBuilder;
pub use health::{PROGRESS_EVERY, WorkerHealth, WorkerProgress};
pub use rate::RateLimit;
pub use route::Route;
pub use shutdown::ShutdownHandle;
pub use summary::{AckFailures, DeadLetterCounts, Summary};

use builder::RouteService;
use dispatch::Dispatcher;
use routes::Routes;
use settings::Settings;

/// Runs handler services for the records of a [`ShareSource`]. See the [module docs](self).
pub struct Worker<S> {
    source: S,
    routes: Routes<RouteService>,
    config: Settings,
    shutdown: ShutdownHandle,
    health: WorkerHealth,
    meter: Meter,
    /// The batch routes' counts.
    batches: Vec<Arc<batch::BatchStats>>,
    /// The group's periodic jobs, fired while the worker runs.
    #[cfg(feature = "rdkafka")]
    cron: Option<crate::cron::CronScheduler>,
}

impl<S: ShareSource> Worker<S> {
    /// Starts building a worker that takes its records from `source`.
    pub fn builder(source: S) -> WorkerBuilder<S> {
        WorkerBuilder::new(source)
    }

    /// A handle that stops this worker gracefully.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// What the worker says about itself while it runs, for liveness and readiness probes.
    pub fn health(&self) -> WorkerHealth {
        self.health.clone()
    }

    /// Runs until shut down through a [`ShutdownHandle`] (or until the source closes), then closes
    /// the source and returns what the worker did.
    ///
    /// It first asks the source for the group's delivery-count limit
    /// ([`ShareSource::delivery_limit`]) to resolve `max_attempts` (see [`crate::policy`]).
    ///
    /// Fails with [`ErrorKind::Closed`](crate::ErrorKind::Closed) if the source closed under the
    /// worker, or with the source's error if closing it failed; the summary is logged either way.
    ///
    /// Stop it with the handle rather than by dropping this future: dropping it abandons the
    /// records in flight without releasing them (their locks run out at the broker).
    pub async fn run(self) -> Result<Summary> {
        let Worker {
            source,
            routes,
            mut config,
            shutdown,
            health,
            meter,
            batches,
            #[cfg(feature = "rdkafka")]
            cron,
        } = self;
        let limit = match startup::probe(&source, &config, &routes).await {
            Ok(found) => {
                config.renewal = found.renewal;
                config.broker_writes_letters = found.broker_writes_letters;
                found.delivery_limit
            }
            Err(err) => {
                if let Err(close) = source.close().await {
                    tracing::warn!(error = %close, "closing the source after a failed start");
                }
                return Err(err);
            }
        };
        if config.policy.dlq.is_none() && !config.broker_writes_letters {
            tracing::warn!(
                "no dead-letter sink configured: records that use up their attempts, do not decode or are rejected will be REJECTed (archived by the broker) and only logged"
            );
        }
        let metrics = Metrics::new(&meter, routes.topics());
        for stats in &batches {
            stats.attach(&meter);
        }
        let shares = routes.shares();
        let _route_slots = meter
            .u64_observable_gauge(crate::telemetry::names::ROUTE_SLOTS)
            .with_description(
                "Unfinished records the route may hold now: its share of the slots (lanes move it).",
            )
            .with_unit("{record}")
            .with_callback(move |observer| {
                let shares = shares.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                for (topic, slots) in shares.iter() {
                    observer.observe(
                        *slots as u64,
                        &[opentelemetry::KeyValue::new(
                            crate::telemetry::names::TOPIC,
                            topic.to_string(),
                        )],
                    );
                }
            })
            .build();
        let _control_commands = config.controls.as_ref().map(|controls| {
            let counts = controls.command_counts();
            meter
                .u64_observable_counter(crate::telemetry::names::CONTROL_COMMANDS)
                .with_description("Commands read from the group's control topic.")
                .with_callback(move |observer| {
                    let (obeyed, refused) = counts();
                    let result = |r| {
                        [opentelemetry::KeyValue::new(
                            crate::telemetry::names::RESULT,
                            r,
                        )]
                    };
                    observer.observe(obeyed, &result("obeyed"));
                    observer.observe(refused, &result("refused"));
                })
                .build()
        });
        let dispatcher = Dispatcher::new(
            &source,
            &config,
            routes,
            shutdown.token().clone(),
            limit,
            metrics,
            health,
        );
        #[cfg(feature = "rdkafka")]
        let cron = cron.map(|scheduler| {
            scheduler.attach(&meter);
            let stop = shutdown.token().child_token();
            let stopping = stop.clone();
            let thread = tokio::task::spawn_blocking(move || scheduler.run_blocking(&stopping));
            (stop, thread)
        });
        let (mut summary, fatal) = dispatcher.run().await;
        #[cfg(feature = "rdkafka")]
        if let Some((stop, thread)) = cron {
            stop.cancel();
            if thread.await.is_err() {
                tracing::error!("cron: the scheduler's thread panicked");
            }
        }
        for (calls, failed) in batches.iter().map(|stats| stats.counts()) {
            summary.batches += calls;
            summary.failed_batches += failed;
        }
        let closed = source.close().await;
        tracing::info!(?summary, "worker stopped");
        if let Some(err) = fatal {
            return Err(err);
        }
        closed.map(|()| summary)
    }

    /// [`run`](Self::run), shutting down gracefully on ctrl-c or SIGTERM.
    pub async fn run_until_signal(self) -> Result<Summary> {
        let handle = self.shutdown_handle();
        let run = self.run();
        tokio::pin!(run);
        tokio::select! {
            result = &mut run => return result,
            () = shutdown::signal() => handle.shutdown(),
        }
        run.await
    }
}

impl<S: fmt::Debug> fmt::Debug for Worker<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("source", &self.source)
            .field("config", &self.config)
            .field("topics", &self.routes.topics().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}
