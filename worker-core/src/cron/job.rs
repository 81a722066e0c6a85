//! [`CronJob`]: what a periodic job enqueues, and when.

use bytes::Bytes;

use super::schedule::{CatchUp, Schedule};
use crate::{Error, ErrorKind, Result};

/// The longest schedule name: its job ids (`cron:{name}:{tick}`) stay within a job id's 64.
pub const MAX_NAME: usize = 32;

/// A periodic job: on each tick of its schedule the fleet enqueues one record on `topic` (its
/// payload, key and headers), with the job id `cron:{name}:{tick}` (`share.job-id`, the tick in
/// milliseconds since the epoch). Made by [`CronJob::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct CronJob {
    pub(crate) name: String,
    pub(crate) schedule: Schedule,
    pub(crate) topic: String,
    pub(crate) payload: Option<Bytes>,
    pub(crate) key: Option<Bytes>,
    pub(crate) headers: Vec<(String, Bytes)>,
    pub(crate) catch_up: CatchUp,
}

impl CronJob {
    /// The job `name` (1 to 32 of `a-z A-Z 0-9 . _ -`: it names the schedule's firings) that
    /// enqueues on `topic` on each tick of `schedule`, without a payload.
    pub fn new(name: impl Into<String>, schedule: Schedule, topic: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            schedule,
            topic: topic.into(),
            payload: None,
            key: None,
            headers: Vec::new(),
            catch_up: CatchUp::default(),
        }
    }

    /// The record's payload.
    pub fn payload(mut self, payload: impl Into<Bytes>) -> Self {
        self.payload = Some(payload.into());
        self
    }

    /// The record's key.
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Adds a header (repeatable).
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push((key.into(), value.into()));
        self
    }

    /// What to do with ticks missed while no worker ran (default [`CatchUp::Once`]).
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The job's schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The topic its records go to.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The job id of its firing at `tick`.
    pub fn job_id(&self, tick: i64) -> String {
        format!("cron:{}:{tick}", self.name)
    }

    /// What is wrong with the job, naming it.
    pub fn check(&self) -> Result<()> {
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if self.name.is_empty() || self.name.len() > MAX_NAME || !self.name.chars().all(legal) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "cron job {:?}: `name`: expected 1 to {MAX_NAME} of a-z A-Z 0-9 . _ -",
                    self.name
                ),
            ));
        }
        crate::checks::topic_name(&self.topic).map_err(|why| {
            Error::new(
                ErrorKind::Config,
                format!("cron job {:?}: `topic`: {why}", self.name),
            )
        })?;
        Ok(())
    }
}
