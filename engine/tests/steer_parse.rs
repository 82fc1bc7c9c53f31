//! The steering program's parser on crafted frames: VLAN tags (passed), IPv6
//! extension headers, fragments, malformed headers, other protocols, ICMP
//! "too big" about a flow's segment and about others, and a matching
//! packet with no socket on its queue. Frames are sent raw from an
//! AF_XDP socket on the peer, so they reach side A's XDP hook byte for byte.

mod common;

use std::time::Duration;

use common::*;
use xtcp_engine::xdp::{AttachMode, NoSocket, Rule, Steering};

const PORT: u16 = 5201;

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

fn tcp_header(sport: u16, dport: u16) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&1u32.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = 0x10; // ACK
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    t
}

/// IPv6 + hop-by-hop + destination options + TCP to `dport`.
fn ipv6_ext_frame(net: &xtcp_engine::testnet::TestNet, dport: u16, fragment: bool) -> Vec<u8> {
    let mut f = eth(net.a.mac, net.b.mac, 0x86dd);
    let mut tail = Vec::new();
    // Hop-by-hop: next = dest-opts (60), len 0 (8 bytes), PadN.
    tail.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
    if fragment {
        // Dest-opts -> fragment header (44) -> TCP.
        tail.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]);
        tail.extend_from_slice(&[6, 0, 0, 1, 0, 0, 0, 7]); // offset 0, M=1
    } else {
        tail.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]);
    }
    tail.extend_from_slice(&tcp_header(40000, dport));
    tail.extend_from_slice(b"ipv6 ext");
    let mut ip6 = vec![0x60, 0, 0, 0];
    ip6.extend_from_slice(&(tail.len() as u16).to_be_bytes());
    ip6.push(0); // next header: hop-by-hop
    ip6.push(64);
    ip6.extend_from_slice(&net.b.ip6.octets());
    ip6.extend_from_slice(&net.a.ip6.octets());
    f.extend_from_slice(&ip6);
    f.extend_from_slice(&tail);
    f
}

fn ipv4_frame(net: &xtcp_engine::testnet::TestNet, proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
    let mut f = eth(net.a.mac, net.b.mac, 0x0800);
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 1]);
    ip.extend_from_slice(&frag.to_be_bytes());
    ip.extend_from_slice(&[64, proto, 0, 0]);
    ip.extend_from_slice(&net.b.ip4.octets());
    ip.extend_from_slice(&net.a.ip4.octets());
    f.extend_from_slice(&ip);
    f.extend_from_slice(l4);
    f
}

/// The first 8 bytes of a TCP header from `sport` to `dport` (what an
/// ICMP error quotes: ports and sequence number).
fn quoted_tcp(sport: u16, dport: u16) -> Vec<u8> {
    tcp_header(sport, dport)[..8].to_vec()
}

/// B → A: ICMP "fragmentation needed" (MTU 1400) about a TCP segment
/// from A's `sport` to B; `ty`/`code` other than 3/4 make it another ICMP
/// message.
fn icmp4_about(net: &xtcp_engine::testnet::TestNet, ty: u8, code: u8, sport: u16) -> Vec<u8> {
    let mut icmp = vec![ty, code, 0, 0, 0, 0];
    icmp.extend_from_slice(&1400u16.to_be_bytes());
    let mut inner = vec![0x45, 0, 0x05, 0xdc, 0, 1, 0x40, 0, 64, 6, 0, 0];
    inner.extend_from_slice(&net.a.ip4.octets());
    inner.extend_from_slice(&net.b.ip4.octets());
    icmp.extend_from_slice(&inner);
    icmp.extend_from_slice(&quoted_tcp(sport, 40000));
    ipv4_frame(net, 1, 0, &icmp)
}

/// B → A: ICMPv6 "packet too big" (MTU 1280) about a segment from A's
/// `sport` to B whose next header is `next` (6: TCP).
fn icmp6_about(net: &xtcp_engine::testnet::TestNet, next: u8, sport: u16) -> Vec<u8> {
    let mut f = eth(net.a.mac, net.b.mac, 0x86dd);
    let mut icmp = vec![2, 0, 0, 0];
    icmp.extend_from_slice(&1280u32.to_be_bytes());
    let mut inner = vec![0x60, 0, 0, 0, 0x05, 0xc8, next, 64];
    inner.extend_from_slice(&net.a.ip6.octets());
    inner.extend_from_slice(&net.b.ip6.octets());
    icmp.extend_from_slice(&inner);
    icmp.extend_from_slice(&quoted_tcp(sport, 40000));
    let mut ip6 = vec![0x60, 0, 0, 0];
    ip6.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    ip6.push(58);
    ip6.push(64);
    ip6.extend_from_slice(&net.b.ip6.octets());
    ip6.extend_from_slice(&net.a.ip6.octets());
    f.extend_from_slice(&ip6);
    f.extend_from_slice(&icmp);
    f
}

#[test]
fn parser_steers_only_well_formed_matching_tcp() {
    let net = testnet(1500, 1);
    let mut a = {
        let _g = net.a.ns.enter().unwrap();
        xsk_side(&net.a, &[0], &[Rule::port(PORT)], xsk_config(false))
    };
    let mut b = {
        let _g = net.b.ns.enter().unwrap();
        xsk_side(&net.b, &[0], &[], xsk_config(false))
    };

    // Steered: IPv6 TCP behind two extension headers.
    let v6 = ipv6_ext_frame(&net, PORT, false);
    // ICMP "too big" about a segment that left from the port, both
    // versions: the flow's.
    let too_big4 = icmp4_about(&net, 3, 4, PORT);
    let too_big6 = icmp6_about(&net, 6, PORT);
    let steered = [v6, too_big4, too_big6];

    // Passed: TCP to the port in an 802.1Q and an 802.1ad VLAN (xtcp
    // answers untagged, on the interface's own network: a tagged flow is
    // the kernel's), IPv6 fragment, IPv4 fragment, UDP to the port, TCP
    // to another port, ARP. Malformed: truncated TCP header, TCP data
    // offset < 5, IPv4 header length < 5, a runt Ethernet frame.
    let plain = tcp_frame(&net.b, &net.a, 40000, PORT, 1, b"vlan");
    let tagged = |tpid: [u8; 2]| {
        let mut f = plain[..12].to_vec();
        f.extend_from_slice(&tpid);
        f.extend_from_slice(&[0x00, 0x0a]); // VID 10
        f.extend_from_slice(&plain[12..]);
        f
    };
    let (dot1q, dot1ad) = (tagged([0x81, 0x00]), tagged([0x88, 0xa8]));
    let v6_frag = ipv6_ext_frame(&net, PORT, true);
    let v4_frag = ipv4_frame(&net, 6, 0x2000, &tcp_header(40000, PORT));
    let mut udp = vec![0u8; 8];
    udp[2..4].copy_from_slice(&PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&8u16.to_be_bytes());
    let udp = ipv4_frame(&net, 17, 0, &udp);
    let other_port = tcp_frame(&net.b, &net.a, 40000, PORT + 1, 1, b"kernel's");
    let mut arp = eth([0xff; 6], net.b.mac, 0x0806);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&net.b.mac);
    arp.extend_from_slice(&net.b.ip4.octets());
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&net.a.ip4.octets());
    // ICMP that is not xtcp's: about another port's segment, about a UDP
    // datagram, another unreachable code.
    let too_big_other_port = icmp4_about(&net, 3, 4, PORT + 1);
    let too_big_udp = icmp6_about(&net, 17, PORT);
    let port_unreachable = icmp4_about(&net, 3, 3, PORT);
    let passed = [
        dot1q,
        dot1ad,
        v6_frag,
        v4_frag,
        udp,
        other_port,
        arp,
        too_big_other_port,
        too_big_udp,
        port_unreachable,
    ];

    let truncated = ipv4_frame(&net, 6, 0, &tcp_header(40000, PORT)[..10]);
    let mut bad_doff = tcp_header(40000, PORT);
    bad_doff[12] = 4 << 4;
    let bad_doff = ipv4_frame(&net, 6, 0, &bad_doff);
    let mut bad_ihl = ipv4_frame(&net, 6, 0, &tcp_header(40000, PORT));
    bad_ihl[14] = 0x44;
    let runt = eth(net.a.mac, net.b.mac, 0x0800)[..13].to_vec();
    let malformed = [truncated, bad_doff, bad_ihl, runt];

    // A steered frame sent last marks the end: the pair has one queue, so
    // frames reach the hook in the order they were sent, and anything else
    // steered would arrive before the marker. Once the marker is in, the
    // hook has seen every frame, and its counters are final.
    let marker = tcp_frame(&net.b, &net.a, 40001, PORT, 1, b"last");
    let before = a.steering.counters().unwrap();
    for f in steered.iter().chain(&passed).chain(&malformed) {
        b.send_frame(0, f);
    }
    b.send_frame(0, &marker);
    let want: Vec<Vec<u8>> = steered.iter().cloned().chain([marker]).collect();
    let got = a.recv_packets(0, want.len(), Duration::from_secs(60));
    assert_eq!(got.len(), want.len(), "the steered frames arrived");
    for (g, f) in got.iter().zip(&want) {
        assert_eq!(g, f, "the steered frames, in order, and nothing else");
    }
    let c = a.steering.counters().unwrap();
    assert_eq!(c.steered - before.steered, want.len() as u64, "{c:?}");
    // veth may drop a runt before XDP sees it; everything else is counted.
    let mal = c.malformed - before.malformed;
    assert!((3..=4).contains(&mal), "malformed counted: {c:?}");
    assert!(c.passed - before.passed >= passed.len() as u64, "{c:?}");
    assert_eq!(c.no_socket, 0);
}

#[test]
fn matching_packet_without_a_socket_goes_to_the_kernel_and_is_counted() {
    let net = testnet(1500, 1);
    let steering = {
        let _g = net.a.ns.enter().unwrap();
        let mut s = Steering::attach(&net.a.iface, AttachMode::Native).unwrap();
        s.set_rules(&[Rule {
            addr: Some(net.a.ip6.into()),
            ports: PORT..=PORT,
        }])
        .unwrap();
        s
    };
    // A kernel TCP connection to the steered port over IPv6: there is no
    // AF_XDP socket on the queue, so the kernel gets the SYN and, with no
    // listener, answers with a RST: connect fails with "refused" quickly.
    let _g = net.b.ns.enter().unwrap();
    let err = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from((net.a.ip6, PORT)),
        Duration::from_secs(30),
    )
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    let c = steering.counters().unwrap();
    assert!(c.no_socket >= 1, "{c:?}");
    assert_eq!(c.steered, 0, "{c:?}");
    drop(_g);

    // With NoSocket::Drop the SYN never reaches the kernel: no RST comes
    // back, the connect attempt times out, and the drop is counted.
    let mut steering = steering;
    steering.set_no_socket(NoSocket::Drop).unwrap();
    let _g = net.b.ns.enter().unwrap();
    let err = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from((net.a.ip6, PORT)),
        Duration::from_millis(1500),
    )
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    // The SYN left before connect gave up; the hook may count it later on
    // a busy machine, so wait (bounded) for the count.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let c2 = steering.counters().unwrap();
        if c2.no_socket > c.no_socket {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{c2:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
