//! TX segmentation (software TSO) by reference.
//!
//! The send buffer (`tcp::send`) describes the payload of a transmission
//! as [`StreamFrame`]s: runs of stream bytes inside one UMEM frame, each
//! with its Internet sum, which the buffer keeps from when the bytes were
//! written. A [`SegCursor`] cuts them into segments of at most MSS payload
//! bytes, each one header plus descriptors pointing into the frames, and
//! folds the runs' sums into the segment's checksum (RFC 1071 arithmetic):
//! **no payload byte is read here**, also not on retransmission. There is
//! no memory to read from: segment boundaries fall only between runs, so
//! the caller describes the payload cut where the segments are cut (whole
//! frames under MSS clipping, [`clip_mss`]; one segment's own pieces
//! otherwise), and a boundary inside a run is refused
//! ([`SegError::SplitFrame`]), not read around.

use super::template::HeaderTemplate;
use super::{FrameMemory, SegError, SegmentInfo};
use crate::frame::{Desc, FrameAddr};
use crate::wire::checksum::Accumulator;
use crate::wire::{SeqNumber, TcpFlags};

/// One run of a send stream's bytes inside one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamFrame {
    /// Address of the run's first byte.
    pub addr: FrameAddr,
    /// Bytes in the run.
    pub len: u32,
    /// [`crate::wire::checksum::sum`] of those bytes.
    pub sum: u16,
}

/// The MSS rounded down to a whole number of frame payloads, if it holds at
/// least one (MTU 9000: 8948 → 8192 with 4096-byte frames; MTU 65535 with
/// IPv4 and timestamps: 65483 → 61440). An MSS below one frame payload is
/// returned unchanged.
#[inline]
pub const fn clip_mss(mss: usize, frame_payload: usize) -> usize {
    if frame_payload == 0 || mss < frame_payload {
        mss
    } else {
        mss - mss % frame_payload
    }
}

/// A run whose address range wraps around the address space is refused
/// (after this, `f.addr.add(x)` for `x <= f.len` cannot overflow).
#[inline]
fn check_frame(f: &StreamFrame) -> Result<(), SegError> {
    match f.addr.0.checked_add(f.len as u64) {
        Some(_) => Ok(()),
        None => Err(SegError::OutOfBounds),
    }
}

/// Position and per-segment counters of a segmentation in progress,
/// independent of where the runs are described (so owners of the run
/// table can keep it next to the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegCursor {
    /// The next segment's first run.
    idx: usize,
    remaining: usize,
    seq: SeqNumber,
    ip_id: u16,
    mss: usize,
    first: bool,
    done: bool,
}

impl SegCursor {
    /// Starts `len` bytes at the first run, first byte at `seq`, first IPv4
    /// id `ip_id` (+1 a segment), segments of at most `mss` bytes. With
    /// `len == 0` one header-only segment is emitted (a pure ACK or FIN;
    /// chained layout only).
    pub fn new(len: usize, seq: SeqNumber, ip_id: u16, mss: usize) -> Result<SegCursor, SegError> {
        if mss == 0 {
            return Err(SegError::ZeroMss);
        }
        Ok(SegCursor {
            idx: 0,
            remaining: len,
            seq,
            ip_id,
            mss,
            first: true,
            done: false,
        })
    }

    /// Bytes not yet segmented.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    /// True once every segment was emitted.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Chained layout: emits the next segment, its header into `hdr` (which
    /// lives at `hdr_addr`), and into `descs` the header's descriptor and
    /// one per run it takes. `None` when done. On error the cursor is
    /// unchanged.
    pub fn next(
        &mut self,
        tpl: &HeaderTemplate,
        frames: &[StreamFrame],
        hdr: &mut [u8],
        hdr_addr: FrameAddr,
        descs: &mut [Desc],
    ) -> Option<Result<SegmentInfo, SegError>> {
        if self.done {
            return None;
        }
        Some(self.emit(tpl, frames, hdr, hdr_addr, descs))
    }

    /// Single-descriptor layout: emits the next segment as one descriptor,
    /// one run a segment, writing its headers into the `header_len()` bytes
    /// of `mem` just before the run. The run must start its frame after
    /// that much headroom, else [`SegError::NoHeadroom`] (also for a
    /// header-only segment: it has no run); the caller owns the headroom.
    #[inline]
    pub fn next_in_headroom<M: FrameMemory + ?Sized>(
        &mut self,
        tpl: &HeaderTemplate,
        frames: &[StreamFrame],
        mem: &mut M,
        desc: &mut Desc,
    ) -> Option<Result<SegmentInfo, SegError>> {
        if self.done {
            return None;
        }
        Some(self.emit_single(tpl, frames, mem, desc))
    }

    #[inline]
    fn emit_single<M: FrameMemory + ?Sized>(
        &mut self,
        tpl: &HeaderTemplate,
        frames: &[StreamFrame],
        mem: &mut M,
        desc: &mut Desc,
    ) -> Result<SegmentInfo, SegError> {
        let hl = tpl.header_len();
        if self.remaining == 0 {
            return Err(SegError::NoHeadroom);
        }
        // Empty runs carry nothing: skipped, as in the chained layout.
        let mut idx = self.idx;
        while frames.get(idx).is_some_and(|f| f.len == 0) {
            idx += 1;
        }
        let f = frames.get(idx).ok_or(SegError::ShortStream)?;
        check_frame(f)?;
        let plen = f.len as usize;
        if plen > self.remaining.min(self.mss) {
            return Err(SegError::SplitFrame);
        }
        if (f.addr.0 as usize) < hl {
            return Err(SegError::NoHeadroom);
        }
        let hdr_addr = FrameAddr(f.addr.0 - hl as u64);
        let last = plen == self.remaining;
        let flags = self.flags_for(tpl, last);
        let ip_id = if tpl.is_ipv6() { 0 } else { self.ip_id };
        let hdr = mem.bytes_mut(hdr_addr, hl).ok_or(SegError::OutOfBounds)?;
        tpl.write(hdr, self.seq, ip_id, flags, plen, f.sum)?;
        *desc = Desc::new(hdr_addr, (hl + plen) as u32, false);
        let info = SegmentInfo {
            seq: self.seq,
            flags,
            payload_len: plen,
            header_len: hl,
            desc_count: 1,
            ip_id,
        };
        self.idx = idx + 1;
        self.advance(plen, last);
        Ok(info)
    }

    fn flags_for(&self, tpl: &HeaderTemplate, last: bool) -> TcpFlags {
        let mut flags = tpl.flags();
        if !self.first {
            flags = flags.without(TcpFlags::CWR);
        }
        if !last {
            flags = flags.without(TcpFlags::FIN | TcpFlags::PSH);
        }
        flags
    }

    fn advance(&mut self, plen: usize, last: bool) {
        self.remaining -= plen;
        self.seq += plen;
        self.ip_id = self.ip_id.wrapping_add(1);
        self.first = false;
        self.done = last;
    }

    fn emit(
        &mut self,
        tpl: &HeaderTemplate,
        frames: &[StreamFrame],
        hdr: &mut [u8],
        hdr_addr: FrameAddr,
        descs: &mut [Desc],
    ) -> Result<SegmentInfo, SegError> {
        let plen = self.remaining.min(self.mss);
        let last = plen == self.remaining;
        let hl = tpl.header_len();
        if descs.is_empty() {
            return Err(SegError::Descriptors { have: 0 });
        }
        let mut acc = Accumulator::new(0);
        let (mut idx, mut left, mut n) = (self.idx, plen, 1);
        while left > 0 {
            let f = frames.get(idx).ok_or(SegError::ShortStream)?;
            check_frame(f)?;
            let flen = f.len as usize;
            if flen > left {
                return Err(SegError::SplitFrame);
            }
            idx += 1;
            if flen == 0 {
                continue;
            }
            acc.add_sum(f.sum, flen);
            let d = descs.get_mut(n).ok_or(SegError::Descriptors { have: n })?;
            *d = Desc::new(f.addr, flen as u32, true);
            n += 1;
            left -= flen;
        }
        if n > 1 {
            descs[n - 1].options &= !Desc::CONTD;
        }
        let flags = self.flags_for(tpl, last);
        let ip_id = if tpl.is_ipv6() { 0 } else { self.ip_id };
        tpl.write(hdr, self.seq, ip_id, flags, plen, acc.sum())?;
        descs[0] = Desc::new(hdr_addr, hl as u32, n > 1);
        let info = SegmentInfo {
            seq: self.seq,
            flags,
            payload_len: plen,
            header_len: hl,
            desc_count: n,
            ip_id,
        };
        self.idx = idx;
        self.advance(plen, last);
        Ok(info)
    }
}
