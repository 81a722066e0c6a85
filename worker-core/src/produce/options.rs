//! [`EnqueueOptions`]: a job's key, headers, time and topic.

use std::time::{Duration, SystemTime};

use bytes::Bytes;

/// How to enqueue one job, beyond its payload: made by [`EnqueueOptions::new`].
#[derive(Clone, Debug, Default)]
pub struct EnqueueOptions {
    pub(super) key: Option<Bytes>,
    pub(super) headers: Vec<(String, Bytes)>,
    pub(super) not_before: Option<NotBefore>,
    pub(super) topic: Option<String>,
    pub(super) job_id: Option<String>,
}

/// When a job may run.
#[derive(Clone, Copy, Debug)]
pub(super) enum NotBefore {
    In(Duration),
    At(SystemTime),
}

impl NotBefore {
    pub(super) fn resolve(self, now: SystemTime) -> SystemTime {
        match self {
            NotBefore::In(delay) => now.checked_add(delay).unwrap_or(now),
            NotBefore::At(at) => at,
        }
    }
}

impl EnqueueOptions {
    /// No key, no headers, to run at once, on the topic the call names.
    pub fn new() -> Self {
        Self::default()
    }

    /// The record key: records of one key go to one partition, and a route's `rate-per-key` and
    /// `key-concurrency` count by it (say, the phone number of an SMS).
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Adds a header (repeatable). A `traceparent` given here wins over the current span's.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push((key.into(), value.into()));
        self
    }

    /// Runs the job no earlier than `delay` from when it is sent (header `share.not-before`).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.not_before = Some(NotBefore::In(delay));
        self
    }

    /// Runs the job no earlier than `at` (header `share.not-before`).
    pub fn at(mut self, at: SystemTime) -> Self {
        self.not_before = Some(NotBefore::At(at));
        self
    }

    /// Names the job (header `share.job-id`, 1 to 64 of `a-z A-Z 0-9 . _ : -`), so it can be
    /// cancelled by a name you know (`appointment-42:reminder`); default: a fresh random id.
    pub fn job_id(mut self, id: impl Into<String>) -> Self {
        self.job_id = Some(id.into());
        self
    }

    /// Writes to `topic` instead: a job routed on another topic than its default one (a test's,
    /// a tenant's, or a [lane](crate::runtime::Route::priority)'s: picking the topic picks the
    /// lane).
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }
}
