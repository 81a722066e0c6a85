//! Pausing and resuming a route, and cancelling a job, from the dashboard: the command reaches the
//! group's control topic (what every worker follows, and what `status` reads back), the overview
//! shows it, and each action leaves an audit line.

use crate::support::*;
use crate::ui::browser::{
    Chromium, click_and_wait, eval, fill, screenshot, wait_listening, wait_until,
};

#[tokio::test]
async fn a_route_is_paused_and_resumed_from_the_dashboard() {
    let scratch = Scratch::new();
    let topic = unique("ui-pause");
    let group = unique("ui-pause-group");
    let port = reserve_port();
    let toml = config(&group, &topic, "handler = \"noop\"").replace(
        "[dlq]",
        &format!(
            "[control]\n\n[ui]\nlisten = \"127.0.0.1:{port}\"\nallow-actions = true\nsample-every = \"500ms\"\n\n[dlq]"
        ),
    );
    let cfg = scratch.write("worker.toml", &toml);
    let cfg = cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg], &[]).await,
        "setup",
    );
    let log = scratch.0.join("ui.log");
    let _ui = spawn(&["ui", "--config", cfg], &log);
    let base = format!("http://127.0.0.1:{port}");
    wait_listening(&format!("{base}/ui/login")).await;
    let browser = Chromium::launch().await;
    let page = browser.open(&format!("{base}/ui")).await;
    let state = format!(
        "document.querySelector('#route-states tr[data-topic=\"{topic}\"] td.state')?.textContent ?? ''"
    );

    wait_until(&page, "the route running", &state, |s: &String| {
        s == "running"
    })
    .await;
    click_and_wait(&page, "#route-states a.pause", "#confirm").await;
    fill(&page, "#reason", "provider outage").await;
    fill(&page, "#for", "10m").await;
    click_and_wait(&page, "#confirm", "#route-states").await;
    let paused: String = wait_until(&page, "the route paused", &state, |s: &String| {
        s.starts_with("paused until")
    })
    .await;
    assert!(
        paused.contains("provider outage") && paused.contains("(by dashboard 127.0.0.1:"),
        "{paused}"
    );
    screenshot(&page, "route-paused").await;
    let out = share_worker(&["status", "--config", cfg], &[]).await;
    assert_ok(&out, "status");
    let status = text(&out.stdout);
    assert!(
        status.contains(&topic) && status.contains("provider outage"),
        "the pause is on the control topic: {status}"
    );

    click_and_wait(&page, "#route-states button.resume", "#route-states").await;
    wait_until(&page, "the route running again", &state, |s: &String| {
        s == "running"
    })
    .await;
    let out = share_worker(&["status", "--config", cfg], &[]).await;
    assert!(text(&out.stdout).contains("no route is paused"));

    // A job cancelled from the dashboard is a command on the same topic.
    click_and_wait(&page, "#cancellations a.cancel-job", "#confirm").await;
    fill(&page, "#job-id", "appointment-42:reminder").await;
    fill(&page, "#reason", "appointment cancelled").await;
    click_and_wait(&page, "#confirm", "p.card").await;
    let said: String = eval(&page, "document.querySelector('p.card').textContent").await;
    assert!(
        said.starts_with("job appointment-42:reminder is cancelled for the whole group until "),
        "{said}"
    );
    screenshot(&page, "job-cancelled").await;
    let out = share_worker(&["status", "--config", cfg, "--json"], &[]).await;
    assert_ok(&out, "status");
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status json");
    assert_eq!(status["cancelled_jobs"], 1, "{status}");
    let page = browser.open(&format!("{base}/ui")).await;
    wait_until(
        &page,
        "the cancellation on the overview",
        "document.querySelector('#cancellations')?.textContent ?? ''",
        |s: &String| s.starts_with("1 job cancellations in force"),
    )
    .await;

    let audit = std::fs::read_to_string(&log).expect("the dashboard's log");
    assert!(
        audit.lines().any(|l| l.contains("share_worker::audit")
            && l.contains("dashboard job action done")
            && l.contains("appointment-42:reminder")),
        "the cancellation audited: {audit}"
    );
    for action in ["pause", "resume"] {
        assert!(
            audit.lines().any(|l| l.contains("share_worker::audit")
                && l.contains("dashboard route action done")
                && l.contains(&format!("\"{action}\""))
                && l.contains(&topic)),
            "{action} audited: {audit}"
        );
    }
}
