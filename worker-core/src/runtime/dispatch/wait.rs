//! Waiting and moving: the admission check against the rate limits and the record's key, the
//! bookkeeping of records that wait, and the writes to the delay topic.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tower::Service;

use crate::delay::{self, DelayedRecord, headers};
use crate::fleet::{Fleet, FleetView, member};
use crate::source::{Delivery, Header, ShareSource};
use crate::{Error, Job, Outcome};

use super::super::lifecycle::{Admission, Event, LimitKind, MoveReason, MoveWait, Phase};
use super::super::rate::{KeyedLimiter, Limiter, RateLimit};
use super::super::routes::Routes;
use super::super::settings::Settings;
use super::super::slots::{Permits, SlotKey};
use super::super::writes::Written;
use super::control::{Control, Gate};
use super::key_waits::Turn;
use super::{Dispatcher, write_backs};

/// The shortest guess of when a busy key is free.
const MIN_KEY_WAIT: Duration = Duration::from_millis(100);
/// How often a record that needs a share of the fleet's rates looks again while this worker has
/// none (it is not counted by the fleet yet, or its presence lease lapsed).
const FENCED_WAIT: Duration = Duration::from_millis(50);

/// The rate limiters of one worker, and the records waiting for each.
#[derive(Debug, Default)]
pub(super) struct Limits {
    global: Option<Limiter>,
    global_line: Line,
    routes: Vec<RouteLimiters>,
    /// The fleet the rates are shared with, when they are.
    fleet: Option<FleetShares>,
}

#[derive(Debug, Default)]
struct RouteLimiters {
    rate: Option<Limiter>,
    rate_line: Line,
    per_key: Option<PerKey>,
    key_concurrency: Option<usize>,
}

/// A route's per-key limit. Shared with a fleet, each partition has a limiter of its own: a
/// key's records all come from its partition, so a key's rate is shared by the workers that
/// have records of that partition (each worker's share follows their count). Not shared, one
/// limiter serves every partition.
#[derive(Debug)]
struct PerKey {
    rate: RateLimit,
    shared: bool,
    /// By partition (`-1` for all, when not shared): how many workers share it, and the limiter.
    limiters: HashMap<i32, (u32, KeyedLimiter)>,
}

impl PerKey {
    fn new(rate: RateLimit, shared: bool) -> Self {
        Self {
            rate,
            shared,
            limiters: HashMap::new(),
        }
    }

    /// The limiter of `partition`'s keys, made at `workers`' share when it is new.
    fn limiter(&mut self, partition: i32, workers: u32) -> Option<&KeyedLimiter> {
        let partition = if self.shared { partition } else { -1 };
        if !self.limiters.contains_key(&partition) {
            let quota = self.rate.shared_quota("rate-per-key", workers).ok()?;
            let limiter = if self.shared {
                KeyedLimiter::joining(quota, self.rate.refill())
            } else {
                KeyedLimiter::new(quota)
            };
            self.limiters.insert(partition, (workers, limiter));
        }
        self.limiters.get(&partition).map(|(_, limiter)| limiter)
    }

    /// Makes `partition`'s limiter start every key as a newcomer does (see
    /// [`KeyedLimiter::hold`]), for a worker that may not start records of it now.
    fn hold(&mut self, partition: i32) {
        let refill = self.rate.refill();
        let partition = if self.shared { partition } else { -1 };
        if let Some((_, limiter)) = self.limiters.get_mut(&partition) {
            limiter.hold(refill);
        }
    }

    /// Each partition's limiter at its share in `view`; each key keeps the permits it has (at
    /// most the new burst) or its next permit.
    fn share(&mut self, topic: &str, view: &FleetView) {
        for (partition, (workers, limiter)) in &mut self.limiters {
            let n = view.sharing(Some(&claim_of(topic, *partition)));
            if *workers == n {
                continue;
            }
            *workers = n;
            if let Ok(quota) = self.rate.shared_quota("rate-per-key", n) {
                tracing::info!(
                    rate = %self.rate,
                    workers = n,
                    "route {topic}, partition {partition}: the per-key rate is shared by {n} workers of the group"
                );
                *limiter = limiter.reshared(quota, self.rate.refill());
            }
        }
    }
}

/// The presence claim of a partition's per-key rate: `{topic}/{partition}` (no topic name has
/// a `/`).
fn claim_of(topic: &str, partition: i32) -> String {
    format!("{topic}/{partition}")
}

/// The records waiting for one limiter's permits, in the order they came: only the first may
/// take the next permit, so a record that waited is never overtaken by one that came later.
#[derive(Debug, Default)]
struct Line(VecDeque<SlotKey>);

impl Line {
    /// Where `key` stands (0: first); it joins at the end when it is not in the line.
    fn stand(&mut self, key: SlotKey) -> usize {
        match self.0.iter().position(|k| *k == key) {
            Some(at) => at,
            None => {
                self.0.push_back(key);
                self.0.len() - 1
            }
        }
    }

    /// `key` leaves the line; returns the record first in line after it, when `key` was first.
    fn leave(&mut self, key: SlotKey) -> Option<SlotKey> {
        let at = self.0.iter().position(|k| *k == key)?;
        self.0.remove(at);
        if at == 0 {
            self.0.front().copied()
        } else {
            None
        }
    }

    fn first(&self) -> Option<SlotKey> {
        self.0.front().copied()
    }
}

/// The rates as written (for the whole fleet), and how many workers each is shared by now.
struct FleetShares {
    fleet: Fleet,
    /// The view the limiters run at.
    view: Arc<FleetView>,
    /// Wakes the dispatcher when the fleet changes.
    wake: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    global: Option<Shared>,
    /// Per route: its topic, its rate and its per-key rate, when it has them.
    routes: Vec<RouteShares>,
}

impl std::fmt::Debug for FleetShares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetShares")
            .field("global", &self.global)
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct RouteShares {
    topic: Arc<str>,
    rate: Option<Shared>,
    per_key: bool,
}

/// A rate for the whole fleet, and how many workers share it now.
type Shared = (RateLimit, u32);

impl Limits {
    /// The limiters the settings ask for (checked by the builder); with a fleet, each worker's
    /// share of the rates.
    pub(super) fn new<Svc>(config: &Settings, routes: &Routes<Svc>) -> Self {
        let limiter = |rate: &RateLimit| rate.quota("rate").ok();
        let mut limits = Self {
            global: config
                .rate_limit
                .as_ref()
                .and_then(limiter)
                .map(Limiter::new),
            global_line: Line::default(),
            routes: (0..routes.len())
                .map(|route| {
                    let limits = routes.limits(route);
                    RouteLimiters {
                        rate: limits.rate.as_ref().and_then(limiter).map(Limiter::new),
                        rate_line: Line::default(),
                        per_key: limits
                            .per_key
                            .filter(|rate| limiter(rate).is_some())
                            .map(|rate| PerKey::new(rate, config.fleet.is_some())),
                        key_concurrency: limits.key_concurrency,
                    }
                })
                .collect(),
            fleet: config.fleet.clone().map(|fleet| FleetShares {
                view: fleet.view(),
                wake: fleet.next_change(),
                fleet,
                global: config.rate_limit.map(|rate| (rate, 1)),
                routes: (0..routes.len())
                    .map(|route| RouteShares {
                        topic: routes.topic(route).cloned().unwrap_or_else(|| "".into()),
                        rate: routes.limits(route).rate.map(|rate| (rate, 1)),
                        per_key: routes.limits(route).per_key.is_some(),
                    })
                    .collect(),
            }),
        };
        if let Some(shares) = &mut limits.fleet {
            // Shared limiters start with their bursts used up: what this worker's previous life
            // (or the rest of the fleet) started just before is not known.
            for limiter in limits
                .global
                .iter()
                .chain(limits.routes.iter().filter_map(|route| route.rate.as_ref()))
            {
                limiter.spend();
            }
            for (_, workers) in shares
                .global
                .iter_mut()
                .chain(shares.routes.iter_mut().flat_map(|r| r.rate.iter_mut()))
            {
                *workers = 0;
            }
            let view = shares.fleet.view();
            limits.share(&view);
        }
        limits
    }

    /// Takes up the shares of the fleet as it is now; `true` if it changed.
    fn follow_fleet(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(shares) = self.fleet.as_mut() else {
            return false;
        };
        while shares.wake.as_mut().poll(cx).is_ready() {
            shares.wake = shares.fleet.next_change();
        }
        let Some(view) = shares.fleet.changed() else {
            return false;
        };
        self.share(&view);
        true
    }

    /// Makes each shared limiter this worker's share of its rate in `view`, and tells the fleet
    /// this worker runs at that view. A limiter whose share changes keeps the permits it has (at
    /// most the new burst) or, with none, its next permit ([`super::super::rate`]'s carry): a
    /// change of share never lets a burst through on top of what the other workers take, nor
    /// loses the old schedule's place.
    fn share(&mut self, view: &FleetView) {
        let Some(shares) = &mut self.fleet else {
            return;
        };
        let quota = |rate: &RateLimit, workers: &mut u32, n: u32, what: &str| {
            if *workers == n {
                return None;
            }
            *workers = n;
            let quota = rate.shared_quota("rate", n).ok()?;
            tracing::info!(
                rate = %rate,
                workers = n,
                per_worker = %format!("1/{:?}", quota.replenish_interval()),
                burst = quota.burst_size().get(),
                "{what}: the rate is shared by {n} workers of the group"
            );
            Some(quota)
        };
        if let Some((rate, workers)) = &mut shares.global
            && let Some(quota) = quota(rate, workers, view.sharing(None), "worker")
        {
            self.global = Some(match &self.global {
                Some(old) => old.reshared(quota),
                None => Limiter::new(quota),
            });
        }
        for (route, shared) in shares.routes.iter_mut().enumerate() {
            let n = view.sharing(Some(&shared.topic));
            let Some(limits) = self.routes.get_mut(route) else {
                continue;
            };
            if let Some((rate, workers)) = &mut shared.rate
                && let Some(quota) = quota(rate, workers, n, &format!("route {}", shared.topic))
            {
                limits.rate = Some(match &limits.rate {
                    Some(old) => old.reshared(quota),
                    None => Limiter::new(quota),
                });
            }
            if let Some(per_key) = &mut limits.per_key {
                per_key.share(&shared.topic, view);
            }
        }
        shares.view = Arc::new(view.clone());
        shares.fleet.applied(view.version());
    }

    /// How many workers share the per-key rate of route `route`'s `partition` now.
    fn key_sharing(&self, route: usize, partition: i32) -> u32 {
        match (
            &self.fleet,
            self.fleet.as_ref().and_then(|f| f.routes.get(route)),
        ) {
            (Some(shares), Some(r)) => shares.view.sharing(Some(&claim_of(&r.topic, partition))),
            _ => 1,
        }
    }

    /// Whether records of route `route` need a share of the fleet's rates to start and this
    /// worker has none at `now`; either way it has records waiting for those rates until
    /// `next` (when it looks again), which its presence claims.
    fn fenced(&self, route: usize, partition: i32, now: Instant, next: Instant) -> bool {
        let Some(shares) = &self.fleet else {
            return false;
        };
        let (now, next) = (now.into_std(), next.into_std());
        let mut fenced = false;
        if shares.global.is_some() {
            fenced |= !shares.fleet.may_start(member::WORKER_WIDE, now, next);
        }
        if let Some(r) = shares.routes.get(route) {
            if r.rate.is_some() {
                fenced |= !shares.fleet.may_start(&r.topic, now, next);
            }
            if r.per_key {
                fenced |= !shares
                    .fleet
                    .may_start(&claim_of(&r.topic, partition), now, next);
            }
        }
        fenced
    }

    /// Whether route `route` limits or serialises records by key (their keys are hashed).
    pub(super) fn keyed(&self, route: usize) -> bool {
        self.routes
            .get(route)
            .is_some_and(|r| r.per_key.is_some() || r.key_concurrency.is_some())
    }
}

impl<S, Svc> Dispatcher<'_, S, Svc>
where
    S: ShareSource,
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
    Svc::Future: Send + 'static,
{
    /// Checks the record in slot `key` against its key and the limits, in that order: a busy key
    /// uses no permit, and the most specific limit is asked first. A record admitted takes a turn
    /// of its key. Each limiter serves its waiters in the order they came (see [`Line`]); a
    /// permit taken from one limit is kept while a later limit refuses, so no permit is taken
    /// twice for one start.
    pub(super) fn admission(&mut self, key: SlotKey) -> Admission {
        let admission = self.check_admission(key);
        if let Some(job) = self.slots.get_mut(key) {
            match admission {
                Admission::Limited { limit, wait, .. } => {
                    job.throttle = Some(limit);
                    if limit != LimitKind::Paused
                        && let Some(route) = job.route
                    {
                        // It waits for a share: the share stays claimed until it looks again.
                        let now = Instant::now();
                        let partition = job.id.partition;
                        self.waits.limits.fenced(route, partition, now, now + wait);
                    }
                }
                Admission::Go => job.counted.permits = Permits::default(),
                Admission::KeyBusy { .. } => {}
            }
        }
        admission
    }

    fn check_admission(&mut self, key: SlotKey) -> Admission {
        let now = Instant::now();
        let Some(job) = self.slots.get(key) else {
            return Admission::Go;
        };
        let Some(route) = job.route else {
            return Admission::Go;
        };
        let (hash, permits, partition) = (job.key, job.counted.permits, job.id.partition);
        let gate = self.control.gate(route);
        let probing = matches!(gate, Gate::Probing { .. });
        if gate != Gate::Running && !(probing && self.control.breakers.probe_room(route)) {
            return Admission::Limited {
                limit: LimitKind::Paused,
                wait: Control::pause_wait(gate, std::time::SystemTime::now()),
                room: true,
            };
        }
        let per_key_room = |keys: &super::super::keys::Keys, config: &Settings, hash: u64| {
            keys.waiting_for(route, hash) < config.max_waiting_per_key()
                && keys.waiting() < config.max_waiting_for_keys()
        };
        let fenced = self
            .waits
            .limits
            .fenced(route, partition, now, now + FENCED_WAIT);
        let key_sharing = self.waits.limits.key_sharing(route, partition);
        let Some(limits) = self.waits.limits.routes.get_mut(route) else {
            return Admission::Go;
        };
        if let (Some(turns), Some(hash)) = (limits.key_concurrency, hash)
            && self.waits.keys.running(route, hash) >= turns
        {
            let ahead = self.waits.keys.waiting_for(route, hash) as u32 + 1;
            let typical = self.waits.latency.get(route).copied().unwrap_or_default();
            return Admission::KeyBusy {
                wait: (typical * ahead).max(MIN_KEY_WAIT),
                room: per_key_room(&self.waits.keys, self.config, hash),
            };
        }
        let limited = limits.per_key.is_some() || limits.rate.is_some();
        if fenced && (limited || self.waits.limits.global.is_some()) {
            // A worker without its share holds no permits: when it gets the share (again), it
            // starts as a newcomer, with none saved up while it could not start.
            if let Some(limiter) = &limits.rate {
                limiter.spend();
            }
            if let Some(per_key) = &mut limits.per_key {
                per_key.hold(partition);
            }
            if let Some(limiter) = &self.waits.limits.global {
                limiter.spend();
            }
            let limit = if limited {
                LimitKind::Route
            } else {
                LimitKind::Global
            };
            return Admission::Limited {
                limit,
                wait: FENCED_WAIT,
                room: true,
            };
        }
        let mut hasten = None;
        if !permits.key
            && let (Some(limiter), Some(hash)) = (
                limits
                    .per_key
                    .as_mut()
                    .and_then(|p| p.limiter(partition, key_sharing)),
                hash,
            )
        {
            let place = self.waits.keys.stand(route, hash, key) as u32;
            let took = if place == 0 {
                limiter.check(hash)
            } else {
                Err(Duration::ZERO)
            };
            let job = self.slots.get_mut(key);
            match took {
                Ok(()) => {
                    hasten = self.waits.keys.leave_line(route, hash, key);
                    if let Some(job) = job {
                        job.counted.permits.key = true;
                        job.counted.in_line = None;
                    }
                }
                Err(wait) if job.is_some() => {
                    if let Some(job) = job {
                        job.counted.in_line = Some(LimitKind::Key);
                    }
                    return Admission::Limited {
                        limit: LimitKind::Key,
                        wait: wait + limiter.interval() * place,
                        room: per_key_room(&self.waits.keys, self.config, hash),
                    };
                }
                Err(wait) => {
                    return Admission::Limited {
                        limit: LimitKind::Key,
                        wait: wait + limiter.interval() * place,
                        room: per_key_room(&self.waits.keys, self.config, hash),
                    };
                }
            }
        }
        if let Some(next) = hasten.take() {
            self.hasten(next, now);
        }
        let Some(limits) = self.waits.limits.routes.get_mut(route) else {
            return Admission::Go;
        };
        if !permits.route
            && let Some(limiter) = &limits.rate
        {
            let place = limits.rate_line.stand(key) as u32;
            let took = if place == 0 {
                limiter.check()
            } else {
                Err(Duration::ZERO)
            };
            let job = self.slots.get_mut(key);
            match took {
                Ok(()) => {
                    hasten = limits.rate_line.leave(key);
                    if let Some(job) = job {
                        job.counted.permits.route = true;
                        job.counted.in_line = None;
                    }
                }
                Err(wait) => {
                    if let Some(job) = job {
                        job.counted.in_line = Some(LimitKind::Route);
                    }
                    return Admission::Limited {
                        limit: LimitKind::Route,
                        wait: wait + limiter.interval().saturating_mul(place),
                        room: true,
                    };
                }
            }
        }
        if let Some(next) = hasten.take() {
            self.hasten(next, now);
        }
        if let Some(limiter) = &self.waits.limits.global {
            let line = &mut self.waits.limits.global_line;
            let place = line.stand(key) as u32;
            let took = if place == 0 {
                limiter.check()
            } else {
                Err(Duration::ZERO)
            };
            let job = self.slots.get_mut(key);
            match took {
                Ok(()) => {
                    hasten = line.leave(key);
                    if let Some(job) = job {
                        job.counted.in_line = None;
                    }
                }
                Err(wait) => {
                    if let Some(job) = job {
                        job.counted.in_line = Some(LimitKind::Global);
                    }
                    return Admission::Limited {
                        limit: LimitKind::Global,
                        wait: wait + limiter.interval().saturating_mul(place),
                        room: true,
                    };
                }
            }
        }
        if let Some(next) = hasten.take() {
            self.hasten(next, now);
        }
        if let (Some(Some(_)), Some(hash)) = (
            self.waits
                .limits
                .routes
                .get(route)
                .map(|r| r.key_concurrency),
            hash,
        ) {
            self.waits.keys.acquire(route, hash);
            if let Some(job) = self.slots.get_mut(key) {
                job.holds_key = true;
            }
        }
        if probing
            && self.control.breakers.take_probe(route)
            && let Some(job) = self.slots.get_mut(key)
        {
            job.probe = true;
        }
        Admission::Go
    }

    /// Checks the record in slot `key` again at once, if it waits for a limit: it just became
    /// first in a limiter's line.
    fn hasten(&mut self, key: SlotKey, now: Instant) {
        if let Some(job) = self.slots.get_mut(key)
            && let Phase::Throttled { until } = job.life.phase
            && until > now
            && job.life.rewait(now)
        {
            self.waits.throttled.schedule(key, now);
        }
    }

    /// Takes the record in slot `key` out of the line of the limit it waits for (it stopped
    /// waiting); the record then first in that line is checked at once.
    fn leave_line(&mut self, key: SlotKey, now: Instant) {
        let Some(job) = self.slots.get(key) else {
            return;
        };
        let (route, hash, line) = (job.route, job.key, job.counted.in_line);
        if let Some(job) = self.slots.get_mut(key) {
            job.counted.in_line = None;
        }
        let limits = &mut self.waits.limits;
        let next = match (line, route) {
            (Some(LimitKind::Global), _) => limits.global_line.leave(key),
            (Some(LimitKind::Route), Some(route)) => limits
                .routes
                .get_mut(route)
                .and_then(|r| r.rate_line.leave(key)),
            (Some(LimitKind::Key), Some(route)) => {
                hash.and_then(|hash| self.waits.keys.leave_line(route, hash, key))
            }
            _ => None,
        };
        if let Some(next) = next {
            self.hasten(next, now);
        }
    }

    /// Keeps the counts of waiting records in step with the phase of the record in slot `key`
    /// (`gone`: it is about to leave its slot), and gives a key it no longer needs to the next
    /// record waiting for it.
    pub(super) fn account(&mut self, key: SlotKey, gone: bool, now: Instant) {
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        let phase = job.life.phase;
        let (route, hash) = (job.route, job.key);
        let delayed = !gone && matches!(phase, Phase::Delayed { .. });
        if delayed != job.counted.delayed {
            job.counted.delayed = delayed;
            if delayed {
                self.waits.delayed += 1;
            } else {
                self.waits.delayed = self.waits.delayed.saturating_sub(1);
            }
        }
        let throttled = !gone && matches!(phase, Phase::Throttled { .. });
        if throttled != job.counted.throttled {
            job.counted.throttled = throttled;
            if !throttled {
                job.throttle = None;
            }
        }
        // Out of every line once it no longer waits for a limit (admitted, moved, gone).
        if !throttled && phase != Phase::Admitting && job.counted.in_line.is_some() {
            self.leave_line(key, now);
        }
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        let key_wait = !gone && phase == Phase::KeyWait;
        if key_wait != job.counted.key_wait {
            job.counted.key_wait = key_wait;
            if !key_wait && let (Some(route), Some(hash)) = (route, hash) {
                self.waits.keys.stop_waiting(route, hash, key);
            }
        }
        // A record being checked again keeps its count until the check says.
        if let Some(job) = self.slots.get_mut(key)
            && (gone || phase != Phase::Admitting)
        {
            let for_key = !gone
                && (phase == Phase::KeyWait
                    || (matches!(phase, Phase::Throttled { .. })
                        && job.throttle == Some(LimitKind::Key)));
            if for_key != job.counted.for_key {
                job.counted.for_key = for_key;
                let (topic, partition) = (&job.id.topic, job.id.partition);
                if let Some(turn) = self.waits.key_waits.count(topic, partition, for_key) {
                    let paused = turn == Turn::Pause;
                    tracing::debug!(
                        topic = &**topic,
                        partition,
                        paused,
                        "partition paused or resumed at the source: its records wait for their keys"
                    );
                    self.source.pause_partition(topic, partition, paused);
                }
            }
        }
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        let running = !gone && matches!(phase, Phase::Queued | Phase::Running);
        if job.holds_key
            && !running
            && let (Some(route), Some(hash)) = (route, hash)
        {
            job.holds_key = false;
            if let Some(next) = self.waits.keys.release(route, hash) {
                if let Some(waiting) = self.slots.get_mut(next) {
                    waiting.counted.key_wait = false;
                }
                self.step(next, Event::KeyFreed, Duration::ZERO, now);
            }
        }
    }

    /// Writes the record in slot `key` to its route's delay topic: its key, value and own
    /// headers, plus when it may run, the attempts it used and where it came from. `unheld`: it
    /// did not wait in the worker first (a delay-topic record written back so rests its topic).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_move(
        &mut self,
        key: SlotKey,
        reason: MoveReason,
        attempts: u16,
        wait: MoveWait,
        delivery: Option<Delivery>,
        unheld: bool,
        now: Instant,
    ) {
        let wall = self.waits.wall_clock(now);
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        let record = delivery
            .or_else(|| job.parked.take())
            .or_else(|| job.letter.clone());
        let not_before = match wait {
            MoveWait::For(wait) => wall.checked_add(wait),
            MoveWait::Kept => job.not_before,
        }
        .unwrap_or(wall);
        let tier = delay::tier_of(not_before.duration_since(wall).unwrap_or_default());
        let topic = job
            .route
            .and_then(|route| self.routes.delay_topics(route).get(tier).cloned());
        let (Some(record), Some(route), Some(topic), Some(moves)) =
            (record, job.route, topic, self.paths.moves.as_mut())
        else {
            tracing::error!(parent: &job.span, record = %job.id, "the record to move was not kept, or its route has no delay topic: releasing it");
            self.step(key, Event::Refused, Duration::ZERO, now);
            return;
        };
        let (origin_topic, origin_partition, origin_offset) = match &job.origin {
            Some(origin) => (origin.topic.clone(), origin.partition, origin.offset),
            None => (job.id.topic.clone(), job.id.partition, job.id.offset),
        };
        let mut record_headers: Vec<Header> = record
            .headers
            .into_iter()
            .filter(|h| !headers::is_delay_header(&h.key))
            .collect();
        let text = |key: &'static str, value: String| Header {
            key: key.into(),
            value: Some(Bytes::from(value)),
        };
        record_headers.extend([
            text(headers::NOT_BEFORE, headers::format_not_before(not_before)),
            text(headers::ATTEMPT, attempts.to_string()),
            text(headers::ORIGIN_TOPIC, origin_topic.to_string()),
            text(headers::ORIGIN_PARTITION, origin_partition.to_string()),
            text(headers::ORIGIN_OFFSET, origin_offset.to_string()),
        ]);
        let write_back = reason == MoveReason::NotBefore && job.id.topic == topic;
        tracing::debug!(parent: &job.span, record = %job.id, delay_topic = %topic, reason = reason.as_str(), "moving the record to the delay topic");
        moves.write(
            key,
            DelayedRecord {
                topic: topic.to_string(),
                key: record.key,
                value: record.value,
                headers: record_headers,
            },
        );
        if write_back && unheld && self.waits.write_backs.wrote_back((route, tier), now) {
            tracing::debug!(
                %topic,
                rest = ?write_backs::REST,
                "a far record was written back unheld: resting the delay topic"
            );
            self.sync_delay_pause(route);
        }
    }

    /// Resumes the delay topics whose write-back rest ended by `now`.
    pub(super) fn end_write_back_rests(&mut self, now: Instant) -> bool {
        if self.waits.write_backs.next_end().is_none_or(|at| at > now) {
            return false;
        }
        let mut ended = Vec::new();
        self.waits.write_backs.end_due(now, &mut ended);
        for route in ended {
            self.sync_delay_pause(route);
        }
        true
    }

    /// Handles every write to the delay topic that ended.
    pub(super) fn poll_moves(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut progress = false;
        while let Some(writer) = self.paths.moves.as_mut() {
            let Poll::Ready(written) = writer.poll_written(cx, now) else {
                break;
            };
            progress = true;
            match written {
                Written::Confirmed(key) => self.step(key, Event::Moved, Duration::ZERO, now),
                Written::Failed {
                    key,
                    error,
                    began_failing,
                } => {
                    if began_failing {
                        tracing::error!(error = %error, "writing to the delay topic fails: the records to move keep their locks and are tried again");
                    } else if let Some(job) = self.slots.get(key) {
                        tracing::debug!(parent: &job.span, record = %job.id, error = %error, "write to the delay topic failed: trying again");
                    }
                }
                Written::Refused { key, error } => self.refuse_moves(key, error, now),
            }
        }
        progress
    }

    /// The delay sink refused a write for good (not allowed, not authenticated, a topic it
    /// cannot write): the worker stops with that error, releasing what it holds.
    fn refuse_moves(&mut self, key: SlotKey, error: Error, now: Instant) {
        let waiting = self
            .paths
            .moves
            .as_mut()
            .map(|writer| writer.give_up_waiting())
            .unwrap_or_default();
        if self.fatal.is_none() {
            tracing::error!(error = %error, "the delay topic refused a record for good: releasing what the worker holds and stopping");
            self.fatal = Some(Error::new(
                error.kind(),
                format!("the delay topic cannot be written: {error}"),
            ));
        }
        self.begin_shutdown(now);
        for key in std::iter::once(key).chain(waiting) {
            self.step(key, Event::Refused, Duration::ZERO, now);
        }
    }

    /// Takes up a change of the fleet: the shared limiters get their new shares, and the first
    /// record in each shared limiter's line is checked again at once (the others follow it as
    /// permits come, at the new share).
    pub(super) fn follow_fleet(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        if !self.waits.limits.follow_fleet(cx) {
            return false;
        }
        let limits = &self.waits.limits;
        let mut first: Vec<SlotKey> = limits.global_line.first().into_iter().collect();
        first.extend(limits.routes.iter().filter_map(|r| r.rate_line.first()));
        // Records waiting for a key's limit, or with no share at all: checked again too.
        for (key, job) in self.slots.iter_mut() {
            if matches!(job.life.phase, Phase::Throttled { .. })
                && matches!(job.throttle, Some(LimitKind::Key))
            {
                first.push(key);
            }
        }
        for key in first {
            self.hasten(key, now);
        }
        true
    }

    /// Checks again every throttled record whose wait ended by `now`.
    pub(super) fn release_throttled(&mut self, now: Instant) -> bool {
        if self.waits.throttled.next_due().is_none_or(|at| at > now) {
            return false;
        }
        let mut due = std::mem::take(&mut self.pace.due);
        self.waits.throttled.take_due(now, &mut due);
        for (at, key) in due.drain(..) {
            if self
                .slots
                .get(key)
                .is_some_and(|job| job.life.phase == Phase::Throttled { until: at })
            {
                self.step(key, Event::Due, Duration::ZERO, now);
            }
        }
        self.pace.due = due;
        true
    }

    /// Pauses the delay topics at the source while `max_held` records are held (their records
    /// could only be written back), and resumes them when there is room.
    pub(super) fn sync_delay_pauses(&mut self) {
        if self.paths.moves.is_none() {
            return;
        }
        let full = !self.paths.holds.has_room();
        if full == self.waits.holds_full {
            return;
        }
        self.waits.holds_full = full;
        for route in 0..self.waits.delay_paused.len() {
            self.sync_delay_pause(route);
        }
    }

    /// Pauses or resumes route `route`'s delay topics: paused while the route holds its full
    /// share, while `max_held` records are held and from the start of shutdown; each tier also
    /// while its write-backs rest.
    pub(super) fn sync_delay_pause(&mut self, route: usize) {
        let all = self.routes.is_full(route)
            || self.control.pauses(route)
            || self.waits.holds_full
            || self.paths.stopping.is_some();
        let Some(was) = self.waits.delay_paused.get_mut(route) else {
            return;
        };
        for (tier, (topic, was)) in self.routes.delay_topics(route).iter().zip(was).enumerate() {
            let paused = all || self.waits.write_backs.resting((route, tier));
            if *was != paused {
                *was = paused;
                self.source.pause(topic, paused);
            }
        }
    }
}
