//! Cancelling a job from the dashboard: the same command as `share-worker cancel`, behind the
//! token, CSRF and same-origin checks of every action, with an audit line.

use std::time::SystemTime;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use worker_core::{checks, defaults};

use super::Dashboard;
use super::action::ActionForm;
use super::controls::{MAX_REASON, for_field, reason_field, who};
use super::guard::Refusal;
use super::jobs::AUDIT;
use super::pages::{self, Tab};
use super::routes::Shared;

/// `GET /ui/cancel`: the form, with the job id, the reason and how long.
pub(crate) async fn form(State(dashboard): Shared) -> Response {
    if let Some(refused) = refusal(&dashboard) {
        return refused;
    }
    page(&dashboard).into_response()
}

fn page(dashboard: &Dashboard) -> Markup {
    pages::layout(
        &dashboard.chrome(),
        Tab::Overview,
        "Cancel a job?",
        html! {
            h1 { "Cancel a job for the whole group?" }
            div.card {
                p.muted { "No worker of the group runs the job with this id (its share.job-id header): it is acknowledged without running when it would start, and a running one is told to stop. The same as `share-worker cancel`." }
                form method="post" action="/ui/cancel" {
                    input type="hidden" name="csrf" value=(dashboard.guard.csrf());
                    label { "job id " input #job-id type="text" name="job-id" maxlength=(checks::MAX_JOB_ID) required; }
                    label { "reason " input #reason type="text" name="reason" maxlength=(MAX_REASON) required; }
                    label { "for (e.g. 7d; empty: 7 days) " input #for type="text" name="for"; }
                    div.actions {
                        button #confirm type="submit" class="danger" { "Cancel the job" }
                        a href="/ui" { "back" }
                    }
                }
            }
        },
    )
}

/// `POST /ui/cancel`.
pub(crate) async fn cancel(
    State(dashboard): Shared,
    ActionForm { params, client }: ActionForm,
) -> Response {
    if let Some(refused) = refusal(&dashboard) {
        return refused;
    }
    let not_done = |why: &str| dashboard.page(StatusCode::BAD_REQUEST, "Not cancelled", why);
    let job_id = params.get("job-id").trim().to_owned();
    if let Err(why) = checks::job_id(&job_id) {
        return not_done(&why);
    }
    let fields = reason_field(&params).and_then(|reason| Ok((reason, for_field(&params)?)));
    let (reason, ttl) = match fields {
        Ok((reason, ttl)) => (reason, ttl.unwrap_or(defaults::CANCEL_TTL)),
        Err(why) => return not_done(&why),
    };
    let Some(control) = dashboard.controls.topic() else {
        return not_done("no control topic");
    };
    let by = who(client.as_ref());
    match control.cancel(&job_id, ttl, &reason, &by).await {
        Ok(cancel) => {
            tracing::info!(target: AUDIT, action = "cancel", job_id = ?job_id, reason = ?reason, client = ?by, "dashboard job action done");
            dashboard.page(
                StatusCode::OK,
                "Cancelled",
                &format!(
                    "job {job_id} is cancelled for the whole group until {}",
                    until(cancel.until)
                ),
            )
        }
        Err(err) => {
            tracing::warn!(target: AUDIT, action = "cancel", job_id = ?job_id, reason = ?reason, client = ?by, error = %err, "dashboard job action failed");
            dashboard.page(StatusCode::BAD_GATEWAY, "Not done", &err.to_string())
        }
    }
}

fn until(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The page that says why no job can be cancelled here (actions off, or no `[control]` table),
/// if that is so.
fn refusal(dashboard: &Dashboard) -> Option<Response> {
    if !dashboard.guard.actions_allowed() {
        return Some(dashboard.refused(Refusal::ActionsOff));
    }
    if dashboard.controls.topic().is_none() {
        return Some(dashboard.page(
            StatusCode::CONFLICT,
            "No control topic",
            "this dashboard's configuration has no [control] table",
        ));
    }
    None
}
