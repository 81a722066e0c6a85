//! The README's telemetry example: a worker whose record spans and metrics go to an OpenTelemetry
//! collector over OTLP/HTTP (127.0.0.1:4318, or `OTEL_EXPORTER_OTLP_ENDPOINT`), with the share
//! group's lag as a gauge.

use std::convert::Infallible;
use std::time::Duration;

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{MetricExporter, SpanExporter};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tower::service_fn;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use worker_core::kafka::{Admin, KafkaSource};
use worker_core::telemetry::{LagMonitor, METER_NAME};
use worker_core::{Job, Outcome, Worker};

const BOOTSTRAP: &str = "127.0.0.1:9092";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The OTLP exporters send from their own threads with blocking HTTP clients: build them, and
    // shut them down (which flushes), outside the async runtime.
    let spans = SdkTracerProvider::builder()
        .with_batch_exporter(SpanExporter::builder().with_http().build()?)
        .build();
    let metrics = SdkMeterProvider::builder()
        .with_reader(
            PeriodicReader::builder(MetricExporter::builder().with_http().build()?).build(),
        )
        .build();
    // Each record's `process` span becomes an OpenTelemetry consumer span, a child of the
    // producer's `traceparent`; logs inside a handler are attached to it.
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer())
        .with(tracing_opentelemetry::layer().with_tracer(spans.tracer("sms-worker")))
        .init();

    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(run(metrics.meter(METER_NAME)))?;
    spans.shutdown()?;
    metrics.shutdown()?;
    Ok(())
}

async fn run(meter: Meter) -> worker_core::Result<()> {
    // share_worker.group.lag{group, topic, partition}: the signal to autoscale workers on.
    let _lag = LagMonitor::start(
        Admin::connect(BOOTSTRAP).await?,
        "sms-senders",
        vec!["sms".to_owned()],
        Duration::from_secs(15),
        &meter,
    );
    let source = KafkaSource::builder(BOOTSTRAP, "sms-senders")
        .topic("sms")
        .build()
        .await?;
    let worker = Worker::builder(source)
        .route(
            "sms",
            service_fn(|job: Job| async move {
                tracing::info!(bytes = job.payload().map_or(0, |p| p.len()), "sending");
                Ok::<_, Infallible>(Outcome::Accept)
            }),
        )
        .meter(meter) // the worker's metrics (default: the global meter provider)
        .build()?;
    worker.run_until_signal().await?;
    Ok(())
}
