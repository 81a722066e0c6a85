//! The accept loop: hyper's HTTP/1 server with every resource a client can hold bounded (how many
//! connections, how long each lives, how large a request head is), and a graceful stop.

use std::sync::Arc;
use std::time::Duration;

use std::net::SocketAddr;

use axum::{Extension, Router};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::routes::REQUEST_TIMEOUT;

/// The address a request came from (an extension of every request), for audit lines.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer(pub(crate) SocketAddr);

/// What one client may hold of the listener.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Connections served at once; one more is closed as soon as it is accepted.
    pub(crate) max_connections: usize,
    /// The request head must have arrived within this long of the accept (slowloris).
    pub(crate) head: Duration,
    /// A connection is closed this long after its accept, whatever it is doing: the head's
    /// deadline, the request timeout and the time left to write the answer.
    pub(crate) lifetime: Duration,
    /// How long a stop waits for the connections in progress.
    pub(crate) stop_grace: Duration,
}

/// Time to write an answer once it is ready; the answers are a few kilobytes.
const WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// The largest request head (hyper's smallest read buffer): probes send a line and a few headers.
const MAX_HEAD_BYTES: usize = 8 * 1024;

impl Default for Limits {
    fn default() -> Self {
        let head = Duration::from_secs(5);
        Self {
            max_connections: 64,
            head,
            lifetime: head + REQUEST_TIMEOUT + WRITE_DEADLINE,
            stop_grace: Duration::from_secs(2),
        }
    }
}

/// Serves `app` on `listener` until `stop` is cancelled, then waits up to `stop_grace` for the
/// connections in progress.
///
/// Each connection carries one request (no keep-alive): a connection is then a bounded amount
/// of work, and an idle client cannot keep a slot.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
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
                tracing::warn!(error = %err, "telemetry listener: accept failed");
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(
                max = limits.max_connections,
                "telemetry listener: at its connection cap; closing a new connection"
            );
            continue;
        };
        let service = TowerToHyperService::new(app.clone().layer(Extension(Peer(peer))));
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _slot = slot;
            match tokio::time::timeout(limits.lifetime, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::debug!(error = %err, "telemetry listener: connection"),
                Err(_) => tracing::debug!("telemetry listener: a connection outlived its deadline"),
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.stop_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("telemetry listener: stopped with connections still open");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    const SLACK: Duration = Duration::from_secs(2);

    async fn start(
        limits: Limits,
    ) -> (
        std::net::SocketAddr,
        CancellationToken,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
        let addr = listener.local_addr().expect("an address");
        let app = Router::new().route("/healthz", get(|| async { "ok\n" }));
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, app, limits, stop.clone()));
        (addr, stop, server)
    }

    fn small() -> Limits {
        Limits {
            max_connections: 2,
            head: Duration::from_millis(300),
            lifetime: Duration::from_secs(5),
            stop_grace: Duration::from_secs(1),
        }
    }

    /// Reads until the server closes the connection: what it sent, or `None` past `within`.
    async fn read_to_close(stream: &mut TcpStream, within: Duration) -> Option<String> {
        let mut out = Vec::new();
        match tokio::time::timeout(within, stream.read_to_end(&mut out)).await {
            Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
            Err(_) => None,
        }
    }

    async fn healthz(addr: std::net::SocketAddr) -> Option<String> {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .ok()?;
        read_to_close(&mut stream, SLACK).await
    }

    #[tokio::test]
    async fn a_connection_over_the_cap_is_closed_and_idle_ones_leave_at_the_head_deadline() {
        let limits = small();
        let (addr, stop, server) = start(limits).await;
        let mut idle = Vec::new();
        for _ in 0..limits.max_connections {
            idle.push(TcpStream::connect(addr).await.expect("connecting"));
        }
        let opened = Instant::now();
        let mut over = TcpStream::connect(addr).await.expect("connecting");
        assert_eq!(read_to_close(&mut over, SLACK).await.as_deref(), Some(""));
        for stream in &mut idle {
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
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
        let addr = listener.local_addr().expect("an address");
        let never = || std::future::pending::<&'static str>();
        let app = Router::new().route("/healthz", get(never));
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, app, limits, stop.clone()));
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
        let head = format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: {padding}\r\n\r\n");
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
