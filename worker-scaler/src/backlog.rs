//! A target's backlog, read from the cluster: what a read gives, and how it fails.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use worker_kafka::{Admin, ErrorKind};

use crate::metadata::Target;

/// How long a group once found is not looked up again.
const KNOWN_FOR: Duration = Duration::from_secs(60);
/// The most groups remembered as found.
const MAX_KNOWN: usize = 1_000;

/// A backlog, and whether it is the last value read rather than a fresh one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reading {
    /// The records waiting: lag of every topic of the query, summed.
    pub(crate) records: i64,
    /// How old the value is, when the cluster did not answer in time (`None`: fresh).
    pub(crate) stale_for: Option<Duration>,
}

/// Why a backlog could not be given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The group does not exist (remembered a while, so asking again costs no lookup).
    NoGroup(String),
    /// A topic does not exist.
    NotFound(String),
    /// The scaler may not read it.
    Denied(String),
    /// The cluster did not answer in time and no value was read before.
    Unavailable(String),
    /// The scaler reads as many targets as it may, each followed by a stream.
    Exhausted(String),
}

/// Where backlogs are read: the cluster ([`Admin`]), or a test's stand-in.
#[async_trait::async_trait]
pub(crate) trait Source: Send + Sync + 'static {
    /// The records `target` has waiting, read now.
    async fn backlog(&self, target: &Target) -> Result<i64, Failure>;
}

/// The cluster, read through one admin client; groups found are remembered for a minute.
pub(crate) struct Cluster {
    admin: Admin,
    known_groups: Mutex<HashMap<String, Instant>>,
}

impl Cluster {
    pub(crate) fn new(admin: Admin) -> Self {
        Self {
            admin,
            known_groups: Mutex::new(HashMap::new()),
        }
    }
    async fn read(&self, target: &Target) -> Result<i64, Failure> {
        self.check_group(&target.group).await?;
        let topics: Vec<&str> = target.topics.iter().map(String::as_str).collect();
        let offsets = self
            .admin
            .share_group_backlog(&target.group, &topics)
            .await
            .map_err(|err| failure(&err))?;
        Ok(offsets.iter().map(|p| p.lag.max(0)).sum())
    }

    /// A group is known once a member joined it or it has group configs of its own (what
    /// `share-worker setup` writes): so a group with a backlog and no worker yet scales from
    /// zero, while a misspelt group is an error.
    async fn check_group(&self, group: &str) -> Result<(), Failure> {
        let fresh = {
            let known = self.known_groups.lock().unwrap_or_else(|e| e.into_inner());
            known.get(group).is_some_and(|at| at.elapsed() < KNOWN_FOR)
        };
        if fresh {
            return Ok(());
        }
        if !self
            .admin
            .share_group_known(group)
            .await
            .map_err(|err| failure(&err))?
        {
            return Err(Failure::NoGroup(format!(
                "share group {group} not found: no member has joined it and it has no group configs (run `share-worker setup`)"
            )));
        }
        let mut known = self.known_groups.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= MAX_KNOWN {
            known.retain(|_, at| at.elapsed() < KNOWN_FOR);
        }
        if known.len() < MAX_KNOWN {
            known.insert(group.to_owned(), Instant::now());
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Source for Cluster {
    async fn backlog(&self, target: &Target) -> Result<i64, Failure> {
        self.read(target).await
    }
}

/// What a client error means for the caller.
fn failure(err: &worker_kafka::Error) -> Failure {
    let message = err.to_string();
    match err.kind() {
        ErrorKind::Authorization | ErrorKind::Authentication => Failure::Denied(message),
        // How worker-kafka words a missing topic: absent from the metadata, or its error code.
        ErrorKind::Broker
            if message.contains("not found") || message.contains("UNKNOWN_TOPIC_OR_PARTITION") =>
        {
            Failure::NotFound(message)
        }
        _ => Failure::Unavailable(message),
    }
}
