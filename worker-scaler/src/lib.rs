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
//! `NOT_FOUND`, bad metadata `INVALID_ARGUMENT`, both naming what is wrong.

mod backlog;
mod metadata;
mod service;

use std::time::Duration;

use worker_kafka::Admin;

pub use metadata::DEFAULT_LAG_THRESHOLD;
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
    /// [`Admin::connect_with`]), each read bounded by `bound`.
    pub fn with_admin(admin: Admin, bound: Duration) -> Self {
        Self::new(backlog::Backlogs::new(backlog::Cluster::new(admin), bound))
    }

    /// Serves the scaler on `listener` until `shutdown` resolves (bind it first, so a port that
    /// is taken is an error before anything runs).
    pub async fn serve_on(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), tonic::transport::Error> {
        let stopping = self.stopping.clone();
        let shutdown = async move {
            shutdown.await;
            stopping.cancel();
        };
        tonic::transport::Server::builder()
            .add_service(proto::external_scaler_server::ExternalScalerServer::new(
                self,
            ))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                shutdown,
            )
            .await
    }
}
