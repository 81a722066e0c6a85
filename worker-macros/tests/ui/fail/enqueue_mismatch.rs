//! A typed enqueue with a payload of another type than the handler takes does not compile.

use serde::{Deserialize, Serialize};
use worker_core::handler::{handler, Json};
use worker_core::produce::JobProducer;

#[derive(Deserialize, Serialize)]
struct Sms {
    to: String,
}

#[derive(Serialize)]
struct Email {
    address: String,
}

#[handler(topic = "sms")]
async fn send_sms(Json(sms): Json<Sms>) {
    let _ = sms.to;
}

async fn enqueue(producer: &JobProducer) -> worker_core::Result<()> {
    send_sms::enqueue(producer, &Email { address: "a@example.com".into() }).await?;
    Ok(())
}

fn main() {
    let _ = enqueue;
}
