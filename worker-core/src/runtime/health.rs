//! [`WorkerHealth`]: what a running worker says about itself, for liveness and readiness probes.
//!
//! The dispatcher writes it as it goes (a few atomic stores per wake, a lock only when the
//! dead-letter sink starts or stops failing); probes read it without touching the network.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::summary::Summary;

/// How often the dispatcher wakes when nothing else wakes it (1 s), so that a loop that stops
/// running shows as silent within about this long.
pub(crate) const TICK: Duration = Duration::from_secs(1);

/// A cheap, cloneable view of a worker's health, from [`Worker::health`](super::Worker::health).
///
/// - **Liveness** ([`liveness`](Self::liveness)): the dispatcher's loop ran recently. It runs at
///   least once a second while the worker runs, so a loop that is stuck (every runtime thread
///   blocked, a handler that blocks the dispatcher's thread) goes silent.
/// - **Readiness** ([`readiness`](Self::readiness)): the worker runs, is not shutting down, its
///   dead-letter sink is not failing and its fetches are not failing.
/// - **Stalls** ([`stalls`](Self::stalls)): how often the loop ran late by more than a quarter of
///   the shortest lock, and the last such lateness. A stall is survivable (renewals go first when
///   the loop catches up) but means something blocks the runtime's threads.
#[derive(Clone, Debug)]
pub struct WorkerHealth {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// The origin of the millisecond clock below.
    origin: Instant,
    /// When the dispatcher's loop last ran, in ms since `origin` plus one (0: never).
    last_pass: AtomicU64,
    running: AtomicBool,
    stopping: AtomicBool,
    /// Times the loop ran late enough to endanger locks, and the last lateness in ms.
    stalls: AtomicU64,
    last_stall_ms: AtomicU64,
    /// Why the dead-letter sink fails, while it does.
    dlq_failure: Mutex<Option<String>>,
    /// Why fetching fails, while it does.
    fetch_failure: Mutex<Option<String>>,
    /// The counts as last published by the dispatcher, and when (ms since `origin` plus one).
    progress: Mutex<WorkerProgress>,
    progress_at_ms: AtomicU64,
}

/// What a running worker has done so far, from [`WorkerHealth::progress`]: its [`Summary`] as of
/// the last publication (at most [`PROGRESS_EVERY`] old while it runs) and its occupancy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerProgress {
    /// The counts so far; the final ones are what [`Worker::run`](super::Worker::run) returns.
    pub summary: Summary,
    /// Records fetched and not yet settled with the broker.
    pub in_flight: usize,
    /// Retries waiting out their backoff.
    pub held: usize,
}

/// How often the dispatcher publishes its counts for [`WorkerHealth::progress`] at most.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(250);

impl Default for WorkerHealth {
    fn default() -> Self {
        Self {
            inner: Arc::new(Shared {
                origin: Instant::now(),
                last_pass: AtomicU64::new(0),
                running: AtomicBool::new(false),
                stopping: AtomicBool::new(false),
                stalls: AtomicU64::new(0),
                last_stall_ms: AtomicU64::new(0),
                dlq_failure: Mutex::new(None),
                fetch_failure: Mutex::new(None),
                progress: Mutex::new(WorkerProgress::default()),
                progress_at_ms: AtomicU64::new(0),
            }),
        }
    }
}

impl WorkerHealth {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// How long ago the dispatcher's loop last ran; `None` before the worker started.
    pub fn since_last_pass(&self) -> Option<Duration> {
        match self.inner.last_pass.load(Ordering::Acquire) {
            0 => None,
            at => {
                let at = Duration::from_millis(at - 1);
                Some(self.inner.origin.elapsed().saturating_sub(at))
            }
        }
    }

    /// `Ok` while the worker's loop runs at least every `max_silence`; otherwise why not.
    pub fn liveness(&self, max_silence: Duration) -> Result<(), String> {
        match self.since_last_pass() {
            None if !self.inner.running.load(Ordering::Acquire) => Ok(()),
            None => Err("the dispatcher has not run yet".to_owned()),
            Some(silent) if silent > max_silence => Err(format!(
                "the dispatcher has not run for {}",
                humantime::format_duration(round_ms(silent))
            )),
            Some(_) => Ok(()),
        }
    }

    /// `Ok` when the worker takes work: it runs, is not shutting down, and its dead-letter sink
    /// is not failing. Otherwise why not.
    pub fn readiness(&self) -> Result<(), String> {
        if self.inner.stopping.load(Ordering::Acquire) {
            return Err("shutting down".to_owned());
        }
        if !self.inner.running.load(Ordering::Acquire) {
            return Err("not running yet".to_owned());
        }
        if let Some(why) = self.dlq_failure() {
            return Err(format!("the dead-letter sink is failing: {why}"));
        }
        if let Some(why) = read(&self.inner.fetch_failure) {
            return Err(format!("fetching fails: {why}"));
        }
        Ok(())
    }

    /// How many times the dispatcher's loop stalled (ran late by more than a quarter of the
    /// shortest lock, at least 500 ms), and how late it was the last time; `None` if it never did.
    pub fn stalls(&self) -> Option<(u64, Duration)> {
        match self.inner.stalls.load(Ordering::Acquire) {
            0 => None,
            n => Some((
                n,
                Duration::from_millis(self.inner.last_stall_ms.load(Ordering::Acquire)),
            )),
        }
    }

    /// Why the dead-letter sink fails, while it does (fetching is paused meanwhile).
    pub fn dlq_failure(&self) -> Option<String> {
        read(&self.inner.dlq_failure)
    }

    /// The worker's counts and occupancy as last published (every [`PROGRESS_EVERY`] at most
    /// while it runs, and when it stops): for status lines and dashboards.
    pub fn progress(&self) -> WorkerProgress {
        *self
            .inner
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes the counts if the last publication is older than [`PROGRESS_EVERY`] (always
    /// when `now_or_never`): one clock read per wake, a copy under a lock four times a second.
    pub(crate) fn publish(&self, now_or_never: bool, progress: impl FnOnce() -> WorkerProgress) {
        // Plus one: 0 is "never published".
        let ms = u64::try_from(self.inner.origin.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1;
        let last = self.inner.progress_at_ms.load(Ordering::Relaxed);
        let every = PROGRESS_EVERY.as_millis() as u64;
        if !now_or_never && last != 0 && ms.saturating_sub(last) < every {
            return;
        }
        self.inner.progress_at_ms.store(ms, Ordering::Relaxed);
        *self
            .inner
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = progress();
    }

    /// The dispatcher's loop ran now.
    pub(crate) fn passed(&self) {
        let ms = u64::try_from(self.inner.origin.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.inner.last_pass.store(ms + 1, Ordering::Release);
    }

    /// The loop ran `late` past its tick.
    pub(crate) fn stalled(&self, late: Duration) {
        let ms = u64::try_from(late.as_millis()).unwrap_or(u64::MAX);
        self.inner.last_stall_ms.store(ms, Ordering::Release);
        self.inner.stalls.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn set_running(&self, running: bool) {
        self.inner.running.store(running, Ordering::Release);
    }

    pub(crate) fn set_stopping(&self) {
        self.inner.stopping.store(true, Ordering::Release);
    }

    pub(crate) fn set_dlq_failure(&self, why: Option<String>) {
        write(&self.inner.dlq_failure, why);
    }

    pub(crate) fn set_fetch_failure(&self, why: Option<String>) {
        write(&self.inner.fetch_failure, why);
    }
}

fn read(slot: &Mutex<Option<String>>) -> Option<String> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn write(slot: &Mutex<Option<String>>, why: Option<String>) {
    *slot.lock().unwrap_or_else(|e| e.into_inner()) = why;
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_that_never_ran_is_alive_but_not_ready() {
        let health = WorkerHealth::new();
        assert_eq!(health.liveness(Duration::from_secs(1)), Ok(()));
        assert_eq!(health.readiness(), Err("not running yet".to_owned()));
    }

    #[test]
    fn readiness_names_a_failing_sink_and_shutdown() {
        let health = WorkerHealth::new();
        health.set_running(true);
        health.passed();
        assert_eq!(health.readiness(), Ok(()));
        health.set_dlq_failure(Some("topic t.dlq: not authorised".into()));
        let why = health.readiness().unwrap_err();
        assert!(why.contains("not authorised"), "{why}");
        health.set_dlq_failure(None);
        assert_eq!(health.readiness(), Ok(()));
        health.set_stopping();
        assert_eq!(health.readiness(), Err("shutting down".to_owned()));
    }

    #[test]
    fn stalls_are_counted_with_the_last_lateness() {
        let health = WorkerHealth::new();
        assert_eq!(health.stalls(), None);
        health.stalled(Duration::from_millis(1500));
        health.stalled(Duration::from_millis(700));
        assert_eq!(health.stalls(), Some((2, Duration::from_millis(700))));
    }

    #[test]
    fn a_silent_loop_is_not_alive() {
        let health = WorkerHealth::new();
        health.set_running(true);
        assert!(health.liveness(Duration::from_secs(1)).is_err());
        health.passed();
        assert_eq!(health.liveness(Duration::from_secs(60)), Ok(()));
        std::thread::sleep(Duration::from_millis(30));
        let why = health.liveness(Duration::from_millis(10)).unwrap_err();
        assert!(why.contains("has not run for"), "{why}");
    }

    #[test]
    fn progress_is_published_at_most_every_interval_and_always_at_the_end() {
        let health = WorkerHealth::new();
        let at = |accepted| WorkerProgress {
            summary: Summary {
                accepted,
                ..Summary::default()
            },
            in_flight: 3,
            held: 1,
        };
        health.publish(false, || at(1));
        assert_eq!(health.progress(), at(1), "the first publication");
        health.publish(false, || at(2));
        assert_eq!(health.progress(), at(1), "too soon");
        health.publish(true, || at(3));
        assert_eq!(health.progress(), at(3), "the final one");
    }
}
