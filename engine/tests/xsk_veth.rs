//! AF_XDP and steering on a veth pair between two network namespaces.
//! These tests need root (CI runs them as root) and build their own network.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use common::*;
use xtcp_engine::xdp::{AttachMode, Rule, Steering};
use xtcp_engine::xsk::{BindMode, Umem, UmemConfig, Xsk, XskError};

const PORT: u16 = 5201;

#[test]
fn steered_tcp_arrives_exact_while_kernel_traffic_flows() {
    let net = testnet(1500, 1);
    let mut xs = {
        let _g = net.a.ns.enter().unwrap();
        xsk_side(&net.a, &[0], &[Rule::port(PORT)], xsk_config(false))
    };
    // A kernel TCP listener on a port that is not steered.
    let listener = {
        let _g = net.a.ns.enter().unwrap();
        TcpListener::bind((net.a.ip4, 7000)).unwrap()
    };
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&buf).unwrap();
    });

    let frames: Vec<Vec<u8>> = (0..8u32)
        .map(|i| {
            tcp_frame(
                &net.b,
                &net.a,
                40000 + i as u16,
                PORT,
                1000 * i,
                &pattern(100 + i as usize * 50, i as u8),
            )
        })
        .collect();
    {
        let _g = net.b.ns.enter().unwrap();
        let raw = raw_ip_sender();
        for f in &frames {
            send_ip(&raw, f, net.a.ip4);
        }
        // Kernel TCP to the non-steered port still works.
        let mut c = TcpStream::connect_timeout(
            &SocketAddr::from((net.a.ip4, 7000)),
            Duration::from_secs(60),
        )
        .unwrap();
        c.write_all(b"hello").unwrap();
        let mut back = [0u8; 5];
        c.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"hello");
    }
    server.join().unwrap();
    let ping = net
        .b
        .ns
        .exec(&[
            "ping",
            "-c",
            "2",
            "-i",
            "0.2",
            "-W",
            "2",
            &net.a.ip4.to_string(),
        ])
        .expect("ping across the steered interface");
    assert!(ping.status.success());

    let got = xs.recv_packets(0, frames.len(), Duration::from_secs(60));
    assert_eq!(got.len(), frames.len(), "all steered packets arrive");
    for (g, f) in got.iter().zip(&frames) {
        assert_eq!(g, f, "the RX ring holds the exact bytes sent");
    }
    let c = xs.steering.counters().unwrap();
    assert_eq!(c.steered, frames.len() as u64, "{c:?}");
    assert!(c.passed >= 4, "ping and kernel TCP were passed: {c:?}");
    assert_eq!(c.no_socket, 0);
}

#[test]
fn tx_frames_arrive_intact_in_the_peer_namespace() {
    let net = testnet(1500, 1);
    let sink = {
        let _g = net.b.ns.enter().unwrap();
        let s = UdpSocket::bind((net.b.ip4, 9000)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s
    };
    let mut xs = {
        let _g = net.a.ns.enter().unwrap();
        xsk_side(&net.a, &[0], &[], xsk_config(false))
    };
    let payloads: Vec<Vec<u8>> = (0..32).map(|i| pattern(1 + i * 45, i as u8)).collect();
    for p in &payloads {
        xs.send_frame(0, &udp_frame(&net.a, &net.b, 9001, 9000, p));
    }
    let mut buf = vec![0u8; 65536];
    for p in &payloads {
        let n = sink
            .recv(&mut buf)
            .expect("datagram from the AF_XDP TX ring");
        assert_eq!(&buf[..n], &p[..]);
    }
    let st = xs.socks[0].stats().unwrap();
    assert_eq!(st.tx_invalid_descs, 0, "{st:?}");

    // Descriptors that do not fit their frame are refused before the kernel
    // sees them (it would never complete them, or complete a neighbour).
    let mut batch = xs.socks[0].tx.batch(4);
    for (offset, len) in [(0u32, 0u32), (4000, 200), (4097, 10)] {
        let f = xs.pool.pop().unwrap();
        let back = batch
            .push(xtcp_engine::xsk::TxDesc {
                frame: f,
                offset,
                len,
                contd: false,
            })
            .unwrap_err();
        xs.pool.push(back.frame);
    }
    assert_eq!(batch.remaining(), 4, "nothing was queued");
}

fn multibuffer_both_ways(mtu: u32) {
    let net = testnet(mtu, 1);
    let mut xs = {
        let _g = net.a.ns.enter().unwrap();
        xsk_side(&net.a, &[0], &[Rule::port(PORT)], xsk_config(true))
    };
    assert!(xs.socks[0].info().multi_buffer);
    // B -> A: a maximum-size TCP packet arrives as a chain.
    let max_payload = mtu as usize - 20 - 20;
    let frame = tcp_frame(&net.b, &net.a, 40000, PORT, 7, &pattern(max_payload, 3));
    {
        let _g = net.b.ns.enter().unwrap();
        send_ip(&raw_ip_sender(), &frame, net.a.ip4);
    }
    let got = xs.recv_packets(0, 1, Duration::from_secs(60));
    assert_eq!(got.len(), 1, "the {mtu}-byte packet arrived");
    assert_eq!(got[0].len(), frame.len());
    assert!(got[0] == frame, "chain reassembles to the exact bytes");

    // A -> B: a maximum-size UDP datagram leaves as a chain.
    let sink = {
        let _g = net.b.ns.enter().unwrap();
        let s = UdpSocket::bind((net.b.ip4, 9000)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s
    };
    let payload = pattern(mtu as usize - 20 - 8, 9);
    xs.send_frame(0, &udp_frame(&net.a, &net.b, 9001, 9000, &payload));
    let mut buf = vec![0u8; 70000];
    let n = sink.recv(&mut buf).expect("max-size datagram");
    assert_eq!(n, payload.len());
    assert!(buf[..n] == payload[..]);
}

#[test]
fn multibuffer_mtu_9000() {
    multibuffer_both_ways(9000);
}

#[test]
fn multibuffer_mtu_65535() {
    multibuffer_both_ways(65535);
}

#[test]
fn two_queues_get_only_their_own_flows() {
    let net = testnet(1500, 2);
    let mut a = {
        let _g = net.a.ns.enter().unwrap();
        xsk_side(&net.a, &[0, 1], &[Rule::port(PORT)], xsk_config(false))
    };
    // B sends flow q from its own AF_XDP socket on TX queue q; veth delivers
    // it to A's RX queue q.
    let mut b = {
        let _g = net.b.ns.enter().unwrap();
        xsk_side(&net.b, &[0, 1], &[], xsk_config(false))
    };
    let flow =
        |q: u16, i: u32| tcp_frame(&net.b, &net.a, 41000 + q, PORT, i, &pattern(64, q as u8));
    for i in 0..10 {
        b.send_frame(0, &flow(0, i));
        b.send_frame(1, &flow(1, i));
    }
    // A last frame on each queue marks its end: a queue's frames reach its
    // socket in the order they were sent, so any of the other flow's that
    // came to the wrong queue would be there before its marker.
    b.send_frame(0, &flow(0, 10));
    b.send_frame(1, &flow(1, 10));
    for q in 0..2u16 {
        let got = a.recv_packets(q as usize, 11, Duration::from_secs(60));
        let want: Vec<Vec<u8>> = (0..11).map(|i| flow(q, i)).collect();
        assert!(got == want, "queue {q} got its own flow and nothing else");
    }
}

#[test]
fn bind_modes_on_veth() {
    let net = testnet(1500, 1);
    let _g = net.a.ns.enter().unwrap();
    let umem = std::sync::Arc::new(Umem::new(UmemConfig::default()).unwrap());
    let mut cfg = xsk_config(false);

    cfg.bind = BindMode::ZeroCopy;
    let e = Xsk::bind(&umem, &net.a.iface, 0, &cfg).unwrap_err();
    assert!(matches!(e, XskError::NoZeroCopy { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("driver: veth") && msg.contains("--bind copy"),
        "{msg}"
    );

    cfg.bind = BindMode::Auto;
    let x = Xsk::bind(&umem, &net.a.iface, 0, &cfg).unwrap();
    assert!(
        !x.info().zerocopy,
        "veth has no zero-copy: auto falls back to copy"
    );
    drop(x);

    // The queue is busy while another socket holds it.
    let umem2 = std::sync::Arc::new(Umem::new(UmemConfig::default()).unwrap());
    let cfg_copy = xsk_config(false);
    let _held = bind_retrying(&umem2, &net.a.iface, &cfg_copy);
    // A second socket of the same UMEM on the same queue is refused before
    // the kernel sees it.
    let e = Xsk::bind(&umem2, &net.a.iface, 0, &cfg_copy).unwrap_err();
    assert!(e.to_string().contains("already has a socket"), "{e}");
    let umem3 = std::sync::Arc::new(Umem::new(UmemConfig::default()).unwrap());
    let e = Xsk::bind(&umem3, &net.a.iface, 0, &cfg_copy).unwrap_err();
    assert!(matches!(e, XskError::QueueBusy { queue: 0, .. }), "{e:?}");
    assert!(e.to_string().contains("busy"));

    // Binding with a wait: busy for as long as the socket is held, then
    // bound once it is closed (the kernel releases it some time later).
    let t0 = std::time::Instant::now();
    let e = Xsk::bind_waiting(
        &umem3,
        &net.a.iface,
        0,
        &cfg_copy,
        Duration::from_millis(300),
    )
    .unwrap_err();
    assert!(matches!(e, XskError::QueueBusy { queue: 0, .. }), "{e:?}");
    assert!(t0.elapsed() >= Duration::from_millis(300), "it waited");
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(_held);
    });
    let x = Xsk::bind_waiting(&umem3, &net.a.iface, 0, &cfg_copy, Duration::from_secs(30))
        .expect("bound once the other socket was closed and released");
    closer.join().unwrap();
    drop(x);

    // A queue beyond the queue count.
    let e = Xsk::bind(&umem3, &net.a.iface, 5, &cfg_copy).unwrap_err();
    assert!(e.to_string().contains("queue 5 may not exist"), "{e}");

    // A nonexistent interface.
    let e = Xsk::bind(&umem3, "xtcp-nope0", 0, &cfg_copy).unwrap_err();
    assert!(matches!(e, XskError::NoInterface { .. }), "{e:?}");
    let e = Steering::attach("xtcp-nope0", AttachMode::Auto).unwrap_err();
    assert!(
        e.to_string().contains("no interface named `xtcp-nope0`"),
        "{e}"
    );
}

/// Rebinding a queue right after closing it sees EBUSY until the kernel
/// has released the old socket's pool, which it does later, in deferred
/// work (about a second on an idle 6.18 machine, longer on a loaded one).
/// Nothing but the bind itself shows that the queue is free again: bind
/// until it succeeds, accepting only "busy" meanwhile, within a generous
/// deadline.
fn bind_retrying(
    umem: &std::sync::Arc<Umem>,
    iface: &str,
    cfg: &xtcp_engine::xsk::XskConfig,
) -> Xsk {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match Xsk::bind(umem, iface, 0, cfg) {
            Ok(x) => return x,
            Err(XskError::QueueBusy { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn generic_mode_steers_too() {
    let net = testnet(1500, 1);
    let mut xs = {
        let _g = net.a.ns.enter().unwrap();
        let mut steering = Steering::attach(&net.a.iface, AttachMode::Generic).unwrap();
        assert_eq!(steering.mode(), AttachMode::Generic);
        let umem = std::sync::Arc::new(Umem::new(UmemConfig::default()).unwrap());
        let mut pool = umem.take_frames();
        let mut x = Xsk::bind(&umem, &net.a.iface, 0, &xsk_config(false)).unwrap();
        x.fill.fill(&mut pool, 1024);
        steering.register(0, &x).unwrap();
        steering.set_rules(&[Rule::port(PORT)]).unwrap();
        XskSide {
            steering,
            umem,
            socks: vec![x],
            pool,
        }
    };
    let frame = tcp_frame(&net.b, &net.a, 40000, PORT, 1, b"generic");
    {
        let _g = net.b.ns.enter().unwrap();
        send_ip(&raw_ip_sender(), &frame, net.a.ip4);
    }
    let got = xs.recv_packets(0, 1, Duration::from_secs(60));
    assert_eq!(got, vec![frame]);
}

#[test]
fn rules_change_at_run_time_and_unsteered_ports_pass() {
    let net = testnet(1500, 1);
    let mut xs = {
        let _g = net.a.ns.enter().unwrap();
        xsk_side(&net.a, &[0], &[Rule::port(PORT)], xsk_config(false))
    };
    let frame = |dport: u16| tcp_frame(&net.b, &net.a, 40000, dport, 1, b"x");
    let send = |dport: u16| {
        let _g = net.b.ns.enter().unwrap();
        send_ip(&raw_ip_sender(), &frame(dport), net.a.ip4);
    };
    // `unsteered` must not arrive: a steered marker sent after it must be
    // the first to. The pair has one queue, so frames reach the hook in
    // the order they were sent; no window of time decides it.
    let passes = |xs: &mut XskSide, unsteered: u16, marker: u16| {
        send(unsteered);
        send(marker);
        let got = xs.recv_packets(0, 1, Duration::from_secs(60));
        assert_eq!(got, vec![frame(marker)], "port {unsteered} was not steered");
    };
    passes(&mut xs, 6000, PORT);
    // An ephemeral-style range on a specific address.
    xs.steering
        .set_rules(&[Rule {
            addr: Some(net.a.ip4.into()),
            ports: 5990..=6010,
        }])
        .unwrap();
    send(6000);
    assert_eq!(
        xs.recv_packets(0, 1, Duration::from_secs(60)),
        vec![frame(6000)]
    );
    // The old rule is gone.
    passes(&mut xs, PORT, 6001);
    // A rule for another address does not match (the marker's rule is
    // for this one).
    xs.steering
        .set_rules(&[
            Rule {
                addr: Some(net.b.ip4.into()),
                ports: 1..=65535,
            },
            Rule {
                addr: Some(net.a.ip4.into()),
                ports: 7000..=7000,
            },
        ])
        .unwrap();
    passes(&mut xs, 6000, 7000);
    let c = xs.steering.counters().unwrap();
    assert_eq!(c.steered, 4, "{c:?}");
}

/// Restores `/proc/sys/vm/nr_hugepages` on drop.
struct HugepageReservation {
    original: String,
}

impl Drop for HugepageReservation {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/vm/nr_hugepages", &self.original);
    }
}

#[test]
fn umem_on_hugepages_carries_packets() {
    const PATH: &str = "/proc/sys/vm/nr_hugepages";
    let original = std::fs::read_to_string(PATH).expect("hugepage sysctl");
    let n: u64 = original.trim().parse().unwrap();
    // 4096 frames × 4096 bytes = 16 MiB = 8 pages of 2 MiB; reserve a few more.
    let _r = HugepageReservation {
        original: original.clone(),
    };
    std::fs::write(PATH, (n + 12).to_string()).unwrap();

    let net = testnet(1500, 1);
    let _g = net.a.ns.enter().unwrap();
    let umem = std::sync::Arc::new(
        Umem::new(UmemConfig {
            frame_count: 4096,
            hugepages: true,
            ..UmemConfig::default()
        })
        .expect("a UMEM on 2 MB hugepages (12 were just reserved)"),
    );
    let mut pool = umem.take_frames();
    let mut x = Xsk::bind(&umem, &net.a.iface, 0, &xsk_config(false)).unwrap();
    x.fill.fill(&mut pool, 1024);
    let mut steering = Steering::attach(&net.a.iface, AttachMode::Auto).unwrap();
    steering.register(0, &x).unwrap();
    steering.set_rules(&[Rule::port(PORT)]).unwrap();
    drop(_g);
    let mut xs = XskSide {
        steering,
        umem,
        socks: vec![x],
        pool,
    };
    let frame = tcp_frame(&net.b, &net.a, 40000, PORT, 1, &pattern(1000, 1));
    {
        let _g = net.b.ns.enter().unwrap();
        send_ip(&raw_ip_sender(), &frame, net.a.ip4);
    }
    assert_eq!(xs.recv_packets(0, 1, Duration::from_secs(60)), vec![frame]);
}

#[test]
fn umem_headroom_moves_received_data() {
    let net = testnet(1500, 1);
    let _g = net.a.ns.enter().unwrap();
    let umem = std::sync::Arc::new(
        Umem::new(UmemConfig {
            frame_count: 2048,
            headroom: 512,
            ..UmemConfig::default()
        })
        .unwrap(),
    );
    let mut pool = umem.take_frames();
    let mut x = Xsk::bind(&umem, &net.a.iface, 0, &xsk_config(false)).unwrap();
    x.fill.fill(&mut pool, 1024);
    let mut steering = Steering::attach(&net.a.iface, AttachMode::Auto).unwrap();
    steering.register(0, &x).unwrap();
    steering.set_rules(&[Rule::port(PORT)]).unwrap();
    drop(_g);
    let frame = tcp_frame(&net.b, &net.a, 40000, PORT, 1, b"headroom");
    {
        let _g = net.b.ns.enter().unwrap();
        send_ip(&raw_ip_sender(), &frame, net.a.ip4);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut offsets = Vec::new();
    while offsets.is_empty() && std::time::Instant::now() < deadline {
        x.rx.recv(8, |d| {
            let data = umem.frame(&d.frame);
            assert_eq!(
                &data[d.offset as usize..(d.offset + d.len) as usize],
                &frame[..]
            );
            offsets.push(d.offset);
            pool.push(d.frame);
        });
        x.rx.poll(10);
    }
    // The kernel's XDP headroom (256) plus ours.
    assert_eq!(offsets, vec![256 + 512]);
}
