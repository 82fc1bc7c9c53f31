//! GSO: split one large TCP packet into MSS-sized segments.
//!
//! The packet is a descriptor chain whose first descriptor holds all the
//! headers (Ethernet, IP with any IPv6 extension headers, TCP with options)
//! and possibly the start of the payload; the rest of the chain is payload.
//! The payload is cut into pieces at the chain's descriptor boundaries and
//! at every MSS boundary, each piece's sum is computed (the payload's only
//! read), and the segments are then emitted exactly as by
//! [`super::tso`]: a new header per segment, payload referenced in place.
//! Sequence numbers advance, the IPv4 id goes +1 per segment, CWR stays on
//! the first segment, FIN and PSH move to the last.

use super::template::HeaderTemplate;
use super::tso::{SegCursor, StreamFrame};
use super::{FrameMemory, SegError, SegmentInfo};
use crate::frame::{Desc, FrameAddr};
use crate::wire::{TcpPacket, checksum, locate_tcp};

/// Most payload pieces a [`Gso`] holds (chain descriptors + segments).
pub const MAX_GSO_PIECES: usize = 320;

/// A packet being split (see the module doc).
#[derive(Debug, Clone)]
pub struct Gso {
    tpl: HeaderTemplate,
    pieces: [StreamFrame; MAX_GSO_PIECES],
    count: usize,
    cursor: SegCursor,
}

impl Gso {
    /// Prepares to split the packet in `chain` into segments of at most
    /// `mss` payload bytes. [`SegError::NoSplitNeeded`] if the payload
    /// already fits (Linux's cheap reject: send the packet as it is).
    pub fn new<M: FrameMemory + ?Sized>(
        chain: &[Desc],
        mem: &M,
        mss: usize,
    ) -> Result<Gso, SegError> {
        if mss == 0 {
            return Err(SegError::ZeroMss);
        }
        let first = chain.first().ok_or(SegError::ShortStream)?;
        let head = mem
            .bytes(first.addr, first.len as usize)
            .ok_or(SegError::OutOfBounds)?;
        let layout = locate_tcp(head)?;
        let tcp = TcpPacket::new_checked(&head[layout.tcp_off..])?;
        let tpl = HeaderTemplate::from_headers(head)?;
        let payload_len = layout.payload_len();
        if payload_len <= mss {
            return Err(SegError::NoSplitNeeded);
        }
        let mut pieces = [StreamFrame::default(); MAX_GSO_PIECES];
        let mut count = 0;
        let mut left = payload_len;
        // Bytes until the next MSS boundary.
        let mut to_boundary = mss;
        let mut skip = layout.payload_off();
        for d in chain {
            if d.addr.0.checked_add(d.len as u64).is_none() {
                return Err(SegError::OutOfBounds);
            }
            let mut at = d.addr;
            let mut dlen = d.len as usize;
            if skip > 0 {
                let s = skip.min(dlen);
                at = at.add(s);
                dlen -= s;
                skip -= s;
            }
            while dlen > 0 && left > 0 {
                let take = dlen.min(left).min(to_boundary);
                let bytes = mem.bytes(at, take).ok_or(SegError::OutOfBounds)?;
                let p = pieces.get_mut(count).ok_or(SegError::TooManyPieces)?;
                *p = StreamFrame {
                    addr: at,
                    len: take as u32,
                    sum: checksum::sum(bytes),
                };
                count += 1;
                at = at.add(take);
                dlen -= take;
                left -= take;
                to_boundary -= take;
                if to_boundary == 0 {
                    to_boundary = mss;
                }
            }
            if left == 0 {
                break;
            }
        }
        if left > 0 {
            return Err(SegError::ShortStream);
        }
        let cursor = SegCursor::new(0, payload_len, tcp.seq(), tpl.ip_id(), mss)?;
        Ok(Gso {
            tpl,
            pieces,
            count,
            cursor,
        })
    }

    /// The header template taken from the packet.
    pub fn template(&self) -> &HeaderTemplate {
        &self.tpl
    }

    /// Emits the next segment: header into `hdr` at `hdr_addr`, header +
    /// payload descriptors (into the original packet's buffers) into
    /// `descs`. `None` when done. The payload is not read again.
    pub fn next_segment(
        &mut self,
        hdr: &mut [u8],
        hdr_addr: FrameAddr,
        descs: &mut [Desc],
    ) -> Option<Result<SegmentInfo, SegError>> {
        // Every segment is made of whole pieces, so the memory is never read.
        self.cursor.next(
            &self.tpl,
            &self.pieces[..self.count],
            &NoMemory,
            hdr,
            hdr_addr,
            descs,
        )
    }
}

/// Memory that is never there: proves the pieces' cached sums suffice.
struct NoMemory;

impl FrameMemory for NoMemory {
    fn bytes(&self, _: FrameAddr, _: usize) -> Option<&[u8]> {
        None
    }
}
