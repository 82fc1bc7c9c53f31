//! Interoperation with the Linux kernel's TCP (test only; needs root).
//!
//! A [`TestNet`] pair of namespaces: side B is an ordinary Linux host, side A
//! has its IPv4 address removed so A's kernel ignores the flow (no RSTs), and
//! xtcp's [`Listener`] / [`Connection`] answer for that address through raw
//! sockets: packets are read with an `AF_PACKET` socket (IP datagrams from the
//! veth) and sent with an `IPPROTO_RAW` socket (our own IP header). Only
//! `rustix` and `std` are used: no unsafe here. Two tests: the kernel connects
//! to an xtcp listener, sends data, reads our echo, and both sides close; xtcp
//! connects to a kernel listener and both directions lose every 25th data
//! segment, so each stack recovers with the other's SACK blocks.

use super::*;
use crate::testnet::{TestNet, TestNetConfig, is_root};
use crate::wire::TcpPacket;
use crate::wire::checksum;
use rustix::net::{
    AddressFamily, RecvFlags, SendFlags, SocketType, eth, ipproto, recv, sendto, socket, sockopt,
};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

struct RawIo {
    rx: OwnedFd,
    tx: OwnedFd,
    local: Ipv4Addr,
    peer: Ipv4Addr,
    buf: Vec<u8>,
    out: Vec<u8>,
    /// Drop every n-th data segment in each direction (0: none), to make both
    /// stacks recover from loss against each other.
    drop_every: u64,
    rx_data: u64,
    tx_data: u64,
    dropped: u64,
}

impl RawIo {
    /// The next TCP segment addressed to us (checksum verified), if one
    /// arrives within the socket timeout: (source, header, payload range).
    fn recv(&mut self) -> Option<(SocketAddr, TcpRepr, std::ops::Range<usize>)> {
        loop {
            let n = match recv(&self.rx, &mut self.buf[..], RecvFlags::empty()) {
                Ok((n, _)) => n,
                Err(_) => return None,
            };
            let p = &self.buf[..n];
            if n < 20 || p[0] >> 4 != 4 || p[9] != 6 {
                continue;
            }
            let ihl = usize::from(p[0] & 15) * 4;
            let total = usize::from(u16::from_be_bytes([p[2], p[3]])).min(n);
            let src = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
            let dst = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
            if dst != self.local || total < ihl {
                continue; // our own transmissions, or someone else's
            }
            let tcp = &p[ihl..total];
            let Ok(pkt) = TcpPacket::new_checked(tcp) else {
                continue;
            };
            let pseudo = checksum::pseudo_v4(src, dst, 6, tcp.len() as u32);
            if !pkt.verify_checksum(pseudo) {
                continue;
            }
            let Ok(repr) = TcpRepr::parse(&pkt) else {
                continue;
            };
            if pkt.header_len() < tcp.len() && self.drop_every > 0 {
                self.rx_data += 1;
                if self.rx_data.is_multiple_of(self.drop_every) {
                    self.dropped += 1;
                    continue;
                }
            }
            let from = SocketAddr::new(src.into(), repr.src_port);
            return Some((from, repr, ihl + pkt.header_len()..total));
        }
    }

    fn send(&mut self, repr: &TcpRepr, payload: (&[u8], &[u8])) {
        if !payload.0.is_empty() && self.drop_every > 0 {
            self.tx_data += 1;
            if self.tx_data.is_multiple_of(self.drop_every) {
                self.dropped += 1;
                return;
            }
        }
        let tl = repr.header_len() + payload.0.len() + payload.1.len();
        self.out.clear();
        self.out.resize(20 + tl, 0);
        let ip = &mut self.out[..20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((20 + tl) as u16).to_be_bytes());
        ip[6] = 0x40; // DF
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&self.local.octets());
        ip[16..20].copy_from_slice(&self.peer.octets());
        let c = checksum::checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let hl = repr.header_len();
        let seg = &mut self.out[20..];
        repr.emit(&mut TcpPacket::new_unchecked(&mut seg[..]))
            .expect("header fits");
        seg[hl..hl + payload.0.len()].copy_from_slice(payload.0);
        seg[hl + payload.0.len()..].copy_from_slice(payload.1);
        TcpPacket::new_unchecked(&mut seg[..])
            .fill_checksum(checksum::pseudo_v4(self.local, self.peer, 6, tl as u32));
        let to = SocketAddrV4::new(self.peer, 0);
        sendto(&self.tx, &self.out, SendFlags::empty(), &to).expect("sendto");
    }
}

fn pattern(o: usize) -> u8 {
    (o as u8).wrapping_mul(31) ^ (o >> 9) as u8
}

/// The namespace pair with A's address handed to xtcp, and raw sockets in A.
fn setup(drop_every: u64) -> (TestNet, RawIo) {
    let net = TestNet::new(TestNetConfig::default()).expect("test network");
    let local = net.a.ip4;
    let peer = net.b.ip4;
    // A's kernel must not answer for the address xtcp serves.
    net.a
        .ns
        .ip(&["addr", "del", &format!("{local}/24"), "dev", &net.a.iface])
        .unwrap();
    net.a
        .ns
        .ip(&["route", "add", &format!("{peer}/32"), "dev", &net.a.iface])
        .unwrap();
    let mac_b = net
        .b
        .mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    net.a
        .ns
        .ip(&[
            "neigh",
            "replace",
            &peer.to_string(),
            "lladdr",
            &mac_b,
            "dev",
            &net.a.iface,
        ])
        .unwrap();
    let guard = net.a.ns.enter().unwrap();
    let rx = socket(AddressFamily::PACKET, SocketType::DGRAM, Some(eth::IP)).unwrap();
    let tx = socket(AddressFamily::INET, SocketType::RAW, Some(ipproto::RAW)).unwrap();
    drop(guard);
    sockopt::set_socket_timeout(&rx, sockopt::Timeout::Recv, Some(Duration::from_millis(2)))
        .unwrap();
    let io = RawIo {
        rx,
        tx,
        local,
        peer,
        buf: vec![0; 65536],
        out: Vec::with_capacity(65536),
        drop_every,
        rx_data: 0,
        tx_data: 0,
        dropped: 0,
    };
    (net, io)
}

#[test]
fn linux_client_transfers_both_ways_and_closes() {
    if !is_root() {
        eprintln!(
            "SKIP linux_client_transfers_both_ways_and_closes: needs root (netns, raw sockets)"
        );
        return;
    }
    linux_client_echo(true);
    // A Linux peer told to offer no options (per-namespace sysctls).
    linux_client_echo(false);
}

fn linux_client_echo(options: bool) {
    let (net, mut io) = setup(0);
    let local = net.a.ip4;
    if !options {
        for knob in ["tcp_sack", "tcp_timestamps", "tcp_window_scaling"] {
            net.b
                .ns
                .exec(&["sysctl", "-qw", &format!("net.ipv4.{knob}=0")])
                .unwrap();
        }
    }
    const LEN: usize = 300_000;
    let server = {
        std::thread::spawn(move || {
            let start = Instant::now();
            let laddr = SocketAddr::new(local.into(), 80);
            let mut l = Listener::new(Config::default(), laddr, IsnGenerator::new(42, start), 8, 2);
            let mut conn: Option<Connection> = None;
            let mut echo = Vec::new();
            let mut received = 0usize;
            let mut closed = None;
            let deadline = start + Duration::from_secs(20);
            while Instant::now() < deadline && closed.is_none() {
                if let Some((from, repr, range)) = io.recv() {
                    let now = Instant::now();
                    let payload = io.buf[range].to_vec();
                    match &mut conn {
                        Some(c) if c.tuple().remote == from => {
                            c.handle_segment(now, &repr, &payload)
                        }
                        _ => l.handle_segment(now, from, &repr, &payload),
                    }
                }
                let now = Instant::now();
                if l.poll_timeout().is_some_and(|t| t <= now) {
                    l.handle_timeout(now);
                }
                while let Some((_, seg)) = l.poll_transmit(now) {
                    io.send(&seg.repr, (&[], &[]));
                }
                if conn.is_none() {
                    conn = l.accept();
                }
                let Some(c) = &mut conn else { continue };
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
                // Echo what arrives; close after the peer's FIN once all is echoed.
                let (a, b) = c.read_slices();
                echo.extend_from_slice(a);
                echo.extend_from_slice(b);
                let n = a.len() + b.len();
                received += n;
                c.consume(now, n);
                if !echo.is_empty()
                    && let Ok(w) = c.write(&echo)
                {
                    echo.drain(..w);
                }
                if c.read_closed() && echo.is_empty() && c.state() == State::CloseWait {
                    c.close(now);
                }
                while let Some(seg) = c.poll_transmit(now) {
                    let p = c.payload(&seg);
                    io.send(&seg.repr, p);
                }
                while let Some(ev) = c.poll_event() {
                    if let Event::Closed(r) = ev {
                        closed = Some(r);
                    }
                }
            }
            let c = conn.expect("a connection was accepted");
            (received, closed, *c.stats(), c.negotiated())
        })
    };

    let client = {
        let guard = net.b.ns.enter().unwrap();
        let mut s =
            TcpStream::connect_timeout(&SocketAddr::new(local.into(), 80), Duration::from_secs(5))
                .expect("the kernel connects to xtcp");
        drop(guard);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let data: Vec<u8> = (0..LEN).map(pattern).collect();
        let mut reader = s.try_clone().unwrap();
        let r = std::thread::spawn(move || {
            let mut back = Vec::new();
            reader.read_to_end(&mut back).map(|_| back)
        });
        s.write_all(&data).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let back = r.join().unwrap().expect("read the echo to EOF");
        (data, back)
    };
    let (data, back) = client;
    assert_eq!(back.len(), LEN, "the whole echo came back");
    assert!(back == data, "byte for byte");
    let (received, closed, stats, negotiated) = server.join().unwrap();
    assert_eq!(received, LEN);
    assert_eq!(
        negotiated,
        (options, options, options),
        "window scaling, SACK and timestamps exactly as Linux offered them"
    );
    eprintln!("xtcp side: {stats:?}, closed {closed:?}");
    // Our FIN was acknowledged (LAST-ACK → closed) once the kernel closed.
    assert_eq!(closed, Some(CloseReason::Normal));
}

#[test]
fn xtcp_connects_to_a_linux_server_and_both_recover_from_loss() {
    if !is_root() {
        eprintln!("SKIP xtcp_connects_to_a_linux_server_and_both_recover_from_loss: needs root");
        return;
    }
    // Every 25th data segment is lost in each direction: Linux recovers using
    // our SACK blocks, we recover using Linux's.
    let (net, mut io) = setup(25);
    let local = net.a.ip4;
    let peer = net.b.ip4;
    const UP: usize = 1_000_000;
    const DOWN: usize = 200_000;
    let listener = {
        let guard = net.b.ns.enter().unwrap();
        let l = std::net::TcpListener::bind(SocketAddr::new(peer.into(), 5201)).unwrap();
        drop(guard);
        l
    };
    let linux = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        let reply: Vec<u8> = (0..DOWN).map(pattern).collect();
        s.write_all(&reply).unwrap();
        drop(s);
        got
    });
    let start = Instant::now();
    let cfg = Config {
        time_wait: Duration::from_millis(100),
        ..Config::default()
    };
    let tuple = FourTuple {
        local: SocketAddr::new(local.into(), 40000),
        remote: SocketAddr::new(peer.into(), 5201),
    };
    let mut c = Connection::connect(cfg, tuple, &IsnGenerator::new(7, start), start);
    let data: Vec<u8> = (0..UP).map(pattern).collect();
    let mut written = 0;
    let mut back = Vec::new();
    let mut closed = None;
    while Instant::now() < start + Duration::from_secs(30) && closed.is_none() {
        if let Some((from, repr, range)) = io.recv()
            && from == tuple.remote
        {
            let payload = io.buf[range].to_vec();
            c.handle_segment(Instant::now(), &repr, &payload);
        }
        let now = Instant::now();
        if c.poll_timeout().is_some_and(|t| t <= now) {
            c.handle_timeout(now);
        }
        if matches!(c.state(), State::Established) {
            if written < UP {
                written += c.write(&data[written..]).unwrap();
            }
            if written == UP {
                c.close(now);
            }
        }
        let mut buf = [0u8; 65536];
        loop {
            let n = c.read(now, &mut buf);
            if n == 0 {
                break;
            }
            back.extend_from_slice(&buf[..n]);
        }
        while let Some(seg) = c.poll_transmit(now) {
            let p = c.payload(&seg);
            io.send(&seg.repr, p);
        }
        while let Some(ev) = c.poll_event() {
            if let Event::Closed(r) = ev {
                closed = Some(r);
            }
        }
    }
    let got = linux.join().unwrap();
    assert_eq!(got.len(), UP, "Linux read everything");
    assert!(got == data);
    assert_eq!(back.len(), DOWN);
    assert!(back.iter().enumerate().all(|(i, &b)| b == pattern(i)));
    let st = *c.stats();
    eprintln!("xtcp side: {st:?}, dropped {}", io.dropped);
    assert_eq!(
        closed,
        Some(CloseReason::Normal),
        "FIN-WAIT → TIME-WAIT → closed"
    );
    assert!(io.dropped > 20);
    assert!(st.retransmits > 0 && st.ooo_segments > 0);
    assert!(st.sack_recoveries > 0, "recovered with Linux's SACK blocks");
}
