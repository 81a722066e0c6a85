//! The control topic through librdkafka: read to its end at start, followed by a thread of its
//! own, written by the commands (`share-worker pause`, [`ControlTopic::pause`]).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::BorrowedMessage;
use rdkafka::producer::FutureRecord;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::{Cancel, ControlSender, ControlState, Controls, Pause, channel};
use crate::fleet::presence::MemberReader;
use crate::produce::client::{Producer, producer_config};
use crate::security::{KafkaContext, RdkafkaSecurity, Security};
use crate::{Error, ErrorKind, Result};

/// How long one poll of the follower waits for a command.
const POLL: Duration = Duration::from_millis(200);
/// How often the follower checks that the topic can still be read, while no command comes.
const CHECK_EVERY: Duration = Duration::from_secs(5);
/// The reader's group id: librdkafka needs one for `assign`; it is never joined and no offset
/// is ever committed to it (the reader starts at the beginning every time).
const READER_GROUP: &str = "share-worker-control-reader";
/// How long a command's write may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a follower tombstones the commands that lapsed (plus up to 10 s, to spread the
/// fleet), and how many at most each time. The first sweep comes [`FIRST_SWEEP`] (plus up to
/// 3 s) after the follower starts: what lapsed while no worker ran is removed at the next start.
const SWEEP_EVERY: Duration = Duration::from_secs(60);
const FIRST_SWEEP: Duration = Duration::from_secs(2);
const SWEEP_MAX: usize = 1_000;

/// A share group's control topic on a cluster: where commands are written, and what every worker
/// of the group follows. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ControlTopic {
    bootstrap: String,
    topic: String,
    security: Security,
    client_id: String,
    writer: CachedProducer,
}

/// The producer that writes the commands, made at the first write and kept by every clone: a
/// new idempotent producer takes ~0.5 s to connect and get its producer id, which a breaker's or
/// a cool-down's pause would otherwise wait before the rest of the fleet could read it.
#[derive(Clone, Default)]
struct CachedProducer(Arc<std::sync::Mutex<Option<Arc<Producer>>>>);

impl std::fmt::Debug for CachedProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CachedProducer")
    }
}

impl ControlTopic {
    /// The control topic `topic` on the brokers at `bootstrap` (comma-separated `host:port`).
    pub fn new(bootstrap: impl Into<String>, topic: impl Into<String>) -> Self {
        Self {
            bootstrap: bootstrap.into(),
            topic: topic.into(),
            security: Security::default(),
            client_id: format!("{}-control", crate::defaults::CLIENT_ID),
            writer: CachedProducer::default(),
        }
    }

    /// The default name of `group`'s control topic: `{group}.control`.
    pub fn default_name(group: &str) -> String {
        format!("{group}.control")
    }

    /// Secures the connections (TLS, SASL); default plain TCP.
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self.writer = CachedProducer::default();
        self
    }

    /// Sets the client id of the topic's reader and writer.
    pub fn client_id(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = client_id.into();
        self.writer = CachedProducer::default();
        self
    }

    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.topic
    }

    /// Reads every command on the topic (within `timeout`) and returns the controls then in force;
    /// for a worker, [`follow`](Self::follow) goes on reading.
    pub async fn read(&self, timeout: Duration) -> Result<ControlState> {
        let this = self.clone();
        let (sender, controls) = channel(ControlState::default());
        let reader = Reader {
            sender,
            members: None,
        };
        blocking(move || this.replay(&reader, timeout).map(drop)).await?;
        Ok((*controls.state()).clone())
    }

    /// Reads every command on the topic (within `timeout`), then follows it on a thread of its
    /// own until every clone of the returned [`Controls`] is dropped. A read that fails later
    /// keeps the last state and shows in [`Controls::read_failure`] until reads work again.
    pub async fn follow(&self, timeout: Duration) -> Result<Controls> {
        self.follow_with(timeout, None).await
    }

    /// Like [`follow`](Self::follow), and shares the rate limits with the rest of the fleet
    /// through presence records on the topic (see [`fleet`](crate::fleet)). The returned
    /// [`Fleet`](crate::fleet::Fleet) goes to [`WorkerBuilder::fleet`](crate::WorkerBuilder::fleet);
    /// the [`FleetPresence`] leaves the fleet when the worker is done.
    pub async fn follow_fleet(
        &self,
        timeout: Duration,
    ) -> Result<(Controls, crate::fleet::Fleet, FleetPresence)> {
        let me = uuid::Uuid::new_v4().simple().to_string();
        let (reader, parts) = crate::fleet::presence::new(&me);
        let controls = self.follow_with(timeout, Some(reader)).await?;
        let writer = controls
            .writer
            .clone()
            .ok_or_else(|| Error::new(ErrorKind::Closed, "the control topic's writer is gone"))?;
        let (presence, fleet) = crate::fleet::presence::Presence::start(parts, writer);
        tracing::info!(topic = %self.topic, worker = %me, "fleet: sharing the rates through the control topic");
        Ok((controls, fleet, FleetPresence(presence)))
    }

    async fn follow_with(
        &self,
        timeout: Duration,
        members: Option<MemberReader>,
    ) -> Result<Controls> {
        let this = self.clone();
        let (sender, mut controls) = channel(ControlState::default());
        let writer = self.clone();
        controls.writer = Some(super::Writer(Arc::new(
            move |key: String, value: Option<Vec<u8>>| {
                let writer = writer.clone();
                Box::pin(async move {
                    writer
                        .write(&key, value.as_deref(), &format!("writing {key}"))
                        .await
                        .map_err(|err| err.to_string())
                }) as super::Written
            },
        )));
        let reader = Reader { sender, members };
        let (consumer, reader) = blocking(move || {
            let consumer = this.replay(&reader, timeout)?;
            Ok((consumer, reader))
        })
        .await?;
        // Made now, so the worker's first command (a breaker's pause) is not delayed by it; a
        // producer that cannot be made says so at that write.
        let _ = self.producer();
        let this = self.clone();
        std::thread::Builder::new()
            .name("share-worker-control".to_owned())
            .spawn(move || this.follow_on(&consumer, &reader))
            .map_err(|err| {
                Error::new(
                    ErrorKind::Io,
                    format!("control topic {}: cannot start its reader", self.topic),
                )
                .with_source(err)
            })?;
        Ok(controls)
    }

    /// Pauses `topic` fleet-wide until a resume, or until `until` passes; returns the pause as
    /// written, once the broker has confirmed it.
    pub async fn pause(
        &self,
        topic: &str,
        until: Option<SystemTime>,
        reason: &str,
        by: &str,
    ) -> Result<Pause> {
        let pause = Pause {
            topic: topic.to_owned(),
            until,
            reason: reason.to_owned(),
            by: by.to_owned(),
            at: SystemTime::now(),
            probe: None,
        };
        let (key, value) = super::pause_record(&pause).map_err(|why| self.invalid(&why))?;
        self.write(&key, Some(&value), &format!("pausing {topic}"))
            .await?;
        Ok(pause)
    }

    /// Pauses `topic` fleet-wide for `duration`.
    pub async fn pause_for(
        &self,
        topic: &str,
        duration: Duration,
        reason: &str,
        by: &str,
    ) -> Result<Pause> {
        let until = super::command::ends_after(SystemTime::now(), duration, "a pause")
            .map_err(|why| self.invalid(&why))?;
        self.pause(topic, Some(until), reason, by).await
    }

    /// Resumes `topic` fleet-wide, once the broker has confirmed the command.
    pub async fn resume(&self, topic: &str, reason: &str, by: &str) -> Result<()> {
        let (key, value) = super::resume_record(topic, reason, by, SystemTime::now())
            .map_err(|why| self.invalid(&why))?;
        self.write(&key, Some(&value), &format!("resuming {topic}"))
            .await
    }

    /// Cancels job `job_id` fleet-wide for `ttl` (then the cancellation lapses), once the
    /// broker has confirmed the command: a worker that would start it acknowledges it without
    /// running it; a running one has its cancellation token fired.
    pub async fn cancel(
        &self,
        job_id: &str,
        ttl: Duration,
        reason: &str,
        by: &str,
    ) -> Result<Cancel> {
        let cancel = Cancel::lasting(job_id, ttl, reason, by).map_err(|why| self.invalid(&why))?;
        let (key, value) = super::cancel_record(&cancel).map_err(|why| self.invalid(&why))?;
        self.write(&key, Some(&value), &format!("cancelling job {job_id}"))
            .await?;
        Ok(cancel)
    }

    fn invalid(&self, why: &str) -> Error {
        Error::new(
            ErrorKind::Config,
            format!("control topic {}: a command with {why}", self.topic),
        )
    }

    /// Writes one record (`value` `None`: a tombstone).
    async fn write(&self, key: &str, value: Option<&[u8]>, what: &str) -> Result<()> {
        let producer = self.producer()?;
        let what = format!("{what} on control topic {}", self.topic);
        let record = FutureRecord::<[u8], [u8]>::to(&self.topic).key(key.as_bytes());
        let record = match value {
            Some(value) => record.payload(value),
            None => record,
        };
        let written = producer.write(record).await;
        if written.is_err()
            && let Ok(mut cached) = self.writer.0.lock()
            && cached.as_ref().is_some_and(|c| Arc::ptr_eq(c, &producer))
        {
            // The next write starts from a new producer, in case this one is what failed.
            *cached = None;
        }
        written.map_err(|failure| failure.into_error(&what))?;
        Ok(())
    }

    /// The producer of the commands: the one kept, or a new one.
    fn producer(&self) -> Result<Arc<Producer>> {
        let mut cached = self
            .writer
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(producer) = cached.as_ref() {
            return Ok(producer.clone());
        }
        let config = producer_config(
            &self.security,
            &self.bootstrap,
            &self.client_id,
            WRITE_TIMEOUT,
            &[],
        )?;
        let producer = Arc::new(Producer::new(&config, &self.security).map_err(|err| {
            Error::new(
                ErrorKind::Config,
                format!("control topic {}: {err}", self.topic),
            )
        })?);
        *cached = Some(producer.clone());
        Ok(producer)
    }

    /// A consumer of the topic that joins no group.
    fn consumer(&self) -> Result<BaseConsumer<KafkaContext>> {
        let mut config = self.security.rdkafka_client_config(&self.bootstrap)?;
        config
            .set("client.id", &self.client_id)
            .set("group.id", READER_GROUP)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("auto.offset.reset", "earliest");
        config
            .create_with_context(self.security.rdkafka_context())
            .map_err(|err| {
                Error::new(
                    ErrorKind::Config,
                    format!(
                        "control topic {}: cannot create its reader: {err}",
                        self.topic
                    ),
                )
            })
    }

    /// Reads the topic from its start to the end it had when the read began, applying every
    /// record to `reader`; returns the consumer, positioned after them. `timeout` bounds each
    /// step without progress, not the whole read: a topic filled with junk takes as long as its
    /// records take to read (a few seconds per million), and is said once with its count.
    fn replay(&self, reader: &Reader, timeout: Duration) -> Result<BaseConsumer<KafkaContext>> {
        let consumer = self.consumer()?;
        let metadata = consumer
            .fetch_metadata(Some(&self.topic), timeout)
            .map_err(|err| self.unreadable(&err.to_string(), consumer.context().refusal()))?;
        if let Some(topic) = metadata.topics().iter().find(|t| t.name() == self.topic)
            && topic.partitions().len() > 1
        {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "control topic {} on {} has {} partitions: it must have exactly 1, so that every worker reads every command in one order (a command written to another partition would be ignored); recreate it with `share-worker setup`",
                    self.topic,
                    self.bootstrap,
                    topic.partitions().len()
                ),
            ));
        }
        let (start, end) = consumer
            .fetch_watermarks(&self.topic, 0, timeout)
            .map_err(|err| self.unreadable(&err.to_string(), consumer.context().refusal()))?;
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.topic, 0, Offset::Beginning)
            .map_err(|err| self.unreadable(&err.to_string(), None))?;
        consumer
            .assign(&assignment)
            .map_err(|err| self.unreadable(&err.to_string(), None))?;
        let mut next = 0;
        let mut progress = Instant::now();
        let (mut read, mut refused) = (0u64, 0u64);
        let mut first_refused = None;
        while next < end {
            if progress.elapsed() >= timeout {
                return Err(self.unreadable(
                    &format!("no record read for {timeout:?} at offset {next} of {end}"),
                    consumer.context().refusal(),
                ));
            }
            match consumer.poll(POLL) {
                Some(Ok(message)) => {
                    next = message.offset() + 1;
                    progress = Instant::now();
                    read += 1;
                    if let Err(why) = reader.try_apply(&self.topic, &message) {
                        refused += 1;
                        first_refused.get_or_insert(why);
                    }
                    continue;
                }
                Some(Err(err)) => {
                    if let Some(said) = consumer.context().refusal() {
                        return Err(self.unreadable(&err.to_string(), Some(said)));
                    }
                }
                None => {}
            }
            // Nothing to read: the position may have moved past offsets that hold no record
            // (compacted away, transaction markers) up to the end.
            if let Ok(positions) = consumer.position()
                && let Some(Offset::Offset(at)) =
                    positions.find_partition(&self.topic, 0).map(|p| p.offset())
                && at > next
            {
                next = at;
                progress = Instant::now();
            }
        }
        let state = reader.sender.state.borrow().clone();
        if let Some(first) = first_refused {
            tracing::warn!(
                topic = %self.topic,
                refused,
                read,
                first = %crate::checks::one_line(&first, 512),
                "control topic read: records that are no valid command were ignored (anyone who can write the topic can write them; see its ACLs)"
            );
        }
        tracing::info!(
            topic = %self.topic,
            records = read,
            from = start,
            to = end,
            paused = state.pauses(SystemTime::now()).count(),
            "control topic read"
        );
        Ok(consumer)
    }

    /// Follows the topic until every receiver of the reader's sender is gone.
    fn follow_on(&self, consumer: &BaseConsumer<KafkaContext>, reader: &Reader) {
        let sender = &reader.sender;
        let mut checked = Instant::now();
        let mut sweep =
            Instant::now() + FIRST_SWEEP + Duration::from_millis(rand::random::<u64>() % 3_000);
        while !sender.state.is_closed() {
            match consumer.poll(POLL) {
                Some(Ok(message)) => {
                    reader.apply(&self.topic, &message);
                    sender.set_read_failure(None);
                    checked = Instant::now();
                }
                Some(Err(err)) => {
                    let said = consumer
                        .context()
                        .refusal()
                        .unwrap_or_else(|| err.to_string());
                    sender.set_read_failure(Some(format!(
                        "control topic {} on {}: {said}",
                        self.topic, self.bootstrap
                    )));
                }
                // A poll that found nothing: this follower has read everything, and may sweep.
                None if Instant::now() >= sweep => {
                    let lapsed = sender.state.borrow().lapsed(SystemTime::now(), SWEEP_MAX);
                    self.sweep_lapsed(lapsed);
                    sweep = Instant::now()
                        + SWEEP_EVERY
                        + Duration::from_millis(rand::random::<u64>() % 10_000);
                }
                None => {}
            }
            if checked.elapsed() >= CHECK_EVERY {
                checked = Instant::now();
                match consumer.fetch_watermarks(&self.topic, 0, CHECK_EVERY) {
                    Ok(_) => sender.set_read_failure(None),
                    Err(err) => sender.set_read_failure(Some(format!(
                        "control topic {} on {}: {err}",
                        self.topic, self.bootstrap
                    ))),
                }
            }
        }
    }

    /// Tombstones the `lapsed` pauses, cancellations and tallies, so compaction keeps the topic
    /// as small as the controls in force. Every worker sweeps; a tombstone written twice is
    /// harmless.
    ///
    /// A tombstone is a resume (or an uncancel), so the sweep runs only right after a poll that
    /// found nothing to read (the follower fetches ahead, so it had read everything the broker
    /// had): a command it had not read could be a new pause of the same route, which the
    /// tombstone would undo. It asks the broker nothing and queues the tombstones without
    /// waiting for them: the follower reads the fleet's presence records too, and a worker that
    /// stops reading loses its lease.
    fn sweep_lapsed(&self, lapsed: Vec<String>) {
        if lapsed.is_empty() {
            return;
        }
        let producer = match self.producer() {
            Ok(producer) => producer,
            Err(err) => {
                tracing::debug!(error = %err, "control: no producer for the lapsed commands' tombstones");
                return;
            }
        };
        let count = lapsed.len();
        for key in lapsed {
            let record = FutureRecord::<[u8], [u8]>::to(&self.topic).key(key.as_bytes());
            if let Err(err) = producer.enqueue(record) {
                tracing::debug!(key, error = %err, "control: a lapsed command's tombstone was not queued");
                return;
            }
        }
        tracing::debug!(count, "control: lapsed commands tombstoned");
    }

    fn unreadable(&self, why: &str, refusal: Option<String>) -> Error {
        let (kind, why) = match refusal {
            Some(said) => (ErrorKind::Authentication, said),
            None => (ErrorKind::Io, why.to_owned()),
        };
        Error::new(
            kind,
            format!(
                "control topic {} on {}: cannot read it ({why}); create it with `share-worker setup`, and let the worker's principal read it",
                self.topic, self.bootstrap
            ),
        )
    }
}

/// Where the records read go: commands to the controls, presence records to the fleet's ledger
/// (ignored when this worker shares no rate through the topic).
struct Reader {
    sender: ControlSender,
    members: Option<MemberReader>,
}

impl Reader {
    /// Applies one record; `false` when it is neither a valid command nor a presence record
    /// (the refusal is logged).
    fn apply(&self, topic: &str, message: &BorrowedMessage<'_>) -> bool {
        match self.try_apply(topic, message) {
            Ok(()) => true,
            Err(why) => {
                self.sender.log_refusal(&why);
                false
            }
        }
    }

    /// Applies one record; `Err` with why when it is neither a valid command nor a presence
    /// record (counted, not logged).
    fn try_apply(&self, topic: &str, message: &BorrowedMessage<'_>) -> Result<(), String> {
        let at = format!("{topic}@{}", message.offset());
        if message
            .key()
            .is_some_and(|key| key.starts_with(crate::fleet::member::PREFIX.as_bytes()))
        {
            if let (Some(members), Some(key)) = (&self.members, message.key()) {
                members.read(
                    message.offset(),
                    key,
                    message.payload(),
                    message.timestamp().to_millis(),
                    &at,
                );
            }
            return Ok(());
        }
        self.sender
            .try_apply_record(message.key(), message.payload(), &at)
    }
}

/// This worker's presence in its fleet, from [`ControlTopic::follow_fleet`]: [`leave`](Self::leave)
/// it when the worker is done, so the others take its share at once (dropped, the leave is only
/// attempted).
#[derive(Debug)]
pub struct FleetPresence(crate::fleet::presence::Presence);

impl FleetPresence {
    /// Stops starting rate-limited records, says so on the control topic and removes this
    /// worker's presence record; waits at most a few seconds for the writes.
    pub async fn leave(self) {
        self.0.leave().await;
    }
}

/// Runs blocking librdkafka calls off the runtime's workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work).await.map_err(|err| {
        Error::new(ErrorKind::Closed, "the control topic's read was cancelled").with_source(err)
    })?
}
