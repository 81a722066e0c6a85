//! The worker on a three-broker cluster (`KAFKA_CLUSTER_BOOTSTRAP`, started by `scripts/test.sh`):
//! every leader fetched from at once, and leaders and the group coordinator dying under a running
//! worker process, judged by its ledger (nothing lost, duplicates within what was in flight).
//!
//! Each test holds the cluster alone ([`cluster::exclusive`]): they kill brokers.

mod ledger_support;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, ensure};
use ledger_support::{
    Entry, Scratch, check_no_loss, entries, kill, ledger, now_ms, spawn_worker_at, terminate,
};
use tests::{cluster, ledger_record, produce, unique, wait_for};
use tokio::time::Instant;
use tower::service_fn;
use worker_core::kafka::{Admin, KafkaSource, OffsetReset};
use worker_core::{Job, Outcome, Worker};

/// A topic whose partitions each have all three brokers as replicas, preferred leaders spread.
async fn replicated_topic(partitions: usize) -> anyhow::Result<String> {
    let topic = unique("cluster");
    let orders: [&[i32]; 3] = [&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]];
    let replicas: Vec<&[i32]> = (0..partitions).map(|p| orders[p % 3]).collect();
    cluster::create_topic(&topic, &replicas).await?;
    cluster::create_topic(&format!("{topic}.dlq"), &[&[1, 2, 3]]).await?;
    Ok(topic)
}

/// A group that starts at the earliest offset, with a 5 s lock.
async fn group(admin: &Admin) -> anyhow::Result<String> {
    let group = unique("cluster-group");
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    admin
        .set_group_config(&group, "share.record.lock.duration.ms", "5000")
        .await?;
    Ok(group)
}

/// Whether the ledger shows a record of `partition` handled after `after_ms`.
fn handled_after(ledger: &[Entry], partition: i32, after_ms: u64) -> bool {
    ledger
        .iter()
        .any(|e| e.partition == partition && e.at_ms > after_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_a_busy_broker_never_wait_behind_an_idle_brokers_long_poll() -> anyhow::Result<()>
{
    const RECORDS: usize = 200;
    let _cluster = cluster::exclusive().await?;
    let bootstrap = cluster::bootstrap();
    let admin = Admin::connect(&bootstrap).await?;
    // Partition p lives on broker p + 1 alone: records only on partition 0 leave brokers 2 and 3
    // with nothing but long polls.
    let topic = unique("busy-and-idle");
    cluster::create_topic(&topic, &[&[1], &[2], &[3]]).await?;
    let group = unique("busy-and-idle-group");
    produce(
        &cluster::producer()?,
        &topic,
        Some(0),
        (0..RECORDS).map(ledger_record),
    )
    .await?;

    let handled = Arc::new(AtomicUsize::new(0));
    let counter = handled.clone();
    let source = KafkaSource::builder(bootstrap.as_str(), group.as_str())
        .topic(topic.as_str())
        .offset_reset(OffsetReset::Earliest)
        .max_wait(Duration::from_secs(5))
        .build()
        .await?;
    let worker = Worker::builder(source)
        .route(
            topic.as_str(),
            service_fn(move |_job: Job| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Infallible>(Outcome::Accept)
                }
            }),
        )
        .concurrency(4)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());

    wait_for("the first record", Duration::from_secs(30), async || {
        Ok(handled.load(Ordering::SeqCst) > 0)
    })
    .await?;
    // Four records per fetch: 50 fetches of the busy broker. Were each to wait behind a 5 s long
    // poll of an idle broker, this would take minutes.
    let first = Instant::now();
    wait_for(
        "every record of the busy broker",
        Duration::from_secs(15),
        async || Ok(handled.load(Ordering::SeqCst) >= RECORDS),
    )
    .await?;
    let took = first.elapsed();
    wait_for("the lag to reach 0", Duration::from_secs(15), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;
    ensure!(
        summary.accepted == RECORDS as u64,
        "accepted {} of {RECORDS}: {summary:?}",
        summary.accepted
    );
    eprintln!("{RECORDS} records of one broker in {took:?} while two others long-polled");
    Ok(())
}

/// Partitions of the topics [`survives`] makes.
const PARTITIONS: i32 = 6;

/// Where a fault of [`survives`] runs: the worker's topic, group and ledger, and the sequence
/// number the next record produced must carry. A fault returns how many records it produced.
struct Run<'a> {
    topic: &'a str,
    group: &'a str,
    ledger: &'a std::path::Path,
    next_seq: usize,
}

/// The ledger worker consuming `records` records of a six-partition replicated topic while
/// `fault` runs once a third of them are handled; everything (the records the fault produced
/// too) is then handled exactly once or more, with duplicates within twice the concurrency.
async fn survives(
    name: &str,
    records: usize,
    fault: impl AsyncFnOnce(&Run<'_>) -> anyhow::Result<usize>,
) -> anyhow::Result<()> {
    const CONCURRENCY: usize = 32;
    let bootstrap = cluster::bootstrap();
    let admin = Admin::connect(&bootstrap).await?;
    let topic = replicated_topic(PARTITIONS as usize).await?;
    let group = group(&admin).await?;
    produce(
        &cluster::producer()?,
        &topic,
        None,
        (0..records).map(ledger_record),
    )
    .await?;
    let scratch = Scratch::new()?;
    let path = scratch.0.join("ledger");
    let worker = spawn_worker_at(&bootstrap, &topic, &group, &path, 50, CONCURRENCY, false)?;
    let started = async {
        wait_for(
            "a third of the records",
            Duration::from_secs(90),
            async || Ok(ledger(&path).len() >= records / 3),
        )
        .await?;
        let run = Run {
            topic: &topic,
            group: &group,
            ledger: &path,
            next_seq: records,
        };
        let total = records + fault(&run).await?;
        wait_for("every record", Duration::from_secs(180), async || {
            Ok(ledger(&path).iter().collect::<BTreeSet<_>>().len() >= total)
        })
        .await?;
        wait_for("the lag to reach 0", Duration::from_secs(60), async || {
            Ok(admin.share_group_lag(&group, &topic).await? == 0)
        })
        .await?;
        Ok::<_, anyhow::Error>(total)
    }
    .await;
    let log = path.with_extension("log");
    let total = match started {
        Ok(total) => total,
        Err(err) => {
            kill(worker).await?;
            return Err(err.context(format!(
                "{name}; the worker's log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )));
        }
    };
    terminate(worker, &log).await?;
    let duplicates = check_no_loss(total, &ledger(&path), &Default::default())?;
    ensure!(
        duplicates <= 2 * CONCURRENCY,
        "{duplicates} duplicates, more than twice the {CONCURRENCY} records in flight"
    );
    let log = std::fs::read_to_string(&log)?;
    let summary = log
        .lines()
        .find(|l| l.contains("ledger_worker: Summary"))
        .map(str::to_owned)
        .context("the worker printed no summary")?;
    let counted: usize = summary
        .split("possible_duplicates: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .context("no possible_duplicates in the summary")?;
    // A duplicate of a record the worker's log names (a failed acknowledgement, a lost lock) is
    // one the worker saw coming: it counted it. One it never names is a record the broker delivered
    // again after confirming its acceptance: Kafka 4.2 and 4.3 can, when the share coordinator
    // moves (state writes landing out of order, apache/kafka#23074); no client can count those.
    let unseen = unseen_duplicates(&topic, &entries(&path), &log);
    let unseen_copies: usize = unseen.iter().map(|copies| copies.len() - 1).sum();
    let seen = duplicates - unseen_copies;
    ensure!(
        seen <= counted,
        "{seen} duplicates of records the worker logged as failed, but it counted {counted} possible ones: {summary}"
    );
    eprintln!("{name}: {duplicates} duplicates; {summary}");
    if !unseen.is_empty() {
        eprintln!(
            "{name}: {unseen_copies} copies of records whose acceptance the broker had confirmed: {unseen:?}"
        );
    }
    Ok(())
}

/// The ledger lines of each record handled more than once that the worker's log never names: no
/// acknowledgement of it failed and no lock of it was lost, as far as the worker could see.
fn unseen_duplicates(topic: &str, ledger: &[Entry], log: &str) -> Vec<Vec<Entry>> {
    let named: std::collections::HashSet<&str> = log
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("record="))
        .collect();
    let mut copies: std::collections::BTreeMap<usize, Vec<Entry>> = Default::default();
    for entry in ledger {
        copies.entry(entry.seq).or_default().push(*entry);
    }
    copies
        .into_values()
        .filter(|copies| copies.len() > 1)
        .filter(|copies| {
            !copies.iter().any(|e| {
                e.offset.is_some_and(|offset| {
                    named.contains(format!("{topic}/{}@{offset}", e.partition).as_str())
                })
            })
        })
        .collect()
}

/// The partitions of `topic` `node` leads now.
async fn led_by(topic: &str, node: i32) -> anyhow::Result<Vec<i32>> {
    Ok(cluster::leaders(topic)
        .await?
        .into_iter()
        .filter(|(_, l)| *l == node)
        .map(|(p, _)| p)
        .collect())
}

/// Records produced to each partition a fault names once the fault has happened: handling them
/// shows the worker consuming there again, whatever was left of the backlog (on a slow machine
/// the worker can finish it before a reassignment tool reports done).
const TAIL: usize = 50;

/// Produces [`TAIL`] ledger records to each of `partitions` of `topic`, sequence numbers from
/// `first_seq` on; returns how many.
async fn produce_tail(topic: &str, partitions: &[i32], first_seq: usize) -> anyhow::Result<usize> {
    let producer = cluster::producer()?;
    let mut seq = first_seq;
    for &partition in partitions {
        produce(
            &producer,
            topic,
            Some(partition),
            (seq..seq + TAIL).map(ledger_record),
        )
        .await?;
        seq += TAIL;
    }
    Ok(seq - first_seq)
}

/// Waits until none of the `moved` partitions is led by `old` any more, then produces a tail of
/// records to them and waits until the worker handles one of each, which must take at most 10 s
/// from the new leaders being known. Returns how many records it produced.
async fn resumes_moved_partitions(run: &Run<'_>, old: i32, moved: &[i32]) -> anyhow::Result<usize> {
    wait_for("new leaders", Duration::from_secs(30), async || {
        let leaders = cluster::leaders(run.topic).await?;
        Ok(leaders
            .iter()
            .filter(|(p, _)| moved.contains(p))
            .all(|(_, l)| *l >= 0 && *l != old))
    })
    .await?;
    let known = now_ms();
    let since = Instant::now();
    let produced = produce_tail(run.topic, moved, run.next_seq).await?;
    wait_for(
        "records of the moved partitions handled",
        Duration::from_secs(30),
        async || {
            let ledger = entries(run.ledger);
            Ok(moved.iter().all(|p| handled_after(&ledger, *p, known)))
        },
    )
    .await?;
    let took = since.elapsed();
    ensure!(
        took <= Duration::from_secs(10),
        "the moved partitions {moved:?} resumed {took:?} after their new leaders were known"
    );
    eprintln!("partitions {moved:?} resumed {took:?} after their new leaders were known");
    Ok(produced)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_leader_killed_mid_run_loses_nothing() -> anyhow::Result<()> {
    let _cluster = cluster::exclusive().await?;
    survives("leader killed", 6_000, async |run: &Run<'_>| {
        let leader = cluster::leader(run.topic, 0).await?;
        let moved = led_by(run.topic, leader).await?;
        cluster::kill_broker(leader).await?;
        let produced = resumes_moved_partitions(run, leader, &moved).await?;
        cluster::resume_broker(leader).await?;
        Ok(produced)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_coordinator_killed_mid_run_loses_nothing() -> anyhow::Result<()> {
    let _cluster = cluster::exclusive().await?;
    survives("coordinator killed", 6_000, async |run: &Run<'_>| {
        let admin = Admin::connect(cluster::bootstrap()).await?;
        let (coordinator, _) = admin.group_coordinator(run.group).await?;
        let moved = led_by(run.topic, coordinator).await?;
        cluster::kill_broker(coordinator).await?;
        let mut produced = resumes_moved_partitions(run, coordinator, &moved).await?;
        wait_for(
            "the coordinator to move",
            Duration::from_secs(30),
            async || Ok(admin.group_coordinator(run.group).await?.0 != coordinator),
        )
        .await?;
        // Membership moved with the coordinator: the worker goes on consuming every partition.
        let first = run.next_seq + produced;
        let every: Vec<i32> = (0..PARTITIONS).collect();
        produced += produce_tail(run.topic, &every, first).await?;
        let last = run.next_seq + produced;
        wait_for(
            "records of every partition with the coordinator moved",
            Duration::from_secs(30),
            async || {
                let seen: BTreeSet<usize> = ledger(run.ledger).into_iter().collect();
                Ok((first..last).all(|seq| seen.contains(&seq)))
            },
        )
        .await?;
        cluster::resume_broker(coordinator).await?;
        Ok(produced)
    })
    .await
}

/// Admin lookups (metadata, a group's coordinator) that only read survive the death of the broker
/// they were talking to: they go again to another broker of the bootstrap list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_lookups_go_to_another_broker_when_theirs_dies() -> anyhow::Result<()> {
    let _cluster = cluster::exclusive().await?;
    let bootstrap = cluster::bootstrap();
    let first = bootstrap
        .split(',')
        .next()
        .context("an empty bootstrap list")?;
    ensure!(
        first.ends_with(":9192"),
        "broker 1 is not first in {bootstrap}"
    );
    let admin = Admin::connect(&bootstrap).await?;
    let group = unique("failover-group");
    // The first lookup opens the admin's connection to the first broker of the list: broker 1.
    admin.group_coordinator(&group).await?;
    cluster::kill_broker(1).await?;
    let after = admin.group_coordinator(&group).await;
    cluster::resume_broker(1).await?;
    after.context("looking up the coordinator after broker 1 died")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_reassigned_mid_run_lose_nothing() -> anyhow::Result<()> {
    let _cluster = cluster::exclusive().await?;
    survives("partitions reassigned", 6_000, async |run: &Run<'_>| {
        // Every partition broker 1 leads moves to brokers 2 and 3 alone: its leader changes.
        let moved = led_by(run.topic, 1).await?;
        ensure!(
            !moved.is_empty(),
            "broker 1 leads no partition of {}",
            run.topic
        );
        let plan: Vec<(i32, Vec<i32>)> = moved.iter().map(|p| (*p, vec![2, 3])).collect();
        cluster::reassign(run.topic, &plan).await?;
        resumes_moved_partitions(run, 1, &moved).await
    })
    .await
}
