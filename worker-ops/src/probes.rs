//! The three endpoints. Handlers read memory only; a failing probe answers 503 with the reason as
//! its body.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::HttpBody;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tower_http::timeout::TimeoutLayer;
use worker_core::control::Controls;
use worker_core::kafka::KafkaSource;
use worker_core::runtime::WorkerHealth;

/// A probe request must be answered within this long (503 otherwise).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// `/healthz` fails once the worker's loop has not run for this long. It runs at least once a
/// second while the worker runs, so this is ten missed wakes, not a busy moment.
pub const LIVENESS_MAX_SILENCE: Duration = Duration::from_secs(10);

/// The paused routes `/readyz` names one by one; beyond them it gives their number, so a probe's
/// answer stays small however many routes are paused.
pub const READYZ_PAUSES: usize = 10;

/// A condition `/readyz` requires besides the worker's own: `Ok`, or why not.
type ReadinessCheck = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The probes of one worker. Serve [`router`](Self::router) from the start (the worker is
/// alive and not ready while it joins its group), then [`attach`](Self::attach) the worker once it
/// is built. Cloning is cheap: clones share the worker and the checks.
#[derive(Clone)]
pub struct Probes {
    inner: Arc<Inner>,
}

struct Inner {
    /// Set once the worker is built; until then it is joining its group.
    worker: OnceLock<Box<dyn WorkerState>>,
    /// The group's fleet-wide controls, once the worker follows them: shown by `/readyz`.
    controls: OnceLock<Controls>,
    checks: Vec<ReadinessCheck>,
    registry: Option<prometheus::Registry>,
}

/// What the probes ask of the worker; a trait so the answers can be tested without one.
trait WorkerState: Send + Sync + 'static {
    /// `Ok` while the worker's loop ran within `max_silence`; otherwise why not.
    fn liveness(&self, max_silence: Duration) -> Result<(), String>;
    /// `Ok` while the worker takes work (running, not stopping, its sink not failing).
    fn readiness(&self) -> Result<(), String>;
    /// Whether the group assigned partitions to this member (a worker on another source: yes).
    fn has_partitions(&self) -> bool;
    /// How often the worker's loop stalled, and how late it was the last time.
    fn stalls(&self) -> Option<(u64, Duration)>;
}

/// The worker as the probes see it: its health and its assignment, both in memory.
struct Attached {
    health: WorkerHealth,
    /// A Kafka worker is ready only with partitions assigned.
    source: Option<KafkaSource>,
}

impl WorkerState for Attached {
    fn liveness(&self, max_silence: Duration) -> Result<(), String> {
        self.health.liveness(max_silence)
    }

    fn readiness(&self) -> Result<(), String> {
        self.health.readiness()
    }

    fn has_partitions(&self) -> bool {
        self.source
            .as_ref()
            .is_none_or(|source| !source.assignment().is_empty())
    }

    fn stalls(&self) -> Option<(u64, Duration)> {
        self.health.stalls()
    }
}

/// Builds [`Probes`].
#[derive(Default)]
pub struct ProbesBuilder {
    checks: Vec<ReadinessCheck>,
    registry: Option<prometheus::Registry>,
}

impl ProbesBuilder {
    /// `/metrics` serves `registry` (without it: an empty page).
    pub fn metrics(mut self, registry: prometheus::Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// `/readyz` also requires `check` (after the worker's own conditions, in the order they were
    /// added): `Err(why)` answers 503 with `why`. It runs on every probe, so it must answer from
    /// memory (a value a background task keeps fresh), never from the network.
    pub fn readiness_check(
        mut self,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.checks.push(Box::new(check));
        self
    }

    /// The probes, reporting "alive, not ready" until a worker is attached.
    pub fn build(self) -> Probes {
        Probes {
            inner: Arc::new(Inner {
                worker: OnceLock::new(),
                controls: OnceLock::new(),
                checks: self.checks,
                registry: self.registry,
            }),
        }
    }
}

impl fmt::Debug for Probes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probes")
            .field("attached", &self.inner.worker.get().is_some())
            .field("readiness_checks", &self.inner.checks.len())
            .finish_non_exhaustive()
    }
}

impl Probes {
    /// Starts building probes: no metrics and no readiness checks of the application's own.
    pub fn builder() -> ProbesBuilder {
        ProbesBuilder::default()
    }

    /// From now on the probes report on the worker whose [`health`](worker_core::runtime::Worker::health)
    /// this is. Only the first worker attached counts: `false` for any later one.
    pub fn attach(&self, health: WorkerHealth) -> bool {
        self.set(Attached {
            health,
            source: None,
        })
    }

    /// [`attach`](Self::attach) a worker on `source`: `/readyz` also waits for the group to
    /// assign it partitions.
    pub fn attach_kafka(&self, health: WorkerHealth, source: KafkaSource) -> bool {
        self.set(Attached {
            health,
            source: Some(source),
        })
    }

    /// `/readyz` also shows the group's fleet-wide controls the worker follows: the routes
    /// paused (information: a worker with a paused route is still ready) and a control topic that
    /// cannot be read any more (the worker keeps obeying the last state read). Only the first
    /// call counts: `false` for any later one.
    pub fn attach_controls(&self, controls: Controls) -> bool {
        self.inner.controls.set(controls).is_ok()
    }

    /// What `/readyz` adds to "ready": one line per route paused fleet-wide (the first
    /// [`READYZ_PAUSES`], then their number), and one if the control topic cannot be read. Reason and issuer come from the control topic: escaped.
    fn notes(&self) -> String {
        let Some(controls) = self.inner.controls.get() else {
            return String::new();
        };
        let mut out = String::new();
        let state = controls.state();
        let mut pauses = state.pauses(SystemTime::now());
        for pause in pauses.by_ref().take(READYZ_PAUSES) {
            out.push_str(&format!(
                "paused fleet-wide: {} ({}; {:?} by {:?})\n",
                pause.topic,
                pause.until_text(),
                pause.reason,
                pause.by
            ));
        }
        let more = pauses.count();
        if more > 0 {
            out.push_str(&format!(
                "paused fleet-wide: {more} more routes (share-worker status lists them)\n"
            ));
        }
        if let Some(failure) = controls.read_failure() {
            out.push_str(&format!(
                "control topic unreadable, the last state read is obeyed: {}\n",
                failure.escape_debug()
            ));
        }
        out
    }

    fn set(&self, worker: impl WorkerState) -> bool {
        self.inner.worker.set(Box::new(worker)).is_ok()
    }

    /// `/healthz`, `/readyz` and `/metrics`, GET or HEAD; a request with a body is refused (413)
    /// unread, and one not answered within [`REQUEST_TIMEOUT`] is 503. Merge it into your router;
    /// paths it does not have are left to yours.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .with_state(self.clone())
            .layer(middleware::from_fn(refuse_bodies))
            .layer(TimeoutLayer::with_status_code(
                StatusCode::SERVICE_UNAVAILABLE,
                REQUEST_TIMEOUT,
            ))
    }

    fn liveness(&self) -> Result<(), String> {
        match self.inner.worker.get() {
            Some(worker) => worker.liveness(LIVENESS_MAX_SILENCE),
            None => Ok(()),
        }
    }

    /// A line on the loop's stalls, if it ever stalled: alive again, but something blocked every
    /// runtime thread long enough to endanger locks.
    fn stalls(&self) -> Option<String> {
        let (count, last) = self.inner.worker.get()?.stalls()?;
        Some(format!(
            "dispatcher stalls: {count} (the last {} late: something blocked every runtime thread)\n",
            humantime::format_duration(last)
        ))
    }

    fn readiness(&self) -> Result<(), String> {
        let Some(worker) = self.inner.worker.get() else {
            return Err("joining the share group".to_owned());
        };
        worker.readiness()?;
        if !worker.has_partitions() {
            return Err("no partitions assigned yet".to_owned());
        }
        self.inner.checks.iter().try_for_each(|check| check())
    }
}

/// 200 `ok` while the loop runs (followed by a line on its stalls if it ever stalled), else 503
/// with the reason.
async fn healthz(State(probes): State<Probes>) -> Response {
    match (probes.liveness(), probes.stalls()) {
        (Ok(()), Some(stalls)) => (StatusCode::OK, format!("ok\n{stalls}")).into_response(),
        (result, _) => answer(result, "ok\n"),
    }
}

async fn readyz(State(probes): State<Probes>) -> Response {
    match probes.readiness() {
        Ok(()) => (StatusCode::OK, format!("ready\n{}", probes.notes())).into_response(),
        result => answer(result, "ready\n"),
    }
}

async fn metrics(State(probes): State<Probes>) -> Response {
    let text = match &probes.inner.registry {
        Some(registry) => prometheus_text(registry),
        None => String::new(),
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// Every metric of `registry` in the Prometheus text format.
pub fn prometheus_text(registry: &prometheus::Registry) -> String {
    let encoder = prometheus::TextEncoder::new();
    match encoder.encode_to_string(&registry.gather()) {
        Ok(text) => text,
        Err(err) => format!("# encoding the metrics failed: {err}\n"),
    }
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

        fn has_partitions(&self) -> bool {
            self.partitions > 0
        }

        fn stalls(&self) -> Option<(u64, Duration)> {
            self.stalls
        }
    }

    /// The probes of `worker` (none: still joining) with one readiness check answering `check`.
    fn app(worker: Option<Fake>, check: Result<(), &'static str>) -> Router {
        let probes = Probes::builder()
            .metrics(prometheus::Registry::new())
            .readiness_check(move || check.map_err(str::to_owned))
            .build();
        if let Some(worker) = worker {
            assert!(probes.set(worker));
        }
        probes.router()
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
        let (status, body) = get(app(Some(stalled), Ok(())), "/healthz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "the dispatcher has not run for 11s\n");

        let busy = Fake {
            silent_for: Duration::from_secs(9),
            ..Fake::default()
        };
        let app = app(Some(busy), Ok(()));
        assert_eq!(get(app, "/healthz").await, (StatusCode::OK, "ok\n".into()));
    }

    #[tokio::test]
    async fn healthz_names_past_stalls_of_a_live_loop() {
        let recovered = Fake {
            stalls: Some((2, Duration::from_millis(1500))),
            ..Fake::default()
        };
        let (status, body) = get(app(Some(recovered), Ok(())), "/healthz").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            body,
            "ok\ndispatcher stalls: 2 (the last 1s 500ms late: something blocked every runtime thread)\n"
        );
    }

    #[tokio::test]
    async fn a_joining_worker_is_alive_but_not_ready() {
        let app = app(None, Ok(()));
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
                Err("dead-letter topic t.dlq does not exist"),
                "the dead-letter sink is failing: timed out",
            ),
            (
                Fake {
                    partitions: 0,
                    ..Fake::default()
                },
                Err("dead-letter topic t.dlq does not exist"),
                "no partitions assigned yet",
            ),
            (
                Fake::default(),
                Err("dead-letter topic t.dlq does not exist"),
                "dead-letter topic t.dlq does not exist",
            ),
            (
                Fake::default(),
                Err("the dead-letter topics have not been checked yet"),
                "the dead-letter topics have not been checked yet",
            ),
        ];
        for (worker, dlq, why) in cases {
            let (status, body) = get(app(Some(worker), dlq), "/readyz").await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{why}");
            assert_eq!(body, format!("{why}\n"));
        }
        let app = app(Some(Fake::default()), Ok(()));
        assert_eq!(
            get(app, "/readyz").await,
            (StatusCode::OK, "ready\n".into())
        );
    }

    #[tokio::test]
    async fn readyz_shows_the_routes_paused_fleet_wide_and_stays_ready() {
        let probes = Probes::builder().build();
        assert!(probes.set(Fake::default()));
        let (controls, sender) = Controls::manual();
        assert!(probes.attach_controls(controls));
        assert_eq!(
            get(probes.router(), "/readyz").await,
            (StatusCode::OK, "ready\n".into()),
            "nothing paused"
        );
        sender.pause(worker_core::control::Pause {
            topic: "sms".to_owned(),
            until: None,
            reason: "provider\noutage".to_owned(),
            by: "ops".to_owned(),
            at: SystemTime::now(),
            probe: None,
        });
        let (status, body) = get(probes.router(), "/readyz").await;
        assert_eq!(status, StatusCode::OK, "a paused route is information");
        assert_eq!(
            body,
            "ready\npaused fleet-wide: sms (until resumed; \"provider\\noutage\" by \"ops\")\n",
            "one line per pause, its text escaped"
        );
        sender.resume("sms");
        assert_eq!(
            get(probes.router(), "/readyz").await,
            (StatusCode::OK, "ready\n".into())
        );
        for n in 0..READYZ_PAUSES + 5 {
            sender.pause(worker_core::control::Pause {
                topic: format!("t{n:02}"),
                until: None,
                reason: "x".repeat(256),
                by: "ops".to_owned(),
                at: SystemTime::now(),
                probe: None,
            });
        }
        let (status, body) = get(probes.router(), "/readyz").await;
        assert_eq!(status, StatusCode::OK);
        let lines: Vec<&str> = body.lines().collect();
        assert_eq!(lines.len(), 1 + READYZ_PAUSES + 1, "{body}");
        assert_eq!(
            lines.last(),
            Some(&"paused fleet-wide: 5 more routes (share-worker status lists them)")
        );
    }

    #[tokio::test]
    async fn metrics_are_prometheus_text() {
        let request = Request::get("/metrics")
            .body(Body::empty())
            .expect("a request");
        let (status, _, content_type) = call(app(None, Ok(())), request).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type.as_deref(), Some("text/plain; version=0.0.4"));
    }

    #[tokio::test]
    async fn unknown_paths_wrong_methods_and_bodies_are_refused() {
        let app = app(Some(Fake::default()), Ok(()));
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
