//! A fake HTTP endpoint for the http handler, and a fake OTLP/HTTP collector.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::text;

/// What the test HTTP server saw.
#[derive(Default, Debug)]
pub(crate) struct Seen {
    /// Body and `Idempotency-Key` of each request.
    pub(crate) requests: Vec<(String, String)>,
    /// The head of each request, lowercased.
    pub(crate) heads: Vec<String>,
    /// When each request arrived.
    pub(crate) times: Vec<std::time::Instant>,
    /// Until when every request is answered 503 (an outage).
    pub(crate) down_until: Option<std::time::Instant>,
}

/// Answers 200 to "ok…", 400 to "bad…", 429 (Retry-After: 1) to the first "slow…" then 200, 429
/// (Retry-After: 3) to the first "cool…" then 200, and
/// 200 to "sleepy…" after 1.5 s; 503 to everything during an outage ([`Endpoint::down_for`]).
pub(crate) async fn serve(listener: TcpListener, seen: Arc<Mutex<Seen>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(connection(stream, seen.clone()));
    }
}

/// Reads the next HTTP/1.1 request from `stream` (bytes left over stay in `buffer`): its head,
/// lowercased, and its body. `None` once the peer closed.
pub(crate) async fn read_request(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
) -> Option<(String, Vec<u8>)> {
    let head_end = loop {
        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = text(&buffer[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    let body = buffer[head_end..head_end + length].to_vec();
    buffer.drain(..head_end + length);
    Some((head, body))
}

/// One connection of [`serve`] (plain or TLS).
pub(crate) async fn connection(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    seen: Arc<Mutex<Seen>>,
) {
    let mut buffer = Vec::new();
    while let Some((head, body)) = read_request(&mut stream, &mut buffer).await {
        let body = text(&body);
        let key = head
            .lines()
            .find_map(|l| l.strip_prefix("idempotency-key:"))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default();
        let status = {
            let mut seen = seen.lock().expect("the seen lock");
            let first = !seen.requests.iter().any(|(b, _)| *b == body);
            let first_slow = body.starts_with("slow") && first;
            let first_cool = body.starts_with("cool") && first;
            let topic_ok =
                head.contains("x-share-topic:") && head.contains("x-share-delivery-count:");
            seen.requests.push((body.clone(), key));
            seen.heads.push(head.clone());
            let now = std::time::Instant::now();
            seen.times.push(now);
            match () {
                _ if !topic_ok => "500 Internal Server Error",
                _ if seen.down_until.is_some_and(|until| now < until) => "503 Service Unavailable",
                _ if body.starts_with("bad") => "400 Bad Request",
                _ if first_slow => "429 Too Many Requests\r\nRetry-After: 1",
                _ if first_cool => "429 Too Many Requests\r\nRetry-After: 3",
                _ => "200 OK",
            }
        };
        if body.starts_with("sleepy") {
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        let response = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Answers a request for `/send` with `302 Found` and `location`, any other with 200; keeps the
/// path of every request.
pub(crate) async fn redirecting(
    listener: TcpListener,
    location: Vec<u8>,
    paths: Arc<Mutex<Vec<String>>>,
) {
    while let Ok((mut stream, _)) = listener.accept().await {
        let location = location.clone();
        let paths = paths.clone();
        tokio::spawn(async move {
            let mut buffer = Vec::new();
            while let Some((head, _)) = read_request(&mut stream, &mut buffer).await {
                let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
                let mut response = if path == "/send" {
                    let mut head = b"HTTP/1.1 302 Found\r\nLocation: ".to_vec();
                    head.extend_from_slice(&location);
                    head.extend_from_slice(b"\r\n");
                    head
                } else {
                    b"HTTP/1.1 200 OK\r\n".to_vec()
                };
                response.extend_from_slice(b"Content-Length: 0\r\n\r\n");
                paths.lock().expect("the paths lock").push(path);
                if stream.write_all(&response).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// What a fake OTLP/HTTP collector received: (path, protobuf body) per request.
pub(crate) type Exports = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A collector that keeps every export and answers 200 with an empty (valid) response.
pub(crate) async fn collector(listener: TcpListener, exports: Exports) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(collector_connection(stream, exports.clone()));
    }
}

/// One connection of [`collector`] (plain or TLS).
pub(crate) async fn collector_connection(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    exports: Exports,
) {
    let mut buffer = Vec::new();
    while let Some((head, body)) = read_request(&mut stream, &mut buffer).await {
        let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
        exports.lock().expect("the exports lock").push((path, body));
        let response =
            "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A [`serve`] endpoint on a free loopback port, for the `http` handler; stopped when dropped.
pub(crate) struct Endpoint {
    pub(crate) seen: Arc<Mutex<Seen>>,
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoint {
    pub(crate) async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding");
        let addr = listener.local_addr().expect("an address");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let task = tokio::spawn(serve(listener, seen.clone()));
        Self { seen, addr, task }
    }

    /// The route lines of an `http` handler that posts here.
    pub(crate) fn route(&self) -> String {
        format!(
            "handler = \"http\"\nurl = \"http://{}/send\"\ntimeout = \"5s\"",
            self.addr
        )
    }

    /// The body of every request so far.
    pub(crate) fn bodies(&self) -> Vec<String> {
        let seen = self.seen.lock().expect("the seen lock");
        seen.requests.iter().map(|(body, _)| body.clone()).collect()
    }

    /// Body and arrival of every request so far.
    pub(crate) fn timeline(&self) -> Vec<(String, std::time::Instant)> {
        let seen = self.seen.lock().expect("the seen lock");
        seen.requests
            .iter()
            .zip(&seen.times)
            .map(|((body, _), at)| (body.clone(), *at))
            .collect()
    }

    /// How many requests arrived so far.
    pub(crate) fn handled(&self) -> usize {
        self.seen.lock().expect("the seen lock").requests.len()
    }

    /// When each request arrived.
    pub(crate) fn arrivals(&self) -> Vec<std::time::Instant> {
        self.seen.lock().expect("the seen lock").times.clone()
    }

    /// Answers every request 503 for `outage` from now; returns when it ends.
    pub(crate) fn down_for(&self, outage: Duration) -> std::time::Instant {
        let until = std::time::Instant::now() + outage;
        self.seen.lock().expect("the seen lock").down_until = Some(until);
        until
    }

    /// The bodies answered after an outage (200 to "ok…" records), each once.
    pub(crate) fn served_after_outage(&self) -> std::collections::HashSet<String> {
        let seen = self.seen.lock().expect("the seen lock");
        let until = seen.down_until.unwrap_or(std::time::Instant::now());
        seen.requests
            .iter()
            .zip(&seen.times)
            .filter(|(_, at)| **at >= until)
            .map(|((body, _), _)| body.clone())
            .collect()
    }

    /// How many requests arrived during the outage.
    pub(crate) fn during_outage(&self) -> usize {
        let seen = self.seen.lock().expect("the seen lock");
        let until = seen.down_until.unwrap_or(std::time::Instant::now());
        seen.times.iter().filter(|at| **at < until).count()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}
