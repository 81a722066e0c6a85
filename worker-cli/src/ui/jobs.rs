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
        let action = verb(job.request.action);
        tracing::info!(
            target: AUDIT,
            job = job.id,
            action,
            dlq = ?job.request.dlq,
            selection = ?job.what,
            client = ?job.who,
            "dashboard action started"
        );
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
                    tracing::info!(
                        target: AUDIT,
                        job = job.id,
                        action,
                        dlq = ?job.request.dlq,
                        selection = ?job.what,
                        client = ?job.who,
                        result = ?summary,
                        "dashboard action done"
                    );
                    // The summary line is the last note; the page shows it apart.
                    job.notes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .retain(|n| *n != summary);
                    job.set(State::Done { tally, summary });
                }
                Err(err) => {
                    let why = format!("{err:#}");
                    tracing::warn!(
                        target: AUDIT,
                        job = job.id,
                        action,
                        dlq = ?job.request.dlq,
                        selection = ?job.what,
                        client = ?job.who,
                        error = ?why,
                        "dashboard action failed"
                    );
                    job.set(State::Failed(why));
                }
            }
        });
        Ok(job)
    }
}
