//! The receive buffer: a byte ring from the next byte the application reads to
//! the right edge of the window. In-order bytes are readable by reference
//! (`slices` + `consume`); out-of-order bytes are written at their place and
//! tracked in a bounded [`RangeSet`] (in stream offsets truncated to 32 bits).
//!
//! The window the receiver may offer is `limit − buffered`, where `limit` is
//! fixed ([`RecvWindow::Fixed`], to reproduce small-SO_RCVBUF behaviour) or grows
//! with the measured delivery rate × RTT up to the buffer size
//! ([`RecvWindow::AutoTune`], like Linux `tcp_rcv_space_adjust`).

use super::ranges::RangeSet;
use crate::wire::SeqNumber;
use std::time::{Duration, Instant};

/// Receive-window policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvWindow {
    /// Never offer more than this many bytes (clamped to the buffer size).
    Fixed(usize),
    /// Start at `initial` bytes and grow towards the buffer size: once per
    /// RTT, the limit becomes at least twice the bytes the application read
    /// during that RTT.
    AutoTune {
        /// Starting limit, bytes.
        initial: usize,
    },
}

#[derive(Debug)]
// `repr(C)`, what an in-order segment reads or moves first (see the layout
// note on `Connection`).
#[repr(C)]
pub(crate) struct RecvBuffer {
    /// Stream offset of the next in-order byte expected (RCV.NXT).
    nxt: u64,
    /// Stream offset of the next byte the application reads.
    read: u64,
    limit: usize,
    /// Cap on the window, whatever the limit (the worker's share of its RX
    /// ring).
    share: usize,
    ooo: RangeSet,
    data: Vec<u8>,
    cap: usize,
    policy: RecvWindow,
    /// Autotuning: start of the measurement period and `read` then.
    tune_start: Option<(Instant, u64)>,
}

fn key(off: u64) -> SeqNumber {
    SeqNumber(off as u32)
}

/// What became of incoming payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Accepted {
    /// Bytes newly in order (RCV.NXT advanced by this).
    pub in_order: usize,
    /// The segment was stored out of order.
    pub out_of_order: bool,
    /// The segment was dropped (out-of-order range set full).
    pub dropped: bool,
    /// Bytes already received before.
    pub duplicate: usize,
    /// Of `in_order`, bytes the application took straight from the payload.
    pub delivered: usize,
}

impl Accepted {
    /// Adds what became of the next part of the same segment.
    pub(crate) fn add(&mut self, o: Accepted) {
        self.in_order += o.in_order;
        self.out_of_order |= o.out_of_order;
        self.dropped |= o.dropped;
        self.duplicate += o.duplicate;
        self.delivered += o.delivered;
    }
}

impl RecvBuffer {
    pub(crate) fn new(cap: usize, policy: RecvWindow, max_ranges: usize) -> RecvBuffer {
        let cap = cap.max(1);
        let limit = match policy {
            RecvWindow::Fixed(n) => n,
            RecvWindow::AutoTune { initial } => initial,
        }
        .clamp(1, cap);
        RecvBuffer {
            data: Vec::new(),
            cap,
            read: 0,
            nxt: 0,
            ooo: RangeSet::new(max_ranges),
            limit,
            share: usize::MAX,
            policy,
            tune_start: None,
        }
    }

    pub(crate) fn allocate(&mut self) {
        if self.data.is_empty() {
            self.data = vec![0; self.cap];
        }
    }

    /// Bytes of buffer memory allocated (0 until `allocate`).
    pub(crate) fn allocated(&self) -> usize {
        self.data.len() + self.ooo.heap_bytes()
    }

    pub(crate) fn nxt(&self) -> u64 {
        self.nxt
    }

    /// In-order bytes waiting for the application.
    pub(crate) fn readable(&self) -> usize {
        (self.nxt - self.read) as usize
    }

    /// Bytes the window may offer beyond RCV.NXT now.
    pub(crate) fn window(&self) -> usize {
        if self.data.is_empty() {
            return self.limit.min(self.share);
        }
        self.limit.saturating_sub(self.readable()).min(self.share)
    }

    pub(crate) fn set_share(&mut self, bytes: usize) {
        self.share = bytes;
    }

    pub(crate) fn share(&self) -> usize {
        self.share
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Changes the policy: a fixed limit applies at once (clamped to the
    /// buffer; the right edge already offered is never taken back, the
    /// window just stops moving until the reader catches up); autotuning
    /// starts from the larger of `initial` and the limit in force.
    pub(crate) fn set_policy(&mut self, policy: RecvWindow) {
        self.limit = match policy {
            RecvWindow::Fixed(n) => n,
            RecvWindow::AutoTune { initial } => initial.max(self.limit),
        }
        .clamp(1, self.cap);
        self.policy = policy;
        self.tune_start = None;
    }

    /// The buffer size: the largest limit possible.
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Out-of-order ranges as stream offsets (ascending).
    pub(crate) fn ooo_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let base = self.nxt;
        self.ooo.as_slice().iter().map(move |&(s, e)| {
            let s = base + s.distance(key(base)) as u64;
            let e = base + e.distance(key(base)) as u64;
            (s, e)
        })
    }

    /// The out-of-order range holding offset `off`, if any.
    pub(crate) fn ooo_containing(&self, off: u64) -> Option<(u64, u64)> {
        self.ooo_ranges().find(|&(s, e)| s <= off && off < e)
    }

    pub(crate) fn has_ooo(&self) -> bool {
        !self.ooo.is_empty()
    }

    /// Stores `payload` starting at stream offset `off` (already trimmed to
    /// start at or after RCV.NXT... or before it: the duplicate prefix is skipped)
    /// and within the window edge `edge` (exclusive offset).
    #[cfg(test)]
    pub(crate) fn accept(&mut self, off: u64, payload: &[u8], edge: u64) -> Accepted {
        self.accept_with(off, payload, edge, &mut |_| 0)
    }

    /// Like [`Self::accept`], but when the payload is the next in-order
    /// data and nothing is buffered before it, it is first offered to
    /// `deliver`, which returns how many leading bytes it took; only the rest
    /// is copied into the buffer.
    pub(crate) fn accept_with(
        &mut self,
        mut off: u64,
        mut payload: &[u8],
        edge: u64,
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) -> Accepted {
        let mut acc = Accepted::default();
        if off < self.nxt {
            let dup = ((self.nxt - off) as usize).min(payload.len());
            acc.duplicate = dup;
            payload = &payload[dup..];
            off += dup as u64;
        }
        let room = edge.min(self.read + self.cap as u64).saturating_sub(off) as usize;
        payload = &payload[..payload.len().min(room)];
        if payload.is_empty() {
            return acc;
        }
        let end = off + payload.len() as u64;
        if off > self.nxt {
            if !self.ooo.insert(key(off), key(end)) {
                acc.dropped = true;
                return acc;
            }
            self.copy_in(off, payload);
            acc.out_of_order = true;
            return acc;
        }
        let mut taken = 0;
        if off == self.nxt && self.read == self.nxt && !self.data.is_empty() {
            taken = deliver(payload).min(payload.len());
            self.read += taken as u64;
        }
        self.copy_in(off + taken as u64, &payload[taken..]);
        acc.delivered = taken;
        let before = self.nxt;
        self.nxt = end;
        self.ooo.remove_below(key(self.nxt));
        if let Some((_, e)) = self.ooo.pop_at(key(self.nxt)) {
            self.nxt += e.distance(key(self.nxt)) as u64;
        }
        acc.in_order = (self.nxt - before) as usize;
        acc
    }

    fn copy_in(&mut self, off: u64, payload: &[u8]) {
        let cap = self.cap;
        let mut done = 0;
        while done < payload.len() {
            let pos = ((off + done as u64) % cap as u64) as usize;
            let k = (payload.len() - done).min(cap - pos);
            self.data[pos..pos + k].copy_from_slice(&payload[done..done + k]);
            done += k;
        }
    }

    /// Readable bytes as up to two slices.
    pub(crate) fn slices(&self) -> (&[u8], &[u8]) {
        let n = self.readable();
        if n == 0 {
            return (&[], &[]);
        }
        let pos = (self.read % self.cap as u64) as usize;
        let first = n.min(self.cap - pos);
        (&self.data[pos..pos + first], &self.data[..n - first])
    }

    /// Marks `n` readable bytes as consumed.
    pub(crate) fn consume(&mut self, n: usize) -> usize {
        let n = n.min(self.readable());
        self.read += n as u64;
        n
    }

    /// Autotuning step; call on reads with the current RTT estimate.
    pub(crate) fn tune(&mut self, now: Instant, rtt: Option<Duration>) {
        let RecvWindow::AutoTune { .. } = self.policy else {
            return;
        };
        let Some(rtt) = rtt else { return };
        match self.tune_start {
            None => self.tune_start = Some((now, self.read)),
            Some((t0, r0)) if now.saturating_duration_since(t0) >= rtt => {
                let copied = (self.read - r0) as usize;
                // Room for twice the last RTT's worth of data, so the sender is
                // never window-limited while the rate grows.
                let want = copied.saturating_mul(2).min(self.cap);
                if want > self.limit {
                    self.limit = want;
                }
                self.tune_start = Some((now, self.read));
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_out_of_order_and_bounds() {
        let mut b = RecvBuffer::new(16, RecvWindow::Fixed(16), 2);
        b.allocate();
        let a = b.accept(4, &[4, 5, 6, 7], 16);
        assert!(a.out_of_order);
        assert!(b.accept(12, &[12], 16).out_of_order);
        assert!(b.accept(9, &[9], 16).dropped, "a third range does not fit");
        let a = b.accept(0, &[0, 1, 2, 3], 16);
        assert_eq!(a.in_order, 8, "fills the hole and pulls the range in");
        assert_eq!(b.slices().0, &[0, 1, 2, 3, 4, 5, 6, 7]);
        let a = b.accept(6, &[6, 7, 8, 9], 16);
        assert_eq!((a.duplicate, a.in_order), (2, 2));
        assert_eq!(b.window(), 6);
        assert_eq!(b.consume(10), 10);
        // Beyond the edge is cut.
        let a = b.accept(10, &[10, 11, 12, 13, 14], 12);
        assert_eq!(a.in_order, 3, "10, 11 new; range [12,13) joined");
        assert_eq!(b.readable(), 3);
    }

    #[test]
    fn in_order_payload_goes_to_the_reader_first_and_only_the_rest_is_buffered() {
        let mut b = RecvBuffer::new(16, RecvWindow::Fixed(16), 2);
        b.allocate();
        let mut seen = Vec::new();
        let a = b.accept_with(0, &[0, 1, 2, 3], 16, &mut |p| {
            seen.extend_from_slice(p);
            3
        });
        assert_eq!(seen, [0, 1, 2, 3]);
        assert_eq!((a.in_order, a.delivered), (4, 3));
        assert_eq!(b.slices(), (&[3u8][..], &[][..]));
        // Data waits in the buffer: the next segment is not offered.
        let a = b.accept_with(4, &[4, 5], 16, &mut |_| panic!("offered while data waits"));
        assert_eq!((a.in_order, a.delivered), (2, 0));
        assert_eq!(b.slices().0, &[3, 4, 5]);
        b.consume(3);
        // Out of order: never offered.
        let a = b.accept_with(8, &[8], 16, &mut |_| panic!("offered out of order"));
        assert!(a.out_of_order);
        // Filling the hole: offered and taken; the byte held out of order
        // becomes readable from the buffer.
        let a = b.accept_with(6, &[6, 7], 16, &mut |p| p.len());
        assert_eq!((a.in_order, a.delivered), (3, 2));
        assert_eq!(b.slices().0, &[8]);
        // A duplicate prefix is trimmed before the offer.
        b.consume(1);
        let a = b.accept_with(7, &[7, 8, 9], 16, &mut |p| {
            assert_eq!(p, [9]);
            1
        });
        assert_eq!((a.duplicate, a.in_order, a.delivered), (2, 1, 1));
        assert_eq!(b.readable(), 0);
    }
}
