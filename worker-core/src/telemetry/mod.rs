//! Telemetry: a span per record, OpenTelemetry metrics, and the share group's lag.
//!
//! # Spans
//!
//! Every record is processed inside a `tracing` span named `process` (target [`SPAN_TARGET`],
//! level INFO) that follows the OpenTelemetry messaging conventions. With a [`tracing-opentelemetry`] layer installed it is
//! exported as a consumer span whose parent is the W3C `traceparent` header of the record, so a job
//! continues the trace of whatever produced it. Its attributes:
//!
//! | attribute | value |
//! |---|---|
//! | `messaging.system` | `kafka` |
//! | `messaging.operation.type`, `messaging.operation.name` | `process` |
//! | `messaging.destination.name` | the topic |
//! | `messaging.consumer.group.name` | the share group (when the source knows it) |
//! | `messaging.destination.partition.id` | the partition |
//! | `messaging.kafka.offset` | the offset |
//! | `share_worker.delivery_count` | the broker's delivery count (1 = first delivery) |
//! | `share_worker.outcome` | `accept`, `retry`, `reject`, `undecodable`, `timeout`, `panic`, `delivery_limit`, `unrouted`, `released_on_shutdown` |
//! | `share_worker.handler_ms` | how long the handler ran |
//! | `error.type`, `otel.status_code` | the outcome and `error` when it is not `accept` |
//!
//! The span lasts from the fetch to the broker's answer to the record's acknowledgement. A record
//! that is dead-lettered leaves with its `traceparent` pointing at this span (and its original
//! `tracestate`), so the dead letter and a later replay stay in the trace.
//!
//! # Metrics
//!
//! The worker records to the [`Meter`](opentelemetry::metrics::Meter) given to
//! [`WorkerBuilder::meter`](crate::WorkerBuilder::meter), by default the global meter provider's
//! `share-worker` meter (a no-op until an SDK provider is installed). Names and attributes are in
//! [`names`]; [`LagMonitor`] adds the group's lag per partition.
//!
//! [`tracing-opentelemetry`]: https://docs.rs/tracing-opentelemetry

mod lag;
pub(crate) mod metrics;
pub mod names;
mod trace_context;

pub use lag::LagMonitor;
pub use trace_context::{TRACEPARENT, TRACESTATE, format_traceparent, parse_traceparent};

#[cfg(feature = "rdkafka")]
pub(crate) use trace_context::current_trace_context;
pub(crate) use trace_context::{continue_trace, stamp};

/// The `tracing` target of the per-record `process` span. Filter it separately from the worker's
/// logs: formatting a span per record costs a log layer several microseconds of CPU per record,
/// so a log filter such as `info,share_worker::record=off` keeps the logs (every runtime message
/// names its record) while an OpenTelemetry layer still exports the spans.
pub const SPAN_TARGET: &str = "share_worker::record";

/// The instrumentation scope the worker's metrics are recorded under by default.
pub const METER_NAME: &str = "share-worker";
