//! The acquired ranges of a response, made safe to act on: sorted, valid, non-overlapping, and no
//! more offsets than the fetch asked for.

use super::super::codec::AcquiredRange;

/// Sorts `acquired`, drops ranges that cannot be (negative, reversed) and clips overlaps. Returns
/// the clean ranges and how many offsets were dropped or clipped (for the log).
pub(crate) fn normalise(acquired: &[AcquiredRange]) -> (Vec<AcquiredRange>, u64) {
    let mut ranges: Vec<AcquiredRange> = acquired.to_vec();
    ranges.sort_by_key(|r| (r.first, r.last));
    let mut out: Vec<AcquiredRange> = Vec::with_capacity(ranges.len());
    let mut dropped: u64 = 0;
    for mut r in ranges {
        if r.first < 0 || r.last < r.first {
            dropped = dropped.saturating_add(1);
            continue;
        }
        if let Some(prev) = out.last()
            && r.first <= prev.last
        {
            dropped = dropped.saturating_add(span(r.first, r.last.min(prev.last)));
            match prev.last.checked_add(1) {
                Some(next) if next <= r.last => r.first = next,
                _ => continue,
            }
        }
        out.push(r);
    }
    (out, dropped)
}

/// How many offsets `first..=last` holds (`first <= last`), saturating.
pub(crate) fn span(first: i64, last: i64) -> u64 {
    u64::try_from(last.saturating_sub(first))
        .unwrap_or(0)
        .saturating_add(1)
}

/// Keeps at most `allowance` offsets of `ranges` (in order) and spends them; the offsets beyond
/// are returned as ranges, to be released at once: a broker may not hand out more than was asked.
pub(crate) fn trim(ranges: &mut Vec<AcquiredRange>, allowance: &mut u64) -> Vec<(i64, i64)> {
    let mut excess = Vec::new();
    let mut kept = Vec::with_capacity(ranges.len());
    for r in ranges.drain(..) {
        let n = span(r.first, r.last);
        if *allowance == 0 {
            excess.push((r.first, r.last));
        } else if n <= *allowance {
            *allowance -= n;
            kept.push(r);
        } else {
            // allowance < n <= i64 range: the cut lies inside the range.
            let cut = r
                .first
                .saturating_add(i64::try_from(*allowance).unwrap_or(i64::MAX));
            kept.push(AcquiredRange { last: cut - 1, ..r });
            excess.push((cut, r.last));
            *allowance = 0;
        }
    }
    *ranges = kept;
    excess
}

/// The delivery count of `offset` if it is acquired (`ranges` normalised).
pub(crate) fn delivery_count(ranges: &[AcquiredRange], offset: i64) -> Option<i16> {
    let idx = ranges.partition_point(|r| r.last < offset);
    ranges
        .get(idx)
        .filter(|r| r.first <= offset)
        .map(|r| r.delivery_count)
}

/// Whether any offset of `first..=last` is acquired (`ranges` normalised).
pub(crate) fn overlaps(ranges: &[AcquiredRange], first: i64, last: i64) -> bool {
    let idx = ranges.partition_point(|r| r.last < first);
    ranges.get(idx).is_some_and(|r| r.first <= last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(first: i64, last: i64) -> AcquiredRange {
        AcquiredRange {
            first,
            last,
            delivery_count: 1,
        }
    }

    #[test]
    fn impossible_ranges_are_dropped_and_overlaps_clipped() {
        let (clean, dropped) = normalise(&[r(10, 20), r(-1, 3), r(5, 2), r(15, 25), r(12, 14)]);
        assert_eq!(clean, vec![r(10, 20), r(21, 25)]);
        assert_eq!(dropped, 2 + 6 + 3);
        let (clean, _) = normalise(&[r(0, i64::MAX), r(i64::MAX, i64::MAX)]);
        assert_eq!(clean, vec![r(0, i64::MAX)]);
    }

    #[test]
    fn offsets_beyond_what_was_asked_are_excess() {
        let mut ranges = vec![r(0, 4), r(10, 19), r(30, 30)];
        let mut allowance = 8;
        let excess = trim(&mut ranges, &mut allowance);
        assert_eq!(ranges, vec![r(0, 4), r(10, 12)]);
        assert_eq!(excess, vec![(13, 19), (30, 30)]);
        assert_eq!(allowance, 0);
        let mut huge = vec![r(0, i64::MAX)];
        let mut allowance = 3;
        assert_eq!(trim(&mut huge, &mut allowance), vec![(3, i64::MAX)]);
        assert_eq!(span(0, i64::MAX), 1 << 63);
    }
}
