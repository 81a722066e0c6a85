//! Helpers shared by the runtime tests.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tower::Service;

use crate::{Job, Outcome};

/// A route service from an async closure that returns an [`Outcome`].
pub(super) fn handler<F, Fut>(
    f: F,
) -> impl Service<Job, Response = Outcome, Error = Infallible, Future: Send> + Send + Clone + 'static
where
    F: Fn(Job) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    tower::service_fn(move |job: Job| {
        let fut = f(job);
        async move { Ok::<_, Infallible>(fut.await) }
    })
}

/// Waits (in virtual time) until `cond` holds, checking every millisecond; panics after `limit`.
pub(super) async fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The payload as a number (test records carry their sequence number).
pub(super) fn seq(job: &Job) -> usize {
    job.payload()
        .and_then(|p| std::str::from_utf8(p).ok())
        .and_then(|s| s.parse().ok())
        .expect("test payloads are numbers")
}
