//! [`RateLimit`]: how often records may start, as the builder and the TOML file say it
//! (`"100/s"`, a burst), and the limiters that keep it ([`governor`]'s GCRA) on tokio's clock, so
//! paused-time tests see the limits as production does.
//!
//! A per-key limiter keeps one state per key. Keys are untrusted (a producer can send millions
//! of distinct ones), so the state is bounded: a key is stored as a 64-bit hash (keyed per worker,
//! so nobody can aim collisions; a collision only makes two keys share a limit, never exceed one),
//! and at most [`MAX_KEYS`] keys are kept. When the table is full, a new key first lets the
//! limiter forget the keys whose limit has fully replenished — a scan of the table, made at most
//! once per interval of the limit — and otherwise takes the place of the least recently used key.
//! A new key is so never locked out; what an overflowing table costs is that a key unseen for
//! longer than [`MAX_KEYS`] others may start afresh (its next burst early). Memory stays below a
//! few MiB whatever the keys.

use std::collections::{BTreeMap, HashMap};
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

    /// What is wrong with the limit, if anything (`what` names the setting in the error): the
    /// check the builder makes, for configuration layers that check before they build.
    pub fn check(&self, what: &str) -> Result<()> {
        self.quota(what).map(drop)
    }

    /// The quota, or what is wrong with it (for `what`, a setting's name).
    pub(crate) fn quota(&self, what: &str) -> Result<Quota> {
        self.shared_quota(what, 1)
    }

    /// One of `workers` equal shares of the limit: the interval between permits `workers` times
    /// as long, the burst divided (rounded up, at least 1).
    pub(crate) fn shared_quota(&self, what: &str, workers: u32) -> Result<Quota> {
        let bad = |why: &str| Error::new(ErrorKind::Config, format!("`{what}`: {why}"));
        let count = NonZeroU32::new(self.count).ok_or_else(|| bad("expected at least 1 record"))?;
        let burst = NonZeroU32::new(self.burst.unwrap_or(self.count))
            .ok_or_else(|| bad("expected a burst of at least 1"))?;
        let workers = workers.max(1);
        let burst = NonZeroU32::new(burst.get().div_ceil(workers)).unwrap_or(NonZeroU32::MIN);
        let interval = self.per.saturating_mul(workers) / count.get();
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

    /// A limiter whose burst is used up: its permits come at the rate from now on. For a limiter
    /// that replaces one in use, so the change of limit grants no extra burst.
    pub(crate) fn spent(quota: Quota) -> Self {
        let limiter = Self::new(quota);
        while limiter.limiter.check().is_ok() {}
        limiter
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
    /// The same states as the limiter's, to ask whether a key has one and to evict.
    states: KeyStates,
    interval: Duration,
    max_keys: usize,
    /// When the table was last scanned for replenished keys.
    scanned: Mutex<Option<Instant>>,
}

impl KeyedLimiter {
    pub(crate) fn new(quota: Quota) -> Self {
        Self::bounded(quota, MAX_KEYS)
    }

    fn bounded(quota: Quota, max_keys: usize) -> Self {
        let states = KeyStates::default();
        Self {
            interval: quota.replenish_interval(),
            limiter: RateLimiter::new(quota, states.clone(), TokioClock),
            states,
            max_keys: max_keys.max(1),
            scanned: Mutex::new(None),
        }
    }

    /// Takes a permit for `key`, or says how long until one is there.
    pub(crate) fn check(&self, key: u64) -> std::result::Result<(), Duration> {
        if self.states.len() >= self.max_keys && !self.states.contains(key) {
            self.scan_if_due();
            while self.states.len() >= self.max_keys && self.states.evict_least_recent() {}
        }
        self.limiter
            .check_key(&key)
            .map_err(|not_until| not_until.wait_time_from(TokioClock.now()))
    }

    /// Lets the limiter forget fully replenished keys, at most once per interval.
    fn scan_if_due(&self) {
        let now = Instant::now();
        let mut scanned = self.scanned.lock().unwrap_or_else(|e| e.into_inner());
        if scanned.is_some_and(|at| now.saturating_duration_since(at) < self.interval) {
            return;
        }
        *scanned = Some(now);
        drop(scanned);
        self.limiter.retain_recent();
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

/// The per-key states: a key's theoretical arrival time (governor's GCRA state), by key hash,
/// with the order in which keys were last used. Clones share the states.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyStates {
    table: Arc<Mutex<KeyTable>>,
}

#[derive(Debug, Default)]
struct KeyTable {
    /// Key → (theoretical arrival time, the use that last touched it).
    states: HashMap<u64, (u64, u64)>,
    /// Use → key, oldest first.
    by_use: BTreeMap<u64, u64>,
    uses: u64,
}

impl KeyStates {
    fn lock(&self) -> std::sync::MutexGuard<'_, KeyTable> {
        // Uncontended: only the dispatcher checks limits.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn contains(&self, key: u64) -> bool {
        self.lock().states.contains_key(&key)
    }

    /// Forgets the least recently used key; `false` when there is none.
    fn evict_least_recent(&self) -> bool {
        let mut table = self.lock();
        let Some((_, key)) = table.by_use.pop_first() else {
            return false;
        };
        table.states.remove(&key);
        true
    }
}

impl StateStore for KeyStates {
    type Key = u64;

    fn measure_and_replace<T, F, E>(&self, key: &u64, f: F) -> std::result::Result<T, E>
    where
        F: Fn(Option<Nanos>) -> std::result::Result<(T, Nanos), E>,
    {
        // The lock makes read-and-replace atomic, as the trait asks.
        let mut table = self.lock();
        let previous = table.states.get(key).copied();
        let (outcome, next) = f(previous.map(|(tat, _)| Nanos::from(tat)))?;
        table.uses += 1;
        let used = table.uses;
        if let Some((_, last)) = previous {
            table.by_use.remove(&last);
        }
        table.by_use.insert(used, *key);
        table.states.insert(*key, (next.into(), used));
        Ok(outcome)
    }
}

impl ShrinkableKeyedStateStore<u64> for KeyStates {
    fn retain_recent(&self, drop_below: Nanos) {
        let drop_below = u64::from(drop_below);
        // A state at or below `drop_below` has replenished fully: forgetting it changes nothing.
        let table = &mut *self.lock();
        let by_use = &mut table.by_use;
        table.states.retain(|_, (tat, used)| {
            let keep = *tat > drop_below;
            if !keep {
                by_use.remove(used);
            }
            keep
        });
    }

    fn shrink_to_fit(&self) {
        self.lock().states.shrink_to_fit();
    }

    fn len(&self) -> usize {
        self.lock().states.len()
    }

    fn is_empty(&self) -> bool {
        self.lock().states.is_empty()
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
        // Full of limited keys: a new key takes the place of the least recently used one (key 1),
        // and the table does not grow.
        assert_eq!(keyed.check(4), Ok(()), "a new key is never locked out");
        assert_eq!(keyed.states.len(), 3);
        assert!(!keyed.states.contains(1) && keyed.states.contains(2));
        assert!(keyed.check(2).is_err(), "key 2 kept its state");
        // Millions of distinct keys never grow it past the bound.
        for key in 10..10_000 {
            let _ = keyed.check(key);
        }
        let kept = keyed.states.len();
        assert!(kept <= 3);
        let by_use = keyed.states.lock().by_use.len();
        assert_eq!(by_use, kept, "one use per kept key");
    }

    /// A full table of keys limited to 1/h: a new key gets its permit at once (not in an hour),
    /// and the table is scanned for replenished keys at most once per interval however many new
    /// keys come.
    #[tokio::test(start_paused = true)]
    async fn a_full_table_of_hourly_keys_admits_new_keys_and_is_scanned_once_per_interval() {
        let quota = RateLimit::new(1, Duration::from_secs(3_600))
            .quota("rate-per-key")
            .expect("valid");
        let keyed = KeyedLimiter::bounded(quota, 1_000);
        for key in 0..1_000 {
            assert_eq!(keyed.check(key), Ok(()));
        }
        let first_scan = || *keyed.scanned.lock().unwrap();
        for key in 1_000..5_000 {
            assert_eq!(keyed.check(key), Ok(()), "new key {key}");
        }
        let scanned = first_scan().expect("scanned once");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(keyed.check(9_999), Ok(()));
        assert_eq!(
            first_scan(),
            Some(scanned),
            "no second scan within the interval"
        );
        tokio::time::advance(Duration::from_secs(3_600)).await;
        assert_eq!(keyed.check(10_000), Ok(()));
        assert!(
            first_scan() > Some(scanned),
            "scanned again after the interval"
        );
        assert!(keyed.states.len() <= 1_000);
    }

    #[test]
    fn a_shared_limit_is_an_equal_part_of_the_whole() {
        let rate = RateLimit::per_second(30);
        let third = rate.shared_quota("r", 3).expect("valid");
        assert_eq!(third.replenish_interval(), Duration::from_millis(100));
        assert_eq!(third.burst_size().get(), 10);
        let spaced = RateLimit::per_second(30)
            .burst(1)
            .shared_quota("r", 4)
            .expect("valid");
        assert_eq!(spaced.burst_size().get(), 1, "at least one");
        assert_eq!(
            rate.shared_quota("r", 0).expect("valid"),
            rate.quota("r").expect("valid")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_spent_limiter_grants_no_burst() {
        let quota = RateLimit::per_second(10).quota("r").expect("valid");
        let limiter = Limiter::spent(quota);
        assert_eq!(limiter.check(), Err(Duration::from_millis(100)));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(limiter.check(), Ok(()));
        assert!(limiter.check().is_err());
    }
}
