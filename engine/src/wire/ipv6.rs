//! IPv6 (RFC 8200). Hop-by-hop (first only), routing and destination-options
//! extension headers are skipped by [`Ipv6Packet::upper_layer`]; a fragment
//! header is [`Error::Fragmented`]. [`Ipv6Repr`] represents the fixed
//! header; it emits no extension headers.
//!
//! [`Ipv6Packet::new_checked`] guarantees the 40-byte header and the payload
//! length it claims; [`Ipv6Packet::new_checked_prefix`] only the header.
//! After either, no accessor panics, and `upper_layer` never reads past the
//! buffer.

use super::{Error, Field, IpProtocol, Result, be16, be32, put16, put32, v6};
use core::net::Ipv6Addr;

mod field {
    use super::Field;
    pub const VER_TC_FLOW: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Field = 8..24;
    pub const DST: Field = 24..40;
}

/// Offset of the payload-length field.
pub const PAYLOAD_LEN_OFF: usize = field::PAYLOAD_LEN;

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

/// Most extension headers `upper_layer` walks before giving up (Malformed).
pub const MAX_EXT_HEADERS: usize = 8;

/// A view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// A view without checks (for emitting).
    pub const fn new_unchecked(buffer: T) -> Ipv6Packet<T> {
        Ipv6Packet { buffer }
    }

    /// A view whose header and claimed payload are present.
    pub fn new_checked(buffer: T) -> Result<Ipv6Packet<T>> {
        let p = Ipv6Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// A view whose fixed header is present; the payload may continue in
    /// further buffers.
    pub fn new_checked_prefix(buffer: T) -> Result<Ipv6Packet<T>> {
        let p = Ipv6Packet::new_unchecked(buffer);
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(p)
    }

    /// Checks the header and payload lengths.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + self.payload_len() as usize {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Version field (6).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW] >> 4
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        (be32(self.buffer.as_ref(), field::VER_TC_FLOW) >> 20) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW) & 0x000f_ffff
    }
    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }
    /// Next header of the fixed header.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::NEXT_HEADER])
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        v6(self.buffer.as_ref(), field::SRC.start)
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        v6(self.buffer.as_ref(), field::DST.start)
    }

    /// Skips hop-by-hop (only directly after the fixed header), routing and
    /// destination-options headers. Returns the upper-layer protocol and
    /// the offset of its header from the start of the IPv6 header.
    ///
    /// The offset returned is at most the buffer's length.
    ///
    /// Errors: a fragment header → `Fragmented`; an extension header that
    /// runs past the payload length → `Malformed`, past the buffer →
    /// `Truncated`; more than [`MAX_EXT_HEADERS`] → `Malformed`.
    pub fn upper_layer(&self) -> Result<(IpProtocol, usize)> {
        let b = self.buffer.as_ref();
        let end = HEADER_LEN + self.payload_len() as usize;
        let mut nh = self.next_header();
        let mut off = HEADER_LEN;
        for i in 0..=MAX_EXT_HEADERS {
            match nh {
                IpProtocol::HOP_BY_HOP if i > 0 => return Err(Error::Malformed),
                IpProtocol::HOP_BY_HOP | IpProtocol::IPV6_ROUTE | IpProtocol::IPV6_OPTS => {
                    if i == MAX_EXT_HEADERS {
                        return Err(Error::Malformed);
                    }
                    if off + 2 > end {
                        return Err(Error::Malformed);
                    }
                    if off + 2 > b.len() {
                        return Err(Error::Truncated);
                    }
                    let len = (b[off + 1] as usize + 1) * 8;
                    if off + len > end {
                        return Err(Error::Malformed);
                    }
                    // The offset returned is within the buffer, so the
                    // caller may slice there.
                    if off + len > b.len() {
                        return Err(Error::Truncated);
                    }
                    nh = IpProtocol(b[off]);
                    off += len;
                }
                IpProtocol::IPV6_FRAG => return Err(Error::Fragmented),
                _ => return Ok((nh, off)),
            }
        }
        Err(Error::Malformed)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::PAYLOAD_LEN, v);
    }
    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
}

/// A parsed fixed IPv6 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source.
    pub src: Ipv6Addr,
    /// Destination.
    pub dst: Ipv6Addr,
    /// Next header of the fixed header.
    pub next_header: IpProtocol,
    /// Payload length (extension headers included).
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Parses a checked header (version must be 6).
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Ipv6Repr> {
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if p.version() != 6 {
            return Err(Error::Malformed);
        }
        Ok(Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            payload_len: p.payload_len() as usize,
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }

    /// Header length this repr emits (40).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the 40-byte fixed header.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than 40 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv6Packet<T>) {
        let b = p.buffer.as_mut();
        let w =
            (6u32 << 28) | ((self.traffic_class as u32) << 20) | (self.flow_label & 0x000f_ffff);
        put32(b, field::VER_TC_FLOW, w);
        put16(b, field::PAYLOAD_LEN, self.payload_len as u16);
        b[field::NEXT_HEADER] = self.next_header.0;
        b[field::HOP_LIMIT] = self.hop_limit;
        b[field::SRC].copy_from_slice(&self.src.octets());
        b[field::DST].copy_from_slice(&self.dst.octets());
    }
}
