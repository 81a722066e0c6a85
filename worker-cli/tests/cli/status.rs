//! `status` against Kafka's own ShareGroupCommand.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::support::*;

/// Runs a Kafka tool class through `scripts/kafka.sh tool` within the deadline; its stdout.
async fn kafka_tool(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/kafka.sh");
    let mut command = Command::new("bash");
    command
        .arg(script)
        .arg("tool")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = match tokio::time::timeout(DEADLINE, command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(err)) => panic!("cannot run {script}: {err}"),
        Err(_) => panic!("kafka.sh tool {args:?} did not finish within {DEADLINE:?}"),
    };
    assert_ok(&output, "kafka.sh tool");
    text(&output.stdout)
}

/// The (partition, start offset, lag) rows of a `--describe --offsets` table that `keep` selects,
/// sorted.
fn offset_rows(
    table: &str,
    keep: impl Fn(&std::collections::HashMap<String, String>) -> bool,
) -> Vec<(i64, String, String)> {
    let mut rows: Vec<(i64, String, String)> = parse_table(table, &["GROUP", "TOPIC"])
        .into_iter()
        .filter(|row| keep(row))
        .map(|row| {
            (
                row["PARTITION"].parse().expect("a partition number"),
                row["START-OFFSET"].clone(),
                row["LAG"].clone(),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// The rows of a whitespace-separated table whose header line starts with the columns `first`, as
/// header → cell maps (cells hold no spaces in these tables).
fn parse_table(out: &str, first: &[&str]) -> Vec<std::collections::HashMap<String, String>> {
    let mut lines = out
        .lines()
        .skip_while(|l| !l.split_whitespace().collect::<Vec<_>>().starts_with(first));
    let header: Vec<String> = match lines.next() {
        Some(h) => h.split_whitespace().map(str::to_owned).collect(),
        None => panic!("no table headed {first:?} in:\n{out}"),
    };
    lines
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(cells.len(), header.len(), "row {l:?} under {header:?}");
            header
                .iter()
                .cloned()
                .zip(cells.into_iter().map(str::to_owned))
                .collect()
        })
        .collect()
}

/// `(partition, start offset, lag)` per partition of `topic` in `status --json` (`-` for null).
fn status_offsets(status: &Value, topic: &str) -> Vec<(i64, String, String)> {
    let cell = |v: &Value| match v.as_i64() {
        Some(n) => n.to_string(),
        None => "-".to_owned(),
    };
    let mut rows: Vec<(i64, String, String)> = status["offsets"]
        .as_array()
        .unwrap_or_else(|| panic!("no offsets in {status}"))
        .iter()
        .filter(|o| o["topic"] == topic)
        .map(|o| {
            (
                o["partition"].as_i64().expect("a partition"),
                cell(&o["start_offset"]),
                cell(&o["lag"]),
            )
        })
        .collect();
    rows.sort();
    rows
}

#[tokio::test]
async fn status_matches_kafkas_share_group_command() {
    let scratch = Scratch::new();
    let topic = unique("cli-status");
    let group = unique("cli-status-group");
    let cfg_path = scratch.write(
        "worker.toml",
        &config(&group, &topic, "handler = \"noop\"\ndelay = \"1ms\""),
    );
    let cfg = cfg_path.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg, "--partitions", "2"], &[]).await,
        "setup",
    );
    let produce = |count: &'static str| {
        let bootstrap = bootstrap();
        let topic = topic.clone();
        async move {
            let out = share_worker(
                &[
                    "produce",
                    "--bootstrap",
                    &bootstrap,
                    "--topic",
                    &topic,
                    "--count",
                    count,
                ],
                &[],
            )
            .await;
            assert_ok(&out, "produce");
        }
    };
    // 40 records consumed, then 25 more left waiting: start offsets past 0 and lag on both
    // partitions (keys 0..n spread over both).
    produce("40").await;
    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!(count(&stats, "accepted"), 40, "{stats}");
    produce("25").await;

    // The broker's lag counts the 25 new records once they are in the high watermarks. (The start
    // offset is the persisted share-partition state, which may trail what was acknowledged, so only
    // the lag has a known value; the comparison below is what matters.)
    let status_json = || async {
        let out = share_worker(&["status", "--config", cfg, "--json"], &[]).await;
        assert_ok(&out, "status --json");
        serde_json::from_str::<Value>(&text(&out.stdout)).expect("status JSON")
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let status = status_json().await;
        let rows = status_offsets(&status, &topic);
        let lags: i64 = rows.iter().filter_map(|r| r.2.parse::<i64>().ok()).sum();
        if rows.len() == 2 && rows.iter().all(|r| r.1 != "-") && lags == 25 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "status never showed a lag of 25 over 2 partitions: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Kafka's tool and ours, read back to back, until both see the same settled state.
    let addr = bootstrap();
    let tool = "org.apache.kafka.tools.consumer.group.ShareGroupCommand";
    let (status, theirs) = loop {
        let offsets = kafka_tool(&[
            tool,
            "--bootstrap-server",
            &addr,
            "--describe",
            "--group",
            &group,
            "--offsets",
        ])
        .await;
        let theirs = offset_rows(&offsets, |row| {
            row["GROUP"] == group && row["TOPIC"] == topic
        });
        let status = status_json().await;
        let ours = status_offsets(&status, &topic);
        if ours == theirs {
            break (status, theirs);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "share-worker status {ours:?} vs ShareGroupCommand --offsets {theirs:?}:\n{offsets}"
        );
    };
    assert_eq!(theirs.len(), 2, "{theirs:?}");
    assert_eq!(status["group"], group.as_str(), "{status}");
    assert_eq!(status["members"], serde_json::json!([]), "{status}");

    let state = kafka_tool(&[
        tool,
        "--bootstrap-server",
        &addr,
        "--describe",
        "--group",
        &group,
        "--state",
    ])
    .await;
    let rows = parse_table(&state, &["GROUP", "COORDINATOR"]);
    assert_eq!(rows.len(), 1, "{state}");
    assert_eq!(status["state"], rows[0]["STATE"].as_str(), "{state}");
    assert_eq!(rows[0]["#MEMBERS"], "0", "{state}");

    // The tables name the same numbers.
    let out = share_worker(&["status", "--config", cfg], &[]).await;
    assert_ok(&out, "status");
    let tables = text(&out.stdout);
    let ours = offset_rows(&tables, |_| true);
    assert_eq!(ours, theirs, "{tables}");
    assert!(tables.contains("has no active members"), "{tables}");
}
