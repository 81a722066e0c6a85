//! The `process` span of every record: exported through OpenTelemetry, continuing the
//! producer's trace, with the documented attributes. A test binary of its own, with the one test:
//! spans need a global subscriber, and one installed while other tests of the same binary register
//! the same callsites on their threads can miss them (tracing caches each callsite's interest).

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use opentelemetry::Value;
use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::layer::SubscriberExt;
use worker_core::telemetry::{self, parse_traceparent};
use worker_core::testing::{MemoryBroker, MemoryDlq, ProducedRecord};
use worker_core::{Job, Outcome, Worker};

const PARENT_0: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const PARENT_1: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

/// A route service from an async closure that returns an [`Outcome`].
fn handler<F, Fut>(
    f: F,
) -> impl tower::Service<Job, Response = Outcome, Error = Infallible, Future: Send> + Send + Clone
where
    F: Fn(Job) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    tower::service_fn(move |job: Job| {
        let fut = f(job);
        async move { Ok::<_, Infallible>(fut.await) }
    })
}

/// The payload as a number.
fn seq(job: &Job) -> usize {
    job.payload()
        .and_then(|p| std::str::from_utf8(p).ok())
        .and_then(|s| s.parse().ok())
        .expect("test payloads are numbers")
}

/// Runs `worker` until `done` holds (in virtual time, failing after `limit`), then stops it.
async fn run_until(
    worker: Worker<worker_core::testing::MemoryMember>,
    limit: Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
) {
    let shutdown = worker.shutdown_handle();
    let run = tokio::spawn(worker.run());
    let deadline = tokio::time::Instant::now() + limit;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    shutdown.shutdown();
    run.await.expect("the worker task").expect("the worker");
}

#[tokio::test(start_paused = true)]
async fn a_records_span_continues_its_traceparent_and_carries_the_documented_attributes() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    // Global, and installed before anything traces: the only test of this binary.
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test"))),
    )
    .expect("the only subscriber of this test binary");

    let broker = MemoryBroker::new();
    broker.create_topic("sms", 1);
    broker.produce_record(
        "sms",
        ProducedRecord::new("0").header(telemetry::TRACEPARENT, PARENT_0),
    );
    broker.produce_record(
        "sms",
        ProducedRecord::new("1")
            .header(telemetry::TRACEPARENT, PARENT_1)
            .header(telemetry::TRACESTATE, "vendor=42"),
    );
    broker.produce("sms", "2");
    let dlq = MemoryDlq::new();
    let worker = Worker::builder(broker.member("w"))
        .route(
            "sms",
            handler(|job| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                match seq(&job) {
                    1 => Outcome::reject("no such number"),
                    _ => Outcome::Accept,
                }
            }),
        )
        .dlq(dlq.clone())
        .build()
        .unwrap();
    let b = broker.clone();
    run_until(worker, Duration::from_secs(5), "settled", move || {
        let c = b.counts();
        c.acknowledged + c.archived == 3
    })
    .await;
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let mut processed: Vec<&SpanData> = spans.iter().filter(|s| s.name == "process").collect();
    processed.sort_by_key(|s| attribute(s, "messaging.kafka.offset").map(Value::to_string));
    assert_eq!(processed.len(), 3, "{spans:#?}");

    for (offset, span) in processed.iter().enumerate() {
        assert_eq!(span.span_kind, SpanKind::Consumer);
        let expect = |key: &str, value: Value| {
            assert_eq!(attribute(span, key), Some(&value), "{key} of {span:#?}");
        };
        expect("messaging.system", "kafka".into());
        expect("messaging.operation.type", "process".into());
        expect("messaging.destination.name", "sms".into());
        expect("messaging.destination.partition.id", 0_i64.into());
        expect("messaging.kafka.offset", (offset as i64).into());
        expect("share_worker.delivery_count", 1_i64.into());
        expect("share_worker.handler_ms", 20_i64.into());
    }
    for (span, parent) in processed.iter().zip([PARENT_0, PARENT_1]) {
        let parent = parse_traceparent(parent.as_bytes()).unwrap();
        assert_eq!(span.span_context.trace_id(), parent.trace_id());
        assert_eq!(span.parent_span_id, parent.span_id());
        assert!(span.parent_span_is_remote);
    }
    // Without a traceparent the record starts a trace of its own.
    assert_eq!(
        processed[2].parent_span_id,
        opentelemetry::trace::SpanId::INVALID
    );

    assert_eq!(
        attribute(processed[0], "share_worker.outcome"),
        Some(&"accept".into())
    );
    assert_eq!(processed[0].status, Status::Unset);
    assert_eq!(
        attribute(processed[1], "share_worker.outcome"),
        Some(&"reject".into())
    );
    assert_eq!(
        attribute(processed[1], "error.type"),
        Some(&"reject".into())
    );
    assert!(matches!(processed[1].status, Status::Error { .. }));

    // The dead letter points at the attempt that failed it, in the producer's trace.
    let letters = dlq.letters();
    assert_eq!(letters.len(), 1);
    let headers = &letters[0].delivery.headers;
    let traceparent = headers
        .iter()
        .rfind(|h| &*h.key == telemetry::TRACEPARENT)
        .and_then(|h| h.value.clone())
        .expect("a traceparent on the dead letter");
    let carried = parse_traceparent(&traceparent).expect("a valid traceparent");
    assert_eq!(carried.trace_id(), processed[1].span_context.trace_id());
    assert_eq!(carried.span_id(), processed[1].span_context.span_id());
    assert!(
        headers
            .iter()
            .any(|h| &*h.key == telemetry::TRACESTATE
                && h.value.as_deref() == Some(&b"vendor=42"[..])),
        "the tracestate rides along: {headers:?}"
    );
}
