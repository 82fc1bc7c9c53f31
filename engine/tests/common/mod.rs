//! Helpers shared by the network-namespace integration tests.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use xtcp_engine::testnet::{Side, TestNet, TestNetConfig};
use xtcp_engine::xdp::{AttachMode, Rule, Steering};
use xtcp_engine::xsk::{BindMode, Frame, RxDesc, TxDesc, Umem, UmemConfig, Xsk, XskConfig};

/// Builds the test network or fails the test with the reason.
pub fn testnet(mtu: u32, queues: u32) -> TestNet {
    TestNet::new(TestNetConfig {
        mtu,
        queues,
        offloads: false,
    })
    .unwrap_or_else(|e| panic!("cannot build the test network (these tests run as root): {e}"))
}

/// An Ethernet + IPv4 + TCP frame from `src` to `dst` with `payload`.
pub fn tcp_frame(
    src: &Side,
    dst: &Side,
    sport: u16,
    dport: u16,
    seq: u32,
    payload: &[u8],
) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(src.mac, dst.mac)
        .ipv4(src.ip4.octets(), dst.ip4.octets(), 64)
        .tcp(sport, dport, seq, 65535)
        .ack(1);
    let mut out = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut out, payload).unwrap();
    out
}

/// An Ethernet + IPv4 + UDP frame.
pub fn udp_frame(src: &Side, dst: &Side, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(src.mac, dst.mac)
        .ipv4(src.ip4.octets(), dst.ip4.octets(), 64)
        .udp(sport, dport);
    let mut out = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut out, payload).unwrap();
    out
}

/// A payload whose bytes depend on their position and a seed.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A raw IPv4 socket (IP_HDRINCL) in the current thread's namespace that
/// sends the IP part of `frame` (the kernel adds the Ethernet header).
pub fn raw_ip_sender() -> Socket {
    let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::TCP)).unwrap();
    s.set_header_included_v4(true).unwrap();
    s
}

/// Sends the IPv4 packet inside `frame` (strips the 14-byte Ethernet header).
pub fn send_ip(sock: &Socket, frame: &[u8], dst: Ipv4Addr) {
    let addr = SocketAddr::V4(SocketAddrV4::new(dst, 0));
    let n = sock.send_to(&frame[14..], &addr.into()).unwrap();
    assert_eq!(n, frame.len() - 14);
}

/// AF_XDP side: steering program + one socket per queue on a shared UMEM.
pub struct XskSide {
    pub steering: Steering,
    pub umem: Arc<Umem>,
    pub socks: Vec<Xsk>,
    pub pool: Vec<Frame>,
}

pub fn xsk_config(multi_buffer: bool) -> XskConfig {
    XskConfig {
        rx_size: 512,
        tx_size: 512,
        fill_size: 1024,
        comp_size: 1024,
        bind: BindMode::Copy,
        need_wakeup: true,
        multi_buffer,
        tx_budget: None,
    }
}

/// Attaches the steering program on `side` with `rules`, binds sockets on
/// `queues` and fills their fill rings. Must be called inside `side`'s ns.
pub fn xsk_side(side: &Side, queues: &[u32], rules: &[Rule], cfg: XskConfig) -> XskSide {
    let mut steering = Steering::attach(&side.iface, AttachMode::Native).unwrap();
    let umem = Arc::new(
        Umem::new(UmemConfig {
            frame_count: 4096,
            ..UmemConfig::default()
        })
        .unwrap(),
    );
    let mut pool = umem.take_frames();
    let mut socks = Vec::new();
    for &q in queues {
        let mut x = Xsk::bind(&umem, &side.iface, q, &cfg).unwrap();
        let n = x.fill.fill(&mut pool, cfg.fill_size);
        assert_eq!(n, cfg.fill_size);
        steering.register(q, &x).unwrap();
        socks.push(x);
    }
    steering.set_rules(rules).unwrap();
    XskSide {
        steering,
        umem,
        socks,
        pool,
    }
}

impl XskSide {
    /// Receives whole packets (chains joined) from socket `i` until `count`
    /// arrived or `timeout` passed; refills the fill ring as it goes.
    pub fn recv_packets(&mut self, i: usize, count: usize, timeout: Duration) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        let mut cur: Vec<u8> = Vec::new();
        let umem = self.umem.clone();
        while out.len() < count && Instant::now() < deadline {
            let x = &mut self.socks[i];
            let pool = &mut self.pool;
            let n = x.rx.recv(64, |d: RxDesc| {
                let data = umem.frame(&d.frame);
                cur.extend_from_slice(&data[d.offset as usize..(d.offset + d.len) as usize]);
                if !d.contd {
                    out.push(std::mem::take(&mut cur));
                }
                pool.push(d.frame);
            });
            x.fill.fill(pool, 1024);
            if n == 0 {
                if x.fill.needs_wakeup() {
                    x.fill.wakeup();
                }
                x.rx.poll(10);
            }
        }
        out
    }

    /// Sends `frame` on socket `i` (as a chain of frames when larger than
    /// one) and waits for its completion.
    pub fn send_frame(&mut self, i: usize, frame: &[u8]) {
        let fs = self.umem.frame_size().bytes();
        let pieces: Vec<&[u8]> = frame.chunks(fs).collect();
        let x = &mut self.socks[i];
        let mut batch = x.tx.batch(pieces.len() as u32);
        assert_eq!(batch.remaining() as usize, pieces.len(), "TX ring full");
        for (k, piece) in pieces.iter().enumerate() {
            let mut f = self.pool.pop().expect("frame pool empty");
            self.umem.frame_mut(&mut f)[..piece.len()].copy_from_slice(piece);
            batch
                .push(TxDesc {
                    frame: f,
                    offset: 0,
                    len: piece.len() as u32,
                    contd: k + 1 < pieces.len(),
                })
                .unwrap();
        }
        drop(batch);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut done = 0;
        while done < pieces.len() {
            assert!(Instant::now() < deadline, "TX completion timed out");
            x.tx.kick().unwrap();
            done += x.comp.complete(&mut self.pool, 64) as usize;
            if done < pieces.len() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// A detour inside `side` for the impairment program's reordering: a veth
/// pair `xdA`/`xdB` in its namespace (gone with it), `xdA` slowed by a
/// token bucket at `rate` (tc's syntax, e.g. `200mbit`), `xdB` taking in
/// what comes out for the host (reverse-path filter off there: the
/// packets are from the other side, whose route is elsewhere). Packets
/// sent out of `xdA` wait their turn there and arrive after those that
/// came the direct way.
pub fn detour(side: &Side, rate: &str, mtu: u32) -> xtcp_engine::xdp::impair::Detour {
    let ok = |out: std::process::Output, what: &str| {
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mtu = mtu.to_string();
    ok(
        side.ns
            .ip(&[
                "link", "add", "xdA", "mtu", &mtu, "type", "veth", "peer", "name", "xdB", "mtu",
                &mtu,
            ])
            .unwrap(),
        "veth",
    );
    for dev in ["xdA", "xdB"] {
        ok(side.ns.ip(&["link", "set", dev, "up"]).unwrap(), "up");
    }
    {
        // /proc/sys/net is the namespace of whoever opens it.
        let _g = side.ns.enter().unwrap();
        for conf in ["all", "xdB"] {
            std::fs::write(format!("/proc/sys/net/ipv4/conf/{conf}/rp_filter"), "0").unwrap();
        }
    }
    // The bucket holds one packet: each waits for the tokens of the last.
    let burst = (mtu.parse::<u32>().unwrap() + 100).to_string();
    ok(
        side.ns
            .exec(&[
                "tc", "qdisc", "add", "dev", "xdA", "root", "tbf", "rate", rate, "burst", &burst,
                "latency", "100ms",
            ])
            .unwrap(),
        "tbf",
    );
    let link = ok(
        side.ns.ip(&["-o", "link", "show", "dev", "xdB"]).unwrap(),
        "show",
    );
    let mac = link
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .expect("xdB's MAC");
    let mut m = [0u8; 6];
    for (b, h) in m.iter_mut().zip(mac.split(':')) {
        *b = u8::from_str_radix(h, 16).unwrap();
    }
    let ifindex = {
        let _g = side.ns.enter().unwrap();
        xtcp_engine::xsk::ifindex("xdA").unwrap()
    };
    xtcp_engine::xdp::impair::Detour { ifindex, mac: m }
}
