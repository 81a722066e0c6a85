//! The failure policy over the Kafka source, against the real broker, judged by ledgers: poison
//! records end in the DLQ exactly once with every provenance header, transient failures succeed on
//! attempt 2 after the configured backoff, panics never kill the worker, undecodable payloads never
//! reach the handler, and a missing DLQ topic stops nothing from being lost.
//!
//! The delivery limit is tested by letting a record's lock run out four times (limit 5) before a
//! worker sees it; the SIGKILL form of that scenario (kill the worker while the record is in
//! flight, again and again) needs the `share-worker` binary and is not here yet.

mod policy_support;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, ensure};
use policy_support::{
    Attempts, Ledger, Setup, WORKER, header_map, json_route, json_values, read_dlq, source_offset,
};
use rdkafka::Message;
use tests::{produce, producer, run_until_drained, wait_for};
use tokio::time::Instant;
use tower::service_fn;
use worker_core::dlq::headers;
use worker_core::policy::Backoff;
use worker_core::source::{AckKind, ShareSource};
use worker_core::{Job, Outcome, Worker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_records_land_in_the_dlq_exactly_once_with_their_provenance() -> anyhow::Result<()> {
    const RECORDS: i64 = 10_000;
    let poison = |n: i64| n % 1000 == 7;
    let setup = Setup::new(
        (0..RECORDS).map(|i| i.to_string()).collect(),
        Duration::from_secs(5),
        true,
    )
    .await?;
    let ledger = Arc::new(Ledger::default());
    let accepted = Arc::new(Mutex::new(BTreeSet::new()));
    let seen = accepted.clone();
    let worker = Worker::builder(setup.source(&ledger).await?)
        .route(
            setup.topic.as_str(),
            service_fn(move |job: Job| {
                let offset = job.id().offset;
                let outcome = if poison(offset) {
                    Outcome::retry(format!("record {offset} is poison"))
                } else {
                    seen.lock().expect("ledger").insert(offset);
                    Outcome::Accept
                };
                async move { Ok::<_, Infallible>(outcome) }
            }),
        )
        .concurrency(256)
        .backoff(Backoff::exponential(
            Duration::from_millis(20),
            Duration::from_millis(200),
        ))
        .dlq(setup.sink(Duration::from_secs(10))?)
        .build()?;
    let summary = run_until_drained(
        worker,
        &setup.admin,
        &setup.group,
        &setup.topic,
        Duration::from_secs(120),
    )
    .await?;

    let letters = read_dlq(format!("{}.dlq", setup.topic), 10, Duration::from_secs(2)).await?;
    let offsets: Vec<i64> = letters
        .iter()
        .map(source_offset)
        .collect::<anyhow::Result<_>>()?;
    let expected: Vec<i64> = (0..RECORDS).filter(|n| poison(*n)).collect();
    let mut sorted = offsets.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, expected, "each poison record exactly once");
    for letter in &letters {
        let h = header_map(letter);
        let offset = source_offset(letter)?;
        assert_eq!(h[headers::TOPIC], setup.topic);
        assert_eq!(h[headers::PARTITION], "0");
        assert_eq!(h[headers::GROUP], setup.group);
        assert_eq!(h[headers::DELIVERY_COUNT], "4", "attempts 1-4 of limit 5");
        assert_eq!(h[headers::REASON], "handler_error");
        assert_eq!(h[headers::ERROR], format!("record {offset} is poison"));
        humantime::parse_rfc3339(&h[headers::FAILED_AT]).context("failed.at is RFC 3339")?;
        assert_eq!(h[headers::WORKER], WORKER);
        assert_eq!(h[headers::HANDLER], setup.topic);
        assert_eq!(letter.payload(), Some(offset.to_string().as_bytes()));
        assert_eq!(letter.key(), Some(offset.to_string().as_bytes()));
        assert_eq!(ledger.acks_of(offset).last(), Some(&AckKind::Reject));
    }
    let accepted = accepted.lock().expect("ledger");
    assert_eq!(
        accepted.len() as i64,
        RECORDS - 10,
        "every other record accepted"
    );
    assert!(accepted.iter().all(|o| !poison(*o)));
    assert_eq!(summary.dead_letters.handler_error, 10, "{summary:?}");
    assert_eq!(summary.dlq_written, 10, "{summary:?}");
    assert_eq!(summary.accepted, (RECORDS - 10) as u64, "{summary:?}");
    assert_eq!(
        summary.retries_scheduled, 30,
        "three held retries per poison record: {summary:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_succeed_on_attempt_two_after_the_backoff() -> anyhow::Result<()> {
    const RECORDS: i64 = 2_000;
    let flaky = |n: i64| n % 100 == 3;
    let backoff = Backoff::exponential(Duration::from_millis(500), Duration::from_millis(500));
    let setup = Setup::new(
        (0..RECORDS).map(|i| i.to_string()).collect(),
        Duration::from_secs(5),
        true,
    )
    .await?;
    let ledger = Arc::new(Ledger::default());
    let attempts: Arc<Mutex<Attempts>> = Arc::default();
    let seen = attempts.clone();
    let worker = Worker::builder(setup.source(&ledger).await?)
        .route(
            setup.topic.as_str(),
            service_fn(move |job: Job| {
                let offset = job.id().offset;
                seen.lock()
                    .expect("ledger")
                    .entry(offset)
                    .or_default()
                    .push((job.attempt(), Instant::now()));
                let outcome = if flaky(offset) && job.attempt() == 1 {
                    Outcome::retry("the SMS gateway said 503")
                } else {
                    Outcome::Accept
                };
                async move { Ok::<_, Infallible>(outcome) }
            }),
        )
        .concurrency(128)
        .backoff(backoff)
        .dlq(setup.sink(Duration::from_secs(10))?)
        .build()?;
    let summary = run_until_drained(
        worker,
        &setup.admin,
        &setup.group,
        &setup.topic,
        Duration::from_secs(120),
    )
    .await?;

    let (low, high) = backoff.window(1);
    // A released record comes back with the next fetch: allow for the fetches' round trips.
    let slack = Duration::from_millis(500);
    let attempts = attempts.lock().expect("ledger");
    assert_eq!(attempts.len() as i64, RECORDS);
    let mut gaps = Vec::new();
    for (offset, tries) in attempts.iter() {
        let counts: Vec<u16> = tries.iter().map(|t| t.0).collect();
        if flaky(*offset) {
            assert_eq!(counts, [1, 2], "record {offset}");
            let gap = tries[1].1 - tries[0].1;
            assert!(
                gap >= low && gap < high + slack,
                "record {offset}: {gap:?} outside [{low:?}, {high:?}) + {slack:?}"
            );
            gaps.push(gap);
        } else {
            assert_eq!(counts, [1], "record {offset}");
        }
        assert_eq!(ledger.acks_of(*offset).last(), Some(&AckKind::Accept));
    }
    assert_eq!(gaps.len(), 20);
    eprintln!(
        "retry gaps: min {:?}, max {:?} (window [{low:?}, {high:?}))",
        gaps.iter().min(),
        gaps.iter().max()
    );
    assert_eq!(summary.accepted, RECORDS as u64, "{summary:?}");
    assert_eq!(summary.retries_scheduled, 20, "{summary:?}");
    assert_eq!(summary.dead_letters.total(), 0, "{summary:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_are_retried_and_the_worker_lives_on() -> anyhow::Result<()> {
    const RECORDS: i64 = 2_000;
    let explodes = |n: i64| n % 100 == 5;
    let setup = Setup::new(
        (0..RECORDS).map(|i| i.to_string()).collect(),
        Duration::from_secs(5),
        true,
    )
    .await?;
    let ledger = Arc::new(Ledger::default());
    let worker = Worker::builder(setup.source(&ledger).await?)
        .route(
            setup.topic.as_str(),
            service_fn(move |job: Job| async move {
                if explodes(job.id().offset) && job.attempt() == 1 {
                    panic!("a handler bug on record {}", job.id().offset);
                }
                Ok::<_, Infallible>(Outcome::Accept)
            }),
        )
        .concurrency(128)
        .backoff(Backoff::exponential(
            Duration::from_millis(50),
            Duration::from_millis(200),
        ))
        .dlq(setup.sink(Duration::from_secs(10))?)
        .build()?;
    let summary = run_until_drained(
        worker,
        &setup.admin,
        &setup.group,
        &setup.topic,
        Duration::from_secs(120),
    )
    .await?;
    assert_eq!(summary.panicked, 20, "{summary:?}");
    assert_eq!(summary.accepted, RECORDS as u64, "{summary:?}");
    assert_eq!(summary.dead_letters.total(), 0, "{summary:?}");
    for offset in (0..RECORDS).filter(|n| explodes(*n)) {
        assert_eq!(
            ledger.acks_of(offset),
            [AckKind::Release, AckKind::Accept],
            "record {offset}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_json_goes_to_the_dlq_without_calling_the_handler() -> anyhow::Result<()> {
    const RECORDS: i64 = 500;
    let broken = |n: i64| n % 100 == 42;
    let setup = Setup::new(json_values(RECORDS, broken), Duration::from_secs(5), true).await?;
    let ledger = Arc::new(Ledger::default());
    let handled = Arc::new(Mutex::new(BTreeSet::new()));
    let worker = Worker::builder(setup.source(&ledger).await?)
        .route(setup.topic.as_str(), json_route(handled.clone()))
        .concurrency(64)
        .dlq(setup.sink(Duration::from_secs(10))?)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for("the lag to reach 0", Duration::from_secs(60), async || {
        Ok(setup.lag().await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;

    let letters = read_dlq(format!("{}.dlq", setup.topic), 5, Duration::from_secs(2)).await?;
    let mut offsets: Vec<i64> = letters
        .iter()
        .map(source_offset)
        .collect::<anyhow::Result<_>>()?;
    offsets.sort_unstable();
    assert_eq!(offsets, [42, 142, 242, 342, 442]);
    for letter in &letters {
        let h = header_map(letter);
        assert_eq!(h[headers::REASON], "decode");
        assert_eq!(h[headers::DELIVERY_COUNT], "1", "never retried");
        assert!(h[headers::ERROR].starts_with("invalid JSON"), "{h:?}");
    }
    let handled = handled.lock().expect("ledger");
    assert_eq!(handled.len() as i64, RECORDS - 5);
    assert!(
        offsets.iter().all(|o| !handled.contains(o)),
        "the handler never saw them"
    );
    assert_eq!(summary.dead_letters.decode, 5, "{summary:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_dlq_topic_missing_nothing_is_lost_and_it_lands_once_created() -> anyhow::Result<()>
{
    const RECORDS: i64 = 200;
    let broken = |n: i64| n % 40 == 13;
    let poison: Vec<i64> = (0..RECORDS).filter(|n| broken(*n)).collect();
    // Locks of 3 s: the records waiting for the DLQ must be renewed to survive.
    let setup = Setup::new(json_values(RECORDS, broken), Duration::from_secs(3), false).await?;
    let ledger = Arc::new(Ledger::default());
    let handled = Arc::new(Mutex::new(BTreeSet::new()));
    let worker = Worker::builder(setup.source(&ledger).await?)
        .route(setup.topic.as_str(), json_route(handled.clone()))
        .concurrency(256)
        .dlq(setup.sink(Duration::from_secs(2))?)
        .dlq_backoff(Backoff::exponential(
            Duration::from_millis(500),
            Duration::from_secs(2),
        ))
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());

    wait_for("the good records", Duration::from_secs(60), async || {
        Ok(handled.lock().expect("ledger").len() as i64 == RECORDS - poison.len() as i64)
    })
    .await?;
    // The first writes fail after the sink's 2 s delivery timeout; let them.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let fetched = ledger.fetched();
    let more: Vec<String> = (RECORDS..RECORDS + 50)
        .map(|i| format!("{{\"n\": {i}}}"))
        .collect();
    produce(&producer(&[])?, &setup.topic, Some(0), more).await?;
    // Ten seconds down: more than three lock durations.
    tokio::time::sleep(Duration::from_secs(10)).await;
    for offset in &poison {
        assert_eq!(
            ledger.acks_of(*offset),
            [],
            "record {offset} settled while the DLQ is down"
        );
    }
    assert_eq!(
        ledger.fetched(),
        fetched,
        "fetching is paused while the DLQ is down"
    );
    assert!(setup.lag().await? >= poison.len() as i64 + 50);

    setup
        .admin
        .create_topic(&format!("{}.dlq", setup.topic), 1, 1)
        .await?;
    wait_for("the lag to reach 0", Duration::from_secs(90), async || {
        Ok(setup.lag().await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;

    let letters = read_dlq(
        format!("{}.dlq", setup.topic),
        poison.len(),
        Duration::from_secs(2),
    )
    .await?;
    let mut offsets: Vec<i64> = letters
        .iter()
        .map(source_offset)
        .collect::<anyhow::Result<_>>()?;
    offsets.sort_unstable();
    assert_eq!(offsets, poison, "each exactly once");
    for offset in &poison {
        assert_eq!(
            ledger.acks_of(*offset),
            [AckKind::Reject],
            "record {offset}"
        );
        let h = letters
            .iter()
            .map(header_map)
            .find(|h| h[headers::OFFSET] == offset.to_string())
            .context("its letter")?;
        assert_eq!(
            h[headers::DELIVERY_COUNT],
            "1",
            "its lock was kept: no redelivery"
        );
    }
    assert_eq!(
        handled.lock().expect("ledger").len() as i64,
        RECORDS + 50 - poison.len() as i64
    );
    assert!(summary.dlq_failures >= poison.len() as u64, "{summary:?}");
    assert!(summary.dlq_pauses >= 1, "{summary:?}");
    assert_eq!(summary.dlq_written, poison.len() as u64, "{summary:?}");
    assert!(summary.renewals > 0, "{summary:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_at_the_delivery_limit_goes_to_the_dlq_without_the_handler() -> anyhow::Result<()>
{
    let setup = Setup::new(vec!["stuck".to_owned()], Duration::from_secs(1), true).await?;
    let ledger = Arc::new(Ledger::default());
    let source = setup.source(&ledger).await?;
    assert_eq!(
        source.delivery_limit().await?,
        Some(5),
        "the broker's default delivery-count limit"
    );
    // Four deliveries that never finish (as if the worker died each time): the locks run out.
    for expected in 1..=4u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(delivery) = source.fetch(1).await?.first() {
                assert_eq!(delivery.delivery_count, expected);
                break;
            }
            ensure!(Instant::now() < deadline, "delivery {expected} within 30 s");
        }
    }
    let calls = Arc::new(Mutex::new(0usize));
    let counted = calls.clone();
    let worker = Worker::builder(source)
        .route(
            setup.topic.as_str(),
            service_fn(move |_job: Job| {
                *counted.lock().expect("ledger") += 1;
                async { Ok::<_, Infallible>(Outcome::Accept) }
            }),
        )
        .dlq(setup.sink(Duration::from_secs(10))?)
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    wait_for("the lag to reach 0", Duration::from_secs(60), async || {
        Ok(setup.lag().await? == 0)
    })
    .await?;
    shutdown.shutdown();
    let summary = running.await??;

    let letters = read_dlq(format!("{}.dlq", setup.topic), 1, Duration::from_secs(2)).await?;
    assert_eq!(letters.len(), 1);
    let h = header_map(&letters[0]);
    assert_eq!(h[headers::REASON], "delivery_limit");
    assert_eq!(h[headers::DELIVERY_COUNT], "5");
    assert_eq!(h[headers::OFFSET], "0");
    assert_eq!(letters[0].payload(), Some(&b"stuck"[..]));
    assert_eq!(
        *calls.lock().expect("ledger"),
        0,
        "the handler was not called"
    );
    assert_eq!(ledger.acks_of(0), [AckKind::Reject]);
    assert_eq!(summary.dead_letters.delivery_limit, 1, "{summary:?}");
    Ok(())
}
