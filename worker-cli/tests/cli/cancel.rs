//! Cancelling a job through the group's control topic, against the real broker: a job enqueued
//! 30 s ahead and cancelled never runs — across a restart of the worker — and is acknowledged
//! without running when it comes due; a cancellation of an id nobody uses changes nothing.

use std::time::Duration;

use crate::fake_http::Endpoint;
use crate::support::*;

const JOB: &str = "appointment-42:reminder";

#[tokio::test]
async fn a_cancelled_job_never_runs_across_a_restart_and_an_unknown_id_is_harmless() {
    let scratch = Scratch::new();
    let topic = unique("cancel");
    let group = unique("cancel-group");
    let endpoint = Endpoint::start().await;
    let cfg = scratch.write(
        "worker.toml",
        &control_config(&group, &topic, &endpoint.route()),
    );
    let cfg = cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg, "--partitions", "1"], &[]).await,
        "setup",
    );
    // One job per `produce`, its payload a line of a file.
    let produce = async |payload: &str, extra: &[&str]| {
        let file = scratch.write(&format!("{payload}.txt"), &format!("{payload}\n"));
        let mut args = vec!["produce", "--config", cfg, "--topic", &topic];
        args.extend(["--file", file.to_str().expect("utf-8 path")]);
        args.extend(extra);
        let out = share_worker(&args, &[]).await;
        assert_ok(&out, payload);
        text(&out.stdout)
    };
    let said = produce("ok-later", &["--delay", "30s", "--job-id", JOB]).await;
    assert!(said.contains(&format!("job id {JOB}")), "{said}");
    produce("ok-now", &[]).await;
    for id in [JOB, "nobody-has-this-id"] {
        let out = share_worker(
            &[
                "cancel",
                "--config",
                cfg,
                "--job-id",
                id,
                "--reason",
                "appointment cancelled",
            ],
            &[],
        )
        .await;
        assert_ok(&out, "cancel");
        assert!(
            text(&out.stdout).contains(&format!("job {id} cancelled for group {group}")),
            "{}",
            text(&out.stdout)
        );
    }
    let out = share_worker(&["cancel", "--config", cfg, "--job-id", "a/b"], &[]).await;
    assert!(!out.status.success(), "an invalid job id is refused");

    // The first worker runs the job for now and holds the reminder until it is due; it stops
    // before then.
    let first_log = scratch.0.join("first.log");
    let first = spawn(&["run", "--config", cfg], &first_log);
    tests::wait_for("the job for now", Duration::from_secs(60), async || {
        Ok(endpoint.bodies().contains(&"ok-now".to_owned()))
    })
    .await
    .expect("the worker runs jobs");
    wait_logged(
        &[&first_log],
        "control: job cancelled",
        Duration::from_secs(10),
    )
    .await;
    assert!(terminate(first).await.success(), "a clean stop");

    // A new worker reads the cancellation before its first fetch and acknowledges the reminder
    // without running it when it comes due.
    let stats = scratch.0.join("stats.json");
    let second_log = scratch.0.join("second.log");
    let second = spawn(
        &[
            "run",
            "--config",
            cfg,
            "--stats-json",
            stats.to_str().expect("utf-8 path"),
        ],
        &second_log,
    );
    wait_logged(
        &[&second_log],
        "job cancelled: acknowledged without running",
        Duration::from_secs(60),
    )
    .await;
    assert!(terminate(second).await.success(), "a clean stop");
    let stats: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&stats).expect("the stats file")).expect("json");
    assert_eq!(stats["cancelled"], 1, "{stats}");
    assert_eq!(endpoint.bodies(), ["ok-now"], "the cancelled job never ran");
    let out = share_worker(&["status", "--config", cfg, "--json"], &[]).await;
    assert_ok(&out, "status");
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    assert_eq!(status["cancelled_jobs"], 2, "{status}");
    tests::wait_for(
        "the group's lag to reach 0: the cancelled job was acknowledged",
        Duration::from_secs(10),
        async || {
            let out = share_worker(&["status", "--config", cfg, "--json"], &[]).await;
            let status: serde_json::Value = serde_json::from_slice(&out.stdout)?;
            Ok(status["offsets"]
                .as_array()
                .is_some_and(|parts| parts.iter().all(|p| p["lag"] == 0)))
        },
    )
    .await
    .expect("nothing left");
}
