//! Fleet-wide controls: commands that every worker of a share group obeys, read from a compacted
//! control topic of the group (`{group}.control` by default).
//!
//! Each worker reads the topic from its start and then follows it, without joining any group, so
//! every worker of the fleet — and every worker that starts later — sees the same commands in the
//! same order; compaction keeps the last command of each key, so the topic stays as small as the
//! controls in force. The main command is the **pause** of a route: no worker of the group fetches
//! the route's topic (nor its delay topic) until a resume, or until the pause's `until` passes.
//! Records already acquired when the pause arrives finish as usual: a pause never RELEASEs a
//! record (a release spends a delivery).
//!
//! Anyone who can write the topic can pause the fleet: who may is the cluster's ACLs (`Write` on
//! the topic for operators, `Read` for the workers). Every command is checked before it is
//! obeyed: a key and value of the documented shape, at most 4 KiB, text fields of at most 256
//! characters, and at most 10,000 routes paused at once; anything else is logged, counted and
//! ignored, and never stops a worker.
//!
//! - [`ControlTopic`] (feature `rdkafka`) reads, follows and writes the topic.
//! - [`Controls`] is a worker's view of it, for
//!   [`WorkerBuilder::controls`](crate::WorkerBuilder::controls); [`Controls::manual`] makes one
//!   driven by hand, for tests or an application with a channel of its own.

pub(crate) mod command;
mod state;
#[cfg(feature = "rdkafka")]
mod topic;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

pub(crate) use command::Tally;
pub use command::{Cancel, Pause, Probe};

/// The header that names a record's job, for cancellations: set by `JobProducer` (a fresh id
/// unless the enqueue names one) and read from any producer's records when it is a valid job id
/// ([`checks::job_id`](crate::checks::job_id)).
pub const JOB_ID: &str = "share.job-id";
pub use state::ControlState;
#[cfg(feature = "rdkafka")]
pub use topic::{ControlTopic, FleetPresence};

/// A worker's view of its group's controls: the state in force, updated as commands arrive.
/// Cheap to clone; clones see the same state.
#[derive(Clone, Debug)]
pub struct Controls {
    state: watch::Receiver<Arc<ControlState>>,
    reading: Arc<Reading>,
    /// Applies what this worker itself commands at once, before it is read back.
    local: ControlSender,
    /// Writes what this worker commands (a circuit breaker) where the commands come from; `None`
    /// for manual controls, where applying them is all there is.
    writer: Option<Writer>,
}

/// The future of one command's write.
pub(crate) type Written = std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// Writes one record (key, value; `None`: a tombstone) to the control topic.
#[derive(Clone)]
pub(crate) struct Writer(pub(crate) Arc<dyn Fn(String, Option<Vec<u8>>) -> Written + Send + Sync>);

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Writer")
    }
}

/// How reading the commands goes.
#[derive(Debug, Default)]
struct Reading {
    /// Why the last read failed, while reads keep failing.
    failure: Mutex<Option<String>>,
    obeyed: AtomicU64,
    refused: AtomicU64,
}

impl Reading {
    fn commands(&self) -> (u64, u64) {
        (
            self.obeyed.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }
}

impl Controls {
    /// Controls that change only through the returned [`ControlSender`]: for tests, for a reader
    /// of the control topic of your own ([`ControlSender::apply_record`]), or for an application
    /// that carries commands on a channel of its own.
    pub fn manual() -> (Self, ControlSender) {
        let (sender, controls) = channel(ControlState::default());
        (controls, sender)
    }

    /// The controls in force now.
    pub fn state(&self) -> Arc<ControlState> {
        self.state.borrow().clone()
    }

    /// Why reading the control topic fails, while it does (the worker keeps the last state read
    /// meanwhile).
    pub fn read_failure(&self) -> Option<String> {
        self.reading
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Commands obeyed and refused so far.
    pub fn commands(&self) -> (u64, u64) {
        self.reading.commands()
    }

    /// Counts commands like [`commands`](Self::commands) without keeping the controls alive: a
    /// metric's callback holds this, and the reader still stops when the worker is gone.
    pub(crate) fn command_counts(&self) -> impl Fn() -> (u64, u64) + Send + Sync + 'static {
        let reading = Arc::downgrade(&self.reading);
        move || reading.upgrade().map_or((0, 0), |r| r.commands())
    }

    /// Resolves at the next change of the state after this call (never, once nothing can change
    /// it any more): what wakes a worker's loop.
    pub(crate) fn next_change(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut state = self.state.clone();
        Box::pin(async move {
            if state.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }

    /// Commands `pause` for the whole fleet: applied here at once, and written to the control
    /// topic by the returned future (`None` for manual controls: applying it is all there is).
    pub(crate) fn publish_pause(&self, pause: Pause) -> Option<Written> {
        let record = command::encode_pause(&pause);
        self.local.apply_own(command::Command::Pause(pause));
        self.write(record)
    }

    /// Commands the resume of `topic` for the whole fleet; see
    /// [`publish_pause`](Self::publish_pause).
    pub(crate) fn publish_resume(&self, topic: &str, reason: &str, by: &str) -> Option<Written> {
        let record = command::encode_resume(topic, reason, by, std::time::SystemTime::now());
        self.local.apply_own(command::Command::Resume {
            topic: topic.to_owned(),
        });
        self.write(record)
    }

    /// Tells the fleet this worker's breaker `tally` of a route, written by the returned future
    /// (a worker skips its own tally when it sums the fleet's: nothing to apply here).
    pub(crate) fn publish_tally(&self, tally: &command::Tally) -> Option<Written> {
        self.write(command::encode_tally(tally))
    }

    fn write(&self, record: Result<(String, Vec<u8>), String>) -> Option<Written> {
        let writer = self.writer.clone()?;
        Some(match record {
            Ok((key, value)) => (writer.0)(key, Some(value)),
            Err(why) => Box::pin(async move { Err(why) }),
        })
    }

    /// The state, when it changed since the last call.
    pub(crate) fn changed(&mut self) -> Option<Arc<ControlState>> {
        match self.state.has_changed() {
            Ok(true) => Some(self.state.borrow_and_update().clone()),
            _ => None,
        }
    }
}

/// Changes the state of [`Controls`]: what reading the control topic does, or a test by hand.
#[derive(Clone, Debug)]
pub struct ControlSender {
    state: Arc<watch::Sender<Arc<ControlState>>>,
    reading: Arc<Reading>,
}

impl ControlSender {
    /// Pauses `pause.topic` (replacing an earlier pause of it).
    pub fn pause(&self, pause: Pause) {
        self.apply(command::Command::Pause(pause));
    }

    /// Resumes `topic`.
    pub fn resume(&self, topic: &str) {
        self.apply(command::Command::Resume {
            topic: topic.to_owned(),
        });
    }

    /// Cancels `cancel.job_id` until `cancel.until`.
    pub fn cancel(&self, cancel: Cancel) {
        self.apply(command::Command::Cancel(cancel));
    }

    /// Controls driven by this sender; a reader of your own feeds it with
    /// [`apply_record`](Self::apply_record).
    pub fn controls(&self) -> Controls {
        Controls {
            state: self.state.subscribe(),
            reading: self.reading.clone(),
            local: self.clone(),
            writer: None,
        }
    }

    /// Applies one record of the control topic (`key`, `value`; `at` says where it was read, as
    /// `topic@offset`, for the logs): the command it carries is obeyed, or refused — logged with
    /// why and counted — when it is not a valid command. Returns whether it was obeyed. What a
    /// reader of the topic of your own calls for each record, in order.
    pub fn apply_record(&self, key: Option<&[u8]>, value: Option<&[u8]>, at: &str) -> bool {
        match self.try_apply_record(key, value, at) {
            Ok(()) => true,
            Err(why) => {
                self.log_refusal(&why);
                false
            }
        }
    }

    /// Like [`apply_record`](Self::apply_record), but a refusal is only counted and returned,
    /// not logged: a replay of the whole topic says once how much junk it held.
    pub(crate) fn try_apply_record(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        at: &str,
    ) -> Result<(), String> {
        let command = command::decode(key, value)
            .map_err(|why| self.count_refusal(format!("{at}: {why}")))?;
        match &command {
            command::Command::Pause(pause) => tracing::info!(
                at,
                topic = %pause.topic,
                until = %pause.until_text(),
                reason = ?pause.reason,
                by = ?pause.by,
                "control: route paused"
            ),
            command::Command::Resume { topic } => {
                tracing::info!(at, topic = %topic, "control: route resumed")
            }
            command::Command::Cancel(cancel) => tracing::info!(
                at,
                job_id = %cancel.job_id,
                until = %humantime::format_rfc3339_seconds(cancel.until),
                reason = ?cancel.reason,
                by = ?cancel.by,
                "control: job cancelled"
            ),
            command::Command::Uncancel { job_id } => {
                tracing::info!(at, job_id = %job_id, "control: job cancellation withdrawn")
            }
            command::Command::Tally(tally) => tracing::debug!(
                at,
                topic = %tally.topic,
                worker = %tally.worker,
                calls = tally.calls,
                failed = tally.failed,
                "control: a worker's breaker tally"
            ),
            command::Command::Untally { .. } => {}
        }
        match self.change(command) {
            Ok(()) => {
                self.reading.obeyed.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(why) => Err(self.count_refusal(format!("{at}: {why}"))),
        }
    }

    /// Reading the control topic fails (`Some(why)`), or works again (`None`): shown by
    /// [`Controls::read_failure`] while it lasts.
    pub fn set_read_failure(&self, failure: Option<String>) {
        *self
            .reading
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = failure;
    }

    /// Applies a command this worker issued itself, before it is read back (not counted: it is
    /// counted when read).
    fn apply_own(&self, command: command::Command) {
        if let Err(why) = self.change(command) {
            tracing::warn!(why, "own control command not applied");
        }
    }

    /// Applies one command, counting it obeyed or refused.
    fn apply(&self, command: command::Command) -> bool {
        match self.change(command) {
            Ok(()) => {
                self.reading.obeyed.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(why) => {
                let why = self.count_refusal(why);
                self.log_refusal(&why);
                false
            }
        }
    }

    /// Changes the state by one command. The state is changed in place (copied only while a
    /// reader holds the previous one), so reading many commands stays linear.
    fn change(&self, command: command::Command) -> Result<(), String> {
        let mut outcome = Ok(());
        self.state.send_if_modified(|state| {
            outcome = Arc::make_mut(state).apply(command);
            outcome.is_ok()
        });
        outcome
    }

    /// Counts a command that is not obeyed; returns `why`.
    fn count_refusal(&self, why: String) -> String {
        self.reading.refused.fetch_add(1, Ordering::Relaxed);
        why
    }

    /// Logs a refusal already counted: the first, then at each power of two, so a topic filled
    /// with junk cannot flood the log; `why` is shown on one line, cut.
    pub(crate) fn log_refusal(&self, why: &str) {
        let n = self.reading.refused.load(Ordering::Relaxed);
        if n.is_power_of_two() {
            tracing::warn!(
                why = %crate::checks::one_line(why, 512),
                refused = n,
                "control command refused"
            );
        }
    }
}

/// The record (key, value) that pauses `pause.topic`, as [`ControlTopic`](crate::control) writes
/// it: for a writer of your own. `Err` says which field is out of bounds.
pub fn pause_record(pause: &Pause) -> Result<(String, Vec<u8>), String> {
    command::encode_pause(pause)
}

/// The record (key, value) that resumes `topic`; see [`pause_record`].
pub fn resume_record(
    topic: &str,
    reason: &str,
    by: &str,
    at: std::time::SystemTime,
) -> Result<(String, Vec<u8>), String> {
    command::encode_resume(topic, reason, by, at)
}

/// The record (key, value) that cancels `cancel.job_id`; see [`pause_record`].
pub fn cancel_record(cancel: &Cancel) -> Result<(String, Vec<u8>), String> {
    command::encode_cancel(cancel)
}

/// A sender and the controls it drives, starting from `state`.
fn channel(state: ControlState) -> (ControlSender, Controls) {
    let (tx, _) = watch::channel(Arc::new(state));
    let sender = ControlSender {
        state: Arc::new(tx),
        reading: Arc::new(Reading::default()),
    };
    let controls = sender.controls();
    (sender, controls)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    fn paused_now(state: &ControlState, topic: &str) -> bool {
        state.paused(topic, SystemTime::now()).is_some()
    }

    #[test]
    fn manual_controls_change_and_say_so_once() {
        let (mut controls, sender) = Controls::manual();
        assert!(controls.changed().is_none(), "nothing changed yet");
        sender.pause(Pause {
            topic: "sms".to_owned(),
            until: None,
            reason: "outage".to_owned(),
            by: "test".to_owned(),
            at: SystemTime::now(),
            probe: None,
        });
        let state = controls.changed().expect("the pause is a change");
        assert!(paused_now(&state, "sms"));
        assert!(controls.changed().is_none(), "seen once");
        sender.resume("sms");
        assert!(!paused_now(&controls.changed().expect("a change"), "sms"));
        assert_eq!(controls.commands(), (2, 0));
    }
}
