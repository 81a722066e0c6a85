//! The byte stream under a broker connection: plain TCP, or TLS over it (rustls).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::{Error, ErrorKind, Result};

/// A connected stream to one broker.
#[derive(Debug)]
pub(crate) enum Transport {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Transport {
    /// Connects to `addr` (`host:port`) within `timeout`, with TLS when `tls` is given: the
    /// broker's certificate must chain to the configured roots and name `host`.
    pub(crate) async fn connect(
        addr: &str,
        tls: Option<&Arc<rustls::ClientConfig>>,
        timeout: Duration,
    ) -> Result<Self> {
        let tcp = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| Error::new(ErrorKind::Io, format!("connecting to {addr} timed out")))?
            .map_err(|e| {
                Error::new(ErrorKind::Io, format!("cannot connect to {addr}")).with_source(e)
            })?;
        tcp.set_nodelay(true)?;
        let Some(tls) = tls else {
            return Ok(Transport::Tcp(tcp));
        };
        let host = host_of(addr);
        let name = ServerName::try_from(host.to_owned()).map_err(|_| {
            Error::new(
                ErrorKind::Config,
                format!("broker address {addr}: {host:?} is not a valid TLS server name"),
            )
        })?;
        let handshake = TlsConnector::from(tls.clone()).connect(name, tcp);
        let stream = tokio::time::timeout(timeout, handshake)
            .await
            .map_err(|_| {
                Error::new(
                    ErrorKind::Io,
                    format!("the TLS handshake with broker {addr} timed out"),
                )
            })?
            .map_err(|e| tls_error(addr, &e))?;
        Ok(Transport::Tls(Box::new(stream)))
    }
}

/// The host of `host:port` (brackets of an IPv6 literal removed).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// An error of the TLS handshake or of a read or write over TLS, in words an operator can act
/// on: certificate problems are [`ErrorKind::Authentication`].
pub(crate) fn tls_error(addr: &str, err: &io::Error) -> Error {
    let said = err.to_string();
    let rustls_error = err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    let (kind, why) = match rustls_error {
        Some(rustls::Error::InvalidCertificate(cert)) => (
            ErrorKind::Authentication,
            format!("the broker's certificate is not trusted ({cert:?}): check tls.ca-file and that the certificate names the host you connect to"),
        ),
        Some(rustls::Error::AlertReceived(alert)) => (
            ErrorKind::Authentication,
            format!("the broker refused the TLS connection (alert {alert:?}): does it require a client certificate (tls.cert-file / tls.key-file) that it trusts?"),
        ),
        Some(rustls::Error::InvalidMessage(_)) | Some(rustls::Error::InappropriateMessage { .. }) => (
            ErrorKind::Authentication,
            "the broker did not answer in TLS: is this a plaintext listener (security-protocol plaintext or sasl_plaintext)?".to_owned(),
        ),
        Some(other) => (ErrorKind::Authentication, format!("TLS failed: {other}")),
        None => (ErrorKind::Io, format!("TLS failed: {said}")),
    };
    Error::new(kind, format!("broker {addr}: {why}"))
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(s) => Pin::new(s).poll_flush(cx),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_taken_from_addresses() {
        assert_eq!(host_of("broker-1:9093"), "broker-1");
        assert_eq!(host_of("127.0.0.1:9094"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9093"), "::1");
    }
}
