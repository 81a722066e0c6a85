use worker_core::handler::{handler, DecodeError, FromJob, Meta};
use worker_core::Job;

struct Csv(Vec<String>);

impl<S> FromJob<S> for Csv {
    type Rejection = DecodeError;

    fn from_job(_job: Job, _state: &S) -> Result<Self, DecodeError> {
        Ok(Csv(Vec::new()))
    }
}

#[handler(topic = "imports")]
async fn import(Csv(rows): Csv, meta: Meta) {
    let _ = (rows, meta);
}

fn main() {}
