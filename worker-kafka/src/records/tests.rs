use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::encode::{RawCompression, RawRecordSpec, encode_batch};
use super::*;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Records `first..first + n` written by the `kafka-protocol` crate's encoder, an implementation
/// independent of ours (it writes one batch per record here).
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

/// One batch of `n` records from `first`, written by our encoder: key `k{offset}`, value
/// `value-{offset}`, header `h: v`.
fn ours(
    first: i64,
    n: i64,
    compression: RawCompression,
) -> Result<Bytes, Box<dyn std::error::Error>> {
    let specs: Vec<RawRecordSpec> = (first..first + n)
        .map(|o| RawRecordSpec {
            key: Some(format!("k{o}").into_bytes()),
            ..RawRecordSpec::value(format!("value-{o}")).header("h", "v")
        })
        .collect();
    Ok(encode_batch(first, &specs, compression)?)
}

fn range(first: i64, last: i64, delivery_count: i16) -> AcquiredRange {
    AcquiredRange {
        first,
        last,
        delivery_count,
    }
}

const LIMITS: InflateLimits = InflateLimits {
    max_batch_bytes: 1 << 20,
};

fn decode(data: Bytes, acquired: &[AcquiredRange]) -> PartitionRecords {
    decode_partition(
        Some(data),
        acquired,
        LIMITS,
        &mut InflateBudget::new(64 << 20),
    )
}

fn offsets(out: &PartitionRecords) -> Vec<i64> {
    out.records
        .iter()
        .filter(|r| r.undecodable.is_none())
        .map(|r| r.offset)
        .collect()
}

fn undecodable(out: &PartitionRecords) -> Vec<(i64, Recovered)> {
    out.records
        .iter()
        .filter_map(|r| r.undecodable.as_ref().map(|u| (r.offset, u.recovered)))
        .collect()
}

fn join(parts: &[&Bytes]) -> Bytes {
    let mut all = BytesMut::new();
    for p in parts {
        all.extend_from_slice(p);
    }
    all.freeze()
}

const ALL: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

#[test]
fn only_acquired_offsets_are_delivered_and_missing_ones_are_gaps() -> TestResult {
    for compression in ALL {
        let all = join(&[&batch(0, 10, compression)?, &batch(12, 5, compression)?]);
        let out = decode(all, &[range(3, 13, 2)]);
        assert_eq!(
            offsets(&out),
            vec![3, 4, 5, 6, 7, 8, 9, 12, 13],
            "{compression:?}"
        );
        assert_eq!(out.gaps, vec![(10, 11)]);
        assert!(out.releases.is_empty());
        assert_eq!(out.records[0].delivery_count, 2);
        assert_eq!(out.records[0].value.as_deref(), Some(&b"value-3"[..]));
        assert_eq!(out.records[0].key.as_deref(), Some(&b"k3"[..]));
        assert_eq!(out.records[0].timestamp, 1_003);
        assert_eq!(&*out.records[0].headers[0].key, "h");
    }
    Ok(())
}

#[test]
fn our_encoder_and_the_crates_agree() -> TestResult {
    for (ours, theirs) in [
        (RawCompression::None, Compression::None),
        (RawCompression::Gzip, Compression::Gzip),
        (RawCompression::Snappy, Compression::Snappy),
        (RawCompression::Lz4, Compression::Lz4),
        (RawCompression::Zstd, Compression::Zstd),
    ] {
        let specs: Vec<RawRecordSpec> = (0..4)
            .map(|i| RawRecordSpec::value(format!("v{i}")).header("h", "x"))
            .collect();
        let data = encode_batch(7, &specs, ours)?;
        let mut slice = data.clone();
        let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut slice)?;
        assert_eq!(set.records.len(), 4, "{theirs:?}");
        assert_eq!(set.records[3].offset, 10);
        let out = decode(data, &[range(7, 10, 1)]);
        assert_eq!(offsets(&out), vec![7, 8, 9, 10], "{ours:?}");
        assert_eq!(out.records[2].value.as_deref(), Some(&b"v2"[..]));
    }
    Ok(())
}

#[test]
fn every_header_is_kept_in_order_duplicates_included() -> TestResult {
    let spec = RawRecordSpec::value("x")
        .header("trace", "1")
        .header("trace", "2")
        .header("other", "3");
    let out = decode(
        encode_batch(0, &[spec], RawCompression::None)?,
        &[range(0, 0, 1)],
    );
    let headers: Vec<(&str, &[u8])> = out.records[0]
        .headers
        .iter()
        .map(|h| (&*h.key, h.value.as_deref().unwrap_or_default()))
        .collect();
    assert_eq!(
        headers,
        vec![
            ("trace", &b"1"[..]),
            ("trace", &b"2"[..]),
            ("other", &b"3"[..])
        ]
    );
    Ok(())
}

#[test]
fn a_header_key_that_is_not_utf8_marks_only_its_record_and_keeps_its_bytes() -> TestResult {
    for compression in [RawCompression::None, RawCompression::Zstd] {
        let good = |i: i32| RawRecordSpec::value(format!("good-{i}"));
        let bad = RawRecordSpec::value("payload").header(vec![0xff, 0xfe, b'k'], "v");
        let mut null_key = RawRecordSpec::value("payload");
        null_key.headers.push((None, Some(b"v".to_vec())));
        let first = encode_batch(0, &[good(0), good(1)], compression)?;
        let middle = encode_batch(2, &[good(2), bad, good(4), null_key], compression)?;
        let last = encode_batch(6, &[good(6)], compression)?;
        let out = decode(join(&[&first, &middle, &last]), &[range(0, 6, 1)]);
        assert_eq!(offsets(&out), vec![0, 1, 2, 4, 6], "{compression:?}");
        assert_eq!(
            undecodable(&out),
            vec![(3, Recovered::RawRecord), (5, Recovered::RawRecord)]
        );
        let three = &out.records[3];
        let why = &three.undecodable.as_ref().ok_or("no reason")?.error;
        assert!(
            why.contains("offset 3") && why.contains("not UTF-8"),
            "{why}"
        );
        let raw = three.value.as_ref().ok_or("no raw bytes")?;
        assert!(raw.windows(7).any(|w| w == b"payload"), "{raw:?}");
        assert!(three.key.is_none() && three.headers.is_empty());
        assert!(out.gaps.is_empty() && out.releases.is_empty());
    }
    Ok(())
}

#[test]
fn a_batch_with_a_bad_crc_is_undecodable_and_its_neighbours_are_not() -> TestResult {
    let first = ours(0, 3, RawCompression::None)?;
    let mut middle = ours(3, 3, RawCompression::Gzip)?.to_vec();
    let last_byte = middle.len() - 1;
    middle[last_byte] ^= 0x55;
    let last = ours(6, 3, RawCompression::None)?;
    let out = decode(
        join(&[&first, &Bytes::from(middle), &last]),
        &[range(1, 7, 3)],
    );
    assert_eq!(offsets(&out), vec![1, 2, 6, 7]);
    assert_eq!(
        undecodable(&out),
        vec![
            (3, Recovered::Nothing),
            (4, Recovered::Nothing),
            (5, Recovered::Nothing)
        ]
    );
    let bad = out.records.iter().find(|r| r.offset == 4).ok_or("no 4")?;
    assert_eq!(bad.delivery_count, 3);
    let why = &bad.undecodable.as_ref().ok_or("no reason")?.error;
    assert!(why.contains("3..=5") && why.contains("CRC"), "{why}");
    Ok(())
}

#[test]
fn a_batch_that_inflates_past_the_cap_is_undecodable_and_its_neighbours_are_not() -> TestResult {
    for compression in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let bomb = batch_with(2, 1, compression, |_| Bytes::from(vec![0u8; 3 << 20]))?;
        assert!(bomb.len() < 200_000, "{compression:?}");
        let data = join(&[
            &batch(0, 2, Compression::None)?,
            &bomb,
            &batch(3, 2, compression)?,
        ]);
        let out = decode(data, &[range(0, 4, 1)]);
        assert_eq!(offsets(&out), vec![0, 1, 3, 4], "{compression:?}");
        assert_eq!(undecodable(&out), vec![(2, Recovered::Nothing)]);
        let why = &out.records[2]
            .undecodable
            .as_ref()
            .ok_or("no reason")?
            .error;
        assert!(why.contains("cap"), "{why}");
    }
    Ok(())
}

#[test]
fn batches_past_the_response_budget_are_released_not_dead_lettered() -> TestResult {
    let big = |first| {
        batch_with(first, 1, Compression::Gzip, |_| {
            Bytes::from(vec![1u8; 600_000])
        })
    };
    let data = join(&[&big(0)?, &big(1)?, &batch(2, 1, Compression::None)?]);
    let out = decode_partition(
        Some(data),
        &[range(0, 2, 1)],
        LIMITS,
        &mut InflateBudget::new(1 << 20),
    );
    assert_eq!(offsets(&out), vec![0, 2]);
    assert_eq!(out.releases, vec![(1, 1)]);
    assert!(undecodable(&out).is_empty());
    Ok(())
}

#[test]
fn a_batch_cut_at_the_end_is_released_and_a_cut_first_batch_is_undecodable() -> TestResult {
    let first = ours(0, 3, RawCompression::None)?;
    let second = ours(3, 3, RawCompression::None)?;
    for cut in [5, 20, second.len() - 1] {
        let data = join(&[&first, &second.slice(..cut)]);
        let out = decode(data, &[range(0, 5, 1)]);
        assert_eq!(offsets(&out), vec![0, 1, 2], "cut at {cut}");
        assert_eq!(out.releases, vec![(3, 5)], "cut at {cut}");
        assert!(out.gaps.is_empty() && undecodable(&out).is_empty());
    }
    let out = decode(second.slice(..30), &[range(3, 5, 1)]);
    assert_eq!(undecodable(&out).len(), 3);
    assert!(out.releases.is_empty());
    Ok(())
}

#[test]
fn broken_framing_makes_the_rest_undecodable_never_gaps() -> TestResult {
    let first = ours(0, 2, RawCompression::None)?;
    let mut second = ours(2, 2, RawCompression::None)?.to_vec();
    second[8..12].copy_from_slice(&3i32.to_be_bytes()); // an impossible batch length
    let out = decode(join(&[&first, &Bytes::from(second)]), &[range(0, 9, 1)]);
    assert_eq!(offsets(&out), vec![0, 1]);
    assert_eq!(undecodable(&out).len(), 8);
    assert!(out.gaps.is_empty());
    Ok(())
}

#[test]
fn a_record_count_that_lies_spoils_the_batch() -> TestResult {
    let mut data = ours(0, 3, RawCompression::None)?.to_vec();
    data[57..61].copy_from_slice(&1_000_000i32.to_be_bytes());
    let crc = crc32c::crc32c(&data[21..]);
    data[17..21].copy_from_slice(&crc.to_be_bytes());
    let out = decode(Bytes::from(data), &[range(0, 2, 1)]);
    assert_eq!(undecodable(&out).len(), 3);
    Ok(())
}

#[test]
fn an_old_message_format_is_undecodable() -> TestResult {
    let mut data = ours(0, 2, RawCompression::None)?.to_vec();
    data[16] = 1;
    let out = decode(Bytes::from(data), &[range(0, 1, 1)]);
    assert_eq!(undecodable(&out).len(), 2);
    Ok(())
}

#[test]
fn overflowing_deltas_are_errors_not_panics() -> TestResult {
    let mut data = batch_with(i64::MAX - 2, 1, Compression::None, |_| {
        Bytes::from_static(b"x")
    })?
    .to_vec();
    // The only record, after the 61-byte header: length, attributes, timestamp delta, offset
    // delta (one byte each here). A zig-zag 0x7e is +63: base + 63 overflows.
    data[61 + 3] = 0x7e;
    let crc = crc32c::crc32c(&data[21..]);
    data[17..21].copy_from_slice(&crc.to_be_bytes());
    let out = decode(Bytes::from(data), &[range(i64::MAX - 2, i64::MAX - 1, 1)]);
    assert_eq!(undecodable(&out), vec![(i64::MAX - 2, Recovered::Nothing)]);
    assert_eq!(out.gaps, vec![(i64::MAX - 1, i64::MAX - 1)]);
    Ok(())
}

#[test]
fn no_records_means_all_gaps() {
    let out = decode_partition(None, &[range(5, 7, 1)], LIMITS, &mut InflateBudget::new(1));
    assert_eq!(out.gaps, vec![(5, 7)]);
    assert!(out.records.is_empty());
}

#[test]
fn uncompressed_payloads_are_slices_of_the_response() -> TestResult {
    let data = ours(0, 3, RawCompression::None)?;
    let range_of_data = data.as_ptr() as usize..data.as_ptr() as usize + data.len();
    let out = decode(data.clone(), &[range(0, 2, 1)]);
    let value = out.records[1]
        .value
        .as_ref()
        .ok_or("record 1 has no value")?;
    assert!(range_of_data.contains(&(value.as_ptr() as usize)));
    Ok(())
}

#[test]
fn control_batches_are_gaps() -> TestResult {
    let mut data = ours(0, 2, RawCompression::None)?.to_vec();
    data[22] |= 0x20;
    let crc = crc32c::crc32c(&data[21..]);
    data[17..21].copy_from_slice(&crc.to_be_bytes());
    let out = decode(Bytes::from(data), &[range(0, 1, 1)]);
    assert!(out.records.is_empty());
    assert_eq!(out.gaps, vec![(0, 1)]);
    Ok(())
}

#[test]
fn a_batch_whose_offsets_repeat_is_undecodable() -> TestResult {
    let mut data = ours(0, 3, RawCompression::None)?.to_vec();
    // Record 1's offset delta (after its length and attributes and timestamp delta bytes) made 0.
    let second = 61 + usize::from(data[61]) / 2 + 1;
    data[second + 3] = 0x00;
    let crc = crc32c::crc32c(&data[21..]);
    data[17..21].copy_from_slice(&crc.to_be_bytes());
    let out = decode(Bytes::from(data), &[range(0, 2, 1)]);
    assert_eq!(undecodable(&out).len(), 3);
    Ok(())
}

#[test]
fn a_repeated_batch_is_skipped_not_delivered_twice() -> TestResult {
    let first = ours(0, 3, RawCompression::None)?;
    let data = join(&[&first, &first, &first, &ours(3, 1, RawCompression::None)?]);
    let out = decode(data, &[range(0, 3, 1)]);
    assert_eq!(offsets(&out), vec![0, 1, 2, 3]);
    assert!(undecodable(&out).is_empty() && out.gaps.is_empty());
    Ok(())
}
