//! Fleet-wide pauses from the control topic: a route paused there is paused at the source (its
//! topic and its delay topic) on top of the pauses the dispatcher makes itself.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;
use std::time::SystemTime;

use tower::Service;

use crate::control::Controls;
use crate::control::JOB_ID;
use crate::runtime::lifecycle::Phase;
use crate::source::Delivery;
use crate::source::ShareSource;
use crate::{Job, Outcome};

use super::Dispatcher;

/// The controls a dispatcher follows, and what it made of them.
pub(super) struct Control {
    controls: Option<Controls>,
    /// Wakes the loop when the controls change.
    wake: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// Which routes the controls pause now.
    paused: Vec<bool>,
    /// Which routes' topics are paused at the source (full, or paused by the controls).
    told: Vec<bool>,
    /// When the controls are looked at again without a change: the end of the next timed pause
    /// (at the start, at once).
    next_look: Option<SystemTime>,
}

impl Control {
    pub(super) fn new(controls: Option<Controls>, routes: usize) -> Self {
        Self {
            next_look: controls.as_ref().map(|_| SystemTime::UNIX_EPOCH),
            wake: controls.as_ref().map(Controls::next_change),
            controls,
            paused: vec![false; routes],
            told: vec![false; routes],
        }
    }

    /// Whether the controls pause route `route` now.
    pub(super) fn pauses(&self, route: usize) -> bool {
        self.paused.get(route).copied().unwrap_or(false)
    }
}

impl<S, Svc> Dispatcher<'_, S, Svc>
where
    S: ShareSource,
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
    Svc::Future: Send + 'static,
{
    /// Follows the controls: on a change, or when a timed pause ends, pauses and resumes the
    /// routes they name. Returns whether a route changed.
    pub(super) fn follow_controls(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(controls) = self.control.controls.as_mut() else {
            return false;
        };
        while let Some(wake) = self.control.wake.as_mut()
            && wake.as_mut().poll(cx).is_ready()
        {
            self.control.wake = Some(controls.next_change());
        }
        let changed = controls.changed();
        let wall = SystemTime::now();
        let due = self.control.next_look.is_some_and(|at| wall >= at);
        if changed.is_none() && !due {
            return false;
        }
        let state = changed.unwrap_or_else(|| controls.state());
        self.control.next_look = state.next_expiry(wall);
        // Running jobs cancelled since they started: their cancellation tokens fire.
        for (_, job) in self.slots.iter_mut() {
            if let Some(id) = &job.job_id
                && job.life.phase == Phase::Running
                && !job.cancel.is_cancelled()
                && state.cancelled(id, wall).is_some()
            {
                tracing::info!(
                    parent: &job.span,
                    record = %job.id,
                    job_id = %id,
                    "job cancelled while running: its cancellation token fires"
                );
                job.cancel.cancel();
            }
        }
        let mut moved = false;
        for route in 0..self.routes.len() {
            let Some(topic) = self.routes.topic(route).cloned() else {
                continue;
            };
            let pause = state.paused(&topic, wall);
            if pause.is_some() == self.control.pauses(route) {
                continue;
            }
            self.control.paused[route] = pause.is_some();
            match pause {
                Some(pause) => tracing::info!(
                    topic = &*topic,
                    reason = %pause.reason,
                    by = %pause.by,
                    until = %pause.until_text(),
                    "route paused fleet-wide: no more fetches of its records"
                ),
                None => tracing::info!(topic = &*topic, "route resumed fleet-wide"),
            }
            self.observer.metrics.route_paused(&topic, pause.is_some());
            self.sync_route_pause(route);
            self.sync_delay_pause(route);
            moved = true;
        }
        moved
    }

    /// The id of the job the record in slot `key` carries (`share.job-id`) when a cancellation of
    /// it is in force; a record with a valid job id keeps it in its slot, for a cancellation that
    /// arrives while it runs. A header that is no valid job id is no job id.
    pub(super) fn cancellation(
        &mut self,
        key: crate::runtime::slots::SlotKey,
        delivery: &Delivery,
    ) -> Option<Arc<str>> {
        let controls = self.control.controls.as_ref()?;
        let id = delivery
            .headers
            .iter()
            .rev()
            .find(|header| &*header.key == JOB_ID)
            .and_then(|header| header.value.as_deref())
            .and_then(|value| std::str::from_utf8(value).ok())
            .filter(|id| crate::checks::job_id(id).is_ok())?;
        let id: Arc<str> = id.into();
        if controls.state().cancelled(&id, SystemTime::now()).is_some() {
            return Some(id);
        }
        if let Some(job) = self.slots.get_mut(key) {
            job.job_id = Some(id);
        }
        None
    }

    /// Pauses or resumes route `route`'s topic at the source: paused while the route holds its
    /// full share of the slots, or while the controls pause it.
    pub(super) fn sync_route_pause(&mut self, route: usize) {
        let paused = self.routes.is_full(route) || self.control.pauses(route);
        let (Some(topic), Some(told)) = (
            self.routes.topic(route).cloned(),
            self.control.told.get_mut(route),
        ) else {
            return;
        };
        if *told != paused {
            *told = paused;
            self.source.pause(&topic, paused);
        }
    }
}
