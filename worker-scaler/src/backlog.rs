//! The backlog of a query, read from the cluster within a bound: when the cluster is slow or
//! unreachable, the last value read is given instead (flagged stale), so KEDA's calls never hang
//! on the brokers; with no value yet, the call fails.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use worker_kafka::{Admin, ErrorKind};

use crate::metadata::Query;

/// The most queries whose last value is kept (one per scaled object, in practice).
const MAX_KEPT: usize = 1_000;
/// How long a value read is given again instead of reading anew: KEDA asks `IsActive` and
/// `GetMetrics` of one object back to back, and a stream reads every second.
const FRESH_FOR: Duration = Duration::from_millis(500);
/// How long a group once found is not looked up again.
const KNOWN_FOR: Duration = Duration::from_secs(60);

/// A backlog, and whether it is the last value read rather than a fresh one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reading {
    /// The records waiting: lag of every topic of the query, summed.
    pub(crate) records: i64,
    /// How old the value is, when the cluster did not answer in time (`None`: fresh).
    pub(crate) stale_for: Option<Duration>,
}

/// Why a backlog could not be given.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The group or a topic does not exist.
    NotFound(String),
    /// The scaler may not read it.
    Denied(String),
    /// The cluster did not answer in time and no value was read before.
    Unavailable(String),
}

/// Where backlogs are read: the cluster ([`Admin`]), or a test's stand-in.
#[async_trait::async_trait]
pub(crate) trait Source: Send + Sync + 'static {
    /// The records `query` has waiting, read now.
    async fn backlog(&self, query: &Query) -> Result<i64, Failure>;
}

/// Reads backlogs from a source, within a bound, keeping each query's last value.
pub(crate) struct Backlogs {
    source: Box<dyn Source>,
    /// How long a read may take before the last value is given.
    bound: Duration,
    last: Mutex<HashMap<Query, (i64, Instant)>>,
}

impl std::fmt::Debug for Backlogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backlogs")
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

impl Backlogs {
    pub(crate) fn new(source: impl Source, bound: Duration) -> Self {
        Self {
            source: Box::new(source),
            bound,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// The backlog of `query`: read now within the bound (or given again when read within the
    /// last [`FRESH_FOR`]), or else its last value.
    pub(crate) async fn read(&self, query: &Query) -> Result<Reading, Failure> {
        if let Some((records, at)) = self
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(query)
            && at.elapsed() < FRESH_FOR
        {
            return Ok(Reading {
                records: *records,
                stale_for: None,
            });
        }
        match tokio::time::timeout(self.bound, self.source.backlog(query)).await {
            Ok(Ok(records)) => {
                let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
                if last.len() >= MAX_KEPT && !last.contains_key(query) {
                    // Forget the oldest: a flood of distinct queries cannot grow this.
                    if let Some(oldest) = last
                        .iter()
                        .min_by_key(|(_, (_, at))| *at)
                        .map(|(q, _)| q.clone())
                    {
                        last.remove(&oldest);
                    }
                }
                last.insert(query.clone(), (records, Instant::now()));
                Ok(Reading {
                    records,
                    stale_for: None,
                })
            }
            Ok(Err(failure @ (Failure::NotFound(_) | Failure::Denied(_)))) => Err(failure),
            Ok(Err(Failure::Unavailable(why))) => self.last_value(query, &why),
            Err(_) => self.last_value(
                query,
                &format!("the cluster did not answer within {:?}", self.bound),
            ),
        }
    }

    /// The last value of `query`, flagged stale, because a read failed for `why`.
    fn last_value(&self, query: &Query, why: &str) -> Result<Reading, Failure> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match last.get(query) {
            Some((records, at)) => {
                tracing::warn!(group = %query.group, why, records, "giving the last backlog read");
                Ok(Reading {
                    records: *records,
                    stale_for: Some(at.elapsed()),
                })
            }
            None => Err(Failure::Unavailable(format!(
                "share group {}: {why}, and no backlog was read before",
                query.group
            ))),
        }
    }
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
    async fn read(&self, query: &Query) -> Result<i64, Failure> {
        self.check_group(&query.group).await?;
        let topics: Vec<&str> = query.topics.iter().map(String::as_str).collect();
        let offsets = self
            .admin
            .share_group_backlog(&query.group, &topics)
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
            return Err(Failure::NotFound(format!(
                "share group {group} not found: no member has joined it and it has no group configs (run `share-worker setup`)"
            )));
        }
        let mut known = self.known_groups.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= MAX_KEPT {
            known.retain(|_, at| at.elapsed() < KNOWN_FOR);
        }
        if known.len() < MAX_KEPT {
            known.insert(group.to_owned(), Instant::now());
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Source for Cluster {
    async fn backlog(&self, query: &Query) -> Result<i64, Failure> {
        self.read(query).await
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;

    /// A source that answers `records` after `delay` (-1: the group is not found).
    struct Slow {
        records: Arc<AtomicI64>,
        delay: Arc<Mutex<Duration>>,
    }

    #[async_trait::async_trait]
    impl Source for Slow {
        async fn backlog(&self, _query: &Query) -> Result<i64, Failure> {
            let delay = *self.delay.lock().unwrap();
            tokio::time::sleep(delay).await;
            match self.records.load(Ordering::SeqCst) {
                -1 => Err(Failure::NotFound("no such group".to_owned())),
                n => Ok(n),
            }
        }
    }

    fn query() -> Query {
        Query {
            group: "g".to_owned(),
            topics: vec!["t".to_owned()],
            lag_threshold: 10,
            activation: 0,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_cluster_gets_the_last_value_flagged_within_the_bound() {
        let records = Arc::new(AtomicI64::new(42));
        let delay = Arc::new(Mutex::new(Duration::from_millis(10)));
        let backlogs = Backlogs::new(
            Slow {
                records: records.clone(),
                delay: delay.clone(),
            },
            Duration::from_secs(3),
        );
        let fresh = backlogs.read(&query()).await.expect("read");
        assert_eq!(
            fresh,
            Reading {
                records: 42,
                stale_for: None
            }
        );
        // Read again at once: the same value, not asked again.
        records.store(8, Ordering::SeqCst);
        assert_eq!(backlogs.read(&query()).await.expect("read").records, 42);
        tokio::time::advance(FRESH_FOR).await;
        // The cluster hangs: the answer comes at the bound, with the last value.
        *delay.lock().unwrap() = Duration::from_secs(3600);
        records.store(7, Ordering::SeqCst);
        let started = tokio::time::Instant::now();
        let stale = backlogs.read(&query()).await.expect("the last value");
        assert_eq!(stale.records, 42);
        assert!(stale.stale_for.is_some());
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(3),
            "within the bound"
        );
        // Another query, never read: no value to give.
        let other = Query {
            group: "h".to_owned(),
            ..query()
        };
        assert!(matches!(
            backlogs.read(&other).await,
            Err(Failure::Unavailable(why)) if why.contains("no backlog was read before")
        ));
        // A group that is gone is said so, not hidden behind the last value.
        *delay.lock().unwrap() = Duration::ZERO;
        records.store(-1, Ordering::SeqCst);
        assert!(matches!(
            backlogs.read(&query()).await,
            Err(Failure::NotFound(_))
        ));
    }
}
