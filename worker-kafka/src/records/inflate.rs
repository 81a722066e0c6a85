//! Decompression of one record batch, bounded three ways: a cap per batch, a budget per fetch
//! response (every batch inflated by the response counts against it) and, for zstd, the window a
//! frame may ask for.

use std::io::Read;

use bytes::Bytes;

/// The compression codec named by a batch's attributes (bits 0–2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    /// The codec of attribute bits `bits`, `None` for a value Kafka does not define.
    pub(crate) fn from_attributes(attributes: i16) -> Option<Codec> {
        match attributes & 0x07 {
            0 => Some(Codec::None),
            1 => Some(Codec::Gzip),
            2 => Some(Codec::Snappy),
            3 => Some(Codec::Lz4),
            4 => Some(Codec::Zstd),
            _ => None,
        }
    }
}

/// How much one fetch response may inflate in all: shared by its partitions.
#[derive(Debug)]
pub(crate) struct InflateBudget {
    remaining: usize,
}

impl InflateBudget {
    pub(crate) fn new(bytes: usize) -> Self {
        Self { remaining: bytes }
    }
}

/// Why a batch did not inflate.
#[derive(Debug)]
pub(crate) enum InflateError {
    /// The batch itself is bad: corrupt, or larger than any batch may inflate to.
    Bad(String),
    /// The response's budget ran out: the batch is fine, it just did not fit in this fetch.
    OverBudget,
}

/// The bounds on inflating one batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InflateLimits {
    /// The most one batch may inflate to.
    pub(crate) max_batch_bytes: usize,
}

impl InflateLimits {
    /// The largest zstd window accepted: enough for a batch of `max_batch_bytes`, at least 2^23
    /// (what producers use up to level 19: Kafka's and librdkafka's default level 3 needs 2^21
    /// when they stream without a pledged size), never more than zstd's default limit, 2^27.
    fn zstd_window_log(&self) -> u32 {
        self.max_batch_bytes
            .checked_next_power_of_two()
            .map_or(27, |n| n.trailing_zeros())
            .clamp(23, 27)
    }
}

/// Inflates `data` (the records section of one batch) with `codec`. A batch that is `owed` (the
/// first of its partition in this response) may use a whole batch cap whatever the budget says,
/// so that every partition makes progress in every fetch; it still spends the budget.
pub(crate) fn inflate(
    data: &Bytes,
    codec: Codec,
    limits: InflateLimits,
    budget: &mut InflateBudget,
    owed: bool,
) -> Result<Bytes, InflateError> {
    let allowed = if owed {
        limits.max_batch_bytes
    } else {
        budget.remaining
    };
    let over_budget = allowed < limits.max_batch_bytes;
    let limit = limits.max_batch_bytes.min(allowed);
    let out = match codec {
        Codec::None => return Ok(data.clone()),
        Codec::Gzip => bounded_read(flate2::read::GzDecoder::new(&data[..]), limit, "gzip"),
        Codec::Lz4 => match lz4::Decoder::new(&data[..]) {
            Ok(decoder) => bounded_read(decoder, limit, "lz4"),
            Err(e) => Err(Inflate::Corrupt(format!("lz4 decompression failed: {e}"))),
        },
        Codec::Zstd => zstd_decoder(data, limits.zstd_window_log())
            .and_then(|decoder| bounded_read(decoder, limit, "zstd")),
        Codec::Snappy => snappy(data, limit),
    };
    match out {
        Ok(out) => {
            budget.remaining = budget.remaining.saturating_sub(out.len());
            Ok(out)
        }
        Err(Inflate::TooLarge) if over_budget => Err(InflateError::OverBudget),
        Err(Inflate::TooLarge) => Err(InflateError::Bad(format!(
            "{codec:?} batch inflates past the cap of {} bytes",
            limits.max_batch_bytes
        ))),
        Err(Inflate::Corrupt(why)) => Err(InflateError::Bad(why)),
    }
}

/// How much is read (and zeroed ahead of reading) at a time.
const READ_CHUNK: usize = 64 << 10;

enum Inflate {
    TooLarge,
    Corrupt(String),
}

fn zstd_decoder(data: &Bytes, window_log: u32) -> Result<impl Read + '_, Inflate> {
    let mut decoder = zstd::stream::read::Decoder::new(&data[..])
        .map_err(|e| Inflate::Corrupt(format!("zstd decompression failed: {e}")))?;
    decoder
        .window_log_max(window_log)
        .map_err(|e| Inflate::Corrupt(format!("zstd decompression failed: {e}")))?;
    Ok(decoder)
}

/// Reads at most `limit` bytes (one more tells that there are more). The buffer's allocation grows
/// by doubling but never past `limit + 1` (`read_to_end` would double it to twice the cap), and
/// only the chunk being read is zeroed, so what is resident is what was inflated.
fn bounded_read(mut reader: impl Read, limit: usize, what: &str) -> Result<Bytes, Inflate> {
    let most = limit.saturating_add(1);
    let mut out: Vec<u8> = Vec::new();
    // Stop at `most` without asking the decoder for more: some fail on an empty buffer (zstd).
    while out.len() < most {
        let start = out.len();
        let chunk = READ_CHUNK.min(most - start);
        if out.capacity() < start + chunk {
            let grown = out
                .capacity()
                .saturating_mul(2)
                .max(start + chunk)
                .min(most);
            out.reserve_exact(grown - start);
        }
        out.resize(start + chunk, 0);
        let read = loop {
            match reader.read(&mut out[start..]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        let read =
            read.map_err(|e| Inflate::Corrupt(format!("{what} decompression failed: {e}")))?;
        out.truncate(start + read);
        if read == 0 {
            break;
        }
    }
    if out.len() > limit {
        return Err(Inflate::TooLarge);
    }
    Ok(Bytes::from(out))
}

/// Snappy as Kafka writes it: the xerial framing (magic, then length-prefixed raw blocks), or one
/// raw block.
fn snappy(input: &[u8], limit: usize) -> Result<Bytes, Inflate> {
    const MAGIC: &[u8] = b"\x82SNAPPY\x00";
    let corrupt = |e: &dyn std::fmt::Display| Inflate::Corrupt(format!("snappy: {e}"));
    let mut out = Vec::new();
    let mut raw_block = |block: &[u8]| -> Result<(), Inflate> {
        let len = snap::raw::decompress_len(block).map_err(|e| corrupt(&e))?;
        if out.len().saturating_add(len) > limit {
            return Err(Inflate::TooLarge);
        }
        let start = out.len();
        // Exactly what the block needs: `resize` alone may double the buffer past the limit.
        out.reserve_exact(len);
        out.resize(start + len, 0);
        let written = snap::raw::Decoder::new()
            .decompress(block, &mut out[start..])
            .map_err(|e| corrupt(&e))?;
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
                .ok_or_else(|| corrupt(&"truncated block length"))? as usize;
            let block = rest
                .get(4..4usize.saturating_add(len))
                .ok_or_else(|| corrupt(&"truncated block"))?;
            raw_block(block)?;
            rest = rest.get(4 + len..).unwrap_or_default();
        }
    } else {
        raw_block(input)?;
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize) -> InflateLimits {
        InflateLimits {
            max_batch_bytes: max,
        }
    }

    fn gzip(data: &[u8]) -> Bytes {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).expect("in memory");
        Bytes::from(e.finish().expect("in memory"))
    }

    #[test]
    fn a_batch_over_the_cap_is_bad_and_one_over_the_budget_is_not() {
        let data = gzip(&[0u8; 10_000]);
        let mut budget = InflateBudget::new(1 << 20);
        assert!(matches!(
            inflate(&data, Codec::Gzip, limits(4_096), &mut budget, false),
            Err(InflateError::Bad(_))
        ));
        let mut small = InflateBudget::new(5_000);
        assert!(matches!(
            inflate(&data, Codec::Gzip, limits(1 << 20), &mut small, false),
            Err(InflateError::OverBudget)
        ));
    }

    #[test]
    fn the_budget_is_spent_by_every_batch() {
        let data = gzip(&[7u8; 6_000]);
        let mut budget = InflateBudget::new(10_000);
        assert!(inflate(&data, Codec::Gzip, limits(8_000), &mut budget, false).is_ok());
        assert!(matches!(
            inflate(&data, Codec::Gzip, limits(8_000), &mut budget, false),
            Err(InflateError::OverBudget)
        ));
        assert!(
            inflate(&data, Codec::Gzip, limits(8_000), &mut budget, true).is_ok(),
            "the first batch of a partition is owed its cap"
        );
    }

    /// Hands out at most 1000 bytes per read and is interrupted every other call.
    struct Stuttering<'a> {
        data: &'a [u8],
        calls: usize,
    }

    impl Read for Stuttering<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.calls += 1;
            if self.calls.is_multiple_of(2) {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(self.data.len()).min(1000);
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn bounded_reads_go_up_to_the_limit_across_chunks_and_interruptions() {
        let data: Vec<u8> = (0..3 * READ_CHUNK + 5).map(|i| (i % 251) as u8).collect();
        let read = |limit| {
            bounded_read(
                Stuttering {
                    data: &data,
                    calls: 0,
                },
                limit,
                "test",
            )
        };
        assert!(matches!(read(data.len()), Ok(out) if out[..] == data[..]));
        assert!(matches!(read(data.len() - 1), Err(Inflate::TooLarge)));
        assert!(matches!(read(usize::MAX), Ok(out) if out.len() == data.len()));
        assert!(matches!(read(0), Err(Inflate::TooLarge)));
    }

    #[test]
    fn zstd_windows_are_bounded_by_the_batch_cap() {
        assert_eq!(limits(64 << 20).zstd_window_log(), 26);
        assert_eq!(limits(1).zstd_window_log(), 23);
        assert_eq!(limits(usize::MAX).zstd_window_log(), 27);
        // A frame that asks for a 2^24 window does not decode under a 1 MiB cap (window 2^23),
        // although what it holds would fit: the window, not the content, is what a hostile frame
        // makes the decoder allocate.
        let big: Vec<u8> = (0..(512u32 << 10)).map(|i| (i % 251) as u8).collect();
        let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("in memory");
        encoder.window_log(24).expect("in memory");
        encoder.include_contentsize(false).expect("in memory");
        use std::io::Write;
        encoder.write_all(&big).expect("in memory");
        let frame = Bytes::from(encoder.finish().expect("in memory"));
        let mut budget = InflateBudget::new(usize::MAX);
        assert!(matches!(
            inflate(&frame, Codec::Zstd, limits(1 << 20), &mut budget, false),
            Err(InflateError::Bad(_))
        ));
        assert!(inflate(&frame, Codec::Zstd, limits(32 << 20), &mut budget, false).is_ok());
    }
}
