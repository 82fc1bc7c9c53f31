//! A listening port (RFC 9293 LISTEN): passive opens with a bounded number of
//! half-open connections.
//!
//! Call order: [`Listener::handle_segment`] (or, with several addresses,
//! [`Listener::handle_segment_at`]) for every segment addressed to the
//! listening port that no established connection claims; [`Listener::handle_timeout`]
//! at [`Listener::poll_timeout`]; drain [`Listener::poll_transmit`]; take
//! established connections with [`Listener::accept`] (from then on the caller
//! routes their segments to them directly).
//!
//! Several listeners on one port (one per queue, each in its own worker):
//! a handshake's segments may come in on another queue than its SYN, so the
//! owner of each half-open connection is published through a
//! [`HalfOpenIndex`] (the workers' registry), which lets the others route
//! them to it instead of answering them with a reset.
//!
//! One listener serves a port on one or more addresses (an interface's IPv4
//! and IPv6 addresses, say), with one half-open table and one accept queue
//! for all of them; each family may have its own MSS
//! ([`Listener::add_address`]): an IPv6 header is 20 bytes longer.
//!
//! Work: a segment finds its half-open connection through a hash index,
//! and [`Listener::poll_transmit`] serves a queue of those that may have
//! output, so a SYN flood against a full table costs the same per SYN
//! however many are held; each connection's deadline is kept beside it
//! with the earliest cached, and [`Listener::handle_timeout`], when one is
//! due, reads those small entries and touches only the connections due.
//!
//! Memory: a half-open connection holds no buffers (they are allocated when
//! the handshake completes), at most `max_half_open` of them exist, and at most
//! `backlog` established connections wait in the accept queue; further SYNs are
//! dropped and counted, pending RSTs beyond a small queue likewise. While
//! its owner can keep no more connections ([`Listener::set_refusing`]), a
//! new SYN is answered with a reset instead.

use super::conn::reset_for;
use super::isn::IsnGenerator;
use super::send::{HeapFrames, SendMemory};
use super::{Config, Connection, FourTuple, Segment, State};
use crate::wire::{TcpFlags, TcpRepr};
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

const MAX_PENDING_RST: usize = 16;

/// What the listener keeps of each half-open connection beside it (same
/// position): small, so that a turn's work on a full table reads these,
/// not the connections.
#[derive(Debug, Clone, Copy)]
struct Entry {
    tuple: FourTuple,
    /// Its incarnation, to tell it from an earlier one of the same tuple
    /// in the queue of those with output.
    id: u64,
    /// Its earliest deadline, as of the last call into it.
    deadline: Option<Instant>,
    /// In the queue of those that may have output.
    queued: bool,
}

/// Listener counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ListenerStats {
    /// SYNs that created a half-open connection.
    pub syns_accepted: u64,
    /// SYNs dropped: the half-open table was full, or the [`HalfOpenIndex`]
    /// refused the flow (another listener took its SYN first).
    pub syns_dropped: u64,
    /// SYNs with FIN set, dropped as Linux drops them: a connection cannot
    /// open and close in one segment (a scanner's probe, or a forged one).
    pub syns_invalid: u64,
    /// SYNs answered with a reset while the listener refuses new
    /// connections ([`Listener::set_refusing`]): the peer's connect fails
    /// at once ("connection refused").
    pub syns_refused: u64,
    /// Handshakes completed.
    pub established: u64,
    /// Connections dropped because the accept queue was full.
    pub backlog_dropped: u64,
    /// Half-open connections that ended before completing (timeout, RST).
    pub half_open_expired: u64,
    /// Segments that were no SYN and matched no half-open connection
    /// (answered with a reset unless they are one).
    pub no_connection: u64,
    /// RSTs sent for segments that matched nothing.
    pub rst_sent: u64,
    /// RSTs not sent because the queue was full.
    pub rst_dropped: u64,
    /// The most half-open connections held at once (at most
    /// `max_half_open`).
    pub half_open_peak: u64,
}

impl ListenerStats {
    /// Adds another listener's counters (several queues: the peak is the
    /// larger one, each queue has its own half-open table).
    pub fn add(&mut self, o: &ListenerStats) {
        self.syns_accepted += o.syns_accepted;
        self.syns_dropped += o.syns_dropped;
        self.syns_invalid += o.syns_invalid;
        self.syns_refused += o.syns_refused;
        self.established += o.established;
        self.backlog_dropped += o.backlog_dropped;
        self.half_open_expired += o.half_open_expired;
        self.no_connection += o.no_connection;
        self.rst_sent += o.rst_sent;
        self.rst_dropped += o.rst_dropped;
        self.half_open_peak = self.half_open_peak.max(o.half_open_peak);
    }
}

/// Where the listeners of one port publish their half-open connections.
pub trait HalfOpenIndex: std::fmt::Debug + Send {
    /// A SYN is about to make a half-open connection of `tuple`: true if
    /// this listener may take it (the flow is not another's).
    fn claim(&mut self, tuple: &FourTuple) -> bool;
    /// The half-open connection of `tuple` ended without being established
    /// (timed out, reset, or dropped from a full accept queue). One that
    /// is established stays claimed: its new owner takes the claim over.
    fn forget(&mut self, tuple: &FourTuple);
}

/// A listening port. Its connections keep their send buffers in `M` (see
/// [`Connection`]); each starts as `M::default()`.
#[derive(Debug)]
pub struct Listener<M = HeapFrames> {
    cfg: Config,
    port: u16,
    /// The addresses served, each with the MSS its connections offer.
    addrs: Vec<(IpAddr, u16)>,
    isn: IsnGenerator,
    half_open: Vec<Connection<M>>,
    /// Beside `half_open`, position for position.
    entries: Vec<Entry>,
    /// Where each half-open connection is in `half_open` (capacity for
    /// twice `max_half_open`: never reallocated).
    at: HashMap<FourTuple, usize>,
    /// Half-open connections that may have output (tuple and incarnation;
    /// an entry whose connection went, or came again, is skipped).
    queue: VecDeque<(FourTuple, u64)>,
    next_id: u64,
    /// The earliest of the entries' deadlines, where known (`None` in
    /// `stale_min`: to be found again).
    min_deadline: Cell<Option<Instant>>,
    stale_min: Cell<bool>,
    max_half_open: usize,
    ready: VecDeque<Connection<M>>,
    backlog: usize,
    rst: VecDeque<(FourTuple, TcpRepr)>,
    stats: ListenerStats,
    /// Receive-window cap of new connections
    /// ([`Connection::set_recv_share`]).
    share: usize,
    /// Where the half-open connections are published, if anywhere.
    index: Option<Box<dyn HalfOpenIndex>>,
    /// New SYNs are answered with a reset ([`Listener::set_refusing`]).
    refusing: bool,
}

impl Listener<HeapFrames> {
    /// Listens on `local`; new connections use `cfg`.
    pub fn new(
        cfg: Config,
        local: SocketAddr,
        isn: IsnGenerator,
        max_half_open: usize,
        backlog: usize,
    ) -> Listener {
        Listener::with_memory(cfg, local, isn, max_half_open, backlog)
    }
}

impl<M: SendMemory + Default> Listener<M> {
    /// Like [`Listener::new`], for connections whose send buffers live in `M`.
    pub fn with_memory(
        cfg: Config,
        local: SocketAddr,
        isn: IsnGenerator,
        max_half_open: usize,
        backlog: usize,
    ) -> Listener<M> {
        Listener {
            port: local.port(),
            addrs: vec![(local.ip(), cfg.mss)],
            cfg,
            isn,
            half_open: Vec::with_capacity(max_half_open),
            entries: Vec::with_capacity(max_half_open),
            at: HashMap::with_capacity(2 * max_half_open),
            queue: VecDeque::with_capacity(max_half_open + 1),
            next_id: 0,
            min_deadline: Cell::new(None),
            stale_min: Cell::new(false),
            max_half_open,
            ready: VecDeque::with_capacity(backlog),
            backlog,
            rst: VecDeque::with_capacity(MAX_PENDING_RST),
            stats: ListenerStats::default(),
            share: usize::MAX,
            index: None,
            refusing: false,
        }
    }

    /// Serves the port on `ip` too; its connections offer `mss` (and take
    /// no more from their peers) where the configuration's is not meant
    /// for its family.
    pub fn add_address(&mut self, ip: IpAddr, mss: u16) {
        match self.addrs.iter_mut().find(|a| a.0 == ip) {
            Some(a) => a.1 = mss,
            None => self.addrs.push((ip, mss)),
        }
    }

    /// The interface's MTU fell to `mtu`: the MSS announced to new
    /// connections on each address is held to what it carries (IP and TCP
    /// headers off), as Linux announces its device's MTU's. Never raised.
    pub fn clamp_mss(&mut self, mtu: usize) {
        for (ip, mss) in &mut self.addrs {
            let headers = if ip.is_ipv4() { 40 } else { 60 };
            let most = u16::try_from(mtu.saturating_sub(headers)).unwrap_or(u16::MAX);
            *mss = (*mss).min(most.max(64));
        }
    }

    /// Whether segments to `local` are this listener's to handle.
    pub fn serves(&self, local: SocketAddr) -> bool {
        local.port() == self.port && self.addrs.iter().any(|a| a.0 == local.ip())
    }

    /// Publishes the half-open connections in `index` from now on.
    pub fn set_index(&mut self, index: Box<dyn HalfOpenIndex>) {
        self.index = Some(index);
    }

    /// Whether a half-open connection of `tuple` is held here.
    pub fn holds(&self, tuple: &FourTuple) -> bool {
        self.at.contains_key(tuple)
    }

    /// Counters.
    pub fn stats(&self) -> &ListenerStats {
        &self.stats
    }

    /// Half-open connections held now.
    pub fn half_open_count(&self) -> usize {
        self.half_open.len()
    }

    /// Memory held for half-open connections, bytes (the connection structs
    /// and their heap; data buffers are only allocated at establishment).
    pub fn half_open_memory(&self) -> usize {
        self.half_open
            .iter()
            .map(|c| std::mem::size_of::<Connection<M>>() + c.heap_bytes())
            .sum()
    }

    /// Established connections waiting for `accept`.
    pub fn ready_count(&self) -> usize {
        self.ready.len()
    }

    /// The first address served, and the port.
    pub fn local(&self) -> SocketAddr {
        SocketAddr::new(self.addrs[0].0, self.port)
    }

    /// Handles a segment from `remote` to the listening port at its first
    /// address ([`Listener::local`]).
    pub fn handle_segment(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        seg: &TcpRepr,
        payload: &[u8],
    ) {
        self.handle_segment_at(now, self.local(), remote, seg, &[payload]);
    }

    /// Handles a segment from `remote` to `local`, one of the addresses
    /// served ([`Listener::serves`]; the caller checks), the payload in
    /// consecutive parts (a packet spread over several receive frames).
    pub fn handle_segment_at(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        seg: &TcpRepr,
        parts: &[&[u8]],
    ) {
        let tuple = FourTuple { local, remote };
        if let Some(&i) = self.at.get(&tuple) {
            self.half_open[i].handle_segment_parts(now, seg, parts, &mut |_| 0);
            self.touch(i);
            self.enqueue(i);
            self.settle(i, now);
            return;
        }
        let payload_len: usize = parts.iter().map(|p| p.len()).sum();
        let f = seg.flags;
        if f.intersects(TcpFlags::RST | TcpFlags::ACK) || !f.contains(TcpFlags::SYN) {
            // Nothing here to acknowledge: reset, unless it is one (RFC
            // 9293 LISTEN rules).
            self.stats.no_connection += 1;
            if !f.contains(TcpFlags::RST) {
                self.queue_rst(tuple, seg, payload_len);
            }
            return;
        }
        if f.contains(TcpFlags::FIN) {
            self.stats.syns_invalid += 1;
            return;
        }
        if self.refusing {
            self.stats.syns_refused += 1;
            self.queue_rst(tuple, seg, payload_len);
            return;
        }
        if self.half_open.len() >= self.max_half_open
            || self.index.as_mut().is_some_and(|x| !x.claim(&tuple))
        {
            self.stats.syns_dropped += 1;
            return;
        }
        let mut cfg = self.cfg.clone();
        if let Some(a) = self.addrs.iter().find(|a| a.0 == local.ip()) {
            cfg.mss = a.1;
        }
        let Some(mut c) = Connection::accept_in(cfg, tuple, &self.isn, now, seg, M::default())
        else {
            if let Some(x) = self.index.as_mut() {
                x.forget(&tuple);
            }
            return;
        };
        if self.share != usize::MAX {
            c.set_recv_share(self.share);
        }
        self.stats.syns_accepted += 1;
        self.push(c);
        self.stats.half_open_peak = self.stats.half_open_peak.max(self.half_open.len() as u64);
    }

    /// Holds a new half-open connection (its SYN-ACK is ready to go).
    fn push(&mut self, c: Connection<M>) {
        let i = self.half_open.len();
        let tuple = c.tuple();
        self.at.insert(tuple, i);
        self.entries.push(Entry {
            tuple,
            id: self.next_id,
            deadline: None,
            queued: false,
        });
        self.next_id += 1;
        self.half_open.push(c);
        self.touch(i);
        self.enqueue(i);
    }

    /// Takes the half-open connection at `i` out (the last one moves there).
    fn remove(&mut self, i: usize) -> Connection<M> {
        let e = self.entries.swap_remove(i);
        self.at.remove(&e.tuple);
        if let Some(moved) = self.entries.get(i) {
            self.at.insert(moved.tuple, i);
        }
        if e.deadline.is_some() && e.deadline == self.min_deadline.get() {
            self.stale_min.set(true);
        }
        self.half_open.swap_remove(i)
    }

    /// Notes the deadline of the connection at `i` after a call into it.
    fn touch(&mut self, i: usize) {
        let d = self.half_open[i].poll_timeout();
        let e = &mut self.entries[i];
        let old = std::mem::replace(&mut e.deadline, d);
        let min = self.min_deadline.get();
        if old.is_some() && old == min && d != old {
            self.stale_min.set(true);
        } else if let Some(d) = d
            && !self.stale_min.get()
            && min.is_none_or(|m| d < m)
        {
            self.min_deadline.set(Some(d));
        }
    }

    /// Queues the connection at `i` as one that may have output.
    fn enqueue(&mut self, i: usize) {
        let e = &mut self.entries[i];
        if e.queued {
            return;
        }
        e.queued = true;
        if self.queue.len() == self.queue.capacity() {
            // Only what went or came again since it was queued is beyond
            // one an entry: drop those (no allocation).
            let (at, entries) = (&self.at, &self.entries);
            self.queue.retain(|(t, id)| {
                at.get(t)
                    .is_some_and(|&j| entries[j].id == *id && entries[j].queued)
            });
        }
        let e = &self.entries[i];
        self.queue.push_back((e.tuple, e.id));
    }

    fn queue_rst(&mut self, tuple: FourTuple, seg: &TcpRepr, payload_len: usize) {
        if let Some(r) = reset_for(seg, payload_len) {
            if self.rst.len() < MAX_PENDING_RST {
                self.rst.push_back((tuple, r));
            } else {
                self.stats.rst_dropped += 1;
            }
        }
    }

    /// Moves a half-open connection on if its handshake finished, and
    /// forgets it if it failed (once its last output, an RST, is drained).
    fn settle(&mut self, i: usize, now: Instant) {
        let st = self.half_open[i].state();
        if st == State::SynReceived {
            return;
        }
        if st == State::Closed {
            // Nobody else will read a failed half-open connection's events.
            while self.half_open[i].poll_event().is_some() {}
            if self.half_open[i].is_drained() {
                let c = self.remove(i);
                self.stats.half_open_expired += 1;
                if let Some(x) = self.index.as_mut() {
                    x.forget(&c.tuple());
                }
            }
            return;
        }
        let c = self.remove(i);
        if self.ready.len() >= self.backlog {
            self.stats.backlog_dropped += 1;
            if let Some(x) = self.index.as_mut() {
                x.forget(&c.tuple());
            }
            let mut c = c;
            c.abort(now);
            if let Some(seg) = c.poll_transmit(now) {
                if self.rst.len() < MAX_PENDING_RST {
                    self.rst.push_back((c.tuple(), seg.repr));
                } else {
                    self.stats.rst_dropped += 1;
                }
            }
            return;
        }
        self.stats.established += 1;
        self.ready.push_back(c);
    }

    /// Whether a new SYN is answered with a reset (the peer's connect is
    /// refused) instead of a SYN-ACK: set by the owner while it could not
    /// keep another connection, so that a peer is not let in only to be
    /// reset once it has sent. A SYN of a half-open connection held
    /// already is answered as before.
    pub fn set_refusing(&mut self, refusing: bool) {
        self.refusing = refusing;
    }

    /// Caps the receive window that connections accepted from now on offer,
    /// from their SYN-ACK on ([`Connection::set_recv_share`]).
    pub fn set_recv_share(&mut self, bytes: usize) {
        self.share = bytes;
    }

    /// An established connection, oldest first.
    pub fn accept(&mut self) -> Option<Connection<M>> {
        self.ready.pop_front()
    }

    /// Handles expired timers of the half-open connections (reading the
    /// entries, and only the connections whose deadline came).
    pub fn handle_timeout(&mut self, now: Instant) {
        // From the end: a connection that goes is replaced by one already
        // seen.
        let mut i = self.entries.len();
        while i > 0 {
            i -= 1;
            if self.entries[i].deadline.is_some_and(|t| t <= now) {
                self.half_open[i].handle_timeout(now);
                self.touch(i);
                self.enqueue(i);
                self.settle(i, now);
            }
        }
    }

    /// The earliest deadline of the half-open connections (found again
    /// from the entries only when the earliest one changed).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stale_min.get() {
            self.min_deadline
                .set(self.entries.iter().filter_map(|e| e.deadline).min());
            self.stale_min.set(false);
        }
        self.min_deadline.get()
    }

    /// The next segment to send, with its addresses (SYN-ACKs and RSTs; no
    /// payload).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<(FourTuple, Segment)> {
        if let Some((t, r)) = self.rst.pop_front() {
            self.stats.rst_sent += 1;
            return Some((t, Segment::single(r, 0, 0)));
        }
        // Those that may have output, in turn: one stays first while it
        // has more.
        while let Some(&(tuple, id)) = self.queue.front() {
            let Some(&i) = self.at.get(&tuple).filter(|&&i| {
                let e = &self.entries[i];
                e.id == id && e.queued
            }) else {
                self.queue.pop_front();
                continue;
            };
            let out = self.half_open[i].poll_transmit(now);
            self.touch(i);
            if let Some(seg) = out {
                return Some((tuple, seg));
            }
            self.queue.pop_front();
            self.entries[i].queued = false;
            self.settle(i, now);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::isn::XorShift;
    use crate::wire::{SeqNumber, TcpOptions};
    use std::time::Duration;

    /// The bookkeeping beside the half-open connections holds through
    /// random churn (new SYNs from a few dozen peers, their SYNs again,
    /// handshakes completed, resets, timeouts, accepts): each connection
    /// is found at its place, the earliest deadline is the connections'
    /// own, output drained leaves nothing queued, and neither the index
    /// nor the queue grows past what it was given (output left for later
    /// fills the queue with entries of connections gone).
    #[test]
    fn half_open_bookkeeping_holds_through_churn() {
        let t0 = Instant::now();
        let local: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let cfg = Config {
            syn_retries: 2,
            ..Config::default()
        };
        let mut l = Listener::new(cfg, local, IsnGenerator::new(3, t0), 8, 4);
        let (at_cap, queue_cap) = (l.at.capacity(), l.queue.capacity());
        let mut rng = XorShift::new(42);
        let mut now = t0;
        // The SYN-ACK each peer port got last: its ISS.
        let mut iss: HashMap<u16, SeqNumber> = HashMap::new();
        let mut established = 0u64;
        for step in 0..20_000u32 {
            let port = 1000 + (rng.next_u64() % 24) as u16;
            let peer = SocketAddr::new("10.0.0.1".parse().unwrap(), port);
            let seg = |flags: TcpFlags, seq: SeqNumber, ack: SeqNumber| TcpRepr {
                src_port: port,
                dst_port: 80,
                seq,
                ack,
                flags,
                window: 65535,
                urgent: 0,
                options: TcpOptions::NONE,
            };
            let their = SeqNumber(u32::from(port) * 1000);
            match rng.next_u64() % 8 {
                0..=2 => l.handle_segment(now, peer, &seg(TcpFlags::SYN, their, SeqNumber(0)), &[]),
                3 => {
                    let ack = iss.get(&port).map_or(SeqNumber(7), |&s| s + 1);
                    l.handle_segment(now, peer, &seg(TcpFlags::ACK, their + 1, ack), &[]);
                }
                4 => l.handle_segment(now, peer, &seg(TcpFlags::RST, their + 1, SeqNumber(0)), &[]),
                5 => {
                    now += Duration::from_millis(rng.next_u64() % 1500);
                    if l.poll_timeout().is_some_and(|t| t <= now) {
                        l.handle_timeout(now);
                    }
                }
                6 => {
                    while l.accept().is_some() {
                        established += 1;
                    }
                }
                _ => {}
            }
            // Output drained at one step in twelve: connections come and go
            // while queued too.
            let drained = rng.next_u64().is_multiple_of(12);
            while drained && let Some((t, s)) = l.poll_transmit(now) {
                if s.repr.flags.contains(TcpFlags::SYN) {
                    iss.insert(t.remote.port(), s.repr.seq);
                }
            }
            // Each connection at its place, and only those.
            assert_eq!(l.at.len(), l.half_open.len(), "step {step}");
            assert_eq!(l.entries.len(), l.half_open.len(), "step {step}");
            for (i, (e, c)) in l.entries.iter().zip(&l.half_open).enumerate() {
                assert_eq!(e.tuple, c.tuple(), "step {step}");
                assert_eq!(l.at.get(&e.tuple), Some(&i), "step {step}");
                assert_eq!(e.deadline, c.poll_timeout(), "step {step}");
                assert!(
                    !drained || !e.queued,
                    "step {step}: output drained, nothing queued"
                );
            }
            let min = l.half_open.iter().filter_map(|c| c.poll_timeout()).min();
            assert_eq!(l.poll_timeout(), min, "step {step}");
            assert!(l.half_open.len() <= 8);
            assert_eq!((l.at.capacity(), l.queue.capacity()), (at_cap, queue_cap));
        }
        let st = *l.stats();
        // Churn of every kind happened.
        assert!(
            st.syns_accepted > 100 && st.half_open_expired > 10,
            "{st:?}"
        );
        assert!(
            established > 10 && st.syns_dropped > 0,
            "{st:?} {established}"
        );
    }
}
