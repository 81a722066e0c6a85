//! The probes mounted in an application's own router, over a real worker on `MemoryBroker`.

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use tower::ServiceExt;
use worker_core::runtime::Worker;
use worker_core::telemetry::METER_NAME;
use worker_core::testing::MemoryBroker;
use worker_core::{Job, Outcome};
use worker_ops::Probes;

async fn get_text(app: &Router, path: &str) -> (StatusCode, String) {
    let request = Request::get(path).body(Body::empty()).expect("a request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("a body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Polls `path` until its answer satisfies `done`, for at most 10 s.
async fn wait_for(
    app: &Router,
    path: &str,
    done: impl Fn(&(StatusCode, String)) -> bool,
) -> (StatusCode, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = get_text(app, path).await;
        if done(&answer) || tokio::time::Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_probes_report_on_a_worker_from_inside_the_applications_router() {
    let registry = prometheus::Registry::new();
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .without_target_info()
        .build()
        .expect("a Prometheus exporter");
    let meters = SdkMeterProvider::builder().with_reader(exporter).build();
    let probes = Probes::builder()
        .metrics(registry)
        .readiness_check(|| Ok(()))
        .build();
    let app = Router::new()
        .route("/", get(|| async { "the application" }))
        .merge(probes.router());

    // Served before the worker exists: alive, not ready; the application's own routes untouched.
    assert_eq!(
        get_text(&app, "/").await,
        (StatusCode::OK, "the application".to_owned())
    );
    assert_eq!(
        get_text(&app, "/healthz").await,
        (StatusCode::OK, "ok\n".into())
    );
    assert_eq!(
        get_text(&app, "/readyz").await,
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "joining the share group\n".into()
        )
    );

    let broker = MemoryBroker::new();
    for n in 0..5 {
        broker.produce("sms", format!("{n}"));
    }
    let handler = tower::service_fn(|_job: Job| async { Ok::<_, Infallible>(Outcome::Accept) });
    let worker = Worker::builder(broker.member("worker-1"))
        .route("sms", handler)
        .meter(meters.meter(METER_NAME))
        .build()
        .expect("a worker");
    assert!(probes.attach(worker.health()));
    let stop = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());

    let ready = wait_for(&app, "/readyz", |(status, _)| *status == StatusCode::OK).await;
    assert_eq!(ready, (StatusCode::OK, "ready\n".into()));
    let (status, metrics) = wait_for(&app, "/metrics", |(_, text)| {
        text.contains("share_worker_records_completed_total")
    })
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        metrics.contains("share_worker_records_completed_total"),
        "{metrics}"
    );

    stop.shutdown();
    let summary = running
        .await
        .expect("the worker task")
        .expect("a clean run");
    assert_eq!(summary.accepted, 5);
    assert_eq!(
        get_text(&app, "/readyz").await,
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".into())
    );
}

#[tokio::test]
async fn a_readiness_check_of_the_application_holds_readyz() {
    let probes = Probes::builder()
        .readiness_check(|| Err("the SMS provider's credentials are not loaded".to_owned()))
        .build();
    let app = probes.router();
    let broker = MemoryBroker::new();
    let handler = tower::service_fn(|_job: Job| async { Ok::<_, Infallible>(Outcome::Accept) });
    let worker = Worker::builder(broker.member("worker-1"))
        .route("sms", handler)
        .build()
        .expect("a worker");
    assert!(probes.attach(worker.health()));
    assert!(
        !probes.attach(worker.health()),
        "only the first worker counts"
    );
    let stop = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    let answer = wait_for(&app, "/readyz", |(_, body)| body.contains("credentials")).await;
    assert_eq!(
        answer,
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the SMS provider's credentials are not loaded\n".into()
        )
    );
    stop.shutdown();
    running
        .await
        .expect("the worker task")
        .expect("a clean run");
}
