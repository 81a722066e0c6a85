use worker_core::handler::{handler, Meta};

#[handler(topic = "sms")]
fn send_sms(meta: Meta) {
    let _ = meta;
}

fn main() {}
