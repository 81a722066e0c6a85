//! Per-record dispatch cost: a `#[handler]` fn against a hand-written `tower::Service` doing the
//! same work, bare, behind a timeout layer, and type-erased the way a router may store it.
//!
//! Each iteration builds a `Job` from a prepared delivery (reference-count bumps, no allocation),
//! calls the service once and polls its future to completion (one poll: nothing here waits).
//!
//! `cargo bench -p benches --bench dispatch`

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use criterion::Criterion;
use futures::FutureExt;
use serde::Deserialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::util::BoxCloneService;
use tower::{Service, ServiceBuilder, ServiceExt};
use worker_core::handler::{HandlerWithoutStateExt, JobDefinition, JobError, Json, Meta, handler};
use worker_core::source::{Delivery, DeliveryId, Lease};
use worker_core::{Job, Outcome};

/// A payload as small as a typical notification job.
#[derive(Deserialize)]
struct Sms {
    to: String,
    text: String,
}

const PAYLOAD: &[u8] = br#"{"to":"+4915112345678","text":"Your code is 123456"}"#;

/// The macro version: length of the raw payload.
#[handler(topic = "bench", name = "bytes")]
async fn bytes_handler(body: Bytes) -> Outcome {
    if body.is_empty() {
        Outcome::reject("empty")
    } else {
        Outcome::Accept
    }
}

/// The macro version of a realistic handler: metadata plus a decoded JSON payload.
#[handler(topic = "bench", name = "json")]
async fn json_handler(meta: Meta, Json(sms): Json<Sms>) -> Result<(), JobError> {
    if meta.offset() >= 0 && !sms.to.is_empty() && !sms.text.is_empty() {
        Ok(())
    } else {
        Err(JobError::permanent("empty"))
    }
}

/// The hand-written equivalent of `bytes_handler`: no extractors, a ready future.
#[derive(Clone, Copy, Debug)]
struct BytesService;

impl Service<Job> for BytesService {
    type Response = Outcome;
    type Error = Infallible;
    type Future = Ready<Result<Outcome, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, job: Job) -> Self::Future {
        let (delivery, _cancel) = job.into_parts();
        let outcome = match delivery.value {
            Some(body) if !body.is_empty() => Outcome::Accept,
            _ => Outcome::reject("empty"),
        };
        ready(Ok(outcome))
    }
}

/// The hand-written equivalent of `json_handler`.
#[derive(Clone, Copy, Debug)]
struct JsonService;

impl Service<Job> for JsonService {
    type Response = Outcome;
    type Error = Infallible;
    type Future = Ready<Result<Outcome, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, job: Job) -> Self::Future {
        let offset = job.id().offset;
        let outcome = match job
            .payload()
            .map(|value| serde_json::from_slice::<Sms>(value))
        {
            Some(Ok(sms)) if offset >= 0 && !sms.to.is_empty() && !sms.text.is_empty() => {
                Outcome::Accept
            }
            Some(Ok(_)) => Outcome::reject("empty"),
            Some(Err(error)) => Outcome::undecodable(error.to_string()),
            None => Outcome::undecodable("null"),
        };
        ready(Ok(outcome))
    }
}

fn delivery() -> Delivery {
    Delivery {
        id: DeliveryId {
            topic: Arc::from("bench"),
            partition: 0,
            offset: 7,
            lease: Lease::new(1, 1),
        },
        key: Some(Bytes::from_static(b"key")),
        value: Some(Bytes::from_static(PAYLOAD)),
        headers: Vec::new(),
        timestamp: 0,
        delivery_count: 1,
        lock_duration: Duration::from_secs(30),
        acquired_at: Instant::now(),
        undecodable: None,
    }
}

/// How the cases run: measured by criterion, or one case run a fixed number of times so that
/// `perf stat -e instructions:u` can count it (instruction counts do not depend on the machine's
/// load, wall-clock times on a shared machine do).
enum Mode {
    Criterion(Box<Criterion>),
    Count { case: String, iterations: u64 },
}

/// Builds a job, calls the service and polls the future once (every service here finishes in one
/// poll) with a no-op waker, inside the runtime's context (the timeout layer needs its timer) but
/// without the runtime's scheduling.
fn dispatch_once<Svc, E>(service: &mut Svc, delivery: &Delivery, token: &CancellationToken)
where
    Svc: Service<Job, Response = Outcome, Error = E>,
    E: std::fmt::Debug,
{
    let job = Job::new(delivery.clone(), token.clone());
    let outcome = match service.ready().now_or_never() {
        Some(Ok(ready)) => ready.call(job).now_or_never(),
        _ => None,
    };
    assert!(matches!(outcome, Some(Ok(Outcome::Accept))), "{outcome:?}");
}

/// Runs one case in the current mode.
fn bench_service<Svc, E>(mode: &mut Mode, rt: &tokio::runtime::Runtime, name: &str, service: Svc)
where
    Svc: Service<Job, Response = Outcome, Error = E>,
    E: std::fmt::Debug,
{
    let _guard = rt.enter();
    let delivery = delivery();
    let token = CancellationToken::new();
    let mut service = service;
    match mode {
        Mode::Criterion(c) => {
            c.bench_function(name, |b| {
                b.iter(|| dispatch_once(&mut service, &delivery, &token));
            });
        }
        Mode::Count { case, iterations } if case == name => {
            for _ in 0..*iterations {
                dispatch_once(&mut service, &delivery, &token);
            }
        }
        Mode::Count { .. } => {}
    }
}

fn dispatch(c: &mut Mode) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(error) => panic!("cannot build the benchmark runtime: {error}"),
    };
    let timeout = Duration::from_secs(30);

    bench_service(c, &rt, "bytes/hand_written", BytesService);
    bench_service(
        c,
        &rt,
        "bytes/handler_fn",
        bytes_handler::handle.into_service(),
    );
    bench_service(
        c,
        &rt,
        "bytes/handler_macro",
        bytes_handler.into_service(()),
    );

    bench_service(c, &rt, "json/hand_written", JsonService);
    bench_service(
        c,
        &rt,
        "json/handler_fn",
        json_handler::handle.into_service(),
    );
    bench_service(c, &rt, "json/handler_macro", json_handler.into_service(()));

    bench_service(
        c,
        &rt,
        "json/hand_written+timeout",
        ServiceBuilder::new().timeout(timeout).service(JsonService),
    );
    bench_service(
        c,
        &rt,
        "json/handler_macro+timeout",
        ServiceBuilder::new()
            .timeout(timeout)
            .service(json_handler.into_service(())),
    );
    bench_service(
        c,
        &rt,
        "json/handler_macro+boxed",
        BoxCloneService::new(json_handler.into_service(())),
    );
}

/// `cargo bench -p benches --bench dispatch`, or, for instruction counts,
/// `DISPATCH_CASE=json/handler_macro DISPATCH_ITERATIONS=1000000 perf stat -e instructions:u
/// target/release/deps/dispatch-*` (subtract a run with `DISPATCH_ITERATIONS=0`).
fn main() {
    let case = std::env::var("DISPATCH_CASE");
    let iterations = std::env::var("DISPATCH_ITERATIONS").map(|n| n.parse::<u64>());
    match (case, iterations) {
        (Ok(case), Ok(Ok(iterations))) => dispatch(&mut Mode::Count { case, iterations }),
        (Ok(_), _) => panic!("DISPATCH_CASE needs DISPATCH_ITERATIONS, a number"),
        _ => {
            let mut mode = Mode::Criterion(Box::new(Criterion::default().configure_from_args()));
            dispatch(&mut mode);
            if let Mode::Criterion(c) = mode {
                c.final_summary();
            }
        }
    }
}
