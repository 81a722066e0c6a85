//! Stepping a record through its lifecycle and performing the effects that come back: this is
//! where a decision meets the source, the handler tasks, the holds and the dead-letter sink.

use std::convert::Infallible;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tower::Service;

use crate::dlq::{DeadLetter, DlqError};
use crate::policy::Cause;
use crate::source::{AckError, Delivery, ShareSource};
use crate::telemetry;
use crate::{Error, ErrorKind, Job, Outcome};

use super::super::handler_task::{Finished, handler_task, panic_message};
use super::super::lifecycle::{Effect, Event, LimitKind, Phase, Step};
use super::super::observer::Subject;
use super::super::receipt::SlotReceipt;
use super::super::slots::SlotKey;
use super::super::writes::Written;
use super::Dispatcher;
use super::breakers::VERDICT_WAIT;
use super::control::{Control, Gate};

impl<S, Svc> Dispatcher<'_, S, Svc>
where
    S: ShareSource,
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
    Svc::Future: Send + 'static,
{
    /// Feeds `event` to the record in slot `key` (if it is still there), reports the step and
    /// performs its effects. `took` is how long its handler ran, when it just finished.
    pub(super) fn step(&mut self, key: SlotKey, event: Event<'_>, took: Duration, now: Instant) {
        self.step_with(key, event, took, None, now);
    }

    /// [`step`](Self::step) with the record itself at hand (`delivery`).
    pub(super) fn step_with(
        &mut self,
        key: SlotKey,
        event: Event<'_>,
        took: Duration,
        delivery: Option<Delivery>,
        now: Instant,
    ) {
        let rules = self.paths.rules(self.config, now);
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        let before = job.life.phase;
        let step = job.life.step(event, rules);
        self.observer.step(
            Subject {
                id: &job.id,
                span: &job.span,
            },
            Some(&event),
            &step,
            took,
        );
        self.perform(key, before, step, delivery, now);
    }

    /// Performs `step`'s effects for the record in slot `key`, which was in phase `before`.
    /// `delivery` is the record itself when it is at hand (it arrived, or left its queue).
    pub(super) fn perform(
        &mut self,
        key: SlotKey,
        before: Phase<Instant>,
        step: Step,
        mut delivery: Option<Delivery>,
        now: Instant,
    ) {
        let route = self.slots.get(key).and_then(|job| job.route);
        for effect in step.effects {
            match effect {
                Effect::Admit => {
                    let record = delivery
                        .take()
                        .or_else(|| self.slots.get_mut(key).and_then(|job| job.parked.take()));
                    let admission = self.admission(key);
                    self.step_with(
                        key,
                        Event::Admission(admission),
                        Duration::ZERO,
                        record,
                        now,
                    );
                }
                Effect::Wait => match self.slots.get(key).map(|job| job.life.phase) {
                    Some(Phase::Delayed { until }) => self.paths.holds.hold(key, until),
                    Some(Phase::Throttled { until }) => self.waits.throttled.schedule(key, until),
                    _ => {}
                },
                Effect::WaitForKey => {
                    if let Some((Some(route), Some(hash))) =
                        self.slots.get(key).map(|job| (job.route, job.key))
                    {
                        self.waits.keys.wait(route, hash, key);
                    }
                }
                Effect::Move {
                    reason,
                    attempts,
                    wait,
                } => {
                    let unheld = !matches!(before, Phase::Delayed { .. });
                    self.write_move(key, reason, attempts, wait, delivery.take(), unheld, now);
                }
                Effect::Enqueue => {
                    let route = self.slots.get(key).and_then(|job| job.route);
                    if let (Some(route), Some(delivery)) = (route, delivery.take()) {
                        self.routes.enqueue(route, key, delivery);
                    }
                }
                Effect::Call => {
                    if let Some(delivery) = delivery.take() {
                        self.call(key, delivery, now);
                    }
                }
                Effect::Acknowledge(kind) => {
                    let Some(job) = self.slots.get_mut(key) else {
                        continue;
                    };
                    job.letter = None;
                    let receipt = self.source.acknowledge(&job.id, kind);
                    self.tasks.acking.push(SlotReceipt::new(key, receipt));
                }
                Effect::Hold => {
                    if let Some(Phase::Held { until }) = self.slots.get(key).map(|j| j.life.phase) {
                        self.paths.holds.hold(key, until);
                    }
                }
                Effect::WriteDeadLetter { reason, error } => {
                    self.write_dead_letter(key, reason, error, delivery.take(), now);
                }
                Effect::Cancel => {
                    if let Some(job) = self.slots.get(key) {
                        job.cancel.cancel();
                    }
                }
                Effect::Forget | Effect::Free => {
                    self.unschedule(key);
                    self.account(key, true, now);
                    self.slots.remove(key);
                }
            }
        }
        // A record that still waits keeps itself at hand for when it is admitted.
        if let Some(record) = delivery
            && let Some(job) = self.slots.get_mut(key)
            && matches!(
                job.life.phase,
                Phase::Delayed { .. } | Phase::Throttled { .. } | Phase::KeyWait
            )
        {
            job.parked = Some(record);
        }
        self.account(key, false, now);
        let after = self
            .slots
            .get(key)
            .map(|job| (job.life.phase, job.life.renewable()));
        let changed = after.map(|(phase, _)| phase) != Some(before);
        match before {
            Phase::Held { until } | Phase::Delayed { until } if changed => {
                self.paths.holds.cancel(key, until);
            }
            Phase::Throttled { until } if changed => self.waits.throttled.cancel(key, until),
            _ => {}
        }
        if let Some((_, false)) = after {
            self.unschedule(key);
        }
        let Some(route) = route else {
            return;
        };
        let after = after.map(|(p, _)| p);
        let (was, is) = (takes_room(Some(before)), takes_room(after));
        if was != is {
            self.count_route(route, is);
        }
        let (wanted, wants) = (wants_handler(Some(before)), wants_handler(after));
        if wanted != wants && self.routes.count_demand(route, wants) {
            self.sync_route_pauses();
        }
    }

    /// Counts a record of `route` starting or ending to take room, pausing the route's topic at
    /// the source while the route holds its full share of the slots.
    pub(super) fn count_route(&mut self, route: usize, unfinished: bool) {
        if self.routes.count(route, unfinished) {
            self.sync_route_pauses();
        }
    }

    /// Pauses at the source the topics of the routes that hold their full share, and resumes
    /// the others.
    pub(super) fn sync_route_pauses(&mut self) {
        for route in 0..self.routes.len() {
            self.sync_route_pause(route);
            self.sync_delay_pause(route);
        }
    }

    /// Starts the handler of the record in slot `key` as a task of its own.
    fn call(&mut self, key: SlotKey, delivery: Delivery, now: Instant) {
        let Some(job) = self.slots.get(key) else {
            return;
        };
        let Some(route) = job.route else {
            return;
        };
        let span = job.span.clone();
        if let Some(job_id) = self.cancellation(key, &delivery) {
            tracing::info!(
                parent: &span,
                record = %delivery.id,
                job_id = %job_id,
                "job cancelled: acknowledged without running"
            );
            self.on_finished(key, Finished::Cancelled, Duration::ZERO, now);
            return;
        }
        let Some(job) = self.slots.get(key) else {
            return;
        };
        let mut request = Job::new(delivery, job.cancel.clone()).with_attempt(job.life.attempt);
        if let Some(origin) = &job.origin {
            request = request.with_origin(origin.topic.clone(), origin.partition, origin.offset);
        }
        let called = {
            let _entered = span.enter();
            catch_unwind(AssertUnwindSafe(|| self.routes.call(route, request)))
        };
        match called {
            Ok(future) => {
                let timeout = self
                    .routes
                    .timeout(route)
                    .unwrap_or(self.config.job_timeout);
                self.tasks
                    .running
                    .spawn(handler_task(key, future, timeout, span.clone()));
            }
            Err(panic) => {
                let message = panic_message(&*panic);
                self.on_finished(key, Finished::Panicked(message), Duration::ZERO, now);
            }
        }
    }

    /// A record whose service is ready left its queue.
    pub(super) fn dispatch(&mut self, key: SlotKey, delivery: Delivery, now: Instant) {
        let rules = self.paths.rules(self.config, now);
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        let before = job.life.phase;
        let step = job.life.step(Event::Ready, rules);
        self.perform(key, before, step, Some(delivery), now);
    }

    /// A handler task ended.
    pub(super) fn on_finished(
        &mut self,
        key: SlotKey,
        finished: Finished,
        took: Duration,
        now: Instant,
    ) {
        let ran = !matches!(finished, Finished::Cancelled);
        if ran {
            self.fetching.coalesce.finished(took);
        }
        let Some(job) = self.slots.get(key) else {
            return;
        };
        if ran
            && let Some(latency) = job
                .route
                .and_then(|route| self.waits.latency.get_mut(route))
        {
            // A running average over about eight calls.
            *latency = (*latency * 7 + took) / 8;
        }
        let (outcome, cause) = match finished {
            Finished::Done(outcome) => (outcome, Cause::Handler),
            Finished::Panicked(message) => {
                tracing::warn!(parent: &job.span, record = %job.id, panic = %message, "handler panicked");
                (
                    Outcome::retry(format!("handler panicked: {message}")),
                    Cause::Panic,
                )
            }
            Finished::TimedOut => {
                // The task dropped the handler's future; whatever it started watches this token.
                job.cancel.cancel();
                tracing::warn!(parent: &job.span, record = %job.id, "handler timed out");
                (Outcome::retry("the job timed out"), Cause::Timeout)
            }
            Finished::Cancelled => (Outcome::Accept, Cause::Cancelled),
        };
        if ran {
            let gate = self.judge_outcome(key, &outcome, now);
            let failed = matches!(outcome, Outcome::Retry { .. });
            let undecided = failed && gate == Gate::Running && self.awaits_verdict(key, now);
            // It runs again once the pause ends (or once its breaker could judge), from its copy
            // (kept with a dead-letter or delay sink, or on a route with a breaker or
            // cool-down); without one the policy decides.
            if (gate != Gate::Running || undecided)
                && failed
                && let Some(job) = self.slots.get_mut(key)
                && let Some(copy) = job.letter.clone()
            {
                job.throttle = Some(LimitKind::Paused);
                job.probe = false;
                job.parked = Some(copy);
                job.awaited_verdict |= undecided;
                let wait = if undecided {
                    VERDICT_WAIT
                } else {
                    Control::pause_wait(gate, SystemTime::now())
                };
                self.step(
                    key,
                    Event::FailedWhilePaused {
                        outcome: &outcome,
                        cause,
                        wait,
                    },
                    took,
                    now,
                );
                return;
            }
        }
        self.step(
            key,
            Event::Finished {
                outcome: &outcome,
                cause,
            },
            took,
            now,
        );
    }

    /// The broker answered an acknowledgement.
    pub(super) fn on_acked(&mut self, key: SlotKey, result: Result<(), AckError>, now: Instant) {
        self.step(
            key,
            Event::Answered(result.as_ref().map(|_| ())),
            Duration::ZERO,
            now,
        );
    }

    /// Handles every dead-letter write that ended.
    pub(super) fn poll_dead_letters(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut progress = false;
        while let Some(writer) = self.paths.dead_letters.as_mut() {
            let Poll::Ready(written) = writer.poll_written(cx, now) else {
                break;
            };
            progress = true;
            match written {
                Written::Confirmed(key) => {
                    self.observer.dead_letter_confirmed();
                    if self.health.dlq_failure().is_some() && !self.paths.dlq_failing() {
                        self.health.set_dlq_failure(None);
                        tracing::info!("the dead-letter sink recovered: fetching resumes");
                    }
                    self.step(key, Event::Written, Duration::ZERO, now);
                }
                Written::Failed {
                    key,
                    error,
                    began_failing,
                } => {
                    self.observer.dead_letter_failed(began_failing);
                    if began_failing {
                        self.health.set_dlq_failure(Some(error.to_string()));
                        tracing::error!(error = %error, "the dead-letter sink is failing: fetching paused; records for it keep their locks until it recovers");
                    } else if let Some(job) = self.slots.get(key) {
                        tracing::debug!(parent: &job.span, record = %job.id, error = %error, "dead-letter write failed: trying again");
                    }
                }
                Written::Refused { key, error } => {
                    self.observer.dead_letter_failed(false);
                    self.health.set_dlq_failure(Some(error.to_string()));
                    self.refuse_dead_letters(key, error, now);
                }
            }
        }
        progress
    }

    /// The sink refused a letter for good: no retry can succeed, so the worker stops with that
    /// error. The records waiting for the sink are released at once (a release on the last
    /// delivery lets the broker archive the record: logged with its offset), the rest shuts down
    /// gracefully.
    fn refuse_dead_letters(&mut self, key: SlotKey, error: DlqError, now: Instant) {
        let waiting = self
            .paths
            .dead_letters
            .as_mut()
            .map(|writer| writer.give_up_waiting())
            .unwrap_or_default();
        if self.fatal.is_none() {
            tracing::error!(error = %error, "the dead-letter sink refused a letter for good: releasing what the worker holds and stopping");
            self.fatal = Some(Error::new(
                ErrorKind::Dlq,
                format!("the dead-letter sink cannot write: {error}"),
            ));
        }
        self.begin_shutdown(now);
        for key in std::iter::once(key).chain(waiting) {
            self.step(key, Event::Refused, Duration::ZERO, now);
        }
    }

    /// Hands the record's letter to the sink. `delivery` is the record when the slot keeps no
    /// copy of it.
    fn write_dead_letter(
        &mut self,
        key: SlotKey,
        reason: crate::dlq::DlqReason,
        error: String,
        delivery: Option<Delivery>,
        now: Instant,
    ) {
        let Some(job) = self.slots.get_mut(key) else {
            return;
        };
        let Some(mut letter) = job.letter.take().or(delivery) else {
            // Not reached: a slot keeps its record whenever a sink is configured.
            tracing::error!(parent: &job.span, record = %job.id, "the record to dead-letter was not kept: releasing it");
            self.step(key, Event::Refused, Duration::ZERO, now);
            return;
        };
        let Some(writer) = self.paths.dead_letters.as_mut() else {
            return;
        };
        telemetry::stamp(&job.span, &mut letter.headers);
        // The letter names the record's attempts and, for a delay-topic copy, where it came from
        // (always its route, checked on arrival): it goes to its route's dead-letter topic, and a
        // replay sends it back there as new.
        letter.delivery_count = job.life.attempt;
        let handler = job
            .route
            .and_then(|route| self.routes.topic(route).cloned())
            .unwrap_or_else(|| job.id.topic.clone());
        if self
            .routes
            .route_for(&job.id.topic)
            .is_some_and(|lookup| lookup.from_delay)
        {
            match &job.origin {
                Some(origin) => {
                    letter.id.topic = origin.topic.clone();
                    letter.id.partition = origin.partition;
                    letter.id.offset = origin.offset;
                    letter
                        .headers
                        .retain(|h| !crate::delay::headers::is_delay_header(&h.key));
                }
                // Delay headers the worker did not write (see `Waits`): the letter is the route's,
                // and keeps them as they came.
                None => letter.id.topic = handler.clone(),
            }
        }
        writer.write(
            key,
            DeadLetter {
                delivery: letter,
                reason,
                error,
                handler,
                failed_at: SystemTime::now(),
            },
        );
    }

    /// Releases every held retry whose backoff ended by `now`.
    pub(super) fn release_held(&mut self, now: Instant) -> bool {
        if self.paths.holds.next_due().is_none_or(|at| at > now) {
            return false;
        }
        let mut due = std::mem::take(&mut self.pace.due);
        self.paths.holds.take_due(now, &mut due);
        for (at, key) in due.drain(..) {
            match self.slots.get(key).map(|job| job.life.phase) {
                Some(Phase::Held { until }) if until == at => {
                    self.step(key, Event::HoldEnded, Duration::ZERO, now);
                }
                Some(Phase::Delayed { until }) if until == at => {
                    self.step(key, Event::Due, Duration::ZERO, now);
                }
                _ => {}
            }
        }
        self.pace.due = due;
        true
    }
}

/// Whether a record in `phase` takes room from the handlers' work: every record not yet being
/// acknowledged, but those waiting for their not-before, which `max_held` bounds apart.
pub(super) fn takes_room(phase: Option<Phase<Instant>>) -> bool {
    phase.is_some_and(|phase| !matches!(phase, Phase::Acking(_) | Phase::Delayed { .. }))
}

/// Whether a record in `phase` wants a handler now, which makes its lane busy (see
/// `Routes::share`): one being admitted, queued or run, not one that waits.
fn wants_handler(phase: Option<Phase<Instant>>) -> bool {
    matches!(
        phase,
        Some(Phase::Admitting | Phase::Queued | Phase::Running)
    )
}
