//! Acknowledgement batches: per-partition offset ranges, merged before they are sent.

use crate::source::AckKind;

/// Acknowledge type 0: the offset holds no data record (control, aborted, compacted).
pub(crate) const GAP: i8 = 0;
/// Acknowledge type 4: renew the acquisition lock.
pub(crate) const RENEW: i8 = 4;

/// The wire value of an acknowledgement kind.
pub(crate) fn wire_type(kind: AckKind) -> i8 {
    match kind {
        AckKind::Accept => 1,
        AckKind::Release => 2,
        AckKind::Reject => 3,
    }
}

/// One acknowledgement batch: offsets `first..=last` and either one type for all of them or one
/// type per offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AckBatch {
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) types: Vec<i8>,
}

/// Merges `(offset, type)` pairs of one partition into batches: ascending, non-overlapping,
/// contiguous offsets in one batch, and a batch whose offsets all share a type collapsed to that
/// one type. A repeated offset keeps its first type.
pub(crate) fn merge(mut acks: Vec<(i64, i8)>) -> Vec<AckBatch> {
    acks.sort_by_key(|&(offset, _)| offset);
    acks.dedup_by_key(|&mut (offset, _)| offset);
    let mut out: Vec<AckBatch> = Vec::new();
    for (offset, kind) in acks {
        match out.last_mut() {
            Some(batch) if batch.last.checked_add(1) == Some(offset) => {
                batch.last = offset;
                batch.types.push(kind);
            }
            _ => out.push(AckBatch {
                first: offset,
                last: offset,
                types: vec![kind],
            }),
        }
    }
    for batch in &mut out {
        if let Some(&first) = batch.types.first()
            && batch.types.iter().all(|&t| t == first)
        {
            batch.types.truncate(1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_offsets_of_one_type_collapse() {
        let acks = (0..100).rev().map(|o| (o, 1)).collect();
        assert_eq!(
            merge(acks),
            vec![AckBatch {
                first: 0,
                last: 99,
                types: vec![1]
            }]
        );
    }

    #[test]
    fn mixed_types_keep_one_type_per_offset() {
        assert_eq!(
            merge(vec![(5, 1), (3, 1), (4, 2)]),
            vec![AckBatch {
                first: 3,
                last: 5,
                types: vec![1, 2, 1]
            }]
        );
    }

    #[test]
    fn holes_split_batches_and_order_is_ascending() {
        assert_eq!(
            merge(vec![(10, 1), (1, 3), (2, 3), (12, 0)]),
            vec![
                AckBatch {
                    first: 1,
                    last: 2,
                    types: vec![3]
                },
                AckBatch {
                    first: 10,
                    last: 10,
                    types: vec![1]
                },
                AckBatch {
                    first: 12,
                    last: 12,
                    types: vec![0]
                },
            ]
        );
    }

    #[test]
    fn duplicates_are_dropped() {
        assert_eq!(merge(vec![(1, 1), (1, 2)]).len(), 1);
    }
}
