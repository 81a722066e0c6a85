//! [`CronScheduler`]: fires each tick of the fleet's periodic jobs exactly once, with Kafka
//! alone.
//!
//! - **Who fires.** Every worker joins the classic consumer group `{group}.cron` on the
//!   one-partition topic `{group}.cron`; the member assigned its partition fires. A member that
//!   dies (SIGKILL included) leaves the group after the session timeout and another takes over.
//! - **Exactly once.** The firer writes through a transactional producer whose
//!   `transactional.id` is `{group}.cron`: a new firer's `init_transactions` fences the previous
//!   one, whose open transaction is aborted and whose later commits fail. Then it reads the topic
//!   to its end (read committed) for the last tick each schedule fired. Each firing is one
//!   transaction holding the job record and a marker (key: the schedule's name, value: the
//!   tick), so a tick is either fired with its marker or not at all.
//! - Consumers of the jobs must read committed records only (`share.isolation.level =
//!   read_committed` on the share group): an aborted firing's job record stays in the log.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter, ObservableGauge};
use std::time::{Duration, Instant, SystemTime};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::Offset;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header as KafkaHeader, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use tokio_util::sync::CancellationToken;

use super::job::CronJob;
use super::schedule::{due, millis};
use crate::control::JOB_ID;
use crate::security::{KafkaContext, RdkafkaSecurity, Security};
use crate::{Error, ErrorKind, Result};

/// How long a member may stay silent before the group gives its partition to another: the
/// broker's smallest by default, so a killed firer is replaced within a few seconds.
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);
/// How long one consumer poll waits: also how late a tick may fire.
const POLL: Duration = Duration::from_millis(100);
/// The longest a transactional call may take.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failure, how long before the firer tries again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The last firing of each schedule, as the firer knows it.
pub type Firings = Arc<Mutex<HashMap<String, i64>>>;

/// Fires a fleet's periodic jobs: give it to
/// [`WorkerBuilder::cron`](crate::runtime::WorkerBuilder::cron) and every worker of the group
/// takes part; one at a time fires. See the module doc.
#[derive(Clone)]
pub struct CronScheduler {
    bootstrap: String,
    group: String,
    security: Security,
    client_id: String,
    jobs: Vec<CronJob>,
    /// The last firings this worker saw while it was the firer.
    firings: Firings,
    /// Whether this worker fires now.
    firing: Arc<AtomicBool>,
    /// `share_worker.cron.firings`, once the worker runs.
    fired: Arc<OnceLock<Counter<u64>>>,
    /// Marks from the future ignored (each counted once, however often the topic is read: the
    /// highest offset counted), and `share_worker.cron.marks_ignored` once the worker runs.
    ignored: Arc<AtomicU64>,
    ignored_through: Arc<AtomicI64>,
    ignored_metric: Arc<OnceLock<Counter<u64>>>,
    /// `share_worker.cron.overdue`, once the worker runs.
    overdue: Arc<OnceLock<ObservableGauge<u64>>>,
}

impl std::fmt::Debug for CronScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronScheduler")
            .field("bootstrap", &self.bootstrap)
            .field("group", &self.group)
            .field("jobs", &self.jobs)
            .finish_non_exhaustive()
    }
}

impl CronScheduler {
    /// The periodic jobs of share group `group` on the cluster at `bootstrap`.
    pub fn new(bootstrap: impl Into<String>, group: impl Into<String>) -> Self {
        Self {
            bootstrap: bootstrap.into(),
            group: group.into(),
            security: Security::default(),
            client_id: "share-worker-cron".to_owned(),
            jobs: Vec::new(),
            firings: Arc::default(),
            firing: Arc::default(),
            fired: Arc::default(),
            ignored: Arc::default(),
            ignored_through: Arc::new(AtomicI64::new(-1)),
            ignored_metric: Arc::default(),
            overdue: Arc::default(),
        }
    }

    /// Secures its connections (as the worker's source).
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// The client id its connections announce.
    pub fn client_id(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = client_id.into();
        self
    }

    /// Adds a periodic job.
    pub fn job(mut self, job: CronJob) -> Self {
        self.jobs.push(job);
        self
    }

    /// The jobs.
    pub fn jobs(&self) -> &[CronJob] {
        &self.jobs
    }

    /// The topic that elects the firer and keeps each schedule's last firing: `{group}.cron`.
    pub fn topic(&self) -> String {
        Self::topic_of(&self.group)
    }

    /// The cron topic of share group `group`.
    pub fn topic_of(group: &str) -> String {
        format!("{group}.cron")
    }

    /// The last firing of each schedule this worker saw while it fired.
    pub fn firings(&self) -> Firings {
        self.firings.clone()
    }

    /// Each schedule's last firing, read from the cron topic (committed firings only, to the end
    /// the topic had when the read began; blocking, `timeout` at most): for status pages.
    pub fn read_firings(&self, timeout: Duration) -> Result<HashMap<String, i64>> {
        let deadline = Instant::now() + timeout;
        let topic = self.topic();
        let mut config = self.config()?;
        config
            .set("group.id", format!("{topic}.reader"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .set("isolation.level", "read_committed");
        let consumer: BaseConsumer<KafkaContext> = config
            .create_with_context(self.security.rdkafka_context())
            .map_err(|err| self.error("creating its reader", &err))?;
        let (_, end) = consumer
            .fetch_watermarks(&topic, 0, timeout)
            .map_err(|err| self.error("reading the firings", &err))?;
        let mut start = rdkafka::TopicPartitionList::new();
        start
            .add_partition_offset(&topic, 0, Offset::Beginning)
            .map_err(|err| self.error("reading the firings", &err))?;
        consumer
            .assign(&start)
            .map_err(|err| self.error("reading the firings", &err))?;
        let mut firings = HashMap::new();
        while end > 0 && !caught_up(&consumer, &topic, end) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("cron topic {topic}: not read to its end within {timeout:?}"),
                ));
            }
            if let Some(Ok(message)) = consumer.poll(left.min(POLL))
                && let Some((name, tick)) = self.mark(&message)
            {
                let last = firings.entry(name).or_insert(tick);
                *last = (*last).max(tick);
            }
        }
        Ok(firings)
    }

    /// Counts its firings and the marks it ignores with the worker's `meter`, and says which
    /// schedules are overdue (from the marks this worker reads; a schedule never fired counts
    /// from now).
    pub(crate) fn attach(&self, meter: &Meter) {
        let _ = self.fired.set(
            meter
                .u64_counter(crate::telemetry::names::CRON_FIRINGS)
                .with_description("Ticks of a periodic job this worker fired.")
                .build(),
        );
        let _ = self.ignored_metric.set(
            meter
                .u64_counter(crate::telemetry::names::CRON_MARKS_IGNORED)
                .with_description(
                    "Marks on the cron topic ignored: more than a tick ahead of the broker's time.",
                )
                .build(),
        );
        let since = millis(SystemTime::now());
        let (jobs, firings) = (self.jobs.clone(), self.firings.clone());
        let _ = self.overdue.set(
            meter
                .u64_observable_gauge(crate::telemetry::names::CRON_OVERDUE)
                .with_description("1 while a periodic job has missed two ticks (no tick fired since its last firing), else 0.")
                .with_callback(move |observer| {
                    let now = SystemTime::now();
                    let firings = firings.lock().unwrap_or_else(PoisonError::into_inner);
                    for job in &jobs {
                        let last = firings.get(job.name()).copied().unwrap_or(since);
                        observer.observe(
                            u64::from(job.schedule().is_overdue(last, now)),
                            &[KeyValue::new(crate::telemetry::names::JOB, job.name().to_owned())],
                        );
                    }
                })
                .build(),
        );
    }

    /// Whether this worker (this scheduler or a clone of it) fires the group's schedules now.
    pub fn is_firing(&self) -> bool {
        self.firing.load(Ordering::SeqCst)
    }

    /// What is wrong with the jobs: each job's own checks, and two jobs of one name.
    pub fn check(&self) -> Result<()> {
        let mut names = std::collections::HashSet::new();
        for job in &self.jobs {
            job.check()?;
            if !names.insert(job.name()) {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!("cron job {:?}: two jobs have this name", job.name()),
                ));
            }
        }
        Ok(())
    }

    /// Runs until `stop` is cancelled (blocking: run it on a thread of its own).
    pub fn run_blocking(&self, stop: &CancellationToken) {
        let since = SystemTime::now();
        let mut firer: Option<Firer> = None;
        let mut not_before = Instant::now();
        let consumer = loop {
            match self.consumer() {
                Ok(consumer) => break consumer,
                Err(err) => {
                    tracing::error!(error = %err, "cron: cannot join the firers' group; trying again");
                    if wait(stop, Duration::from_secs(5)) {
                        return;
                    }
                }
            }
        };
        let topic = self.topic();
        while !stop.is_cancelled() {
            let firing = firer.as_ref().is_some_and(|f| f.caught_up);
            if self.firing.swap(firing, Ordering::SeqCst) != firing && firing {
                tracing::info!(topic, "cron: this worker fires the group's schedules");
            }
            match consumer.poll(POLL) {
                Some(Ok(message)) => {
                    if let Some((name, tick)) = self.mark(&message) {
                        let mut firings = self.lock_firings();
                        let last = firings.entry(name).or_insert(tick);
                        *last = (*last).max(tick);
                    }
                }
                Some(Err(err)) => tracing::debug!(error = %err, topic, "cron: reading the marks"),
                None => {}
            }
            let assigned = consumer
                .assignment()
                .map(|a| a.find_partition(&topic, 0).is_some())
                .unwrap_or(false);
            match (&mut firer, assigned) {
                (None, true) if Instant::now() >= not_before => {
                    match self.become_firer(&consumer) {
                        Ok(new) => firer = Some(new),
                        Err(err) => {
                            tracing::warn!(error = %err, "cron: cannot take over firing; trying again");
                            not_before = Instant::now() + RETRY_AFTER;
                        }
                    }
                }
                (Some(_), false) => {
                    tracing::info!(topic, "cron: this worker no longer fires (the group moved)");
                    firer = None;
                }
                (Some(current), true) => {
                    if !current.caught_up {
                        current.caught_up = caught_up(&consumer, &topic, current.end);
                    }
                    if current.caught_up && !self.fire_due(current, since) {
                        firer = None;
                        not_before = Instant::now() + RETRY_AFTER;
                    }
                }
                _ => {}
            }
        }
        self.firing.store(false, Ordering::SeqCst);
        consumer.unsubscribe();
    }

    /// A firing's mark: the name of one of its jobs and the tick. Anything else on the topic (a
    /// record that is no mark, a job it does not have) is ignored, so what it keeps is bounded
    /// by its jobs.
    ///
    /// A mark more than a tick ahead of the broker's time (the record's log-append time; the
    /// local clock on a topic that keeps producers' times) is ignored too, with a warning: it
    /// would keep the schedule from firing until then.
    fn mark(&self, message: &rdkafka::message::BorrowedMessage<'_>) -> Option<(String, i64)> {
        let name = std::str::from_utf8(message.key()?).ok()?;
        let job = self.jobs.iter().find(|job| job.name() == name)?;
        let tick = std::str::from_utf8(message.payload()?).ok()?.parse().ok()?;
        let (reference, clock) = match message.timestamp() {
            rdkafka::Timestamp::LogAppendTime(at) => (at, "the broker's"),
            _ => (millis(SystemTime::now()), "this worker's"),
        };
        if job.schedule().is_ahead(tick, reference) {
            if self
                .ignored_through
                .fetch_max(message.offset(), Ordering::Relaxed)
                >= message.offset()
            {
                return None;
            }
            let n = self.ignored.fetch_add(1, Ordering::Relaxed) + 1;
            if let Some(metric) = self.ignored_metric.get() {
                metric.add(
                    1,
                    &[KeyValue::new(
                        crate::telemetry::names::JOB,
                        job.name().to_owned(),
                    )],
                );
            }
            if n.is_power_of_two() {
                tracing::warn!(
                    at = %format!("{}@{}", message.topic(), message.offset()),
                    job = job.name(),
                    tick,
                    time = reference,
                    ignored = n,
                    "cron: a mark more than a tick ahead of {clock} time is ignored (forged, or written by a clock far ahead)"
                );
            }
            return None;
        }
        Some((job.name().to_owned(), tick))
    }

    fn lock_firings(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.firings.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fires every due tick; `false` when the producer cannot go on (fenced, or broken).
    fn fire_due(&self, firer: &mut Firer, since: SystemTime) -> bool {
        let now = SystemTime::now();
        for job in &self.jobs {
            let last = self.lock_firings().get(job.name()).copied();
            let Some(tick) = due(&job.schedule, job.catch_up, last, since, now) else {
                continue;
            };
            match firer.fire(job, tick, &self.topic()) {
                Ok(()) => {
                    self.lock_firings().insert(job.name().to_owned(), tick);
                    if let Some(fired) = self.fired.get() {
                        fired.add(
                            1,
                            &[KeyValue::new(
                                crate::telemetry::names::JOB,
                                job.name().to_owned(),
                            )],
                        );
                    }
                    tracing::info!(job = job.name(), tick, "cron: fired");
                }
                Err(err) => {
                    tracing::warn!(job = job.name(), tick, error = %err, "cron: firing failed: not fired");
                    return false;
                }
            }
        }
        true
    }

    fn consumer(&self) -> Result<BaseConsumer<KafkaContext>> {
        let mut config = self.config()?;
        config
            .set("group.id", self.topic())
            .set(
                "session.timeout.ms",
                SESSION_TIMEOUT.as_millis().to_string(),
            )
            .set("heartbeat.interval.ms", "1000")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("auto.offset.reset", "earliest")
            .set("isolation.level", "read_committed");
        let consumer: BaseConsumer<KafkaContext> = config
            .create_with_context(self.security.rdkafka_context())
            .map_err(|err| self.error("creating its consumer", &err))?;
        consumer
            .subscribe(&[&self.topic()])
            .map_err(|err| self.error("joining the firers' group", &err))?;
        Ok(consumer)
    }

    /// Fences the previous firer and makes this worker the firer, its reading of the marks
    /// restarted from the beginning.
    fn become_firer(&self, consumer: &BaseConsumer<KafkaContext>) -> Result<Firer> {
        let mut config = self.config()?;
        config
            .set("transactional.id", self.topic())
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set(
                "transaction.timeout.ms",
                (TRANSACTION_TIMEOUT * 3).as_millis().to_string(),
            );
        let producer: BaseProducer<KafkaContext> = config
            .create_with_context(self.security.rdkafka_context())
            .map_err(|err| self.error("creating its transactional producer", &err))?;
        producer
            .init_transactions(TRANSACTION_TIMEOUT)
            .map_err(|err| self.error("fencing the previous firer", &err))?;
        // What the previous firer committed is final now: reading on to the end of the marks
        // (this member reads them from the start: the group never commits an offset) gives
        // every schedule's last firing.
        let topic = self.topic();
        let (_, end) = consumer
            .fetch_watermarks(&topic, 0, TRANSACTION_TIMEOUT)
            .map_err(|err| self.error("reading the marks", &err))?;
        Ok(Firer {
            producer,
            end,
            caught_up: end == 0,
        })
    }

    fn config(&self) -> Result<ClientConfig> {
        let mut config = self.security.rdkafka_client_config(&self.bootstrap)?;
        config.set("client.id", &self.client_id);
        Ok(config)
    }

    fn error(&self, what: &str, err: &KafkaError) -> Error {
        Error::new(
            ErrorKind::Io,
            format!(
                "cron topic {} on {}: {what}: {err}",
                self.topic(),
                self.bootstrap
            ),
        )
    }
}

/// The firer's side: its transactional producer and how far it has read the marks.
struct Firer {
    producer: BaseProducer<KafkaContext>,
    /// The end of the marks when this worker became the firer.
    end: i64,
    caught_up: bool,
}

impl Firer {
    /// One transaction: `job`'s record for `tick` and its mark on `marks`.
    fn fire(&self, job: &CronJob, tick: i64, marks: &str) -> std::result::Result<(), KafkaError> {
        self.producer.begin_transaction()?;
        let sent = self.send(job, tick, marks);
        let committed = sent.and_then(|()| self.producer.commit_transaction(TRANSACTION_TIMEOUT));
        if let Err(err) = &committed {
            let fenced = matches!(
                err.rdkafka_error_code(),
                Some(RDKafkaErrorCode::Fenced | RDKafkaErrorCode::ProducerFenced)
            );
            if !fenced {
                let _ = self.producer.abort_transaction(TRANSACTION_TIMEOUT);
            }
        }
        committed
    }

    fn send(&self, job: &CronJob, tick: i64, marks: &str) -> std::result::Result<(), KafkaError> {
        let job_id = job.job_id(tick);
        let headers = job.headers.iter().fold(
            OwnedHeaders::new_with_capacity(job.headers.len() + 1).insert(KafkaHeader {
                key: JOB_ID,
                value: Some(job_id.as_bytes()),
            }),
            |all, (key, value)| {
                all.insert(KafkaHeader {
                    key,
                    value: Some(&value[..]),
                })
            },
        );
        let mut record = BaseRecord::<[u8], [u8]>::to(&job.topic).headers(headers);
        if let Some(key) = &job.key {
            record = record.key(&key[..]);
        }
        if let Some(payload) = &job.payload {
            record = record.payload(&payload[..]);
        }
        self.producer.send(record).map_err(|(err, _)| err)?;
        let tick_text = tick.to_string();
        let mark = BaseRecord::to(marks)
            .key(job.name().as_bytes())
            .payload(tick_text.as_bytes());
        self.producer.send(mark).map_err(|(err, _)| err)?;
        Ok(())
    }
}

/// Whether `consumer` has read `topic`'s partition up to `end`.
fn caught_up(consumer: &BaseConsumer<KafkaContext>, topic: &str, end: i64) -> bool {
    consumer
        .position()
        .ok()
        .and_then(|p| p.find_partition(topic, 0).map(|p| p.offset()))
        .is_some_and(|offset| matches!(offset, Offset::Offset(at) if at >= end))
}

/// Sleeps `wait` unless `stop` is cancelled first; `true` if it was.
fn wait(stop: &CancellationToken, wait: Duration) -> bool {
    let until = Instant::now() + wait;
    while Instant::now() < until {
        if stop.is_cancelled() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.is_cancelled()
}
