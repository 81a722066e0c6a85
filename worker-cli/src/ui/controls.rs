//! The routes on the overview, with their fleet-wide pause (from the group's control topic, with
//! `[control]`), and the pause and resume actions: the same commands as `share-worker pause` and
//! `resume`, behind the token, CSRF and same-origin checks of every action, each with an audit
//! line.

use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, SystemTime};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use worker_core::control::{ControlTopic, Controls, Pause};

use super::Dashboard;
use super::action::ActionForm;
use super::guard::Refusal;
use super::jobs::AUDIT;
use super::pages::{self, Chrome, Tab};
use super::params::Params;
use super::routes::Shared;
use crate::config::Config;
use crate::telemetry::Client;

/// How long the dashboard waits before it tries the control topic again after a failed read.
const RETRY: Duration = Duration::from_secs(5);
/// The longest reason a dashboard command takes (the control topic's own bound).
pub(super) const MAX_REASON: usize = 256;

/// The group's control topic as the dashboard sees it.
#[derive(Debug)]
pub(crate) struct RouteControls {
    /// Where pauses are written; `None` without `[control]`.
    topic: Option<ControlTopic>,
    /// The controls in force, once the topic was read.
    followed: Arc<OnceLock<Controls>>,
}

impl RouteControls {
    /// Where commands are written; `None` without `[control]`.
    pub(super) fn topic(&self) -> Option<&ControlTopic> {
        self.topic.as_ref()
    }

    /// With `[control]`, starts reading the control topic in the background (again every few
    /// seconds until it can be read; until then the routes show no pause state).
    pub(crate) fn start(config: &Config) -> anyhow::Result<Self> {
        let followed = Arc::new(OnceLock::new());
        let Some(section) = &config.control else {
            return Ok(Self {
                topic: None,
                followed,
            });
        };
        let topic = config.control_topic()?;
        tokio::spawn(follow(
            topic.clone(),
            section.read_timeout,
            Arc::downgrade(&followed),
        ));
        Ok(Self {
            topic: Some(topic),
            followed,
        })
    }
}

/// Follows `topic` into `slot` while the dashboard lives.
async fn follow(topic: ControlTopic, timeout: Duration, slot: Weak<OnceLock<Controls>>) {
    loop {
        match topic.follow(timeout).await {
            Ok(controls) => {
                if let Some(slot) = slot.upgrade() {
                    let _ = slot.set(controls);
                }
                return;
            }
            Err(err) => {
                tracing::warn!(error = %err, "the dashboard cannot read the control topic yet")
            }
        }
        tokio::time::sleep(RETRY).await;
        if slot.strong_count() == 0 {
            return;
        }
    }
}

/// The routes section of the overview.
pub(crate) fn section(dashboard: &Dashboard) -> Markup {
    html! {
        h2 { "Routes" }
        div #routes data-refresh="/ui/live/routes" data-every=(dashboard.chrome().every_ms) {
            (table(dashboard))
        }
    }
}

/// Every route, paused or running, with its action.
fn table(dashboard: &Dashboard) -> Markup {
    let chrome = dashboard.chrome();
    let controls = &dashboard.controls;
    let state = controls.followed.get().map(Controls::state);
    let now = SystemTime::now();
    html! {
        @if controls.topic.is_none() {
            p.muted { "No [control] table: routes cannot be paused fleet-wide." }
        } @else if state.is_none() {
            p.muted { "Reading the control topic…" }
        }
        table #route-states {
            thead { tr { th { "topic" } th { "state" } @if chrome.actions && state.is_some() { th {} } } }
            tbody {
                @for topic in dashboard.config.topics() {
                    @let pause = state.as_ref().and_then(|s| s.paused(topic, now));
                    tr data-topic=(topic) {
                        td { code { (topic) } }
                        td.state {
                            // Until the control topic is read, nobody knows: not "running".
                            @match (&state, pause) {
                                (None, _) if controls.topic.is_some() => { "unknown" }
                                (None, _) => { "running" }
                                (Some(_), Some(pause)) => { (paused_text(pause)) }
                                (Some(_), None) => { "running" }
                            }
                        }
                        @if chrome.actions && state.is_some() {
                            td {
                                @if pause.is_some() {
                                    form method="post" action={"/ui/routes/" (topic) "/resume"} {
                                        input type="hidden" name="csrf" value=(dashboard.guard.csrf());
                                        button.resume type="submit" { "Resume" }
                                    }
                                } @else {
                                    a.pause href={"/ui/routes/" (topic) "/pause"} { "Pause…" }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(state) = &state {
            p #cancellations {
                (state.cancellations(now)) " job cancellations in force"
                @if chrome.actions { " · " a.cancel-job href="/ui/cancel" { "Cancel a job…" } }
            }
        }
    }
}

fn paused_text(pause: &Pause) -> String {
    format!(
        "paused {}: {} (by {})",
        pause.until_text(),
        pause.reason,
        pause.by
    )
}

/// `GET /ui/live/routes`.
pub(crate) async fn live(State(dashboard): Shared) -> Markup {
    table(&dashboard)
}

/// `GET /ui/routes/{topic}/pause`: the confirmation, with the reason and how long.
pub(crate) async fn confirm(State(dashboard): Shared, Path(topic): Path<String>) -> Response {
    if let Err(why) = actionable(&dashboard, &topic) {
        return refused(&dashboard, &topic, why);
    }
    let chrome = dashboard.chrome();
    page(&chrome, &topic, dashboard.guard.csrf()).into_response()
}

fn page(chrome: &Chrome<'_>, topic: &str, csrf: &str) -> Markup {
    pages::layout(
        chrome,
        Tab::Overview,
        "Pause a route?",
        html! {
            h1 { "Pause " code { (topic) } " for the whole group?" }
            div.card {
                p.muted { "No worker of the group fetches this route's records until it is resumed (or the time below ends). Running handlers finish; nothing is released. The same as `share-worker pause`." }
                form method="post" action={"/ui/routes/" (topic) "/pause"} {
                    input type="hidden" name="csrf" value=(csrf);
                    label { "reason " input #reason type="text" name="reason" maxlength=(MAX_REASON) required; }
                    label { "for (e.g. 10m; empty: until resumed) " input #for type="text" name="for"; }
                    div.actions {
                        button #confirm type="submit" class="danger" { "Pause" }
                        a href="/ui" { "cancel" }
                    }
                }
            }
        },
    )
}

/// `POST /ui/routes/{topic}/pause`.
pub(crate) async fn pause(
    State(dashboard): Shared,
    Path(topic): Path<String>,
    ActionForm { params, client }: ActionForm,
) -> Response {
    let control = match actionable(&dashboard, &topic) {
        Ok(control) => control,
        Err(why) => return refused(&dashboard, &topic, why),
    };
    let fields = reason_field(&params).and_then(|reason| Ok((reason, for_field(&params)?)));
    let (reason, duration) = match fields {
        Ok(fields) => fields,
        Err(why) => return dashboard.page(StatusCode::BAD_REQUEST, "Not paused", &why),
    };
    let by = who(client.as_ref());
    let written = match duration {
        Some(duration) => control.pause_for(&topic, duration, &reason, &by).await,
        None => control.pause(&topic, None, &reason, &by).await,
    };
    finish(&dashboard, "pause", &topic, &reason, &by, written.map(drop))
}

/// `POST /ui/routes/{topic}/resume`.
pub(crate) async fn resume(
    State(dashboard): Shared,
    Path(topic): Path<String>,
    ActionForm { client, .. }: ActionForm,
) -> Response {
    let control = match actionable(&dashboard, &topic) {
        Ok(control) => control,
        Err(why) => return refused(&dashboard, &topic, why),
    };
    let by = who(client.as_ref());
    let written = control.resume(&topic, "", &by).await;
    finish(&dashboard, "resume", &topic, "", &by, written)
}

/// Why a route action cannot be done.
#[derive(Clone, Copy, Debug)]
enum NotActionable {
    ActionsOff,
    NotARoute,
    NoControlTopic,
}

/// The control topic, when actions are allowed, `[control]` is configured and `topic` is a
/// route.
fn actionable<'a>(
    dashboard: &'a Dashboard,
    topic: &str,
) -> Result<&'a ControlTopic, NotActionable> {
    if !dashboard.guard.actions_allowed() {
        return Err(NotActionable::ActionsOff);
    }
    if !dashboard.config.topics().any(|t| t == topic) {
        return Err(NotActionable::NotARoute);
    }
    dashboard
        .controls
        .topic
        .as_ref()
        .ok_or(NotActionable::NoControlTopic)
}

/// The page that says why `topic` cannot be paused or resumed.
fn refused(dashboard: &Dashboard, topic: &str, why: NotActionable) -> Response {
    match why {
        NotActionable::ActionsOff => dashboard.refused(Refusal::ActionsOff),
        NotActionable::NotARoute => dashboard.page(
            StatusCode::NOT_FOUND,
            "Not found",
            &format!("{topic} is not a route of this group"),
        ),
        NotActionable::NoControlTopic => dashboard.page(
            StatusCode::CONFLICT,
            "No control topic",
            "this dashboard's configuration has no [control] table",
        ),
    }
}

/// The audit line of a pause or resume, and where the browser goes next.
fn finish(
    dashboard: &Dashboard,
    action: &str,
    topic: &str,
    reason: &str,
    by: &str,
    written: worker_core::Result<()>,
) -> Response {
    match written {
        Ok(()) => {
            tracing::info!(target: AUDIT, action, topic = ?topic, reason = ?reason, client = ?by, "dashboard route action done");
            Redirect::to("/ui").into_response()
        }
        Err(err) => {
            tracing::warn!(target: AUDIT, action, topic = ?topic, reason = ?reason, client = ?by, error = %err, "dashboard route action failed");
            dashboard.page(StatusCode::BAD_GATEWAY, "Not done", &err.to_string())
        }
    }
}

/// The form's `reason`: 1 to [`MAX_REASON`] characters (the control topic's own bound).
pub(super) fn reason_field(params: &Params) -> Result<String, String> {
    let reason = params.get("reason").trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON {
        return Err(format!(
            "a reason of 1 to {MAX_REASON} characters is needed"
        ));
    }
    Ok(reason.to_owned())
}

/// The form's `for`: a duration above 0 (`10m`), or `None` when empty.
pub(super) fn for_field(params: &Params) -> Result<Option<Duration>, String> {
    match params.get("for").trim() {
        "" => Ok(None),
        text => match humantime::parse_duration(text) {
            Ok(duration) if !duration.is_zero() => Ok(Some(duration)),
            _ => Err("`for` must be a duration such as 10m, or empty".to_owned()),
        },
    }
}

/// Who asked, as written into the command: the dashboard and the client's address (with the
/// proxy's, for a forwarded client).
pub(super) fn who(client: Option<&Client>) -> String {
    match client {
        Some(client) => format!("dashboard {client}"),
        None => "dashboard".to_owned(),
    }
}
