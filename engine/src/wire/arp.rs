//! ARP (RFC 826). The view handles any hardware/protocol address sizes;
//! [`ArpRepr`] represents only Ethernet/IPv4, the one pair xtcp answers.
//!
//! After [`ArpPacket::new_checked`] no accessor panics.

use super::ethernet::EthernetAddress;
use super::{Error, Result, be16, put16, v4};
use core::net::Ipv4Addr;

mod field {
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    pub const SHA: usize = 8;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const ETH_IPV4_LEN: usize = 28;

/// ARP operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArpOperation(pub u16);

impl ArpOperation {
    /// Request.
    pub const REQUEST: ArpOperation = ArpOperation(1);
    /// Reply.
    pub const REPLY: ArpOperation = ArpOperation(2);
}

/// A view of an ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// A view without checks (for emitting).
    pub const fn new_unchecked(buffer: T) -> ArpPacket<T> {
        ArpPacket { buffer }
    }

    /// A view whose fixed part and addresses are known to be present.
    pub fn new_checked(buffer: T) -> Result<ArpPacket<T>> {
        let p = ArpPacket::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the fixed part and the four addresses fit.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < field::SHA {
            return Err(Error::Truncated);
        }
        let need = field::SHA + 2 * (self.hlen() as usize + self.plen() as usize);
        if b.len() < need {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Hardware type (1 = Ethernet).
    pub fn htype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::HTYPE)
    }
    /// Protocol type (0x0800 = IPv4).
    pub fn ptype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PTYPE)
    }
    /// Hardware address length.
    pub fn hlen(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }
    /// Protocol address length.
    pub fn plen(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }
    /// Operation.
    pub fn operation(&self) -> ArpOperation {
        ArpOperation(be16(self.buffer.as_ref(), field::OPER))
    }

    fn offsets(&self) -> (usize, usize, usize, usize) {
        let h = self.hlen() as usize;
        let p = self.plen() as usize;
        let sha = field::SHA;
        (sha, sha + h, sha + h + p, sha + 2 * h + p)
    }

    /// Sender hardware address bytes.
    pub fn sha(&self) -> &[u8] {
        let (a, b, _, _) = self.offsets();
        &self.buffer.as_ref()[a..b]
    }
    /// Sender protocol address bytes.
    pub fn spa(&self) -> &[u8] {
        let (_, b, c, _) = self.offsets();
        &self.buffer.as_ref()[b..c]
    }
    /// Target hardware address bytes.
    pub fn tha(&self) -> &[u8] {
        let (_, _, c, d) = self.offsets();
        &self.buffer.as_ref()[c..d]
    }
    /// Target protocol address bytes.
    pub fn tpa(&self) -> &[u8] {
        let (_, _, _, d) = self.offsets();
        let p = self.plen() as usize;
        &self.buffer.as_ref()[d..d + p]
    }
}

/// A parsed Ethernet/IPv4 ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// Request or reply (other values are kept as they are).
    pub operation: ArpOperation,
    /// Sender MAC.
    pub source_hw: EthernetAddress,
    /// Sender IPv4.
    pub source_ip: Ipv4Addr,
    /// Target MAC.
    pub target_hw: EthernetAddress,
    /// Target IPv4.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Parses an Ethernet/IPv4 ARP packet; other pairs are `Unsupported`.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<ArpRepr> {
        p.check_len()?;
        if p.htype() != 1 || p.ptype() != 0x0800 || p.hlen() != 6 || p.plen() != 4 {
            return Err(Error::Unsupported);
        }
        let mut sha = [0; 6];
        sha.copy_from_slice(p.sha());
        let mut tha = [0; 6];
        tha.copy_from_slice(p.tha());
        Ok(ArpRepr {
            operation: p.operation(),
            source_hw: EthernetAddress(sha),
            source_ip: v4(p.spa(), 0),
            target_hw: EthernetAddress(tha),
            target_ip: v4(p.tpa(), 0),
        })
    }

    /// Length this repr emits (28).
    pub const fn buffer_len(&self) -> usize {
        ETH_IPV4_LEN
    }

    /// Writes all 28 bytes.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than 28 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ArpPacket<T>) {
        let b = p.buffer.as_mut();
        put16(b, field::HTYPE, 1);
        put16(b, field::PTYPE, 0x0800);
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
        put16(b, field::OPER, self.operation.0);
        b[8..14].copy_from_slice(&self.source_hw.0);
        b[14..18].copy_from_slice(&self.source_ip.octets());
        b[18..24].copy_from_slice(&self.target_hw.0);
        b[24..28].copy_from_slice(&self.target_ip.octets());
    }
}
