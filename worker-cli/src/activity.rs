//! What the handlers are doing: calls in flight, calls made, and when anything last happened — for
//! `--exit-when-idle` and the statistics.
//!
//! A retry is held by the runtime for its backoff before it is released and fetched again; no
//! handler runs meanwhile, so the longest the hold can last (the backoff window's end, or the
//! capped `Retry-After`) counts as activity too.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use worker_core::Outcome;
use worker_core::policy::Backoff;

/// Shared by every route's service.
#[derive(Debug)]
pub(crate) struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
    first: OnceLock<Instant>,
    /// Until when a retry may still be held for its backoff.
    held_until: Mutex<Instant>,
    backoff: Backoff,
    pub(crate) calls: AtomicU64,
}

impl Activity {
    pub(crate) fn new(backoff: Backoff) -> Self {
        Self {
            held_until: Mutex::new(Instant::now()),
            backoff,
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
            first: OnceLock::new(),
            calls: AtomicU64::new(0),
        }
    }

    /// The worker began taking work: idleness counts from now.
    pub(crate) fn began(&self) {
        self.touch();
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
        let held_until = *self.held_until.lock().ok()?;
        let last = *self.last.lock().ok()?;
        let now = Instant::now();
        let since = last.max(held_until);
        (now >= since).then(|| now - since)
    }
}

/// One running handler call.
#[derive(Debug)]
pub(crate) struct CallGuard<'a> {
    activity: &'a Activity,
}

impl CallGuard<'_> {
    /// The call of delivery `attempt` ended with `outcome`.
    pub(crate) fn finish(self, outcome: &Outcome, attempt: u16) {
        let a = self.activity;
        if let Outcome::Retry { after, .. } = outcome {
            let hold = match after {
                Some(after) => (*after).min(a.backoff.max()),
                None => a.backoff.window(attempt).1,
            };
            if let Ok(mut until) = a.held_until.lock() {
                *until = (*until).max(Instant::now() + hold);
            }
        }
        a.calls.fetch_add(1, Ordering::Relaxed);
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
        let backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(10));
        let activity = Activity::new(backoff.jitter(false));
        let guard = activity.start();
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(activity.idle_for(), None);
        guard.finish(&Outcome::Accept, 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(activity.idle_for(), Some(Duration::from_secs(2)));
        assert_eq!(activity.calls.load(Ordering::Relaxed), 1);
        assert_eq!(activity.busy(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_retry_is_not_idle() {
        let backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(10));
        let activity = Activity::new(backoff.jitter(false));
        activity.start().finish(&Outcome::retry("flaky"), 3); // held 4s
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(activity.idle_for(), None);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(activity.idle_for(), Some(Duration::from_secs(1)));
        let hinted = Outcome::retry_after(Duration::from_secs(60), "429");
        activity.start().finish(&hinted, 1); // capped at 10s
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(activity.idle_for(), None);
    }
}
