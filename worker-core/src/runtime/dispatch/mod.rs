//! The dispatch loop: fetch into free slots, hand records to ready services, turn outcomes into
//! acknowledgements, renew slow records' locks, and drain on shutdown.
//!
//! It is one hand-written poll loop (like tower's `Buffer` worker), so every step sees the same
//! state without locks: in one pass it dispatches every record whose service is ready, settles every
//! finished handler through the [failure policy](crate::policy), frees every slot whose
//! acknowledgement was answered, handles finished dead-letter writes, releases held retries whose
//! backoff ended, issues every due renewal together, and starts the next fetch if a slot is free
//! (and the dead-letter sink is not failing).
//!
//! `settle.rs` turns outcomes into acknowledgements, holds and dead letters; `stop.rs` is shutdown.

mod settle;
mod stop;

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::{Instant, Sleep, sleep_until};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tower::Service;
use tracing::Instrument;
use tracing::field::Empty;
use tracing::instrument::Instrumented;

use crate::dlq::DlqReason;
use crate::policy::Policy;
use crate::policy::dead_letters::DeadLetters;
use crate::policy::holds::Holds;
use crate::source::{AckError, AckKind, Delivery, ShareSource};
use crate::telemetry::{self, metrics::Metrics};
use crate::{Error, ErrorKind, Job, Outcome, Result};

use super::config::Config;
use super::deadlines::Deadlines;
use super::health::{TICK, WorkerHealth};
use super::limit::{self, LimitWatch};
use super::receipt::SlotReceipt;
use super::routes::Routes;
use super::run_job::{Finished, RunJob, panic_message};
use super::slots::{InFlight, Phase, SlotKey, Slots};
use super::summary::Summary;

/// After an empty fetch, wait this long before the next one (the source already waited).
const EMPTY_FETCH_PAUSE: Duration = Duration::from_millis(10);
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

/// The loop's state. Generic over the service so the handler futures are stored unboxed beyond
/// what the service itself boxes.
pub(crate) struct Dispatcher<'a, S, Svc>
where
    Svc: Service<Job>,
{
    source: &'a S,
    config: &'a Config,
    routes: Routes<Svc>,
    slots: Slots,
    renewals: Deadlines,
    running: FuturesUnordered<Instrumented<RunJob<Svc::Future>>>,
    acking: FuturesUnordered<SlotReceipt>,
    renewing: FuturesUnordered<SlotReceipt>,
    fetch: Option<FetchFuture<'a>>,
    fetch_not_before: Option<Instant>,
    fetch_backoff: Duration,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    stopping: Option<Stopping>,
    timer: Pin<Box<Sleep>>,
    summary: Summary,
    fatal: Option<Error>,
    due: Vec<(Instant, SlotKey)>,
    policy: Policy,
    /// Retries waiting out their backoff.
    holds: Holds,
    /// Dead-letter writes; `None` without a sink.
    dead_letters: Option<DeadLetters>,
    /// Fetching is paused because the dead-letter sink fails (for the recovery log).
    dlq_paused: bool,
    /// The share group, for the record spans.
    group: Option<Arc<str>>,
    metrics: Metrics,
    /// When the fetch in progress started.
    fetch_started: Instant,
    health: WorkerHealth,
    /// The loop wakes by then even when nothing else is due, so that its silence means a stall.
    next_tick: Instant,
    /// Reads the group's delivery-count limit again now and then.
    limit: LimitWatch<'a>,
}

impl<'a, S, Svc> Dispatcher<'a, S, Svc>
where
    S: ShareSource,
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
{
    pub(crate) fn new(
        source: &'a S,
        config: &'a Config,
        routes: Routes<Svc>,
        shutdown: CancellationToken,
        delivery_limit: Option<u16>,
        metrics: Metrics,
        health: WorkerHealth,
    ) -> Self {
        let dead_letters = config.policy.dlq.clone().map(|sink| {
            DeadLetters::new(sink, config.policy.dlq_backoff, config.policy.dlq_timeout)
        });
        Self {
            source,
            config,
            routes,
            slots: Slots::new(config.concurrency.saturating_mul(2)),
            renewals: Deadlines::default(),
            running: FuturesUnordered::new(),
            acking: FuturesUnordered::new(),
            renewing: FuturesUnordered::new(),
            fetch: None,
            fetch_not_before: None,
            fetch_backoff: FETCH_BACKOFF,
            shutdown: Box::pin(shutdown.cancelled_owned()),
            stopping: None,
            timer: Box::pin(sleep_until(Instant::now())),
            summary: Summary::default(),
            fatal: None,
            due: Vec::new(),
            policy: limit::policy_for(&config.policy, delivery_limit),
            holds: Holds::new(config.max_held()),
            dead_letters,
            dlq_paused: false,
            group: source.group().map(Arc::from),
            metrics,
            fetch_started: Instant::now(),
            health,
            next_tick: Instant::now() + TICK,
            limit: LimitWatch::new(delivery_limit, config.limit_refresh),
        }
    }

    /// Runs until shutdown has drained; returns the summary and, if the source closed under it,
    /// that error.
    pub(crate) async fn run(mut self) -> (Summary, Option<Error>) {
        self.health.set_running(true);
        poll_fn(|cx| {
            self.health.passed();
            let poll = self.poll_run(cx);
            self.metrics.occupancy(self.slots.held(), self.holds.len());
            poll
        })
        .await;
        self.health.set_running(false);
        self.metrics.occupancy(0, 0);
        (self.summary, self.fatal)
    }

    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        for _ in 0..BUDGET {
            let now = Instant::now();
            let mut progress = false;

            if self.stopping.is_none() && self.shutdown.as_mut().poll(cx).is_ready() {
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
            while let Poll::Ready((route, key, delivery)) = self.routes.poll_next_ready(cx) {
                self.dispatch(route, key, delivery);
                progress = true;
            }
            while let Poll::Ready(Some((key, finished, took))) = self.running.poll_next_unpin(cx) {
                self.on_finished(key, finished, took);
                progress = true;
            }
            while let Poll::Ready(Some((key, result))) = self.acking.poll_next_unpin(cx) {
                self.on_acked(key, result);
                progress = true;
            }
            while let Poll::Ready(Some((key, result))) = self.renewing.poll_next_unpin(cx) {
                self.on_renewed(key, result);
                progress = true;
            }
            progress |= self.poll_dead_letters(cx, now);
            progress |= self.release_held(now);
            progress |= self
                .dead_letters
                .as_mut()
                .is_some_and(|writer| writer.retry_due(now));
            progress |= self.renew_due(now);
            progress |= self.expire_grace(now);
            if let Poll::Ready(changed) = self.limit.poll_changed(self.source, cx, now) {
                self.policy = limit::policy_for(&self.config.policy, changed);
                progress = true;
            }
            progress |= self.start_fetch(now);

            if self.is_done(now) {
                return Poll::Ready(());
            }
            if !progress {
                if self.next_tick <= now {
                    self.next_tick = now + TICK;
                }
                let Some(at) = self.next_wake() else {
                    return Poll::Pending;
                };
                if self.timer.deadline() != at {
                    self.timer.as_mut().reset(at);
                }
                if self.timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Polls the fetch in progress; `true` if it ended (its records are admitted).
    fn poll_fetch(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let Some(fetch) = self.fetch.as_mut() else {
            return false;
        };
        let Poll::Ready(result) = fetch.as_mut().poll(cx) else {
            return false;
        };
        self.fetch = None;
        self.on_fetched(result, now);
        true
    }

    /// Handles every dead-letter write that ended.
    fn poll_dead_letters(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut progress = false;
        while let Some(writer) = self.dead_letters.as_mut() {
            let Poll::Ready(written) = writer.poll_written(cx, now) else {
                break;
            };
            self.on_written(written, now);
            progress = true;
        }
        progress
    }

    /// Asks for min(concurrency − unfinished records, max_poll_records) records, if fetching is
    /// allowed now. Records whose acknowledgement is on the way do not count: the fetch carries (or
    /// overlaps) their acknowledgements, so a finished handler's successor does not wait a round
    /// trip for the broker's answer first.
    fn start_fetch(&mut self, now: Instant) -> bool {
        if self.stopping.is_some() || self.fetch.is_some() {
            return false;
        }
        if self
            .dead_letters
            .as_ref()
            .is_some_and(DeadLetters::is_failing)
        {
            return false;
        }
        if let Some(at) = self.fetch_not_before {
            if now < at {
                return false;
            }
            self.fetch_not_before = None;
        }
        let unfinished = self.slots.held().saturating_sub(self.acking.len());
        let room = self
            .config
            .concurrency
            .saturating_sub(unfinished)
            .min(self.slots.free());
        if room == 0 {
            return false;
        }
        let max = u32::try_from(room)
            .unwrap_or(u32::MAX)
            .min(self.config.max_poll_records);
        self.fetch = Some(Box::pin(self.source.fetch(max)));
        self.fetch_started = now;
        true
    }

    fn on_fetched(&mut self, result: Result<Vec<Delivery>>, now: Instant) {
        self.metrics.fetch_ended(
            now.saturating_duration_since(self.fetch_started),
            result.is_ok(),
        );
        let batch = match result {
            Ok(batch) => batch,
            Err(err) if ends_the_worker(err.kind()) => {
                tracing::error!(error = %err, "the source cannot go on: releasing what the worker holds and stopping");
                self.summary.fetch_errors += 1;
                self.fatal = Some(err);
                self.begin_shutdown(now);
                return;
            }
            Err(err) => {
                self.summary.fetch_errors += 1;
                if self.fetch_backoff == FETCH_BACKOFF {
                    self.health.set_fetch_failure(Some(err.to_string()));
                }
                tracing::warn!(error = %err, retry_in = ?self.fetch_backoff, "fetch failed");
                self.fetch_not_before = Some(now + self.fetch_backoff);
                self.fetch_backoff = (self.fetch_backoff * 2).min(MAX_FETCH_BACKOFF);
                return;
            }
        };
        if self.fetch_backoff != FETCH_BACKOFF {
            self.health.set_fetch_failure(None);
        }
        self.fetch_backoff = FETCH_BACKOFF;
        if batch.is_empty() {
            self.fetch_not_before = Some(now + EMPTY_FETCH_PAUSE);
        }
        self.summary.fetched += batch.len() as u64;
        self.count_fetched(&batch);
        for delivery in batch {
            self.admit(delivery);
        }
    }

    /// Counts a batch per topic: one metric update per run of records of the same topic.
    fn count_fetched(&self, batch: &[Delivery]) {
        let mut start = 0;
        while let Some(first) = batch.get(start) {
            let topic = &first.id.topic;
            let run = batch[start..]
                .iter()
                .take_while(|d| d.id.topic == *topic)
                .count();
            self.metrics.fetched(topic, run as u64);
            start += run;
        }
    }

    /// Gives a fetched record a slot and queues it for its route.
    fn admit(&mut self, delivery: Delivery) {
        let id = &delivery.id;
        self.metrics.delivered(&id.topic, delivery.delivery_count);
        let span = tracing::info_span!(
            target: telemetry::SPAN_TARGET,
            "process",
            otel.kind = "consumer",
            otel.status_code = Empty,
            messaging.system = "kafka",
            messaging.operation.type = "process",
            messaging.operation.name = "process",
            messaging.destination.name = &*id.topic,
            messaging.consumer.group.name = self.group.as_deref(),
            messaging.destination.partition.id = id.partition,
            messaging.kafka.offset = id.offset,
            share_worker.delivery_count = i64::from(delivery.delivery_count),
            share_worker.outcome = Empty,
            share_worker.handler_ms = Empty,
            error.type = Empty,
        );
        telemetry::continue_trace(&span, &delivery.headers);
        let renew_every = self.config.renew_every(delivery.lock_duration);
        let next_renewal = renew_every.map(|every| delivery.acquired_at + every);
        let job = InFlight {
            id: id.clone(),
            cancel: CancellationToken::new(),
            phase: Phase::Queued,
            lost: false,
            renew_every,
            next_renewal,
            delivery_count: delivery.delivery_count,
            record: None,
            held_until: None,
            dlq_reason: None,
            span,
        };
        let Some(key) = self.slots.insert(job) else {
            tracing::warn!(record = %delivery.id, "the source returned more records than asked for: releasing");
            drop(self.source.acknowledge(&delivery.id, AckKind::Release));
            return;
        };
        if self.stopping.is_some() {
            self.summary.released_on_shutdown += 1;
            self.release_for(key, "released_on_shutdown");
            return;
        }
        if let Some(at) = next_renewal {
            self.renewals.schedule(key, at);
        }
        if let Some(undecodable) = delivery.undecodable.clone() {
            self.admit_undecodable(key, delivery, &undecodable.error);
            return;
        }
        if self.policy.exhausted(delivery.delivery_count) {
            self.admit_exhausted(key, delivery);
            return;
        }
        match self.routes.route_for(&delivery.id.topic) {
            Some(route) => {
                if self.dead_letters.is_some()
                    && let Some(job) = self.slots.get_mut(key)
                {
                    // Kept for the dead-letter sink: the handler consumes the job. Reference counts
                    // only, plus the header list when the record has headers.
                    job.record = Some(delivery.clone());
                }
                self.routes.enqueue(route, key, delivery);
            }
            None => {
                tracing::warn!(record = %delivery.id, "no route for this topic: releasing the record");
                self.summary.unrouted += 1;
                self.release_for(key, "unrouted");
            }
        }
    }

    /// A record that arrived past its attempts: dead-lettered (`delivery_limit`) without calling
    /// its handler, which may be what keeps killing workers.
    fn admit_exhausted(&mut self, key: SlotKey, delivery: Delivery) {
        let count = delivery.delivery_count;
        let error = format!(
            "delivered {count} times without an outcome (attempts allowed: {}): earlier attempts crashed or lost their lock",
            self.policy.last_attempt()
        );
        if let Some(job) = self.slots.get(key) {
            record_outcome(&job.span, DlqReason::DeliveryLimit.as_str());
            tracing::warn!(parent: &job.span, record = %job.id, "{error}: dead-lettering it without calling the handler");
        }
        self.dead_letter(key, DlqReason::DeliveryLimit, error, Some(delivery));
    }

    /// A record the source could not decode: dead-lettered (`decode`) without calling a handler,
    /// whatever its delivery count. Redelivery would decode no better.
    fn admit_undecodable(&mut self, key: SlotKey, delivery: Delivery, error: &str) {
        let error = format!("the record did not decode: {error}");
        if let Some(job) = self.slots.get(key) {
            record_outcome(&job.span, DlqReason::Decode.as_str());
            tracing::warn!(parent: &job.span, record = %job.id, "{error}: dead-lettering it without calling the handler");
        }
        self.dead_letter(key, DlqReason::Decode, error, Some(delivery));
    }

    /// Calls the route's service for a queued record (the service is ready).
    fn dispatch(&mut self, route: usize, key: SlotKey, delivery: Delivery) {
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        if job.lost {
            // Its lock was lost while it waited: never started, nothing to acknowledge.
            self.forget(key);
            return;
        }
        job.phase = Phase::Running;
        let span = job.span.clone();
        let request = Job::new(delivery, job.cancel.clone());
        let called = {
            let _entered = span.enter();
            catch_unwind(AssertUnwindSafe(|| self.routes.call(route, request)))
        };
        match called {
            Ok(future) => {
                let run = RunJob::new(key, future, self.config.job_timeout);
                self.running.push(run.instrument(span));
            }
            Err(panic) => {
                let message = panic_message(&*panic);
                self.on_finished(key, Finished::Panicked(message), Duration::ZERO);
            }
        }
    }

    /// Issues every renewal due by `now` together, and schedules the next ones.
    fn renew_due(&mut self, now: Instant) -> bool {
        if self.renewals.next_due().is_none_or(|at| at > now) {
            return false;
        }
        let mut due = std::mem::take(&mut self.due);
        self.renewals.take_due(now, &mut due);
        for (at, key) in due.drain(..) {
            let Some(job) = self.slots.get_mut(key) else {
                continue;
            };
            if job.next_renewal != Some(at) {
                continue;
            }
            job.next_renewal = None;
            let (
                Some(every),
                Phase::Queued | Phase::Running | Phase::Held | Phase::DeadLettering,
                false,
            ) = (job.renew_every, job.phase, job.lost)
            else {
                continue;
            };
            let receipt = self.source.renew(&job.id);
            self.renewing.push(SlotReceipt::new(key, receipt));
            self.summary.renewals += 1;
            self.metrics.renewed(&job.id.topic);
            let mut next = at + every;
            if next <= now {
                next = now + every;
            }
            job.next_renewal = Some(next);
            self.renewals.schedule(key, next);
        }
        self.due = due;
        true
    }

    fn on_renewed(&mut self, key: SlotKey, result: std::result::Result<(), AckError>) {
        let Err(err) = result else {
            return;
        };
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        self.summary.renewal_failures += 1;
        self.metrics.renewal_failed(&job.id.topic, &err);
        if job.lost {
            return;
        }
        if !matches!(job.phase, Phase::Acking(_)) {
            self.metrics.lock_lost(&job.id.topic);
        }
        match job.phase {
            Phase::Queued | Phase::Running => {
                job.lost = true;
                job.cancel.cancel();
                tracing::warn!(parent: &job.span, record = %job.id, error = %err, "renewal failed: the lock is lost, cancelling the job");
                self.unschedule(key);
            }
            Phase::Held => {
                tracing::warn!(parent: &job.span, record = %job.id, error = %err, "renewal failed while the record waited for its retry: the broker delivers it again");
                if let Some(until) = job.held_until.take() {
                    self.holds.cancel(key, until);
                }
                self.forget(key);
            }
            Phase::DeadLettering => {
                // Keep writing it: if its lock ran out at the delivery limit the broker archives
                // it, and the dead letter is then its only copy. A second copy is possible.
                job.lost = true;
                tracing::warn!(parent: &job.span, record = %job.id, error = %err, "renewal failed while the record waited for the dead-letter sink: still writing it, it may be dead-lettered twice");
                self.unschedule(key);
            }
            Phase::Acking(_) => {}
        }
    }

    fn unschedule(&mut self, key: SlotKey) {
        if let Some(job) = self.slots.get_mut(key)
            && let Some(at) = job.next_renewal.take()
        {
            self.renewals.cancel(key, at);
        }
    }

    /// Frees a slot without acknowledging.
    fn forget(&mut self, key: SlotKey) {
        self.unschedule(key);
        self.slots.remove(key);
    }

    /// The earliest time something is due: a renewal, the end of a fetch pause, the grace period.
    fn next_wake(&self) -> Option<Instant> {
        // The end of a fetch pause matters only if a fetch could start then: not while stopping,
        // fetching or paused for a failing dead-letter sink (its recovery wakes the loop itself).
        // Waking for a past pause that cannot end would spin.
        let dlq_failing = self
            .dead_letters
            .as_ref()
            .is_some_and(DeadLetters::is_failing);
        let fetch_pause = self
            .fetch_not_before
            .filter(|_| self.stopping.is_none() && self.fetch.is_none() && !dlq_failing);
        let grace = self.stopping.as_ref().map(|s| {
            if s.grace_expired {
                s.grace_deadline + FLUSH_TIMEOUT
            } else {
                s.grace_deadline
            }
        });
        let dlq_retry = self.dead_letters.as_ref().and_then(DeadLetters::next_retry);
        [
            Some(self.next_tick),
            self.limit.next_due(),
            self.renewals.next_due(),
            self.holds.next_due(),
            dlq_retry,
            fetch_pause,
            grace,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// Whether a fetch error stops the worker: the source closed, or the broker said something no
/// retry can change (access refused, credentials or certificates refused, the group is of another
/// type or full, share groups off, a setting it refuses). Anything else (the network, a broker restarting) is retried with backoff.
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

/// Records how a record ended on its span: `share_worker.outcome`, and for anything but an accept
/// or a release without an outcome, `error.type` and an error status.
fn record_outcome(span: &tracing::Span, outcome: &'static str) {
    span.record("share_worker.outcome", outcome);
    if !matches!(outcome, "accept" | "unrouted" | "released_on_shutdown") {
        span.record("error.type", outcome);
        span.record("otel.status_code", "error");
    }
}

impl<S, Svc: Service<Job>> std::fmt::Debug for Dispatcher<'_, S, Svc> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("held", &self.slots.held())
            .field("queued", &self.routes.queued())
            .field("running", &self.running.len())
            .field("renewals", &self.renewals.len())
            .field("held", &self.holds.len())
            .field(
                "dead_letters",
                &self.dead_letters.as_ref().map_or(0, DeadLetters::len),
            )
            .field("fetching", &self.fetch.is_some())
            .finish_non_exhaustive()
    }
}
