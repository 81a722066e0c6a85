//! A [KEDA](https://keda.sh) external scaler for Kafka share groups.
//!
//! KEDA's own Kafka scaler reads consumer-group lag, which share groups do not have; and a
//! worker's own `/metrics` cannot scale from zero (with no worker running, nobody reports the
//! lag). This scaler reads a share group's backlog straight from the brokers — the broker's lag
//! of each partition (DescribeShareGroupOffsets), worked out from the offsets while the group has
//! settled nothing yet — and serves it over KEDA's External Scaler gRPC API:
//!
//! - `IsActive` / `StreamIsActive`: true while more than `activationLagThreshold` records wait,
//!   so KEDA scales a deployment from zero when work arrives, and back to zero when it is done;
//! - `GetMetricSpec` / `GetMetrics`: the backlog, with `lagThreshold` records per replica.
//!
//! A scaled object's trigger names what to read:
//!
//! ```yaml
//! triggers:
//!   - type: external
//!     metadata:
//!       scalerAddress: share-worker-scaler:9090
//!       group: sms-workers
//!       topics: sms,emails
//!       delayTopics: sms.delay   # optional: count waiting delayed records too
//!       lagThreshold: "100"      # optional: records per replica (default 100)
//! ```
//!
//! Reads are bounded: when the cluster does not answer within the bound, the last value read is
//! given, flagged by the [`STALE_HEADER`] response header; an unknown group or topic is
//! `NOT_FOUND`, bad metadata `INVALID_ARGUMENT`, both naming what is wrong. However many streams
//! and calls name a group and its topics, one task reads them, once a second at most
//! ([`Limits`] bounds the rest: connections, streams, targets, time per request).
//!
//! The server speaks TLS when given a certificate ([`Tls`]), and then requires a client
//! certificate signed by the given CA when one is named (mutual TLS: KEDA's `caCert`,
//! `tlsClientCert` and `tlsClientKey`). It serves the gRPC health service (`grpc.health.v1`) on
//! its own port and, plain, on a second listener for the kubelet's probes.

mod backlog;
mod metadata;
mod readers;
mod server;
mod service;

use std::time::Duration;

use worker_kafka::Admin;

pub use metadata::DEFAULT_LAG_THRESHOLD;
pub use server::{Limits, Serve, Tls};
pub use service::{STALE_HEADER, Scaler};

/// KEDA's External Scaler API, generated from `proto/externalscaler.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("externalscaler");
}

/// How long a backlog read may take before the last value is given instead.
pub const READ_BOUND: Duration = Duration::from_secs(3);

impl Scaler {
    /// A scaler reading through `admin` (secured as the cluster needs, see
    /// [`Admin::connect_with`]), each read bounded by `bound`, within `limits`.
    pub fn with_admin(admin: Admin, bound: Duration, limits: &Limits) -> Self {
        Self::new(backlog::Cluster::new(admin), bound, limits)
    }
}
