//! The test-only impairment program: random loss and duplication of TCP
//! packets on the kernel peer's side, counted.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::*;
use socket2::{Domain, Protocol, Socket, Type};
use xtcp_engine::testnet::{Side, TestNet};
use xtcp_engine::xdp::impair::{Hook, ImpairConfig, Impairment};

const PORT: u16 = 7100;

/// A raw TCP socket in `side`'s namespace: a copy of every TCP packet the
/// kernel there receives, with a receive buffer large enough for a test's
/// worth of packets (SO_RCVBUFFORCE: root may exceed rmem_max).
fn tcp_tap(side: &Side) -> Socket {
    use std::os::fd::AsRawFd;
    let _g = side.ns.enter().unwrap();
    let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::TCP)).unwrap();
    let size: libc::c_int = 16 << 20;
    // SAFETY: setsockopt on our own socket with a pointer to a live c_int
    // and its size; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
    s
}

/// Counts TCP packets to `port` on the tap: reads until `want` have come
/// (bounded by a minute), then goes on until the tap is quiet for 300 ms,
/// so that one packet too many is seen too.
fn count(tap: &Socket, port: u16, want: usize) -> usize {
    read_tap(tap, [port, 0], |n| n[0] >= want)[0]
}

/// Counts the tap's TCP packets to each of `ports` until `enough` holds for
/// the counts (bounded by a minute), then until it is quiet for 300 ms.
fn read_tap(mut tap: &Socket, ports: [u16; 2], enough: impl Fn(&[usize; 2]) -> bool) -> [usize; 2] {
    let mut n = [0usize; 2];
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut quiet = false;
    loop {
        if !quiet && (enough(&n) || Instant::now() > deadline) {
            quiet = true;
            tap.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
        } else if !quiet {
            tap.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
        }
        match tap.read(&mut buf) {
            Ok(len) if len >= 24 => {
                let ihl = usize::from(buf[0] & 0xf) * 4;
                let p = u16::from_be_bytes([buf[ihl + 2], buf[ihl + 3]]);
                if let Some(i) = ports.iter().position(|&q| q == p) {
                    n[i] += 1;
                }
            }
            Ok(_) => {}
            Err(_) if quiet => return n,
            Err(_) => {}
        }
    }
}

/// Waits (bounded) until the impairment has seen `n` packets.
fn wait_seen(imp: &Impairment, n: u64) -> xtcp_engine::xdp::impair::ImpairCounters {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let c = imp.counters().unwrap();
        if c.seen >= n {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "the impairment saw {c:?}, not {n}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends `n` TCP packets from `from` to `to`:`port` through the kernel.
fn send(from: &Side, to: &Side, port: u16, n: usize) {
    let _g = from.ns.enter().unwrap();
    let raw = raw_ip_sender();
    for i in 0..n {
        send_ip(
            &raw,
            &tcp_frame(from, to, 40000, port, i as u32, b"impair"),
            to.ip4,
        );
        if i % 64 == 63 {
            // Stay below the receive buffer of the tap.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn net() -> TestNet {
    testnet(1500, 1)
}

#[test]
fn ingress_loss_drops_about_the_configured_fraction() {
    let net = net();
    let imp = {
        let _g = net.b.ns.enter().unwrap();
        Impairment::attach(&net.b.iface, Hook::Ingress, ImpairConfig::loss(30.0)).unwrap()
    };
    let tap = tcp_tap(&net.b);
    const N: usize = 2000;
    send(&net.a, &net.b, PORT, N);
    let c = wait_seen(&imp, N as u64);
    let got = count(&tap, PORT, (c.seen - c.dropped) as usize);
    assert_eq!(c.seen, N as u64, "{c:?}");
    // Binomial(2000, 0.3): mean 600, sd 20.5; ±150 is over 7 sd.
    assert!((450..=750).contains(&c.dropped), "{c:?}");
    assert_eq!(
        got as u64,
        c.seen - c.dropped,
        "the tap saw what was not dropped"
    );
    assert_eq!(c.duplicated, 0);
}

/// The sequence numbers of the tap's TCP packets to `port`: reads until
/// `want` have come (bounded by a minute), then until it is quiet for 300 ms.
fn tap_seqs(mut tap: &Socket, port: u16, want: usize) -> Vec<u32> {
    let mut seqs = Vec::new();
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let quiet = seqs.len() >= want || Instant::now() > deadline;
        let wait = Duration::from_millis(if quiet { 300 } else { 100 });
        tap.set_read_timeout(Some(wait)).unwrap();
        match tap.read(&mut buf) {
            Ok(len) if len >= 28 => {
                let ihl = usize::from(buf[0] & 0xf) * 4;
                let t = &buf[ihl..];
                if u16::from_be_bytes([t[2], t[3]]) == port {
                    seqs.push(u32::from_be_bytes([t[4], t[5], t[6], t[7]]));
                }
            }
            Ok(_) => {}
            Err(_) if quiet => return seqs,
            Err(_) => {}
        }
    }
}

/// `drop_nth` drops the Nth packet without SYN, and only it, whatever the
/// rate (here none); setting the rates again counts from there.
#[test]
fn the_nth_packet_without_syn_is_dropped_for_sure() {
    let net = net();
    let cfg = ImpairConfig {
        port: Some(PORT),
        drop_nth: 5,
        ..ImpairConfig::default()
    };
    let mut imp = {
        let _g = net.b.ns.enter().unwrap();
        Impairment::attach(&net.b.iface, Hook::Ingress, cfg).unwrap()
    };
    let tap = tcp_tap(&net.b);
    let syn = {
        let b = etherparse::PacketBuilder::ethernet2(net.a.mac, net.b.mac)
            .ipv4(net.a.ip4.octets(), net.b.ip4.octets(), 64)
            .tcp(40000, PORT, 1000, 65535)
            .syn();
        let mut out = Vec::with_capacity(b.size(0));
        b.write(&mut out, &[]).unwrap();
        out
    };
    let send_seqs = |seqs: std::ops::Range<u32>| {
        let _g = net.a.ns.enter().unwrap();
        let raw = raw_ip_sender();
        for seq in seqs {
            send_ip(
                &raw,
                &tcp_frame(&net.a, &net.b, 40000, PORT, seq, b"nth"),
                net.b.ip4,
            );
        }
    };
    {
        let _g = net.a.ns.enter().unwrap();
        send_ip(&raw_ip_sender(), &syn, net.b.ip4);
    }
    send_seqs(0..10);
    let c = wait_seen(&imp, 11);
    assert_eq!((c.seen, c.dropped), (11, 1), "{c:?}");
    // The SYN passed and was not counted: the fifth of the others went.
    let mut want = vec![1000];
    want.extend((0..10).filter(|&s| s != 4));
    assert_eq!(tap_seqs(&tap, PORT, want.len()), want);
    imp.set(cfg).unwrap();
    send_seqs(100..110);
    let c = wait_seen(&imp, 21);
    assert_eq!((c.seen, c.dropped), (21, 2), "{c:?}");
    let want: Vec<u32> = (100..110).filter(|&s| s != 104).collect();
    assert_eq!(tap_seqs(&tap, PORT, want.len()), want);
}

#[test]
fn duplication_and_port_filter() {
    let net = net();
    let imp = {
        let _g = net.b.ns.enter().unwrap();
        Impairment::attach(
            &net.b.iface,
            Hook::Ingress,
            ImpairConfig {
                dup_ppm: 1_000_000,
                port: Some(PORT),
                ..ImpairConfig::default()
            },
        )
        .unwrap()
    };
    let tap = tcp_tap(&net.b);
    send(&net.a, &net.b, PORT, 60);
    send(&net.a, &net.b, PORT + 1, 30);
    // Count both ports from one pass over the tap.
    let [on_port, other] = read_tap(&tap, [PORT, PORT + 1], |n| n[0] >= 120 && n[1] >= 30);
    let c = imp.counters().unwrap();
    assert_eq!((c.seen, c.duplicated, c.dropped), (60, 60, 0), "{c:?}");
    assert_eq!(on_port, 120, "every packet to the port arrived twice");
    assert_eq!(other, 30, "other ports untouched");
}

#[test]
fn egress_loss_impairs_what_the_peer_kernel_sends() {
    let net = net();
    let mut imp = {
        let _g = net.b.ns.enter().unwrap();
        Impairment::attach(&net.b.iface, Hook::Egress, ImpairConfig::loss(100.0)).unwrap()
    };
    let tap = tcp_tap(&net.a);
    send(&net.b, &net.a, PORT, 50);
    // Nothing arrives once the program has seen (and dropped) all 50.
    wait_seen(&imp, 50);
    assert_eq!(count(&tap, PORT, 0), 0, "all dropped on the way out");
    imp.set(ImpairConfig::default()).unwrap();
    send(&net.b, &net.a, PORT, 50);
    assert_eq!(count(&tap, PORT, 50), 50, "rates change at run time");
    let c = imp.counters().unwrap();
    assert_eq!((c.seen, c.dropped), (100, 50), "{c:?}");
}

/// `Tcp:` counters of `side`'s kernel: segments sent (`OutSegs +
/// RetransSegs`) and, of those, retransmitted (`RetransSegs`).
fn kernel_out(side: &Side) -> (u64, u64) {
    let out = side
        .ns
        .command("cat")
        .arg("/proc/net/snmp")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap(), tcp.next().unwrap());
    let field = |name: &str| -> u64 {
        let at = names.split_whitespace().position(|n| n == name).unwrap();
        values.split_whitespace().nth(at).unwrap().parse().unwrap()
    };
    (
        field("OutSegs") + field("RetransSegs"),
        field("RetransSegs"),
    )
}

/// Loss on the way out is loss on a wire: the kernel sending through it
/// believes each dropped segment sent and recovers it by retransmission,
/// and the segments the program counts as repeated (starting below their
/// flow's highest sequence number) are exactly those the kernel counts as
/// retransmitted. The same count is what checks xtcp's own
/// (`engine/tests/engine.rs`, `lossy`).
#[test]
fn egress_loss_is_recovered_as_loss_and_repeats_are_the_kernels_retransmissions() {
    use std::io::Write;
    let net = net();
    let port = PORT + 7;
    let cfg = ImpairConfig {
        port: Some(port),
        ..ImpairConfig::loss(2.0)
    };
    let (out, back) = {
        let _g = net.b.ns.enter().unwrap();
        (
            Impairment::attach(&net.b.iface, Hook::Egress, cfg).unwrap(),
            Impairment::attach(&net.b.iface, Hook::Ingress, cfg).unwrap(),
        )
    };
    let listener = {
        let _g = net.a.ns.enter().unwrap();
        std::net::TcpListener::bind((net.a.ip4, port)).unwrap()
    };
    const LEN: usize = 16 << 20;
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut n = 0;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match s.read(&mut buf).unwrap() {
                0 => return n,
                k => n += k,
            }
        }
    });
    let before = kernel_out(&net.b);
    {
        let mut s = {
            let _g = net.b.ns.enter().unwrap();
            std::net::TcpStream::connect((net.a.ip4, port)).unwrap()
        };
        s.write_all(&vec![7u8; LEN]).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(reader.join().unwrap(), LEN);
    }
    // Every segment B's kernel sent passed the program; the program counts
    // it as it leaves, the kernel a moment before: wait for them to agree.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (c, (sent, rexmit)) = (out.counters().unwrap(), kernel_out(&net.b));
        let kernel = (sent - before.0, rexmit - before.1);
        if (c.seen, c.repeated) == kernel {
            eprintln!("B's kernel sent and retransmitted {kernel:?}; the program {c:?}");
            assert!(c.dropped > 0 && c.repeated > 0, "{c:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "B's kernel sent and retransmitted {kernel:?}; the program {c:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(back.counters().unwrap().dropped > 0);
}
