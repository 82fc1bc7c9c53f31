//! The send buffer: a ring of `frames` slots of `frame_len` bytes holding the
//! stream from the oldest unacknowledged byte to the last byte written.
//!
//! Stream byte `o` (offset from the first byte after the SYN) lives in slot
//! `(o / frame_len) % frames` at `o % frame_len`. A slot becomes writable
//! again only when every byte in it is cumulatively acknowledged, so bytes a
//! segment references (in flight, or to be retransmitted) are never
//! rewritten.
//!
//! A buffer may use fewer slots at once than it has (`SendBuffer::set_limit`:
//! the worker shares its frames among its connections, and the connection's
//! auto-tuning grows its limit from a few slots as the path needs): bytes
//! then span at most `limit` consecutive slots from the oldest
//! unacknowledged one, and
//! the memory of a slot that is released moves `limit` slots ahead
//! ([`SendMemory::recycle`]), to the next slot that will be written, with
//! its contents and their sums. A bulk sender so rotates its `limit` frames
//! round the ring instead of taking a new frame for every slot.
//!
//! Where the slots' bytes live is the caller's: a [`SendMemory`]. The engine's
//! is a set of UMEM frames owned by the connection (the worker's
//! `UmemFrames`), so that segments go out by reference — the descriptors
//! point into these frames, and the memory also refuses a slot whose frame a
//! TX descriptor still points at. [`HeapFrames`] is plain memory for the
//! sans-IO uses (tests, the simulator, benchmarks).
//!
//! Checksums once: every write updates the Internet sums of the 256-byte
//! blocks it touched (`BlockSums`), summing while it copies; zeros written
//! into a slot known to hold zeros cost nothing at all, and nor does a
//! repeated pattern (iperf3's buffer, `SendBuffer::write_repeat`) written
//! whole into a slot that already holds the same bytes. A segment's payload
//! sum ([`crate::tcp::Connection::payload_pieces`]) then comes from the cached block sums, reading
//! at most the partial blocks at its two ends (none when it covers whole
//! frames, as with MSS clipping, nor in a slot known to hold zeros); the
//! sums of the last segments sent are cached, so a retransmission with the
//! same boundaries reads nothing.

use std::fmt;
use std::sync::Arc;

use crate::frame::FrameAddr;
use crate::wire::checksum;

/// Bytes covered by one [`BlockSums`] entry.
const SUM_BLOCK: usize = 256;
/// Entries in a [`BlockSums`]: a 4096-byte slot, the largest.
const SUM_BLOCKS: usize = 4096 / SUM_BLOCK;

/// A slot's Internet sums of its consecutive 256-byte blocks (the last may
/// be short), each relative to its block's first byte: a piece that does
/// not cover whole blocks reads at most its two partial end blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct BlockSums([u16; SUM_BLOCKS]);

/// The memory behind a send buffer's slots.
pub trait SendMemory: fmt::Debug + Send {
    /// Called once, when the connection is established: the buffer has
    /// `frames` slots of `frame_len` bytes (at most 4096).
    fn allocate(&mut self, frames: usize, frame_len: usize);
    /// Consecutive slots from `first` on, their `frame_len` bytes writable,
    /// into `out`; returns how many. It stops at the first slot that has no
    /// memory now (none free yet) or whose memory is still being read by a
    /// transmission. The buffer only asks for slots whose bytes are all
    /// acknowledged (or never written), and never past the ring's end.
    fn slots_mut<'a>(&'a mut self, first: usize, out: &mut [&'a mut [u8]]) -> usize;
    /// Slot `slot`'s bytes (asked only for slots that were written).
    fn slot(&self, slot: usize) -> &[u8];
    /// The address descriptors use for slot `slot`'s first byte.
    fn addr(&self, slot: usize) -> FrameAddr;
    /// Bytes of memory held.
    fn held(&self) -> usize;
    /// Slot `from` is released (all its bytes acknowledged) and slot `to`
    /// will be written next: moves `from`'s memory to `to` and returns true
    /// if `to` has none, else gives `from`'s memory up (it has more than
    /// it may hold) and returns false. Memory that is never short (the
    /// heap) keeps it where it is and returns false.
    fn recycle(&mut self, from: usize, to: usize) -> bool;
    /// Slot `slot` holds nothing the buffer needs (after its limit
    /// shrank): memory that is short gives it up.
    fn give_up(&mut self, slot: usize);
    /// The buffer uses at most `slots` slots at once from now on (memory
    /// that is short holds no more than that).
    fn set_limit(&mut self, slots: usize);
}

/// Heap memory for a send buffer (sans-IO use: tests, simulation): slot `i`
/// is bytes `i * frame_len ..` of one allocation, its "address" that offset.
#[derive(Debug, Default)]
pub struct HeapFrames {
    data: Vec<u8>,
    frame_len: usize,
    frames: usize,
}

impl HeapFrames {
    /// The whole ring as bytes (slot `i` at `i * frame_len`).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.data
    }
}

impl SendMemory for HeapFrames {
    fn allocate(&mut self, frames: usize, frame_len: usize) {
        self.frames = frames;
        self.frame_len = frame_len;
        self.data = vec![0; frame_len * frames];
    }

    fn slots_mut<'a>(&'a mut self, first: usize, out: &mut [&'a mut [u8]]) -> usize {
        let fl = self.frame_len.max(1);
        let Some(rest) = self.data.get_mut(first * fl..) else {
            return 0;
        };
        let mut n = 0;
        for (o, chunk) in out.iter_mut().zip(rest.chunks_mut(fl)) {
            *o = chunk;
            n += 1;
        }
        n
    }

    fn slot(&self, slot: usize) -> &[u8] {
        let fl = self.frame_len;
        self.data.get(slot * fl..(slot + 1) * fl).unwrap_or(&[])
    }

    fn addr(&self, slot: usize) -> FrameAddr {
        FrameAddr((slot * self.frame_len) as u64)
    }

    fn held(&self) -> usize {
        self.data.len()
    }

    fn recycle(&mut self, _from: usize, _to: usize) -> bool {
        false
    }

    fn give_up(&mut self, _slot: usize) {}

    fn set_limit(&mut self, _slots: usize) {}
}

/// A piece of a segment's payload inside one slot, with its Internet sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Piece {
    /// The slot, `0..frames`.
    pub slot: usize,
    /// Offset inside the slot.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
    /// Address of the first byte ([`SendMemory::addr`] + `offset`).
    pub addr: FrameAddr,
    /// Internet sum of the bytes (relative to their first byte).
    pub sum: u16,
}

/// Most pieces a segment has: a 64 KiB payload over 4096-byte slots, not
/// aligned (2048-byte slots: 33).
pub const MAX_PIECES: usize = 34;

/// Most slots one [`crate::tcp::Connection::fill_vectored`] offers (64 KiB of 4096-byte
/// slots).
pub const MAX_VECTORED: usize = 16;

#[derive(Debug, Clone, Copy, Default)]
struct SlotSums {
    blocks: BlockSums,
    /// Every byte of the slot is zero.
    zero: bool,
    /// (generation, byte): the whole slot holds the repeated pattern of
    /// this generation (see [`SendBuffer::write_repeat`]) from this byte of
    /// it on; generation 0: it does not.
    repeat: (u32, u32),
}

/// [`SlotSums::repeat`] of a slot not known to hold a repeated pattern.
const NOT_REPEAT: (u32, u32) = (0, 0);

/// Sums of recently sent pieces that did not end on block boundaries, by
/// stream offset (direct-mapped): stream bytes never change once written,
/// so an entry stays true for as long as it is not replaced.
const SEG_SUMS: usize = 256;

#[derive(Debug)]
// `repr(C)`, what a segment sent or acknowledged reads or moves first (see
// the layout note on `Connection`).
#[repr(C)]
pub(crate) struct SendBuffer<M> {
    /// Stream offset of the oldest unacknowledged byte.
    head: u64,
    /// Stream offset one past the last written byte.
    tail: u64,
    /// Where `tail` is: its slot and the offset in it (kept as it moves,
    /// so that writing asks for no division a slot).
    tail_at: (usize, usize),
    /// Stream offset where `head`'s slot starts.
    head_base: u64,
    /// (stream offset, slot, offset in it) where the last
    /// [`SendBuffer::pieces`] ended: the next segment usually starts there.
    cursor: (u64, usize, usize),
    frame_len: usize,
    frames: usize,
    /// Slots in use at most (`1..=frames`).
    limit: usize,
    /// Bytes written one by one (copied, or zeroed where a slot did not
    /// hold zeros): see [`SendBuffer::touched`].
    touched: u64,
    sums: Vec<SlotSums>,
    allocated: bool,
    mem: M,
    /// (stream offset, len, sum) of pieces summed, for retransmissions.
    seg_sums: Vec<(u64, u32, u16)>,
    /// The pattern [`SendBuffer::write_repeat`] last wrote, and its
    /// generation (a new pattern, a new generation: slots tagged with an
    /// older one are written again). Held, so that its address is not reused
    /// while it is compared.
    pattern: Option<(Arc<[u8]>, u32)>,
}

impl<M: SendMemory> SendBuffer<M> {
    pub(crate) fn new(frame_len: usize, frames: usize, mem: M) -> SendBuffer<M> {
        SendBuffer {
            mem,
            sums: Vec::new(),
            seg_sums: Vec::new(),
            allocated: false,
            frame_len: frame_len.clamp(1, SUM_BLOCK * SUM_BLOCKS),
            frames: frames.max(1),
            limit: frames.max(1),
            head: 0,
            tail: 0,
            tail_at: (0, 0),
            head_base: 0,
            touched: 0,
            cursor: (u64::MAX, 0, 0),
            pattern: None,
        }
    }

    /// Bytes written one by one so far (copies, and zeros written into a
    /// slot that did not hold zeros); zeros into a zeroed slot add nothing.
    pub(crate) fn touched(&self) -> u64 {
        self.touched
    }

    /// Sizes the slots (once, when the connection is established), each
    /// of `slot_len` bytes if given (at most the `frame_len` it was made
    /// with).
    pub(crate) fn allocate(&mut self, slot_len: Option<usize>) {
        if !self.allocated {
            self.allocated = true;
            if let Some(l) = slot_len {
                self.frame_len = l.clamp(1, self.frame_len);
            }
            self.mem.allocate(self.frames, self.frame_len);
            self.mem.set_limit(self.limit);
            self.sums = vec![SlotSums::default(); self.frames];
            self.seg_sums = vec![(u64::MAX, 0, 0); SEG_SUMS];
        }
    }

    pub(crate) fn memory(&self) -> &M {
        &self.mem
    }

    pub(crate) fn memory_mut(&mut self) -> &mut M {
        &mut self.mem
    }

    /// Bytes held: the memory's and the sum tables'.
    pub(crate) fn allocated(&self) -> usize {
        self.mem.held()
            + self.sums.len() * std::mem::size_of::<SlotSums>()
            + self.seg_sums.len() * std::mem::size_of::<(u64, u32, u16)>()
    }

    /// Bytes the slots in use may hold.
    fn capacity(&self) -> u64 {
        (self.frame_len * self.limit) as u64
    }

    /// Uses at most `slots` slots at once (clamped to `1..=frames`). A
    /// smaller limit applies as the bytes beyond it are acknowledged;
    /// nothing written is dropped.
    pub(crate) fn set_limit(&mut self, slots: usize) {
        let (old, new) = (self.limit, slots.clamp(1, self.frames));
        self.limit = new;
        if !self.allocated {
            return;
        }
        self.mem.set_limit(new);
        if new < old {
            // Slots beyond both the bytes held and the new limit, up to the
            // old one, may hold memory: give it up (the bytes held keep
            // theirs, and their slots' memory moves on as they are
            // acknowledged).
            let fl = self.frame_len as u64;
            let first = self.head / fl;
            let frames = self.frames as u64;
            for abs in self.tail.div_ceil(fl).max(first + new as u64)..first + old as u64 {
                let slot = (abs % frames) as usize;
                self.sums[slot] = SlotSums::default();
                self.mem.give_up(slot);
            }
        }
    }

    /// Slots in use at most.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Slots it has (the most `limit` can be).
    pub(crate) fn frames(&self) -> usize {
        self.frames
    }

    /// Bytes the application can write now (whole released slots).
    pub(crate) fn free(&self) -> usize {
        if !self.allocated {
            return 0;
        }
        (self.head_base + self.capacity()).saturating_sub(self.tail) as usize
    }

    /// Bytes written and not yet acknowledged.
    pub(crate) fn len(&self) -> usize {
        (self.tail - self.head) as usize
    }

    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    /// Bytes per slot.
    pub(crate) fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// The next writable piece: slot, offset in it, and bytes (at most
    /// `want`); `None` when nothing is free.
    fn next_free(&self, want: usize) -> Option<(usize, usize, usize)> {
        let n = self.free().min(want);
        if n == 0 {
            return None;
        }
        let (slot, off) = self.tail_at;
        debug_assert_eq!(self.tail_at, self.position(self.tail));
        Some((slot, off, n.min(self.frame_len - off)))
    }

    /// The slot and the offset in it of stream offset `at`.
    fn position(&self, at: u64) -> (usize, usize) {
        let fl = self.frame_len as u64;
        (
            ((at / fl) % self.frames as u64) as usize,
            (at % fl) as usize,
        )
    }

    /// `k` bytes were written at the tail, within its slot (a piece from
    /// [`SendBuffer::next_free`]).
    fn advance(&mut self, k: usize) {
        self.tail += k as u64;
        self.tail_at.1 += k;
        if self.tail_at.1 == self.frame_len {
            let next = self.tail_at.0 + 1;
            self.tail_at = (if next == self.frames { 0 } else { next }, 0);
        }
    }

    /// One slot's bytes, writable (see [`SendMemory::slots_mut`]).
    fn slot_of(mem: &mut M, slot: usize) -> Option<&mut [u8]> {
        let mut one: [&mut [u8]; 1] = [&mut []];
        if mem.slots_mut(slot, &mut one) == 0 {
            return None;
        }
        let [s] = one;
        Some(s)
    }

    /// Copies as much of `buf` as fits (and as the memory has room for);
    /// returns the count.
    pub(crate) fn write(&mut self, buf: &[u8]) -> usize {
        let mut done = 0;
        while let Some((slot, off, k)) = self.next_free(buf.len() - done) {
            let Some(dst) = Self::slot_of(&mut self.mem, slot) else {
                break;
            };
            let s = &mut self.sums[slot];
            copy_summed(&mut dst[off..off + k], &buf[done..done + k], off, s);
            done += k;
            self.advance(k);
        }
        self.touched += done as u64;
        done
    }

    /// Lets `f` fill the free space in place, one slot piece at a time
    /// (`f` returns how many bytes of the piece it wrote; fewer than offered
    /// ends the fill). Returns the total.
    pub(crate) fn fill(&mut self, mut f: impl FnMut(&mut [u8]) -> usize) -> usize {
        let mut done = 0;
        while let Some((slot, off, k)) = self.next_free(usize::MAX) {
            let Some(dst) = Self::slot_of(&mut self.mem, slot) else {
                break;
            };
            let n = f(&mut dst[off..off + k]).min(k);
            if n > 0 {
                sum_written(dst, off, off + n, &mut self.sums[slot]);
                self.advance(n);
                done += n;
            }
            if n < k {
                break;
            }
        }
        self.touched += done as u64;
        done
    }

    /// Lets `f` fill the free space in place, up to [`MAX_VECTORED`] slots
    /// at once (for a vectored read such as `preadv`): `f` gets the pieces
    /// in stream order and returns how many bytes it wrote, from the first
    /// piece on. Returns that count.
    pub(crate) fn fill_vectored(&mut self, f: impl FnOnce(&mut [&mut [u8]]) -> usize) -> usize {
        let free = self.free();
        if free == 0 {
            return 0;
        }
        let fl = self.frame_len;
        let (first, off) = self.tail_at;
        let want = (off + free)
            .div_ceil(fl)
            .min(MAX_VECTORED)
            .min(self.frames - first);
        let mut bufs: [&mut [u8]; MAX_VECTORED] = Default::default();
        let k = self.mem.slots_mut(first, &mut bufs[..want]);
        if k == 0 {
            return 0;
        }
        // The first piece starts at the tail, the last ends where the free
        // space does.
        let mut room = free;
        let mut total = 0;
        for (i, b) in bufs[..k].iter_mut().enumerate() {
            let from = if i == 0 { off } else { 0 };
            let take = (fl - from).min(room);
            *b = &mut std::mem::take(b)[from..from + take];
            room -= take;
            total += take;
        }
        let n = f(&mut bufs[..k]).min(total);
        let (mut left, mut from) = (n, off);
        for slot in first..first + k {
            let take = (fl - from).min(left);
            if take == 0 {
                break;
            }
            sum_written(self.mem.slot(slot), from, from + take, &mut self.sums[slot]);
            left -= take;
            from = 0;
        }
        self.tail += n as u64;
        self.tail_at = self.position(self.tail);
        self.touched += n as u64;
        n
    }

    /// Appends up to `n` bytes of `pattern` repeated, from its byte `phase`
    /// on (iperf3's buffer, sent over and over). A slot written whole that
    /// already holds the same bytes — this pattern, from the same byte of
    /// it, as when the ring's laps are a multiple of the pattern's length —
    /// is not written again and keeps its sums: no per-byte work in the
    /// steady state. Other slots are copied into and summed, as by
    /// [`SendBuffer::write`]. Returns the count.
    pub(crate) fn write_repeat(&mut self, pattern: &Arc<[u8]>, phase: usize, n: usize) -> usize {
        let p = pattern.len();
        if p == 0 {
            return 0;
        }
        let generation = match &self.pattern {
            Some((q, g)) if Arc::ptr_eq(q, pattern) => *g,
            other => {
                let mut g = other.as_ref().map_or(1, |(_, g)| g.wrapping_add(1));
                if g == 0 {
                    // Generations came round: no slot may keep an old one.
                    for s in &mut self.sums {
                        s.repeat = NOT_REPEAT;
                    }
                    g = 1;
                }
                self.pattern = Some((Arc::clone(pattern), g));
                g
            }
        };
        // A phase is kept in 32 bits: a longer pattern is always copied.
        let taggable = u32::try_from(p).is_ok();
        let fl = self.frame_len;
        let (mut done, mut ph) = (0, phase % p);
        while let Some((slot, off, k)) = self.next_free(n - done) {
            let Some(dst) = Self::slot_of(&mut self.mem, slot) else {
                break;
            };
            let s = &mut self.sums[slot];
            let whole = off == 0 && k == fl;
            let tag = (generation, ph as u32);
            if !(taggable && whole && s.repeat == tag) {
                let (mut at, mut q) = (off, ph);
                while at < off + k {
                    let m = (p - q).min(off + k - at);
                    copy_summed(&mut dst[at..at + m], &pattern[q..q + m], at, s);
                    at += m;
                    q = if q + m == p { 0 } else { q + m };
                }
                self.touched += k as u64;
                if taggable && whole {
                    s.repeat = tag;
                }
            }
            ph = (ph + k) % p;
            self.advance(k);
            done += k;
        }
        done
    }

    /// Appends up to `n` zero bytes; a slot that already holds zeros is not
    /// touched (no per-byte work in the steady state). Returns the count.
    pub(crate) fn fill_zeros(&mut self, n: usize) -> usize {
        let mut done = 0;
        while let Some((slot, off, k)) = self.next_free(n - done) {
            if self.sums[slot].zero {
                // Zeros already, and its sums zero: nothing to write or
                // sum. (A slot whose frame leaves has its sums reset, so
                // `zero` means this slot's frame holds zeros; its headroom
                // may still be in flight, which the sender checks.)
                self.sums[slot].repeat = NOT_REPEAT;
            } else {
                let Some(dst) = Self::slot_of(&mut self.mem, slot) else {
                    break;
                };
                dst[off..].fill(0);
                self.touched += (dst.len() - off) as u64;
                let s = &mut self.sums[slot];
                s.repeat = NOT_REPEAT;
                // The slot is all zeros if nothing before `off` is kept.
                s.zero = off == 0;
                // A partial first block keeps the sum of its bytes before
                // `off` (zeros add nothing).
                for b in off.div_ceil(SUM_BLOCK)..SUM_BLOCKS {
                    s.blocks.0[b] = 0;
                }
            }
            self.advance(k);
            done += k;
        }
        done
    }

    /// Acknowledges everything below stream offset `to`. Returns true if a
    /// slot was released.
    pub(crate) fn ack(&mut self, to: u64) -> bool {
        let to = to.min(self.tail);
        if to <= self.head {
            return false;
        }
        let fl = self.frame_len as u64;
        let (first, last) = (self.head / fl, to / fl);
        self.head = to;
        self.head_base = last * fl;
        if self.limit < self.frames {
            // Each released slot's memory goes to the slot `limit` ahead,
            // the next one to be written once this one is free. (The slot
            // numbers wrap by a comparison, not by a division a slot.)
            let frames = self.frames;
            let next = |i: usize| if i + 1 == frames { 0 } else { i + 1 };
            let mut from = (first % frames as u64) as usize;
            let mut dst = ((first + self.limit as u64) % frames as u64) as usize;
            for _ in first..last {
                let sums = std::mem::take(&mut self.sums[from]);
                if self.mem.recycle(from, dst) {
                    self.sums[dst] = sums;
                }
                (from, dst) = (next(from), next(dst));
            }
        }
        first != last
    }

    /// The pieces of `[offset, offset+len)` with their sums, into `out`;
    /// returns how many (`None` if `out` is too short).
    pub(crate) fn pieces(&mut self, offset: u64, len: usize, out: &mut [Piece]) -> Option<usize> {
        if len == 0 {
            return Some(0);
        }
        debug_assert!(offset >= self.head && offset + len as u64 <= self.tail);
        let fl = self.frame_len;
        // Where `offset` is: from the cursor when the segment follows the
        // last one (the common case; no division), else computed.
        let (mut slot, mut in_frame) = match self.cursor {
            (at, slot, in_frame) if at == offset => (slot, in_frame),
            _ => (
                ((offset / fl as u64) % self.frames as u64) as usize,
                (offset % fl as u64) as usize,
            ),
        };
        let end = offset + len as u64;
        let (mut at, mut n) = (offset, 0);
        while at < end {
            let k = (fl - in_frame).min((end - at) as usize);
            *out.get_mut(n)? = Piece {
                slot,
                offset: in_frame,
                len: k,
                addr: self.mem.addr(slot).add(in_frame),
                sum: 0,
            };
            n += 1;
            at += k as u64;
            in_frame += k;
            if in_frame == fl {
                in_frame = 0;
                slot = if slot + 1 == self.frames { 0 } else { slot + 1 };
            }
        }
        self.cursor = (end, slot, in_frame);
        let mut at = offset;
        for p in &mut out[..n] {
            p.sum = self.piece_sum(at, p.slot, p.offset, p.len);
            at += p.len as u64;
        }
        Some(n)
    }

    /// The sum of one piece (stream offset `at`): from the block sums when
    /// it is made of whole blocks, else from the cache of pieces summed
    /// before (a retransmission), else by reading its partial blocks.
    fn piece_sum(&mut self, at: u64, slot: usize, off: usize, len: usize) -> u16 {
        // Zeros sum to zero: no byte of such a slot is read (the zeros
        // source does no per-byte work, at any MSS).
        if self.sums[slot].zero {
            return 0;
        }
        let end = off + len;
        let blocks = &self.sums[slot].blocks;
        // A slot's last block may be short: it ends where the slot does.
        if off.is_multiple_of(SUM_BLOCK) && (end.is_multiple_of(SUM_BLOCK) || end == self.frame_len)
        {
            let mut s: u64 = 0;
            for &b in &blocks.0[off / SUM_BLOCK..end.div_ceil(SUM_BLOCK)] {
                s += u64::from(b);
            }
            return checksum::fold(s);
        }
        let i = (at ^ (at >> 12)) as usize % SEG_SUMS;
        let (o, l, sum) = self.seg_sums[i];
        if o == at && l as usize == len {
            return sum;
        }
        let sum = piece_sum(self.mem.slot(slot), blocks, off, len);
        self.seg_sums[i] = (at, len as u32, sum);
        sum
    }

    /// The bytes at `[offset, offset+len)` copied into `out` (tests: the
    /// engine sends by reference).
    #[cfg(test)]
    pub(crate) fn copy_out(&self, offset: u64, out: &mut [u8]) {
        let fl = self.frame_len as u64;
        let frames = self.frames as u64;
        let mut at = 0usize;
        while at < out.len() {
            let o = offset + at as u64;
            let in_frame = (o % fl) as usize;
            let k = (self.frame_len - in_frame).min(out.len() - at);
            let slot = ((o / fl) % frames) as usize;
            out[at..at + k].copy_from_slice(&self.mem.slot(slot)[in_frame..in_frame + k]);
            at += k;
        }
    }
}

/// Updates the slot's block sums for bytes `[from, to)` just written: `piece`
/// gives the sum of each run `[a, b)` inside one 256-byte block (relative to
/// its first byte), and joins the block's sum of the bytes before it.
fn sum_blocks(
    from: usize,
    to: usize,
    s: &mut SlotSums,
    mut piece: impl FnMut(usize, usize) -> u16,
) {
    let mut pos = from;
    while pos < to {
        let b = pos / SUM_BLOCK;
        let in_block = pos % SUM_BLOCK;
        let k = (SUM_BLOCK - in_block).min(to - pos);
        let p = piece(pos, pos + k);
        s.blocks.0[b] = if in_block == 0 {
            p
        } else {
            checksum::combine(s.blocks.0[b], p, in_block)
        };
        pos += k;
    }
}

/// Copies `src` into `dst` (at slot offset `off`), summing as it goes, and
/// updates the slot's block sums.
fn copy_summed(dst: &mut [u8], src: &[u8], off: usize, s: &mut SlotSums) {
    s.zero = false;
    s.repeat = NOT_REPEAT;
    sum_blocks(off, off + src.len(), s, |a, b| {
        checksum::copy_and_sum(&mut dst[a - off..b - off], &src[a - off..b - off])
    });
}

/// Updates the block sums of a slot after bytes `[from, to)` were written in
/// place (read once, just written, so in cache).
fn sum_written(slot: &[u8], from: usize, to: usize, s: &mut SlotSums) {
    s.zero = false;
    s.repeat = NOT_REPEAT;
    sum_blocks(from, to, s, |a, b| checksum::sum(&slot[a..b]));
}

/// Internet sum of `slot[off..off+len]` relative to its first byte: whole
/// 256-byte blocks from the cache, the partial blocks at the ends read.
fn piece_sum(slot: &[u8], blocks: &BlockSums, off: usize, len: usize) -> u16 {
    let end = off + len;
    let b0 = off.div_ceil(SUM_BLOCK);
    let b1 = end / SUM_BLOCK;
    if b0 >= b1 {
        return checksum::sum(&slot[off..end]);
    }
    let head_len = b0 * SUM_BLOCK - off;
    let mut acc = checksum::Accumulator::new(0);
    acc.add_sum(checksum::sum(&slot[off..b0 * SUM_BLOCK]), head_len);
    let mut mid: u64 = 0;
    for &b in &blocks.0[b0..b1] {
        mid += u64::from(b);
    }
    acc.add_sum(checksum::fold(mid), (b1 - b0) * SUM_BLOCK);
    acc.add_sum(
        checksum::sum(&slot[b1 * SUM_BLOCK..end]),
        end - b1 * SUM_BLOCK,
    );
    acc.sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(fl: usize, frames: usize) -> SendBuffer<HeapFrames> {
        buf_slots(fl, frames, None)
    }

    fn buf_slots(fl: usize, frames: usize, slot: Option<usize>) -> SendBuffer<HeapFrames> {
        let mut b = SendBuffer::new(fl, frames, HeapFrames::default());
        b.allocate(slot);
        b
    }

    #[test]
    fn frames_are_released_only_when_fully_acked() {
        let mut b = SendBuffer::new(8, 4, HeapFrames::default());
        assert_eq!(b.free(), 0, "not allocated yet");
        b.allocate(None);
        assert_eq!(b.write(&[1; 40]), 32);
        assert_eq!(b.free(), 0);
        assert!(!b.ack(7));
        assert_eq!(b.free(), 0, "frame 0 still holds byte 7");
        assert!(b.ack(9));
        assert_eq!(b.free(), 8);
        assert_eq!(b.write(&(0..10).collect::<Vec<u8>>()), 8);
        let mut out = [0u8; 6];
        b.copy_out(30, &mut out);
        assert_eq!(out, [1, 1, 0, 1, 2, 3]);
        let mut p = [Piece::default(); 8];
        let n = b.pieces(14, 20, &mut p).unwrap();
        let got: Vec<_> = p[..n].iter().map(|p| (p.slot, p.offset, p.len)).collect();
        assert_eq!(got, vec![(1, 6, 2), (2, 0, 8), (3, 0, 8), (0, 0, 2)]);
        assert_eq!(p[1].addr, FrameAddr(16), "slot 2 of 8-byte slots");
        assert!(b.pieces(14, 20, &mut p[..3]).is_none(), "too few pieces");
    }

    /// Every piece's sum equals a recomputation over its bytes, however the
    /// stream was written (copies, in place, zeros) and cut.
    #[test]
    fn piece_sums_match_a_full_recomputation() {
        let mut rng = 0x1234_5678_u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // Slots of a page, half a page, a page less headroom, and one
        // segment's worth (the single-descriptor layout's).
        for (fl, slot) in [
            (4096usize, None),
            (2048, None),
            (3840, None),
            (4096, Some(1448)),
            (3840, Some(3754)),
        ] {
            let mut b = buf_slots(fl, 8, slot);
            let mut stream = Vec::new();
            let mut sent = 0u64;
            // Patterns whose length divides the ring's lap (slots written
            // whole come round holding the same bytes) and one that does not.
            let patterns: Vec<Arc<[u8]>> = [8 * fl, 2 * fl, 1000]
                .iter()
                .map(|&n| (0..n).map(|_| next() as u8).collect())
                .collect();
            let mut phase = 0usize;
            for _ in 0..400 {
                match next() % 5 {
                    4 => {
                        let pat = &patterns[(next() % 3) as usize];
                        if next() % 4 == 0 {
                            phase = (next() as usize) % pat.len();
                        }
                        let n = (next() % 20_000) as usize;
                        let k = b.write_repeat(pat, phase, n);
                        for i in 0..k {
                            stream.push(pat[(phase + i) % pat.len()]);
                        }
                        phase = (phase + k) % pat.len();
                    }
                    0 => {
                        let n = (next() % 5000) as usize;
                        let data: Vec<u8> = (0..n).map(|_| next() as u8).collect();
                        let k = b.write(&data);
                        stream.extend_from_slice(&data[..k]);
                    }
                    1 => {
                        let n = (next() % 3000) as usize;
                        let mut placed = Vec::new();
                        let mut left = n;
                        let k = b.fill(|d| {
                            let t = d.len().min(left);
                            for x in &mut d[..t] {
                                *x = next() as u8;
                            }
                            placed.extend_from_slice(&d[..t]);
                            left -= t;
                            t
                        });
                        assert_eq!(k, placed.len());
                        stream.extend_from_slice(&placed);
                    }
                    2 => {
                        let n = (next() % 9000) as usize;
                        let k = b.fill_zeros(n);
                        stream.extend(std::iter::repeat_n(0u8, k));
                    }
                    3 if next() % 2 == 0 => {
                        // Vectored, stopping part way like a short read.
                        let mut left = (next() % 70_000) as usize;
                        let mut placed = Vec::new();
                        let k = b.fill_vectored(|bufs| {
                            let mut n = 0;
                            for d in bufs.iter_mut() {
                                let t = d.len().min(left);
                                for x in &mut d[..t] {
                                    *x = next() as u8;
                                }
                                placed.extend_from_slice(&d[..t]);
                                left -= t;
                                n += t;
                                if t < d.len() {
                                    break;
                                }
                            }
                            n
                        });
                        assert_eq!(k, placed.len());
                        stream.extend_from_slice(&placed);
                    }
                    _ => {
                        // Send and acknowledge some, in segments of odd sizes.
                        while sent < b.tail() {
                            let len =
                                ((next() % 9000) as usize + 1).min((b.tail() - sent) as usize);
                            let mut p = [Piece::default(); MAX_PIECES];
                            for _ in 0..2 {
                                // The second time from the piece-sum cache.
                                let n = b.pieces(sent, len, &mut p).unwrap();
                                let mut at = sent as usize;
                                for piece in &p[..n] {
                                    let want = checksum::sum(&stream[at..at + piece.len]);
                                    assert_eq!(
                                        piece.sum, want,
                                        "fl {fl} at {at} len {}",
                                        piece.len
                                    );
                                    at += piece.len;
                                }
                            }
                            sent += len as u64;
                        }
                        let to = b.tail().saturating_sub(next() % 3000);
                        b.ack(to.max(b.head));
                    }
                }
                let mut copy = vec![0u8; b.len()];
                b.copy_out(b.head, &mut copy);
                assert_eq!(copy, stream[b.head as usize..], "fl {fl}");
            }
        }
    }

    #[test]
    fn a_pattern_into_a_slot_holding_it_does_not_touch_it() {
        let mut b = buf(4096, 4);
        let pat: Arc<[u8]> = (0..8192u32).map(|i| (i * 7 + i / 256) as u8).collect();
        assert_eq!(b.write_repeat(&pat, 0, 16384), 16384);
        assert_eq!(b.touched(), 16384, "the first lap is copied");
        b.ack(16384);
        // Plant a byte in slot 0: a slot that holds the pattern from the
        // same byte is not rewritten, so the byte stays.
        SendBuffer::slot_of(b.memory_mut(), 0).unwrap()[100] = !pat[100];
        assert_eq!(b.write_repeat(&pat, 0, 4096), 4096);
        assert_eq!(b.touched(), 16384, "no per-byte work for the second lap");
        let mut out = [0u8; 1];
        b.copy_out(16384 + 100, &mut out);
        assert_eq!(out, [!pat[100]], "not rewritten");
        let mut p = [Piece::default(); 4];
        assert_eq!(b.pieces(16384, 4096, &mut p), Some(1));
        assert_eq!(p[0].sum, checksum::sum(&pat[..4096]), "the cached sums");
        // The same slot from another byte of the pattern: copied.
        b.ack(20480);
        assert_eq!(b.write_repeat(&pat, 4096 + 100, 4096), 4096);
        assert_eq!(b.touched(), 16384 + 4096);
        let mut out = vec![0u8; 4096];
        b.copy_out(20480, &mut out);
        assert_eq!(
            out[..],
            pat[4196..]
                .iter()
                .chain(&pat[..100])
                .copied()
                .collect::<Vec<_>>()[..]
        );
        // The same bytes in another pattern: copied (a pattern is known by
        // the allocation it was given in).
        b.ack(24576);
        let twin: Arc<[u8]> = pat.iter().copied().collect();
        assert_eq!(b.write_repeat(&twin, 0, 4096), 4096);
        assert_eq!(b.touched(), 16384 + 8192);
        // A slot written in two parts is not known to hold the pattern: it
        // is copied on the next lap too.
        b.ack(28672);
        assert_eq!(b.write_repeat(&pat, 0, 100), 100);
        assert_eq!(b.write_repeat(&pat, 100, 3996), 3996);
        b.ack(32768);
        assert_eq!(b.touched(), 16384 + 12288);
        // Other writes into a slot make it unknown again: a one-slot ring
        // with a pattern of one slot's length, written over by a copy and
        // by zeros in between.
        let mut b = buf(4096, 1);
        let pat: Arc<[u8]> = pat[..4096].into();
        let lap = |b: &mut SendBuffer<HeapFrames>, touched: u64| {
            assert_eq!(b.write_repeat(&pat, 0, 4096), 4096);
            assert_eq!(b.touched(), touched);
            let mut out = vec![0u8; 4096];
            b.copy_out(b.tail() - 4096, &mut out);
            assert_eq!(out[..], pat[..]);
            let mut p = [Piece::default(); 1];
            assert_eq!(b.pieces(b.tail() - 4096, 4096, &mut p), Some(1));
            assert_eq!(p[0].sum, checksum::sum(&pat));
            b.ack(b.tail());
        };
        lap(&mut b, 4096);
        lap(&mut b, 4096);
        assert_eq!(b.write(&[1; 4096]), 4096);
        b.ack(b.tail());
        lap(&mut b, 3 * 4096);
        lap(&mut b, 3 * 4096);
        assert_eq!(b.fill_zeros(4096), 4096);
        b.ack(b.tail());
        lap(&mut b, 5 * 4096);
        lap(&mut b, 5 * 4096);
    }

    #[test]
    fn zeros_into_a_zeroed_slot_do_not_touch_it() {
        let mut b = buf(4096, 2);
        assert_eq!(b.fill_zeros(8192), 8192);
        assert_eq!(b.touched(), 8192, "fresh slots are zeroed once");
        b.ack(8192);
        // Plant a byte where the memory says slot 0 is: a slot known to be
        // zero is not rewritten, so the byte stays (the test's proof that no
        // memset happened).
        SendBuffer::slot_of(b.memory_mut(), 0).unwrap()[100] = 7;
        let mut p = [Piece::default(); 4];
        assert_eq!(b.fill_zeros(4096), 4096);
        assert_eq!(b.pieces(8192, 4096, &mut p), Some(1));
        assert_eq!(p[0].sum, 0, "from the cached sums");
        // Nor is it read for a piece that starts and ends inside blocks
        // (the planted byte would show in a sum read from memory).
        assert_eq!(b.pieces(8192 + 50, 200, &mut p), Some(1));
        assert_eq!(p[0].sum, 0, "a slot of zeros sums to zero, unread");
        let mut out = [0u8; 1];
        b.copy_out(8192 + 100, &mut out);
        assert_eq!(out, [7], "not rewritten");
        assert_eq!(b.touched(), 8192, "no per-byte work for the second lap");
        // A write of data clears the flag: zeros after it are written.
        b.ack(12288);
        assert_eq!(b.write(&[0xff; 10]), 10);
        assert_eq!(b.touched(), 8192 + 10, "a copy is per-byte work");
        assert_eq!(b.fill_zeros(4086), 4086);
        assert_eq!(b.touched(), 8192 + 4096, "zeros after data are written");
        let mut out = [1u8; 12];
        b.copy_out(12288 + 4, &mut out);
        assert_eq!(out, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0]);
    }
}
