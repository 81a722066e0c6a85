//! Shutdown: stop fetching, release what never started and held retries, wait for running
//! handlers and dead-letter writes until the grace period ends, then release the rest.

use std::convert::Infallible;

use futures::stream::FuturesUnordered;
use tokio::time::Instant;
use tower::Service;

use crate::source::{AckKind, ShareSource};
use crate::{Job, Outcome};

use super::super::slots::Phase;
use super::{Dispatcher, FLUSH_TIMEOUT, Stopping};

impl<S, Svc> Dispatcher<'_, S, Svc>
where
    S: ShareSource,
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
{
    /// Stops fetching, releases the records that never started and the retries being held.
    pub(super) fn begin_shutdown(&mut self, now: Instant) {
        if self.stopping.is_some() {
            return;
        }
        self.health.set_stopping();
        self.stopping = Some(Stopping {
            grace_deadline: now + self.config.shutdown_grace,
            grace_expired: false,
        });
        tracing::info!(
            running = self.running.len(),
            held = self.slots.held(),
            grace = ?self.config.shutdown_grace,
            "shutting down: no more fetches, waiting for running handlers"
        );
        for (key, _) in self.routes.drain() {
            if self.slots.get(key).is_some_and(|job| job.lost) {
                self.forget(key);
            } else {
                self.summary.released_on_shutdown += 1;
                self.release_for(key, "released_on_shutdown");
            }
        }
        let mut held = std::mem::take(&mut self.due);
        self.holds.take_all(&mut held);
        for (_, key) in held.drain(..) {
            if self
                .slots
                .get(key)
                .is_some_and(|job| job.phase == Phase::Held)
            {
                self.acknowledge(key, AckKind::Release);
            }
        }
        self.due = held;
    }

    /// At the end of the grace period: cancels the handlers still running and releases their
    /// records, and gives up on dead-letter writes (their records are released, never rejected).
    pub(super) fn expire_grace(&mut self, now: Instant) -> bool {
        let Some(stopping) = &mut self.stopping else {
            return false;
        };
        if stopping.grace_expired || now < stopping.grace_deadline {
            return false;
        }
        stopping.grace_expired = true;
        self.fetch = None;
        let mut unfinished = Vec::new();
        let mut undelivered = Vec::new();
        for (key, job) in self.slots.iter_mut() {
            match job.phase {
                Phase::Running => {
                    job.cancel.cancel();
                    unfinished.push((key, job.lost));
                }
                Phase::DeadLettering => undelivered.push((key, job.lost)),
                _ => {}
            }
        }
        self.running = FuturesUnordered::new();
        if let Some(writer) = self.dead_letters.as_mut() {
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
                "grace period over with the dead-letter sink still failing: releasing those records (neither accepted nor rejected); the broker delivers them again, and archives any at its delivery limit"
            );
        }
        for (key, lost) in unfinished {
            if lost {
                self.forget(key);
            } else {
                self.summary.released_on_shutdown += 1;
                self.release_for(key, "released_on_shutdown");
            }
        }
        for (key, lost) in undelivered {
            if lost {
                self.forget(key);
            } else {
                self.summary.dlq_released_on_shutdown += 1;
                self.release_for(key, "dlq_released_on_shutdown");
            }
        }
        true
    }

    pub(super) fn is_done(&self, now: Instant) -> bool {
        let Some(stopping) = &self.stopping else {
            return false;
        };
        if self.fetch.is_some() {
            return false;
        }
        self.slots.held() == 0
            || (stopping.grace_expired && now >= stopping.grace_deadline + FLUSH_TIMEOUT)
    }
}
