//! Benchmarks live in `benches/`: `checksum` (Internet checksum, fused
//! copy-and-checksum, beside memcpy, etherparse and a byte loop),
//! `segmentation` (TSO by reference, header emit against etherparse),
//! `tcp_sim` (the TCP core alone, two connections in memory) and `conns`
//! (one worker's per-segment cost against the connections it holds, and
//! the listener under a SYN flood). Run with `cargo bench -p xtcp-benches`;
//! results and the machine they were measured on are in
//! `docs/BENCHMARKS.md`.
#![deny(unsafe_code)]

/// Deterministic pseudo-random bytes (xorshift), so every run sums the
/// same data.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

use criterion::Throughput;
use criterion::measurement::{Measurement, ValueFormatter};
use std::time::Duration;

/// Criterion measurement: CPU time of the benchmarking thread
/// (`CLOCK_THREAD_CPUTIME_ID`), not wall time. Time the thread spends
/// descheduled — other builds and benchmarks on this shared 2-core VM — is
/// not counted, so figures are per busy core. (Cache and memory-bandwidth
/// contention from neighbours still shows.)
pub struct ThreadCpuTime;

impl Measurement for ThreadCpuTime {
    type Intermediate = cpu_time::ThreadTime;
    type Value = Duration;

    fn start(&self) -> Self::Intermediate {
        cpu_time::ThreadTime::now()
    }

    fn end(&self, i: Self::Intermediate) -> Self::Value {
        i.elapsed()
    }

    fn add(&self, v1: &Self::Value, v2: &Self::Value) -> Self::Value {
        *v1 + *v2
    }

    fn zero(&self) -> Self::Value {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Self::Value) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

/// Fixed, comparable units: ns/µs/ms for time, decimal GB/s for bytes,
/// Melem/s for elements.
struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical_ns: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = if typical_ns < 1e3 {
            (1.0, "ns")
        } else if typical_ns < 1e6 {
            (1e3, "µs")
        } else {
            (1e6, "ms")
        };
        for v in values.iter_mut() {
            *v /= div;
        }
        unit
    }

    fn scale_throughputs(
        &self,
        _typical_ns: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let (count, div, unit) = match *throughput {
            Throughput::Bytes(b) | Throughput::BytesDecimal(b) => (b as f64, 1e9, "GB/s"),
            Throughput::Elements(e) => (e as f64, 1e6, "Melem/s"),
        };
        for v in values.iter_mut() {
            *v = count * 1e9 / *v / div;
        }
        unit
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}
