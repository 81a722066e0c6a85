//! One record batch (message format v2): its header, its CRC, and its records.
//!
//! Every length is checked against the bytes that remain before anything is sliced, nothing is
//! reserved from a count the bytes claim, and all arithmetic on wire values is checked: a batch
//! that lies is an error naming what is wrong, never a panic.

use std::sync::Arc;

use bytes::{Buf, Bytes};

use super::inflate::Codec;
use crate::Header;

/// Bytes before the records: base offset up to and including the record count.
pub(crate) const HEADER_LEN: usize = 61;
/// The smallest value of the batch length field (the header after the length itself).
pub(crate) const MIN_BATCH_LENGTH: usize = HEADER_LEN - 12;
/// Where the CRC-covered part starts (the attributes).
const CRC_FROM: usize = 21;

const CONTROL: i16 = 0x20;
const LOG_APPEND_TIME: i16 = 0x08;

/// The fixed header of one batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchHeader {
    pub(crate) base_offset: i64,
    /// The last offset the batch claims (base + last offset delta, never below base).
    pub(crate) last_offset: i64,
    pub(crate) magic: i8,
    crc: u32,
    attributes: i16,
    base_timestamp: i64,
    max_timestamp: i64,
    pub(crate) record_count: i32,
}

fn i64_at(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn i16_at(b: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

impl BatchHeader {
    /// Reads the header of a complete batch (`batch` holds at least [`HEADER_LEN`] bytes).
    pub(crate) fn parse(batch: &[u8]) -> Option<Self> {
        let base_offset = i64_at(batch, 0)?;
        let last_delta = i32_at(batch, 23)?;
        Some(Self {
            base_offset,
            last_offset: base_offset.saturating_add(i64::from(last_delta.max(0))),
            magic: i8::from_be_bytes([*batch.get(16)?]),
            crc: u32::from_be_bytes(batch.get(17..21)?.try_into().ok()?),
            attributes: i16_at(batch, 21)?,
            base_timestamp: i64_at(batch, 27)?,
            max_timestamp: i64_at(batch, 35)?,
            record_count: i32_at(batch, 57)?,
        })
    }

    pub(crate) fn is_control(&self) -> bool {
        self.attributes & CONTROL != 0
    }

    /// The compression codec, `None` when the attributes name none Kafka defines.
    pub(crate) fn codec(&self) -> Option<Codec> {
        Codec::from_attributes(self.attributes)
    }

    /// Checks the CRC-32C over everything after the CRC field.
    pub(crate) fn check_crc(&self, batch: &[u8]) -> Result<(), String> {
        let covered = batch.get(CRC_FROM..).unwrap_or_default();
        let computed = crc32c::crc32c(covered);
        if computed == self.crc {
            Ok(())
        } else {
            Err(format!(
                "CRC mismatch (the batch says {:#010x}, its bytes give {computed:#010x})",
                self.crc
            ))
        }
    }
}

/// One record of a batch, its payload fields slices of the (inflated) records section.
#[derive(Debug)]
pub(crate) struct RawRecord {
    pub(crate) offset: i64,
    pub(crate) timestamp: i64,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Vec<Header>,
    /// Set when one field of an otherwise well-framed record does not decode: why, and the
    /// record's own bytes (length prefix included).
    pub(crate) undecodable: Option<(String, Bytes)>,
}

impl RawRecord {
    /// The bytes its payload fields hold.
    pub(crate) fn payload_len(&self) -> usize {
        let field = |b: &Option<Bytes>| b.as_ref().map_or(0, Bytes::len);
        field(&self.key)
            + field(&self.value)
            + self
                .headers
                .iter()
                .map(|h| h.key.len() + field(&h.value))
                .sum::<usize>()
            + self.undecodable.as_ref().map_or(0, |(_, raw)| raw.len())
    }

    /// Copies every payload field out of the buffer it slices, so that buffer can be freed.
    pub(crate) fn detach(&mut self) {
        let copy = |b: &mut Option<Bytes>| {
            if let Some(bytes) = b {
                *bytes = Bytes::copy_from_slice(bytes);
            }
        };
        copy(&mut self.key);
        copy(&mut self.value);
        for header in &mut self.headers {
            copy(&mut header.value);
        }
        if let Some((_, raw)) = &mut self.undecodable {
            *raw = Bytes::copy_from_slice(raw);
        }
    }
}

/// A signed zig-zag varint of at most 5 bytes.
fn varint(buf: &mut Bytes) -> Result<i32, String> {
    let mut value: u32 = 0;
    for i in 0..5 {
        if !buf.has_remaining() {
            return Err("truncated varint".into());
        }
        let byte = buf.get_u8();
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(((value >> 1) as i32) ^ -((value & 1) as i32));
        }
    }
    Err("varint longer than 5 bytes".into())
}

/// A signed zig-zag varlong of at most 10 bytes.
fn varlong(buf: &mut Bytes) -> Result<i64, String> {
    let mut value: u64 = 0;
    for i in 0..10 {
        if !buf.has_remaining() {
            return Err("truncated varlong".into());
        }
        let byte = buf.get_u8();
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    Err("varlong longer than 10 bytes".into())
}

/// A length-prefixed byte field: `None` for length -1; anything below -1 or beyond the bytes left
/// is an error.
fn nullable_bytes(buf: &mut Bytes, what: &str) -> Result<Option<Bytes>, String> {
    let len = varint(buf)?;
    if len == -1 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| format!("{what} length {len}"))?;
    if len > buf.remaining() {
        return Err(format!(
            "{what} of {len} bytes with {} left",
            buf.remaining()
        ));
    }
    Ok(Some(buf.split_to(len)))
}

/// Decodes every record of a batch whose records section (inflated) is `data` and returns those
/// whose offset `keep` accepts: every record is checked, only the kept ones are held, so a batch
/// of many small records of which few were acquired costs memory for the few. An error means the
/// records do not frame (lengths, counts, offsets): the batch as a whole is bad. A field that
/// does not decode inside a well-framed record (a header key that is not UTF-8, a null header key)
/// only marks that record.
pub(crate) fn records(
    header: &BatchHeader,
    mut data: Bytes,
    keep: impl Fn(i64) -> bool,
) -> Result<Vec<RawRecord>, String> {
    let mut out = Vec::new();
    let mut seen = 0usize;
    let mut previous: Option<i64> = None;
    let log_append = header.attributes & LOG_APPEND_TIME != 0;
    while data.has_remaining() {
        let mut whole = data.clone();
        let len = varint(&mut data).map_err(|e| format!("record {seen}: {e}"))?;
        let len = usize::try_from(len)
            .ok()
            .filter(|len| *len <= data.remaining())
            .ok_or_else(|| {
                format!(
                    "record {seen} claims {len} bytes with {} left",
                    data.remaining()
                )
            })?;
        let prefix = whole.remaining() - data.remaining();
        let raw = whole.split_to(prefix + len);
        let body = data.split_to(len);
        let r = record(header, body, raw, log_append).map_err(|e| format!("record {seen}: {e}"))?;
        // Brokers write a batch's offsets in increasing order: a repeat is a lie that would let
        // one acquired offset be kept again and again.
        if previous.is_some_and(|p| r.offset <= p) {
            return Err(format!(
                "record {seen} has offset {} after offset {}",
                r.offset,
                previous.unwrap_or_default()
            ));
        }
        previous = Some(r.offset);
        seen += 1;
        if keep(r.offset) {
            out.push(r);
        }
    }
    let claimed = header.record_count;
    if usize::try_from(claimed).ok() != Some(seen) {
        return Err(format!(
            "the batch says {claimed} records, its bytes hold {seen}"
        ));
    }
    Ok(out)
}

fn record(
    header: &BatchHeader,
    mut body: Bytes,
    raw: Bytes,
    log_append: bool,
) -> Result<RawRecord, String> {
    if !body.has_remaining() {
        return Err("empty record".into());
    }
    let _attributes = body.get_i8();
    let timestamp_delta = varlong(&mut body)?;
    let offset_delta = varint(&mut body)?;
    let offset = header
        .base_offset
        .checked_add(i64::from(offset_delta))
        .filter(|o| offset_delta >= 0 && *o <= header.last_offset)
        .ok_or_else(|| {
            format!(
                "offset delta {offset_delta} is outside the batch {}..={}",
                header.base_offset, header.last_offset
            )
        })?;
    let timestamp = if log_append {
        header.max_timestamp
    } else {
        header.base_timestamp.saturating_add(timestamp_delta)
    };
    let key = nullable_bytes(&mut body, "key")?;
    let value = nullable_bytes(&mut body, "value")?;
    let count = varint(&mut body)?;
    let count = usize::try_from(count).map_err(|_| format!("header count {count}"))?;
    let mut headers = Vec::new();
    let mut undecodable = None;
    for i in 0..count {
        // Each header takes at least two bytes: the count cannot outrun the record.
        if body.remaining() < 2 {
            return Err(format!("{count} headers in a record that ends after {i}"));
        }
        let key = nullable_bytes(&mut body, "header key")?;
        let value = nullable_bytes(&mut body, "header value")?;
        let key = match key {
            None => Err(format!("header {i} has a null key")),
            Some(key) => std::str::from_utf8(&key)
                .map(Arc::<str>::from)
                .map_err(|e| format!("header {i} key is not UTF-8 ({e})")),
        };
        match key {
            Ok(key) => headers.push(Header { key, value }),
            Err(why) => {
                undecodable.get_or_insert(why);
            }
        }
    }
    if body.has_remaining() {
        return Err(format!("{} bytes after the headers", body.remaining()));
    }
    let undecodable = undecodable.map(|why| (format!("offset {offset}: {why}"), raw));
    Ok(RawRecord {
        offset,
        timestamp,
        key,
        value,
        headers,
        undecodable,
    })
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;

    #[test]
    fn varints_are_zig_zag_and_bounded() {
        for (bytes, want) in [
            (&[0x00][..], 0),
            (&[0x01][..], -1),
            (&[0x02][..], 1),
            (&[0xfe, 0xff, 0xff, 0xff, 0x0f][..], i32::MAX),
            (&[0xff, 0xff, 0xff, 0xff, 0x0f][..], i32::MIN),
        ] {
            assert_eq!(varint(&mut Bytes::copy_from_slice(bytes)), Ok(want));
        }
        assert!(varint(&mut Bytes::from_static(&[0x80; 6])).is_err());
        assert!(varint(&mut Bytes::from_static(&[0x80])).is_err());
        assert!(varlong(&mut Bytes::from_static(&[0xff; 11])).is_err());
    }

    #[test]
    fn byte_fields_never_outrun_their_record() {
        let mut b = BytesMut::new();
        b.extend_from_slice(&[0x14, b'a']); // length 10, one byte present
        assert!(nullable_bytes(&mut b.freeze(), "key").is_err());
        assert!(nullable_bytes(&mut Bytes::from_static(&[0x03]), "key").is_err()); // -2
        assert_eq!(
            nullable_bytes(&mut Bytes::from_static(&[0x01]), "key"),
            Ok(None)
        );
    }
}
