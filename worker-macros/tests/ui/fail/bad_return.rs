use worker_core::handler::{handler, Meta};

#[derive(Debug)]
struct NotAnError;

#[handler(topic = "sms")]
async fn count(meta: Meta) -> u32 {
    let _ = meta;
    1
}

#[handler(topic = "sms")]
async fn fallible(meta: Meta) -> Result<(), NotAnError> {
    let _ = meta;
    Err(NotAnError)
}

fn main() {}
