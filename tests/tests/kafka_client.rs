//! Integration tests of the native share-group client against a real broker
//! (`scripts/kafka.sh start`; `KAFKA_BOOTSTRAP`, default 127.0.0.1:9092).
//!
//! Every test uses its own topic and group, so they can run in parallel. A missing broker fails the
//! tests; nothing is skipped.

#[path = "kafka_client/support.rs"]
mod support;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use rdkafka::ClientConfig;
use rdkafka::producer::Producer;
use tokio::time::Instant;
use worker_kafka::{AckError, AckKind, Admin, Delivery, KafkaSource};

use support::*;

/// Done-when 1: join, fetch 1,000 in record_limit mode, never more than asked, each once, all
/// accepted, lag 0.
#[tokio::test]
async fn fetches_a_thousand_records_within_the_limit_and_reaches_lag_zero() -> Result<()> {
    let (admin, topic, group) = setup(1, None).await?;
    produce(&topic, 1000).await?;
    let src = source(&group, &topic).await?;
    let records = fetch_n(&src, 1000, 37, Duration::from_secs(60)).await?;
    let before = admin.share_group_lag(&group, &topic).await?;
    ensure!(before > 0, "lag before acknowledging is {before}");
    let offsets: HashSet<i64> = records.iter().map(|d| d.id.offset).collect();
    ensure!(
        offsets.len() == 1000,
        "duplicates: {} unique of {}",
        offsets.len(),
        records.len()
    );
    ensure!(records.iter().all(|d| d.delivery_count == 1));
    let d = &records[0];
    ensure!(d.value.as_deref() == Some(format!("v-{}", d.id.offset).as_bytes()));
    ensure!(d.key.as_deref() == Some(format!("k-{}", d.id.offset).as_bytes()));
    ensure!(d.lock_duration > Duration::ZERO);
    ack_all(&src, &records, AckKind::Accept).await?;
    wait_lag_zero(&admin, &group, &topic).await?;
    ensure!(src.fetch(10).await?.is_empty());
    src.close().await?;
    Ok(())
}

/// Done-when 2: RELEASE brings the record back with delivery count 2; REJECT never does.
#[tokio::test]
async fn release_redelivers_and_reject_archives() -> Result<()> {
    let (admin, topic, group) = setup(1, None).await?;
    produce(&topic, 2).await?;
    let src = source(&group, &topic).await?;
    let mut got = fetch_n(&src, 2, 2, Duration::from_secs(30)).await?;
    got.sort_by_key(|d| d.id.offset);
    src.acknowledge(&got[0].id, AckKind::Release).await?;
    src.acknowledge(&got[1].id, AckKind::Reject).await?;
    let (again, others) = fetch_until(&src, Duration::from_secs(15), |d| {
        d.id.offset == got[0].id.offset
    })
    .await?;
    ensure!(others.is_empty(), "unexpected records: {others:?}");
    ensure!(
        again.delivery_count == 2,
        "delivery count {}",
        again.delivery_count
    );
    src.acknowledge(&again.id, AckKind::Accept).await?;
    wait_lag_zero(&admin, &group, &topic).await?;
    // The rejected record never comes back.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let got = src.fetch(10).await?;
        ensure!(got.is_empty(), "rejected record came back: {got:?}");
    }
    src.close().await?;
    Ok(())
}

/// Done-when 3: with 100 records acquired and unacknowledged a further fetch acquires more; acks
/// sent later, in any order, are all accepted.
#[tokio::test]
async fn fetches_pipeline_while_records_are_held() -> Result<()> {
    let (admin, topic, group) = setup(1, None).await?;
    produce(&topic, 300).await?;
    let src = source(&group, &topic).await?;
    let first = fetch_n(&src, 100, 100, Duration::from_secs(30)).await?;
    let second = fetch_n(&src, 100, 100, Duration::from_secs(30)).await?;
    let mut held: Vec<Delivery> = first.into_iter().chain(second).collect();
    let unique: HashSet<i64> = held.iter().map(|d| d.id.offset).collect();
    ensure!(
        unique.len() == 200,
        "{} unique of {}",
        unique.len(),
        held.len()
    );
    // Any order: odd offsets descending, then even ones ascending.
    held.sort_by_key(|d| {
        (
            d.id.offset % 2 == 0,
            if d.id.offset % 2 == 1 {
                -d.id.offset
            } else {
                d.id.offset
            },
        )
    });
    ack_all(&src, &held, AckKind::Accept).await?;
    let rest = fetch_n(&src, 100, 64, Duration::from_secs(30)).await?;
    ensure!(rest.iter().all(|d| !unique.contains(&d.id.offset)));
    ack_all(&src, &rest, AckKind::Accept).await?;
    wait_lag_zero(&admin, &group, &topic).await?;
    src.close().await?;
    Ok(())
}

/// Done-when 4: RENEW keeps a record past three lock durations with delivery count 1; without
/// renewing it comes back with count 2.
#[tokio::test]
async fn renew_keeps_the_lock_and_its_absence_loses_it() -> Result<()> {
    let (admin, topic, group) = setup(1, Some(2000)).await?;
    produce(&topic, 1).await?;
    let src = source(&group, &topic).await?;
    let watcher = source(&group, &topic).await?;
    let held = fetch_n(&src, 1, 1, Duration::from_secs(30))
        .await?
        .remove(0);
    ensure!(
        held.lock_duration == Duration::from_millis(2000),
        "lock {:?}",
        held.lock_duration
    );
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        src.renew(&held.id).await.context("renew")?;
        let deadline = Instant::now() + Duration::from_millis(700);
        while Instant::now() < deadline {
            let seen = watcher.fetch(10).await?;
            ensure!(seen.is_empty(), "renewed record was redelivered: {seen:?}");
        }
    }
    src.acknowledge(&held.id, AckKind::Accept)
        .await
        .context("accept after renewing")?;
    wait_lag_zero(&admin, &group, &topic).await?;

    // Without renewing, the lock runs out and the record comes back with count 2.
    produce(&topic, 1).await?;
    let lapsed = fetch_n(&src, 1, 1, Duration::from_secs(30))
        .await?
        .remove(0);
    ensure!(lapsed.delivery_count == 1);
    let (back, _) = fetch_until(&src, Duration::from_secs(15), |d| {
        d.id.offset == lapsed.id.offset
    })
    .await?;
    ensure!(
        back.delivery_count == 2,
        "delivery count {}",
        back.delivery_count
    );
    // The old acquisition is gone: acknowledging it fails, acknowledging the new one works.
    src.acknowledge(&back.id, AckKind::Accept).await?;
    wait_lag_zero(&admin, &group, &topic).await?;
    src.close().await?;
    watcher.close().await?;
    Ok(())
}

/// Done-when 5: two clients on one partition both receive records, together all, none twice.
#[tokio::test]
async fn two_clients_share_one_partition() -> Result<()> {
    let (admin, topic, group) = setup(1, None).await?;
    let a = source(&group, &topic).await?;
    let b = source(&group, &topic).await?;
    // Both members hold the partition before any record exists.
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.assignment().is_empty() || b.assignment().is_empty() {
        ensure!(
            Instant::now() < deadline,
            "both members were not assigned within 30s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    produce(&topic, 400).await?;
    let mut seen: HashMap<i64, usize> = HashMap::new();
    let mut per_client = [0usize; 2];
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < 400 {
        ensure!(
            Instant::now() < deadline,
            "only {} of 400 records",
            seen.len()
        );
        for (i, src) in [&a, &b].into_iter().enumerate() {
            let got = src.fetch(10).await?;
            per_client[i] += got.len();
            for d in &got {
                *seen.entry(d.id.offset).or_default() += 1;
            }
            ack_all(src, &got, AckKind::Accept).await?;
        }
    }
    ensure!(
        per_client[0] > 0 && per_client[1] > 0,
        "work split {per_client:?}"
    );
    ensure!(
        seen.values().all(|&n| n == 1),
        "a record reached both clients"
    );
    wait_lag_zero(&admin, &group, &topic).await?;
    a.close().await?;
    b.close().await?;
    Ok(())
}

/// A paused partition is left out of the share fetch: the other partition's records keep
/// coming, none of the paused one's is acquired until it is resumed, and records of it already
/// held are still acknowledged while it is paused.
#[tokio::test]
async fn a_paused_partition_is_not_fetched_and_its_held_records_are_still_acknowledged()
-> Result<()> {
    let (admin, topic, group) = setup(2, None).await?;
    let p = producer(&[])?;
    produce_to(&p, &topic, 0, 0..20).await?;
    produce_to(&p, &topic, 1, 0..20).await?;
    p.flush(Duration::from_secs(10))?;
    let src = source(&group, &topic).await?;
    src.pause_partition(&topic, 0, true);
    let first = fetch_n(&src, 20, 7, Duration::from_secs(30)).await?;
    ensure!(
        first.iter().all(|d| d.id.partition == 1),
        "records of the paused partition: {:?}",
        first.iter().map(|d| &d.id).collect::<Vec<_>>()
    );
    ack_all(&src, &first, AckKind::Accept).await?;
    // Partition 1 is drained and 0 paused: a second of fetches acquires nothing.
    let quiet = Instant::now() + Duration::from_secs(1);
    while Instant::now() < quiet {
        let got = src.fetch(10).await?;
        ensure!(got.is_empty(), "fetched while paused: {got:?}");
    }
    src.pause_partition(&topic, 0, false);
    let held = fetch_n(&src, 5, 5, Duration::from_secs(30)).await?;
    ensure!(held.iter().all(|d| d.id.partition == 0));
    // Paused again while its records are held: their acknowledgements still go through.
    src.pause_partition(&topic, 0, true);
    ack_all(&src, &held, AckKind::Accept).await?;
    ensure!(src.fetch(10).await?.is_empty(), "fetched while paused");
    src.pause_partition(&topic, 0, false);
    let rest = fetch_n(&src, 15, 10, Duration::from_secs(30)).await?;
    let offsets: BTreeSet<i64> = held.iter().chain(&rest).map(|d| d.id.offset).collect();
    ensure!(
        offsets.len() == 20 && rest.iter().all(|d| d.id.partition == 0),
        "partition 0's 20 records once each: {offsets:?}"
    );
    ack_all(&src, &rest, AckKind::Accept).await?;
    wait_lag_zero(&admin, &group, &topic).await?;
    src.close().await?;
    Ok(())
}

/// Done-when 6: every compression, plus an aborted transaction: only committed records arrive,
/// the other acquired offsets are GAP-acknowledged and the lag reaches 0.
#[tokio::test]
async fn compressed_and_transactional_records() -> Result<()> {
    let (admin, topic, group) = setup(1, None).await?;
    admin
        .set_group_config(&group, "share.isolation.level", "read_committed")
        .await?;
    let mut expected = HashSet::new();
    let mut next = 0u32;
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let p = producer(&[("compression.type", codec)])?;
        produce_with(&p, &topic, next..next + 20).await?;
        p.flush(Duration::from_secs(10))?;
        expected.extend((next..next + 20).map(|i| format!("v-{i}")));
        next += 20;
    }
    let tx = producer(&[
        ("transactional.id", &unique("tx")),
        ("compression.type", "lz4"),
    ])?;
    tx.init_transactions(Duration::from_secs(30))?;
    tx.begin_transaction()?;
    produce_with(&tx, &topic, 1000..1010).await?;
    tx.abort_transaction(Duration::from_secs(30))?;
    tx.begin_transaction()?;
    produce_with(&tx, &topic, next..next + 10).await?;
    tx.commit_transaction(Duration::from_secs(30))?;
    expected.extend((next..next + 10).map(|i| format!("v-{i}")));

    let src = source(&group, &topic).await?;
    let got = fetch_n(&src, expected.len(), 25, Duration::from_secs(60)).await?;
    let values: HashSet<String> = got
        .iter()
        .map(|d| String::from_utf8_lossy(d.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    ensure!(
        values == expected,
        "unexpected values: {:?}",
        values.symmetric_difference(&expected).collect::<Vec<_>>()
    );
    ack_all(&src, &got, AckKind::Accept).await?;
    // Control records and aborted offsets are GAP-acknowledged: the lag reaches 0 and nothing else
    // is ever delivered.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let extra = src.fetch(50).await?;
        ensure!(
            extra.is_empty(),
            "uncommitted or duplicate records delivered: {extra:?}"
        );
        if admin.share_group_lag(&group, &topic).await? == 0 {
            break;
        }
        ensure!(Instant::now() < deadline, "lag did not reach 0");
    }
    src.close().await?;
    Ok(())
}

/// Done-when 7: a dropped connection loses the session: acks for it fail (SessionLost), the client
/// reopens at epoch 0 and keeps consuming, and every record held by the lost session comes back.
///
/// The broker races the close of the old connection against the new session of the same member
/// (its share-session cache handles both on different threads), and each interleaving is legal:
/// - the close first: the held records are released at once and come back with count 2;
/// - the new session first: they stay acquired by the member until their lock ends (5 s here);
/// - the close in between (the group has no session for a moment): the broker drops the share
///   partition's in-memory state and reloads it, so held records come back with count 1 — the
///   broker persists delivery counts on acknowledgement, not on acquisition;
/// - the close handled as the new session's (same member, same key): the new session is dropped
///   too, its acks fail with SessionLost and its records come back once more.
///
/// What must hold in every case is what the worker relies on: nothing acknowledged in a lost
/// session counts, the client recovers on its own, and nothing is lost.
#[tokio::test]
async fn session_loss_fails_acks_and_consumption_resumes() -> Result<()> {
    let (admin, topic, group) = setup(1, Some(5_000)).await?;
    produce(&topic, 20).await?;
    let src = source(&group, &topic).await?;
    let held = fetch_n(&src, 10, 10, Duration::from_secs(30)).await?;
    src.drop_connections();
    let results =
        futures::future::join_all(held.iter().map(|d| src.acknowledge(&d.id, AckKind::Accept)))
            .await;
    for r in &results {
        ensure!(
            *r == Err(AckError::SessionLost),
            "ack for a lost session: {r:?}"
        );
    }
    // Every offset must be delivered again after the loss and accepted in a live session.
    let mut accepted: BTreeSet<i64> = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while accepted.len() < 20 {
        ensure!(
            Instant::now() < deadline,
            "only {:?} of 20 records accepted after the session loss",
            accepted
        );
        let got = src.fetch(10).await?;
        let receipts = got.iter().map(|d| src.acknowledge(&d.id, AckKind::Accept));
        for (d, r) in got.iter().zip(futures::future::join_all(receipts).await) {
            ensure!(d.delivery_count >= 1, "{} has delivery count 0", d.id);
            match r {
                Ok(()) => {
                    accepted.insert(d.id.offset);
                }
                // The broker dropped the new session with the old connection (see above): the
                // record is redelivered, which the loop waits for.
                Err(AckError::SessionLost) => {}
                Err(e) => anyhow::bail!("ack of {}: {e:?}", d.id),
            }
        }
    }
    wait_lag_zero(&admin, &group, &topic).await?;
    src.close().await?;
    Ok(())
}

/// Done-when 8: close flushes, closes the share session and leaves; unacknowledged records go to
/// another member at once, not after the (30 s) lock expires.
#[tokio::test]
async fn close_releases_held_records_at_once() -> Result<()> {
    let (admin, topic, group) = setup(1, Some(30_000)).await?;
    produce(&topic, 10).await?;
    let a = source(&group, &topic).await?;
    let got = fetch_n(&a, 10, 10, Duration::from_secs(30)).await?;
    // Half are settled in flight with the close; half are left for the close to release.
    let receipts: Vec<_> = got[..5]
        .iter()
        .map(|d| a.acknowledge(&d.id, AckKind::Accept))
        .collect();
    let b = source(&group, &topic).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !admin
        .share_group_members(&group)
        .await?
        .iter()
        .any(|m| m == a.member_id())
    {
        ensure!(
            Instant::now() < deadline,
            "member a never showed up in the group"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let closed_at = Instant::now();
    a.close().await?;
    // The group was left: a is gone from it at once.
    let members = admin.share_group_members(&group).await?;
    ensure!(
        !members.iter().any(|m| m == a.member_id()),
        "a still in the group: {members:?}"
    );
    for r in futures::future::join_all(receipts).await {
        r.context("ack flushed by close")?;
    }
    ensure!(a.acknowledge(&got[5].id, AckKind::Accept).await == Err(AckError::Closed));
    ensure!(a.fetch(1).await.is_err(), "fetch after close");
    let want: HashSet<i64> = got[5..].iter().map(|d| d.id.offset).collect();
    let back = fetch_n(&b, 5, 10, Duration::from_secs(10)).await?;
    let back_offsets: HashSet<i64> = back.iter().map(|d| d.id.offset).collect();
    ensure!(back_offsets == want, "got {back_offsets:?}, want {want:?}");
    ensure!(
        closed_at.elapsed() < Duration::from_secs(15),
        "records came back only after the lock expired"
    );
    ack_all(&b, &back, AckKind::Accept).await?;
    wait_lag_zero(&admin, &group, &topic).await?;
    b.close().await?;
    Ok(())
}

/// Done-when 9: this client and Kafka's Java share consumer in one group consume a topic together
/// with nothing missing.
#[tokio::test]
async fn interoperates_with_the_java_share_consumer() -> Result<()> {
    let (admin, topic, group) = setup(1, None).await?;
    let total = 3000u32;
    let expected: HashSet<String> = (0..total).map(|i| format!("v-{i}")).collect();
    let src = source(&group, &topic).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while src.assignment().is_empty() {
        ensure!(Instant::now() < deadline, "no assignment within 30s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let java = JavaShareConsumer::start(&topic, &group)?;
    // Records arrive as a stream over ~10 s, so both consumers are in the group while they come.
    let producing = {
        let topic = topic.clone();
        tokio::spawn(async move {
            let p = producer(&[])?;
            for chunk in 0..50 {
                produce_with(&p, &topic, chunk * 60..(chunk + 1) * 60).await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            anyhow::Ok(())
        })
    };
    let mut java = java;
    let mut ours: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let union: HashSet<String> = ours.iter().cloned().chain(java.seen()).collect();
        if expected.is_subset(&union) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "missing {} records (ours {}, java {})",
            expected.difference(&union).count(),
            ours.len(),
            java.seen().len()
        );
        let got = src.fetch(20).await?;
        ours.extend(
            got.iter().map(|d| {
                String::from_utf8_lossy(d.value.as_deref().unwrap_or_default()).into_owned()
            }),
        );
        ack_all(&src, &got, AckKind::Accept).await?;
    }
    producing.await??;
    ensure!(!ours.is_empty(), "our client got nothing");
    ensure!(!java.seen().is_empty(), "the Java consumer got nothing");
    src.close().await?;
    // The Java consumer exits on its own after 8 s without records, acknowledging what it printed.
    let exited = tokio::time::timeout(Duration::from_secs(60), java.child.wait()).await;
    ensure!(exited.is_ok(), "the Java share consumer did not exit");
    wait_lag_zero(&admin, &group, &topic).await?;
    Ok(())
}

/// The admin helpers read the delivery-count limit and reject a group id used by a consumer group.
#[tokio::test]
async fn admin_reads_the_delivery_count_limit() -> Result<()> {
    let (admin, _topic, group) = setup(1, None).await?;
    let limit = admin.delivery_count_limit(&group).await?;
    ensure!((2..=10).contains(&limit), "delivery count limit {limit}");
    Ok(())
}

/// Joining with the id of an existing consumer group fails with a message that says so.
#[tokio::test]
async fn a_consumer_group_id_is_a_clear_fatal_error() -> Result<()> {
    use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
    let admin = Admin::connect(bootstrap()).await?;
    let topic = unique("t");
    let group = unique("g");
    admin.create_topic(&topic, 1, 1).await?;
    produce(&topic, 1).await?;
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", &group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()?;
    consumer.subscribe(&[&topic])?;
    tokio::time::timeout(Duration::from_secs(30), consumer.recv()).await??;
    consumer.commit_consumer_state(CommitMode::Sync)?;
    let src = source(&group, &topic).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match src.fetch(1).await {
            Err(e) => {
                ensure!(
                    e.message().contains("not a share group"),
                    "unclear error: {e}"
                );
                break;
            }
            Ok(got) => {
                ensure!(got.is_empty(), "a consumer group's records were delivered");
                ensure!(
                    Instant::now() < deadline,
                    "joining a consumer group did not fail"
                );
            }
        }
    }
    src.close().await?;
    Ok(())
}

/// Acknowledgements and renewals made while another task's fetch is waiting at the broker are
/// sent as soon as that fetch returns, and all are answered.
#[tokio::test]
async fn acks_made_during_a_waiting_fetch_are_answered() -> Result<()> {
    let (admin, topic, group) = setup(1, None).await?;
    produce(&topic, 20).await?;
    let src = source(&group, &topic).await?;
    let held = fetch_n(&src, 20, 20, Duration::from_secs(30)).await?;
    // Nothing is left to acquire: this fetch waits at the broker for its full MaxWaitMs.
    let waiting = {
        let src = src.clone();
        tokio::spawn(async move { src.fetch(10).await })
    };
    let renewals: Vec<_> = held[..10].iter().map(|d| src.renew(&d.id)).collect();
    let acks: Vec<_> = held
        .iter()
        .map(|d| src.acknowledge(&d.id, AckKind::Accept))
        .collect();
    let answered = tokio::time::timeout(Duration::from_secs(5), async {
        (
            futures::future::join_all(renewals).await,
            futures::future::join_all(acks).await,
        )
    })
    .await
    .context("receipts not answered within 5s")?;
    for r in answered.0 {
        r.context("renew")?;
    }
    for r in answered.1 {
        r.context("ack")?;
    }
    ensure!(waiting.await??.is_empty());
    wait_lag_zero(&admin, &group, &topic).await?;
    src.close().await?;
    Ok(())
}

#[tokio::test]
async fn the_source_reports_the_groups_delivery_limit() -> Result<()> {
    let (admin, topic, group) = setup(1, None).await?;
    let source = KafkaSource::builder(bootstrap(), &group)
        .topic(&topic)
        .build()
        .await?;
    let expected = admin.delivery_count_limit(&group).await?;
    assert_eq!(
        source.delivery_limit().await?,
        Some(u16::try_from(expected)?)
    );
    source.close().await?;
    Ok(())
}

/// A source built with `offset_reset(Earliest)` sets the group's `share.auto.offset.reset` before
/// it joins, so a fresh group reads what was produced before it existed (Kafka's default,
/// `latest`, would skip it).
#[tokio::test]
async fn offset_reset_earliest_reads_what_came_before_the_group() -> Result<()> {
    let admin = Admin::connect(bootstrap()).await?;
    let topic = unique("t");
    let group = unique("g");
    admin.create_topic(&topic, 1, 1).await?;
    produce(&topic, 5).await?;
    let src = KafkaSource::builder(bootstrap(), &group)
        .topic(&topic)
        .offset_reset(worker_kafka::OffsetReset::Earliest)
        .max_wait(Duration::from_millis(200))
        .build()
        .await?;
    let records = fetch_n(&src, 5, 5, Duration::from_secs(30)).await?;
    let offsets: Vec<i64> = records.iter().map(|d| d.id.offset).collect();
    ensure!(offsets == vec![0, 1, 2, 3, 4], "fetched {offsets:?}");
    ack_all(&src, &records, AckKind::Accept).await?;
    src.close().await?;
    Ok(())
}
