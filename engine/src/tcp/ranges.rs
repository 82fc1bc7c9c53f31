//! A bounded set of disjoint, non-adjacent sequence ranges `[start, end)`, kept
//! sorted. Used for the receiver's out-of-order data and the sender's SACK
//! scoreboard. Storage is allocated once at construction; an insertion that
//! would need more ranges than the capacity is refused (the caller drops the
//! segment), so memory never grows with the input.
//!
//! All ranges must lie within 2^31 of each other (true inside a TCP window).

use crate::wire::SeqNumber;

/// Sorted disjoint ranges with a fixed capacity.
#[derive(Debug, Clone)]
pub struct RangeSet {
    ranges: Vec<(SeqNumber, SeqNumber)>,
    cap: usize,
}

impl RangeSet {
    /// An empty set holding at most `cap` ranges.
    pub fn new(cap: usize) -> RangeSet {
        RangeSet {
            ranges: Vec::with_capacity(cap.max(1)),
            cap: cap.max(1),
        }
    }

    /// The ranges in ascending order.
    pub fn as_slice(&self) -> &[(SeqNumber, SeqNumber)] {
        &self.ranges
    }

    /// Heap bytes reserved (fixed at construction).
    pub fn heap_bytes(&self) -> usize {
        self.ranges.capacity() * std::mem::size_of::<(SeqNumber, SeqNumber)>()
    }

    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Removes everything.
    pub fn clear(&mut self) {
        self.ranges.clear();
    }

    /// Total bytes covered.
    pub fn total(&self) -> usize {
        self.ranges
            .iter()
            .map(|&(s, e)| e.distance(s) as usize)
            .sum()
    }

    /// Bytes covered at or above `seq`.
    pub fn total_above(&self, seq: SeqNumber) -> usize {
        self.ranges
            .iter()
            .map(|&(s, e)| {
                if e <= seq {
                    0
                } else {
                    e.distance(s.max(seq)) as usize
                }
            })
            .sum()
    }

    /// The range containing `seq`, if any.
    pub fn containing(&self, seq: SeqNumber) -> Option<(SeqNumber, SeqNumber)> {
        self.ranges
            .iter()
            .copied()
            .find(|&(s, e)| s <= seq && seq < e)
    }

    /// The highest end, if any.
    pub fn highest(&self) -> Option<SeqNumber> {
        self.ranges.last().map(|r| r.1)
    }

    /// Adds `[start, end)`, merging with overlapping or adjacent ranges.
    /// Returns false (and changes nothing) if it would need more than the
    /// capacity. An empty range is accepted and ignored.
    pub fn insert(&mut self, start: SeqNumber, end: SeqNumber) -> bool {
        if end <= start {
            return true;
        }
        // First range whose end reaches start (could merge), last whose start
        // is at or before end.
        let first = self.ranges.iter().position(|&(_, e)| e >= start);
        let Some(first) = first else {
            if self.ranges.len() >= self.cap {
                return false;
            }
            self.ranges.push((start, end));
            return true;
        };
        let mut last = first;
        let mut merged = false;
        while last < self.ranges.len() && self.ranges[last].0 <= end {
            merged = true;
            last += 1;
        }
        if !merged {
            if self.ranges.len() >= self.cap {
                return false;
            }
            self.ranges.insert(first, (start, end));
            return true;
        }
        let s = self.ranges[first].0.min(start);
        let e = self.ranges[last - 1].1.max(end);
        self.ranges[first] = (s, e);
        self.ranges.drain(first + 1..last);
        true
    }

    /// Forgets everything below `seq` (trimming a range that straddles it).
    pub fn remove_below(&mut self, seq: SeqNumber) {
        let n = self.ranges.iter().take_while(|&&(_, e)| e <= seq).count();
        if n > 0 {
            self.ranges.drain(..n);
        }
        if let Some(r) = self.ranges.first_mut()
            && r.0 < seq
        {
            r.0 = seq;
        }
    }

    /// Removes and returns the first range if it starts at `seq`.
    pub fn pop_at(&mut self, seq: SeqNumber) -> Option<(SeqNumber, SeqNumber)> {
        if self.ranges.first().is_some_and(|r| r.0 == seq) {
            Some(self.ranges.remove(0))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: u32) -> SeqNumber {
        SeqNumber(v)
    }

    #[test]
    fn insert_merge_and_bound() {
        let mut r = RangeSet::new(3);
        assert!(r.insert(s(10), s(20)));
        assert!(r.insert(s(30), s(40)));
        assert!(r.insert(s(50), s(60)));
        assert!(!r.insert(s(70), s(80)), "full");
        assert!(!r.insert(s(0), s(5)), "full");
        assert!(r.insert(s(20), s(30)), "adjacent on both sides merges");
        assert_eq!(r.as_slice(), &[(s(10), s(40)), (s(50), s(60))]);
        assert!(r.insert(s(5), s(100)));
        assert_eq!(r.as_slice(), &[(s(5), s(100))]);
        assert_eq!(r.total(), 95);
        assert_eq!(r.total_above(s(90)), 10);
        r.remove_below(s(50));
        assert_eq!(r.as_slice(), &[(s(50), s(100))]);
        assert_eq!(r.pop_at(s(50)), Some((s(50), s(100))));
        assert!(r.is_empty());
    }

    #[test]
    fn wraps_around_zero() {
        let mut r = RangeSet::new(4);
        let base = s(u32::MAX - 5);
        assert!(r.insert(base + 10, base + 20));
        assert!(r.insert(base, base + 4));
        assert_eq!(r.as_slice()[0].0, base);
        assert_eq!(r.containing(base + 12), Some((base + 10, base + 20)));
        assert_eq!(r.highest(), Some(base + 20));
    }
}
