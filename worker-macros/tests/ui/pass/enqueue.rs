//! Typed enqueue: the payload type of each job's last argument, on the job's topic or another.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use worker_core::handler::{handler, Json, Meta};
use worker_core::produce::{EnqueueOptions, Enqueued, JobProducer};

#[derive(Deserialize, Serialize)]
struct Sms {
    to: String,
}

#[handler(topic = "sms")]
async fn send_sms(meta: Meta, Json(sms): Json<Sms>) {
    let _ = (meta, sms.to);
}

#[handler(topic = "notes")]
async fn note(text: String) {
    let _ = text;
}

#[handler(topic = "blobs")]
async fn blob(bytes: Bytes) {
    let _ = bytes;
}

async fn enqueue(producer: &JobProducer) -> worker_core::Result<Vec<Enqueued>> {
    let sms = Sms { to: "+4915112345678".into() };
    Ok(vec![
        send_sms::enqueue(producer, &sms).await?,
        send_sms::enqueue_with(
            producer,
            &sms,
            EnqueueOptions::new()
                .key(sms.to.clone())
                .delay(Duration::from_secs(30))
                .topic("sms-test"),
        )
        .await?,
        note::enqueue(producer, "hello").await?,
        blob::enqueue(producer, &b"\x00\x01"[..]).await?,
    ])
}

/// The enqueue futures are `Send`, so a program can spawn them.
fn spawnable(producer: &JobProducer) {
    fn send<F: std::future::Future + Send>(_: F) {}
    send(enqueue(producer));
}

fn main() {
    // Compiling is the test (running it would need a broker).
    let _ = spawnable;
}
