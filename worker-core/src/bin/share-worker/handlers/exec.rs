//! `handler = "exec"`: one process per record, the payload on its stdin.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use worker_core::config::RouteSection;
use worker_core::{Job, Outcome};

/// Runs `command` per record: exit 0 accepts, a code in `reject_codes` rejects, anything else
/// (another code, a signal, the timeout, a failure to start) retries.
#[derive(Debug)]
pub(crate) struct Exec {
    argv: Vec<String>,
    reject_codes: Vec<i32>,
    timeout: Duration,
}

impl Exec {
    pub(crate) fn new(route: &RouteSection, timeout: Duration) -> anyhow::Result<Self> {
        let argv = route.command.clone().unwrap_or_default();
        anyhow::ensure!(
            !argv.is_empty(),
            "route {}: exec needs a command",
            route.topic
        );
        Ok(Self {
            argv,
            reject_codes: route.reject_exit_codes.clone().unwrap_or_default(),
            timeout,
        })
    }

    pub(crate) async fn handle(&self, job: &Job) -> Outcome {
        match tokio::time::timeout(self.timeout, self.run(job)).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(err)) => Outcome::retry(format!("{err:#}")),
            // Dropping the run future drops the child, which kills it (kill_on_drop).
            Err(_) => Outcome::retry(format!("killed after {:?}", self.timeout)),
        }
    }

    async fn run(&self, job: &Job) -> anyhow::Result<Outcome> {
        let id = job.id();
        let key = job
            .key()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .unwrap_or_default();
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .env("SHARE_WORKER_TOPIC", &*id.topic)
            .env("SHARE_WORKER_PARTITION", id.partition.to_string())
            .env("SHARE_WORKER_OFFSET", id.offset.to_string())
            .env("SHARE_WORKER_DELIVERY_COUNT", job.attempt().to_string())
            .env("SHARE_WORKER_KEY", key)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {:?}", self.argv[0]))?;
        let stdin = child.stdin.take();
        let payload = job.payload().cloned().unwrap_or_default();
        let write = async move {
            if let Some(mut stdin) = stdin {
                // A command that does not read its stdin is fine: ignore a broken pipe.
                let _ = stdin.write_all(&payload).await;
            }
        };
        let (_, output) = tokio::join!(write, child.wait_with_output());
        let output = output.context("waiting for the command")?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stderr = stderr.trim();
        let mut start = stderr.len().saturating_sub(200);
        while !stderr.is_char_boundary(start) {
            start += 1;
        }
        let tail = &stderr[start..];
        Ok(match output.status.code() {
            Some(0) => Outcome::Accept,
            Some(code) if self.reject_codes.contains(&code) => {
                Outcome::reject(format!("exit code {code}: {tail}"))
            }
            Some(code) => Outcome::retry(format!("exit code {code}: {tail}")),
            None => Outcome::retry(format!("killed by a signal: {tail}")),
        })
    }
}
