//! What one ShareFetch response means, decided without I/O or session state: the records to
//! deliver, the offsets to settle at once (gaps, and releases of what cannot be used), the answers
//! for the acknowledgements the request carried, and whether the broker said something that ends
//! the worker.
//!
//! A response is untrusted: partitions the request did not name are ignored, acquired ranges are
//! cleaned, and offsets beyond what the request asked for are released at once.

use std::collections::{BTreeSet, HashMap};

use uuid::Uuid;

use super::acks::{GAP, wire_type};
use super::codec::FetchedPartition;
use super::error_codes as codes;
use super::records::{self, AcquiredRecord, InflateBudget, InflateLimits};
use crate::AckKind;

/// A topic partition by topic id.
pub(crate) type TopicPartition = (Uuid, i32);

/// What the request asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked<'a> {
    /// Every partition the fetch was for.
    pub(crate) wanted: &'a BTreeSet<TopicPartition>,
    /// The partitions the request listed (new ones, and those carrying acknowledgements).
    pub(crate) listed: &'a BTreeSet<TopicPartition>,
    /// MaxRecords.
    pub(crate) max_records: u32,
}

/// An answer for a partition that no retry can change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FatalAnswer {
    pub(crate) partition: TopicPartition,
    pub(crate) code: i16,
    pub(crate) message: Option<String>,
}

/// What to do with one response.
#[derive(Debug, Default)]
pub(crate) struct Handled {
    /// Records to deliver, undecodable ones included.
    pub(crate) records: Vec<(Uuid, i32, AcquiredRecord)>,
    /// Offset ranges to acknowledge at once, nobody waiting: `(partition, first, last, type)`.
    pub(crate) settle: Vec<(TopicPartition, i64, i64, i8)>,
    /// The acknowledgement result of each listed partition: error code and message.
    pub(crate) ack_results: HashMap<TopicPartition, (i16, Option<String>)>,
    /// A partition's leader moved: refresh metadata.
    pub(crate) leader_moved: bool,
    /// The first answer that ends the worker, if any.
    pub(crate) fatal: Option<FatalAnswer>,
}

/// Works out what `topics` (the response's partitions by topic) mean for a request that `asked`.
pub(crate) fn handle(
    topics: Vec<(Uuid, Vec<FetchedPartition>)>,
    asked: Asked<'_>,
    inflate: InflateLimits,
    inflate_budget: usize,
    node: i32,
) -> Handled {
    let mut out = Handled::default();
    let mut allowance = u64::from(asked.max_records);
    let mut budget = InflateBudget::new(inflate_budget);
    let release = wire_type(AckKind::Release);
    for (topic_id, parts) in topics {
        for part in parts {
            let tp = (topic_id, part.partition);
            if asked.listed.contains(&tp) {
                out.ack_results
                    .insert(tp, (part.ack_error_code, part.ack_error_message.clone()));
            }
            if part.error_code != codes::NONE {
                if codes::leader_moved(part.error_code) {
                    out.leader_moved = true;
                }
                if codes::fatal_kind(part.error_code).is_some() && out.fatal.is_none() {
                    out.fatal = Some(FatalAnswer {
                        partition: tp,
                        code: part.error_code,
                        message: part.error_message.clone(),
                    });
                }
                tracing::warn!(node, %topic_id, partition = part.partition, code = part.error_code, leader = part.leader_id, message = ?part.error_message, "share fetch partition error");
            }
            if !asked.wanted.contains(&tp) {
                if !part.acquired.is_empty() || part.records.is_some() {
                    tracing::warn!(node, %topic_id, partition = part.partition, "the broker answered for a partition this fetch did not ask for: ignoring its records");
                }
                continue;
            }
            let (mut ranges, dropped) = records::acquired::normalise(&part.acquired);
            if dropped > 0 {
                tracing::warn!(node, %topic_id, partition = part.partition, offsets = dropped, "the broker named impossible or overlapping acquired ranges: ignoring those offsets");
            }
            for (first, last) in records::acquired::trim(&mut ranges, &mut allowance) {
                out.settle.push((tp, first, last, release));
            }
            let decoded = records::decode_partition(part.records, &ranges, inflate, &mut budget);
            out.settle
                .extend(decoded.gaps.into_iter().map(|(f, l)| (tp, f, l, GAP)));
            out.settle.extend(
                decoded
                    .releases
                    .into_iter()
                    .map(|(f, l)| (tp, f, l, release)),
            );
            out.records.extend(
                decoded
                    .records
                    .into_iter()
                    .map(|r| (topic_id, part.partition, r)),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::codec::AcquiredRange;
    use crate::records::encode::{RawCompression, RawRecordSpec, encode_batch};

    const LIMITS: InflateLimits = InflateLimits {
        max_batch_bytes: 1 << 20,
    };

    fn partition(index: i32, first: i64, last: i64, records: Option<Bytes>) -> FetchedPartition {
        FetchedPartition {
            partition: index,
            records,
            acquired: vec![AcquiredRange {
                first,
                last,
                delivery_count: 1,
            }],
            ..FetchedPartition::default()
        }
    }

    fn batch(first: i64, n: usize) -> Bytes {
        let specs: Vec<RawRecordSpec> = (0..n)
            .map(|i| RawRecordSpec::value(format!("v{i}")))
            .collect();
        encode_batch(first, &specs, RawCompression::None).expect("in memory")
    }

    #[test]
    fn partitions_not_asked_for_are_ignored_and_offsets_beyond_the_request_released() {
        let t = Uuid::from_u128(1);
        let wanted = BTreeSet::from([(t, 0)]);
        let listed = BTreeSet::from([(t, 0)]);
        let asked = Asked {
            wanted: &wanted,
            listed: &listed,
            max_records: 3,
        };
        let topics = vec![(
            t,
            vec![
                partition(0, 0, 9, Some(batch(0, 10))),
                partition(7, 0, 1_000_000, Some(batch(0, 10))),
            ],
        )];
        let handled = handle(topics, asked, LIMITS, 1 << 20, 1);
        let offsets: Vec<(i32, i64)> = handled
            .records
            .iter()
            .map(|(_, p, r)| (*p, r.offset))
            .collect();
        assert_eq!(offsets, vec![(0, 0), (0, 1), (0, 2)]);
        assert_eq!(
            handled.settle,
            vec![((t, 0), 3, 9, 2)],
            "the excess is released"
        );
        assert_eq!(
            handled.ack_results.keys().collect::<Vec<_>>(),
            vec![&(t, 0)]
        );
        assert!(handled.fatal.is_none());
    }

    #[test]
    fn the_request_limit_spans_partitions() {
        let t = Uuid::from_u128(1);
        let wanted = BTreeSet::from([(t, 0), (t, 1)]);
        let asked = Asked {
            wanted: &wanted,
            listed: &BTreeSet::new(),
            max_records: 4,
        };
        let topics = vec![(
            t,
            vec![
                partition(0, 0, 2, Some(batch(0, 3))),
                partition(1, 0, 2, Some(batch(0, 3))),
            ],
        )];
        let handled = handle(topics, asked, LIMITS, 1 << 20, 1);
        assert_eq!(handled.records.len(), 4);
        assert_eq!(handled.settle, vec![((t, 1), 1, 2, 2)]);
    }

    #[test]
    fn answers_that_end_the_worker_and_moved_leaders_are_reported() {
        let t = Uuid::from_u128(1);
        let wanted = BTreeSet::from([(t, 0), (t, 1)]);
        let asked = Asked {
            wanted: &wanted,
            listed: &BTreeSet::new(),
            max_records: 10,
        };
        let mut denied = partition(0, 0, 0, None);
        denied.acquired.clear();
        denied.error_code = codes::TOPIC_AUTHORIZATION_FAILED;
        denied.error_message = Some("no".into());
        let mut moved = partition(1, 0, 0, None);
        moved.acquired.clear();
        moved.error_code = codes::NOT_LEADER_OR_FOLLOWER;
        let handled = handle(vec![(t, vec![denied, moved])], asked, LIMITS, 1 << 20, 1);
        assert!(handled.leader_moved);
        assert_eq!(
            handled.fatal,
            Some(FatalAnswer {
                partition: (t, 0),
                code: codes::TOPIC_AUTHORIZATION_FAILED,
                message: Some("no".into()),
            })
        );
    }
}
