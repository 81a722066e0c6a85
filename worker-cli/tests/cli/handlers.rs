//! The exec and http handlers, and replaying what they dead-lettered.

use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;

use crate::fake_http::{Seen, serve};
use crate::support::*;

#[tokio::test]
async fn exec_accepts_rejects_and_sees_the_record() {
    let scratch = Scratch::new();
    let topic = unique("cli-exec");
    let group = unique("cli-exec-group");
    // Rejects payloads starting with "bad" (exit 3); checks its environment (exit 9 would retry).
    let script = r#"payload=$(cat); [ "$SHARE_WORKER_TOPIC" = "$EXPECTED_TOPIC" ] || exit 9; [ -n "$SHARE_WORKER_OFFSET" ] || exit 9; case "$payload" in bad*) exit 3;; esac; exit 0"#;
    let route = format!(
        "handler = \"exec\"\ncommand = [\"sh\", \"-c\", '''EXPECTED_TOPIC={topic}; {script}''']\nreject-exit-codes = [3]\ntimeout = \"10s\""
    );
    let cfg = scratch.write("worker.toml", &config(&group, &topic, &route));
    let lines = ["ok-1", "bad-1", "ok-2", "ok-3", "bad-2", "ok-4"];
    let stats = setup_produce_run(&scratch, &cfg, &topic, &lines).await;
    assert_eq!(count(&stats, "accepted"), 4, "{stats}");
    assert_eq!(count(&stats, "rejected"), 2, "{stats}");
    assert_eq!(
        count(&stats, "dlq"),
        2,
        "the rejects went to {topic}.dlq: {stats}"
    );
    assert_eq!(count(&stats, "released"), 0, "{stats}");

    // The dead letters go back to their topic: a dry run first, then for real.
    let cfg = cfg.to_str().unwrap();
    let dlq = format!("{topic}.dlq");
    let replay = ["dlq", "replay", "--config", cfg, "--topic", &dlq];
    let out = share_worker(
        &[&replay[..], &["--reason", "rejected", "--dry-run"]].concat(),
        &[],
    )
    .await;
    assert_ok(&out, "dlq replay --dry-run");
    assert!(
        text(&out.stdout).contains("would replay 2, skipped 0"),
        "{}",
        text(&out.stdout)
    );
    let out = share_worker(&[&replay[..], &["--reason", "rejected"]].concat(), &[]).await;
    assert_ok(&out, "dlq replay");
    assert!(
        text(&out.stdout).contains("replayed 2, skipped 0 (")
            && text(&out.stdout).contains("refused 0, already replayed 0, failed 0"),
        "{}",
        text(&out.stdout)
    );
    let again = run_until_idle(&scratch, cfg).await;
    assert_eq!(
        count(&again, "rejected"),
        2,
        "the replayed records came back: {again}"
    );
    assert_eq!(count(&again, "accepted"), 0, "{again}");
}

#[tokio::test]
async fn http_accepts_2xx_retries_429_and_rejects_400() {
    let scratch = Scratch::new();
    let topic = unique("cli-http");
    let group = unique("cli-http-group");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let addr = listener.local_addr().expect("an address");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let server = tokio::spawn(serve(listener, seen.clone()));
    let route = format!("handler = \"http\"\nurl = \"http://{addr}/send\"\ntimeout = \"5s\"");
    let cfg = scratch.write("worker.toml", &config(&group, &topic, &route));
    let lines = ["ok-1", "slow-1", "bad-1", "ok-2"];
    let stats = setup_produce_run(&scratch, &cfg, &topic, &lines).await;
    server.abort();
    assert_eq!(count(&stats, "accepted"), 3, "{stats}");
    assert_eq!(count(&stats, "rejected"), 1, "{stats}");
    assert_eq!(count(&stats, "dlq"), 1, "{stats}");
    assert_eq!(count(&stats, "released"), 1, "the 429 was retried: {stats}");
    let seen = seen.lock().expect("the seen lock");
    let slow: Vec<_> = seen
        .requests
        .iter()
        .filter(|(b, _)| b == "slow-1")
        .collect();
    assert_eq!(slow.len(), 2, "{seen:?}");
    assert_eq!(
        slow[0].1, slow[1].1,
        "the same idempotency key on the retry"
    );
    assert!(slow[0].1.starts_with(&format!("{topic}-")), "{seen:?}");
}

/// An http route whose URL carries a password, a secret path and a query token, to a closed
/// port: every attempt fails, the record is dead-lettered, and neither the letter's headers nor
/// the worker's log (at debug) holds any of the secrets.
#[tokio::test]
async fn http_failures_name_the_url_without_its_secrets() {
    let scratch = Scratch::new();
    let topic = unique("cli-http-secret");
    let group = unique("cli-http-secret-group");
    let port = reserve_port();
    let route = format!(
        "handler = \"http\"\nurl = \"http://hook-user:pw-s3cret@127.0.0.1:{port}/hook/k3y-path?token=t0k3n\"\ntimeout = \"2s\""
    );
    let cfg = scratch.write("worker.toml", &config(&group, &topic, &route));
    let cfg = cfg.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, cfg, &topic, 1, &["job-1"], &[]).await;
    let (stats, log) = run_until_idle_logged(&scratch, cfg, &[("RUST_LOG", "debug")]).await;
    assert_eq!(count(&stats, "dlq"), 1, "{stats}");
    let letter = &read_headers(&format!("{topic}.dlq"), 1).await[0];
    let error = header_value(letter, "share.dlq.error").expect("a share.dlq.error header");
    assert!(
        error.starts_with(&format!("http://127.0.0.1:{port}/hook/…: request failed")),
        "{error}"
    );
    assert!(log.contains(&format!("127.0.0.1:{port}/hook/…")), "{log}");
    for secret in ["hook-user", "pw-s3cret", "k3y-path", "t0k3n"] {
        for (key, value) in letter {
            assert!(!text(value).contains(secret), "{secret} in {key}: {error}");
        }
        assert!(!log.contains(secret), "{secret} in the log: {log}");
    }
}
