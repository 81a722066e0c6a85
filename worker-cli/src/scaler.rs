//! `share-worker scaler`: KEDA's external scaler (gRPC, `worker_scaler`) for the cluster of a
//! worker file, connected and secured as the file says (`[kafka]`).

use std::net::SocketAddr;

use anyhow::Context;
use clap::Args;
use worker_core::kafka::Admin;
use worker_scaler::Scaler;

use crate::ConfigArg;
use crate::config::Config;

#[derive(Debug, Args)]
pub(crate) struct ScalerArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// Where the gRPC server listens (`0.0.0.0:9090` in a pod).
    #[arg(long, default_value = "127.0.0.1:9090")]
    listen: SocketAddr,
}

/// Serves the scaler until ctrl-c or SIGTERM.
pub(crate) async fn scaler(config: &Config, args: &ScalerArgs) -> anyhow::Result<()> {
    let bootstrap = &config.kafka.bootstrap;
    let admin = Admin::connect_with(bootstrap.as_str(), &config.security()?)
        .await
        .with_context(|| format!("connecting to {bootstrap}"))?;
    let scaler = Scaler::with_admin(admin, worker_scaler::READ_BOUND);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    tracing::info!(listen = %args.listen, cluster = %bootstrap, "KEDA external scaler listening");
    scaler
        .serve_on(listener, crate::shutdown_signal())
        .await
        .with_context(|| format!("serving KEDA's external scaler API on {}", args.listen))?;
    tracing::info!("scaler stopped");
    Ok(())
}
