//! Record batches of a share fetch: decode, keep only acquired offsets, find the gaps.
//!
//! Batches are decoded with `kafka-protocol`'s [`RecordBatchDecoder`], with our own decompression so
//! that a batch can never inflate past a size cap (no decompression bombs) and a forged record count
//! cannot make the decoder reserve more than the decompressed bytes can hold.

use std::io::Read;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use kafka_protocol::records::{Compression, RecordBatchDecoder};

use super::codec::AcquiredRange;
use super::wire::malformed;
use crate::Result;
use crate::source::Header;

/// The most acquired offsets one partition of one response may name.
pub(crate) const MAX_ACQUIRED_PER_PARTITION: u64 = 1 << 20;
/// The smallest encoded record (v2): length, attributes, timestamp and offset deltas, key, value
/// and header count, one byte each.
const MIN_RECORD_BYTES: usize = 7;
/// Batch header size up to and including the record count.
const BATCH_HEADER: usize = 61;

/// One acquired data record, ready to become a delivery.
#[derive(Debug, Clone)]
pub(crate) struct AcquiredRecord {
    pub(crate) offset: i64,
    pub(crate) timestamp: i64,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Vec<Header>,
    pub(crate) delivery_count: u16,
}

/// The outcome of one partition: records to deliver, and acquired offsets without a data record
/// (to be acknowledged as GAP).
#[derive(Debug, Clone, Default)]
pub(crate) struct PartitionRecords {
    pub(crate) records: Vec<AcquiredRecord>,
    pub(crate) gaps: Vec<i64>,
}

/// Sorted, validated acquired ranges.
fn normalise(acquired: &[AcquiredRange]) -> Result<Vec<AcquiredRange>> {
    let mut ranges: Vec<AcquiredRange> = acquired.to_vec();
    ranges.sort_by_key(|r| r.first);
    let mut total: u64 = 0;
    let mut prev_last: Option<i64> = None;
    for r in &ranges {
        if r.first < 0 || r.last < r.first {
            return Err(malformed(format_args!(
                "acquired range {}..={}",
                r.first, r.last
            )));
        }
        if prev_last.is_some_and(|p| r.first <= p) {
            return Err(malformed("overlapping acquired ranges"));
        }
        prev_last = Some(r.last);
        total = total.saturating_add((r.last - r.first) as u64 + 1);
    }
    if total > MAX_ACQUIRED_PER_PARTITION {
        return Err(malformed(format_args!(
            "{total} acquired offsets in one partition"
        )));
    }
    Ok(ranges)
}

/// The delivery count of `offset` if it is acquired.
fn acquired_count(ranges: &[AcquiredRange], offset: i64) -> Option<i16> {
    let idx = ranges.partition_point(|r| r.last < offset);
    ranges
        .get(idx)
        .filter(|r| r.first <= offset)
        .map(|r| r.delivery_count)
}

fn overlaps(ranges: &[AcquiredRange], first: i64, last: i64) -> bool {
    let idx = ranges.partition_point(|r| r.last < first);
    ranges.get(idx).is_some_and(|r| r.first <= last)
}

fn read_i64(b: &[u8], at: usize) -> Option<i64> {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(i64::from_be_bytes)
}

fn read_i32(b: &[u8], at: usize) -> Option<i32> {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(i32::from_be_bytes)
}

fn read_i16(b: &[u8], at: usize) -> Option<i16> {
    b.get(at..at + 2)
        .and_then(|s| s.try_into().ok())
        .map(i16::from_be_bytes)
}

fn bounded_read(mut reader: impl Read, limit: usize, what: &str) -> anyhow::Result<Bytes> {
    let mut out = Vec::new();
    (&mut reader)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| anyhow::anyhow!("{what} decompression failed: {e}"))?;
    if out.len() > limit {
        anyhow::bail!("{what} batch inflates past {limit} bytes");
    }
    Ok(Bytes::from(out))
}

/// Snappy as Kafka writes it: the xerial framing (magic, then length-prefixed raw blocks), or one
/// raw block.
fn snappy(input: &[u8], limit: usize) -> anyhow::Result<Bytes> {
    const MAGIC: &[u8] = b"\x82SNAPPY\x00";
    let mut out = Vec::new();
    let raw_block = |block: &[u8], out: &mut Vec<u8>| -> anyhow::Result<()> {
        let len = snap::raw::decompress_len(block)?;
        if out.len().saturating_add(len) > limit {
            anyhow::bail!("snappy batch inflates past {limit} bytes");
        }
        let start = out.len();
        out.resize(start + len, 0);
        let written = snap::raw::Decoder::new().decompress(block, &mut out[start..])?;
        out.truncate(start + written);
        Ok(())
    };
    if input.starts_with(MAGIC) {
        let mut rest = input.get(16..).unwrap_or_default();
        while !rest.is_empty() {
            let len = rest
                .get(..4)
                .and_then(|s| s.try_into().ok())
                .map(u32::from_be_bytes)
                .ok_or_else(|| anyhow::anyhow!("truncated snappy block length"))?
                as usize;
            let block = rest
                .get(4..4 + len)
                .ok_or_else(|| anyhow::anyhow!("truncated snappy block"))?;
            raw_block(block, &mut out)?;
            rest = rest.get(4 + len..).unwrap_or_default();
        }
    } else {
        raw_block(input, &mut out)?;
    }
    Ok(Bytes::from(out))
}

/// Inflates the records section of one batch, at most `limit` bytes, and checks that the batch's
/// record count fits in what came out.
fn inflate(
    data: &Bytes,
    compression: Compression,
    limit: usize,
    count: usize,
) -> anyhow::Result<Bytes> {
    let out = match compression {
        Compression::None => data.clone(),
        Compression::Gzip => bounded_read(flate2::read::GzDecoder::new(&data[..]), limit, "gzip")?,
        Compression::Zstd => {
            bounded_read(zstd::stream::read::Decoder::new(&data[..])?, limit, "zstd")?
        }
        Compression::Lz4 => bounded_read(lz4::Decoder::new(&data[..])?, limit, "lz4")?,
        Compression::Snappy => snappy(data, limit)?,
    };
    if count.saturating_mul(MIN_RECORD_BYTES) > out.len() {
        anyhow::bail!("{count} records cannot fit in {} bytes", out.len());
    }
    Ok(out)
}

/// Decodes the records of one partition and keeps those inside `acquired`. Every acquired offset
/// ends up either as a record or as a gap. `max_batch_bytes` caps one decompressed batch.
pub(crate) fn decode_partition(
    records: Option<Bytes>,
    acquired: &[AcquiredRange],
    max_batch_bytes: usize,
) -> Result<PartitionRecords> {
    let ranges = normalise(acquired)?;
    let mut out = PartitionRecords::default();
    if ranges.is_empty() {
        return Ok(out);
    }
    let mut buf = records.unwrap_or_default();
    while buf.remaining() >= BATCH_HEADER {
        let (Some(base), Some(len)) = (read_i64(&buf, 0), read_i32(&buf, 8)) else {
            break;
        };
        let Ok(len) = usize::try_from(len) else {
            return Err(malformed(format_args!("negative batch length {len}")));
        };
        let total = len.saturating_add(12);
        if buf.remaining() < total {
            // A partial batch at the end of the response: the broker cut it, nothing to decode.
            break;
        }
        let batch = buf.split_to(total);
        let magic = batch.get(16).copied().unwrap_or_default();
        if magic != 2 {
            return Err(malformed(format_args!("record batch magic {magic}")));
        }
        let attributes = read_i16(&batch, 21).unwrap_or_default();
        let last_delta = read_i32(&batch, 23).unwrap_or_default();
        let count = read_i32(&batch, 57).unwrap_or_default();
        let control = attributes & 0x20 != 0;
        let last = base.saturating_add(i64::from(last_delta.max(0)));
        if control || !overlaps(&ranges, base, last) {
            continue;
        }
        let count = usize::try_from(count).map_err(|_| malformed("negative record count"))?;
        let mut slice = batch;
        // Defence in depth: the crate's record decoder does unchecked arithmetic on offset and
        // timestamp deltas (a panic in debug builds); a panic there is a malformed batch, not a crash.
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            RecordBatchDecoder::decode_with_custom_compression(
                &mut slice,
                Some(|data: &mut Bytes, compression| {
                    inflate(data, compression, max_batch_bytes, count)
                }),
            )
        }))
        .map_err(|_| {
            malformed(format_args!(
                "record batch at offset {base} broke the decoder"
            ))
        })?;
        let set =
            decoded.map_err(|e| malformed(format_args!("record batch at offset {base}: {e}")))?;
        for record in set.records {
            let Some(delivery_count) = acquired_count(&ranges, record.offset) else {
                continue;
            };
            if record.control {
                continue;
            }
            out.records.push(AcquiredRecord {
                offset: record.offset,
                timestamp: record.timestamp,
                key: record.key,
                value: record.value,
                headers: record
                    .headers
                    .into_iter()
                    .map(|(k, v)| Header {
                        key: Arc::from(k.as_str()),
                        value: v,
                    })
                    .collect(),
                delivery_count: u16::try_from(delivery_count.max(1)).unwrap_or(1),
            });
        }
    }
    out.records.sort_by_key(|r| r.offset);
    out.records.dedup_by_key(|r| r.offset);
    let mut have = out.records.iter().map(|r| r.offset).peekable();
    for range in &ranges {
        for offset in range.first..=range.last {
            while have.peek().is_some_and(|&o| o < offset) {
                have.next();
            }
            if have.peek() != Some(&offset) {
                out.gaps.push(offset);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use bytes::BytesMut;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

    use super::*;

    pub(crate) fn batch(
        first: i64,
        n: i64,
        compression: Compression,
    ) -> Result<Bytes, Box<dyn std::error::Error>> {
        batch_with(first, n, compression, |offset| {
            Bytes::from(format!("value-{offset}"))
        })
    }

    pub(crate) fn batch_with(
        first: i64,
        n: i64,
        compression: Compression,
        value: impl Fn(i64) -> Bytes,
    ) -> Result<Bytes, Box<dyn std::error::Error>> {
        let records: Vec<Record> = (first..first + n)
            .map(|offset| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                sequence: -1,
                timestamp_type: TimestampType::Creation,
                offset,
                timestamp: offset.wrapping_add(1_000),
                key: Some(Bytes::from(format!("k{offset}"))),
                value: Some(value(offset)),
                headers: [(
                    StrBytes::from_static_str("h"),
                    Some(Bytes::from_static(b"v")),
                )]
                .into_iter()
                .collect(),
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )?;
        Ok(buf.freeze())
    }

    fn range(first: i64, last: i64, delivery_count: i16) -> AcquiredRange {
        AcquiredRange {
            first,
            last,
            delivery_count,
        }
    }

    #[test]
    fn only_acquired_offsets_are_delivered_and_missing_ones_are_gaps()
    -> Result<(), Box<dyn std::error::Error>> {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut all = BytesMut::new();
            all.extend_from_slice(&batch(0, 10, compression)?);
            all.extend_from_slice(&batch(12, 5, compression)?);
            let out = decode_partition(Some(all.freeze()), &[range(3, 13, 2)], 1 << 20)?;
            let offsets: Vec<i64> = out.records.iter().map(|r| r.offset).collect();
            assert_eq!(
                offsets,
                vec![3, 4, 5, 6, 7, 8, 9, 12, 13],
                "{compression:?}"
            );
            assert_eq!(out.gaps, vec![10, 11]);
            assert_eq!(out.records[0].delivery_count, 2);
            assert_eq!(out.records[0].value.as_deref(), Some(&b"value-3"[..]));
            assert_eq!(&*out.records[0].headers[0].key, "h");
        }
        Ok(())
    }

    #[test]
    fn overflowing_deltas_are_errors_not_panics() -> Result<(), Box<dyn std::error::Error>> {
        let mut data = batch_with(i64::MAX - 2, 1, Compression::None, |_| {
            Bytes::from_static(b"x")
        })?
        .to_vec();
        // The only record, after the 61-byte header: length, attributes, timestamp delta, offset
        // delta (one byte each here). A zig-zag 0x7e is +63: base + 63 overflows.
        data[61 + 3] = 0x7e;
        let crc = crc32c::crc32c(&data[21..]);
        data[17..21].copy_from_slice(&crc.to_be_bytes());
        let acquired = [range(i64::MAX - 2, i64::MAX - 1, 1)];
        let _ = decode_partition(Some(Bytes::from(data)), &acquired, 1 << 16);
        Ok(())
    }

    #[test]
    fn no_records_means_all_gaps() -> crate::Result<()> {
        let out = decode_partition(None, &[range(5, 7, 1)], 1 << 20)?;
        assert_eq!(out.gaps, vec![5, 6, 7]);
        Ok(())
    }

    #[test]
    fn absurd_acquired_ranges_are_errors() {
        assert!(decode_partition(None, &[range(0, i64::MAX, 1)], 1 << 20).is_err());
        assert!(decode_partition(None, &[range(5, 3, 1)], 1 << 20).is_err());
    }

    #[test]
    fn batches_that_inflate_past_the_cap_are_errors() -> Result<(), Box<dyn std::error::Error>> {
        for compression in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let data = batch_with(0, 1, compression, |_| Bytes::from(vec![0u8; 10_000]))?;
            assert!(data.len() < 1_000, "{compression:?}");
            assert!(decode_partition(Some(data.clone()), &[range(0, 0, 1)], 4_096).is_err());
            assert!(decode_partition(Some(data), &[range(0, 0, 1)], 20_000).is_ok());
        }
        Ok(())
    }

    #[test]
    fn uncompressed_payloads_are_slices_of_the_response() -> Result<(), Box<dyn std::error::Error>>
    {
        let data = batch(0, 3, Compression::None)?;
        let range_of_data = data.as_ptr() as usize..data.as_ptr() as usize + data.len();
        let out = decode_partition(Some(data.clone()), &[range(0, 2, 1)], 1 << 20)?;
        let value = out.records[1]
            .value
            .as_ref()
            .ok_or("record 1 has no value")?;
        assert!(range_of_data.contains(&(value.as_ptr() as usize)));
        Ok(())
    }
}
