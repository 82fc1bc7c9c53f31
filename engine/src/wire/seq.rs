//! TCP sequence numbers: a `u32` newtype with wrapping (RFC 1982 serial)
//! arithmetic and comparison.
//!
//! `a < b` means "`b` is ahead of `a` by less than 2^31" (at exactly 2^31
//! each number is "behind" the other, the RFC 1982 undefined case). The order is not
//! transitive over the whole space (it cannot be), which is why the type
//! implements `PartialOrd` but not `Ord`. Nothing here panics.

use core::cmp::Ordering;
use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A TCP sequence (or acknowledgement) number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNumber(pub u32);

impl SeqNumber {
    /// Signed distance from `other` to `self` (`self - other`), wrapping.
    #[inline]
    pub fn distance(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// The larger of two sequence numbers in serial order.
    #[inline]
    pub fn max(self, other: SeqNumber) -> SeqNumber {
        if self.distance(other) >= 0 {
            self
        } else {
            other
        }
    }

    /// The smaller of two sequence numbers in serial order.
    #[inline]
    pub fn min(self, other: SeqNumber) -> SeqNumber {
        if self.distance(other) <= 0 {
            self
        } else {
            other
        }
    }
}

impl fmt::Debug for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seq({})", self.0)
    }
}

impl fmt::Display for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Add<usize> for SeqNumber {
    type Output = SeqNumber;
    /// Advances by `rhs` bytes, wrapping (only the low 32 bits of `rhs` count).
    #[inline]
    fn add(self, rhs: usize) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(rhs as u32))
    }
}

impl AddAssign<usize> for SeqNumber {
    #[inline]
    fn add_assign(&mut self, rhs: usize) {
        *self = *self + rhs;
    }
}

impl Sub<usize> for SeqNumber {
    type Output = SeqNumber;
    #[inline]
    fn sub(self, rhs: usize) -> SeqNumber {
        SeqNumber(self.0.wrapping_sub(rhs as u32))
    }
}

impl PartialOrd for SeqNumber {
    #[inline]
    fn partial_cmp(&self, other: &SeqNumber) -> Option<Ordering> {
        Some(self.distance(*other).cmp(&0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps() {
        let a = SeqNumber(u32::MAX - 10);
        let b = a + 20;
        assert_eq!(b, SeqNumber(9));
        assert!(a < b);
        assert!(b > a);
        assert_eq!(b.distance(a), 20);
        assert_eq!(a.distance(b), -20);
        assert_eq!(b - 20, a);
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
        let mut c = a;
        c += 11;
        assert_eq!(c, SeqNumber(0));
    }

    #[test]
    fn half_space() {
        let a = SeqNumber(0);
        assert!(a < a + 0x7fff_ffff);
        // Exactly half the space away is ambiguous (RFC 1982): each side
        // sees the other as ahead.
        let b = a + 0x8000_0000;
        assert!(a < b && b < a);
        assert_eq!(a.partial_cmp(&a), Some(Ordering::Equal));
    }
}
