//! The Internet checksum (RFC 1071), its incremental update (RFC 1624), a
//! fused copy-and-checksum, and the IPv4/IPv6 pseudo-headers.
//!
//! # Contract
//!
//! - A *sum* (`u16`) is the folded ones-complement sum of big-endian 16-bit
//!   words, **not** complemented. A *checksum* is `!sum`; it is what goes into
//!   a header field. A buffer whose checksum field is correct sums to
//!   `0xffff`.
//! - [`sum`] treats `data[0]` as the high byte of a word, i.e. as if `data`
//!   started at an even offset of the datagram; an odd trailing byte is
//!   padded with zero. A piece that starts at an odd offset of the datagram
//!   is accounted for by byte-swapping its sum ([`combine`] does this, and so
//!   does [`Accumulator`]).
//! - Sums are computed 64 bytes per step into sixteen independent 64-bit lanes
//!   (32-bit words, no carries to chase), which the compiler vectorises. The
//!   arithmetic is plain safe Rust, no intrinsics. On x86-64 the same code is
//!   also compiled with AVX2 enabled (`#[target_feature]`) and chosen at run
//!   time when the CPU has AVX2 — the baseline build only gets SSE2, which
//!   halves the vector width. Calling those copies (of the sum and of the
//!   fused copy-and-sum) are the two `unsafe` blocks in this module (the CPU
//!   check is their safety argument); the scalar/SSE2 path is the fallback
//!   and the tests compare both with a byte-by-byte reference.
//! - Nothing here allocates or panics, except [`copy_and_sum`] when `dst` is
//!   shorter than `src` (like `copy_from_slice`).

use core::net::{Ipv4Addr, Ipv6Addr};

/// Folds a wide ones-complement accumulator to 16 bits (end-around carry).
#[inline]
pub const fn fold(mut s: u64) -> u16 {
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Folds a 32-bit ones-complement accumulator to 16 bits: two steps are
/// enough below 2^32 (the first leaves at most 0x1fffe). For sums of a few
/// 16-bit fields, as the per-segment header fix-ups are.
#[inline]
pub const fn fold32(s: u32) -> u16 {
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Ones-complement addition of two folded sums.
#[inline]
pub const fn add(a: u16, b: u16) -> u16 {
    fold(a as u64 + b as u64)
}

/// Ones-complement subtraction: the sum `s` such that `add(s, b) == a`
/// (up to the ±0 ambiguity of ones-complement arithmetic).
#[inline]
pub const fn sub(a: u16, b: u16) -> u16 {
    add(a, !b)
}

/// Combines the sum `piece` of bytes that start `offset` bytes into a
/// datagram with the running sum `acc` of the bytes before them.
#[inline]
pub const fn combine(acc: u16, piece: u16, offset: usize) -> u16 {
    let piece = if offset & 1 == 1 {
        piece.swap_bytes()
    } else {
        piece
    };
    add(acc, piece)
}

/// Sums 64 bytes as sixteen little-endian u32 words into sixteen u64 lanes.
#[inline(always)]
fn add_block(lanes: &mut [u64; 16], c: &[u8; 64]) {
    for (i, lane) in lanes.iter_mut().enumerate() {
        *lane += u32::from_le_bytes([c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]]) as u64;
    }
}

/// Adds the sixteen lanes. Each lane holds at most 2^24 u32 words (1 GiB
/// blocks, see [`sum_le_lanes`]), so lanes are below 2^56 and their sum below
/// 2^60: no overflow, one fold afterwards. A pairwise tree keeps the main
/// loop's vectorisation as it is (a plain `iter().sum()` changed it and ran
/// 3–4× slower, measured).
#[inline(always)]
fn fold_lanes(lanes: &[u64; 16]) -> u64 {
    let mut v = *lanes;
    let mut n = 16;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            v[i] += v[i + n];
        }
    }
    v[0]
}

/// Folds each lane to 16 bits and adds them: for the fused copy loop, whose
/// SSE2 vectorisation the tree sum of [`fold_lanes`] makes 2–3× slower
/// (measured), while the plain sum loop gains from the tree.
#[inline(always)]
fn fold_lanes_each(lanes: &[u64; 16]) -> u64 {
    let mut s: u64 = 0;
    for &l in lanes {
        s += fold(l) as u64;
    }
    s
}

/// Sums a tail shorter than 64 bytes: 4-byte words, then 2, then 1.
#[inline]
fn sum_tail_le(rest: &[u8]) -> u64 {
    let mut s: u64 = 0;
    let mut words = rest.chunks_exact(4);
    for w in &mut words {
        s += u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    let tail = words.remainder();
    let mut i = 0;
    while i + 1 < tail.len() {
        s += u16::from_le_bytes([tail[i], tail[i + 1]]) as u64;
        i += 2;
    }
    if i < tail.len() {
        s += tail[i] as u64;
    }
    s
}

/// True if the AVX2 copies of the loops can run here (cached by std).
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// [`sum_le_lanes`] compiled with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_le_avx2(data: &[u8]) -> u64 {
    sum_le_lanes(data)
}

/// Little-endian-lane accumulation of `data` (see [`sum`]); returns a wide
/// accumulator whose fold is the byte-swapped Internet sum. Picks the AVX2
/// copy of the loop when the CPU has it.
#[inline]
fn sum_le(data: &[u8]) -> u64 {
    if data.len() < 64 {
        // Headers and partial blocks: skip the lanes.
        return fold(sum_tail_le(data)) as u64;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        #[expect(unsafe_code, reason = "runtime-selected AVX2 copy of safe code")]
        // SAFETY: the only requirement of a `#[target_feature(enable =
        // "avx2")]` function is that the CPU supports AVX2, checked just above.
        return unsafe { sum_le_avx2(data) };
    }
    sum_le_lanes(data)
}

/// The portable loop of [`sum_le`] (SSE2 on the x86-64 baseline).
#[inline(always)]
fn sum_le_lanes(data: &[u8]) -> u64 {
    if data.len() < 64 {
        return fold(sum_tail_le(data)) as u64;
    }
    // Each of the 16 u64 lanes receives one u32 per 64-byte step; slices
    // are processed in 1 GiB blocks (2^24 steps) and folded between blocks,
    // so neither a lane nor the sum of the lanes can overflow.
    let mut total: u64 = 0;
    for block in data.chunks(1 << 30) {
        let mut lanes = [0u64; 16];
        let mut rest = block;
        while let Some((c, tail)) = rest.split_first_chunk::<64>() {
            add_block(&mut lanes, c);
            rest = tail;
        }
        total += fold(fold_lanes(&lanes) + sum_tail_le(rest)) as u64;
    }
    total
}

/// The Internet sum of `data` (not complemented), `data[0]` taken as a high
/// byte. Processes 64 bytes per step.
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    fold(sum_le(data)).swap_bytes()
}

/// [`sum`] without the run-time AVX2 selection: the portable path, for tests
/// and benches that compare the two.
pub fn sum_portable(data: &[u8]) -> u16 {
    fold(sum_le_lanes(data)).swap_bytes()
}

/// The Internet checksum of `data`: `!sum(data)`.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// The reference implementation: one byte at a time. For tests and benches.
pub fn sum_naive(data: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for (i, &b) in data.iter().enumerate() {
        s += if i & 1 == 0 {
            (b as u32) << 8
        } else {
            b as u32
        };
        if s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
    }
    fold(s as u64)
}

/// Copies `src` into `dst[..src.len()]` and returns the Internet sum of the
/// bytes copied, reading each byte once.
///
/// # Panics
///
/// If `dst` is shorter than `src`.
pub fn copy_and_sum(dst: &mut [u8], src: &[u8]) -> u16 {
    #[cfg(target_arch = "x86_64")]
    if src.len() >= 64 && has_avx2() {
        #[expect(unsafe_code, reason = "runtime-selected AVX2 copy of safe code")]
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { copy_and_sum_avx2(dst, src) };
    }
    copy_and_sum_lanes(dst, src)
}

/// [`copy_and_sum_lanes`] compiled with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn copy_and_sum_avx2(dst: &mut [u8], src: &[u8]) -> u16 {
    copy_and_sum_lanes(dst, src)
}

/// [`copy_and_sum`] without the run-time AVX2 selection.
pub fn copy_and_sum_portable(dst: &mut [u8], src: &[u8]) -> u16 {
    copy_and_sum_lanes(dst, src)
}

#[inline(always)]
fn copy_and_sum_lanes(dst: &mut [u8], src: &[u8]) -> u16 {
    let dst = &mut dst[..src.len()];
    let mut total: u64 = 0;
    for (dblock, sblock) in dst.chunks_mut(1 << 30).zip(src.chunks(1 << 30)) {
        let mut lanes = [0u64; 16];
        let mut s = sblock;
        let mut d = dblock;
        while let (Some((c, st)), true) = (s.split_first_chunk::<64>(), d.len() >= 64) {
            // Load once into registers, sum, store.
            let c: [u8; 64] = *c;
            add_block(&mut lanes, &c);
            let (dc, dt) = core::mem::take(&mut d).split_at_mut(64);
            dc.copy_from_slice(&c);
            d = dt;
            s = st;
        }
        d.copy_from_slice(s);
        total += fold(fold_lanes_each(&lanes) + sum_tail_le(s)) as u64;
    }
    fold(total).swap_bytes()
}

/// RFC 1624 (eqn. 3) incremental update: the new checksum field after a
/// 16-bit word covered by `csum` changed from `old` to `new`.
#[inline]
pub const fn update16(csum: u16, old: u16, new: u16) -> u16 {
    !fold((!csum) as u64 + (!old) as u64 + new as u64)
}

/// RFC 1624 incremental update for an aligned 32-bit field.
#[inline]
pub const fn update32(csum: u16, old: u32, new: u32) -> u16 {
    let c = update16(csum, (old >> 16) as u16, (new >> 16) as u16);
    update16(c, old as u16, new as u16)
}

/// Sum of the IPv4 pseudo-header (RFC 793): addresses, zero, protocol,
/// upper-layer length.
#[inline]
pub fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, len: u32) -> u16 {
    let s = u32::from(src);
    let d = u32::from(dst);
    fold(
        (s >> 16) as u64
            + (s & 0xffff) as u64
            + (d >> 16) as u64
            + (d & 0xffff) as u64
            + protocol as u64
            + len as u64,
    )
}

/// Sum of the IPv6 pseudo-header (RFC 8200 §8.1): addresses, 32-bit
/// upper-layer length, next header.
#[inline]
pub fn pseudo_v6(src: &Ipv6Addr, dst: &Ipv6Addr, protocol: u8, len: u32) -> u16 {
    let mut s: u64 = protocol as u64 + (len >> 16) as u64 + (len & 0xffff) as u64;
    for w in src.segments().iter().chain(dst.segments().iter()) {
        s += *w as u64;
    }
    fold(s)
}

/// A running Internet sum over consecutive pieces of any length.
///
/// Tracks the parity of the bytes added so far, so pieces of odd length and
/// cached sums of later pieces combine correctly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accumulator {
    sum: u64,
    odd: bool,
}

impl Accumulator {
    /// An empty accumulator, or one starting from the folded sum `initial`
    /// (of an even number of bytes, e.g. a pseudo-header).
    #[inline]
    pub const fn new(initial: u16) -> Accumulator {
        Accumulator {
            sum: initial as u64,
            odd: false,
        }
    }

    /// Adds the next `data` bytes.
    #[inline]
    pub fn add_bytes(&mut self, data: &[u8]) {
        self.add_sum(sum(data), data.len());
    }

    /// Adds the next `len` bytes, whose [`sum`] (computed from their own
    /// start) is `piece`, without reading them.
    #[inline]
    pub fn add_sum(&mut self, piece: u16, len: usize) {
        let piece = if self.odd { piece.swap_bytes() } else { piece };
        self.sum += piece as u64;
        self.odd ^= len & 1 == 1;
        if self.sum >= 1 << 62 {
            self.sum = fold(self.sum) as u64;
        }
    }

    /// True if an odd number of bytes was added so far.
    #[inline]
    pub const fn is_odd(&self) -> bool {
        self.odd
    }

    /// The folded sum so far.
    #[inline]
    pub const fn sum(&self) -> u16 {
        fold(self.sum)
    }

    /// The checksum field value: `!sum`.
    #[inline]
    pub const fn checksum(&self) -> u16 {
        !fold(self.sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to 0xddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&d), 0xddf2);
        assert_eq!(sum_naive(&d), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    /// `fold32` is `fold` below 2^32: at the edges, and at every value a
    /// stride apart.
    #[test]
    fn fold32_is_fold() {
        let edges = [
            0,
            1,
            0xfffe,
            0xffff,
            0x1_0000,
            0x1_fffe,
            0x1_ffff,
            0xffff_0000,
            u32::MAX,
        ];
        for s in edges.into_iter().chain((0..=u32::MAX).step_by(65_521)) {
            assert_eq!(fold32(s), fold(u64::from(s)), "{s:#x}");
        }
    }

    #[test]
    fn ipv4_header_golden() {
        // A real IPv4 header with checksum 0xb861 (the classic example).
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(sum(&h), 0xffff);
    }

    /// Every length 0..=9000 at the start offsets `offsets` (odd offsets
    /// exercise the swap rule when the piece is combined after a prefix):
    /// `sum` — or, with `fused`, `copy_and_sum` — equals the byte-by-byte
    /// reference. Split in four tests so the test threads share the work.
    fn check_every_length(offsets: core::ops::Range<usize>, fused: bool) {
        let mut buf = vec![0u8; 9008];
        let mut x: u32 = 0x1234_5678;
        for b in buf.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        let mut dst = vec![0u8; 9008];
        for off in offsets {
            let prefix = sum_naive(&buf[..off]);
            // The reference grows one byte at a time: byte i of the piece is
            // a high byte when i is even.
            let mut reference: u32 = 0;
            for len in 0..=9000 {
                if len > 0 {
                    let b = buf[off + len - 1] as u32;
                    reference += if (len - 1) % 2 == 0 { b << 8 } else { b };
                    reference = (reference & 0xffff) + (reference >> 16);
                }
                let want = fold(reference as u64);
                let d = &buf[off..off + len];
                if fused {
                    // Both the run-time-selected (AVX2 where present) and the
                    // portable path.
                    dst[off..off + len].fill(0);
                    assert_eq!(
                        copy_and_sum(&mut dst[off..], d),
                        want,
                        "copy off {off} len {len}"
                    );
                    assert_eq!(&dst[off..off + len], d);
                    dst[off..off + len].fill(0);
                    assert_eq!(
                        copy_and_sum_portable(&mut dst[off..], d),
                        want,
                        "portable copy off {off} len {len}"
                    );
                    assert_eq!(&dst[off..off + len], d);
                    continue;
                }
                assert_eq!(sum(d), want, "off {off} len {len}");
                assert_eq!(sum_portable(d), want, "portable off {off} len {len}");
                if len % 97 == 0 || len < 80 {
                    assert_eq!(sum_naive(d), want, "naive off {off} len {len}");
                    // Prefix + piece combined equals the whole.
                    let whole = sum_naive(&buf[..off + len]);
                    assert_eq!(combine(prefix, sum(d), off), whole);
                }
            }
        }
    }

    #[test]
    fn every_length_offsets_0_3() {
        check_every_length(0..4, false);
    }

    #[test]
    fn every_length_offsets_4_7() {
        check_every_length(4..8, false);
    }

    #[test]
    fn every_length_fused_offsets_0_3() {
        check_every_length(0..4, true);
    }

    #[test]
    fn every_length_fused_offsets_4_7() {
        check_every_length(4..8, true);
    }

    #[test]
    fn all_ones_and_zero() {
        assert_eq!(sum(&[]), 0);
        assert_eq!(sum(&[0xff; 4096]), 0xffff);
        assert_eq!(sum(&[0xff]), 0xff00);
        assert_eq!(sum(&[0x12]), 0x1200);
    }

    #[test]
    fn pseudo_headers_golden() {
        // 10.0.0.1 -> 10.0.0.2, TCP, 20 bytes:
        // 0x0a00 + 0x0001 + 0x0a00 + 0x0002 + 0x0006 + 0x0014 = 0x141d
        let s = pseudo_v4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            6,
            20,
        );
        assert_eq!(s, 0x141d);
        // fe80::1 -> fe80::2: 0xfe80*2 + 1 + 2 + 6 + 20 = 0x1fd1d -> 0xfd1e
        let a: Ipv6Addr = "fe80::1".parse().unwrap();
        let b: Ipv6Addr = "fe80::2".parse().unwrap();
        assert_eq!(pseudo_v6(&a, &b, 6, 20), 0xfd1e);
        // The 32-bit length's high half counts.
        assert_eq!(
            pseudo_v6(&a, &b, 6, 0x1_0000),
            add(pseudo_v6(&a, &b, 6, 0), 1)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn incremental_matches_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 2..64),
            word in any::<prop::sample::Index>(),
            new in any::<u16>(),
        ) {
            if data.len() % 2 == 1 { data.pop(); }
            let i = word.index(data.len() / 2) * 2;
            let old = u16::from_be_bytes([data[i], data[i + 1]]);
            let c = checksum(&data);
            data[i..i + 2].copy_from_slice(&new.to_be_bytes());
            let updated = update16(c, old, new);
            // Ones-complement has two zeros; compare the verified sums.
            let mut v = data.clone();
            v.extend_from_slice(&updated.to_be_bytes());
            prop_assert_eq!(sum(&v), 0xffff);
            prop_assert!(updated == checksum(&data) || (updated ^ checksum(&data)) == 0xffff);
        }

        #[test]
        fn update32_matches(data in proptest::collection::vec(any::<u8>(), 4..40), new in any::<u32>()) {
            let mut d = data.clone();
            let n = d.len() & !3;
            d.truncate(n);
            let old = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
            let c = checksum(&d);
            d[0..4].copy_from_slice(&new.to_be_bytes());
            let mut v = d.clone();
            v.extend_from_slice(&update32(c, old, new).to_be_bytes());
            prop_assert_eq!(sum(&v), 0xffff);
        }

        #[test]
        fn accumulator_over_random_pieces(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(data.len() + 1)).collect();
            points.push(0);
            points.push(data.len());
            points.sort_unstable();
            let mut acc = Accumulator::new(0);
            let mut acc2 = Accumulator::new(0);
            for w in points.windows(2) {
                let piece = &data[w[0]..w[1]];
                acc.add_bytes(piece);
                acc2.add_sum(sum_naive(piece), piece.len());
            }
            prop_assert_eq!(acc.sum(), sum_naive(&data));
            prop_assert_eq!(acc2.sum(), sum_naive(&data));
            prop_assert_eq!(acc.is_odd(), data.len() % 2 == 1);
        }

        #[test]
        fn sub_inverts_add(a in any::<u16>(), b in any::<u16>()) {
            let s = sub(add(a, b), b);
            prop_assert!(s == a || (s ^ a) == 0xffff);
        }
    }
}
