//! Configuration of a [`KafkaSource`](super::KafkaSource) and its builder.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::security::Security;
use crate::{Error, ErrorKind, Result};

/// Settings of a [`KafkaSource`](super::KafkaSource). Build it with [`KafkaSourceBuilder`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct KafkaConfig {
    /// Bootstrap brokers, `host:port`.
    pub bootstrap: Vec<String>,
    /// The share group to join.
    pub group: String,
    /// The topics to subscribe to (at least one).
    pub topics: Vec<String>,
    /// The client id sent in every request header.
    pub client_id: String,
    /// How long a fetch may wait for records (MaxWaitMs) while nothing this worker took from that
    /// broker is still being handled. A fetch sent while acknowledgements are queued does not
    /// wait.
    pub max_wait: Duration,
    /// How long a fetch may wait for records while records from its broker are still being
    /// handled: a broker answers one request per connection at a time, so their
    /// acknowledgements (and renewals) wait at most this long behind it. Shorter: faster
    /// acknowledgements, more empty fetches on an idle topic while handlers run.
    pub busy_max_wait: Duration,
    /// MaxBytes of a fetch.
    pub max_bytes: i32,
    /// The largest response frame accepted from a broker.
    pub max_frame_bytes: usize,
    /// The largest size one record batch may decompress to; a batch that inflates past it is
    /// dead-lettered (reason `decode`), its neighbours unaffected.
    pub max_batch_bytes: usize,
    /// How much one fetch response may decompress in all. A compressed batch beyond it is
    /// released, to come again in a later fetch; the first batch of each partition may always
    /// inflate to `max_batch_bytes`, so every partition makes progress. At least `max_batch_bytes`.
    pub max_fetch_inflate_bytes: usize,
    /// How long a broker may take to answer, beyond a fetch's own wait.
    pub request_timeout: Duration,
    /// How old metadata (leaders) may get before a fetch refreshes it.
    pub metadata_max_age: Duration,
    /// TLS and SASL for every connection (default: plain TCP).
    pub security: Security,
    /// Sets the group's `share.auto.offset.reset` before joining, when `Some`.
    pub offset_reset: Option<OffsetReset>,
}

/// Where a share group without a start position begins reading: the group's
/// `share.auto.offset.reset`. Kafka's default is `latest`, which skips what was produced before
/// the group first read a partition.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum OffsetReset {
    /// From the first record still in the log.
    #[default]
    Earliest,
    /// Only records produced after the group started.
    Latest,
}

impl OffsetReset {
    /// The broker's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OffsetReset::Earliest => "earliest",
            OffsetReset::Latest => "latest",
        }
    }
}

impl KafkaConfig {
    /// Defaults for `bootstrap` (comma-separated `host:port` list) and `group`.
    pub fn new(bootstrap: impl Into<String>, group: impl Into<String>) -> Self {
        Self {
            bootstrap: bootstrap
                .into()
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            group: group.into(),
            topics: Vec::new(),
            client_id: crate::defaults::CLIENT_ID.to_string(),
            max_wait: crate::defaults::MAX_WAIT,
            busy_max_wait: Duration::from_millis(10),
            max_bytes: 50 * 1024 * 1024,
            max_frame_bytes: 100 * 1024 * 1024,
            max_batch_bytes: 64 * 1024 * 1024,
            max_fetch_inflate_bytes: 128 * 1024 * 1024,
            request_timeout: crate::defaults::REQUEST_TIMEOUT,
            metadata_max_age: Duration::from_secs(30),
            security: Security::default(),
            offset_reset: None,
        }
    }

    /// Checks every setting; the message names the key and what was expected.
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &str, expected: &str| {
            Err(Error::new(
                ErrorKind::Config,
                format!("kafka.{key}: expected {expected}"),
            ))
        };
        if self.bootstrap.is_empty() {
            return bad("bootstrap", "at least one host:port");
        }
        if self.group.is_empty() {
            return bad("group", "a non-empty share group id");
        }
        if self.topics.is_empty() || self.topics.iter().any(String::is_empty) {
            return bad("topics", "at least one non-empty topic name");
        }
        if self.client_id.len() > 255 {
            return bad("client_id", "at most 255 bytes");
        }
        if self.max_wait > Duration::from_secs(60) {
            return bad("max_wait", "at most 60s");
        }
        if self.max_bytes <= 0 {
            return bad("max_bytes", "a positive size");
        }
        if self.max_frame_bytes < 1024 {
            return bad("max_frame_bytes", "at least 1024");
        }
        if self.max_batch_bytes < 1024 {
            return bad("max_batch_bytes", "at least 1024");
        }
        if self.max_fetch_inflate_bytes < self.max_batch_bytes {
            return bad("max_fetch_inflate_bytes", "at least max_batch_bytes");
        }
        if self.request_timeout.is_zero() {
            return bad("request_timeout", "a positive duration");
        }
        Ok(())
    }
}

/// Builds a [`KafkaSource`](super::KafkaSource).
///
/// ```no_run
/// # async fn run() -> worker_kafka::Result<()> {
/// use worker_kafka::KafkaSource;
/// let source = KafkaSource::builder("127.0.0.1:9092", "sms-workers")
///     .topic("sms")
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KafkaSourceBuilder {
    config: KafkaConfig,
    /// Names, for a topic and the group, one more topic to subscribe (a delay topic).
    derived: Option<DerivedTopic>,
}

/// Names the topic that goes with a topic of a group.
type DerivedTopic = Arc<dyn Fn(&str, &str) -> Vec<String> + Send + Sync>;

impl fmt::Debug for KafkaSourceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSourceBuilder")
            .field("config", &self.config)
            .field("derived_topics", &self.derived.is_some())
            .finish()
    }
}

impl KafkaSourceBuilder {
    /// A builder with defaults for `bootstrap` and `group`.
    pub fn new(bootstrap: impl Into<String>, group: impl Into<String>) -> Self {
        Self {
            config: KafkaConfig::new(bootstrap, group),
            derived: None,
        }
    }

    /// For every topic, also subscribes to the topics `names(topic, group)` names, worked out
    /// when the source is built (so it sees every [`topic`](Self::topic), before or after this
    /// call): what a worker that moves records to delay topics needs, since they come back
    /// through them. A name already subscribed is not added twice.
    pub fn derived_topics(
        mut self,
        names: impl Fn(&str, &str) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.derived = Some(Arc::new(names));
        self
    }

    /// Subscribes to one more topic.
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.config.topics.push(topic.into());
        self
    }

    /// Sets the client id.
    pub fn client_id(mut self, client_id: impl Into<String>) -> Self {
        self.config.client_id = client_id.into();
        self
    }

    /// Sets how long a fetch may wait for records.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.config.max_wait = max_wait;
        self
    }

    /// Sets how long a fetch may wait for records while records from its broker are still being
    /// handled (default 10 ms; never longer than [`max_wait`](Self::max_wait)): the longest an
    /// acknowledgement waits behind a fetch.
    pub fn busy_max_wait(mut self, wait: Duration) -> Self {
        self.config.busy_max_wait = wait;
        self
    }

    /// Sets MaxBytes of a fetch.
    pub fn max_bytes(mut self, max_bytes: i32) -> Self {
        self.config.max_bytes = max_bytes;
        self
    }

    /// Sets the most one record batch may decompress to (default 64 MiB). A batch that inflates
    /// past it is undecodable: each of its acquired offsets is dead-lettered (reason `decode`)
    /// without a handler call, and its neighbours are delivered as usual.
    pub fn max_batch_bytes(mut self, bytes: usize) -> Self {
        self.config.max_batch_bytes = bytes;
        self
    }

    /// Sets how much one fetch response may decompress in all (default 128 MiB; at least
    /// [`max_batch_bytes`](Self::max_batch_bytes)). A compressed batch beyond it is released and
    /// comes again in a later fetch; the first batch of each partition may always inflate to the
    /// batch cap, so every partition makes progress.
    pub fn max_fetch_inflate_bytes(mut self, bytes: usize) -> Self {
        self.config.max_fetch_inflate_bytes = bytes;
        self
    }

    /// Sets how long a broker may take to answer.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config.request_timeout = timeout;
        self
    }

    /// Secures every connection with `security` (TLS, SASL); default plain TCP.
    pub fn security(mut self, security: Security) -> Self {
        self.config.security = security;
        self
    }

    /// Sets the group's `share.auto.offset.reset` when the source starts, before it joins: where
    /// the group begins reading a partition it has no position in. It is a setting of the group,
    /// so it applies to every member; it needs the `Alter` permission on the group, and a start
    /// without it fails naming the group. Default: leave the group's setting alone.
    pub fn offset_reset(mut self, reset: OffsetReset) -> Self {
        self.config.offset_reset = Some(reset);
        self
    }

    /// The configuration built so far.
    pub fn config(&self) -> &KafkaConfig {
        &self.config
    }

    /// Validates the configuration, connects and joins the group.
    pub async fn build(mut self) -> Result<super::KafkaSource> {
        if let Some(names) = &self.derived {
            let derived: Vec<String> = self
                .config
                .topics
                .iter()
                .flat_map(|topic| names(topic, &self.config.group))
                .collect();
            for topic in derived {
                if !self.config.topics.contains(&topic) {
                    self.config.topics.push(topic);
                }
            }
        }
        super::KafkaSource::connect(self.config).await
    }
}
