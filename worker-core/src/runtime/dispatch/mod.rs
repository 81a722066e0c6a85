//! The dispatcher: one hand-written poll loop (like tower's `Buffer` worker) that only drives. In
//! each pass it renews due locks first, admits fetched records into free slots, starts every
//! record whose service is ready as a task of its own, feeds every ending (handler, answer,
//! renewal, dead-letter write, hold) to the record's [lifecycle](super::lifecycle), performs the
//! effects that come back, and starts the next fetch when a slot is free.
//!
//! What a record may do is decided in `lifecycle`; what happened is reported by the `Observer`;
//! this module only moves records between them and the I/O.
//!
//! - `arrive.rs`: fetches, and records arriving from them.
//! - `perform.rs`: stepping a record and performing its effects.
//! - `renew.rs`: renewals and the watchdog over the loop's own lateness.
//! - `wait.rs`: the admission check (rate limits, keys), waits and moves to the delay topic.
//! - `key_waits.rs`: partitions paused while their records wait for their keys (no delay topic).
//! - `stop.rs`: shutdown and the grace period.
//!
//! The loop's state is in parts that each own what they change: the slot table (every unfinished
//! record), `Paths` (what the lifecycle's rules read — policy, holds, the dead-letter and delay
//! writers, shutdown — borrowed apart from the slots while a record steps), `Waits` (rate limits,
//! busy keys, not-before times, the delay topics' pauses), `Tasks` (handler tasks, answers and
//! renewals in flight), `Fetching` and `Pace` (the timer and the watchdog).

mod ahead;
mod arrive;
mod average;
mod breakers;
mod coalesce;
mod control;
mod key_waits;
mod perform;
mod renew;
mod stop;
mod wait;
mod write_backs;

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep, sleep_until};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tower::Service;

use crate::policy::Policy;
use crate::runtime::lifecycle::Rules;
use crate::source::{Delivery, ShareSource};
use crate::telemetry::metrics::Metrics;
use crate::{Error, ErrorKind, Job, Outcome, Result};

use super::deadlines::Deadlines;
use super::delivery_limit::{self, LimitWatch};
use super::handler_task::Finished;
use super::health::{TICK, WorkerHealth, WorkerProgress};
use super::holds::Holds;
use super::keys::Keys;
use super::observer::Observer;
use super::receipt::SlotReceipt;
use super::routes::Routes;
use super::settings::Settings;
use super::slots::{SlotKey, Slots};
use super::summary::Summary;
use super::writes::{DeadLetters, Moves};
use wait::Limits;

/// An empty fetch that took at least this long waited for records (a long poll): the next one
/// starts at once. One that came back sooner is followed by a pause that starts at
/// `FIRST_EMPTY_FETCH_PAUSE` and doubles up to `MAX_EMPTY_FETCH_PAUSE` while fetches keep coming
/// back empty at once, so a source that does not wait itself is not asked in a busy loop, and a
/// worker that has just joined gets its first records without a fixed delay.
const WAITED_FOR_RECORDS: Duration = Duration::from_millis(5);
const FIRST_EMPTY_FETCH_PAUSE: Duration = Duration::from_millis(1);
const MAX_EMPTY_FETCH_PAUSE: Duration = Duration::from_millis(100);
/// The first pause after a failed fetch; doubles up to `MAX_FETCH_BACKOFF`.
const FETCH_BACKOFF: Duration = Duration::from_millis(100);
const MAX_FETCH_BACKOFF: Duration = Duration::from_secs(5);
/// After the grace period, how long to wait for the last acknowledgements before closing.
const FLUSH_TIMEOUT: Duration = Duration::from_millis(500);
/// Passes through the loop before yielding to the scheduler.
const BUDGET: usize = 64;

type FetchFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<Delivery>>> + Send + 'a>>;

/// Shutdown progress.
#[derive(Debug)]
struct Stopping {
    grace_deadline: Instant,
    grace_expired: bool,
}

/// The fetch in progress and when the next may start.
struct Fetching<'a> {
    future: Option<FetchFuture<'a>>,
    started: Instant,
    not_before: Option<Instant>,
    backoff: Duration,
    /// The pause after the next empty fetch that comes back at once.
    empty_pause: Duration,
    /// How many records the fetch in progress asked for.
    asked: u32,
    /// Whether the next fetch waits for the last batch's handlers (see `coalesce`).
    coalesce: coalesce::Coalesce,
    /// Until when the next fetch waits for them, while it does.
    coalesce_until: Option<Instant>,
    /// How many records a fetch asks for beyond the free handlers (see `ahead`).
    ahead: ahead::Ahead,
    /// The most partition leaders a fetch has been sent to: what the slot table is sized for.
    leaders: usize,
}

/// The loop's state, in parts that each own what they change. Generic over the service so a
/// route's service is called without a clone.
pub(crate) struct Dispatcher<'a, S, Svc>
where
    Svc: Service<Job>,
{
    source: &'a S,
    config: &'a Settings,
    routes: Routes<Svc>,
    /// Every unfinished record and its lifecycle.
    slots: Slots,
    /// What the lifecycle's rules look at, and where a record goes other than its handler.
    paths: Paths,
    /// Records waiting for their turn: rate limits, busy keys, not-before times.
    waits: Waits,
    /// Handler tasks, and the answers and renewals in flight.
    tasks: Tasks,
    fetching: Fetching<'a>,
    /// Routes paused fleet-wide by the control topic.
    control: control::Control,
    /// The loop's own clock and its watchdog.
    pace: Pace,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The error the run ends with, if any.
    fatal: Option<Error>,
    /// Reads the group's delivery-count limit again now and then.
    limit: LimitWatch<'a>,
    /// The share group, for the record spans.
    group: Option<Arc<str>>,
    observer: Observer,
    health: WorkerHealth,
}

/// What the lifecycle's rules look at ([`Paths::rules`]), and the places a record goes other
/// than its handler.
struct Paths {
    policy: Policy,
    /// Retries waiting out their backoff, and records waiting for their not-before.
    holds: Holds,
    /// Dead-letter writes; `None` without a sink.
    dead_letters: Option<DeadLetters>,
    /// Moves to the delay topics; `None` without a delay sink.
    moves: Option<Moves>,
    /// Shutdown progress, once it began.
    stopping: Option<Stopping>,
}

impl Paths {
    /// Whether the dead-letter sink is failing (fetching pauses meanwhile).
    fn dlq_failing(&self) -> bool {
        self.dead_letters
            .as_ref()
            .is_some_and(DeadLetters::is_failing)
    }

    /// The world the lifecycle's rules look at now. Borrows only this part, so the slot table
    /// stays free to change while a record steps.
    fn rules(&self, config: &Settings, now: Instant) -> Rules<'_, Instant> {
        Rules {
            policy: &self.policy,
            now,
            stopping: self.stopping.is_some(),
            sink: self.dead_letters.is_some(),
            can_hold: self.holds.has_room(),
            can_hold_far: self.holds.has_room_for_far(),
            delay_sink: self.moves.is_some(),
            max_hold: config.max_hold,
            max_delay: config.max_delay,
        }
    }
}

/// Records admitted but not started: over a rate limit, behind a busy key, before their
/// not-before; and the delay topics' pauses and write-backs.
struct Waits {
    /// Records over a rate limit, by when they are checked again.
    throttled: Deadlines,
    /// The rate limiters and how many records wait for each.
    limits: Limits,
    /// Which keys run, and who waits for them.
    keys: Keys,
    /// How many records of each partition wait for their keys, for its pause at the source.
    key_waits: key_waits::KeyWaits,
    /// Records waiting for their not-before.
    delayed: usize,
    /// Each route's recent handler time, for when a busy key may be free.
    latency: Vec<Duration>,
    /// Whether the delay topics are paused because `max_held` records are held.
    holds_full: bool,
    /// Which delay topics (by route, then tier) are paused at the source.
    delay_paused: Vec<[bool; crate::delay::TIERS.len()]>,
    /// The pace of writing far delay-topic records back.
    write_backs: write_backs::WriteBacks,
    /// The wall clock when the loop started, and the loop's clock then: not-before times are
    /// counted on the loop's (monotonic) clock from there.
    wall: (std::time::SystemTime, Instant),
}

impl Waits {
    /// The wall-clock time at `now`: the system clock as the loop started, plus the loop's
    /// monotonic time since. A clock step while the worker runs moves no record's turn (and a
    /// paused tokio clock in tests moves not-before times with it).
    fn wall_clock(&self, now: Instant) -> std::time::SystemTime {
        let (wall, at) = self.wall;
        wall + now.saturating_duration_since(at)
    }
}

/// Handler tasks, acknowledgements and renewals in flight, and when each lock is renewed next.
struct Tasks {
    running: JoinSet<(SlotKey, Finished, Duration)>,
    acking: FuturesUnordered<SlotReceipt>,
    renewing: FuturesUnordered<SlotReceipt>,
    /// When each record's lock is renewed next.
    renewals: Deadlines,
}

/// The loop's one timer and its watchdog.
struct Pace {
    /// Set to the next thing due.
    timer: Pin<Box<Sleep>>,
    /// The loop wakes by then even when nothing else is due, so its silence means a stall.
    next_tick: Instant,
    /// When the loop last ran, for the watchdog.
    last_pass: Instant,
    /// The shortest lock a record arrived with: how late the loop may run before it is a stall.
    shortest_lock: Duration,
    /// Scratch space for due entries.
    due: Vec<(Instant, SlotKey)>,
}

impl<'a, S, Svc> Dispatcher<'a, S, Svc>
where
    S: ShareSource,
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
    Svc::Future: Send + 'static,
{
    pub(crate) fn new(
        source: &'a S,
        config: &'a Settings,
        routes: Routes<Svc>,
        shutdown: CancellationToken,
        delivery_limit: Option<u16>,
        metrics: Metrics,
        health: WorkerHealth,
    ) -> Self {
        let dead_letters = config.policy.dlq.clone().map(|sink| {
            DeadLetters::new(sink, config.policy.dlq_backoff, config.policy.dlq_timeout)
        });
        let moves = config.delay.as_ref().map(|delay| {
            Moves::new(
                delay.sink.clone(),
                config.policy.dlq_backoff,
                config.policy.dlq_timeout,
            )
        });
        let breakers = breakers::Breakers::new(&routes, Instant::now());
        let limits = Limits::new(config, &routes);
        let route_count = routes.len();
        // Records are fetched ahead of the handlers of one route only: with several, a route
        // whose handlers hang would start its queued records in the handlers the other routes'
        // reserve keeps for them. At most the concurrency per partition leader (see `ahead`).
        let ahead_per_leader = match route_count {
            1 => config.concurrency,
            _ => 0,
        };
        // Unfinished records at most: the handlers', and those fetched ahead of them (from one
        // leader until the source reports more: see `fit_leaders`).
        let unfinished = config.concurrency + ahead_per_leader;
        let mut routes = routes;
        routes.set_capacity(unfinished);
        Self {
            source,
            config,
            routes,
            slots: Slots::new(
                unfinished
                    .saturating_mul(3)
                    .saturating_add(config.max_held()),
            ),
            paths: Paths {
                policy: delivery_limit::policy_for(&config.policy, delivery_limit),
                holds: Holds::new(config.max_held()),
                dead_letters,
                moves,
                stopping: None,
            },
            waits: Waits {
                throttled: Deadlines::default(),
                limits,
                keys: Keys::default(),
                // With a delay topic, the records a key cannot hold move there instead.
                key_waits: key_waits::KeyWaits::new(match config.delay {
                    Some(_) => 0,
                    None => config.max_waiting_per_key(),
                }),
                delayed: 0,
                latency: vec![Duration::ZERO; route_count],
                holds_full: false,
                delay_paused: vec![[false; crate::delay::TIERS.len()]; route_count],
                write_backs: write_backs::WriteBacks::new(route_count),
                wall: (std::time::SystemTime::now(), Instant::now()),
            },
            tasks: Tasks {
                running: JoinSet::new(),
                acking: FuturesUnordered::new(),
                renewing: FuturesUnordered::new(),
                renewals: Deadlines::default(),
            },
            fetching: Fetching {
                future: None,
                started: Instant::now(),
                not_before: None,
                backoff: FETCH_BACKOFF,
                empty_pause: FIRST_EMPTY_FETCH_PAUSE,
                asked: 0,
                coalesce: coalesce::Coalesce::default(),
                coalesce_until: None,
                ahead: ahead::Ahead::new(ahead_per_leader),
                leaders: 1,
            },
            control: control::Control::new(config.controls.clone(), breakers, route_count),
            pace: Pace {
                timer: Box::pin(sleep_until(Instant::now())),
                next_tick: Instant::now() + TICK,
                last_pass: Instant::now(),
                shortest_lock: Duration::from_secs(30),
                due: Vec::new(),
            },
            shutdown: Box::pin(shutdown.cancelled_owned()),
            fatal: None,
            limit: LimitWatch::new(delivery_limit, config.limit_refresh),
            group: source.group().map(Arc::from),
            observer: Observer::new(metrics, config.broker_writes_letters),
            health,
        }
    }

    /// Runs until shutdown has drained; returns the summary and, if the run must end in an
    /// error (the source closed, or the broker or the sink refused for good), that error.
    pub(crate) async fn run(mut self) -> (Summary, Option<Error>) {
        self.health.set_running(true);
        poll_fn(|cx| {
            self.health.passed();
            let poll = self.poll_run(cx);
            // Holds keep retries and delayed records; the held gauge counts the retries.
            let in_flight = self.slots.held();
            let held = self.paths.holds.len().saturating_sub(self.waits.delayed);
            self.observer
                .metrics
                .occupancy(in_flight, held, self.waits.delayed);
            let summary = &self.observer.summary;
            self.health.publish(false, || WorkerProgress {
                summary: *summary,
                in_flight,
                held,
            });
            poll
        })
        .await;
        self.tasks.running.abort_all();
        self.health.set_running(false);
        self.observer.metrics.occupancy(0, 0, 0);
        let summary = self.observer.summary;
        self.health.publish(true, || WorkerProgress {
            summary,
            ..WorkerProgress::default()
        });
        (self.observer.summary, self.fatal)
    }

    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.watch_lateness(Instant::now());
        for _ in 0..BUDGET {
            let now = Instant::now();
            // Before any fetch: a route paused fleet-wide is not fetched from.
            let mut progress = self.follow_controls(cx);
            // Handlers that ended first (their records need no renewal any more), then the
            // renewals: after a stall they are what keeps the locks.
            progress |= self.join_finished(cx, now);
            progress |= self.renew_due(now);

            if self.paths.stopping.is_none() && self.shutdown.as_mut().poll(cx).is_ready() {
                self.begin_shutdown(now);
                progress = true;
            }
            if self.poll_fetch(cx, now) {
                progress = true;
                // Ask for the next records before handling these, so the round trip overlaps
                // their handling instead of following it.
                if self.start_fetch(now) {
                    self.poll_fetch(cx, now);
                }
            }
            // Records fetched ahead wait in their queues while every handler runs.
            while self.tasks.running.len() < self.config.concurrency
                && let Poll::Ready((_, key, delivery)) = self.routes.poll_next_ready(cx)
            {
                self.dispatch(key, delivery, now);
                progress = true;
            }
            while let Poll::Ready(Some((key, result))) = self.tasks.acking.poll_next_unpin(cx) {
                self.on_acked(key, result, now);
                progress = true;
            }
            while let Poll::Ready(Some((key, result))) = self.tasks.renewing.poll_next_unpin(cx) {
                self.on_renewed(key, result, now);
                progress = true;
            }
            progress |= self.poll_dead_letters(cx, now);
            progress |= self.poll_moves(cx, now);
            progress |= self.release_held(now);
            progress |= self.follow_fleet(cx, now);
            progress |= self.release_throttled(now);
            progress |= self
                .paths
                .dead_letters
                .as_mut()
                .is_some_and(|writer| writer.retry_due(now));
            progress |= self
                .paths
                .moves
                .as_mut()
                .is_some_and(|writer| writer.retry_due(now));
            self.sync_delay_pauses();
            progress |= self.end_write_back_rests(now);
            progress |= self.expire_grace(now);
            if let Poll::Ready(changed) = self.limit.poll_changed(self.source, cx, now) {
                self.paths.policy = delivery_limit::policy_for(&self.config.policy, changed);
                progress = true;
            }
            progress |= self.start_fetch(now);

            if self.is_done(now) {
                return Poll::Ready(());
            }
            if !progress {
                if self.pace.next_tick <= now {
                    self.pace.next_tick = now + TICK;
                }
                let at = self.next_wake();
                if self.pace.timer.deadline() != at {
                    self.pace.timer.as_mut().reset(at);
                }
                if self.pace.timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Steps every record whose handler task ended.
    fn join_finished(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut progress = false;
        while let Poll::Ready(Some(joined)) = self.tasks.running.poll_join_next(cx) {
            match joined {
                Ok((key, finished, took)) => self.on_finished(key, finished, took, now),
                // Aborted when the grace period ended: those records were released then.
                Err(err) if err.is_cancelled() => {}
                Err(err) => {
                    tracing::error!(error = %err, "a handler task failed outside its handler");
                }
            }
            progress = true;
        }
        progress
    }

    /// The earliest time something is due: the tick, a renewal, a hold, a dead-letter retry, the
    /// end of a fetch pause, the grace period, a read of the delivery limit, the end of a
    /// delay topic's rest.
    fn next_wake(&self) -> Instant {
        // The end of a fetch pause matters only if a fetch could start then: not while stopping,
        // fetching or paused for a failing dead-letter sink (its recovery wakes the loop itself).
        // Waking for a past pause that cannot end would spin.
        let may_fetch = self.paths.stopping.is_none()
            && self.fetching.future.is_none()
            && !self.paths.dlq_failing();
        let fetch_pause = self.fetching.not_before.filter(|_| may_fetch);
        let coalescing = self.fetching.coalesce_until.filter(|_| may_fetch);
        let grace = self.paths.stopping.as_ref().map(|s| {
            if s.grace_expired {
                s.grace_deadline + FLUSH_TIMEOUT
            } else {
                s.grace_deadline
            }
        });
        let dlq_retry = self
            .paths
            .dead_letters
            .as_ref()
            .and_then(DeadLetters::next_retry);
        let move_retry = self.paths.moves.as_ref().and_then(Moves::next_retry);
        [
            self.tasks.renewals.next_due(),
            self.paths.holds.next_due(),
            self.waits.throttled.next_due(),
            dlq_retry,
            move_retry,
            fetch_pause,
            coalescing,
            grace,
            self.limit.next_due(),
            self.waits.write_backs.next_end(),
        ]
        .into_iter()
        .flatten()
        .fold(self.pace.next_tick, Instant::min)
    }
}

/// Whether a fetch error stops the worker: the source closed, or the broker said something no
/// retry can change (access refused, credentials or certificates refused, the group is of another
/// type or full, share groups off, a setting it refuses). Anything else (the network, a broker
/// restarting) is retried with backoff.
fn ends_the_worker(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Closed
            | ErrorKind::Authorization
            | ErrorKind::Authentication
            | ErrorKind::Group
            | ErrorKind::Unsupported
            | ErrorKind::Config
    )
}

impl<S, Svc: Service<Job>> std::fmt::Debug for Dispatcher<'_, S, Svc> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("held", &self.slots.held())
            .field("queued", &self.routes.queued())
            .field("running", &self.tasks.running.len())
            .field("renewals", &self.tasks.renewals.len())
            .field("holds", &self.paths.holds.len())
            .field("throttled", &self.waits.throttled.len())
            .field("delayed", &self.waits.delayed)
            .field("moves", &self.paths.moves.as_ref().map_or(0, Moves::len))
            .field(
                "dead_letters",
                &self.paths.dead_letters.as_ref().map_or(0, DeadLetters::len),
            )
            .field("fetching", &self.fetching.future.is_some())
            .finish_non_exhaustive()
    }
}
