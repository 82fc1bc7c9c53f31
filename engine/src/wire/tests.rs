//! Tests of the wire layer: golden bytes, 0xa5-prefilled emits, truncated
//! and corrupted input for every parser, proptest round trips and
//! random-bytes-never-panic, and etherparse as an independent oracle.
//! [`build_frame`] and [`oracle`] are shared with the `seg` tests.

use super::*;
use etherparse::{NetHeaders, PacketHeaders, PayloadSlice, TransportHeader};
use proptest::prelude::*;

/// TCP/IPv4 SYN, options MSS 1460, SACK-permitted, TS 0x01020304/0, WS 7.
pub(crate) const GOLDEN_V4_SYN: [u8; 74] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x3c, 0x04, 0xd2, 0x40, 0x00, 0x40, 0x06, 0x21, 0xe8, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00,
    0x00, 0x02, 0x9c, 0x40, 0x14, 0x51, 0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02,
    0xff, 0xff, 0x3b, 0x00, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x01, 0x02,
    0x03, 0x04, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
];

/// VLAN 100 (PCP 5) + TCP/IPv6 ACK|PSH, TS 7/8, two SACK blocks, 4 bytes payload.
pub(crate) const GOLDEN_V6_VLAN: [u8; 114] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x81, 0x00, 0xa0, 0x64,
    0x86, 0xdd, 0x62, 0xa1, 0x23, 0x45, 0x00, 0x38, 0x06, 0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x01, 0xbb, 0xc3, 0x50, 0xff, 0xff,
    0xff, 0xf0, 0x55, 0x66, 0x77, 0x88, 0xd0, 0x18, 0x02, 0x00, 0xee, 0x05, 0x00, 0x00, 0x01, 0x01,
    0x08, 0x0a, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x08, 0x01, 0x01, 0x05, 0x12, 0x00, 0x00,
    0x00, 0x64, 0x00, 0x00, 0x00, 0xc8, 0x00, 0x00, 0x01, 0x2c, 0x00, 0x00, 0x01, 0x90, 0xde, 0xad,
    0xbe, 0xef,
];

const MAC1: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const MAC2: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

fn golden_v4_reprs() -> (EthernetRepr, Ipv4Repr, TcpRepr) {
    let eth = EthernetRepr {
        dst: MAC2,
        src: MAC1,
        vlan: None,
        ethertype: EtherType::IPV4,
    };
    let ip = Ipv4Repr {
        src: Ipv4Addr::new(10, 0, 0, 1),
        dst: Ipv4Addr::new(10, 0, 0, 2),
        protocol: IpProtocol::TCP,
        payload_len: 40,
        ttl: 64,
        dscp_ecn: 0,
        ident: 0x04d2,
        dont_frag: true,
    };
    let tcp = TcpRepr {
        src_port: 40000,
        dst_port: 5201,
        seq: SeqNumber(0x1122_3344),
        ack: SeqNumber(0),
        flags: TcpFlags::SYN,
        window: 0xffff,
        urgent: 0,
        options: TcpOptions {
            mss: Some(1460),
            window_scale: Some(7),
            sack_permitted: true,
            timestamp: Some(TcpTimestamp {
                tsval: 0x0102_0304,
                tsecr: 0,
            }),
            sack: SackBlocks::EMPTY,
        },
    };
    (eth, ip, tcp)
}

fn golden_v6_reprs() -> (EthernetRepr, Ipv6Repr, TcpRepr) {
    let eth = EthernetRepr {
        dst: MAC2,
        src: MAC1,
        vlan: Some(VlanTag {
            pcp: 5,
            dei: false,
            vid: 100,
        }),
        ethertype: EtherType::IPV6,
    };
    let ip = Ipv6Repr {
        src: "fe80::1".parse().unwrap(),
        dst: "fe80::2".parse().unwrap(),
        next_header: IpProtocol::TCP,
        payload_len: 56,
        hop_limit: 255,
        traffic_class: 0x2a,
        flow_label: 0x12345,
    };
    let tcp = TcpRepr {
        src_port: 443,
        dst_port: 50000,
        seq: SeqNumber(0xffff_fff0),
        ack: SeqNumber(0x5566_7788),
        flags: TcpFlags::ACK | TcpFlags::PSH,
        window: 512,
        urgent: 0,
        options: TcpOptions {
            timestamp: Some(TcpTimestamp { tsval: 7, tsecr: 8 }),
            sack: SackBlocks::from_slice(&[
                (SeqNumber(100), SeqNumber(200)),
                (SeqNumber(300), SeqNumber(400)),
            ])
            .unwrap(),
            ..TcpOptions::NONE
        },
    };
    (eth, ip, tcp)
}

/// Emits Ethernet + IP + TCP + payload with correct checksums into a buffer
/// pre-filled with `fill`.
pub(crate) fn build_frame_filled(
    eth: &EthernetRepr,
    ip: &IpRepr,
    tcp: &TcpRepr,
    payload: &[u8],
    fill: u8,
) -> Vec<u8> {
    let tcp_len = tcp.header_len() + payload.len();
    let ip = match *ip {
        IpRepr::V4(mut r) => {
            r.payload_len = tcp_len;
            IpRepr::V4(r)
        }
        IpRepr::V6(mut r) => {
            r.payload_len = tcp_len;
            IpRepr::V6(r)
        }
    };
    let l2 = eth.header_len();
    let l3 = l2 + ip.header_len();
    let mut buf = vec![fill; l3 + tcp_len];
    eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
    match ip {
        IpRepr::V4(r) => r.emit(&mut Ipv4Packet::new_unchecked(&mut buf[l2..])),
        IpRepr::V6(r) => r.emit(&mut Ipv6Packet::new_unchecked(&mut buf[l2..])),
    }
    let mut t = TcpPacket::new_unchecked(&mut buf[l3..]);
    tcp.emit(&mut t).unwrap();
    t.payload_mut().copy_from_slice(payload);
    t.fill_checksum(ip.pseudo_sum(IpProtocol::TCP, tcp_len));
    buf
}

/// [`build_frame_filled`] with 0xa5.
pub(crate) fn build_frame(
    eth: &EthernetRepr,
    ip: &IpRepr,
    tcp: &TcpRepr,
    payload: &[u8],
) -> Vec<u8> {
    build_frame_filled(eth, ip, tcp, payload, 0xa5)
}

/// What etherparse sees in a TCP frame.
#[derive(Debug)]
pub(crate) struct Oracle {
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    pub ip_id: Option<u16>,
    pub payload: Vec<u8>,
    pub options: Vec<etherparse::TcpOptionElement>,
}

/// Parses `frame` with etherparse and asserts that the IPv4 header
/// checksum and the TCP checksum verify there.
pub(crate) fn oracle(frame: &[u8]) -> Oracle {
    let h = PacketHeaders::from_ethernet_slice(frame).expect("etherparse parses our frame");
    let Some(TransportHeader::Tcp(tcp)) = h.transport else {
        panic!("etherparse sees no TCP header")
    };
    let PayloadSlice::Tcp(payload) = h.payload else {
        panic!("etherparse sees no TCP payload")
    };
    let ip_id = match &h.net {
        Some(NetHeaders::Ipv4(ip, _)) => {
            assert_eq!(
                ip.header_checksum,
                ip.calc_header_checksum(),
                "IPv4 header checksum"
            );
            assert_eq!(
                tcp.checksum,
                tcp.calc_checksum_ipv4(ip, payload).unwrap(),
                "TCP/IPv4 checksum"
            );
            Some(ip.identification)
        }
        Some(NetHeaders::Ipv6(ip, _)) => {
            assert_eq!(
                tcp.checksum,
                tcp.calc_checksum_ipv6(ip, payload).unwrap(),
                "TCP/IPv6 checksum"
            );
            None
        }
        None => panic!("etherparse sees no IP header"),
    };
    let mut flags = 0u8;
    for (bit, on) in [
        tcp.fin, tcp.syn, tcp.rst, tcp.psh, tcp.ack, tcp.urg, tcp.ece, tcp.cwr,
    ]
    .into_iter()
    .enumerate()
    {
        if on {
            flags |= 1 << bit;
        }
    }
    Oracle {
        seq: tcp.sequence_number,
        ack: tcp.acknowledgment_number,
        flags,
        window: tcp.window_size,
        ip_id,
        payload: payload.to_vec(),
        options: tcp
            .options_iterator()
            .map(|o| o.expect("etherparse parses options"))
            .collect(),
    }
}

#[test]
fn golden_v4_emit_and_parse() {
    let (eth, ip, tcp) = golden_v4_reprs();
    for fill in [0x00, 0xa5, 0xff] {
        let f = build_frame_filled(&eth, &IpRepr::V4(ip), &tcp, &[], fill);
        assert_eq!(&f[..], &GOLDEN_V4_SYN[..], "fill {fill:#x}");
    }
    let l = locate_tcp(&GOLDEN_V4_SYN).unwrap();
    assert_eq!(l.eth, eth);
    assert_eq!(l.ip, IpRepr::V4(ip));
    assert_eq!(
        (l.ip_off, l.tcp_off, l.tcp_header_len, l.tcp_len),
        (14, 34, 40, 40)
    );
    let t = TcpPacket::new_checked(&GOLDEN_V4_SYN[l.tcp_off..]).unwrap();
    assert!(t.verify_checksum(l.pseudo_sum()));
    assert_eq!(TcpRepr::parse(&t).unwrap(), tcp);
    let o = oracle(&GOLDEN_V4_SYN);
    assert_eq!(o.seq, 0x1122_3344);
    assert_eq!(o.flags, TcpFlags::SYN.0);
    assert_eq!(o.ip_id, Some(0x04d2));
}

#[test]
fn golden_v6_vlan_emit_and_parse() {
    let (eth, ip, tcp) = golden_v6_reprs();
    let payload = [0xde, 0xad, 0xbe, 0xef];
    for fill in [0x00, 0xa5, 0xff] {
        let f = build_frame_filled(&eth, &IpRepr::V6(ip), &tcp, &payload, fill);
        assert_eq!(&f[..], &GOLDEN_V6_VLAN[..], "fill {fill:#x}");
    }
    let l = locate_tcp(&GOLDEN_V6_VLAN).unwrap();
    assert_eq!(l.eth, eth);
    assert_eq!(l.ip, IpRepr::V6(ip));
    assert_eq!(
        (l.ip_off, l.tcp_off, l.payload_off(), l.payload_len()),
        (18, 58, 110, 4)
    );
    let t = TcpPacket::new_checked(&GOLDEN_V6_VLAN[l.tcp_off..]).unwrap();
    assert!(t.verify_checksum(l.pseudo_sum()));
    assert_eq!(TcpRepr::parse(&t).unwrap(), tcp);
    assert_eq!(t.payload(), &payload);
    let o = oracle(&GOLDEN_V6_VLAN);
    assert_eq!(o.payload, payload);
    assert_eq!(o.flags, 0x18);
}

#[test]
fn golden_arp() {
    let bytes: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 10, 0,
        0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
    ];
    let r = ArpRepr {
        operation: ArpOperation::REQUEST,
        source_hw: MAC1,
        source_ip: Ipv4Addr::new(10, 0, 0, 1),
        target_hw: EthernetAddress([0; 6]),
        target_ip: Ipv4Addr::new(10, 0, 0, 2),
    };
    assert_eq!(
        ArpRepr::parse(&ArpPacket::new_checked(&bytes[..]).unwrap()).unwrap(),
        r
    );
    let mut buf = [0xa5u8; 30];
    r.emit(&mut ArpPacket::new_unchecked(&mut buf[..]));
    assert_eq!(&buf[..28], &bytes);
    assert_eq!(&buf[28..], &[0xa5, 0xa5]);
    for n in 0..28 {
        assert_eq!(
            ArpPacket::new_checked(&bytes[..n]).err(),
            Some(Error::Truncated),
            "len {n}"
        );
    }
    // IPv6-over-Ethernet style sizes are viewable but not representable.
    let mut other = [0u8; 8 + 2 * (6 + 16)];
    other[..8].copy_from_slice(&[0, 1, 0x86, 0xdd, 6, 16, 0, 1]);
    let p = ArpPacket::new_checked(&other[..]).unwrap();
    assert_eq!(p.tpa().len(), 16);
    assert_eq!(ArpRepr::parse(&p), Err(Error::Unsupported));
}

#[test]
fn every_truncation_is_an_error() {
    for golden in [&GOLDEN_V4_SYN[..], &GOLDEN_V6_VLAN[..]] {
        let full = locate_tcp(golden).unwrap();
        for n in 0..golden.len() {
            let r = locate_tcp(&golden[..n]);
            if n < full.payload_off() {
                assert!(r.is_err(), "prefix {n} accepted: {r:?}");
            } else {
                // A first buffer of a multi-buffer packet: headers complete,
                // lengths as the IP header claims.
                assert_eq!(r, Ok(full));
            }
        }
    }
    let ip4 = &GOLDEN_V4_SYN[14..];
    for n in 0..ip4.len() {
        assert_eq!(
            Ipv4Packet::new_checked(&ip4[..n]).err(),
            Some(Error::Truncated),
            "len {n}"
        );
    }
    for n in 0..20 {
        assert!(Ipv4Packet::new_checked_prefix(&ip4[..n]).is_err());
    }
    let ip6 = &GOLDEN_V6_VLAN[18..];
    for n in 0..ip6.len() {
        assert_eq!(
            Ipv6Packet::new_checked(&ip6[..n]).err(),
            Some(Error::Truncated),
            "len {n}"
        );
    }
    let tcp = &GOLDEN_V4_SYN[34..];
    for n in 0..tcp.len() {
        assert_eq!(
            TcpPacket::new_checked(&tcp[..n]).err(),
            Some(Error::Truncated),
            "len {n}"
        );
    }
    for n in 0..14 {
        assert_eq!(
            EthernetFrame::new_checked(&GOLDEN_V4_SYN[..n]).err(),
            Some(Error::Truncated)
        );
    }
    for n in 14..18 {
        assert_eq!(
            EthernetFrame::new_checked(&GOLDEN_V6_VLAN[..n]).err(),
            Some(Error::Truncated)
        );
    }
}

#[test]
fn corrupted_headers() {
    // Every single-byte corruption: parse never panics, and a corruption of
    // the IPv4 header is always caught (checksum, version or length).
    for i in 0..GOLDEN_V4_SYN.len() {
        for x in [0x01u8, 0x80, 0xff] {
            let mut f = GOLDEN_V4_SYN;
            f[i] ^= x;
            let r = locate_tcp(&f);
            if (14..34).contains(&i) {
                assert!(r.is_err(), "IPv4 byte {i} ^ {x:#x} accepted");
            }
            if let Ok(l) = r {
                let t = TcpPacket::new_checked(&f[l.tcp_off..]).unwrap();
                let _ = TcpRepr::parse(&t);
                if i >= 34 {
                    assert!(
                        !t.verify_checksum(l.pseudo_sum()),
                        "TCP byte {i} corruption verified"
                    );
                }
            }
        }
    }
    let ip = |f: &mut [u8; 74]| -> Result<TcpLayout> {
        let mut p = Ipv4Packet::new_unchecked(&mut f[14..]);
        p.fill_checksum();
        locate_tcp(&f[..])
    };
    let mut f = GOLDEN_V4_SYN;
    f[14] = 0x65; // version 6 in an IPv4 frame
    assert_eq!(ip(&mut f), Err(Error::Malformed));
    let mut f = GOLDEN_V4_SYN;
    f[14] = 0x44; // IHL 4
    assert_eq!(locate_tcp(&f), Err(Error::Malformed));
    let mut f = GOLDEN_V4_SYN;
    f[20] = 0x20; // MF
    assert_eq!(ip(&mut f), Err(Error::Fragmented));
    let mut f = GOLDEN_V4_SYN;
    f[21] = 0x01; // offset 8
    assert_eq!(ip(&mut f), Err(Error::Fragmented));
    let mut f = GOLDEN_V4_SYN;
    f[23] = 17; // UDP
    assert_eq!(ip(&mut f), Err(Error::Unsupported));
    let mut f = GOLDEN_V4_SYN;
    f[17] = 30; // total length shorter than IP + TCP headers
    assert_eq!(ip(&mut f), Err(Error::Malformed));
    let mut f = GOLDEN_V4_SYN;
    f[25] ^= 1;
    assert_eq!(locate_tcp(&f), Err(Error::Checksum));
    let mut f = GOLDEN_V4_SYN;
    f[46] = 0x40; // TCP data offset 4
    assert_eq!(locate_tcp(&f), Err(Error::Malformed));
    let mut f = GOLDEN_V4_SYN;
    f[12] = 0x88; // unknown EtherType
    assert_eq!(locate_tcp(&f), Err(Error::Unsupported));
    // Two stacked 802.1Q tags.
    let mut f = GOLDEN_V6_VLAN;
    f[16..18].copy_from_slice(&[0x81, 0x00]);
    assert_eq!(locate_tcp(&f), Err(Error::Unsupported));
}

#[test]
fn ipv4_options_are_skipped() {
    // Insert a 4-byte option (NOP NOP NOP EOL) into the golden SYN.
    let mut f = GOLDEN_V4_SYN[..34].to_vec();
    f.extend_from_slice(&[1, 1, 1, 0]);
    f.extend_from_slice(&GOLDEN_V4_SYN[34..]);
    f[14] = 0x46; // IHL 6
    f[16..18].copy_from_slice(&64u16.to_be_bytes());
    Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
    let l = locate_tcp(&f).unwrap();
    assert_eq!((l.tcp_off, l.tcp_len), (38, 40));
    let IpRepr::V4(r) = l.ip else { panic!() };
    assert_eq!(r.payload_len, 40);
    let t = TcpPacket::new_checked(&f[l.tcp_off..]).unwrap();
    assert!(t.verify_checksum(l.pseudo_sum()));
    assert_eq!(oracle(&f).seq, 0x1122_3344);
    // Re-emitting the repr drops the options (20-byte header).
    let mut b = [0u8; 20];
    r.emit(&mut Ipv4Packet::new_unchecked(&mut b[..]));
    assert_eq!(b[0], 0x45);
}

#[test]
fn ethernet_padding_is_not_payload() {
    // A minimum-size frame: 54 bytes of headers padded to 60 on the wire.
    let (eth, mut ip, mut tcp) = golden_v4_reprs();
    tcp.options = TcpOptions::NONE;
    tcp.flags = TcpFlags::ACK;
    ip.payload_len = 20;
    let mut f = build_frame(&eth, &IpRepr::V4(ip), &tcp, &[]);
    f.extend_from_slice(&[0; 6]);
    let l = locate_tcp(&f).unwrap();
    assert_eq!((l.tcp_len, l.payload_len()), (20, 0));
    let t = TcpPacket::new_checked(&f[l.tcp_off..l.tcp_off + l.tcp_len]).unwrap();
    assert!(t.verify_checksum(l.pseudo_sum()));
    let p = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(p.payload().len(), 20);
    assert_eq!(oracle(&f).payload.len(), 0);
}

#[test]
fn tcp_option_errors() {
    let bad: &[&[u8]] = &[
        &[2],                         // MSS without length
        &[2, 3, 0],                   // MSS length 3
        &[2, 4, 0],                   // MSS past the end
        &[3, 4, 1, 1],                // WS length 4
        &[4, 3, 0],                   // SACK-permitted length 3
        &[8, 9, 0, 0, 0, 0, 0, 0, 0], // TS length 9
        &[5, 9, 0, 0, 0, 0, 0, 0, 0], // SACK not 2 + 8n
        &[5, 2],                      // SACK with no block
        &[99, 0],                     // unknown, length 0
        &[99, 1],                     // unknown, length 1
        &[99, 5, 1, 2],               // unknown, past the end
    ];
    for b in bad {
        assert_eq!(TcpOptions::parse(b), Err(Error::Malformed), "{b:?}");
    }
    // Unknown options skipped by length, EOL ends the list.
    let ok = [1, 99, 4, 0xaa, 0xbb, 2, 4, 0x23, 0x28, 0, 2, 3];
    let o = TcpOptions::parse(&ok).unwrap();
    assert_eq!(o.mss, Some(9000));
    assert_eq!(o.window_scale, None);
    // Options that do not fit in 40 bytes are refused by emit.
    let too_many = TcpOptions {
        mss: Some(1),
        timestamp: Some(TcpTimestamp::default()),
        sack: SackBlocks::from_slice(&[(SeqNumber(1), SeqNumber(2)); 3]).unwrap(),
        ..TcpOptions::NONE
    };
    assert_eq!(too_many.len(), 44);
    assert_eq!(too_many.emit(&mut [0; 64]), Err(Error::Malformed));
    assert!(SackBlocks::from_slice(&[(SeqNumber(1), SeqNumber(2)); 5]).is_none());
}

#[test]
fn ipv6_extension_headers() {
    let (eth, ip, tcp) = golden_v6_reprs();
    let payload = [1u8, 2, 3];
    let base = build_frame(&eth, &IpRepr::V6(ip), &tcp, &payload);
    let l3 = 18;
    // Insert hop-by-hop (8 bytes), routing (16 bytes), destination options (8 bytes).
    let exts: [&[u8]; 3] = [
        &[43, 0, 1, 4, 0, 0, 0, 0],
        &[60, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        &[6, 0, 1, 4, 0, 0, 0, 0],
    ];
    let mut f = base[..l3 + 40].to_vec();
    for e in exts {
        f.extend_from_slice(e);
    }
    f.extend_from_slice(&base[l3 + 40..]);
    f[l3 + 6] = 0; // next header: hop-by-hop
    let plen = (f.len() - l3 - 40) as u16;
    f[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
    let l = locate_tcp(&f).unwrap();
    assert_eq!(l.tcp_off, l3 + 40 + 32);
    assert_eq!(l.payload_len(), 3);
    let t = TcpPacket::new_checked(&f[l.tcp_off..]).unwrap();
    assert!(t.verify_checksum(l.pseudo_sum()));
    // etherparse agrees on where the TCP payload is.
    assert_eq!(oracle(&f).payload, payload);

    // A fragment header is refused.
    let mut g = f.clone();
    g[l3 + 40 + 24] = 44;
    assert_eq!(locate_tcp(&g), Err(Error::Fragmented));
    // Hop-by-hop anywhere but first is malformed.
    let mut g = f.clone();
    g[l3 + 40] = 0;
    assert_eq!(locate_tcp(&g), Err(Error::Malformed));
    // An extension header running past the payload length is malformed.
    let mut g = f.clone();
    g[l3 + 40 + 8 + 1] = 200;
    assert_eq!(locate_tcp(&g), Err(Error::Malformed));
    // An extension header that the payload length holds but the buffer
    // does not (a first buffer of a longer frame, or a lie) is truncated:
    // 2,048 bytes of destination options in a 58-byte frame.
    let mut g = base[..l3 + 40].to_vec();
    g.extend_from_slice(&[6, 255]);
    g[l3 + 6] = 60;
    g[l3 + 4..l3 + 6].copy_from_slice(&2064u16.to_be_bytes());
    assert_eq!(locate_tcp(&g), Err(Error::Truncated));
    let p = Ipv6Packet::new_checked_prefix(&g[l3..]).unwrap();
    assert_eq!(p.upper_layer(), Err(Error::Truncated));
    // Too many extension headers.
    let mut g = base[..l3 + 40].to_vec();
    for _ in 0..=ipv6::MAX_EXT_HEADERS {
        g.extend_from_slice(&[60, 0, 0, 0, 0, 0, 0, 0]);
    }
    g[l3 + 6] = 60;
    let plen = (g.len() - l3 - 40) as u16;
    g[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
    assert_eq!(locate_tcp(&g), Err(Error::Malformed));
}

// ---- property tests ----

fn arb_mac() -> impl Strategy<Value = EthernetAddress> {
    any::<[u8; 6]>().prop_map(EthernetAddress)
}

fn arb_eth(ethertype: EtherType) -> impl Strategy<Value = EthernetRepr> {
    (
        arb_mac(),
        arb_mac(),
        proptest::option::of((0u8..8, any::<bool>(), 0u16..4096)),
    )
        .prop_map(move |(dst, src, vlan)| EthernetRepr {
            dst,
            src,
            vlan: vlan.map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
            ethertype,
        })
}

fn arb_ipv4() -> impl Strategy<Value = Ipv4Repr> {
    (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<u8>(),
        0usize..2000,
        any::<u8>(),
        any::<u8>(),
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(|(s, d, p, len, ttl, tos, id, df)| Ipv4Repr {
            src: s.into(),
            dst: d.into(),
            protocol: IpProtocol(p),
            payload_len: len,
            ttl,
            dscp_ecn: tos,
            ident: id,
            dont_frag: df,
        })
}

fn arb_ipv6() -> impl Strategy<Value = Ipv6Repr> {
    (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u8>(),
        0usize..2000,
        any::<u8>(),
        any::<u8>(),
        0u32..(1 << 20),
    )
        .prop_map(|(s, d, nh, len, hl, tc, fl)| Ipv6Repr {
            src: s.into(),
            dst: d.into(),
            next_header: IpProtocol(nh),
            payload_len: len,
            hop_limit: hl,
            traffic_class: tc,
            flow_label: fl,
        })
}

pub(crate) fn arb_options() -> impl Strategy<Value = TcpOptions> {
    (
        proptest::option::of(any::<u16>()),
        proptest::option::of(any::<u8>()),
        any::<bool>(),
        proptest::option::of((any::<u32>(), any::<u32>())),
        proptest::collection::vec((any::<u32>(), any::<u32>()), 0..=4),
    )
        .prop_map(|(mss, ws, sp, ts, sack)| {
            let blocks: Vec<_> = sack
                .into_iter()
                .map(|(a, b)| (SeqNumber(a), SeqNumber(b)))
                .collect();
            TcpOptions {
                mss,
                window_scale: ws,
                sack_permitted: sp,
                timestamp: ts.map(|(tsval, tsecr)| TcpTimestamp { tsval, tsecr }),
                sack: SackBlocks::from_slice(&blocks).unwrap(),
            }
        })
        .prop_filter("options fit in 40 bytes", |o| {
            o.len() <= tcp::MAX_OPTIONS_LEN
        })
}

fn arb_tcp() -> impl Strategy<Value = TcpRepr> {
    (
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
        any::<u32>(),
        any::<u8>(),
        any::<u16>(),
        any::<u16>(),
        arb_options(),
    )
        .prop_map(|(sp, dp, seq, ack, flags, win, urg, options)| TcpRepr {
            src_port: sp,
            dst_port: dp,
            seq: SeqNumber(seq),
            ack: SeqNumber(ack),
            flags: TcpFlags(flags),
            window: win,
            urgent: urg,
            options,
        })
}

fn etherparse_options(o: &TcpOptions) -> Vec<etherparse::TcpOptionElement> {
    use etherparse::TcpOptionElement as E;
    let mut v = Vec::new();
    if let Some(m) = o.mss {
        v.push(E::MaximumSegmentSize(m));
    }
    if o.sack_permitted {
        v.push(E::SelectiveAcknowledgementPermitted);
    }
    if let Some(t) = o.timestamp {
        v.push(E::Timestamp(t.tsval, t.tsecr));
    }
    if let Some(w) = o.window_scale {
        v.push(E::WindowScale(w));
    }
    let s = o.sack.as_slice();
    if let Some(first) = s.first() {
        let mut rest = [None; 3];
        for (i, b) in s[1..].iter().enumerate() {
            rest[i] = Some((b.0.0, b.1.0));
        }
        v.push(E::SelectiveAcknowledgement((first.0.0, first.1.0), rest));
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn ethernet_roundtrip(r in arb_eth(EtherType::IPV4), et in any::<u16>()) {
        let mut r = r;
        if et != EtherType::VLAN.0 { r.ethertype = EtherType(et); }
        let mut a = vec![0xa5u8; r.header_len() + 2];
        let mut z = vec![0x00u8; r.header_len() + 2];
        r.emit(&mut EthernetFrame::new_unchecked(&mut a[..]));
        r.emit(&mut EthernetFrame::new_unchecked(&mut z[..]));
        prop_assert_eq!(&a[..r.header_len()], &z[..r.header_len()]);
        prop_assert_eq!(&a[r.header_len()..], &[0xa5, 0xa5]);
        let f = EthernetFrame::new_checked(&a[..]).unwrap();
        prop_assert_eq!(EthernetRepr::parse(&f).unwrap(), r);
    }

    /// The one-step parse of a leading NOP, NOP, timestamp gives what
    /// parsing option by option gives, whatever follows (SACK blocks,
    /// another timestamp, garbage), and near misses of the lead go the
    /// long way to the same result.
    #[test]
    fn options_lead_fast_path_equals_option_by_option(
        lead in prop_oneof![
            Just(vec![1u8, 1, 8, 10]),
            Just(vec![1u8, 1, 8, 9]),
            Just(vec![1u8, 8, 10, 1]),
            Just(vec![]),
        ],
        ts in any::<[u8; 8]>(),
        tail in proptest::collection::vec(any::<u8>(), 0..28),
        sack in proptest::option::of(proptest::collection::vec(any::<u8>(), 1..4usize)),
    ) {
        let mut b = lead.clone();
        if !lead.is_empty() {
            b.extend_from_slice(&ts);
        }
        if let Some(blocks) = sack {
            // A well-formed SACK option after the lead: NOP, NOP, kind 5.
            b.extend_from_slice(&[1, 1, 5, 2 + 8 * blocks.len() as u8]);
            for (i, k) in blocks.iter().enumerate() {
                b.extend_from_slice(&[*k, i as u8, 0, 1, *k, i as u8, 0, 9]);
            }
        }
        b.extend_from_slice(&tail);
        b.truncate(40);
        prop_assert_eq!(TcpOptions::parse(&b), TcpOptions::parse_each(&b, TcpOptions::NONE));
    }

    #[test]
    fn arp_roundtrip(op in any::<u16>(), sh in arb_mac(), th in arb_mac(), si in any::<[u8; 4]>(), ti in any::<[u8; 4]>()) {
        let r = ArpRepr { operation: ArpOperation(op), source_hw: sh, source_ip: si.into(), target_hw: th, target_ip: ti.into() };
        let mut a = [0xa5u8; 28];
        let mut z = [0u8; 28];
        r.emit(&mut ArpPacket::new_unchecked(&mut a[..]));
        r.emit(&mut ArpPacket::new_unchecked(&mut z[..]));
        prop_assert_eq!(a, z);
        prop_assert_eq!(ArpRepr::parse(&ArpPacket::new_checked(&a[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn ipv4_roundtrip(r in arb_ipv4()) {
        let mut a = vec![0xa5u8; r.buffer_len()];
        let mut z = vec![0u8; r.buffer_len()];
        r.emit(&mut Ipv4Packet::new_unchecked(&mut a[..]));
        r.emit(&mut Ipv4Packet::new_unchecked(&mut z[..]));
        prop_assert_eq!(&a[..20], &z[..20]);
        prop_assert!(a[20..].iter().all(|&b| b == 0xa5));
        let p = Ipv4Packet::new_checked(&a[..]).unwrap();
        prop_assert_eq!(Ipv4Repr::parse(&p).unwrap(), r);
        // etherparse reads the same header and agrees on the checksum.
        let (h, _) = etherparse::Ipv4Header::from_slice(&a).unwrap();
        prop_assert_eq!(h.header_checksum, h.calc_header_checksum());
        prop_assert_eq!(h.identification, r.ident);
        prop_assert_eq!(h.total_len as usize, r.buffer_len());
    }

    #[test]
    fn ipv6_roundtrip(r in arb_ipv6()) {
        let mut a = vec![0xa5u8; r.buffer_len()];
        let mut z = vec![0u8; r.buffer_len()];
        r.emit(&mut Ipv6Packet::new_unchecked(&mut a[..]));
        r.emit(&mut Ipv6Packet::new_unchecked(&mut z[..]));
        prop_assert_eq!(&a[..40], &z[..40]);
        let p = Ipv6Packet::new_checked(&a[..]).unwrap();
        prop_assert_eq!(Ipv6Repr::parse(&p).unwrap(), r);
        let (h, _) = etherparse::Ipv6Header::from_slice(&a).unwrap();
        prop_assert_eq!(h.flow_label.value(), r.flow_label);
        prop_assert_eq!(h.traffic_class, r.traffic_class);
    }

    #[test]
    fn tcp_roundtrip(r in arb_tcp()) {
        let hl = r.header_len();
        let mut a = vec![0xa5u8; hl + 3];
        let mut z = vec![0u8; hl + 3];
        r.emit(&mut TcpPacket::new_unchecked(&mut a[..])).unwrap();
        r.emit(&mut TcpPacket::new_unchecked(&mut z[..])).unwrap();
        prop_assert_eq!(&a[..hl], &z[..hl]);
        prop_assert_eq!(&a[hl..], &[0xa5; 3]);
        let p = TcpPacket::new_checked(&a[..]).unwrap();
        prop_assert_eq!(p.header_len(), hl);
        prop_assert_eq!(TcpRepr::parse(&p).unwrap(), r);
        prop_assert!(TcpPacket::new_unchecked(&mut a[..hl - 1]).check_len().is_err());
        prop_assert_eq!(r.emit(&mut TcpPacket::new_unchecked(&mut z[..hl - 1])), Err(Error::Truncated));
    }

    /// Our emitted frames, read by etherparse: every field and checksum agrees.
    #[test]
    fn oracle_agrees(
        v6 in any::<bool>(),
        eth in arb_eth(EtherType::IPV4),
        ip4 in arb_ipv4(),
        ip6 in arb_ipv6(),
        tcp in arb_tcp(),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut eth = eth;
        let ip = if v6 {
            eth.ethertype = EtherType::IPV6;
            IpRepr::V6(Ipv6Repr { next_header: IpProtocol::TCP, ..ip6 })
        } else {
            IpRepr::V4(Ipv4Repr { protocol: IpProtocol::TCP, ..ip4 })
        };
        let f = build_frame(&eth, &ip, &tcp, &payload);
        let o = oracle(&f);
        prop_assert_eq!(o.seq, tcp.seq.0);
        prop_assert_eq!(o.ack, tcp.ack.0);
        prop_assert_eq!(o.flags, tcp.flags.0);
        prop_assert_eq!(o.window, tcp.window);
        prop_assert_eq!(&o.payload, &payload);
        let opts: Vec<_> = o.options.into_iter().filter(|e| *e != etherparse::TcpOptionElement::Noop).collect();
        prop_assert_eq!(opts, etherparse_options(&tcp.options));
        if let IpRepr::V4(r) = ip { prop_assert_eq!(o.ip_id, Some(r.ident)); }
        // And we read back what we wrote.
        let l = locate_tcp(&f).unwrap();
        prop_assert_eq!(l.eth, eth);
        let t = TcpPacket::new_checked(&f[l.tcp_off..]).unwrap();
        prop_assert!(t.verify_checksum(l.pseudo_sum()));
        prop_assert_eq!(TcpRepr::parse(&t).unwrap(), tcp);
    }

    /// etherparse-built frames, read by us.
    #[test]
    fn we_read_etherparse(
        v6 in any::<bool>(), seq in any::<u32>(), ack in any::<u32>(), win in any::<u16>(),
        mss in any::<u16>(), ts in any::<(u32, u32)>(), payload in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        use etherparse::{PacketBuilder, TcpOptionElement as E};
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let b = if v6 { b.ipv6([1; 16], [2; 16], 64) } else { b.ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64) };
        let b = b.tcp(1234, 80, seq, win).ack(ack).psh()
            .options(&[E::MaximumSegmentSize(mss), E::Noop, E::Noop, E::Timestamp(ts.0, ts.1)]).unwrap();
        let mut f = Vec::new();
        b.write(&mut f, &payload).unwrap();
        let l = locate_tcp(&f).unwrap();
        let t = TcpPacket::new_checked(&f[l.tcp_off..l.tcp_off + l.tcp_len]).unwrap();
        prop_assert!(t.verify_checksum(l.pseudo_sum()));
        let r = TcpRepr::parse(&t).unwrap();
        prop_assert_eq!((r.seq.0, r.ack.0, r.window), (seq, ack, win));
        prop_assert_eq!(r.flags, TcpFlags::ACK | TcpFlags::PSH);
        prop_assert_eq!(r.options.mss, Some(mss));
        prop_assert_eq!(r.options.timestamp, Some(TcpTimestamp { tsval: ts.0, tsecr: ts.1 }));
        prop_assert_eq!(t.payload(), &payload[..]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Random bytes never panic any parser.
    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        fuzz_all(&b);
    }

    /// Mutated valid frames (deeper paths than random bytes reach).
    #[test]
    fn mutated_frames_never_panic(
        which in any::<bool>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut f = if which { GOLDEN_V4_SYN.to_vec() } else { GOLDEN_V6_VLAN.to_vec() };
        for (i, v) in edits { let i = i.index(f.len()); f[i] = v; }
        let n = cut.index(f.len() + 1);
        fuzz_all(&f[..n]);
    }

    /// IPv6 extension headers of any length claimed, any payload length,
    /// the frame cut anywhere: the walk stays inside the buffer.
    #[test]
    fn ipv6_extension_lengths_never_panic(
        nh in prop::sample::select(vec![0u8, 43, 60, 6, 44]),
        next in any::<u8>(),
        len in any::<u8>(),
        plen in any::<u16>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let (eth, ip, tcp) = golden_v6_reprs();
        let mut f = build_frame(&eth, &IpRepr::V6(ip), &tcp, &[1, 2, 3]);
        let l3 = 18;
        f[l3 + 6] = nh;
        f[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
        f[l3 + 40] = next;
        f[l3 + 41] = len;
        let n = cut.index(f.len() + 1);
        fuzz_all(&f[..n]);
    }
}

/// Runs every parser over `b` (and its suffixes at each header offset).
/// Shared with the fuzz targets' intent: must never panic.
pub(crate) fn fuzz_all(b: &[u8]) {
    if let Ok(l) = locate_tcp(b) {
        let t = TcpPacket::new_checked(&b[l.tcp_off..]).unwrap();
        let _ = TcpRepr::parse(&t);
    }
    if let Ok(f) = EthernetFrame::new_checked(b) {
        let _ = EthernetRepr::parse(&f);
        let _ = f.payload();
    }
    if let Ok(p) = ArpPacket::new_checked(b) {
        let _ = ArpRepr::parse(&p);
        let _ = (p.sha(), p.spa(), p.tha(), p.tpa());
    }
    if let Ok(p) = Ipv4Packet::new_checked(b) {
        let _ = Ipv4Repr::parse(&p);
        let _ = p.payload();
    }
    if let Ok(p) = Ipv4Packet::new_checked_prefix(b) {
        let _ = Ipv4Repr::parse(&p);
        let _ = p.payload();
    }
    if let Ok(p) = Ipv6Packet::new_checked_prefix(b) {
        let _ = Ipv6Repr::parse(&p);
        let _ = p.upper_layer();
    }
    if let Ok(p) = TcpPacket::new_checked(b) {
        if let Ok(r) = TcpRepr::parse(&p) {
            // Whatever parses re-emits (if our layout fits) and parses back.
            let mut buf = [0u8; 64];
            match r.emit(&mut TcpPacket::new_unchecked(&mut buf[..])) {
                Ok(()) => {
                    let back = TcpPacket::new_checked(&buf[..r.header_len()]).unwrap();
                    assert_eq!(TcpRepr::parse(&back), Ok(r));
                }
                Err(e) => assert!(e == Error::Malformed && r.options.len() > 40),
            }
        }
        let _ = p.payload();
        let _ = p.verify_checksum(0);
    }
    let _ = TcpOptions::parse(b);
    let _ = checksum::sum(b);
}
