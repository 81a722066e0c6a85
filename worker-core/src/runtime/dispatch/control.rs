//! Fleet-wide pauses from the control topic: a route paused there is paused at the source (its
//! topic and its delay topic) on top of the pauses the dispatcher makes itself, and starts none
//! of the records it already holds until the pause ends (they wait, their locks renewed).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tower::Service;

use crate::control::Controls;
use crate::control::JOB_ID;
use crate::runtime::lifecycle::{Event, LimitKind, Phase};
use crate::source::Delivery;
use crate::source::ShareSource;
use crate::{Job, Outcome};

use super::super::slots::SlotKey;
use super::Dispatcher;
use super::breakers::Breakers;

/// The longest a record waits for a pause before it is looked at again (a pause with no end is
/// ended by a command, which wakes its records at once).
const PAUSE_RECHECK: Duration = Duration::from_secs(60);

/// Whether a route's records may start, as the controls say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gate {
    /// Not paused.
    Running,
    /// Paused until `ends` (`None`: until a resume): nothing fetched, nothing started.
    Paused { ends: Option<SystemTime> },
    /// This worker probes the route for its circuit breaker until `ends`: fetched again, and a
    /// few records start.
    Probing { ends: SystemTime },
}

/// The controls a dispatcher follows, and what it made of them.
pub(super) struct Control {
    pub(super) controls: Option<Controls>,
    /// Wakes the loop when the controls change.
    wake: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// What the controls say of each route now.
    gates: Vec<Gate>,
    /// Which routes' topics are paused at the source (full, or paused by the controls).
    told: Vec<bool>,
    /// When the controls are looked at again without a change: the end of the next timed pause
    /// (at the start, at once).
    next_look: Option<SystemTime>,
    /// The routes' circuit breakers and cool-downs.
    pub(super) breakers: Breakers,
}

impl Control {
    pub(super) fn new(controls: Option<Controls>, breakers: Breakers, routes: usize) -> Self {
        Self {
            next_look: controls.as_ref().map(|_| SystemTime::UNIX_EPOCH),
            wake: controls.as_ref().map(Controls::next_change),
            controls,
            gates: vec![Gate::Running; routes],
            told: vec![false; routes],
            breakers,
        }
    }

    /// What the controls say of route `route` now.
    pub(super) fn gate(&self, route: usize) -> Gate {
        self.gates.get(route).copied().unwrap_or(Gate::Running)
    }

    /// Whether the controls pause route `route` at the source now.
    pub(super) fn pauses(&self, route: usize) -> bool {
        matches!(self.gate(route), Gate::Paused { .. })
    }

    /// How long a record of a route with gate `gate` waits before it is looked at again.
    pub(super) fn pause_wait(gate: Gate, wall: SystemTime) -> Duration {
        let ends = match gate {
            Gate::Running => return Duration::ZERO,
            Gate::Paused { ends } => ends,
            Gate::Probing { ends } => Some(ends),
        };
        ends.map_or(PAUSE_RECHECK, |ends| {
            ends.duration_since(wall)
                .unwrap_or_default()
                .min(PAUSE_RECHECK)
        })
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
            let gate = match state.paused(&topic, wall) {
                None => Gate::Running,
                Some(pause) if pause.probing(self.control.breakers.me(), wall) => Gate::Probing {
                    ends: pause.ends().unwrap_or(wall),
                },
                Some(pause) => {
                    let mine = pause
                        .probe
                        .as_ref()
                        .is_some_and(|p| p.worker == self.control.breakers.me());
                    Gate::Paused {
                        ends: if mine { pause.until } else { pause.ends() },
                    }
                }
            };
            if self.set_gate(route, gate, Instant::now()) {
                match (gate, state.paused(&topic, wall)) {
                    (Gate::Paused { .. }, Some(pause)) => tracing::info!(
                        topic = &*topic,
                        reason = %pause.reason,
                        by = %pause.by,
                        until = %pause.until_text(),
                        "route paused fleet-wide: no more fetches of its records, and none started"
                    ),
                    (Gate::Probing { .. }, _) => tracing::info!(
                        topic = &*topic,
                        probes = crate::runtime::PROBE_CALLS,
                        "circuit breaker half-open: this worker probes the route"
                    ),
                    _ => tracing::info!(topic = &*topic, "route resumed fleet-wide"),
                }
                moved = true;
            }
        }
        moved
    }

    /// Sets route `route`'s gate; `true` if it changed. A route paused is paused at the source;
    /// when it may run again (or probe), the records that wait for it are looked at at once.
    pub(super) fn set_gate(&mut self, route: usize, gate: Gate, now: Instant) -> bool {
        let Some(was) = self.control.gates.get_mut(route) else {
            return false;
        };
        if *was == gate {
            return false;
        }
        let paused_before = matches!(*was, Gate::Paused { .. });
        *was = gate;
        let paused = matches!(gate, Gate::Paused { .. });
        self.control.breakers.gate_changed(route, gate, now);
        if let Some(topic) = self.routes.topic(route).cloned() {
            self.observer
                .metrics
                .route_paused(&topic, gate != Gate::Running);
        }
        if paused != paused_before {
            if self.routes.set_blocked(route, paused) {
                self.sync_route_pauses();
            }
            self.sync_route_pause(route);
            self.sync_delay_pause(route);
        }
        if gate != Gate::Running {
            self.stop_queued(route, gate, now);
        }
        if !paused {
            self.wake_paused(route, now);
        }
        true
    }

    /// Takes the records of route `route` that wait in its queue (admitted before the route was
    /// paused, or fetched ahead) out of it: they wait for the pause like a record that arrives
    /// during it, so none starts inside the pause. When the route probes, they are admitted again
    /// at once and only those that take a probe start.
    fn stop_queued(&mut self, route: usize, gate: Gate, now: Instant) {
        let wait = Control::pause_wait(gate, SystemTime::now());
        for (key, delivery) in self.routes.take_queue(route) {
            let Some(job) = self.slots.get_mut(key) else {
                continue;
            };
            job.throttle = Some(LimitKind::Paused);
            job.probe = false;
            self.step_with(
                key,
                Event::RoutePaused { wait },
                Duration::ZERO,
                Some(delivery),
                now,
            );
        }
    }

    /// Looks again at once at the records of route `route` that wait for its pause.
    fn wake_paused(&mut self, route: usize, now: Instant) {
        let waiting: Vec<SlotKey> = self
            .slots
            .iter_mut()
            .filter(|(_, job)| {
                job.route == Some(route)
                    && job.throttle == Some(LimitKind::Paused)
                    && matches!(job.life.phase, Phase::Throttled { .. })
            })
            .map(|(key, _)| key)
            .collect();
        for key in waiting {
            if let Some(job) = self.slots.get_mut(key) {
                job.life.rewait(now);
                self.waits.throttled.schedule(key, now);
            }
        }
    }

    /// The id of the job the record in slot `key` carries (`share.job-id`) when a cancellation of
    /// it is in force; a record with a valid job id keeps it in its slot, for a cancellation that
    /// arrives while it runs. A header that is no valid job id is no job id.
    pub(super) fn cancellation(&mut self, key: SlotKey, delivery: &Delivery) -> Option<Arc<str>> {
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
    /// full share of the slots, while the next fetch leaves it out (lanes), or while the
    /// controls pause it.
    pub(super) fn sync_route_pause(&mut self, route: usize) {
        let paused = self.routes.is_full(route)
            || self.routes.is_skipped(route)
            || self.control.pauses(route);
        let (Some(topic), Some(told)) = (
            self.routes.topic(route).cloned(),
            self.control.told.get_mut(route),
        ) else {
            return;
        };
        if *told != paused {
            *told = paused;
            self.source.pause(&topic, paused);
            tracing::debug!(
                topic = &*topic,
                paused,
                share = self.routes.share(route),
                held = self.routes.active(route),
                "route's topic paused or resumed at the source"
            );
        }
    }
}
