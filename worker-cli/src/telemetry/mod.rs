//! The `[telemetry] listen` HTTP listener: `/healthz` (the worker's loop makes progress),
//! `/readyz` (it takes work: running, partitions assigned, dead-letter topics present),
//! `/metrics` (Prometheus text): the router of `worker-ops`, and with `telemetry.ui` the dashboard
//! under `/ui`.
//!
//! Every answer comes from memory: the only network call is the dead-letter topic check, which
//! runs in the background ([`dlq_topics`]) so that no client can make the worker open Kafka
//! connections. The listener serves from the moment it is bound, so probes get answers while the
//! worker is still joining its group. [`server`] is the listener of `share-worker ui` too: both
//! take HTTPS ([`certs`]), a `Host` allow-list ([`hosts`]), connection slots that keep room
//! for probes ([`admission`]) and the client behind trusted proxies ([`client`]).

mod admission;
mod certs;
mod client;
mod dlq_topics;
mod hosts;
mod server;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use worker_core::kafka::KafkaSource;
use worker_core::runtime::WorkerHealth;
use worker_core::security::Security;
use worker_ops::Probes;

pub(crate) use client::{Client, TrustedProxies, counted_as};
pub(crate) use server::{Peer, Serving, serve, trusted_proxies};
pub(crate) use worker_ops::REQUEST_TIMEOUT;

/// How often the dead-letter topics are looked up (the first time at start).
pub(crate) const DLQ_CHECK_INTERVAL: Duration = Duration::from_secs(30);

/// The running listener; dropping it stops the listener without waiting.
#[derive(Debug)]
pub(crate) struct TelemetryServer {
    probes: Probes,
    /// The dashboard's view of the worker, with `telemetry.ui`.
    dashboard: Option<Arc<OnceLock<WorkerHealth>>>,
    stop: CancellationToken,
    server: JoinHandle<()>,
    dlq_check: Option<JoinHandle<()>>,
}

impl TelemetryServer {
    /// Serves `listener` as `serving` says and starts checking that `dlq_topics` exist at
    /// `bootstrap` (connecting as `security` says); with `pages` (the dashboard's routes and its
    /// view of the worker), serves those too.
    pub(crate) fn start(
        listener: TcpListener,
        serving: Serving,
        registry: prometheus::Registry,
        bootstrap: String,
        security: Security,
        dlq_topics: Vec<String>,
        pages: Option<(axum::Router, Arc<OnceLock<WorkerHealth>>)>,
    ) -> Self {
        let (dlq_topics, dlq_check) =
            dlq_topics::spawn_check(bootstrap, security, dlq_topics, DLQ_CHECK_INTERVAL);
        // The worker's own conditions first, then the dead-letter topics.
        let probes = Probes::builder()
            .metrics(registry)
            .readiness_check(move || dlq_topics.borrow().readiness())
            .build();
        let stop = CancellationToken::new();
        let (pages, dashboard) = match pages {
            Some((pages, health)) => (Some(pages), Some(health)),
            None => (None, None),
        };
        let server = tokio::spawn(server::serve(
            listener,
            app(&probes, pages),
            serving,
            stop.clone(),
        ));
        Self {
            probes,
            dashboard,
            stop,
            server,
            dlq_check,
        }
    }

    /// From now on `/readyz` shows the group's fleet-wide controls the worker follows.
    pub(crate) fn attach_controls(&self, controls: worker_core::control::Controls) {
        let _ = self.probes.attach_controls(controls);
    }

    /// From now on the probes report on this worker (until then: alive, not ready).
    pub(crate) fn attach(&self, health: WorkerHealth, source: KafkaSource) {
        if let Some(dashboard) = &self.dashboard {
            let _ = dashboard.set(health.clone());
        }
        if !self.probes.attach_kafka(health, source) {
            tracing::warn!("telemetry listener: a second worker was attached and is ignored");
        }
    }

    /// Stops accepting, lets the connections in progress finish (briefly) and returns.
    pub(crate) async fn stop(mut self) {
        self.stop.cancel();
        if let Some(check) = self.dlq_check.take() {
            check.abort();
        }
        if let Err(err) = (&mut self.server).await
            && err.is_panic()
        {
            tracing::warn!(error = %err, "telemetry listener: the server task panicked");
        }
    }
}

impl Drop for TelemetryServer {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(check) = self.dlq_check.take() {
            check.abort();
        }
    }
}

/// The probes and, with `pages`, the dashboard (which sets its own limits: it takes form
/// bodies); anything else is 404.
fn app(probes: &Probes, pages: Option<Router>) -> Router {
    let probes = probes.router();
    match pages {
        Some(pages) => probes.merge(pages),
        None => probes,
    }
    .fallback(not_found)
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found\n").into_response()
}
