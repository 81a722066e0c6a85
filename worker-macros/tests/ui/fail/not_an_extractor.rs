use worker_core::handler::{handler, Meta};

#[handler(topic = "sms")]
async fn last(meta: Meta, retries: u32) {
    let _ = (meta, retries);
}

#[handler(topic = "sms")]
async fn leading(id: u64, body: String) {
    let _ = (id, body);
}

fn main() {}
