//! Benchmarks live in `benches/`: `checksum` (Internet checksum, fused
//! copy-and-checksum, beside memcpy, etherparse and a byte loop) and
//! `segmentation` (TSO by reference, GSO, GRO, header emit against
//! etherparse). Run with `cargo bench -p xtcp-benches`; results and the
//! machine they were measured on are in `docs/BENCHMARKS.md`.

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
