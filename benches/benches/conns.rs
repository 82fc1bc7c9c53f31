//! One worker's per-segment cost against the number of connections it
//! holds (issue 14: "per-packet cost flat from 1 to 1,000 connections"):
//! each iteration is one full-sized data segment of one connection — the
//! 4-tuple lookup in the worker's own table (`worker::table::Table`, the
//! hash index the worker finds a packet's connection with), then the TCP
//! receive path behind it (`handle_segment_with`, the payload delivered in
//! place as the engine's sinks take it), the ACK it makes every second
//! segment, and the sender's handling of that ACK and its next segment
//! from a zero-filled send buffer. The connections take turns in a fixed
//! shuffled order, as interleaved flows arrive, so with more of them each
//! segment touches a connection whose state is further from the cache.
//! No wire encoding or checksums (the criterion benches `segmentation` and
//! `checksum` measure those; they do not depend on the connection count).
//! `segment_scan` is the same with the connection found by comparing every
//! one held in turn, as the worker did before its hash index.
//!
//! `listener/flood_syn` is a listener's cost of a SYN it drops (a flood
//! against a full half-open table) against how many half-open connections
//! it holds.
//!
//! Measured in thread CPU time; figures in docs/BENCHMARKS.md, "Many
//! streams on one queue".
//!
//! `cargo bench -p xtcp-benches --bench conns` (one group:
//! `-- listener/`)

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use xtcp_benches::ThreadCpuTime;
use xtcp_engine::tcp::{Config, Connection, FourTuple, IsnGenerator, RecvWindow, State};
use xtcp_engine::worker::table::Table;

/// MSS 1460 with timestamps: 1448 bytes of payload per segment.
const MSS: u16 = 1460;

fn cfg() -> Config {
    Config {
        mss: MSS,
        send_frames: 16,
        recv_buffer: 256 << 10,
        recv_window: RecvWindow::Fixed(256 << 10),
        ..Config::default()
    }
}

/// `n` connections established in memory: the senders, and their
/// receiving ends in a worker table.
struct Conns {
    senders: Vec<Connection>,
    receivers: Table<Connection>,
    /// Which sender goes next: a fixed shuffle of 0..n, cycled.
    order: Vec<usize>,
    next: usize,
    now: Instant,
    segments: u64,
    delivered: u64,
}

/// A segment's payload of zeros.
static ZEROS: [u8; MSS as usize] = [0; MSS as usize];

fn tuple(i: usize) -> FourTuple {
    FourTuple {
        local: SocketAddr::from(([198, 18, 0, 2], 10_000 + i as u16)),
        remote: SocketAddr::from(([198, 18, 0, 1], 5201)),
    }
}

impl Conns {
    fn new(n: usize) -> Conns {
        let now = Instant::now();
        let isn = IsnGenerator::new(7, now);
        let mut senders = Vec::with_capacity(n);
        let mut receivers = Table::new(n);
        for i in 0..n {
            let t = tuple(i);
            let back = FourTuple {
                local: t.remote,
                remote: t.local,
            };
            let mut a = Connection::connect(cfg(), t, &isn, now);
            let syn = a.poll_transmit(now).expect("a SYN");
            let mut b = Connection::accept(cfg(), back, &isn, now, &syn.repr).expect("accepted");
            let synack = b.poll_transmit(now).expect("a SYN-ACK");
            a.handle_segment(now, &synack.repr, &[]);
            let ack = a.poll_transmit(now).expect("the handshake's ACK");
            b.handle_segment(now, &ack.repr, &[]);
            assert_eq!(
                (a.state(), b.state()),
                (State::Established, State::Established)
            );
            senders.push(a);
            assert!(receivers.insert(b).is_ok(), "room for n");
        }
        // A fixed shuffle (xorshift Fisher–Yates).
        let mut order: Vec<usize> = (0..n).collect();
        let mut x = 0x9e37_79b9_u64;
        for i in (1..n).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        Conns {
            senders,
            receivers,
            order,
            next: 0,
            now,
            segments: 0,
            delivered: 0,
        }
    }

    /// One data segment of the next connection, its lookup and receipt,
    /// and the ACK back; `scan` finds the connection by comparing the
    /// tuple of every one held in turn, as the worker did before its hash
    /// index (the reference the index is measured against).
    // Not inlined: a profiler can then count one call a segment.
    #[inline(never)]
    fn segment(&mut self, scan: bool) {
        let i = self.order[self.next];
        self.next = (self.next + 1) % self.order.len();
        self.now += Duration::from_micros(1);
        let now = self.now;
        let a = &mut self.senders[i];
        // One segment's worth more for each one sent (zeros: no byte is
        // written; a full buffer takes less).
        a.fill_zeros(usize::from(MSS)).expect("an open connection");
        let Some(s) = a.poll_transmit(now) else {
            panic!(
                "connection {i}: nothing to send after {} segments: {} buffered, {:?}",
                self.segments,
                a.send_buffered(),
                a.stats()
            );
        };
        // The payload as the receiver gets it: the segment's length of
        // zeros (what the sender's buffer holds), from one buffer. On the
        // engine's path no CPU reads payload here — the sender hands its
        // frames to the device by reference and the receiver takes it in
        // place from the RX frame — so neither does the bench.
        let (x, y) = a.payload(&s);
        let x = &ZEROS[..x.len() + y.len()];
        // The worker's lookup: our address and port, the peer's.
        let t = a.tuple();
        let pos = if scan {
            // Every position is held (none was removed), so the n-th held
            // connection is at position n.
            self.receivers
                .iter()
                .position(|b| {
                    let u = b.tuple();
                    u.local == t.remote && u.remote == t.local
                })
                .expect("found")
        } else {
            self.receivers.find(&t.remote, &t.local).expect("found")
        };
        let b = self.receivers.get_mut(pos).expect("held");
        let mut took = 0;
        b.handle_segment_with(now, &s.repr, x, &mut |d| {
            took += d.len();
            black_box(d).len()
        });
        self.delivered += took as u64;
        self.segments += 1;
        if let Some(ack) = b.poll_transmit(now) {
            a.handle_segment(now, &ack.repr, &[]);
        }
    }
}

/// A listener holding `n` half-open connections (its table full: at most
/// `n`), and a flood SYN from a new peer each iteration: the lookup, the
/// drop, and what a worker's turn asks of the listener after it (its
/// output, its next deadline).
fn flood_syn(c: &mut Criterion<ThreadCpuTime>) {
    use xtcp_engine::tcp::Listener;
    use xtcp_engine::wire::{SeqNumber, TcpFlags, TcpOptions, TcpRepr};
    let syn = |i: u32| TcpRepr {
        src_port: 1024 + (i % 60_000) as u16,
        dst_port: 5201,
        seq: SeqNumber(i.wrapping_mul(7919)),
        ack: SeqNumber(0),
        flags: TcpFlags::SYN,
        window: 65535,
        urgent: 0,
        options: TcpOptions::NONE,
    };
    let peer = |i: u32| {
        SocketAddr::from((
            std::net::Ipv4Addr::from(0x0a00_0000 + i),
            1024 + (i % 60_000) as u16,
        ))
    };
    let mut g = c.benchmark_group("listener");
    g.throughput(Throughput::Elements(1));
    for n in [1usize, 16, 256, 1024] {
        let now = Instant::now();
        let local = SocketAddr::from(([198, 18, 0, 2], 5201));
        let mut l = Listener::new(cfg(), local, IsnGenerator::new(1, now), n, 8);
        for i in 0..n as u32 {
            l.handle_segment(now, peer(i), &syn(i), &[]);
            while l.poll_transmit(now).is_some() {}
        }
        assert_eq!(l.half_open_count(), n);
        let mut i = n as u32;
        g.bench_with_input(BenchmarkId::new("flood_syn", n), &n, |b, _| {
            b.iter(|| {
                i = i.wrapping_add(1);
                l.handle_segment(now, peer(i), &syn(i), &[]);
                while l.poll_transmit(now).is_some() {}
                black_box(l.poll_timeout())
            })
        });
        // Every flood SYN was dropped (the table was full), none answered.
        assert_eq!(l.stats().syns_accepted, n as u64);
        assert_eq!(l.half_open_count(), n);
    }
    g.finish();
}

fn bench(c: &mut Criterion<ThreadCpuTime>) {
    let mut g = c.benchmark_group("conns");
    g.throughput(Throughput::Elements(1));
    for (name, scan) in [("segment", false), ("segment_scan", true)] {
        for n in [1usize, 10, 100, 1000] {
            let mut conns = Conns::new(n);
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, _| {
                b.iter(|| conns.segment(scan))
            });
            // Every segment was found, delivered whole, and nothing was sent
            // twice.
            assert_eq!(conns.delivered, conns.segments * u64::from(MSS - 12));
            for a in &conns.senders {
                assert_eq!(a.stats().retransmits, 0);
            }
        }
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(ThreadCpuTime)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench, flood_syn
}
criterion_main!(benches);
