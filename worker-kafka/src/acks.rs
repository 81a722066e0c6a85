//! Acknowledgement batches: per-partition offset ranges, merged before they are sent.

use crate::AckKind;

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

/// The longest stretch merged into one batch with a type per offset: longer stretches of mixed
/// types go out as separate (adjacent) batches, so a batch's type list stays small.
const MAX_MIXED_SPAN: i64 = 1024;

/// Merges `(first, last, type)` ranges of one partition into batches: ascending, non-overlapping,
/// contiguous ranges in one batch, a batch whose offsets all share a type collapsed to that one
/// type. Ranges that overlap an earlier one are dropped (callers answer them as duplicates first).
pub(crate) fn merge(mut acks: Vec<(i64, i64, i8)>) -> Vec<AckBatch> {
    acks.sort_by_key(|&(first, _, _)| first);
    let mut out: Vec<AckBatch> = Vec::new();
    for (first, last, kind) in acks {
        if last < first {
            continue;
        }
        if let Some(batch) = out.last_mut() {
            if first <= batch.last {
                continue;
            }
            let uniform = match batch.types.as_slice() {
                [only] => Some(*only),
                _ => None,
            };
            if batch.last.checked_add(1) == Some(first) {
                if uniform == Some(kind) {
                    batch.last = last;
                    continue;
                }
                if last.saturating_sub(batch.first) < MAX_MIXED_SPAN {
                    if let Some(t) = uniform {
                        batch.types = vec![t; (batch.last - batch.first + 1) as usize];
                    }
                    batch
                        .types
                        .extend(std::iter::repeat_n(kind, (last - first + 1) as usize));
                    batch.last = last;
                    continue;
                }
            }
        }
        out.push(AckBatch {
            first,
            last,
            types: vec![kind],
        });
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
        let acks = (0..100).rev().map(|o| (o, o, 1)).collect();
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
            merge(vec![(5, 5, 1), (3, 3, 1), (4, 4, 2)]),
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
            merge(vec![(10, 10, 1), (1, 1, 3), (2, 2, 3), (12, 12, 0)]),
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
    fn overlaps_are_dropped() {
        assert_eq!(merge(vec![(1, 1, 1), (1, 1, 2)]).len(), 1);
        assert_eq!(
            merge(vec![(1, 5, 1), (3, 9, 2)]),
            vec![AckBatch {
                first: 1,
                last: 5,
                types: vec![1]
            }]
        );
    }

    #[test]
    fn long_ranges_stay_one_type_and_mixed_stretches_stay_small() {
        let batches = merge(vec![
            (0, 1_000_000, 0),
            (1_000_001, 1_000_001, 1),
            (1_000_002, 1_000_003, 2),
        ]);
        assert_eq!(
            batches,
            vec![
                AckBatch {
                    first: 0,
                    last: 1_000_000,
                    types: vec![0]
                },
                AckBatch {
                    first: 1_000_001,
                    last: 1_000_003,
                    types: vec![1, 2, 2]
                },
            ]
        );
        let huge = merge(vec![(0, i64::MAX - 1, 0), (i64::MAX, i64::MAX, 1)]);
        assert_eq!(huge.len(), 2);
    }
}
