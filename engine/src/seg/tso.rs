//! TX stream segmentation (software TSO) by reference.
//!
//! A send buffer is a sequence of [`StreamFrame`]s: where a run of stream
//! bytes is, how long, and its Internet sum cached when it was written
//! (e.g. by [`crate::wire::checksum::copy_and_sum`]). A [`StreamFrame`] is
//! usually a whole UMEM frame but need not be: any run of bytes inside one
//! frame will do. A [`StreamSegmenter`] walks a byte range of the stream
//! and emits segments of at most MSS payload bytes, each as one header
//! descriptor plus descriptors pointing into the frames.
//!
//! The payload is read only where a segment boundary falls inside a
//! [`StreamFrame`]. Three ways to make that never (or rarely) happen:
//!
//! - MSS clipping ([`clip_mss`]) with whole-frame entries: every payload
//!   descriptor is a whole frame, every sum comes from the cache;
//! - for an MSS below the frame payload (e.g. 1448), describe the stream at
//!   write time as runs cut at frame *and* MSS boundaries, each with its
//!   own cached sum: again no reads (retransmissions with the same MSS
//!   included);
//! - otherwise (boundaries that move, e.g. after an MSS change), optional
//!   per-frame [`BlockSums`] bound the read to two partial 256-byte blocks;
//!   without them the smaller side of the frame is read and subtracted
//!   from the cached frame sum.

use super::template::HeaderTemplate;
use super::{FrameMemory, FrameMemoryMut, SegError, SegmentInfo};
use crate::frame::{Desc, FrameAddr};
use crate::wire::checksum::{self, Accumulator};
use crate::wire::{SeqNumber, TcpFlags};

/// One frame of a send stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamFrame {
    /// Address of the frame's first stream byte.
    pub addr: FrameAddr,
    /// Stream bytes in the frame.
    pub len: u32,
    /// [`checksum::sum`] of those bytes.
    pub sum: u16,
}

/// Bytes covered by one [`BlockSums`] entry.
pub const SUM_BLOCK: usize = 256;
/// Entries in a [`BlockSums`] (a 4096-byte frame).
pub const SUM_BLOCKS: usize = 4096 / SUM_BLOCK;

/// Optional finer cache for a [`StreamFrame`]: the Internet sums of its
/// consecutive 256-byte blocks (from the frame's first stream byte; the
/// last block may be short). With it, a segment boundary inside a frame
/// costs reading at most two partial blocks instead of up to half a frame
/// (MSS 1448 without clipping reads ~0.25 KiB per segment instead of all
/// 1448 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockSums(pub [u16; SUM_BLOCKS]);

impl BlockSums {
    /// Copies `src` (at most 4096 bytes) into `dst` and returns the sum of
    /// the whole and of each block, reading `src` once.
    /// [`SegError::TooManyPieces`] if `src` is longer than 4096 bytes.
    ///
    /// # Panics
    ///
    /// If `dst` is shorter than `src`.
    pub fn copy_and_sum(dst: &mut [u8], src: &[u8]) -> Result<(u16, BlockSums), SegError> {
        if src.len() > SUM_BLOCK * SUM_BLOCKS {
            return Err(SegError::TooManyPieces);
        }
        let mut b = BlockSums::default();
        let mut total: u64 = 0;
        for ((d, c), slot) in dst[..src.len()]
            .chunks_mut(SUM_BLOCK)
            .zip(src.chunks(SUM_BLOCK))
            .zip(b.0.iter_mut())
        {
            *slot = checksum::copy_and_sum(d, c);
            total += *slot as u64;
        }
        Ok((checksum::fold(total), b))
    }
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

/// A frame whose address range wraps around the address space is refused
/// (after this, `f.addr.add(x)` for `x <= f.len` cannot overflow).
#[inline]
pub(crate) fn check_frame(f: &StreamFrame) -> Result<(), SegError> {
    match f.addr.0.checked_add(f.len as u64) {
        Some(_) => Ok(()),
        None => Err(SegError::OutOfBounds),
    }
}

/// Internet sum of `len` bytes at `off` in frame `f`, relative to their own
/// first byte, reading the smaller side of the frame.
fn piece_sum<M: FrameMemory + ?Sized>(
    f: &StreamFrame,
    off: usize,
    len: usize,
    mem: &M,
    blocks: Option<&BlockSums>,
) -> Result<u16, SegError> {
    let flen = f.len as usize;
    if off == 0 && len == flen {
        return Ok(f.sum);
    }
    if let Some(bs) = blocks {
        // Whole blocks [b0, b1) from the cache, the partial ends read.
        let b0 = off.div_ceil(SUM_BLOCK);
        let b1 = (off + len) / SUM_BLOCK;
        if let Some(mid_blocks) = bs.0.get(b0..b1).filter(|m| !m.is_empty()) {
            let head = mem
                .bytes(f.addr.add(off), b0 * SUM_BLOCK - off)
                .ok_or(SegError::OutOfBounds)?;
            let tail = mem
                .bytes(f.addr.add(b1 * SUM_BLOCK), off + len - b1 * SUM_BLOCK)
                .ok_or(SegError::OutOfBounds)?;
            let mut mid: u64 = checksum::sum(tail) as u64;
            for &b in mid_blocks {
                mid += b as u64;
            }
            // Blocks and tail sit at even frame offsets: odd piece offsets
            // in the piece when `off` is odd.
            let mid = checksum::fold(mid);
            let mid = if off & 1 == 1 { mid.swap_bytes() } else { mid };
            return Ok(checksum::add(checksum::sum(head), mid));
        }
    }
    if len <= flen / 2 {
        let b = mem
            .bytes(f.addr.add(off), len)
            .ok_or(SegError::OutOfBounds)?;
        return Ok(checksum::sum(b));
    }
    let pre = mem.bytes(f.addr, off).ok_or(SegError::OutOfBounds)?;
    let suf = mem
        .bytes(f.addr.add(off + len), flen - off - len)
        .ok_or(SegError::OutOfBounds)?;
    let rest = checksum::combine(checksum::sum(pre), checksum::sum(suf), off + len);
    let s = checksum::sub(f.sum, rest);
    Ok(if off & 1 == 1 { s.swap_bytes() } else { s })
}

/// Position and per-segment counters of a segmentation in progress,
/// independent of where the frames live (so owners of the frame table can
/// keep it next to the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegCursor {
    idx: usize,
    off: usize,
    remaining: usize,
    seq: SeqNumber,
    ip_id: u16,
    mss: usize,
    first: bool,
    done: bool,
}

impl SegCursor {
    /// Starts `len` bytes at byte `offset` of `frames[0]`, first byte at
    /// `seq`, first IPv4 id `ip_id`, segments of at most `mss` bytes. With
    /// `len == 0` one header-only segment is emitted (a pure ACK or FIN).
    pub fn new(
        offset: usize,
        len: usize,
        seq: SeqNumber,
        ip_id: u16,
        mss: usize,
    ) -> Result<SegCursor, SegError> {
        if mss == 0 {
            return Err(SegError::ZeroMss);
        }
        Ok(SegCursor {
            idx: 0,
            off: offset,
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

    /// Emits the next segment: header into `hdr` (which lives at `hdr_addr`),
    /// descriptors into `descs`. `None` when done. On error the cursor is
    /// unchanged.
    pub fn next<M: FrameMemory + ?Sized>(
        &mut self,
        tpl: &HeaderTemplate,
        frames: &[StreamFrame],
        mem: &M,
        hdr: &mut [u8],
        hdr_addr: FrameAddr,
        descs: &mut [Desc],
    ) -> Option<Result<SegmentInfo, SegError>> {
        if self.done {
            return None;
        }
        Some(self.emit(tpl, frames, &[], mem, hdr, hdr_addr, descs))
    }

    /// [`Self::next`] with per-frame [`BlockSums`] (`blocks[i]` for
    /// `frames[i]`; frames without an entry use the cached frame sum only).
    #[allow(clippy::too_many_arguments)]
    pub fn next_with_blocks<M: FrameMemory + ?Sized>(
        &mut self,
        tpl: &HeaderTemplate,
        frames: &[StreamFrame],
        blocks: &[BlockSums],
        mem: &M,
        hdr: &mut [u8],
        hdr_addr: FrameAddr,
        descs: &mut [Desc],
    ) -> Option<Result<SegmentInfo, SegError>> {
        if self.done {
            return None;
        }
        Some(self.emit(tpl, frames, blocks, mem, hdr, hdr_addr, descs))
    }

    /// Single-descriptor layout: emits the next segment as one descriptor,
    /// writing its headers into the `header_len()` bytes just before its
    /// payload. Each segment is the rest of one frame, at most MSS bytes;
    /// it must start at the frame's first stream byte (frames written with
    /// headroom, MSS at least the frame payload), else
    /// [`SegError::NoHeadroom`]. The caller owns the headroom bytes.
    #[inline]
    pub fn next_in_headroom<M: FrameMemoryMut + ?Sized>(
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
    fn emit_single<M: FrameMemoryMut + ?Sized>(
        &mut self,
        tpl: &HeaderTemplate,
        frames: &[StreamFrame],
        mem: &mut M,
        desc: &mut Desc,
    ) -> Result<SegmentInfo, SegError> {
        let hl = tpl.header_len();
        let (mut idx, mut off) = (self.idx, self.off);
        // Skip exhausted frames.
        while let Some(f) = frames.get(idx) {
            if off < f.len as usize || self.remaining == 0 {
                break;
            }
            idx += 1;
            off = 0;
        }
        let (addr, plen, sum, flen) = if self.remaining == 0 {
            // Header-only: still needs a frame's headroom to live in.
            let f = frames.get(idx).ok_or(SegError::ShortStream)?;
            check_frame(f)?;
            if off > f.len as usize {
                return Err(SegError::ShortStream);
            }
            (f.addr.add(off), 0, 0, f.len as usize)
        } else {
            let f = frames.get(idx).ok_or(SegError::ShortStream)?;
            check_frame(f)?;
            let flen = f.len as usize;
            if off != 0 {
                return Err(SegError::NoHeadroom);
            }
            let plen = self.remaining.min(self.mss).min(flen);
            // A whole frame's sum is the frame's own (`piece_sum`'s first
            // case, without the call).
            let sum = if plen == flen {
                f.sum
            } else {
                piece_sum(f, 0, plen, &*mem, None)?
            };
            (f.addr, plen, sum, flen)
        };
        if off != 0 || (addr.0 as usize) < hl {
            return Err(SegError::NoHeadroom);
        }
        let hdr_addr = FrameAddr(addr.0 - hl as u64);
        let last = plen == self.remaining;
        let flags = self.flags_for(tpl, last);
        let ip_id = if tpl.is_ipv6() { 0 } else { self.ip_id };
        let hdr = mem.bytes_mut(hdr_addr, hl).ok_or(SegError::OutOfBounds)?;
        tpl.write(hdr, self.seq, ip_id, flags, plen, sum)?;
        *desc = Desc::new(hdr_addr, (hl + plen) as u32, false);
        let info = SegmentInfo {
            seq: self.seq,
            flags,
            payload_len: plen,
            header_len: hl,
            desc_count: 1,
            ip_id,
        };
        let off = off + plen;
        if off == flen {
            self.idx = idx + 1;
            self.off = 0;
        } else {
            self.idx = idx;
            self.off = off;
        }
        self.advance(tpl, plen, last);
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

    fn advance(&mut self, tpl: &HeaderTemplate, plen: usize, last: bool) {
        self.remaining -= plen;
        self.seq += plen;
        if !tpl.fixed_ip_id() {
            self.ip_id = self.ip_id.wrapping_add(1);
        }
        self.first = false;
        self.done = last;
    }

    #[allow(clippy::too_many_arguments)]
    fn emit<M: FrameMemory + ?Sized>(
        &mut self,
        tpl: &HeaderTemplate,
        frames: &[StreamFrame],
        blocks: &[BlockSums],
        mem: &M,
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
        let (mut idx, mut off, mut left, mut n) = (self.idx, self.off, plen, 1);
        while left > 0 {
            let f = frames.get(idx).ok_or(SegError::ShortStream)?;
            check_frame(f)?;
            let flen = f.len as usize;
            if off >= flen {
                if off > flen {
                    return Err(SegError::ShortStream);
                }
                idx += 1;
                off = 0;
                continue;
            }
            let take = (flen - off).min(left);
            let s = piece_sum(f, off, take, mem, blocks.get(idx))?;
            acc.add_sum(s, take);
            let d = descs.get_mut(n).ok_or(SegError::Descriptors { have: n })?;
            *d = Desc::new(f.addr.add(off), take as u32, true);
            n += 1;
            left -= take;
            off += take;
            if off == flen {
                idx += 1;
                off = 0;
            }
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
        self.off = off;
        self.advance(tpl, plen, last);
        Ok(info)
    }
}

/// Segments a byte range of a send stream (see the module doc).
#[derive(Debug, Clone)]
pub struct StreamSegmenter<'a> {
    tpl: &'a HeaderTemplate,
    frames: &'a [StreamFrame],
    blocks: &'a [BlockSums],
    cursor: SegCursor,
}

impl<'a> StreamSegmenter<'a> {
    /// Segments `len` bytes starting `offset` bytes into `frames[0]`; the
    /// first byte has sequence number `seq`; IPv4 ids start at the
    /// template's.
    pub fn new(
        tpl: &'a HeaderTemplate,
        frames: &'a [StreamFrame],
        offset: usize,
        len: usize,
        seq: SeqNumber,
        mss: usize,
    ) -> Result<StreamSegmenter<'a>, SegError> {
        Ok(StreamSegmenter {
            tpl,
            frames,
            blocks: &[],
            cursor: SegCursor::new(offset, len, seq, tpl.ip_id(), mss)?,
        })
    }

    /// Uses per-frame block sums (`blocks[i]` for `frames[i]`) for segment
    /// boundaries inside frames.
    #[must_use]
    pub fn with_block_sums(mut self, blocks: &'a [BlockSums]) -> StreamSegmenter<'a> {
        self.blocks = blocks;
        self
    }

    /// The cursor (position, next sequence number and id).
    pub fn cursor(&self) -> &SegCursor {
        &self.cursor
    }

    /// Emits the next segment (chained layout): header into `hdr` at
    /// `hdr_addr`, header + payload descriptors into `descs`. `mem` is read
    /// only for segment boundaries inside a frame.
    pub fn next_segment<M: FrameMemory + ?Sized>(
        &mut self,
        mem: &M,
        hdr: &mut [u8],
        hdr_addr: FrameAddr,
        descs: &mut [Desc],
    ) -> Option<Result<SegmentInfo, SegError>> {
        self.cursor.next_with_blocks(
            self.tpl,
            self.frames,
            self.blocks,
            mem,
            hdr,
            hdr_addr,
            descs,
        )
    }

    /// Emits the next segment in the single-descriptor layout (see
    /// [`SegCursor::next_in_headroom`]).
    pub fn next_in_headroom<M: FrameMemoryMut + ?Sized>(
        &mut self,
        mem: &mut M,
        desc: &mut Desc,
    ) -> Option<Result<SegmentInfo, SegError>> {
        self.cursor
            .next_in_headroom(self.tpl, self.frames, mem, desc)
    }
}
