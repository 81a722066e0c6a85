use serde::Deserialize;
use worker_core::handler::{handler, Json, Meta};

#[derive(Deserialize)]
struct Sms {
    to: String,
}

#[handler(topic = "sms")]
async fn send_sms(Json(sms): Json<Sms>, meta: Meta) {
    let _ = (sms.to, meta);
}

fn main() {}
