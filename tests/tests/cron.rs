//! Periodic jobs against the real broker: three schedulers of one group fire each tick exactly
//! once between them, while the firer stops twice and another takes over.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use rdkafka::Message;
use tests::{unique, wait_for};
use tokio_util::sync::CancellationToken;
use worker_core::cron::{CronJob, CronScheduler, Schedule};
use worker_core::kafka::Admin;

/// The ticks of `job` among the job ids of `topic`'s records (read committed), with how often
/// each appears.
async fn fired(topic: &str, job: &str) -> anyhow::Result<BTreeMap<i64, usize>> {
    let prefix = format!("cron:{job}:");
    let mut ticks = BTreeMap::new();
    for record in tests::read_committed_at(&tests::bootstrap(), topic).await? {
        let id = tests::header(&record, "share.job-id").context("a record without a job id")?;
        let tick: i64 = id
            .strip_prefix(&prefix)
            .and_then(|t| t.parse().ok())
            .with_context(|| format!("job id {id:?}"))?;
        assert_eq!(record.payload(), Some(&b"{\"report\":\"hourly\"}"[..]));
        *ticks.entry(tick).or_default() += 1;
    }
    Ok(ticks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tick_fires_once_while_the_firer_changes() -> anyhow::Result<()> {
    const EVERY: Duration = Duration::from_secs(2);
    let admin = Admin::connect(tests::bootstrap()).await?;
    let group = unique("cron-group");
    let topic = unique("cron-jobs");
    admin.create_topic(&topic, 1, 1).await?;
    admin
        .create_topic(&CronScheduler::topic_of(&group), 1, 1)
        .await?;
    let job = CronJob::new("report", Schedule::every(EVERY)?, topic.as_str())
        .payload(&b"{\"report\":\"hourly\"}"[..]);
    let schedulers: Vec<(CronScheduler, CancellationToken)> = (0..3)
        .map(|i| {
            let scheduler = CronScheduler::new(tests::bootstrap(), &group)
                .client_id(format!("cron-test-{i}"))
                .job(job.clone());
            (scheduler, CancellationToken::new())
        })
        .collect();
    let mut threads = Vec::new();
    for (scheduler, stop) in &schedulers {
        let (scheduler, stop) = (scheduler.clone(), stop.clone());
        threads.push(tokio::task::spawn_blocking(move || {
            scheduler.run_blocking(&stop)
        }));
    }
    let firer = async || -> anyhow::Result<usize> {
        let mut found = None;
        wait_for("a scheduler to fire", Duration::from_secs(60), async || {
            found = schedulers
                .iter()
                .position(|(s, stop)| !stop.is_cancelled() && s.is_firing());
            Ok(found.is_some())
        })
        .await?;
        Ok(found.unwrap_or_default())
    };
    for _ in 0..2 {
        let current = firer().await?;
        let before = fired(&topic, "report").await?.len();
        wait_for("two more ticks", Duration::from_secs(30), async || {
            Ok(fired(&topic, "report").await?.len() >= before + 2)
        })
        .await?;
        schedulers[current].1.cancel();
    }
    firer().await?;
    let before = fired(&topic, "report").await?.len();
    wait_for("two more ticks", Duration::from_secs(30), async || {
        Ok(fired(&topic, "report").await?.len() >= before + 2)
    })
    .await?;
    for (_, stop) in &schedulers {
        stop.cancel();
    }
    for thread in threads {
        thread.await?;
    }
    let ticks = fired(&topic, "report").await?;
    let reader = schedulers[0].0.clone();
    let firings =
        tokio::task::spawn_blocking(move || reader.read_firings(Duration::from_secs(10))).await??;
    assert_eq!(
        firings.get("report").copied(),
        ticks.keys().last().copied(),
        "the last firing, as status pages read it"
    );
    let doubles: Vec<_> = ticks.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubles.is_empty(), "ticks fired twice: {doubles:?}");
    let step = EVERY.as_millis() as i64;
    let first = *ticks.keys().next().context("no tick")?;
    let last = *ticks.keys().last().context("no tick")?;
    let expected: Vec<i64> = (first..=last).step_by(step as usize).collect();
    assert_eq!(
        ticks.keys().copied().collect::<Vec<_>>(),
        expected,
        "a tick is missing"
    );
    assert!(ticks.len() >= 6, "{ticks:?}");
    Ok(())
}
