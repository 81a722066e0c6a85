//! Lock renewals, and the watchdog over the loop's own lateness.

use std::convert::Infallible;
use std::time::Duration;

use tokio::time::Instant;
use tower::Service;

use crate::source::{AckError, ShareSource};
use crate::{Job, Outcome};

use super::super::health::TICK;
use super::super::lifecycle::Event;
use super::super::receipt::SlotReceipt;
use super::super::slots::SlotKey;
use super::Dispatcher;

/// The loop counts as stalled when it runs this late, at least.
const MIN_STALL: Duration = Duration::from_millis(500);

impl<S, Svc> Dispatcher<'_, S, Svc>
where
    S: ShareSource,
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
    Svc::Future: Send + 'static,
{
    /// Issues every renewal due by `now` together, and schedules the next ones.
    pub(super) fn renew_due(&mut self, now: Instant) -> bool {
        if self.tasks.renewals.next_due().is_none_or(|at| at > now) {
            return false;
        }
        let mut due = std::mem::take(&mut self.pace.due);
        self.tasks.renewals.take_due(now, &mut due);
        for (at, key) in due.drain(..) {
            let Some(job) = self.slots.get_mut(key) else {
                continue;
            };
            if job.next_renewal != Some(at) {
                continue;
            }
            job.next_renewal = None;
            let (Some(every), true) = (job.renew_every, job.life.renewable()) else {
                continue;
            };
            let receipt = self.source.renew(&job.id);
            self.tasks.renewing.push(SlotReceipt::new(key, receipt));
            self.observer.renewal_sent(&job.id.topic);
            let mut next = at + every;
            if next <= now {
                next = now + every;
            }
            job.next_renewal = Some(next);
            self.tasks.renewals.schedule(key, next);
        }
        self.pace.due = due;
        true
    }

    /// A renewal was answered.
    pub(super) fn on_renewed(&mut self, key: SlotKey, result: Result<(), AckError>, now: Instant) {
        if let Err(err) = result {
            self.step(key, Event::RenewalFailed(&err), Duration::ZERO, now);
        }
    }

    /// Stops renewing the record in slot `key`.
    pub(super) fn unschedule(&mut self, key: SlotKey) {
        if let Some(job) = self.slots.get_mut(key)
            && let Some(at) = job.next_renewal.take()
        {
            self.tasks.renewals.cancel(key, at);
        }
    }

    /// The watchdog: the loop wakes at least once a [`TICK`]; when the gap since its last pass is
    /// longer than that by more than a quarter of the shortest lock (at least [`MIN_STALL`]),
    /// something kept it from running — every runtime thread busy or blocked, most likely by
    /// handlers that block their threads. Logged once per stall, counted, and shown in the
    /// worker's health; the pass that follows sends the due renewals first.
    pub(super) fn watch_lateness(&mut self, now: Instant) {
        let gap = now.saturating_duration_since(self.pace.last_pass);
        self.pace.last_pass = now;
        let late = gap.saturating_sub(TICK);
        let allowed = (self.pace.shortest_lock / 4).max(MIN_STALL);
        if late <= allowed {
            return;
        }
        self.observer.dispatcher_stalled(late);
        self.health.stalled(late);
        tracing::warn!(
            late = ?late,
            "the worker's dispatcher ran late (every runtime thread busy or blocked?): renewals go first now; move blocking work to spawn_blocking"
        );
    }
}
