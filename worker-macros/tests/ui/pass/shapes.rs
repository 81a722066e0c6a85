//! Other handler shapes: no arguments, `Outcome`, `anyhow`, a parts extractor last, the whole
//! `Job`, a stateless handler routed in a worker with state, user extractors, `state = ...`.

use std::convert::Infallible;

use worker_core::handler::{
    DecodeError, FromJob, FromJobParts, FromRef, Headers, JobDefinition, Key, Meta, State,
};
use worker_core::{Job, Outcome, handler};

#[handler(topic = "ticks")]
async fn tick() {}

#[handler(topic = "audit")]
pub async fn audit(_key: Key, meta: Meta) -> Outcome {
    Outcome::reject(meta.topic().to_owned())
}

#[handler(topic = "raw")]
async fn raw(_headers: Headers, _job: Job) -> anyhow::Result<()> {
    anyhow::bail!("always fails")
}

/// A payload extractor of the user's own.
struct Csv(Vec<String>);

impl<S> FromJob<S> for Csv {
    type Rejection = DecodeError;

    fn from_job(job: Job, _state: &S) -> Result<Self, DecodeError> {
        let value = job.payload().ok_or(DecodeError::from_static("null"))?;
        let text = std::str::from_utf8(value).map_err(DecodeError::new)?;
        Ok(Csv(text.split(',').map(str::to_owned).collect()))
    }
}

/// A parts extractor of the user's own, reading the state.
struct Tenant(String);

impl FromJobParts<App> for Tenant {
    type Rejection = Infallible;

    fn from_job_parts(_job: &Job, state: &App) -> Result<Self, Infallible> {
        Ok(Tenant(state.tenant.clone()))
    }
}

#[derive(Clone)]
struct App {
    tenant: String,
    db: Db,
}

#[derive(Clone)]
struct Db;

impl FromRef<App> for Db {
    fn from_ref(app: &App) -> Self {
        app.db.clone()
    }
}

#[handler(topic = "imports", state = App)]
async fn import(Tenant(tenant): Tenant, State(_db): State<Db>, Csv(rows): Csv) -> Outcome {
    Outcome::reject(format!("{tenant}: {} rows", rows.len()))
}

fn route<T, S, D: JobDefinition<T, S>>(definition: D) -> (&'static str, &'static str) {
    (definition.name(), definition.topic())
}

fn main() {
    assert_eq!(route::<_, (), _>(tick), ("tick", "ticks"));
    assert_eq!(route::<_, App, _>(tick), ("tick", "ticks"));
    assert_eq!(route::<_, (), _>(audit), ("audit", "audit"));
    assert_eq!(route::<_, (), _>(raw), ("raw", "raw"));
    assert_eq!(route::<_, App, _>(import), ("import", "imports"));
}
