//! What the handlers are doing: calls in flight, outcomes, and when anything last happened — for
//! `--exit-when-idle` and the statistics.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use worker_core::Outcome;

/// Shared by every route's service.
#[derive(Debug)]
pub(crate) struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
    first: OnceLock<Instant>,
    pub(crate) calls: AtomicU64,
    pub(crate) accepts: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) rejects: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
            first: OnceLock::new(),
            calls: AtomicU64::new(0),
            accepts: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            rejects: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        if let Ok(mut last) = self.last.lock() {
            *last = Instant::now();
        }
    }

    /// A handler call starts; the guard ends it (also when the call is cancelled).
    pub(crate) fn start(&self) -> CallGuard<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.first.get_or_init(Instant::now);
        self.touch();
        CallGuard { activity: self }
    }

    /// Handler calls running now.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// From the first handler call to the end of the last one (zero before any call).
    pub(crate) fn busy(&self) -> Duration {
        match (self.first.get(), self.last.lock()) {
            (Some(first), Ok(last)) => last.saturating_duration_since(*first),
            _ => Duration::ZERO,
        }
    }

    /// How long nothing has run, or `None` while a handler runs.
    pub(crate) fn idle_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        self.last.lock().ok().map(|last| last.elapsed())
    }
}

/// One running handler call.
#[derive(Debug)]
pub(crate) struct CallGuard<'a> {
    activity: &'a Activity,
}

impl CallGuard<'_> {
    /// The call ended with `outcome`.
    pub(crate) fn finish(self, outcome: &Outcome) {
        let a = self.activity;
        a.calls.fetch_add(1, Ordering::Relaxed);
        let counter = match outcome {
            Outcome::Accept => &a.accepts,
            Outcome::Retry { .. } => &a.retries,
            _ => &a.rejects,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.activity.touch();
        self.activity.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_call() {
        let activity = Activity::new();
        let guard = activity.start();
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(activity.idle_for(), None);
        guard.finish(&Outcome::Accept);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(activity.idle_for(), Some(Duration::from_secs(2)));
        assert_eq!(activity.accepts.load(Ordering::Relaxed), 1);
        assert_eq!(activity.busy(), Duration::from_secs(5));
    }
}
