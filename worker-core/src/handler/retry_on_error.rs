//! [`RetryOnError`]: a layered handler's errors as retries, so the worker can route it.

use std::convert::Infallible;
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::{Job, Outcome};

/// A boxed error, as tower layers produce them.
type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Turns the errors of a layered handler into [`Outcome::Retry`], making it a
/// `Service<Job, Response = Outcome, Error = Infallible>` again.
///
/// Handlers never fail, but some tower layers add errors: `Timeout` fails with `Elapsed`, a
/// `Buffer` whose worker died fails every call. Wrap the layered service in this (outermost) to
/// route it:
///
/// ```
/// use std::time::Duration;
/// use tower::ServiceBuilder;
/// use worker_core::handler::{HandlerWithoutStateExt, RetryOnErrorLayer};
///
/// async fn notify(body: String) {
///     let _ = body;
/// }
///
/// let service = ServiceBuilder::new()
///     .layer(RetryOnErrorLayer::new())
///     .timeout(Duration::from_secs(10))
///     .service(notify.into_service());
/// # let _ = service;
/// ```
///
/// An error from `poll_ready` (the layer cannot take work) is kept and answers the next call, so
/// that job is retried and the error shows in its outcome's reason.
#[derive(Clone, Debug)]
pub struct RetryOnError<Svc> {
    inner: Svc,
    not_ready: Option<String>,
}

impl<Svc> RetryOnError<Svc> {
    /// Wraps `inner`.
    pub fn new(inner: Svc) -> Self {
        Self {
            inner,
            not_ready: None,
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &Svc {
        &self.inner
    }
}

impl<Svc> Service<Job> for RetryOnError<Svc>
where
    Svc: Service<Job, Response = Outcome>,
    Svc::Error: Into<BoxError>,
{
    type Response = Outcome;
    type Error = Infallible;
    type Future = RetryOnErrorFuture<Svc::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.not_ready.is_some() {
            return Poll::Ready(Ok(()));
        }
        match self.inner.poll_ready(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(error)) => {
                self.not_ready = Some(reason(error.into()));
                Poll::Ready(Ok(()))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn call(&mut self, job: Job) -> Self::Future {
        match self.not_ready.take() {
            Some(reason) => RetryOnErrorFuture {
                state: State::NotReady {
                    reason: Some(reason),
                },
            },
            None => RetryOnErrorFuture {
                state: State::Called {
                    future: self.inner.call(job),
                },
            },
        }
    }
}

/// The retry reason for a layer's error.
fn reason(error: BoxError) -> String {
    format!("service error: {error}")
}

pin_project! {
    /// The response future of [`RetryOnError`].
    pub struct RetryOnErrorFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        NotReady { reason: Option<String> },
        Called { #[pin] future: F },
    }
}

impl<F> fmt::Debug for RetryOnErrorFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryOnErrorFuture").finish_non_exhaustive()
    }
}

impl<F, E> Future for RetryOnErrorFuture<F>
where
    F: Future<Output = Result<Outcome, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Outcome, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Called { future } => future.poll(cx).map(|result| {
                Ok(result.unwrap_or_else(|error| Outcome::retry(reason(error.into()))))
            }),
            StateProj::NotReady { reason } => Poll::Ready(Ok(Outcome::retry(
                reason
                    .take()
                    .unwrap_or_else(|| String::from("service not ready")),
            ))),
        }
    }
}

/// The [`Layer`] of [`RetryOnError`]: put it outermost.
#[derive(Clone, Copy, Debug, Default)]
pub struct RetryOnErrorLayer {
    _private: (),
}

impl RetryOnErrorLayer {
    /// The layer.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<Svc> Layer<Svc> for RetryOnErrorLayer {
    type Service = RetryOnError<Svc>;

    fn layer(&self, inner: Svc) -> RetryOnError<Svc> {
        RetryOnError::new(inner)
    }
}
