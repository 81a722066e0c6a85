//! The operator's dashboard: `share-worker ui --config FILE`, the same pages under `/ui` of a
//! running worker's telemetry listener (`telemetry.ui = true`), and [`dashboard`] to mount them in
//! an axum application of your own.
//!
//! Server-rendered HTML ([`pages`], maud, escaped by default) with one small script of our own
//! (`assets/app.js`: it re-fetches the parts marked `data-refresh`), inline SVG charts drawn on
//! the server ([`charts`]); nothing is loaded from elsewhere, so it works offline, and a strict
//! Content-Security-Policy allows nothing else.
//!
//! - **Overview**: the group, its members and assignments, start offset and lag per partition,
//!   and charts ([`sampler`] says which numbers each mode has).
//! - **Dead letters**: per topic, counts by reason and source ([`dlq_index`]), bounded pages of
//!   letters with filters ([`letters`]), one letter in full, and replay / skip of one letter, a
//!   selection or a filter — behind a confirmation page, through `dlq replay`'s own code
//!   ([`jobs`]), each with an audit log line.
//! - **Requests**: [`routes`] answers them, [`params`] reads what they ask for.
//! - **Access** ([`guard`], [`throttle`]): read-only unless `ui.allow-actions`; a token when one
//!   is set (required off loopback), HTTPS off loopback unless `ui.allow-plain-http`, sessions
//!   that expire, failed sign-ins throttled per client (behind `ui.trusted-proxies`, the client
//!   their `X-Forwarded-For` names: [`crate::telemetry::Client`]); CSRF and same-origin checks on
//!   every POST. The listener ([`crate::telemetry::serve`]) adds HTTPS, the `Host` allow-list and
//!   its connection limits.

mod action;
mod cancel;
mod charts;
mod controls;
mod dlq_index;
mod guard;
mod jobs;
mod letters;
mod pages;
mod params;
mod reads;
mod routes;
mod sampler;
mod throttle;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::config::Config;
use anyhow::Context;
use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower_http::timeout::TimeoutLayer;
use worker_core::kafka::Admin;
use worker_core::security::Security;

use crate::telemetry::{Peer, REQUEST_TIMEOUT, Serving, TrustedProxies, serve, trusted_proxies};
use dlq_index::DlqIndex;
use guard::{Guard, Refusal};
use jobs::Jobs;
use pages::Chrome;
use reads::BlockingReads;
use routes::{
    act, admit, confirm, dlq_counts, dlq_list, dlq_page, job, job_live, letter, login, login_page,
    overview, overview_live, resolve_client, script, secure_headers, style,
};
pub(crate) use sampler::WorkerView;
use sampler::{Samples, Sources};
use throttle::Throttle;

/// The largest form body (a selection of letters is a few kilobytes).
const MAX_BODY: usize = 64 * 1024;
/// Page and letter reads at once (each opens a Kafka connection).
const READS: usize = 2;

/// The dashboard of the share group `config` describes — overview, dead letters, replay and skip,
/// with its `[ui]` access settings (token, `allow-actions`, `sample-every`) — as an axum
/// [`Router`] of routes under `/ui`, to merge into an application of your own.
///
/// `listen` is the address browsers reach it on (off loopback a token is required) and `https`
/// whether they use HTTPS (the session cookie is then `Secure`): TLS, the `Host` allow-list and
/// connection limits are the serving application's. Serve it with
/// `into_make_service_with_connect_info::<SocketAddr>()` so that failed sign-ins are throttled per
/// client address. It starts sampling the group and indexing its dead-letter topics at once (call
/// within a Tokio runtime); they stop when the last clone of the router is dropped.
///
/// `docs/dashboard.md` has the whole example (compiled as a doc test).
pub async fn dashboard(config: Config, listen: SocketAddr, https: bool) -> anyhow::Result<Router> {
    let topics = dlq_topics(&config, &config.security()?).await;
    let dashboard = Dashboard::start(Arc::new(config), None, listen, https, topics)?;
    Ok(router(dashboard).layer(middleware::from_fn(peer_from_connect_info)))
}

/// The client's address for the sign-in throttle when the application's server, not ours, accepted
/// the connection: axum's `ConnectInfo`, where our listener sets [`Peer`] itself.
async fn peer_from_connect_info(mut request: axum::extract::Request, next: Next) -> Response {
    let connect = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0);
    if request.extensions().get::<Peer>().is_none()
        && let Some(address) = connect
    {
        request.extensions_mut().insert(Peer(address));
    }
    next.run(request).await
}

/// `share-worker ui`: serves the dashboard on `ui.listen` until ctrl-c / SIGTERM.
pub(crate) async fn serve_standalone(config: Config) -> anyhow::Result<()> {
    let addr = config.ui.listen;
    let serving = Serving::dashboard(&config.ui)?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("ui.listen: cannot listen on {addr}"))?;
    let bound = listener.local_addr().unwrap_or(addr);
    let topics = dlq_topics(&config, &config.security()?).await;
    let dashboard = Dashboard::start(Arc::new(config), None, bound, serving.https, topics)?;
    let scheme = serving.scheme();
    let app = Router::new()
        .route("/", get(|| async { Redirect::to("/ui") }))
        .merge(router(dashboard.clone()))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") });
    let stop = CancellationToken::new();
    let server = tokio::spawn(serve(listener, app, serving, stop.clone()));
    tracing::info!(
        "dashboard on {scheme}://{bound}/ui ({})",
        if dashboard.guard.actions_allowed() {
            "actions on"
        } else {
            "read-only"
        }
    );
    crate::shutdown_signal().await;
    stop.cancel();
    let _ = server.await;
    Ok(())
}

/// The dead-letter topics the dashboard shows: the configured routes' ones, and the topic the
/// group's broker-side dead-letter queue (Kafka 4.4, KIP-1191) writes to, when the group names
/// one; the letters of both kinds read alike (`replay::provenance`).
pub(crate) async fn dlq_topics(config: &Config, security: &Security) -> Vec<String> {
    let mut topics = config.dlq_topics();
    let group = &config.worker.group;
    let broker = async {
        let admin = Admin::connect_with(config.kafka.bootstrap.as_str(), security).await?;
        admin.broker_dlq(group).await
    };
    match broker.await {
        Ok(dlq) => {
            if let Some(topic) = dlq.topic
                && !topics.contains(&topic)
            {
                topics.push(topic);
            }
        }
        Err(err) => tracing::warn!(
            group = %group,
            error = %err,
            "cannot read the group's broker dead-letter queue: the dashboard shows the worker's dead-letter topics only"
        ),
    }
    topics
}

/// The dashboard of one process.
#[derive(Debug)]
pub(crate) struct Dashboard {
    config: Arc<Config>,
    security: Security,
    client_id: String,
    guard: Guard,
    throttle: Throttle,
    /// `ui.trusted-proxies`: whose `X-Forwarded-For` names the client.
    trusted: TrustedProxies,
    samples: Arc<Mutex<Samples>>,
    dlq: Arc<Vec<DlqIndex>>,
    jobs: Jobs,
    /// The routes' fleet-wide pauses, with `[control]`.
    controls: controls::RouteControls,
    reads: BlockingReads,
    every: Duration,
    sampler: JoinHandle<()>,
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

impl Dashboard {
    /// Starts sampling and indexing `dlq_topics` (see [`dlq_topics`]); `listen` is the address
    /// the pages are served on, `https` whether browsers reach them over HTTPS. Call within a
    /// Tokio runtime.
    pub(crate) fn start(
        config: Arc<Config>,
        worker: Option<WorkerView>,
        listen: SocketAddr,
        https: bool,
        dlq_topics: Vec<String>,
    ) -> anyhow::Result<Arc<Self>> {
        let security = config.security()?;
        let token = config.ui_token()?;
        let loopback = listen.ip().is_loopback();
        // Refused when the file is loaded too; `listen` is the address actually bound.
        if token.is_none() && !loopback {
            anyhow::bail!(
                "the dashboard on {listen} is not on loopback: set ui.token or ui.token-file, or listen on 127.0.0.1"
            );
        }
        if !loopback && !https {
            if !config.ui.allow_plain_http {
                anyhow::bail!(
                    "the dashboard on {listen} is not on loopback and would be served over plain HTTP, its token and session cookies in the clear: serve HTTPS (tls-cert-file and tls-key-file, or behind-tls-proxy = true with a TLS proxy in front), or set ui.allow-plain-http = true to serve plain HTTP anyway"
                );
            }
            tracing::warn!(
                "the dashboard on {listen} is served over plain HTTP (ui.allow-plain-http): its token and session cookie cross the network in the clear"
            );
        }
        let trusted = trusted_proxies(&config.ui)?;
        if !trusted.is_empty() {
            tracing::info!(
                "the dashboard takes the client from X-Forwarded-For of requests from {trusted} (ui.trusted-proxies)"
            );
        }
        let every = config.ui.sample_every;
        let client_id = format!("{}-ui", config.kafka.client_id);
        let dlq: Arc<Vec<DlqIndex>> = Arc::new(
            dlq_topics
                .into_iter()
                .map(|topic| {
                    DlqIndex::start(
                        config.kafka.bootstrap.clone(),
                        security.clone(),
                        client_id.clone(),
                        topic,
                        every,
                    )
                })
                .collect(),
        );
        let samples = Arc::new(Mutex::new(Samples::default()));
        let sampler = sampler::spawn(
            Sources {
                bootstrap: config.kafka.bootstrap.clone(),
                security: security.clone(),
                group: config.worker.group.clone(),
                topics: config.topics().map(str::to_owned).collect(),
                dlq: dlq.clone(),
                worker,
                lanes: config
                    .routes
                    .iter()
                    .filter(|route| route.priority.is_some() || route.weight.is_some())
                    .map(|route| sampler::Lane {
                        topic: route.topic.clone(),
                        priority: route.priority,
                        weight: route.weight,
                    })
                    .collect(),
                cron: config.cron_scheduler()?,
            },
            every,
            samples.clone(),
        );
        let controls = controls::RouteControls::start(&config)?;
        Ok(Arc::new(Self {
            guard: Guard::new(token, config.ui.allow_actions, https),
            controls,
            throttle: Throttle::default(),
            trusted,
            config,
            security,
            client_id,
            samples,
            dlq,
            jobs: Jobs::default(),
            reads: BlockingReads::new(READS),
            every,
            sampler,
        }))
    }

    fn chrome(&self) -> Chrome<'_> {
        Chrome {
            group: &self.config.worker.group,
            embedded: lock(&self.samples).embedded,
            actions: self.guard.actions_allowed(),
            every_ms: self.every.as_millis(),
        }
    }

    fn index(&self, topic: &str) -> Option<&DlqIndex> {
        self.dlq.iter().find(|i| i.topic == topic)
    }

    fn page(&self, status: StatusCode, title: &str, text: &str) -> Response {
        (status, pages::message(&self.chrome(), title, text)).into_response()
    }

    fn refused(&self, refusal: Refusal) -> Response {
        let status = match refusal {
            Refusal::Unauthorized | Refusal::WrongToken => StatusCode::UNAUTHORIZED,
            Refusal::Throttled(_) => StatusCode::TOO_MANY_REQUESTS,
            Refusal::ActionsOff | Refusal::Forgery => StatusCode::FORBIDDEN,
        };
        let message = refusal.message();
        let mut response = match refusal {
            Refusal::Unauthorized | Refusal::WrongToken | Refusal::Throttled(_) => {
                let login = pages::login(&self.chrome(), self.guard.csrf(), Some(&message));
                (status, login).into_response()
            }
            Refusal::ActionsOff | Refusal::Forgery => self.page(status, "Refused", &message),
        };
        if let Refusal::Throttled(secs) = refusal
            && let Ok(value) = axum::http::HeaderValue::from_str(&secs.to_string())
        {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, value);
        }
        response
    }

    /// Runs a blocking Kafka read, at most [`READS`] at once.
    async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&str, &Security, &str) -> anyhow::Result<T> + Send + 'static,
    ) -> Result<T, String> {
        let (bootstrap, security, client_id) = (
            self.config.kafka.bootstrap.clone(),
            self.security.clone(),
            self.client_id.clone(),
        );
        self.reads
            .run(move || read(&bootstrap, &security, &client_id))
            .await
    }
}

fn lock(samples: &Mutex<Samples>) -> std::sync::MutexGuard<'_, Samples> {
    samples.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Every dashboard route, under `/ui`.
pub(crate) fn router(dashboard: Arc<Dashboard>) -> Router {
    let pages = Router::new()
        .route("/ui", get(overview))
        .route("/ui/live/overview", get(overview_live))
        .route("/ui/dlq", get(dlq_list))
        .route("/ui/live/dlq/{topic}", get(dlq_counts))
        .route("/ui/dlq/{topic}", get(dlq_page))
        .route("/ui/dlq/{topic}/confirm", get(confirm))
        .route("/ui/dlq/{topic}/act", axum::routing::post(act))
        .route("/ui/dlq/{topic}/{partition}/{offset}", get(letter))
        .route("/ui/live/routes", get(controls::live))
        .route(
            "/ui/routes/{topic}/pause",
            get(controls::confirm).post(controls::pause),
        )
        .route(
            "/ui/routes/{topic}/resume",
            axum::routing::post(controls::resume),
        )
        .route("/ui/cancel", get(cancel::form).post(cancel::cancel))
        .route("/ui/jobs/{id}", get(job))
        .route("/ui/live/jobs/{id}", get(job_live))
        .route_layer(middleware::from_fn_with_state(dashboard.clone(), admit));
    Router::new()
        .merge(pages)
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/assets/app.js", get(script))
        .route("/ui/assets/app.css", get(style))
        .layer(middleware::from_fn_with_state(
            dashboard.clone(),
            resolve_client,
        ))
        .with_state(dashboard)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(secure_headers))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            REQUEST_TIMEOUT,
        ))
}
