//! [`RunJob`]: one handler's future, with its timeout and panics caught.

use std::any::Any;
use std::convert::Infallible;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep, sleep_until};

use crate::Outcome;

use super::slots::SlotKey;

/// How a handler ended.
#[derive(Debug)]
pub(crate) enum Finished {
    /// It returned an outcome.
    Done(Outcome),
    /// It panicked; the message.
    Panicked(String),
    /// It ran past the job timeout and was dropped.
    TimedOut,
}

pin_project! {
    /// Drives a handler future to its outcome, catching panics and enforcing the job timeout.
    #[derive(Debug)]
    pub(crate) struct RunJob<F> {
        key: SlotKey,
        started: Instant,
        finished: bool,
        #[pin]
        inner: F,
        #[pin]
        deadline: Sleep,
    }
}

impl<F> RunJob<F> {
    pub(crate) fn new(key: SlotKey, inner: F, timeout: Duration) -> Self {
        let started = Instant::now();
        Self {
            key,
            started,
            finished: false,
            inner,
            deadline: sleep_until(started + timeout),
        }
    }
}

impl<F: Future<Output = Result<Outcome, Infallible>>> Future for RunJob<F> {
    type Output = (SlotKey, Finished, Duration);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let key = *this.key;
        if *this.finished {
            return Poll::Pending;
        }
        let mut inner = this.inner;
        let finished = match catch_unwind(AssertUnwindSafe(|| inner.as_mut().poll(cx))) {
            Ok(Poll::Ready(Ok(outcome))) => Finished::Done(outcome),
            Ok(Poll::Ready(Err(never))) => match never {},
            Err(panic) => Finished::Panicked(panic_message(&*panic)),
            Ok(Poll::Pending) => match this.deadline.poll(cx) {
                Poll::Ready(()) => Finished::TimedOut,
                Poll::Pending => return Poll::Pending,
            },
        };
        *this.finished = true;
        Poll::Ready((key, finished, this.started.elapsed()))
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::slots::{InFlight, Phase, Slots};
    use crate::source::{DeliveryId, Lease};

    fn key() -> SlotKey {
        Slots::new(1)
            .insert(InFlight {
                id: DeliveryId {
                    topic: "t".into(),
                    partition: 0,
                    offset: 0,
                    lease: Lease::default(),
                },
                cancel: Default::default(),
                phase: Phase::Running,
                lost: false,
                renew_every: None,
                next_renewal: None,
                delivery_count: 1,
                record: None,
                held_until: None,
                dlq_reason: None,
                span: tracing::Span::none(),
            })
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn returns_the_outcome_and_how_long_it_took() {
        let job = RunJob::new(
            key(),
            async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(Outcome::Accept)
            },
            Duration::from_secs(1),
        );
        let (_, finished, took) = job.await;
        assert!(matches!(finished, Finished::Done(Outcome::Accept)));
        assert_eq!(took, Duration::from_millis(20));
    }

    #[tokio::test(start_paused = true)]
    async fn catches_a_panic() {
        let job = RunJob::new(
            key(),
            async {
                tokio::task::yield_now().await;
                if true {
                    panic!("boom");
                }
                Ok(Outcome::Accept)
            },
            Duration::from_secs(1),
        );
        let (_, finished, _) = job.await;
        assert!(matches!(finished, Finished::Panicked(m) if m == "boom"));
    }

    #[tokio::test(start_paused = true)]
    async fn times_out() {
        let job = RunJob::new(
            key(),
            std::future::pending::<Result<Outcome, Infallible>>(),
            Duration::from_secs(3),
        );
        let (_, finished, took) = job.await;
        assert!(matches!(finished, Finished::TimedOut));
        assert_eq!(took, Duration::from_secs(3));
    }
}
