//! Serving the scaler: TLS (optionally mutual), the limits every client is held to, and the gRPC
//! health service, on the main listener and, plain, on a listener of its own for probes.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpConnectInfo, TcpIncoming};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::Scaler;
use crate::proto::external_scaler_server::ExternalScalerServer;

/// The largest request the scaler decodes: a scaled object's name, namespace and trigger
/// metadata (at most 100 topic names of 249 bytes, and KEDA's own keys) fit well within it.
const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// How long a TLS handshake may take.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);

/// What the server lets its clients hold. KEDA holds one connection per scaler address and one
/// stream per scaled object, so the defaults leave room for a large cluster and stop a client
/// that opens without end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections at once; one more is closed at once.
    pub connections: usize,
    /// `StreamIsActive` streams at once, over all connections; one more is `RESOURCE_EXHAUSTED`.
    pub streams: usize,
    /// Targets (a group and its topics) read at once; a new one while each is followed by a
    /// stream is `RESOURCE_EXHAUSTED`.
    pub targets: usize,
    /// How long a unary call (`IsActive`, `GetMetrics`, `GetMetricSpec`) may take.
    pub request_timeout: Duration,
    /// How often an idle connection is pinged (HTTP/2 and TCP keepalive); one that does not
    /// answer within the same time is closed.
    pub keepalive: Duration,
    /// How often a followed target is read.
    pub every: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections: 64,
            streams: 4_096,
            targets: 1_000,
            request_timeout: Duration::from_secs(10),
            keepalive: Duration::from_secs(30),
            every: Duration::from_secs(1),
        }
    }
}

/// The server's TLS: its certificate chain and key (PEM files), and the CA whose certificates
/// clients must present (mutual TLS) when named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA clients' certificates are checked against; `None`: no client certificate asked.
    pub client_ca: Option<PathBuf>,
}

impl Tls {
    /// The server's TLS settings, each file read and checked, an error naming the file.
    fn config(&self) -> Result<ServerTlsConfig, ServeError> {
        let cert = read(&self.cert)?;
        let certs: Vec<_> = CertificateDer::pem_slice_iter(&cert)
            .collect::<Result<_, _>>()
            .map_err(|err| ServeError::file(&self.cert, format!("not a PEM certificate: {err}")))?;
        if certs.is_empty() {
            return Err(ServeError::file(&self.cert, "holds no PEM certificate"));
        }
        let key = read(&self.key)?;
        PrivateKeyDer::from_pem_slice(&key)
            .map_err(|err| ServeError::file(&self.key, format!("not a PEM private key: {err}")))?;
        let mut config = ServerTlsConfig::new()
            .identity(Identity::from_pem(cert, key))
            .timeout(HANDSHAKE_WITHIN);
        if let Some(ca) = &self.client_ca {
            let pem = read(ca)?;
            let cas = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| ServeError::file(ca, format!("not a PEM certificate: {err}")))?;
            if cas.is_empty() {
                return Err(ServeError::file(ca, "holds no PEM certificate"));
            }
            config = config.client_ca_root(Certificate::from_pem(pem));
        }
        Ok(config)
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ServeError> {
    std::fs::read(path).map_err(|err| ServeError::file(path, err.to_string()))
}

/// How the scaler is served.
#[derive(Debug, Default)]
pub struct Serve {
    /// TLS on the main listener (`None`: plain).
    pub tls: Option<Tls>,
    /// A listener serving only the health service, plain (for the kubelet's gRPC probe, which
    /// speaks no TLS).
    pub health: Option<TcpListener>,
}

/// Why the scaler could not be served.
#[derive(Debug)]
pub enum ServeError {
    /// A TLS file is missing or not what it should be.
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The gRPC server failed.
    Transport(tonic::transport::Error),
}

impl ServeError {
    fn file(path: &Path, why: impl Into<String>) -> Self {
        Self::File {
            path: path.to_owned(),
            why: why.into(),
        }
    }
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File { path, why } => write!(f, "{}: {why}", path.display()),
            Self::Transport(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::File { .. } => None,
            Self::Transport(err) => Some(err),
        }
    }
}

impl Scaler {
    /// Serves the scaler on `listener` until `shutdown` resolves (bind it first, so a port that
    /// is taken is an error before anything runs). A TLS file that is missing or malformed is an
    /// error before anything is served.
    pub async fn serve_on(
        self,
        listener: TcpListener,
        serve: Serve,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let tls = serve.tls.as_ref().map(Tls::config).transpose()?;
        let limits = self.limits;
        let stopping = self.stopping.clone();
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_serving::<ExternalScalerServer<Scaler>>().await;
        let stopped = stopping.clone();
        let shutdown = async move {
            shutdown.await;
            stopping.cancel();
        };
        let mut builder = tonic::transport::Server::builder()
            .timeout(limits.request_timeout)
            .http2_keepalive_interval(Some(limits.keepalive))
            .http2_keepalive_timeout(Some(limits.keepalive))
            .max_concurrent_streams(u32::try_from(limits.streams).unwrap_or(u32::MAX));
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).map_err(ServeError::Transport)?;
        }
        let main = builder
            .add_service(health_service.clone())
            .add_service(
                ExternalScalerServer::new(self).max_decoding_message_size(MAX_REQUEST_BYTES),
            )
            .serve_with_incoming_shutdown(capped(listener, &limits), shutdown);
        let probes = async {
            let Some(listener) = serve.health else {
                return Ok(());
            };
            tonic::transport::Server::builder()
                .timeout(limits.request_timeout)
                .add_service(health_service)
                .serve_with_incoming_shutdown(capped(listener, &limits), stopped.cancelled())
                .await
        };
        let stopped_health = async {
            stopped.cancelled().await;
            // Probes say so while the open streams end.
            health
                .set_not_serving::<ExternalScalerServer<Scaler>>()
                .await;
            health
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
            Ok(())
        };
        tokio::try_join!(main, probes, stopped_health).map_err(ServeError::Transport)?;
        Ok(())
    }
}

/// `listener`'s connections, at most [`Limits::connections`] at once (one more is closed as it
/// arrives), with TCP keepalive.
fn capped(listener: TcpListener, limits: &Limits) -> Capped {
    Capped {
        incoming: TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .with_keepalive(Some(limits.keepalive)),
        permits: Arc::new(Semaphore::new(limits.connections)),
        most: limits.connections,
        warned_at: None,
    }
}

/// Accepted connections, each holding a permit while it is open.
struct Capped {
    incoming: TcpIncoming,
    permits: Arc<Semaphore>,
    most: usize,
    /// When a refused connection was last logged: at most one line a second.
    warned_at: Option<Instant>,
}

impl Stream for Capped {
    type Item = std::io::Result<CappedIo>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let Some(accepted) = ready!(Pin::new(&mut self.incoming).poll_next(cx)) else {
                return Poll::Ready(None);
            };
            let io = match accepted {
                Ok(io) => io,
                Err(err) => return Poll::Ready(Some(Err(err))),
            };
            match self.permits.clone().try_acquire_owned() {
                Ok(permit) => {
                    return Poll::Ready(Some(Ok(CappedIo {
                        io,
                        _permit: permit,
                    })));
                }
                Err(_) => {
                    if self
                        .warned_at
                        .is_none_or(|at| at.elapsed() >= Duration::from_secs(1))
                    {
                        self.warned_at = Some(Instant::now());
                        tracing::warn!(
                            peer = ?io.peer_addr().ok(),
                            most = self.most,
                            "closing a connection: the scaler holds as many as it may"
                        );
                    }
                    drop(io);
                }
            }
        }
    }
}

/// A connection, and its place among the connections allowed.
struct CappedIo {
    io: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl Connected for CappedIo {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl AsyncRead for CappedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for CappedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
