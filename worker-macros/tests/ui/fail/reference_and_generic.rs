use worker_core::handler::{handler, Meta};

#[handler(topic = "sms")]
async fn borrowed(meta: &Meta) {
    let _ = meta;
}

#[handler(topic = "sms")]
async fn generic<T>(meta: Meta) {
    let _ = meta;
}

fn main() {}
