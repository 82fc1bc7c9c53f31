//! Deterministic simulation: a client [`Connection`] and a server [`Listener`]
//! (and the connection it accepts) joined by two simulated links, on a virtual
//! clock.
//!
//! Each link has a bandwidth (serialisation delay), a propagation delay, a
//! queue limit in packets (tail drop), seeded random loss, reordering (extra
//! delay for a packet), duplication, corruption (one flipped bit; the receiving
//! side verifies the checksum and drops the packet) and an MTU (larger packets
//! are dropped, as veth does). Segments cross the links as real bytes: emitted
//! with [`TcpRepr::emit`], checksummed over an IPv4 pseudo-header, parsed back.
//!
//! Each endpoint runs a bulk application: it writes `to_send` bytes of a
//! position-dependent pattern, then closes; it reads everything and checks
//! every byte against the peer's pattern, so loss, duplication or reordering
//! of delivered data shows as a [`AppStats::corrupt_bytes`] count.
//!
//! Drive with [`Sim::step`] (one instant of virtual time), [`Sim::drive`]
//! (until nothing is left to happen) or [`Sim::drive_bounded`] (with a
//! virtual-time limit). The same [`SimConfig`] gives the same run: the clock
//! starts at one `Instant::now()` and only offsets from it ever matter, and all
//! randomness comes from [`XorShift`] streams derived from the seed.

use super::conn::reset_for;
use super::isn::{IsnGenerator, XorShift};
use super::{CloseReason, Config, Connection, Event, FourTuple, Listener, Segment, State};
use crate::wire::checksum;
use crate::wire::{SackBlocks, SeqNumber, TcpFlags, TcpPacket, TcpRepr, TcpTimestamp};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// One direction of the simulated path.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// Bits per second.
    pub bandwidth: u64,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Packets waiting for serialisation beyond which arrivals are dropped.
    pub queue_limit: usize,
    /// Probability a packet is lost.
    pub loss: f64,
    /// Probability a packet is delayed by up to `reorder_delay` extra.
    pub reorder: f64,
    /// Largest extra delay of a reordered packet.
    pub reorder_delay: Duration,
    /// Probability a packet is delivered twice.
    pub duplicate: f64,
    /// Probability a packet has one bit flipped.
    pub corrupt: f64,
    /// Probability that a forged copy of a packet arrives too: its flags,
    /// sequence and acknowledgement numbers (mostly near the real ones),
    /// window, options (SACK blocks anywhere around the ACK, timestamps, MSS,
    /// window scale) and payload changed at random, its checksum valid. The
    /// receiver must take these as it takes any segment; what it delivers is
    /// then no longer only the sender's bytes.
    pub forge: f64,
    /// Largest IP packet (20-byte IPv4 header included).
    pub mtu: usize,
    /// A packet above the MTU is answered with an ICMP "packet too big"
    /// (RFC 1191), which reaches its sender one `delay` later, as a
    /// router at the link's start sends it; false: dropped without a word
    /// (an MTU black hole).
    pub too_big: bool,
    /// Packets are delivered only at multiples of this (from the first
    /// send), in bunches, as a peer that acknowledges late does (zero:
    /// when they arrive) ...
    pub batch: Duration,
    /// ... once this long has passed since the first send.
    pub batch_from: Duration,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            bandwidth: 1_000_000_000,
            delay: Duration::from_millis(5),
            queue_limit: 1000,
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(2),
            duplicate: 0.0,
            corrupt: 0.0,
            forge: 0.0,
            mtu: 1500,
            too_big: false,
            batch: Duration::ZERO,
            batch_from: Duration::ZERO,
        }
    }
}

/// Link counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets offered.
    pub sent: u64,
    /// Packets delivered (duplicates included).
    pub delivered: u64,
    /// Dropped: queue full.
    pub queue_drops: u64,
    /// Dropped: random loss.
    pub lost: u64,
    /// Dropped: above the MTU.
    pub mtu_drops: u64,
    /// Of those, answered with a "packet too big" ([`LinkConfig::too_big`]).
    pub too_big_sent: u64,
    /// Delivered late (reordered).
    pub reordered: u64,
    /// Delivered twice.
    pub duplicated: u64,
    /// Corrupted (and dropped by the receiver's checksum check).
    pub corrupted: u64,
    /// Forged copies sent along (see [`LinkConfig::forge`]).
    pub forged: u64,
    /// Bytes delivered (IP packets).
    pub bytes_delivered: u64,
    /// Most packets ever waiting for serialisation at once.
    pub max_queue: u64,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Instant,
    id: u64,
    slot: usize,
}

#[derive(Debug)]
struct Link {
    cfg: LinkConfig,
    rng: XorShift,
    /// Forgery's own draws, so that the other impairments of a seed stay
    /// what they were without it.
    forge_rng: XorShift,
    /// Source and destination, for a forged packet's checksum.
    ends: (SocketAddr, SocketAddr),
    free_at: Option<Instant>,
    /// When the first packet was offered (`LinkConfig::batch` counts from it).
    epoch: Option<Instant>,
    departures: VecDeque<Instant>,
    heap: BinaryHeap<Reverse<InFlight>>,
    slots: Vec<Vec<u8>>,
    free_slots: Vec<usize>,
    next_id: u64,
    /// Indices (in `stats.sent` order, from 1) of packets to drop.
    drop_list: Vec<u64>,
    /// "Packet too big" on their way back to the sender: when they arrive,
    /// the refused segment's sequence number and IP length.
    too_big: VecDeque<(Instant, SeqNumber, usize)>,
    stats: LinkStats,
}

impl Link {
    fn new(cfg: LinkConfig, seed: u64, ends: (SocketAddr, SocketAddr)) -> Link {
        Link {
            cfg,
            rng: XorShift::new(seed),
            forge_rng: XorShift::new(seed ^ 0x6f72_6765_6420_6f6b),
            ends,
            free_at: None,
            epoch: None,
            departures: VecDeque::new(),
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            next_id: 0,
            drop_list: Vec::new(),
            too_big: VecDeque::new(),
            stats: LinkStats::default(),
        }
    }

    fn slot(&mut self) -> usize {
        match self.free_slots.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Vec::with_capacity(2048));
                self.slots.len() - 1
            }
        }
    }

    fn next_arrival(&self) -> Option<Instant> {
        let icmp = self.too_big.front().map(|t| t.0);
        self.heap
            .peek()
            .map(|r| r.0.at)
            .into_iter()
            .chain(icmp)
            .min()
    }

    /// The next "packet too big" due by `now`: the segment's sequence
    /// number and IP length.
    fn pop_too_big(&mut self, now: Instant) -> Option<(SeqNumber, usize)> {
        if self.too_big.front().is_some_and(|t| t.0 <= now) {
            self.too_big.pop_front().map(|(_, seq, len)| (seq, len))
        } else {
            None
        }
    }

    /// Offers an IP packet of `ip_len` bytes whose TCP part is in `slot`.
    fn send(&mut self, now: Instant, slot: usize, ip_len: usize) {
        self.stats.sent += 1;
        if ip_len > self.cfg.mtu {
            self.stats.mtu_drops += 1;
            if self.cfg.too_big
                && let Some(b) = self.slots[slot].get(4..8)
            {
                let seq = SeqNumber(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                self.too_big.push_back((now + self.cfg.delay, seq, ip_len));
                self.stats.too_big_sent += 1;
            }
            self.free_slots.push(slot);
            return;
        }
        while self.departures.front().is_some_and(|&d| d <= now) {
            self.departures.pop_front();
        }
        if self.departures.len() >= self.cfg.queue_limit {
            self.stats.queue_drops += 1;
            self.free_slots.push(slot);
            return;
        }
        let start = self.free_at.map_or(now, |f| f.max(now));
        let ser = Duration::from_nanos(
            (ip_len as u64 * 8 * 1_000_000_000).div_ceil(self.cfg.bandwidth.max(1)),
        );
        let depart = start + ser;
        self.free_at = Some(depart);
        self.departures.push_back(depart);
        self.stats.max_queue = self.stats.max_queue.max(self.departures.len() as u64);
        if self.drop_list.contains(&self.stats.sent) || self.rng.chance(self.cfg.loss) {
            self.stats.lost += 1;
            self.free_slots.push(slot);
            return;
        }
        let mut at = depart + self.cfg.delay;
        let epoch = *self.epoch.get_or_insert(now);
        let batch = self.cfg.batch.as_nanos();
        if batch > 0 && at >= epoch + self.cfg.batch_from {
            let since = at.saturating_duration_since(epoch).as_nanos();
            at = epoch
                + Duration::from_nanos(
                    u64::try_from(since.div_ceil(batch) * batch).unwrap_or(u64::MAX),
                );
        }
        if self.rng.chance(self.cfg.reorder) {
            self.stats.reordered += 1;
            let extra = self.rng.below(self.cfg.reorder_delay.as_nanos() as u64 + 1);
            at += Duration::from_nanos(extra);
        }
        if self.rng.chance(self.cfg.duplicate) {
            self.stats.duplicated += 1;
            let dup = self.slot();
            let (a, b) = if dup < slot {
                let (x, y) = self.slots.split_at_mut(slot);
                (&mut x[dup], &y[0])
            } else {
                let (x, y) = self.slots.split_at_mut(dup);
                (&mut y[0], &x[slot])
            };
            a.clear();
            a.extend_from_slice(b);
            let extra = self.rng.below(1_000_000);
            self.push(at + Duration::from_nanos(extra), dup);
        }
        if self.rng.chance(self.cfg.corrupt) {
            self.stats.corrupted += 1;
            let p = &mut self.slots[slot];
            let bit = self.rng.below(p.len() as u64 * 8) as usize;
            p[bit / 8] ^= 1 << (bit % 8);
        }
        if self.cfg.forge > 0.0 && self.forge_rng.chance(self.cfg.forge) {
            self.forge(at, slot);
        }
        self.push(at, slot);
    }

    /// Sends a forged copy of the packet in `slot` (see [`LinkConfig::forge`]),
    /// arriving up to a millisecond after `at`.
    fn forge(&mut self, at: Instant, slot: usize) {
        let Ok(pkt) = TcpPacket::new_checked(&self.slots[slot][..]) else {
            return;
        };
        let Ok(mut repr) = TcpRepr::parse(&pkt) else {
            return;
        };
        let real = self.slots[slot][pkt.header_len()..].to_vec();
        let r = &mut self.forge_rng;
        let span = [16u64, 1500, 65_536, 1 << 20][r.below(4) as usize];
        if r.chance(0.5) {
            repr.seq = near(r, repr.seq, span);
        }
        if r.chance(0.5) {
            repr.ack = near(r, repr.ack, span);
        }
        if r.chance(0.3) {
            repr.flags = TcpFlags(repr.flags.0 ^ (1 << r.below(8)));
        }
        if r.chance(0.05) {
            repr.flags = TcpFlags(r.next_u64() as u8);
        }
        if r.chance(0.3) {
            repr.window = [0, 1, r.next_u64() as u16, u16::MAX][r.below(4) as usize];
        }
        if r.chance(0.1) {
            repr.urgent = r.next_u64() as u16;
        }
        let o = &mut repr.options;
        if r.chance(0.1) {
            o.mss = [None, Some(0), Some(1), Some(r.next_u64() as u16)][r.below(4) as usize];
        }
        if r.chance(0.1) {
            o.window_scale =
                [None, Some(r.below(20) as u8), Some(r.next_u64() as u8)][r.below(3) as usize];
        }
        if r.chance(0.05) {
            o.sack_permitted = !o.sack_permitted;
        }
        if r.chance(0.3) {
            o.timestamp = match r.below(4) {
                0 => None,
                1 => Some(TcpTimestamp {
                    tsval: r.next_u64() as u32,
                    tsecr: r.next_u64() as u32,
                }),
                _ => o.timestamp.map(|t| TcpTimestamp {
                    tsval: near(r, SeqNumber(t.tsval), span).0,
                    tsecr: near(r, SeqNumber(t.tsecr), span).0,
                }),
            };
        }
        if r.chance(0.4) {
            // Up to four blocks around the ACK: inside the flight, beyond
            // it, below it, empty, reversed, or anywhere at all.
            let room = if o.timestamp.is_some() { 3 } else { 4 };
            let mut blocks = [(SeqNumber(0), SeqNumber(0)); 4];
            let n = r.below(room + 1) as usize;
            for b in &mut blocks[..n] {
                let left = near(r, repr.ack, span);
                let right = match r.below(4) {
                    0 => left,
                    1 => near(r, left, span),
                    _ => left + r.below(span + 1) as usize,
                };
                *b = (left, right);
            }
            o.sack = SackBlocks::from_slice(&blocks[..n]).unwrap_or(SackBlocks::EMPTY);
        }
        let payload = if r.chance(0.3) {
            match r.below(4) {
                0 => Vec::new(),
                1 => real[..r.below(real.len() as u64 + 1) as usize].to_vec(),
                2 => {
                    let mut p = real.clone();
                    p.extend((0..r.below(2000)).map(|i| i as u8));
                    p
                }
                _ => (0..r.below(9000)).map(|_| r.next_u64() as u8).collect(),
            }
        } else {
            real
        };
        let extra = Duration::from_nanos(self.forge_rng.below(1_000_000));
        let f = self.slot();
        let (from, to) = self.ends;
        let len = serialize(&mut self.slots[f], from, to, &repr, (&payload, &[]));
        if len == 0 {
            // The options did not fit a header.
            self.free_slots.push(f);
            return;
        }
        self.stats.forged += 1;
        self.push(at + extra, f);
    }

    fn push(&mut self, at: Instant, slot: usize) {
        self.next_id += 1;
        self.heap.push(Reverse(InFlight {
            at,
            id: self.next_id,
            slot,
        }));
    }

    fn pop_due(&mut self, now: Instant) -> Option<usize> {
        if self.heap.peek().is_some_and(|r| r.0.at <= now) {
            let r = self.heap.pop()?;
            self.stats.delivered += 1;
            self.stats.bytes_delivered += self.slots[r.0.slot].len() as u64 + 20;
            Some(r.0.slot)
        } else {
            None
        }
    }
}

/// What the bulk application saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppStats {
    /// Bytes written into the connection.
    pub written: u64,
    /// Bytes read from the connection.
    pub received: u64,
    /// Read bytes that differ from the peer's pattern at their offset.
    pub corrupt_bytes: u64,
    /// The peer's FIN was seen (end of stream).
    pub eof: bool,
    /// `Event::Connected` count.
    pub connected: u32,
    /// The close reason, once closed.
    pub closed: Option<CloseReason>,
    /// When the last byte was read.
    pub last_read_at: Option<Duration>,
    /// When the first byte was read.
    pub first_read_at: Option<Duration>,
}

/// The byte at stream offset `o` of a pattern stream with `seed`.
pub fn pattern(seed: u8, o: u64) -> u8 {
    (o as u8)
        .wrapping_add(((o >> 8) as u8).wrapping_mul(7))
        .wrapping_add(((o >> 16) as u8).wrapping_mul(13))
        ^ seed
}

#[derive(Debug)]
struct App {
    to_send: u64,
    seed: u8,
    peer_seed: u8,
    close_when_done: bool,
    reading: bool,
    close_called: bool,
    stats: AppStats,
}

/// A simulation's parameters.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Client connection parameters.
    pub client: Config,
    /// Server (listener) connection parameters.
    pub server: Config,
    /// Client → server link.
    pub c2s: LinkConfig,
    /// Server → client link.
    pub s2c: LinkConfig,
    /// Seed of everything random (ISN keys, link impairments).
    pub seed: u64,
    /// Bytes the client sends.
    pub client_bytes: u64,
    /// Bytes the server sends.
    pub server_bytes: u64,
    /// Both sides close after sending everything.
    pub close: bool,
    /// Half-open connections the listener holds.
    pub max_half_open: usize,
    /// Segments a connection may hand out at once
    /// ([`Connection::poll_transmit_gso`]; 1: one at a time).
    pub gso: usize,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            client: Config::default(),
            server: Config::default(),
            c2s: LinkConfig::default(),
            s2c: LinkConfig::default(),
            seed: 1,
            client_bytes: 100_000,
            server_bytes: 100_000,
            close: true,
            max_half_open: 16,
            gso: 1,
        }
    }
}

/// Two endpoints and the path between them.
#[derive(Debug)]
pub struct Sim {
    start: Instant,
    now: Instant,
    client_addr: SocketAddr,
    server_addr: SocketAddr,
    /// The client connection.
    pub client: Connection,
    /// The server's listener.
    pub listener: Listener,
    /// The server connection, once accepted.
    pub server: Option<Connection>,
    client_app: App,
    server_app: App,
    c2s: Link,
    s2c: Link,
    scratch: Vec<u8>,
    steps: u64,
    gso: usize,
    /// Segments dropped at a receiver for a bad checksum.
    pub checksum_drops: u64,
}

const IP_HEADER: usize = 20;

impl Sim {
    /// A simulation; the client's SYN is ready to go.
    pub fn new(cfg: SimConfig) -> Sim {
        let start = Instant::now();
        let client_addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 40000);
        let server_addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 5201);
        let mut seeds = XorShift::new(cfg.seed);
        let client_isn = IsnGenerator::new(seeds.next_u64(), start);
        let server_isn = IsnGenerator::new(seeds.next_u64(), start);
        let client = Connection::connect(
            cfg.client.clone(),
            FourTuple {
                local: client_addr,
                remote: server_addr,
            },
            &client_isn,
            start,
        );
        let listener = Listener::new(
            cfg.server.clone(),
            server_addr,
            server_isn,
            cfg.max_half_open,
            4,
        );
        Sim {
            start,
            now: start,
            client_addr,
            server_addr,
            client,
            listener,
            server: None,
            client_app: App {
                to_send: cfg.client_bytes,
                seed: 0x5a,
                peer_seed: 0xc3,
                close_when_done: cfg.close,
                reading: true,
                close_called: false,
                stats: AppStats::default(),
            },
            server_app: App {
                to_send: cfg.server_bytes,
                seed: 0xc3,
                peer_seed: 0x5a,
                close_when_done: cfg.close,
                reading: true,
                close_called: false,
                stats: AppStats::default(),
            },
            c2s: Link::new(cfg.c2s, seeds.next_u64(), (client_addr, server_addr)),
            s2c: Link::new(cfg.s2c, seeds.next_u64(), (server_addr, client_addr)),
            scratch: vec![0; 256 * 1024],
            steps: 0,
            gso: cfg.gso.max(1),
            checksum_drops: 0,
        }
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// The virtual clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Client application counters.
    pub fn client_app(&self) -> &AppStats {
        &self.client_app.stats
    }

    /// Server application counters.
    pub fn server_app(&self) -> &AppStats {
        &self.server_app.stats
    }

    /// Client → server link counters.
    pub fn c2s_stats(&self) -> LinkStats {
        self.c2s.stats
    }

    /// Server → client link counters.
    pub fn s2c_stats(&self) -> LinkStats {
        self.s2c.stats
    }

    /// Pauses or resumes reading on the server (a paused reader lets its
    /// window close).
    pub fn set_server_reading(&mut self, on: bool) {
        self.server_app.reading = on;
    }

    /// Pauses or resumes reading on the client.
    pub fn set_client_reading(&mut self, on: bool) {
        self.client_app.reading = on;
    }

    /// Mutable access to a link's parameters (client → server if `c2s`).
    pub fn link_mut(&mut self, c2s: bool) -> &mut LinkConfig {
        if c2s {
            &mut self.c2s.cfg
        } else {
            &mut self.s2c.cfg
        }
    }

    /// Drops the packets with these sequence numbers (1 = the first packet the
    /// link ever carries; see [`LinkStats::sent`]) on the client → server link
    /// (`c2s`) or the other one: scripted loss.
    pub fn drop_packets(&mut self, c2s: bool, which: &[u64]) {
        let link = if c2s { &mut self.c2s } else { &mut self.s2c };
        link.drop_list.extend_from_slice(which);
    }

    /// Injects a raw segment into the link towards the server (`to_server`) or the
    /// client, as if sent by the other side now.
    pub fn inject(&mut self, to_server: bool, repr: &TcpRepr, payload: &[u8]) {
        let now = self.now;
        let (link, src, dst) = if to_server {
            (&mut self.c2s, self.client_addr, self.server_addr)
        } else {
            (&mut self.s2c, self.server_addr, self.client_addr)
        };
        let slot = link.slot();
        let len = serialize(&mut link.slots[slot], src, dst, repr, (payload, &[]));
        link.send(now, slot, len + IP_HEADER);
    }

    fn next_event(&self) -> Option<Instant> {
        [
            self.c2s.next_arrival(),
            self.s2c.next_arrival(),
            self.client.poll_timeout(),
            self.server.as_ref().and_then(|c| c.poll_timeout()),
            self.listener.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Advances to the next event and processes everything due then.
    /// Returns false if nothing is left to happen.
    pub fn step(&mut self) -> bool {
        if self.steps == 0 {
            self.steps = 1;
            self.run_apps_and_flush();
            return true;
        }
        let Some(t) = self.next_event() else {
            return false;
        };
        self.now = self.now.max(t);
        self.steps += 1;
        let now = self.now;
        while let Some(slot) = self.c2s.pop_due(now) {
            self.deliver(true, slot);
        }
        while let Some(slot) = self.s2c.pop_due(now) {
            self.deliver(false, slot);
        }
        let mtu = |l: &Link| l.cfg.mtu as u32;
        while let Some((seq, len)) = self.c2s.pop_too_big(now) {
            self.client.on_packet_too_big(now, mtu(&self.c2s), seq, len);
        }
        while let Some((seq, len)) = self.s2c.pop_too_big(now) {
            if let Some(s) = &mut self.server {
                s.on_packet_too_big(now, mtu(&self.s2c), seq, len);
            }
        }
        if self.client.poll_timeout().is_some_and(|d| d <= now) {
            self.client.handle_timeout(now);
        }
        if let Some(s) = &mut self.server
            && s.poll_timeout().is_some_and(|d| d <= now)
        {
            s.handle_timeout(now);
        }
        if self.listener.poll_timeout().is_some_and(|d| d <= now) {
            self.listener.handle_timeout(now);
        }
        self.run_apps_and_flush();
        true
    }

    /// Steps until nothing is left to happen (panics after a very large bound,
    /// which means a livelock).
    pub fn drive(&mut self) {
        for _ in 0..50_000_000u64 {
            if !self.step() {
                return;
            }
        }
        panic!("simulation did not settle");
    }

    /// Steps until nothing is left or `limit` of virtual time has passed;
    /// true if it settled.
    pub fn drive_bounded(&mut self, limit: Duration) -> bool {
        let end = self.now + limit;
        loop {
            match self.next_event() {
                None if self.steps > 0 => return true,
                Some(t) if t > end => {
                    self.now = end;
                    return false;
                }
                _ => {
                    self.step();
                }
            }
        }
    }

    /// Steps while `cond` holds and something is left, within `limit`.
    pub fn drive_while(&mut self, limit: Duration, mut cond: impl FnMut(&Sim) -> bool) {
        let end = self.now + limit;
        while cond(self) {
            match self.next_event() {
                Some(t) if t <= end => {
                    self.step();
                }
                None if self.steps == 0 => {
                    self.step();
                }
                _ => return,
            }
        }
    }

    fn deliver(&mut self, to_server: bool, slot: usize) {
        let now = self.now;
        let (src, dst) = if to_server {
            (self.client_addr, self.server_addr)
        } else {
            (self.server_addr, self.client_addr)
        };
        let link = if to_server {
            &mut self.c2s
        } else {
            &mut self.s2c
        };
        let bytes = std::mem::take(&mut link.slots[slot]);
        link.free_slots.push(slot);
        let ok = (|| {
            let pkt = TcpPacket::new_checked(&bytes[..]).ok()?;
            let pseudo = pseudo(src, dst, bytes.len());
            if !pkt.verify_checksum(pseudo) {
                return None;
            }
            let repr = TcpRepr::parse(&pkt).ok()?;
            Some((repr, pkt.header_len()))
        })();
        match ok {
            None => self.checksum_drops += 1,
            Some((repr, hl)) => {
                let payload = &bytes[hl..];
                if to_server {
                    match &mut self.server {
                        Some(c) if c.state() != State::Closed || !c.is_drained() => {
                            c.handle_segment(now, &repr, payload)
                        }
                        _ => self.listener.handle_segment(now, src, &repr, payload),
                    }
                } else if self.client.is_drained() {
                    // Nobody home: answer like a closed port (RFC 9293 §3.10.7.1).
                    if let Some(rst) = reset_for(&repr, payload.len()) {
                        let slot = self.c2s.slot();
                        let len = serialize(&mut self.c2s.slots[slot], dst, src, &rst, (&[], &[]));
                        self.c2s.send(now, slot, len + IP_HEADER);
                    }
                } else {
                    self.client.handle_segment(now, &repr, payload);
                }
            }
        }
        let link = if to_server {
            &mut self.c2s
        } else {
            &mut self.s2c
        };
        link.slots[slot] = bytes;
    }

    fn run_apps_and_flush(&mut self) {
        let now = self.now;
        let elapsed = self.now - self.start;
        if self.server.is_none()
            && let Some(c) = self.listener.accept()
        {
            self.server = Some(c);
        }
        for _ in 0..4 {
            run_app(
                &mut self.client,
                &mut self.client_app,
                now,
                elapsed,
                &mut self.scratch,
            );
            if let Some(s) = &mut self.server {
                run_app(s, &mut self.server_app, now, elapsed, &mut self.scratch);
            }
            let mut any = flush(
                &mut self.client,
                &mut self.c2s,
                self.gso,
                now,
                self.client_addr,
                self.server_addr,
            );
            if let Some(s) = &mut self.server {
                any |= flush(
                    s,
                    &mut self.s2c,
                    self.gso,
                    now,
                    self.server_addr,
                    self.client_addr,
                );
            }
            while let Some((t, seg)) = self.listener.poll_transmit(now) {
                any = true;
                let slot = self.s2c.slot();
                let empty: Segment = seg;
                let len = serialize(
                    &mut self.s2c.slots[slot],
                    t.local,
                    t.remote,
                    &empty.repr,
                    (&[], &[]),
                );
                self.s2c.send(now, slot, len + IP_HEADER);
            }
            if !any {
                break;
            }
        }
    }
}

/// Puts what `c` has to send on `link` (bursts of up to `gso` segments, cut
/// into segments); whether anything went.
fn flush(
    c: &mut Connection,
    link: &mut Link,
    gso: usize,
    now: Instant,
    from: SocketAddr,
    to: SocketAddr,
) -> bool {
    let mut any = false;
    while let Some(burst) = c.poll_transmit_gso(now, gso) {
        any = true;
        for i in 0..burst.count() {
            let seg = burst.part(i);
            let slot = link.slot();
            let len = serialize(&mut link.slots[slot], from, to, &seg.repr, c.payload(&seg));
            link.send(now, slot, len + IP_HEADER);
        }
    }
    any
}

fn run_app(c: &mut Connection, app: &mut App, now: Instant, elapsed: Duration, scratch: &mut [u8]) {
    while let Some(ev) = c.poll_event() {
        match ev {
            Event::Connected => app.stats.connected += 1,
            Event::Closed(r) => app.stats.closed = Some(r),
            Event::Readable | Event::Writable | Event::Error(_) => {}
        }
    }
    if app.reading {
        loop {
            let n = c.read(now, scratch);
            if n == 0 {
                break;
            }
            for (i, &b) in scratch[..n].iter().enumerate() {
                if b != pattern(app.peer_seed, app.stats.received + i as u64) {
                    app.stats.corrupt_bytes += 1;
                }
            }
            app.stats.first_read_at.get_or_insert(elapsed);
            app.stats.received += n as u64;
            app.stats.last_read_at = Some(elapsed);
        }
        if c.read_closed() {
            app.stats.eof = true;
        }
    }
    if matches!(c.state(), State::Established | State::CloseWait) && !app.close_called {
        while app.stats.written < app.to_send {
            let want = ((app.to_send - app.stats.written) as usize)
                .min(scratch.len())
                .min(c.send_capacity());
            if want == 0 {
                break;
            }
            for (i, b) in scratch[..want].iter_mut().enumerate() {
                *b = pattern(app.seed, app.stats.written + i as u64);
            }
            let n = c.write(&scratch[..want]).unwrap_or(0);
            app.stats.written += n as u64;
            if n == 0 {
                break;
            }
        }
        if app.close_when_done && app.stats.written == app.to_send {
            app.close_called = true;
            c.close(now);
        }
    }
}

/// `s` moved by up to `span` either way, or (one time in eight) anywhere, or
/// (one in eight) unchanged.
fn near(r: &mut XorShift, s: SeqNumber, span: u64) -> SeqNumber {
    match r.below(8) {
        0 => SeqNumber(r.next_u64() as u32),
        1 => s,
        _ => SeqNumber(s.0.wrapping_add(r.below(2 * span + 1).wrapping_sub(span) as u32)),
    }
}

fn pseudo(src: SocketAddr, dst: SocketAddr, len: usize) -> u16 {
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => checksum::pseudo_v4(s, d, 6, len as u32),
        (IpAddr::V6(s), IpAddr::V6(d)) => checksum::pseudo_v6(&s, &d, 6, len as u32),
        _ => 0,
    }
}

/// Emits header + payload into `out` with a valid checksum; returns the TCP length.
fn serialize(
    out: &mut Vec<u8>,
    src: SocketAddr,
    dst: SocketAddr,
    repr: &TcpRepr,
    payload: (&[u8], &[u8]),
) -> usize {
    let hl = repr.header_len();
    let len = hl + payload.0.len() + payload.1.len();
    out.clear();
    out.resize(len, 0);
    let mut p = TcpPacket::new_unchecked(&mut out[..]);
    // A repr built by the connection always fits (options ≤ 40 bytes).
    if repr.emit(&mut p).is_err() {
        out.clear();
        return 0;
    }
    out[hl..hl + payload.0.len()].copy_from_slice(payload.0);
    out[hl + payload.0.len()..].copy_from_slice(payload.1);
    let mut p = TcpPacket::new_unchecked(&mut out[..]);
    p.fill_checksum(pseudo(src, dst, len));
    len
}
