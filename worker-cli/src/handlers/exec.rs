//! `handler = "exec"`: one process per record, the payload on its stdin.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::pin::pin;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use crate::config::RouteSection;
use anyhow::Context;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use worker_core::{Job, Outcome};

use super::{last_chars, one_line};

/// How much of the command's stderr is kept: the end, where the error usually is.
const STDERR_TAIL_BYTES: usize = 4096;
/// How much of that tail a reason quotes.
const REASON_TAIL_CHARS: usize = 200;
/// How long stdin and stderr are still served after the command exited (a process that left
/// its process group may hold them open).
const DRAIN: Duration = Duration::from_millis(500);
/// The largest key value passed in the environment: one variable may hold at most 128 KiB
/// (MAX_ARG_STRLEN), and a failed start would dead-letter a valid record.
const MAX_KEY_ENV_BYTES: usize = 32 * 1024;

/// Runs `command` per record: exit 0 accepts, a code in `reject_codes` rejects, anything else
/// (another code, a signal, the timeout, a failure to start) retries.
///
/// The command runs in its own process group with only the `env-pass` variables and the
/// record's; when it exits, times out, its job is cancelled or its call dropped, the whole group
/// is killed.
#[derive(Debug)]
pub(crate) struct Exec {
    program: String,
    args: Vec<String>,
    reject_codes: Vec<i32>,
    timeout: Duration,
    /// The `env-pass` variables, read once from the worker's environment.
    env: Vec<(String, OsString)>,
}

impl Exec {
    pub(crate) fn new(route: &RouteSection, timeout: Duration) -> anyhow::Result<Self> {
        let mut argv = route.command.clone().unwrap_or_default().into_iter();
        let program = argv
            .next()
            .with_context(|| format!("route {}: exec needs a command", route.topic))?;
        let env = route
            .env_pass()
            .into_iter()
            .filter_map(|name| {
                let value = std::env::var_os(&name)?;
                Some((name, value))
            })
            .collect();
        Ok(Self {
            program,
            args: argv.collect(),
            reject_codes: route.reject_exit_codes.clone().unwrap_or_default(),
            timeout,
            env,
        })
    }

    pub(crate) async fn handle(&self, job: &Job) -> Outcome {
        match self.run(job).await {
            Ok(outcome) => outcome,
            Err(err) => Outcome::retry(format!("{err:#}")),
        }
    }

    async fn run(&self, job: &Job) -> anyhow::Result<Outcome> {
        let deadline = tokio::time::sleep(self.timeout);
        let id = job.id();
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("SHARE_WORKER_TOPIC", &*id.topic)
            .env("SHARE_WORKER_PARTITION", id.partition.to_string())
            .env("SHARE_WORKER_OFFSET", id.offset.to_string())
            .env("SHARE_WORKER_DELIVERY_COUNT", job.attempt().to_string());
        if let Some((name, value)) = job.key().and_then(|key| key_env(key)) {
            command.env(name, value);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {:?}", self.program))?;
        let mut group = ProcessGroup::of(&child);
        let stdin = child.stdin.take();
        let stderr = child.stderr.take();
        let payload = job.payload().cloned().unwrap_or_default();
        let mut tail = Tail::new(STDERR_TAIL_BYTES);
        let waited = {
            let write = async move {
                if let Some(mut stdin) = stdin {
                    // A command that does not read its stdin is fine: ignore a broken pipe.
                    let _ = stdin.write_all(&payload).await;
                }
            };
            let mut io = pin!(async { tokio::join!(write, tail.read_to_end(stderr)) });
            let mut io_done = false;
            let waited = wait(&mut child, &mut io, &mut io_done, deadline, job).await;
            // On exit too: what the command left running would hold its pipes and outlive it.
            group.kill();
            if !io_done {
                let _ = tokio::time::timeout(DRAIN, &mut io).await;
            }
            waited
        };
        let tail = tail.reason_text();
        Ok(match waited {
            Waited::Exited(status) => {
                self.outcome(status.context("waiting for the command")?, &tail)
            }
            Waited::TimedOut => {
                Outcome::retry(with_tail(format!("killed after {:?}", self.timeout), &tail))
            }
            Waited::Cancelled => {
                Outcome::retry(with_tail("killed: the job was cancelled".into(), &tail))
            }
        })
    }

    fn outcome(&self, status: ExitStatus, tail: &str) -> Outcome {
        match (status.code(), status.signal()) {
            (Some(0), _) => Outcome::Accept,
            (Some(code), _) if self.reject_codes.contains(&code) => {
                Outcome::reject(with_tail(format!("exit code {code}"), tail))
            }
            (Some(code), _) => Outcome::retry(with_tail(format!("exit code {code}"), tail)),
            (None, Some(signal)) => {
                Outcome::retry(with_tail(format!("killed by signal {signal}"), tail))
            }
            (None, None) => Outcome::retry(with_tail("ended without an exit code".into(), tail)),
        }
    }
}

/// How waiting for the command ended.
#[derive(Debug)]
enum Waited {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    /// The job's cancellation fired (its lock is lost, or the job timed out).
    Cancelled,
}

/// Waits for `child` to exit, the deadline or the job's cancellation, serving its stdin and
/// stderr (`io`) meanwhile; `io_done` tells whether `io` completed.
async fn wait(
    child: &mut Child,
    io: &mut (impl Future<Output = ((), ())> + Unpin),
    io_done: &mut bool,
    deadline: tokio::time::Sleep,
    job: &Job,
) -> Waited {
    let mut deadline = pin!(deadline);
    loop {
        tokio::select! {
            status = child.wait() => return Waited::Exited(status),
            () = &mut deadline => return Waited::TimedOut,
            () = job.cancelled() => return Waited::Cancelled,
            _ = &mut *io, if !*io_done => *io_done = true,
        }
    }
}

/// `what: tail`, or `what` when the command wrote nothing to stderr.
fn with_tail(what: String, tail: &str) -> String {
    if tail.is_empty() {
        what
    } else {
        format!("{what}: {tail}")
    }
}

/// The environment variable carrying a record key: `SHARE_WORKER_KEY` when the key is UTF-8
/// without NUL, else `SHARE_WORKER_KEY_HEX` (lowercase hex). `None` when the key is too large for
/// the environment.
fn key_env(key: &[u8]) -> Option<(&'static str, String)> {
    match std::str::from_utf8(key) {
        Ok(text) if !text.contains('\0') => {
            (text.len() <= MAX_KEY_ENV_BYTES).then(|| ("SHARE_WORKER_KEY", text.to_owned()))
        }
        _ => (key.len() * 2 <= MAX_KEY_ENV_BYTES).then(|| ("SHARE_WORKER_KEY_HEX", hex(key))),
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The command's process group: SIGKILLed by [`ProcessGroup::kill`] or, if the call is dropped
/// first (a timeout, a cancellation, shutdown), on drop. `kill_on_drop` alone only reaches the
/// direct child, not what a shell started.
#[derive(Debug)]
struct ProcessGroup(Option<Pid>);

impl ProcessGroup {
    /// The group `child` leads (spawned with `process_group(0)`).
    fn of(child: &Child) -> Self {
        let pid = child.id().and_then(|id| i32::try_from(id).ok());
        // Never 0 or 1: killpg(0) is the worker's own group.
        Self(pid.filter(|&pid| pid > 1).map(Pid::from_raw))
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH: every member has exited already. The id cannot name another group while a
            // member lives; once none does, only a wrap-around of the pid space could reuse it.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `capacity` bytes of a stream; memory stays bounded however much is written.
#[derive(Debug)]
struct Tail {
    bytes: Vec<u8>,
    capacity: usize,
    /// Whether bytes before `bytes` were dropped.
    cut: bool,
}

impl Tail {
    fn new(capacity: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(capacity),
            capacity,
            cut: false,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        let start = chunk.len().saturating_sub(self.capacity);
        let chunk = chunk.get(start..).unwrap_or_default();
        // At most `bytes.len()`, since `chunk` is at most `capacity` long.
        let excess = (self.bytes.len() + chunk.len()).saturating_sub(self.capacity);
        self.cut |= start > 0 || excess > 0;
        self.bytes.drain(..excess.min(self.bytes.len()));
        self.bytes.extend_from_slice(chunk);
    }

    /// Reads `stream` to its end (or first error) into the tail.
    async fn read_to_end(&mut self, stream: Option<impl AsyncRead + Unpin>) {
        let Some(mut stream) = stream else { return };
        let mut chunk = vec![0; 8192];
        while let Ok(n) = stream.read(&mut chunk).await {
            match chunk.get(..n) {
                Some(read) if n > 0 => self.push(read),
                _ => break,
            }
        }
    }

    /// The last [`REASON_TAIL_CHARS`] characters, trimmed and on one line.
    fn reason_text(&self) -> String {
        let mut bytes = self.bytes.as_slice();
        if self.cut {
            // The cut may have split a character: skip its continuation bytes.
            while let Some((&b, rest)) = bytes.split_first()
                && b & 0xc0 == 0x80
            {
                bytes = rest;
            }
        }
        let text = String::from_utf8_lossy(bytes);
        one_line(last_chars(text.trim(), REASON_TAIL_CHARS))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Instant;

    use tokio_util::sync::CancellationToken;

    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes_only() {
        let mut tail = Tail::new(8);
        tail.push(b"abc");
        tail.push(b"def");
        assert_eq!((tail.bytes.as_slice(), tail.cut), (&b"abcdef"[..], false));
        tail.push(b"ghij");
        assert_eq!((tail.bytes.as_slice(), tail.cut), (&b"cdefghij"[..], true));
        tail.push(&[b'x'; 100]);
        assert_eq!(tail.bytes, [b'x'; 8]);
        let mut tail = Tail::new(4);
        tail.push(b"0123456789");
        assert_eq!((tail.bytes.as_slice(), tail.cut), (&b"6789"[..], true));
        tail.push(b"");
        assert_eq!(tail.bytes, b"6789");
    }

    #[test]
    fn the_reason_quotes_the_end_on_one_line() {
        // "é" is 2 bytes: a 5-byte tail of "aéééé" starts inside one.
        let mut tail = Tail::new(5);
        tail.push("aéééé".as_bytes());
        assert_eq!(tail.reason_text(), "éé");
        let mut tail = Tail::new(4096);
        tail.push(b"  first line\nsecond\x1b[0m line\n\n");
        assert_eq!(tail.reason_text(), "first line\\nsecond\\u{1b}[0m line");
        let mut tail = Tail::new(4096);
        tail.push("€".repeat(1000).as_bytes());
        assert_eq!(tail.reason_text(), "€".repeat(REASON_TAIL_CHARS));
        assert_eq!(Tail::new(16).reason_text(), "");
        assert_eq!(with_tail("exit code 3".into(), ""), "exit code 3");
        assert_eq!(with_tail("exit code 3".into(), "oops"), "exit code 3: oops");
    }

    #[test]
    fn keys_are_passed_as_text_or_hex() {
        assert_eq!(
            key_env(b"user-42"),
            Some(("SHARE_WORKER_KEY", "user-42".to_owned()))
        );
        assert_eq!(key_env(b""), Some(("SHARE_WORKER_KEY", String::new())));
        assert_eq!(
            key_env(b"a\0b"),
            Some(("SHARE_WORKER_KEY_HEX", "610062".to_owned()))
        );
        assert_eq!(
            key_env(b"\xff\x00\x10"),
            Some(("SHARE_WORKER_KEY_HEX", "ff0010".to_owned()))
        );
        assert_eq!(
            key_env(&[b'k'; MAX_KEY_ENV_BYTES]).map(|(n, v)| (n, v.len())),
            Some(("SHARE_WORKER_KEY", MAX_KEY_ENV_BYTES))
        );
        assert_eq!(key_env(&[b'k'; MAX_KEY_ENV_BYTES + 1]), None);
        assert_eq!(key_env(&[0; MAX_KEY_ENV_BYTES / 2 + 1]), None);
    }

    /// An exec route running `sh -c script`, with `extra` route keys.
    fn exec(script: &str, extra: &str) -> Exec {
        let route = super::super::test_route(&format!(
            "handler = \"exec\"\ncommand = [\"sh\", \"-c\", '''{script}''']\n{extra}"
        ));
        Exec::new(&route, Duration::from_secs(30)).unwrap()
    }

    fn job(key: Option<&'static [u8]>) -> Job {
        cancellable_job(key, CancellationToken::new())
    }

    fn cancellable_job(key: Option<&'static [u8]>, cancel: CancellationToken) -> Job {
        super::super::test_job("t", key, cancel)
    }

    /// Whether `pid` is a live (not zombie) process.
    fn alive(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(") ")
                .next()
                .is_some_and(|state| !state.starts_with('Z'))
        })
    }

    async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_flood_on_stderr_keeps_its_tail_only() {
        let exec = exec(
            r"head -c 20000000 /dev/zero | tr '\0' x >&2; echo >&2; echo last words >&2; exit 3",
            "",
        );
        match exec.handle(&job(None)).await {
            Outcome::Retry { reason, .. } => {
                assert!(reason.starts_with("exit code 3: xxx"), "{reason}");
                assert!(reason.ends_with("x\\nlast words"), "{reason}");
                assert!(reason.len() < 300, "{}", reason.len());
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn the_command_sees_the_allowed_variables_and_the_record_only() {
        let exec_ = exec(
            r#"[ "$(cat)" = payload ] || exit 11
               [ -z "${CARGO+set}" ] || exit 12
               [ -n "$PATH" ] || exit 13
               [ "$SHARE_WORKER_OFFSET" = 7 ] || exit 14
               [ "$SHARE_WORKER_KEY_HEX" = 00ff ] || exit 15
               [ -z "${SHARE_WORKER_KEY+set}" ] || exit 16"#,
            r#"env-pass = ["PATH", "NOT_SET_ANYWHERE"]"#,
        );
        assert_eq!(exec_.handle(&job(Some(b"\0\xff"))).await, Outcome::Accept);
        // Without a key, neither variable is set.
        let exec_ = exec(
            r#"[ -z "${SHARE_WORKER_KEY+set}${SHARE_WORKER_KEY_HEX+set}" ] || exit 17"#,
            "",
        );
        assert_eq!(exec_.handle(&job(None)).await, Outcome::Accept);
    }

    /// Starts a command that starts two `sleep`s, in a task; the task and the three pids.
    async fn start_sleepers(
        cancel: CancellationToken,
    ) -> (tokio::task::JoinHandle<Outcome>, Vec<String>) {
        let dir = std::env::temp_dir().join(format!("exec-group-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let pids = dir.join("pids");
        let exec = exec(
            &format!(
                "sleep 300 & echo $! >> {p}; sleep 300 & echo $! >> {p}; echo $$ >> {p}; wait",
                p = pids.display()
            ),
            "",
        );
        let call = tokio::spawn(async move { exec.handle(&cancellable_job(None, cancel)).await });
        let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
        wait_for("the pids", || read(&pids).lines().count() == 3).await;
        let started: Vec<String> = read(&pids).lines().map(str::to_owned).collect();
        assert!(started.iter().all(|pid| alive(pid)), "{started:?}");
        let _ = std::fs::remove_dir_all(&dir);
        (call, started)
    }

    #[tokio::test]
    async fn a_dropped_call_kills_the_whole_process_group() {
        let (call, started) = start_sleepers(CancellationToken::new()).await;
        call.abort();
        wait_for("the group to die", || !started.iter().any(|pid| alive(pid))).await;
    }

    #[tokio::test]
    async fn a_cancelled_job_kills_the_whole_process_group() {
        let cancel = CancellationToken::new();
        let (call, started) = start_sleepers(cancel.clone()).await;
        cancel.cancel();
        let outcome = call.await.unwrap();
        assert_eq!(outcome, Outcome::retry("killed: the job was cancelled"));
        wait_for("the group to die", || !started.iter().any(|pid| alive(pid))).await;
    }
}
