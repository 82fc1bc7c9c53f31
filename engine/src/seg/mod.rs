//! Software TSO over UMEM frames: what the engine sends every segment
//! through (`worker::port`).
//!
//! # Contract
//!
//! - Pure functions and small state machines over [`Desc`](crate::frame::Desc)
//!   chains; no I/O, no allocation, no `unsafe`, no panics on any input
//!   (errors instead).
//! - Payload is **referenced, never copied, never read**: the send buffer
//!   (`tcp::send`) hands over the payload as [`StreamFrame`]s, runs inside
//!   its frames with their Internet sums, cut where the segments are cut;
//!   [`SegCursor`] folds those sums into each segment's checksum.
//! - Per segment, as Linux `tcp_gso_segment`: the header is copied from a
//!   [`HeaderTemplate`] and fixed up — sequence number advanced, IPv4 id +1,
//!   lengths, CWR only on the first segment, FIN and PSH only on the last,
//!   IPv4 header and TCP checksums. The checksums are incremental: the
//!   template's header sums are computed once, and a segment adds its
//!   sequence number, flags, length and payload sum.
//! - Two layouts: *chained* ([`SegCursor::next`]), one header descriptor
//!   (headers written into a frame of their own) followed by descriptors
//!   of the runs, every one but the last carrying
//!   [`Desc::CONTD`](crate::frame::Desc::CONTD); and *single-descriptor*
//!   ([`SegCursor::next_in_headroom`]) for devices without multi-buffer:
//!   the headers go into the frame's headroom right before the run and one
//!   descriptor carries the segment (one run a segment). With MSS
//!   clipping ([`clip_mss`]) every segment of the chained layout is whole
//!   frames.

pub mod template;
pub mod tso;

pub use template::HeaderTemplate;
pub use tso::{SegCursor, StreamFrame, clip_mss};

use crate::frame::FrameAddr;
use crate::wire::{self, SeqNumber, TcpFlags};

/// Largest header a template holds: Ethernet + 802.1Q (18), IPv6 with
/// extension headers, TCP with options (60).
pub const MAX_HEADER_LEN: usize = 192;

/// Write access to frame memory, for the single-descriptor layout (headers
/// written into a frame's headroom, just before its payload).
pub trait FrameMemory {
    /// `len` bytes at `addr`, writable, or `None` if out of range.
    fn bytes_mut(&mut self, addr: FrameAddr, len: usize) -> Option<&mut [u8]>;
}

impl FrameMemory for [u8] {
    #[inline]
    fn bytes_mut(&mut self, addr: FrameAddr, len: usize) -> Option<&mut [u8]> {
        let start = usize::try_from(addr.0).ok()?;
        self.get_mut(start..start.checked_add(len)?)
    }
}

impl FrameMemory for Vec<u8> {
    #[inline]
    fn bytes_mut(&mut self, addr: FrameAddr, len: usize) -> Option<&mut [u8]> {
        self[..].bytes_mut(addr, len)
    }
}

/// Why segmentation failed.
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
    /// A run wraps the address space, or a header's place lies outside
    /// the frame memory.
    #[error("descriptor outside frame memory")]
    OutOfBounds,
    /// The runs hold fewer bytes than the cursor was asked to send.
    #[error("stream frames hold fewer bytes than requested")]
    ShortStream,
    /// A segment would end inside a run: its sum covers the whole run, and
    /// the payload is not read to split it.
    #[error("a segment boundary falls inside a stream frame")]
    SplitFrame,
    /// The segment would exceed the IP length field.
    #[error("segment too large for the IP length field")]
    TooLarge,
    /// The headers are larger than [`MAX_HEADER_LEN`].
    #[error("headers larger than {MAX_HEADER_LEN} bytes")]
    HeaderTooLong,
    /// MSS of zero.
    #[error("MSS must be positive")]
    ZeroMss,
    /// Single-descriptor layout: the run has less headroom than the
    /// headers, or the segment has no run (header-only).
    #[error("segment cannot carry its headers in the frame's headroom")]
    NoHeadroom,
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
