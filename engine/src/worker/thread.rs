//! One worker: a thread pinned to a core that owns one queue's AF_XDP socket
//! and every connection whose packets that queue receives.
//!
//! Loop turn: RX batch → parse → TCP (`handle_segment`) → timers → the
//! application (sources fill send buffers, sinks drain receive buffers) →
//! `poll_transmit` while the TX ring and the frame pool have room → TX kick,
//! completions, fill-ring refill → counters → wait (per [`WaitStrategy`]).
//!
//! Nothing here allocates per packet: the connection table, the reset queue
//! and the MAC table have fixed capacity from the start; a connection's
//! buffers are allocated once, at establishment. No locks: the only shared
//! state is atomics (the stop flag, the connection registry) and
//! bounded lock-free channels used outside the per-packet path (reports).
//!
//! Placement: a connection lives on the worker whose queue receives its
//! packets. Active opens start on the worker that sends the SYN; if the
//! peer's packets arrive on another queue (RSS, or on veth the peer's
//! transmit queue), that queue's worker finds the owner in the shared
//! [`Registry`]: payload-less segments (ACKs) are forwarded to the owner
//! over a channel; a data segment makes it ask for the connection, which is
//! handed over whole (the peer retransmits the data dropped meanwhile). A
//! flow that stays on one queue never moves; a sender whose ACKs come in on
//! another queue stays where it is.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::port::{HeaderCache, PortCounters, XskPort};
use super::registry::{Key, Registry};
use super::sendmem::UmemFrames;
use crate::app::bulk::{Produced, Sink, Source};
use crate::tcp::{
    CloseReason, Config, Connection, Event, FourTuple, IsnGenerator, Listener, RecvWindow,
    SeqNumber, State, Stats, TcpRepr, reset_for,
};
use crate::tcp::{MAX_PIECES, Piece};
use crate::xsk::{Umem, XskStats};

/// A connection whose send buffer is UMEM frames.
type Conn = Connection<UmemFrames>;

/// How a worker waits when it has nothing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitStrategy {
    /// Spin: lowest latency, one core at 100 % whatever the load.
    Busy,
    /// `poll()` on the socket as soon as a turn finds nothing to do.
    NeedWakeup,
    /// Spin for a while after the last work, then `poll()`.
    Adaptive,
}

/// Idle turns before an adaptive worker sleeps in `poll()`.
const ADAPTIVE_SPINS: u32 = 2000;
/// Longest sleep in `poll()` (TX completions and pipes do not wake it).
const MAX_SLEEP_MS: i32 = 1;
/// Resets queued per turn for segments that match no connection.
const MAX_PENDING_RST: usize = 64;
/// Entries of the source-MAC table used for handshake replies.
const MAC_TABLE: usize = 256;
/// A hand-over request is not repeated sooner than this.
const WANT_AGAIN: Duration = Duration::from_millis(1);
/// Bytes in front of a received packet in its frame (the kernel's
/// `XDP_PACKET_HEADROOM`).
const RX_HEADROOM: usize = 256;
/// What one connection queues for transmission at once is about this much
/// time at its rate ([`small_queue`]).
const SMALL_QUEUE: Duration = Duration::from_millis(1);
/// Of the RX ring, the part that the receive windows may fill; the rest is
/// for ACKs of our own sending, handshakes and strays.
const RX_WINDOW_SHARE: (usize, usize) = (3, 4);

/// Per-worker counters, cache-line padded (each worker owns one; the control
/// thread receives copies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[repr(C, align(128))]
pub struct WorkerCounters {
    /// The queue this worker serves.
    pub queue: u32,
    /// Packet I/O: segments, bytes, drops by reason.
    pub port: PortCounters,
    /// The kernel's `XDP_STATISTICS` for the socket.
    pub xdp: XskStats,
    /// Loop turns.
    pub turns: u64,
    /// Sleeps in `poll()`.
    pub sleeps: u64,
    /// Turns that found the TX ring or the frame pool full.
    pub tx_full_turns: u64,
    /// Connections that became established here.
    pub connections: u64,
    /// Segments for no connection here (answered with a reset).
    pub no_connection: u64,
    /// Segments of a connection that another worker owns (RSS delivers the
    /// flow to our queue): the connection is asked over; payload-less
    /// segments are held until it arrives, data is dropped.
    pub misplaced: u64,
    /// Payload-less segments of another worker's connection, forwarded to it.
    pub forwarded: u64,
    /// Connections handed over to this worker.
    pub migrated_in: u64,
    /// Connections this worker handed over.
    pub migrated_out: u64,
    /// Hand-over requests put off because the connection's send-buffer
    /// frames were still being transmitted here.
    pub handover_deferred: u64,
    /// Resets sent for segments that matched no connection.
    pub rst_sent: u64,
    /// Resets not sent (queue full).
    pub rst_dropped: u64,
    /// Connections refused: table full or the output busy.
    pub refused: u64,
    /// TCP: segments sent, retransmissions, payload bytes, of all
    /// connections of this worker (finished and live).
    pub tcp_segments_sent: u64,
    /// TCP retransmissions.
    pub tcp_retransmits: u64,
    /// Payload bytes delivered in order to applications.
    pub tcp_bytes_received: u64,
    /// Payload bytes sent (retransmissions included).
    pub tcp_bytes_sent: u64,
}

/// How one connection ended.
#[derive(Debug, Clone)]
pub struct ConnReport {
    /// Index of the connection (its place in the plan for active opens, the
    /// order of acceptance for passive ones).
    pub id: usize,
    /// The queue that carried it.
    pub queue: u32,
    /// Addresses.
    pub tuple: FourTuple,
    /// Why it ended.
    pub reason: CloseReason,
    /// Payload bytes the application wrote.
    pub bytes_sent: u64,
    /// Payload bytes the application read.
    pub bytes_received: u64,
    /// TCP counters.
    pub stats: Stats,
    /// `--verify`: first stream offset that differed.
    pub mismatch: Option<u64>,
    /// Reading the source failed.
    pub source_error: Option<std::io::ErrorKind>,
    /// When it was established (None: never).
    pub established: Option<Instant>,
    /// When it ended (both FINs done, or the error).
    pub ended: Instant,
}

/// What workers tell the control thread.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "counters travel by value: no allocation per report"
)]
pub enum Msg {
    /// Counters, every report interval and at exit.
    Counters(usize, WorkerCounters),
    /// A connection ended.
    Closed(Box<ConnReport>),
    /// The worker stopped (after its last `Counters`).
    Exited(usize),
    /// For the application of [`SinkKind::App`].
    App(AppIn),
}

/// An active open planned by the control thread; the opener takes the
/// source at start.
#[derive(Debug)]
pub struct Planned {
    /// Addresses.
    pub tuple: FourTuple,
    /// Initial send sequence number.
    pub iss: SeqNumber,
    /// The worker that sends the SYN.
    pub opener: usize,
    /// The source.
    pub source: Receiver<Source>,
    /// Open it (set from the start, or by the application).
    pub go: AtomicBool,
}

/// Messages between workers: hand a connection over to the worker whose
/// queue now receives its packets.
#[derive(Debug)]
pub enum Ctl {
    /// "Your connection `key` arrives on my queue: send it to worker `to`."
    Want {
        /// The connection.
        key: Key,
        /// The asking worker.
        to: usize,
    },
    /// A connection handed over.
    Take(Box<Slot>),
    /// A payload-less segment of the receiver's connection that arrived on
    /// the sender's queue.
    Segment {
        /// The connection.
        key: Key,
        /// The segment.
        repr: TcpRepr,
    },
}

/// What passive opens feed their data to.
#[derive(Debug)]
pub enum SinkKind {
    /// Count and drop.
    Discard,
    /// Verify the pattern stream with this seed.
    Verify(u64),
    /// One output: the first connection takes it, later ones are refused.
    Single(Receiver<Sink>),
    /// Every connection belongs to an application in the control thread
    /// (e.g. the iperf3 server): see [`AppIn`] and [`AppOut`].
    App,
}

/// From an application connection to the application (control thread).
#[derive(Debug)]
pub enum AppIn {
    /// A connection was accepted; `out` carries the application's orders.
    Opened {
        /// Connection id.
        id: usize,
        /// Addresses.
        tuple: FourTuple,
        /// Orders to this connection.
        out: Sender<AppOut>,
    },
    /// Bytes received (in [`AppOut::Relay`] mode, and the first
    /// `COOKIE_BUDGET` bytes before any mode is set).
    Data {
        /// Connection id.
        id: usize,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The peer's FIN (all data before it was delivered).
    Eof {
        /// Connection id.
        id: usize,
    },
    /// Payload bytes moved since the last count ([`AppOut::Count`]: received
    /// and dropped; [`AppOut::Send`]: sent), and retransmissions so far.
    Count {
        /// Connection id.
        id: usize,
        /// Bytes.
        bytes: u64,
        /// Retransmitted segments since the last count.
        retransmits: u64,
        /// The smoothed RTT now (None before the first sample).
        rtt: Option<Duration>,
    },
    /// [`AppOut::Stop`] done: no more counts follow.
    Stopped {
        /// Connection id.
        id: usize,
    },
    /// The connection ended.
    Closed {
        /// Connection id.
        id: usize,
        /// Why.
        reason: CloseReason,
    },
}

/// From the application to one of its connections. Applied in order.
#[derive(Debug)]
pub enum AppOut {
    /// Write these bytes.
    Write(Vec<u8>),
    /// Hand every received byte over ([`AppIn::Data`]).
    Relay,
    /// Count received bytes and drop them ([`AppIn::Count`]).
    Count,
    /// Send zeros until [`AppOut::Stop`] (or `limit` bytes), counting them.
    Send {
        /// Most bytes to send (iperf3's `-n`/`-k` split over the streams).
        limit: Option<u64>,
    },
    /// Stop sending and counting; report the last count and [`AppIn::Stopped`].
    Stop,
    /// Never offer a receive window above this many bytes (iperf3's `-w`;
    /// clamped to the receive buffer).
    Window(usize),
    /// Close (FIN) once everything written so far is queued.
    Close,
    /// Reset.
    Abort,
}

/// Bytes an application connection hands over before the application has
/// set its mode (an iperf3 cookie).
pub const COOKIE_BUDGET: usize = 37;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AppMode {
    Cookie,
    Relay,
    Count,
    Send,
    /// Stop asked while counting: what the peer sent before it stopped is
    /// still arriving; counted until the stream is quiet.
    Draining,
    Stopped,
}

/// A stopped receiving stream is counted until no data came for this long...
const DRAIN_QUIET: Duration = Duration::from_millis(50);
/// ...or for this long at most.
const DRAIN_MAX: Duration = Duration::from_secs(2);

/// The worker's side of an application connection.
#[derive(Debug)]
pub struct AppConn {
    id: usize,
    orders: Receiver<AppOut>,
    mode: AppMode,
    budget: usize,
    pending: Vec<u8>,
    close: bool,
    counted: u64,
    retransmits: u64,
    last_count: Option<Instant>,
    eof_sent: bool,
    /// Draining: (last data seen, give up at).
    drain: Option<(Instant, Instant)>,
    /// Active opens: the sender to announce with [`AppIn::Opened`] once
    /// established.
    announce: Option<Sender<AppOut>>,
    /// Bytes still to send in [`AppMode::Send`].
    send_left: u64,
    /// [`AppMode::Send`]: bytes written before the first data byte
    /// (the cookie), set once data flows.
    send_base: Option<u64>,
    /// Data bytes committed to the send buffer in [`AppMode::Send`].
    committed: u64,
    /// Of those, counted so far: acknowledged ones while sending, all of
    /// them once stopped.
    acked: u64,
}

impl AppConn {
    /// A connection `id` taking orders from `orders`; `announce` is the
    /// sender handed to the application once an active open is established
    /// (`None`: accepted, announced at once by the caller).
    fn new(id: usize, orders: Receiver<AppOut>, announce: Option<Sender<AppOut>>) -> AppConn {
        AppConn {
            id,
            orders,
            mode: AppMode::Cookie,
            budget: COOKIE_BUDGET,
            pending: Vec::new(),
            close: false,
            counted: 0,
            retransmits: 0,
            last_count: None,
            eof_sent: false,
            drain: None,
            announce,
            send_left: 0,
            send_base: None,
            committed: 0,
            acked: 0,
        }
    }

    /// Reports the bytes and retransmissions since the last count.
    fn report_count(&mut self, c: &Conn, out: &Sender<Msg>) {
        let retrans = c.stats().retransmits;
        let _ = out.send(Msg::App(AppIn::Count {
            id: self.id,
            bytes: std::mem::take(&mut self.counted),
            retransmits: retrans - self.retransmits,
            rtt: c.srtt(),
        }));
        self.retransmits = retrans;
    }

    /// Reports the last count, then that the stream stopped.
    fn stopped(&mut self, c: &Conn, out: &Sender<Msg>) {
        self.report_count(c, out);
        let _ = out.send(Msg::App(AppIn::Stopped { id: self.id }));
    }
}

/// Counts are reported at least this often while data moves.
const COUNT_INTERVAL: Duration = Duration::from_millis(5);

/// State shared by all workers (read-only but for atomics).
#[derive(Debug)]
pub struct Shared {
    /// Stop: close connections (FIN), reset them after the grace period, exit.
    pub stop: AtomicBool,
    /// Grace period between FIN and RST on stop.
    pub grace: Duration,
    /// TCP parameters of every connection.
    pub tcp: Config,
    /// ISN generator (one key for all workers).
    pub isn: IsnGenerator,
    /// Active opens (connect mode).
    pub plan: Vec<Planned>,
    /// Active opens wait for `go` and belong to the application.
    pub deferred: bool,
    /// Which worker owns which connection.
    pub registry: Registry,
    /// Next-hop MAC of active opens.
    pub next_hop_mac: [u8; 6],
    /// Listening address (listen mode).
    pub listen: Option<SocketAddr>,
    /// Sinks of passive opens.
    pub sinks: SinkKind,
    /// Connections accepted so far (ids of passive opens).
    pub accepted: AtomicUsize,
    /// Largest number of connections a worker holds.
    pub max_conns: usize,
    /// Half-open connections a worker's listener holds.
    pub max_half_open: usize,
    /// How often workers send counters.
    pub report_interval: Duration,
    /// Wait strategy.
    pub wait: WaitStrategy,
    /// RX batch size.
    pub batch: u32,
    /// Most TX frames per connection per turn ([`super::EngineConfig::tx_burst`]).
    pub tx_burst: usize,
    /// Where a send-buffer slot starts in its frame (the single-descriptor
    /// layout's room for headers; 0 for the chained layout).
    pub tx_headroom: usize,
}

/// A connection with its application state (moves between workers whole).
#[derive(Debug)]
pub struct Slot {
    conn: Conn,
    /// The connection's header template.
    hdr: HeaderCache,
    key: Key,
    mac: [u8; 6],
    id: usize,
    source: Source,
    sink: Sink,
    src_done: bool,
    sink_done: bool,
    written: u64,
    read: u64,
    source_error: Option<std::io::ErrorKind>,
    established: Option<Instant>,
    reported: bool,
    /// Stop: reset at this time if not closed by then.
    deadline: Option<Instant>,
    /// Closed this turn: removed at its end.
    ended: bool,
    /// An application connection (instead of source and sink).
    appconn: Option<Box<AppConn>>,
}

/// A worker's state.
pub struct Worker {
    index: usize,
    port: XskPort,
    shared: Arc<Shared>,
    out: Sender<Msg>,
    slots: Vec<Slot>,
    listener: Option<Listener<UmemFrames>>,
    /// Header template of resets and the listener's segments.
    ctl_hdr: HeaderCache,
    /// The UMEM (every queue's) that send buffers take frames from.
    umem: Arc<Umem>,
    /// Frames the pool keeps for headers; send buffers take only what is
    /// beyond.
    reserve: usize,
    rst: Vec<(SocketAddr, SocketAddr, [u8; 6], TcpRepr)>,
    macs: Box<[(IpAddr, [u8; 6])]>,
    counters: WorkerCounters,
    /// Counters of connections already gone.
    gone: Stats,
    max_seg_frames: usize,
    inbox: Receiver<Ctl>,
    peers: Vec<Sender<Ctl>>,
    /// Hand-over requests sent recently (not repeated within a millisecond).
    wanted: Vec<(Key, Instant)>,
    /// Payload-less segments (SYN-ACK, ACK, FIN) of connections being
    /// handed over to us, replayed when they arrive.
    held: Vec<(Key, TcpRepr)>,
    /// Planned connections of this worker not opened yet.
    to_open: Vec<usize>,
    /// What the connections share (see [`Worker::rebalance`]).
    budget: Budget,
    /// The connection count the shares were computed for.
    balanced_for: usize,
    /// Turns served (where the next turn starts among the connections).
    rr: usize,
}

/// What a worker's connections share.
#[derive(Debug, Clone, Copy)]
struct Budget {
    /// Send-buffer frames: the port's frames less what the rings may hold.
    send_frames: usize,
    /// The least a send buffer gets: two full segments and a bit.
    min_send_slots: usize,
    /// Payload bytes the receive windows may offer in sum: full segments
    /// that fit the share of the RX ring set aside for them.
    rx_bytes: usize,
}

/// Segments held per worker for connections in transit.
const MAX_HELD: usize = 64;
/// Hand-over requests remembered.
const MAX_WANTED: usize = 16;

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("index", &self.index)
            .field("slots", &self.slots.len())
            .finish()
    }
}

fn mac_slot(ip: &IpAddr) -> usize {
    let h = match ip {
        IpAddr::V4(a) => u32::from(*a) as u64,
        IpAddr::V6(a) => {
            let o = a.octets();
            u64::from_le_bytes(o[8..16].try_into().unwrap_or_default())
        }
    };
    (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % MAC_TABLE
}

impl Worker {
    /// A worker for `port`; `index` is its place among the workers.
    pub fn new(
        index: usize,
        port: XskPort,
        shared: Arc<Shared>,
        out: Sender<Msg>,
        inbox: Receiver<Ctl>,
        peers: Vec<Sender<Ctl>>,
    ) -> Worker {
        let listener = shared.listen.map(|local| {
            Listener::with_memory(
                shared.tcp.clone(),
                local,
                shared.isn.clone(),
                shared.max_half_open,
                shared.max_conns,
            )
        });
        let ip_hl = if shared.listen.map_or_else(
            || shared.plan.first().is_some_and(|p| p.tuple.local.is_ipv4()),
            |l| l.is_ipv4(),
        ) {
            20
        } else {
            40
        };
        // A header descriptor and the payload's pieces (one more than whole
        // frames when it does not start at a frame's start).
        let max_seg_frames = XskPort::descs_for(
            (ip_hl + 60 + shared.tcp.mss as usize).div_ceil(shared.tcp.frame_len.max(1)) + 1,
        );
        let umem = port.xsk().umem().clone();
        // Header frames for a full TX ring. Receiving needs nothing more:
        // received frames go back to the pool, and from it to the fill
        // ring, in the same turn.
        let reserve = port.xsk().tx.size() as usize;
        let counters = WorkerCounters {
            queue: port.xsk().info().queue,
            ..WorkerCounters::default()
        };
        let x = port.xsk();
        let rings = (x.fill.size() + x.rx.size() + x.tx.size()) as usize;
        let fl = shared.tcp.frame_len.max(1);
        let mss = shared.tcp.mss as usize;
        let slot_len = fl.saturating_sub(shared.tx_headroom).max(1);
        let rx_descs = (ip_hl + 60 + mss).div_ceil(fl.saturating_sub(RX_HEADROOM).max(1));
        let budget = Budget {
            send_frames: port.frames().saturating_sub(rings),
            min_send_slots: 2 * mss.div_ceil(slot_len) + 2,
            rx_bytes: x.rx.size() as usize * RX_WINDOW_SHARE.0 / RX_WINDOW_SHARE.1 / rx_descs * mss,
        };
        Worker {
            index,
            slots: Vec::with_capacity(shared.max_conns),
            listener,
            rst: Vec::with_capacity(MAX_PENDING_RST),
            macs: vec![(IpAddr::from([0u8; 4]), [0u8; 6]); MAC_TABLE].into_boxed_slice(),
            counters,
            gone: Stats::default(),
            max_seg_frames,
            ctl_hdr: HeaderCache::default(),
            umem,
            reserve,
            port,
            shared,
            out,
            inbox,
            peers,
            wanted: Vec::with_capacity(MAX_WANTED),
            held: Vec::with_capacity(MAX_HELD),
            to_open: Vec::new(),
            budget,
            balanced_for: usize::MAX,
            rr: 0,
        }
    }

    /// Shares the worker's memory among its connections, evenly: each send
    /// buffer may hold `send_frames / n` frames (at least two segments'
    /// worth, at most its own size), and each receive window is capped at
    /// `rx_bytes / n`, so that everything all peers may send at once fits
    /// the RX ring; excess waits in the senders, whose congestion control
    /// deals with it, instead of being dropped at the redirect into a full
    /// ring. Run when the number of connections changed (not per packet).
    fn rebalance(&mut self) {
        let n = self.slots.len();
        self.balanced_for = n;
        let Some(n) = std::num::NonZeroUsize::new(n) else {
            return;
        };
        let b = self.budget;
        let send = (b.send_frames / n).max(b.min_send_slots);
        let recv = b.rx_bytes / n;
        for s in &mut self.slots {
            s.conn.set_send_limit(send);
            s.conn.set_recv_share(recv);
        }
    }

    /// Runs until stopped; returns after the last report.
    pub fn run(mut self) {
        let start = Instant::now();
        for (i, p) in self.shared.plan.iter().enumerate() {
            if p.opener == self.index {
                self.to_open.push(i);
            }
        }
        self.open_planned(start);
        let mut next_report = start;
        let mut idle_turns = 0u32;
        let mut stopping = false;
        loop {
            let now = Instant::now();
            self.counters.turns += 1;
            if !stopping && self.shared.stop.load(Ordering::Relaxed) {
                stopping = true;
                self.begin_stop(now);
            }
            if !self.to_open.is_empty() {
                self.open_planned(now);
            }
            let rx_before = self.port.counters().rx_segments;
            let moved = self.handle_ctl(now);
            self.receive(now);
            let tx_before = self.port.counters().tx_packets;
            if self.slots.len() != self.balanced_for {
                self.rebalance();
            }
            self.service(now);
            self.send_resets();
            self.port.flush();
            let busy = moved
                || self.port.counters().rx_segments != rx_before
                || self.port.counters().tx_packets != tx_before;
            if now >= next_report {
                self.report();
                next_report = now + self.shared.report_interval;
            }
            // Stopping: done once no connection is left but those quiet in
            // TIME-WAIT (both FINs acknowledged, our last ACK on the wire):
            // TIME-WAIT does not outlive the process (see `super::engine`).
            if stopping
                && (self.slots.is_empty()
                    || (self.port.xsk().tx.in_flight() == 0
                        && self.slots.iter().all(|s| s.conn.is_time_wait_quiet())))
            {
                break;
            }
            if busy {
                idle_turns = 0;
                continue;
            }
            idle_turns = idle_turns.saturating_add(1);
            let sleep = match self.shared.wait {
                WaitStrategy::Busy => false,
                WaitStrategy::NeedWakeup => true,
                WaitStrategy::Adaptive => idle_turns > ADAPTIVE_SPINS,
            };
            if sleep {
                let ms = self.next_deadline().map_or(MAX_SLEEP_MS, |t| {
                    let d = t.saturating_duration_since(now);
                    (d.as_millis() as i32).min(MAX_SLEEP_MS)
                });
                if ms > 0 {
                    self.counters.sleeps += 1;
                    self.port.poll(ms);
                }
            }
        }
        self.report();
        let _ = self.out.send(Msg::Exited(self.index));
    }

    fn next_deadline(&self) -> Option<Instant> {
        let l = self.listener.as_ref().and_then(|l| l.poll_timeout());
        self.slots
            .iter()
            .filter_map(|s| s.conn.poll_timeout())
            .chain(l)
            .min()
    }

    fn begin_stop(&mut self, now: Instant) {
        self.listener = None;
        let deadline = now + self.shared.grace;
        for s in &mut self.slots {
            s.deadline = Some(deadline);
            // An application's last orders go first: what it wrote before
            // it finished (iperf3's IPERF_DONE) is sent ahead of the FIN.
            if let Some(mut a) = s.appconn.take() {
                s.app_conn(now, &mut a, &self.out);
                s.appconn = Some(a);
            }
            s.conn.close(now);
        }
    }

    fn report(&mut self) {
        let mut c = self.counters;
        c.port = *self.port.counters();
        if let Ok(x) = self.port.xsk().stats() {
            c.xdp = x;
        }
        let mut t = self.gone;
        for s in &self.slots {
            add_stats(&mut t, s.conn.stats());
        }
        c.tcp_segments_sent = t.segments_sent;
        c.tcp_retransmits = t.retransmits;
        c.tcp_bytes_received = t.bytes_received;
        c.tcp_bytes_sent = t.bytes_sent;
        let _ = self.out.try_send(Msg::Counters(self.index, c));
    }

    /// Opens the planned connections of this worker whose `go` is set.
    fn open_planned(&mut self, now: Instant) {
        let mut k = 0;
        while k < self.to_open.len() {
            let i = self.to_open[k];
            let p = &self.shared.plan[i];
            if !p.go.load(Ordering::Acquire) {
                k += 1;
                continue;
            }
            self.to_open.swap_remove(k);
            let mut mem = UmemFrames::default();
            mem.attach(self.umem.clone(), self.shared.tx_headroom);
            let conn = Connection::connect_in(self.shared.tcp.clone(), p.tuple, p.iss, now, mem);
            let key = self.shared.registry.key(&p.tuple);
            // Cannot fail: the table has room for every planned connection.
            let _ = self.shared.registry.set(key, self.index as u16);
            let source = p.source.try_recv().unwrap_or(Source::Empty);
            let mut slot = Slot::new(
                conn,
                key,
                self.shared.next_hop_mac,
                i,
                source,
                Sink::Discard,
            );
            if self.shared.deferred {
                let (tx, rx) = crossbeam_channel::bounded(1024);
                slot.appconn = Some(Box::new(AppConn::new(i, rx, Some(tx))));
            }
            self.slots.push(slot);
        }
    }

    /// Serves hand-over requests and takes connections handed to us;
    /// true if anything moved.
    fn handle_ctl(&mut self, now: Instant) -> bool {
        let mut moved = false;
        while let Ok(m) = self.inbox.try_recv() {
            moved = true;
            match m {
                Ctl::Want { key, to } => {
                    let Some(i) = self.slots.iter().position(|s| s.key == key) else {
                        continue;
                    };
                    // Not while our socket still transmits from its send
                    // buffer's frames (their counts are this thread's): the
                    // other worker asks again.
                    if self.slots[i].conn.send_memory().any_lent() {
                        self.counters.handover_deferred += 1;
                        continue;
                    }
                    let slot = self.slots.swap_remove(i);
                    self.shared.registry.set(key, to as u16);
                    if let Err(e) = self.peers[to].try_send(Ctl::Take(Box::new(slot))) {
                        // Their inbox is full: keep it and try another time.
                        if let Ctl::Take(slot) = e.into_inner() {
                            self.shared.registry.set(key, self.index as u16);
                            self.slots.push(*slot);
                        }
                    } else {
                        self.counters.migrated_out += 1;
                    }
                }
                Ctl::Segment { key, repr } => {
                    if let Some(s) = self.slots.iter_mut().find(|s| s.key == key) {
                        s.conn.handle_segment(now, &repr, &[]);
                    } else if self.held.len() < MAX_HELD {
                        self.held.push((key, repr));
                    }
                }
                Ctl::Take(slot) => {
                    let mut slot = *slot;
                    let key = slot.key;
                    self.counters.migrated_in += 1;
                    self.held.retain(|(k, repr)| {
                        if *k == key {
                            slot.conn.handle_segment(now, repr, &[]);
                            false
                        } else {
                            true
                        }
                    });
                    self.slots.push(slot);
                }
            }
        }
        moved
    }

    fn receive(&mut self, now: Instant) {
        let Worker {
            port,
            slots,
            listener,
            rst,
            macs,
            counters,
            shared,
            index,
            peers,
            wanted,
            held,
            out,
            umem,
            ..
        } = self;
        let rx_size = port.xsk().rx.size();
        let mut on_segment = |mac,
                              src: SocketAddr,
                              dst,
                              repr: &TcpRepr,
                              parts: crate::worker::port::Parts<'_>| {
            let payload_len: usize = parts.iter().map(|p| p.len()).sum();
            if let Some(s) = slots
                .iter_mut()
                .find(|s| s.conn.tuple().remote == src && s.conn.tuple().local == dst)
            {
                // In-order payload goes to the sink or application straight
                // from the receive frame; only what it cannot take now is
                // copied into the receive buffer.
                let Slot {
                    conn,
                    sink,
                    appconn,
                    read,
                    ..
                } = s;
                conn.handle_segment_parts(now, repr, parts, &mut |b| {
                    take_direct(sink, appconn.as_deref_mut(), read, now, b)
                });
                return;
            }
            // Another worker's connection (RSS put it on our queue)?
            let tuple = FourTuple {
                local: dst,
                remote: src,
            };
            let key = shared.registry.key(&tuple);
            if let Some(owner) = shared.registry.get(key) {
                let owner = owner as usize;
                if owner != *index && payload_len == 0 {
                    // A pure ACK (or SYN-ACK, FIN): forward it, cheaply.
                    if peers[owner]
                        .try_send(Ctl::Segment { key, repr: *repr })
                        .is_ok()
                    {
                        counters.forwarded += 1;
                    } else {
                        counters.misplaced += 1;
                    }
                    return;
                }
                counters.misplaced += 1;
                // Data: ask for the connection (once a millisecond at most);
                // the peer retransmits what is dropped meanwhile.
                if owner != *index
                    && !wanted
                        .iter()
                        .any(|(k, t)| *k == key && now < *t + WANT_AGAIN)
                    && peers[owner].try_send(Ctl::Want { key, to: *index }).is_ok()
                {
                    wanted.retain(|(_, t)| now < *t + WANT_AGAIN);
                    if wanted.len() < MAX_WANTED {
                        wanted.push((key, now));
                    }
                }
                // In transit to us: keep what costs nothing to keep.
                if owner == *index && payload_len == 0 && held.len() < MAX_HELD {
                    held.push((key, *repr));
                }
                return;
            }
            if let Some(l) = listener.as_mut().filter(|l| l.local() == dst) {
                macs[mac_slot(&src.ip())] = (src.ip(), mac);
                l.handle_segment_parts(now, src, repr, parts);
                while let Some(mut conn) = l.accept() {
                    conn.send_memory_mut()
                        .attach(umem.clone(), shared.tx_headroom);
                    let id = shared.accepted.fetch_add(1, Ordering::Relaxed);
                    let sink = match &shared.sinks {
                        SinkKind::Discard => Some(Sink::Discard),
                        SinkKind::Verify(seed) => Some(Sink::Verify {
                            seed: *seed,
                            offset: 0,
                            mismatch: None,
                        }),
                        // The one sink goes only to a connection that
                        // will be kept.
                        SinkKind::Single(rx) if slots.len() < shared.max_conns => {
                            rx.try_recv().ok()
                        }
                        SinkKind::Single(_) => None,
                        SinkKind::App => Some(Sink::Discard),
                    };
                    let key = shared.registry.key(&conn.tuple());
                    match sink {
                        Some(sink)
                            if slots.len() < shared.max_conns
                                && shared.registry.set(key, *index as u16) =>
                        {
                            let tuple = conn.tuple();
                            let mut s = Slot::new(conn, key, mac, id, Source::Empty, sink);
                            s.established = Some(now);
                            if matches!(shared.sinks, SinkKind::App) {
                                let (tx, rx) = crossbeam_channel::bounded(1024);
                                s.appconn = Some(Box::new(AppConn::new(id, rx, None)));
                                // The control thread drains this channel
                                // all the time; a connection is accepted
                                // once, not per packet.
                                let _ = out.send(Msg::App(AppIn::Opened { id, tuple, out: tx }));
                            }
                            slots.push(s);
                            counters.connections += 1;
                        }
                        _ => {
                            // Refused: reset it; the reset goes out with
                            // the connection's own poll_transmit below.
                            counters.refused += 1;
                            conn.abort(now);
                            let mut s =
                                Slot::new(conn, key, mac, usize::MAX, Source::Empty, Sink::Discard);
                            s.reported = true;
                            if slots.len() < slots.capacity() {
                                slots.push(s);
                            }
                        }
                    }
                }
                return;
            }
            counters.no_connection += 1;
            if let Some(r) = reset_for(repr, payload_len) {
                if rst.len() < MAX_PENDING_RST {
                    rst.push((dst, src, mac, r));
                } else {
                    counters.rst_dropped += 1;
                }
            }
        };
        // Up to a whole ring per turn, in batches: a turn that sent a lot
        // must not leave the ACKs and data that arrived meanwhile queued
        // behind a small batch (queueing delay, then a full ring).
        let mut taken = 0;
        while taken < rx_size {
            let n = port.recv_from(shared.batch, &mut on_segment);
            taken += n;
            if n < shared.batch {
                break;
            }
        }
    }

    fn send_resets(&mut self) {
        for (src, dst, mac, r) in self.rst.drain(..) {
            if self.port.send_header(mac, src, dst, &r, &mut self.ctl_hdr) {
                self.counters.rst_sent += 1;
            } else {
                self.counters.rst_dropped += 1;
            }
        }
    }

    fn service(&mut self, now: Instant) {
        let Worker {
            port,
            slots,
            listener,
            macs,
            counters,
            out,
            gone,
            max_seg_frames,
            shared,
            held,
            ctl_hdr,
            reserve,
            rr,
            ..
        } = self;
        if let Some(l) = listener.as_mut() {
            if l.poll_timeout().is_some_and(|t| t <= now) {
                l.handle_timeout(now);
            }
            while port.has_room(1) {
                let Some((tuple, seg)) = l.poll_transmit(now) else {
                    break;
                };
                let ip = tuple.remote.ip();
                let (known, mac) = macs[mac_slot(&ip)];
                if known == ip {
                    port.send_header(mac, tuple.local, tuple.remote, &seg.repr, ctl_hdr);
                }
            }
        }
        // Connections take turns: each turn starts one further on, so that
        // no connection always finds the TX ring full.
        let slots_len = slots.len();
        let first = *rr % slots_len.max(1);
        *rr = rr.wrapping_add(1);
        let mut ended = 0;
        for k in 0..slots_len {
            let s = &mut slots[(first + k) % slots_len];
            if s.deadline.is_some_and(|d| now >= d) && s.conn.state() != State::Closed {
                s.deadline = None;
                s.conn.abort(now);
            }
            if s.conn.poll_timeout().is_some_and(|t| t <= now) {
                s.conn.handle_timeout(now);
            }
            // Frames for the send buffer's next slots, then the
            // application's turn to fill it.
            port.provision(s.conn.send_memory_mut(), *reserve);
            match s.appconn.take() {
                Some(mut a) => {
                    s.app_conn(now, &mut a, out);
                    s.appconn = Some(a);
                }
                None => s.app(now),
            }
            let mut full = false;
            // A fair share of the TX ring per connection and turn, so that
            // a bulk sender does not starve the ACKs of its neighbours, and
            // at most `tx_burst` frames: what one turn queues goes out ahead
            // of everything queued after it (the ACKs of the other direction
            // too), so an unbounded burst is queueing delay. Counting frames
            // (descriptors) bounds packets at small MTUs and bytes at large
            // ones; a turn sends at least one segment.
            let mut budget = (port.xsk().tx.size() as usize / slots_len)
                .max(8)
                .min(shared.tx_burst);
            // And, like Linux's TCP Small Queues, about a millisecond of the
            // connection's rate at once (at least two segments), so that
            // many streams do not each queue a full burst ahead of the ACKs.
            let mut bytes_left = small_queue(&s.conn);
            let mut pieces = [Piece::default(); MAX_PIECES];
            while budget > 0 && bytes_left > 0 {
                if !port.has_room(*max_seg_frames) {
                    full = true;
                    break;
                }
                let Some(seg) = s.conn.poll_transmit(now) else {
                    break;
                };
                let t = s.conn.tuple();
                let n = s.conn.payload_pieces(&seg, &mut pieces).unwrap_or(0);
                budget = budget.saturating_sub(XskPort::descs_for(n));
                bytes_left = bytes_left.saturating_sub(pieces[..n].iter().map(|p| p.len).sum());
                // Refused sends (MTU) are counted by the port; TCP retransmits.
                port.send_segment(
                    s.mac,
                    t.local,
                    t.remote,
                    &seg.repr,
                    &pieces[..n],
                    s.conn.send_memory_mut(),
                    &mut s.hdr,
                );
            }
            if full {
                counters.tx_full_turns += 1;
            }
            let mut closed = None;
            while let Some(ev) = s.conn.poll_event() {
                match ev {
                    Event::Connected => {
                        if s.established.is_none() {
                            s.established = Some(now);
                            counters.connections += 1;
                        }
                        if let Some(a) = s.appconn.as_mut() {
                            if let Some(tx) = a.announce.take() {
                                let _ = out.send(Msg::App(AppIn::Opened {
                                    id: a.id,
                                    tuple: s.conn.tuple(),
                                    out: tx,
                                }));
                            }
                        }
                    }
                    Event::Closed(r) => closed = Some(r),
                    Event::Readable | Event::Writable | Event::Error(_) => {}
                }
            }
            // A sender is done once both FINs are through (TIME-WAIT lingers
            // on, but the transfer is over).
            let done =
                closed.or((s.conn.state() == State::TimeWait).then_some(CloseReason::Normal));
            if let Some(reason) = done {
                if s.appconn.is_none() {
                    s.close_sink(now);
                }
                if !s.reported {
                    s.reported = true;
                    let r = ConnReport {
                        id: s.id,
                        queue: counters.queue,
                        tuple: s.conn.tuple(),
                        reason,
                        bytes_sent: s.written,
                        bytes_received: s.read,
                        stats: *s.conn.stats(),
                        mismatch: match s.sink {
                            Sink::Verify { mismatch, .. } => mismatch,
                            _ => None,
                        },
                        source_error: s.source_error,
                        established: s.established,
                        ended: now,
                    };
                    let _ = out.send(Msg::Closed(Box::new(r)));
                }
            }
            if let (Some(reason), Some(a)) = (closed, s.appconn.as_ref()) {
                let _ = out.send(Msg::App(AppIn::Closed { id: a.id, reason }));
            }
            if closed.is_some() {
                port.take_back(s.conn.send_memory_mut());
                add_stats(gone, s.conn.stats());
                shared.registry.remove(s.key);
                let key = s.key;
                held.retain(|(k, _)| *k != key);
                s.ended = true;
                ended += 1;
            }
        }
        // From the back, so that what `swap_remove` moves was seen already.
        let mut i = slots.len();
        while ended > 0 && i > 0 {
            i -= 1;
            if slots[i].ended {
                slots.swap_remove(i);
                ended -= 1;
            }
        }
    }
}

impl Slot {
    fn new(conn: Conn, key: Key, mac: [u8; 6], id: usize, source: Source, sink: Sink) -> Slot {
        Slot {
            conn,
            hdr: HeaderCache::default(),
            key,
            mac,
            id,
            source,
            sink,
            src_done: false,
            sink_done: false,
            written: 0,
            read: 0,
            source_error: None,
            established: None,
            reported: false,
            deadline: None,
            ended: false,
            appconn: None,
        }
    }

    /// An application connection's turn: apply the application's orders,
    /// write what it queued, send / count / relay as its mode says.
    fn app_conn(&mut self, now: Instant, a: &mut AppConn, out: &Sender<Msg>) {
        let c = &mut self.conn;
        while let Ok(o) = a.orders.try_recv() {
            match o {
                AppOut::Write(b) => a.pending.extend_from_slice(&b),
                AppOut::Relay => {
                    a.mode = AppMode::Relay;
                }
                AppOut::Count => a.mode = AppMode::Count,
                AppOut::Send { limit } => {
                    a.mode = AppMode::Send;
                    a.send_left = limit.unwrap_or(u64::MAX);
                }
                AppOut::Stop if a.mode == AppMode::Count => {
                    a.mode = AppMode::Draining;
                    a.drain = Some((now, now + DRAIN_MAX));
                }
                AppOut::Stop => {
                    // What was written counts (as iperf3 counts writes),
                    // acknowledged or not.
                    a.counted += a.committed - a.acked;
                    a.acked = a.committed;
                    a.mode = AppMode::Stopped;
                    a.stopped(c, out);
                }
                AppOut::Window(n) => {
                    c.set_recv_window(RecvWindow::Fixed(n));
                }
                AppOut::Close => a.close = true,
                AppOut::Abort => {
                    a.pending.clear();
                    c.abort(now);
                }
            }
        }
        let open = matches!(c.state(), State::Established | State::CloseWait);
        if open && !a.pending.is_empty() {
            let n = c.write(&a.pending).unwrap_or(0);
            a.pending.drain(..n);
            self.written += n as u64;
        }
        if open && a.mode == AppMode::Send && a.pending.is_empty() && !a.close {
            a.send_base.get_or_insert(self.written);
            // iperf3's payload is not looked at: zeros, which cost nothing
            // once a slot holds them.
            if a.send_left > 0 {
                let want = usize::try_from(a.send_left).unwrap_or(usize::MAX);
                let n = c.fill_zeros(want).unwrap_or(0);
                a.send_left -= n as u64;
                a.committed += n as u64;
                self.written += n as u64;
            }
        }
        // Sent bytes count once acknowledged: a test that ends after N bytes
        // (iperf3's `-n`) then ends when the peer has them all, not when
        // they entered a send buffer that may still hold megabytes.
        if a.mode == AppMode::Send
            && let Some(base) = a.send_base
        {
            let acked = (self.written - c.send_buffered() as u64)
                .saturating_sub(base)
                .min(a.committed);
            if acked > a.acked {
                a.counted += acked - a.acked;
                a.acked = acked;
            }
        }
        if a.close && a.pending.is_empty() && open {
            c.close(now);
            a.close = false;
        }
        loop {
            let (x, y) = c.read_slices();
            let avail = x.len() + y.len();
            if avail == 0 {
                break;
            }
            let n = match a.mode {
                AppMode::Count | AppMode::Draining | AppMode::Stopped => {
                    if a.mode != AppMode::Stopped {
                        a.counted += avail as u64;
                    }
                    if let Some((seen, _)) = a.drain.as_mut() {
                        *seen = now;
                    }
                    avail
                }
                AppMode::Relay | AppMode::Cookie => {
                    let take = if a.mode == AppMode::Cookie {
                        avail.min(a.budget)
                    } else {
                        avail.min(64 * 1024)
                    };
                    if take == 0 {
                        break;
                    }
                    let mut v = Vec::with_capacity(take);
                    let k = x.len().min(take);
                    v.extend_from_slice(&x[..k]);
                    v.extend_from_slice(&y[..take - k]);
                    if a.mode == AppMode::Cookie {
                        a.budget -= take;
                    }
                    let _ = out.send(Msg::App(AppIn::Data { id: a.id, bytes: v }));
                    take
                }
                // A sender discards what it receives.
                AppMode::Send => avail,
            };
            c.consume(now, n);
            self.read += n as u64;
        }
        if a.counted > 0
            && matches!(a.mode, AppMode::Count | AppMode::Send)
            && a.last_count.is_none_or(|t| now >= t + COUNT_INTERVAL)
        {
            a.report_count(c, out);
            a.last_count = Some(now);
        }
        if let Some((seen, until)) = a.drain {
            if now >= seen + DRAIN_QUIET || now >= until || c.read_closed() {
                a.drain = None;
                a.mode = AppMode::Stopped;
                a.stopped(c, out);
            }
        }
        if c.read_closed() && c.readable() == 0 && !a.eof_sent {
            a.eof_sent = true;
            let _ = out.send(Msg::App(AppIn::Eof { id: a.id }));
        }
    }

    /// The application's turn: fill the send buffer, drain the receive
    /// buffer, close when the source is done (sender) or when the peer's
    /// stream ended and the sink has it all (receiver).
    fn app(&mut self, now: Instant) {
        let c = &mut self.conn;
        let open = matches!(c.state(), State::Established | State::CloseWait);
        let sender = !matches!(self.source, Source::Empty);
        if open && sender && !self.src_done && self.deadline.is_none() {
            loop {
                let (n, st) = if let Source::Zeros { offset, len } = &mut self.source {
                    // No per-byte work once a slot holds zeros.
                    let want = usize::try_from(*len - *offset).unwrap_or(usize::MAX);
                    let n = c.fill_zeros(want).unwrap_or(0);
                    *offset += n as u64;
                    let st = if *offset == *len {
                        Produced::Done
                    } else {
                        Produced::More
                    };
                    (n, st)
                } else if let Source::File(f) = &mut self.source {
                    // A vectored read straight into the frames.
                    let mut st = Produced::More;
                    let n = c
                        .fill_vectored(|bufs| {
                            let (n, s) = f.produce_vectored(bufs);
                            st = s;
                            n
                        })
                        .unwrap_or(0);
                    (n, st)
                } else {
                    // Sources write straight into the send buffer's frames.
                    let mut st = Produced::More;
                    let source = &mut self.source;
                    let n = c
                        .fill(|piece| {
                            let (n, s) = source.produce((piece, &mut []));
                            st = s;
                            n
                        })
                        .unwrap_or(0);
                    (n, st)
                };
                self.written += n as u64;
                match st {
                    Produced::More if n > 0 => {}
                    Produced::More => break,
                    Produced::Done => {
                        self.src_done = true;
                        c.close(now);
                        break;
                    }
                    Produced::Failed(e) => {
                        self.src_done = true;
                        self.source_error = Some(e);
                        c.abort(now);
                        break;
                    }
                }
            }
        }
        loop {
            let (a, b) = c.read_slices();
            if a.is_empty() && b.is_empty() {
                break;
            }
            let n = self.sink.consume((a, b));
            if n == 0 {
                break;
            }
            c.consume(now, n);
            self.read += n as u64;
        }
        if self.sink.broken() {
            // The output failed (the writer thread says how): stop the
            // sender rather than leave it facing a closed window.
            c.abort(now);
            return;
        }
        if c.read_closed() && c.readable() == 0 && !self.sink_done && self.sink.finish() {
            self.sink_done = true;
            if !sender && self.deadline.is_none() {
                c.close(now);
            }
        }
    }

    /// The connection ended, or its sender is done: the sink takes the rest
    /// of the receive buffer (every byte we acknowledged) and the stream is
    /// ended, waiting for the writer if it must (once per connection, off
    /// the per-packet path).
    fn close_sink(&mut self, now: Instant) {
        if self.sink_done {
            return;
        }
        let c = &mut self.conn;
        let (a, b) = c.read_slices();
        let n = self.sink.close((a, b));
        c.consume(now, n);
        self.read += n as u64;
        self.sink_done = true;
    }
}

/// In-order payload offered straight from the receive frame
/// ([`Connection::handle_segment_with`]): what the connection's sink or
/// application takes now, as its turn would from the receive buffer
/// (`Slot::app`, `Slot::app_conn`). Bytes an application wants relayed to
/// its thread (control connections, cookies) stay in the buffer.
fn take_direct(
    sink: &mut Sink,
    app: Option<&mut AppConn>,
    read: &mut u64,
    now: Instant,
    bytes: &[u8],
) -> usize {
    let n = match app {
        None => sink.consume((bytes, &[])),
        Some(a) => match a.mode {
            AppMode::Count | AppMode::Draining => {
                a.counted += bytes.len() as u64;
                if let Some((seen, _)) = a.drain.as_mut() {
                    *seen = now;
                }
                bytes.len()
            }
            // Stopped: dropped uncounted; a sender discards what it receives.
            AppMode::Stopped | AppMode::Send => bytes.len(),
            AppMode::Relay | AppMode::Cookie => 0,
        },
    };
    *read += n as u64;
    n
}

/// What a connection may queue for transmission in one turn, bytes
/// (payload): about [`SMALL_QUEUE`] at its rate (congestion window over
/// smoothed RTT), at least two segments; no limit before the first RTT
/// sample (the initial window bounds it then).
fn small_queue(c: &Conn) -> usize {
    let mss = c.send_mss().max(1);
    match c.srtt() {
        Some(rtt) if !rtt.is_zero() => {
            let window = c.cwnd().min(c.send_window().max(mss)) as u128;
            let b = window * SMALL_QUEUE.as_nanos() / rtt.as_nanos();
            usize::try_from(b).unwrap_or(usize::MAX).max(2 * mss)
        }
        _ => usize::MAX,
    }
}

fn add_stats(t: &mut Stats, s: &Stats) {
    t.segments_sent += s.segments_sent;
    t.retransmits += s.retransmits;
    t.bytes_received += s.bytes_received;
    t.bytes_sent += s.bytes_sent;
}
