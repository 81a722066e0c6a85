//! One connection to one broker: TCP or TLS, ApiVersions negotiation, SASL authentication (and
//! re-authentication before the session runs out), size-prefixed frames, request headers and
//! correlation ids. One request is in flight at a time (a broker handles one request per
//! connection at a time anyway).

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufStream};
use tokio::time::Instant;

use super::authenticate;
use super::transport::{Transport, tls_error};
use super::wire::{Reader, capacity, malformed, put_compact_string, put_empty_tags};
use crate::security::Prepared;
use crate::{Error, ErrorKind, Result};

/// API key of ApiVersions.
const API_VERSIONS: i16 = 18;
/// Re-authenticate once this share of the session's lifetime has passed.
const REAUTH_AT: f64 = 0.85;

/// How a connection is set up.
#[derive(Debug, Clone)]
pub(crate) struct ConnectOptions {
    pub(crate) client_id: String,
    /// Largest response frame accepted.
    pub(crate) max_frame: usize,
    /// Deadline for connecting and for each request beyond its own wait time.
    pub(crate) request_timeout: Duration,
    /// TLS and SASL, ready to use.
    pub(crate) security: Prepared,
}

/// A connected, negotiated, authenticated broker connection.
#[derive(Debug)]
pub(crate) struct Connection {
    stream: BufStream<Transport>,
    addr: String,
    correlation: i32,
    options: ConnectOptions,
    versions: HashMap<i16, (i16, i16)>,
    /// Set while a request is on the wire; a connection left broken by a cancelled call is unusable.
    broken: bool,
    /// When to authenticate again, if the broker limits the session's lifetime.
    reauth_at: Option<Instant>,
}

impl Connection {
    /// Connects to `addr`, negotiates API versions and authenticates.
    pub(crate) async fn connect(addr: &str, options: &ConnectOptions) -> Result<Self> {
        let security = &options.security;
        let transport =
            Transport::connect(addr, security.tls.as_ref(), options.request_timeout).await?;
        let mut conn = Connection {
            stream: BufStream::new(transport),
            addr: addr.to_string(),
            correlation: 0,
            options: options.clone(),
            versions: HashMap::new(),
            broken: false,
            reauth_at: None,
        };
        let mut body = BytesMut::new();
        put_compact_string(&mut body, Some("share-worker"));
        put_compact_string(&mut body, Some(env!("CARGO_PKG_VERSION")));
        put_empty_tags(&mut body);
        let resp = conn.request(API_VERSIONS, 3, &body, Duration::ZERO).await?;
        conn.versions = decode_api_versions(resp)?;
        conn.authenticate().await?;
        Ok(conn)
    }

    /// Authenticates (again) with the configured SASL mechanism, if any.
    async fn authenticate(&mut self) -> Result<()> {
        let Some(sasl) = self.options.security.sasl.clone() else {
            return Ok(());
        };
        let lifetime = authenticate::authenticate(self, &sasl).await?;
        self.reauth_at = lifetime.map(|l| Instant::now() + l.mul_f64(REAUTH_AT));
        Ok(())
    }

    /// When the session must be authenticated again (KIP-368), if the broker limits it.
    pub(crate) fn reauth_due(&self) -> Option<Instant> {
        self.reauth_at
    }

    /// Authenticates again on this connection if its session is close to running out; an idle
    /// connection can call it on a timer so the broker never sees an expired session.
    pub(crate) async fn reauthenticate_if_due(&mut self) -> Result<()> {
        if self.reauth_at.is_some_and(|at| Instant::now() >= at) {
            tracing::debug!(broker = %self.addr, "re-authenticating");
            self.authenticate().await?;
        }
        Ok(())
    }

    /// The broker's address (`host:port`), for error messages.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether a cancelled or failed call left the connection unusable.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }

    /// The highest version of `api_key` in `ours` that the broker supports too.
    pub(crate) fn version(&self, api_key: i16, ours: (i16, i16)) -> Result<i16> {
        let (min, max) = self.versions.get(&api_key).copied().ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                format!("broker {} does not support API {api_key}", self.addr),
            )
        })?;
        let v = max.min(ours.1);
        if v < min.max(ours.0) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "broker {} supports API {api_key} v{min}-{max}, we need v{}-{}",
                    self.addr, ours.0, ours.1
                ),
            ));
        }
        Ok(v)
    }

    /// The version range the broker offers for `api_key`, `None` if it does not offer it.
    pub(crate) fn offered(&self, api_key: i16) -> Option<(i16, i16)> {
        self.versions.get(&api_key).copied()
    }

    /// Fails unless the broker has the v2 share RPCs (Kafka 4.2+).
    pub(crate) fn require_share_v2(&self) -> Result<()> {
        for key in [super::codec::SHARE_FETCH, super::codec::SHARE_ACKNOWLEDGE] {
            if self.version(key, (2, 2)).is_err() {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "broker {} lacks ShareFetch/ShareAcknowledge v2: share groups with RENEW need Kafka 4.2+",
                        self.addr
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Sends one request and returns the response body, re-authenticating first when the
    /// session is close to running out. `wait` is how long the broker may hold the request on
    /// purpose (MaxWaitMs); the request timeout comes on top.
    pub(crate) async fn call(
        &mut self,
        api_key: i16,
        version: i16,
        body: &[u8],
        wait: Duration,
    ) -> Result<Bytes> {
        self.reauthenticate_if_due().await?;
        self.request(api_key, version, body, wait).await
    }

    /// Sends one request and returns the response body, as it is (no re-authentication).
    pub(crate) async fn request(
        &mut self,
        api_key: i16,
        version: i16,
        body: &[u8],
        wait: Duration,
    ) -> Result<Bytes> {
        if self.broken {
            return Err(Error::new(
                ErrorKind::Io,
                format!("connection to {} is broken", self.addr),
            ));
        }
        self.broken = true;
        let deadline = self.options.request_timeout + wait;
        let result = tokio::time::timeout(deadline, self.exchange(api_key, version, body))
            .await
            .map_err(|_| {
                Error::new(
                    ErrorKind::Io,
                    format!(
                        "request {api_key} to {} timed out after {deadline:?}",
                        self.addr
                    ),
                )
            })?;
        let resp = result?;
        self.broken = false;
        Ok(resp)
    }

    /// What an I/O error on this connection means, in words an operator can act on.
    fn io_error(&self, err: io::Error) -> Error {
        if matches!(self.stream.get_ref(), Transport::Tls(_))
            && err.get_ref().is_some_and(|e| e.is::<rustls::Error>())
        {
            return tls_error(&self.addr, &err);
        }
        if err.kind() == io::ErrorKind::UnexpectedEof && self.correlation <= 1 {
            let hint = if self.options.security.tls.is_none() {
                ": is it a TLS listener (security-protocol ssl or sasl_ssl)?"
            } else {
                ""
            };
            return Error::new(
                ErrorKind::Io,
                format!(
                    "broker {} closed the connection before answering its first request{hint}",
                    self.addr
                ),
            );
        }
        Error::new(ErrorKind::Io, format!("connection to {}", self.addr)).with_source(err)
    }

    async fn exchange(&mut self, api_key: i16, version: i16, body: &[u8]) -> Result<Bytes> {
        let key = ApiKey::try_from(api_key)
            .map_err(|_| Error::new(ErrorKind::Protocol, format!("unknown API key {api_key}")))?;
        let request_header = key.request_header_version(version);
        let response_header = key.response_header_version(version);
        self.correlation = self.correlation.wrapping_add(1);
        let correlation = self.correlation;

        let mut head = BytesMut::with_capacity(32);
        head.put_i16(api_key);
        head.put_i16(version);
        head.put_i32(correlation);
        head.put_i16(self.options.client_id.len() as i16);
        head.put_slice(self.options.client_id.as_bytes());
        if request_header >= 2 {
            put_empty_tags(&mut head);
        }
        let size = i32::try_from(head.len() + body.len())
            .map_err(|_| Error::new(ErrorKind::Protocol, "request too large"))?;
        let written = async {
            self.stream.write_i32(size).await?;
            self.stream.write_all(&head).await?;
            self.stream.write_all(body).await?;
            self.stream.flush().await
        }
        .await;
        written.map_err(|e| self.io_error(e))?;

        let size = match self.stream.read_i32().await {
            Ok(size) => size,
            Err(e) => return Err(self.io_error(e)),
        };
        if self.options.security.tls.is_none() && looks_like_tls(size) {
            return Err(Error::new(
                ErrorKind::Authentication,
                format!(
                    "broker {} answered in TLS: it is a TLS listener, so set security-protocol to ssl or sasl_ssl",
                    self.addr
                ),
            ));
        }
        let size =
            usize::try_from(size).map_err(|_| malformed(format_args!("frame size {size}")))?;
        if size > self.options.max_frame {
            return Err(malformed(format_args!(
                "frame of {size} bytes exceeds the cap of {}",
                self.options.max_frame
            )));
        }
        // Grow with what arrives, doubling but never past `size`: a size that lies reserves
        // little ahead of the bytes, and the frame's allocation is exactly its size (records
        // are slices of it).
        let mut frame: Vec<u8> = Vec::with_capacity(size.min(FRAME_PREALLOC));
        while frame.len() < size {
            if frame.len() == frame.capacity() {
                let grown = frame.capacity().saturating_mul(2).min(size);
                frame.reserve_exact(grown - frame.len());
            }
            let room = (frame.capacity() - frame.len()) as u64;
            let read = (&mut self.stream).take(room).read_buf(&mut frame).await;
            match read {
                Ok(0) => {
                    return Err(self.io_error(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("the frame ended after {} of {size} bytes", frame.len()),
                    )));
                }
                Ok(_) => {}
                Err(e) => return Err(self.io_error(e)),
            }
        }
        let mut r = Reader::new(Bytes::from(frame));
        let got = r.i32()?;
        if got != correlation {
            return Err(malformed(format_args!(
                "correlation id {got}, expected {correlation}"
            )));
        }
        if response_header >= 1 {
            r.skip_tags()?;
        }
        let rest = r.remaining();
        r.bytes(rest)
    }
}

/// Whether a frame's size field is really the start of a TLS record (an alert or a handshake,
/// protocol version 3.x): what a TLS listener sends a client that speaks plain Kafka to it.
fn looks_like_tls(size: i32) -> bool {
    let [kind, major, ..] = size.to_be_bytes();
    matches!(kind, 0x15 | 0x16) && major == 0x03
}

/// The most reserved for a frame before its bytes arrive.
const FRAME_PREALLOC: usize = 1 << 20;

/// Decodes an ApiVersions v3 response into key → (min, max).
pub(crate) fn decode_api_versions(body: Bytes) -> Result<HashMap<i16, (i16, i16)>> {
    let mut r = Reader::new(body);
    let error = r.i16()?;
    if error != 0 {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "ApiVersions failed with error {error}: the broker is too old (Kafka 4.2+ needed)"
            ),
        ));
    }
    let n = r.compact_array_len(7)?;
    let mut out = HashMap::with_capacity(capacity(n));
    for _ in 0..n {
        let key = r.i16()?;
        let min = r.i16()?;
        let max = r.i16()?;
        r.skip_tags()?;
        out.insert(key, (min, max));
    }
    let _throttle = r.i32()?;
    r.skip_tags()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// Errors inside the fake broker's task, which must be `Send` to cross `tokio::spawn`.
    type BrokerError = Box<dyn std::error::Error + Send + Sync>;

    /// A one-connection fake broker: answers ApiVersions (share v2 present or not), then replies to
    /// the next request with `frame` (raw bytes after the size prefix) announced as `size`.
    async fn fake_broker(share_v2: bool, reply: Option<(i32, Vec<u8>)>) -> std::io::Result<String> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await?;
            let read_request =
                async |s: &mut tokio::net::TcpStream| -> std::result::Result<i32, BrokerError> {
                    let size = s.read_i32().await?;
                    let mut buf = vec![0u8; size as usize];
                    s.read_exact(&mut buf).await?;
                    let correlation: [u8; 4] = buf
                        .get(4..8)
                        .ok_or("request shorter than its header")?
                        .try_into()?;
                    Ok(i32::from_be_bytes(correlation))
                };
            let correlation = read_request(&mut s).await?;
            let max = if share_v2 { 2 } else { 1 };
            let mut body = BytesMut::new();
            body.put_i32(correlation);
            body.put_i16(0);
            put_compact_len(&mut body, 2);
            for key in [
                super::super::codec::SHARE_FETCH,
                super::super::codec::SHARE_ACKNOWLEDGE,
            ] {
                body.put_i16(key);
                body.put_i16(1);
                body.put_i16(max);
                put_empty_tags(&mut body);
            }
            body.put_i32(0);
            put_empty_tags(&mut body);
            s.write_i32(body.len() as i32).await?;
            s.write_all(&body).await?;
            if let Some((size, frame)) = reply {
                let _ = read_request(&mut s).await?;
                s.write_i32(size).await?;
                s.write_all(&frame).await?;
            }
            let _ = s.read_u8().await;
            Ok::<(), BrokerError>(())
        });
        Ok(addr)
    }

    fn options() -> ConnectOptions {
        ConnectOptions {
            client_id: "test".into(),
            max_frame: 1024,
            request_timeout: Duration::from_secs(5),
            security: Prepared::default(),
        }
    }

    use super::super::wire::put_compact_len;

    #[tokio::test]
    async fn a_broker_without_share_v2_is_refused_with_a_clear_message()
    -> Result<(), Box<dyn std::error::Error>> {
        let addr = fake_broker(false, None).await?;
        let conn = Connection::connect(&addr, &options()).await?;
        let err = conn.require_share_v2().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(
            err.message()
                .contains("share groups with RENEW need Kafka 4.2+"),
            "{err}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn frames_over_the_cap_are_errors() -> Result<(), Box<dyn std::error::Error>> {
        let addr = fake_broker(true, Some((1 << 30, Vec::new()))).await?;
        let mut conn = Connection::connect(&addr, &options()).await?;
        conn.require_share_v2()?;
        let err = conn
            .call(SHARE_FETCH_KEY, 2, b"", Duration::ZERO)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol);
        assert!(conn.is_broken());
        Ok(())
    }

    #[tokio::test]
    async fn a_wrong_correlation_id_is_an_error() -> Result<(), Box<dyn std::error::Error>> {
        let addr = fake_broker(true, Some((8, vec![0, 0, 0, 99, 0, 0, 0, 0]))).await?;
        let mut conn = Connection::connect(&addr, &options()).await?;
        let err = conn
            .call(SHARE_FETCH_KEY, 2, b"", Duration::ZERO)
            .await
            .unwrap_err();
        assert!(err.message().contains("correlation"), "{err}");
        Ok(())
    }

    const SHARE_FETCH_KEY: i16 = super::super::codec::SHARE_FETCH;

    #[test]
    fn a_tls_record_is_not_mistaken_for_a_frame_size() {
        // An alert record header: type 21, TLS 1.2, length 2.
        assert!(looks_like_tls(i32::from_be_bytes([0x15, 0x03, 0x03, 0x00])));
        assert!(looks_like_tls(i32::from_be_bytes([0x16, 0x03, 0x01, 0x02])));
        assert!(!looks_like_tls(1024));
        assert!(!looks_like_tls(-1));
    }
}
