//! Workers killed with SIGKILL mid-run (RELIABILITY scenarios 2 and 12): the `ledger_worker`
//! process appends each record's sequence number to a ledger before it returns success, and after
//! everything stops `produced ⊆ ledger ∪ DLQ`, the broker reports lag 0, and the duplicates stay
//! within what was in flight at the kills.

mod ledger_support;

use std::time::Duration;

use anyhow::ensure;
use ledger_support::{
    Scratch, check_no_loss, dead_letters, kill, ledger, prepared, spawn_worker, terminate,
};
use tests::wait_for;

/// Scenario 2: a 50 ms handler at concurrency 200 is SIGKILLed five times, each time after it made
/// progress, and restarted; the last run drains the topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_five_times_loses_nothing() -> anyhow::Result<()> {
    const RECORDS: usize = 6_000;
    const CONCURRENCY: usize = 200;
    const KILLS: usize = 5;
    let scratch = Scratch::new()?;
    let (admin, topic, group) = prepared(4, RECORDS).await?;
    let path = scratch.0.join("ledger");
    for _ in 0..KILLS {
        let before = ledger(&path).len();
        let worker = spawn_worker(&topic, &group, &path, 50, CONCURRENCY, false)?;
        wait_for(
            "the worker to make progress",
            Duration::from_secs(60),
            async || Ok(ledger(&path).len() >= before + 300),
        )
        .await?;
        kill(worker).await?;
    }
    let killed_at = ledger(&path).len();
    ensure!(killed_at < RECORDS, "the kills came too late to matter");
    let worker = spawn_worker(&topic, &group, &path, 50, CONCURRENCY, false)?;
    wait_for("the lag to reach 0", Duration::from_secs(120), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    terminate(worker, &path.with_extension("log")).await?;

    let dlq = dead_letters(&topic).await?;
    let duplicates = check_no_loss(RECORDS, &ledger(&path), &dlq)?;
    ensure!(
        duplicates <= KILLS * CONCURRENCY,
        "{duplicates} duplicates, more than the {} records in flight at the kills",
        KILLS * CONCURRENCY
    );
    eprintln!(
        "{KILLS} kills: {killed_at} ledger lines before the last run, {duplicates} duplicates, {} dead letters",
        dlq.len()
    );
    Ok(())
}

/// Scenario 12: two workers share one partition; one is SIGKILLed mid-run and the other finishes
/// the work, including what the killed one held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_on_one_partition_survive_the_loss_of_one() -> anyhow::Result<()> {
    const RECORDS: usize = 3_000;
    const CONCURRENCY: usize = 50;
    let scratch = Scratch::new()?;
    let (admin, topic, group) = prepared(1, RECORDS).await?;
    let (path_a, path_b) = (scratch.0.join("a"), scratch.0.join("b"));
    let a = spawn_worker(&topic, &group, &path_a, 20, CONCURRENCY, false)?;
    let b = spawn_worker(&topic, &group, &path_b, 20, CONCURRENCY, false)?;
    wait_for(
        "both workers to make progress",
        Duration::from_secs(60),
        async || Ok(ledger(&path_a).len() >= 200 && ledger(&path_b).len() >= 200),
    )
    .await?;
    kill(a).await?;
    let a_did = ledger(&path_a).len();
    ensure!(a_did < RECORDS, "worker a finished before it was killed");
    wait_for("the lag to reach 0", Duration::from_secs(120), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    terminate(b, &path_b.with_extension("log")).await?;

    let mut union = ledger(&path_a);
    let b_did = ledger(&path_b).len();
    union.extend(ledger(&path_b));
    let dlq = dead_letters(&topic).await?;
    let duplicates = check_no_loss(RECORDS, &union, &dlq)?;
    ensure!(
        duplicates <= CONCURRENCY,
        "{duplicates} duplicates, more than the {CONCURRENCY} records the killed worker held"
    );
    ensure!(b_did > 200, "worker b did no work after the kill");
    eprintln!(
        "a handled {a_did}, b {b_did}, {duplicates} duplicates, {} dead letters",
        dlq.len()
    );
    Ok(())
}
