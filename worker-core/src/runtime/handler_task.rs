//! One handler call as its own tokio task: the service's future with its timeout, its panics
//! caught, inside the record's span. Tasks run on the worker's runtime, on any of its threads, so
//! handler CPU uses every core and a handler that blocks its thread stops only itself.

use std::any::Any;
use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use tracing::{Instrument, Span};

use crate::Outcome;

use super::slots::SlotKey;

/// How a handler ended.
#[derive(Debug)]
pub(crate) enum Finished {
    /// It returned an outcome.
    Done(Outcome),
    /// It panicked; the message.
    Panicked(String),
    /// It ran past its job timeout and was dropped.
    TimedOut,
    /// It never ran: its job was cancelled through the controls.
    Cancelled,
}

/// The task for the handler future `call` of the record in slot `key`: its outcome (or panic, or
/// timeout) and how long it ran.
pub(crate) fn handler_task<F>(
    key: SlotKey,
    call: F,
    timeout: Duration,
    span: Span,
) -> impl Future<Output = (SlotKey, Finished, Duration)> + Send + 'static
where
    F: Future<Output = Result<Outcome, Infallible>> + Send + 'static,
{
    async move {
        let started = Instant::now();
        let finished =
            match tokio::time::timeout(timeout, AssertUnwindSafe(call).catch_unwind()).await {
                Ok(Ok(Ok(outcome))) => Finished::Done(outcome),
                Ok(Ok(Err(never))) => match never {},
                Ok(Err(panic)) => Finished::Panicked(panic_message(&*panic)),
                Err(_) => Finished::TimedOut,
            };
        (key, finished, started.elapsed())
    }
    .instrument(span)
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
    use crate::runtime::slots::Slots;
    use crate::runtime::slots::tests::job;

    fn key() -> SlotKey {
        Slots::new(1).insert(job()).expect("a free slot")
    }

    #[tokio::test(start_paused = true)]
    async fn outcomes_panics_and_timeouts_come_back_with_the_time_taken() {
        let done = handler_task(
            key(),
            async { Ok(Outcome::Accept) },
            Duration::from_secs(1),
            Span::none(),
        );
        assert!(matches!(done.await.1, Finished::Done(Outcome::Accept)));
        let panicked = handler_task(
            key(),
            async {
                tokio::task::yield_now().await;
                if true {
                    panic!("boom");
                }
                Ok(Outcome::Accept)
            },
            Duration::from_secs(1),
            Span::none(),
        );
        assert!(
            matches!(tokio::spawn(panicked).await.expect("the task").1, Finished::Panicked(m) if m == "boom")
        );
        let slow = handler_task(
            key(),
            async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok(Outcome::Accept)
            },
            Duration::from_secs(2),
            Span::none(),
        );
        let (_, finished, took) = slow.await;
        assert!(matches!(finished, Finished::TimedOut));
        assert_eq!(took, Duration::from_secs(2));
    }
}
