//! Initial sequence numbers per RFC 6528: `ISN = M + F(4-tuple, key)`, where
//! `M` is a 4 µs clock and `F` a keyed hash (SipHash-2-4, written here from the
//! published algorithm description) of the connection's addresses and ports.
//!
//! Deterministic: the key comes from the caller (a seed), and `M` from the
//! caller's clock through `now - epoch`. Also holds [`XorShift`], the small PRNG
//! that the simulator and key derivation use.

use super::FourTuple;
use crate::wire::SeqNumber;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

/// SipHash-2-4 of `data` under the 128-bit key `(k0, k1)`.
pub fn siphash24(k0: u64, k1: u64, data: &[u8]) -> u64 {
    let mut v0 = k0 ^ 0x736f_6d65_7073_6575;
    let mut v1 = k1 ^ 0x646f_7261_6e64_6f6d;
    let mut v2 = k0 ^ 0x6c79_6765_6e65_7261;
    let mut v3 = k1 ^ 0x7465_6462_7974_6573;
    #[inline(always)]
    fn round(v0: &mut u64, v1: &mut u64, v2: &mut u64, v3: &mut u64) {
        *v0 = v0.wrapping_add(*v1);
        *v1 = v1.rotate_left(13);
        *v1 ^= *v0;
        *v0 = v0.rotate_left(32);
        *v2 = v2.wrapping_add(*v3);
        *v3 = v3.rotate_left(16);
        *v3 ^= *v2;
        *v0 = v0.wrapping_add(*v3);
        *v3 = v3.rotate_left(21);
        *v3 ^= *v0;
        *v2 = v2.wrapping_add(*v1);
        *v1 = v1.rotate_left(17);
        *v1 ^= *v2;
        *v2 = v2.rotate_left(32);
    }
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let m = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        v3 ^= m;
        round(&mut v0, &mut v1, &mut v2, &mut v3);
        round(&mut v0, &mut v1, &mut v2, &mut v3);
        v0 ^= m;
    }
    let rest = chunks.remainder();
    let mut last = [0u8; 8];
    last[..rest.len()].copy_from_slice(rest);
    last[7] = data.len() as u8;
    let m = u64::from_le_bytes(last);
    v3 ^= m;
    round(&mut v0, &mut v1, &mut v2, &mut v3);
    round(&mut v0, &mut v1, &mut v2, &mut v3);
    v0 ^= m;
    v2 ^= 0xff;
    for _ in 0..4 {
        round(&mut v0, &mut v1, &mut v2, &mut v3);
    }
    v0 ^ v1 ^ v2 ^ v3
}

/// xorshift64* — a small deterministic PRNG (not for secrets).
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from a seed (any value; zero is remapped).
    pub fn new(seed: u64) -> XorShift {
        // Spread the seed so nearby seeds give unrelated streams.
        let s = siphash24(0x5eed, 0x1234_5678, &seed.to_le_bytes());
        XorShift(if s == 0 { 0x9e37_79b9_7f4a_7c15 } else { s })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }

    /// Uniform in `[0, n)` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// RFC 6528 ISN generator.
#[derive(Debug, Clone)]
pub struct IsnGenerator {
    k0: u64,
    k1: u64,
    epoch: Instant,
}

impl IsnGenerator {
    /// A generator keyed from `seed`, whose 4 µs clock starts at `epoch`.
    pub fn new(seed: u64, epoch: Instant) -> IsnGenerator {
        let mut r = XorShift::new(seed);
        IsnGenerator {
            k0: r.next_u64(),
            k1: r.next_u64(),
            epoch,
        }
    }

    /// The ISN for a connection on `tuple` at `now`.
    pub fn isn(&self, tuple: &FourTuple, now: Instant) -> SeqNumber {
        let mut buf = [0u8; 36];
        let mut n = 0;
        for a in [tuple.local, tuple.remote] {
            n += put_addr(&mut buf[n..], &a);
        }
        let f = siphash24(self.k0, self.k1, &buf[..n]) as u32;
        let m = (now.saturating_duration_since(self.epoch).as_micros() / 4) as u32;
        SeqNumber(m.wrapping_add(f))
    }
}

fn put_addr(b: &mut [u8], a: &SocketAddr) -> usize {
    let n = match a.ip() {
        IpAddr::V4(v4) => {
            b[..4].copy_from_slice(&v4.octets());
            4
        }
        IpAddr::V6(v6) => {
            b[..16].copy_from_slice(&v6.octets());
            16
        }
    };
    b[n..n + 2].copy_from_slice(&a.port().to_be_bytes());
    n + 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn siphash_reference_vectors() {
        // Test vectors from the SipHash paper (key 00..0f, message 00..n-1).
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        assert_eq!(siphash24(k0, k1, &[]), 0x726f_db47_dd0e_0e31);
        let msg: Vec<u8> = (0..15).collect();
        assert_eq!(siphash24(k0, k1, &msg), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn isn_depends_on_tuple_key_and_time() {
        let epoch = Instant::now();
        let t = FourTuple {
            local: "10.0.0.1:80".parse().unwrap(),
            remote: "10.0.0.2:5000".parse().unwrap(),
        };
        let t2 = FourTuple {
            remote: "10.0.0.2:5001".parse().unwrap(),
            ..t
        };
        let g = IsnGenerator::new(1, epoch);
        let a = g.isn(&t, epoch);
        assert_eq!(a, IsnGenerator::new(1, epoch).isn(&t, epoch));
        assert_ne!(a, g.isn(&t2, epoch));
        assert_ne!(a, IsnGenerator::new(2, epoch).isn(&t, epoch));
        // The clock part advances by one per 4 µs.
        assert_eq!(g.isn(&t, epoch + Duration::from_micros(400)), a + 100);
    }
}
