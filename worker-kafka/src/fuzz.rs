//! Fuzz-style property tests: random, truncated and mutated bytes into every decoder never panic
//! and never allocate beyond what the bytes justify.

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::Encodable;
use kafka_protocol::records::Compression;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::codec::{self, AcquiredRange};
use super::{admin, connection, messages, records};

/// Every decoder of network data, on one input.
fn decode_everything(data: &[u8]) {
    let b = Bytes::copy_from_slice(data);
    let _ = codec::decode_share_fetch(b.clone());
    let _ = codec::decode_share_acknowledge(b.clone());
    let _ = messages::decode_metadata(b.clone());
    let _ = messages::decode_find_coordinator(b.clone());
    let _ = messages::decode_heartbeat(b.clone());
    let _ = connection::decode_api_versions(b.clone());
    let _ = admin::decode_share_group_offsets(b.clone(), 0);
    let _ = admin::decode_share_group_offsets(b.clone(), 1);
    let _ = admin::decode_share_group_describe(b.clone());
    let _ = admin::decode_describe_configs(b.clone());
    let _ = admin::decode_incremental_alter_configs(b.clone());
    let _ = admin::decode_list_offsets(b.clone());
    let _ = admin::decode_finalized_features(b.clone());
    for version in 5..=7 {
        let _ = admin::decode_create_topics(b.clone(), version);
    }
    let acquired = [AcquiredRange {
        first: 0,
        last: 50,
        delivery_count: 1,
    }];
    decode_records(b, &acquired);
}

fn decode_records(data: Bytes, acquired: &[AcquiredRange]) {
    let _ = records::decode_partition(
        Some(data),
        acquired,
        records::InflateLimits {
            max_batch_bytes: 1 << 16,
        },
        &mut records::InflateBudget::new(1 << 17),
    );
}

fn valid_samples() -> Result<Vec<Vec<u8>>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    let mut buf = BytesMut::new();
    codec::tests::crate_fetch_response().encode(&mut buf, 1)?;
    out.push(buf.to_vec());
    out.extend(admin::sample_responses()?);
    for compression in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        out.push(records::tests::batch(0, 5, compression)?.to_vec());
    }
    Ok(out)
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    for _ in 0..20_000 {
        let len = rng.random_range(0..256);
        let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        decode_everything(&data);
    }
}

#[test]
fn truncated_responses_never_panic() -> Result<(), Box<dyn std::error::Error>> {
    for sample in valid_samples()? {
        for cut in 0..sample.len() {
            decode_everything(&sample[..cut]);
        }
    }
    Ok(())
}

#[test]
fn mutated_responses_never_panic() -> Result<(), Box<dyn std::error::Error>> {
    let mut rng = StdRng::seed_from_u64(42);
    for sample in valid_samples()? {
        for _ in 0..3_000 {
            let mut data = sample.clone();
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..data.len());
                data[i] = rng.random();
            }
            decode_everything(&data);
        }
    }
    Ok(())
}

/// Mutations past the CRC, with the CRC fixed up, so they reach the record decoder itself.
#[test]
fn mutated_batches_with_valid_crc_never_panic() -> Result<(), Box<dyn std::error::Error>> {
    let mut rng = StdRng::seed_from_u64(7);
    for compression in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let sample = records::tests::batch(0, 5, compression)?.to_vec();
        for _ in 0..3_000 {
            let mut data = sample.clone();
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(21..data.len());
                data[i] = rng.random();
            }
            let crc = crc32c::crc32c(&data[21..]);
            data[17..21].copy_from_slice(&crc.to_be_bytes());
            let acquired = [AcquiredRange {
                first: 0,
                last: 50,
                delivery_count: 1,
            }];
            decode_records(Bytes::from(data), &acquired);
        }
    }
    Ok(())
}
