//! Bounded primitives for reading and writing the Kafka wire format.
//!
//! [`Reader`] never panics and never allocates more than the bytes present justify: every length is
//! checked against what remains before anything is sliced or reserved.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use uuid::Uuid;

use crate::{Error, ErrorKind, Result};

/// The most elements reserved ahead for an array whose count came from the wire: a count that
/// the remaining bytes could hold may still be a lie, so collections grow as elements actually
/// decode rather than trusting it.
const MAX_PREALLOC: usize = 64;

/// The longest topic name Kafka allows.
const MAX_TOPIC_NAME: usize = 249;

/// What to reserve for `count` elements named by the wire (see [`MAX_PREALLOC`]).
pub(crate) fn capacity(count: usize) -> usize {
    count.min(MAX_PREALLOC)
}

/// A protocol error for bytes that do not decode.
pub(crate) fn malformed(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Protocol, format!("malformed response: {what}"))
}

/// Reads Kafka primitives from a response body. Strings and byte fields are zero-copy slices.
#[derive(Debug, Clone)]
pub(crate) struct Reader {
    buf: Bytes,
}

impl Reader {
    pub(crate) fn new(buf: Bytes) -> Self {
        Self { buf }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.remaining()
    }

    fn need(&self, n: usize, what: &str) -> Result<()> {
        if self.buf.remaining() < n {
            Err(malformed(format_args!(
                "truncated {what}: need {n} bytes, {} left",
                self.buf.remaining()
            )))
        } else {
            Ok(())
        }
    }

    pub(crate) fn i8(&mut self) -> Result<i8> {
        self.need(1, "int8")?;
        Ok(self.buf.get_i8())
    }

    pub(crate) fn bool(&mut self) -> Result<bool> {
        Ok(self.i8()? != 0)
    }

    pub(crate) fn i16(&mut self) -> Result<i16> {
        self.need(2, "int16")?;
        Ok(self.buf.get_i16())
    }

    pub(crate) fn i32(&mut self) -> Result<i32> {
        self.need(4, "int32")?;
        Ok(self.buf.get_i32())
    }

    pub(crate) fn i64(&mut self) -> Result<i64> {
        self.need(8, "int64")?;
        Ok(self.buf.get_i64())
    }

    pub(crate) fn uuid(&mut self) -> Result<Uuid> {
        self.need(16, "uuid")?;
        Ok(Uuid::from_u128(self.buf.get_u128()))
    }

    /// An unsigned varint of at most 5 bytes (32 bits).
    pub(crate) fn uvarint(&mut self) -> Result<u32> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let byte = self.i8()? as u8;
            value |= u32::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(malformed("varint longer than 5 bytes"))
    }

    /// `n` raw bytes as a slice of the response.
    pub(crate) fn bytes(&mut self, n: usize) -> Result<Bytes> {
        self.need(n, "bytes")?;
        Ok(self.buf.split_to(n))
    }

    /// A compact nullable string (length + 1, 0 = null).
    pub(crate) fn compact_nullable_string(&mut self) -> Result<Option<String>> {
        match self.uvarint()? {
            0 => Ok(None),
            n => {
                let raw = self.bytes(n as usize - 1)?;
                String::from_utf8(raw.to_vec())
                    .map(Some)
                    .map_err(|_| malformed("string is not UTF-8"))
            }
        }
    }

    /// A topic name: a compact string of at most 249 bytes, Kafka's limit. A response naming a
    /// longer one lies, and copying such a name per partition would cost its length squared.
    pub(crate) fn topic_name(&mut self) -> Result<String> {
        let name = self.compact_string()?;
        if name.len() > MAX_TOPIC_NAME {
            return Err(malformed(format_args!(
                "a topic name of {} bytes (at most {MAX_TOPIC_NAME})",
                name.len()
            )));
        }
        Ok(name)
    }

    /// A compact string that must not be null.
    pub(crate) fn compact_string(&mut self) -> Result<String> {
        self.compact_nullable_string()?
            .ok_or_else(|| malformed("null where a string is required"))
    }

    /// A compact nullable byte field.
    pub(crate) fn compact_nullable_bytes(&mut self) -> Result<Option<Bytes>> {
        match self.uvarint()? {
            0 => Ok(None),
            n => self.bytes(n as usize - 1).map(Some),
        }
    }

    /// The element count of a compact array (null reads as empty). Each element takes at least
    /// `min_element` bytes, so a count the remaining bytes cannot hold is rejected before anything
    /// is allocated.
    pub(crate) fn compact_array_len(&mut self, min_element: usize) -> Result<usize> {
        match self.uvarint()? {
            0 => Ok(0),
            n => {
                let len = n as usize - 1;
                if len.saturating_mul(min_element.max(1)) > self.remaining() {
                    return Err(malformed(format_args!(
                        "array of {len} elements in {} bytes",
                        self.remaining()
                    )));
                }
                Ok(len)
            }
        }
    }

    /// The element count of a non-compact array (int32, -1 null reads as empty), checked as
    /// [`compact_array_len`](Self::compact_array_len) does.
    pub(crate) fn array_len(&mut self, min_element: usize) -> Result<usize> {
        let n = self.i32()?;
        let Ok(len) = usize::try_from(n) else {
            return if n == -1 {
                Ok(0)
            } else {
                Err(malformed(format_args!("array length {n}")))
            };
        };
        if len.saturating_mul(min_element.max(1)) > self.remaining() {
            return Err(malformed(format_args!(
                "array of {len} elements in {} bytes",
                self.remaining()
            )));
        }
        Ok(len)
    }

    /// A non-compact string (int16 length) that must not be null.
    pub(crate) fn string(&mut self) -> Result<String> {
        let n = self.i16()?;
        let len = usize::try_from(n).map_err(|_| malformed(format_args!("string length {n}")))?;
        let raw = self.bytes(len)?;
        String::from_utf8(raw.to_vec()).map_err(|_| malformed("string is not UTF-8"))
    }

    /// A compact array of int32.
    pub(crate) fn compact_i32_array(&mut self) -> Result<Vec<i32>> {
        let len = self.compact_array_len(4)?;
        (0..len).map(|_| self.i32()).collect()
    }

    /// Skips a tagged-field section.
    pub(crate) fn skip_tags(&mut self) -> Result<()> {
        let count = self.uvarint()?;
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.need(size, "tagged field")?;
            self.buf.advance(size);
        }
        Ok(())
    }

    /// Fails unless every byte was consumed.
    pub(crate) fn finish(&self) -> Result<()> {
        if self.buf.has_remaining() {
            Err(malformed(format_args!(
                "{} trailing bytes",
                self.buf.remaining()
            )))
        } else {
            Ok(())
        }
    }
}

/// Writes an unsigned varint.
pub(crate) fn put_uvarint(buf: &mut BytesMut, mut value: u32) {
    while value >= 0x80 {
        buf.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

/// Writes a compact nullable string.
pub(crate) fn put_compact_string(buf: &mut BytesMut, value: Option<&str>) {
    match value {
        None => put_uvarint(buf, 0),
        Some(s) => {
            put_uvarint(buf, s.len() as u32 + 1);
            buf.put_slice(s.as_bytes());
        }
    }
}

/// Writes a compact array length.
pub(crate) fn put_compact_len(buf: &mut BytesMut, len: usize) {
    put_uvarint(buf, len as u32 + 1);
}

/// Writes an empty tagged-field section.
pub(crate) fn put_empty_tags(buf: &mut BytesMut) {
    put_uvarint(buf, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip() -> crate::Result<()> {
        for v in [0u32, 1, 127, 128, 300, 16_383, 16_384, u32::MAX] {
            let mut buf = BytesMut::new();
            put_uvarint(&mut buf, v);
            let mut r = Reader::new(buf.freeze());
            assert_eq!(r.uvarint()?, v);
            r.finish()?;
        }
        Ok(())
    }

    #[test]
    fn huge_array_counts_are_rejected_before_allocating() {
        let mut buf = BytesMut::new();
        put_uvarint(&mut buf, u32::MAX);
        let mut r = Reader::new(buf.freeze());
        assert!(r.compact_array_len(1).is_err());
    }

    #[test]
    fn topic_names_longer_than_kafka_allows_are_errors() {
        for (len, ok) in [(249, true), (250, false)] {
            let mut buf = BytesMut::new();
            put_compact_string(&mut buf, Some(&"t".repeat(len)));
            assert_eq!(Reader::new(buf.freeze()).topic_name().is_ok(), ok, "{len}");
        }
    }

    #[test]
    fn counts_from_the_wire_reserve_little_ahead() {
        assert_eq!(capacity(3), 3);
        assert_eq!(capacity(1 << 30), MAX_PREALLOC);
    }

    #[test]
    fn truncated_strings_are_errors() {
        let mut buf = BytesMut::new();
        put_uvarint(&mut buf, 10);
        buf.put_slice(b"abc");
        assert!(Reader::new(buf.freeze()).compact_string().is_err());
    }
}
