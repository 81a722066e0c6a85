//! The operations surface of a share-group worker, as an [axum] router to mount in your own
//! server: `/healthz` (the worker's loop makes progress), `/readyz` (it takes work) and
//! `/metrics` (Prometheus text). `share-worker` serves the same router.
//!
//! ```no_run
//! use worker_core::kafka::KafkaSource;
//! use worker_core::runtime::Worker;
//! use worker_ops::Probes;
//!
//! # async fn demo(source: KafkaSource, registry: prometheus::Registry) -> Result<(), Box<dyn std::error::Error>> {
//! // `registry` is where an `opentelemetry-prometheus` exporter of the worker's meter writes.
//! let probes = Probes::builder().metrics(registry).build();
//! let app = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "my service" }))
//!     .merge(probes.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9464").await?;
//! tokio::spawn(async move { axum::serve(listener, app).await });
//!
//! let worker = Worker::builder(source.clone())
//!     // .route(..), .meter(..)
//!     .build()?;
//! // Until now the probes answer "alive, not ready (joining the share group)".
//! probes.attach_kafka(worker.health(), source);
//! worker.run().await?;
//! # Ok(()) }
//! ```
//!
//! Every answer comes from memory: a probe never makes the worker do network work. Add your own
//! conditions to `/readyz` with [`ProbesBuilder::readiness_check`].

mod probes;

pub use probes::{LIVENESS_MAX_SILENCE, Probes, ProbesBuilder, REQUEST_TIMEOUT, prometheus_text};
