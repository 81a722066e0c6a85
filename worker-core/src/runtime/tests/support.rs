//! Helpers shared by the runtime tests.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower::Service;

use crate::source::{AckKind, AckReceipt, Delivery, DeliveryId, ShareSource};
use crate::testing::MemoryMember;
use crate::{Job, Outcome, Result};

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

/// Runs `worker` until `done` holds (failing after `limit`), then shuts it down gracefully and
/// returns its summary.
pub(super) async fn run_until<S: ShareSource>(
    worker: crate::Worker<S>,
    limit: Duration,
    what: &str,
    done: impl FnMut() -> bool,
) -> crate::Summary {
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    wait_until(limit, what, done).await;
    shutdown.shutdown();
    run.await.expect("the worker task").expect("the worker")
}

/// The payload as a number (test records carry their sequence number).
pub(super) fn seq(job: &Job) -> usize {
    job.payload()
        .and_then(|p| std::str::from_utf8(p).ok())
        .and_then(|s| s.parse().ok())
        .expect("test payloads are numbers")
}

/// A [`ShareSource`] wrapper that checks, at every fetch, that the worker never asks for more
/// records than it has free slots (`limit` minus what it holds at the broker), and records when
/// renewals are issued.
pub(super) struct Checked {
    pub(super) member: MemoryMember,
    pub(super) limit: usize,
    pub(super) renewals: Arc<Mutex<Vec<Instant>>>,
    pub(super) max_held: Arc<AtomicUsize>,
}

impl Checked {
    pub(super) fn new(member: MemoryMember, limit: usize) -> Self {
        Self {
            member,
            limit,
            renewals: Arc::default(),
            max_held: Arc::default(),
        }
    }
}

impl ShareSource for Checked {
    async fn fetch(&self, max_records: u32) -> Result<Vec<Delivery>> {
        let held = self.member.held();
        assert!(max_records >= 1, "fetch with no free slot");
        assert!(
            held + max_records as usize <= self.limit,
            "asked for {max_records} records while holding {held} of {}",
            self.limit
        );
        let batch = self.member.fetch(max_records).await?;
        let held = self.member.held();
        assert!(held <= self.limit, "holding {held} records");
        self.max_held.fetch_max(held, Ordering::SeqCst);
        Ok(batch)
    }

    fn acknowledge(&self, id: &DeliveryId, kind: AckKind) -> AckReceipt {
        self.member.acknowledge(id, kind)
    }

    fn renew(&self, id: &DeliveryId) -> AckReceipt {
        self.renewals.lock().unwrap().push(Instant::now());
        self.member.renew(id)
    }

    async fn close(&self) -> Result<()> {
        self.member.close().await
    }
}
