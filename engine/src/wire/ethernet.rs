//! Ethernet II frames with at most one 802.1Q tag.
//!
//! [`EthernetFrame::new_checked`] guarantees the 14-byte header (18 with a
//! tag) is present; then no accessor panics. A frame with two stacked
//! 802.1Q tags is [`Error::Unsupported`] in [`EthernetRepr::parse`].

use super::{Error, Field, Result, be16, put16};
use core::fmt;

/// A MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    /// True for group (multicast and broadcast) addresses.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }
}

impl fmt::Debug for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// An EtherType.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4.
    pub const IPV4: EtherType = EtherType(0x0800);
    /// ARP.
    pub const ARP: EtherType = EtherType(0x0806);
    /// IPv6.
    pub const IPV6: EtherType = EtherType(0x86dd);
    /// 802.1Q VLAN tag.
    pub const VLAN: EtherType = EtherType(0x8100);
}

/// An 802.1Q tag control field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point, 0..=7.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN id, 0..=4095.
    pub vid: u16,
}

impl VlanTag {
    fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }

    fn tci(&self) -> u16 {
        ((self.pcp as u16 & 7) << 13) | if self.dei { 0x1000 } else { 0 } | (self.vid & 0x0fff)
    }
}

mod field {
    use super::Field;
    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const ETHERTYPE: usize = 12;
    pub const TCI: usize = 14;
    pub const INNER_ETHERTYPE: usize = 16;
}

/// Length of an untagged header.
pub const HEADER_LEN: usize = 14;
/// Length of the 802.1Q tag.
pub const VLAN_LEN: usize = 4;

/// A view of an Ethernet frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// A view without checks (for emitting).
    pub const fn new_unchecked(buffer: T) -> EthernetFrame<T> {
        EthernetFrame { buffer }
    }

    /// A view whose header is known to be present.
    pub fn new_checked(buffer: T) -> Result<EthernetFrame<T>> {
        let f = EthernetFrame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks the header (and tag, if the outer EtherType says there is one) fits.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.is_tagged() && b.len() < HEADER_LEN + VLAN_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination address.
    pub fn dst(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        EthernetAddress(a)
    }

    /// Source address.
    pub fn src(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        EthernetAddress(a)
    }

    /// True if the outer EtherType is 802.1Q.
    pub fn is_tagged(&self) -> bool {
        EtherType(be16(self.buffer.as_ref(), field::ETHERTYPE)) == EtherType::VLAN
    }

    /// The 802.1Q tag, if any.
    pub fn vlan(&self) -> Option<VlanTag> {
        if self.is_tagged() {
            Some(VlanTag::from_tci(be16(self.buffer.as_ref(), field::TCI)))
        } else {
            None
        }
    }

    /// The EtherType of the payload (after the tag, if any).
    pub fn ethertype(&self) -> EtherType {
        let b = self.buffer.as_ref();
        if self.is_tagged() {
            EtherType(be16(b, field::INNER_ETHERTYPE))
        } else {
            EtherType(be16(b, field::ETHERTYPE))
        }
    }

    /// Header length: 14, or 18 with a tag.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            HEADER_LEN + VLAN_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination address.
    pub fn set_dst(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.0);
    }

    /// Sets the source address.
    pub fn set_src(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.0);
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buffer.as_mut()[h..]
    }
}

/// A parsed Ethernet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Destination.
    pub dst: EthernetAddress,
    /// Source.
    pub src: EthernetAddress,
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// EtherType of the payload; never [`EtherType::VLAN`].
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Parses a checked frame. A second 802.1Q tag is `Unsupported`.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<EthernetRepr> {
        frame.check_len()?;
        let ethertype = frame.ethertype();
        if ethertype == EtherType::VLAN {
            return Err(Error::Unsupported);
        }
        Ok(EthernetRepr {
            dst: frame.dst(),
            src: frame.src(),
            vlan: frame.vlan(),
            ethertype,
        })
    }

    /// Header length this repr emits.
    pub fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            HEADER_LEN + VLAN_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header into the first [`Self::header_len`] bytes.
    ///
    /// # Panics
    ///
    /// If the buffer is shorter than `header_len()`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        debug_assert!(self.ethertype != EtherType::VLAN);
        let b = frame.buffer.as_mut();
        b[field::DST].copy_from_slice(&self.dst.0);
        b[field::SRC].copy_from_slice(&self.src.0);
        match self.vlan {
            Some(tag) => {
                put16(b, field::ETHERTYPE, EtherType::VLAN.0);
                put16(b, field::TCI, tag.tci());
                put16(b, field::INNER_ETHERTYPE, self.ethertype.0);
            }
            None => put16(b, field::ETHERTYPE, self.ethertype.0),
        }
    }
}
