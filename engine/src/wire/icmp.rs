//! ICMP "packet too big" about a TCP segment: IPv4's destination
//! unreachable, fragmentation needed (type 3 code 4; RFC 792, RFC 1191)
//! and ICMPv6's packet too big (type 2; RFC 4443 §3.2, RFC 8201).
//!
//! [`locate_too_big`] walks Ethernet (+ one 802.1Q tag) → IPv4 or IPv6 →
//! the ICMP message (its checksum verified) → the IP header it quotes →
//! the first 8 bytes of that datagram's TCP header (ports and sequence
//! number: all that RFC 792 promises to quote). The quoted header is not
//! held to its own checksum (Linux does not either: a router may have
//! rewritten parts of it). Never panics; anything else is
//! [`Error::Unsupported`], and lengths that do not add up are
//! [`Error::Truncated`] or [`Error::Malformed`].

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::checksum::{self, Accumulator};
use super::ipv6::MAX_EXT_HEADERS;
use super::{
    Error, EtherType, EthernetFrame, EthernetRepr, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet,
    Result, SeqNumber,
};

/// ICMP destination unreachable.
const ICMP_UNREACHABLE: u8 = 3;
/// Its code "fragmentation needed and DF set".
const ICMP_FRAG_NEEDED: u8 = 4;
/// ICMPv6 packet too big.
const ICMPV6_TOO_BIG: u8 = 2;
/// The ICMP header before the quoted datagram (both versions).
const ICMP_HEADER: usize = 8;
/// The quoted TCP header bytes read: ports and sequence number.
const TCP_QUOTED: usize = 8;

/// A "packet too big" about a TCP segment, as [`locate_too_big`] found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooBig {
    /// The message's sender: a router on the path (or the peer).
    pub reporter: IpAddr,
    /// Where the message is addressed (one of ours, if it is about our
    /// segment).
    pub to: IpAddr,
    /// The quoted segment's source: our end of its connection.
    pub local: SocketAddr,
    /// Its destination: the peer.
    pub remote: SocketAddr,
    /// The quoted segment's sequence number.
    pub seq: SeqNumber,
    /// The MTU of the next hop, as reported; 0 where an IPv4 router of
    /// before RFC 1191 did not say.
    pub mtu: u32,
    /// The quoted datagram's length (its IP header's claim): the packet
    /// that did not fit.
    pub quoted_len: usize,
}

/// Finds a "packet too big" about a TCP segment in an Ethernet frame
/// (see the module's description).
pub fn locate_too_big(frame: &[u8]) -> Result<TooBig> {
    let eth_frame = EthernetFrame::new_checked(frame)?;
    let eth = EthernetRepr::parse(&eth_frame)?;
    let l3 = &frame[eth_frame.header_len()..];
    match eth.ethertype {
        EtherType::IPV4 => {
            let p = Ipv4Packet::new_checked_prefix(l3)?;
            let r = Ipv4Repr::parse(&p)?;
            if r.protocol != IpProtocol::ICMP {
                return Err(Error::Unsupported);
            }
            let hl = p.header_len();
            let icmp = l3.get(hl..hl + r.payload_len).ok_or(Error::Truncated)?;
            let (&ty, &code) = (
                icmp.first().ok_or(Error::Truncated)?,
                icmp.get(1).ok_or(Error::Truncated)?,
            );
            if ty != ICMP_UNREACHABLE || code != ICMP_FRAG_NEEDED {
                return Err(Error::Unsupported);
            }
            if icmp.len() < ICMP_HEADER {
                return Err(Error::Truncated);
            }
            if checksum::sum(icmp) != 0xffff {
                return Err(Error::Checksum);
            }
            let mtu = u16::from_be_bytes([icmp[6], icmp[7]]) as u32;
            let q = quoted_v4(&icmp[ICMP_HEADER..])?;
            Ok(TooBig {
                reporter: r.src.into(),
                to: r.dst.into(),
                mtu,
                ..q
            })
        }
        EtherType::IPV6 => {
            let p = Ipv6Packet::new_checked_prefix(l3)?;
            if p.version() != 6 {
                return Err(Error::Malformed);
            }
            let (proto, off) = p.upper_layer()?;
            if proto != IpProtocol::ICMPV6 {
                return Err(Error::Unsupported);
            }
            let end = super::ipv6::HEADER_LEN + p.payload_len() as usize;
            let icmp = l3.get(off..end).ok_or(Error::Truncated)?;
            let &ty = icmp.first().ok_or(Error::Truncated)?;
            if ty != ICMPV6_TOO_BIG {
                return Err(Error::Unsupported);
            }
            if icmp.len() < ICMP_HEADER {
                return Err(Error::Truncated);
            }
            let (src, dst) = (p.src(), p.dst());
            let mut sum = Accumulator::new(checksum::pseudo_v6(
                &src,
                &dst,
                IpProtocol::ICMPV6.0,
                icmp.len() as u32,
            ));
            sum.add_bytes(icmp);
            if sum.sum() != 0xffff {
                return Err(Error::Checksum);
            }
            let mtu = u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]]);
            let q = quoted_v6(&icmp[ICMP_HEADER..])?;
            Ok(TooBig {
                reporter: src.into(),
                to: dst.into(),
                mtu,
                ..q
            })
        }
        _ => Err(Error::Unsupported),
    }
}

/// The quoted IPv4 datagram: its header (options skipped), then the TCP
/// ports and sequence number. A later fragment quotes no TCP header.
fn quoted_v4(q: &[u8]) -> Result<TooBig> {
    let &b0 = q.first().ok_or(Error::Truncated)?;
    if b0 >> 4 != 4 {
        return Err(Error::Malformed);
    }
    let hl = (b0 & 0x0f) as usize * 4;
    if hl < super::ipv4::HEADER_LEN {
        return Err(Error::Malformed);
    }
    let ip = q.get(..hl).ok_or(Error::Truncated)?;
    if IpProtocol(ip[9]) != IpProtocol::TCP {
        return Err(Error::Unsupported);
    }
    if u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff != 0 {
        return Err(Error::Fragmented);
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let quoted_len = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    quoted_tcp(q, hl, src.into(), dst.into(), quoted_len)
}

/// The quoted IPv6 datagram: its fixed header, the extension headers
/// xtcp's segments could carry (hop-by-hop, routing, destination options)
/// as far as quoted, then the TCP ports and sequence number.
fn quoted_v6(q: &[u8]) -> Result<TooBig> {
    let ip = q.get(..super::ipv6::HEADER_LEN).ok_or(Error::Truncated)?;
    if ip[0] >> 4 != 6 {
        return Err(Error::Malformed);
    }
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&ip[at..at + 16]);
        Ipv6Addr::from(a)
    };
    let (src, dst) = (addr(8), addr(24));
    let quoted_len = super::ipv6::HEADER_LEN + u16::from_be_bytes([ip[4], ip[5]]) as usize;
    let mut nh = IpProtocol(ip[6]);
    let mut off = super::ipv6::HEADER_LEN;
    for _ in 0..MAX_EXT_HEADERS {
        match nh {
            IpProtocol::HOP_BY_HOP | IpProtocol::IPV6_ROUTE | IpProtocol::IPV6_OPTS => {
                let ext = q.get(off..off + 2).ok_or(Error::Truncated)?;
                nh = IpProtocol(ext[0]);
                off += (ext[1] as usize + 1) * 8;
            }
            _ => break,
        }
    }
    match nh {
        IpProtocol::TCP => quoted_tcp(q, off, src.into(), dst.into(), quoted_len),
        IpProtocol::IPV6_FRAG => Err(Error::Fragmented),
        _ => Err(Error::Unsupported),
    }
}

fn quoted_tcp(q: &[u8], off: usize, src: IpAddr, dst: IpAddr, quoted_len: usize) -> Result<TooBig> {
    let tcp = q.get(off..off + TCP_QUOTED).ok_or(Error::Truncated)?;
    Ok(TooBig {
        reporter: src,
        to: src,
        local: SocketAddr::new(src, u16::from_be_bytes([tcp[0], tcp[1]])),
        remote: SocketAddr::new(dst, u16::from_be_bytes([tcp[2], tcp[3]])),
        seq: SeqNumber(u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]])),
        mtu: 0,
        quoted_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::icmpv4::DestUnreachableHeader;
    use etherparse::{Icmpv4Type, Icmpv6Type, PacketBuilder};
    use proptest::prelude::*;

    const ROUTER4: [u8; 4] = [198, 18, 1, 254];
    const LOCAL4: [u8; 4] = [198, 18, 0, 1];
    const PEER4: [u8; 4] = [198, 18, 2, 2];
    const ROUTER6: [u8; 16] = [0x20, 1, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe];
    const LOCAL6: [u8; 16] = [0x20, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const PEER6: [u8; 16] = [0x20, 1, 0, 2, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    const SEQ: u32 = 0xfedc_ba98;

    /// Our segment of `payload` bytes as it left (from its IP header on).
    fn segment(v6: bool, payload: usize) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let b = if v6 {
            b.ipv6(LOCAL6, PEER6, 64)
        } else {
            b.ipv4(LOCAL4, PEER4, 64)
        };
        let b = b.tcp(40000, 5201, SEQ, 1000);
        let mut out = Vec::new();
        b.write(&mut out, &vec![0x5a; payload]).unwrap();
        out.split_off(14)
    }

    /// A router's "too big" about `quoted`, as an Ethernet frame to us.
    fn too_big(v6: bool, mtu: u32, quoted: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], [2, 0, 0, 0, 0, 1]);
        let mut out = Vec::new();
        if v6 {
            b.ipv6(ROUTER6, LOCAL6, 64)
                .icmpv6(Icmpv6Type::PacketTooBig { mtu })
                .write(&mut out, quoted)
                .unwrap();
        } else {
            b.ipv4(ROUTER4, LOCAL4, 64)
                .icmpv4(Icmpv4Type::DestinationUnreachable(
                    DestUnreachableHeader::FragmentationNeeded {
                        next_hop_mtu: mtu as u16,
                    },
                ))
                .write(&mut out, quoted)
                .unwrap();
        }
        out
    }

    fn want(v6: bool, mtu: u32, quoted_len: usize) -> TooBig {
        let (router, local, peer): (IpAddr, IpAddr, IpAddr) = if v6 {
            (ROUTER6.into(), LOCAL6.into(), PEER6.into())
        } else {
            (ROUTER4.into(), LOCAL4.into(), PEER4.into())
        };
        TooBig {
            reporter: router,
            to: local,
            local: SocketAddr::new(local, 40000),
            remote: SocketAddr::new(peer, 5201),
            seq: SeqNumber(SEQ),
            mtu,
            quoted_len,
        }
    }

    #[test]
    fn both_versions_are_found_with_what_they_quote() {
        for v6 in [false, true] {
            let seg = segment(v6, 8948);
            // As little as RFC 792 promises (IP header + 8 bytes), and as
            // much as Linux quotes (the message within 576 or 1280 bytes).
            let hl = if v6 { 40 } else { 20 };
            let most = if v6 { 1280 - 48 } else { 576 - 28 };
            for quoted in [hl + 8, most] {
                let f = too_big(v6, 1500, &seg[..quoted]);
                assert_eq!(
                    locate_too_big(&f),
                    Ok(want(v6, 1500, seg.len())),
                    "v6 {v6}, {quoted} quoted"
                );
            }
        }
    }

    #[test]
    fn an_old_router_that_gives_no_mtu_says_zero() {
        let seg = segment(false, 1000);
        let f = too_big(false, 0, &seg[..28]);
        assert_eq!(locate_too_big(&f).map(|t| t.mtu), Ok(0));
    }

    #[test]
    fn what_is_not_a_too_big_about_tcp_is_refused() {
        // A TCP segment, ICMP of another type, a quoted UDP datagram.
        let seg = segment(false, 100);
        let mut tcp = vec![0u8; 14];
        tcp[12] = 0x08;
        tcp.extend_from_slice(&seg);
        assert_eq!(locate_too_big(&tcp), Err(Error::Unsupported));
        let mut echo = Vec::new();
        PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv4(ROUTER4, LOCAL4, 64)
            .icmpv4_echo_request(1, 2)
            .write(&mut echo, &[0; 8])
            .unwrap();
        assert_eq!(locate_too_big(&echo), Err(Error::Unsupported));
        let mut udp = Vec::new();
        PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv4(LOCAL4, PEER4, 64)
            .udp(1, 2)
            .write(&mut udp, &[0; 8])
            .unwrap();
        let f = too_big(false, 1500, &udp[14..]);
        assert_eq!(locate_too_big(&f), Err(Error::Unsupported));
        // The quoted header cut short of the ports and sequence number.
        let f = too_big(true, 1280, &segment(true, 10)[..44]);
        assert_eq!(locate_too_big(&f), Err(Error::Truncated));
    }

    #[test]
    fn a_corrupt_icmp_checksum_is_refused() {
        for v6 in [false, true] {
            let mut f = too_big(v6, 1500, &segment(v6, 100)[..48]);
            let at = f.len() - 3;
            f[at] ^= 0x10;
            assert_eq!(locate_too_big(&f), Err(Error::Checksum), "v6 {v6}");
        }
    }

    #[test]
    fn every_prefix_and_every_flipped_byte_is_refused_or_read_without_panic() {
        for v6 in [false, true] {
            let f = too_big(v6, 1500, &segment(v6, 100)[..60]);
            for n in 0..f.len() {
                assert!(locate_too_big(&f[..n]).is_err(), "v6 {v6}: {n} bytes");
            }
            for i in 0..f.len() {
                for bit in 0..8 {
                    let mut g = f.clone();
                    g[i] ^= 1 << bit;
                    let _ = locate_too_big(&g);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = locate_too_big(&data);
        }
    }
}
