//! The listener's limits through the binary: a connection cap per client and in all that idle
//! connections cannot fill against a probe, a deadline for the request head, and a `/readyz`
//! answered from memory (no Kafka client per request).

use std::net::{IpAddr, SocketAddr};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::process::{Child, Command};

use super::get;
use crate::support::*;

/// The binary's limits (`telemetry/server.rs`).
const MAX_CONNECTIONS: usize = 64;
const MAX_PER_PEER: usize = 16;
const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// `/readyz` requests in flight at once in the readiness test.
const CONCURRENT: usize = 32;
/// Room for a loaded machine on top of a deadline.
const SLACK: Duration = Duration::from_secs(3);

/// A worker with a listener on a free port, over `text_cfg` with `[telemetry] listen` added;
/// setup ran with `setup_cfg` (the same file when `None`).
pub(super) struct Running {
    child: Child,
    pub(super) port: u16,
    _scratch: Scratch,
}

impl Running {
    async fn start(text_cfg: &str, setup_cfg: Option<&str>) -> Self {
        Self::start_with(text_cfg, setup_cfg, "").await
    }

    /// [`Running::start`] with `telemetry` lines added to `[telemetry]`.
    pub(super) async fn start_with(
        text_cfg: &str,
        setup_cfg: Option<&str>,
        telemetry: &str,
    ) -> Self {
        let scratch = Scratch::new();
        let port = reserve_port();
        let with_listener = |text: &str| {
            text.replace(
                "[worker]",
                &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\n{telemetry}\n\n[worker]"),
            )
        };
        let run_cfg = scratch.write("worker.toml", &with_listener(text_cfg));
        let setup_cfg = match setup_cfg {
            Some(text) => scratch.write("setup.toml", text),
            None => run_cfg.clone(),
        };
        let setup_cfg = setup_cfg.to_str().expect("utf-8 path");
        let out = share_worker(&["setup", "--config", setup_cfg, "--partitions", "1"], &[]).await;
        assert_ok(&out, "setup");
        let child = Command::new(BIN)
            .args(["run", "--config", run_cfg.to_str().expect("utf-8 path")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("starting share-worker run");
        Self {
            child,
            port,
            _scratch: scratch,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// A TCP connection to the listener, once it listens.
    async fn connect(&self) -> TcpStream {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", self.port)).await {
                return stream;
            }
            assert!(Instant::now() < deadline, "the listener never listened");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("the worker runs")
    }
}

/// Whether the server closed `stream` within `within` (reading what it sent until then).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut sink = Vec::new();
    tokio::time::timeout(within, stream.read_to_end(&mut sink))
        .await
        .is_ok()
}

/// The process's threads and open file descriptors.
fn threads_and_fds(pid: u32) -> (usize, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let threads = status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Threads line");
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc fd")
        .count();
    (threads, fds)
}

pub(super) fn route_config(prefix: &str) -> String {
    config(
        &unique(&format!("{prefix}-group")),
        &unique(prefix),
        "handler = \"noop\"",
    )
}

/// A connection to `port` from the loopback address 127.0.0.`from` (Linux answers all of 127/8
/// on loopback): another client, as the listener sees it.
async fn connect_from(from: u8, port: u16) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::from(([127, 0, 0, from], 0)))
        .expect("binding a loopback address");
    socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .expect("connecting")
}

/// GET `url` from 127.0.0.`from`: the status and body, within 1 s.
async fn get_from(from: u8, url: &str) -> (u16, String) {
    let client = reqwest::Client::builder()
        .local_address(IpAddr::from([127, 0, 0, from]))
        .build()
        .expect("an HTTP client");
    let asked = Instant::now();
    let response = tokio::time::timeout(Duration::from_secs(1), client.get(url).send())
        .await
        .unwrap_or_else(|_| panic!("no answer from 127.0.0.{from} within 1 s"))
        .expect("an answer");
    let status = response.status().as_u16();
    let body = response.text().await.expect("a body");
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    (status, body)
}

/// The cap's worth of idle connections from one client: only its newest share stays, the older
/// ones are closed as the newer come. Other clients then fill the listener with idle
/// connections too, and a probe from any client, that one included, is answered within 1 s;
/// the idle connections leave at the head deadline.
#[tokio::test]
async fn idle_connections_keep_no_probe_out_and_one_client_keeps_its_share_only() {
    let worker = Running::start(&route_config("cli-listener-cap"), None).await;
    let mut idle = vec![worker.connect().await];
    let opened = Instant::now();
    for _ in 1..MAX_CONNECTIONS {
        idle.push(worker.connect().await);
    }
    let (older, newest) = idle.split_at_mut(MAX_CONNECTIONS - MAX_PER_PEER);
    for (i, stream) in older.iter_mut().enumerate() {
        assert!(
            closed_within(stream, Duration::from_secs(1)).await,
            "idle connection {i} of one client was kept past its {MAX_PER_PEER}"
        );
    }
    for (i, stream) in newest.iter_mut().enumerate() {
        assert!(
            !closed_within(stream, Duration::from_millis(1)).await,
            "one of the newest idle connections ({i}) was closed early, after {:?}",
            opened.elapsed()
        );
    }
    // Three more clients fill the listener.
    for from in 2..=(MAX_CONNECTIONS / MAX_PER_PEER) as u8 {
        for _ in 0..MAX_PER_PEER {
            idle.push(connect_from(from, worker.port).await);
        }
    }
    for from in [9, 1] {
        let answer = get_from(from, &worker.url("/healthz")).await;
        assert_eq!(answer, (200, "ok\n".to_owned()), "from 127.0.0.{from}");
    }
    for (i, stream) in idle.iter_mut().enumerate() {
        let left = (opened + HEAD_DEADLINE + SLACK).saturating_duration_since(Instant::now());
        assert!(
            closed_within(stream, left).await,
            "idle connection {i} outlived the head deadline"
        );
    }
    assert!(
        opened.elapsed() >= HEAD_DEADLINE - Duration::from_millis(500),
        "closed before the deadline: {:?}",
        opened.elapsed()
    );
}

/// A head sent a byte a second is cut at the head deadline.
#[tokio::test]
async fn a_slowloris_head_is_dropped_at_the_deadline() {
    let worker = Running::start(&route_config("cli-listener-slow"), None).await;
    let mut slow = worker.connect().await;
    let opened = Instant::now();
    let head = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaa";
    let mut bytes = head.iter().cycle();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut buf = [0u8; 512];
    let closed = loop {
        tokio::select! {
            _ = tick.tick() => {
                let byte = bytes.next().copied().unwrap_or(b'a');
                if slow.write_all(&[byte]).await.is_err() {
                    break opened.elapsed();
                }
            }
            read = slow.read(&mut buf) => match read {
                Ok(0) | Err(_) => break opened.elapsed(),
                Ok(_) => {}
            },
        }
        assert!(
            opened.elapsed() < HEAD_DEADLINE + SLACK,
            "a slow head kept its connection for {:?}",
            opened.elapsed()
        );
    };
    assert!(
        closed >= HEAD_DEADLINE - Duration::from_millis(500),
        "closed before the deadline: {closed:?}"
    );
}

/// With a dead-letter topic that does not exist, `/readyz` says so, from memory: 200 rapid
/// requests ([`CONCURRENT`] at a time, from four client addresses) are answered quickly and the
/// worker grows no threads or sockets.
#[tokio::test]
async fn readyz_names_a_missing_dead_letter_topic_without_a_kafka_client_per_request() {
    let missing = unique("cli-listener-no-dlq");
    let with_dlq = route_config("cli-listener-ready");
    let without_dlq = with_dlq.replace("[dlq]\ntopic = \"{topic}.dlq\"\n", "");
    assert_ne!(with_dlq, without_dlq, "the config's [dlq] section moved");
    let run_cfg = with_dlq.replace("\"{topic}.dlq\"", &format!("\"{missing}\""));
    let worker = Running::start(&run_cfg, Some(&without_dlq)).await;

    let reason = format!("dead-letter topic {missing} does not exist\n");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = get(&worker.url("/readyz")).await;
        if answer
            .as_ref()
            .is_some_and(|(s, b)| *s == 503 && *b == reason)
        {
            break;
        }
        assert!(Instant::now() < deadline, "last /readyz: {answer:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let pid = worker.pid();
    let before = threads_and_fds(pid);
    let done = Arc::new(AtomicBool::new(false));
    let sampling = tokio::spawn({
        let done = done.clone();
        async move {
            let mut most = before;
            while !done.load(Ordering::Acquire) {
                let now = threads_and_fds(pid);
                most = (most.0.max(now.0), most.1.max(now.1));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            most
        }
    });
    // From four addresses: one client may hold only its share of the listener.
    let clients: Vec<reqwest::Client> = (1..=4)
        .map(|from| {
            reqwest::Client::builder()
                .local_address(IpAddr::from([127, 0, 0, from]))
                .build()
                .expect("an HTTP client")
        })
        .collect();
    let started = Instant::now();
    let answers: Vec<_> = futures::stream::iter(0..200)
        .map(|i| {
            let client = clients[i % clients.len()].clone();
            let url = worker.url("/readyz");
            async move {
                let response = client.get(url).send().await.ok()?;
                Some((response.status().as_u16(), response.text().await.ok()?))
            }
        })
        .buffer_unordered(CONCURRENT)
        .collect()
        .await;
    let took = started.elapsed();
    done.store(true, Ordering::Release);
    let most = sampling.await.expect("the sampler");
    for answer in &answers {
        assert_eq!(answer.as_ref(), Some(&(503, reason.clone())));
    }
    assert!(took < Duration::from_secs(5), "200 /readyz took {took:?}");
    assert!(
        most.0 <= before.0 + 2,
        "threads grew from {} to {}",
        before.0,
        most.0
    );
    assert!(
        most.1 <= before.1 + CONCURRENT + 8,
        "open files grew from {} to {} ({CONCURRENT} connections at a time)",
        before.1,
        most.1
    );
}
