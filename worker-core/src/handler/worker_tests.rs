//! A `#[handler]` job routed in a real [`Worker`](crate::Worker) over the in-memory broker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;

use super::{JobError, Json, Meta, State, handler};
use crate::Worker;
use crate::dlq::DlqReason;
use crate::testing::{MemoryBroker, MemoryDlq};

/// Runs `worker` until `records` records of `broker` are acknowledged or archived (60 s of
/// virtual time at most), then shuts it down.
async fn run_until_settled(
    worker: Worker<crate::testing::MemoryMember>,
    broker: &MemoryBroker,
    records: usize,
) -> crate::Result<crate::Summary> {
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let settled = |broker: &MemoryBroker| {
        let counts = broker.counts();
        counts.acknowledged + counts.archived
    };
    while settled(broker) < records && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.shutdown();
    match running.await {
        Ok(summary) => summary,
        Err(error) => panic!("the worker task failed: {error}"),
    }
}

#[derive(Deserialize)]
struct Sms {
    to: String,
}

/// Numbers the handler sent to, in the order it saw them.
#[derive(Clone, Default)]
struct Sent(Arc<Mutex<Vec<String>>>);

#[handler(topic = "sms", name = "send_sms")]
async fn send_sms(
    meta: Meta,
    State(sent): State<Sent>,
    Json(sms): Json<Sms>,
) -> Result<(), JobError> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    if sms.to.is_empty() {
        return Err(JobError::permanent("no number"));
    }
    let mut sent = sent.0.lock().map_err(|_| "poisoned")?;
    sent.push(format!("{}@{}", sms.to, meta.offset()));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_handler_job_runs_in_the_worker() -> crate::Result<()> {
    let broker = MemoryBroker::new();
    for n in 0..20 {
        let value = match n {
            5 => String::from("not json"),
            6 => String::from(r#"{"to":""}"#),
            n => format!(r#"{{"to":"+{n}"}}"#),
        };
        broker.produce("sms", value);
    }
    let sent = Sent::default();
    let dlq = MemoryDlq::new();
    let worker = Worker::builder(broker.member("worker-1"))
        .job(send_sms, sent.clone())
        .dlq(dlq.clone())
        .concurrency(8)
        .build()?;
    let summary = run_until_settled(worker, &broker, 20).await?;
    assert_eq!(summary.accepted, 18, "{summary:?}");
    // Offset 5 does not decode: dead-lettered without calling the handler. Offset 6 is rejected
    // by the handler (a permanent error): dead-lettered as `rejected`.
    let letters: Vec<(i64, DlqReason)> = dlq
        .offsets()
        .into_iter()
        .map(|(_, _, offset, reason)| (offset, reason))
        .collect();
    assert_eq!(letters, [(5, DlqReason::Decode), (6, DlqReason::Rejected)]);
    let counts = broker.counts();
    assert_eq!((counts.acknowledged, counts.archived), (18, 2));
    let sent = sent.0.lock().map(|sent| sent.len()).unwrap_or_default();
    assert_eq!(sent, 18);
    Ok(())
}

#[derive(Deserialize)]
struct Email {
    to: String,
}

/// Batch sizes the bulk handler was called with.
#[derive(Clone, Default)]
struct Bulk(Arc<Mutex<Vec<usize>>>);

/// A bulk e-mail send: refuses addresses without `@` for good, asks for a retry of those on
/// `busy.example` (always busy), takes the rest.
#[handler(topic = "emails", batch(max = 4, linger = "50ms"))]
async fn send_emails(
    State(bulk): State<Bulk>,
    emails: Vec<Json<Email>>,
) -> Vec<Result<(), JobError>> {
    if let Ok(mut sizes) = bulk.0.lock() {
        sizes.push(emails.len());
    }
    emails
        .into_iter()
        .map(|Json(email)| match email.to.split_once('@') {
            None => Err(JobError::permanent("not an address")),
            Some((_, "busy.example")) => Err(JobError::retry("the mailbox is busy")),
            Some(_) => Ok(()),
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_batch_handler_job_answers_each_item_on_its_own() -> crate::Result<()> {
    let broker = MemoryBroker::new();
    for n in 0..20 {
        let value = match n {
            5 => String::from("not json"),
            6 => String::from(r#"{"to":"nobody"}"#),
            7 => String::from(r#"{"to":"x@busy.example"}"#),
            n => format!(r#"{{"to":"user{n}@example.com"}}"#),
        };
        broker.produce("emails", value);
    }
    let bulk = Bulk::default();
    let dlq = MemoryDlq::new();
    assert_eq!(
        send_emails::BATCH,
        crate::Batch::new(4, Duration::from_millis(50))
    );
    let worker = Worker::builder(broker.member("worker-1"))
        .add_route(crate::Route::batch_job(send_emails, bulk.clone()))
        .dlq(dlq.clone())
        .max_attempts(2)
        .backoff(crate::policy::Backoff::exponential(
            Duration::from_millis(10),
            Duration::from_millis(10),
        ))
        .concurrency(8)
        .build()?;
    let summary = run_until_settled(worker, &broker, 20).await?;
    assert_eq!(summary.accepted, 17, "{summary:?}");
    let mut letters: Vec<(i64, DlqReason)> = dlq
        .offsets()
        .into_iter()
        .map(|(_, _, offset, reason)| (offset, reason))
        .collect();
    letters.sort_by_key(|(offset, _)| *offset);
    assert_eq!(
        letters,
        [
            (5, DlqReason::Decode),
            (6, DlqReason::Rejected),
            (7, DlqReason::HandlerError)
        ]
    );
    let sizes = bulk.0.lock().map(|s| s.clone()).unwrap_or_default();
    assert!(sizes.iter().all(|s| *s <= 4), "{sizes:?}");
    assert!(sizes.contains(&4), "full batches: {sizes:?}");
    assert!(
        summary.batches >= sizes.len() as u64,
        "a batch of records that all fail to decode calls no handler: {summary:?}"
    );
    Ok(())
}
