//! Periodic jobs in the binary: three `share-worker run` processes of one group, a 10-second
//! `[[cron]]` over two minutes, and the firing process SIGKILLed twice: every tick is fired
//! once, none missed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use rdkafka::Message;
use tokio::process::Child;

use crate::support::*;
use crate::telemetry::{metric, parse_prometheus};

const FIRES: &str = "cron: this worker fires the group's schedules";

/// How many times `log` says its worker became the firer.
fn became_firer(log: &PathBuf) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches(FIRES)
        .count()
}

/// The firings of job `name` on `topic` (read committed): each one's tick and when it was
/// produced (the record's timestamp, set by the firing producer), in milliseconds.
async fn firings(topic: &str, name: &str) -> Vec<(i64, i64)> {
    let prefix = format!("cron:{name}:");
    let records = tests::read_committed_at(&bootstrap(), topic)
        .await
        .unwrap_or_else(|err| panic!("reading {topic}: {err:#}"));
    records
        .iter()
        .map(|record| {
            let id = tests::header(record, "share.job-id").expect("a job id");
            let tick: i64 = id
                .strip_prefix(&prefix)
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("job id {id:?}"));
            (tick, record.timestamp().to_millis().expect("a timestamp"))
        })
        .collect()
}

/// The ticks of job `name` fired on `topic`, with how often each was.
async fn ticks(topic: &str, name: &str) -> BTreeMap<i64, usize> {
    let mut ticks = BTreeMap::new();
    for (tick, _) in firings(topic, name).await {
        *ticks.entry(tick).or_default() += 1;
    }
    ticks
}

/// Waits until one of the living workers (not in `dead`) became the firer more often than
/// `before` says (the counts of [`became_firer`] then), and returns it.
async fn next_firer(logs: &[PathBuf], dead: &[usize], before: &[usize]) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(firer) =
            (0..logs.len()).find(|i| !dead.contains(i) && became_firer(&logs[*i]) > before[*i])
        {
            return firer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no worker took over firing within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How long from now until `ahead_ms` before the next multiple of `every_ms` since the epoch that
/// is at least that far away.
fn until_before_a_tick(every_ms: u64, ahead_ms: u64) -> Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as u64;
    let mut aim = (now / every_ms + 1) * every_ms - ahead_ms;
    if aim <= now {
        aim += every_ms;
    }
    Duration::from_millis(aim - now)
}

/// Waits until `topic` holds `count` more firings than `from`.
async fn more_ticks(topic: &str, from: usize, count: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while ticks(topic, "every-10s").await.len() < from + count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} more firings did not come within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A standalone dashboard (`share-worker ui`) of the group in `toml`, sampling every second, and
/// the address of its live overview.
fn dashboard(scratch: &Scratch, toml: &str) -> (Child, String) {
    let port = reserve_port();
    let dashboard = toml.replace(
        "[dlq]",
        &format!("[ui]\nlisten = \"127.0.0.1:{port}\"\nsample-every = \"1s\"\n\n[dlq]"),
    );
    let dashboard = scratch.write("dashboard.toml", &dashboard);
    let ui = spawn(
        &["ui", "--config", dashboard.to_str().expect("utf-8 path")],
        &scratch.0.join("ui.log"),
    );
    (ui, format!("http://127.0.0.1:{port}/ui/live/overview"))
}

#[tokio::test]
async fn a_schedule_fires_each_tick_once_while_its_firer_is_killed_twice() {
    let scratch = Scratch::new();
    let topic = unique("cli-cron");
    let group = unique("cli-cron-group");
    let toml = config(&group, &topic, "handler = \"noop\"")
        + &format!(
            "\n[[cron]]\nname = \"every-10s\"\nevery = \"10s\"\ntopic = \"{topic}\"\npayload = '{{\"report\":\"daily\"}}'\n"
        );
    let cfg = scratch.write("worker.toml", &toml);
    let cfg = cfg.to_str().expect("utf-8 path");
    let out = share_worker(&["setup", "--config", cfg, "--partitions", "1"], &[]).await;
    assert_ok(&out, "setup");
    assert!(
        text(&out.stdout).contains("share.isolation.level = read_committed"),
        "{}",
        text(&out.stdout)
    );
    let cron_topic = format!("{group}.cron");
    assert_eq!(
        topic_config(&cron_topic, "cleanup.policy").await.as_deref(),
        Some("compact")
    );
    assert_eq!(
        topic_config(&cron_topic, "segment.ms").await.as_deref(),
        Some("3600000"),
        "hourly segments, so that compaction keeps up with the marks"
    );

    let logs: Vec<PathBuf> = (0..3)
        .map(|i| scratch.0.join(format!("run-{i}.log")))
        .collect();
    // Each worker serves its metrics on a port of its own.
    let ports: Vec<u16> = (0..3).map(|_| reserve_port()).collect();
    let mut workers: Vec<Option<Child>> = logs
        .iter()
        .zip(&ports)
        .enumerate()
        .map(|(i, (log, port))| {
            let own = toml.replace(
                "[dlq]",
                &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\n\n[dlq]"),
            );
            let own = scratch.write(&format!("worker-{i}.toml"), &own);
            Some(spawn(
                &["run", "--config", own.to_str().expect("utf-8 path")],
                log,
            ))
        })
        .collect();
    let mut dead = Vec::new();
    let mut before = vec![0; 3];
    let mut takeovers = Vec::new();
    let mut killed_at = None;
    for round in 0..3 {
        let firer = next_firer(&logs, &dead, &before).await;
        if let Some(at) = killed_at.take() {
            takeovers.push(tokio::time::Instant::elapsed(&at));
        }
        let fired = ticks(&topic, "every-10s").await.len();
        more_ticks(&topic, fired, 4).await;
        if round == 2 {
            // The last firer counts what it fired: at least those four ticks.
            let metrics = wait_ok(&format!("http://127.0.0.1:{}/metrics", ports[firer])).await;
            let counted = metric(
                &parse_prometheus(&metrics),
                "share_worker_cron_firings_total",
                &[("job", "every-10s")],
            )
            .unwrap_or(0.0);
            let all = ticks(&topic, "every-10s").await.len();
            assert!(
                (4.0..=all as f64).contains(&counted),
                "the firer counted {counted} firings ({all} ticks fired by all firers)"
            );
            break;
        }
        before = logs.iter().map(became_firer).collect();
        // Aimed 1.5 s before a tick, so that the tick falls while no worker fires: the next
        // firer fires it late, once.
        tokio::time::sleep(until_before_a_tick(10_000, 1_500)).await;
        let mut killed = workers[firer].take().expect("a living firer");
        killed.start_kill().expect("SIGKILL the firer");
        killed_at = Some(tokio::time::Instant::now());
        killed.wait().await.expect("the killed worker's status");
        dead.push(firer);
    }

    // The dashboard shows the schedule with its last firing, read from the cron topic, and the
    // tick after it.
    let (_ui, overview) = dashboard(&scratch, &toml);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let last = *ticks(&topic, "every-10s")
            .await
            .keys()
            .last()
            .expect("a tick");
        let page = get(&overview)
            .await
            .map(|(_, body)| body)
            .unwrap_or_default();
        let shown = |class: &str| {
            page.split(&format!("<td class=\"{class}\">"))
                .nth(1)
                .and_then(|rest| rest.split("</td>").next())
                .map(str::to_owned)
        };
        let time = |ms: i64| {
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + Duration::from_millis(ms as u64),
            )
            .to_string()
            .replacen('T', " ", 1)
            .trim_end_matches('Z')
            .to_owned()
        };
        if page.contains("<td class=\"name\">every-10s</td>")
            && shown("last") == Some(time(last))
            && shown("next") == Some(time(last + 10_000))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dashboard never showed the last firing {last} and the next; last page: {page}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for worker in workers.iter_mut().filter_map(Option::take) {
        terminate(worker).await;
    }

    let ticks = ticks(&topic, "every-10s").await;
    let twice: Vec<_> = ticks.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ticks fired twice: {twice:?}");
    let first = *ticks.keys().next().expect("a tick");
    let last = *ticks.keys().last().expect("a tick");
    let every: Vec<i64> = (first..=last).step_by(10_000).collect();
    let fired: Vec<i64> = ticks.keys().copied().collect();
    assert_eq!(fired, every, "a tick was missed");
    assert!(fired.len() >= 12, "two minutes of ticks: {fired:?}");
    for tick in &fired {
        assert_eq!(tick % 10_000, 0, "ticks fall on multiples of 10 s");
    }
    // How late a tick fires: the firer's poll while it lives, the session timeout (6 s), the
    // rebalance and the new firer's transactional producer after a SIGKILL.
    let late = firings(&topic, "every-10s")
        .await
        .into_iter()
        .map(|(tick, at)| Duration::from_millis(u64::try_from(at - tick).unwrap_or(0)))
        .max()
        .expect("a firing");
    eprintln!(
        "cron: firers took over {takeovers:?} after the SIGKILLs; ticks fired at most {late:?} late"
    );
    assert!(
        late <= Duration::from_secs(20),
        "a tick fired {late:?} late"
    );
}

#[tokio::test]
async fn a_mark_from_the_future_is_ignored_and_the_schedule_fires_on() {
    let scratch = Scratch::new();
    let topic = unique("cli-cron-future");
    let group = unique("cli-cron-future-group");
    let toml = config(&group, &topic, "handler = \"noop\"")
        + &format!("\n[[cron]]\nname = \"every-2s\"\nevery = \"2s\"\ntopic = \"{topic}\"\n");
    let cfg = scratch.write("worker.toml", &toml);
    let cfg = cfg.to_str().expect("utf-8 path");
    let out = share_worker(&["setup", "--config", cfg, "--partitions", "1"], &[]).await;
    assert_ok(&out, "setup");
    let cron_topic = format!("{group}.cron");
    assert_eq!(
        topic_config(&cron_topic, "message.timestamp.type")
            .await
            .as_deref(),
        Some("LogAppendTime"),
        "marks carry the broker's time"
    );
    // A forged mark a day ahead, written as a plain record: it would silence the schedule.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64;
    let tomorrow = (now / 2_000 + 43_200) * 2_000;
    let producer = tests::producer(&[]).expect("a producer");
    tests::produce_keyed(&producer, &cron_topic, "every-2s", &tomorrow.to_string())
        .await
        .expect("writing a forged mark");

    let log = scratch.0.join("run.log");
    let port = reserve_port();
    let own = toml.replace(
        "[dlq]",
        &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\n\n[dlq]"),
    );
    let own = scratch.write("worker-metrics.toml", &own);
    let worker = spawn(
        &["run", "--config", own.to_str().expect("utf-8 path")],
        &log,
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while ticks(&topic, "every-2s").await.len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the schedule did not fire twice within 60 s of a mark from the future; log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let fired = ticks(&topic, "every-2s").await;
    assert!(
        fired
            .keys()
            .all(|tick| *tick < tomorrow && *tick >= now - 2_000),
        "the ticks of now fired: {fired:?}"
    );
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        logged
            .matches("cron: a mark more than a tick ahead of the broker's time is ignored")
            .count(),
        1,
        "warned once: {logged}"
    );
    let metrics = parse_prometheus(&wait_ok(&format!("http://127.0.0.1:{port}/metrics")).await);
    assert_eq!(
        metric(
            &metrics,
            "share_worker_cron_marks_ignored_total",
            &[("job", "every-2s")]
        ),
        Some(1.0),
        "counted"
    );
    assert_eq!(
        metric(
            &metrics,
            "share_worker_cron_overdue",
            &[("job", "every-2s")]
        ),
        Some(0.0),
        "not overdue while it fires"
    );
    terminate(worker).await;

    // With no worker left, the dashboard says so once two ticks are missed.
    let (_ui, overview) = dashboard(&scratch, &toml);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let page = get(&overview)
            .await
            .map(|(_, body)| body)
            .unwrap_or_default();
        if page.contains("no tick fired since") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dashboard never said the schedule is overdue; last page: {page}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
