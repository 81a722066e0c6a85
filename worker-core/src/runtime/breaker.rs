//! [`Breaker`]: a route's circuit breaker, and the sliding window of outcomes it watches.
//!
//! When the share of failed calls in the last `window` crosses `failure_ratio` (after at least
//! `min_calls`, or after 5 when the failure would dead-letter its record), the worker that saw it
//! pauses the route **for the whole fleet** through the control topic for `open_for`, naming
//! itself the prober. While the route is paused no worker starts its records, and a record whose
//! handler fails meanwhile waits for the end of the pause without using up an attempt: an outage
//! is not a reason to dead-letter. When `open_for` ends, the prober alone runs [`PROBE_CALLS`]
//! records, or every record it holds when it holds fewer (half-open): if fewer than
//! `failure_ratio` of them fail it resumes the route, otherwise it pauses it again. The others
//! stay paused for one more `open_for`, so a prober that dies leaves the route paused no longer
//! than that.

use std::time::Duration;

use tokio::time::Instant;

use crate::{Error, ErrorKind, Result};

/// How many records the prober runs while the breaker is half-open.
pub const PROBE_CALLS: u32 = 5;

/// The fewest calls (or `min_calls`, if fewer) on which a failure that would dead-letter its
/// record opens the breaker early. A poison record alone, failing its attempts on a quiet route,
/// opens it at most once (the window starts afresh at each opening) and is then dead-lettered.
const EARLY_CALLS: u32 = 5;

/// The buckets a window is counted in: the window slides by a tenth of itself.
const BUCKETS: usize = 10;

/// A route's circuit breaker settings (see the module docs).
///
/// ```
/// use std::time::Duration;
/// use worker_core::Breaker;
///
/// // Half of at least 20 calls in 30 s failing opens it for 30 s.
/// let breaker = Breaker::new(0.5, 20, Duration::from_secs(30), Duration::from_secs(30));
/// assert!(breaker.check().is_ok());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Breaker {
    /// The share of failed calls (0 < ratio ≤ 1) that opens it.
    pub failure_ratio: f64,
    /// The fewest calls in the window before it may open.
    pub min_calls: u32,
    /// How far back calls are counted.
    pub window: Duration,
    /// How long it stays open before the probe.
    pub open_for: Duration,
}

impl Default for Breaker {
    /// Half of at least 20 calls within 30 s failing opens it for 30 s
    /// ([`defaults`](crate::defaults::BREAKER_FAILURE_RATIO)).
    fn default() -> Self {
        use crate::defaults::{
            BREAKER_FAILURE_RATIO, BREAKER_MIN_CALLS, BREAKER_OPEN_FOR, BREAKER_WINDOW,
        };
        Self::new(
            BREAKER_FAILURE_RATIO,
            BREAKER_MIN_CALLS,
            BREAKER_WINDOW,
            BREAKER_OPEN_FOR,
        )
    }
}

impl Breaker {
    /// A breaker that opens when `failure_ratio` of at least `min_calls` calls in `window` fail,
    /// for `open_for`.
    pub fn new(failure_ratio: f64, min_calls: u32, window: Duration, open_for: Duration) -> Self {
        Self {
            failure_ratio,
            min_calls,
            window,
            open_for,
        }
    }

    /// What is wrong with the settings, naming the setting.
    pub fn check(&self) -> Result<()> {
        let bad = |why: String| Err(Error::new(ErrorKind::Config, format!("`breaker`: {why}")));
        if !(self.failure_ratio > 0.0 && self.failure_ratio <= 1.0) {
            return bad(format!(
                "`failure-ratio` {} is not above 0 and at most 1",
                self.failure_ratio
            ));
        }
        if self.min_calls == 0 {
            return bad("`min-calls` must be at least 1".to_owned());
        }
        if self.window < Duration::from_millis(100) {
            return bad(format!("`window` {:?} is shorter than 100ms", self.window));
        }
        if self.open_for < Duration::from_secs(1) {
            return bad(format!("`open-for` {:?} is shorter than 1s", self.open_for));
        }
        if self.open_for > Duration::from_secs(24 * 3600) {
            return bad(format!("`open-for` {:?} is longer than 24h", self.open_for));
        }
        Ok(())
    }

    /// Whether `failed` of `calls` is enough to open it.
    pub(crate) fn trips(&self, calls: u32, failed: u32) -> bool {
        calls >= self.min_calls && f64::from(failed) >= self.failure_ratio * f64::from(calls)
    }

    /// Whether `failed` of `calls` is enough to open it early, for a failure that would otherwise
    /// dead-letter its record: an outage's first failures must not use up records' attempts
    /// before `min_calls` are counted.
    pub(crate) fn trips_early(&self, calls: u32, failed: u32) -> bool {
        self.judges_early(calls) && f64::from(failed) >= self.failure_ratio * f64::from(calls)
    }

    /// Whether `calls` are enough to judge a failure that would dead-letter its record.
    pub(crate) fn judges_early(&self, calls: u32) -> bool {
        calls >= self.min_calls.min(EARLY_CALLS)
    }

    /// Whether `failed` of `calls` probes keep it open.
    pub(crate) fn probes_fail(&self, calls: u32, failed: u32) -> bool {
        calls > 0 && f64::from(failed) >= self.failure_ratio * f64::from(calls)
    }
}

/// The calls and failures of the last `window`, in ten buckets: constant memory at any rate.
#[derive(Debug)]
pub(crate) struct Window {
    bucket: Duration,
    /// (calls, failed) per bucket, the current one at `head`.
    counts: [(u32, u32); BUCKETS],
    head: usize,
    /// When the bucket at `head` began.
    head_start: Instant,
}

impl Window {
    pub(crate) fn new(window: Duration, now: Instant) -> Self {
        Self {
            bucket: (window / BUCKETS as u32).max(Duration::from_millis(1)),
            counts: [(0, 0); BUCKETS],
            head: 0,
            head_start: now,
        }
    }

    /// Counts one call at `now`.
    pub(crate) fn record(&mut self, failed: bool, now: Instant) {
        self.advance(now);
        let (calls, failures) = &mut self.counts[self.head];
        *calls = calls.saturating_add(1);
        if failed {
            *failures = failures.saturating_add(1);
        }
    }

    /// The calls and failures counted in the window ending at `now`.
    pub(crate) fn totals(&mut self, now: Instant) -> (u32, u32) {
        self.advance(now);
        self.counts.iter().fold((0, 0), |(calls, failed), (c, f)| {
            (calls.saturating_add(*c), failed.saturating_add(*f))
        })
    }

    /// Forgets every call (the breaker opened: what comes after starts afresh).
    pub(crate) fn clear(&mut self, now: Instant) {
        self.counts = [(0, 0); BUCKETS];
        self.head_start = now;
    }

    /// Moves the head to the bucket of `now`, emptying the buckets passed.
    fn advance(&mut self, now: Instant) {
        let passed = now.saturating_duration_since(self.head_start);
        let steps = (passed.as_nanos() / self.bucket.as_nanos()) as u64;
        if steps == 0 {
            return;
        }
        for _ in 0..steps.min(BUCKETS as u64) {
            self.head = (self.head + 1) % BUCKETS;
            self.counts[self.head] = (0, 0);
        }
        self.head_start += self.bucket * u32::try_from(steps).unwrap_or(u32::MAX);
        if steps >= BUCKETS as u64 {
            self.head_start = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> Breaker {
        Breaker::new(0.5, 4, Duration::from_secs(10), Duration::from_secs(5))
    }

    #[test]
    fn trips_on_the_ratio_only_after_enough_calls() {
        let b = breaker();
        assert!(!b.trips(3, 3), "too few calls");
        assert!(b.trips(4, 2));
        assert!(!b.trips(5, 2));
        assert!(!b.trips_early(3, 3), "too few calls even to open early");
        assert!(b.trips_early(4, 4), "min-calls below the early floor");
        let busy = Breaker::new(0.5, 20, Duration::from_secs(10), Duration::from_secs(5));
        assert!(busy.trips_early(5, 3) && !busy.trips(5, 3));
        assert!(!busy.trips_early(5, 2));
        assert!(b.probes_fail(5, 3));
        assert!(!b.probes_fail(5, 2));
        assert!(!b.probes_fail(0, 0));
    }

    #[test]
    fn settings_out_of_range_are_named() {
        for (bad, setting) in [
            (
                Breaker::new(0.0, 4, Duration::from_secs(10), Duration::from_secs(5)),
                "failure-ratio",
            ),
            (
                Breaker::new(f64::NAN, 4, Duration::from_secs(10), Duration::from_secs(5)),
                "failure-ratio",
            ),
            (
                Breaker::new(1.5, 4, Duration::from_secs(10), Duration::from_secs(5)),
                "failure-ratio",
            ),
            (
                Breaker::new(0.5, 0, Duration::from_secs(10), Duration::from_secs(5)),
                "min-calls",
            ),
            (
                Breaker::new(0.5, 4, Duration::ZERO, Duration::from_secs(5)),
                "window",
            ),
            (
                Breaker::new(0.5, 4, Duration::from_secs(10), Duration::ZERO),
                "open-for",
            ),
        ] {
            let err = bad.check().expect_err("out of range");
            assert!(err.message().contains(setting), "{err}");
        }
        assert!(breaker().check().is_ok());
    }

    #[test]
    fn the_window_forgets_calls_older_than_itself() {
        let start = Instant::now();
        let mut w = Window::new(Duration::from_secs(10), start);
        w.record(true, start);
        w.record(false, start + Duration::from_secs(5));
        assert_eq!(w.totals(start + Duration::from_secs(9)), (2, 1));
        // The first call's bucket has slid out; the second is still in.
        assert_eq!(w.totals(start + Duration::from_millis(10_500)), (1, 0));
        assert_eq!(w.totals(start + Duration::from_secs(60)), (0, 0));
        w.record(true, start + Duration::from_secs(61));
        assert_eq!(w.totals(start + Duration::from_secs(61)), (1, 1));
        w.clear(start + Duration::from_secs(62));
        assert_eq!(w.totals(start + Duration::from_secs(62)), (0, 0));
    }
}
