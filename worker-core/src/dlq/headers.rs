//! The provenance headers every dead letter carries, next to the record's own headers.
//!
//! | header | value |
//! |---|---|
//! | `share.dlq.topic` | the source topic |
//! | `share.dlq.partition` | the source partition, decimal |
//! | `share.dlq.offset` | the source offset, decimal |
//! | `share.dlq.group` | the share group |
//! | `share.dlq.delivery.count` | the delivery count of the last delivery, decimal |
//! | `share.dlq.reason` | a [`DlqReason`](super::DlqReason) name |
//! | `share.dlq.error` | the last error, at most [`MAX_ERROR_LEN`] bytes |
//! | `share.dlq.failed.at` | when it was given up on, RFC 3339 UTC with milliseconds |
//! | `share.dlq.worker` | the worker (client id) that wrote it |
//! | `share.dlq.handler` | the handler (route) that failed on it |
//!
//! Some letters carry more, saying that their value is not the original record's:
//!
//! | header | value |
//! |---|---|
//! | `share.dlq.truncated` | `true`: the value was cut to fit the dead-letter topic |
//! | `share.dlq.original.size` | the size of the value before it was cut, in bytes, decimal |
//! | `share.dlq.undecodable` | `record`: the value holds the raw encoded bytes of a record that did not decode; `batch`: nothing of the record could be recovered |
//!
//! A truncated letter keeps a prefix of the value; when even an empty value does not fit, the
//! record's own headers are dropped (never the provenance ones) and then the key is cut. Such
//! letters cannot be replayed faithfully, so `share-worker dlq replay` refuses them.
//!
//! A dead-letter topic also holds **marker records**, which are not letters: no key, no value, and
//! these headers. They are written to the partition of the letter they are about, after it (so a
//! reader of a partition learns a letter's fate by reading to the end), and tell readers that the
//! letter is done with:
//!
//! | header | value |
//! |---|---|
//! | `share.dlq.marker` | a [`MarkerKind`] name: `replayed` or `skipped` |
//! | `share.dlq.marker.offset` | the offset of the letter in the same partition, decimal |
//!
//! A Kafka 4.4 broker writes letters of its own for a share group with a dead-letter topic
//! (KIP-1191: `errors.deadletterqueue.topic.name`), with other headers, all UTF-8 text, and
//! nothing of the record's own headers (its key and value only with
//! `errors.deadletterqueue.copy.record.enable`):
//!
//! | header | value |
//! |---|---|
//! | `__dlq.errors.topic` | the source topic (its id when the broker does not know the name) |
//! | `__dlq.errors.partition` | the source partition, decimal |
//! | `__dlq.errors.offset` | the source offset, decimal |
//! | `__dlq.errors.group` | the share group |
//! | `__dlq.errors.delivery.count` | the delivery count, decimal |
//! | `__dlq.errors.message` | [`BROKER_REJECTED`] or [`BROKER_DELIVERY_LIMIT`] (Kafka 4.4.0's words) |

#[cfg(feature = "rdkafka")]
use super::DeadLetter;
#[cfg(feature = "rdkafka")]
use crate::source::Recovered;

/// Prefix shared by every provenance header; replay strips headers with it.
pub const PREFIX: &str = "share.dlq.";
/// The source topic.
pub const TOPIC: &str = "share.dlq.topic";
/// The source partition.
pub const PARTITION: &str = "share.dlq.partition";
/// The source offset.
pub const OFFSET: &str = "share.dlq.offset";
/// The share group.
pub const GROUP: &str = "share.dlq.group";
/// The delivery count of the last delivery.
pub const DELIVERY_COUNT: &str = "share.dlq.delivery.count";
/// Why it was dead-lettered.
pub const REASON: &str = "share.dlq.reason";
/// The last error message.
pub const ERROR: &str = "share.dlq.error";
/// When it was given up on.
pub const FAILED_AT: &str = "share.dlq.failed.at";
/// The worker that wrote it.
pub const WORKER: &str = "share.dlq.worker";
/// The handler that failed on it.
pub const HANDLER: &str = "share.dlq.handler";
/// The record's own timestamp (ms since the epoch), when it has one. The letter is written at
/// [`FAILED_AT`]'s time instead: a producer's back-dated timestamp must not place a letter inside
/// an operator's "written since" (and its irreversible skip).
pub const RECORD_TIMESTAMP: &str = "share.dlq.record.timestamp";

/// `true` when the letter's value (and, when even that did not suffice, headers and key) was cut
/// to fit the dead-letter topic.
pub const TRUNCATED: &str = "share.dlq.truncated";
/// The value of [`TRUNCATED`] on a truncated letter.
pub const TRUNCATED_TRUE: &str = "true";
/// The size in bytes of the value before it was cut.
pub const ORIGINAL_SIZE: &str = "share.dlq.original.size";
/// Present when the record did not decode: [`UNDECODABLE_RECORD`] or [`UNDECODABLE_BATCH`].
pub const UNDECODABLE: &str = "share.dlq.undecodable";
/// [`UNDECODABLE`]: the value holds the raw encoded bytes of the record that did not decode.
pub const UNDECODABLE_RECORD: &str = "record";
/// [`UNDECODABLE`]: the record's batch did not decode; nothing of the record was recovered.
pub const UNDECODABLE_BATCH: &str = "batch";

/// On a marker record: what was done with the letter it is about (a [`MarkerKind`] name).
pub const MARKER: &str = "share.dlq.marker";
/// On a marker record: the offset of its letter in the same partition.
pub const MARKER_OFFSET: &str = "share.dlq.marker.offset";

/// What a marker record says was done with its letter. Either way the letter is done: readers
/// neither replay it again nor count it as pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MarkerKind {
    /// The letter was republished, and the write was confirmed.
    Replayed,
    /// Someone decided it is not to be replayed.
    Skipped,
}

impl MarkerKind {
    /// The header value: `replayed` or `skipped`.
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerKind::Replayed => "replayed",
            MarkerKind::Skipped => "skipped",
        }
    }

    /// The kind named by a [`MARKER`] header value, `None` for anything else.
    pub fn parse(value: &[u8]) -> Option<Self> {
        match value {
            b"replayed" => Some(MarkerKind::Replayed),
            b"skipped" => Some(MarkerKind::Skipped),
            _ => None,
        }
    }
}

impl std::fmt::Display for MarkerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The most bytes of an error message kept in `share.dlq.error`.
pub const MAX_ERROR_LEN: usize = 1024;

/// Prefix of the headers a Kafka 4.4 broker puts on its own dead letters (KIP-1191).
pub const BROKER_PREFIX: &str = "__dlq.errors.";
/// Broker letters: the source topic.
pub const BROKER_TOPIC: &str = "__dlq.errors.topic";
/// Broker letters: the source partition.
pub const BROKER_PARTITION: &str = "__dlq.errors.partition";
/// Broker letters: the source offset.
pub const BROKER_OFFSET: &str = "__dlq.errors.offset";
/// Broker letters: the share group.
pub const BROKER_GROUP: &str = "__dlq.errors.group";
/// Broker letters: the delivery count.
pub const BROKER_DELIVERY_COUNT: &str = "__dlq.errors.delivery.count";
/// Broker letters: why the broker wrote it.
pub const BROKER_MESSAGE: &str = "__dlq.errors.message";
/// [`BROKER_MESSAGE`] of a record a consumer REJECTed.
pub const BROKER_REJECTED: &str = "Offset rejected by client.";
/// [`BROKER_MESSAGE`] of a record the broker archived at the delivery-count limit.
pub const BROKER_DELIVERY_LIMIT: &str = "Offset delivery count exceeded the threshold.";

/// Whether `key` is one of the provenance headers (or any other `share.dlq.` header).
pub fn is_provenance(key: &str) -> bool {
    key.starts_with(PREFIX)
}

/// The provenance headers of `letter`, in the order of the tables above.
#[cfg(feature = "rdkafka")]
pub(crate) fn provenance(
    letter: &DeadLetter,
    group: &str,
    worker: &str,
) -> Vec<(&'static str, String)> {
    let id = &letter.delivery.id;
    let mut all = vec![
        (TOPIC, id.topic.to_string()),
        (PARTITION, id.partition.to_string()),
        (OFFSET, id.offset.to_string()),
        (GROUP, group.to_owned()),
        (DELIVERY_COUNT, letter.delivery.delivery_count.to_string()),
        (REASON, letter.reason.as_str().to_owned()),
        (ERROR, truncate(&letter.error, MAX_ERROR_LEN).to_owned()),
        (
            FAILED_AT,
            humantime::format_rfc3339_millis(letter.failed_at).to_string(),
        ),
        (WORKER, worker.to_owned()),
        (HANDLER, letter.handler.to_string()),
    ];
    if letter.delivery.timestamp >= 0 {
        all.push((RECORD_TIMESTAMP, letter.delivery.timestamp.to_string()));
    }
    if let Some(undecodable) = &letter.delivery.undecodable {
        let what = match undecodable.recovered {
            Recovered::RawRecord => UNDECODABLE_RECORD,
            _ => UNDECODABLE_BATCH,
        };
        all.push((UNDECODABLE, what.to_owned()));
    }
    all
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
#[cfg(feature = "rdkafka")]
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "rdkafka")]
    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("ééé", 3), "é");
        assert_eq!(
            truncate(&"x".repeat(2000), MAX_ERROR_LEN).len(),
            MAX_ERROR_LEN
        );
    }

    #[test]
    fn marker_kinds_round_trip() {
        for kind in [MarkerKind::Replayed, MarkerKind::Skipped] {
            assert_eq!(MarkerKind::parse(kind.as_str().as_bytes()), Some(kind));
        }
        assert_eq!(MarkerKind::parse(b"Replayed"), None);
        assert_eq!(MarkerKind::parse(&[0xff]), None);
    }

    #[test]
    fn recognises_provenance_keys() {
        assert!(is_provenance(REASON));
        assert!(!is_provenance("traceparent"));
        for key in [
            BROKER_TOPIC,
            BROKER_PARTITION,
            BROKER_OFFSET,
            BROKER_GROUP,
            BROKER_DELIVERY_COUNT,
            BROKER_MESSAGE,
        ] {
            assert!(key.starts_with(BROKER_PREFIX), "{key}");
        }
    }
}
