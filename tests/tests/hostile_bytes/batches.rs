//! Record batches as a broker may send them: every compression, random keys, values and headers
//! (duplicate keys, null values, keys that are not UTF-8 or null), control batches, several
//! batches back to back; and what the decoder must make of each offset.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Context, Result};
use rand::Rng;
use rand::rngs::StdRng;
use worker_kafka::test_util::{RawCompression, RawRecordSpec, encode_batch};

/// How a batch's records section is compressed: Kafka's codecs, snappy both as one raw block
/// and in the xerial framing the Java producer writes (blocks of 32 KiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Codec {
    None,
    Gzip,
    Snappy,
    SnappyXerial,
    Lz4,
    Zstd,
}

pub(crate) const CODECS: [Codec; 6] = [
    Codec::None,
    Codec::Gzip,
    Codec::Snappy,
    Codec::SnappyXerial,
    Codec::Lz4,
    Codec::Zstd,
];

impl Codec {
    /// The codec as `encode_batch` names it, `None` for snappy's xerial framing (written here).
    fn raw(self) -> Option<RawCompression> {
        Some(match self {
            Codec::None => RawCompression::None,
            Codec::Gzip => RawCompression::Gzip,
            Codec::Snappy => RawCompression::Snappy,
            Codec::SnappyXerial => return None,
            Codec::Lz4 => RawCompression::Lz4,
            Codec::Zstd => RawCompression::Zstd,
        })
    }

    /// Attribute bits 0–2.
    fn bits(self) -> u8 {
        match self {
            Codec::None => 0,
            Codec::Gzip => 1,
            Codec::Snappy | Codec::SnappyXerial => 2,
            Codec::Lz4 => 3,
            Codec::Zstd => 4,
        }
    }
}

/// One batch of `records` at `base`, compressed with `codec`.
pub(crate) fn encode(base: i64, records: &[RawRecordSpec], codec: Codec) -> Result<Vec<u8>> {
    match codec.raw() {
        Some(raw) => Ok(encode_batch(base, records, raw)?.to_vec()),
        None => {
            let plain = encode_batch(base, records, RawCompression::None)?;
            let (header, section) = plain.split_at(HEADER_LEN);
            reframe(header, section, codec)
        }
    }
}

/// Bytes before the records section of a batch.
pub(crate) const HEADER_LEN: usize = 61;
/// The CRC-32C covers the batch from here (the attributes) to its end.
const CRC_FROM: usize = 21;
const CONTROL: u8 = 0x20;

/// One batch of a stream.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    pub(crate) base: i64,
    pub(crate) records: Vec<RawRecordSpec>,
    pub(crate) codec: Codec,
    pub(crate) control: bool,
    /// Where the batch starts in the stream.
    pub(crate) at: usize,
    pub(crate) len: usize,
    /// The size of its records section uncompressed: what it inflates to.
    pub(crate) inflated: usize,
}

/// Batches back to back, as one partition of a fetch response holds them.
#[derive(Debug, Clone)]
pub(crate) struct Stream {
    pub(crate) batches: Vec<Batch>,
    pub(crate) bytes: Vec<u8>,
    /// One past the last offset any batch holds.
    pub(crate) end: i64,
}

/// How hostile the records of a stream may be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Header keys that are not UTF-8, or null.
    pub(crate) bad_header_keys: bool,
    /// Most batches in a stream.
    pub(crate) max_batches: usize,
    /// Most records in a batch.
    pub(crate) max_records: usize,
}

fn bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.random()).collect()
}

/// A key or value: null, empty, a few bytes or a few KB.
fn field(rng: &mut StdRng) -> Option<Vec<u8>> {
    match rng.random_range(0..20) {
        0..=3 => None,
        4 | 5 => Some(Vec::new()),
        6 => {
            let len = rng.random_range(1_000..4_000);
            Some(bytes(rng, len))
        }
        _ => {
            let len = rng.random_range(1..40);
            Some(bytes(rng, len))
        }
    }
}

/// A header key from a small set (so keys repeat), or, when allowed, one that does not decode.
fn header_key(rng: &mut StdRng, bad: bool) -> Option<Vec<u8>> {
    if bad && rng.random_ratio(1, 10) {
        return match rng.random_range(0..3) {
            0 => None,
            1 => Some(vec![0xff, 0xfe, b'k']),
            // A cut multi-byte sequence.
            _ => Some(b"trace-\xc3".to_vec()),
        };
    }
    const KEYS: [&str; 5] = ["trace", "retry", "", "tëst", "trace"];
    Some(KEYS[rng.random_range(0..KEYS.len())].as_bytes().to_vec())
}

fn record(rng: &mut StdRng, shape: Shape) -> RawRecordSpec {
    let headers = (0..rng.random_range(0..5))
        .map(|_| {
            let key = header_key(rng, shape.bad_header_keys);
            let value = if rng.random_ratio(1, 4) {
                None
            } else {
                let len = rng.random_range(0..24);
                Some(bytes(rng, len))
            };
            (key, value)
        })
        .collect();
    RawRecordSpec {
        key: field(rng),
        value: field(rng),
        headers,
    }
}

/// Whether a record's header keys all decode (UTF-8, not null).
pub(crate) fn decodable(record: &RawRecordSpec) -> bool {
    record
        .headers
        .iter()
        .all(|(k, _)| k.as_deref().is_some_and(|k| std::str::from_utf8(k).is_ok()))
}

/// Sets the control bit of an encoded batch and fixes its CRC.
pub(crate) fn make_control(batch: &mut [u8]) {
    if let Some(attributes) = batch.get_mut(22) {
        *attributes |= CONTROL;
    }
    fix_crc(batch);
}

/// Recomputes the CRC of the batch `batch` (the whole batch, nothing after it).
pub(crate) fn fix_crc(batch: &mut [u8]) {
    if batch.len() < CRC_FROM {
        return;
    }
    let crc = crc32c::crc32c(&batch[CRC_FROM..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// A stream of 1..=`max_batches` batches starting at a random offset, some offsets between
/// batches left out (as compaction does).
pub(crate) fn stream(rng: &mut StdRng, shape: Shape) -> Result<Stream> {
    let mut offset: i64 = rng.random_range(0..1_000);
    let mut batches = Vec::new();
    let mut out = Vec::new();
    for _ in 0..rng.random_range(1..=shape.max_batches) {
        if rng.random_ratio(1, 5) {
            offset += rng.random_range(1..4);
        }
        let n = rng.random_range(0..=shape.max_records);
        let records: Vec<_> = (0..n).map(|_| record(rng, shape)).collect();
        let codec = CODECS[rng.random_range(0..CODECS.len())];
        let control = rng.random_ratio(1, 8);
        let mut encoded = encode(offset, &records, codec).context("encoding a batch")?;
        let inflated = encode_batch(offset, &records, RawCompression::None)?.len() - HEADER_LEN;
        if control {
            make_control(&mut encoded);
        }
        batches.push(Batch {
            base: offset,
            records,
            codec,
            control,
            at: out.len(),
            len: encoded.len(),
            inflated,
        });
        out.extend_from_slice(&encoded);
        // An empty batch still holds its base offset (last offset delta 0).
        offset += i64::try_from(n.max(1))?;
    }
    Ok(Stream {
        batches,
        bytes: out,
        end: offset,
    })
}

/// What one offset of a valid stream must become.
#[derive(Debug, Clone)]
pub(crate) enum Fate<'a> {
    /// Delivered with these fields.
    Record(&'a RawRecordSpec),
    /// Delivered as undecodable (a header key is not UTF-8 or null).
    Undecodable,
}

/// The fate of every offset a valid stream holds (offsets not listed are gaps), and the offsets
/// that may instead be released when the response's decompression budget runs out: those of
/// compressed data batches after the first data batch the acquired range touches.
pub(crate) fn fates(
    stream: &Stream,
    first: i64,
    last: i64,
) -> (BTreeMap<i64, Fate<'_>>, Vec<(i64, i64)>) {
    let mut fates = BTreeMap::new();
    let mut may_release = Vec::new();
    let mut first_decoded = true;
    for b in &stream.batches {
        let n = i64::try_from(b.records.len().max(1)).unwrap_or(i64::MAX);
        let (from, to) = (b.base, b.base + n - 1);
        let touched = from <= last && to >= first;
        if b.control || !touched {
            continue;
        }
        if !first_decoded && b.codec != Codec::None {
            may_release.push((from, to));
        }
        first_decoded = false;
        for (i, r) in b.records.iter().enumerate() {
            let offset = b.base + i64::try_from(i).unwrap_or(i64::MAX);
            let fate = if decodable(r) {
                Fate::Record(r)
            } else {
                Fate::Undecodable
            };
            fates.insert(offset, fate);
        }
    }
    (fates, may_release)
}

/// Compresses a records section as a producer would.
pub(crate) fn compress(section: &[u8], codec: Codec) -> Result<Vec<u8>> {
    Ok(match codec {
        Codec::None => section.to_vec(),
        Codec::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(section)?;
            e.finish()?
        }
        Codec::Snappy => snap::raw::Encoder::new().compress_vec(section)?,
        Codec::SnappyXerial => {
            let mut out = b"\x82SNAPPY\x00".to_vec();
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            for block in section.chunks(32 << 10) {
                let compressed = snap::raw::Encoder::new().compress_vec(block)?;
                out.extend_from_slice(&u32::try_from(compressed.len())?.to_be_bytes());
                out.extend_from_slice(&compressed);
            }
            out
        }
        Codec::Lz4 => {
            let mut e = lz4::EncoderBuilder::new().build(Vec::new())?;
            e.write_all(section)?;
            let (out, result) = e.finish();
            result?;
            out
        }
        Codec::Zstd => zstd::encode_all(section, 3)?,
    })
}

/// A batch with `header`'s fields (the first [`HEADER_LEN`] bytes of an encoded batch) around
/// `section` (an uncompressed records section, which may lie) compressed with `codec`: length,
/// codec bits and CRC consistent, so the bytes reach the records decoder.
pub(crate) fn reframe(header: &[u8], section: &[u8], codec: Codec) -> Result<Vec<u8>> {
    let mut out = header.get(..HEADER_LEN).context("short header")?.to_vec();
    out.extend_from_slice(&compress(section, codec)?);
    let length = i32::try_from(out.len() - 12)?;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    out[22] = (out[22] & !0x07) | codec.bits();
    fix_crc(&mut out);
    Ok(out)
}
