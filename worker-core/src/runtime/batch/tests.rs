use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::service_fn;

use super::*;
use crate::source::{Delivery, DeliveryId, Lease};

fn job(offset: i64, key: Option<&'static str>) -> Job {
    let delivery = Delivery {
        id: DeliveryId {
            topic: Arc::from("emails"),
            partition: 0,
            offset,
            lease: Lease::new(1, 1),
        },
        key: key.map(|k| Bytes::from_static(k.as_bytes())),
        value: None,
        headers: Vec::new(),
        timestamp: 0,
        delivery_count: 1,
        lock_duration: Duration::from_secs(30),
        acquired_at: Instant::now(),
        undecodable: None,
    };
    Job::new(delivery, CancellationToken::new())
}

/// The batches a service was called with, as the offsets of their jobs.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<Vec<i64>>>>);

impl Calls {
    fn taken(&self) -> Vec<Vec<i64>> {
        self.0.lock().unwrap().clone()
    }
}

/// A batch service that writes its batches down and answers with `answer(offsets)`.
fn bulk(
    calls: &Calls,
    answer: fn(&[i64]) -> Vec<Outcome>,
) -> impl Service<Vec<Job>, Response = Vec<Outcome>, Error = Infallible, Future: Send + 'static>
+ Clone
+ Send
+ 'static
+ use<> {
    let calls = calls.clone();
    service_fn(move |jobs: Vec<Job>| {
        let offsets: Vec<i64> = jobs.iter().map(|j| j.id().offset).collect();
        calls.0.lock().unwrap().push(offsets.clone());
        async move { Ok::<_, Infallible>(answer(&offsets)) }
    })
}

/// Items 3 and 7 of each batch fail (a bulk API's per-item errors), the others succeed.
fn items_3_and_7_fail(offsets: &[i64]) -> Vec<Outcome> {
    (0..offsets.len())
        .map(|i| match i {
            3 => Outcome::retry("item 3: mailbox busy"),
            7 => Outcome::reject("item 7: no such address"),
            _ => Outcome::Accept,
        })
        .collect()
}

fn batcher<T>(service: T, batch: Batch) -> (Batcher<T>, Arc<BatchStats>)
where
    T: Service<Vec<Job>, Response = Vec<Outcome>, Error = Infallible> + Clone + Send + 'static,
    T::Future: Send + 'static,
{
    let stats = Arc::new(BatchStats::new(Arc::from("emails")));
    (Batcher::new(service, batch, stats.clone()), stats)
}

#[tokio::test(start_paused = true)]
async fn a_full_batch_goes_at_once_and_each_record_gets_the_outcome_at_its_place() {
    let calls = Calls::default();
    let (mut batcher, stats) = batcher(
        bulk(&calls, items_3_and_7_fail),
        Batch::new(10, Duration::from_secs(60)),
    );
    let outcomes: Vec<_> = (0..10).map(|i| batcher.call(job(i, None))).collect();
    let outcomes = futures::future::join_all(outcomes).await;
    assert_eq!(calls.taken(), vec![(0..10).collect::<Vec<_>>()]);
    let outcomes: Vec<Outcome> = outcomes.into_iter().map(|o| o.unwrap()).collect();
    assert_eq!(outcomes[3], Outcome::retry("item 3: mailbox busy"));
    assert_eq!(outcomes[7], Outcome::reject("item 7: no such address"));
    assert_eq!(
        outcomes.iter().filter(|o| **o == Outcome::Accept).count(),
        8
    );
    assert_eq!(stats.counts(), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_batch_that_does_not_fill_goes_when_its_linger_has_passed() {
    let calls = Calls::default();
    let (mut batcher, _) = batcher(
        bulk(&calls, |o| vec![Outcome::Accept; o.len()]),
        Batch::new(100, Duration::from_millis(200)),
    );
    let started = Instant::now();
    let first = batcher.call(job(0, None));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let second = batcher.call(job(1, None));
    let (first, second) = tokio::join!(first, second);
    assert_eq!(
        (first.unwrap(), second.unwrap()),
        (Outcome::Accept, Outcome::Accept)
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(200),
        "linger counts from the batch's first record"
    );
    assert_eq!(calls.taken(), vec![vec![0, 1]]);
    // The next batch has a linger of its own.
    let third = batcher.call(job(2, None));
    let again = Instant::now();
    assert_eq!(third.await.unwrap(), Outcome::Accept);
    assert_eq!(again.elapsed(), Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn an_answer_of_the_wrong_length_or_a_panic_retries_every_record_saying_why() {
    let calls = Calls::default();
    let (mut short, stats) = batcher(
        bulk(&calls, |o| vec![Outcome::Accept; o.len() - 1]),
        Batch::new(3, Duration::from_secs(1)),
    );
    let outcomes = futures::future::join_all((0..3).map(|i| short.call(job(i, None)))).await;
    for outcome in outcomes {
        assert_eq!(
            outcome.unwrap(),
            Outcome::retry("the batch handler answered 2 outcomes for a batch of 3 records")
        );
    }
    assert_eq!(stats.counts(), (1, 1));
    let (mut panicking, stats) = batcher(
        service_fn(|_jobs: Vec<Job>| async {
            if true {
                panic!("the provider's SDK gave up");
            }
            Ok::<Vec<Outcome>, Infallible>(Vec::new())
        }),
        Batch::new(2, Duration::from_secs(1)),
    );
    let outcomes = futures::future::join_all((0..2).map(|i| panicking.call(job(i, None)))).await;
    for outcome in outcomes {
        assert_eq!(
            outcome.unwrap(),
            Outcome::retry("the batch handler panicked: the provider's SDK gave up")
        );
    }
    assert_eq!(stats.counts(), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn by_key_each_key_fills_a_batch_of_its_own() {
    let calls = Calls::default();
    let (mut batcher, _) = batcher(
        bulk(&calls, |o| vec![Outcome::Accept; o.len()]),
        Batch::new(2, Duration::from_millis(100)).by_key(),
    );
    let keys = [Some("tenant-a"), Some("tenant-b"), Some("tenant-a"), None];
    let outcomes: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| batcher.call(job(i as i64, *key)))
        .collect();
    futures::future::join_all(outcomes).await;
    let mut taken = calls.taken();
    taken.sort();
    assert_eq!(taken, vec![vec![0, 2], vec![1], vec![3]]);
}

#[tokio::test(start_paused = true)]
async fn a_batch_whose_records_all_gave_up_is_dropped() {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let (mut batcher, _) = batcher(
        service_fn(move |_jobs: Vec<Job>| {
            let flag = flag.clone();
            async move {
                struct SetOnDrop(Arc<AtomicBool>);
                impl Drop for SetOnDrop {
                    fn drop(&mut self) {
                        self.0.store(true, Ordering::SeqCst);
                    }
                }
                let _guard = SetOnDrop(flag);
                std::future::pending::<()>().await;
                Ok::<Vec<Outcome>, Infallible>(Vec::new())
            }
        }),
        Batch::new(2, Duration::from_secs(1)),
    );
    let waiting = [batcher.call(job(0, None)), batcher.call(job(1, None))];
    // The job timeout drops the records' futures.
    let timed_out =
        tokio::time::timeout(Duration::from_secs(5), futures::future::join_all(waiting)).await;
    assert!(timed_out.is_err());
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(
        dropped.load(Ordering::SeqCst),
        "the batch call was dropped with its records"
    );
}

#[tokio::test(start_paused = true)]
async fn a_record_that_stopped_waiting_before_the_call_is_left_out_of_it() {
    let calls = Calls::default();
    let (mut batcher, stats) = batcher(
        bulk(&calls, |o| vec![Outcome::Accept; o.len()]),
        Batch::new(10, Duration::from_millis(100)),
    );
    let released = batcher.call(job(0, None));
    let waiting = batcher.call(job(1, None));
    drop(released);
    assert_eq!(waiting.await.unwrap(), Outcome::Accept);
    assert_eq!(
        calls.taken(),
        vec![vec![1]],
        "the released record is not sent"
    );
    let gone = batcher.call(job(2, None));
    drop(gone);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        calls.taken().len(),
        1,
        "a batch nobody waits for is not sent"
    );
    assert_eq!(stats.counts(), (1, 0));
}

#[test]
fn a_batch_of_no_record_or_too_many_is_refused() {
    assert!(Batch::new(0, Duration::ZERO).check().is_err());
    assert!(Batch::new(Batch::MAX + 1, Duration::ZERO).check().is_err());
    assert!(Batch::new(Batch::MAX, Duration::ZERO).check().is_ok());
}
