//! What a dead letter's headers say: where its record came from, why it was given up on, and
//! what of the record the letter holds. The one place that reads them, for both kinds of letter:
//!
//! - the worker's own ([`KafkaDlqSink`](worker_core::dlq::KafkaDlqSink), `share.dlq.*`): the
//!   record's key, value and headers, plus the worker's reason and error;
//! - a Kafka 4.4 broker's (KIP-1191, `__dlq.errors.*`): the source topic, partition, offset, group
//!   and delivery count, and the broker's message ("rejected by client", "delivery count
//!   exceeded"), with the record's key and value only when the group copies them
//!   (`errors.deadletterqueue.copy.record.enable`), never its headers.
//!
//! Header values are untrusted: numbers parse strictly (anything else reads as absent) and text
//! stays bytes until it is shown.

use rdkafka::message::{BorrowedMessage, Message};
use worker_core::dlq::headers;

use super::scan::{self, Letter, shown};

/// `--reason` of a broker letter for a record a consumer REJECTed. In broker mode that is every
/// letter the worker hands over, whatever its own reason was (that one is in the worker's log).
pub(crate) const BROKER_REJECTED_REASON: &str = "broker_rejected";
/// `--reason` of a broker letter for a record the broker archived at the delivery-count limit
/// (deliveries that ended without an acknowledgement: crashes, lost locks, releases).
pub(crate) const BROKER_DELIVERY_LIMIT_REASON: &str = "broker_delivery_limit";

/// Who wrote a letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Writer {
    /// A worker's dead-letter sink (`share.dlq.*` headers).
    Worker,
    /// The broker's own dead-letter queue (`__dlq.errors.*` headers).
    Broker,
    /// Neither kind of header: someone else wrote it.
    Unknown,
}

/// What a letter holds of its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Content {
    /// The record's key, value and headers (a worker's letter, or one nobody marked).
    Record,
    /// A broker's letter with the record's key and value, without its headers.
    KeyAndValue,
    /// A broker's letter without a value (the group does not copy records, or the broker could
    /// not read it): the record is only in its source topic, at its offset.
    HeadersOnly,
}

/// A header value as the letter has it: bytes, maybe not UTF-8.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Text(pub(crate) Vec<u8>);

impl Text {
    /// The value, if it is UTF-8.
    pub(crate) fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The value for people: escaped and bounded (see [`shown`]).
    pub(crate) fn shown(&self) -> String {
        shown(&self.0)
    }

    /// Whether the value is exactly `text`.
    pub(crate) fn is(&self, text: &str) -> bool {
        self.0 == text.as_bytes()
    }
}

/// Where a letter's record came from and why it was given up on, as its headers say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Provenance {
    pub(crate) writer: Writer,
    pub(crate) content: Content,
    /// The source topic.
    pub(crate) topic: Option<Text>,
    /// The source partition.
    pub(crate) partition: Option<i32>,
    /// The source offset.
    pub(crate) offset: Option<i64>,
    /// The share group.
    pub(crate) group: Option<Text>,
    /// The delivery count when it was given up on.
    pub(crate) delivery_count: Option<u32>,
    /// Why: a worker's `share.dlq.reason` (`handler_error`, `rejected`, ...), or for a broker's
    /// letter [`BROKER_REJECTED_REASON`] or [`BROKER_DELIVERY_LIMIT_REASON`].
    pub(crate) reason: Option<Text>,
    /// The worker's last error, or the broker's message.
    pub(crate) error: Option<Text>,
    /// A worker's letter whose value was cut to fit: the size before, if it says.
    pub(crate) truncated: Option<Option<Text>>,
    /// A worker's letter of a record that did not decode: `record` or `batch`.
    pub(crate) undecodable: Option<Text>,
    /// A worker's letter: when it gave up on the record (RFC 3339).
    pub(crate) failed_at: Option<Text>,
    /// A worker's letter: the worker (client id) that wrote it.
    pub(crate) worker: Option<Text>,
    /// A worker's letter: the handler (route) that failed on it.
    pub(crate) handler: Option<Text>,
}

/// Every header a provenance is read from.
const KEYS: [&str; 19] = [
    headers::TOPIC,
    headers::PARTITION,
    headers::OFFSET,
    headers::GROUP,
    headers::DELIVERY_COUNT,
    headers::REASON,
    headers::ERROR,
    headers::FAILED_AT,
    headers::WORKER,
    headers::HANDLER,
    headers::TRUNCATED,
    headers::ORIGINAL_SIZE,
    headers::UNDECODABLE,
    headers::BROKER_TOPIC,
    headers::BROKER_PARTITION,
    headers::BROKER_OFFSET,
    headers::BROKER_GROUP,
    headers::BROKER_DELIVERY_COUNT,
    headers::BROKER_MESSAGE,
];

/// The provenance of a record as the dead-letter topic hands it over, keeping only the values of
/// the provenance headers; `None` when a header name is not UTF-8 (nothing can be read).
pub(crate) fn of_message(message: &BorrowedMessage<'_>) -> Option<Provenance> {
    let mut found: Vec<(&'static str, Vec<u8>)> = Vec::new();
    scan::each_header(message, |key, value| {
        if let Some(name) = KEYS.iter().find(|k| **k == key) {
            found.retain(|(f, _)| f != name);
            found.push((name, value.unwrap_or_default().to_vec()));
        }
    })
    .ok()?;
    let header = |key: &str| {
        found
            .iter()
            .find(|(f, _)| *f == key)
            .map(|(_, v)| v.as_slice())
    };
    Some(Provenance::read(header, message.payload().is_some()))
}

/// The header names each kind of letter uses for the same facts.
struct Names {
    topic: &'static str,
    partition: &'static str,
    offset: &'static str,
    group: &'static str,
    delivery_count: &'static str,
}

const WORKER: Names = Names {
    topic: headers::TOPIC,
    partition: headers::PARTITION,
    offset: headers::OFFSET,
    group: headers::GROUP,
    delivery_count: headers::DELIVERY_COUNT,
};

const BROKER: Names = Names {
    topic: headers::BROKER_TOPIC,
    partition: headers::BROKER_PARTITION,
    offset: headers::BROKER_OFFSET,
    group: headers::BROKER_GROUP,
    delivery_count: headers::BROKER_DELIVERY_COUNT,
};

/// Whether a header is provenance, of either kind: a replay strips it.
pub(crate) fn is_provenance(key: &str) -> bool {
    headers::is_provenance(key) || key.starts_with(headers::BROKER_PREFIX)
}

impl Letter {
    /// What the letter's headers say about its record.
    pub(crate) fn provenance(&self) -> Provenance {
        Provenance::read(|key| self.header(key), self.value.is_some())
    }
}

impl Provenance {
    /// What headers say, `header` giving the value of the last header of a name; `has_value`:
    /// whether the letter holds a value. A letter with the worker's headers is the worker's even
    /// if it also has a broker's (the sink keeps the record's own headers, which come first).
    pub(crate) fn read<'a>(header: impl Fn(&str) -> Option<&'a [u8]>, has_value: bool) -> Self {
        let text = |key: &str| header(key).map(|v| Text(v.to_vec()));
        let number = |key: &str| std::str::from_utf8(header(key)?).ok()?.parse::<i64>().ok();
        let writer = if header(headers::TOPIC).is_some() || header(headers::REASON).is_some() {
            Writer::Worker
        } else if header(headers::BROKER_TOPIC).is_some()
            || header(headers::BROKER_MESSAGE).is_some()
        {
            Writer::Broker
        } else {
            Writer::Unknown
        };
        let names = if writer == Writer::Broker {
            &BROKER
        } else {
            &WORKER
        };
        let mut provenance = Provenance {
            writer,
            content: Content::Record,
            topic: text(names.topic),
            partition: number(names.partition).and_then(|p| i32::try_from(p).ok()),
            offset: number(names.offset).filter(|o| *o >= 0),
            group: text(names.group),
            delivery_count: number(names.delivery_count).and_then(|c| u32::try_from(c).ok()),
            reason: None,
            error: None,
            truncated: None,
            undecodable: None,
            failed_at: None,
            worker: None,
            handler: None,
        };
        match writer {
            Writer::Broker => {
                let message = text(headers::BROKER_MESSAGE);
                provenance.reason = message.as_ref().and_then(|m| {
                    let reason = if m.is(headers::BROKER_REJECTED) {
                        BROKER_REJECTED_REASON
                    } else if m.is(headers::BROKER_DELIVERY_LIMIT) {
                        BROKER_DELIVERY_LIMIT_REASON
                    } else {
                        return None;
                    };
                    Some(Text(reason.as_bytes().to_vec()))
                });
                provenance.error = message;
                provenance.content = if has_value {
                    Content::KeyAndValue
                } else {
                    Content::HeadersOnly
                };
            }
            Writer::Worker | Writer::Unknown => {
                provenance.reason = text(headers::REASON);
                provenance.error = text(headers::ERROR);
                if header(headers::TRUNCATED) == Some(headers::TRUNCATED_TRUE.as_bytes()) {
                    provenance.truncated = Some(text(headers::ORIGINAL_SIZE));
                }
                provenance.undecodable = text(headers::UNDECODABLE);
                provenance.failed_at = text(headers::FAILED_AT);
                provenance.worker = text(headers::WORKER);
                provenance.handler = text(headers::HANDLER);
            }
        }
        provenance
    }
    /// The source topic, partition and offset, when the letter names all three readably.
    pub(crate) fn source(&self) -> Option<(&str, i32, i64)> {
        Some((
            self.topic.as_ref()?.as_str()?,
            self.partition?,
            self.offset?,
        ))
    }

    /// The reason for people, `?` when the letter gives none.
    pub(crate) fn reason_shown(&self) -> String {
        self.reason
            .as_ref()
            .map_or_else(|| "?".to_owned(), Text::shown)
    }
}

#[cfg(test)]
mod tests {
    use super::super::scan::{LetterHeader, LetterStatus};
    use super::*;

    fn letter(value: Option<&[u8]>, pairs: &[(&str, &[u8])]) -> Letter {
        Letter {
            partition: 0,
            offset: 7,
            key: None,
            value: value.map(<[u8]>::to_vec),
            timestamp_ms: None,
            headers: Ok(pairs
                .iter()
                .map(|(k, v)| LetterHeader {
                    key: (*k).to_owned(),
                    value: Some(v.to_vec()),
                })
                .collect()),
            status: LetterStatus::Pending,
        }
    }

    fn broker_letter(value: Option<&[u8]>, message: &str) -> Letter {
        letter(
            value,
            &[
                (headers::BROKER_TOPIC, b"sms"),
                (headers::BROKER_PARTITION, b"2"),
                (headers::BROKER_OFFSET, b"41"),
                (headers::BROKER_GROUP, b"senders"),
                (headers::BROKER_DELIVERY_COUNT, b"3"),
                (headers::BROKER_MESSAGE, message.as_bytes()),
            ],
        )
    }

    #[test]
    fn a_broker_letter_reads_like_ours() {
        let p = broker_letter(None, headers::BROKER_REJECTED).provenance();
        assert_eq!(p.writer, Writer::Broker);
        assert_eq!(p.content, Content::HeadersOnly);
        assert_eq!(p.source(), Some(("sms", 2, 41)));
        assert_eq!(p.group, Some(Text(b"senders".to_vec())));
        assert_eq!(p.delivery_count, Some(3));
        assert_eq!(p.reason_shown(), BROKER_REJECTED_REASON);
        assert_eq!(
            p.error.as_ref().map(Text::shown).as_deref(),
            Some(headers::BROKER_REJECTED)
        );

        let copied = broker_letter(Some(b"job"), headers::BROKER_DELIVERY_LIMIT).provenance();
        assert_eq!(copied.content, Content::KeyAndValue);
        assert_eq!(copied.reason_shown(), BROKER_DELIVERY_LIMIT_REASON);

        let other = broker_letter(None, "something new").provenance();
        assert_eq!(other.reason, None, "an unknown message is no reason");
        assert_eq!(other.error, Some(Text(b"something new".to_vec())));
    }

    #[test]
    fn a_worker_letter_keeps_its_reason_and_markings() {
        let p = letter(
            Some(b"job"),
            &[
                (headers::TOPIC, b"sms"),
                (headers::PARTITION, b"0"),
                (headers::OFFSET, b"9"),
                (headers::REASON, b"handler_error"),
                (headers::ERROR, b"502"),
                (headers::TRUNCATED, b"true"),
                (headers::ORIGINAL_SIZE, b"9000000"),
            ],
        )
        .provenance();
        assert_eq!((p.writer, p.content), (Writer::Worker, Content::Record));
        assert_eq!(p.source(), Some(("sms", 0, 9)));
        assert_eq!(p.reason_shown(), "handler_error");
        assert_eq!(p.truncated, Some(Some(Text(b"9000000".to_vec()))));
        let nobody = letter(Some(b"x"), &[("traceparent", b"00-a-b-01")]).provenance();
        assert_eq!(
            (nobody.writer, nobody.content),
            (Writer::Unknown, Content::Record)
        );
    }

    #[test]
    fn untrusted_numbers_read_as_absent() {
        for (partition, offset) in [
            (&b"-"[..], &b"x"[..]),
            (b"99999999999", b"-1"),
            (&[0xff][..], b"1e3"),
        ] {
            let p = letter(
                None,
                &[
                    (headers::BROKER_TOPIC, b"sms"),
                    (headers::BROKER_PARTITION, partition),
                    (headers::BROKER_OFFSET, offset),
                ],
            )
            .provenance();
            assert_eq!((p.partition, p.offset, p.source()), (None, None, None));
        }
        let binary = letter(None, &[(headers::BROKER_TOPIC, &[0xff, 0])]).provenance();
        assert_eq!(binary.topic.as_ref().and_then(Text::as_str), None);
        assert_eq!(
            binary.topic.map(|t| t.shown()).as_deref(),
            Some("\u{fffd}\\0")
        );
    }

    #[test]
    fn both_kinds_of_provenance_are_stripped() {
        assert!(is_provenance(headers::REASON));
        assert!(is_provenance(headers::BROKER_MESSAGE));
        assert!(!is_provenance("traceparent"));
        assert!(!is_provenance("__dlq.other"));
    }
}
