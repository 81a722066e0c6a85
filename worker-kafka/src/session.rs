//! One share session with one broker, driven by a background task.
//!
//! The driver owns the broker connection and the session epoch. It runs fetches handed to it by the
//! source and flushes the acknowledgement and renewal queues (ShareAcknowledge v2) whenever no fetch
//! is waiting to carry them. Every queued acknowledgement is answered: ok, the broker's error, or
//! [`AckError::SessionLost`] when the session it belonged to is gone.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::ack_queue::{
    AckQueue, Listed, PendingAck, SessionShared, ack_error, ack_topics, answer_all,
    drop_duplicates, fail_all, to_topics,
};
use super::cluster::Cluster;
use super::codec::{self, FetchParams, SessionKey, ShareResponse};
use super::connection::Connection;
use super::error_codes as codes;
use super::fetch_response;
use super::records::{AcquiredRecord, InflateLimits};
use super::share_session::{FetchPlan, ShareSession};
use crate::AckError;
use crate::{Error, ErrorKind, Result};

/// A fetch for the driver to run.
#[derive(Debug)]
pub(crate) struct FetchJob {
    /// Every assigned partition this broker leads: the session's partition set.
    pub(crate) partitions: Vec<(Uuid, Vec<i32>)>,
    pub(crate) max_records: u32,
    pub(crate) max_wait: Duration,
    pub(crate) reply: oneshot::Sender<Result<FetchOutcome>>,
}

/// What one fetch acquired.
#[derive(Debug, Default)]
pub(crate) struct FetchOutcome {
    pub(crate) node: i32,
    pub(crate) generation: u32,
    pub(crate) sent_at: Option<Instant>,
    pub(crate) lock_timeout: Duration,
    pub(crate) records: Vec<(Uuid, i32, AcquiredRecord)>,
    /// A partition reported that its leader moved: refresh metadata.
    pub(crate) leader_moved: bool,
}

/// Settings of a session driver.
#[derive(Debug, Clone)]
pub(crate) struct SessionConfig {
    pub(crate) group: String,
    pub(crate) member_id: String,
    pub(crate) max_bytes: i32,
    /// The most one record batch may inflate to.
    pub(crate) inflate: InflateLimits,
    /// The most one fetch response may inflate in all (its first batch per partition excepted).
    pub(crate) inflate_budget: usize,
    /// How long a fetch may wait while records of the session are being handled.
    pub(crate) busy_max_wait: Duration,
}

/// The handle the source keeps per broker.
#[derive(Debug)]
pub(crate) struct SessionHandle {
    pub(crate) shared: Arc<SessionShared>,
    pub(crate) jobs: mpsc::Sender<FetchJob>,
    pub(crate) task: Option<tokio::task::JoinHandle<()>>,
}

/// Starts the driver for broker `node`. Cancelling `cancel` closes the session (epoch -1) after
/// flushing queued acknowledgements.
pub(crate) fn spawn(
    node: i32,
    cluster: Arc<Cluster>,
    config: SessionConfig,
    cancel: CancellationToken,
) -> SessionHandle {
    let shared = Arc::new(SessionShared {
        node,
        generation: AtomicU32::new(1),
        queue: Mutex::new(AckQueue::default()),
        wake: Notify::new(),
        disconnect: std::sync::atomic::AtomicBool::new(false),
    });
    let (tx, rx) = mpsc::channel(4);
    let driver = Driver {
        shared: shared.clone(),
        cluster,
        config,
        conn: None,
        session: ShareSession::default(),
        jobs: rx,
        cancel,
        backoff: Duration::from_millis(50),
        lock_timeout: Duration::from_secs(30),
    };
    SessionHandle {
        shared,
        jobs: tx,
        task: Some(tokio::spawn(driver.run())),
    }
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[derive(Debug)]
struct Driver {
    shared: Arc<SessionShared>,
    cluster: Arc<Cluster>,
    config: SessionConfig,
    conn: Option<Connection>,
    session: ShareSession,
    jobs: mpsc::Receiver<FetchJob>,
    cancel: CancellationToken,
    backoff: Duration,
    /// The acquisition lock duration the broker last reported (30 s, its default, until then).
    lock_timeout: Duration,
}

/// How long queued acknowledgements wait for a fetch to ride on before they are sent alone. The
/// runtime fetches for a finished record's successor right after acknowledging it: one request
/// then carries both, where sending the acknowledgements first would cost a round trip (a broker
/// answers one request per connection at a time).
const ACK_LINGER: Duration = Duration::from_millis(2);

impl Driver {
    async fn run(mut self) {
        let mut next: Option<FetchJob> = None;
        loop {
            let reauth = self.conn.as_ref().and_then(Connection::reauth_due);
            let job = match next.take() {
                Some(job) => Some(job),
                None => tokio::select! {
                    biased;
                    _ = self.cancel.cancelled() => break,
                    job = self.jobs.recv() => match job {
                        Some(job) => Some(job),
                        None => break,
                    },
                    _ = self.shared.wake.notified() => None,
                    // An idle session authenticates again before the broker's limit, so it is
                    // never dropped for it (KIP-368).
                    _ = sleep_until_some(reauth) => {
                        self.reauthenticate().await;
                        None
                    }
                },
            };
            if self.shared.disconnect.swap(false, Ordering::AcqRel) && self.conn.is_some() {
                tracing::info!(
                    node = self.shared.node,
                    "dropping the connection on request"
                );
                self.reset(true);
            }
            if let Some(job) = job {
                let reply = job.reply;
                let result = self
                    .fetch(job.partitions, job.max_records, job.max_wait)
                    .await;
                let _ = reply.send(result);
            }
            self.send_acks(true).await;
            if self.shared.has_pending() && self.jobs.is_empty() {
                next = tokio::select! {
                    biased;
                    _ = self.cancel.cancelled() => break,
                    job = tokio::time::timeout(ACK_LINGER, self.jobs.recv()) => match job {
                        Ok(Some(job)) => Some(job),
                        Ok(None) => break,
                        Err(_) => None,
                    },
                };
            }
            if next.is_none() && self.jobs.is_empty() {
                self.send_acks(false).await;
            }
        }
        self.close().await;
    }

    /// Authenticates the connection again if its session is close to running out; a failure
    /// loses the connection (and with it the share session).
    async fn reauthenticate(&mut self) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if let Err(err) = conn.reauthenticate_if_due().await {
            tracing::warn!(node = self.shared.node, error = %err, "re-authentication failed: the share session is lost");
            self.reset(true);
        }
    }

    /// Drops the session: a new one opens at epoch 0 with a new generation; everything queued for
    /// the old one fails with `SessionLost`.
    fn reset(&mut self, drop_connection: bool) {
        if drop_connection {
            self.conn = None;
        }
        self.session.reset();
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        let generation = self.shared.generation();
        let mut stale = Vec::new();
        if let Ok(mut guard) = self.shared.queue.lock() {
            let q = &mut *guard;
            q.out = Default::default();
            for list in [&mut q.acks, &mut q.renews] {
                let (old, keep): (Vec<_>, Vec<_>) =
                    list.drain(..).partition(|a| a.generation != generation);
                *list = keep;
                stale.extend(old);
            }
        }
        fail_all(stale, &AckError::SessionLost);
    }

    /// Takes what is queued for the current session; the rest fails (`SessionLost`), as does an
    /// offset queued twice (`Duplicate`, all but the first).
    fn take(&self, renew: bool) -> Vec<PendingAck> {
        let generation = self.shared.generation();
        let taken = match self.shared.queue.lock() {
            Ok(mut q) => q.take(renew),
            Err(_) => Vec::new(),
        };
        let (ok, stale): (Vec<_>, Vec<_>) =
            taken.into_iter().partition(|a| a.generation == generation);
        fail_all(stale, &AckError::SessionLost);
        drop_duplicates(ok)
    }

    async fn ensure_connected(&mut self) -> Result<()> {
        if self.conn.as_ref().is_some_and(|c| !c.is_broken()) {
            return Ok(());
        }
        if self.conn.is_some() {
            self.reset(true);
        }
        let node = self.shared.node;
        let connected = async {
            let conn = self.cluster.connect_node(node).await?;
            conn.require_share_v2()?;
            Ok::<_, Error>(conn)
        }
        .await;
        match connected {
            Ok(conn) => {
                self.conn = Some(conn);
                self.session.reset();
                self.backoff = Duration::from_millis(50);
                Ok(())
            }
            Err(e) => {
                tokio::time::sleep(self.backoff).await;
                self.backoff = (self.backoff * 2).min(Duration::from_secs(2));
                Err(e)
            }
        }
    }

    async fn call(&mut self, api_key: i16, body: &[u8], wait: Duration) -> Result<bytes::Bytes> {
        let conn = self
            .conn
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::Io, "not connected"))?;
        conn.call(api_key, 2, body, wait).await
    }

    fn key(&self) -> SessionKey<'_> {
        SessionKey {
            group_id: &self.config.group,
            member_id: &self.config.member_id,
            epoch: self.session.epoch(),
        }
    }

    fn learn_endpoints<P>(&self, resp: &ShareResponse<P>) {
        for e in &resp.endpoints {
            self.cluster
                .learn_broker(e.node_id, format!("{}:{}", e.host, e.port));
        }
    }

    async fn fetch(
        &mut self,
        partitions: Vec<(Uuid, Vec<i32>)>,
        max_records: u32,
        max_wait: Duration,
    ) -> Result<FetchOutcome> {
        if let Err(e) = self.ensure_connected().await {
            self.reset(true);
            return Err(e);
        }
        let wanted: BTreeSet<(Uuid, i32)> = partitions
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
            .collect();
        let taken = if self.session.is_open() {
            self.take(false)
        } else {
            Vec::new()
        };
        let (mut taken, alone) = ShareSession::split_acks(&wanted, taken);
        if !alone.is_empty() {
            self.acknowledge(alone, false, self.session.epoch()).await;
            if !self.session.is_open() {
                // That request lost the session: what was to ride belonged to it.
                fail_all(std::mem::take(&mut taken), &AckError::SessionLost);
            }
        }
        let FetchPlan { listed, forgotten } = self.session.plan_fetch(&wanted, &taken);
        let listed_keys: BTreeSet<(Uuid, i32)> = listed.keys().copied().collect();
        tracing::trace!(
            node = self.shared.node,
            epoch = self.session.epoch(),
            ?wanted,
            ?listed_keys,
            ?forgotten,
            "share fetch"
        );
        let max_records = i32::try_from(max_records).unwrap_or(i32::MAX);
        // A broker handles one request per connection at a time: while acknowledgements ride on
        // this fetch or wait behind it, do not hold it open; while records of this session are
        // still being handled, hold it only briefly, since their acknowledgements would wait.
        let wait = if !taken.is_empty() || self.shared.has_pending() {
            Duration::ZERO
        } else if self.shared.busy(Instant::now()) {
            max_wait.min(self.config.busy_max_wait)
        } else {
            max_wait
        };
        let params = FetchParams {
            max_wait_ms: i32::try_from(wait.as_millis()).unwrap_or(i32::MAX),
            min_bytes: 1,
            max_bytes: self.config.max_bytes,
            max_records,
            batch_size: max_records,
            acquire_mode: codec::ACQUIRE_RECORD_LIMIT,
            is_renew: false,
        };
        let body = codec::encode_share_fetch(self.key(), params, &to_topics(listed), &forgotten)?;
        let sent_at = Instant::now();
        let generation = self.shared.generation();
        let resp = match self.call(codec::SHARE_FETCH, &body, wait).await {
            Ok(bytes) => codec::decode_share_fetch(bytes),
            Err(e) => Err(e),
        };
        let resp = match resp {
            Ok(resp) => resp,
            Err(e) => {
                fail_all(taken, &AckError::SessionLost);
                self.reset(true);
                return Err(e);
            }
        };
        self.learn_endpoints(&resp);
        if resp.error_code != 0 {
            let msg = resp.error_message.clone();
            if codes::ends_session(resp.error_code) {
                tracing::warn!(
                    node = self.shared.node,
                    code = resp.error_code,
                    "share session lost; reopening at epoch 0"
                );
                fail_all(taken, &AckError::SessionLost);
                self.reset(false);
                return Ok(FetchOutcome::default());
            }
            fail_all(taken, &ack_error(resp.error_code, msg.as_deref()));
            return Err(self.fetch_error(resp.error_code, None, msg.as_deref()));
        }
        self.session.fetched(&listed_keys, &forgotten);
        // Keep the last lock duration the broker named; a response without one must not make
        // records look unlocked.
        if let Ok(ms) = u64::try_from(resp.lock_timeout_ms)
            && ms > 0
        {
            self.lock_timeout = Duration::from_millis(ms);
        }
        let mut outcome = FetchOutcome {
            node: self.shared.node,
            generation,
            sent_at: Some(sent_at),
            lock_timeout: self.lock_timeout,
            ..FetchOutcome::default()
        };
        let handled = fetch_response::handle(
            resp.topics,
            fetch_response::Asked {
                wanted: &wanted,
                listed: &listed_keys,
                max_records: u32::try_from(max_records).unwrap_or(0),
            },
            self.config.inflate,
            self.config.inflate_budget,
            self.shared.node,
        );
        outcome.leader_moved = handled.leader_moved;
        outcome.records = handled.records;
        if let Ok(mut q) = self.shared.queue.lock() {
            q.out
                .delivered(outcome.records.len(), sent_at + self.lock_timeout);
        }
        let results = handled.ack_results;
        let settle = handled.settle;
        answer_all(taken, &results);
        let mut dropped = 0usize;
        for ((topic_id, partition), first, last, kind) in settle {
            let queued = self.shared.enqueue(
                PendingAck {
                    topic_id,
                    partition,
                    first,
                    last,
                    kind,
                    generation,
                    reply: None,
                },
                false,
            );
            dropped += usize::from(!queued);
        }
        if dropped > 0 {
            tracing::warn!(
                node = self.shared.node,
                ranges = dropped,
                "too many gaps and releases queued: leaving these to the broker's lock timeout"
            );
        }
        if let Some(fatal) = handled.fatal {
            // What this response acquired stays locked until the session closes, which
            // releases it.
            return Err(self.fetch_error(
                fatal.code,
                Some(fatal.partition),
                fatal.message.as_deref(),
            ));
        }
        Ok(outcome)
    }

    /// The error for a ShareFetch answered with `code` (for `partition`, when it is about one):
    /// fatal kinds for answers no retry can change, naming the group, the broker and its words.
    fn fetch_error(
        &self,
        code: i16,
        partition: Option<(Uuid, i32)>,
        message: Option<&str>,
    ) -> Error {
        let kind = codes::fatal_kind(code).unwrap_or(ErrorKind::Broker);
        let broker = self
            .cluster
            .broker_addr(self.shared.node)
            .unwrap_or_else(|| "?".to_owned());
        let about = partition
            .map(|(topic, p)| format!(" for partition {p} of topic {topic}"))
            .unwrap_or_default();
        Error::new(
            kind,
            format!(
                "ShareFetch of share group {} to broker {} ({broker}){about} failed with error {}{}",
                self.config.group,
                self.shared.node,
                codes::describe(code),
                message
                    .filter(|m| !m.is_empty())
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
        )
    }

    /// Sends the queued acknowledgements (or renewals) with ShareAcknowledge v2.
    async fn send_acks(&mut self, renew: bool) {
        let taken = self.take(renew);
        if taken.is_empty() {
            return;
        }
        if self.conn.is_none() || !self.session.is_open() {
            fail_all(taken, &AckError::SessionLost);
            return;
        }
        self.acknowledge(taken, renew, self.session.epoch()).await;
    }

    async fn acknowledge(&mut self, taken: Vec<PendingAck>, renew: bool, epoch: i32) {
        let mut listed = Listed::new();
        ack_topics(&taken, &mut listed);
        let key = SessionKey {
            epoch,
            ..self.key()
        };
        let body = match codec::encode_share_acknowledge(key, renew, &to_topics(listed)) {
            Ok(body) => body,
            Err(e) => {
                fail_all(
                    taken,
                    &AckError::Broker {
                        code: -1,
                        message: e.to_string(),
                    },
                );
                return;
            }
        };
        let resp = match self
            .call(codec::SHARE_ACKNOWLEDGE, &body, Duration::ZERO)
            .await
        {
            Ok(bytes) => codec::decode_share_acknowledge(bytes),
            Err(e) => Err(e),
        };
        let resp = match resp {
            Ok(resp) => resp,
            Err(e) => {
                tracing::warn!(node = self.shared.node, error = %e, "ShareAcknowledge failed; the session is lost");
                fail_all(taken, &AckError::SessionLost);
                self.reset(true);
                return;
            }
        };
        self.learn_endpoints(&resp);
        if resp.error_code != 0 {
            let err = ack_error(resp.error_code, resp.error_message.as_deref());
            fail_all(taken, &err);
            if codes::ends_session(resp.error_code) {
                self.reset(false);
            }
            return;
        }
        if epoch > 0 {
            self.session.acknowledged();
        }
        if renew && let Ok(mut q) = self.shared.queue.lock() {
            q.out.extend(Instant::now() + self.lock_timeout);
        }
        let results = resp
            .topics
            .into_iter()
            .flat_map(|(t, parts)| {
                parts
                    .into_iter()
                    .map(move |p| ((t, p.partition), (p.error_code, p.error_message)))
            })
            .collect();
        answer_all(taken, &results);
    }

    /// Flushes acknowledgements and closes the session (epoch -1), which releases everything still
    /// acquired. Renewals still queued fail with `Closed`.
    async fn close(&mut self) {
        let renews = self.take(true);
        fail_all(renews, &AckError::Closed);
        let acks = self.take(false);
        if self.conn.as_ref().is_some_and(|c| !c.is_broken()) && self.session.is_open() {
            self.acknowledge(acks, false, -1).await;
        } else {
            fail_all(acks, &AckError::SessionLost);
        }
        let leftovers = match self.shared.queue.lock() {
            Ok(mut q) => {
                q.closed = true;
                let mut all = q.take(false);
                all.append(&mut q.renews);
                all
            }
            Err(_) => Vec::new(),
        };
        fail_all(leftovers, &AckError::Closed);
        self.conn = None;
    }
}
