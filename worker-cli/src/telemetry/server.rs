//! The accept loop: hyper's HTTP/1 server, over rustls with `tls-cert-file`, with every resource
//! a client can hold bounded (connections in all and per client address, with a reserve for
//! probes: [`admission`]; how long each lives; how large a request head is), the `Host`
//! allow-list ([`hosts`]) on every request, the client behind trusted proxies ([`client`]) and a
//! graceful stop.

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Config, UiSection};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::REQUEST_TIMEOUT;
use super::admission::{Admission, Kind, Slots, Ticket};
use super::certs;
use super::client::{Client, TrustedProxies};
use super::hosts::AllowedHosts;

/// The address a request came from (an extension of every request), for audit lines and the
/// sign-in throttle.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer(pub(crate) SocketAddr);

/// What clients may hold of the listener.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Connections served at once, per client address, and reserved for probes.
    pub(crate) slots: Slots,
    /// The request head (and the TLS handshake before it) must have arrived within this long of
    /// the accept (slowloris).
    pub(crate) head: Duration,
    /// A connection is closed this long after its accept, whatever it is doing: the head's
    /// deadline, the request timeout and the time left to write the answer.
    pub(crate) lifetime: Duration,
    /// How long a stop waits for the connections in progress.
    pub(crate) stop_grace: Duration,
}

/// Connections at once: probes and scrapers need one or two each, a dashboard's browser six.
const MAX_CONNECTIONS: usize = 64;
/// Connections at once from one client address: four of them cannot take the listener.
const MAX_CONNECTIONS_PER_PEER: usize = 16;
/// Connections past the caps for [`PROBE_PATHS`] only, so busy clients cannot fail a probe.
const PROBE_RESERVE: usize = 8;
/// The request paths a reserve slot answers: the kubelet's probes, whose failure restarts the pod.
pub(crate) const PROBE_PATHS: [&str; 2] = ["/healthz", "/readyz"];
/// Time from the accept to the whole request head.
const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// How long a stop waits for the connections in progress.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Time to write an answer once it is ready; the answers are a few kilobytes.
const WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// The largest request head (hyper's smallest read buffer): probes send a line and a few headers.
const MAX_HEAD_BYTES: usize = 8 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Self {
            slots: Slots {
                general: MAX_CONNECTIONS,
                per_peer: MAX_CONNECTIONS_PER_PEER,
                reserve: PROBE_RESERVE,
            },
            head: HEAD_DEADLINE,
            lifetime: HEAD_DEADLINE + REQUEST_TIMEOUT + WRITE_DEADLINE,
            stop_grace: STOP_GRACE,
        }
    }
}

/// How one listener serves: its limits, the hosts it answers and HTTPS.
#[derive(Clone)]
pub(crate) struct Serving {
    pub(crate) limits: Limits,
    pub(crate) hosts: AllowedHosts,
    pub(crate) tls: Option<TlsAcceptor>,
    /// Clients reach it over HTTPS: its own TLS, or the TLS proxy `behind-tls-proxy` declares.
    pub(crate) https: bool,
    /// The proxies whose `X-Forwarded-For` names the client a connection's slot counts for:
    /// `ui.trusted-proxies` on a listener that serves the dashboard.
    pub(crate) trusted: Arc<TrustedProxies>,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving")
            .field("limits", &self.limits)
            .field("hosts", &self.hosts)
            .field("tls", &self.tls.is_some())
            .field("https", &self.https)
            .field("trusted", &self.trusted)
            .finish()
    }
}

impl Serving {
    /// `telemetry.listen`'s, from `[telemetry]` (the certificate files are read now), with
    /// `ui.trusted-proxies` when it serves the dashboard (`telemetry.ui`).
    pub(crate) fn telemetry(config: &Config) -> anyhow::Result<Self> {
        let section = &config.telemetry;
        let trusted = if section.ui {
            trusted_proxies(&config.ui)?
        } else {
            TrustedProxies::default()
        };
        Self::new(
            "telemetry",
            (&section.tls_cert_file, &section.tls_key_file),
            section.behind_tls_proxy,
            AllowedHosts::new("telemetry.allowed-hosts", &section.allowed_hosts),
            trusted,
        )
    }

    /// `ui.listen`'s (`share-worker ui`), from `[ui]`.
    pub(crate) fn dashboard(section: &UiSection) -> anyhow::Result<Self> {
        Self::new(
            "ui",
            (&section.tls_cert_file, &section.tls_key_file),
            section.behind_tls_proxy,
            AllowedHosts::new("ui.allowed-hosts", &section.allowed_hosts),
            trusted_proxies(section)?,
        )
    }

    fn new(
        table: &'static str,
        files: (&Option<std::path::PathBuf>, &Option<std::path::PathBuf>),
        behind_tls_proxy: bool,
        hosts: AllowedHosts,
        trusted: TrustedProxies,
    ) -> anyhow::Result<Self> {
        let tls = match files {
            (Some(cert), Some(key)) => Some(certs::acceptor(table, cert, key)?),
            // One without the other is refused when the file is loaded.
            _ => None,
        };
        Ok(Self {
            limits: Limits::default(),
            hosts,
            https: behind_tls_proxy || tls.is_some(),
            tls,
            trusted: Arc::new(trusted),
        })
    }

    /// The scheme clients use, for log lines.
    pub(crate) fn scheme(&self) -> &'static str {
        if self.https { "https" } else { "http" }
    }
}

/// `ui.trusted-proxies` (checked when the file is loaded; a model built in code is checked here).
pub(crate) fn trusted_proxies(section: &UiSection) -> anyhow::Result<TrustedProxies> {
    TrustedProxies::parse(&section.trusted_proxies)
        .map_err(|why| anyhow::anyhow!("ui.trusted-proxies: {why}"))
}

/// Serves `app` on `listener` until `stop` is cancelled, then waits up to `stop_grace` for the
/// connections in progress.
///
/// Each connection carries one request (no keep-alive): a connection is then a bounded amount
/// of work, and an idle client cannot keep a slot.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    serving: Serving,
    stop: CancellationToken,
) {
    let limits = serving.limits;
    let admission = Admission::new(limits.slots);
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.head)
        .keep_alive(false)
        .max_buf_size(MAX_HEAD_BYTES);
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors, most likely: let some close before trying again.
                tracing::warn!(error = %err, "listener: accept failed");
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let via_proxy = serving.trusted.contains(peer.ip());
        let Some(ticket) = admission.admit(peer.ip(), via_proxy) else {
            tracing::debug!(
                %peer,
                "listener: every slot busy (its address's, the listener's, the probes'); closing a new connection"
            );
            continue;
        };
        let ticket = Arc::new(ticket);
        let gate = Gate {
            ticket: ticket.clone(),
            hosts: serving.hosts.clone(),
            peer,
            trusted: via_proxy.then(|| serving.trusted.clone()),
        };
        let app = app
            .clone()
            .layer(Extension(Peer(peer)))
            .layer(middleware::from_fn_with_state(gate, admit_request));
        let connection = Connection {
            stream,
            tls: serving.tls.clone(),
            http: http.clone(),
            service: TowerToHyperService::new(app),
            watcher: graceful.watcher(),
            head: limits.head,
            stop: stop.clone(),
        };
        tokio::spawn(async move {
            tokio::select! {
                () = ticket.evicted() => {
                    tracing::debug!(%peer, "listener: closing an idle connection for a newcomer");
                }
                done = tokio::time::timeout(limits.lifetime, connection.serve()) => match done {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => tracing::debug!(error = %err, "listener: connection"),
                    Err(_) => tracing::debug!("listener: a connection outlived its deadline"),
                },
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.stop_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("listener: stopped with connections still open");
    }
}

/// One accepted connection, to serve in its own task.
struct Connection {
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    http: http1::Builder,
    service: TowerToHyperService<Router>,
    watcher: Watcher,
    head: Duration,
    stop: CancellationToken,
}

type ConnectionError = Box<dyn StdError + Send + Sync>;

impl Connection {
    async fn serve(self) -> Result<(), ConnectionError> {
        let Connection {
            stream,
            tls,
            mut http,
            service,
            watcher,
            head,
            stop,
        } = self;
        let Some(acceptor) = tls else {
            return Ok(watcher
                .watch(http.serve_connection(TokioIo::new(stream), service))
                .await?);
        };
        let started = Instant::now();
        let stream = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            handshake = tokio::time::timeout(head, acceptor.accept(stream)) => handshake??,
        };
        // The head's deadline counts from the accept, the handshake included.
        http.header_read_timeout(head.saturating_sub(started.elapsed()));
        Ok(watcher
            .watch(http.serve_connection(TokioIo::new(stream), service))
            .await?)
    }
}

/// What every request of one connection is checked with.
#[derive(Clone, Debug)]
struct Gate {
    ticket: Arc<Ticket>,
    hosts: AllowedHosts,
    peer: SocketAddr,
    /// The trusted proxies, when the peer is one: the slot counts for the client it names.
    trusted: Option<Arc<TrustedProxies>>,
}

/// Before any route: the connection stops giving way to newcomers, the `Host` must be one the
/// listener answers, a reserve slot serves probes only, and a trusted proxy's connection joins
/// the share of the client it names (refused past it, probes aside).
async fn admit_request(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    gate.ticket.busy();
    let host = match request.uri().authority() {
        Some(authority) => Some(authority.as_str()),
        None => request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok()),
    };
    let Some(host) = host else {
        return (StatusCode::BAD_REQUEST, "a request needs a Host header\n").into_response();
    };
    if !gate.hosts.allows(host) {
        return (StatusCode::MISDIRECTED_REQUEST, gate.hosts.refusal(host)).into_response();
    }
    let probe = PROBE_PATHS.contains(&request.uri().path());
    if let Some(trusted) = &gate.trusted {
        let client = Client::resolve(gate.peer, request.headers(), trusted);
        if !gate.ticket.claim(client.ip) && !probe {
            tracing::debug!(%client, "listener: the client's share is busy; refusing a request");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                "too many requests from your address at once: try again in a moment\n",
            )
                .into_response();
        }
    }
    if gate.ticket.kind() == Kind::Reserve && !probe {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            "the listener is busy: only /healthz and /readyz are answered now\n",
        )
            .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpSocket;
    use tokio::sync::mpsc;

    use super::*;

    const SLACK: Duration = Duration::from_secs(2);

    fn serving(limits: Limits) -> Serving {
        Serving {
            limits,
            hosts: AllowedHosts::new("telemetry.allowed-hosts", &[]),
            tls: None,
            https: false,
            trusted: Arc::default(),
        }
    }

    async fn start_app(
        limits: Limits,
        app: Router,
    ) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
        let addr = listener.local_addr().expect("an address");
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, app, serving(limits), stop.clone()));
        (addr, stop, server)
    }

    async fn start(limits: Limits) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
        start_app(
            limits,
            Router::new().route("/healthz", get(|| async { "ok\n" })),
        )
        .await
    }

    fn small() -> Limits {
        Limits {
            slots: Slots {
                general: 4,
                per_peer: 2,
                reserve: 1,
            },
            head: Duration::from_millis(300),
            lifetime: Duration::from_secs(5),
            stop_grace: Duration::from_secs(1),
        }
    }

    /// A connection to `addr` from the loopback address 127.0.0.`from` (Linux answers all of
    /// 127/8 on loopback): another client, as the listener sees it.
    async fn connect_from(from: u8, addr: SocketAddr) -> TcpStream {
        let socket = TcpSocket::new_v4().expect("a socket");
        socket
            .bind(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(127, 0, 0, from)),
                0,
            ))
            .expect("binding a loopback address");
        socket.connect(addr).await.expect("connecting")
    }

    /// Reads until the server closes the connection: what it sent, or `None` past `within`.
    async fn read_to_close(stream: &mut TcpStream, within: Duration) -> Option<String> {
        let mut out = Vec::new();
        match tokio::time::timeout(within, stream.read_to_end(&mut out)).await {
            Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
            Err(_) => None,
        }
    }

    /// Sends a GET of `path` with `host` on `stream` and reads the answer.
    async fn ask(mut stream: TcpStream, path: &str, host: &str) -> Option<String> {
        let head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        stream.write_all(head.as_bytes()).await.ok()?;
        read_to_close(&mut stream, SLACK).await
    }

    async fn healthz(addr: SocketAddr) -> Option<String> {
        let stream = TcpStream::connect(addr).await.ok()?;
        ask(stream, "/healthz", "localhost").await
    }

    /// A router whose `/slow` never answers and reports each request it took on `started`.
    fn slow_app(started: mpsc::UnboundedSender<()>) -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route(
                "/slow",
                get(move || {
                    let _ = started.send(());
                    std::future::pending::<&'static str>()
                }),
            )
    }

    /// Sends a `/slow` request from 127.0.0.`from` and waits until the handler has it.
    async fn hold_slow(
        from: u8,
        addr: SocketAddr,
        started: &mut mpsc::UnboundedReceiver<()>,
    ) -> TcpStream {
        let mut stream = connect_from(from, addr).await;
        stream
            .write_all(b"GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .expect("sending");
        tokio::time::timeout(SLACK, started.recv())
            .await
            .expect("the handler took the request within the deadline")
            .expect("the app runs");
        stream
    }

    #[tokio::test]
    async fn one_address_keeps_its_newest_idle_connections_and_they_leave_at_the_head_deadline() {
        let limits = small();
        let (addr, stop, server) = start(limits).await;
        let mut idle = Vec::new();
        for _ in 0..limits.slots.per_peer {
            idle.push(connect_from(1, addr).await);
        }
        let opened = Instant::now();
        // Its next connection takes the oldest one's slot; another address's is untouched.
        let mut other = connect_from(2, addr).await;
        idle.push(connect_from(1, addr).await);
        assert_eq!(
            read_to_close(&mut idle[0], SLACK).await.as_deref(),
            Some(""),
            "the oldest idle connection gave way"
        );
        assert_eq!(
            read_to_close(&mut other, Duration::from_millis(50)).await,
            None,
            "another address's connection stays"
        );
        for stream in idle.iter_mut().skip(1) {
            let answer = read_to_close(stream, limits.head + SLACK).await;
            assert!(
                answer.is_some(),
                "an idle connection outlived the head deadline"
            );
        }
        assert!(opened.elapsed() >= limits.head - Duration::from_millis(50));
        let answer = healthz(addr)
            .await
            .expect("an answer once the idle ones are gone");
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("ok\n"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
        stop.cancel();
        server.await.expect("the server stops");
    }

    /// The default limits: the cap's worth of idle connections from one client and as many from
    /// others cannot delay a probe, from any address.
    #[tokio::test]
    async fn idle_connections_never_keep_a_probe_out() {
        let limits = Limits {
            // Long enough that only eviction can make room during the test.
            head: Duration::from_secs(30),
            lifetime: Duration::from_secs(60),
            ..Limits::default()
        };
        let (addr, stop, server) = start(limits).await;
        let mut idle = Vec::new();
        for _ in 0..limits.slots.general {
            idle.push(TcpStream::connect(addr).await.expect("connecting"));
        }
        for from in 2..2 + u8::try_from(limits.slots.general / limits.slots.per_peer).unwrap() {
            for _ in 0..limits.slots.per_peer {
                idle.push(connect_from(from, addr).await);
            }
        }
        for (from, stream) in [
            (1, TcpStream::connect(addr).await.expect("connecting")),
            (9, connect_from(9, addr).await),
        ] {
            let asked = Instant::now();
            let answer = ask(stream, "/healthz", "localhost")
                .await
                .expect("an answer");
            assert!(
                answer.starts_with("HTTP/1.1 200 OK"),
                "from 127.0.0.{from}: {answer}"
            );
            assert!(
                asked.elapsed() < Duration::from_secs(1),
                "{:?}",
                asked.elapsed()
            );
        }
        stop.cancel();
        server.await.expect("the server stops");
    }

    /// Requests in progress fill an address's share, then the listener; probes then take the
    /// reserve and anything else is refused at once.
    #[tokio::test]
    async fn busy_connections_fill_the_caps_and_probes_take_the_reserve() {
        let limits = Limits {
            lifetime: Duration::from_secs(60),
            ..small()
        };
        let (tx, mut started) = mpsc::unbounded_channel();
        let (addr, stop, server) = start_app(limits, slow_app(tx)).await;
        let mut held = Vec::new();
        for _ in 0..limits.slots.per_peer {
            held.push(hold_slow(1, addr, &mut started).await);
        }
        // Past its share, 127.0.0.1 gets the probes' reserve only.
        let refused = ask(connect_from(1, addr).await, "/slow", "localhost")
            .await
            .expect("an answer");
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        assert!(
            refused.ends_with("only /healthz and /readyz are answered now\n"),
            "{refused}"
        );
        let probe = ask(connect_from(1, addr).await, "/healthz", "localhost")
            .await
            .expect("an answer");
        assert!(probe.starts_with("HTTP/1.1 200 OK"), "{probe}");
        // Another address still gets the rest of the listener.
        for _ in 0..limits.slots.general - limits.slots.per_peer {
            held.push(hold_slow(2, addr, &mut started).await);
        }
        // Now full of requests in progress: a third address's probe is answered at once.
        let asked = Instant::now();
        let probe = ask(connect_from(3, addr).await, "/healthz", "localhost")
            .await
            .expect("an answer");
        assert!(probe.starts_with("HTTP/1.1 200 OK"), "{probe}");
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "{:?}",
            asked.elapsed()
        );
        let refused = ask(connect_from(3, addr).await, "/slow", "localhost")
            .await
            .expect("an answer");
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        stop.cancel();
        server.await.expect("the server stops");
    }

    /// Sends a `/slow` request from 127.0.0.`from` for the client `forwarded` and waits until
    /// the handler has it.
    async fn hold_forwarded(
        from: u8,
        forwarded: &str,
        addr: SocketAddr,
        started: &mut mpsc::UnboundedReceiver<()>,
    ) -> TcpStream {
        let mut stream = connect_from(from, addr).await;
        let head = format!(
            "GET /slow HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-For: {forwarded}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.expect("sending");
        tokio::time::timeout(SLACK, started.recv())
            .await
            .expect("the handler took the request within the deadline")
            .expect("the app runs");
        stream
    }

    async fn ask_forwarded(from: u8, addr: SocketAddr, path: &str, forwarded: &str) -> String {
        let mut stream = connect_from(from, addr).await;
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-For: {forwarded}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.expect("sending");
        read_to_close(&mut stream, SLACK).await.expect("an answer")
    }

    /// Behind a trusted proxy each forwarded client gets one client's share and the proxy more
    /// than one; an untrusted peer's forged header changes nothing.
    #[tokio::test]
    async fn a_trusted_proxys_requests_count_for_the_clients_it_forwards_for() {
        let limits = Limits {
            lifetime: Duration::from_secs(60),
            ..small()
        };
        let (tx, mut started) = mpsc::unbounded_channel();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
        let addr = listener.local_addr().expect("an address");
        let stop = CancellationToken::new();
        let trusted = TrustedProxies::parse(&["127.0.0.1/32".to_owned()]).expect("a range");
        let serving = Serving {
            trusted: Arc::new(trusted),
            ..serving(limits)
        };
        let server = tokio::spawn(serve(listener, slow_app(tx), serving, stop.clone()));
        let mut held = Vec::new();
        // Through the proxy (127.0.0.1), client A fills its share: its next request is refused
        // (a probe still answered), client B's is taken: the proxy holds more than one share.
        for _ in 0..limits.slots.per_peer {
            held.push(hold_forwarded(1, "203.0.113.1", addr, &mut started).await);
        }
        let refused = ask_forwarded(1, addr, "/slow", "198.51.100.7, 203.0.113.1").await;
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        assert!(
            refused
                .ends_with("too many requests from your address at once: try again in a moment\n"),
            "{refused}"
        );
        let probe = ask_forwarded(1, addr, "/healthz", "203.0.113.1").await;
        assert!(probe.starts_with("HTTP/1.1 200 OK"), "{probe}");
        held.push(hold_forwarded(1, "203.0.113.2", addr, &mut started).await);
        // 127.0.0.2 is no proxy: its header naming client A (whose share is full) is ignored.
        held.push(hold_forwarded(2, "203.0.113.1", addr, &mut started).await);
        let refused = ask_forwarded(2, addr, "/slow", "203.0.113.4").await;
        assert!(
            refused.ends_with("only /healthz and /readyz are answered now\n"),
            "{refused}"
        );
        stop.cancel();
        server.await.expect("the server stops");
    }

    #[tokio::test]
    async fn a_foreign_host_is_refused_on_every_path_and_a_missing_one_too() {
        let (addr, stop, server) = start(small()).await;
        for path in ["/healthz", "/nothing-here"] {
            let stream = TcpStream::connect(addr).await.expect("connecting");
            let answer = ask(stream, path, "evil.example:80")
                .await
                .expect("an answer");
            assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
            assert!(answer.contains("`telemetry.allowed-hosts`"), "{answer}");
        }
        let stream = TcpStream::connect(addr).await.expect("connecting");
        let answer = ask(stream, "/healthz", "10.9.8.7:9464")
            .await
            .expect("an answer");
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        let mut stream = TcpStream::connect(addr).await.expect("connecting");
        stream
            .write_all(b"GET /healthz HTTP/1.0\r\n\r\n")
            .await
            .expect("sending");
        let answer = read_to_close(&mut stream, SLACK).await.expect("an answer");
        assert!(answer.starts_with("HTTP/1.0 400"), "{answer}");
        stop.cancel();
        server.await.expect("the server stops");
    }

    #[tokio::test]
    async fn a_slow_head_is_cut_at_the_deadline() {
        let limits = small();
        let (addr, stop, server) = start(limits).await;
        let mut slow = TcpStream::connect(addr).await.expect("connecting");
        let started = Instant::now();
        let mut buf = [0u8; 256];
        let closed = loop {
            if slow.write_all(b"G").await.is_err() {
                break started.elapsed();
            }
            let read = tokio::time::timeout(Duration::from_millis(100), slow.read(&mut buf)).await;
            if let Ok(Ok(0) | Err(_)) = read {
                break started.elapsed();
            }
            assert!(started.elapsed() < limits.head + SLACK, "never cut");
        };
        assert!(
            closed >= limits.head - Duration::from_millis(50),
            "{closed:?}"
        );
        stop.cancel();
        server.await.expect("the server stops");
    }

    #[tokio::test]
    async fn a_connection_is_closed_at_its_deadline_whatever_it_is_doing() {
        let limits = Limits {
            lifetime: Duration::from_millis(300),
            ..small()
        };
        let never = || std::future::pending::<&'static str>();
        let app = Router::new().route("/healthz", get(never));
        let (addr, stop, server) = start_app(limits, app).await;
        let opened = Instant::now();
        let answer = healthz(addr).await;
        assert_eq!(answer.as_deref(), Some(""), "closed without an answer");
        assert!(
            opened.elapsed() >= limits.lifetime,
            "{:?}",
            opened.elapsed()
        );
        stop.cancel();
        server.await.expect("the server stops");
    }

    #[tokio::test]
    async fn an_oversized_head_is_refused() {
        let (addr, stop, server) = start(small()).await;
        let mut stream = TcpStream::connect(addr).await.expect("connecting");
        let padding = "a".repeat(MAX_HEAD_BYTES);
        let head = format!("GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Pad: {padding}\r\n\r\n");
        // The server may close before it has read all of it.
        let _ = stream.write_all(head.as_bytes()).await;
        let answer = read_to_close(&mut stream, SLACK).await.expect("an answer");
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
        stop.cancel();
        server.await.expect("the server stops");
    }

    #[tokio::test]
    async fn a_stop_closes_the_listener_and_waits_for_no_idle_client() {
        let limits = Limits {
            head: Duration::from_secs(30),
            ..small()
        };
        let (addr, stop, server) = start(limits).await;
        let _idle = TcpStream::connect(addr).await.expect("connecting");
        assert!(healthz(addr).await.is_some_and(|a| a.ends_with("ok\n")));
        let stopping = Instant::now();
        stop.cancel();
        tokio::time::timeout(limits.stop_grace + SLACK, server)
            .await
            .expect("stopped within the grace")
            .expect("the server stops");
        assert!(
            stopping.elapsed() < limits.stop_grace,
            "waited for the idle client"
        );
        assert!(TcpStream::connect(addr).await.is_err(), "still listening");
    }
}
