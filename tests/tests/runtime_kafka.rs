//! The worker runtime over the native Kafka source, against the real broker: throughput with every
//! record settled, automatic renewal for slow handlers, and graceful shutdown handing work over.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tests::{produce, producer, unique, wait_for};
use tokio::time::Instant;
use tower::service_fn;
use worker_core::kafka::{Admin, KafkaSource};
use worker_core::{Job, Outcome, Worker};

/// A topic with `records` records in one partition and a share group that reads it from the start.
async fn prepared(
    records: usize,
    lock: Option<Duration>,
) -> anyhow::Result<(Admin, String, String)> {
    let admin = Admin::connect(tests::bootstrap())
        .await
        .context("connecting to the broker")?;
    let topic = unique("jobs");
    let group = unique("workers");
    admin.create_topic(&topic, 1, 1).await?;
    admin
        .set_group_config(&group, "share.auto.offset.reset", "earliest")
        .await?;
    if let Some(lock) = lock {
        admin
            .set_group_config(
                &group,
                "share.record.lock.duration.ms",
                &lock.as_millis().to_string(),
            )
            .await?;
    }
    let values = (0..records).map(|i| format!("job-{i}"));
    produce(&producer(&[("linger.ms", "5")])?, &topic, Some(0), values).await?;
    Ok((admin, topic, group))
}

async fn source(topic: &str, group: &str) -> anyhow::Result<KafkaSource> {
    Ok(KafkaSource::builder(tests::bootstrap(), group)
        .topic(topic)
        .build()
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_records_are_all_accepted_once_and_the_lag_drains() -> anyhow::Result<()>
{
    const RECORDS: usize = 100_000;
    let (admin, topic, group) = prepared(RECORDS, None).await?;
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let handler_seen = seen.clone();
    let worker = Worker::builder(source(&topic, &group).await?)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| {
                handler_seen.lock().expect("ledger").insert(job.id().offset);
                async { Ok::<_, Infallible>(Outcome::Accept) }
            }),
        )
        .concurrency(256)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());

    wait_for(
        "every record to be handled",
        Duration::from_secs(120),
        async || Ok(seen.lock().expect("ledger").len() == RECORDS),
    )
    .await?;
    wait_for(
        "the group's lag to reach 0",
        Duration::from_secs(30),
        async || Ok(admin.share_group_lag(&group, &topic).await? == 0),
    )
    .await?;
    shutdown.shutdown();
    let summary = running.await??;
    assert_eq!(summary.accepted, RECORDS as u64, "{summary:?}");
    assert_eq!(
        summary.fetched, RECORDS as u64,
        "no record delivered twice: {summary:?}"
    );
    assert_eq!(summary.ack_failures.total(), 0, "{summary:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_handlers_keep_their_locks_through_automatic_renewal() -> anyhow::Result<()> {
    const RECORDS: usize = 40;
    let lock = Duration::from_secs(2);
    let (admin, topic, group) = prepared(RECORDS, Some(lock)).await?;
    let counts: Arc<Mutex<HashMap<i64, Vec<u16>>>> = Arc::default();
    let handler_counts = counts.clone();
    let worker = Worker::builder(source(&topic, &group).await?)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| {
                handler_counts
                    .lock()
                    .expect("ledger")
                    .entry(job.id().offset)
                    .or_default()
                    .push(job.attempt());
                async move {
                    tokio::time::sleep(lock * 3).await;
                    Ok::<_, Infallible>(Outcome::Accept)
                }
            }),
        )
        .concurrency(RECORDS)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());

    wait_for("the lag to reach 0", Duration::from_secs(60), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;

    let counts = counts.lock().expect("ledger");
    assert_eq!(counts.len(), RECORDS);
    for (offset, deliveries) in counts.iter() {
        assert_eq!(
            deliveries,
            &vec![1],
            "offset {offset} was delivered again: {deliveries:?}"
        );
    }
    assert!(
        summary.renewals >= RECORDS as u64 * 4,
        "each record renews about every second: {summary:?}"
    );
    assert_eq!(summary.renewal_failures, 0, "{summary:?}");
    assert_eq!(summary.accepted, RECORDS as u64, "{summary:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_accepts_what_finished_and_hands_the_rest_over_at_once() -> anyhow::Result<()> {
    const RECORDS: usize = 200;
    // A long lock: the second worker can only get the unfinished records this fast if the first
    // one released them.
    let (admin, topic, group) = prepared(RECORDS, Some(Duration::from_secs(30))).await?;

    let started = Arc::new(AtomicUsize::new(0));
    let finished: Arc<Mutex<HashSet<i64>>> = Arc::default();
    let (first_started, first_finished) = (started.clone(), finished.clone());
    let first = Worker::builder(source(&topic, &group).await?)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| {
                first_started.fetch_add(1, Ordering::SeqCst);
                let finished = first_finished.clone();
                async move {
                    if job.id().offset % 2 == 0 {
                        finished.lock().expect("ledger").insert(job.id().offset);
                        return Ok::<_, Infallible>(Outcome::Accept);
                    }
                    // Odd offsets never finish on their own.
                    job.cancelled().await;
                    Ok(Outcome::retry("cancelled"))
                }
            }),
        )
        .concurrency(RECORDS)
        .shutdown_grace(Duration::from_secs(2))
        .build()?;
    let first_shutdown = first.shutdown_handle();
    let first_running = tokio::spawn(first.run());
    wait_for(
        "all 200 records in flight",
        Duration::from_secs(60),
        async || Ok(started.load(Ordering::SeqCst) == RECORDS),
    )
    .await?;

    let signalled = Instant::now();
    first_shutdown.shutdown();
    let first_summary = first_running.await??;
    let took = signalled.elapsed();
    assert!(
        took <= Duration::from_secs(3),
        "shutdown took {took:?}, grace is 2 s"
    );
    assert_eq!(
        first_summary.accepted,
        (RECORDS / 2) as u64,
        "{first_summary:?}"
    );
    assert_eq!(
        first_summary.released_on_shutdown,
        (RECORDS / 2) as u64,
        "{first_summary:?}"
    );

    let second_seen: Arc<Mutex<HashMap<i64, u16>>> = Arc::default();
    let handler_seen = second_seen.clone();
    let second = Worker::builder(source(&topic, &group).await?)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| {
                handler_seen
                    .lock()
                    .expect("ledger")
                    .insert(job.id().offset, job.attempt());
                async { Ok::<_, Infallible>(Outcome::Accept) }
            }),
        )
        .concurrency(RECORDS)
        .build()?;
    let second_shutdown = second.shutdown_handle();
    let handed_over = Instant::now();
    let second_running = tokio::spawn(second.run());
    wait_for(
        "the second worker to take the released records",
        Duration::from_secs(15),
        async || Ok(second_seen.lock().expect("ledger").len() == RECORDS / 2),
    )
    .await?;
    assert!(
        handed_over.elapsed() < Duration::from_secs(15),
        "picked up before any 30 s lock expired"
    );
    wait_for("the lag to reach 0", Duration::from_secs(30), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    second_shutdown.shutdown();
    second_running.await??;

    let second_seen = second_seen.lock().expect("ledger");
    let finished = finished.lock().expect("ledger");
    for (offset, count) in second_seen.iter() {
        assert_eq!(
            offset % 2,
            1,
            "offset {offset} was finished by the first worker, yet delivered again"
        );
        assert_eq!(
            *count, 2,
            "offset {offset} comes back with delivery count 2"
        );
    }
    let all: HashSet<i64> = finished.iter().chain(second_seen.keys()).copied().collect();
    assert_eq!(
        all.len(),
        RECORDS,
        "every record was processed by one of the workers"
    );
    Ok(())
}

/// Two runtime threads, 40 records in flight, a 2 s lock: one handler blocks its thread for 6 s
/// with `std::thread::sleep`, the others wait 3 s asynchronously. Handlers run as tasks of their
/// own, so the blocked thread stops only its own handler: the dispatcher keeps renewing every
/// lock on the other thread and no record is delivered twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_blocks_its_thread_stops_no_other_record() -> anyhow::Result<()> {
    const RECORDS: usize = 40;
    let lock = Duration::from_secs(2);
    let (admin, topic, group) = prepared(RECORDS, Some(lock)).await?;
    let deliveries: Arc<Mutex<HashMap<i64, Vec<u16>>>> = Arc::default();
    let ledger = deliveries.clone();
    let worker = Worker::builder(source(&topic, &group).await?)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| {
                let offset = job.id().offset;
                ledger
                    .lock()
                    .expect("ledger")
                    .entry(offset)
                    .or_default()
                    .push(job.attempt());
                async move {
                    if offset == 0 {
                        // The mistake under test: a synchronous wait inside an async handler.
                        std::thread::sleep(Duration::from_secs(6));
                    } else {
                        tokio::time::sleep(Duration::from_secs(3)).await;
                    }
                    Ok::<_, Infallible>(Outcome::Accept)
                }
            }),
        )
        .concurrency(RECORDS)
        .build()?;
    let health = worker.health();
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for("the lag to reach 0", Duration::from_secs(60), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;

    let deliveries = deliveries.lock().expect("ledger");
    assert_eq!(deliveries.len(), RECORDS);
    for (offset, attempts) in deliveries.iter() {
        assert_eq!(attempts, &vec![1], "offset {offset} was delivered again");
    }
    assert_eq!(summary.accepted, RECORDS as u64, "{summary:?}");
    assert_eq!(summary.renewal_failures, 0, "no lock ran out: {summary:?}");
    assert_eq!(summary.possible_duplicates, 0, "{summary:?}");
    assert_eq!(
        summary.dispatcher_stalls, 0,
        "one blocked thread is no stall"
    );
    assert_eq!(health.stalls(), None);
    Ok(())
}

/// Every runtime thread blocked at once (two handlers sleeping synchronously on a two-thread
/// runtime) stalls the dispatcher itself: it logs and counts the stall (summary, health and the
/// `share_worker.dispatcher.stalls` metric) and, catching up, renews first, so with a 4 s lock
/// and a 2.6 s stall no lock is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_of_every_runtime_thread_is_counted_and_survived() -> anyhow::Result<()> {
    let lock = Duration::from_secs(4);
    let (admin, topic, group) = prepared(2, Some(lock)).await?;
    let metrics = tests::metrics::InMemory::new();
    let deliveries: Arc<Mutex<Vec<(i64, u16)>>> = Arc::default();
    let ledger = deliveries.clone();
    let worker = Worker::builder(source(&topic, &group).await?)
        .route(
            topic.as_str(),
            service_fn(move |job: Job| {
                ledger
                    .lock()
                    .expect("ledger")
                    .push((job.id().offset, job.attempt()));
                async move {
                    std::thread::sleep(Duration::from_millis(2600));
                    Ok::<_, Infallible>(Outcome::Accept)
                }
            }),
        )
        .concurrency(2)
        .meter(metrics.meter())
        .build()?;
    let health = worker.health();
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for("the lag to reach 0", Duration::from_secs(60), async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;

    assert!(summary.dispatcher_stalls >= 1, "{summary:?}");
    let (stalls, last) = health.stalls().context("the health shows the stall")?;
    assert_eq!(stalls, summary.dispatcher_stalls);
    assert!(last >= Duration::from_secs(1), "late by {last:?}");
    assert_eq!(
        metrics.sum(worker_core::telemetry::names::DISPATCHER_STALLS),
        summary.dispatcher_stalls as f64
    );
    assert_eq!(
        *deliveries.lock().expect("ledger"),
        vec![(0, 1), (1, 1)],
        "renewed in time after the stall: nothing delivered twice"
    );
    assert_eq!(summary.renewal_failures, 0, "{summary:?}");
    Ok(())
}

/// Two topics, the handler of one stuck for 10 s with records to spare: the other topic's
/// records are all handled meanwhile, because the stuck route holds at most its share of the
/// slots and its topic is paused at the broker while it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_route_leaves_the_other_topic_flowing() -> anyhow::Result<()> {
    let (admin, stuck, group) = prepared(100, Some(Duration::from_secs(30))).await?;
    let fast = unique("fast");
    admin.create_topic(&fast, 1, 1).await?;
    produce(
        &producer(&[("linger.ms", "5")])?,
        &fast,
        Some(0),
        (0..50).map(|i| format!("fast-{i}")),
    )
    .await?;
    let handled = Arc::new(AtomicUsize::new(0));
    let counter = handled.clone();
    let source = KafkaSource::builder(tests::bootstrap(), &group)
        .topic(&stuck)
        .topic(&fast)
        .build()
        .await?;
    let worker = Worker::builder(source)
        .route(
            stuck.as_str(),
            service_fn(|_job: Job| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                Ok::<_, Infallible>(Outcome::Accept)
            }),
        )
        .route(
            fast.as_str(),
            service_fn(move |_job: Job| {
                counter.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, Infallible>(Outcome::Accept) }
            }),
        )
        .concurrency(8)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let started = Instant::now();
    let running = tokio::spawn(worker.run());
    wait_for(
        "the fast topic's lag to reach 0",
        Duration::from_secs(30),
        async || Ok(admin.share_group_lag(&group, &fast).await? == 0),
    )
    .await?;
    let took = started.elapsed();
    shutdown.shutdown();
    let summary = running.await??;
    assert!(
        took < Duration::from_secs(9),
        "the fast topic took {took:?}: it waited for the stuck route"
    );
    assert_eq!(handled.load(Ordering::SeqCst), 50, "{summary:?}");
    assert_eq!(summary.renewal_failures, 0, "{summary:?}");
    Ok(())
}

/// While records are being handled, a fetch to their broker (which answers one request per
/// connection at a time) holds the connection only briefly, so their acknowledgements are
/// answered when the handlers finish, not after a long poll of the (now empty) topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgements_do_not_wait_behind_a_long_poll() -> anyhow::Result<()> {
    const RECORDS: usize = 5;
    let long_poll = Duration::from_secs(8);
    let (admin, topic, group) = prepared(RECORDS, None).await?;
    let finished: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let handler_finished = finished.clone();
    let source = KafkaSource::builder(tests::bootstrap(), &group)
        .topic(&topic)
        .max_wait(long_poll)
        .build()
        .await?;
    let worker = Worker::builder(source)
        .route(
            topic.as_str(),
            service_fn(move |_job: Job| {
                let finished = handler_finished.clone();
                async move {
                    // Long enough for the next fetch to be at the broker meanwhile.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    finished.lock().expect("ledger").push(Instant::now());
                    Ok::<_, Infallible>(Outcome::Accept)
                }
            }),
        )
        .concurrency(10)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for(
        "every handler to finish",
        Duration::from_secs(30),
        async || Ok(finished.lock().expect("ledger").len() == RECORDS),
    )
    .await?;
    let last = finished
        .lock()
        .expect("ledger")
        .iter()
        .max()
        .copied()
        .context("no handler finished")?;
    wait_for("the group's lag to reach 0", long_poll * 2, async || {
        Ok(admin.share_group_lag(&group, &topic).await? == 0)
    })
    .await?;
    let settled = last.elapsed();
    shutdown.shutdown();
    let summary = running.await??;
    assert_eq!(summary.accepted, RECORDS as u64, "{summary:?}");
    assert_eq!(summary.ack_failures.total(), 0, "{summary:?}");
    assert!(
        settled < Duration::from_secs(3),
        "the acknowledgements took {settled:?} after the last handler finished: they waited \
         behind a fetch holding the connection for up to {long_poll:?}"
    );
    Ok(())
}
