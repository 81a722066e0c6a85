//! The shape from the issue: a JSON payload, metadata, state, and a `Result` with `JobError`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use worker_core::handler::{handler, JobDefinition, JobError, Json, Meta, NamedJob, State};
use worker_core::source::{Delivery, DeliveryId, Lease};
use worker_core::{Job, Outcome};

#[derive(Deserialize)]
struct Sms {
    to: String,
}

#[derive(Clone)]
struct Gateway {
    rate_limited: bool,
}

/// Sends one SMS.
#[handler(topic = "sms", name = "send_sms")]
async fn send_sms(
    meta: Meta,
    State(gateway): State<Gateway>,
    Json(sms): Json<Sms>,
) -> Result<(), JobError> {
    if gateway.rate_limited {
        return Err(JobError::retry_after(Duration::from_secs(1), "429"));
    }
    let _ = (meta.offset(), sms.to);
    Ok(())
}

fn job(value: &'static [u8]) -> Job {
    let delivery = Delivery {
        id: DeliveryId {
            topic: Arc::from("sms"),
            partition: 0,
            offset: 1,
            lease: Lease::new(1, 1),
        },
        key: None,
        value: Some(Bytes::from_static(value)),
        headers: Vec::new(),
        timestamp: 0,
        delivery_count: 1,
        lock_duration: Duration::from_secs(30),
        acquired_at: tokio::time::Instant::now(),
        undecodable: None,
    };
    Job::new(delivery, CancellationToken::new())
}

/// What a runtime's `route` would require.
fn route<T, D: JobDefinition<T, Gateway>>(definition: D) -> D {
    definition
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(send_sms::NAME, "send_sms");
    assert_eq!(send_sms::TOPIC, "sms");
    // Name and topic need no type annotations, whatever the state.
    assert_eq!((send_sms.name(), send_sms.topic()), ("send_sms", "sms"));
    let definition = route(send_sms);
    assert_eq!(definition.name(), "send_sms");
    assert_eq!(definition.topic(), "sms");

    let service = definition.into_service(Gateway { rate_limited: false });
    let outcome = service.clone().oneshot(job(br#"{"to":"+1"}"#)).await;
    assert_eq!(outcome, Ok(Outcome::Accept));
    let outcome = service.oneshot(job(b"not json")).await;
    assert!(matches!(outcome, Ok(Outcome::Undecodable { .. })));

    let limited = send_sms.into_service(Gateway { rate_limited: true });
    let outcome = limited.oneshot(job(br#"{"to":"+1"}"#)).await;
    assert_eq!(outcome, Ok(Outcome::retry_after(Duration::from_secs(1), "429")));

    // The function as written stays callable.
    let gateway = State(Gateway { rate_limited: false });
    let meta = Meta::of(&job(b""));
    assert!(send_sms::handle(meta, gateway, Json(Sms { to: "+1".into() })).await.is_ok());
}
