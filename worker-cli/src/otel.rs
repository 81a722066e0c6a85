//! OpenTelemetry for `share-worker run`: one meter provider, read as Prometheus text by `/metrics`
//! and pushed to an OTLP/HTTP collector when `otlp-endpoint` is set; record spans to that collector;
//! logs on stderr, pretty or JSON.

use std::io::IsTerminal;

use crate::config::{LogFormat, TelemetrySection};
use anyhow::Context;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{
    MetricExporter, OTEL_EXPORTER_OTLP_TIMEOUT_DEFAULT, SpanExporter, WithExportConfig,
    WithHttpConfig,
};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};
use worker_core::telemetry::{METER_NAME, SPAN_TARGET};

use crate::tls;

/// The providers of one run. Build it outside the async runtime (the OTLP client is blocking)
/// and [`shutdown`](Self::shutdown) it there too, which flushes what is pending.
#[derive(Debug)]
pub(crate) struct Otel {
    meters: SdkMeterProvider,
    registry: prometheus::Registry,
    tracer: Option<SdkTracerProvider>,
}

impl Otel {
    /// Builds the providers and installs the global `tracing` subscriber.
    pub(crate) fn install(config: &TelemetrySection) -> anyhow::Result<Self> {
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let registry = prometheus::Registry::new();
        let prometheus = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .without_target_info()
            .build()
            .context("telemetry: cannot set up the Prometheus exporter")?;
        let mut meters = SdkMeterProvider::builder()
            .with_resource(resource.clone())
            .with_reader(prometheus);
        let mut tracer = None;
        if let Some(endpoint) = &config.otlp_endpoint {
            let base = endpoint.trim_end_matches('/');
            let client = otlp_client(config, endpoint)?;
            let metrics = MetricExporter::builder()
                .with_http()
                .with_http_client(client.clone())
                .with_endpoint(format!("{base}/v1/metrics"))
                .build()
                .with_context(|| {
                    format!("telemetry.otlp-endpoint: cannot export metrics to {base}")
                })?;
            meters = meters.with_reader(
                PeriodicReader::builder(metrics)
                    .with_interval(config.otlp_interval)
                    .build(),
            );
            let spans = SpanExporter::builder()
                .with_http()
                .with_http_client(client)
                .with_endpoint(format!("{base}/v1/traces"))
                .build()
                .with_context(|| {
                    format!("telemetry.otlp-endpoint: cannot export spans to {base}")
                })?;
            tracer = Some(
                SdkTracerProvider::builder()
                    .with_resource(resource)
                    .with_batch_exporter(spans)
                    .build(),
            );
        }
        let otel = Self {
            meters: meters.build(),
            registry,
            tracer,
        };
        otel.init_logs(config.log_format);
        Ok(otel)
    }

    /// Logs to stderr, above `run`'s live line if it shows one (filtered by `RUST_LOG`, default `info` without the per-record spans, whose
    /// formatting would double the CPU spent per record) and, with a collector, record spans to it
    /// (at `info`, whatever `RUST_LOG` says).
    fn init_logs(&self, format: LogFormat) {
        let filter = EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new(format!("info,{SPAN_TARGET}=off")));
        // Colours only for a terminal: a log file or CI output gets plain text.
        let logs = tracing_subscriber::fmt::layer()
            .with_writer(crate::report::LogWriter)
            .with_ansi(std::io::stderr().is_terminal());
        let logs = match format {
            LogFormat::Json => logs.json().with_filter(filter).boxed(),
            LogFormat::Pretty => logs.with_filter(filter).boxed(),
        };
        let spans = self.tracer.as_ref().map(|provider| {
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer(METER_NAME))
                .with_filter(LevelFilter::INFO)
        });
        let _ = tracing_subscriber::registry()
            .with(logs)
            .with(spans)
            .try_init();
    }

    /// The meter the worker and the lag monitor record to.
    pub(crate) fn meter(&self) -> Meter {
        self.meters.meter(METER_NAME)
    }

    /// Where `/metrics` reads the metrics from.
    pub(crate) fn registry(&self) -> prometheus::Registry {
        self.registry.clone()
    }

    /// Flushes and stops the exporters.
    pub(crate) fn shutdown(self) {
        if let Some(tracer) = self.tracer
            && let Err(err) = tracer.shutdown()
        {
            eprintln!("share-worker: flushing spans to the collector failed: {err}");
        }
        if let Err(err) = self.meters.shutdown() {
            eprintln!("share-worker: flushing metrics failed: {err}");
        }
    }
}

/// The exporters' blocking HTTP client for `endpoint`: an https:// one trusts the system's roots
/// and the CA certificates of `otlp-ca-file`; an http:// one loads no roots (a slim container may
/// have none). Built here rather than by the exporters so that a failure says why; its timeout is
/// theirs by default, 10 s. Call it outside the async runtime.
fn otlp_client(
    config: &TelemetrySection,
    endpoint: &str,
) -> anyhow::Result<reqwest::blocking::Client> {
    let mut client =
        reqwest::blocking::Client::builder().timeout(OTEL_EXPORTER_OTLP_TIMEOUT_DEFAULT);
    if endpoint.starts_with("http://") {
        client = client.tls_certs_only([]);
    }
    if let Some(path) = &config.otlp_ca_file {
        client = client.tls_certs_merge(tls::ca_certificates("telemetry.otlp-ca-file", path)?);
    }
    client.build().with_context(|| {
        format!("telemetry.otlp-endpoint: cannot create an HTTP client for {endpoint}")
    })
}
