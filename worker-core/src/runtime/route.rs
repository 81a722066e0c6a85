//! [`Route`]: a topic, the service that handles its records, and the route's own settings, as
//! one value, so a setting cannot name a topic that has no route.

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tower::Service;
use tower::util::BoxService;

use super::batch::{Batch, BatchStats, Batcher};
use super::builder::RouteService;
use super::rate::RateLimit;
use super::routes::RouteLimits;
use crate::handler::{BatchJobDefinition, JobDefinition};
use crate::{Error, ErrorKind, Job, Outcome, Result};

/// One route of a [`Worker`](super::Worker): the records of `topic` go to `service`, with this
/// route's own job timeout and limits. Add it with
/// [`WorkerBuilder::add_route`](super::WorkerBuilder::add_route).
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use tower::service_fn;
/// use worker_core::runtime::Route;
/// use worker_core::{Job, Outcome, RateLimit};
///
/// let sms = Route::new("sms", service_fn(|_job: Job| async { Ok::<_, Infallible>(Outcome::Accept) }))
///     .timeout(Duration::from_secs(5))
///     .key_rate_limit(RateLimit::per_second(1)) // one message per second per phone number
///     .key_concurrency(1);
/// assert_eq!(sms.topic(), "sms");
/// ```
pub struct Route {
    pub(super) topic: Arc<str>,
    pub(super) service: RouteService,
    pub(super) timeout: Option<Duration>,
    pub(super) limits: RouteLimits,
    /// A batch route's batching and what it did.
    pub(super) batch: Option<(Batch, Arc<BatchStats>)>,
}

impl Route {
    /// The largest lane [`weight`](Self::weight): enough for any split a person means, small
    /// enough that no sum of weights times slots overflows.
    pub const MAX_WEIGHT: u32 = 1000;

    /// Runs `service` for every record of `topic`.
    ///
    /// A service is any tower [`Service`] from [`Job`] to [`Outcome`] that cannot fail: every
    /// record gets an outcome by construction. Add tower layers (rate limits, per-route
    /// concurrency, your own) around it; the worker calls `poll_ready` before each `call`, so a
    /// service that is not ready holds back its records (they keep their slots and their locks
    /// are renewed).
    pub fn new<T>(topic: impl Into<Arc<str>>, service: T) -> Self
    where
        T: Service<Job, Response = Outcome, Error = Infallible> + Send + 'static,
        T::Future: Send + 'static,
    {
        Self {
            topic: topic.into(),
            service: BoxService::new(service),
            timeout: None,
            limits: RouteLimits::default(),
            batch: None,
        }
    }

    /// Runs `service` for batches of the records of `topic`: a bulk API (batched e-mail sends,
    /// multicast push, bulk SMS) called once for up to `batch.max` records. The service answers
    /// one outcome per job, in the order of the jobs; each record is then accepted, retried,
    /// held or dead-lettered on its own, as a single handler's would be. An answer with a
    /// missing or extra outcome, or a panic, retries every record of the batch with that reason
    /// (never a silent accept).
    ///
    /// Each record holds its slot, counts against the rate limits and has its lock renewed while
    /// it waits for its batch and while the batch runs; the route's job timeout counts from when
    /// it joined its batch. A batch whose records all ran out of time is dropped, as a single
    /// handler is.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tower::service_fn;
    /// use worker_core::runtime::{Batch, Route};
    /// use worker_core::{Job, Outcome};
    ///
    /// let bulk_email = service_fn(|jobs: Vec<Job>| async move {
    ///     // One call to the provider's bulk endpoint for every job of the batch.
    ///     Ok::<_, Infallible>(jobs.iter().map(|_| Outcome::Accept).collect::<Vec<_>>())
    /// });
    /// let emails = Route::batched("emails", Batch::new(100, Duration::from_millis(200)), bulk_email);
    /// assert_eq!(emails.topic(), "emails");
    /// ```
    pub fn batched<T>(topic: impl Into<Arc<str>>, batch: Batch, service: T) -> Self
    where
        T: Service<Vec<Job>, Response = Vec<Outcome>, Error = Infallible> + Clone + Send + 'static,
        T::Future: Send + 'static,
    {
        let topic: Arc<str> = topic.into();
        let stats = Arc::new(BatchStats::new(topic.clone()));
        let mut route = Self::new(topic, Batcher::new(service, batch, stats.clone()));
        route.batch = Some((batch, stats));
        route
    }

    /// A job definition (a `#[handler]` fn, or [`define_job`](crate::handler::define_job)) on
    /// its default topic, its handler given `state`. [`Route::new`] with
    /// `definition.into_service(state)` puts it on another topic.
    pub fn job<T, St, D>(definition: D, state: St) -> Self
    where
        D: JobDefinition<T, St>,
    {
        let topic: Arc<str> = Arc::from(definition.topic());
        Self::new(topic, definition.into_service(state))
    }

    /// A batch job definition (a `#[handler(batch(...))]` fn) on its default topic, batched as
    /// it says, its handler given `state`. [`Route::batched`] with
    /// `definition.into_batch_service(state)` puts it on another topic.
    pub fn batch_job<T, St, D>(definition: D, state: St) -> Self
    where
        D: BatchJobDefinition<T, St>,
    {
        let topic: Arc<str> = Arc::from(definition.topic());
        let batch = definition.batch();
        Self::batched(topic, batch, definition.into_batch_service(state))
    }

    /// The route's topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// How long one handler of this route may run, instead of the worker's
    /// [`job_timeout`](super::WorkerBuilder::job_timeout): a webhook route may allow 30 s while
    /// an SMS route allows 5 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// How often records of this route may start. A record over the limit waits in its slot,
    /// its lock renewed, and never has its delivery count raised for it.
    pub fn rate_limit(mut self, rate: RateLimit) -> Self {
        self.limits.rate = Some(rate);
        self
    }

    /// How often records of one key may start on this route (an SMS gateway's one message per
    /// second per phone number). Records without a key are not limited by it. A record over it
    /// waits; when too many records of its key already wait (an eighth of the concurrency, at
    /// least 2), it moves to the delay topic (with [`delay`](super::WorkerBuilder::delay))
    /// instead, so one hot key never takes the slots of the others. The limiter keeps at most
    /// 65,536 keys (hashed).
    pub fn key_rate_limit(mut self, rate: RateLimit) -> Self {
        self.limits.per_key = Some(rate);
        self
    }

    /// How many records of one key may run at once in this worker on this route (1: never two
    /// at once). Share groups give no order and no exclusion across worker processes: another
    /// worker may run a record of the same key meanwhile. Records without a key are not limited
    /// by it; records of a busy key wait without holding back other keys.
    pub fn key_concurrency(mut self, limit: usize) -> Self {
        self.limits.key_concurrency = Some(limit);
        self
    }

    /// Opens a circuit breaker on this route ([`Breaker`](super::Breaker)): when too many of its
    /// calls fail, the whole fleet pauses the route through the control topic, so an outage
    /// burns no attempts, and one worker probes before it resumes. Needs the group's
    /// [`controls`](super::WorkerBuilder::controls).
    pub fn breaker(mut self, breaker: super::Breaker) -> Self {
        self.limits.breaker = Some(breaker);
        self
    }

    /// Lets a handler's [`Outcome::retry_after`] (an HTTP 429's `Retry-After`) pause this route
    /// for the whole fleet for that long, through the control topic, instead of each worker
    /// finding the limit on its own. Needs the group's
    /// [`controls`](super::WorkerBuilder::controls).
    pub fn cool_down(mut self) -> Self {
        self.limits.cool_down = true;
        self
    }

    /// Makes the route a lane of strict `priority` (0 first): while a route of a higher priority
    /// has records that want a handler, this one takes no more records than its floor (the
    /// reserve every route keeps: max(1, slots / (4 × routes))) and its topic is not fetched
    /// above it; its records already running finish. The floor keeps it from starving forever.
    /// Several topics feed one handler as lanes when their routes share a service (a clone).
    /// Routes without a priority neither yield nor are yielded to.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tower::service_fn;
    /// use worker_core::runtime::Route;
    /// use worker_core::{Job, Outcome};
    ///
    /// let sms = service_fn(|_job: Job| async { Ok::<_, Infallible>(Outcome::Accept) });
    /// let otp = Route::new("sms.otp", sms.clone()).priority(0);
    /// let marketing = Route::new("sms.marketing", sms).priority(1);
    /// # let _ = (otp, marketing);
    /// ```
    pub fn priority(mut self, priority: u8) -> Self {
        self.limits.priority = Some(priority);
        self
    }

    /// Makes the route a weighted lane: the weighted lanes of one priority that have records
    /// wanting a handler split the slots by weight (3 and 1: three quarters and one quarter),
    /// never below the floor (see [`priority`](Self::priority)); a lane with nothing to do lends
    /// its part to the others. 1 to [`MAX_WEIGHT`](Self::MAX_WEIGHT).
    pub fn weight(mut self, weight: u32) -> Self {
        self.limits.weight = Some(weight);
        self
    }

    /// What is wrong with the route's settings, naming the topic and the setting.
    pub(super) fn check(&self) -> Result<()> {
        let topic = &self.topic;
        let bad = |setting: &str, why: &str| {
            Err(Error::new(
                ErrorKind::Config,
                format!("route `{topic}`: `{setting}`: {why}"),
            ))
        };
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return bad("timeout", "expected a timeout above 0");
        }
        if let Some((batch, _)) = &self.batch {
            batch.check().map_err(|err| {
                Error::new(
                    ErrorKind::Config,
                    format!("route `{topic}`: {}", err.message()),
                )
            })?;
        }
        if self
            .limits
            .weight
            .is_some_and(|w| !(1..=Self::MAX_WEIGHT).contains(&w))
        {
            return bad("weight", &format!("expected 1 to {}", Self::MAX_WEIGHT));
        }
        if self.limits.key_concurrency == Some(0) {
            return bad("key_concurrency", "expected at least 1");
        }
        if let Some(breaker) = &self.limits.breaker {
            breaker.check().map_err(|err| {
                Error::new(
                    ErrorKind::Config,
                    format!("route `{topic}`: {}", err.message()),
                )
            })?;
        }
        let rates = [
            ("rate_limit", self.limits.rate),
            ("key_rate_limit", self.limits.per_key),
        ];
        for (setting, rate) in rates {
            if let Some(rate) = rate {
                rate.check(setting).map_err(|err| {
                    Error::new(
                        ErrorKind::Config,
                        format!("route `{topic}`: {}", err.message()),
                    )
                })?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("topic", &self.topic)
            .field("timeout", &self.timeout)
            .field("limits", &self.limits)
            .field("batch", &self.batch.as_ref().map(|(batch, _)| batch))
            .finish_non_exhaustive()
    }
}
