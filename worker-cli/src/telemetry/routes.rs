//! The three endpoints as an axum router. Handlers read memory only; a failing probe answers 503
//! with the reason as its body.

use std::fmt::Debug;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::HttpBody;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::watch;
use tower_http::timeout::TimeoutLayer;

use super::dlq_topics::DlqTopics;
use crate::otel;

/// A request must be answered within this long (503 otherwise).
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the probes ask of the running worker; a trait so the answers can be tested without one.
pub(crate) trait WorkerState: Debug + Send + Sync + 'static {
    /// `Ok` while the worker's loop ran within `max_silence`; otherwise why not.
    fn liveness(&self, max_silence: Duration) -> Result<(), String>;
    /// `Ok` while the worker takes work (running, not stopping, its sink not failing).
    fn readiness(&self) -> Result<(), String>;
    /// How many partitions the group assigned to this member.
    fn assigned_partitions(&self) -> usize;
    /// How often the worker's loop stalled, and how late it was the last time.
    fn stalls(&self) -> Option<(u64, Duration)>;
}

/// What the endpoints report on.
#[derive(Debug)]
pub(crate) struct Probes {
    /// Set once the worker is built; until then it is joining its group.
    pub(crate) worker: Arc<OnceLock<Box<dyn WorkerState>>>,
    /// The last result of the background dead-letter topic check.
    pub(crate) dlq_topics: watch::Receiver<DlqTopics>,
    pub(crate) registry: prometheus::Registry,
    pub(crate) max_silence: Duration,
}

impl Probes {
    fn liveness(&self) -> Result<(), String> {
        match self.worker.get() {
            Some(worker) => worker.liveness(self.max_silence),
            None => Ok(()),
        }
    }

    /// A line on the loop's stalls, if it ever stalled: alive again, but something blocked every
    /// runtime thread long enough to endanger locks.
    fn stalls(&self) -> Option<String> {
        let (count, last) = self.worker.get()?.stalls()?;
        Some(format!(
            "dispatcher stalls: {count} (the last {} late: something blocked every runtime thread)\n",
            humantime::format_duration(last)
        ))
    }

    fn readiness(&self) -> Result<(), String> {
        let Some(worker) = self.worker.get() else {
            return Err("joining the share group".to_owned());
        };
        worker.readiness()?;
        if worker.assigned_partitions() == 0 {
            return Err("no partitions assigned yet".to_owned());
        }
        self.dlq_topics.borrow().readiness()
    }
}

/// `/healthz`, `/readyz` and `/metrics` (GET or HEAD only); anything else is 404, a request with
/// a body 413.
#[cfg(test)]
pub(crate) fn router(probes: Arc<Probes>) -> Router {
    with_pages(probes, None)
}

/// [`router`] and, with `pages`, those routes too (the dashboard, which sets its own limits:
/// it takes form bodies).
pub(crate) fn with_pages(probes: Arc<Probes>, pages: Option<Router>) -> Router {
    let probes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(probes)
        .layer(middleware::from_fn(refuse_bodies))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            REQUEST_TIMEOUT,
        ));
    match pages {
        Some(pages) => probes.merge(pages),
        None => probes,
    }
    .fallback(not_found)
}

/// 200 `ok` while the loop runs (followed by a line on its stalls if it ever stalled), else 503
/// with the reason.
async fn healthz(State(probes): State<Arc<Probes>>) -> Response {
    match (probes.liveness(), probes.stalls()) {
        (Ok(()), Some(stalls)) => (StatusCode::OK, format!("ok\n{stalls}")).into_response(),
        (result, _) => answer(result, "ok\n"),
    }
}

async fn readyz(State(probes): State<Arc<Probes>>) -> Response {
    answer(probes.readiness(), "ready\n")
}

async fn metrics(State(probes): State<Arc<Probes>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        otel::prometheus_text(&probes.registry),
    )
        .into_response()
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found\n").into_response()
}

/// The probes are GETs: a body (announced by `Content-Length` or chunked) is refused unread.
async fn refuse_bodies(request: Request, next: Next) -> Response {
    if request.body().size_hint().exact() != Some(0) {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            "request bodies are refused\n",
        )
            .into_response();
    }
    next.run(request).await
}

fn answer(result: Result<(), String>, ok: &'static str) -> Response {
    match result {
        Ok(()) => (StatusCode::OK, ok).into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Method;
    use tower::ServiceExt;

    use super::*;

    /// A worker whose answers the test sets.
    #[derive(Debug)]
    struct Fake {
        /// The loop's silence, compared with the probe's `max_silence` like `WorkerHealth` does.
        silent_for: Duration,
        readiness: Result<(), String>,
        partitions: usize,
        stalls: Option<(u64, Duration)>,
    }

    impl Default for Fake {
        fn default() -> Self {
            Self {
                silent_for: Duration::from_millis(200),
                readiness: Ok(()),
                partitions: 2,
                stalls: None,
            }
        }
    }

    impl WorkerState for Fake {
        fn liveness(&self, max_silence: Duration) -> Result<(), String> {
            if self.silent_for > max_silence {
                return Err(format!(
                    "the dispatcher has not run for {}s",
                    self.silent_for.as_secs()
                ));
            }
            Ok(())
        }

        fn readiness(&self) -> Result<(), String> {
            self.readiness.clone()
        }

        fn assigned_partitions(&self) -> usize {
            self.partitions
        }

        fn stalls(&self) -> Option<(u64, Duration)> {
            self.stalls
        }
    }

    fn app(worker: Option<Fake>, dlq: DlqTopics) -> Router {
        let slot: OnceLock<Box<dyn WorkerState>> = OnceLock::new();
        if let Some(worker) = worker {
            let _ = slot.set(Box::new(worker));
        }
        let (_, dlq_topics) = watch::channel(dlq);
        router(Arc::new(Probes {
            worker: Arc::new(slot),
            dlq_topics,
            registry: prometheus::Registry::new(),
            max_silence: Duration::from_secs(10),
        }))
    }

    async fn call(app: Router, request: Request<Body>) -> (StatusCode, String, Option<String>) {
        let response = app
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("a body");
        (
            status,
            String::from_utf8_lossy(&body).into_owned(),
            content_type,
        )
    }

    async fn get(app: Router, path: &str) -> (StatusCode, String) {
        let request = Request::get(path).body(Body::empty()).expect("a request");
        let (status, body, _) = call(app, request).await;
        (status, body)
    }

    #[tokio::test]
    async fn healthz_is_503_with_the_reason_when_the_loop_stalls() {
        let stalled = Fake {
            silent_for: Duration::from_secs(11),
            ..Fake::default()
        };
        let (status, body) = get(app(Some(stalled), DlqTopics::Present), "/healthz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "the dispatcher has not run for 11s\n");

        let busy = Fake {
            silent_for: Duration::from_secs(9),
            ..Fake::default()
        };
        let app = app(Some(busy), DlqTopics::Present);
        assert_eq!(get(app, "/healthz").await, (StatusCode::OK, "ok\n".into()));
    }

    #[tokio::test]
    async fn healthz_names_past_stalls_of_a_live_loop() {
        let recovered = Fake {
            stalls: Some((2, Duration::from_millis(1500))),
            ..Fake::default()
        };
        let (status, body) = get(app(Some(recovered), DlqTopics::Present), "/healthz").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            body,
            "ok\ndispatcher stalls: 2 (the last 1s 500ms late: something blocked every runtime thread)\n"
        );
    }

    #[tokio::test]
    async fn a_joining_worker_is_alive_but_not_ready() {
        let app = app(None, DlqTopics::Present);
        assert_eq!(
            get(app.clone(), "/healthz").await,
            (StatusCode::OK, "ok\n".into())
        );
        assert_eq!(
            get(app, "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "joining the share group\n".into()
            )
        );
    }

    #[tokio::test]
    async fn readyz_names_the_first_reason_not_to_take_work() {
        let cases = [
            (
                Fake {
                    readiness: Err("the dead-letter sink is failing: timed out".into()),
                    partitions: 0,
                    ..Fake::default()
                },
                DlqTopics::Missing(vec!["t.dlq".into()]),
                "the dead-letter sink is failing: timed out",
            ),
            (
                Fake {
                    partitions: 0,
                    ..Fake::default()
                },
                DlqTopics::Missing(vec!["t.dlq".into()]),
                "no partitions assigned yet",
            ),
            (
                Fake::default(),
                DlqTopics::Missing(vec!["t.dlq".into()]),
                "dead-letter topic t.dlq does not exist",
            ),
            (
                Fake::default(),
                DlqTopics::Unchecked,
                "the dead-letter topics have not been checked yet",
            ),
        ];
        for (worker, dlq, why) in cases {
            let (status, body) = get(app(Some(worker), dlq), "/readyz").await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{why}");
            assert_eq!(body, format!("{why}\n"));
        }
        let app = app(Some(Fake::default()), DlqTopics::Present);
        assert_eq!(
            get(app, "/readyz").await,
            (StatusCode::OK, "ready\n".into())
        );
    }

    #[tokio::test]
    async fn metrics_are_prometheus_text() {
        let request = Request::get("/metrics")
            .body(Body::empty())
            .expect("a request");
        let (status, _, content_type) = call(app(None, DlqTopics::Present), request).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type.as_deref(), Some("text/plain; version=0.0.4"));
    }

    #[tokio::test]
    async fn unknown_paths_wrong_methods_and_bodies_are_refused() {
        let app = app(Some(Fake::default()), DlqTopics::Present);
        assert_eq!(get(app.clone(), "/").await.0, StatusCode::NOT_FOUND);
        assert_eq!(
            get(app.clone(), "/healthz/x").await.0,
            StatusCode::NOT_FOUND
        );
        let post = Request::builder()
            .method(Method::POST)
            .uri("/healthz")
            .body(Body::empty())
            .expect("a request");
        assert_eq!(
            call(app.clone(), post).await.0,
            StatusCode::METHOD_NOT_ALLOWED
        );
        let with_body = Request::get("/healthz")
            .body(Body::from("x"))
            .expect("a request");
        let (status, body, _) = call(app.clone(), with_body).await;
        assert_eq!(
            (status, body.as_str()),
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                "request bodies are refused\n"
            )
        );
        let head = Request::head("/healthz")
            .body(Body::empty())
            .expect("a request");
        assert_eq!(call(app, head).await.0, StatusCode::OK);
    }
}
