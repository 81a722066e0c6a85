//! [`WorkerBuilder`]: source, routes and settings in; a validated [`Worker`] out.

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::Meter;
use tower::Service;
use tower::util::BoxService;

use crate::delay::{DelaySink, DelayTopic};
use crate::dlq::DlqSink;
use crate::handler::JobDefinition;
use crate::policy::Backoff;
use crate::source::ShareSource;
use crate::{Error, ErrorKind, Job, Outcome, Result};

use super::Worker;
use super::rate::RateLimit;
use super::route::Route;
use super::routes::Routes;
use super::settings::{DelayConfig, Settings};
use super::shutdown::ShutdownHandle;

/// The service type a route runs, boxed so that users name at most `Worker<S>`.
pub(crate) type RouteService = BoxService<Job, Outcome, Infallible>;

/// Builds a [`Worker`]: made by [`Worker::builder`].
pub struct WorkerBuilder<S> {
    source: S,
    config: Settings,
    meter: Option<Meter>,
    /// The routes, with their own settings, checked at `build`.
    routes: Vec<Route>,
    /// The delay topic template, applied at `build` with the sink.
    delay_topic: DelayTopic,
    /// The group's periodic jobs.
    #[cfg(feature = "rdkafka")]
    cron: Option<crate::cron::CronScheduler>,
}

impl<S: ShareSource> WorkerBuilder<S> {
    pub(crate) fn new(source: S) -> Self {
        Self {
            source,
            config: Settings::default(),
            meter: None,
            routes: Vec::new(),
            delay_topic: DelayTopic::default(),
            #[cfg(feature = "rdkafka")]
            cron: None,
        }
    }

    /// Takes part in firing the group's periodic jobs ([`cron`](crate::cron)): every worker
    /// given the scheduler joins the election, one at a time fires each tick. Default: none.
    #[cfg(feature = "rdkafka")]
    pub fn cron(mut self, scheduler: crate::cron::CronScheduler) -> Self {
        self.cron = Some(scheduler);
        self
    }

    /// Routes a job definition (a `#[handler]` fn, or [`define_job`](crate::handler::define_job))
    /// on its default topic, giving its handler `state`: [`Route::job`] with the route's default
    /// settings.
    pub fn job<T, St, D>(self, definition: D, state: St) -> Self
    where
        D: JobDefinition<T, St>,
    {
        self.add_route(Route::job(definition, state))
    }

    /// Runs `service` for every record of `topic`: [`Route::new`] with the route's default
    /// settings.
    ///
    /// Records of topics without a route are released (and a warning logged): the broker delivers
    /// them again until their delivery limit archives them, so give every subscribed topic a route.
    pub fn route<T>(self, topic: impl Into<Arc<str>>, service: T) -> Self
    where
        T: Service<Job, Response = Outcome, Error = Infallible> + Send + 'static,
        T::Future: Send + 'static,
    {
        self.add_route(Route::new(topic, service))
    }

    /// Adds `route`, with its own timeout and limits. One route per topic.
    pub fn add_route(mut self, route: Route) -> Self {
        self.routes.push(route);
        self
    }

    /// How many handlers run at most. The worker holds this many unfinished records, plus (with
    /// one route, while handlers are fast) about what they finish in two fetch round trips, at
    /// most as many again per partition leader, fetched ahead so that a handler that ends starts
    /// its next record at once (each record holds a slot from fetch until its acknowledgement is
    /// answered).
    /// Default 64.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.config.concurrency = concurrency;
        self
    }

    /// The most records one fetch asks for from each broker (a fetch sends one request to each
    /// leader of the worker's partitions); a fetch asks for min(free handler slots, this × the
    /// leaders). Default 500.
    pub fn max_poll_records(mut self, max: u32) -> Self {
        self.config.max_poll_records = max;
        self
    }

    /// When a running record's lock is renewed, as a fraction of the lock duration; it is renewed
    /// again each time that much more has passed, until the job ends or times out. Between 0 and 1
    /// (exclusive); default 0.5.
    pub fn renew_at(mut self, fraction: f64) -> Self {
        self.config.renew_at = fraction;
        self
    }

    /// How long one handler may run before it is cancelled and its record retried. Default 5 min.
    pub fn job_timeout(mut self, timeout: Duration) -> Self {
        self.config.job_timeout = timeout;
        self
    }

    /// How long shutdown waits for running handlers before cancelling and releasing them.
    /// Default 30 s.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.config.shutdown_grace = grace;
        self
    }

    /// How many times a handler runs for one record at most (its delivery count is the attempt
    /// number). Default: the group's delivery-count limit − 1, read from the source when the worker
    /// starts and again while it runs, so the last delivery is reserved for the dead-letter
    /// hand-off. A value at or above the limit is capped to it − 1.
    /// See [`crate::policy`].
    pub fn max_attempts(mut self, attempts: u16) -> Self {
        self.config.policy.max_attempts = Some(attempts);
        self
    }

    /// The group's delivery-count limit to assume when it cannot be read (no permission to
    /// describe the group's configs, say). Without it such a worker does not start: guessing a
    /// limit above the real one lets retries run into the broker's silent archive. Set it to the
    /// group's real limit; at least 2.
    pub fn assume_delivery_limit(mut self, limit: u16) -> Self {
        self.config.policy.assumed_limit = Some(limit);
        self
    }

    /// Follows the group's fleet-wide controls (see [`control`](crate::control)): a route paused
    /// there is not fetched from until it is resumed. Default: none.
    pub fn controls(mut self, controls: crate::control::Controls) -> Self {
        self.config.controls = Some(controls);
        self
    }

    /// Shares the worker-wide and route rate limits with the rest of `fleet`: each worker takes
    /// its part of every rate, so the rates hold for the whole group (see [`fleet`](crate::fleet);
    /// per-key limits stay per worker). Default: none — each worker takes the whole rate.
    pub fn fleet(mut self, fleet: crate::fleet::Fleet) -> Self {
        self.config.fleet = Some(fleet);
        self
    }

    /// How often the group's delivery-count limit is read again while the worker runs (default
    /// 1 min, at least 1 s): a change (Kafka 4.3's group-level `share.delivery.count.limit`) is
    /// logged and applies to the next decisions.
    pub fn delivery_limit_refresh(mut self, every: Duration) -> Self {
        self.config.limit_refresh = every;
        self
    }

    /// How long a retryable failure waits before its next attempt, from its delivery count
    /// (default: 1 s doubling up to 5 min, with jitter). A handler's
    /// [`Outcome::retry_after`] is used instead, capped at the backoff's max.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.config.policy.backoff = backoff;
        self
    }

    /// How many records wait in the worker at once, at most, for a backoff or their not-before
    /// (default: half the concurrency, at least 1). Held records keep their locks and slots of
    /// their own: they never take the room of the handlers' work. A retry beyond this is
    /// released at once, without a backoff, and counted in
    /// [`Summary::held_overflow`](super::Summary::held_overflow) (with a delay sink it moves
    /// instead); 0 releases every retry at once.
    pub fn max_held(mut self, max: usize) -> Self {
        self.config.policy.max_held = Some(max);
        self
    }

    /// Where records go that must not be retried again: failures on the last attempt, records that
    /// arrive past their attempts (`delivery_limit`), undecodable payloads and explicit rejects.
    /// A record is REJECTed only after the sink confirmed its write; while the sink fails, such
    /// records keep their locks and the worker fetches nothing new.
    ///
    /// **Without a sink those records are REJECTed at once and only logged**: the broker archives
    /// them and their payloads are kept nowhere. Configure one in production.
    pub fn dlq(mut self, sink: impl DlqSink) -> Self {
        self.config.policy.dlq = Some(Arc::new(sink));
        self
    }

    /// Lets the broker write the dead letters (Kafka 4.4+, KIP-1191), instead of a sink: every record
    /// that would go to the sink is REJECTed at once, and the broker writes it to the group's
    /// dead-letter topic (`errors.deadletterqueue.topic.name`), with its `__dlq.errors.*` headers.
    /// The worker's reason and error are not in the broker's letter: each such REJECT is logged
    /// with the record's topic, partition and offset, the reason and the error, and counted in
    /// `share_worker_dlq_broker_handoffs_total{topic,reason}`
    /// ([`Summary::dlq_broker_handoffs`](super::Summary::dlq_broker_handoffs)).
    ///
    /// The worker refuses to start unless the source says the broker writes this group's dead
    /// letters ([`ShareSource::broker_dlq`](crate::source::ShareSource::broker_dlq)): a broker
    /// older than 4.4, a group without a dead-letter topic, or a topic the broker would refuse.
    /// Unlike a sink, the broker does not confirm a letter before it archives the record: a write
    /// that fails later (the topic deleted, say) is only in the broker's log. Not with
    /// [`dlq`](Self::dlq) (every letter would be written twice) nor with `dlq_on_reject(false)`
    /// (the broker dead-letters every REJECT).
    pub fn broker_dlq(mut self) -> Self {
        self.config.policy.broker_dlq = true;
        self
    }

    /// Whether an explicit [`Outcome::Reject`] goes to the dead-letter sink (reason `rejected`)
    /// before its REJECT. Default true; false makes it a plain REJECT.
    pub fn dlq_on_reject(mut self, on: bool) -> Self {
        self.config.policy.dlq_on_reject = on;
        self
    }

    /// How long to wait before writing again to a failing dead-letter sink (default: 500 ms
    /// doubling up to 30 s, with jitter).
    pub fn dlq_backoff(mut self, backoff: Backoff) -> Self {
        self.config.policy.dlq_backoff = backoff;
        self
    }

    /// How long one dead-letter write may take before it counts as failed (default 60 s). A write
    /// that timed out may still land: the record can then be dead-lettered twice, never zero times.
    pub fn dlq_timeout(mut self, timeout: Duration) -> Self {
        self.config.policy.dlq_timeout = timeout;
        self
    }

    /// Moves long waits out of the worker through `sink` (a
    /// [`JobProducer`](crate::produce::JobProducer)): records due later than
    /// [`max_hold`](Self::max_hold), retries whose backoff is longer, retries that find
    /// [`max_held`](Self::max_held) records already held, and records of a key that has too many
    /// waiting. Each goes to its route's delay topic ([`delay_topic`](Self::delay_topic), by
    /// default `{topic}.delay`), and is ACCEPTed only once the copy is confirmed. See
    /// [`crate::delay`].
    ///
    /// **The source must subscribe to the delay topics too** (e.g.
    /// [`DelayTopics::delay_topics`](crate::kafka::DelayTopics::delay_topics)):
    /// their records run on their origin's route when they are due. Without a delay sink a wait
    /// (up to [`max_delay`](Self::max_delay)) is held in the worker while
    /// [`max_held`](Self::max_held) leaves room, and released for another worker otherwise.
    pub fn delay(mut self, sink: impl DelaySink) -> Self {
        self.config.delay = Some(DelayConfig {
            sink: Arc::new(sink),
            topic: DelayTopic::default(),
        });
        self
    }

    /// The delay topic of each route (default `{topic}.delay`); with [`delay`](Self::delay).
    pub fn delay_topic(mut self, topic: DelayTopic) -> Self {
        self.delay_topic = topic;
        self
    }

    /// The longest wait the worker holds itself, renewing the record's lock (default 5 min); with
    /// [`delay`](Self::delay), anything longer moves to the delay topic.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.config.max_hold = max_hold;
        self
    }

    /// The furthest ahead a record's `share.not-before` may be (default 30 days). A record due
    /// later is dead-lettered at once (reason `not_before`) instead of being held or moved: a
    /// producer cannot park work in the worker, or in the delay topic, for ever.
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.config.max_delay = max_delay;
        self
    }

    /// How often records may start over all routes. A record over the limit waits in its slot,
    /// its lock renewed, and never has its delivery count raised for it.
    pub fn rate_limit(mut self, rate: RateLimit) -> Self {
        self.config.rate_limit = Some(rate);
        self
    }

    /// Records the worker's metrics ([`telemetry::names`](crate::telemetry::names)) with `meter`.
    /// By default they go to the global meter provider's
    /// [`share-worker`](crate::telemetry::METER_NAME) meter as it is when the worker is built (a
    /// no-op unless an SDK provider was installed before).
    pub fn meter(mut self, meter: Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Checks the settings and builds the worker. Fails with [`ErrorKind::Config`] naming the
    /// setting that is wrong.
    pub fn build(self) -> Result<Worker<S>> {
        self.config.validate()?;
        #[cfg(feature = "rdkafka")]
        if let Some(cron) = &self.cron {
            cron.check()?;
        }
        let mut routes = Routes::default();
        let mut batches = Vec::new();
        for route in self.routes {
            route.check()?;
            if self.config.controls.is_none()
                && (route.limits.breaker.is_some() || route.limits.cool_down)
            {
                let setting = if route.limits.breaker.is_some() {
                    "breaker"
                } else {
                    "cool_down"
                };
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "route `{}`: `{setting}` pauses the route through the control topic: expected the group's controls (`controls`)",
                        route.topic
                    ),
                ));
            }
            let topic = route.topic.clone();
            batches.extend(route.batch.map(|(_, stats)| stats));
            if !routes.insert(route.topic, route.service, route.timeout, route.limits) {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!("route `{topic}`: the topic has two routes; expected one"),
                ));
            }
        }
        if routes.is_empty() {
            return Err(Error::new(
                ErrorKind::Config,
                "`route`: expected at least one route",
            ));
        }
        let mut config = self.config;
        if let Some(delay) = &mut config.delay {
            delay.topic = self.delay_topic;
            let group = self.source.group().unwrap_or_default().to_owned();
            let template = delay.topic.clone();
            routes
                .set_delay_topics(|topic| template.tiers(topic, &group))
                .map_err(|why| Error::new(ErrorKind::Config, format!("`delay_topic`: {why}")))?;
        }
        Ok(Worker {
            source: self.source,
            routes,
            config,
            shutdown: ShutdownHandle::new(),
            health: super::WorkerHealth::new(),
            batches,
            #[cfg(feature = "rdkafka")]
            cron: self.cron,
            meter: self
                .meter
                .unwrap_or_else(|| opentelemetry::global::meter(crate::telemetry::METER_NAME)),
        })
    }
}

impl<S: fmt::Debug> fmt::Debug for WorkerBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("source", &self.source)
            .field("config", &self.config)
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}
