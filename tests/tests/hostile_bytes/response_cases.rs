//! Every response decoder: valid samples, then cut at every length, mutated, with lengths and
//! counts replaced by huge values, and random bytes.

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use worker_kafka::test_util::{Decoder, response_decoders};

use super::bound::{bounded, expansion, response_limit};
use super::responses::{Gen, Sampler};
use super::{overwrite, varint_len};

/// A response decoder by name, a sampler of valid inputs for it and its [`expansion`].
#[derive(Clone, Copy)]
pub(crate) struct Api {
    pub(crate) name: &'static str,
    pub(crate) decode: Decoder,
    pub(crate) sample: Sampler,
    pub(crate) expansion: usize,
}

impl Api {
    /// Decodes `input` under [`response_limit`]; `true` when it decoded.
    pub(crate) fn decode(&self, what: &str, input: &[u8]) -> Result<bool> {
        let bytes = Bytes::copy_from_slice(input);
        let limit = response_limit(self.expansion, input.len());
        bounded(&format!("{}: {what}", self.name), input, limit, || {
            (self.decode)(bytes)
        })
    }

    /// A valid response with arrays of up to `scale` elements.
    pub(crate) fn sample(&self, rng: &mut StdRng, scale: usize) -> Result<Vec<u8>> {
        (self.sample)(&mut Gen { rng, scale })
    }
}

/// Every response decoder with its sampler and expansion: a decoder without both fails.
pub(crate) fn apis() -> Result<Vec<Api>> {
    let samplers = super::responses::samplers();
    let decoders = response_decoders();
    let mut out = Vec::new();
    for (name, decode) in &decoders {
        let sample = samplers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| *s)
            .with_context(|| format!("no sampler for the {name} decoder"))?;
        let expansion =
            expansion(name).with_context(|| format!("no expansion for the {name} decoder"))?;
        out.push(Api {
            name,
            decode: *decode,
            sample,
            expansion,
        });
    }
    for (name, _) in &samplers {
        ensure!(
            decoders.iter().any(|(n, _)| n == name),
            "a sampler for {name}, which has no decoder"
        );
    }
    Ok(out)
}

/// Valid samples of every response, small and large: each decodes, within the bound.
#[test]
fn valid_responses_decode() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0x5a3e);
    for api in apis()? {
        for case in 0..40 {
            let scale = if case % 10 == 9 { 12 } else { 4 };
            let input = api.sample(&mut rng, scale)?;
            ensure!(
                api.decode(&format!("valid {case}"), &input)?,
                "{}: a valid sample did not decode",
                api.name
            );
        }
    }
    Ok(())
}

/// Valid samples cut at every length.
#[test]
fn truncated_responses_never_panic() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0x7c);
    for api in apis()? {
        for _ in 0..20 {
            let input = api.sample(&mut rng, 3)?;
            for cut in 0..input.len() {
                api.decode(&format!("cut at {cut}"), &input[..cut])?;
            }
        }
    }
    Ok(())
}

/// Valid samples with random bytes changed, and int32 fields overwritten with extreme values.
#[test]
fn mutated_responses_never_panic() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0x3e5);
    for api in apis()? {
        for n in 0..40 {
            let valid = api.sample(&mut rng, 4)?;
            ensure!(!valid.is_empty(), "{}: an empty sample", api.name);
            for case in 0..150 {
                let mut input = valid.clone();
                if case % 3 == 0 {
                    let at = rng.random_range(0..input.len());
                    let v = [i32::MAX, i32::MIN, -1, 0][rng.random_range(0..4)];
                    overwrite(&mut input, at, v.to_be_bytes());
                } else {
                    for _ in 0..rng.random_range(1..5) {
                        let i = rng.random_range(0..input.len());
                        input[i] = rng.random();
                    }
                }
                api.decode(&format!("sample {n} mutation {case}"), &input)?;
            }
        }
    }
    Ok(())
}

/// Unsigned varints of lengths and counts no response can hold, or that `remaining` bytes after
/// the varint just hold.
fn huge_uvarints(remaining: usize) -> Vec<Vec<u8>> {
    let remaining = u32::try_from(remaining).unwrap_or(u32::MAX);
    let mut claims = vec![
        u32::MAX,
        u32::MAX - 1,
        i32::MAX as u32,
        remaining.saturating_add(2),
        remaining.saturating_mul(2),
    ];
    // Counts the bytes left could just hold, for every smallest element size a decoder checks
    // against: these pass the check and reserve the most (a compact count is one more than the
    // count).
    claims.extend((1..=28).map(|min| remaining / min + 1));
    claims
        .into_iter()
        .map(|mut v| {
            let mut out = Vec::new();
            while v >= 0x80 {
                out.push((v as u8 & 0x7f) | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
            out
        })
        .collect()
}

/// Every varint position of small valid samples (array counts and string lengths among them),
/// and the first and random positions of large ones (where the bound is not lost in [`SLACK`]),
/// replaced by a huge value or by the largest count the bytes left could hold.
#[test]
fn responses_with_huge_lengths_never_over_allocate() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0x1a26e);
    for api in apis()? {
        for round in 0..5 {
            let large = round >= 3;
            let input = api.sample(&mut rng, if large { 8 } else { 3 })?;
            let positions: Vec<usize> = if large {
                // The first bytes hold the top-level counts, which may claim the whole input.
                let random = (0..40).map(|_| rng.random_range(0..input.len()));
                (0..input.len().min(64)).chain(random).collect()
            } else {
                (0..input.len()).collect()
            };
            for at in positions {
                let (head, rest) = input.split_at(at);
                let after = &rest[varint_len(rest).min(5)..];
                for v in huge_uvarints(after.len()) {
                    let lying = [head, &v, after].concat();
                    api.decode(&format!("uvarint at {at} = {v:02x?}"), &lying)?;
                }
            }
        }
    }
    Ok(())
}

/// Random bytes into every response decoder.
#[test]
fn random_responses_never_panic() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0xfa2d);
    for api in apis()? {
        for case in 0..3_000 {
            let len = rng.random_range(0..300);
            let input: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            api.decode(&format!("random {case}"), &input)?;
        }
    }
    Ok(())
}
