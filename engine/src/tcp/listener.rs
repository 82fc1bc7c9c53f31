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
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

const MAX_PENDING_RST: usize = 16;

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
        self.half_open.iter().any(|c| c.tuple() == *tuple)
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
        if let Some(i) = self.half_open.iter().position(|c| c.tuple() == tuple) {
            self.half_open[i].handle_segment_parts(now, seg, parts, &mut |_| 0);
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
        self.half_open.push(c);
        self.stats.half_open_peak = self.stats.half_open_peak.max(self.half_open.len() as u64);
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
                let c = self.half_open.swap_remove(i);
                self.stats.half_open_expired += 1;
                if let Some(x) = self.index.as_mut() {
                    x.forget(&c.tuple());
                }
            }
            return;
        }
        let c = self.half_open.swap_remove(i);
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

    fn settle_all(&mut self, now: Instant) {
        let mut i = self.half_open.len();
        while i > 0 {
            i -= 1;
            self.settle(i, now);
        }
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

    /// Handles expired timers of the half-open connections.
    pub fn handle_timeout(&mut self, now: Instant) {
        for c in &mut self.half_open {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
        }
        self.settle_all(now);
    }

    /// The earliest deadline of the half-open connections.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.half_open.iter().filter_map(|c| c.poll_timeout()).min()
    }

    /// The next segment to send, with its addresses (SYN-ACKs and RSTs; no
    /// payload).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<(FourTuple, Segment)> {
        if let Some((t, r)) = self.rst.pop_front() {
            self.stats.rst_sent += 1;
            return Some((t, Segment::single(r, 0, 0)));
        }
        for c in &mut self.half_open {
            if let Some(s) = c.poll_transmit(now) {
                return Some((c.tuple(), s));
            }
        }
        self.settle_all(now);
        None
    }
}
