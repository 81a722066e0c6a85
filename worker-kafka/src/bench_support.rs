//! Entry points for the criterion benchmarks in `benches/` (not public API).

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::codec::AcquiredRange;
use super::records;
use crate::{Error, ErrorKind, Result};

/// Encodes `batches` record batches of `per_batch` records with `payload`-byte values, compressed
/// with `compression` ("none", "gzip", "snappy", "lz4" or "zstd").
pub fn sample_records(
    batches: usize,
    per_batch: usize,
    payload: usize,
    compression: &str,
) -> Result<Bytes> {
    let compression = match compression {
        "none" => Compression::None,
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => {
            return Err(Error::new(
                ErrorKind::Config,
                format!("compression {other}"),
            ));
        }
    };
    let mut buf = BytesMut::new();
    let mut offset = 0i64;
    for _ in 0..batches {
        let records: Vec<Record> = (0..per_batch)
            .map(|i| {
                let o = offset + i as i64;
                Record {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: 0,
                    producer_id: 1,
                    producer_epoch: 0,
                    sequence: o as i32,
                    timestamp_type: TimestampType::Creation,
                    offset: o,
                    timestamp: 1_700_000_000_000,
                    key: Some(Bytes::from(format!("key-{o}"))),
                    value: Some(Bytes::from(vec![b'x'; payload])),
                    headers: [(
                        StrBytes::from_static_str("trace"),
                        Some(Bytes::from_static(b"abc")),
                    )]
                    .into_iter()
                    .collect(),
                }
            })
            .collect();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .map_err(|e| Error::new(ErrorKind::Protocol, e.to_string()))?;
        offset += per_batch as i64;
    }
    Ok(buf.freeze())
}

/// Decodes `records` keeping offsets `first..=last` (as a share fetch does); returns how many
/// records were kept and how many offsets were gaps.
pub fn decode_acquired(records: Bytes, first: i64, last: i64) -> Result<(usize, usize)> {
    let acquired = [AcquiredRange {
        first,
        last,
        delivery_count: 1,
    }];
    let out = records::decode_partition(
        Some(records),
        &acquired,
        records::InflateLimits {
            max_batch_bytes: 64 << 20,
        },
        &mut records::InflateBudget::new(128 << 20),
    );
    let gaps = out
        .gaps
        .iter()
        .map(|(first, last)| records::acquired::span(*first, *last) as usize)
        .sum();
    Ok((out.records.len(), gaps))
}
