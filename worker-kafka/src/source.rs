//! [`KafkaSource`]: a member of a share group that fetches, acknowledges and renews records.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::ack_queue::PendingAck;
use super::acks::{RENEW, wire_type};
use super::admin::Admin;
use super::cluster::Cluster;
use super::config::{KafkaConfig, OffsetReset};
use super::connection::ConnectOptions;
use super::fetches::Fetches;
use super::membership::{self, MemberSpec, MemberState};
use super::records::InflateLimits;
use super::session::{self, FetchJob, FetchOutcome, SessionConfig, SessionHandle};
use crate::security::Prepared;
use crate::{
    AckError, AckKind, AckReceipt, BrokerDeadLetters, Delivery, DeliveryId, Lease, Renewal,
};
use crate::{Error, ErrorKind, Result};

/// A share-group consumer speaking the share RPCs natively: pipelined `record_limit` fetches,
/// acknowledgements at any time and in any order, and RENEW.
///
/// Build one with [`KafkaSource::builder`]. Every method takes `&self` and clones share one
/// member: fetch in one task while others acknowledge and renew.
#[derive(Debug, Clone)]
pub struct KafkaSource {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Topics {
    by_id: HashMap<Uuid, (Arc<str>, HashMap<i32, i32>)>,
    by_name: HashMap<Arc<str>, Uuid>,
    refreshed: Option<Instant>,
}

/// What is not fetched from for now.
#[derive(Debug, Default)]
struct Paused {
    topics: HashSet<Arc<str>>,
    partitions: HashMap<Arc<str>, HashSet<i32>>,
}

impl Paused {
    fn is_empty(&self) -> bool {
        self.topics.is_empty() && self.partitions.is_empty()
    }

    /// Whether `topic`'s `partition` is paused, on its own or with its topic.
    fn has(&self, topic: &str, partition: i32) -> bool {
        self.topics.contains(topic)
            || self
                .partitions
                .get(topic)
                .is_some_and(|set| set.contains(&partition))
    }

    /// Pauses `topic`'s `partition`.
    fn pause_partition(&mut self, topic: &str, partition: i32) {
        match self.partitions.get_mut(topic) {
            Some(set) => {
                set.insert(partition);
            }
            None => {
                self.partitions
                    .insert(Arc::from(topic), HashSet::from([partition]));
            }
        }
    }

    /// Resumes `topic`'s `partition`; `true` if it was paused.
    fn resume_partition(&mut self, topic: &str, partition: i32) -> bool {
        let Some(set) = self.partitions.get_mut(topic) else {
            return false;
        };
        let was = set.remove(&partition);
        if set.is_empty() {
            self.partitions.remove(topic);
        }
        was
    }
}

#[derive(Debug)]
struct Inner {
    config: KafkaConfig,
    member_id: String,
    cluster: Arc<Cluster>,
    member: watch::Receiver<MemberState>,
    member_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    member_cancel: CancellationToken,
    session_cancel: CancellationToken,
    topics: Mutex<Topics>,
    sessions: Mutex<HashMap<i32, SessionHandle>>,
    /// The fetches in flight, one per broker; locking it makes fetch calls take turns.
    fetches: AsyncMutex<Fetches>,
    closed: AtomicBool,
    /// Topics and partitions not fetched from for now ([`KafkaSource::pause`],
    /// [`KafkaSource::pause_partition`]).
    paused: Mutex<Paused>,
    /// Wakes a fetch that waits because every assigned partition is paused.
    resumed: tokio::sync::Notify,
    /// Counts acknowledgements handed over: each frees the runtime a slot, which a fetch call
    /// still waiting may give to a broker it could not ask for lack of slots.
    freed: AtomicU64,
    /// Set while a fetch call waits for a freed slot: only then does an acknowledgement wake it,
    /// so the per-record path costs one atomic add otherwise.
    starving: AtomicBool,
    freed_wake: tokio::sync::Notify,
    /// How many brokers lead the assigned partitions, as of the last fetch (at least 1).
    leaders: AtomicUsize,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.session_cancel.cancel();
        self.member_cancel.cancel();
    }
}

/// A 22-character random member id, like the Java client's.
/// Sets the group's `share.auto.offset.reset` before the member joins.
async fn set_offset_reset(config: &KafkaConfig, reset: OffsetReset) -> Result<()> {
    let admin = Admin::connect_with(config.bootstrap.join(","), &config.security).await?;
    admin
        .set_group_config(&config.group, "share.auto.offset.reset", reset.as_str())
        .await
        .map_err(|e| {
            Error::new(
                e.kind(),
                format!(
                    "setting share.auto.offset.reset = {} on group {}: {}",
                    reset.as_str(),
                    config.group,
                    e.message()
                ),
            )
        })
}

fn new_member_id() -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(22);
    let id = Uuid::new_v4().as_u128();
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for i in 0..22 {
        let idx = ((id >> (i * 6)) & 0x3f) as usize;
        let c = ALPHABET.get(idx).copied().unwrap_or(b'A') as char;
        let _ = s.write_char(c);
    }
    s
}

impl KafkaSource {
    /// A builder for a source consuming `topics` as a member of share group `group`.
    pub fn builder(
        bootstrap: impl Into<String>,
        group: impl Into<String>,
    ) -> super::KafkaSourceBuilder {
        super::KafkaSourceBuilder::new(bootstrap, group)
    }

    /// Connects to the cluster, checks that it speaks the v2 share RPCs and joins the group.
    pub async fn connect(config: KafkaConfig) -> Result<Self> {
        config.validate()?;
        let cluster = Arc::new(Cluster::new(
            config.bootstrap.clone(),
            ConnectOptions {
                client_id: config.client_id.clone(),
                max_frame: config.max_frame_bytes,
                request_timeout: config.request_timeout,
                security: Prepared::new(&config.security)?,
            },
        ));
        let conn = cluster.connect_any().await?;
        conn.require_share_v2()?;
        drop(conn);
        if let Some(reset) = config.offset_reset {
            set_offset_reset(&config, reset).await?;
        }
        let member_id = new_member_id();
        let member_cancel = CancellationToken::new();
        let (member, task) = membership::spawn(
            MemberSpec {
                group: config.group.clone(),
                member_id: member_id.clone(),
                topics: config.topics.clone(),
            },
            cluster.clone(),
            member_cancel.clone(),
        );
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                member_id,
                cluster,
                member,
                member_task: Mutex::new(Some(task)),
                member_cancel,
                session_cancel: CancellationToken::new(),
                topics: Mutex::new(Topics::default()),
                sessions: Mutex::new(HashMap::new()),
                fetches: AsyncMutex::new(Fetches::default()),
                closed: AtomicBool::new(false),
                paused: Mutex::new(Paused::default()),
                resumed: tokio::sync::Notify::new(),
                freed: AtomicU64::new(0),
                starving: AtomicBool::new(false),
                leaders: AtomicUsize::new(1),
                freed_wake: tokio::sync::Notify::new(),
            }),
        })
    }

    /// The member id this client joined with.
    pub fn member_id(&self) -> &str {
        &self.inner.member_id
    }

    /// Drops every broker connection at once, as a network failure would: the share sessions are
    /// lost, their records go back to the group and queued acknowledgements fail. For tests of
    /// session loss (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub fn drop_connections(&self) {
        if let Ok(sessions) = self.inner.sessions.lock() {
            for handle in sessions.values() {
                handle.shared.disconnect();
            }
        }
    }

    /// The partitions currently assigned to this member, as (topic, partition) pairs.
    pub fn assignment(&self) -> Vec<(String, i32)> {
        let state = self.inner.member.borrow().clone();
        let topics = self.inner.topics.lock().ok();
        let mut out = Vec::new();
        for (id, parts) in state.assignment.iter() {
            let name = topics
                .as_ref()
                .and_then(|t| t.by_id.get(id).map(|(n, _)| n.to_string()))
                .unwrap_or_else(|| id.to_string());
            out.extend(parts.iter().map(|p| (name.clone(), *p)));
        }
        out
    }
}

impl Inner {
    fn check_member(&self) -> Result<MemberState> {
        let state = self.member.borrow().clone();
        if let Some((kind, msg)) = &state.fatal {
            return Err(Error::new(*kind, msg.clone()));
        }
        Ok(state)
    }

    async fn refresh_topics(&self) -> Result<()> {
        let meta = self.cluster.metadata(&self.config.topics).await?;
        let mut topics = Topics {
            refreshed: Some(Instant::now()),
            ..Topics::default()
        };
        for t in meta.topics {
            let Some(name) = t.name else { continue };
            if t.error_code != 0 {
                tracing::warn!(topic = %name, code = t.error_code, "metadata error for topic");
                continue;
            }
            let name: Arc<str> = Arc::from(name.as_str());
            let leaders = t
                .partitions
                .iter()
                .map(|p| (p.partition, p.leader))
                .collect();
            tracing::debug!(topic = %name, ?leaders, "partition leaders");
            topics.by_name.insert(name.clone(), t.id);
            topics.by_id.insert(t.id, (name, leaders));
        }
        if let Ok(mut guard) = self.topics.lock() {
            *guard = topics;
        }
        Ok(())
    }

    /// Assigned partitions grouped by leader, refreshing metadata when something is unknown or old.
    async fn partitions_by_leader(
        &self,
        assignment: &[(Uuid, Vec<i32>)],
    ) -> Result<BTreeMap<i32, Vec<(Uuid, Vec<i32>)>>> {
        let stale = {
            let t = self
                .topics
                .lock()
                .map_err(|_| Error::new(ErrorKind::Closed, "poisoned"))?;
            t.refreshed
                .is_none_or(|at| at.elapsed() > self.config.metadata_max_age)
                || assignment.iter().any(|(id, parts)| {
                    t.by_id.get(id).is_none_or(|(_, leaders)| {
                        parts.iter().any(|p| leaders.get(p).is_none_or(|l| *l < 0))
                    })
                })
        };
        if stale {
            self.refresh_topics().await?;
        }
        let t = self
            .topics
            .lock()
            .map_err(|_| Error::new(ErrorKind::Closed, "poisoned"))?;
        let mut out: BTreeMap<i32, BTreeMap<Uuid, Vec<i32>>> = BTreeMap::new();
        for (id, parts) in assignment {
            let Some((_, leaders)) = t.by_id.get(id) else {
                continue;
            };
            for p in parts {
                if let Some(&leader) = leaders.get(p).filter(|l| **l >= 0) {
                    out.entry(leader)
                        .or_default()
                        .entry(*id)
                        .or_default()
                        .push(*p);
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|(node, topics)| (node, topics.into_iter().collect()))
            .collect())
    }

    /// Removes the paused partitions (and those of paused topics); `true` if that left nothing
    /// to fetch from.
    fn drop_paused(&self, by_leader: &mut BTreeMap<i32, Vec<(Uuid, Vec<i32>)>>) -> bool {
        let paused = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        if paused.is_empty() || by_leader.is_empty() {
            return false;
        }
        let topics = self.topics.lock().unwrap_or_else(|e| e.into_inner());
        by_leader.retain(|_, partitions| {
            partitions.retain_mut(|(id, numbers)| {
                let Some((name, _)) = topics.by_id.get(id) else {
                    return true;
                };
                numbers.retain(|p| !paused.has(name, *p));
                !numbers.is_empty()
            });
            !partitions.is_empty()
        });
        by_leader.is_empty()
    }

    fn session_jobs(&self, node: i32) -> Result<tokio::sync::mpsc::Sender<FetchJob>> {
        let mut sessions = self
            .sessions
            .lock()
            .map_err(|_| Error::new(ErrorKind::Closed, "poisoned"))?;
        let handle = sessions.entry(node).or_insert_with(|| {
            session::spawn(
                node,
                self.cluster.clone(),
                SessionConfig {
                    group: self.config.group.clone(),
                    member_id: self.member_id.clone(),
                    max_bytes: self.config.max_bytes,
                    inflate: InflateLimits {
                        max_batch_bytes: self.config.max_batch_bytes,
                    },
                    inflate_budget: self.config.max_fetch_inflate_bytes,
                    busy_max_wait: self.config.busy_max_wait,
                },
                self.session_cancel.child_token(),
            )
        });
        Ok(handle.jobs.clone())
    }

    /// Sends a fetch to every leader with none in flight, sharing out the slots the fetches in
    /// flight do not hold, then returns what the first broker (and any other already) answered.
    /// A slot freed meanwhile (an acknowledgement handed over) goes to a leader still waiting for
    /// one, so an idle broker's long poll never holds the others back.
    async fn fetch(&self, max_records: u32) -> Result<Vec<Delivery>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::Closed, "the source is closed"));
        }
        // One caller at a time; the guard is held across the wait, which is cancel-safe.
        let mut fetches = self.fetches.lock().await;
        if let Some(err) = fetches.take_deferred() {
            return Err(err);
        }
        let freed_before = self.freed.load(Ordering::SeqCst);
        // A clone starts from the original's last seen version, which never advances: mark the
        // current state seen so that `changed` waits for the next one instead of returning at once.
        let mut member = self.member.clone();
        member.mark_unchanged();
        let mut state = self.check_member()?;
        if state.assignment.is_empty() && fetches.is_empty() {
            let _ = tokio::time::timeout(self.config.max_wait, member.changed()).await;
            state = self.check_member()?;
            if state.assignment.is_empty() {
                return Ok(Vec::new());
            }
        }
        let mut by_leader = self.partitions_by_leader(&state.assignment).await?;
        self.leaders
            .store(by_leader.len().max(1), Ordering::Relaxed);
        // Listening for a resume before looking at what is paused: one that comes in between
        // still wakes the wait below.
        let resumed = self.resumed.notified();
        tokio::pin!(resumed);
        resumed.as_mut().enable();
        let all_paused = self.drop_paused(&mut by_leader);
        let answers = loop {
            let freed_now = self.freed.load(Ordering::SeqCst);
            let freed_since = freed_now.wrapping_sub(freed_before);
            let slots = u64::from(max_records).saturating_add(freed_since);
            let room = u32::try_from(slots)
                .unwrap_or(u32::MAX)
                .saturating_sub(fetches.outstanding());
            let idle: Vec<i32> = by_leader
                .keys()
                .copied()
                .filter(|node| !fetches.busy(*node))
                .collect();
            for (node, budget) in fetches.plan(room, &idle) {
                let Some(partitions) = by_leader.remove(&node) else {
                    continue;
                };
                let jobs = self.session_jobs(node)?;
                let (tx, rx) = oneshot::channel();
                jobs.send(FetchJob {
                    partitions,
                    max_records: budget,
                    max_wait: self.config.max_wait,
                    reply: tx,
                })
                .await
                .map_err(|_| Error::new(ErrorKind::Closed, "the source is closed"))?;
                fetches.sent(node, budget, rx);
            }
            if fetches.is_empty() {
                if all_paused {
                    // Everything assigned is paused: wait for a resume (or the usual wait)
                    // instead of spinning on empty answers.
                    let _ = tokio::time::timeout(self.config.max_wait, resumed).await;
                } else {
                    tokio::time::sleep(self.config.max_wait.min(Duration::from_millis(100))).await;
                }
                return Ok(Vec::new());
            }
            // Leaders still without a fetch wait for a slot to be freed.
            if !by_leader.keys().any(|node| !fetches.busy(*node)) {
                break fetches.answers().await;
            }
            let woken = self.freed_wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            self.starving.store(true, Ordering::SeqCst);
            if self.freed.load(Ordering::SeqCst) != freed_now {
                continue;
            }
            tokio::select! {
                answers = fetches.answers() => break answers,
                () = woken => {}
            }
        };
        self.starving.store(false, Ordering::SeqCst);
        let mut out = Vec::new();
        let mut failed = None;
        for answer in answers {
            match answer.outcome {
                Ok(outcome) => self.deliveries(outcome, &mut out)?,
                Err(err) => {
                    // A broker that cannot be reached may have lost its partitions to another:
                    // the next call looks at the metadata again.
                    self.forget_leaders();
                    if matches!(err.kind(), ErrorKind::Io | ErrorKind::Broker)
                        && !fetches.is_empty()
                    {
                        // The other brokers go on; this one's session driver backs off.
                        tracing::warn!(node = answer.node, error = %err, "ShareFetch failed");
                        continue;
                    }
                    failed.get_or_insert(err);
                }
            }
        }
        match failed {
            Some(err) if out.is_empty() => Err(err),
            Some(err) => {
                fetches.defer(err);
                Ok(out)
            }
            None => Ok(out),
        }
    }

    /// Makes the next fetch read the partition leaders again.
    fn forget_leaders(&self) {
        if let Ok(mut t) = self.topics.lock() {
            t.refreshed = None;
        }
    }

    /// Turns what one broker's fetch acquired into deliveries, appended to `out`.
    fn deliveries(&self, outcome: FetchOutcome, out: &mut Vec<Delivery>) -> Result<()> {
        if outcome.leader_moved {
            self.forget_leaders();
        }
        let acquired_at = outcome.sent_at.unwrap_or_else(Instant::now);
        let names = self
            .topics
            .lock()
            .map_err(|_| Error::new(ErrorKind::Closed, "poisoned"))?;
        out.reserve(outcome.records.len());
        for (topic_id, partition, r) in outcome.records {
            let topic = names
                .by_id
                .get(&topic_id)
                .map(|(n, _)| n.clone())
                .unwrap_or_else(|| Arc::from(topic_id.to_string().as_str()));
            out.push(Delivery {
                id: DeliveryId {
                    topic,
                    partition,
                    offset: r.offset,
                    lease: Lease::with_topic_id(outcome.node, outcome.generation, topic_id),
                },
                key: r.key,
                value: r.value,
                headers: r.headers,
                timestamp: r.timestamp,
                delivery_count: r.delivery_count,
                lock_duration: outcome.lock_timeout,
                acquired_at,
                undecodable: r.undecodable,
            });
        }
        Ok(())
    }

    fn enqueue(&self, id: &DeliveryId, kind: i8, renew: bool) -> AckReceipt {
        if self.closed.load(Ordering::Acquire) {
            return AckReceipt::ready(Err(AckError::Closed));
        }
        // The lease carries the topic id; a lease made elsewhere falls back to the name.
        let topic_id = id.lease.topic_id().or_else(|| {
            self.topics
                .lock()
                .ok()
                .and_then(|t| t.by_name.get(&id.topic).copied())
        });
        let Some(topic_id) = topic_id else {
            return AckReceipt::ready(Err(AckError::Broker {
                code: -1,
                message: format!("unknown topic {}", id.topic),
            }));
        };
        let shared = self
            .sessions
            .lock()
            .ok()
            .and_then(|s| s.get(&id.lease.node()).map(|h| h.shared.clone()));
        let Some(shared) = shared else {
            return AckReceipt::ready(Err(AckError::SessionLost));
        };
        if !renew {
            self.freed.fetch_add(1, Ordering::SeqCst);
            if self.starving.load(Ordering::SeqCst) {
                self.freed_wake.notify_waiters();
            }
        }
        let (tx, rx) = AckReceipt::channel();
        shared.enqueue(
            PendingAck {
                topic_id,
                partition: id.partition,
                first: id.offset,
                last: id.offset,
                kind,
                generation: id.lease.session(),
                reply: Some(tx),
            },
            renew,
        );
        rx
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Close the share sessions first (flushing acks, epoch -1), then leave the group.
        self.session_cancel.cancel();
        let tasks: Vec<_> = match self.sessions.lock() {
            Ok(mut s) => s.values_mut().filter_map(|h| h.task.take()).collect(),
            Err(_) => Vec::new(),
        };
        for task in tasks {
            let _ = task.await;
        }
        self.member_cancel.cancel();
        let task = self.member_task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = task.await;
        }
        Ok(())
    }
}

/// The share-group operations. `worker-core`'s `ShareSource` port is implemented on these.
impl KafkaSource {
    /// Acquires up to `max_records` records (at least one; `record_limit` acquisition), plus at
    /// most one for each acknowledgement queued while the call waits, whose slot it may give to
    /// a broker still long-polling. Waits up to `max_wait` when none are available; an empty
    /// vector is a normal answer. Acknowledgements and renewals queued before the call ride along
    /// with it. Concurrent calls take turns.
    pub async fn fetch(&self, max_records: u32) -> Result<Vec<Delivery>> {
        self.inner.fetch(max_records.max(1)).await
    }

    /// Queues the final acknowledgement of one delivery, at once and without waiting for a
    /// fetch: it goes with the next request to the record's broker, or on its own when no fetch
    /// is due. The receipt resolves when the broker has answered for that record.
    pub fn acknowledge(&self, id: &DeliveryId, kind: AckKind) -> AckReceipt {
        self.inner.enqueue(id, wire_type(kind), false)
    }

    /// Queues a renewal (RENEW) of one delivery's acquisition lock, as
    /// [`acknowledge`](Self::acknowledge) queues; on success the lock runs for its full duration
    /// again from when the broker received the request.
    pub fn renew(&self, id: &DeliveryId) -> AckReceipt {
        self.inner.enqueue(id, RENEW, true)
    }

    /// Flushes queued acknowledgements, releases every record still acquired, closes the share
    /// sessions and leaves the group. Calls after it fail with [`AckError::Closed`] or
    /// [`ErrorKind::Closed`].
    pub async fn close(&self) -> Result<()> {
        self.inner.close().await
    }

    /// How many brokers lead the partitions assigned to this member, as of the last fetch (at
    /// least 1): a fetch sends each of them a request of its own.
    pub fn leaders(&self) -> usize {
        self.inner.leaders.load(Ordering::Relaxed)
    }

    /// The share group this member belongs to.
    pub fn group(&self) -> &str {
        &self.inner.config.group
    }

    /// Stops (`paused`) or resumes fetching records of `topic`; acknowledgements and renewals of
    /// its records already held still flow.
    pub fn pause(&self, topic: &str, paused: bool) {
        let mut set = self.inner.paused.lock().unwrap_or_else(|e| e.into_inner());
        if paused {
            set.topics.insert(Arc::from(topic));
        } else if set.topics.remove(topic) {
            self.inner.resumed.notify_waiters();
        }
    }

    /// Stops (`paused`) or resumes fetching records of one partition of `topic`, as
    /// [`pause`](Self::pause) does for a whole topic: the share session forgets the partition
    /// until it is resumed, so the broker acquires none of its records for this member (the
    /// group's other members still get them).
    pub fn pause_partition(&self, topic: &str, partition: i32, paused: bool) {
        let mut set = self.inner.paused.lock().unwrap_or_else(|e| e.into_inner());
        if paused {
            set.pause_partition(topic, partition);
        } else if set.resume_partition(topic, partition) {
            self.inner.resumed.notify_waiters();
        }
    }

    /// The group's `share.renew.acknowledge.enable` (Kafka 4.3+; RENEW is always there before)
    /// and lock duration, read once through the admin API.
    pub async fn renewal(&self) -> Result<Renewal> {
        let config = &self.inner.config;
        let admin =
            super::Admin::connect_with(config.bootstrap.join(","), &config.security).await?;
        let renewal = admin.renewal(&config.group).await?;
        Ok(if renewal.enabled {
            Renewal::Available
        } else {
            Renewal::Disabled { lock: renewal.lock }
        })
    }

    /// The group's broker-side dead-letter queue (Kafka 4.4+, KIP-1191), read once through the
    /// admin API.
    pub async fn broker_dlq(&self) -> Result<BrokerDeadLetters> {
        let config = &self.inner.config;
        let admin =
            super::Admin::connect_with(config.bootstrap.join(","), &config.security).await?;
        Ok(admin.broker_dlq(&config.group).await?.into())
    }

    /// The group's delivery-count limit, read through the admin API: its
    /// `share.delivery.count.limit` (Kafka 4.3+), else the broker's
    /// `group.share.delivery.count.limit`. A record released or whose lock ends at this many
    /// deliveries is archived by the broker.
    pub async fn delivery_limit(&self) -> Result<Option<u16>> {
        let config = &self.inner.config;
        let admin =
            super::Admin::connect_with(config.bootstrap.join(","), &config.security).await?;
        let super::DeliveryLimit {
            value: limit,
            source,
        } = admin.delivery_limit(&config.group).await?;
        tracing::info!(group = %config.group, limit, %source, "delivery count limit");
        u16::try_from(limit).map(Some).map_err(|_| {
            Error::new(
                ErrorKind::Protocol,
                format!(
                    "the delivery count limit of group {} is {limit}, beyond any valid value",
                    config.group
                ),
            )
        })
    }
}
