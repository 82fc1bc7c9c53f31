//! Checksum throughput beside memcpy of the same buffer, in the same run:
//! `sum` (ours, 64 bytes per step), `copy_and_sum` (ours, fused),
//! etherparse's `Sum16BitWords`, and a byte-at-a-time loop.

#![deny(unsafe_code)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;
use xtcp_benches::ThreadCpuTime;
use xtcp_benches::pattern;
use xtcp_engine::wire::checksum;

fn checksums(c: &mut Criterion<ThreadCpuTime>) {
    for len in [1500usize, 4096, 9000, 65536] {
        let src = pattern(len, len as u32);
        // Page-aligned allocations put source and destination at the same
        // offset modulo 4 KiB; glibc's memcpy is pathologically slow on this
        // VM in that case, so copies are measured both ways.
        let mut dst = vec![0u8; len + 64];
        let mut g = c.benchmark_group("checksum");
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::new("memcpy_same_offset", len), &src, |b, s| {
            b.iter(|| {
                dst[..len].copy_from_slice(black_box(s));
                black_box(&dst);
            })
        });
        g.bench_with_input(BenchmarkId::new("memcpy_dst_plus_64", len), &src, |b, s| {
            b.iter(|| {
                dst[64..].copy_from_slice(black_box(s));
                black_box(&dst);
            })
        });
        g.bench_with_input(BenchmarkId::new("xtcp_sum", len), &src, |b, s| {
            b.iter(|| checksum::sum(black_box(s)))
        });
        g.bench_with_input(BenchmarkId::new("xtcp_sum_portable", len), &src, |b, s| {
            b.iter(|| checksum::sum_portable(black_box(s)))
        });
        g.bench_with_input(BenchmarkId::new("xtcp_copy_and_sum", len), &src, |b, s| {
            b.iter(|| checksum::copy_and_sum(&mut dst[64..], black_box(s)))
        });
        g.bench_with_input(
            BenchmarkId::new("xtcp_copy_and_sum_portable", len),
            &src,
            |b, s| b.iter(|| checksum::copy_and_sum_portable(&mut dst[64..], black_box(s))),
        );
        g.bench_with_input(BenchmarkId::new("etherparse", len), &src, |b, s| {
            b.iter(|| {
                etherparse::checksum::Sum16BitWords::new()
                    .add_slice(black_box(s))
                    .ones_complement()
            })
        });
        g.bench_with_input(BenchmarkId::new("naive_bytes", len), &src, |b, s| {
            b.iter(|| checksum::sum_naive(black_box(s)))
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(ThreadCpuTime)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(30);
    targets = checksums
}
criterion_main!(benches);
