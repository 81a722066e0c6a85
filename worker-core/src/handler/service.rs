//! [`HandlerService`]: a handler and its state as a `tower::Service`.

use std::convert::Infallible;
use std::fmt;
use std::marker::PhantomData;
use std::task::{Context, Poll};

use tower::Service;

use super::{Handler, ServiceFuture};
use crate::{Job, Outcome};

/// A [`Handler`] with its state: a `Service<Job, Response = Outcome, Error = Infallible>`.
///
/// Always ready; each call clones the handler (a function item costs nothing to clone) and lends
/// it the state. Made by [`Handler::with_state`] or
/// [`into_service`](super::HandlerWithoutStateExt::into_service).
pub struct HandlerService<H, T, S> {
    handler: H,
    state: S,
    _args: PhantomData<fn() -> T>,
}

impl<H, T, S> HandlerService<H, T, S> {
    /// Wraps `handler`, which will be called with `state`.
    pub fn new(handler: H, state: S) -> Self
    where
        H: Handler<T, S>,
    {
        Self {
            handler,
            state,
            _args: PhantomData,
        }
    }

    /// The state the handler is called with.
    pub fn state(&self) -> &S {
        &self.state
    }
}

impl<H: Clone, T, S: Clone> Clone for HandlerService<H, T, S> {
    fn clone(&self) -> Self {
        Self {
            handler: self.handler.clone(),
            state: self.state.clone(),
            _args: PhantomData,
        }
    }
}

impl<H, T, S> fmt::Debug for HandlerService<H, T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerService")
            .field("handler", &std::any::type_name::<H>())
            .finish_non_exhaustive()
    }
}

impl<H, T, S> Service<Job> for HandlerService<H, T, S>
where
    H: Handler<T, S>,
{
    type Response = Outcome;
    type Error = Infallible;
    type Future = ServiceFuture<H::Future>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, job: Job) -> Self::Future {
        ServiceFuture::new(self.handler.clone().call(job, &self.state))
    }
}
