//! IPv4 (RFC 791). Options are skipped (never emitted); fragments are
//! recognised and refused by [`Ipv4Repr::parse`] with [`Error::Fragmented`].
//!
//! [`Ipv4Packet::new_checked`] guarantees the header, and the whole datagram
//! its total-length field claims, are in the buffer;
//! [`Ipv4Packet::new_checked_prefix`] only the header (for the first buffer
//! of a multi-buffer packet). After either, no accessor panics.

use super::checksum;
use super::{Error, Field, IpProtocol, Result, be16, put16, v4};
use core::net::Ipv4Addr;

mod field {
    use super::Field;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: Field = 12..16;
    pub const DST: Field = 16..20;
}

/// Offset of the checksum field (for incremental updates by `seg`).
pub const CHECKSUM_OFF: usize = field::CHECKSUM;
/// Offset of the total-length field.
pub const LENGTH_OFF: usize = field::LENGTH;
/// Offset of the identification field.
pub const IDENT_OFF: usize = field::IDENT;

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

const DF: u16 = 0x4000;
const MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// A view without checks (for emitting).
    pub const fn new_unchecked(buffer: T) -> Ipv4Packet<T> {
        Ipv4Packet { buffer }
    }

    /// A view whose header and whole datagram are present.
    pub fn new_checked(buffer: T) -> Result<Ipv4Packet<T>> {
        let p = Ipv4Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// A view whose header (with options) is present; the datagram may
    /// continue in further buffers.
    pub fn new_checked_prefix(buffer: T) -> Result<Ipv4Packet<T>> {
        let p = Ipv4Packet::new_unchecked(buffer);
        p.check_header_len()?;
        Ok(p)
    }

    fn check_header_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < hl {
            return Err(Error::Truncated);
        }
        if (self.total_len() as usize) < hl {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// Checks header and datagram lengths.
    pub fn check_len(&self) -> Result<()> {
        self.check_header_len()?;
        if self.buffer.as_ref().len() < self.total_len() as usize {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Version field (4 for IPv4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[field::VER_IHL] & 0x0f) as usize * 4
    }
    /// DSCP and ECN byte.
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }
    /// Total length.
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }
    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF) & DF != 0
    }
    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF) & MF != 0
    }
    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK) << 3
    }
    /// True if this is a fragment (MF set or offset non-zero).
    pub fn is_fragment(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF) & (MF | OFFSET_MASK) != 0
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Protocol.
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::PROTOCOL])
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        v4(self.buffer.as_ref(), field::SRC.start)
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        v4(self.buffer.as_ref(), field::DST.start)
    }
    /// True if the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(&self.buffer.as_ref()[..self.header_len()]) == 0xffff
    }
    /// The payload present in this buffer (up to the total length).
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let hl = self.header_len();
        let end = (self.total_len() as usize).clamp(hl, b.len());
        &b[hl..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the total length.
    pub fn set_total_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::LENGTH, v);
    }
    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::IDENT, v);
    }
    /// Sets the TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }
    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        put16(b, field::CHECKSUM, 0);
        let c = checksum::checksum(&b[..hl]);
        put16(b, field::CHECKSUM, c);
    }
    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        let end = self.total_len() as usize;
        let b = self.buffer.as_mut();
        let end = end.clamp(hl, b.len());
        &mut b[hl..end]
    }
}

/// A parsed IPv4 header (options skipped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source.
    pub src: Ipv4Addr,
    /// Destination.
    pub dst: Ipv4Addr,
    /// Upper-layer protocol.
    pub protocol: IpProtocol,
    /// Payload length (total length minus header length).
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// DSCP and ECN byte.
    pub dscp_ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Parses a checked header: version 4, header checksum correct, not a fragment.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        p.check_header_len()?;
        if p.version() != 4 {
            return Err(Error::Malformed);
        }
        if !p.verify_checksum() {
            return Err(Error::Checksum);
        }
        if p.is_fragment() {
            return Err(Error::Fragmented);
        }
        Ok(Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            payload_len: p.total_len() as usize - p.header_len(),
            ttl: p.ttl(),
            dscp_ecn: p.dscp_ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
        })
    }

    /// Header length this repr emits (20).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the 20-byte header, checksum included.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than 20 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv4Packet<T>) {
        let b = p.buffer.as_mut();
        b[field::VER_IHL] = 0x45;
        b[field::DSCP_ECN] = self.dscp_ecn;
        put16(b, field::LENGTH, (HEADER_LEN + self.payload_len) as u16);
        put16(b, field::IDENT, self.ident);
        put16(b, field::FLG_OFF, if self.dont_frag { DF } else { 0 });
        b[field::TTL] = self.ttl;
        b[field::PROTOCOL] = self.protocol.0;
        b[field::SRC].copy_from_slice(&self.src.octets());
        b[field::DST].copy_from_slice(&self.dst.octets());
        put16(b, field::CHECKSUM, 0);
        let c = checksum::checksum(&b[..HEADER_LEN]);
        put16(b, field::CHECKSUM, c);
    }
}
