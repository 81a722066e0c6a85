//! Delayed and rate-limited jobs through the binary: `setup` creates the delay topics, `produce
//! --key --delay` enqueues, `run` with a `[delay]` table and a route's `rate-per-key` runs them no
//! earlier and one per second for their key; a flood due in days never makes jobs due in seconds
//! late.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::*;

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

#[tokio::test]
async fn produce_delay_and_key_meet_run_s_delay_topic_and_rate_per_key() {
    let (scratch, topic, cfg, out) = delayed_route(
        "cli-delayed",
        "$SHARE_WORKER_KEY $SHARE_WORKER_DELIVERY_COUNT",
        "rate-per-key = \"1/s\"\nburst-per-key = 1\nkey-concurrency = 1",
        "max-hold = \"1s\"",
        8,
    )
    .await;
    let ran = scratch.0.join("ran");
    let cfg = cfg.as_str();
    for tier in [".delay", ".delay.hours", ".delay.days"] {
        assert!(
            text_of(&out).contains(&format!("topic {topic}{tier}: created")),
            "{}",
            text_of(&out)
        );
    }
    let out = share_worker(&["check", "--config", cfg], &[]).await;
    assert_ok(&out, "check");

    let jobs = scratch.write("jobs.txt", "one\ntwo\nthree");
    let produced_at = now_ms();
    let bootstrap = bootstrap();
    let out = share_worker(
        &[
            "produce",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--file",
            jobs.to_str().expect("utf-8 path"),
            "--key",
            "+4915112345678",
            "--delay",
            "4s",
        ],
        &[],
    )
    .await;
    assert_ok(&out, "produce");
    assert!(
        text_of(&out).contains("do not run before"),
        "{}",
        text_of(&out)
    );

    let stats_path = scratch.0.join("stats.json");
    let out = share_worker(
        &[
            "run",
            "--config",
            cfg,
            "--exit-when-idle",
            "6s",
            "--stats-json",
            stats_path.to_str().expect("utf-8 path"),
        ],
        &[],
    )
    .await;
    assert_ok(&out, "run");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats_path).expect("stats")).expect("JSON");
    let lines: Vec<(String, u16, u128)> = std::fs::read_to_string(&ran)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            Some((
                fields.next()?.to_owned(),
                fields.next()?.parse().ok()?,
                fields.next()?.parse().ok()?,
            ))
        })
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?} {stats}");
    for (key, count, at) in &lines {
        assert_eq!((key.as_str(), *count), ("+4915112345678", 1), "{lines:?}");
        assert!(
            *at >= produced_at + 4_000,
            "ran {} ms early",
            produced_at + 4_000 - at
        );
    }
    let mut times: Vec<u128> = lines.iter().map(|l| l.2).collect();
    times.sort_unstable();
    for pair in times.windows(2) {
        assert!(
            pair[1] - pair[0] >= 900,
            "one per second for the key: {times:?}"
        );
    }
    assert!(
        count(&stats, "moved") >= 3,
        "waited in the delay topic: {stats}"
    );
    assert_eq!(count(&stats, "accepted"), 3, "{stats}");
    assert_eq!(count(&stats, "dlq"), 0, "{stats}");
}

/// A fresh topic and group with an exec route that appends `fields` and the time in ms to the
/// scratch file `ran`, the route's `extra` keys and a `[delay]` table with `delay`; after `setup`,
/// whose output it returns.
async fn delayed_route(
    name: &str,
    fields: &str,
    extra: &str,
    delay: &str,
    concurrency: u32,
) -> (Scratch, String, String, std::process::Output) {
    let scratch = Scratch::new();
    let topic = unique(name);
    let group = unique(&format!("{name}-group"));
    let ran = scratch.0.join("ran");
    let route = format!(
        "handler = \"exec\"\ncommand = [\"sh\", \"-c\", 'echo \"{fields} $(date +%s%3N)\" >> {}']\n{extra}",
        ran.display()
    );
    let text = format!(
        "{}\n[delay]\n{delay}\n",
        config(&group, &topic, &route)
            .replace("concurrency = 8", &format!("concurrency = {concurrency}"))
    );
    let cfg = scratch.write("worker.toml", &text);
    let cfg = cfg.to_str().expect("utf-8 path").to_owned();
    let out = share_worker(&["setup", "--config", &cfg], &[]).await;
    assert_ok(&out, "setup");
    (scratch, topic, cfg, out)
}

fn text_of(out: &std::process::Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// 20,000 records due in ten days, enqueued ahead of three jobs due in 15 s: the flood is parked
/// in the farthest delay topic and the three run when due. In one delay topic for every wait they
/// stood behind the flood, which a worker reads through a fetch per second, and ran minutes late.
#[tokio::test]
async fn a_flood_due_in_days_never_makes_jobs_due_in_seconds_late() {
    let (scratch, topic, cfg, _) =
        delayed_route("cli-delay-flood", "$(cat)", "", "max-hold = \"2s\"", 200).await;
    let ran = scratch.0.join("ran");
    let cfg = cfg.as_str();
    let bootstrap = bootstrap();
    let out = share_worker(
        &[
            "produce",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--count",
            "20000",
            "--size",
            "16",
            "--delay",
            "240h",
        ],
        &[],
    )
    .await;
    assert_ok(&out, "produce");
    let jobs = scratch.write("jobs.txt", "real-0\nreal-1\nreal-2");
    let jobs = jobs.to_str().expect("utf-8 path").to_owned();
    let due = now_ms() + 15_000;
    let out = share_worker(
        &[
            "produce",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--file",
            &jobs,
            "--delay",
            "15s",
        ],
        &[],
    )
    .await;
    assert_ok(&out, "produce");

    let log = scratch.0.join("worker.log");
    let worker = spawn(&["run", "--config", cfg], &log);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while lines_in(&ran) < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the three jobs did not run within 45 s of their due time: {:?}",
            std::fs::read_to_string(&ran)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(terminate(worker).await.success());
    let text = std::fs::read_to_string(&ran).expect("the jobs' lines");
    for line in text.lines() {
        let (job, at) = line.split_once(' ').expect("job and time");
        let at: u128 = at.parse().expect("a time in ms");
        assert!(job.starts_with("real-"), "only the real jobs ran: {text}");
        // `due` was taken just before `produce` stamped theirs.
        assert!(at + 100 >= due, "{job} ran {} ms early", due - at);
        assert!(at <= due + 3_000, "{job} ran {} ms late", at - due);
    }
    let parked = records(&format!("{topic}.delay.days")).await.len();
    assert!(parked >= 20_000, "{parked} records in {topic}.delay.days");
    let near = records(&format!("{topic}.delay")).await;
    assert!(
        near.iter().all(|r| r.value_text().starts_with("real-")),
        "only the real jobs wait in the nearest tier"
    );
}
