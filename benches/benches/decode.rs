//! Record decoding plus acquired-range filtering, as one share fetch response partition.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use worker_kafka::bench::{decode_acquired, sample_records};

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode_acquired");
    for compression in ["none", "lz4", "zstd", "snappy", "gzip"] {
        // 20 batches of 50 records with 256-byte payloads; the acquired range cuts the first and
        // last batch (record_limit does that).
        let data = sample_records(20, 50, 256, compression).expect("sample records");
        group.throughput(Throughput::Elements(900));
        group.bench_with_input(
            BenchmarkId::new("1000_records", compression),
            &data,
            |b, data| {
                b.iter(|| decode_acquired(black_box(data.clone()), 25, 924).expect("decodes"))
            },
        );
    }
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
