//! Dashboard actions as background jobs: each one is a [`replay::execute`] run (the code of
//! `share-worker dlq replay`), one at a time per process, with an audit log line when it starts
//! and when it ends. A page polls the job until it is done.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::Config;

use crate::replay::{self, Action, Request, ScanPass, Tally};

/// Jobs kept for their pages.
const KEPT: usize = 32;
/// Lines of one job's notes kept (refusals), the summary aside.
const NOTES: usize = 50;
/// The log target of audit lines. Their fields are logged with `Debug`, quoted and escaped: a
/// topic, a reason or an error may hold a line break or a terminal escape, and must not forge a
/// line of its own.
pub(crate) const AUDIT: &str = "share_worker::audit";

/// How far a job is.
#[derive(Clone, Debug)]
pub(crate) enum State {
    Running {
        pass: &'static str,
        read: u64,
        total: u64,
    },
    Done {
        tally: Tally,
        summary: String,
    },
    Failed(String),
}

/// One action.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) id: u64,
    pub(crate) request: Request,
    /// What was asked for, for people: "2 letters", "reason handler_error since ...".
    pub(crate) what: String,
    pub(crate) who: String,
    pub(crate) state: Mutex<State>,
    pub(crate) notes: Mutex<Vec<String>>,
}

impl Job {
    pub(crate) fn state(&self) -> State {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn notes(&self) -> Vec<String> {
        self.notes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, state: State) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }
}

/// The jobs of this process.
#[derive(Debug, Default)]
pub(crate) struct Jobs {
    next: AtomicU64,
    kept: Mutex<VecDeque<Arc<Job>>>,
}

/// Why a job did not start.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Busy(pub(crate) u64);

pub(crate) fn verb(action: Action) -> &'static str {
    match action {
        Action::Replay => "replay",
        Action::DryRun => "dry-run",
        Action::Skip => "skip",
    }
}

impl Jobs {
    pub(crate) fn get(&self, id: u64) -> Option<Arc<Job>> {
        self.lock().iter().find(|j| j.id == id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Job>>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts `request` unless a job is running (then: its id).
    pub(crate) fn start(
        &self,
        config: Arc<Config>,
        request: Request,
        what: String,
        who: String,
    ) -> Result<Arc<Job>, Busy> {
        let job = {
            let mut kept = self.lock();
            if let Some(running) = kept
                .iter()
                .find(|j| matches!(j.state(), State::Running { .. }))
            {
                return Err(Busy(running.id));
            }
            let job = Arc::new(Job {
                id: self.next.fetch_add(1, Ordering::Relaxed) + 1,
                request,
                what,
                who,
                state: Mutex::new(State::Running {
                    pass: "opening",
                    read: 0,
                    total: 0,
                }),
                notes: Mutex::new(Vec::new()),
            });
            kept.push_back(job.clone());
            while kept.len() > KEPT {
                kept.pop_front();
            }
            job
        };
        audit(&job, Audit::Started);
        let running = job.clone();
        tokio::spawn(async move {
            let progress = {
                let job = running.clone();
                move |pass: ScanPass, read: u64, total: u64| {
                    let pass = match pass {
                        ScanPass::Markers => "reading markers",
                        ScanPass::Letters => "reading letters",
                    };
                    job.set(State::Running { pass, read, total });
                }
            };
            let notes = running.clone();
            let note = move |line: String| {
                let mut notes = notes.notes.lock().unwrap_or_else(PoisonError::into_inner);
                if notes.len() < NOTES {
                    notes.push(line);
                }
            };
            let result = replay::execute(&config, &running.request, progress, note).await;
            let job = &running;
            match result {
                Ok(tally) => {
                    let summary = tally.summary(job.request.action, &job.request.dlq);
                    audit(job, Audit::Done(&summary));
                    // The summary line is the last note; the page shows it apart.
                    job.notes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .retain(|n| *n != summary);
                    job.set(State::Done { tally, summary });
                }
                Err(err) => {
                    let why = format!("{err:#}");
                    audit(job, Audit::Failed(&why));
                    job.set(State::Failed(why));
                }
            }
        });
        Ok(job)
    }
}

/// What an audit line reports.
enum Audit<'a> {
    Started,
    Done(&'a str),
    Failed(&'a str),
}

/// One audit line about `job`. Every field a client or a letter chose (topic, selection, result,
/// error) is logged with `Debug`, quoted and escaped, so none can forge a line of its own.
fn audit(job: &Job, event: Audit<'_>) {
    let action = verb(job.request.action);
    let (dlq, selection, client) = (&job.request.dlq, &job.what, &job.who);
    match event {
        Audit::Started => tracing::info!(
            target: AUDIT, job = job.id, action, dlq = ?dlq, selection = ?selection,
            client = ?client, "dashboard action started"
        ),
        Audit::Done(result) => tracing::info!(
            target: AUDIT, job = job.id, action, dlq = ?dlq, selection = ?selection,
            client = ?client, result = ?result, "dashboard action done"
        ),
        Audit::Failed(error) => tracing::warn!(
            target: AUDIT, job = job.id, action, dlq = ?dlq, selection = ?selection,
            client = ?client, error = ?error, "dashboard action failed"
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer that keeps what the subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A selection, topic and error with line breaks and a terminal escape: each audit line
    /// stays one line, with the text escaped.
    #[test]
    fn audit_lines_escape_what_clients_and_letters_chose() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let job = Job {
            id: 7,
            request: Request {
                dlq: "sms.dlq\nforged topic".to_owned(),
                reason: None,
                to: None,
                limit: None,
                letters: None,
                since_ms: None,
                until_ms: None,
                action: Action::Skip,
            },
            what: "reason x\nINFO forged: dashboard action done\u{1b}[2J".to_owned(),
            who: "127.0.0.1:1".to_owned(),
            state: Mutex::new(State::Failed(String::new())),
            notes: Mutex::new(Vec::new()),
        };
        tracing::subscriber::with_default(subscriber, || {
            audit(&job, Audit::Started);
            audit(&job, Audit::Done("skipped 0\nforged"));
            audit(&job, Audit::Failed("failed\r\nforged"));
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        for line in &lines {
            assert!(
                line.contains("selection=\"reason x\\nINFO forged"),
                "{line}"
            );
            assert!(line.contains("\\u{1b}[2J"), "{line}");
            assert!(!line.contains('\u{1b}'), "{line}");
        }
        assert!(
            lines[1].contains("result=\"skipped 0\\nforged\""),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].contains("error=\"failed\\r\\nforged\""),
            "{}",
            lines[2]
        );
    }
}
