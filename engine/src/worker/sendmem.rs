//! [`UmemFrames`]: a connection's send buffer in UMEM frames.
//!
//! Each slot of the connection's send buffer ([`crate::tcp::SendMemory`]) is
//! one UMEM frame the connection owns (its token is here), taken from the
//! worker's frame pool the first time the slot is written and kept for the
//! connection's life: a slot that comes round again is rewritten in place,
//! so frames filled with zeros stay filled and a bulk sender stops taking
//! frames once its buffer is warm. Segments point into these frames
//! ([`crate::xsk::TxBatch::lend`]); a frame with a descriptor in flight is
//! not handed out for writing (the UMEM refuses it until the completion),
//! and a frame whose bytes are unacknowledged is never asked for (the send
//! buffer's rule). When the connection ends, [`UmemFrames::release`] gives
//! the frames back; one still in flight returns through the completion ring.
//!
//! The worker shares its frames among its connections: a connection holds
//! at most its buffer's limit ([`crate::tcp::Connection::set_send_limit`]).
//! Under a limit smaller than the ring, a released slot's frame moves to the
//! slot that will be written next ([`SendMemory::recycle`]); frames beyond
//! the limit wait in a surplus list until the worker takes them back
//! ([`UmemFrames::take_surplus`]).
//!
//! In the single-descriptor layout each slot starts `headroom` bytes into
//! its frame, so that a segment's headers can be written just before its
//! payload.

use std::sync::Arc;

use crate::frame::FrameAddr;
use crate::tcp::SendMemory;
use crate::xsk::{Frame, Umem};

/// Spare frames a connection holds for slots it has not written yet.
pub const SPARE_FRAMES: usize = 16;

/// A connection's send-buffer frames (see the module doc).
// `repr(C)`, what sending a segment reads first (see the layout note on
// `tcp::Connection`, which holds this).
#[derive(Default)]
#[repr(C)]
pub struct UmemFrames {
    slots: Vec<Option<Frame>>,
    umem: Option<Arc<Umem>>,
    headroom: usize,
    frame_len: usize,
    spare: Vec<Frame>,
    /// Slots that have no frame yet.
    empty: usize,
    /// Frames it may hold (the send buffer's limit, in slots).
    limit: usize,
    /// Frames given up, for the worker's pool.
    surplus: Vec<Frame>,
}

impl std::fmt::Debug for UmemFrames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UmemFrames")
            .field("headroom", &self.headroom)
            .field("frame_len", &self.frame_len)
            .field("slots", &self.slots.len())
            .field("empty", &self.empty)
            .field("spare", &self.spare.len())
            .field("surplus", &self.surplus.len())
            .field("limit", &self.limit)
            .finish()
    }
}

impl UmemFrames {
    /// Sets the UMEM the frames come from and where a slot starts in its
    /// frame (once, before the first write).
    pub fn attach(&mut self, umem: Arc<Umem>, headroom: usize) {
        self.umem = Some(umem);
        self.headroom = headroom;
        if self.spare.capacity() == 0 {
            self.spare = Vec::with_capacity(SPARE_FRAMES);
        }
    }

    /// Where a slot's bytes start in its frame.
    pub fn headroom(&self) -> usize {
        self.headroom
    }

    /// The frame of slot `slot`, if it has one.
    #[inline]
    pub fn token(&self, slot: usize) -> Option<&Frame> {
        self.slots.get(slot)?.as_ref()
    }

    /// The frame of slot `slot`, writable token (for headers in the
    /// headroom), if it has one.
    #[inline]
    pub fn token_mut(&mut self, slot: usize) -> Option<&mut Frame> {
        self.slots.get_mut(slot)?.as_mut()
    }

    /// Frames it would take now: for slots without one, up to
    /// [`SPARE_FRAMES`] held in reserve, and never more than its limit.
    pub fn wants(&self) -> usize {
        if self.umem.is_none() {
            return 0;
        }
        let held = self.frames_held() + self.surplus.len();
        self.empty
            .saturating_sub(self.spare.len())
            .min(SPARE_FRAMES - self.spare.len())
            .min(self.limit.saturating_sub(held))
    }

    /// Frames given up since the last call, into `pool` (one still in
    /// flight returns through the completion ring instead).
    pub fn take_surplus(&mut self, pool: &mut Vec<Frame>) {
        let Some(umem) = self.umem.as_ref() else {
            return;
        };
        for f in self.surplus.drain(..) {
            if let Some(f) = umem.give_back(f) {
                pool.push(f);
            }
        }
    }

    /// Takes a frame for a later slot.
    pub fn give(&mut self, frame: Frame) {
        debug_assert!(self.spare.len() < SPARE_FRAMES);
        self.spare.push(frame);
    }

    /// True while a TX descriptor lent from any of its frames is in flight,
    /// those it gave up and still holds included (such a connection must
    /// stay on its worker: see [`Umem::is_lent`]).
    pub fn any_lent(&self) -> bool {
        let Some(umem) = self.umem.as_ref() else {
            return false;
        };
        self.slots
            .iter()
            .flatten()
            .chain(&self.surplus)
            .any(|f| umem.is_lent(f))
    }

    /// Frames held (in slots and spare).
    pub fn frames_held(&self) -> usize {
        self.slots.len() - self.empty + self.spare.len()
    }

    /// Gives every frame back: into `pool` when nothing is in flight, else
    /// through the completion ring once its last descriptor completes.
    pub fn release(&mut self, pool: &mut Vec<Frame>) {
        let Some(umem) = self.umem.as_ref() else {
            return;
        };
        for f in self
            .slots
            .iter_mut()
            .filter_map(Option::take)
            .chain(self.spare.drain(..))
            .chain(self.surplus.drain(..))
        {
            if let Some(f) = umem.give_back(f) {
                pool.push(f);
            }
        }
        self.empty = self.slots.len();
    }
}

impl SendMemory for UmemFrames {
    fn allocate(&mut self, frames: usize, frame_len: usize) {
        self.frame_len = frame_len;
        self.slots = (0..frames).map(|_| None).collect();
        self.empty = frames;
        self.limit = frames;
        // Room for every frame it holds: giving up never allocates.
        self.surplus = Vec::with_capacity(frames + SPARE_FRAMES);
    }

    fn slots_mut<'a>(&'a mut self, first: usize, out: &mut [&'a mut [u8]]) -> usize {
        let Some(umem) = self.umem.as_deref() else {
            return 0;
        };
        let (h, fl) = (self.headroom, self.frame_len);
        let Some(slots) = self.slots.get_mut(first..) else {
            return 0;
        };
        let mut n = 0;
        for (o, entry) in out.iter_mut().zip(slots.iter_mut()) {
            if entry.is_none() {
                let Some(f) = self.spare.pop() else {
                    break;
                };
                *entry = Some(f);
                self.empty -= 1;
            }
            let Some(frame) = entry.as_mut() else {
                break;
            };
            let Some(bytes) = umem.try_frame_mut(frame) else {
                break;
            };
            *o = &mut bytes[h..h + fl];
            n += 1;
        }
        n
    }

    #[inline]
    fn slot(&self, slot: usize) -> &[u8] {
        match (self.umem.as_ref(), self.token(slot)) {
            (Some(umem), Some(f)) => &umem.frame(f)[self.headroom..self.headroom + self.frame_len],
            _ => &[],
        }
    }

    #[inline]
    fn addr(&self, slot: usize) -> FrameAddr {
        self.token(slot)
            .map_or(FrameAddr(u64::MAX), |f| f.addr().add(self.headroom))
    }

    fn held(&self) -> usize {
        let fs = self.umem.as_ref().map_or(0, |u| u.frame_size().bytes());
        self.frames_held() * fs + self.slots.len() * std::mem::size_of::<Option<Frame>>()
    }

    fn recycle(&mut self, from: usize, to: usize) -> bool {
        let Some(f) = self.slots.get_mut(from).and_then(Option::take) else {
            return false;
        };
        match self.slots.get_mut(to) {
            Some(dst @ None) => {
                *dst = Some(f);
                true
            }
            _ => {
                self.empty += 1;
                self.surplus.push(f);
                false
            }
        }
    }

    fn give_up(&mut self, slot: usize) {
        if let Some(f) = self.slots.get_mut(slot).and_then(Option::take) {
            self.empty += 1;
            self.surplus.push(f);
        }
    }

    fn set_limit(&mut self, slots: usize) {
        self.limit = slots;
        // Spare frames beyond the limit go back too.
        while self.frames_held() > slots {
            let Some(f) = self.spare.pop() else {
                break;
            };
            self.surplus.push(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::send::SendBuffer;
    use crate::tcp::{MAX_PIECES, Piece};
    use crate::wire::checksum;
    use crate::xsk::socket::{FakeTx, heap_umem};

    const FL: usize = 4096;

    /// A send buffer of 16 slots of 4 KiB in a UMEM of 64 frames, and the
    /// UMEM's frames as the pool.
    fn sixteen_slots() -> (SendBuffer<UmemFrames>, Vec<Frame>) {
        let umem = heap_umem(64);
        let pool = umem.take_frames();
        let mut mem = UmemFrames::default();
        mem.attach(umem, 0);
        let mut b = SendBuffer::new(FL, 16, mem);
        b.allocate(None);
        (b, pool)
    }

    /// What the worker's `provision` does: take back what the buffer gave
    /// up, give it what it wants.
    fn provision(b: &mut SendBuffer<UmemFrames>, pool: &mut Vec<Frame>) {
        b.memory_mut().take_surplus(pool);
        for _ in 0..b.memory().wants() {
            let f = pool.pop().expect("a frame in the pool");
            b.memory_mut().give(f);
        }
    }

    /// The bytes at `[at, at + len)` as sent, and the sum of their pieces
    /// as the buffer gives it, checked against each other.
    fn check_bytes(b: &mut SendBuffer<UmemFrames>, at: u64, len: usize, want: u8) {
        let mut out = vec![0xa5u8; len];
        b.copy_out(at, &mut out);
        assert!(out.iter().all(|&x| x == want), "bytes at {at}");
        let mut p = [Piece::default(); MAX_PIECES];
        let n = b.pieces(at, len, &mut p).unwrap();
        let mut off = 0;
        for piece in &p[..n] {
            assert_eq!(
                piece.sum,
                checksum::sum(&out[off..off + piece.len]),
                "sum of the piece at {}",
                at + off as u64
            );
            off += piece.len;
        }
    }

    /// Under a limit, a bulk sender's frames go round its ring: it never
    /// holds more than the limit, takes nothing more from the pool once warm,
    /// its bytes and their sums stay right (zeros are not rewritten, so their
    /// sums must travel with the frames), and a smaller limit gives the rest
    /// back as the bytes beyond it are acknowledged.
    #[test]
    fn a_limited_send_buffer_rotates_its_frames_and_gives_back_the_rest() {
        let (mut b, mut pool) = sixteen_slots();
        // Warm: all 16 slots written.
        let mut written = 0;
        while written < 16 * FL {
            provision(&mut b, &mut pool);
            written += b.fill_zeros(16 * FL - written);
        }
        assert_eq!(b.memory().frames_held(), 16);
        // Four slots at once from now on: nothing written is dropped.
        b.set_limit(4);
        assert_eq!(b.fill_zeros(1), 0, "still full");
        provision(&mut b, &mut pool);
        assert_eq!(b.memory().frames_held(), 16, "every slot holds bytes");
        b.ack((2 * FL) as u64);
        provision(&mut b, &mut pool);
        assert_eq!(b.memory().frames_held(), 14);
        check_bytes(&mut b, (2 * FL) as u64, 14 * FL, 0);
        b.ack((16 * FL) as u64);
        provision(&mut b, &mut pool);
        assert_eq!(b.memory().frames_held(), 4, "the limit");
        let pool_len = pool.len();
        assert_eq!(pool_len, 64 - 4);
        // Laps round the ring: pattern bytes, then zeros again, on the
        // same four frames.
        let mut at = (16 * FL) as u64;
        for lap in 0..40u64 {
            let byte = if lap % 3 == 0 { 7 } else { 0 };
            provision(&mut b, &mut pool);
            let n = if byte == 0 {
                b.fill_zeros(usize::MAX)
            } else {
                b.write(&[byte; 4 * FL])
            };
            assert_eq!(n, 4 * FL, "lap {lap}: four slots free");
            assert_eq!(b.fill_zeros(1), 0, "lap {lap}: no more than the limit");
            check_bytes(&mut b, at, 4 * FL, byte);
            at += n as u64;
            b.ack(at);
            assert_eq!(b.memory().frames_held(), 4);
        }
        assert_eq!(pool.len(), pool_len, "nothing more from the pool");
        // A bigger limit takes frames again.
        b.set_limit(8);
        provision(&mut b, &mut pool);
        assert_eq!(b.fill_zeros(usize::MAX), 8 * FL);
        check_bytes(&mut b, at, 8 * FL, 0);
    }

    /// A repeated pattern under a limit: its sums travel with the rotating
    /// frames, a frame that comes round holding the bytes it must send is
    /// not rewritten (the lap a multiple of the pattern), and one that does
    /// not is; the bytes and sums stay right through changes of the limit.
    #[test]
    fn a_rotating_pattern_is_written_once_and_stays_right() {
        let (mut b, mut pool) = sixteen_slots();
        let pat: Arc<[u8]> = (0..4 * FL as u32).map(|i| (i % 251) as u8).collect();
        let (mut at, mut phase) = (0u64, 0usize);
        for (limit, laps, copied) in [(4usize, 30u64, false), (3, 20, true), (8, 20, false)] {
            b.set_limit(limit);
            for lap in 0..laps {
                provision(&mut b, &mut pool);
                let before = b.touched();
                let n = b.write_repeat(&pat, phase, limit * FL);
                assert_eq!(n, limit * FL, "limit {limit} lap {lap}");
                if lap > 1 {
                    let per_byte = b.touched() - before;
                    assert_eq!(per_byte > 0, copied, "limit {limit} lap {lap}: {per_byte}");
                }
                let mut out = vec![0u8; n];
                b.copy_out(at, &mut out);
                for (i, &x) in out.iter().enumerate() {
                    assert_eq!(
                        x,
                        pat[(phase + i) % pat.len()],
                        "limit {limit} lap {lap} byte {i}"
                    );
                }
                let mut p = [Piece::default(); MAX_PIECES];
                for s in (0..n).step_by(FL) {
                    let k = b.pieces(at + s as u64, FL, &mut p).unwrap();
                    assert_eq!(k, 1);
                    assert_eq!(p[0].sum, checksum::sum(&out[s..s + FL]));
                }
                at += n as u64;
                phase = (phase + n) % pat.len();
                b.ack(at);
            }
        }
    }

    /// A limit that shrinks while frames sit in released slots ahead of
    /// the new window gives those back at once, so the buffer can take
    /// frames for the slots it must write next (else it would wait for
    /// acknowledgements that never come: nothing is in flight).
    #[test]
    fn a_shrinking_limit_does_not_strand_the_buffer() {
        let (mut b, mut pool) = sixteen_slots();
        provision(&mut b, &mut pool);
        assert_eq!(b.write(&[1u8; 6 * FL]), 6 * FL);
        b.ack((5 * FL) as u64);
        assert_eq!(b.memory().frames_held(), 16, "6 in slots, 10 spare");
        b.set_limit(4);
        provision(&mut b, &mut pool);
        assert_eq!(b.memory().frames_held(), 4, "slot 5 and three more");
        assert_eq!(b.write(&[2u8; 4 * FL]), 3 * FL);
        check_bytes(&mut b, (5 * FL) as u64, FL, 1);
        check_bytes(&mut b, (6 * FL) as u64, 3 * FL, 2);
        assert_eq!(pool.len(), 64 - 4);
    }

    /// A send buffer of two 4 KiB slots, given its frames, in a UMEM of 8
    /// whose TX and completion rings the fake kernel plays.
    fn two_slots_in_flight() -> (SendBuffer<UmemFrames>, FakeTx) {
        let umem = heap_umem(8);
        let mut pool = umem.take_frames();
        let fake = FakeTx::new(&umem, 8);
        let mut mem = UmemFrames::default();
        mem.attach(umem.clone(), 0);
        let mut b = SendBuffer::new(4096, 2, mem);
        b.allocate(None);
        while b.memory().wants() > 0 {
            b.memory_mut().give(pool.pop().unwrap());
        }
        (b, fake)
    }

    /// A send-buffer frame is rewritten only once its bytes are acknowledged
    /// and every descriptor lent from it has completed (the fake kernel
    /// plays the TX and completion rings).
    #[test]
    fn a_frame_is_not_rewritten_while_unacknowledged_or_in_flight() {
        let (mut b, mut fake) = two_slots_in_flight();
        assert_eq!(b.write(&[1u8; 8192]), 8192);
        // Unacknowledged: no room at all.
        assert_eq!(b.write(&[2u8; 10]), 0);
        // Slot 0 goes out (and again: a retransmission before completion).
        let mut p = [Piece::default(); MAX_PIECES];
        let n = b.pieces(0, 4096, &mut p).unwrap();
        assert_eq!(n, 1);
        {
            let mut batch = fake.tx.batch(2);
            let frame = b.memory().token(p[0].slot).unwrap();
            assert!(batch.lend(frame, 0, 4096, false));
            assert!(batch.lend(frame, 0, 4096, false));
        }
        // Acknowledged, but still being transmitted: not rewritten.
        b.ack(4096);
        assert_eq!(b.write(&[2u8; 4096]), 0, "slot 0 is in flight");
        assert!(b.memory().slot(0).iter().all(|&x| x == 1));
        // One completion of two: still in flight.
        fake.transmit(1);
        let mut back = Vec::new();
        fake.comp.complete(&mut back, 8);
        assert!(back.is_empty(), "the connection keeps its frame");
        assert_eq!(b.write(&[2u8; 4096]), 0, "one descriptor still in flight");
        // Both complete: now it is written.
        fake.transmit(1);
        fake.comp.complete(&mut back, 8);
        assert_eq!(b.write(&[2u8; 4096]), 4096);
        assert!(b.memory().slot(0).iter().all(|&x| x == 2));
        // Slot 1 is unacknowledged still.
        assert_eq!(b.write(&[3u8; 1]), 0);
        // Released while lent: the frame comes back through the completion
        // ring, not before.
        {
            let mut batch = fake.tx.batch(1);
            let frame = b.memory().token(1).unwrap();
            assert!(batch.lend(frame, 0, 4096, false));
        }
        let mut returned = Vec::new();
        b.memory_mut().release(&mut returned);
        assert_eq!(
            returned.len(),
            1,
            "slot 0's frame at once; slot 1's is in flight"
        );
        fake.transmit(1);
        fake.comp.complete(&mut returned, 8);
        assert_eq!(returned.len(), 2, "slot 1's frame after its completion");
    }

    /// A frame given up while a descriptor lent from it is in flight still
    /// holds its connection to its worker (the count is that thread's)
    /// until the descriptor completes.
    #[test]
    fn a_frame_given_up_in_flight_is_still_lent() {
        let (mut b, mut fake) = two_slots_in_flight();
        assert_eq!(b.write(&[1u8; 4096]), 4096);
        {
            let mut batch = fake.tx.batch(1);
            let frame = b.memory().token(0).unwrap();
            assert!(batch.lend(frame, 0, 4096, false));
        }
        assert!(b.memory().any_lent());
        b.memory_mut().give_up(0);
        assert!(b.memory().any_lent(), "given up, still in flight");
        fake.transmit(1);
        let mut back = Vec::new();
        fake.comp.complete(&mut back, 8);
        assert!(!b.memory().any_lent());
    }
}
