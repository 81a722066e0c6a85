//! Hostile bytes into every decoder of network data: record batches (every compression, headers,
//! control batches) and every response the client decodes, valid and then cut, mutated, lying
//! about lengths, inflating past their caps, and random. Needs no broker.
//!
//! A counting global allocator measures each decode: no single allocation may exceed what the
//! input justifies (see [`bound`]), so a length taken from the
//! wire and reserved before the bytes are checked fails here even when it would not crash.
//!
//! Inputs come from `rand`'s `StdRng` with fixed seeds, not proptest: the same cases run on every
//! machine and in CI without a persistence file, the case counts are explicit (tuned to keep this
//! binary well under a minute in a debug build), and no new dependency is needed. A failure
//! prints the failing input (hex) and saves it under `target/tmp/hostile_bytes/`, so it
//! reproduces without the generator and needs no shrinking.

#[path = "hostile_bytes/batches.rs"]
mod batches;
#[path = "hostile_bytes/bound.rs"]
mod bound;
#[path = "hostile_bytes/response_cases.rs"]
mod response_cases;
#[path = "hostile_bytes/responses.rs"]
mod responses;

use std::collections::BTreeSet;

use alloc_probe::CountingAllocator;
use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use worker_kafka::test_util::{
    DecodedPartition, DecodedRecords, RawCompression, RawRecordSpec, decode_partition, encode_batch,
};

use batches::{CODECS, Fate, HEADER_LEN, Shape, Stream};
use bound::{bounded, failure, records_limit};
use response_cases::{Api, apis};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// One partition's decode: `data` with `first..=last` acquired, under [`records_limit`].
#[derive(Debug, Clone, Copy)]
struct Fetch {
    first: i64,
    last: i64,
    max_batch_bytes: usize,
    budget: usize,
}

impl Fetch {
    fn acquired(&self) -> usize {
        usize::try_from(self.last - self.first + 1).unwrap_or(0)
    }

    fn decode(&self, what: &str, data: &[u8]) -> Result<DecodedPartition> {
        let limit = records_limit(data.len(), self.max_batch_bytes, self.acquired());
        let bytes = Bytes::copy_from_slice(data);
        let decoded = bounded(what, data, limit, || {
            decode_partition(
                bytes,
                self.first,
                self.last,
                self.max_batch_bytes,
                self.budget,
            )
        })?;
        accounted_once(&decoded.summary(), self.first, self.last)
            .map_err(|e| failure(what, data, &format!("{e:#}")))?;
        Ok(decoded)
    }
}

/// Every acquired offset is exactly one of: record, undecodable, gap, release.
fn accounted_once(d: &DecodedRecords, first: i64, last: i64) -> Result<()> {
    let mut seen: Vec<i64> = d.records.iter().chain(&d.undecodable).copied().collect();
    for &(from, to) in d.gaps.iter().chain(&d.releases) {
        ensure!(from <= to, "range {from}..={to} is reversed");
        seen.extend(from..=to);
    }
    let n = seen.len();
    seen.sort_unstable();
    seen.dedup();
    ensure!(
        seen.len() == n,
        "{} offsets accounted twice",
        n - seen.len()
    );
    let want: Vec<i64> = (first..=last).collect();
    if seen != want {
        let seen: BTreeSet<_> = seen.into_iter().collect();
        let want: BTreeSet<_> = want.into_iter().collect();
        bail!(
            "offsets never accounted: {:?}; accounted but never acquired: {:?}",
            want.difference(&seen).take(10).collect::<Vec<_>>(),
            seen.difference(&want).take(10).collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// A random acquired range over `stream`, sometimes reaching before or after its batches.
fn acquired_over(rng: &mut StdRng, stream: &Stream) -> (i64, i64) {
    let start = stream.batches.first().map_or(0, |b| b.base);
    let first = (start + rng.random_range(-3..=5)).max(0);
    let last = (stream.end + rng.random_range(-5..=3)).max(first);
    (first, last)
}

/// A fetch of `stream` with a random acquired range and budget, and a cap every batch fits under
/// but not by much (so the bound stays close to what the stream needs).
fn fetch_of(rng: &mut StdRng, stream: &Stream) -> Fetch {
    let (first, last) = acquired_over(rng, stream);
    let largest = stream.batches.iter().map(|b| b.inflated).max().unwrap_or(0);
    let cap = (largest + rng.random_range(0..=largest)).max(1024);
    let budget = if rng.random_bool(0.5) {
        usize::MAX
    } else {
        rng.random_range(0..4 * cap)
    };
    Fetch {
        first,
        last,
        max_batch_bytes: cap,
        budget,
    }
}

const VALID: Shape = Shape {
    bad_header_keys: false,
    max_batches: 6,
    max_records: 12,
};
const HOSTILE_HEADERS: Shape = Shape {
    bad_header_keys: true,
    ..VALID
};

fn same_record(got: &worker_kafka::test_util::RecordFields, want: &RawRecordSpec) -> bool {
    let bytes = |b: &Option<Bytes>| b.as_ref().map(|b| b.to_vec());
    bytes(&got.key) == want.key
        && bytes(&got.value) == want.value
        && got.headers.len() == want.headers.len()
        && got
            .headers
            .iter()
            .zip(&want.headers)
            .all(|(h, (k, v))| Some(h.key.as_bytes()) == k.as_deref() && bytes(&h.value) == *v)
}

/// Valid streams: every record comes back intact, undecodable only where a header key is not
/// UTF-8 or null, control batches and holes are gaps, releases only where the budget ran out.
#[test]
fn valid_batches_decode_intact() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0xba7c4);
    for case in 0..1_200 {
        let shape = if case % 2 == 0 {
            VALID
        } else {
            HOSTILE_HEADERS
        };
        let stream = batches::stream(&mut rng, shape)?;
        let fetch = fetch_of(&mut rng, &stream);
        let what = format!("valid stream {case}");
        let decoded = fetch.decode(&what, &stream.bytes)?;
        let summary = decoded.summary();
        let (fates, may_release) = batches::fates(&stream, fetch.first, fetch.last);
        let released = |o: i64| summary.releases.iter().any(|&(a, b)| a <= o && o <= b);
        let may = |o: i64| may_release.iter().any(|&(a, b)| a <= o && o <= b);
        if fetch.budget == usize::MAX {
            ensure!(
                summary.releases.is_empty(),
                "{what}: released without a budget"
            );
        }
        let records = decoded.records();
        for r in &records {
            match fates.get(&r.offset) {
                Some(Fate::Record(want)) => ensure!(
                    same_record(r, want),
                    "{what}: offset {} came back as {r:?}, not {want:?}",
                    r.offset
                ),
                other => bail!("{what}: offset {} delivered, expected {other:?}", r.offset),
            }
        }
        for o in fetch.first..=fetch.last {
            let delivered = records.iter().any(|r| r.offset == o);
            let undecodable = summary.undecodable.contains(&o);
            let ok = match fates.get(&o) {
                Some(Fate::Record(_)) => delivered || (released(o) && may(o)),
                Some(Fate::Undecodable) => undecodable || (released(o) && may(o)),
                None => summary.gaps.iter().any(|&(a, b)| a <= o && o <= b),
            };
            ensure!(
                ok,
                "{what}: offset {o} expected {:?}, got {summary:?}",
                fates.get(&o)
            );
        }
    }
    Ok(())
}

/// Valid streams cut at random points: never a panic, every offset accounted once.
#[test]
fn truncated_batches_are_accounted() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0xc07);
    for case in 0..600 {
        let stream = batches::stream(&mut rng, HOSTILE_HEADERS)?;
        let fetch = fetch_of(&mut rng, &stream);
        for _ in 0..8 {
            let cut = rng.random_range(0..stream.bytes.len());
            fetch.decode(&format!("stream {case} cut at {cut}"), &stream.bytes[..cut])?;
        }
    }
    Ok(())
}

/// Random byte mutations, with the CRC left as it is (the batch is bad) or fixed up (the bytes
/// reach the records decoder).
#[test]
fn mutated_batches_are_accounted() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0x3a7e);
    for case in 0..800 {
        let stream = batches::stream(&mut rng, HOSTILE_HEADERS)?;
        let fetch = fetch_of(&mut rng, &stream);
        for round in 0..6 {
            let mut data = stream.bytes.clone();
            let b = &stream.batches[rng.random_range(0..stream.batches.len())];
            for _ in 0..rng.random_range(1..5) {
                let i = rng.random_range(b.at..b.at + b.len);
                data[i] = rng.random();
            }
            if round % 2 == 1 {
                batches::fix_crc(&mut data[b.at..b.at + b.len]);
            }
            fetch.decode(&format!("stream {case} mutation {round}"), &data)?;
        }
    }
    Ok(())
}

/// Big-endian `value` written over `data[at..at + N]`.
fn overwrite<const N: usize>(data: &mut [u8], at: usize, value: [u8; N]) {
    if let Some(slot) = data.get_mut(at..at + N) {
        slot.copy_from_slice(&value);
    }
}

/// Header fields replaced by huge, negative and off-by-one values, CRC fixed where it covers
/// the field: batch length, base offset, last offset delta, record count, magic, codec.
#[test]
fn batch_headers_that_lie_are_accounted() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0x1e);
    for case in 0..240 {
        let stream = batches::stream(&mut rng, HOSTILE_HEADERS)?;
        let fetch = fetch_of(&mut rng, &stream);
        let b = &stream.batches[rng.random_range(0..stream.batches.len())];
        let len = i32::try_from(b.len - 12)?;
        let count = i32::try_from(b.records.len())?;
        let attributes = stream.bytes[b.at + 22] & !0x07;
        // (field, where, bytes written there, whether the CRC covers it and is fixed up)
        let mut lies: Vec<(&str, usize, Vec<u8>, bool)> = Vec::new();
        for v in [
            i32::MAX,
            i32::MIN,
            -1,
            0,
            48,
            49,
            len - 1,
            len + 1,
            len + 4096,
        ] {
            lies.push(("batch length", 8, v.to_be_bytes().to_vec(), false));
        }
        for v in [i64::MAX, i64::MIN, -1, i64::MAX - 2] {
            lies.push(("base offset", 0, v.to_be_bytes().to_vec(), false));
        }
        for v in [i32::MAX, i32::MIN, -1, 0, count] {
            lies.push(("last offset delta", 23, v.to_be_bytes().to_vec(), true));
        }
        for v in [i32::MAX, i32::MIN, -1, 0, count + 1] {
            lies.push(("record count", 57, v.to_be_bytes().to_vec(), true));
        }
        for magic in [0u8, 1, 3, 0xff] {
            lies.push(("magic", 16, vec![magic], false));
        }
        for codec in 0u8..8 {
            lies.push(("codec", 22, vec![attributes | codec], true));
        }
        for (field, at, value, covered) in &lies {
            let mut data = stream.bytes.clone();
            let batch = &mut data[b.at..b.at + b.len];
            batch[*at..*at + value.len()].copy_from_slice(value);
            if *covered {
                batches::fix_crc(batch);
            }
            fetch.decode(&format!("stream {case}: {field} {value:02x?}"), &data)?;
        }
    }
    Ok(())
}

/// Zig-zag varint encodings of lengths no record can hold, and an overlong varint.
fn hostile_varints() -> Vec<Vec<u8>> {
    let zigzag = |v: i32| {
        let mut z = ((v << 1) ^ (v >> 31)) as u32;
        let mut out = Vec::new();
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
        out
    };
    let mut out: Vec<Vec<u8>> = [i32::MAX, i32::MIN, -2, -1, 1 << 20, 100_000]
        .into_iter()
        .map(zigzag)
        .collect();
    out.push(vec![0xff; 10]);
    out
}

/// The length of the varint at the start of `data` (at least one byte, at most ten).
fn varint_len(data: &[u8]) -> usize {
    data.iter()
        .take(10)
        .position(|b| b & 0x80 == 0)
        .map_or(data.len().clamp(1, 10), |i| i + 1)
}

/// Every varint position of a batch's records section (record length, key and value lengths,
/// header count, header key and value lengths, among others) replaced by a hostile value, then
/// the section compressed again and the batch reframed with a valid length and CRC.
#[test]
fn record_lengths_that_lie_are_accounted() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0x7a11);
    let varints = hostile_varints();
    for case in 0..60 {
        let n = rng.random_range(1..5);
        let shape = Shape {
            max_batches: 1,
            max_records: 4,
            ..HOSTILE_HEADERS
        };
        let records: Vec<RawRecordSpec> = batches::stream(&mut rng, shape)?
            .batches
            .into_iter()
            .flat_map(|b| b.records)
            .take(n)
            .collect();
        // Small values, so the section stays short and every position is tried.
        let records: Vec<RawRecordSpec> = records
            .into_iter()
            .map(|mut r| {
                r.key = r.key.map(|k| k.into_iter().take(6).collect());
                r.value = r.value.map(|v| v.into_iter().take(6).collect());
                r
            })
            .collect();
        let plain = encode_batch(0, &records, RawCompression::None)?;
        let (header, section) = plain.split_at(HEADER_LEN);
        let codec = CODECS[case % CODECS.len()];
        let count = i64::try_from(records.len())?;
        let fetch = Fetch {
            first: 0,
            last: count + 2,
            max_batch_bytes: 64 << 10,
            budget: usize::MAX,
        };
        for at in 0..section.len() {
            for v in &varints {
                let mut lying = section[..at].to_vec();
                lying.extend_from_slice(v);
                lying.extend_from_slice(&section[at + varint_len(&section[at..])..]);
                let batch = batches::reframe(header, &lying, codec)?;
                let what = format!("{codec:?} section byte {at} = {v:02x?}");
                fetch.decode(&what, &batch)?;
            }
        }
    }
    Ok(())
}

/// A small compressed section that inflates far past the batch cap, alone and between good
/// batches, under a small and a large cap: its offsets are undecodable or released, never
/// delivered, and inflating it never reserves more than the cap.
#[test]
fn compression_bombs_stay_under_the_cap() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0xb0b);
    let good = [RawRecordSpec::value("good")];
    // Powers of two and not: a buffer that doubles overshoots a cap that is not one.
    for cap in [64 << 10, 768 << 10, 1 << 20] {
        let bomb = [RawRecordSpec::value(vec![0u8; cap * 3])];
        for codec in &CODECS[1..] {
            let bomb = batches::encode(0, &bomb, *codec)?;
            let good = batches::encode(0, &good, *codec)?;
            ensure!(
                bomb.len() < cap / 4,
                "{codec:?}: the bomb is not small: {} bytes",
                bomb.len()
            );
            for case in 0..4 {
                let position = rng.random_range(0..3);
                let mut data = Vec::new();
                for i in 0..3i64 {
                    let mut batch = if i == position { &bomb } else { &good }.clone();
                    // The base offset is not covered by the CRC.
                    overwrite(&mut batch, 0, i.to_be_bytes());
                    data.extend_from_slice(&batch);
                }
                let fetch = Fetch {
                    first: 0,
                    last: 2,
                    max_batch_bytes: cap,
                    budget: rng.random_range(cap..4 * cap),
                };
                let what = format!("{codec:?} bomb at {position} under {cap} ({case})");
                let d = fetch.decode(&what, &data)?.summary();
                ensure!(
                    !d.records.contains(&position),
                    "{what}: the bomb was delivered"
                );
                let released = |o: i64| d.releases.iter().any(|&(a, b)| a <= o && o <= b);
                ensure!(
                    (0..3).all(|o| o == position || d.records.contains(&o) || released(o)),
                    "{what}: a good neighbour was lost: {d:?}"
                );
            }
        }
    }
    Ok(())
}

/// A batch of many tiny records of which only a few are acquired (what a fetch in record-limit
/// mode gets from a batch of small records): what is not acquired is never held.
#[test]
fn many_small_records_few_acquired() -> Result<()> {
    let tiny: Vec<RawRecordSpec> = (0..20_000).map(|_| RawRecordSpec::default()).collect();
    for codec in CODECS {
        let data = batches::encode(0, &tiny, codec)?;
        for (first, last) in [(0, 0), (10_000, 10_009), (19_990, 19_999)] {
            // The section inflates to about 170 KB.
            let fetch = Fetch {
                first,
                last,
                max_batch_bytes: 256 << 10,
                budget: 256 << 10,
            };
            let what = format!("{codec:?}: 20,000 tiny records, {first}..={last} acquired");
            let d = fetch.decode(&what, &data)?.summary();
            ensure!(
                d.records == (first..=last).collect::<Vec<_>>(),
                "{what}: {d:?}"
            );
        }
    }
    Ok(())
}

/// Random bytes, and random bytes after a valid batch header, as a partition's records.
#[test]
fn random_bytes_as_records_are_accounted() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0x4a4d);
    let header = encode_batch(5, &[RawRecordSpec::value("x")], RawCompression::None)?;
    for case in 0..10_000 {
        let len = rng.random_range(0..400);
        let mut data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if case % 2 == 1 {
            let mut framed = header[..HEADER_LEN].to_vec();
            framed.append(&mut data);
            let length = i32::try_from(framed.len() - 12)?;
            framed[8..12].copy_from_slice(&length.to_be_bytes());
            batches::fix_crc(&mut framed);
            data = framed;
        }
        let fetch = Fetch {
            first: rng.random_range(0..10),
            last: rng.random_range(10..200),
            max_batch_bytes: 16 << 10,
            budget: 32 << 10,
        };
        fetch.decode(&format!("random records {case}"), &data)?;
    }
    Ok(())
}

/// The bound is not vacuous: a decoder that reserves the length its input claims is caught by
/// the very checks every decode above goes through, the loosest response bound included.
#[test]
fn a_decoder_that_trusts_a_claimed_length_is_caught() -> Result<()> {
    /// Reserves the length its first four bytes claim, as a decoder must not.
    fn naive(mut b: Bytes) -> bool {
        use bytes::Buf;
        if b.remaining() < 4 {
            return false;
        }
        let claimed = b.get_u32() as usize;
        let mut out: Vec<u8> = Vec::with_capacity(claimed);
        out.extend_from_slice(&b);
        std::hint::black_box(out).len() == claimed
    }
    let loosest = apis()?
        .into_iter()
        .max_by_key(|api| api.expansion)
        .context("no decoders")?;
    let api = Api {
        name: "Naive",
        decode: naive,
        ..loosest
    };
    let mut claims = (64u32 << 20).to_be_bytes().to_vec();
    claims.extend_from_slice(b"twelve bytes");
    let err = api
        .decode("claims 64 MiB", &claims)
        .err()
        .context("a 64 MiB reservation for 16 bytes passed the response check")?;
    ensure!(err.to_string().contains("single allocation"), "{err}");

    let limit = records_limit(claims.len(), 64 << 10, 1);
    let err = bounded("claims 64 MiB", &claims, limit, || {
        naive(Bytes::copy_from_slice(&claims))
    })
    .err()
    .context("a 64 MiB reservation for 16 bytes passed the records check")?;
    ensure!(err.to_string().contains("single allocation"), "{err}");

    // An honest decoder of the same bytes passes both.
    let honest = Api {
        decode: |b| !b.is_empty(),
        ..api
    };
    ensure!(honest.decode("honest", &claims)?);
    Ok(())
}
