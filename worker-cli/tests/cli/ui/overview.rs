//! The overview of a worker's own dashboard (`telemetry.ui`) during a run.

use serde::Deserialize;

use crate::support::*;
use crate::support::{reserve_port, spawn};
use crate::ui::browser::{Chromium, screenshot, wait_listening, wait_until};

#[derive(Debug, Deserialize)]
struct Shown {
    members: Vec<String>,
    lag: Option<String>,
    refreshed: Option<String>,
}

const SHOWN: &str = r#"JSON.stringify({
    members: [...document.querySelectorAll('#members code.member-id')].map(e => e.textContent),
    lag: document.querySelector('#total-lag')?.textContent ?? null,
    refreshed: document.querySelector('#live')?.getAttribute('data-refreshed') ?? null,
})"#;

/// The page, loaded once, refreshes itself: it shows the worker as the group's member (the
/// member id `share-worker status` reports) and a lag that is above 0 while the run works
/// through its backlog and falls to 0.
#[tokio::test]
async fn the_overview_shows_the_members_and_a_lag_that_falls_to_zero_during_a_run() {
    let scratch = Scratch::new();
    let topic = unique("ui-overview");
    let group = unique("ui-overview-group");
    let port = reserve_port();
    let text = config(&group, &topic, "handler = \"noop\"\ndelay = \"25ms\"")
        .replace("concurrency = 8", "concurrency = 2")
        .replace(
            "[dlq]",
            &format!(
                "[telemetry]\nlisten = \"127.0.0.1:{port}\"\nui = true\nlag-interval = \"500ms\"\n\n[ui]\nsample-every = \"500ms\"\n\n[dlq]"
            ),
        );
    let cfg = scratch.write("worker.toml", &text);
    let cfg = cfg.to_str().expect("utf-8 path");
    let lines: Vec<String> = (0..300).map(|i| format!("job-{i}")).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    setup_and_produce(&scratch, cfg, &topic, 2, &lines, &[]).await;

    let log = scratch.0.join("run.log");
    let mut run = spawn(&["run", "--config", cfg, "--exit-when-idle", "4s"], &log);
    let base = format!("http://127.0.0.1:{port}");
    wait_listening(&format!("{base}/healthz")).await;
    let browser = Chromium::launch().await;
    let page = browser.open(&format!("{base}/ui")).await;

    let mut most = 0i64;
    let shown: Shown = wait_until(
        &page,
        "a lag above 0, then 0",
        &format!("JSON.parse({SHOWN})"),
        |s: &Shown| {
            let lag = s.lag.as_deref().and_then(|l| l.parse::<i64>().ok());
            most = most.max(lag.unwrap_or(0));
            most > 0 && lag == Some(0) && !s.members.is_empty()
        },
    )
    .await;
    assert!(
        shown.refreshed.is_some(),
        "the numbers came from the page's own refresh"
    );
    let status = share_worker(&["status", "--config", cfg, "--json"], &[]).await;
    assert_ok(&status, "status");
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    let members: Vec<String> = status["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["member_id"].as_str().expect("a member id").to_owned())
        .collect();
    assert_eq!(shown.members, members, "the page's members are the group's");
    let partitions: usize = crate::ui::browser::eval(
        &page,
        "document.querySelectorAll('#partitions td.lag').length",
    )
    .await;
    assert_eq!(partitions, 2, "one lag cell per partition");
    let charts: usize = crate::ui::browser::eval(
        &page,
        "document.querySelectorAll('figure.chart polyline').length",
    )
    .await;
    assert!(charts >= 3, "lag, rates and latency lines: {charts}");
    screenshot(&page, "overview").await;

    let status = tokio::time::timeout(DEADLINE, run.wait())
        .await
        .expect("the run ends once idle")
        .expect("the run's exit status");
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}
