//! The `[telemetry] listen` HTTP listener: `/healthz` (alive), `/readyz` (joined the group with
//! partitions assigned, and the dead-letter topics exist) and `/metrics` (Prometheus text).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use worker_core::ShutdownHandle;
use worker_core::kafka::KafkaSource;

use crate::{otel, topics};

/// What the endpoints report on.
#[derive(Debug)]
pub(crate) struct Telemetry {
    /// Where the metrics are read from.
    pub(crate) registry: prometheus::Registry,
    pub(crate) source: KafkaSource,
    pub(crate) bootstrap: String,
    pub(crate) dlq_topics: Vec<String>,
    pub(crate) shutdown: ShutdownHandle,
}

/// Serves `listener` until the task is aborted.
pub(crate) async fn serve(listener: TcpListener, telemetry: Arc<Telemetry>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(answer(stream, telemetry.clone()));
            }
            Err(err) => {
                tracing::warn!(error = %err, "telemetry listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(mut stream: TcpStream, telemetry: Arc<Telemetry>) {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => head.extend_from_slice(&chunk[..n]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split_whitespace().nth(1).unwrap_or("/");
    let (status, body) = match path {
        "/healthz" => ("200 OK", "ok\n".to_owned()),
        "/readyz" => match telemetry.ready().await {
            Ok(()) => ("200 OK", "ready\n".to_owned()),
            Err(why) => ("503 Service Unavailable", format!("{why}\n")),
        },
        "/metrics" => ("200 OK", otel::prometheus_text(&telemetry.registry)),
        _ => ("404 Not Found", "not found\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

impl Telemetry {
    async fn ready(&self) -> Result<(), String> {
        if self.shutdown.is_shutdown() {
            return Err("shutting down".to_owned());
        }
        if self.source.assignment().is_empty() {
            return Err("no partitions assigned yet".to_owned());
        }
        if !self.dlq_topics.is_empty() {
            let existing = topics::existing(&self.bootstrap)
                .await
                .map_err(|err| format!("dead-letter topics unreachable: {err:#}"))?;
            if let Some(missing) = self.dlq_topics.iter().find(|t| !existing.contains_key(*t)) {
                return Err(format!("dead-letter topic {missing} does not exist"));
            }
        }
        Ok(())
    }
}
