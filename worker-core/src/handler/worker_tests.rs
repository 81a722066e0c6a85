//! A `#[handler]` job routed in a real [`Worker`](crate::Worker) over the in-memory broker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;

use super::{JobError, Json, Meta, State, handler};
use crate::Worker;
use crate::dlq::DlqReason;
use crate::testing::{MemoryBroker, MemoryDlq};

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
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let settled = |broker: &MemoryBroker| {
        let counts = broker.counts();
        counts.acknowledged + counts.archived
    };
    while settled(&broker) < 20 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.shutdown();
    let summary = match running.await {
        Ok(summary) => summary?,
        Err(error) => panic!("the worker task failed: {error}"),
    };
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
