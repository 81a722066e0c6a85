//! A dead letter as a Kafka record: the record's key, value and own headers, the provenance
//! headers (the record's timestamp among them), and, when it is cut, the truncation headers. The
//! letter's own timestamp is when the worker gave up on the record.

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;

use super::truncate::{Cut, Sizes, header_size};
use crate::dlq::DeadLetter;
use crate::dlq::headers::{self, is_provenance};
use crate::source;

/// A dead letter ready to be written, whole or cut.
pub(super) struct Letter<'a> {
    pub(super) delivery: &'a source::Delivery,
    own_headers: Vec<&'a source::Header>,
    provenance: Vec<(&'static str, String)>,
    original_size: String,
    /// When the worker gave up on the record, ms since the epoch: the letter's timestamp.
    written_at: i64,
    pub(super) sizes: Sizes,
}

impl<'a> Letter<'a> {
    pub(super) fn new(letter: &'a DeadLetter, group: &str, worker: &str) -> Self {
        let delivery = &letter.delivery;
        let own_headers: Vec<&source::Header> = delivery
            .headers
            .iter()
            .filter(|h| !is_provenance(&h.key))
            .collect();
        let provenance = headers::provenance(letter, group, worker);
        let value_len = delivery.value.as_ref().map_or(0, |v| v.len());
        let original_size = value_len.to_string();
        let sizes = Sizes {
            key: delivery.key.as_ref().map_or(0, |k| k.len()),
            value: value_len,
            own_headers: own_headers
                .iter()
                .map(|h| header_size(h.key.len(), h.value.as_ref().map_or(0, |v| v.len())))
                .sum(),
            provenance: provenance
                .iter()
                .map(|(key, value)| header_size(key.len(), value.len()))
                .sum::<usize>()
                + header_size(headers::TRUNCATED.len(), "true".len())
                + header_size(headers::ORIGINAL_SIZE.len(), original_size.len()),
        };
        let written_at = letter
            .failed_at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
            });
        Self {
            delivery,
            own_headers,
            provenance,
            original_size,
            written_at,
            sizes,
        }
    }

    /// The record for `destination`: the whole letter, or cut and marked as truncated.
    pub(super) fn record<'b>(
        &'b self,
        destination: &'b str,
        cut: Option<Cut>,
    ) -> FutureRecord<'b, [u8], [u8]> {
        let mut record_headers = OwnedHeaders::new_with_capacity(self.own_headers.len() + 12);
        if cut.is_none_or(|cut| cut.own_headers) {
            for header in &self.own_headers {
                record_headers = record_headers.insert(Header {
                    key: &header.key,
                    value: header.value.as_deref(),
                });
            }
        }
        for (key, value) in &self.provenance {
            record_headers = record_headers.insert(Header {
                key,
                value: Some(value.as_bytes()),
            });
        }
        if cut.is_some() {
            record_headers = record_headers
                .insert(Header {
                    key: headers::TRUNCATED,
                    value: Some("true".as_bytes()),
                })
                .insert(Header {
                    key: headers::ORIGINAL_SIZE,
                    value: Some(self.original_size.as_bytes()),
                });
        }
        let mut record = FutureRecord::to(destination).headers(record_headers);
        if let Some(key) = &self.delivery.key {
            record = record.key(prefix(key, cut.map(|cut| cut.key)));
        }
        if let Some(value) = &self.delivery.value {
            record = record.payload(prefix(value, cut.map(|cut| cut.value)));
        }
        record.timestamp(self.written_at)
    }
}

/// The first `len` bytes of `bytes` (all of them for `None`).
fn prefix(bytes: &[u8], len: Option<usize>) -> &[u8] {
    match len {
        Some(len) => &bytes[..len.min(bytes.len())],
        None => bytes,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use bytes::Bytes;
    use rdkafka::message::Headers;

    use super::*;
    use crate::dlq::DlqReason;
    use crate::source::{Delivery, DeliveryId, Lease};

    fn dead_letter() -> DeadLetter {
        DeadLetter {
            delivery: Delivery {
                id: DeliveryId {
                    topic: Arc::from("orders"),
                    partition: 3,
                    offset: 42,
                    lease: Lease::new(1, 7),
                },
                key: Some(Bytes::from_static(b"customer-9")),
                value: Some(Bytes::from_static(b"0123456789")),
                headers: vec![
                    source::Header {
                        key: Arc::from("trace"),
                        value: Some(Bytes::from_static(b"abc")),
                    },
                    source::Header {
                        key: Arc::from(headers::REASON),
                        value: Some(Bytes::from_static(b"stale")),
                    },
                ],
                timestamp: 1_700_000_000_000,
                delivery_count: 2,
                lock_duration: Duration::from_secs(30),
                acquired_at: tokio::time::Instant::now(),
                undecodable: None,
            },
            reason: DlqReason::Decode,
            error: "bad".to_owned(),
            handler: Arc::from("orders"),
            failed_at: SystemTime::UNIX_EPOCH,
        }
    }

    fn header_keys(record: &FutureRecord<'_, [u8], [u8]>) -> Vec<String> {
        record
            .headers
            .as_ref()
            .map(|h| h.iter().map(|h| h.key.to_owned()).collect())
            .unwrap_or_default()
    }

    fn header<'r>(record: &'r FutureRecord<'_, [u8], [u8]>, key: &str) -> Option<&'r [u8]> {
        record
            .headers
            .as_ref()
            .and_then(|h| h.iter().find(|h| h.key == key))
            .and_then(|h| h.value)
    }

    #[test]
    fn a_whole_letter_is_the_record_plus_its_provenance() {
        let dead = dead_letter();
        let letter = Letter::new(&dead, "g", "w");
        let record = letter.record("orders.dlq", None);
        assert_eq!(record.key, Some(&b"customer-9"[..]));
        assert_eq!(record.payload, Some(&b"0123456789"[..]));
        // Written at the time the worker gave up, the record's own time kept in a header.
        assert_eq!(record.timestamp, Some(0));
        assert_eq!(
            header(&record, headers::RECORD_TIMESTAMP),
            Some(&b"1700000000000"[..])
        );
        let keys = header_keys(&record);
        assert_eq!(keys.len(), 12, "{keys:?}");
        assert_eq!(keys[0], "trace");
        assert_eq!(header(&record, headers::REASON), Some(&b"decode"[..]));
        assert_eq!(header(&record, headers::TRUNCATED), None);
        assert_eq!(letter.sizes.value, 10);
        assert_eq!(letter.sizes.key, 10);
        assert_eq!(
            letter.sizes.own_headers,
            header_size(5, 3),
            "provenance not counted"
        );
    }

    #[test]
    fn a_cut_letter_keeps_prefixes_and_says_so() {
        let dead = dead_letter();
        let letter = Letter::new(&dead, "g", "w");
        let record = letter.record(
            "orders.dlq",
            Some(Cut {
                key: 4,
                value: 3,
                own_headers: false,
            }),
        );
        assert_eq!(record.key, Some(&b"cust"[..]));
        assert_eq!(record.payload, Some(&b"012"[..]));
        let keys = header_keys(&record);
        assert!(!keys.contains(&"trace".to_owned()), "{keys:?}");
        assert_eq!(keys.len(), 13, "provenance and truncation: {keys:?}");
        assert_eq!(header(&record, headers::TRUNCATED), Some(&b"true"[..]));
        assert_eq!(header(&record, headers::ORIGINAL_SIZE), Some(&b"10"[..]));
        assert_eq!(header(&record, headers::OFFSET), Some(&b"42"[..]));

        let kept = letter.record(
            "orders.dlq",
            Some(Cut {
                key: 10,
                value: 0,
                own_headers: true,
            }),
        );
        assert_eq!(
            kept.payload,
            Some(&b""[..]),
            "an empty value, not a null one"
        );
        assert!(header_keys(&kept).contains(&"trace".to_owned()));
    }

    #[test]
    fn an_undecodable_record_says_what_did_not_decode() {
        use crate::source::{Recovered, Undecodable};
        for (recovered, said) in [
            (Recovered::RawRecord, &b"record"[..]),
            (Recovered::Nothing, &b"batch"[..]),
        ] {
            let mut dead = dead_letter();
            dead.delivery.undecodable = Some(Arc::new(Undecodable {
                error: "header 0 key is not UTF-8".into(),
                recovered,
            }));
            let letter = Letter::new(&dead, "g", "w");
            let record = letter.record("orders.dlq", None);
            assert_eq!(header(&record, headers::UNDECODABLE), Some(said));
        }
        let whole = dead_letter();
        let letter = Letter::new(&whole, "g", "w");
        let record = letter.record("orders.dlq", None);
        assert_eq!(header(&record, headers::UNDECODABLE), None);
    }
}
