//! Record batches of a share fetch: decode batch by batch, keep only acquired offsets, and say
//! what happens to every acquired offset.
//!
//! Each acquired offset of a partition ends as exactly one of:
//! - a **record** to deliver (its batch decoded);
//! - an **undecodable** delivery, dead-lettered by the runtime with reason `decode`: its batch did
//!   not decode (CRC mismatch, corrupt or oversized compression, broken framing) or one field of
//!   its record did not (a header key that is not UTF-8), in which case the record's raw bytes
//!   travel with it. Good neighbours are never affected, and nothing loops through RELEASE into
//!   the broker's silent archive;
//! - a **release**: the batch was cut at the end of the response, or the response's decompression
//!   budget ran out before it — it comes whole in a later fetch. The first batch of each partition
//!   may always inflate to the batch cap, so every partition makes progress in every fetch and no
//!   record is released in a loop;
//! - a **gap** (acknowledged as GAP): no data record holds it (control records, compacted or
//!   aborted offsets).
//!
//! Batches are decoded by our own parser (`batch.rs`): every length is checked before anything is
//! sliced or reserved, every header is kept (duplicate keys included), and compressed batches are
//! inflated within a cap per batch and a budget per response (`inflate.rs`).

pub(crate) mod acquired;
mod batch;
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(not(feature = "test-util"), allow(unreachable_pub))]
pub(crate) mod encode;
mod inflate;

use std::sync::Arc;

use bytes::Bytes;

use super::codec::AcquiredRange;
use crate::{Header, Recovered, Undecodable};

pub(crate) use inflate::{InflateBudget, InflateLimits};

/// A partition that has more bad batches than this is garbage from there on.
const MAX_BAD_BATCHES: usize = 1024;
/// An inflated batch smaller than this is never copied out of.
const COPY_OUT_MIN: usize = 16 << 10;

/// One acquired offset that becomes a delivery.
#[derive(Debug, Clone)]
pub(crate) struct AcquiredRecord {
    pub(crate) offset: i64,
    pub(crate) timestamp: i64,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Vec<Header>,
    pub(crate) delivery_count: u16,
    /// Set when the record could not be decoded.
    pub(crate) undecodable: Option<Arc<Undecodable>>,
}

/// What one partition of a response turned into.
#[derive(Debug, Clone, Default)]
pub(crate) struct PartitionRecords {
    /// Deliveries, by offset: decoded records and undecodable ones.
    pub(crate) records: Vec<AcquiredRecord>,
    /// Offset ranges that hold no data record: acknowledge as GAP.
    pub(crate) gaps: Vec<(i64, i64)>,
    /// Offset ranges that did not come whole: release them.
    pub(crate) releases: Vec<(i64, i64)>,
}

/// A stretch of offsets whose batch did not decode, and why.
#[derive(Debug)]
struct Bad {
    first: i64,
    last: i64,
    why: Arc<str>,
}

/// What the walk over the batches found, before the acquired offsets are accounted for.
#[derive(Debug, Default)]
struct Walk {
    records: Vec<AcquiredRecord>,
    bad: Vec<Bad>,
    /// Offsets from here on were in a batch cut at the end of the response.
    cut_from: Option<i64>,
    /// Offsets whose batch did not fit in the response's decompression budget.
    over_budget: Vec<(i64, i64)>,
    /// Whether a batch of this partition was inflated yet (the first one is owed its cap).
    inflated_one: bool,
    /// Batches skipped because they started inside what earlier batches covered.
    repeated: usize,
}

/// Decodes the records of one partition and accounts for every offset of `ranges` (normalised and
/// trimmed, see [`acquired`]).
pub(crate) fn decode_partition(
    records: Option<Bytes>,
    ranges: &[AcquiredRange],
    limits: InflateLimits,
    budget: &mut InflateBudget,
) -> PartitionRecords {
    if ranges.is_empty() {
        return PartitionRecords::default();
    }
    let walk = walk(records.unwrap_or_default(), ranges, limits, budget);
    account(walk, ranges)
}

/// Walks the batches of `buf` in order.
fn walk(
    mut buf: Bytes,
    ranges: &[AcquiredRange],
    limits: InflateLimits,
    budget: &mut InflateBudget,
) -> Walk {
    let mut walk = Walk::default();
    // The last offset of the last complete batch (-1 before the first).
    let mut end: i64 = -1;
    let mut complete = 0usize;
    while !buf.is_empty() {
        let base = buf
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(i64::from_be_bytes);
        let length = buf
            .get(8..12)
            .and_then(|b| b.try_into().ok())
            .map(i32::from_be_bytes);
        let (Some(base), Some(length)) = (base, length) else {
            if complete == 0 {
                walk.lost(end, format!("a record batch cut after {} bytes", buf.len()));
            } else {
                walk.cut(end, None);
            }
            break;
        };
        let Some(total) = usize::try_from(length)
            .ok()
            .filter(|l| *l >= batch::MIN_BATCH_LENGTH)
            .and_then(|l| l.checked_add(12))
        else {
            walk.lost(
                end,
                format!("record batch at offset {base} has length {length}"),
            );
            break;
        };
        if buf.len() < total {
            if complete == 0 {
                // The first batch always comes whole (KIP-74): a cut one will never come whole.
                walk.lost(
                    end,
                    format!(
                        "record batch at offset {base} claims {total} bytes, the response holds {}",
                        buf.len()
                    ),
                );
            } else {
                walk.cut(end, Some(base));
            }
            break;
        }
        let bytes = buf.split_to(total);
        complete += 1;
        let Some(header) = batch::BatchHeader::parse(&bytes) else {
            walk.lost(
                end,
                format!("record batch at offset {base} is shorter than its header"),
            );
            break;
        };
        let stretch = (header.base_offset, header.last_offset);
        if header.magic != 2 {
            walk.bad(
                stretch,
                ranges,
                format!(
                    "record batch {}..={} has message format {} (only 2 is supported)",
                    stretch.0, stretch.1, header.magic
                ),
            );
        } else if let Err(why) = header.check_crc(&bytes) {
            walk.bad(
                stretch,
                ranges,
                format!("record batch {}..={}: {why}", stretch.0, stretch.1),
            );
        } else if header.base_offset <= end {
            // Batches come in offset order: one that starts inside what earlier batches covered
            // repeats them, and decoding it again would only multiply the same records.
            walk.repeated = walk.repeated.saturating_add(1);
        } else {
            // Only a batch that checks out moves the end of what framed well.
            end = header.last_offset;
            if !header.is_control() && acquired::overlaps(ranges, stretch.0, stretch.1) {
                walk.decode(&header, bytes, ranges, limits, budget);
            }
        }
        if walk.bad.len() > MAX_BAD_BATCHES {
            walk.lost(
                end,
                format!("more than {MAX_BAD_BATCHES} bad record batches"),
            );
            break;
        }
    }
    if walk.repeated > 0 {
        tracing::warn!(
            batches = walk.repeated,
            "skipped record batches that repeat offsets of earlier ones in the same response"
        );
    }
    walk
}

impl Walk {
    /// The response ends inside a batch that starts at `base` (unknown when not even its offset
    /// came) after a complete one ending at `end`: what follows comes again in a later fetch.
    fn cut(&mut self, end: i64, base: Option<i64>) {
        let from = end.saturating_add(1);
        self.cut_from = Some(base.map_or(from, |b| b.max(from)));
    }

    /// The batches no longer frame after the complete one ending at `end` (-1: none): every
    /// offset after it is bad.
    fn lost(&mut self, end: i64, why: String) {
        self.bad.push(Bad {
            first: end.saturating_add(1).max(0),
            last: i64::MAX,
            why: Arc::from(why),
        });
    }

    fn bad(&mut self, (first, last): (i64, i64), ranges: &[AcquiredRange], why: String) {
        if acquired::overlaps(ranges, first, last) {
            self.bad.push(Bad {
                first,
                last,
                why: Arc::from(why),
            });
        }
    }

    fn decode(
        &mut self,
        header: &batch::BatchHeader,
        bytes: Bytes,
        ranges: &[AcquiredRange],
        limits: InflateLimits,
        budget: &mut InflateBudget,
    ) {
        let stretch = (header.base_offset, header.last_offset);
        let describe = |why: &str| format!("record batch {}..={}: {why}", stretch.0, stretch.1);
        let Some(codec) = header.codec() else {
            self.bad(stretch, ranges, describe("unknown compression codec"));
            return;
        };
        let section = bytes.slice(batch::HEADER_LEN..);
        let owed = !self.inflated_one;
        self.inflated_one = true;
        let data = match inflate::inflate(&section, codec, limits, budget, owed) {
            Ok(data) => data,
            Err(inflate::InflateError::OverBudget) => {
                self.over_budget.push(stretch);
                return;
            }
            Err(inflate::InflateError::Bad(why)) => {
                self.bad(stretch, ranges, describe(&why));
                return;
            }
        };
        let inflated = data.len();
        let acquired = |offset| acquired::delivery_count(ranges, offset).is_some();
        let mut records = match batch::records(header, data, acquired) {
            Ok(records) => records,
            Err(why) => {
                self.bad(stretch, ranges, describe(&why));
                return;
            }
        };
        // A few records kept out of a large inflated batch would pin all of it: copy them out.
        if codec != inflate::Codec::None && inflated >= COPY_OUT_MIN {
            let kept: usize = records.iter().map(batch::RawRecord::payload_len).sum();
            if kept.saturating_mul(2) < inflated {
                records.iter_mut().for_each(batch::RawRecord::detach);
            }
        }
        for r in records {
            let delivery_count = acquired::delivery_count(ranges, r.offset).unwrap_or(1);
            let delivery_count = u16::try_from(delivery_count.max(1)).unwrap_or(1);
            let (value, undecodable) = match r.undecodable {
                None => (r.value, None),
                Some((error, raw)) => (
                    Some(raw),
                    Some(Arc::new(Undecodable {
                        error,
                        recovered: Recovered::RawRecord,
                    })),
                ),
            };
            let (key, headers) = if undecodable.is_some() {
                (None, Vec::new())
            } else {
                (r.key, r.headers)
            };
            self.records.push(AcquiredRecord {
                offset: r.offset,
                timestamp: r.timestamp,
                key,
                value,
                headers,
                delivery_count,
                undecodable,
            });
        }
    }
}

/// Accounts for every acquired offset: delivered, undecodable, released or a gap.
fn account(mut walk: Walk, ranges: &[AcquiredRange]) -> PartitionRecords {
    let mut out = PartitionRecords::default();
    walk.records.sort_by_key(|r| r.offset);
    walk.records.dedup_by_key(|r| r.offset);
    walk.bad.sort_by_key(|b| b.first);
    walk.over_budget.sort_unstable();
    let mut records = walk.records.into_iter().peekable();
    let mut bad = walk.bad.iter().peekable();
    // Among the bad stretches that start at or before the current offset, the one reaching
    // furthest: the offset is bad if it reaches it.
    let mut cover: Option<&Bad> = None;
    let mut over = walk.over_budget.iter().peekable();
    let mut over_cover: Option<(i64, i64)> = None;
    for range in ranges {
        let mut offset = range.first;
        loop {
            while records.peek().is_some_and(|r| r.offset < offset) {
                records.next();
            }
            while let Some(b) = bad.next_if(|b| b.first <= offset) {
                if cover.is_none_or(|c| b.last > c.last) {
                    cover = Some(b);
                }
            }
            while let Some(o) = over.next_if(|o| o.0 <= offset) {
                if over_cover.is_none_or(|c| o.1 > c.1) {
                    over_cover = Some(*o);
                }
            }
            if let Some(r) = records.next_if(|r| r.offset == offset) {
                out.records.push(r);
            } else if let Some(b) = cover.filter(|b| b.last >= offset) {
                out.records.push(AcquiredRecord {
                    offset,
                    timestamp: -1,
                    key: None,
                    value: None,
                    headers: Vec::new(),
                    delivery_count: u16::try_from(range.delivery_count.max(1)).unwrap_or(1),
                    undecodable: Some(Arc::new(Undecodable {
                        error: b.why.to_string(),
                        recovered: Recovered::Nothing,
                    })),
                });
            } else if over_cover.is_some_and(|o| o.1 >= offset)
                || walk.cut_from.is_some_and(|from| offset >= from)
            {
                push_offset(&mut out.releases, offset);
            } else {
                push_offset(&mut out.gaps, offset);
            }
            if offset == range.last {
                break;
            }
            offset += 1;
        }
    }
    out
}

/// Appends `offset` to ascending ranges, extending the last one when contiguous.
fn push_offset(ranges: &mut Vec<(i64, i64)>, offset: i64) {
    match ranges.last_mut() {
        Some((_, last)) if last.checked_add(1) == Some(offset) => *last = offset,
        _ => ranges.push((offset, offset)),
    }
}

#[cfg(test)]
pub(crate) mod tests;
