//! Lanes in the binary: `priority` on `[[route]]`, and the dashboard's lanes table.

use std::time::Duration;

use crate::support::*;

/// The cells of the row of `topic` in the overview's lanes table, or `None` before it shows.
fn lane_row(overview: &str, topic: &str) -> Option<Vec<String>> {
    let table = overview.split("<table id=\"lanes\">").nth(1)?;
    let table = table.split("</table>").next()?;
    let row = table
        .split("<tr>")
        .find(|row| row.contains(&format!("<td>{topic}</td>")))?;
    Some(
        row.split("<td")
            .skip(1)
            .filter_map(|cell| cell.split_once('>'))
            .map(|(_, rest)| rest.split("</td>").next().unwrap_or("").to_owned())
            .collect(),
    )
}

/// Two `[[route]]`s that share a handler as lanes (priority 0 and 1): the run handles both
/// topics, and the worker's dashboard lists each lane with its priority, its lag and its rate.
#[tokio::test]
async fn lanes_are_configured_per_route_and_shown_on_the_dashboard() {
    let scratch = Scratch::new();
    let marketing = unique("lane-marketing");
    let otp = unique("lane-otp");
    let group = unique("lanes-group");
    let port = reserve_port();
    let lane =
        |priority: u8| format!("handler = \"noop\"\ndelay = \"20ms\"\npriority = {priority}");
    let text = config(&group, &marketing, &lane(1)).replace(
        "[dlq]",
        &format!(
            "[telemetry]\nlisten = \"127.0.0.1:{port}\"\nui = true\n\n[ui]\nsample-every = \"500ms\"\n\n[dlq]"
        ),
    ) + &format!("\n[[route]]\ntopic = \"{otp}\"\n{}\n", lane(0));
    let cfg = scratch.write("worker.toml", &text);
    let cfg = cfg.to_str().expect("utf-8 path");
    let blast: Vec<String> = (0..2_000).map(|i| format!("marketing-{i}")).collect();
    let blast: Vec<&str> = blast.iter().map(String::as_str).collect();
    setup_and_produce(&scratch, cfg, &marketing, 1, &blast, &[]).await;

    let log = scratch.0.join("run.log");
    let mut run = spawn(&["run", "--config", cfg, "--exit-when-idle", "4s"], &log);
    let overview = format!("http://127.0.0.1:{port}/ui/live/overview");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (marketing_row, otp_row) = loop {
        let page = get(&overview)
            .await
            .map(|(_, body)| body)
            .unwrap_or_default();
        let rows = (lane_row(&page, &marketing), lane_row(&page, &otp));
        let rate = |row: &Option<Vec<String>>| {
            row.as_ref()
                .and_then(|cells| cells.get(4)?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        if rate(&rows.0) > 0.0
            && let (Some(marketing_row), Some(otp_row)) = rows
        {
            break (marketing_row, otp_row);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dashboard never showed the marketing lane running; last page: {page}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        marketing_row[..3],
        [marketing.clone(), "1".into(), "–".into()]
    );
    assert_eq!(otp_row[..3], [otp.clone(), "0".into(), "–".into()]);
    // 8 slots over 2 routes, each keeping a reserve of 1, and the password lane idle: each may
    // hold 7.
    assert_eq!((marketing_row[5].as_str(), otp_row[5].as_str()), ("7", "7"));

    let passwords: Vec<String> = (0..100).map(|i| format!("otp-{i}")).collect();
    let jobs = scratch.write("otp.txt", &passwords.join("\n"));
    let bootstrap = bootstrap();
    let out = share_worker(
        &[
            "produce",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &otp,
            "--file",
            jobs.to_str().expect("utf-8 path"),
        ],
        &[],
    )
    .await;
    assert_ok(&out, "produce");
    let status = tokio::time::timeout(Duration::from_secs(120), run.wait())
        .await
        .expect("the run ends once both lanes are idle")
        .expect("its exit status");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "{logged}");
    assert!(
        logged.contains("share-worker: processed 2100 in"),
        "every record of both lanes handled: {logged}"
    );
}
