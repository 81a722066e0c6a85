use worker_core::handler::{handler, State};

#[derive(Clone)]
struct App;

#[derive(Clone)]
struct Db;

#[handler(topic = "sms", state = App)]
async fn send_sms(State(db): State<Db>) {
    let _ = db;
}

fn main() {}
