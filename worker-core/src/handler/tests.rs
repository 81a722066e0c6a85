//! Handler services called directly with hand-built jobs.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceBuilder, ServiceExt};

use super::*;
use crate::source::{Delivery, DeliveryId, Header, Lease};
use crate::{Job, Outcome};

/// A delivery of `value` from `orders/3@42`, delivered twice, with one header and a key.
fn delivery(value: Option<&'static [u8]>) -> Delivery {
    Delivery {
        id: DeliveryId {
            topic: Arc::from("orders"),
            partition: 3,
            offset: 42,
            lease: Lease::new(1, 7),
        },
        key: Some(Bytes::from_static(b"customer-9")),
        value: value.map(Bytes::from_static),
        headers: vec![
            Header {
                key: Arc::from("trace"),
                value: Some(Bytes::from_static(b"abc")),
            },
            Header {
                key: Arc::from("empty"),
                value: None,
            },
        ],
        timestamp: 1_700_000_000_000,
        delivery_count: 2,
        lock_duration: Duration::from_secs(30),
        acquired_at: Instant::now(),
        undecodable: None,
    }
}

fn job(value: &'static [u8]) -> Job {
    Job::new(delivery(Some(value)), CancellationToken::new())
}

/// Calls `service` once with `job`, through the tower contract (ready, then call).
async fn run<Svc>(mut service: Svc, job: Job) -> Outcome
where
    Svc: Service<Job, Response = Outcome, Error = Infallible>,
{
    match service.ready().await {
        Ok(ready) => match ready.call(job).await {
            Ok(outcome) => outcome,
            Err(never) => match never {},
        },
        Err(never) => match never {},
    }
}

#[derive(Debug, Deserialize, PartialEq)]
struct Sms {
    to: String,
    text: String,
}

/// Counts handler calls, to prove a rejected job never reaches the handler.
#[derive(Clone, Default)]
struct Calls(Arc<AtomicUsize>);

impl Calls {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn handler_without_arguments_accepts() {
    async fn noop() {}
    assert_eq!(run(noop.into_service(), job(b"x")).await, Outcome::Accept);
}

#[tokio::test]
async fn json_payload_reaches_the_handler() {
    async fn send(State(calls): State<Calls>, Json(sms): Json<Sms>) -> Outcome {
        calls.0.fetch_add(1, Ordering::SeqCst);
        if sms.to == "+100" && sms.text == "hi" {
            Outcome::Accept
        } else {
            Outcome::reject("wrong payload")
        }
    }
    let calls = Calls::default();
    let service = send.with_state(calls.clone());
    let outcome = run(service, job(br#"{"to":"+100","text":"hi"}"#)).await;
    assert_eq!(outcome, Outcome::Accept);
    assert_eq!(calls.count(), 1);
}

#[tokio::test]
async fn undecodable_json_is_a_decode_failure_and_skips_the_handler() {
    async fn send(State(calls): State<Calls>, Json(_sms): Json<Sms>) {
        calls.0.fetch_add(1, Ordering::SeqCst);
    }
    let calls = Calls::default();
    let service = send.with_state(calls.clone());

    let outcome = run(service.clone(), job(br#"{"to":1}"#)).await;
    assert!(
        matches!(outcome, Outcome::Undecodable { .. }),
        "{outcome:?}"
    );
    let reason = outcome.reason().unwrap_or_default();
    assert!(reason.starts_with("invalid JSON"), "{reason}");

    let null = Job::new(delivery(None), CancellationToken::new());
    let outcome = run(service, null).await;
    assert_eq!(outcome, Outcome::undecodable("the record has no value"));
    assert_eq!(calls.count(), 0);
}

#[tokio::test]
async fn bytes_and_string_payloads() {
    async fn raw(body: Bytes) -> Outcome {
        Outcome::reject(format!("{} bytes", body.len()))
    }
    async fn text(body: String) -> Outcome {
        Outcome::reject(body)
    }
    assert_eq!(
        run(raw.into_service(), job(b"\xff\x00")).await,
        Outcome::reject("2 bytes")
    );
    assert_eq!(
        run(text.into_service(), job(b"hello")).await,
        Outcome::reject("hello")
    );
    let outcome = run(text.into_service(), job(b"\xff")).await;
    assert!(
        matches!(outcome, Outcome::Undecodable { .. }),
        "{outcome:?}"
    );
    assert!(outcome.reason().unwrap_or_default().contains("UTF-8"));
}

#[tokio::test]
async fn meta_key_and_headers_describe_the_record() {
    async fn inspect(meta: Meta, Key(key): Key, headers: Headers) -> Outcome {
        let seen = format!(
            "{}/{}@{} n={} ts={} key={:?} trace={:?} empty={:?} keys={}",
            meta.topic(),
            meta.partition(),
            meta.offset(),
            meta.delivery_count(),
            meta.timestamp(),
            key,
            headers.get_str("trace"),
            headers.get("empty"),
            headers.keys().count(),
        );
        Outcome::reject(seen)
    }
    let outcome = run(inspect.into_service(), job(b"")).await;
    assert_eq!(
        outcome.reason(),
        Some(
            "orders/3@42 n=2 ts=1700000000000 key=Some(b\"customer-9\") trace=Some(\"abc\") \
             empty=None keys=2"
        )
    );
}

#[tokio::test]
async fn meta_lock_deadline_and_attempts_left_hook() {
    let job = job(b"");
    let meta = Meta::of(&job);
    assert_eq!(meta.lock_deadline(), job.delivery().lock_deadline());
    assert_eq!(meta.id(), job.id());
    assert_eq!(meta.attempts_left(), None);
    assert!(!meta.is_last_attempt());
    // Delivery limit 5: 4 handler attempts; this is the second, so 2 are left.
    assert_eq!(meta.clone().with_delivery_limit(5).attempts_left(), Some(2));
    // Delivery limit 3: 2 handler attempts; this is the second and last.
    assert!(meta.clone().with_delivery_limit(3).is_last_attempt());
    assert_eq!(meta.with_delivery_limit(1).attempts_left(), Some(0));
}

#[tokio::test]
async fn a_parts_extractor_may_be_last() {
    async fn last_meta(_key: Key, meta: Meta) -> Outcome {
        Outcome::reject(meta.offset().to_string())
    }
    assert_eq!(
        run(last_meta.into_service(), job(b"")).await,
        Outcome::reject("42")
    );
}

#[tokio::test]
async fn the_cancellation_token_is_the_jobs() {
    async fn watch(token: CancellationToken, _job: Job) -> Outcome {
        if token.is_cancelled() {
            Outcome::retry("cancelled")
        } else {
            Outcome::Accept
        }
    }
    let token = CancellationToken::new();
    token.cancel();
    let job = Job::new(delivery(Some(b"")), token);
    assert_eq!(
        run(watch.into_service(), job).await,
        Outcome::retry("cancelled")
    );
}

#[derive(Clone)]
struct AppState {
    region: &'static str,
}

#[derive(Clone)]
struct Region(&'static str);

impl FromRef<AppState> for Region {
    fn from_ref(state: &AppState) -> Self {
        Region(state.region)
    }
}

#[tokio::test]
async fn state_and_parts_of_it() {
    async fn both(State(app): State<AppState>, State(Region(region)): State<Region>) -> Outcome {
        Outcome::reject(format!("{} {region}", app.region))
    }
    let service = both.with_state(AppState { region: "eu" });
    assert_eq!(service.state().region, "eu");
    assert_eq!(run(service, job(b"")).await, Outcome::reject("eu eu"));
}

#[derive(Debug)]
struct GatewayDown;

impl std::fmt::Display for GatewayDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("gateway down")
    }
}

impl std::error::Error for GatewayDown {}

#[tokio::test]
async fn errors_retry_by_default() {
    async fn std_error() -> Result<(), GatewayDown> {
        Err(GatewayDown)
    }
    async fn anyhow_error() -> anyhow::Result<()> {
        Err(anyhow::Error::new(GatewayDown).context("sending sms"))
    }
    async fn question_mark(text: String) -> Result<(), JobError> {
        let _number: u32 = text.parse()?;
        Ok(())
    }
    assert_eq!(
        run(std_error.into_service(), job(b"")).await,
        Outcome::retry("gateway down")
    );
    assert_eq!(
        run(anyhow_error.into_service(), job(b"")).await,
        Outcome::retry("sending sms: gateway down")
    );
    assert_eq!(
        run(question_mark.into_service(), job(b"x")).await,
        Outcome::retry("invalid digit found in string")
    );
    assert_eq!(
        run(question_mark.into_service(), job(b"7")).await,
        Outcome::Accept
    );
}

#[tokio::test]
async fn job_errors_say_what_to_do() {
    async fn permanent() -> Result<(), JobError> {
        Err(JobError::permanent("unknown number"))
    }
    async fn later() -> Result<(), JobError> {
        Err(JobError::retry_after(Duration::from_secs(30), GatewayDown))
    }
    async fn undecodable() -> Result<(), DecodeError> {
        Err(DecodeError::new("bad phone number"))
    }
    async fn chosen() -> Result<Outcome, JobError> {
        Ok(Outcome::retry("not yet"))
    }
    assert_eq!(
        run(permanent.into_service(), job(b"")).await,
        Outcome::reject("unknown number")
    );
    assert_eq!(
        run(later.into_service(), job(b"")).await,
        Outcome::retry_after(Duration::from_secs(30), "gateway down")
    );
    let outcome = run(undecodable.into_service(), job(b"")).await;
    assert_eq!(outcome, Outcome::undecodable("bad phone number"));
    assert_eq!(
        run(chosen.into_service(), job(b"")).await,
        Outcome::retry("not yet")
    );
}

#[test]
fn job_error_accessors() {
    let error = JobError::retry_after(Duration::from_secs(5), "slow down");
    assert_eq!(error.retry_delay(), Some(Duration::from_secs(5)));
    assert!(!error.is_permanent());
    assert_eq!(error.to_string(), "slow down");
    let error = JobError::permanent(GatewayDown);
    assert!(error.is_permanent());
    assert_eq!(error.retry_delay(), None);
    assert!(error.error().is::<GatewayDown>());
    assert!(JobError::from(DecodeError::new("x")).is_permanent());
}

#[tokio::test]
async fn twelve_arguments() {
    #[allow(clippy::too_many_arguments)]
    async fn many(
        _: Meta,
        _: Key,
        _: Headers,
        _: CancellationToken,
        _: State<()>,
        _: Meta,
        _: Key,
        _: Headers,
        _: CancellationToken,
        _: State<()>,
        _: Meta,
        body: String,
    ) -> Outcome {
        Outcome::reject(body)
    }
    assert_eq!(
        run(many.into_service(), job(b"all")).await,
        Outcome::reject("all")
    );
}

#[tokio::test]
async fn closures_are_handlers() {
    let prefix = Arc::new(String::from("got "));
    let handler = move |body: String| {
        let prefix = Arc::clone(&prefix);
        async move { Outcome::reject(format!("{prefix}{body}")) }
    };
    assert_eq!(
        run(handler.into_service(), job(b"it")).await,
        Outcome::reject("got it")
    );
}

#[tokio::test]
async fn tower_layers_wrap_handler_services() {
    async fn slow(token: CancellationToken) {
        token.cancelled().await;
    }
    let mut service = ServiceBuilder::new()
        .timeout(Duration::from_millis(10))
        .service(slow.into_service());
    let result = service.ready().await.map(|ready| ready.call(job(b"")));
    let outcome = match result {
        Ok(future) => future.await,
        Err(error) => Err(error),
    };
    assert!(outcome.is_err(), "the timeout layer fires");
}

#[tokio::test(start_paused = true)]
async fn layer_errors_become_retries() {
    async fn slow(token: CancellationToken) {
        token.cancelled().await;
    }
    async fn fast() {}
    fn timed<Svc>(service: Svc) -> RetryOnError<tower::timeout::Timeout<Svc>> {
        ServiceBuilder::new()
            .layer(RetryOnErrorLayer::new())
            .timeout(Duration::from_millis(10))
            .service(service)
    }
    let outcome = run(timed(slow.into_service()), job(b"")).await;
    assert_eq!(outcome, Outcome::retry("service error: request timed out"));
    assert_eq!(
        run(timed(fast.into_service()), job(b"")).await,
        Outcome::Accept
    );
}

/// A service whose `poll_ready` fails once.
#[derive(Clone, Default)]
struct BrokenOnce(Arc<AtomicUsize>);

impl Service<Job> for BrokenOnce {
    type Response = Outcome;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Outcome, std::io::Error>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), std::io::Error>> {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            std::task::Poll::Ready(Err(std::io::Error::other("worker died")))
        } else {
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn call(&mut self, _job: Job) -> Self::Future {
        std::future::ready(Ok(Outcome::Accept))
    }
}

#[tokio::test]
async fn a_readiness_error_answers_the_next_call() {
    let mut service = RetryOnError::new(BrokenOnce::default());
    assert_eq!(
        run(&mut service, job(b"")).await,
        Outcome::retry("service error: worker died")
    );
    assert_eq!(run(&mut service, job(b"")).await, Outcome::Accept);
    assert_eq!(service.get_ref().0.load(Ordering::SeqCst), 2);
}

#[test]
fn definitions_carry_name_and_topic() {
    async fn notify(_body: Bytes) {}
    let definition = define_job("notify", "webhooks", notify);
    assert_eq!(definition.name(), "notify");
    assert_eq!(definition.topic(), "webhooks");
    assert!(format!("{definition:?}").contains("webhooks"));
    let service = JobDefinition::<_, ()>::into_service(definition, ());
    assert!(format!("{:?}", notify.into_service()).contains("HandlerService"));
    let _ready = service.oneshot(job(b""));
}
