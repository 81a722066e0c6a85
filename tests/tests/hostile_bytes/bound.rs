//! What a decode may allocate, and running one under the counting allocator: a panic or a
//! single allocation over the bound is an error that carries the input.

use std::panic::{AssertUnwindSafe, catch_unwind};

use alloc_probe::{Measurement, measure};
use anyhow::Result;

/// Allocations any decode may make whatever its input: error messages naming what was wrong,
/// an `Arc`'d reason, small vectors.
pub(crate) const SLACK: usize = 4 << 10;

/// The largest buffer a decompressor allocates whatever its input: zstd's input buffer,
/// `ZSTD_DStreamInSize()` = 128 KiB + 3 (miniz_oxide's inflate state is about 43 KB, lz4's
/// buffer 32 KiB). zstd's window and lz4's blocks come from C `malloc`, which this allocator does
/// not see: those are bounded by the window cap in `inflate.rs` and lz4's 4 MiB block maximum.
pub(crate) const DECOMPRESSOR: usize = (128 << 10) + 3;

/// Bytes of bookkeeping per acquired offset: each becomes one delivery (offset, timestamp, key,
/// value, headers, delivery count and an optional reason: 120 bytes) in a vector that grows by
/// doubling.
pub(crate) const PER_ACQUIRED_OFFSET: usize = 2 * 120;

/// The most one allocation may take while decoding `input_len` bytes of one partition with
/// `acquired` offsets acquired and a batch cap of `max_batch_bytes`: records and their fields are
/// slices of the input or of one inflated batch (at most the cap), and only acquired records are
/// held (one delivery each).
pub(crate) fn records_limit(input_len: usize, max_batch_bytes: usize, acquired: usize) -> usize {
    input_len + max_batch_bytes + acquired * PER_ACQUIRED_OFFSET + DECOMPRESSOR + SLACK
}

/// The most one allocation may take while decoding a response of `input_len` bytes with a
/// decoder of expansion `expansion`: these decoders have no caps, and an element's decoded form
/// may be larger than its smallest encoding (see [`expansion`]).
pub(crate) fn response_limit(expansion: usize, input_len: usize) -> usize {
    input_len * expansion + SLACK
}

/// The most bytes of one vector or map the decoder `api` builds per byte of input (64-bit
/// targets): the size of its largest element over that element's smallest encoding, which is
/// what the decoder checks a count against before reserving. Doubled where the vector grows by
/// doubling or is a hash map (whose table is rounded up to a power of two at 7/8 load). `None`
/// for a decoder nobody has worked this out for yet.
pub(crate) fn expansion(api: &str) -> Option<usize> {
    Some(match api {
        // A subscribed topic name: a 24-byte `String` from a 1-byte empty compact string.
        "ShareGroupDescribe" => 24,
        // A group: 80 bytes (id, offsets, error) from 6.
        "DescribeShareGroupOffsets v0" | "DescribeShareGroupOffsets v1" => 14,
        // A resource result: 80 bytes from 7.
        "DescribeConfigs" => 12,
        // A resource: 56 bytes from 6.
        "IncrementalAlterConfigs" => 10,
        // The broker map: (i32, String) entries of 32 bytes from 11, in a table up to 2.3 times
        // the count.
        "Metadata" => 7,
        // A partition: 120 bytes from 22.
        "ShareFetch" => 6,
        // A topic result: 72 bytes from 12 (v5; 28 from v7).
        "CreateTopics v5" => 6,
        "CreateTopics v7" => 3,
        // A partition: 56 bytes from 27, in a vector reserved per topic (doubling).
        "ListOffsets" => 5,
        // Partitions: 40 bytes from 16; topics 40 from 18; partition lists 4 from 4, doubling.
        "ShareAcknowledge" | "ShareGroupHeartbeat" => 3,
        // The version map: 6-byte entries from 7, in a table up to 2.3 times the count.
        "ApiVersions" => 3,
        // Strings only: "host:port" is formatted into a string that grows by doubling.
        "FindCoordinator" => 2,
        _ => return None,
    })
}

/// What went wrong with one input: a panic or an allocation beyond the limit. Carries the input.
pub(crate) fn failure(what: &str, input: &[u8], why: &str) -> anyhow::Error {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile_bytes");
    let name: String = what
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let file = dir.join(format!("{name}-{:08x}.bin", crc32c::crc32c(input)));
    let saved = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&file, input))
        .map_or_else(
            |e| format!("not saved: {e}"),
            |()| file.display().to_string(),
        );
    let shown = input.len().min(512);
    let hex: String = input[..shown].iter().map(|b| format!("{b:02x}")).collect();
    anyhow::anyhow!(
        "{what}: {why}\ninput ({} bytes, saved to {saved}), first {shown} bytes:\n{hex}",
        input.len()
    )
}

/// Runs `decode` on `input` under the counting allocator: a panic or a single allocation over
/// `limit` is an error naming `what` and carrying the input.
pub(crate) fn bounded<T>(
    what: &str,
    input: &[u8],
    limit: usize,
    decode: impl FnOnce() -> T,
) -> Result<T> {
    let (value, m): (T, Measurement) = match catch_unwind(AssertUnwindSafe(|| measure(decode))) {
        Ok(done) => done,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            return Err(failure(what, input, &format!("panicked: {message}")));
        }
    };
    if let Err(overrun) = m.check_largest(limit) {
        return Err(failure(what, input, &overrun.to_string()));
    }
    Ok(value)
}
