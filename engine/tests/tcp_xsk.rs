//! xtcp's TCP over AF_XDP against the Linux kernel's TCP: a connection from
//! side A (xtcp: steering program, AF_XDP socket, `XskPort`, sans-IO
//! `tcp::Connection` with its send buffer in UMEM frames, segments sent by
//! reference) to a kernel listener on side B of a test network, data both
//! ways, compared byte for byte, clean close; at MTU 1500, 9000 and 65535,
//! IPv4 and IPv6, MSS clipping on and off, both transmit layouts (chained,
//! and single-descriptor with the headers in the frame's headroom), with
//! 1 % loss each way (4 % towards xtcp at 64 KiB MTU, where the kernel sends
//! few packets), so that frames are retransmitted while, and after, they are
//! in flight. Needs root.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::testnet;
use xtcp_engine::tcp::{
    CloseReason, Config, Connection, Event, FourTuple, IsnGenerator, MAX_PIECES, Piece, State,
};
use xtcp_engine::worker::{HeaderCache, PortConfig, RxCsum, TxLayout, UmemFrames, XskPort};
use xtcp_engine::xdp::impair::{Hook, ImpairConfig, Impairment};
use xtcp_engine::xdp::{AttachMode, NoSocket, Rule, Steering};
use xtcp_engine::xsk::{BindMode, Umem, UmemConfig, Xsk, XskConfig};

fn pattern(o: usize) -> u8 {
    (o as u8).wrapping_mul(31) ^ (o >> 9) as u8
}

fn transfer(mtu: u32, v6: bool, loss_percent: f64, clip: bool, layout: TxLayout) {
    let net = testnet(mtu, 1);
    // Random loss on the kernel's side, both directions (no netem here),
    // and one packet each way for sure (`ImpairConfig::loss`).
    let impair = (loss_percent > 0.0).then(|| {
        let _g = net.b.ns.enter().unwrap();
        let cfg = ImpairConfig::loss(loss_percent);
        // At 64 KiB MTU the kernel's side sends a few hundred packets in
        // all (GSO packets of several segments over IPv6): 4 × the loss
        // there, so that more than the one sure drop is recovered.
        let back = ImpairConfig::loss(if mtu > 9000 {
            4.0 * loss_percent
        } else {
            loss_percent
        });
        (
            Impairment::attach(&net.b.iface, Hook::Ingress, cfg).unwrap(),
            Impairment::attach(&net.b.iface, Hook::Egress, back).unwrap(),
        )
    });
    // About a thousand segments or more each way, so that 1 % loss drops
    // some (a handful of 64 KiB segments would often lose none).
    let up: usize = if mtu <= 1500 {
        4 << 20
    } else if mtu <= 9000 {
        16 << 20
    } else {
        64 << 20
    };
    let down = if mtu > 9000 { up } else { up / 2 };
    let (local_ip, peer_ip): (IpAddr, IpAddr) = if v6 {
        (net.a.ip6.into(), net.b.ip6.into())
    } else {
        (net.a.ip4.into(), net.b.ip4.into())
    };
    let local_port = 40000;
    let listener = {
        let _g = net.b.ns.enter().unwrap();
        std::net::TcpListener::bind(SocketAddr::new(peer_ip, 5201)).unwrap()
    };
    let linux = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        let reply: Vec<u8> = (0..down).map(pattern).collect();
        s.write_all(&reply).unwrap();
        drop(s);
        got
    });

    let (mut steering, mut port) = {
        let _g = net.a.ns.enter().unwrap();
        let mut steering = Steering::attach(&net.a.iface, AttachMode::Native).unwrap();
        steering.set_no_socket(NoSocket::Drop).unwrap();
        let umem = Arc::new(
            Umem::new(UmemConfig {
                frame_count: 8192,
                ..UmemConfig::default()
            })
            .unwrap(),
        );
        // Chained layout: a header descriptor and payload descriptors.
        let cfg = XskConfig {
            bind: BindMode::Copy,
            multi_buffer: true,
            ..XskConfig::default()
        };
        let xsk = Xsk::bind(&umem, &net.a.iface, 0, &cfg).unwrap();
        steering.register(0, &xsk).unwrap();
        let frames = umem.take_frames();
        let port = XskPort::new(
            xsk,
            PortConfig {
                locals: Box::new([local_ip]),
                local_mac: net.a.mac,
                next_hop_mac: net.b.mac,
                // The test network turns checksum offload off: verify.
                rx_csum: RxCsum::Verify,
                mtu: mtu as usize,
                layout,
            },
            frames,
        );
        (steering, port)
    };
    steering
        .set_rules(&[Rule {
            addr: Some(local_ip),
            ports: local_port..=local_port,
        }])
        .unwrap();

    let start = Instant::now();
    let net_b_mac = net.b.mac;
    let ip_hl = if v6 { 40 } else { 20 };
    // The single-descriptor layout: slots start 256 bytes into their
    // frames, one segment each, at most a frame less that headroom.
    let single = layout == TxLayout::Single;
    let link_mss = mtu as usize - ip_hl - 20;
    let cfg = Config {
        mss: if single { link_mss.min(3840) } else { link_mss } as u16,
        frame_len: if single { 3840 } else { 4096 },
        segment_per_frame: single,
        send_frames: 256,
        recv_buffer: 2 << 20,
        time_wait: Duration::from_millis(100),
        clip_mss_to_frames: clip,
        ..Config::default()
    };
    let tuple = FourTuple {
        local: SocketAddr::new(local_ip, local_port),
        remote: SocketAddr::new(peer_ip, 5201),
    };
    let mut mem = UmemFrames::default();
    mem.attach(port.xsk().umem().clone(), if single { 256 } else { 0 });
    let iss = IsnGenerator::new(7, start).isn(&tuple, start);
    let mut c = Connection::connect_in(cfg, tuple, iss, start, mem);
    let mut hdr = HeaderCache::default();
    let mut pieces = [Piece::default(); MAX_PIECES];
    let data: Vec<u8> = (0..up).map(pattern).collect();
    let mut written = 0;
    let mut back = Vec::with_capacity(down);
    let mut closed = None;
    let mut buf = vec![0u8; 1 << 16];
    while Instant::now() < start + Duration::from_secs(60) && closed.is_none() {
        let now = Instant::now();
        port.recv(256, |src, dst, repr, payload| {
            if src == tuple.remote && dst == tuple.local {
                c.handle_segment_parts(now, repr, payload, &mut |_| 0);
            }
        });
        if c.poll_timeout().is_some_and(|t| t <= now) {
            c.handle_timeout(now);
        }
        port.provision(c.send_memory_mut(), 1024);
        if matches!(c.state(), State::Established | State::CloseWait) {
            if written < up {
                written += c.write(&data[written..]).unwrap_or(0);
            }
            if written == up {
                c.close(now);
            }
        }
        loop {
            let n = c.read(now, &mut buf);
            if n == 0 {
                break;
            }
            back.extend_from_slice(&buf[..n]);
        }
        while let Some(seg) = c.poll_transmit(now) {
            let n = c.payload_pieces(&seg, &mut pieces).unwrap();
            // A segment that cannot be queued now is retransmitted by TCP.
            let mac = net_b_mac;
            port.send_segment(
                mac,
                tuple.local,
                tuple.remote,
                &seg.repr,
                &pieces[..n],
                c.send_memory_mut(),
                &mut hdr,
            );
        }
        port.flush();
        while let Some(ev) = c.poll_event() {
            if let Event::Closed(r) = ev {
                closed = Some(r);
            }
        }
    }
    let got = linux.join().unwrap();
    let counters = *port.counters();
    assert_eq!(
        closed,
        Some(CloseReason::Normal),
        "{counters:?} {:?}",
        c.stats()
    );
    assert_eq!(got.len(), up, "Linux read everything");
    assert!(got == data, "Linux received the exact bytes");
    assert_eq!(back.len(), down);
    assert!(
        back.iter().enumerate().all(|(i, &b)| b == pattern(i)),
        "xtcp received the exact bytes"
    );
    assert_eq!(counters.drop_checksum, 0, "{counters:?}");
    assert_eq!(counters.tx_too_long, 0, "{counters:?}");
    // Every send-buffer frame comes back to the pool once the connection
    // is done and its descriptors completed.
    let held = c.send_memory().frames_held();
    assert!(held > 0, "the send buffer was in UMEM frames");
    let before = port.pool_len();
    port.take_back(c.send_memory_mut());
    let deadline = Instant::now() + Duration::from_secs(30);
    while port.pool_len() < before + held && Instant::now() < deadline {
        port.flush();
        std::thread::yield_now();
    }
    assert!(
        port.pool_len() >= before + held,
        "frames returned: {} of {held}",
        port.pool_len() - before
    );
    let st = steering.counters().unwrap();
    assert!(st.steered > 0, "{st:?}");
    if let Some((ingress, egress)) = impair {
        let (i, e) = (ingress.counters().unwrap(), egress.counters().unwrap());
        assert!(
            i.dropped > 0 && e.dropped > 0,
            "loss was injected: {i:?} {e:?}"
        );
        assert!(
            c.stats().retransmits > 0,
            "xtcp retransmitted: {:?}",
            c.stats()
        );
    }
}

#[test]
fn xtcp_over_af_xdp_to_linux_mtu_1500_ipv4() {
    transfer(1500, false, 0.0, true, TxLayout::Chained);
}

macro_rules! lossy {
    ($($name:ident: $mtu:expr, $v6:expr, $clip:expr $(, $layout:ident)?;)*) => {$(
        #[test]
        fn $name() {
            #[allow(unused_mut, unused_assignments)]
            let mut layout = TxLayout::Chained;
            $(layout = TxLayout::$layout;)?
            transfer($mtu, $v6, 1.0, $clip, layout);
        }
    )*};
}

lossy! {
    lossy_mtu_1500_ipv4_clip: 1500, false, true;
    lossy_mtu_1500_ipv6_noclip: 1500, true, false;
    lossy_mtu_9000_ipv4_clip: 9000, false, true;
    lossy_mtu_9000_ipv4_noclip: 9000, false, false;
    lossy_mtu_9000_ipv6_clip: 9000, true, true;
    lossy_mtu_9000_ipv6_noclip: 9000, true, false;
    lossy_mtu_65535_ipv4_clip: 65535, false, true;
    lossy_mtu_65535_ipv4_noclip: 65535, false, false;
    lossy_mtu_65535_ipv6_clip: 65535, true, true;
    lossy_mtu_65535_ipv6_noclip: 65535, true, false;
    single_descriptor_lossy_mtu_1500_ipv4: 1500, false, true, Single;
    single_descriptor_lossy_mtu_9000_ipv6: 9000, true, true, Single;
}
