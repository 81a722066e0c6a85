//! Extractors that read the job without taking its payload.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::FromJobParts;
use crate::Job;
use crate::source::{DeliveryId, Header};

/// Where a job came from and how often it was delivered.
#[derive(Clone, Debug)]
pub struct Meta {
    id: DeliveryId,
    timestamp: i64,
    delivery_count: u16,
    lock_deadline: Instant,
    attempts_left: Option<u16>,
}

impl Meta {
    /// The metadata of `job`.
    pub fn of(job: &Job) -> Self {
        let delivery = job.delivery();
        Self {
            id: delivery.id.clone(),
            timestamp: delivery.timestamp,
            delivery_count: job.attempt(),
            lock_deadline: delivery.lock_deadline(),
            attempts_left: None,
        }
    }

    /// Hook for the retry policy: with the share group's delivery limit `limit`, a handler gets
    /// `limit - 1` attempts (the last delivery is reserved for the dead-letter hand-off), so this
    /// many are left after the current one.
    #[allow(dead_code)] // called by the retry policy once it knows the group's delivery limit
    pub(crate) fn with_delivery_limit(mut self, limit: u16) -> Self {
        let attempts = limit.saturating_sub(1);
        self.attempts_left = Some(attempts.saturating_sub(self.delivery_count));
        self
    }

    /// Which record and acquisition this is.
    pub fn id(&self) -> &DeliveryId {
        &self.id
    }

    /// The topic the record was read from.
    pub fn topic(&self) -> &str {
        &self.id.topic
    }

    /// The record's partition.
    pub fn partition(&self) -> i32 {
        self.id.partition
    }

    /// The record's offset.
    pub fn offset(&self) -> i64 {
        self.id.offset
    }

    /// The record timestamp, milliseconds since the Unix epoch.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The attempt number ([`Job::attempt`]): how many times the broker has delivered this
    /// record, this time included (starts at 1), plus the attempts a record back from the delay
    /// topic used before it was moved. Shared by every worker in the group.
    pub fn delivery_count(&self) -> u16 {
        self.delivery_count
    }

    /// When the record's acquisition lock ends unless it is renewed (the runtime renews it while
    /// the handler runs).
    pub fn lock_deadline(&self) -> Instant {
        self.lock_deadline
    }

    /// How many attempts are left after this one before the job goes to the dead-letter topic.
    ///
    /// `None` until the retry policy, which knows the group's delivery limit, provides it.
    pub fn attempts_left(&self) -> Option<u16> {
        self.attempts_left
    }

    /// Whether this is the last attempt: a failure now sends the job to the dead-letter topic.
    /// `false` while [`attempts_left`](Self::attempts_left) is unknown.
    pub fn is_last_attempt(&self) -> bool {
        self.attempts_left == Some(0)
    }
}

impl<S> FromJobParts<S> for Meta {
    type Rejection = Infallible;

    fn from_job_parts(job: &Job, _state: &S) -> Result<Self, Infallible> {
        Ok(Meta::of(job))
    }
}

/// The record key, `None` for a null key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key(pub Option<Bytes>);

impl<S> FromJobParts<S> for Key {
    type Rejection = Infallible;

    fn from_job_parts(job: &Job, _state: &S) -> Result<Self, Infallible> {
        Ok(Key(job.delivery().key.clone()))
    }
}

/// The record headers, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<Header>);

impl Headers {
    /// The value of the first header named `key`; `None` if there is none or its value is null.
    pub fn get(&self, key: &str) -> Option<&Bytes> {
        self.0
            .iter()
            .find(|header| &*header.key == key)
            .and_then(|header| header.value.as_ref())
    }

    /// [`get`](Self::get) as UTF-8 text; `None` also when the value is not UTF-8.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)
            .and_then(|value| std::str::from_utf8(value).ok())
    }

    /// Every header named `key`, in order.
    pub fn get_all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Header> + 'a {
        self.0.iter().filter(move |header| &*header.key == key)
    }

    /// The header keys, in order (repeated keys repeat).
    pub fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.0.iter().map(|header| &header.key)
    }
}

impl<S> FromJobParts<S> for Headers {
    type Rejection = Infallible;

    fn from_job_parts(job: &Job, _state: &S) -> Result<Self, Infallible> {
        Ok(Headers(job.delivery().headers.clone()))
    }
}

/// The token that fires when the handler should stop (lock lost, job timeout, shutdown).
impl<S> FromJobParts<S> for CancellationToken {
    type Rejection = Infallible;

    fn from_job_parts(job: &Job, _state: &S) -> Result<Self, Infallible> {
        Ok(job.cancellation().clone())
    }
}

/// A value shared by every job of a handler: clients, pools, configuration.
///
/// Given with [`Handler::with_state`](crate::handler::Handler::with_state) and cloned for each
/// job, so keep it cheap to clone (wrap it in an `Arc`). `T` may be the whole state or any part
/// of it that implements [`FromRef`].
#[derive(Clone, Copy, Debug, Default)]
pub struct State<T>(pub T);

impl<S, T> FromJobParts<S> for State<T>
where
    T: FromRef<S>,
{
    type Rejection = Infallible;

    fn from_job_parts(_job: &Job, state: &S) -> Result<Self, Infallible> {
        Ok(State(T::from_ref(state)))
    }
}

/// A part of a handler's state that [`State`] can extract on its own.
///
/// Every `Clone` type is a part of itself. Implement it to let handlers take only what they need:
///
/// ```
/// use worker_core::handler::FromRef;
///
/// #[derive(Clone)]
/// struct AppState {
///     gateway_url: String,
/// }
///
/// #[derive(Clone)]
/// struct GatewayUrl(String);
///
/// impl FromRef<AppState> for GatewayUrl {
///     fn from_ref(state: &AppState) -> Self {
///         GatewayUrl(state.gateway_url.clone())
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`State<{Self}>` cannot be taken from the handler's state `{S}`",
    label = "not part of the handler's state",
    note = "implement `FromRef<{S}>` for `{Self}`, or give the handler a `{Self}` with `with_state`"
)]
pub trait FromRef<S> {
    /// The part, cloned out of `state`.
    fn from_ref(state: &S) -> Self;
}

impl<T: Clone> FromRef<T> for T {
    fn from_ref(state: &T) -> Self {
        state.clone()
    }
}
