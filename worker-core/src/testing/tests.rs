use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::source::{AckError, AckKind, ShareSource};

fn broker(lock: Duration, limit: u16) -> MemoryBroker {
    MemoryBroker::builder()
        .lock_duration(lock)
        .delivery_limit(limit)
        .fetch_wait(Duration::from_millis(100))
        .build()
}

#[tokio::test(start_paused = true)]
async fn fetch_never_returns_more_than_max_records() {
    let broker = MemoryBroker::new();
    for i in 0..10 {
        broker.produce("t", format!("{i}"));
    }
    let member = broker.member("a");
    let batch = member.fetch(3).await.unwrap();
    assert_eq!(batch.len(), 3);
    assert_eq!(
        batch.iter().map(|d| d.id.offset).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert!(batch.iter().all(|d| d.delivery_count == 1));
    assert_eq!(broker.counts().acquired, 3);
    assert_eq!(broker.counts().available, 7);
    assert_eq!(member.fetch(100).await.unwrap().len(), 7);
    let log = broker.fetches();
    assert_eq!(
        log.iter()
            .map(|f| (f.requested, f.returned))
            .collect::<Vec<_>>(),
        [(3, 3), (100, 7)]
    );
}

#[tokio::test(start_paused = true)]
async fn an_empty_fetch_waits_then_returns_nothing() {
    let broker = broker(Duration::from_secs(1), 5);
    let member = broker.member("a");
    let start = Instant::now();
    assert!(member.fetch(5).await.unwrap().is_empty());
    assert_eq!(start.elapsed(), Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_fetch_wakes_when_a_record_is_produced() {
    let broker = broker(Duration::from_secs(1), 5);
    let member = broker.member("a");
    let producer = broker.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        producer.produce("t", "x");
    });
    let start = Instant::now();
    assert_eq!(member.fetch(5).await.unwrap().len(), 1);
    assert_eq!(start.elapsed(), Duration::from_millis(30));
}

#[tokio::test(start_paused = true)]
async fn an_expired_lock_makes_the_record_available_again() {
    let broker = broker(Duration::from_secs(1), 5);
    broker.produce("t", "x");
    let a = broker.member("a");
    let b = broker.member("b");
    let first = a.fetch(1).await.unwrap();
    assert!(b.fetch(1).await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(broker.record_state("t", 0, 0), Some(RecordState::Available));
    let second = b.fetch(1).await.unwrap();
    assert_eq!(second[0].delivery_count, 2);
    assert_eq!(
        a.acknowledge(&first[0].id, AckKind::Accept).await,
        Err(AckError::LockLost)
    );
    assert_eq!(broker.stats().lock_expiries, 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_fetch_picks_up_a_record_whose_lock_ended() {
    let broker = MemoryBroker::builder()
        .lock_duration(Duration::from_millis(50))
        .build();
    broker.produce("t", "x");
    let a = broker.member("a");
    let b = broker.member("b");
    a.fetch(1).await.unwrap();
    let start = Instant::now();
    assert_eq!(b.fetch(1).await.unwrap().len(), 1);
    assert_eq!(start.elapsed(), Duration::from_millis(50));
}

#[tokio::test(start_paused = true)]
async fn release_redelivers_until_the_limit_then_archives() {
    let broker = broker(Duration::from_secs(1), 3);
    broker.produce("t", "x");
    let member = broker.member("a");
    for count in 1..=3u16 {
        let batch = member.fetch(1).await.unwrap();
        assert_eq!(batch[0].delivery_count, count);
        member
            .acknowledge(&batch[0].id, AckKind::Release)
            .await
            .unwrap();
    }
    assert_eq!(broker.record_state("t", 0, 0), Some(RecordState::Archived));
    assert_eq!(broker.delivery_count("t", 0, 0), Some(3));
    assert!(member.fetch(1).await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn lock_expiry_at_the_limit_archives() {
    let broker = broker(Duration::from_secs(1), 1);
    broker.produce("t", "x");
    let member = broker.member("a");
    member.fetch(1).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(broker.record_state("t", 0, 0), Some(RecordState::Archived));
}

#[tokio::test(start_paused = true)]
async fn accept_and_reject_settle_for_good() {
    let broker = broker(Duration::from_secs(1), 5);
    broker.produce("t", "x");
    broker.produce("t", "y");
    let member = broker.member("a");
    let batch = member.fetch(2).await.unwrap();
    member
        .acknowledge(&batch[0].id, AckKind::Accept)
        .await
        .unwrap();
    member
        .acknowledge(&batch[1].id, AckKind::Reject)
        .await
        .unwrap();
    assert_eq!(
        member.acknowledge(&batch[0].id, AckKind::Accept).await,
        Err(AckError::LockLost)
    );
    let counts = broker.counts();
    assert_eq!((counts.acknowledged, counts.archived), (1, 1));
    let stats = broker.stats();
    assert_eq!((stats.accepts, stats.rejects), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn renew_extends_the_lock_and_can_be_made_to_fail() {
    let broker = broker(Duration::from_secs(1), 5);
    broker.produce("t", "x");
    let member = broker.member("a");
    let batch = member.fetch(1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    member.renew(&batch[0].id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(broker.record_state("t", 0, 0), Some(RecordState::Acquired));
    broker.fail_renewals(true);
    assert_eq!(member.renew(&batch[0].id).await, Err(AckError::LockLost));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(broker.record_state("t", 0, 0), Some(RecordState::Available));
    let stats = broker.stats();
    assert_eq!((stats.renewals, stats.renew_failures), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn closing_a_member_releases_its_records_at_once() {
    let broker = broker(Duration::from_secs(30), 5);
    broker.create_topic("t", 2);
    for i in 0..4 {
        broker.produce("t", format!("{i}"));
    }
    let a = broker.member("a");
    let b = broker.member("b");
    assert_eq!(a.fetch(3).await.unwrap().len(), 3);
    assert_eq!(a.held(), 3);
    assert_eq!(b.fetch(3).await.unwrap().len(), 1);
    a.close().await.unwrap();
    assert_eq!(b.fetch(10).await.unwrap().len(), 3);
    assert_eq!(
        a.fetch(1).await.unwrap_err().kind(),
        crate::ErrorKind::Closed
    );
}

#[tokio::test(start_paused = true)]
async fn a_reset_session_fails_old_acknowledgements() {
    let broker = broker(Duration::from_secs(30), 5);
    broker.produce("t", "x");
    let member = broker.member("a");
    let old = member.fetch(1).await.unwrap();
    member.reset_session();
    let new = member.fetch(1).await.unwrap();
    assert_eq!(new[0].delivery_count, 2);
    assert_eq!(
        member.acknowledge(&old[0].id, AckKind::Accept).await,
        Err(AckError::SessionLost)
    );
    member
        .acknowledge(&new[0].id, AckKind::Accept)
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn records_keep_key_headers_and_partition() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 3);
    let at = broker.produce_record(
        "t",
        ProducedRecord::new("v")
            .key("k")
            .partition(2)
            .header("h", "1")
            .timestamp(7),
    );
    assert_eq!(at, Some((2, 0)));
    assert_eq!(
        broker.produce_record("t", ProducedRecord::new("v").partition(3)),
        None
    );
    let d = broker.member("a").fetch(1).await.unwrap().remove(0);
    assert_eq!(d.key.as_deref(), Some(&b"k"[..]));
    assert_eq!(d.headers[0].key.as_ref(), "h");
    assert_eq!((d.id.partition, d.timestamp), (2, 7));
}

#[tokio::test(start_paused = true)]
async fn receipts_can_resolve_late() {
    let broker = MemoryBroker::builder()
        .ack_latency(Duration::from_millis(40))
        .build();
    broker.produce("t", "x");
    let member = broker.member("a");
    let batch = member.fetch(1).await.unwrap();
    let start = Instant::now();
    let receipt = member.acknowledge(&batch[0].id, AckKind::Accept);
    assert_eq!(
        broker.record_state("t", 0, 0),
        Some(RecordState::Acknowledged)
    );
    receipt.await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(40));
}
