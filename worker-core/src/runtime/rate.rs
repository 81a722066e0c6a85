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
use governor::state::{NotKeyed, StateStore};
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
    /// as long, the burst divided (rounded down, at least 1), so the shares' bursts add up to
    /// at most the burst (or to `workers`, when there are more workers than the burst).
    /// How long the whole rate takes to refill its burst (at least its interval).
    pub(crate) fn refill(&self) -> Duration {
        let count = self.count.max(1);
        let burst = self.burst.unwrap_or(count).max(1);
        self.per.saturating_mul(burst) / count
    }

    pub(crate) fn shared_quota(&self, what: &str, workers: u32) -> Result<Quota> {
        let bad = |why: &str| Error::new(ErrorKind::Config, format!("`{what}`: {why}"));
        let count = NonZeroU32::new(self.count).ok_or_else(|| bad("expected at least 1 record"))?;
        let burst = NonZeroU32::new(self.burst.unwrap_or(self.count))
            .ok_or_else(|| bad("expected a burst of at least 1"))?;
        let workers = workers.max(1);
        let burst = NonZeroU32::new(burst.get() / workers).unwrap_or(NonZeroU32::MIN);
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

/// A limiter's quota and start: what its GCRA states mean in time.
#[derive(Clone, Copy, Debug)]
struct Schedule {
    quota: Quota,
    /// When the limiter was made: governor counts its states from about then (it reads the
    /// clock a moment later, so a carried permit may come that moment late, never early).
    created: Instant,
}

impl Schedule {
    fn new(quota: Quota) -> Self {
        Self {
            quota,
            created: Instant::now(),
        }
    }

    fn interval(&self) -> Duration {
        self.quota.replenish_interval()
    }

    fn burst(&self) -> u32 {
        self.quota.burst_size().get()
    }

    /// The burst after the first permit: governor's GCRA gives the next permit at `tat - tau`.
    fn tau(&self) -> Duration {
        self.interval() * (self.burst() - 1)
    }

    /// Nanoseconds since the start, as governor keeps its states.
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.created).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The state with `tokens` permits there at `now` (at most the burst; with none, the next
    /// one an interval later).
    fn with_tokens(&self, tokens: u32, now: Instant) -> u64 {
        let spent = self.burst().saturating_sub(tokens);
        self.nanos(now.checked_add(self.interval() * spent).unwrap_or(now))
    }

    /// The permits state `tat` has at `now`, or when its next one comes.
    fn tokens(&self, tat: u64, now: Instant) -> std::result::Result<u32, Instant> {
        let replenished = self.created + Duration::from_nanos(tat);
        if replenished <= now {
            return Ok(self.burst());
        }
        let next_permit = replenished.checked_sub(self.tau()).unwrap_or(self.created);
        if next_permit > now {
            return Err(next_permit);
        }
        let earned = now.duration_since(next_permit).as_nanos() / self.interval().as_nanos().max(1);
        Ok(u32::try_from(earned + 1)
            .unwrap_or(u32::MAX)
            .min(self.burst()))
    }

    /// The state in `next` of a state `tat` of this schedule at `now`: as many permits as it
    /// has now (at most `next`'s burst), or, with none, the same next permit and the burst
    /// after it spent.
    ///
    /// A change of share so never adds a permit: the permits a fleet has at any instant never
    /// add up to more than its burst, and it gains more only at the rate. Nor does it cost
    /// anyone its place in the old schedule (a fleet whose shares change at every join would
    /// otherwise lose up to an interval per member at each change).
    fn carry(&self, tat: u64, next: &Schedule, now: Instant) -> u64 {
        match self.tokens(tat, now) {
            Ok(tokens) => next.with_tokens(tokens.min(next.burst()), now),
            Err(next_permit) => next
                .nanos(next_permit)
                .saturating_add(u64::try_from(next.tau().as_nanos()).unwrap_or(u64::MAX)),
        }
    }
}

/// One limit shared by a route (or the whole worker).
pub(crate) struct Limiter {
    limiter: RateLimiter<NotKeyed, OneState, TokioClock, NoOpMiddleware<Tick>>,
    /// The same state as the limiter's, to carry it over to a replacement.
    state: OneState,
    schedule: Schedule,
}

impl Limiter {
    pub(crate) fn new(quota: Quota) -> Self {
        let state = OneState::default();
        Self {
            schedule: Schedule::new(quota),
            limiter: RateLimiter::new(quota, state.clone(), TokioClock),
            state,
        }
    }

    /// Uses up the burst: the permits come at the rate from now on.
    pub(crate) fn spend(&self) {
        while self.limiter.check().is_ok() {}
    }

    /// A limiter of `quota` replacing this one, with the permits this one has (see
    /// [`Schedule::carry`]).
    pub(crate) fn reshared(&self, quota: Quota) -> Self {
        let next = Self::new(quota);
        let tat = self.state.lock().unwrap_or(0);
        *next.state.lock() = Some(self.schedule.carry(tat, &next.schedule, Instant::now()));
        next
    }

    /// Takes a permit, or says how long until one is there.
    pub(crate) fn check(&self) -> std::result::Result<(), Duration> {
        self.limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(TokioClock.now()))
    }

    /// The time between two permits.
    pub(crate) fn interval(&self) -> Duration {
        self.schedule.quota.replenish_interval()
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("interval", &self.interval())
            .finish_non_exhaustive()
    }
}

/// One limit per key, for at most [`MAX_KEYS`] keys (see the module docs).
pub(crate) struct KeyedLimiter {
    limiter: RateLimiter<u64, KeyStates, TokioClock, NoOpMiddleware<Tick>>,
    /// The same states as the limiter's, to ask whether a key has one and to evict.
    states: KeyStates,
    schedule: Schedule,
    /// For a limiter shared with a fleet: the permits a key first seen before the instant
    /// starts with, fewer than the burst (see [`KeyedLimiter::joining`]).
    fresh: Option<(u32, Instant)>,
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
            schedule: Schedule::new(quota),
            limiter: RateLimiter::new(quota, states.clone(), TokioClock),
            states,
            fresh: None,
            max_keys: max_keys.max(1),
            scanned: Mutex::new(None),
        }
    }

    /// A limiter of a share of a fleet's rate, for a worker that just took it up: for
    /// `refill` (the time the whole rate takes to refill its burst) a key it has not seen
    /// starts with one permit, not its share of the burst. The workers already there may have
    /// spent the fleet's burst on that key just now; a newcomer's full share on top would
    /// overshoot it.
    pub(crate) fn joining(quota: Quota, refill: Duration) -> Self {
        let mut limiter = Self::new(quota);
        limiter.fresh = Some((1, Instant::now() + refill));
        limiter
    }

    /// For a worker that may not start records of this limit now (its share not yet granted,
    /// or its lease lapsed): forgets every key and starts each, until `refill` after the last
    /// call, with one permit, as [`KeyedLimiter::joining`] does. Permits saved up while it could
    /// not start would otherwise come on top of what the others start when it may again.
    pub(crate) fn hold(&mut self, refill: Duration) {
        let until = Instant::now() + refill;
        {
            let mut table = self.states.lock();
            if !table.states.is_empty() {
                table.states.clear();
                table.by_use.clear();
            }
        }
        self.fresh = Some(match self.fresh {
            Some((tokens, _)) => (tokens.min(1), until),
            None => (1, until),
        });
    }

    /// A limiter of `quota` replacing this one: each key keeps the permits it has (see
    /// [`Schedule::carry`]). When the share grows (a worker left), a key not seen yet starts
    /// with the old, smaller burst for `refill`: the worker that left may have spent its burst
    /// on that key just before. Costs one pass over the kept keys (at most [`MAX_KEYS`]), at
    /// each change.
    pub(crate) fn reshared(&self, quota: Quota, refill: Duration) -> Self {
        let mut next = Self::bounded(quota, self.max_keys);
        let now = Instant::now();
        let old = self.states.lock();
        let mut new = next.states.lock();
        for (key, (tat, _)) in &old.states {
            new.set(*key, self.schedule.carry(*tat, &next.schedule, now));
        }
        drop((old, new));
        let kept = self.fresh.filter(|(_, until)| *until > now);
        let grown = (next.schedule.burst() > self.schedule.burst())
            .then(|| (self.schedule.burst(), now + refill));
        next.fresh = match (kept, grown) {
            (Some((a, until_a)), Some((b, until_b))) => Some((a.min(b), until_a.max(until_b))),
            (one, other) => one.or(other),
        };
        next
    }

    /// Takes a permit for `key`, or says how long until one is there.
    pub(crate) fn check(&self, key: u64) -> std::result::Result<(), Duration> {
        if self.states.len() >= self.max_keys && !self.states.contains(key) {
            self.scan_if_due();
            while self.states.len() >= self.max_keys && self.states.evict_least_recent() {}
        }
        if let Some((tokens, until)) = self.fresh {
            let now = Instant::now();
            if now < until && tokens < self.schedule.burst() {
                let state = self.schedule.with_tokens(tokens, now);
                self.states.lock().set_if_absent(key, state);
            }
        }
        self.limiter
            .check_key(&key)
            .map_err(|not_until| not_until.wait_time_from(TokioClock.now()))
    }

    /// Lets the limiter forget fully replenished keys, at most once per interval.
    fn scan_if_due(&self) {
        let now = Instant::now();
        let mut scanned = self.scanned.lock().unwrap_or_else(|e| e.into_inner());
        if scanned.is_some_and(|at| now.saturating_duration_since(at) < self.interval()) {
            return;
        }
        *scanned = Some(now);
        drop(scanned);
        self.limiter.retain_recent();
    }

    /// The time between two permits of one key.
    pub(crate) fn interval(&self) -> Duration {
        self.schedule.quota.replenish_interval()
    }
}

impl fmt::Debug for KeyedLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("interval", &self.interval())
            .field("keys", &self.states.len())
            .finish_non_exhaustive()
    }
}

/// The one state of a [`Limiter`] (governor's GCRA state; `None` before the first permit).
/// Clones share the state.
#[derive(Clone, Debug, Default)]
pub(crate) struct OneState {
    tat: Arc<Mutex<Option<u64>>>,
}

impl OneState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        // Uncontended: only the dispatcher checks limits.
        self.tat.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl StateStore for OneState {
    type Key = NotKeyed;

    fn measure_and_replace<T, F, E>(&self, _: &NotKeyed, f: F) -> std::result::Result<T, E>
    where
        F: Fn(Option<Nanos>) -> std::result::Result<(T, Nanos), E>,
    {
        // The lock makes read-and-replace atomic, as the trait asks.
        let mut tat = self.lock();
        let (outcome, next) = f(tat.map(Nanos::from))?;
        *tat = Some(next.into());
        Ok(outcome)
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

impl KeyTable {
    /// Sets `key`'s state unless it has one.
    fn set_if_absent(&mut self, key: u64, tat: u64) {
        if !self.states.contains_key(&key) {
            self.set(key, tat);
        }
    }

    /// Sets `key`'s state, as its most recent use.
    fn set(&mut self, key: u64, tat: u64) {
        self.uses += 1;
        let used = self.uses;
        if let Some((_, last)) = self.states.insert(key, (tat, used)) {
            self.by_use.remove(&last);
        }
        self.by_use.insert(used, key);
    }
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
        table.set(*key, next.into());
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
        let sevenths = rate.shared_quota("r", 7).expect("valid");
        assert_eq!(
            sevenths.burst_size().get(),
            4,
            "30 / 7 rounded down: 28 in all"
        );
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

    const SECOND: Duration = Duration::from_secs(1);

    /// How many permits `check` grants in a row now.
    fn permits(mut check: impl FnMut() -> std::result::Result<(), Duration>) -> usize {
        (0..1_000).take_while(|_| check().is_ok()).count()
    }

    #[tokio::test(start_paused = true)]
    async fn a_reshared_key_limiter_keeps_each_key_s_permits_and_adds_none() {
        let rate = RateLimit::per_second(10);
        let keyed = KeyedLimiter::new(rate.quota("r").expect("valid"));
        assert_eq!(keyed.check(1), Ok(()), "key 1 used one of its burst");
        let half = keyed.reshared(rate.shared_quota("r", 2).expect("valid"), SECOND);
        assert_eq!(
            permits(|| half.check(1)),
            5,
            "key 1 has 9 permits, 5 fit the share"
        );
        assert_eq!(half.check(1), Err(Duration::from_millis(200)));
        assert_eq!(
            permits(|| half.check(2)),
            5,
            "an unseen key has the share's burst"
        );
        tokio::time::advance(Duration::from_millis(200)).await;
        let whole = half.reshared(rate.quota("r").expect("valid"), SECOND);
        assert_eq!(permits(|| whole.check(1)), 1, "the permit earned, no more");
        assert_eq!(
            permits(|| whole.check(3)),
            5,
            "for a refill after the share grew, an unseen key has the old burst"
        );
        tokio::time::advance(SECOND).await;
        assert_eq!(permits(|| whole.check(4)), 10, "then the new one");
        assert_eq!(permits(|| whole.check(1)), 10, "and a replenished key too");
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_joining_a_fleet_starts_unseen_keys_with_one_permit_for_a_refill() {
        let rate = RateLimit::per_second(10);
        let keyed = KeyedLimiter::joining(rate.shared_quota("r", 2).expect("valid"), SECOND);
        assert_eq!(permits(|| keyed.check(1)), 1);
        assert_eq!(keyed.check(1), Err(Duration::from_millis(200)));
        tokio::time::advance(SECOND).await;
        assert_eq!(
            permits(|| keyed.check(2)),
            5,
            "after a refill, the share's burst"
        );
        let third = keyed.reshared(rate.shared_quota("r", 3).expect("valid"), SECOND);
        assert_eq!(
            permits(|| third.check(3)),
            3,
            "no refill once the join is past"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_key_limiter_starts_every_key_as_a_newcomer_for_a_refill_after() {
        let rate = RateLimit::per_second(10);
        let mut keyed = KeyedLimiter::new(rate.shared_quota("r", 2).expect("valid"));
        assert_eq!(keyed.check(1), Ok(()));
        tokio::time::advance(Duration::from_secs(5)).await;
        keyed.hold(SECOND);
        tokio::time::advance(Duration::from_millis(900)).await;
        assert_eq!(permits(|| keyed.check(1)), 1, "none saved up while held");
        assert_eq!(permits(|| keyed.check(2)), 1);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(
            permits(|| keyed.check(3)),
            5,
            "a refill after, the share's burst"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reshared_limiter_adds_no_permit_when_its_share_grows() {
        let rate = RateLimit::per_second(10);
        let half = Limiter::new(rate.shared_quota("r", 2).expect("valid"));
        tokio::time::advance(SECOND).await;
        let whole = half.reshared(rate.quota("r").expect("valid"));
        assert_eq!(
            permits(|| whole.check()),
            5,
            "the old share's full burst, no more"
        );
        assert_eq!(whole.check(), Err(Duration::from_millis(100)));
        tokio::time::advance(2 * SECOND).await;
        assert_eq!(
            permits(|| whole.check()),
            10,
            "then it refills to the new burst"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reshared_key_limiter_keeps_each_key_s_next_permit() {
        let every_100ms = RateLimit::per_second(10).burst(1);
        for (members, after) in [(2, 200), (1, 100)] {
            let keyed = KeyedLimiter::new(every_100ms.quota("r").expect("valid"));
            assert_eq!(keyed.check(1), Ok(()));
            tokio::time::advance(Duration::from_millis(30)).await;
            let next = keyed.reshared(
                every_100ms.shared_quota("r", members).expect("valid"),
                SECOND,
            );
            assert_eq!(
                next.check(1),
                Err(Duration::from_millis(70)),
                "the next permit stays where the old schedule had it ({members} members)"
            );
            tokio::time::advance(Duration::from_millis(70)).await;
            assert_eq!(next.check(1), Ok(()));
            assert_eq!(
                next.check(1),
                Err(Duration::from_millis(after)),
                "then the new schedule ({members} members)"
            );
            tokio::time::advance(Duration::from_secs(1)).await;
            assert_eq!(next.check(1), Ok(()), "a replenished key has its burst");
            assert!(next.check(1).is_err());
            assert_eq!(next.check(2), Ok(()), "an unseen key starts afresh");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_spent_limiter_grants_no_burst() {
        let quota = RateLimit::per_second(10).quota("r").expect("valid");
        let limiter = Limiter::new(quota);
        limiter.spend();
        assert_eq!(limiter.check(), Err(Duration::from_millis(100)));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(limiter.check(), Ok(()));
        assert!(limiter.check().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_reshared_limiter_keeps_its_next_permit_and_no_burst() {
        let every_100ms = RateLimit::per_second(10).burst(4);
        for (members, after) in [(2, 200), (1, 100)] {
            let limiter = Limiter::new(every_100ms.quota("r").expect("valid"));
            limiter.spend();
            tokio::time::advance(Duration::from_millis(30)).await;
            let next = limiter.reshared(every_100ms.shared_quota("r", members).expect("valid"));
            assert_eq!(
                next.check(),
                Err(Duration::from_millis(70)),
                "the next permit stays where the old schedule had it ({members} members)"
            );
            tokio::time::advance(Duration::from_millis(70)).await;
            assert_eq!(next.check(), Ok(()));
            assert_eq!(
                next.check(),
                Err(Duration::from_millis(after)),
                "then the new schedule, its burst spent ({members} members)"
            );
            tokio::time::advance(Duration::from_secs(1)).await;
            let burst = 4 / members;
            for _ in 0..burst {
                assert_eq!(next.check(), Ok(()), "a replenished limit has its burst");
            }
            assert!(next.check().is_err());
            let fresh = next.reshared(every_100ms.shared_quota("r", 4).expect("valid"));
            assert_eq!(
                fresh.check(),
                Err(Duration::from_millis(after)),
                "spent: carried"
            );
        }
    }
}
