//! `share-worker scaler`: KEDA's external scaler (gRPC, `worker_scaler`) for the cluster of a
//! worker file, connected and secured as the file says (`[kafka]`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use worker_core::kafka::Admin;
use worker_scaler::{Limits, Scaler, Serve, Tls};

use crate::ConfigArg;
use crate::config::Config;

#[derive(Debug, Args)]
pub(crate) struct ScalerArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// Where the gRPC server listens (`0.0.0.0:9090` in a pod).
    #[arg(long, default_value = "127.0.0.1:9090")]
    listen: SocketAddr,
    /// The server's certificate chain (PEM): serve TLS. KEDA's `caCert` names its CA.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Ask every client for a certificate signed by this CA (PEM), refusing those without:
    /// mutual TLS, KEDA's `tlsClientCert` and `tlsClientKey`.
    #[arg(long, requires = "tls_cert")]
    client_ca: Option<PathBuf>,
    /// Serve plain gRPC on an address off loopback: anyone who reaches it may ask for the
    /// backlog of any group the scaler's credentials can describe.
    #[arg(long)]
    allow_plaintext: bool,
    /// A second listener serving only the gRPC health service (`grpc.health.v1`), plain, for
    /// the kubelet's probes (which speak no TLS).
    #[arg(long)]
    health_listen: Option<SocketAddr>,
    /// Connections at once; more are closed as they arrive.
    #[arg(long, default_value_t = Limits::default().connections)]
    max_connections: usize,
    /// `StreamIsActive` streams at once (one per scaled object); more are refused.
    #[arg(long, default_value_t = Limits::default().streams)]
    max_streams: usize,
    /// Groups (with their topics) read at once; a new one while each is in use is refused.
    #[arg(long, default_value_t = Limits::default().targets)]
    max_groups: usize,
    /// How long a unary call may take.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    request_timeout: Duration,
}

impl ScalerArgs {
    fn limits(&self) -> anyhow::Result<Limits> {
        for (flag, value) in [
            ("--max-connections", self.max_connections),
            ("--max-streams", self.max_streams),
            ("--max-groups", self.max_groups),
        ] {
            anyhow::ensure!(value >= 1, "{flag}: at least 1");
        }
        anyhow::ensure!(
            !self.request_timeout.is_zero(),
            "--request-timeout: longer than 0"
        );
        Ok(Limits {
            connections: self.max_connections,
            streams: self.max_streams,
            targets: self.max_groups,
            request_timeout: self.request_timeout,
            ..Limits::default()
        })
    }

    fn tls(&self) -> anyhow::Result<Option<Tls>> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(Tls {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.client_ca.clone(),
            }),
            _ => None,
        };
        if tls.is_none() && !self.listen.ip().is_loopback() && !self.allow_plaintext {
            anyhow::bail!(
                "--listen {}: plain gRPC off loopback lets anyone on the network read every group's backlog; \
                 give --tls-cert and --tls-key (and --client-ca for mutual TLS), or --allow-plaintext",
                self.listen
            );
        }
        Ok(tls)
    }
}

/// Serves the scaler until ctrl-c or SIGTERM.
pub(crate) async fn scaler(config: &Config, args: &ScalerArgs) -> anyhow::Result<()> {
    let limits = args.limits()?;
    let tls = args.tls()?;
    let bootstrap = &config.kafka.bootstrap;
    let admin = Admin::connect_with(bootstrap.as_str(), &config.security()?)
        .await
        .with_context(|| format!("connecting to {bootstrap}"))?;
    let scaler = Scaler::with_admin(admin, worker_scaler::READ_BOUND, &limits);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let health = match args.health_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--health-listen {addr}"))?,
        ),
        None => None,
    };
    tracing::info!(
        listen = %args.listen,
        cluster = %bootstrap,
        tls = tls.is_some(),
        mutual_tls = args.client_ca.is_some(),
        health = ?args.health_listen,
        "KEDA external scaler listening"
    );
    scaler
        .serve_on(listener, Serve { tls, health }, crate::shutdown_signal())
        .await
        .with_context(|| format!("serving KEDA's external scaler API on {}", args.listen))?;
    tracing::info!("scaler stopped");
    Ok(())
}
