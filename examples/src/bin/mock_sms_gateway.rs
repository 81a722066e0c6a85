//! A mock SMS gateway for the quickstart: answers POSTs after some latency, with random 429s
//! (`Retry-After: 1`) and 503s.
//!
//! `mock_sms_gateway [ADDR] [LATENCY_MS] [FAILURE_PERCENT]` (defaults `127.0.0.1:8080`, 20, 5).
//! It prints how many requests it answered, by status, when it gets ctrl-c or SIGTERM.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Default)]
struct Counts {
    ok: AtomicU64,
    throttled: AtomicU64,
    unavailable: AtomicU64,
    seed: AtomicU64,
}

impl Counts {
    /// A number in 0..100 (xorshift; good enough for a demo).
    fn roll(&self) -> u64 {
        let mut x = self
            .seed
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % 100
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let latency = Duration::from_millis(args.next().and_then(|a| a.parse().ok()).unwrap_or(20));
    let failures: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let listener = TcpListener::bind(&addr).await?;
    let counts = Arc::new(Counts::default());
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    counts.seed.store(seed | 1, Ordering::Relaxed);
    eprintln!("mock SMS gateway on http://{addr}/send: {latency:?} latency, {failures}% failures");
    let serving = async {
        loop {
            let (stream, _) = listener.accept().await?;
            tokio::spawn(connection(stream, counts.clone(), latency, failures));
        }
        #[allow(unreachable_code)]
        Ok::<(), std::io::Error>(())
    };
    tokio::select! {
        result = serving => result?,
        _ = stop() => {}
    }
    eprintln!(
        "mock SMS gateway: 200 x {}, 429 x {}, 503 x {}",
        counts.ok.load(Ordering::Relaxed),
        counts.throttled.load(Ordering::Relaxed),
        counts.unavailable.load(Ordering::Relaxed)
    );
    Ok(())
}

async fn stop() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Serves one keep-alive connection.
async fn connection(mut stream: TcpStream, counts: Arc<Counts>, latency: Duration, failures: u64) {
    let mut buffer = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buffer.len() < head_end + length {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        buffer.drain(..head_end + length);
        tokio::time::sleep(latency).await;
        let roll = counts.roll();
        let status = if roll < failures / 2 {
            counts.unavailable.fetch_add(1, Ordering::Relaxed);
            "503 Service Unavailable"
        } else if roll < failures {
            counts.throttled.fetch_add(1, Ordering::Relaxed);
            "429 Too Many Requests\r\nRetry-After: 1"
        } else {
            counts.ok.fetch_add(1, Ordering::Relaxed);
            "200 OK"
        };
        let response = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}
