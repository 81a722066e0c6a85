//! [`Backoff`]: how long a failed record waits before its next attempt.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

use crate::checks::{self, BackoffPart};
use crate::{Error, ErrorKind, Result};

/// An exponential backoff with optional jitter, computed from the attempt number (the broker's
/// delivery count), so it is the same on every worker and survives restarts.
///
/// The delay after attempt `n` (1-based) is `d(n) = min(initial × factor^(n−1), max)`; with jitter
/// (the default) a random extra of up to `d(n)` is added, so the delay lies in `[d(n), 2·d(n))`.
/// The delays come from [`backon`]'s [`ExponentialBuilder`].
///
/// ```
/// use std::time::Duration;
/// use worker_core::policy::Backoff;
///
/// let backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60))
///     .factor(3.0)
///     .jitter(false);
/// assert_eq!(backoff.delay(1), Duration::from_secs(1));
/// assert_eq!(backoff.delay(3), Duration::from_secs(9));
/// assert_eq!(backoff.delay(10), Duration::from_secs(60));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    factor: f32,
    jitter: bool,
}

impl Default for Backoff {
    /// 1 s after the first attempt, doubling up to 5 min, with jitter.
    fn default() -> Self {
        Self::exponential(
            crate::defaults::BACKOFF_INITIAL,
            crate::defaults::BACKOFF_MAX,
        )
    }
}

impl Backoff {
    /// Starts at `initial` and doubles up to `max`, with jitter.
    pub fn exponential(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            factor: crate::defaults::BACKOFF_FACTOR,
            jitter: true,
        }
    }

    /// Multiplies the delay by `factor` after each attempt (at least 1; default 2).
    pub fn factor(mut self, factor: f32) -> Self {
        self.factor = factor;
        self
    }

    /// Adds a random extra of up to the delay itself (default on), so records that failed together
    /// do not come back together.
    pub fn jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// The delay after the first attempt.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The largest delay before jitter.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The range the delay after attempt `attempt` falls in: `[d, d]` without jitter, `[d, 2d)` with.
    pub fn window(&self, attempt: u16) -> (Duration, Duration) {
        let base = self.base(attempt);
        if self.jitter {
            (base, base.saturating_mul(2))
        } else {
            (base, base)
        }
    }

    /// The delay after attempt `attempt` (1-based; 0 counts as 1).
    pub fn delay(&self, attempt: u16) -> Duration {
        let mut builder = ExponentialBuilder::default()
            .with_min_delay(self.initial)
            .with_max_delay(self.max)
            .with_factor(self.factor)
            .without_max_times();
        if self.jitter {
            builder = builder.with_jitter();
        }
        let n = usize::from(attempt.max(1)) - 1;
        builder.build().nth(n).unwrap_or(self.max)
    }

    /// The delay before jitter.
    fn base(&self, attempt: u16) -> Duration {
        self.jitter(false).delay(attempt)
    }

    /// Checks the settings; `name` is the builder setting, for the error.
    pub(crate) fn validate(&self, name: &str) -> Result<()> {
        checks::backoff(self.initial, self.max, f64::from(self.factor)).map_err(|(part, why)| {
            let part = match part {
                BackoffPart::Initial => "initial delay",
                BackoffPart::Max => "max delay",
                BackoffPart::Factor => "factor",
            };
            Error::new(ErrorKind::Config, format!("`{name}` {part}: {why}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_up_to_the_max() {
        let b =
            Backoff::exponential(Duration::from_millis(100), Duration::from_secs(1)).jitter(false);
        let delays: Vec<_> = (1..=6).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.delay(0), b.delay(1));
        assert_eq!(b.delay(u16::MAX), Duration::from_secs(1));
    }

    #[test]
    fn jitter_stays_inside_the_window() {
        let b = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(10));
        for attempt in 1..=8 {
            let (low, high) = b.window(attempt);
            for _ in 0..50 {
                let d = b.delay(attempt);
                assert!(
                    d >= low && d < high,
                    "attempt {attempt}: {d:?} not in [{low:?}, {high:?})"
                );
            }
        }
    }

    #[test]
    fn validation_names_the_setting() {
        let bad = [
            Backoff::exponential(Duration::ZERO, Duration::from_secs(1)),
            Backoff::exponential(Duration::from_secs(2), Duration::from_secs(1)),
            Backoff::default().factor(0.5),
            Backoff::default().factor(f32::NAN),
        ];
        for b in bad {
            let err = b.validate("backoff").unwrap_err();
            assert!(err.message().starts_with("`backoff`"), "{err}");
        }
        Backoff::default().validate("backoff").unwrap();
    }
}
