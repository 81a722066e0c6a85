//! The dashboard mounted in an application's own axum router (`worker_cli::dashboard`): its
//! pages next to the application's routes, its access rules, and the group's numbers from the
//! real broker.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use reqwest::StatusCode;
use worker_cli::config::Config;

use crate::support::*;

/// 32 characters: shorter tokens are refused.
const TOKEN: &str = "mounted-token-5b1e-0123456789abc";

#[tokio::test]
async fn the_dashboard_mounts_in_an_applications_router_and_keeps_its_access_rules() {
    let scratch = Scratch::new();
    let topic = unique("mounted");
    let group = unique("mounted-group");
    let path = scratch.write(
        "worker.toml",
        &config(&group, &topic, "handler = \"noop\"").replace(
            "[dlq]",
            &format!("[ui]\ntoken = \"{TOKEN}\"\nsample-every = \"500ms\"\n\n[dlq]"),
        ),
    );
    let cfg = path.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg], &[]).await,
        "setup",
    );
    let producer = tests::producer(&[]).expect("a producer");
    tests::produce(&producer, &topic, None, ["a", "b", "c", "d", "e"])
        .await
        .expect("producing the backlog");

    let config = Config::load(&path).expect("the config loads");
    let listen = SocketAddr::from(([127, 0, 0, 1], reserve_port()));
    let app = Router::new()
        .route("/app", get(|| async { "the application's own page" }))
        .merge(
            worker_cli::dashboard(config, listen, false)
                .await
                .expect("the dashboard starts"),
        );
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .expect("listening");
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    let base = format!("http://{listen}");
    let client = reqwest::Client::new();
    let get = |path: &str, token: bool| {
        let request = client.get(format!("{base}{path}"));
        let request = if token {
            request.bearer_auth(TOKEN)
        } else {
            request
        };
        async move {
            let response = request.send().await.expect("a response");
            let status = response.status();
            (status, response.text().await.unwrap_or_default())
        }
    };

    let (status, body) = get("/app", false).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "the application's own page");
    let (status, body) = get("/ui", false).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the token guards the pages"
    );
    assert!(body.contains("needs its token"), "{body}");

    let (status, body) = get("/ui", true).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains(&group), "the overview names the group");
    // A worker of the group drains the backlog: the overview shows it as the sampler reads the
    // group from the broker.
    let _worker = spawn(&["run", "--config", cfg], &scratch.0.join("run.log"));
    tests::wait_for(
        "the overview to show one member and no lag",
        Duration::from_secs(60),
        async || {
            let (_, live) = get("/ui/live/overview", true).await;
            Ok(live.contains(r#"id="member-count">1<"#) && live.contains(r#"id="total-lag">0<"#))
        },
    )
    .await
    .expect("the worker and its drained backlog on the overview");
    let (status, body) = get("/ui/dlq", true).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains(&format!("{topic}.dlq")),
        "the dead-letter topic is listed"
    );

    // Read-only unless `ui.allow-actions`: replay is refused.
    let refused = client
        .post(format!("{base}/ui/dlq/{topic}.dlq/act"))
        .bearer_auth(TOKEN)
        .header("origin", &base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("action=replay&all=1")
        .send()
        .await
        .expect("a response");
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    server.abort();
}
