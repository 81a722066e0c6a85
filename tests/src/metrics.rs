//! An OpenTelemetry meter whose data points the test reads back.

use opentelemetry::metrics::{Meter, MeterProvider};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

/// A meter provider that keeps what it exports.
#[derive(Debug)]
pub struct InMemory {
    provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

impl Default for InMemory {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemory {
    /// A provider with a periodic reader over an in-memory exporter.
    pub fn new() -> Self {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .build();
        Self { provider, exporter }
    }

    /// A meter to hand to the worker.
    pub fn meter(&self) -> Meter {
        self.provider.meter("test")
    }

    /// The sum of counter `name` over all its attributes, as of now (0 when it was never
    /// recorded).
    pub fn sum(&self, name: &str) -> f64 {
        self.exporter.reset();
        self.provider.force_flush().expect("an in-memory flush");
        let exported = self
            .exporter
            .get_finished_metrics()
            .expect("in-memory metrics");
        let Some(resource) = exported.last() else {
            return 0.0;
        };
        let mut total = 0.0;
        for metric in resource.scope_metrics().flat_map(|s| s.metrics()) {
            if metric.name() != name {
                continue;
            }
            total += match metric.data() {
                AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                    sum.data_points().map(|p| p.value() as f64).sum::<f64>()
                }
                AggregatedMetrics::I64(MetricData::Sum(sum)) => {
                    sum.data_points().map(|p| p.value() as f64).sum::<f64>()
                }
                AggregatedMetrics::F64(MetricData::Sum(sum)) => {
                    sum.data_points().map(|p| p.value()).sum::<f64>()
                }
                _ => 0.0,
            };
        }
        total
    }
}
