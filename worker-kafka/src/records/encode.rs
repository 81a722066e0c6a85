//! A record-batch encoder (message format v2) that writes what it is told, including what no
//! well-behaved producer writes: header keys that are not UTF-8, null header keys, bad CRCs.
//! For tests of the decoder and of a real broker fed hostile batches.

use bytes::{BufMut, Bytes, BytesMut};

/// A header to encode: raw key bytes (`None` writes a null key) and value.
pub type RawHeader = (Option<Vec<u8>>, Option<Vec<u8>>);

/// One record to encode.
#[derive(Clone, Debug, Default)]
pub struct RawRecordSpec {
    /// The key, `None` for null.
    pub key: Option<Vec<u8>>,
    /// The value, `None` for null.
    pub value: Option<Vec<u8>>,
    /// The headers.
    pub headers: Vec<RawHeader>,
}

impl RawRecordSpec {
    /// A record with `value` and no key or headers.
    pub fn value(value: impl Into<Vec<u8>>) -> Self {
        Self {
            value: Some(value.into()),
            ..Self::default()
        }
    }

    /// Adds a header.
    pub fn header(mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((Some(key.into()), Some(value.into())));
        self
    }
}

/// The compression of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawCompression {
    /// Uncompressed.
    None,
    /// gzip.
    Gzip,
    /// snappy (one raw block).
    Snappy,
    /// lz4 (frame format).
    Lz4,
    /// zstd.
    Zstd,
}

/// Encodes one batch of `records` at `base_offset` (producer id -1, creation timestamps).
pub fn encode_batch(
    base_offset: i64,
    records: &[RawRecordSpec],
    compression: RawCompression,
) -> std::io::Result<Bytes> {
    let mut section = BytesMut::new();
    for (i, r) in records.iter().enumerate() {
        let mut body = BytesMut::new();
        body.put_i8(0);
        put_varlong(&mut body, 0);
        put_varint(&mut body, i as i32);
        put_nullable(&mut body, r.key.as_deref());
        put_nullable(&mut body, r.value.as_deref());
        put_varint(&mut body, r.headers.len() as i32);
        for (k, v) in &r.headers {
            put_nullable(&mut body, k.as_deref());
            put_nullable(&mut body, v.as_deref());
        }
        put_varint(&mut section, body.len() as i32);
        section.put_slice(&body);
    }
    let section = compress(&section, compression)?;
    let codec: i16 = match compression {
        RawCompression::None => 0,
        RawCompression::Gzip => 1,
        RawCompression::Snappy => 2,
        RawCompression::Lz4 => 3,
        RawCompression::Zstd => 4,
    };
    let mut after_crc = BytesMut::new();
    after_crc.put_i16(codec);
    after_crc.put_i32(records.len().saturating_sub(1) as i32);
    after_crc.put_i64(1_700_000_000_000);
    after_crc.put_i64(1_700_000_000_000);
    after_crc.put_i64(-1);
    after_crc.put_i16(-1);
    after_crc.put_i32(-1);
    after_crc.put_i32(records.len() as i32);
    after_crc.put_slice(&section);
    let mut out = BytesMut::new();
    out.put_i64(base_offset);
    out.put_i32((4 + 1 + 4 + after_crc.len()) as i32);
    out.put_i32(0);
    out.put_i8(2);
    out.put_u32(crc32c::crc32c(&after_crc));
    out.put_slice(&after_crc);
    Ok(out.freeze())
}

fn compress(data: &[u8], compression: RawCompression) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    Ok(match compression {
        RawCompression::None => data.to_vec(),
        RawCompression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data)?;
            e.finish()?
        }
        RawCompression::Snappy => snap::raw::Encoder::new()
            .compress_vec(data)
            .map_err(std::io::Error::other)?,
        RawCompression::Lz4 => {
            let mut e = lz4::EncoderBuilder::new().build(Vec::new())?;
            e.write_all(data)?;
            let (out, result) = e.finish();
            result?;
            out
        }
        RawCompression::Zstd => zstd::encode_all(data, 3)?,
    })
}

fn put_varint(buf: &mut BytesMut, value: i32) {
    let mut v = ((value << 1) ^ (value >> 31)) as u32;
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn put_varlong(buf: &mut BytesMut, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn put_nullable(buf: &mut BytesMut, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(buf, -1),
        Some(b) => {
            put_varint(buf, b.len() as i32);
            buf.put_slice(b);
        }
    }
}
