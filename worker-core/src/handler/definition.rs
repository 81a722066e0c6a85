//! [`JobDefinition`]: a handler with a name and a default topic, ready to be routed.

use std::convert::Infallible;
use std::fmt;
use std::marker::PhantomData;

use tower::Service;

use super::{Handler, HandlerService};
use crate::{Job, Outcome};

/// A job's name and the topic it reads by default: what a worker needs to route it, apart from
/// its service.
///
/// Separate from [`JobDefinition`] so that asking for the name needs no type annotations.
pub trait NamedJob {
    /// The job's name, for logs, metrics and dead-letter records.
    fn name(&self) -> &'static str;

    /// The topic the job reads unless configuration says otherwise.
    fn topic(&self) -> &'static str;
}

/// A job the worker can run: a [`NamedJob`] that turns into a handler service.
///
/// [`#[handler]`](macro@crate::handler) implements it for the unit struct it generates, and
/// [`define_job`] for any [`Handler`]. `T` is the handler's argument list and `S` its state; both
/// are inferred, never written.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a job definition for a worker whose state is `{S}`",
    label = "not a job definition",
    note = "put `#[worker_core::handler(topic = \"...\")]` on an `async fn`, or wrap a handler with `worker_core::handler::define_job`",
    note = "if the handler takes `State<_>`, its type must be the worker's state or implement `FromRef` for it"
)]
pub trait JobDefinition<T, S>: NamedJob + Send + 'static {
    /// The handler as a service, called with `state`.
    fn into_service(
        self,
        state: S,
    ) -> impl Service<Job, Response = Outcome, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + Sync
    + 'static;
}

/// Any [`Handler`] with a name and a default topic: what [`define_job`] returns.
pub struct DefinedJob<H, T> {
    name: &'static str,
    topic: &'static str,
    handler: H,
    _args: PhantomData<fn() -> T>,
}

/// Defines a job from a plain handler, without the attribute macro.
///
/// ```
/// use worker_core::handler::{JobDefinition, NamedJob, define_job};
///
/// async fn notify(body: String) {
///     let _ = body;
/// }
///
/// let job = define_job("notify", "webhooks", notify);
/// assert_eq!(job.name(), "notify");
/// let service = job.into_service(());
/// # let _ = service;
/// ```
pub fn define_job<H, T>(name: &'static str, topic: &'static str, handler: H) -> DefinedJob<H, T> {
    DefinedJob {
        name,
        topic,
        handler,
        _args: PhantomData,
    }
}

impl<H: Clone, T> Clone for DefinedJob<H, T> {
    fn clone(&self) -> Self {
        Self {
            name: self.name,
            topic: self.topic,
            handler: self.handler.clone(),
            _args: PhantomData,
        }
    }
}

impl<H, T> fmt::Debug for DefinedJob<H, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DefinedJob")
            .field("name", &self.name)
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl<H, T> NamedJob for DefinedJob<H, T> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn topic(&self) -> &'static str {
        self.topic
    }
}

impl<H, T, S> JobDefinition<T, S> for DefinedJob<H, T>
where
    H: Handler<T, S>,
    T: 'static,
    S: Clone + Send + Sync + 'static,
{
    fn into_service(
        self,
        state: S,
    ) -> impl Service<Job, Response = Outcome, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + Sync
    + 'static {
        HandlerService::new(self.handler, state)
    }
}
