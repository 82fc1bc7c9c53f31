//! The TCP core alone: two connections in memory, no loss, segments handed
//! over as parsed headers with the payload by reference (no wire encoding, no
//! checksums). Throughput is payload bytes moved per second of one core.
//! `copy` variants include the two copies (application → send buffer with
//! `write`, segment → receive buffer); `inplace` variants append zeros
//! (`fill_zeros`: a slot that holds zeros is not touched again), leaving the
//! receive-side copy. The reader always consumes by reference; `direct`
//! variants also receive in place: each in-order payload is handed to the
//! reader where it lies (`handle_segment_with`, as the engine's count and
//! discard sinks take it from the RX frame), so no byte is copied at all.
//!
//! Figures: docs/BENCHMARKS.md, "TCP core alone".
//!
//! `cargo bench -p xtcp-benches --bench tcp_sim`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::{Duration, Instant};
use xtcp_engine::tcp::{Config, Connection, FourTuple, IsnGenerator, RecvWindow, State};

const CHUNK: usize = 16 << 20;

/// How payload moves: see the module doc.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Copy,
    InPlace,
    Direct,
}

struct Pair {
    a: Connection,
    b: Connection,
    now: Instant,
    src: Vec<u8>,
    scratch: Vec<u8>,
    direct: bool,
}

fn cfg(mss: u16) -> Config {
    Config {
        mss,
        send_frames: 512,
        recv_buffer: 4 << 20,
        recv_window: RecvWindow::Fixed(4 << 20),
        ..Config::default()
    }
}

impl Pair {
    fn new(mss: u16) -> Pair {
        let now = Instant::now();
        let isn = IsnGenerator::new(1, now);
        let t = FourTuple {
            local: "10.0.0.1:40000".parse().unwrap(),
            remote: "10.0.0.2:5201".parse().unwrap(),
        };
        let back = FourTuple {
            local: t.remote,
            remote: t.local,
        };
        let mut a = Connection::connect(cfg(mss), t, &isn, now);
        let syn = a.poll_transmit(now).unwrap();
        let b = Connection::accept(cfg(mss), back, &isn, now, &syn.repr).unwrap();
        let mut p = Pair {
            a,
            b,
            now,
            src: vec![0x5a; 1 << 20],
            scratch: Vec::with_capacity(65536),
            direct: false,
        };
        p.pump();
        assert_eq!(p.a.state(), State::Established);
        assert_eq!(p.b.state(), State::Established);
        p
    }

    /// Moves segments both ways until quiet; 10 µs of virtual time per round.
    fn pump(&mut self) -> bool {
        let mut any = false;
        loop {
            self.now += Duration::from_micros(10);
            let mut moved = false;
            while let Some(s) = self.a.poll_transmit(self.now) {
                let (x, y) = self.a.payload(&s);
                let payload: &[u8] = if y.is_empty() {
                    x
                } else {
                    self.scratch.clear();
                    self.scratch.extend_from_slice(x);
                    self.scratch.extend_from_slice(y);
                    &self.scratch
                };
                if self.direct {
                    self.b
                        .handle_segment_with(self.now, &s.repr, payload, &mut |d| {
                            black_box(d).len()
                        });
                } else {
                    self.b.handle_segment(self.now, &s.repr, payload);
                }
                moved = true;
            }
            let n = self.b.readable();
            self.b.consume(self.now, n);
            while let Some(s) = self.b.poll_transmit(self.now) {
                self.a.handle_segment(self.now, &s.repr, &[]);
                moved = true;
            }
            if let Some(t) = self.a.poll_timeout()
                && t <= self.now
            {
                self.a.handle_timeout(self.now);
            }
            if let Some(t) = self.b.poll_timeout()
                && t <= self.now
            {
                self.b.handle_timeout(self.now);
            }
            if !moved {
                return any;
            }
            any = true;
        }
    }

    /// Sends `len` bytes from `a` to `b`.
    fn transfer(&mut self, len: usize, mode: Mode) {
        self.direct = mode == Mode::Direct;
        let mut left = len;
        while left > 0 {
            let n = left.min(self.src.len());
            let w = if mode == Mode::Copy {
                self.a.write(&self.src[..n]).unwrap()
            } else {
                self.a.fill_zeros(n).unwrap()
            };
            left -= w;
            if !self.pump() && w == 0 {
                // Only the delayed ACK is pending: let its timer fire.
                self.now += Duration::from_millis(50);
                self.b.handle_timeout(self.now);
                self.pump();
            }
        }
        while self.a.send_buffered() > 0 {
            if !self.pump() {
                self.now += Duration::from_millis(50);
                self.b.handle_timeout(self.now);
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("tcp_core");
    g.throughput(Throughput::Bytes(CHUNK as u64));
    g.sample_size(10);
    for mss in [1460u16, 8192 + 12] {
        for (mode, label) in [
            (Mode::Copy, "copy"),
            (Mode::InPlace, "inplace"),
            (Mode::Direct, "direct"),
        ] {
            let mut p = Pair::new(mss);
            let name = format!("mss{}_{label}", mss - 12);
            g.bench_function(name, |bch| {
                bch.iter(|| {
                    p.transfer(black_box(CHUNK), mode);
                })
            });
            let st = p.a.stats();
            assert_eq!(st.retransmits, 0);
            if mode == Mode::Direct {
                let rx = p.b.stats();
                assert_eq!(
                    rx.bytes_delivered_direct, rx.bytes_received,
                    "nothing copied"
                );
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
