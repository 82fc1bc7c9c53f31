//! One worker: a thread pinned to a core that owns one queue's AF_XDP socket
//! and every connection whose packets that queue receives.
//!
//! Loop turn: RX, up to a whole ring in batches → parse → the connection by
//! its 4-tuple (O(1), [`super::table`]) → TCP (`handle_segment`), which
//! puts it on the ready list → due timers put theirs on it too → each ready
//! connection's turn: timers, the application (sources fill send buffers,
//! sinks drain receive buffers), `poll_transmit_gso` within its TX budget
//! (new data in bursts of whole segments, the TCP work done once a burst,
//! the port framing each segment of it) → TX kick, completions, fill-ring
//! refill → counters → wait (per [`WaitStrategy`]). A turn touches only the
//! connections that have work; one that still has work after its turn (its
//! budget ran out, its source can go on) is served again the next turn,
//! after the others.
//!
//! Sharing: the worker's frames and its RX ring are shared among its
//! connections (`Worker::rebalance`, when their number changes): each
//! send buffer holds at most an even share of frames, and the receive
//! windows together offer no more than the RX ring absorbs, so a burst from
//! every peer at once waits in the peers instead of being dropped at the
//! redirect. A connection that receives little (an iperf3 control
//! connection, a stream that only sends) gets a few segments' window, and
//! the busy ones split the rest (`Worker::sweep_shares`, ten times a
//! second; a light one whose peer uses up its window gets its share back
//! at its next turn).
//! On TX, a turn queues at most `tx_burst` descriptors in all, shared by
//! the turn's connections (a few bursts a turn, round-robin over turns),
//! and a connection at most about a millisecond of its rate (like Linux's
//! TCP Small Queues): what a turn queues goes out before the ACKs that
//! arrive meanwhile are read, so a short turn keeps every connection's RTT
//! short, and an ACK or a handshake waits behind a burst, not a ring full of
//! other connections' data.
//!
//! Nothing here allocates per packet: the connection table, the reset queue
//! and the MAC table have fixed capacity from the start; a connection's
//! buffers are allocated once, at establishment. No locks on the
//! per-packet path: the only shared state is atomics (the stop flag, the
//! connection registry) and bounded channels. Between workers (ACKs
//! forwarded to a connection's owner, hand-overs) sends are `try_send` into
//! inboxes that are only polled, which take no lock; reports to the
//! control thread (a counting stream's count every 5 ms, openings,
//! closings) may take crossbeam's waker lock to wake it where it waits.
//!
//! Placement: a connection lives on the worker whose queue receives its
//! packets. Active opens start on the worker that sends the SYN; if the
//! peer's packets arrive on another queue (RSS, or on veth the peer's
//! transmit queue), that queue's worker finds the owner in the shared
//! [`Registry`]: payload-less segments (ACKs) are forwarded to the owner
//! over a channel; a data segment makes it ask for the connection, which is
//! handed over whole. What comes in for the connection until it arrives is
//! held (the payload copied into a bounded buffer set aside at start) and
//! given to it when it does; what there is no room for, or what waits
//! longer than 50 ms, is dropped, and the peer sends it again. A
//! flow that stays on one queue never moves; a sender whose ACKs come in on
//! another queue stays where it is. A passive open is registered from its
//! SYN on, to the worker whose listener took it (`HalfOpen`): the
//! handshake's last ACK, or a repeated SYN, may come in on another queue,
//! and is forwarded to that listener like any pure ACK.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::bulk::{Sink, Source};
use super::conn::{AppConn, Conn, SinkKind, Slot, take_direct};
use super::msg::{AppIn, Msg, WorkerCounters};
use super::port::{HeaderCache, IpMarks, XskPort};
use super::registry::{Key, Registry};
use super::sendmem::UmemFrames;
use super::table::Table;
use crate::tcp::{
    CloseReason, Config, Connection, ConnectionError, Event, FourTuple, HalfOpenIndex,
    IsnGenerator, Listener, SeqNumber, State, Stats, TcpFlags, TcpRepr, reset_for,
};
use crate::tcp::{MAX_PIECES, Piece};
use crate::wire::TooBig;
use crate::xsk::Umem;

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
/// How long past the grace period a worker whose connections are done
/// waits for the others before it exits anyway.
const STOP_WAIT: Duration = Duration::from_secs(1);
/// A hand-over request is not repeated sooner than this.
const WANT_AGAIN: Duration = Duration::from_millis(1);
/// Bytes in front of a received packet in its frame (the kernel's
/// `XDP_PACKET_HEADROOM`).
const RX_HEADROOM: usize = 256;
/// What one connection queues for transmission at once is about this much
/// time at its rate ([`small_queue`]).
const SMALL_QUEUE: Duration = Duration::from_millis(1);
/// A connection's part of a turn's TX budget is at least `tx_burst /
/// TURN_SHARERS` descriptors: at most this many connections send data in
/// one turn, the others in the turns after. Two, not four: with 32 and 128
/// streams into a kernel receiver, bursts of twice the size cost its
/// reader fewer wakeups (each polls every socket) and gave 1.12–1.22× the
/// rate at the same or a lower RTT; with 8 streams it made no difference
/// (docs/BENCHMARKS.md, "Many streams on one queue").
const TURN_SHARERS: usize = 2;
/// Segments a SYN-ACK's window offers at most: 32 clients connecting at
/// once then fit a veth's 256-packet queue before their shares apply.
const FIRST_WINDOW_SEGMENTS: usize = 4;
/// Of the RX ring, the part that the receive windows may fill; the rest is
/// for ACKs of our own sending, handshakes and strays.
const RX_WINDOW_SHARE: (usize, usize) = (3, 4);

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
    /// Its IP marks from the SYN on, set before `go` ([`Opener::open_marked`]):
    /// the TOS byte or traffic class, and the flow label.
    ///
    /// [`Opener::open_marked`]: super::Opener::open_marked
    pub tos: AtomicU8,
    /// See `tos`.
    pub flow_label: AtomicU32,
}

/// Messages between workers: hand a connection over to the worker whose
/// queue now receives its packets.
#[derive(Debug)]
pub enum Ctl {
    /// "Your connection `key` arrives on my queue: send it to worker `to`."
    Want {
        /// The connection.
        key: Key,
        /// Its addresses.
        tuple: FourTuple,
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
        /// Its addresses.
        tuple: FourTuple,
        /// The segment.
        repr: TcpRepr,
        /// Its source MAC.
        mac: [u8; 6],
    },
    /// An ICMP "packet too big" about the receiver's connection that
    /// arrived on the sender's queue.
    TooBig(TooBig),
}

/// State shared by all workers (read-only but for atomics).
#[derive(Debug)]
pub struct Shared {
    /// Stop: close connections (FIN), reset them after the grace period, exit.
    pub stop: AtomicBool,
    /// Set before `stop` when the application failed ([`App::failed`]): a
    /// stopping connection is reset as soon as the peer acknowledged its
    /// FIN, not after the grace period.
    ///
    /// [`App::failed`]: super::App::failed
    pub failed: AtomicBool,
    /// Grace period between FIN and RST on stop.
    pub grace: Duration,
    /// [`super::EngineConfig::rcv_timeout`].
    pub rcv_timeout: Option<Duration>,
    /// The interface's MTU when the engine started.
    pub mtu_at_start: usize,
    /// The interface's MTU now (the control loop reads it at every report
    /// interval): where it fell, the connections follow
    /// ([`Connection::on_link_mtu`]).
    pub link_mtu: AtomicUsize,
    /// Workers stopping whose connections are done (closed, or quiet in
    /// TIME-WAIT). A worker exits only once all of them are: until then a
    /// peer's last packets of another worker's connection may still arrive
    /// on its queue, and it forwards them. (Its socket outlives it: the
    /// engine closes the sockets only after the steering program is gone,
    /// so no packet of xtcp's meets a queue without one.)
    pub done: AtomicUsize,
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
    /// Listening addresses (listen mode), each with the MSS its
    /// connections offer (an IPv6 header is 20 bytes longer).
    pub listen: Vec<(SocketAddr, u16)>,
    /// Sinks of passive opens.
    pub sinks: SinkKind,
    /// Connections accepted so far (ids of passive opens).
    pub accepted: AtomicUsize,
    /// Largest number of connections a worker holds.
    pub max_conns: usize,
    /// Bytes a passive open's stream holds at most
    /// ([`super::EngineConfig::stream_limit`]).
    pub stream_limit: Option<u64>,
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
    /// Packets the driver queues in front of XDP, where that may be fewer
    /// than the RX ring holds (veth: [`super::engine::VETH_RING`]); the
    /// receive windows share the smaller of the two.
    pub driver_queue: Option<usize>,
}

/// A worker's state.
pub struct Worker {
    index: usize,
    port: XskPort,
    shared: Arc<Shared>,
    out: Sender<Msg>,
    /// The connections.
    table: Table,
    /// A connection may be in TIME-WAIT (or closed, on its way out):
    /// `live_conns` must look at them (see there).
    ending: bool,
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
    /// Every worker's inbox, this one's included: one per queue.
    peers: Vec<Sender<Ctl>>,
    /// Hand-over requests sent recently (not repeated within a millisecond).
    wanted: Vec<(Key, Instant)>,
    /// Segments of connections on their way to this worker (asked for, or
    /// in transit), replayed when they arrive; oldest first.
    held: Vec<Held>,
    /// The held segments' payloads (capacity [`HELD_BYTES`], reserved at
    /// start: holding never allocates).
    held_bytes: Vec<u8>,
    /// Planned connections of this worker not opened yet.
    to_open: Vec<usize>,
    /// What the connections share (see [`Worker::rebalance`]).
    budget: Budget,
    /// The connection count the shares were computed for.
    balanced_for: usize,
    /// Connections marked light (`Slot::light`) now.
    light: usize,
    /// The shares for that count.
    shares: Shares,
    /// Stopping: when the connections are reset (the end of the grace
    /// period), for those handed over to it after the stop began too.
    stop_deadline: Option<Instant>,
    /// The interface's MTU the port checks segments against
    /// ([`Shared::link_mtu`] as last seen).
    link_mtu: usize,
}

/// What each connection gets of a worker's [`Budget`] now.
#[derive(Debug, Clone, Copy, Default)]
struct Shares {
    /// Changes with the shares; a connection holds the epoch it applied.
    epoch: u64,
    /// Send-buffer slots (frames).
    send_slots: usize,
    /// Receive-window bytes.
    recv_bytes: usize,
    /// Receive-window bytes of a light connection (`Slot::light`).
    recv_light: usize,
}

/// How often a worker looks at what its connections received, to give
/// the receive budget to those that use it (see `Worker::sweep_shares`).
const SHARE_SWEEP: Duration = Duration::from_millis(100);

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
    /// The window a passive open offers in its SYN-ACK, at most.
    first_window: usize,
}

/// The receive-window shares of `n` connections of which `light` are
/// light: (each other one's, each light one's). A light one gets a
/// SYN-ACK's window, no more than an even share; the others split the
/// rest evenly, so they never get less than an even share, and the shares
/// never add up to more than `rx_bytes`.
fn recv_shares(b: &Budget, n: NonZeroUsize, light: usize) -> (usize, usize) {
    let even = b.rx_bytes / n;
    let light = light.min(n.get());
    let recv_light = even.min(b.first_window);
    let recv_bytes = match n.get() - light {
        0 => even,
        busy => (b.rx_bytes - light * recv_light) / busy,
    };
    (recv_bytes, recv_light)
}

/// Says at debug level that a connection was taken for a light one
/// (`received` bytes in the last sweep) or is busy again: at most one line
/// per connection and sweep, never per packet.
fn log_lightness(conn: &Conn, light: bool, received: u64) {
    let t = conn.tuple();
    if light {
        tracing::debug!(
            "{} → {}: light ({received} bytes received in the last {} ms): a small receive window until its peer uses it up",
            t.remote,
            t.local,
            SHARE_SWEEP.as_millis()
        );
    } else {
        tracing::debug!(
            "{} → {}: busy again: a full receive window",
            t.remote,
            t.local
        );
    }
}

/// Segments held per worker for connections on their way to it.
const MAX_HELD: usize = 512;
/// Payload bytes held per worker.
const HELD_BYTES: usize = 1 << 20;
/// How long a held segment waits for its connection. A hand-over takes a
/// turn of each worker, or a few if the owner's socket is still
/// transmitting from the connection's frames; a connection that has not
/// come by then is not coming (it closed, or its owner had no room), and
/// the peer sends what was held again.
const HOLD_FOR: Duration = Duration::from_millis(50);

/// A segment of a connection on its way to this worker, its payload at
/// `off..off + len` of `Worker::held_bytes`.
#[derive(Debug, Clone, Copy)]
struct Held {
    key: Key,
    repr: TcpRepr,
    at: Instant,
    off: u32,
    len: u32,
}

/// Keeps a segment of the connection `key` (on its way here) in `held`,
/// its payload `parts` copied into `bytes`; false if there is no room.
fn hold(
    held: &mut Vec<Held>,
    bytes: &mut Vec<u8>,
    key: Key,
    repr: &TcpRepr,
    parts: crate::worker::port::Parts<'_>,
    now: Instant,
) -> bool {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if held.len() == MAX_HELD || bytes.len() + len > HELD_BYTES {
        return false;
    }
    let off = bytes.len();
    // Within the capacity reserved at start: no allocation.
    for p in parts {
        bytes.extend_from_slice(p);
    }
    held.push(Held {
        key,
        repr: *repr,
        at: now,
        off: off as u32,
        len: len as u32,
    });
    true
}

/// Drops the held segments older than [`HOLD_FOR`] (counted as
/// misplaced: their connection did not come) and moves the payloads of
/// the rest to the front of `bytes`.
fn expire_held(held: &mut Vec<Held>, bytes: &mut Vec<u8>, now: Instant, misplaced: &mut u64) {
    if held.first().is_none_or(|h| now <= h.at + HOLD_FOR) {
        return;
    }
    let before = held.len();
    held.retain(|h| now <= h.at + HOLD_FOR);
    *misplaced += (before - held.len()) as u64;
    compact_held(held, bytes);
}

/// Moves the held payloads to the front of `bytes`, in order.
fn compact_held(held: &mut [Held], bytes: &mut Vec<u8>) {
    let mut end = 0;
    for h in held.iter_mut() {
        let (off, len) = (h.off as usize, h.len as usize);
        bytes.copy_within(off..off + len, end);
        h.off = end as u32;
        end += len;
    }
    bytes.truncate(end);
}
/// Hand-over requests remembered.
const MAX_WANTED: usize = 16;

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("index", &self.index)
            .field("connections", &self.table.len())
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

/// Stops one connection: FIN now, reset at `deadline`; a stream cut short
/// (its source had more to give) is reset at once.
fn stop_slot(s: &mut Slot, now: Instant, deadline: Instant, out: &Sender<Msg>) {
    s.deadline = Some(deadline);
    // An application's last orders go first: what it wrote before it
    // finished (iperf3's IPERF_DONE) is sent ahead of the FIN.
    if let Some(mut a) = s.appconn.take() {
        s.app_conn(now, &mut a, out);
        s.appconn = Some(a);
    }
    // A FIN would tell the receiver that it has the whole stream (a file,
    // standard input, `-n` bytes): one stopped before its source's end is
    // reset, so that the receiver knows it has not.
    if s.appconn.is_none() && !matches!(s.source, Source::Empty) && !s.src_done {
        s.conn.abort(now);
    } else {
        s.conn.close(now);
    }
}

/// The workers' registry as a listener's [`HalfOpenIndex`]: a half-open
/// connection is registered to the worker whose listener took its SYN, so
/// that its handshake's last ACK (or a repeated SYN) that comes in on
/// another queue is forwarded there instead of reset.
#[derive(Debug)]
struct HalfOpen {
    shared: Arc<Shared>,
    index: u16,
}

impl HalfOpenIndex for HalfOpen {
    fn claim(&mut self, tuple: &FourTuple) -> bool {
        let r = &self.shared.registry;
        r.claim(r.key(tuple), self.index)
    }

    fn forget(&mut self, tuple: &FourTuple) {
        let r = &self.shared.registry;
        r.remove(r.key(tuple));
    }
}

/// Positions a worker keeps beyond `max_conns` for connections in TIME-WAIT,
/// which do not count against it: when a new connection finds `max_conns`
/// taken, those in TIME-WAIT end at once ([`Connection::end_time_wait`])
/// and make room on the worker's next turn; until then the new connections
/// take these.
pub fn time_wait_room(max_conns: usize) -> usize {
    max_conns / 8 + 4
}

/// The connections `table` holds that count against `max_conns`: those not
/// in TIME-WAIT (nor closed, waiting to go). Only at `max_conns` does it
/// look further, and only where one may be in TIME-WAIT (`ending`: set by
/// the turn of a connection that is, which follows every change of state);
/// then it ends every TIME-WAIT, marking each for the turn that removes
/// it, and `ending` stays set while any is on its way out. So a SYN at
/// `max_conns` costs a look at the table only while there is something
/// to find, not at every SYN of a flood.
fn live_conns(table: &mut Table, max_conns: usize, ending: &mut bool) -> usize {
    if table.len() < max_conns || !*ending {
        return table.len();
    }
    let (mut live, mut going) = (0, false);
    for pos in 0..table.capacity() {
        let Some(s) = table.get_mut(pos) else {
            continue;
        };
        match s.conn.state() {
            State::Closed => going = true,
            State::TimeWait => {
                s.conn.end_time_wait();
                table.mark(pos);
                going = true;
            }
            _ => live += 1,
        }
    }
    *ending = going;
    live
}

/// What taking the connections a listener established needs of its worker.
struct Admit<'a> {
    table: &'a mut Table,
    ending: &'a mut bool,
    shared: &'a Shared,
    umem: &'a Arc<Umem>,
    out: &'a Sender<Msg>,
    counters: &'a mut WorkerCounters,
    rst: &'a mut Vec<(SocketAddr, SocketAddr, [u8; 6], TcpRepr)>,
}

impl Admit<'_> {
    /// Hands `l` a segment from `src` (whose MAC is `mac`) and takes the
    /// connections it established; a refused one's reset answers `repr`.
    #[expect(
        clippy::too_many_arguments,
        reason = "a segment's addresses and contents"
    )]
    fn segment(
        &mut self,
        l: &mut Listener<UmemFrames>,
        now: Instant,
        dst: SocketAddr,
        src: SocketAddr,
        mac: [u8; 6],
        repr: &TcpRepr,
        parts: &[&[u8]],
    ) {
        let Admit {
            table,
            ending,
            shared,
            umem,
            out,
            counters,
            rst,
        } = self;
        // A new connection's SYN, where none more can be kept (`max_conns`
        // reached, or the one output taken): refused at once, with a
        // reset, instead of let in and reset once it has sent (its
        // sender then took what it wrote for delivered).
        let f = repr.flags;
        if f.contains(TcpFlags::SYN) && !f.intersects(TcpFlags::ACK | TcpFlags::RST) {
            let room = live_conns(table, shared.max_conns, ending) < shared.max_conns
                && !table.is_full()
                && match &shared.sinks {
                    SinkKind::Single(rx) => !rx.is_empty(),
                    _ => true,
                };
            l.set_refusing(!room);
        }
        let refused_before = l.stats().syns_refused;
        l.handle_segment_at(now, dst, src, repr, parts);
        counters.refused += l.stats().syns_refused - refused_before;
        let payload_len: usize = parts.iter().map(|p| p.len()).sum();
        while let Some(mut conn) = l.accept() {
            conn.send_memory_mut()
                .attach((*umem).clone(), shared.tx_headroom);
            let id = shared.accepted.fetch_add(1, Ordering::Relaxed);
            let room =
                live_conns(table, shared.max_conns, ending) < shared.max_conns && !table.is_full();
            let sink = match &shared.sinks {
                SinkKind::Discard => Some(Sink::Discard),
                SinkKind::Verify(seed) => Some(Sink::Verify {
                    seed: *seed,
                    offset: 0,
                    mismatch: None,
                }),
                // The one sink goes only to a connection that will be kept.
                SinkKind::Single(rx) if room => rx.try_recv().ok(),
                SinkKind::Single(_) => None,
                SinkKind::App => Some(Sink::Discard),
            };
            let tuple = conn.tuple();
            // Registered to this worker since its SYN ([`HalfOpen`]).
            let key = shared.registry.key(&tuple);
            match sink {
                Some(sink) if room => {
                    let congestion = conn.congestion_name();
                    let mss = conn.send_mss() as u32;
                    let mut s = Slot::new(conn, key, mac, id, Source::Empty, sink);
                    s.established = Some(now);
                    s.stream_limit = shared.stream_limit;
                    if matches!(shared.sinks, SinkKind::App) {
                        let (tx, rx) = crossbeam_channel::bounded(1024);
                        s.appconn = Some(Box::new(AppConn::new(id, rx, None)));
                        // The control thread drains this channel all the
                        // time; a connection is accepted once, not per
                        // packet.
                        let _ = out.send(Msg::app(AppIn::Opened {
                            id,
                            tuple,
                            out: tx,
                            congestion,
                            mss,
                        }));
                    }
                    // Cannot fail: not full (checked above).
                    let _ = table.insert(s);
                    counters.connections += 1;
                }
                _ => {
                    // Refused (`max_conns` reached, or the one output
                    // taken): reset, as the segment that completed the
                    // handshake gets it; the connections held go on
                    // undisturbed.
                    shared.registry.remove(key);
                    counters.refused += 1;
                    match reset_for(repr, payload_len) {
                        Some(r) if rst.len() < MAX_PENDING_RST => {
                            rst.push((tuple.local, tuple.remote, mac, r));
                        }
                        _ => counters.rst_dropped += 1,
                    }
                }
            }
        }
    }
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
        let listener = shared.listen.first().map(|&(local, _)| {
            let mut l = Listener::with_memory(
                shared.tcp.clone(),
                local,
                shared.isn.clone(),
                shared.max_half_open,
                shared.max_conns,
            );
            for &(a, mss) in &shared.listen {
                l.add_address(a.ip(), mss);
            }
            l.set_index(Box::new(HalfOpen {
                shared: shared.clone(),
                index: index as u16,
            }));
            l
        });
        // The longer header of the families served (its packets are the
        // largest: the configuration's MSS is the largest of theirs).
        let v6 = if shared.listen.is_empty() {
            shared.plan.first().is_some_and(|p| p.tuple.local.is_ipv6())
        } else {
            shared.listen.iter().any(|l| l.0.is_ipv6())
        };
        let ip_hl = if v6 { 40 } else { 20 };
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
        let link_mtu = shared.mtu_at_start;
        let x = port.xsk();
        let rings = (x.fill.size() + x.rx.size() + x.tx.size()) as usize;
        let fl = shared.tcp.frame_len.max(1);
        let mss = shared.tcp.mss as usize;
        let slot_len = fl.saturating_sub(shared.tx_headroom).max(1);
        let rx_descs = (ip_hl + 60 + mss).div_ceil(fl.saturating_sub(RX_HEADROOM).max(1));
        let budget = Budget {
            send_frames: port.frames().saturating_sub(rings),
            min_send_slots: 2 * mss.div_ceil(slot_len) + 2,
            // Full segments: those the RX ring holds (a segment takes
            // `rx_descs` descriptors), and no more than the driver queues.
            rx_bytes: (x.rx.size() as usize / rx_descs)
                .min(shared.driver_queue.unwrap_or(usize::MAX))
                * RX_WINDOW_SHARE.0
                / RX_WINDOW_SHARE.1
                * mss,
            first_window: FIRST_WINDOW_SEGMENTS * mss,
        };
        let counters = WorkerCounters {
            queue: port.xsk().info().queue,
            rx_window_budget: budget.rx_bytes as u64,
            ..WorkerCounters::default()
        };
        // Room for the connections it may accept, those it opens, and those
        // handed over to it.
        let planned = shared.plan.iter().filter(|p| p.opener == index).count();
        let capacity = shared.max_conns + planned + time_wait_room(shared.max_conns);
        Worker {
            index,
            table: Table::new(capacity),
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
            held_bytes: Vec::with_capacity(HELD_BYTES),
            ending: false,
            to_open: Vec::new(),
            budget,
            balanced_for: usize::MAX,
            light: 0,
            shares: Shares::default(),
            stop_deadline: None,
            link_mtu,
        }
    }

    /// Shares the worker's memory among its connections: each send buffer
    /// may hold `send_frames / n` frames (at least two segments' worth, at
    /// most its own size), and the receive windows are capped so that
    /// everything all peers may send at once fits the RX ring (`rx_bytes`
    /// in sum); excess waits in the senders, whose congestion control deals
    /// with it, instead of being dropped at the redirect into a full ring.
    /// A light connection (`Slot::light`: an iperf3 control connection, a
    /// stream that only sends and receives ACKs) gets a few segments'
    /// window, no more than an even share; the others split the rest
    /// evenly. Run when the number of connections or of light ones changed
    /// (not per packet); each connection applies the shares at its next
    /// turn.
    fn rebalance(&mut self) {
        let n = self.table.len();
        self.balanced_for = n;
        // The next connection's window, from its SYN-ACK on: a few
        // segments, within its share to come (a window offered is never
        // taken back, and many clients connect at once); its first ACK
        // offers the share.
        if let Some(l) = self.listener.as_mut() {
            l.set_recv_share((self.budget.rx_bytes / (n + 1)).min(self.budget.first_window));
        }
        let Some(n) = NonZeroUsize::new(n) else {
            return;
        };
        // Each connection takes the new shares at its next turn (O(1) here,
        // however many connections are held): one that has no turn sends
        // and receives nothing meanwhile, and a window it offered before is
        // honoured either way.
        let b = self.budget;
        let (recv_bytes, recv_light) = recv_shares(&b, n, self.light);
        self.shares = Shares {
            epoch: self.shares.epoch + 1,
            send_slots: (b.send_frames / n).max(b.min_send_slots),
            recv_bytes,
            recv_light,
        };
    }

    /// Marks each connection light or not by what it received since the
    /// last sweep (`SHARE_SWEEP` ago): light if less than a SYN-ACK's
    /// window (`Budget::first_window`) and its peer never used up the
    /// window it had (`Stats::window_full`). A connection is not light
    /// before it was watched for a whole sweep, and a light one whose peer
    /// uses up its window gets its share back at its next turn (see
    /// `Worker::service`), so a sender held to the light window is not
    /// taken for an idle one. O(connections), ten times a second;
    /// rebalances if the count of light ones changed.
    fn sweep_shares(&mut self) {
        let little = self.budget.first_window as u64;
        let mut light = 0;
        for s in self.table.iter_mut() {
            let st = s.conn.stats();
            let now = (st.bytes_received, st.window_full);
            let is_light = s
                .swept
                .is_some_and(|(rx, full)| now.0 - rx < little && now.1 == full);
            if s.light && s.swept.is_some_and(|(_, full)| now.1 != full) {
                // Its peer used up the light window before the service
                // saw it (the sweep came first in that turn, as after a
                // sleep): a promotion all the same.
                self.counters.light_promoted += 1;
            }
            let received = s.swept.map(|(rx, _)| now.0 - rx);
            s.swept = Some(now);
            if is_light != s.light {
                s.light = is_light;
                log_lightness(&s.conn, is_light, received.unwrap_or(0));
                // Its share changes: applied at its next turn.
                s.shares_epoch = u64::MAX;
            }
            light += usize::from(is_light);
        }
        if light != self.light {
            self.light = light;
            self.rebalance();
        }
    }

    /// Runs until stopped; returns after the last report, with the
    /// worker's port, whose socket the engine closes once the steering
    /// program is detached.
    pub fn run(mut self) -> XskPort {
        let start = Instant::now();
        for (i, p) in self.shared.plan.iter().enumerate() {
            if p.opener == self.index {
                self.to_open.push(i);
            }
        }
        self.open_planned(start);
        let mut next_report = start;
        let mut next_sweep = start + SHARE_SWEEP;
        let mut idle_turns = 0u32;
        let mut stopping = false;
        let mut counted_done = false;
        let mut stop_began = start;
        loop {
            let now = Instant::now();
            self.counters.turns += 1;
            if !stopping && self.shared.stop.load(Ordering::Acquire) {
                stopping = true;
                stop_began = now;
                self.begin_stop(now);
            }
            if !self.to_open.is_empty() {
                self.open_planned(now);
            }
            let rx_before = self.port.counters().rx_segments;
            expire_held(
                &mut self.held,
                &mut self.held_bytes,
                now,
                &mut self.counters.misplaced,
            );
            let moved = self.handle_ctl(now);
            self.follow_link_mtu();
            self.receive(now);
            self.take_too_big(now);
            let tx_before = self.port.counters().tx_packets;
            if now >= next_sweep {
                self.sweep_shares();
                next_sweep = now + SHARE_SWEEP;
            }
            if self.table.len() != self.balanced_for {
                self.rebalance();
            }
            self.table.due(now);
            self.service(now);
            self.send_resets();
            let queued = u64::from(self.port.xsk().tx.in_flight());
            self.counters.tx_queued_max = self.counters.tx_queued_max.max(queued);
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
            // Exit once every worker is done: until then this queue may
            // still receive (and forward) another worker's packets.
            if stopping {
                let done = self.table.is_empty()
                    || (self.port.xsk().tx.in_flight() == 0
                        && self.table.iter().all(|s| s.conn.is_time_wait_quiet()));
                if done != counted_done {
                    counted_done = done;
                    if done {
                        self.shared.done.fetch_add(1, Ordering::AcqRel);
                    } else {
                        self.shared.done.fetch_sub(1, Ordering::AcqRel);
                    }
                }
                // (Bounded: a worker that died never counts itself.)
                if done
                    && (self.shared.done.load(Ordering::Acquire) >= self.peers.len()
                        || now > stop_began + self.shared.grace + STOP_WAIT)
                {
                    break;
                }
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
        self.port
    }

    fn next_deadline(&self) -> Option<Instant> {
        let l = self.listener.as_ref().and_then(|l| l.poll_timeout());
        self.table.next_deadline().into_iter().chain(l).min()
    }

    /// The interface's MTU changed ([`Shared::link_mtu`]): segments are
    /// checked against the new one, the listener announces no more than it
    /// carries, and every connection gets a turn, in which it follows
    /// ([`Connection::on_link_mtu`]).
    fn follow_link_mtu(&mut self) {
        let m = self.shared.link_mtu.load(Ordering::Relaxed);
        if m != self.link_mtu {
            self.link_mtu = m;
            self.port.set_mtu(m);
            if let Some(l) = self.listener.as_mut() {
                l.clamp_mss(m);
            }
            self.table.mark_all();
        }
    }

    fn begin_stop(&mut self, now: Instant) {
        // Its counters stay in the reports.
        if let Some(l) = self.listener.take() {
            self.counters.listener = *l.stats();
        }
        let deadline = now + self.shared.grace;
        self.stop_deadline = Some(deadline);
        for s in self.table.iter_mut() {
            stop_slot(s, now, deadline, &self.out);
        }
        self.table.mark_all();
    }

    fn report(&mut self) {
        let mut c = self.counters;
        c.port = *self.port.counters();
        if let Ok(x) = self.port.xsk().stats() {
            c.xdp = x;
        }
        if let Some(l) = self.listener.as_ref() {
            c.listener = *l.stats();
        }
        let mut t = self.gone;
        for s in self.table.iter() {
            add_stats(&mut t, s.conn.stats());
        }
        c.tcp_segments_sent = t.segments_sent;
        c.tcp_retransmits = t.retransmits;
        c.tcp_bytes_received = t.bytes_received;
        c.tcp_bytes_sent = t.bytes_sent;
        c.tcp_paws_drops = t.paws_drops;
        c.tcp_out_of_window = t.out_of_window;
        c.tcp_old_sequence = t.old_sequence;
        c.tcp_challenge_acks = t.challenge_acks;
        c.tcp_unanswered = t.invalid_acks_skipped;
        c.live = self.table.len() as u64;
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
            slot.opened = Some(now);
            slot.hdr.set_marks(IpMarks {
                tos: p.tos.load(Ordering::Relaxed),
                flow_label: p.flow_label.load(Ordering::Relaxed),
            });
            if self.shared.deferred {
                let (tx, rx) = crossbeam_channel::bounded(1024);
                slot.appconn = Some(Box::new(AppConn::new(i, rx, Some(tx))));
            }
            if let Err(slot) = self.table.insert(slot) {
                // Cannot happen: the table has room for every planned
                // connection of this worker.
                self.counters.refused += 1;
                self.shared.registry.remove(slot.key);
            }
        }
    }

    /// Serves hand-over requests and takes connections handed to us;
    /// true if anything moved.
    fn handle_ctl(&mut self, now: Instant) -> bool {
        let mut moved = false;
        while let Ok(m) = self.inbox.try_recv() {
            moved = true;
            match m {
                Ctl::Want { key, tuple, to } => {
                    let Some(i) = self.table.find_tuple(&tuple) else {
                        continue;
                    };
                    // Not while our socket still transmits from its send
                    // buffer's frames (their counts are this thread's): the
                    // other worker asks again.
                    if self
                        .table
                        .get_mut(i)
                        .is_some_and(|s| s.conn.send_memory().any_lent())
                    {
                        self.counters.handover_deferred += 1;
                        continue;
                    }
                    let Some(mut slot) = self.table.remove(i) else {
                        continue;
                    };
                    if slot.light {
                        // It leaves (or comes back below) as not light.
                        slot.light = false;
                        self.light -= 1;
                    }
                    self.shared.registry.set(key, to as u16);
                    if let Err(e) = self.peers[to].try_send(Ctl::Take(Box::new(slot))) {
                        // Their inbox is full: keep it and try another time
                        // (there is room: it just left).
                        if let Ctl::Take(slot) = e.into_inner() {
                            self.shared.registry.set(key, self.index as u16);
                            let _ = self.table.insert(*slot);
                        }
                    } else {
                        self.counters.migrated_out += 1;
                    }
                }
                Ctl::TooBig(t) => {
                    if !give_too_big(&mut self.table, &mut self.counters, &t, now) {
                        // Gone, or handed on again meanwhile: the next
                        // one (routers repeat them) or the timeouts.
                        self.counters.misplaced += 1;
                    }
                }
                Ctl::Segment {
                    key,
                    tuple,
                    repr,
                    mac,
                } => {
                    if let Some(i) = self.table.find_tuple(&tuple) {
                        if let Some(s) = self.table.get_mut(i) {
                            s.conn.handle_segment(now, &repr, &[]);
                        }
                        self.table.mark(i);
                    } else if let Some(l) = self.listener.as_mut().filter(|l| l.holds(&tuple)) {
                        // Our handshake, finished on another queue.
                        let mut a = Admit {
                            table: &mut self.table,
                            ending: &mut self.ending,
                            shared: &self.shared,
                            umem: &self.umem,
                            out: &self.out,
                            counters: &mut self.counters,
                            rst: &mut self.rst,
                        };
                        a.segment(l, now, tuple.local, tuple.remote, mac, &repr, &[]);
                    } else if !hold(&mut self.held, &mut self.held_bytes, key, &repr, &[], now) {
                        self.counters.misplaced += 1;
                    }
                }
                Ctl::Take(slot) => {
                    let mut slot = *slot;
                    let key = slot.key;
                    self.counters.migrated_in += 1;
                    // It held the other worker's shares: ours apply at its
                    // first turn here (not light until a sweep says so).
                    slot.shares_epoch = u64::MAX;
                    slot.light = false;
                    slot.swept = None;
                    // Sent before its worker stopped, taken after we did:
                    // it stops here (else it would hold this worker up).
                    if let (Some(d), None) = (self.stop_deadline, slot.deadline) {
                        stop_slot(&mut slot, now, d, &self.out);
                    }
                    // What came for it meanwhile, in the order it came.
                    let bytes = &self.held_bytes;
                    let before = self.held.len();
                    self.held.retain(|h| {
                        if h.key != key {
                            return true;
                        }
                        let payload = &bytes[h.off as usize..(h.off + h.len) as usize];
                        let Slot {
                            conn,
                            sink,
                            appconn,
                            read,
                            ..
                        } = &mut slot;
                        conn.handle_segment_parts(now, &h.repr, &[payload], &mut |b| {
                            take_direct(sink, appconn.as_deref_mut(), read, now, b)
                        });
                        false
                    });
                    if self.held.len() < before {
                        self.counters.held += (before - self.held.len()) as u64;
                        compact_held(&mut self.held, &mut self.held_bytes);
                    }
                    // It may come in TIME-WAIT.
                    self.ending = true;
                    if let Err(mut slot) = self.table.insert(slot) {
                        // No room here: the connection is reset (the RST
                        // goes with this turn's) and reported closed.
                        self.counters.refused += 1;
                        slot.conn.abort(now);
                        let t = slot.conn.tuple();
                        while let Some(seg) = slot.conn.poll_transmit(now) {
                            if self.rst.len() < MAX_PENDING_RST {
                                self.rst.push((t.local, t.remote, slot.mac, seg.repr));
                            }
                        }
                        let frame_bytes = self.port.xsk().umem().frame_size().bytes();
                        slot.end(
                            now,
                            CloseReason::Aborted,
                            self.counters.queue,
                            frame_bytes,
                            &self.out,
                        );
                        slot.app_closed(CloseReason::Aborted, &self.out);
                        self.port.take_back(slot.conn.send_memory_mut());
                        self.shared.registry.remove(key);
                        add_stats(&mut self.gone, slot.conn.stats());
                    }
                }
            }
        }
        moved
    }

    fn receive(&mut self, now: Instant) {
        let Worker {
            port,
            table,
            ending,
            listener,
            rst,
            macs,
            counters,
            shared,
            index,
            peers,
            wanted,
            held,
            held_bytes,
            out,
            umem,
            ..
        } = self;
        let rx_size = port.xsk().rx.size();
        let mut on_segment =
            |mac, src: SocketAddr, dst, repr: &TcpRepr, parts: crate::worker::port::Parts<'_>| {
                let payload_len: usize = parts.iter().map(|p| p.len()).sum();
                if let Some(pos) = table.find(&dst, &src) {
                    if let Some(s) = table.get_mut(pos) {
                        // In-order payload goes to the sink or application
                        // straight from the receive frame; only what it cannot
                        // take now is copied into the receive buffer.
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
                    }
                    table.mark(pos);
                    return;
                }
                // Another worker's connection (RSS put it on our queue)?
                let tuple = FourTuple {
                    local: dst,
                    remote: src,
                };
                let key = shared.registry.key(&tuple);
                let owner = shared.registry.get(key).map(usize::from);
                // The listener's: a handshake it holds (its SYN came in
                // here), or a segment of no connection at all (a SYN, or
                // one it resets).
                let to_listener = match owner {
                    Some(o) => o == *index && listener.as_ref().is_some_and(|l| l.holds(&tuple)),
                    None => listener.as_ref().is_some_and(|l| l.serves(dst)),
                };
                if let (true, Some(l)) = (to_listener, listener.as_mut()) {
                    if owner.is_none() {
                        macs[mac_slot(&src.ip())] = (src.ip(), mac);
                    }
                    let mut a = Admit {
                        table,
                        ending,
                        shared,
                        umem,
                        out,
                        counters,
                        rst,
                    };
                    a.segment(l, now, dst, src, mac, repr, parts);
                    return;
                }
                if let Some(owner) = owner {
                    if owner != *index && payload_len == 0 {
                        // A pure ACK (or SYN-ACK, FIN): forward it, cheaply.
                        if peers[owner]
                            .try_send(Ctl::Segment {
                                key,
                                tuple,
                                repr: *repr,
                                mac,
                            })
                            .is_ok()
                        {
                            counters.forwarded += 1;
                        } else {
                            counters.misplaced += 1;
                        }
                        return;
                    }
                    // Data: ask for the connection (once a millisecond at
                    // most), and keep what came until it arrives (or, in
                    // transit to us, keep it anyway); what there is no room
                    // for, the peer sends again.
                    if owner != *index
                        && !wanted
                            .iter()
                            .any(|(k, t)| *k == key && now < *t + WANT_AGAIN)
                        && peers[owner]
                            .try_send(Ctl::Want {
                                key,
                                tuple,
                                to: *index,
                            })
                            .is_ok()
                    {
                        wanted.retain(|(_, t)| now < *t + WANT_AGAIN);
                        if wanted.len() < MAX_WANTED {
                            wanted.push((key, now));
                        }
                    }
                    if !hold(held, held_bytes, key, repr, parts, now) {
                        counters.misplaced += 1;
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

    /// The ICMP "packet too big" messages the receive found: each to its
    /// connection here, or forwarded to the worker that owns it; one about
    /// no connection is counted (and not answered).
    fn take_too_big(&mut self, now: Instant) {
        let Worker {
            port,
            table,
            counters,
            shared,
            index,
            peers,
            ..
        } = self;
        for t in port.too_big() {
            counters.too_big += 1;
            if give_too_big(table, counters, &t, now) {
                continue;
            }
            let tuple = FourTuple {
                local: t.local,
                remote: t.remote,
            };
            match shared
                .registry
                .get(shared.registry.key(&tuple))
                .map(usize::from)
            {
                Some(owner) if owner != *index => {
                    if peers[owner].try_send(Ctl::TooBig(t)).is_ok() {
                        counters.forwarded += 1;
                        counters.too_big_forwarded += 1;
                    } else {
                        counters.misplaced += 1;
                    }
                }
                _ => counters.no_connection += 1,
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
            table,
            ending,
            listener,
            macs,
            counters,
            out,
            gone,
            max_seg_frames,
            shared,
            held,
            held_bytes,
            ctl_hdr,
            reserve,
            shares,
            light,
            balanced_for,
            ..
        } = self;
        let frame_bytes = port.xsk().umem().frame_size().bytes();
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
        // The connections that have work, in the order it came (the ready
        // queue); one that still has work after its turn goes to the back,
        // so connections take turns at the TX ring. A turn serves at most
        // those waiting when it began.
        let waiting = table.ready_len();
        // The turn's TX budget, `tx_burst` descriptors shared by its
        // connections: what a turn queues goes out (in copy mode, inside
        // the kick) before the ACKs that arrive meanwhile are read, so the
        // turn's length is queueing delay for every connection (with a
        // budget per connection instead, 32 streams queued 2,048 packets a
        // turn and their RTT was 2–3 ms against the kernel's 70 µs). The
        // connections not reached when it ran out stay at the front of the
        // queue, untouched, and go first next turn: round-robin over turns,
        // at a cost per turn of the connections served, not of those
        // waiting.
        let mut turn_budget = shared.tx_burst;
        // A segment's payload pieces, filled by `payload_pieces` before each
        // use: cleared once a turn, not for every connection served (1.3 KiB
        // of stores, with many connections for a segment or two each).
        let mut pieces = [Piece::default(); MAX_PIECES];
        for _ in 0..waiting {
            if turn_budget == 0 {
                break;
            }
            let Some(pos) = table.pop_ready() else {
                break;
            };
            let Some(s) = table.get_mut(pos) else {
                continue;
            };
            if s.light
                && s.swept
                    .is_some_and(|(_, full)| s.conn.stats().window_full != full)
            {
                // Its peer used up the light window and waits: it is busy
                // after all. Its share comes with the next turn's shares.
                s.light = false;
                log_lightness(&s.conn, false, 0);
                *light -= 1;
                *balanced_for = usize::MAX;
                counters.light_promoted += 1;
            }
            if s.shares_epoch != shares.epoch {
                s.shares_epoch = shares.epoch;
                s.conn.set_send_limit(shares.send_slots);
                s.conn.set_recv_share(if s.light {
                    shares.recv_light
                } else {
                    shares.recv_bytes
                });
            }
            if s.deadline.is_some_and(|d| {
                now >= d
                    || (s.conn.state() == State::FinWait2 && shared.failed.load(Ordering::Relaxed))
            }) && s.conn.state() != State::Closed
            {
                s.deadline = None;
                if s.sent_whole() {
                    s.let_go();
                } else {
                    s.conn.abort(now);
                }
            }
            if s.conn.poll_timeout().is_some_and(|t| t <= now) {
                s.conn.handle_timeout(now);
            }
            // The interface's MTU fell since the engine started: the
            // connection follows, once synchronized (its MSS agreed).
            let link_mtu = shared.link_mtu.load(Ordering::Relaxed);
            if link_mtu != shared.mtu_at_start
                && s.link_mtu != link_mtu
                && s.conn.on_link_mtu(link_mtu)
            {
                s.link_mtu = link_mtu;
            }
            // `recv --rcv-timeout`: a stream that brings nothing for that
            // long is reset (its sender may have died without a word,
            // which would hold the receiver for ever).
            if let Some(t) = shared.rcv_timeout
                && s.awaits_stream()
            {
                let got = s.conn.stats().bytes_received;
                match s.rx_seen {
                    Some((n, at)) if n == got => {
                        if now >= at + t {
                            s.conn.abort_for(now, ConnectionError::ReceiveTimeout);
                        }
                    }
                    _ => s.rx_seen = Some((got, now)),
                }
            }
            // A bulk sender whose stream and FIN are acknowledged has done
            // its transfer: it waits `grace` for the peer's FIN, then lets
            // the connection go (a receiver that keeps its socket open
            // would hold it for ever); when stopping (SIGINT/SIGTERM: a
            // stop deadline set), at once, as nothing is left to wait for
            // but that FIN.
            if s.sent_whole() {
                let since = *s.fin_acked.get_or_insert(now);
                if s.deadline.is_some() || now >= since + shared.grace {
                    s.let_go();
                }
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
            // This connection's part of the turn's budget: an even share
            // among the turn's connections, but at least a
            // `TURN_SHARERS`th (a burst per connection is what the peer's
            // stack handles best; bursts of a segment or two cost every
            // connection a turn per segment). Counting frames
            // (descriptors) bounds packets at small MTUs and bytes at large
            // ones; a connection's turn sends at least one segment.
            let mut budget = (shared.tx_burst / waiting)
                .max(shared.tx_burst / TURN_SHARERS)
                .max(2)
                .min(turn_budget);
            let budget_at_start = budget;
            // And, like Linux's TCP Small Queues, about a millisecond of the
            // connection's rate at once (at least two segments), so that
            // many streams do not each queue a full burst ahead of the ACKs.
            let mut bytes_left = small_queue(&s.conn);
            let mut cut = true;
            // A whole segment's descriptors (its payload frame-aligned).
            let mss = s.conn.send_mss().max(1);
            let seg_descs = XskPort::descs_for(mss.div_ceil(shared.tcp.frame_len.max(1)));
            while budget > 0 && bytes_left > 0 {
                // New data goes in bursts (`poll_transmit_gso`): as many
                // whole segments as the budgets and the ring's room take.
                let room = port.room_for(*max_seg_frames);
                if room == 0 {
                    full = true;
                    break;
                }
                // (And no more than one `seg` cursor takes at once.)
                let segs = (budget / seg_descs)
                    .min(bytes_left.div_ceil(mss))
                    .min(room)
                    .min(MAX_PIECES / (seg_descs - 1))
                    .max(1);
                let Some(seg) = s.conn.poll_transmit_gso(now, segs) else {
                    cut = false;
                    break;
                };
                let t = s.conn.tuple();
                // A burst of whole frames goes out with one `seg` cursor;
                // else segment by segment.
                if seg.count() > 1
                    && port.takes_bursts_of(seg.seg_len)
                    && let Some(n) = s.conn.payload_pieces(&seg, &mut pieces)
                    && port
                        .send_burst(
                            s.mac,
                            t.local,
                            t.remote,
                            &seg,
                            &pieces[..n],
                            s.conn.send_memory_mut(),
                            &mut s.hdr,
                        )
                        .is_some()
                {
                    // What did not go out (counted) TCP retransmits.
                    budget = budget.saturating_sub(seg.count() + n);
                    bytes_left = bytes_left.saturating_sub(seg.len);
                    continue;
                }
                // The later segments of a burst keep the header template
                // the first one built (if it went out; else each builds).
                let mut templated = false;
                for i in 0..seg.count() {
                    let part = seg.part(i);
                    let n = s.conn.payload_pieces(&part, &mut pieces).unwrap_or(0);
                    budget = budget.saturating_sub(XskPort::descs_for(n));
                    bytes_left = bytes_left.saturating_sub(part.len);
                    // Refused sends (MTU) are counted by the port; TCP
                    // retransmits.
                    if !templated {
                        templated = port.send_segment(
                            s.mac,
                            t.local,
                            t.remote,
                            &part.repr,
                            &pieces[..n],
                            s.conn.send_memory_mut(),
                            &mut s.hdr,
                        );
                    } else {
                        port.send_next_part(
                            &part.repr,
                            &pieces[..n],
                            s.conn.send_memory_mut(),
                            &mut s.hdr,
                        );
                    }
                }
            }
            turn_budget -= budget_at_start - budget;
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
                                let _ = out.send(Msg::app(AppIn::Opened {
                                    id: a.id,
                                    tuple: s.conn.tuple(),
                                    out: tx,
                                    congestion: s.conn.congestion_name(),
                                    mss: s.conn.send_mss() as u32,
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
            let time_wait = s.conn.state() == State::TimeWait;
            // (Each change of state is followed by the connection's turn.)
            *ending |= time_wait;
            let done = closed.or(time_wait.then_some(CloseReason::Normal));
            if let Some(reason) = done {
                s.end(now, reason, counters.queue, frame_bytes, out);
            }
            if let Some(reason) = closed {
                s.app_closed(reason, out);
            }
            if closed.is_some() {
                port.take_back(s.conn.send_memory_mut());
                add_stats(gone, s.conn.stats());
                shared.registry.remove(s.key);
                let key = s.key;
                // What was held for it goes (counted), and its payload's
                // room with it.
                let before = held.len();
                held.retain(|h| h.key != key);
                if held.len() < before {
                    counters.misplaced += (before - held.len()) as u64;
                    compact_held(held, held_bytes);
                }
                if s.light {
                    *light -= 1;
                }
                table.remove(pos);
                continue;
            }
            // Next turn: at once if it has work left (its TX budget ran
            // out, its source or sink can go on), else when a segment or
            // its timer (or the stop deadline, or its sink's part-full
            // chunk's) comes.
            let more = cut || s.wants_turn();
            let linger = s
                .fin_acked
                .filter(|_| s.conn.state() == State::FinWait2)
                .map(|t| t + shared.grace);
            let at = [
                s.conn.poll_timeout(),
                s.deadline,
                s.sink.flush_at(),
                linger,
                s.rcv_deadline(shared.rcv_timeout),
            ]
            .into_iter()
            .flatten()
            .min();
            if more {
                table.mark(pos);
            }
            table.arm(pos, at);
        }
    }
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

/// A "packet too big" to its connection, if `table` holds it (false where
/// not); one the connection does not take is counted.
fn give_too_big(
    table: &mut Table,
    counters: &mut WorkerCounters,
    t: &TooBig,
    now: Instant,
) -> bool {
    let Some(pos) = table.find(&t.local, &t.remote) else {
        return false;
    };
    if let Some(s) = table.get_mut(pos)
        && !s.conn.on_packet_too_big(now, t.mtu, t.seq, t.quoted_len)
    {
        counters.too_big_ignored += 1;
    }
    table.mark(pos);
    true
}

fn add_stats(t: &mut Stats, s: &Stats) {
    t.segments_sent += s.segments_sent;
    t.retransmits += s.retransmits;
    t.bytes_received += s.bytes_received;
    t.bytes_sent += s.bytes_sent;
    t.paws_drops += s.paws_drops;
    t.out_of_window += s.out_of_window;
    t.old_sequence += s.old_sequence;
    t.challenge_acks += s.challenge_acks;
    t.invalid_acks_skipped += s.invalid_acks_skipped;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr(seq: u32) -> TcpRepr {
        TcpRepr {
            src_port: 1,
            dst_port: 2,
            seq: SeqNumber(seq),
            ack: SeqNumber(0),
            flags: crate::wire::TcpFlags::ACK,
            window: 100,
            urgent: 0,
            options: Default::default(),
        }
    }

    /// Held segments keep their payloads, in order, within their bounds;
    /// the old ones expire (counted) and the payloads of the rest move to
    /// the front, as they do when a connection's segments are taken out.
    #[test]
    fn held_segments_keep_their_payloads_within_bounds_and_expire() {
        let reg = Registry::new(16);
        let key = |port: u16| {
            reg.key(&FourTuple {
                local: SocketAddr::from(([198, 18, 0, 1], 5201)),
                remote: SocketAddr::from(([198, 18, 0, 2], port)),
            })
        };
        let (a, b) = (key(1000), key(1001));
        let mut held = Vec::with_capacity(MAX_HELD);
        let mut bytes = Vec::with_capacity(HELD_BYTES);
        let t0 = Instant::now();
        let payload =
            |h: &Held, bytes: &[u8]| bytes[h.off as usize..(h.off + h.len) as usize].to_vec();
        assert!(hold(
            &mut held,
            &mut bytes,
            a,
            &repr(1),
            &[b"ab", b"cd"],
            t0
        ));
        assert!(hold(
            &mut held,
            &mut bytes,
            b,
            &repr(2),
            &[b"xyz"],
            t0 + HOLD_FOR / 2
        ));
        assert!(hold(
            &mut held,
            &mut bytes,
            a,
            &repr(3),
            &[],
            t0 + HOLD_FOR / 2
        ));
        assert_eq!(payload(&held[0], &bytes), b"abcd");
        assert_eq!(payload(&held[1], &bytes), b"xyz");
        assert_eq!(held[2].len, 0);
        // Connection `a` arrives: its two go, `b`'s payload moves to the front.
        held.retain(|h| h.key != a);
        compact_held(&mut held, &mut bytes);
        assert_eq!((held.len(), held[0].off, bytes.len()), (1, 0, 3));
        assert_eq!(payload(&held[0], &bytes), b"xyz");
        // Nothing expires until the oldest is HOLD_FOR old.
        let mut misplaced = 0;
        expire_held(&mut held, &mut bytes, t0 + HOLD_FOR, &mut misplaced);
        assert_eq!((held.len(), misplaced), (1, 0));
        expire_held(&mut held, &mut bytes, t0 + HOLD_FOR * 2, &mut misplaced);
        assert_eq!((held.len(), bytes.len(), misplaced), (0, 0, 1));
        // The bounds: the bytes, then the count; the memory never grows.
        let big = vec![7u8; HELD_BYTES];
        assert!(hold(
            &mut held,
            &mut bytes,
            a,
            &repr(4),
            &[&big[..HELD_BYTES - 1]],
            t0
        ));
        assert!(!hold(&mut held, &mut bytes, a, &repr(5), &[b"ab"], t0));
        assert!(hold(&mut held, &mut bytes, a, &repr(6), &[b"a"], t0));
        held.clear();
        bytes.clear();
        for i in 0..MAX_HELD {
            assert!(hold(&mut held, &mut bytes, a, &repr(i as u32), &[], t0));
        }
        assert!(!hold(&mut held, &mut bytes, a, &repr(0), &[], t0));
        assert_eq!((held.capacity(), bytes.capacity()), (MAX_HELD, HELD_BYTES));
    }

    /// The receive shares never add up to more than the budget, a light
    /// connection gets no more than a SYN-ACK's window nor than an even
    /// share, and the others no less than an even share.
    #[test]
    fn light_connections_leave_the_receive_budget_to_the_busy_ones() {
        let mss = 1448;
        let b = Budget {
            send_frames: 0,
            min_send_slots: 0,
            rx_bytes: 192 * mss,
            first_window: FIRST_WINDOW_SEGMENTS * mss,
        };
        for n in 1..=300 {
            let nz = NonZeroUsize::new(n).unwrap();
            let even = b.rx_bytes / n;
            for light in 0..=n + 1 {
                let (busy, lite) = recv_shares(&b, nz, light);
                let light = light.min(n);
                assert!(lite <= even.min(b.first_window), "{n} {light}");
                assert!(busy >= even, "{n} {light}");
                assert!(
                    busy * (n - light) + lite * light <= b.rx_bytes,
                    "{n} {light}"
                );
            }
        }
        // iperf3's control connection and one stream: the stream gets all
        // but four segments (it got half before).
        let two = NonZeroUsize::new(2).unwrap();
        assert_eq!(recv_shares(&b, two, 1), (188 * mss, 4 * mss));
        assert_eq!(recv_shares(&b, two, 0), (96 * mss, 4 * mss));
        // --bidir: the control connection and the sending stream are light.
        let three = NonZeroUsize::new(3).unwrap();
        assert_eq!(recv_shares(&b, three, 2), (184 * mss, 4 * mss));
    }
}
