//! The named futures of a handler call: no allocation per job.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use super::IntoOutcome;
use crate::Outcome;

pin_project! {
    /// The future of a [`Handler`](super::Handler) call: either the handler's own future, or the
    /// outcome of an extractor that rejected the job (the handler was not called).
    #[project = HandlerFutureProj]
    #[derive(Debug)]
    pub struct HandlerFuture<Fut> {
        #[pin]
        state: CallState<Fut>,
    }
}

pin_project! {
    #[project = CallStateProj]
    #[derive(Debug)]
    enum CallState<Fut> {
        Rejected { outcome: Option<Outcome> },
        Running { #[pin] future: Fut },
    }
}

impl<Fut> HandlerFuture<Fut> {
    /// A call whose handler runs `future`.
    pub fn running(future: Fut) -> Self {
        Self {
            state: CallState::Running { future },
        }
    }

    /// A call that ends with `outcome` without running the handler.
    pub fn rejected(outcome: Outcome) -> Self {
        Self {
            state: CallState::Rejected {
                outcome: Some(outcome),
            },
        }
    }
}

impl<Fut> Future for HandlerFuture<Fut>
where
    Fut: Future,
    Fut::Output: IntoOutcome,
{
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        match self.project().state.project() {
            CallStateProj::Running { future } => future.poll(cx).map(IntoOutcome::into_outcome),
            // Polled again after it completed: the contract allows anything but a panic is
            // unfriendly, so it answers with a retry that names the bug.
            CallStateProj::Rejected { outcome } => Poll::Ready(
                outcome
                    .take()
                    .unwrap_or_else(|| Outcome::retry("handler future polled after completion")),
            ),
        }
    }
}

pin_project! {
    /// The response future of a [`HandlerService`](super::HandlerService): the handler's
    /// [`Outcome`], never an error.
    #[derive(Debug)]
    pub struct ServiceFuture<F> {
        #[pin]
        inner: F,
    }
}

impl<F> ServiceFuture<F> {
    pub(crate) fn new(inner: F) -> Self {
        Self { inner }
    }
}

impl<F> Future for ServiceFuture<F>
where
    F: Future<Output = Outcome>,
{
    type Output = Result<Outcome, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx).map(Ok)
    }
}
