//! What a share-group client hands out and takes back: records acquired under a time-limited
//! lock ([`Delivery`]), how they are settled ([`AckKind`]) and why a settlement did not take
//! effect ([`AckError`]). KIP-932's vocabulary, defined once here; `worker-core`'s `ShareSource`
//! port re-exports it, so a record goes from the socket to its handler without conversion.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

/// Which record a delivery is, and which acquisition of it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DeliveryId {
    /// The topic the record was read from.
    pub topic: Arc<str>,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Which acquisition this is: the broker and share session that hold the lock.
    pub lease: Lease,
}

impl fmt::Debug for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}@{}", self.topic, self.partition, self.offset)
    }
}

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Whether a source's acquisition locks can be renewed ([`KafkaSource::renewal`](crate::KafkaSource::renewal)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Renewal {
    /// RENEW works: a lock can be extended for as long as the handler runs.
    Available,
    /// The broker refuses RENEW for this group (Kafka 4.3's group config
    /// `share.renew.acknowledge.enable = false`): every lock runs out `lock` after acquisition,
    /// whatever the worker does.
    Disabled {
        /// How long a lock lasts.
        lock: Duration,
    },
}

/// Whether the broker writes a group's dead letters itself ([`KafkaSource::broker_dlq`](crate::KafkaSource::broker_dlq)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BrokerDeadLetters {
    /// It does, to `topic`: every record REJECTed and every record archived at the delivery-count
    /// limit, with the broker's provenance headers (`__dlq.errors.*`).
    On {
        /// The dead-letter topic.
        topic: String,
        /// Whether letters carry the record's key and value (never its headers).
        copy_record: bool,
    },
    /// It does not.
    Off {
        /// Why, in one line naming the group, the config and the broker.
        why: String,
    },
}

/// The broker and session that acquired a delivery: acknowledgements must go back to them.
///
/// Opaque: the client sets it and reads it back; a source implemented elsewhere makes its own with
/// [`Lease::new`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The broker node id that acquired the record.
    pub(crate) node: i32,
    /// Increments each time that broker's share session is re-opened: acks for an older session
    /// cannot succeed.
    pub(crate) session: u32,
    /// The record's topic id, when the source knows it (the native client): an acknowledgement
    /// then needs no lookup by name.
    pub(crate) topic_id: Option<uuid::Uuid>,
}

impl Lease {
    /// A lease for a source implemented elsewhere (an in-memory broker, a test double): `node` names the holder, `session` the
    /// generation of its session.
    pub fn new(node: i32, session: u32) -> Self {
        Self {
            node,
            session,
            topic_id: None,
        }
    }

    /// A lease that also names the record's topic id.
    pub(crate) fn with_topic_id(node: i32, session: u32, topic_id: uuid::Uuid) -> Self {
        Self {
            node,
            session,
            topic_id: Some(topic_id),
        }
    }

    pub(crate) fn topic_id(&self) -> Option<uuid::Uuid> {
        self.topic_id
    }

    /// The broker node id that acquired the record.
    pub fn node(&self) -> i32 {
        self.node
    }

    /// The generation of the share session that acquired the record.
    pub fn session(&self) -> u32 {
        self.session
    }
}

/// A record header: a key and an optional value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The header key (Kafka header keys are UTF-8 strings).
    pub key: Arc<str>,
    /// The header value, `None` for a null value.
    pub value: Option<Bytes>,
}

/// One record acquired by this worker under a time-limited lock.
///
/// The payload is a slice of the fetch response: no copy between the socket and the handler.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// Which record and acquisition this is; pass it back to acknowledge or renew.
    pub id: DeliveryId,
    /// The record key.
    pub key: Option<Bytes>,
    /// The record value (the job payload).
    pub value: Option<Bytes>,
    /// The record headers, in order.
    pub headers: Vec<Header>,
    /// The record timestamp, milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// How many times the broker has delivered this record, this time included (starts at 1).
    pub delivery_count: u16,
    /// How long the acquisition lock runs, counted from `acquired_at`.
    pub lock_duration: Duration,
    /// When the fetch that acquired the record returned (a conservative start for the lock).
    pub acquired_at: Instant,
    /// Set when the source acquired the record but could not decode it: the runtime dead-letters
    /// it (reason `decode`) without calling a handler. `key`, `value` and `headers` then hold what
    /// could be recovered (see [`Recovered`]).
    pub undecodable: Option<Arc<Undecodable>>,
}

/// Why an acquired record could not be decoded, and what of it was recovered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undecodable {
    /// What was wrong and where: the batch or the record, and why.
    pub error: String,
    /// What the delivery carries of the record.
    pub recovered: Recovered,
}

/// What an [`Undecodable`] delivery carries of its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Recovered {
    /// The value holds the record exactly as encoded in its batch (Kafka record format v2, length
    /// prefix included): the record framed well but one of its fields did not decode (a header
    /// key that is not UTF-8, a null header key). No key or headers.
    RawRecord,
    /// Nothing: the batch around it did not decode (CRC mismatch, corrupt or oversized
    /// compression, broken framing). No key, value or headers.
    Nothing,
}

impl Recovered {
    /// The lower-case name written in dead letters: `record` or `batch` (what did not decode).
    pub fn as_str(self) -> &'static str {
        match self {
            Recovered::RawRecord => "record",
            Recovered::Nothing => "batch",
        }
    }
}

impl Delivery {
    /// When the acquisition lock ends unless it is renewed.
    pub fn lock_deadline(&self) -> Instant {
        self.acquired_at + self.lock_duration
    }
}

/// How a delivery is settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AckKind {
    /// Processed: the broker marks the record acknowledged.
    Accept,
    /// Give it back: the broker makes the record available again and its delivery count rises.
    Release,
    /// Never deliver again: the broker archives the record.
    Reject,
}

impl AckKind {
    /// The lower-case name used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            AckKind::Accept => "accept",
            AckKind::Release => "release",
            AckKind::Reject => "reject",
        }
    }
}

/// Why an acknowledgement or renewal did not take effect.
///
/// The broker will deliver such a record again (possibly to another worker): a possible duplicate,
/// never a loss.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AckError {
    /// The share session that acquired the record is gone (disconnect, epoch error).
    #[error("the share session that acquired the record was lost")]
    SessionLost,
    /// The record is no longer acquired by this member (lock expired or renewals switched off).
    #[error("the record's acquisition lock was lost")]
    LockLost,
    /// The partition's leader moved; the old leader no longer holds the lock.
    #[error("the partition's leader moved")]
    LeaderMoved,
    /// The source is closed.
    #[error("the source is closed")]
    Closed,
    /// The same offset was acknowledged twice before the first was sent: only the first goes to
    /// the broker, so only the first can be answered.
    #[error("the offset was already acknowledged in the same request")]
    Duplicate,
    /// Any other broker error for the partition.
    #[error("broker error {code}: {message}")]
    Broker {
        /// The Kafka error code.
        code: i16,
        /// The broker's message, or the code's name.
        message: String,
    },
}

impl AckError {
    /// A short stable name for metrics labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            AckError::SessionLost => "session_lost",
            AckError::LockLost => "lock_lost",
            AckError::LeaderMoved => "leader_moved",
            AckError::Closed => "closed",
            AckError::Duplicate => "duplicate",
            AckError::Broker { .. } => "broker",
        }
    }
}
