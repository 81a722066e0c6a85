use worker_core::handler;

#[handler(topic = "sms queue")]
async fn spaces() {}

#[handler(name = "no_topic")]
async fn no_topic() {}

#[handler(topic = "sms", retries = 3)]
async fn unknown() {}

fn main() {}
