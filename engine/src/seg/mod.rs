//! Software TSO, GSO and GRO over UMEM frames and descriptor chains.
//!
//! # Contract
//!
//! - Pure functions and small state machines over [`Desc`](crate::frame::Desc) chains and a
//!   read-only view of frame memory ([`FrameMemory`]); no I/O, no
//!   allocation, no `unsafe`, no panics on any input (errors instead).
//! - Payload is **referenced, never copied**: every segment is one header
//!   descriptor (headers written into a caller-provided header buffer, e.g.
//!   a small frame) followed by descriptors pointing into the payload frames.
//!   Every descriptor of a chain but the last carries
//!   [`Desc::CONTD`](crate::frame::Desc::CONTD).
//! - Per segment, as Linux `tcp_gso_segment`: the header is copied from a
//!   [`HeaderTemplate`] and fixed up — sequence number advanced, IPv4 id +1
//!   (unless fixed), lengths, CWR only on the first segment, FIN and PSH
//!   only on the last, IPv4 header and TCP checksums. The checksums are
//!   incremental: the template's header sums are computed once, and a
//!   segment adds its sequence number, flags, length and payload sum.
//! - [`tso`]: a send stream made of frames whose payload sums were cached
//!   when the data was written ([`StreamFrame::sum`]); with MSS clipping
//!   ([`clip_mss`]) every payload descriptor is a whole frame and the
//!   payload is never read again, also not on retransmission. An MSS below
//!   a frame (1448) is served without reads when the stream is described
//!   as runs cut at MSS boundaries; a boundary inside a cached run costs
//!   reading part of it (bounded by [`BlockSums`]).
//! - Two layouts: *chained* (above) and *single-descriptor*
//!   ([`StreamSegmenter::next_in_headroom`]) for devices without
//!   multi-buffer: the headers go into the frame's headroom right before
//!   the payload and one descriptor carries the segment; the MSS is then at
//!   most one frame's payload.
//! - [`gso`]: one large TCP packet (a multi-buffer chain) split into
//!   MSS-sized segments; the payload is read once, for its sums.
//! - [`gro`]: consecutive in-order segments of one flow merged into one
//!   large segment under the Linux rules; the merged checksum is derived
//!   from the segments' own checksums (or verified by reading, if asked).
//!
//! What the engine uses (`worker::port`): [`SegCursor`] and
//! [`HeaderTemplate`], with [`clip_mss`]; its send buffer keeps its own
//! per-slot block sums (`tcp::send`, in [`BlockSums`]). [`StreamSegmenter`]
//! (the tests' and benchmarks' way to walk a described stream), [`gso`] and
//! [`gro`] are in no data path of the engine: tested, fuzzed and
//! benchmarked, not used.

pub mod gro;
pub mod gso;
pub mod template;
pub mod tso;

pub use gro::{Gro, GroOutcome, RxChecksum};
pub use gso::Gso;
pub use template::HeaderTemplate;
pub use tso::{BlockSums, SegCursor, StreamFrame, StreamSegmenter, clip_mss};

use crate::frame::FrameAddr;
use crate::wire::{self, SeqNumber, TcpFlags};

/// Largest header a template holds: Ethernet + 802.1Q (18), IPv6 with
/// extension headers, TCP with options (60).
pub const MAX_HEADER_LEN: usize = 192;

/// Read access to the memory descriptors point into (the UMEM).
pub trait FrameMemory {
    /// `len` bytes at `addr`, or `None` if out of range.
    fn bytes(&self, addr: FrameAddr, len: usize) -> Option<&[u8]>;
}

impl FrameMemory for [u8] {
    #[inline]
    fn bytes(&self, addr: FrameAddr, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(addr.0).ok()?;
        self.get(start..start.checked_add(len)?)
    }
}

impl<const N: usize> FrameMemory for [u8; N] {
    #[inline]
    fn bytes(&self, addr: FrameAddr, len: usize) -> Option<&[u8]> {
        self[..].bytes(addr, len)
    }
}

impl FrameMemory for Vec<u8> {
    #[inline]
    fn bytes(&self, addr: FrameAddr, len: usize) -> Option<&[u8]> {
        self[..].bytes(addr, len)
    }
}

/// Write access to frame memory, for the single-descriptor layout (headers
/// written into a frame's headroom, just before its payload).
pub trait FrameMemoryMut: FrameMemory {
    /// `len` bytes at `addr`, writable, or `None` if out of range.
    fn bytes_mut(&mut self, addr: FrameAddr, len: usize) -> Option<&mut [u8]>;
}

impl FrameMemoryMut for [u8] {
    #[inline]
    fn bytes_mut(&mut self, addr: FrameAddr, len: usize) -> Option<&mut [u8]> {
        let start = usize::try_from(addr.0).ok()?;
        self.get_mut(start..start.checked_add(len)?)
    }
}

impl FrameMemoryMut for Vec<u8> {
    #[inline]
    fn bytes_mut(&mut self, addr: FrameAddr, len: usize) -> Option<&mut [u8]> {
        self[..].bytes_mut(addr, len)
    }
}

/// Why segmentation or merging failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SegError {
    /// The headers could not be parsed.
    #[error("bad headers: {0}")]
    Wire(#[from] wire::Error),
    /// The header buffer is shorter than the template's header.
    #[error("header buffer too small: need {need} bytes")]
    HeaderBuffer {
        /// Bytes needed.
        need: usize,
    },
    /// The descriptor output slice is too short for this segment.
    #[error("descriptor slice too small: need more than {have}")]
    Descriptors {
        /// Descriptors available.
        have: usize,
    },
    /// A descriptor or frame points outside the frame memory.
    #[error("descriptor outside frame memory")]
    OutOfBounds,
    /// The frames hold fewer bytes than the segmenter was asked to send.
    #[error("stream frames hold fewer bytes than requested")]
    ShortStream,
    /// The segment would exceed the IP length field.
    #[error("segment too large for the IP length field")]
    TooLarge,
    /// The headers are larger than [`MAX_HEADER_LEN`].
    #[error("headers larger than {MAX_HEADER_LEN} bytes")]
    HeaderTooLong,
    /// MSS of zero.
    #[error("MSS must be positive")]
    ZeroMss,
    /// More pieces than the fixed-size tables hold.
    #[error("too many payload pieces")]
    TooManyPieces,
    /// Single-descriptor layout: the segment does not start at a frame's
    /// first stream byte, or the frame has less headroom than the headers.
    #[error("segment cannot carry its headers in the frame's headroom")]
    NoHeadroom,
    /// GSO was asked to split a packet that already fits the MSS.
    #[error("packet already fits the MSS")]
    NoSplitNeeded,
}

/// What one emitted segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Sequence number of the first payload byte.
    pub seq: SeqNumber,
    /// Flags written.
    pub flags: TcpFlags,
    /// Payload bytes.
    pub payload_len: usize,
    /// Header bytes written (descriptor 0).
    pub header_len: usize,
    /// Descriptors written (header + payload).
    pub desc_count: usize,
    /// IPv4 identification written (0 for IPv6).
    pub ip_id: u16,
}

#[cfg(test)]
mod tests;
