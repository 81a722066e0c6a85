//! Shutdown: stop fetching, release what never started and the held retries, wait for running
//! handlers and dead-letter writes until the grace period ends, then release the rest.

use std::convert::Infallible;
use std::time::Duration;

use tokio::time::Instant;
use tower::Service;

use crate::source::ShareSource;
use crate::{Job, Outcome};

use super::super::lifecycle::{Event, Phase};
use super::{Dispatcher, FLUSH_TIMEOUT, Stopping};

impl<S, Svc> Dispatcher<'_, S, Svc>
where
    S: ShareSource,
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
    Svc::Future: Send + 'static,
{
    /// Stops fetching; the records that never started and the retries being held are released.
    pub(super) fn begin_shutdown(&mut self, now: Instant) {
        if self.paths.stopping.is_some() {
            return;
        }
        self.health.set_stopping();
        self.paths.stopping = Some(Stopping {
            grace_deadline: now + self.config.shutdown_grace,
            grace_expired: false,
        });
        tracing::info!(
            running = self.tasks.running.len(),
            held = self.slots.held(),
            grace = ?self.config.shutdown_grace,
            "shutting down: no more fetches, waiting for running handlers"
        );
        // Copies written to the delay topics from now on are for the next run: a fetch must not
        // bring them back only to release them.
        for (route, paused) in self.waits.delay_paused.iter_mut().enumerate() {
            for (topic, paused) in self.routes.delay_topics(route).iter().zip(paused) {
                *paused = true;
                self.source.pause(topic, true);
            }
        }
        for (key, _) in self.routes.drain() {
            self.step(key, Event::ShutdownStarted, Duration::ZERO, now);
        }
        // Held retries are released; records waiting for their not-before, a rate limit or
        // their key move to the delay topic (with a delay sink) or are released.
        let mut held = std::mem::take(&mut self.pace.due);
        self.paths.holds.take_all(&mut held);
        self.waits.throttled.take_all(&mut held);
        held.extend(
            self.waits
                .keys
                .drain_waiting()
                .into_iter()
                .map(|key| (now, key)),
        );
        for (_, key) in held.drain(..) {
            self.step(key, Event::ShutdownStarted, Duration::ZERO, now);
        }
        self.pace.due = held;
    }

    /// At the end of the grace period: cancels the handlers still running and releases their
    /// records, and gives up on dead-letter writes (their records are released, never rejected).
    pub(super) fn expire_grace(&mut self, now: Instant) -> bool {
        let Some(stopping) = &mut self.paths.stopping else {
            return false;
        };
        if stopping.grace_expired || now < stopping.grace_deadline {
            return false;
        }
        stopping.grace_expired = true;
        self.fetching.future = None;
        let (mut unfinished, mut undelivered) = (Vec::new(), Vec::new());
        for (key, job) in self.slots.iter_mut() {
            match job.life.phase {
                Phase::Running => unfinished.push(key),
                Phase::DeadLettering(_) | Phase::Moving(_) => undelivered.push(key),
                _ => {}
            }
        }
        if let Some(writer) = self.paths.dead_letters.as_mut() {
            writer.abandon();
        }
        if let Some(writer) = self.paths.moves.as_mut() {
            writer.abandon();
        }
        if !unfinished.is_empty() {
            tracing::warn!(
                unfinished = unfinished.len(),
                "grace period over: cancelling and releasing unfinished jobs"
            );
        }
        if !undelivered.is_empty() {
            tracing::error!(
                records = undelivered.len(),
                "grace period over with the dead-letter or delay sink still failing: releasing those records (neither accepted nor rejected); the broker delivers them again, and archives any at its delivery limit"
            );
        }
        for key in unfinished.into_iter().chain(undelivered) {
            self.step(key, Event::GraceOver, Duration::ZERO, now);
        }
        // Their tokens fired above; a handler that ignores its token is dropped here.
        self.tasks.running.abort_all();
        true
    }

    pub(super) fn is_done(&self, now: Instant) -> bool {
        let Some(stopping) = &self.paths.stopping else {
            return false;
        };
        if self.fetching.future.is_some() {
            return false;
        }
        self.slots.held() == 0
            || (stopping.grace_expired && now >= stopping.grace_deadline + FLUSH_TIMEOUT)
    }
}
