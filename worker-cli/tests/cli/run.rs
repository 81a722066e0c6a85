//! `run`: processing until idle, and the delivery limit reached by dying workers.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::support::*;

#[tokio::test]
async fn noop_processes_everything_produced_then_exits_when_idle() {
    let scratch = Scratch::new();
    let topic = unique("cli-noop");
    let group = unique("cli-noop-group");
    let cfg = scratch.write(
        "worker.toml",
        &config(&group, &topic, "handler = \"noop\"\ndelay = \"1ms\""),
    );
    let out = share_worker(&["setup", "--config", cfg.to_str().unwrap()], &[]).await;
    assert_ok(&out, "setup");
    let out = share_worker(
        &[
            "produce",
            "--bootstrap",
            &bootstrap(),
            "--topic",
            &topic,
            "--count",
            "300",
            "--size",
            "64",
        ],
        &[],
    )
    .await;
    assert_ok(&out, "produce");
    assert!(
        text(&out.stdout).contains("records/s"),
        "{}",
        text(&out.stdout)
    );
    let stats = run_until_idle(&scratch, cfg.to_str().unwrap()).await;
    assert_eq!(count(&stats, "accepted"), 300, "{stats}");
    assert_eq!(count(&stats, "processed"), 300, "{stats}");
    for key in ["released", "rejected", "dlq", "renewed", "ack_failures"] {
        assert_eq!(count(&stats, key), 0, "{key}: {stats}");
    }
    assert!(
        stats["duration_s"].as_f64().is_some_and(|d| d > 0.0),
        "{stats}"
    );
}

/// A record whose worker is killed (SIGKILL) in the middle of its handler on every delivery reaches
/// the group's delivery-count limit. It must end in the dead-letter topic with reason
/// `delivery_limit`, its handler not run again, and never in the broker's silent archive.
#[tokio::test]
async fn a_record_whose_worker_keeps_dying_ends_in_the_dlq() {
    use rdkafka::Message;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Headers;

    let scratch = Scratch::new();
    let topic = unique("cli-kill");
    let group = unique("cli-kill-group");
    let started = scratch.0.join("started");
    let route = format!(
        "handler = \"exec\"\ncommand = [\"sh\", \"-c\", '''echo started >> {}; exec sleep 100''']\ntimeout = \"5m\"",
        started.display()
    );
    let cfg_path = scratch.write("worker.toml", &config(&group, &topic, &route));
    let cfg = cfg_path.to_str().expect("utf-8 path");
    setup_and_produce(&scratch, cfg, &topic, 1, &["stuck"], &[]).await;

    let admin = worker_core::kafka::Admin::connect(bootstrap())
        .await
        .expect("the broker");
    let limit = admin
        .delivery_count_limit(&group)
        .await
        .expect("the delivery limit") as usize;
    for delivery in 1..limit {
        let mut worker = Command::new(BIN)
            .args(["run", "--config", cfg])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting share-worker");
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while lines_in(&started) < delivery {
            assert!(
                tokio::time::Instant::now() < deadline,
                "delivery {delivery} never reached the handler"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        worker.kill().await.expect("SIGKILL share-worker");
    }

    // The last delivery the broker allows goes straight to the dead-letter topic.
    let stats = run_until_idle(&scratch, cfg).await;
    assert_eq!(count(&stats, "dlq"), 1, "{stats}");
    assert_eq!(count(&stats, "accepted"), 0, "{stats}");
    assert_eq!(
        lines_in(&started),
        limit - 1,
        "the handler never ran on the last delivery"
    );

    let reader: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("cli-kill-reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("a DLQ reader");
    reader
        .subscribe(&[&format!("{topic}.dlq")])
        .expect("subscribing to the DLQ");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let letter = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no dead letter in {topic}.dlq"
        );
        if let Some(message) = reader.poll(Duration::from_millis(200)) {
            break message.expect("a dead letter").detach();
        }
    };
    let header = |key: &str| {
        letter
            .headers()
            .and_then(|h| h.iter().find(|h| h.key == key).and_then(|h| h.value))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    assert_eq!(letter.payload(), Some(&b"stuck"[..]));
    assert_eq!(
        header("share.dlq.reason").as_deref(),
        Some("delivery_limit")
    );
    assert_eq!(header("share.dlq.delivery.count"), Some(limit.to_string()));
    assert_eq!(header("share.dlq.topic"), Some(topic.clone()));
}

/// A group id that belongs to a classic consumer group can never be joined as a share group:
/// `run` stops at once with a non-zero exit and one line naming the group, the coordinator and
/// the broker's error, instead of retrying forever while `/healthz` says alive.
#[tokio::test]
async fn a_group_id_of_a_classic_group_stops_run_with_a_clear_error() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    let scratch = Scratch::new();
    let topic = unique("cli-classic");
    let group = unique("cli-classic-group");
    let cfg = scratch.write("worker.toml", &config(&group, &topic, "handler = \"noop\""));
    let cfg = cfg.to_str().expect("utf-8 path");
    assert_ok(
        &share_worker(&["setup", "--config", cfg], &[]).await,
        "setup",
    );
    // A classic consumer group with that id: commit an offset in its name.
    let (topic_c, group_c) = (topic.clone(), group.clone());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .set("group.id", &group_c)
            .set("enable.auto.commit", "false")
            .create()
            .expect("a classic consumer");
        let mut offsets = rdkafka::TopicPartitionList::new();
        offsets
            .add_partition_offset(&topic_c, 0, rdkafka::Offset::Offset(0))
            .expect("an offset");
        consumer
            .commit(&offsets, CommitMode::Sync)
            .expect("committing as a classic group");
    })
    .await
    .expect("the classic consumer");

    let started = std::time::Instant::now();
    let out = share_worker(&["run", "--config", cfg], &[]).await;
    let took = started.elapsed();
    assert!(
        !out.status.success(),
        "run must fail: {}",
        text(&out.stderr)
    );
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let stderr = text(&out.stderr);
    let last = stderr
        .lines()
        .rfind(|l| l.starts_with("share-worker: error"))
        .unwrap_or_else(|| panic!("no error line in {stderr}"));
    for part in [group.as_str(), "classic", "127.0.0.1", "GROUP_ID_NOT_FOUND"] {
        assert!(last.contains(part), "{part:?} in {last}");
    }
}

/// A run with retries reports how it goes in status lines (every `telemetry.report-every`) and
/// its summary, never one INFO line per retried record (those are DEBUG).
#[tokio::test]
async fn a_run_reports_status_lines_and_logs_retries_only_at_debug() {
    let scratch = Scratch::new();
    let topic = unique("cli-report");
    let group = unique("cli-report-group");
    let route = "handler = \"exec\"\ncommand = [\"sh\", \"-c\", \"sleep 0.2; [ \\\"$SHARE_WORKER_DELIVERY_COUNT\\\" -gt 1 ]\"]";
    let text_cfg = config(&group, &topic, route)
        .replace("[dlq]", "[telemetry]\nreport-every = \"300ms\"\n\n[dlq]");
    let cfg = scratch.write("worker.toml", &text_cfg);
    let cfg = cfg.to_str().unwrap();
    let lines: Vec<String> = (0..20).map(|i| format!("job-{i}")).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    setup_and_produce(&scratch, cfg, &topic, 2, &lines, &[]).await;
    let stats = scratch.0.join("stats.json");
    let out = share_worker(
        &[
            "run",
            "--config",
            cfg,
            "--exit-when-idle",
            "3s",
            "--stats-json",
            stats.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_ok(&out, "run");
    let stderr = text(&out.stderr);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).expect("stats")).expect("JSON");
    assert_eq!(count(&json, "retried"), 20, "{json}");
    assert_eq!(count(&json, "accepted"), 20, "{json}");
    let status: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("status: processed"))
        .collect();
    assert!(!status.is_empty(), "no status line: {stderr}");
    for field in [
        "accepted",
        "retried",
        "dead-lettered",
        "in flight",
        "held",
        "records/s",
        "lag",
    ] {
        assert!(status[0].contains(field), "{field} in {}", status[0]);
    }
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("status: processed 40, accepted 20, retried 20")),
        "the last status line has the final counts: {stderr}"
    );
    assert!(
        !stderr
            .lines()
            .any(|l| l.contains(&format!("record={topic}/"))),
        "a line per record at INFO: {stderr}"
    );
    assert!(stderr.contains("share-worker: processed 40"), "{stderr}");
    assert!(
        !stderr.contains("\u{1b}["),
        "no colours when stderr is no terminal"
    );
}
