//! The dashboard's request handlers: each reads the dashboard's memory, or the cluster through
//! the bounded reads of [`Dashboard::read`], and answers a page.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use maud::Markup;

use super::action::ActionForm;
use super::guard::Refusal;
use super::letters::{self, Cursor};
use super::pages::{self, FilterText, Tab};
use super::params::{Params, filter_of, target_of};
use super::{Dashboard, jobs, lock};
use crate::replay::Request as ReplayRequest;
use crate::replay::scan::LetterStatus;
use crate::telemetry::{Client, Peer};

pub(crate) type Shared = State<Arc<Dashboard>>;

/// Before every route: the request's [`Client`], its peer or, from a trusted proxy
/// (`ui.trusted-proxies`), the client its `X-Forwarded-For` names; every request through a
/// listener has a peer.
pub(crate) async fn resolve_client(
    State(dashboard): Shared,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(peer) = request.extensions().get::<Peer>().copied() {
        let client = Client::resolve(peer.0, request.headers(), &dashboard.trusted);
        request.extensions_mut().insert(client);
    }
    next.run(request).await
}

/// The address sign-ins are throttled by.
fn address(client: Option<&Client>) -> IpAddr {
    client.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.ip)
}

/// Token checks before every page (the login page and the static files aside); a wrong bearer
/// token is a failed sign-in, and a throttled address's bearer token is not even checked.
pub(crate) async fn admit(
    State(dashboard): Shared,
    client: Option<axum::Extension<Client>>,
    request: Request,
    next: Next,
) -> Response {
    let client = client.as_deref();
    let address = address(client);
    if dashboard.guard.has_bearer(request.headers())
        && let Some(wait) = dashboard.throttle.wait(address, Instant::now())
    {
        return dashboard.refused(Refusal::Throttled(wait.as_secs().max(1)));
    }
    match dashboard.guard.admit(request.headers(), SystemTime::now()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            if refusal == Refusal::WrongToken {
                failed_sign_in(&dashboard, client, "a request with a wrong bearer token");
            }
            dashboard.refused(refusal)
        }
    }
}

fn failed_sign_in(dashboard: &Dashboard, client: Option<&Client>, what: &str) {
    dashboard.throttle.failed(address(client), Instant::now());
    let who = client.map_or_else(|| "unknown".to_owned(), Client::to_string);
    tracing::warn!(client = %who, "dashboard: {what}");
}

/// What the browser may do with the dashboard's answers: nothing from elsewhere, no framing,
/// no caching, no sniffing.
pub(crate) async fn secure_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        // Not `no-referrer`: with it browsers send `Origin: null` on form posts, which the
        // same-origin check refuses.
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

pub(crate) async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/app.js"),
    )
        .into_response()
}

pub(crate) async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/app.css"),
    )
        .into_response()
}

pub(crate) async fn overview(State(dashboard): Shared) -> Markup {
    let chrome = dashboard.chrome();
    // Before the samples' lock: the routes read the chrome, which takes it too.
    let routes = super::controls::section(&dashboard);
    let samples = lock(&dashboard.samples);
    pages::overview(&chrome, &samples, routes)
}

pub(crate) async fn overview_live(State(dashboard): Shared) -> Markup {
    pages::overview_live(&lock(&dashboard.samples))
}

pub(crate) async fn dlq_list(State(dashboard): Shared) -> Markup {
    let topics: Vec<(String, Markup)> = dashboard
        .dlq
        .iter()
        .map(|index| {
            (
                index.topic.clone(),
                index.with(|state| pages::counts(&index.topic, state)),
            )
        })
        .collect();
    pages::dlq_topics(&dashboard.chrome(), &topics)
}

pub(crate) async fn dlq_counts(State(dashboard): Shared, Path(topic): Path<String>) -> Response {
    match dashboard.index(&topic) {
        Some(index) => index
            .with(|state| pages::counts(&topic, state))
            .into_response(),
        None => unknown_topic(&dashboard, &topic),
    }
}

fn unknown_topic(dashboard: &Dashboard, topic: &str) -> Response {
    dashboard.page(
        StatusCode::NOT_FOUND,
        "Not found",
        &format!("{topic} is not a dead-letter topic of this configuration"),
    )
}

fn reasons_of(dashboard: &Dashboard, topic: &str) -> Vec<String> {
    dashboard.index(topic).map_or_else(Vec::new, |index| {
        index.with(|state| state.reasons.keys().cloned().collect())
    })
}

pub(crate) async fn dlq_page(
    State(dashboard): Shared,
    Path(topic): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(index) = dashboard.index(&topic) else {
        return unknown_topic(&dashboard, &topic);
    };
    let params = Params::parse(query.unwrap_or_default().as_bytes());
    let reasons = reasons_of(&dashboard, &topic);
    let chrome = dashboard.chrome();
    let counts = index.with(|state| pages::counts(&topic, state));
    let (filter, text) = match filter_of(&params) {
        Ok(parsed) => parsed,
        Err(why) => {
            let body = pages::letters(
                &chrome,
                &topic,
                counts,
                &FilterText::default(),
                Err(why),
                &|_| None,
                &reasons,
            );
            return (
                StatusCode::BAD_REQUEST,
                pages::layout(&chrome, Tab::Dlq, "Dead letters", body),
            )
                .into_response();
        }
    };
    let cursor = match params.get("from") {
        "" => None,
        text => match Cursor::parse(text) {
            Some(cursor) => Some(cursor),
            None => {
                return dashboard.page(
                    StatusCode::BAD_REQUEST,
                    "Bad request",
                    "from: expected partition:offset pairs",
                );
            }
        },
    };
    let read = {
        let (topic, filter) = (topic.clone(), filter.clone());
        dashboard
            .read(move |bootstrap, security, client_id| {
                letters::page(
                    bootstrap,
                    security,
                    client_id,
                    &topic,
                    &filter,
                    cursor.as_ref(),
                )
            })
            .await
    };
    let status = |row: &letters::Row| -> Option<LetterStatus> {
        index.with(|state| state.status(row.partition, row.offset))
    };
    let body = pages::letters(
        &chrome,
        &topic,
        counts,
        &text,
        read.as_ref().map_err(String::clone),
        &status,
        &reasons,
    );
    pages::layout(&chrome, Tab::Dlq, "Dead letters", body).into_response()
}

pub(crate) async fn letter(
    State(dashboard): Shared,
    Path((topic, partition, offset)): Path<(String, i32, i64)>,
) -> Response {
    let Some(index) = dashboard.index(&topic) else {
        return unknown_topic(&dashboard, &topic);
    };
    let read = {
        let topic = topic.clone();
        dashboard
            .read(move |bootstrap, security, client_id| {
                letters::letter(bootstrap, security, client_id, &topic, partition, offset)
            })
            .await
    };
    match read {
        Ok(Some(full)) => {
            let status = index.with(|state| state.status(partition, offset));
            pages::letter(&dashboard.chrome(), &topic, &full, status).into_response()
        }
        Ok(None) => dashboard.page(
            StatusCode::NOT_FOUND,
            "Not found",
            &format!("{topic} has no letter at {partition}@{offset}"),
        ),
        Err(why) => dashboard.page(StatusCode::BAD_GATEWAY, "Cannot read the letter", &why),
    }
}

pub(crate) async fn confirm(
    State(dashboard): Shared,
    Path(topic): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    if dashboard.index(&topic).is_none() {
        return unknown_topic(&dashboard, &topic);
    }
    if !dashboard.guard.actions_allowed() {
        return dashboard.refused(Refusal::ActionsOff);
    }
    let params = Params::parse(query.unwrap_or_default().as_bytes());
    match target_of(&params) {
        Ok(target) => {
            let action = jobs::verb(target.action);
            let fields: Vec<(&str, String)> = target.fields.clone();
            pages::confirm(
                &dashboard.chrome(),
                &topic,
                action,
                &target.what,
                &fields,
                dashboard.guard.csrf(),
            )
            .into_response()
        }
        Err(why) => dashboard.page(StatusCode::BAD_REQUEST, "Nothing to do", &why),
    }
}

pub(crate) async fn act(
    State(dashboard): Shared,
    Path(topic): Path<String>,
    ActionForm { params, client }: ActionForm,
) -> Response {
    if dashboard.index(&topic).is_none() {
        return unknown_topic(&dashboard, &topic);
    }
    let target = match target_of(&params) {
        Ok(target) => target,
        Err(why) => return dashboard.page(StatusCode::BAD_REQUEST, "Nothing to do", &why),
    };
    let request = ReplayRequest {
        dlq: topic.clone(),
        reason: target.filter.reason.clone(),
        to: None,
        limit: None,
        letters: target.letters,
        since_ms: target.filter.since_ms,
        until_ms: target.filter.until_ms,
        action: target.action,
    };
    let who = client.map_or_else(|| "unknown".to_owned(), |c| c.to_string());
    match dashboard
        .jobs
        .start(dashboard.config.clone(), request, target.what, who)
    {
        Ok(job) => Redirect::to(&format!("/ui/jobs/{}", job.id)).into_response(),
        Err(busy) => dashboard.page(
            StatusCode::CONFLICT,
            "Busy",
            &format!("action {} is still running: one action at a time", busy.0),
        ),
    }
}

pub(crate) async fn job(State(dashboard): Shared, Path(id): Path<u64>) -> Response {
    match dashboard.jobs.get(id) {
        Some(job) => pages::job(&dashboard.chrome(), &job).into_response(),
        None => dashboard.page(StatusCode::NOT_FOUND, "Not found", "no such action"),
    }
}

pub(crate) async fn job_live(State(dashboard): Shared, Path(id): Path<u64>) -> Response {
    match dashboard.jobs.get(id) {
        Some(job) => pages::job_status(&job).into_response(),
        None => (StatusCode::NOT_FOUND, "no such action").into_response(),
    }
}

pub(crate) async fn login_page(State(dashboard): Shared) -> Markup {
    pages::login(&dashboard.chrome(), dashboard.guard.csrf(), None)
}

/// The sign-in form: refused at once for an address with too many failed sign-ins, else the
/// token checked and the session cookie set.
pub(crate) async fn login(
    State(dashboard): Shared,
    client: Option<axum::Extension<Client>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params = Params::parse(&body);
    if let Err(refusal) = dashboard.guard.form(&headers, params.get("csrf")) {
        return dashboard.refused(refusal);
    }
    if !dashboard.guard.needs_token() {
        return Redirect::to("/ui").into_response();
    }
    let client = client.as_deref();
    let address = address(client);
    if let Some(wait) = dashboard.throttle.wait(address, Instant::now()) {
        return dashboard.refused(Refusal::Throttled(wait.as_secs().max(1)));
    }
    match dashboard
        .guard
        .login(params.get("token"), SystemTime::now())
    {
        Some(session) => {
            dashboard.throttle.succeeded(address);
            let mut response = Redirect::to("/ui").into_response();
            if let Ok(value) = HeaderValue::from_str(&dashboard.guard.cookie(&session)) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        None => {
            failed_sign_in(&dashboard, client, "a sign-in with a wrong token");
            dashboard.refused(Refusal::WrongToken)
        }
    }
}
