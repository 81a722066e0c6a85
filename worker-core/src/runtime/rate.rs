//! [`RateLimit`]: how often records may start, as the builder and the TOML file say it
//! (`"100/s"`, a burst), and the limiters that keep it ([`governor`]'s GCRA) on tokio's clock, so
//! paused-time tests see the limits as production does.
//!
//! A per-key limiter keeps one state per key. Keys are untrusted (a producer can send millions
//! of distinct ones), so the state is bounded: a key is stored as a 64-bit hash (keyed per worker,
//! so nobody can aim collisions; a collision only makes two keys share a limit, never exceed one),
//! at most [`MAX_KEYS`] keys are kept, keys whose limit has fully replenished are evicted when the
//! table is full, and while it is still full a record of a new key waits as if over its limit
//! until entries age out (at most one burst period). Memory stays below a few MiB whatever the
//! keys.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::ops::Add;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::ShrinkableKeyedStateStore;
use governor::state::{InMemoryState, NotKeyed, StateStore};
use governor::{Quota, RateLimiter};
use tokio::time::Instant;

use crate::{Error, ErrorKind, Result};

/// The most keys a per-key limiter keeps state for.
pub(crate) const MAX_KEYS: usize = 65_536;

/// How often records may start: `count` per `per`, with bursts of up to `burst` (default
/// `count`) at once. Parsed from `"100/s"`, `"1/s"`, `"600/min"`, `"5/250ms"`, `"3600/h"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    count: u32,
    per: Duration,
    burst: Option<u32>,
}

impl RateLimit {
    /// `count` records per `per`.
    pub fn new(count: u32, per: Duration) -> Self {
        Self {
            count,
            per,
            burst: None,
        }
    }

    /// `count` records a second.
    pub fn per_second(count: u32) -> Self {
        Self::new(count, Duration::from_secs(1))
    }

    /// Allows up to `burst` records at once after a quiet spell (default: the count). 1 spaces
    /// every record evenly.
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// How many records per [`period`](Self::period).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period the count is for.
    pub fn period(&self) -> Duration {
        self.per
    }

    /// The burst, if set (default: the count).
    pub fn burst_size(&self) -> Option<u32> {
        self.burst
    }

    /// The quota, or what is wrong with it (for `what`, a setting's name).
    pub(crate) fn quota(&self, what: &str) -> Result<Quota> {
        let bad = |why: &str| Error::new(ErrorKind::Config, format!("`{what}`: {why}"));
        let count = NonZeroU32::new(self.count).ok_or_else(|| bad("expected at least 1 record"))?;
        let burst = NonZeroU32::new(self.burst.unwrap_or(self.count))
            .ok_or_else(|| bad("expected a burst of at least 1"))?;
        let interval = self.per / count.get();
        Quota::with_period(interval)
            .map(|quota| quota.allow_burst(burst))
            .ok_or_else(|| bad("expected a period of at least 1ns per record"))
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.count, humantime::format_duration(self.per))?;
        if let Some(burst) = self.burst {
            write!(f, " (burst {burst})")?;
        }
        Ok(())
    }
}

impl FromStr for RateLimit {
    type Err = String;

    /// `COUNT/PERIOD`: `100/s`, `10/min`, `1/h`, `5/250ms`, `2/3s` (a humantime duration, a bare
    /// unit meaning one of it).
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let expected = || format!("expected a rate like \"100/s\" or \"1/min\", found {text:?}");
        let (count, per) = text.split_once('/').ok_or_else(expected)?;
        let count: u32 = count.trim().parse().map_err(|_| expected())?;
        let per = per.trim();
        let per = if per.starts_with(|c: char| c.is_ascii_digit()) {
            humantime::parse_duration(per).map_err(|_| expected())?
        } else {
            humantime::parse_duration(&format!("1{per}")).map_err(|_| expected())?
        };
        if count == 0 || per.is_zero() {
            return Err(format!(
                "{}: the count and the period must be above 0",
                expected()
            ));
        }
        Ok(Self::new(count, per))
    }
}

/// tokio's clock for governor (virtual in paused-time tests).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TokioClock;

/// An instant of [`TokioClock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Tick(Instant);

impl Add<Nanos> for Tick {
    type Output = Tick;

    fn add(self, nanos: Nanos) -> Tick {
        Tick(self.0 + Duration::from(nanos))
    }
}

impl Reference for Tick {
    fn duration_since(&self, earlier: Self) -> Nanos {
        self.0.saturating_duration_since(earlier.0).into()
    }

    fn saturating_sub(&self, duration: Nanos) -> Self {
        Tick(self.0.checked_sub(duration.into()).unwrap_or(self.0))
    }
}

impl Clock for TokioClock {
    type Instant = Tick;

    fn now(&self) -> Tick {
        Tick(Instant::now())
    }
}

/// One limit shared by a route (or the whole worker).
pub(crate) struct Limiter {
    limiter: RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Tick>>,
    interval: Duration,
}

impl Limiter {
    pub(crate) fn new(quota: Quota) -> Self {
        Self {
            interval: quota.replenish_interval(),
            limiter: RateLimiter::direct_with_clock(quota, TokioClock),
        }
    }

    /// Takes a permit, or says how long until one is there.
    pub(crate) fn check(&self) -> std::result::Result<(), Duration> {
        self.limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(TokioClock.now()))
    }

    /// The time between two permits.
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// One limit per key, for at most [`MAX_KEYS`] keys (see the module docs).
pub(crate) struct KeyedLimiter {
    limiter: RateLimiter<u64, KeyStates, TokioClock, NoOpMiddleware<Tick>>,
    /// The same states as the limiter's, to ask whether a key has one.
    states: KeyStates,
    interval: Duration,
    /// How long a key's state lives after its last permit: one burst's worth of intervals
    /// (governor forgets a state one interval after that).
    lifetime: Duration,
    max_keys: usize,
}

impl KeyedLimiter {
    pub(crate) fn new(quota: Quota) -> Self {
        Self::bounded(quota, MAX_KEYS)
    }

    fn bounded(quota: Quota, max_keys: usize) -> Self {
        let states = KeyStates::default();
        Self {
            interval: quota.replenish_interval(),
            lifetime: quota.burst_size_replenished_in(),
            limiter: RateLimiter::new(quota, states.clone(), TokioClock),
            states,
            max_keys,
        }
    }

    /// Takes a permit for `key`, or says how long until one is there.
    pub(crate) fn check(&self, key: u64) -> std::result::Result<(), Duration> {
        if self.states.len() >= self.max_keys && !self.states.contains(key) {
            self.limiter.retain_recent();
            if self.states.len() >= self.max_keys {
                // Every key kept is still limited: a new key waits until one ages out.
                return Err(self.lifetime + self.interval);
            }
        }
        self.limiter
            .check_key(&key)
            .map_err(|not_until| not_until.wait_time_from(TokioClock.now()))
    }

    /// The time between two permits of one key.
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }
}

impl fmt::Debug for KeyedLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("interval", &self.interval)
            .field("keys", &self.states.len())
            .finish_non_exhaustive()
    }
}

/// The per-key states: a key's theoretical arrival time (governor's GCRA state), by key hash.
/// Clones share the states.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyStates {
    states: Arc<Mutex<HashMap<u64, u64>>>,
}

impl KeyStates {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, u64>> {
        // Uncontended: only the dispatcher checks limits.
        self.states.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn contains(&self, key: u64) -> bool {
        self.lock().contains_key(&key)
    }
}

impl StateStore for KeyStates {
    type Key = u64;

    fn measure_and_replace<T, F, E>(&self, key: &u64, f: F) -> std::result::Result<T, E>
    where
        F: Fn(Option<Nanos>) -> std::result::Result<(T, Nanos), E>,
    {
        // The lock makes read-and-replace atomic, as the trait asks.
        let mut states = self.lock();
        let previous = states.get(key).copied().map(Nanos::from);
        let (outcome, next) = f(previous)?;
        states.insert(*key, next.into());
        Ok(outcome)
    }
}

impl ShrinkableKeyedStateStore<u64> for KeyStates {
    fn retain_recent(&self, drop_below: Nanos) {
        let drop_below = u64::from(drop_below);
        // A state at or below `drop_below` has replenished fully: forgetting it changes nothing.
        self.lock().retain(|_, tat| *tat > drop_below);
    }

    fn shrink_to_fit(&self) {
        self.lock().shrink_to_fit();
    }

    fn len(&self) -> usize {
        self.lock().len()
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_from_the_toml_forms() {
        let parse = |text: &str| text.parse::<RateLimit>();
        assert_eq!(parse("100/s"), Ok(RateLimit::per_second(100)));
        assert_eq!(parse("1/s"), Ok(RateLimit::per_second(1)));
        assert_eq!(
            parse("10/min"),
            Ok(RateLimit::new(10, Duration::from_secs(60)))
        );
        assert_eq!(
            parse(" 5 / 250ms "),
            Ok(RateLimit::new(5, Duration::from_millis(250)))
        );
        assert_eq!(
            parse("3600/h"),
            Ok(RateLimit::new(3600, Duration::from_secs(3600)))
        );
        for bad in [
            "",
            "100",
            "0/s",
            "1/0s",
            "x/s",
            "1/fortnight",
            "-1/s",
            "1/s/s",
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(err.contains("expected a rate"), "{err}");
        }
        let quota = RateLimit::per_second(10).quota("rate").expect("valid");
        assert_eq!(quota.replenish_interval(), Duration::from_millis(100));
        assert_eq!(quota.burst_size().get(), 10);
        let quota = RateLimit::per_second(10)
            .burst(1)
            .quota("rate")
            .expect("valid");
        assert_eq!(quota.burst_size().get(), 1);
        let err = RateLimit::per_second(0)
            .quota("rate-per-key")
            .expect_err("zero");
        assert!(err.message().contains("`rate-per-key`"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_counts_on_tokio_s_clock() {
        let limiter = Limiter::new(RateLimit::per_second(2).burst(1).quota("r").expect("valid"));
        assert_eq!(limiter.check(), Ok(()));
        let wait = limiter.check().expect_err("limited");
        assert_eq!(wait, Duration::from_millis(500));
        tokio::time::advance(wait).await;
        assert_eq!(limiter.check(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn keys_are_limited_apart_and_their_states_stay_bounded() {
        let quota = RateLimit::per_second(1)
            .quota("rate-per-key")
            .expect("valid");
        let keyed = KeyedLimiter::bounded(quota, 3);
        assert_eq!(keyed.check(1), Ok(()));
        assert!(keyed.check(1).is_err(), "key 1 used its second");
        assert_eq!(keyed.check(2), Ok(()), "key 2 has its own limit");
        assert_eq!(keyed.check(3), Ok(()));
        // Full of limited keys: a new key waits rather than growing the table.
        let wait = keyed.check(4).expect_err("the table is full");
        assert_eq!(keyed.states.len(), 3);
        tokio::time::advance(wait).await;
        // The old keys replenished: they are evicted and the new key gets its permit.
        assert_eq!(keyed.check(4), Ok(()));
        assert!(keyed.states.len() <= 3);
        // Millions of distinct keys never grow it past the bound.
        for key in 10..10_000 {
            let _ = keyed.check(key);
        }
        assert!(keyed.states.len() <= 3);
    }
}
