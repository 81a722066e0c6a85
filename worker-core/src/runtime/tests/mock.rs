//! The dispatch loop against a mocked [`ShareSource`] (mockall): fetch sizing, exactly-once
//! acknowledgement and which records get renewed.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::support::{handler, run_until, seq, wait_until};
use crate::runtime::Worker;
use crate::source::{AckKind, AckReceipt, Delivery, DeliveryId, Lease, ShareSource};
use crate::{Outcome, Result};

mockall::mock! {
    Source {}
    impl ShareSource for Source {
        fn fetch(&self, max_records: u32) -> impl Future<Output = Result<Vec<Delivery>>> + Send;
        fn acknowledge(&self, id: &DeliveryId, kind: AckKind) -> AckReceipt;
        fn renew(&self, id: &DeliveryId) -> AckReceipt;
        fn close(&self) -> impl Future<Output = Result<()>> + Send;
        fn fetch_requests(&self) -> usize;
    }
}

/// What the mock saw, shared with the test.
#[derive(Default)]
struct Ledger {
    next: usize,
    total: usize,
    /// Records delivered and not yet acknowledged.
    held: usize,
    /// (max_records, held when asked).
    fetches: Vec<(u32, usize)>,
    acks: HashMap<i64, Vec<AckKind>>,
    renewals: Vec<(i64, Instant)>,
}

fn delivery(offset: usize, lock: Duration) -> Delivery {
    Delivery {
        id: DeliveryId {
            topic: "t".into(),
            partition: 0,
            offset: offset as i64,
            lease: Lease::new(1, 0),
        },
        key: None,
        value: Some(offset.to_string().into()),
        headers: Vec::new(),
        timestamp: 0,
        delivery_count: 1,
        lock_duration: lock,
        acquired_at: Instant::now(),
        undecodable: None,
    }
}

impl Ledger {
    /// Hands out the next records, at most `n` and never past `total`.
    fn hand_out(&mut self, n: usize, lock: Duration) -> Vec<Delivery> {
        let n = n.min(self.total - self.next);
        let batch = (self.next..self.next + n)
            .map(|i| delivery(i, lock))
            .collect();
        self.next += n;
        batch
    }
}

/// A mock that hands out `total` records with `lock` locks and records every call in the ledger.
fn source(total: usize, lock: Duration) -> (MockSource, Arc<Mutex<Ledger>>) {
    source_with_round_trip(total, lock, Duration::ZERO)
}

/// The same, with every fetch that brings records taking `round_trip`.
fn source_with_round_trip(
    total: usize,
    lock: Duration,
    round_trip: Duration,
) -> (MockSource, Arc<Mutex<Ledger>>) {
    source_sending(total, lock, round_trip, |_| 1)
}

/// The same, for a source whose `n`-th fetch sends `requests(n)` requests at once (one per
/// leader).
fn source_sending(
    total: usize,
    lock: Duration,
    round_trip: Duration,
    requests: fn(usize) -> usize,
) -> (MockSource, Arc<Mutex<Ledger>>) {
    let ledger = Arc::new(Mutex::new(Ledger {
        total,
        ..Ledger::default()
    }));
    let mut mock = MockSource::new();
    let l = ledger.clone();
    mock.expect_fetch().returning(move |max| {
        let mut ledger = l.lock().unwrap();
        let held = ledger.held;
        ledger.fetches.push((max, held));
        let batch = ledger.hand_out(max as usize, lock);
        ledger.held += batch.len();
        Box::pin(async move {
            if batch.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            } else if !round_trip.is_zero() {
                tokio::time::sleep(round_trip).await;
            }
            Ok(batch)
        })
    });
    let l = ledger.clone();
    mock.expect_acknowledge().returning(move |id, kind| {
        let mut ledger = l.lock().unwrap();
        ledger.held -= 1;
        ledger.acks.entry(id.offset).or_default().push(kind);
        AckReceipt::ready(Ok(()))
    });
    let l = ledger.clone();
    mock.expect_renew().returning(move |id| {
        l.lock().unwrap().renewals.push((id.offset, Instant::now()));
        AckReceipt::ready(Ok(()))
    });
    mock.expect_close()
        .times(1)
        .returning(|| Box::pin(async { Ok(()) }));
    let l = ledger.clone();
    mock.expect_fetch_requests()
        .returning(move || requests(l.lock().unwrap().fetches.len()));
    (mock, ledger)
}

#[tokio::test(start_paused = true)]
async fn fetch_sizes_follow_free_slots() {
    let (mock, ledger) = source(40, Duration::from_secs(30));
    let worker = Worker::builder(mock)
        .route(
            "t",
            handler(|job| async move {
                // Uneven latencies so slots free up one by one, in a mixed order.
                let ms = 5 + (seq(&job) * 7) % 23;
                tokio::time::sleep(Duration::from_millis(ms as u64)).await;
                Outcome::Accept
            }),
        )
        .concurrency(8)
        .max_poll_records(5)
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let l = ledger.clone();
    wait_until(Duration::from_secs(10), "all acknowledged", move || {
        l.lock().unwrap().acks.len() == 40
    })
    .await;
    shutdown.shutdown();
    run.await.unwrap().unwrap();

    let ledger = ledger.lock().unwrap();
    assert!(ledger.fetches.len() > 8, "{:?}", ledger.fetches);
    for &(max, held) in &ledger.fetches {
        assert!(max >= 1, "never fetch with no free slot");
        assert_eq!(
            max as usize,
            (8 - held).min(5),
            "fetch asks for min(free slots, max_poll_records): {:?}",
            ledger.fetches
        );
    }
    assert_eq!(ledger.fetches[0], (5, 0));
    assert_eq!(ledger.fetches[1], (3, 5));
}

/// Runs `total` records through `concurrency` handlers that each sleep `handler_time`, fetches
/// taking `round_trip`; returns the ledger and the most handlers that ran at once.
async fn run_timed(
    total: usize,
    concurrency: usize,
    handler_time: Duration,
    round_trip: Duration,
) -> (Arc<Mutex<Ledger>>, usize) {
    let (mock, ledger) = source_with_round_trip(total, Duration::from_secs(30), round_trip);
    let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (r, m) = (running.clone(), most.clone());
    let worker = Worker::builder(mock)
        .route(
            "t",
            handler(move |_job| {
                let (running, most) = (r.clone(), m.clone());
                async move {
                    use std::sync::atomic::Ordering::SeqCst;
                    most.fetch_max(running.fetch_add(1, SeqCst) + 1, SeqCst);
                    tokio::time::sleep(handler_time).await;
                    running.fetch_sub(1, SeqCst);
                    Outcome::Accept
                }
            }),
        )
        .concurrency(concurrency)
        .max_poll_records(concurrency as u32)
        .build()
        .unwrap();
    let l = ledger.clone();
    run_until(
        worker,
        Duration::from_secs(60),
        "all acknowledged",
        move || l.lock().unwrap().acks.len() == total,
    )
    .await;
    let most = most.load(std::sync::atomic::Ordering::SeqCst);
    (ledger, most)
}

#[tokio::test(start_paused = true)]
async fn fetches_ask_ahead_for_what_fast_handlers_finish_in_two_round_trips() {
    // 100 handlers of 50 ms finish 2 records a millisecond; fetches take 3 ms: about 12 ahead
    // (the loop's clock reads each duration within a millisecond).
    let (ledger, most) = run_timed(
        3_000,
        100,
        Duration::from_millis(50),
        Duration::from_millis(3),
    )
    .await;
    let ledger = ledger.lock().unwrap();
    assert_eq!(most, 100, "never more handlers than the concurrency");
    let ahead = ledger
        .fetches
        .iter()
        .map(|&(max, held)| (held + max as usize).saturating_sub(100))
        .max();
    let ahead = ahead.unwrap_or_default();
    assert!(
        (10..=15).contains(&ahead),
        "{ahead} ahead: {:?}",
        ledger.fetches
    );
    assert!(
        ledger
            .acks
            .values()
            .all(|kinds| kinds == &[AckKind::Accept])
    );
}

#[tokio::test(start_paused = true)]
async fn fast_handlers_get_a_whole_batch_fetched_ahead_and_no_more() {
    // Handlers that take no time finish everything a fetch brings long before the next answers:
    // the next fetch asks for a full batch beyond the handlers, never for more.
    let fetches = no_op_fetches(5_000, 100, 100, Duration::from_millis(3), |_| 1).await;
    assert_unfinished_reach(&fetches, 100 + 100);
}

/// Asserts that no fetch asked for more than `most` records together with those held, and that
/// one asked for exactly that.
fn assert_unfinished_reach(fetches: &[(u32, usize)], most: usize) {
    let unfinished = |&(max, held): &(u32, usize)| held + max as usize;
    assert!(fetches.iter().all(|f| unfinished(f) <= most), "{fetches:?}");
    assert_eq!(
        fetches.iter().map(unfinished).max(),
        Some(most),
        "{fetches:?}"
    );
}

/// Runs `total` records through `concurrency` no-op handlers, fetching from a source with
/// `requests(n)` leaders at its `n`-th fetch, whose fetches take `round_trip`; returns every
/// fetch as (max_records, held).
async fn no_op_fetches(
    total: usize,
    concurrency: usize,
    max_poll_records: u32,
    round_trip: Duration,
    requests: fn(usize) -> usize,
) -> Vec<(u32, usize)> {
    let (mock, ledger) = source_sending(total, Duration::from_secs(30), round_trip, requests);
    let worker = Worker::builder(mock)
        .route("t", handler(|_job| async { Outcome::Accept }))
        .concurrency(concurrency)
        .max_poll_records(max_poll_records)
        .build()
        .unwrap();
    let l = ledger.clone();
    run_until(
        worker,
        Duration::from_secs(60),
        "all acknowledged",
        move || l.lock().unwrap().acks.len() == total,
    )
    .await;
    std::mem::take(&mut ledger.lock().unwrap().fetches)
}

#[tokio::test(start_paused = true)]
async fn a_fetch_to_several_leaders_asks_for_max_poll_records_from_each() {
    let fetches = no_op_fetches(300, 30, 5, Duration::ZERO, |_| 3).await;
    assert_eq!(fetches[0], (15, 0), "{fetches:?}");
    assert!(fetches.iter().all(|&(max, _)| max <= 15), "{fetches:?}");
}

#[tokio::test(start_paused = true)]
async fn fast_handlers_get_a_batch_fetched_ahead_per_leader() {
    // Three leaders, each with a fetch of its own in flight: a batch of 30 ahead from each.
    let fetches = no_op_fetches(5_000, 30, 50, Duration::from_millis(3), |_| 3).await;
    assert_unfinished_reach(&fetches, 30 + 3 * 30);
}

#[tokio::test(start_paused = true)]
async fn a_worker_fetches_ahead_for_the_leaders_it_has_now() {
    // Three leaders for the first 40 fetches, then one (the others' partitions moved away): the
    // batches ahead shrink back to one.
    let fetches = no_op_fetches(5_000, 30, 50, Duration::from_millis(3), |n| {
        if n < 40 { 3 } else { 1 }
    })
    .await;
    let (three, one) = fetches.split_at(40);
    assert_unfinished_reach(three, 30 + 3 * 30);
    // The records of the first fetch to one leader's time may still be held.
    assert_unfinished_reach(&one[5..], 30 + 30);
}

#[tokio::test(start_paused = true)]
async fn slow_handlers_get_no_records_fetched_ahead() {
    // 8 handlers of 2 s finish 0.004 records in 2 × 1 ms: nothing waits for them.
    let (ledger, most) = run_timed(40, 8, Duration::from_secs(2), Duration::from_millis(1)).await;
    let ledger = ledger.lock().unwrap();
    assert_eq!(most, 8);
    for &(max, held) in &ledger.fetches {
        assert!(held + max as usize <= 8, "{:?}", ledger.fetches);
    }
}

#[tokio::test(start_paused = true)]
async fn every_delivered_record_is_acknowledged_exactly_once() {
    let (mock, ledger) = source(200, Duration::from_secs(30));
    let worker = Worker::builder(mock)
        .route(
            "t",
            handler(|job| async move {
                let n = seq(&job);
                tokio::time::sleep(Duration::from_millis((n % 13) as u64)).await;
                match n % 10 {
                    0 => Outcome::retry("flaky"),
                    1 => Outcome::reject("bad"),
                    2 => panic!("handler bug"),
                    _ => Outcome::Accept,
                }
            }),
        )
        .concurrency(16)
        .build()
        .unwrap();
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let l = ledger.clone();
    wait_until(Duration::from_secs(10), "all acknowledged", move || {
        l.lock().unwrap().acks.len() == 200
    })
    .await;
    shutdown.shutdown();
    let summary = run.await.unwrap().unwrap();

    let ledger = ledger.lock().unwrap();
    assert_eq!(ledger.held, 0);
    for offset in 0..200i64 {
        let expected = match offset % 10 {
            0 | 2 => AckKind::Release,
            1 => AckKind::Reject,
            _ => AckKind::Accept,
        };
        assert_eq!(ledger.acks[&offset], [expected], "record {offset}");
    }
    assert_eq!(
        (
            summary.accepted,
            summary.retried,
            summary.rejected,
            summary.panicked
        ),
        (140, 40, 20, 20)
    );
}

#[tokio::test(start_paused = true)]
async fn only_slow_records_are_renewed() {
    let (mock, ledger) = source(6, Duration::from_secs(1));
    let started = Instant::now();
    let worker = Worker::builder(mock)
        .route(
            "t",
            handler(|job| async move {
                let ms = if seq(&job) == 5 { 2_600 } else { 100 };
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Outcome::Accept
            }),
        )
        .build()
        .unwrap();
    let l = ledger.clone();
    let summary = run_until(
        worker,
        Duration::from_secs(10),
        "all acknowledged",
        move || l.lock().unwrap().acks.len() == 6,
    )
    .await;

    let ledger = ledger.lock().unwrap();
    assert!(ledger.renewals.iter().all(|&(offset, _)| offset == 5));
    let at: Vec<u128> = ledger
        .renewals
        .iter()
        .map(|(_, t)| (*t - started).as_millis())
        .collect();
    assert_eq!(at, [500, 1000, 1500, 2000, 2500]);
    assert_eq!(summary.renewals, 5);
}

#[tokio::test(start_paused = true)]
async fn a_failed_fetch_is_retried_after_a_pause() {
    let mut mock = MockSource::new();
    mock.expect_fetch_requests().return_const(1usize);
    let mut seq = mockall::Sequence::new();
    mock.expect_fetch()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| {
            Box::pin(async { Err(crate::Error::new(crate::ErrorKind::Io, "connection reset")) })
        });
    let start = Instant::now();
    mock.expect_fetch()
        .times(1)
        .in_sequence(&mut seq)
        .returning(move |_| {
            assert!(start.elapsed() >= Duration::from_millis(100), "backed off");
            Box::pin(async { Ok(vec![delivery(0, Duration::from_secs(30))]) })
        });
    mock.expect_fetch()
        .returning(|_| Box::pin(std::future::pending()));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let a = acked.clone();
    mock.expect_acknowledge().returning(move |id, kind| {
        a.lock().unwrap().push((id.offset, kind));
        AckReceipt::ready(Ok(()))
    });
    mock.expect_close()
        .times(1)
        .returning(|| Box::pin(async { Ok(()) }));
    let worker = Worker::builder(mock)
        .route("t", handler(|_| async { Outcome::Accept }))
        .shutdown_grace(Duration::from_secs(1))
        .build()
        .unwrap();
    let a = acked.clone();
    let summary = run_until(worker, Duration::from_secs(5), "acknowledged", move || {
        a.lock().unwrap().len() == 1
    })
    .await;
    assert_eq!(summary.fetch_errors, 1);
    assert_eq!(*acked.lock().unwrap(), [(0, AckKind::Accept)]);
}

/// A source may hand out one record more for each acknowledgement queued while its fetch waits
/// (the native client gives that slot to a broker still long-polling). While the broker is slow to
/// answer acknowledgements their slots stay held: the runtime asks for little enough that such a
/// batch still fits, so no acquired record is released unhandled.
#[tokio::test(start_paused = true)]
async fn slow_acknowledgement_answers_never_make_a_fetch_overflow_the_slots() {
    // Uneven latencies around the fetch's 20 ms, so records finish while fetches wait.
    with_slow_acknowledgement_answers(|seq| 5 + (seq * 7) % 40).await;
}

/// The same with handlers that take no time: a whole batch is fetched ahead of them.
#[tokio::test(start_paused = true)]
async fn slow_acknowledgement_answers_never_make_a_fetch_ahead_overflow_the_slots() {
    with_slow_acknowledgement_answers(|_| 0).await;
}

/// Runs 300 records through 8 handlers that take `handler_ms(seq)`, against a source whose
/// fetches take 20 ms and give one record more per acknowledgement queued meanwhile, and whose
/// broker answers acknowledgements 500 ms late; every record is accepted exactly once.
async fn with_slow_acknowledgement_answers(handler_ms: fn(usize) -> usize) {
    const TOTAL: usize = 300;
    let ledger = Arc::new(Mutex::new(Ledger {
        total: TOTAL,
        ..Ledger::default()
    }));
    let acks_queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut mock = MockSource::new();
    mock.expect_fetch_requests().return_const(1usize);
    let (l, queued) = (ledger.clone(), acks_queued.clone());
    mock.expect_fetch().returning(move |max| {
        let (l, queued) = (l.clone(), queued.clone());
        let before = queued.load(std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let freed = queued.load(std::sync::atomic::Ordering::SeqCst) - before;
            let mut ledger = l.lock().unwrap();
            ledger.fetches.push((max, freed));
            Ok(ledger.hand_out(max as usize + freed, Duration::from_secs(30)))
        })
    });
    let (l, queued) = (ledger.clone(), acks_queued.clone());
    mock.expect_acknowledge().returning(move |id, kind| {
        l.lock()
            .unwrap()
            .acks
            .entry(id.offset)
            .or_default()
            .push(kind);
        queued.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // The broker answers half a second later.
        let (tx, rx) = AckReceipt::channel();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            tx.send(Ok(()));
        });
        rx
    });
    mock.expect_renew().returning(|_| AckReceipt::ready(Ok(())));
    mock.expect_close()
        .times(1)
        .returning(|| Box::pin(async { Ok(()) }));
    let worker = Worker::builder(mock)
        .route(
            "t",
            handler(move |job| async move {
                let ms = handler_ms(seq(&job));
                tokio::time::sleep(Duration::from_millis(ms as u64)).await;
                Outcome::Accept
            }),
        )
        .concurrency(8)
        .build()
        .unwrap();
    let l = ledger.clone();
    let summary = run_until(
        worker,
        Duration::from_secs(60),
        "all acknowledged",
        move || l.lock().unwrap().acks.len() == TOTAL,
    )
    .await;

    let ledger = ledger.lock().unwrap();
    assert!(
        ledger.fetches.iter().any(|&(_, freed)| freed > 0),
        "no acknowledgement was queued during a fetch: {:?}",
        ledger.fetches
    );
    for offset in 0..TOTAL as i64 {
        assert_eq!(ledger.acks[&offset], [AckKind::Accept], "record {offset}");
    }
    assert_eq!(summary.accepted, TOTAL as u64);
}
