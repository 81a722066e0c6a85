//! The control topic through librdkafka: read to its end at start, followed by a thread of its
//! own, written by the commands (`share-worker pause`, [`ControlTopic::pause`]).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::{Cancel, ControlSender, ControlState, Controls, Pause, channel};
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
        blocking(move || this.replay(&sender, timeout).map(drop)).await?;
        Ok((*controls.state()).clone())
    }

    /// Reads every command on the topic (within `timeout`), then follows it on a thread of its
    /// own until every clone of the returned [`Controls`] is dropped. A read that fails later
    /// keeps the last state and shows in [`Controls::read_failure`] until reads work again.
    pub async fn follow(&self, timeout: Duration) -> Result<Controls> {
        let this = self.clone();
        let (sender, mut controls) = channel(ControlState::default());
        let writer = self.clone();
        controls.writer = Some(super::Writer(Arc::new(
            move |key: String, value: Vec<u8>| {
                let writer = writer.clone();
                Box::pin(async move {
                    writer
                        .write(&key, &value, &format!("writing {key}"))
                        .await
                        .map_err(|err| err.to_string())
                }) as super::Written
            },
        )));
        let (consumer, sender) = blocking(move || {
            let consumer = this.replay(&sender, timeout)?;
            Ok((consumer, sender))
        })
        .await?;
        // Made now, so the worker's first command (a breaker's pause) is not delayed by it; a
        // producer that cannot be made says so at that write.
        let _ = self.producer();
        let this = self.clone();
        std::thread::Builder::new()
            .name("share-worker-control".to_owned())
            .spawn(move || this.follow_on(&consumer, &sender))
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
        self.write(&key, &value, &format!("pausing {topic}"))
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
        let until = SystemTime::now().checked_add(duration).ok_or_else(|| {
            self.invalid(&format!("a pause of {duration:?} ends at no valid time"))
        })?;
        self.pause(topic, Some(until), reason, by).await
    }

    /// Resumes `topic` fleet-wide, once the broker has confirmed the command.
    pub async fn resume(&self, topic: &str, reason: &str, by: &str) -> Result<()> {
        let (key, value) = super::resume_record(topic, reason, by, SystemTime::now())
            .map_err(|why| self.invalid(&why))?;
        self.write(&key, &value, &format!("resuming {topic}")).await
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
        self.write(&key, &value, &format!("cancelling job {job_id}"))
            .await?;
        Ok(cancel)
    }

    fn invalid(&self, why: &str) -> Error {
        Error::new(
            ErrorKind::Config,
            format!("control topic {}: a command with {why}", self.topic),
        )
    }

    async fn write(&self, key: &str, value: &[u8], what: &str) -> Result<()> {
        let producer = self.producer()?;
        let what = format!("{what} on control topic {}", self.topic);
        let written = producer
            .write(
                FutureRecord::to(&self.topic)
                    .key(key.as_bytes())
                    .payload(value),
            )
            .await;
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
    /// command to `sender`; returns the consumer, positioned after them.
    fn replay(
        &self,
        sender: &ControlSender,
        timeout: Duration,
    ) -> Result<BaseConsumer<KafkaContext>> {
        let deadline = Instant::now() + timeout;
        let consumer = self.consumer()?;
        let (_, end) = consumer
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
        while next < end {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.unreadable(
                    &format!("read up to offset {next} of {end} within {timeout:?}"),
                    consumer.context().refusal(),
                ));
            }
            match consumer.poll(left.min(POLL)) {
                Some(Ok(message)) => {
                    next = message.offset() + 1;
                    sender.apply_record(
                        message.key(),
                        message.payload(),
                        &format!("{}@{}", self.topic, message.offset()),
                    );
                }
                Some(Err(err)) => {
                    if let Some(said) = consumer.context().refusal() {
                        return Err(self.unreadable(&err.to_string(), Some(said)));
                    }
                }
                None => {}
            }
            if let Ok(positions) = consumer.position()
                && let Some(Offset::Offset(at)) =
                    positions.find_partition(&self.topic, 0).map(|p| p.offset())
            {
                next = next.max(at);
            }
        }
        let state = sender.state.borrow().clone();
        tracing::info!(
            topic = %self.topic,
            commands = end,
            paused = state.pauses(SystemTime::now()).count(),
            "control topic read"
        );
        Ok(consumer)
    }

    /// Follows the topic until every receiver of `sender` is gone.
    fn follow_on(&self, consumer: &BaseConsumer<KafkaContext>, sender: &ControlSender) {
        let mut checked = Instant::now();
        while !sender.state.is_closed() {
            match consumer.poll(POLL) {
                Some(Ok(message)) => {
                    sender.apply_record(
                        message.key(),
                        message.payload(),
                        &format!("{}@{}", self.topic, message.offset()),
                    );
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

/// Runs blocking librdkafka calls off the runtime's workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work).await.map_err(|err| {
        Error::new(ErrorKind::Closed, "the control topic's read was cancelled").with_source(err)
    })?
}
