//! The routes' circuit breakers and cool-downs: what a handler's outcome does to its route for
//! the whole fleet (see [`Breaker`](crate::runtime::Breaker)). A breaker that trips, a probe that
//! decides and a cool-down are commands on the control topic, applied here at once and written
//! for the other workers; a write that fails leaves this worker obeying it alone, and says so.
//!
//! A worker whose window holds too few calls to judge a failure that would dead-letter its
//! record (an outage spread over a fleet larger than its records: each worker holds one or two)
//! writes its window as a tally on the control topic and waits [`VERDICT_WAIT`]; it then judges
//! on its window plus every other worker's tally, so the fleet's evidence opens the breaker
//! before any record of the outage is dead-lettered.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tower::Service;

use crate::control::{Pause, Probe, Tally, Written};
use crate::runtime::PROBE_CALLS;
use crate::runtime::breaker::{Breaker, Window};
use crate::source::ShareSource;
use crate::{Job, Outcome};

use super::super::routes::Routes;
use super::super::slots::SlotKey;
use super::Dispatcher;
use super::control::Gate;

/// The shortest `retry_after` that cools a route down for the fleet: shorter ones are cheaper
/// to find out worker by worker than to write.
const MIN_COOL_DOWN: Duration = Duration::from_secs(1);

/// How long a failure that would dead-letter its record waits, once, when its route's breaker
/// has too few calls to judge it: the failures of the calls still in flight land meanwhile. A
/// worker that joins an outage late gets records whose earlier attempts failed on other workers,
/// and its first calls would otherwise dead-letter them before its window could open the breaker.
pub(super) const VERDICT_WAIT: Duration = Duration::from_secs(1);

/// Each route's breaker and cool-down, and this worker's id as a prober.
#[derive(Debug)]
pub(super) struct Breakers {
    /// This worker's id in the breaker's commands: random per worker.
    me: Arc<str>,
    routes: Vec<RouteBreaker>,
}

#[derive(Debug)]
struct RouteBreaker {
    breaker: Option<(Breaker, Window)>,
    /// When the window last started afresh: the fleet's tallies from before do not count.
    since: SystemTime,
    cool_down: bool,
    /// While this worker probes: probes started, ended and failed.
    probes: (u32, u32, u32),
}

impl Breakers {
    pub(super) fn new<Svc>(routes: &Routes<Svc>, now: Instant) -> Self {
        Self {
            me: uuid::Uuid::new_v4().simple().to_string().into(),
            routes: (0..routes.len())
                .map(|route| {
                    let limits = routes.limits(route);
                    RouteBreaker {
                        breaker: limits
                            .breaker
                            .map(|breaker| (breaker, Window::new(breaker.window, now))),
                        since: SystemTime::UNIX_EPOCH,
                        cool_down: limits.cool_down,
                        probes: (0, 0, 0),
                    }
                })
                .collect(),
        }
    }

    /// This worker's id as a prober.
    pub(super) fn me(&self) -> &str {
        &self.me
    }

    /// A route's gate changed: a breaker forgets the calls before a pause, and a probe starts
    /// counting afresh.
    pub(super) fn gate_changed(&mut self, route: usize, gate: Gate, now: Instant) {
        let Some(state) = self.routes.get_mut(route) else {
            return;
        };
        state.probes = (0, 0, 0);
        if let (Gate::Paused { .. }, Some((_, window))) = (gate, &mut state.breaker) {
            window.clear(now);
            state.since = SystemTime::now();
        }
    }

    /// Whether route `route` keeps a copy of each record while it runs: one with a breaker or a
    /// cool-down, whose records run again when they fail while it is paused.
    pub(super) fn keeps_copies(&self, route: usize) -> bool {
        self.routes
            .get(route)
            .is_some_and(|state| state.breaker.is_some() || state.cool_down)
    }

    /// Whether another probe may start on route `route`.
    pub(super) fn probe_room(&self, route: usize) -> bool {
        self.routes
            .get(route)
            .is_some_and(|state| state.probes.0 < PROBE_CALLS)
    }

    /// Whether another probe may start on route `route`; counts it if so.
    pub(super) fn take_probe(&mut self, route: usize) -> bool {
        let Some(state) = self.routes.get_mut(route) else {
            return false;
        };
        if state.probes.0 >= PROBE_CALLS {
            return false;
        }
        state.probes.0 += 1;
        true
    }
}

/// What one outcome decided for its route.
enum Decision {
    /// Nothing changes.
    Nothing,
    /// Pause the route for the fleet.
    Pause(Pause),
    /// The probes passed: resume it.
    Close { reason: String },
}

impl<S, Svc> Dispatcher<'_, S, Svc>
where
    S: ShareSource,
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
    Svc::Future: Send + 'static,
{
    /// Whether the record in slot `key`, whose handler just failed (counted by
    /// [`judge_outcome`](Self::judge_outcome)) and would be dead-lettered, waits [`VERDICT_WAIT`]
    /// for its route's breaker instead: its window and the fleet's tallies hold too few calls to
    /// judge, and the record has not waited for a verdict before (a poison record is
    /// dead-lettered one wait later). A record that waits tells the fleet this worker's window.
    pub(super) fn awaits_verdict(&mut self, key: SlotKey, now: Instant) -> bool {
        let last_attempt = self.paths.policy.last_attempt();
        let Some((route, attempt, waited)) = self.slots.get(key).and_then(|job| {
            job.route
                .map(|r| (r, job.life.attempt, job.awaited_verdict))
        }) else {
            return false;
        };
        if waited || attempt < last_attempt {
            return false;
        }
        let fleet = self.fleet_failures(route);
        let Some(RouteBreaker {
            breaker: Some((breaker, window)),
            ..
        }) = self.control.breakers.routes.get_mut(route)
        else {
            return false;
        };
        let (calls, failed) = window.totals(now);
        let (breaker, wall) = (*breaker, SystemTime::now());
        if breaker.judges_early(calls.saturating_add(fleet.0)) {
            return false;
        }
        if let (Some(controls), Some(topic)) = (&self.control.controls, self.routes.topic(route)) {
            let tally = Tally {
                topic: topic.to_string(),
                worker: self.control.breakers.me.to_string(),
                calls,
                failed,
                at: wall,
                until: wall + breaker.window.min(crate::control::command::MAX_TALLY_SPAN),
            };
            send(topic, "breaker tally", controls.publish_tally(&tally));
        }
        true
    }

    /// The calls and failures of route `route` that the other workers' tallies count now.
    fn fleet_failures(&self, route: usize) -> (u32, u32) {
        let (Some(controls), Some(topic), Some(state)) = (
            &self.control.controls,
            self.routes.topic(route),
            self.control.breakers.routes.get(route),
        ) else {
            return (0, 0);
        };
        controls.state().fleet_failures(
            topic,
            &self.control.breakers.me,
            state.since,
            SystemTime::now(),
        )
    }

    /// Counts the outcome of the record in slot `key` for its route's breaker or cool-down, and
    /// pauses or resumes the route for the fleet when that decides it. Returns the route's gate
    /// after it.
    pub(super) fn judge_outcome(&mut self, key: SlotKey, outcome: &Outcome, now: Instant) -> Gate {
        let Some((route, probe, attempt)) = self
            .slots
            .get(key)
            .and_then(|job| job.route.map(|route| (route, job.probe, job.life.attempt)))
        else {
            return Gate::Running;
        };
        let gate = self.control.gate(route);
        // A route with neither a breaker nor a cool-down has nothing to count: the common case,
        // on every record, costs one lookup.
        if !self.control.breakers.keeps_copies(route) {
            return gate;
        }
        let failed = matches!(outcome, Outcome::Retry { .. });
        // Its last attempt: failing, it would be dead-lettered.
        let last = failed && attempt >= self.paths.policy.last_attempt();
        let wall = SystemTime::now();
        let me = self.control.breakers.me.clone();
        let Some(topic) = self.routes.topic(route).cloned() else {
            return gate;
        };
        let longest_wait = self.paths.policy.longest_wait();
        let active = self.routes.active(route);
        // Only a failure that would dead-letter its record is judged on the fleet's evidence too.
        let fleet = if last {
            self.fleet_failures(route)
        } else {
            (0, 0)
        };
        let Some(state) = self.control.breakers.routes.get_mut(route) else {
            return gate;
        };
        let decision = match (gate, &mut state.breaker) {
            (Gate::Probing { .. }, Some((breaker, _))) if probe => {
                let (started, ended, failures) = &mut state.probes;
                *ended += 1;
                *failures += u32::from(failed);
                // A worker that holds fewer records than PROBE_CALLS (a low concurrency, a quiet
                // route) judges on every record it holds once each has been probed: its failed
                // probes wait out the half-open window, and a pause that lapsed unjudged would let
                // their last attempts fail on an empty window and dead-letter them.
                let all_probed = *ended == *started && *started as usize >= active;
                if *ended < PROBE_CALLS && !all_probed {
                    Decision::Nothing
                } else if breaker.probes_fail(*ended, *failures) {
                    Decision::Pause(breaker_pause(
                        &topic,
                        breaker,
                        &me,
                        wall,
                        format!("circuit breaker: {failures} of {ended} probes failed"),
                    ))
                } else {
                    Decision::Close {
                        reason: format!(
                            "circuit breaker closed: {failures} of {ended} probes failed"
                        ),
                    }
                }
            }
            (Gate::Running, Some((breaker, window))) => {
                window.record(failed, now);
                let (calls, failures) = window.totals(now);
                let (fleet_calls, fleet_failures) = (
                    calls.saturating_add(fleet.0),
                    failures.saturating_add(fleet.1),
                );
                let alone = breaker.trips(calls, failures);
                if alone || (last && breaker.trips_early(fleet_calls, fleet_failures)) {
                    let (calls, failures, whose) = if alone {
                        (calls, failures, "")
                    } else {
                        (fleet_calls, fleet_failures, " across the fleet")
                    };
                    Decision::Pause(breaker_pause(
                        &topic,
                        breaker,
                        &me,
                        wall,
                        format!(
                            "circuit breaker: {failures} of {calls} calls failed{whose} within {}",
                            humantime::format_duration(breaker.window)
                        ),
                    ))
                } else {
                    Decision::Nothing
                }
            }
            _ => Decision::Nothing,
        };
        let decision = match (decision, outcome) {
            (
                Decision::Nothing,
                Outcome::Retry {
                    after: Some(after),
                    reason,
                },
            ) if state.cool_down && gate == Gate::Running && *after >= MIN_COOL_DOWN => {
                let after = (*after).min(longest_wait);
                Decision::Pause(Pause {
                    topic: topic.to_string(),
                    until: wall.checked_add(after),
                    reason: format!(
                        "cool-down: a handler asked to retry after {} ({})",
                        humantime::format_duration(after),
                        reason.chars().take(120).collect::<String>()
                    ),
                    by: format!("cool-down@{me}"),
                    at: wall,
                    probe: None,
                })
            }
            (decision, _) => decision,
        };
        let Some(controls) = self.control.controls.clone() else {
            return gate;
        };
        match decision {
            Decision::Nothing => gate,
            Decision::Pause(pause) => {
                tracing::warn!(
                    topic = &*topic,
                    reason = %pause.reason,
                    until = %pause.until_text(),
                    "pausing the route for the whole fleet"
                );
                let mine = pause.probe.is_some();
                let gate = Gate::Paused {
                    ends: if mine { pause.until } else { pause.ends() },
                };
                send(&topic, "pause", controls.publish_pause(pause));
                self.set_gate(route, gate, now);
                gate
            }
            Decision::Close { reason } => {
                tracing::info!(topic = &*topic, reason = %reason, "resuming the route for the whole fleet");
                send(
                    &topic,
                    "resume",
                    controls.publish_resume(&topic, &reason, &format!("breaker@{me}")),
                );
                self.set_gate(route, Gate::Running, now);
                Gate::Running
            }
        }
    }
}

/// The pause a breaker writes: open for `open_for` from `wall`, then probed by `me` for as long
/// again.
fn breaker_pause(
    topic: &str,
    breaker: &Breaker,
    me: &str,
    wall: SystemTime,
    reason: String,
) -> Pause {
    let until = wall.checked_add(breaker.open_for).unwrap_or(wall);
    Pause {
        topic: topic.to_owned(),
        until: Some(until),
        reason,
        by: format!("breaker@{me}"),
        at: wall,
        probe: Some(Probe {
            worker: me.to_owned(),
            until: until.checked_add(breaker.open_for).unwrap_or(until),
        }),
    }
}

/// Writes a command in the background; a failed write is logged (this worker obeys it anyway).
fn send(topic: &str, what: &'static str, written: Option<Written>) {
    let Some(written) = written else {
        return;
    };
    let topic = topic.to_owned();
    tokio::spawn(async move {
        if let Err(why) = written.await {
            tracing::error!(
                topic = %topic,
                why,
                "the {what} could not be written to the control topic: only this worker obeys it"
            );
        }
    });
}
