//! Waiting and moving: the admission check against the rate limits and the record's key, the
//! bookkeeping of records that wait, and the writes to the delay topic.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tower::Service;

use crate::delay::{DelayedRecord, headers};
use crate::fleet::{Fleet, FleetView};
use crate::source::{Delivery, Header, ShareSource};
use crate::{Error, Job, Outcome};

use super::super::lifecycle::{Admission, Event, LimitKind, MoveReason, MoveWait, Phase};
use super::super::rate::{KeyedLimiter, Limiter, RateLimit};
use super::super::routes::Routes;
use super::super::settings::Settings;
use super::super::slots::SlotKey;
use super::super::writes::Written;
use super::control::{Control, Gate};
use super::{Dispatcher, write_backs};

/// The shortest guess of when a busy key is free.
const MIN_KEY_WAIT: Duration = Duration::from_millis(100);

/// The rate limiters of one worker, and how many records wait for each.
#[derive(Debug, Default)]
pub(super) struct Limits {
    global: Option<Limiter>,
    global_waiting: usize,
    routes: Vec<RouteLimiters>,
    /// The fleet the worker-wide and route rates are shared with, when they are.
    fleet: Option<FleetShares>,
}

#[derive(Debug, Default)]
struct RouteLimiters {
    rate: Option<Limiter>,
    rate_waiting: usize,
    per_key: Option<KeyedLimiter>,
    key_concurrency: Option<usize>,
}

/// The rates as written (for the whole fleet), and how many workers each is shared by now.
#[derive(Debug)]
struct FleetShares {
    fleet: Fleet,
    global: Option<Shared>,
    /// Per route: its topic, and its rate if it has one.
    routes: Vec<(Arc<str>, Option<Shared>)>,
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
            global_waiting: 0,
            routes: (0..routes.len())
                .map(|route| {
                    let limits = routes.limits(route);
                    RouteLimiters {
                        rate: limits.rate.as_ref().and_then(limiter).map(Limiter::new),
                        rate_waiting: 0,
                        per_key: limits
                            .per_key
                            .as_ref()
                            .and_then(limiter)
                            .map(KeyedLimiter::new),
                        key_concurrency: limits.key_concurrency,
                    }
                })
                .collect(),
            fleet: config.fleet.clone().map(|fleet| FleetShares {
                fleet,
                global: config.rate_limit.map(|rate| (rate, 1)),
                routes: (0..routes.len())
                    .map(|route| {
                        let topic = routes.topic(route).cloned().unwrap_or_else(|| "".into());
                        (topic, routes.limits(route).rate.map(|rate| (rate, 1)))
                    })
                    .collect(),
            }),
        };
        if let Some(shares) = &limits.fleet {
            let view = shares.fleet.view();
            limits.share(&view);
        }
        limits
    }

    /// Takes up the shares of the fleet as it is now; `true` if it changed.
    fn follow_fleet(&mut self) -> bool {
        let Some(view) = self
            .fleet
            .as_mut()
            .and_then(|shares| shares.fleet.changed())
        else {
            return false;
        };
        self.share(&view);
        true
    }

    /// Makes each shared limiter this worker's share of its rate in `view`. A limiter whose
    /// share changes starts with its burst used up: a change of share never lets a burst through
    /// on top of what the other workers already take.
    fn share(&mut self, view: &FleetView) {
        let Some(shares) = &mut self.fleet else {
            return;
        };
        let reshare = |rate: &RateLimit, workers: &mut u32, n: u32, what: &str| {
            if *workers == n {
                return None;
            }
            *workers = n;
            let quota = rate.shared_quota("rate", n).ok()?;
            tracing::info!(
                rate = %rate,
                workers = n,
                per_worker = %format!("1/{:?}", quota.replenish_interval()),
                "{what}: the rate is shared by {n} workers of the group"
            );
            Some(Limiter::spent(quota))
        };
        if let Some((rate, workers)) = &mut shares.global
            && let Some(limiter) = reshare(rate, workers, view.sharing(None), "worker")
        {
            self.global = Some(limiter);
        }
        for (route, (topic, shared)) in shares.routes.iter_mut().enumerate() {
            if let Some((rate, workers)) = shared
                && let Some(limiter) = reshare(
                    rate,
                    workers,
                    view.sharing(Some(topic)),
                    &format!("route {topic}"),
                )
                && let Some(limits) = self.routes.get_mut(route)
            {
                limits.rate = Some(limiter);
            }
        }
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
    /// of its key. A later limit that refuses may leave an earlier one's permit used: the limits
    /// are never exceeded, a refused record may only slow its key a little.
    pub(super) fn admission(&mut self, key: SlotKey) -> Admission {
        let admission = self.check_admission(key);
        if let (Admission::Limited { limit, .. }, Some(job)) = (admission, self.slots.get_mut(key))
        {
            job.throttle = Some(limit);
        }
        admission
    }

    fn check_admission(&mut self, key: SlotKey) -> Admission {
        let Some(job) = self.slots.get(key) else {
            return Admission::Go;
        };
        let Some(route) = job.route else {
            return Admission::Go;
        };
        let gate = self.control.gate(route);
        let probing = matches!(gate, Gate::Probing { .. });
        if gate != Gate::Running && !(probing && self.control.breakers.probe_room(route)) {
            return Admission::Limited {
                limit: LimitKind::Paused,
                wait: Control::pause_wait(gate, std::time::SystemTime::now()),
                room: true,
            };
        }
        let hash = job.key;
        let per_key_room = |keys: &super::super::keys::Keys, config: &Settings, hash: u64| {
            keys.waiting_for(route, hash) < config.max_waiting_per_key()
                && keys.waiting() < config.max_waiting_for_keys()
        };
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
        if let (Some(limiter), Some(hash)) = (&limits.per_key, hash)
            && let Err(wait) = limiter.check(hash)
        {
            let ahead = self.waits.keys.waiting_for(route, hash) as u32;
            return Admission::Limited {
                limit: LimitKind::Key,
                wait: wait + limiter.interval() * ahead,
                room: per_key_room(&self.waits.keys, self.config, hash),
            };
        }
        if let Some(limiter) = &limits.rate
            && let Err(wait) = limiter.check()
        {
            // Spread the waiters over the permits to come, so they do not all wake at once.
            let ahead = u32::try_from(limits.rate_waiting).unwrap_or(u32::MAX);
            return Admission::Limited {
                limit: LimitKind::Route,
                wait: wait + limiter.interval().saturating_mul(ahead),
                room: true,
            };
        }
        if let Some(limiter) = &self.waits.limits.global
            && let Err(wait) = limiter.check()
        {
            let ahead = u32::try_from(self.waits.limits.global_waiting).unwrap_or(u32::MAX);
            return Admission::Limited {
                limit: LimitKind::Global,
                wait: wait + limiter.interval().saturating_mul(ahead),
                room: true,
            };
        }
        if let (Some(_), Some(hash)) = (limits.key_concurrency, hash) {
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
            let limit = job.throttle;
            if !throttled {
                job.throttle = None;
            }
            match (limit, route) {
                (Some(LimitKind::Global), _) => {
                    let n = &mut self.waits.limits.global_waiting;
                    *n = if throttled {
                        *n + 1
                    } else {
                        n.saturating_sub(1)
                    };
                }
                (Some(LimitKind::Route), Some(route)) => {
                    if let Some(limits) = self.waits.limits.routes.get_mut(route) {
                        let n = &mut limits.rate_waiting;
                        *n = if throttled {
                            *n + 1
                        } else {
                            n.saturating_sub(1)
                        };
                    }
                }
                (Some(LimitKind::Key), Some(route)) => {
                    if let Some(hash) = hash {
                        self.waits.keys.throttled(route, hash, throttled);
                    }
                }
                _ => {}
            }
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
        let group = self.group.clone().unwrap_or_else(|| "".into());
        let wall = self.waits.wall_clock(now);
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        let record = delivery
            .or_else(|| job.parked.take())
            .or_else(|| job.letter.clone());
        let (Some(record), Some(route), Some(delay), Some(moves)) = (
            record,
            job.route,
            self.config.delay.as_ref(),
            self.paths.moves.as_mut(),
        ) else {
            tracing::error!(parent: &job.span, record = %job.id, "the record to move was not kept: releasing it");
            self.step(key, Event::Refused, Duration::ZERO, now);
            return;
        };
        let Some(route_topic) = self.routes.topic(route).cloned() else {
            return;
        };
        let not_before = match wait {
            MoveWait::For(wait) => wall.checked_add(wait),
            MoveWait::Kept => job.not_before,
        }
        .unwrap_or(wall);
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
        let topic = delay.topic.render(&route_topic, &group);
        let write_back = reason == MoveReason::NotBefore && *job.id.topic == *topic;
        tracing::debug!(parent: &job.span, record = %job.id, delay_topic = %topic, reason = reason.as_str(), "moving the record to the delay topic");
        moves.write(
            key,
            DelayedRecord {
                topic,
                key: record.key,
                value: record.value,
                headers: record_headers,
            },
        );
        if write_back && unheld && self.waits.write_backs.wrote_back(route, now) {
            tracing::debug!(
                topic = %route_topic,
                rest = ?write_backs::REST,
                "a far record was written back unheld: resting the route's delay topic"
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

    /// Takes up a change of the fleet: the shared limiters get their new shares, and the records
    /// waiting for a shared limit are planned again at the new share, in the order they waited
    /// (the `n`-th at `n` new intervals from now, or sooner if it was due sooner): planned at the
    /// old share, a larger share would stay unused until they came due.
    pub(super) fn follow_fleet(&mut self, now: Instant) -> bool {
        if !self.waits.limits.follow_fleet() {
            return false;
        }
        let mut waiting = std::mem::take(&mut self.pace.due);
        self.waits.throttled.take_all(&mut waiting);
        waiting.sort_unstable_by_key(|(at, _)| *at);
        let mut ahead: Vec<u32> = vec![0; self.waits.limits.routes.len() + 1];
        for (at, key) in waiting.drain(..) {
            let Some(job) = self.slots.get_mut(key) else {
                continue;
            };
            if job.life.phase != (Phase::Throttled { until: at }) {
                continue;
            }
            let limits = &self.waits.limits;
            let shared = match (job.throttle, job.route) {
                (Some(LimitKind::Global), _) => limits.global.as_ref().map(|l| (l, 0)),
                (Some(LimitKind::Route), Some(route)) => limits
                    .routes
                    .get(route)
                    .and_then(|r| r.rate.as_ref())
                    .map(|l| (l, route + 1)),
                _ => None,
            };
            let until = match shared {
                Some((limiter, queue)) => {
                    ahead[queue] += 1;
                    at.min(now + limiter.interval() * ahead[queue])
                }
                None => at,
            };
            job.life.rewait(until);
            self.waits.throttled.schedule(key, until);
        }
        self.pace.due = waiting;
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

    /// Pauses or resumes route `route`'s delay topic: paused while the route holds its full
    /// share, while `max_held` records are held, while its write-backs rest, and from the start
    /// of shutdown.
    pub(super) fn sync_delay_pause(&mut self, route: usize) {
        let paused = self.routes.is_full(route)
            || self.control.pauses(route)
            || self.waits.holds_full
            || self.waits.write_backs.resting(route)
            || self.paths.stopping.is_some();
        let (Some(topic), Some(was)) = (
            self.routes.delay_topic(route).cloned(),
            self.waits.delay_paused.get_mut(route),
        ) else {
            return;
        };
        if *was != paused {
            *was = paused;
            self.source.pause(&topic, paused);
        }
    }
}
