use std::rc::Rc;

use worker_core::handler::{handler, Meta};

#[handler(topic = "sms")]
async fn send_sms(meta: Meta) {
    let counter = Rc::new(meta.offset());
    tokio::task::yield_now().await;
    let _ = counter;
}

fn main() {}
