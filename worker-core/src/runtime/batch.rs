//! Batch handlers: a service over a batch of jobs behind the per-record service a route runs.
//!
//! The dispatcher sees nothing new: each record is called on its own, holds its slot, passed its
//! rate limits, is `Running` (so its lock is renewed) while it waits for its batch and while the
//! batch runs, and gets its own outcome, retried, held or dead-lettered on its own. The
//! [`Batcher`] collects the records it is called with, per route (or per key), and calls the
//! batch service when `max` have come or `linger` has passed since the first.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Histogram, Meter};
use tokio::sync::oneshot;
use tower::{Service, ServiceExt};

use super::handler_task::panic_message;
use crate::{Error, ErrorKind, Job, Outcome, Result};

/// How a batch route groups its records: at most `max` per batch, sent `linger` after the first
/// one came if it is not full by then. Made by [`Batch::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    pub(crate) max: usize,
    pub(crate) linger: Duration,
    pub(crate) by_key: bool,
}

impl Batch {
    /// The largest batch: bounds a request body and the outcomes read back.
    pub const MAX: usize = 10_000;

    /// Batches of at most `max` records (1 to [`Batch::MAX`]), each sent at the latest `linger`
    /// after its first record came. A batch fills only with records the worker holds, so give
    /// the worker a `concurrency` of at least `max` (more, to fill the next batch while one runs).
    pub const fn new(max: usize, linger: Duration) -> Self {
        Self {
            max,
            linger,
            by_key: false,
        }
    }

    /// One batch per record key (records without a key batch together): a bulk API that takes
    /// one recipient per call, or per-tenant batches.
    pub fn by_key(mut self) -> Self {
        self.by_key = true;
        self
    }

    /// What is wrong with these settings, if anything (a worker checks them when it is built).
    pub fn check(&self) -> Result<()> {
        if !(1..=Self::MAX).contains(&self.max) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "`batch.max`: expected 1 to {}, found {}",
                    Self::MAX,
                    self.max
                ),
            ));
        }
        Ok(())
    }
}

/// What a batch route did, for the worker's summary and metrics.
#[derive(Debug)]
pub(crate) struct BatchStats {
    topic: Arc<str>,
    /// Batches handed to the service.
    batches: AtomicU64,
    /// Batches whose service answered with a wrong number of outcomes (or panicked).
    failed: AtomicU64,
    /// `share_worker.batch.size`, once the worker runs.
    sizes: OnceLock<Histogram<u64>>,
}

impl BatchStats {
    pub(crate) fn new(topic: Arc<str>) -> Self {
        Self {
            topic,
            batches: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            sizes: OnceLock::new(),
        }
    }

    /// Records batch sizes with the worker's `meter`.
    pub(crate) fn attach(&self, meter: &Meter) {
        let _ = self.sizes.set(
            meter
                .u64_histogram(crate::telemetry::names::BATCH_SIZE)
                .with_description("Records per call of a batch handler.")
                .with_unit("{record}")
                .with_boundaries(vec![
                    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
                ])
                .build(),
        );
    }

    /// (batches, failed batches) so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.batches.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    fn sent(&self, size: usize) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        if let Some(sizes) = self.sizes.get() {
            sizes.record(
                size as u64,
                &[KeyValue::new(
                    crate::telemetry::names::TOPIC,
                    self.topic.to_string(),
                )],
            );
        }
    }
}

/// A batch being filled: its records with where each one's outcome goes.
struct Filling {
    jobs: Vec<Job>,
    replies: Vec<oneshot::Sender<Outcome>>,
    /// Tells the linger timer of this batch from that of a later one of the same key.
    generation: u64,
}

/// The batches being filled, by key (one, `None`, unless the route batches by key).
#[derive(Default)]
struct Pending {
    filling: HashMap<Option<Bytes>, Filling>,
    generation: u64,
}

/// The per-record service of a batch route: see the module doc.
pub(crate) struct Batcher<T> {
    service: T,
    batch: Batch,
    pending: Arc<Mutex<Pending>>,
    stats: Arc<BatchStats>,
}

impl<T> Batcher<T>
where
    T: Service<Vec<Job>, Response = Vec<Outcome>, Error = Infallible> + Clone + Send + 'static,
    T::Future: Send + 'static,
{
    pub(crate) fn new(service: T, batch: Batch, stats: Arc<BatchStats>) -> Self {
        Self {
            service,
            batch,
            pending: Arc::default(),
            stats,
        }
    }

    /// Takes the batch of `key` if it is still the one of `generation`: a linger timer's.
    fn take(pending: &Mutex<Pending>, key: &Option<Bytes>, generation: u64) -> Option<Filling> {
        let mut pending = pending.lock().unwrap_or_else(PoisonError::into_inner);
        if pending.filling.get(key)?.generation != generation {
            return None;
        }
        pending.filling.remove(key)
    }
}

/// Runs one batch: every record gets the outcome at its index; a response of the wrong length or
/// a panic retries them all, saying why. Records that stopped waiting before the call (their job
/// timeout passed, or shutdown released them) are left out of it, so a record the broker will
/// deliver again is not sent now too; a batch whose records all stopped waiting meanwhile is
/// dropped unfinished, as a single handler is.
async fn run_batch<T>(service: T, batch: Filling, stats: Arc<BatchStats>)
where
    T: Service<Vec<Job>, Response = Vec<Outcome>, Error = Infallible> + Send + 'static,
    T::Future: Send + 'static,
{
    let (jobs, mut replies): (Vec<Job>, Vec<oneshot::Sender<Outcome>>) = batch
        .jobs
        .into_iter()
        .zip(batch.replies)
        .filter(|(_, reply)| !reply.is_closed())
        .unzip();
    let size = jobs.len();
    if size == 0 {
        return;
    }
    stats.sent(size);
    let call = AssertUnwindSafe(service.oneshot(jobs)).catch_unwind();
    let everyone_gone = futures::future::join_all(replies.iter_mut().map(|r| r.closed()));
    let answered = tokio::select! {
        biased;
        _ = everyone_gone => return,
        answered = call => answered,
    };
    let outcomes = match answered {
        Ok(Ok(outcomes)) if outcomes.len() == size => outcomes,
        Ok(Ok(outcomes)) => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            let reason = format!(
                "the batch handler answered {} outcomes for a batch of {size} records",
                outcomes.len()
            );
            tracing::warn!(
                topic = &*stats.topic,
                "{reason}: retrying every record of it"
            );
            vec![Outcome::retry(reason); size]
        }
        Ok(Err(never)) => match never {},
        Err(panic) => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            let reason = format!("the batch handler panicked: {}", panic_message(&*panic));
            vec![Outcome::retry(reason); size]
        }
    };
    for (reply, outcome) in replies.into_iter().zip(outcomes) {
        let _ = reply.send(outcome);
    }
}

impl<T> Service<Job> for Batcher<T>
where
    T: Service<Vec<Job>, Response = Vec<Outcome>, Error = Infallible> + Clone + Send + 'static,
    T::Future: Send + 'static,
{
    type Response = Outcome;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = std::result::Result<Outcome, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<std::result::Result<(), Infallible>> {
        // Records wait for their batch, which the worker's slots bound.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, job: Job) -> Self::Future {
        let key = self.batch.by_key.then(|| job.key().cloned()).flatten();
        let (reply, outcome) = oneshot::channel();
        let (full, first) = {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            pending.generation = pending.generation.wrapping_add(1);
            let generation = pending.generation;
            let filling = pending
                .filling
                .entry(key.clone())
                .or_insert_with(|| Filling {
                    jobs: Vec::with_capacity(self.batch.max.min(64)),
                    replies: Vec::new(),
                    generation,
                });
            filling.jobs.push(job);
            filling.replies.push(reply);
            let first = (filling.jobs.len() == 1).then_some(filling.generation);
            let full = filling.jobs.len() >= self.batch.max;
            (full.then(|| pending.filling.remove(&key)).flatten(), first)
        };
        let (service, stats) = (self.service.clone(), self.stats.clone());
        if let Some(batch) = full {
            tokio::spawn(run_batch(service, batch, stats));
        } else if let Some(generation) = first {
            let pending = self.pending.clone();
            let linger = self.batch.linger;
            tokio::spawn(async move {
                tokio::time::sleep(linger).await;
                if let Some(batch) = Self::take(&pending, &key, generation) {
                    run_batch(service, batch, stats).await;
                }
            });
        }
        Box::pin(async move {
            Ok(outcome
                .await
                .unwrap_or_else(|_| Outcome::retry("the batch was dropped before it answered")))
        })
    }
}

#[cfg(test)]
mod tests;
