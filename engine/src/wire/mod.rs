//! Wire formats: zero-copy views, validated representations and checksums.
//!
//! # Contract
//!
//! - Every header has a view `XxxPacket<T: AsRef<[u8]>>` over a byte buffer and a
//!   validated, plain-data `XxxRepr`. `XxxPacket::new_checked` validates lengths
//!   once; after it (or `check_len`) returned `Ok`, **no accessor panics**.
//!   `new_unchecked` views make no such promise: they are for emitting into a
//!   buffer the caller sized with `XxxRepr::buffer_len`/`header_len`.
//! - `XxxRepr::parse(&packet)` never panics on any input; it returns
//!   [`Error`] for truncated, malformed, unsupported or fragmented input.
//! - `XxxRepr::emit(&mut packet)` writes every header byte it owns (buffers
//!   pre-filled with `0xa5` in the tests prove it), never the payload.
//! - Nothing here allocates or performs I/O. The only `unsafe` is in
//!   [`checksum`]: its two calls of the run-time-selected AVX2 copies of the
//!   checksum loops (the sum, and the fused copy-and-sum).
//!
//! [`locate_tcp`] walks Ethernet (+ one 802.1Q tag) → IPv4/IPv6 (extension
//! headers skipped) → TCP in one call and is what the worker's port uses
//! on received frames; [`locate_too_big`] finds an ICMP "packet too
//! big" about a TCP segment (path MTU discovery).

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod seq;
pub mod tcp;

pub use arp::{ArpOperation, ArpPacket, ArpRepr};
pub use ethernet::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr, VlanTag};
pub use icmp::{TooBig, locate_too_big};
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use seq::SeqNumber;
pub use tcp::{SackBlocks, TcpFlags, TcpOption, TcpOptions, TcpPacket, TcpRepr, TcpTimestamp};

use core::net::{Ipv4Addr, Ipv6Addr};
use core::ops::Range;

/// Why a buffer was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the header (or the length a header claims).
    #[error("truncated packet")]
    Truncated,
    /// A field holds a value the format does not allow (bad version, bad
    /// header length, bad option length, ...).
    #[error("malformed packet")]
    Malformed,
    /// Well-formed, but something xtcp does not handle (e.g. a second VLAN
    /// tag, an ARP packet for a non-Ethernet/IPv4 pair, a non-TCP protocol
    /// where TCP was asked for).
    #[error("unsupported packet")]
    Unsupported,
    /// An IP fragment: recognised, and refused for TCP processing.
    #[error("IP fragment")]
    Fragmented,
    /// A header checksum did not verify.
    #[error("bad checksum")]
    Checksum,
}

/// Result of parsing.
pub type Result<T> = core::result::Result<T, Error>;

/// A byte range of a header field.
pub(crate) type Field = Range<usize>;

/// IP protocol / IPv6 next-header number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpProtocol(pub u8);

impl IpProtocol {
    /// IPv6 hop-by-hop options.
    pub const HOP_BY_HOP: IpProtocol = IpProtocol(0);
    /// ICMP.
    pub const ICMP: IpProtocol = IpProtocol(1);
    /// TCP.
    pub const TCP: IpProtocol = IpProtocol(6);
    /// UDP.
    pub const UDP: IpProtocol = IpProtocol(17);
    /// IPv6 routing header.
    pub const IPV6_ROUTE: IpProtocol = IpProtocol(43);
    /// IPv6 fragment header.
    pub const IPV6_FRAG: IpProtocol = IpProtocol(44);
    /// ICMPv6.
    pub const ICMPV6: IpProtocol = IpProtocol(58);
    /// IPv6 "no next header".
    pub const IPV6_NO_NEXT: IpProtocol = IpProtocol(59);
    /// IPv6 destination options.
    pub const IPV6_OPTS: IpProtocol = IpProtocol(60);
}

/// The IP layer of a TCP frame: either version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6 (fixed header; extension headers, if any, are not represented).
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Ones-complement sum of the TCP/UDP pseudo-header for an upper-layer
    /// length of `l4_len` bytes (not complemented).
    pub fn pseudo_sum(&self, protocol: IpProtocol, l4_len: usize) -> u16 {
        match self {
            IpRepr::V4(r) => checksum::pseudo_v4(r.src, r.dst, protocol.0, l4_len as u32),
            IpRepr::V6(r) => checksum::pseudo_v6(&r.src, &r.dst, protocol.0, l4_len as u32),
        }
    }

    /// The IP addresses as a pair, widened to IPv6 for IPv4 (mapped).
    pub fn addrs(&self) -> (Ipv6Addr, Ipv6Addr) {
        match self {
            IpRepr::V4(r) => (r.src.to_ipv6_mapped(), r.dst.to_ipv6_mapped()),
            IpRepr::V6(r) => (r.src, r.dst),
        }
    }

    /// Length of the fixed header this repr emits.
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => ipv4::HEADER_LEN,
            IpRepr::V6(_) => ipv6::HEADER_LEN,
        }
    }
}

/// Where the layers of an Ethernet/IP/TCP frame are, found by [`locate_tcp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpLayout {
    /// The link layer.
    pub eth: EthernetRepr,
    /// The IP layer.
    pub ip: IpRepr,
    /// Offset of the IP header in the frame.
    pub ip_off: usize,
    /// Offset of the TCP header in the frame.
    pub tcp_off: usize,
    /// Length of the TCP header including options.
    pub tcp_header_len: usize,
    /// Length of TCP header + payload, as the IP header says (the frame may
    /// carry link-layer padding after it).
    pub tcp_len: usize,
}

impl TcpLayout {
    /// Offset of the TCP payload in the frame.
    pub fn payload_off(&self) -> usize {
        self.tcp_off + self.tcp_header_len
    }

    /// Length of the TCP payload.
    pub fn payload_len(&self) -> usize {
        self.tcp_len - self.tcp_header_len
    }

    /// Pseudo-header sum for this segment. For IPv6 it uses the fixed
    /// header's destination: with a routing header, RFC 8200 §8.1's final
    /// destination is not substituted (xtcp never sends routing headers).
    pub fn pseudo_sum(&self) -> u16 {
        self.ip.pseudo_sum(IpProtocol::TCP, self.tcp_len)
    }
}

/// Walks Ethernet (+ optional 802.1Q) → IPv4 or IPv6 (hop-by-hop, routing and
/// destination-options headers skipped) → TCP. Validates every length on the
/// way (IPv4 header checksum included); does not verify the TCP checksum.
///
/// `frame` may be only the first part of a multi-buffer packet: IP lengths
/// beyond the end of `frame` are accepted as long as the TCP header itself is
/// in `frame` (`tcp_len` then reports the full length the IP header claims).
///
/// Never panics. Fragments → [`Error::Fragmented`]; non-TCP →
/// [`Error::Unsupported`].
pub fn locate_tcp(frame: &[u8]) -> Result<TcpLayout> {
    let eth_frame = EthernetFrame::new_checked(frame)?;
    let eth = EthernetRepr::parse(&eth_frame)?;
    let ip_off = eth_frame.header_len();
    let l3 = &frame[ip_off..];
    let (ip, tcp_off, tcp_len) = match eth.ethertype {
        EtherType::IPV4 => {
            let p = Ipv4Packet::new_checked_prefix(l3)?;
            let r = Ipv4Repr::parse(&p)?;
            if r.protocol != IpProtocol::TCP {
                return Err(Error::Unsupported);
            }
            (IpRepr::V4(r), ip_off + p.header_len(), r.payload_len)
        }
        EtherType::IPV6 => {
            let p = Ipv6Packet::new_checked_prefix(l3)?;
            let r = Ipv6Repr::parse(&p)?;
            let (proto, off) = p.upper_layer()?;
            if proto != IpProtocol::TCP {
                return Err(Error::Unsupported);
            }
            let tcp_len = (ipv6::HEADER_LEN + r.payload_len)
                .checked_sub(off)
                .ok_or(Error::Malformed)?;
            (IpRepr::V6(r), ip_off + off, tcp_len)
        }
        _ => return Err(Error::Unsupported),
    };
    let tcp = TcpPacket::new_checked(frame.get(tcp_off..).ok_or(Error::Truncated)?)?;
    let tcp_header_len = tcp.header_len();
    if tcp_header_len > tcp_len {
        return Err(Error::Malformed);
    }
    Ok(TcpLayout {
        eth,
        ip,
        ip_off,
        tcp_off,
        tcp_header_len,
        tcp_len,
    })
}

/// Reads a big-endian u16 at `at`; the caller has checked the length.
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads a big-endian u32 at `at`; the caller has checked the length.
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn v4(b: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

pub(crate) fn v6(b: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    Ipv6Addr::from(a)
}

#[cfg(test)]
pub(crate) mod tests;
