//! One TCP connection: the RFC 9293 state machine with its sender and receiver.
//!
//! Methods, by role (call order in the module doc of [`crate::tcp`]):
//!
//! - constructors: [`Connection::connect`] (active open; a SYN is ready to
//!   poll), [`Connection::accept`] (passive open from a received SYN; a SYN-ACK
//!   is ready to poll — usually done by a [`super::Listener`]), with the send
//!   buffer on the heap; [`Connection::connect_in`] / [`Connection::accept_in`]
//!   with it in a [`SendMemory`] of the caller's (the engine's UMEM frames);
//! - inputs: [`Connection::handle_segment`], [`Connection::handle_timeout`];
//! - outputs: [`Connection::poll_transmit`] (or in bursts
//!   [`Connection::poll_transmit_gso`]; + [`Connection::payload_pieces`],
//!   the payload by reference with its sums),
//!   [`Connection::poll_event`], [`Connection::poll_timeout`];
//! - mutators: [`Connection::set_congestion_control`];
//! - application: [`Connection::write`] (copies in), in place
//!   [`Connection::fill`] / [`Connection::fill_vectored`] /
//!   [`Connection::fill_zeros`], [`Connection::read`],
//!   [`Connection::read_slices`], [`Connection::consume`], [`Connection::close`],
//!   [`Connection::abort`];
//! - getters: [`Connection::state`], [`Connection::stats`], [`Connection::tuple`],
//!   [`Connection::cwnd`], [`Connection::rto`], [`Connection::srtt`], …
//!
//! Sequence space is tracked as 64-bit stream offsets (`seq = ISS + 1 + offset`
//! on the send side, `IRS + 1 + offset` on the receive side), so nothing
//! wraps inside the core; [`SeqNumber`] appears only at the wire boundary.
//! RTT is measured with one timed segment per round trip (Karn's rule: the
//! sample is dropped if that segment is retransmitted) and, after
//! retransmissions, from timestamp echoes (RFC 7323 RTTM); timestamps also
//! serve PAWS.

use super::cc::{Ack, CongestionControl};
use super::isn::IsnGenerator;
use super::ranges::RangeSet;
use super::recv::{Accepted, RecvBuffer, RecvWindow};
use super::rtt::{RttEstimator, nanos};
use super::send::{HeapFrames, Piece, SendBuffer, SendMemory};
use super::{CloseReason, Config, ConnectionError, Event, FourTuple, Stats, WriteError};
use crate::seg::clip_mss;
use crate::wire::{SackBlocks, SeqNumber, TcpFlags, TcpOptions, TcpRepr, TcpTimestamp};
use std::cell::Cell;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// RFC 9293 connection states (LISTEN is the [`super::Listener`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// SYN sent, waiting for SYN-ACK.
    SynSent,
    /// SYN received and SYN-ACK sent.
    SynReceived,
    /// Data flows both ways.
    Established,
    /// We closed; our FIN not yet acknowledged.
    FinWait1,
    /// Our FIN acknowledged; waiting for the peer's.
    FinWait2,
    /// The peer closed; we may still send.
    CloseWait,
    /// Both closed at once; our FIN not yet acknowledged.
    Closing,
    /// The peer closed first, then we did; waiting for the ACK of our FIN.
    LastAck,
    /// Both FINs done; lingering (see the module doc on TIME-WAIT).
    TimeWait,
    /// Finished.
    Closed,
}

impl State {
    fn synchronized(self) -> bool {
        !matches!(self, State::SynSent | State::SynReceived | State::Closed)
    }
}

/// A segment to send: the header, and the payload as a range of the send
/// stream (where it lies: [`Connection::payload_pieces`]).
///
/// From [`Connection::poll_transmit_gso`] it may stand for a burst of
/// segments (segmentation offload inside the engine, as a kernel's TSO
/// super-packet does): `len` is then several times `seg_len`, and
/// [`Segment::part`] gives the segments that go on the wire, each with
/// this header but its own sequence number, PSH and FIN on the last only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Header fields and options (checksum is the caller's).
    pub repr: TcpRepr,
    /// Stream offset of the first payload byte.
    pub offset: u64,
    /// Payload bytes.
    pub len: usize,
    /// Payload bytes per segment on the wire (`len` for one segment).
    pub seg_len: usize,
}

impl Segment {
    /// A single segment.
    pub(crate) fn single(repr: TcpRepr, offset: u64, len: usize) -> Segment {
        Segment {
            repr,
            offset,
            len,
            seg_len: len,
        }
    }

    /// How many segments go on the wire.
    pub fn count(&self) -> usize {
        if self.len <= self.seg_len {
            1
        } else {
            self.len.div_ceil(self.seg_len)
        }
    }

    /// The `i`th of the [`Segment::count`] segments on the wire: its share
    /// of the payload, the sequence number advanced to it, and PSH and FIN
    /// only if it is the last.
    pub fn part(&self, i: usize) -> Segment {
        if self.len <= self.seg_len {
            return *self;
        }
        let start = i * self.seg_len;
        let len = self.seg_len.min(self.len - start);
        let mut repr = self.repr;
        repr.seq += start;
        if start + len < self.len {
            repr.flags = repr.flags.without(TcpFlags::PSH | TcpFlags::FIN);
        }
        Segment::single(repr, self.offset + start as u64, len)
    }
}

#[derive(Debug, Clone, Copy)]
enum Timer {
    /// RTO (also SYN / SYN-ACK / FIN retransmission).
    Retransmit = 0,
    /// Zero-window probe.
    Persist = 1,
    DelayedAck = 2,
    TimeWait = 3,
    /// Pacing: the next new-data segment may leave then.
    Pacing = 4,
    /// SACK recovery stuck on an unSACKed tail: rescue retransmission then.
    Rescue = 5,
    /// An active open gives up if still unanswered then
    /// ([`Config::connect_timeout`]).
    Connect = 6,
    /// Loss probe (RFC 8985 §7's tail loss probe): no ACK for a probe
    /// timeout while data is in flight and no RTO recovery runs.
    LossProbe = 7,
}
const TIMERS: usize = 8;
/// A timer not armed.
const NO_TIMER: u64 = u64::MAX;

/// The timers' deadlines, as nanoseconds since the connection's epoch
/// ([`NO_TIMER`]: not armed): 8 bytes each instead of an `Option<Instant>`'s
/// 16, all of them one cache line.
#[derive(Debug, Clone, Copy)]
struct Timers([u64; TIMERS]);

impl Timers {
    /// None armed.
    const NONE: Timers = Timers([NO_TIMER; TIMERS]);

    fn armed(&self, t: Timer) -> bool {
        self.0[t as usize] != NO_TIMER
    }
}

const EV_CONNECTED: u8 = 1;
const EV_READABLE: u8 = 2;
const EV_WRITABLE: u8 = 4;

/// A TCP connection (see the module doc for the method groups).
///
/// `M` is where the send buffer's bytes live ([`SendMemory`]): UMEM frames
/// in the engine, [`HeapFrames`] for sans-IO use.
// The fields in the order they lie in memory (`repr(C)`): those a data
// segment or its acknowledgement reads or writes on either end come first,
// packed, so that a segment touches few cache lines of a connection; its
// sub-structures begin with their own hot fields; configuration, statistics
// beyond the hot counters and what only setup, loss or closing needs come
// last. With hundreds of connections a worker finds most of their state out
// of its caches, and each line a segment touches is a miss
// (`benches/conns-cachesim.sh` counts them; docs/BENCHMARKS.md, "Many
// streams on one queue").
#[derive(Debug)]
#[repr(C)]
pub struct Connection<M = HeapFrames> {
    // ----- hot: every segment or ACK, either direction
    /// Addresses and ports (a worker finds a segment's connection by them).
    tuple: FourTuple,
    /// Send offsets: oldest unacknowledged, next to send, highest sent
    /// (exclusive; the FIN occupies offset `send.tail()`).
    una: u64,
    nxt: u64,
    max: u64,
    snd_wnd: usize,
    max_snd_wnd: usize,
    send_mss: usize,
    /// min(peer MSS, our MSS): payload + options per segment.
    mss_limit: usize,
    /// Right edge of the window we advertised (receive offset).
    rcv_adv: u64,
    unacked_bytes: usize,
    last_ack_sent: u64,
    /// Highest offset retransmitted in this recovery (RFC 6675 HighRxt).
    high_rxt: u64,
    /// Congestion window validation (RFC 7661, as Linux does it): the most
    /// bytes in flight in the current window of sent data (`max_flight`),
    /// and where that window ends (a send offset); see
    /// [`Connection::cwnd_validate`].
    cwnd_usage_end: u64,
    iss: SeqNumber,
    irs: SeqNumber,
    snd_wl1: SeqNumber,
    snd_wl2: SeqNumber,
    ts_recent: u32,
    /// When TS.Recent was last set, seconds since the epoch (RFC 7323
    /// §5.5's 24 days count from it; Linux's `ts_recent_stamp`).
    ts_recent_at: u32,
    /// The largest payload received, bytes.
    largest_seg: u32,
    retries: u32,
    dupacks: u32,
    max_flight: u32,
    state: State,
    snd_wscale: u8,
    rcv_wscale: u8,
    events: u8,
    syn_acked: bool,
    ws_ok: bool,
    fin_queued: bool,
    fin_acked: bool,
    fin_received: bool,
    ack_now: bool,
    sack_ok: bool,
    ts_ok: bool,
    force_retransmit: bool,
    /// The congestion window limited sending in the current window of
    /// sent data (it may grow on an ACK only then, or in slow start).
    cwnd_limited: bool,
    probe_pending: bool,
    /// The rescue timer fired: the rescue retransmission may go.
    rescue_due: bool,
    /// The loss probe timer fired: a probe goes next.
    tlp_due: bool,
    /// A loss probe went and nothing new has been acknowledged since (one
    /// probe a tail).
    tlp_out: bool,
    /// The probe was new data: a second new segment goes with it.
    tlp_second: bool,
    send_syn: bool,
    closed_reported: bool,
    /// An RST to send: flags, sequence and acknowledgement numbers.
    pending_rst: Option<(TcpFlags, SeqNumber, SeqNumber)>,
    /// The connection's clock: the last time it converted to nanoseconds
    /// since its epoch (when it was created), and what that came to
    /// ([`Connection::since_epoch`]). One call into the TCP turns the same
    /// `now` into nanoseconds for every timer, timestamp and sample it
    /// takes, and `Instant`'s subtraction is ~50 instructions.
    clock: Cell<(Instant, u64)>,
    cc: Box<dyn CongestionControl>,
    /// Loss recovery in progress until `una` reaches this offset.
    recover: Option<u64>,
    /// Under auto-tuning ([`Config::send_initial`]), the slots the buffer
    /// has grown to; the limit in force is the smaller of the two.
    send_auto: Option<usize>,
    /// A FIN seen beyond a hole, at this receive offset ([`NO_FIN`]: none).
    ooo_fin: u64,
    /// Pacing: earliest departure of the next new-data segment,
    /// nanoseconds since the epoch ([`NO_TIMER`]: none).
    pace_next: u64,
    /// Timed segment: send offset whose acknowledgement gives a sample,
    /// and when it went (nanoseconds since the epoch).
    rtt_timing: Option<(u64, u64)>,
    /// SACK scoreboard (send offsets, truncated to 32 bits).
    sacked: RangeSet,
    timers: Timers,
    rtt: RttEstimator,
    send: SendBuffer<M>,
    recv: RecvBuffer,
    stats: Stats,
    cfg: Config,

    // ----- cold: setup, loss recovery, tuning, closing
    /// The send buffer's limit, slots, as the worker shares its frames
    /// ([`Connection::set_send_limit`]).
    send_share: usize,
    /// Auto-tuning's estimate of the bandwidth-delay product, bytes.
    bdp: usize,
    /// Where its current interval began: (nanoseconds since the epoch,
    /// SND.UNA).
    delivery: Option<(u64, u64)>,
    /// A send buffer doubled beyond the smallest-RTT estimate, on trial
    /// ([`Connection::probe_send_buffer`]).
    send_probe: Option<SendProbe>,
    /// Delivery intervals to wait before the next trial, and the wait
    /// after the next failed one (doubling from [`PROBE_BACKOFF`]).
    send_probe_wait: (u32, u32),
    /// SND.MAX (an offset) right after a zero-window probe sent a byte (or
    /// the FIN) that nothing had sent before; 0 for none. While SND.MAX is
    /// still there, that byte going again — the next probes, and the data
    /// from SND.UNA once the window opens — is no retransmission: nothing
    /// was lost, and Linux's senders, whose probes carry no data, count
    /// none in the same exchange.
    probe_end: u64,
    /// Under [`Config::user_timeout`]: when the data unacknowledged since
    /// the first retransmission timeout of a row was sent (the timer's
    /// arming: nanoseconds since the epoch), and when the first
    /// zero-window probe of a row went; [`NO_TIMER`]: none.
    stall_since: u64,
    probe_since: u64,
    /// The send buffer was full and all of it sent since the last delivery
    /// interval ended (nothing more could go until an ACK).
    send_buf_limited: bool,
    /// The delivery rate of the last interval, bytes a second.
    last_rate: u64,
    /// Recovery point of the last rescue retransmission (RFC 6675
    /// RescueRxt): one rescue per recovery.
    rescue_rxt: Option<u64>,
    /// SND.MAX when the last RTO fired (RFC 6675 §5.1's RecoveryPoint; 0
    /// before any): until `una` reaches it no fast recovery begins.
    rto_recover: u64,
    /// `retries` when the MSS was last stepped down for an MTU black hole
    /// (0 after progress), and the bytes acknowledged then (or at the
    /// start): see [`Connection::black_hole_step`].
    mss_stepped_at: u32,
    acked_at_mss: u64,
    /// The MTU in force is one a hop reported ([`Connection::on_packet_too_big`]):
    /// the path takes packets of this size, and a run of timeouts is taken
    /// for an outage, as after large segments were acknowledged.
    mtu_reported: bool,
    /// `mss_limit` as the handshake agreed it, before any step.
    mss_limit_agreed: usize,
    /// When the MTU a hop reported expires ([`Config::pmtu_expires`]), as
    /// nanoseconds since the epoch; [`NO_TIMER`]: no reported MTU in
    /// force. Checked with each timed RTT sample (once a round trip while
    /// data flows): with nothing in flight, no segment needs the MSS.
    pmtu_expiry: u64,
    /// What a recovery may send ([`Prr`]).
    prr: Prr,
    /// Undoing a recovery that was not needed ([`Undo`]).
    undo: Undo,
    /// The highest send offset retransmitted so far (end, exclusive).
    rxt_high: u64,
    /// A SACK recovery's retransmissions not yet delivered, in the order
    /// they went ([`Connection::find_lost_retransmissions`]); at most
    /// [`RXT_LOG`], allocated with the buffers at establishment.
    rxt_log: VecDeque<RxtSent>,
    /// Entries of `rxt_log` found lost and not yet sent again.
    rxt_lost: u32,
    /// Segments that must be SACKed above a hole before it counts as lost
    /// (RFC 6675's DupThresh): [`DUPTHRESH`], raised to the reordering the
    /// path shows ([`Connection::note_reordering`]).
    reordering: u32,
    last_ooo: Option<u64>,
    /// A duplicate that arrived, to report once in the next ACK's first
    /// SACK block (RFC 2883 D-SACK): offsets, end exclusive.
    dsack: Option<(u64, u64)>,
    /// When a segment without data that was not acceptable was last
    /// answered, or a challenge ACK sent ([`Connection::throttled`]).
    last_invalid_ack: Option<Instant>,
    error: Option<ConnectionError>,
    closed: Option<CloseReason>,
}

/// Proportional rate reduction (RFC 9937): what a fast recovery may send.
/// Over the recovery the sender sends `ssthresh / RecoverFS` of what the
/// peer reports delivered, so that the flight comes down to the congestion
/// controller's target evenly, ACK by ACK, instead of not at all until the
/// pipe falls below it and then at once (RFC 6675's `cwnd − pipe`); once
/// the pipe is below the target (heavy losses), it grows back no faster
/// than slow start would. Bytes throughout.
#[derive(Debug, Clone, Copy, Default)]
struct Prr {
    /// Bytes the peer reported delivered since the recovery began
    /// (cumulatively or by SACK; a duplicate ACK without SACK counts as a
    /// segment).
    delivered: usize,
    /// Bytes sent since (new data and retransmissions).
    out: usize,
    /// RecoverFS: the flight when it began, less what was SACKed before.
    recover_fs: usize,
    /// The congestion window in force until the next ACK: the pipe at the
    /// last ACK plus what that ACK allowed (`sndcnt`).
    cwnd: usize,
}

/// A recovery's retransmissions, to tell whether it was needed: when the
/// peer reports (D-SACK, RFC 2883) that it received each of them twice
/// (as Linux's `tcp_try_undo_dsack`), or the echo of the ACK that covers
/// them all names a transmission older than the first (as Linux's
/// `tcp_packet_delayed`), the originals got there, and the window
/// reduction is undone.
#[derive(Debug, Clone, Copy, Default)]
struct Undo {
    /// SND.UNA when the recovery began; None: nothing to undo.
    marker: Option<u64>,
    /// Segments retransmitted since, not yet reported as duplicates.
    retrans: u32,
    /// The timestamp (TSval) of the first of them, if timestamps are on.
    rxt_ts: Option<u32>,
    /// Something was retransmitted twice since: a duplicate the peer
    /// reports may be two retransmissions, not a late original.
    again: bool,
    /// The most bytes SACKed above a retransmitted hole when an ACK showed
    /// it filled: how late the original was, if it was the original.
    fill_extent: usize,
}

/// A retransmission in a SACK recovery, followed until the peer has it:
/// if enough data first sent after it is SACKed while it is not, it was
/// lost too ([`Connection::find_lost_retransmissions`]).
#[derive(Debug, Clone, Copy)]
struct RxtSent {
    /// What it carried: send offsets, end exclusive.
    start: u64,
    end: u64,
    /// SND.MAX when it went: every byte from here on was first sent after
    /// it.
    mark: u64,
    /// Found lost; sent again before anything else the recovery sends.
    lost: bool,
}

/// The most retransmissions of a recovery followed at once (beyond, a lost
/// one waits for the loss probe or the RTO, as RFC 6675 has it).
const RXT_LOG: usize = 32;

/// RFC 6675's DupThresh: what a sender assumes until the path shows
/// reordering.
const DUPTHRESH: u32 = 3;

/// Timeouts in a row after which large segments are taken for an MTU
/// black hole ([`Connection::black_hole_step`]; Linux waits for
/// `tcp_retries1`, 3) ...
const BLACK_HOLE_RTOS: u32 = 2;

/// ... or, where segments larger than the next smaller MTU carries have
/// been acknowledged at this MSS (the path took them: an outage, not the
/// MTU, is the likelier cause), this many (the RTO has then grown to 64
/// times its base, some 25 s of silence).
const BLACK_HOLE_RTOS_AFTER_PROGRESS: u32 = 6;

/// Common MTUs (largest first) the MSS steps down to in an MTU black hole:
/// jumbo frames, Ethernet, IPv6's minimum (and tunnels' usual room), and
/// IPv4's minimum reassembly size.
const MTU_PLATEAUS: [usize; 4] = [9000, 1500, 1280, 576];
/// The most reordering (segments) a sender waits out before calling a
/// hole lost, as Linux's `tcp_max_reordering`.
const MAX_REORDERING: u32 = 300;

/// A send-buffer size on trial ([`Connection::probe_send_buffer`]).
#[derive(Debug, Clone, Copy)]
struct SendProbe {
    /// Slots before the trial.
    from: usize,
    /// Delivery rate before it, bytes a second.
    rate: u64,
    /// Best delivery rate since.
    best: u64,
    /// Delivery intervals since.
    intervals: u32,
}

/// Delivery intervals (each at least a smoothed RTT) a larger send buffer
/// has to raise the delivery rate by a quarter.
const PROBE_INTERVALS: u32 = 4;
/// Delivery intervals before another trial after one that did not pay;
/// doubled with each such trial in a row, up to [`PROBE_BACKOFF_MAX`].
const PROBE_BACKOFF: u32 = 8;
/// The longest wait between trials, delivery intervals.
const PROBE_BACKOFF_MAX: u32 = 1024;

/// What a loss probe waits beyond two smoothed RTTs for an ACK: Linux
/// waits two jiffies (8 ms at Debian's 250 Hz). On a veth pair, where the
/// RTT is tens of microseconds, 2 ms made probes of ACKs merely held up by
/// the scheduler (8 to 52 needless retransmissions in a 3-s `xtcp client`
/// test on the 2-core VM), 5 ms a few, 10 ms none.
const PROBE_SLACK: Duration = Duration::from_millis(10);
/// The same for a probe that will be new data (the send buffer holds some
/// and the receive window takes it): sent early, it is data that was to go
/// anyway, not a retransmission.
const NEW_DATA_PROBE_SLACK: Duration = Duration::from_millis(2);

/// How late a sender paced at a cap ([`Config::max_pacing_rate`]: `-b`,
/// `--fq-rate`) may catch up: a worker that runs after the segment's
/// time (the scheduler gave its core to another task for a few ms) sends
/// what the cap allowed meanwhile at once, up to this much of it, so that
/// the rate is the cap's on a busy host too (iperf3's `-b` throttle makes
/// up all of it). Under a CPU hog on the 2-core VM, without it, a stream
/// paced at 100 Mbit/s got 86.
const PACE_CATCH_UP: Duration = Duration::from_millis(10);

/// The least delayed-ACK time where the RTT is shorter (see
/// `Connection::delayed_ack`): a millisecond lets a pair's second segment
/// come whatever holds it up on the way (a scheduler, a batch), and holds
/// a trickle of lone segments to an ACK a millisecond.
const DELAYED_ACK_FLOOR: Duration = Duration::from_millis(1);

/// The offset of a segment that starts `d` bytes after RCV.NXT (`nxt`),
/// where offsets start at the peer's first data byte (none before it).
fn rcv_nxt_off(nxt: u64, d: i64) -> u64 {
    (nxt as i64 + d).max(0) as u64
}

/// [`Connection`]'s `ooo_fin` when no FIN waits beyond a hole.
const NO_FIN: u64 = u64::MAX;

/// How long TS.Recent holds for PAWS without being set again (RFC 7323
/// §5.5; Linux's `TCP_PAWS_24DAYS`): less than the 24.8 days in which a
/// clock of a millisecond a tick moves half the 32-bit timestamp space.
const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);

fn key(off: u64) -> SeqNumber {
    SeqNumber(off as u32)
}

impl Connection<HeapFrames> {
    /// Active open: the first `poll_transmit` yields the SYN.
    pub fn connect(cfg: Config, tuple: FourTuple, isn: &IsnGenerator, now: Instant) -> Self {
        let iss = isn.isn(&tuple, now);
        Connection::new(cfg, tuple, iss, now, State::SynSent, HeapFrames::default())
    }

    /// Active open with a given initial sequence number (an engine that
    /// plans its connections on one thread and opens them on others
    /// computes the ISS with [`IsnGenerator::isn`] when it plans).
    pub fn connect_with_iss(cfg: Config, tuple: FourTuple, iss: SeqNumber, now: Instant) -> Self {
        Connection::new(cfg, tuple, iss, now, State::SynSent, HeapFrames::default())
    }

    /// Passive open from a received SYN (no ACK, no RST): the first
    /// `poll_transmit` yields the SYN-ACK. `None` if `syn` is not a SYN.
    pub fn accept(
        cfg: Config,
        tuple: FourTuple,
        isn: &IsnGenerator,
        now: Instant,
        syn: &TcpRepr,
    ) -> Option<Self> {
        Connection::accept_in(cfg, tuple, isn, now, syn, HeapFrames::default())
    }

    /// The payload of `seg` as up to two slices of the heap ring.
    pub fn payload(&self, seg: &Segment) -> (&[u8], &[u8]) {
        let data = self.send.memory().bytes();
        let cap = data.len();
        if cap == 0 || seg.len == 0 {
            return (&[], &[]);
        }
        let pos = (seg.offset % cap as u64) as usize;
        let first = seg.len.min(cap - pos);
        (&data[pos..pos + first], &data[..seg.len - first])
    }
}

impl<M: SendMemory> Connection<M> {
    /// Active open with a given initial sequence number, the send buffer in
    /// `mem`.
    pub fn connect_in(cfg: Config, tuple: FourTuple, iss: SeqNumber, now: Instant, mem: M) -> Self {
        Connection::new(cfg, tuple, iss, now, State::SynSent, mem)
    }

    /// Passive open (see [`Connection::accept`]), the send buffer in `mem`.
    pub fn accept_in(
        cfg: Config,
        tuple: FourTuple,
        isn: &IsnGenerator,
        now: Instant,
        syn: &TcpRepr,
        mem: M,
    ) -> Option<Self> {
        if !syn.flags.contains(TcpFlags::SYN) || syn.flags.intersects(TcpFlags::ACK | TcpFlags::RST)
        {
            return None;
        }
        let iss = isn.isn(&tuple, now);
        let mut c = Connection::new(cfg, tuple, iss, now, State::SynReceived, mem);
        // The SYN it was made from is its first segment received (as Linux
        // counts a passive socket's `tcpi_segs_in`).
        c.stats.segments_received = 1;
        c.take_syn(now, syn);
        c.snd_wnd = syn.window as usize;
        c.max_snd_wnd = c.snd_wnd;
        c.snd_wl1 = syn.seq;
        Some(c)
    }

    fn new(
        cfg: Config,
        tuple: FourTuple,
        iss: SeqNumber,
        now: Instant,
        state: State,
        mem: M,
    ) -> Self {
        let cc = cfg
            .congestion
            .build(536, cfg.initial_cwnd_segments, cfg.hystart);
        let rtt = RttEstimator::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max);
        let send = SendBuffer::new(cfg.frame_len, cfg.send_frames, mem);
        let recv = RecvBuffer::new(cfg.recv_buffer, cfg.recv_window, cfg.max_ooo_ranges);
        let sacked = RangeSet::new(cfg.max_ooo_ranges.max(4));
        let mut c = Connection {
            tuple,
            state,
            clock: Cell::new((now, 0)),
            iss,
            syn_acked: false,
            una: 0,
            nxt: 0,
            max: 0,
            snd_wnd: 0,
            max_snd_wnd: 0,
            snd_wl1: SeqNumber(0),
            snd_wl2: SeqNumber(0),
            snd_wscale: 0,
            ws_ok: false,
            send_mss: 536,
            mss_limit: 536,
            send,
            send_share: cfg.send_frames,
            send_auto: cfg.send_initial,
            bdp: 0,
            delivery: None,
            send_probe: None,
            send_probe_wait: (0, PROBE_BACKOFF),
            probe_end: 0,
            stall_since: NO_TIMER,
            probe_since: NO_TIMER,
            send_buf_limited: false,
            last_rate: 0,
            fin_queued: false,
            fin_acked: false,
            cc,
            rtt,
            rtt_timing: None,
            retries: 0,
            mss_stepped_at: 0,
            acked_at_mss: 0,
            mtu_reported: false,
            mss_limit_agreed: 536,
            pmtu_expiry: NO_TIMER,
            dupacks: 0,
            recover: None,
            rto_recover: 0,
            high_rxt: 0,
            max_flight: 0,
            cwnd_usage_end: 0,
            cwnd_limited: false,
            rescue_rxt: None,
            prr: Prr::default(),
            undo: Undo::default(),
            rxt_high: 0,
            rxt_log: VecDeque::new(),
            rxt_lost: 0,
            reordering: DUPTHRESH,
            rescue_due: false,
            tlp_due: false,
            tlp_out: false,
            tlp_second: false,
            sacked,
            force_retransmit: false,
            probe_pending: false,
            pace_next: NO_TIMER,
            send_syn: true,
            irs: SeqNumber(0),
            recv,
            fin_received: false,
            ooo_fin: NO_FIN,
            rcv_adv: 0,
            rcv_wscale: 0,
            ack_now: false,
            unacked_bytes: 0,
            largest_seg: 0,
            last_ooo: None,
            dsack: None,
            sack_ok: false,
            ts_ok: false,
            ts_recent: 0,
            ts_recent_at: 0,
            last_ack_sent: 0,
            timers: {
                let mut t = Timers::NONE;
                if state == State::SynSent
                    && let Some(d) = cfg.connect_timeout
                {
                    // `now` is the epoch.
                    t.0[Timer::Connect as usize] = nanos(d);
                }
                t
            },
            pending_rst: None,
            last_invalid_ack: None,
            events: 0,
            error: None,
            closed: None,
            closed_reported: false,
            stats: Stats::default(),
            cfg,
        };
        c.apply_send_limit();
        c
    }

    // ------------------------------------------------------------ getters

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }
    /// Addresses.
    pub fn tuple(&self) -> FourTuple {
        self.tuple
    }
    /// Our initial sequence number.
    pub fn iss(&self) -> SeqNumber {
        self.iss
    }
    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// Congestion window, bytes.
    pub fn cwnd(&self) -> usize {
        self.cc.window()
    }
    /// Slow-start threshold, bytes (`usize::MAX` until slow start ends).
    pub fn ssthresh(&self) -> usize {
        self.cc.ssthresh()
    }
    /// Current RTO, backoff included.
    pub fn rto(&self) -> Duration {
        self.rtt.rto()
    }
    /// RTO doublings in effect.
    pub fn rto_backoff(&self) -> u32 {
        self.rtt.backoff_count()
    }
    /// Smoothed RTT, once sampled.
    pub fn srtt(&self) -> Option<Duration> {
        self.rtt.srtt()
    }
    /// RTT variation (RFC 6298 RTTVAR), once sampled.
    pub fn rttvar(&self) -> Option<Duration> {
        self.rtt.rttvar()
    }
    /// The congestion control algorithm this connection runs.
    pub fn congestion_name(&self) -> &'static str {
        self.cc.name()
    }
    /// The peer's window, bytes (scaled).
    pub fn send_window(&self) -> usize {
        self.snd_wnd
    }
    /// MSS we send with (options subtracted).
    pub fn send_mss(&self) -> usize {
        self.send_mss
    }
    /// The MSS we send with is below what the packet carries (the MSS in
    /// force less options): `clip_mss_to_frames` rounded it down to whole
    /// frames.
    pub fn send_mss_clipped(&self) -> bool {
        let opt = if self.ts_ok { 12 } else { 0 };
        self.send_mss < self.mss_limit.saturating_sub(opt)
    }
    /// The largest IP packet a segment of ours makes: the MSS in force
    /// (payload and options) with the IP and TCP headers; after an MTU
    /// black hole, the common MTU it stepped down to.
    pub fn packet_mtu(&self) -> usize {
        let ip = if self.tuple.local.is_ipv4() { 20 } else { 40 };
        self.mss_limit + ip + 20
    }
    /// Receive-window limit now in force (grows when autotuned).
    pub fn recv_window_limit(&self) -> usize {
        self.recv.limit()
    }
    /// Changes the receive-window policy of this connection (iperf3's `-w`,
    /// applied after the handshake): a [`RecvWindow::Fixed`] limit is
    /// clamped to the receive buffer ([`Config::recv_buffer`]); the window
    /// already offered is never retracted, it stops growing until the
    /// application has read enough. Returns the limit now in force.
    pub fn set_recv_window(&mut self, policy: RecvWindow) -> usize {
        self.recv.set_policy(policy);
        self.recv.limit()
    }
    /// Caps the window this connection offers at `bytes` (at least two
    /// MSS), whatever its policy and buffer allow: the worker shares what
    /// its RX ring can absorb among its connections, so that the data all
    /// peers may send at once fits the ring. The right edge already offered
    /// is never taken back; the window stops moving until it is under the
    /// cap. `usize::MAX` lifts the cap.
    pub fn set_recv_share(&mut self, bytes: usize) {
        self.recv.set_share(bytes.max(2 * self.cfg.mss as usize));
    }
    /// The cap [`Connection::set_recv_share`] set (`usize::MAX`: none).
    pub fn recv_share(&self) -> usize {
        self.recv.share()
    }
    /// Lets the send buffer use at most `slots` of its
    /// [`Config::send_frames`] slots at once (at least one): the worker
    /// shares its frames among its connections. A smaller limit applies as
    /// the bytes beyond it are acknowledged; nothing written is lost.
    pub fn set_send_limit(&mut self, slots: usize) {
        self.send_share = slots;
        self.apply_send_limit();
    }
    /// The limit in force, slots.
    pub fn send_limit(&self) -> usize {
        self.send.limit()
    }
    /// The length of a send-buffer slot, bytes (set when the connection is
    /// established: in the single-descriptor layout, one segment's payload).
    pub fn send_slot_len(&self) -> usize {
        self.send.frame_len()
    }
    /// The send buffer's limit in force, bytes (its slots × their length).
    pub fn send_limit_bytes(&self) -> usize {
        self.send.limit() * self.send.frame_len()
    }

    /// Sets the buffer's limit: the worker's share, or less while
    /// auto-tuning has not grown it that far.
    fn apply_send_limit(&mut self) {
        let auto = self.send_auto.unwrap_or(usize::MAX);
        self.send.set_limit(self.send_share.min(auto));
    }

    /// Auto-tuning: doubles the buffer while it holds less than twice the
    /// path's bandwidth-delay product ([`Connection::measure_bdp`]) and
    /// its limit is below the worker's share. A buffer that bounds the
    /// sender keeps the path's RTT at its smallest, so the estimate is the
    /// buffer itself and it doubles; once the path is the bound, the bytes
    /// beyond its BDP only queue (at a bottleneck), the estimate stays, and
    /// so does the buffer, which then spreads the sender over no more
    /// memory than it needs. (A receiver slow to acknowledge also keeps
    /// the smallest RTT far below the smoothed one; there the buffer grows
    /// by trial instead: [`Connection::probe_send_buffer`].)
    #[inline]
    fn grow_send_buffer(&mut self) {
        if let Some(slots) = self.send_auto
            && 2 * self.bdp > self.send_limit_bytes()
            && self.send.limit() < self.send_share.min(self.send.frames())
        {
            self.send_auto = Some((2 * slots).min(self.cfg.send_frames));
            self.apply_send_limit();
        }
    }

    /// The path's bandwidth-delay product for send-buffer auto-tuning,
    /// from an ACK that advanced SND.UNA: the bytes acknowledged over an
    /// interval of at least one smoothed RTT, scaled to the smallest RTT
    /// (the delivery rate × the propagation delay; over a whole RTT, so
    /// that ACKs arriving in bunches average out). The largest sample is
    /// kept: the buffer never shrinks.
    fn measure_bdp(&mut self, now: Instant) {
        if self.send_auto.is_none() {
            return;
        }
        let (Some(min), Some(srtt)) = (self.rtt.min_rtt(), self.rtt.srtt_ns()) else {
            return;
        };
        let now = self.since_epoch(now);
        let Some((t, from)) = self.delivery else {
            self.delivery = Some((now, self.una));
            return;
        };
        let dt = now.saturating_sub(t);
        if dt >= srtt && dt != 0 {
            let (acked, dt) = (u128::from(self.una.saturating_sub(from)), u128::from(dt));
            let sample = acked * min.as_nanos() / dt;
            self.bdp = self.bdp.max(usize::try_from(sample).unwrap_or(usize::MAX));
            self.delivery = Some((now, self.una));
            let rate = u64::try_from(acked * 1_000_000_000 / dt).unwrap_or(u64::MAX);
            let in_rtt = acked * u128::from(srtt) / dt;
            self.probe_send_buffer(rate, usize::try_from(in_rtt).unwrap_or(usize::MAX));
            self.send_buf_limited = false;
        }
    }

    /// Auto-tuning beyond the smallest-RTT estimate, by trial. Where the
    /// peer acknowledges late — a receiver whose application is busy (both
    /// directions of `--bidir` on one thread) answers every dozen segments
    /// or when it reads — a sender needs the bytes of a smoothed RTT in
    /// flight, not of the smallest, and a buffer sized by the smallest RTT
    /// holds it to a fraction of the path. But a smoothed RTT also grows
    /// with the sender's own queue (at a bottleneck, or its own TX path),
    /// where a larger buffer only adds delay and cache misses. So: when the
    /// buffer bounded the sender in an interval (full and all of it sent,
    /// the congestion window not the bound), the rate is steady (not more
    /// than an eighth above the last interval's) and the buffer holds less
    /// than twice what was acknowledged in a smoothed RTT (`in_rtt`), it
    /// doubles on trial. If over the next [`PROBE_INTERVALS`] intervals
    /// the delivery rate rises by a quarter over `rate`, the size stays (and
    /// a later trial may double it again); else it goes back, and the next
    /// trial waits ([`PROBE_BACKOFF`] intervals, twice as long after each
    /// trial in a row that did not pay): what the peer does may change.
    fn probe_send_buffer(&mut self, rate: u64, in_rtt: usize) {
        let Some(slots) = self.send_auto else {
            return;
        };
        if let Some(p) = &mut self.send_probe {
            self.last_rate = rate;
            p.best = p.best.max(rate);
            p.intervals += 1;
            if p.best >= p.rate + p.rate / 4 {
                self.send_probe = None;
                self.stats.send_buffer_trials_kept += 1;
                self.send_probe_wait = (0, PROBE_BACKOFF);
            } else if p.intervals >= PROBE_INTERVALS {
                let from = p.from;
                self.send_probe = None;
                let next = self.send_probe_wait.1;
                self.send_probe_wait = (next, (2 * next).min(PROBE_BACKOFF_MAX));
                // Unless the smallest-RTT rule holds it there by now.
                if 2 * self.bdp <= from * self.send.frame_len() {
                    self.send_auto = Some(from);
                    self.apply_send_limit();
                }
            }
            return;
        }
        // A rate still rising (slow start) would pass any trial.
        let steady = rate <= self.last_rate + self.last_rate / 8;
        self.last_rate = rate;
        if self.send_probe_wait.0 > 0 {
            self.send_probe_wait.0 -= 1;
            return;
        }
        if self.send_buf_limited
            && steady
            && !self.cwnd_limited
            && 2 * in_rtt > self.send_limit_bytes()
            && slots < self.cfg.send_frames
            && self.send.limit() < self.send_share.min(self.send.frames())
        {
            self.stats.send_buffer_trials += 1;
            self.send_probe = Some(SendProbe {
                from: slots,
                rate,
                best: 0,
                intervals: 0,
            });
            self.send_auto = Some((2 * slots).min(self.cfg.send_frames));
            self.apply_send_limit();
        }
    }

    /// The receive buffer: the largest window this connection can offer.
    pub fn recv_buffer(&self) -> usize {
        self.recv.capacity()
    }
    /// Negotiated options: (window scaling, SACK, timestamps).
    pub fn negotiated(&self) -> (bool, bool, bool) {
        (self.ws_ok, self.sack_ok, self.ts_ok)
    }
    /// Bytes `write` would accept now.
    pub fn send_capacity(&self) -> usize {
        if self.fin_queued || !self.can_write() {
            0
        } else {
            self.send.free()
        }
    }
    /// Bytes written and not yet acknowledged.
    pub fn send_buffered(&self) -> usize {
        self.send.len()
    }
    /// In-order bytes ready to read.
    pub fn readable(&self) -> usize {
        self.recv.readable()
    }
    /// True once the peer's FIN has been received and all data before it read.
    pub fn read_closed(&self) -> bool {
        self.fin_received && self.recv.readable() == 0
    }
    /// Heap memory held: send and receive buffers (allocated at
    /// establishment), the fixed range sets and the recovery's
    /// retransmission log, bytes.
    pub fn heap_bytes(&self) -> usize {
        self.send.allocated()
            + self.recv.allocated()
            + self.sacked.heap_bytes()
            + self.rxt_log.capacity() * std::mem::size_of::<RxtSent>()
    }
    /// Bytes in flight (sent, not acknowledged, not SACKed; RFC 6675 pipe).
    pub fn in_flight(&self) -> usize {
        self.pipe()
    }
    /// Payload bytes the peer acknowledged (SND.UNA's offset, the FIN not
    /// counted).
    pub fn bytes_acked(&self) -> u64 {
        self.una.min(self.send.tail())
    }

    // ------------------------------------------------------------ mutators

    /// Send-buffer bytes written one by one so far: copied in by `write`,
    /// `write_repeat` (where a slot did not hold the pattern's bytes yet),
    /// `fill`, `fill_vectored`, or zeroed by `fill_zeros` where a slot did
    /// not hold zeros yet. A sender of zeros whose slots hold zeros adds
    /// nothing, nor does a repeated pattern whose slots hold it.
    pub fn send_bytes_touched(&self) -> u64 {
        self.send.touched()
    }

    /// Replaces the congestion controller with one of `algo` (before data
    /// flows: the window starts again at the initial window).
    pub fn set_congestion(&mut self, algo: super::CongestionAlgorithm) {
        let mss = if self.state.synchronized() {
            self.send_mss
        } else {
            usize::from(self.cfg.mss)
        };
        self.cc = algo.build(mss, self.cfg.initial_cwnd_segments, self.cfg.hystart);
    }

    /// Caps the rate new data is paced at from now on, bytes a second
    /// ([`Config::max_pacing_rate`]; 0: no cap).
    pub fn set_max_pacing_rate(&mut self, bytes_per_second: u64) {
        self.cfg.max_pacing_rate = bytes_per_second;
    }

    /// Replaces the congestion controller (before the handshake completes:
    /// it is told the MSS then).
    pub fn set_congestion_control(&mut self, cc: Box<dyn CongestionControl>) {
        self.cc = cc;
        if self.state.synchronized() {
            self.cc.set_mss(self.send_mss);
        }
    }

    // ------------------------------------------------------------ application

    fn can_write(&self) -> bool {
        matches!(self.state, State::Established | State::CloseWait)
    }

    /// Copies bytes into the send buffer; returns how many fit (0 when full:
    /// wait for [`Event::Writable`]).
    pub fn write(&mut self, buf: &[u8]) -> Result<usize, WriteError> {
        self.check_writable()?;
        Ok(self.send.write(buf))
    }

    /// Lets `fill` write the send buffer's free space in place, one slot
    /// piece at a time (e.g. straight into UMEM frames): it returns how many
    /// bytes of the piece it wrote, fewer than offered to stop. Returns the
    /// bytes appended.
    pub fn fill(&mut self, fill: impl FnMut(&mut [u8]) -> usize) -> Result<usize, WriteError> {
        self.check_writable()?;
        Ok(self.send.fill(fill))
    }

    /// Lets `fill` write the free space in place, several slots at once
    /// (a vectored read straight into the send buffer's frames); see
    /// [`Connection::fill`].
    pub fn fill_vectored(
        &mut self,
        fill: impl FnOnce(&mut [&mut [u8]]) -> usize,
    ) -> Result<usize, WriteError> {
        self.check_writable()?;
        Ok(self.send.fill_vectored(fill))
    }

    /// Appends up to `n` bytes of `pattern` over and over, from its byte
    /// `phase` on (a slot that already holds the same bytes is not written
    /// again); returns the count.
    pub fn write_repeat(
        &mut self,
        pattern: &std::sync::Arc<[u8]>,
        phase: usize,
        n: usize,
    ) -> Result<usize, WriteError> {
        self.check_writable()?;
        Ok(self.send.write_repeat(pattern, phase, n))
    }

    /// Appends up to `n` zero bytes (a slot that already holds zeros is not
    /// written again); returns the count.
    pub fn fill_zeros(&mut self, n: usize) -> Result<usize, WriteError> {
        self.check_writable()?;
        Ok(self.send.fill_zeros(n))
    }

    fn check_writable(&self) -> Result<(), WriteError> {
        if self.fin_queued {
            return Err(WriteError::Closed);
        }
        if !self.can_write() {
            return Err(WriteError::InvalidState(self.state));
        }
        Ok(())
    }

    /// The send buffer's memory.
    pub fn send_memory(&self) -> &M {
        self.send.memory()
    }

    /// The send buffer's memory, writable (to give it frames, or to take
    /// them back).
    pub fn send_memory_mut(&mut self) -> &mut M {
        self.send.memory_mut()
    }

    /// Copies readable bytes into `buf`; 0 means nothing to read now (or EOF,
    /// see [`Connection::read_closed`]).
    pub fn read(&mut self, now: Instant, buf: &mut [u8]) -> usize {
        let (a, b) = self.recv.slices();
        let n1 = a.len().min(buf.len());
        buf[..n1].copy_from_slice(&a[..n1]);
        let n2 = b.len().min(buf.len() - n1);
        buf[n1..n1 + n2].copy_from_slice(&b[..n2]);
        self.consume(now, n1 + n2)
    }

    /// Readable bytes by reference, as up to two slices (the ring wraps).
    pub fn read_slices(&self) -> (&[u8], &[u8]) {
        self.recv.slices()
    }

    /// Releases `n` bytes seen through `read_slices`; may schedule a window
    /// update. Returns the count released.
    pub fn consume(&mut self, now: Instant, n: usize) -> usize {
        let n = self.recv.consume(n);
        self.recv.tune(now, self.rtt.srtt().or(self.rtt.min_rtt()));
        if n > 0 && self.state.synchronized() && !self.fin_received {
            let edge = self.window_edge();
            let grow = edge.saturating_sub(self.rcv_adv) as usize;
            let threshold = (self.recv.limit() / 2)
                .min(2 * self.cfg.mss as usize)
                .max(1);
            if grow >= threshold {
                self.ack_now = true;
            }
        }
        n
    }

    /// Closes our direction: a FIN follows the buffered data. Reading goes on
    /// until the peer's FIN.
    pub fn close(&mut self, _now: Instant) {
        match self.state {
            State::SynSent => self.finish(CloseReason::Normal),
            State::SynReceived | State::Established => {
                self.fin_queued = true;
                if self.state == State::Established {
                    self.state = State::FinWait1;
                }
            }
            State::CloseWait => {
                self.fin_queued = true;
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    /// In FIN-WAIT-2 (our stream and FIN acknowledged, the peer's
    /// direction open): closes at once, sending nothing, with
    /// [`CloseReason::Normal`] — as Linux lets go of an orphaned
    /// FIN-WAIT-2 after `tcp_fin_timeout`. A later segment of the peer's
    /// is answered by whoever holds the address then (a reset). Elsewhere
    /// it does nothing.
    pub fn let_go(&mut self) {
        if self.state == State::FinWait2 {
            self.finish(CloseReason::Normal);
        }
    }

    /// [`Self::abort`] for an error of the application's (a receive that
    /// waited too long): the close reason, and the error event, are `e`.
    pub fn abort_for(&mut self, now: Instant, e: ConnectionError) {
        if matches!(self.state, State::Closed | State::TimeWait) {
            return;
        }
        self.error = Some(e);
        self.closed = Some(CloseReason::Error(e));
        self.abort(now);
    }

    /// Aborts: an RST goes out (if the peer knows us) and the connection is
    /// closed at once with [`CloseReason::Aborted`].
    pub fn abort(&mut self, _now: Instant) {
        if matches!(self.state, State::Closed | State::TimeWait) {
            return;
        }
        if self.state != State::SynSent {
            self.pending_rst = Some((
                TcpFlags::RST | TcpFlags::ACK,
                self.seq_of(self.max),
                self.rcv_nxt(),
            ));
        }
        self.finish(CloseReason::Aborted);
    }

    // ------------------------------------------------------------ outputs

    /// The next event, if any. After [`Event::Closed`] there are none.
    pub fn poll_event(&mut self) -> Option<Event> {
        if self.events & EV_CONNECTED != 0 {
            self.events &= !EV_CONNECTED;
            return Some(Event::Connected);
        }
        if self.events & EV_READABLE != 0 {
            self.events &= !EV_READABLE;
            return Some(Event::Readable);
        }
        if self.events & EV_WRITABLE != 0 {
            self.events &= !EV_WRITABLE;
            return Some(Event::Writable);
        }
        if let Some(e) = self.error.take() {
            return Some(Event::Error(e));
        }
        if let Some(r) = self.closed
            && !self.closed_reported
        {
            self.closed_reported = true;
            return Some(Event::Closed(r));
        }
        None
    }

    /// The earliest deadline at which `handle_timeout` must be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let next = *self.timers.0.iter().min()?;
        let (last, ns) = self.clock.get();
        (next != NO_TIMER).then(|| {
            if next >= ns {
                last + Duration::from_nanos(next - ns)
            } else {
                last - Duration::from_nanos(ns - next)
            }
        })
    }

    /// True once closed and every output (RST, events) has been drained.
    pub fn is_drained(&self) -> bool {
        self.state == State::Closed && self.pending_rst.is_none() && self.closed_reported
    }

    /// True in TIME-WAIT once [`Connection::poll_transmit`] has handed out
    /// the acknowledgement of the peer's FIN: both FINs are sent and
    /// acknowledged (what an application on Linux sees as `close()`
    /// done), and the connection has nothing to send unless the peer
    /// retransmits its FIN. A caller about to exit may drop it then (see
    /// TIME-WAIT in the `tcp` module doc).
    pub fn is_time_wait_quiet(&self) -> bool {
        self.state == State::TimeWait && !self.ack_now && self.pending_rst.is_none()
    }

    /// The payload of `seg` as pieces of send-buffer slots, each with its
    /// Internet sum (from the sums cached when it was written), into `out`;
    /// returns how many (`None` if `out` is too short: give
    /// [`super::send::MAX_PIECES`]).
    pub fn payload_pieces(&mut self, seg: &Segment, out: &mut [Piece]) -> Option<usize> {
        self.send.pieces(seg.offset, seg.len, out)
    }

    /// The next segment to send, if any. Call until `None`.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Segment> {
        self.poll_transmit_gso(now, 1)
    }

    /// Like [`Connection::poll_transmit`], but new data that the windows
    /// let go at once comes as a burst of up to `max_segs` full segments
    /// in one [`Segment`] (cut by [`Segment::part`]): the TCP work of a
    /// segment (the header, the windows, the timers, the counters) is done
    /// once a burst. The segments are those that as many calls of
    /// `poll_transmit` would return, but for the timestamp, which is the
    /// burst's for all of them. Retransmissions, probes and control
    /// segments come one at a time.
    pub fn poll_transmit_gso(&mut self, now: Instant, max_segs: usize) -> Option<Segment> {
        if let Some((flags, seq, ack)) = self.pending_rst.take() {
            self.stats.rst_sent += 1;
            // No window, no options.
            let mut r = self.header(flags, seq);
            r.ack = ack;
            return Some(self.count_out(r, 0, 0));
        }
        match self.state {
            State::Closed => return None,
            State::SynSent | State::SynReceived => {
                if !self.send_syn {
                    return self.poll_ack(now);
                }
                self.send_syn = false;
                let syn_ack = self.state == State::SynReceived;
                let mut r = self.header(
                    if syn_ack {
                        TcpFlags::SYN | TcpFlags::ACK
                    } else {
                        TcpFlags::SYN
                    },
                    self.iss,
                );
                if !syn_ack {
                    r.ack = SeqNumber(0);
                }
                r.window = self.recv.window().min(0xffff) as u16;
                let o = &mut r.options;
                o.mss = Some(self.cfg.mss);
                if syn_ack {
                    o.window_scale = self.ws_ok.then_some(self.rcv_wscale);
                    o.sack_permitted = self.sack_ok;
                } else {
                    o.window_scale = self.cfg.window_scaling.then(|| self.cfg.window_shift());
                    o.sack_permitted = self.cfg.sack;
                }
                let ts = if syn_ack {
                    self.ts_ok
                } else {
                    self.cfg.timestamps
                };
                o.timestamp = ts.then(|| TcpTimestamp {
                    tsval: self.ts_now(now),
                    tsecr: if syn_ack { self.ts_recent } else { 0 },
                });
                self.arm_if_unset(Timer::Retransmit, now);
                self.ack_now = false;
                self.disarm(Timer::DelayedAck);
                return Some(self.count_out(r, 0, 0));
            }
            _ => {}
        }
        if let Some(seg) = self.poll_data(now, max_segs) {
            return Some(seg);
        }
        self.poll_ack(now)
    }

    fn poll_ack(&mut self, now: Instant) -> Option<Segment> {
        if !self.ack_now {
            return None;
        }
        if !self.state.synchronized() {
            // Before the handshake completes the SYN(-ACK) is the answer.
            self.ack_now = false;
            return None;
        }
        let mut r = self.header(TcpFlags::ACK, self.seq_of(self.max));
        self.finish_header(&mut r, now);
        self.stats.acks_sent += 1;
        Some(self.count_out(r, 0, 0))
    }

    // ------------------------------------------------------------ inputs

    /// Handles a received segment of this connection (checksum already
    /// verified by the caller).
    pub fn handle_segment(&mut self, now: Instant, seg: &TcpRepr, payload: &[u8]) {
        self.handle_segment_with(now, seg, payload, &mut |_| 0);
    }

    /// Like [`Connection::handle_segment`], with in-order delivery by
    /// reference: when the payload is the next data in order and nothing is
    /// buffered before it, `deliver` sees it first, where it lies (in the
    /// caller's receive frame), and returns how many leading bytes the
    /// application took (consumed, as by [`Connection::consume`]); only the
    /// rest is copied into the receive buffer. A reader that keeps up never
    /// has its data copied by the TCP layer.
    pub fn handle_segment_with(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        payload: &[u8],
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) {
        self.handle_segment_parts(now, seg, &[payload], deliver);
    }

    /// Like [`Connection::handle_segment_with`], the payload in consecutive
    /// parts: a packet spread over several receive frames (multi-buffer),
    /// each part offered to `deliver` where it lies, in order.
    pub fn handle_segment_parts(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        parts: &[&[u8]],
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) {
        self.stats.segments_received += 1;
        match self.state {
            State::Closed => {}
            State::SynSent => self.on_syn_sent(now, seg),
            _ => self.on_synchronized(now, seg, parts, deliver),
        }
    }

    /// Ends TIME-WAIT now, as its timer would (closed normally). For a
    /// worker that needs the room: Linux likewise closes a connection at
    /// once instead of keeping its TIME-WAIT when `tcp_max_tw_buckets` are
    /// in use. The cost is the one of a lost last ACK after xtcp exits: a
    /// retransmitted FIN gets a reset, which ends the peer's LAST-ACK as the
    /// ACK would have. No effect in any other state.
    pub fn end_time_wait(&mut self) {
        if self.state == State::TimeWait {
            self.finish(CloseReason::Normal);
        }
    }

    /// Handles expired timers (any call at or after `poll_timeout`).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.expired(Timer::Connect, now) {
            self.disarm(Timer::Connect);
            if self.state == State::SynSent {
                self.fail(ConnectionError::ConnectTimeout);
                return;
            }
        }
        if self.expired(Timer::TimeWait, now) {
            self.disarm(Timer::TimeWait);
            self.finish(CloseReason::Normal);
            return;
        }
        if self.expired(Timer::Pacing, now) {
            self.disarm(Timer::Pacing);
        }
        if self.expired(Timer::DelayedAck, now) {
            self.disarm(Timer::DelayedAck);
            self.ack_now = true;
        }
        if self.expired(Timer::Persist, now) {
            self.disarm(Timer::Persist);
            if self.past_user_timeout(self.probe_since, now) {
                self.fail(ConnectionError::UserTimeout);
                return;
            }
            self.probe_pending = true;
            self.rtt.backoff();
        }
        if self.expired(Timer::Rescue, now) {
            self.disarm(Timer::Rescue);
            self.rescue_due = self.recover.is_some();
        }
        if self.expired(Timer::LossProbe, now) {
            self.disarm(Timer::LossProbe);
            self.tlp_due = self.max > self.una && !self.tlp_out;
        }
        if self.expired(Timer::Retransmit, now) {
            self.disarm(Timer::Retransmit);
            self.on_rto(now);
        }
    }

    fn on_rto(&mut self, now: Instant) {
        self.retries += 1;
        self.stats.rto_expirations += 1;
        match self.state {
            State::SynSent | State::SynReceived => {
                if self.retries > self.cfg.syn_retries {
                    self.fail(ConnectionError::TimedOut);
                    return;
                }
                self.rtt.backoff();
                self.send_syn = true;
                self.stats.retransmits += 1;
            }
            State::Closed | State::TimeWait => {}
            _ => {
                if self.max <= self.una {
                    return;
                }
                if self.stall_since == NO_TIMER {
                    // The timer was armed one RTO (before this backoff) ago.
                    self.stall_since = self.since_epoch(now).saturating_sub(self.rtt.rto_ns());
                }
                if self.cfg.user_timeout.is_some() {
                    if self.past_user_timeout(self.stall_since, now) {
                        self.fail(ConnectionError::UserTimeout);
                        return;
                    }
                } else if self.retries > self.cfg.max_retries {
                    self.fail(ConnectionError::TimedOut);
                    return;
                }
                let flight = (self.max - self.una) as usize;
                self.cc.on_rto(now, flight);
                self.rtt.backoff();
                self.black_hole_step();
                // Nothing to undo after a timeout (`go_back`). A threshold
                // raised for reordering that let DupThresh segments be
                // SACKed above a hole without calling it lost goes back (as
                // Linux does).
                if self.sacked.total() >= DUPTHRESH as usize * self.send_mss {
                    self.reordering = DUPTHRESH;
                }
                self.go_back();
            }
        }
    }

    /// Goes back: resends from the oldest unacknowledged byte, all but
    /// what the peer reported SACKed (the scoreboard is kept, as Linux
    /// keeps it: a peer that dropped SACKed data shows it by an ACK that
    /// stops at it, and the scoreboard goes then; see `on_ack`), after a
    /// timeout or a "packet too big". No RTT sample from what goes again
    /// (Karn), no recovery, loss probe or rescue under way, nothing to
    /// undo, and no fast recovery until what was sent before is
    /// acknowledged (RFC 6675 §5.1): the ACKs of the data sent again
    /// report the same holes.
    fn go_back(&mut self) {
        self.rtt_timing = None;
        self.recover = None;
        self.clear_rxt_log();
        self.rescue_due = false;
        self.disarm(Timer::Rescue);
        self.tlp_due = false;
        self.tlp_out = false;
        self.tlp_second = false;
        self.disarm(Timer::LossProbe);
        self.dupacks = 0;
        self.undo = Undo::default();
        self.nxt = self.una;
        self.high_rxt = self.una;
        self.rto_recover = self.max;
    }

    /// An MTU black hole (RFC 4821 §3; Linux's `tcp_mtu_probing`): a path
    /// whose MTU is below the ends' drops every segment of the size sent,
    /// and where no ICMP "fragmentation needed" / "packet too big" reaches
    /// xtcp ([`Connection::on_packet_too_big`]: a firewall filters it, or
    /// the hop never sends it), only timeouts say so. After
    /// [`BLACK_HOLE_RTOS`] timeouts in a row without progress, where the
    /// segment sent again is larger than the next smaller common MTU
    /// ([`MTU_PLATEAUS`]: 9000, 1500, 1280, 576 — not below 1280 over
    /// IPv6) carries, the MSS steps down to that MTU's; the resent data
    /// goes in the smaller segments, with the timeout back at its base,
    /// and another run of timeouts steps again. Where more than that MTU
    /// carries was acknowledged at this MSS, the path took large segments
    /// already: a run of timeouts is more likely an outage, and it takes
    /// [`BLACK_HOLE_RTOS_AFTER_PROGRESS`] of them in a row; so it does
    /// where a hop reported the MTU in force (ICMP): the path takes that
    /// size. The MSS does not climb back from a step for a black hole
    /// (Linux, where it looks for them at all, probes upwards every ten
    /// minutes with single segments; here a transfer goes on at the MSS
    /// that works); from one for an MTU a hop reported it does, as that
    /// report expires ([`Config::pmtu_expires`]).
    fn black_hole_step(&mut self) {
        let streak = self.retries.saturating_sub(self.mss_stepped_at);
        if streak < BLACK_HOLE_RTOS {
            return;
        }
        let mtu = self.packet_mtu();
        let headers = mtu - self.mss_limit;
        let floor = if self.tuple.local.is_ipv4() {
            576
        } else {
            1280
        };
        let Some(next) = MTU_PLATEAUS.into_iter().find(|&p| p < mtu && p >= floor) else {
            return;
        };
        let opt = if self.ts_ok { 12 } else { 0 };
        // The segment sent again: the oldest unacknowledged one. A small
        // one lost says nothing of the MTU.
        let resent = ((self.max - self.una) as usize).min(self.send_mss) + opt + headers;
        if resent <= next {
            return;
        }
        let carried = self.bytes_acked() > self.acked_at_mss + (next - headers) as u64;
        if (carried || self.mtu_reported) && streak < BLACK_HOLE_RTOS_AFTER_PROGRESS {
            return;
        }
        self.step_packet_mtu(next);
        self.mtu_reported = false;
        self.pmtu_expiry = NO_TIMER;
        self.rtt.reset_backoff();
        self.stats.mss_black_hole_steps += 1;
    }

    /// Segments from now on make IP packets of at most `mtu` bytes (below
    /// [`Connection::packet_mtu`], or back up to the MTU agreed at the
    /// handshake): the MSS follows, and the congestion window and
    /// threshold keep their number of segments.
    fn step_packet_mtu(&mut self, mtu: usize) {
        let headers = self.packet_mtu() - self.mss_limit;
        let opt = if self.ts_ok { 12 } else { 0 };
        self.mss_limit = mtu - headers;
        self.send_mss = self.mss_limit - opt;
        if self.cfg.clip_mss_to_frames {
            self.send_mss = clip_mss(self.send_mss, self.cfg.frame_len);
        }
        self.cc.rescale_mss(self.send_mss);
        self.mss_stepped_at = self.retries;
        self.acked_at_mss = self.bytes_acked();
    }

    /// The interface's own MTU is now `mtu` (`ip link set … mtu` during
    /// the connection): as Linux's TCP follows its device's MTU, segments
    /// from now on make packets of at most that, for good (a hop's report
    /// that expires does not raise the MSS above it), and where the MTU
    /// in force was larger, the MSS steps down to it and what is in flight
    /// goes again in segments that fit, without a congestion response (as
    /// for a "packet too big"). Only once synchronized (the MSS is agreed
    /// at the handshake); returns whether it took effect then, so that a
    /// caller gives it again until it does.
    pub fn on_link_mtu(&mut self, mtu: usize) -> bool {
        if matches!(
            self.state,
            State::Closed | State::SynSent | State::SynReceived
        ) {
            return false;
        }
        let current = self.packet_mtu();
        let headers = current - self.mss_limit;
        let opt = if self.ts_ok { 12 } else { 0 };
        // Room for one byte of payload at least.
        let mtu = mtu.max(headers + opt + 1);
        self.mss_limit_agreed = self.mss_limit_agreed.min(mtu - headers);
        if mtu < current {
            self.step_packet_mtu(mtu);
            self.stats.mss_link_mtu_steps += 1;
            self.go_back();
        }
        true
    }

    /// An ICMP "packet too big" about a segment of this connection
    /// (RFC 1191 for IPv4, RFC 8201 for IPv6): a hop on the path takes
    /// packets of at most `mtu` bytes (0: an IPv4 router that did not
    /// say; the common MTU below the `quoted_len` bytes that did not fit
    /// is taken, RFC 1191 §5). Taken only where `seq`, the quoted
    /// segment's, lies in what is in flight (SND.UNA ≤ seq < SND.MAX:
    /// RFC 5927 §4.1, as Linux checks it) and the MTU is below the one in
    /// force; not below 576 bytes over IPv4 and 1280 over IPv6 (RFC
    /// 8201's minimum). Then the MSS steps down to it and everything in
    /// flight is sent again in segments that fit, without a congestion
    /// response (what a router refused for its size was not lost to
    /// congestion; Linux's `tcp_simple_retransmit`). Returns whether it
    /// was taken; what is not is counted
    /// ([`Stats::icmp_too_big_ignored`]).
    pub fn on_packet_too_big(
        &mut self,
        now: Instant,
        mtu: u32,
        seq: SeqNumber,
        quoted_len: usize,
    ) -> bool {
        let synchronized = !matches!(
            self.state,
            State::Closed | State::SynSent | State::SynReceived | State::TimeWait
        );
        let off = self.ack_off(seq);
        let current = self.packet_mtu();
        let floor = if self.tuple.local.is_ipv4() {
            576
        } else {
            1280
        };
        let reported = match mtu {
            0 => MTU_PLATEAUS
                .into_iter()
                .find(|&p| p < quoted_len)
                .unwrap_or(floor),
            m => m as usize,
        };
        let mtu = reported.max(floor);
        if !synchronized || off < self.una as i64 || off >= self.max as i64 || mtu >= current {
            self.stats.icmp_too_big_ignored += 1;
            return false;
        }
        self.step_packet_mtu(mtu);
        self.mtu_reported = true;
        self.pmtu_expiry = self
            .cfg
            .pmtu_expires
            .map_or(NO_TIMER, |d| self.since_epoch(now).saturating_add(nanos(d)));
        self.stats.mss_path_mtu_steps += 1;
        self.stats.path_mtu_reported = reported as u64;
        // Everything in flight again, as after a timeout, but with the
        // window's segments as they were.
        self.go_back();
        true
    }

    /// The MTU a hop reported has expired ([`Config::pmtu_expires`]):
    /// segments go at the MSS agreed at the handshake again (the window
    /// keeps its segments, as on a step down). Where a hop on the path
    /// still takes less, it refuses them and says so, and the MSS steps
    /// down again ([`Connection::on_packet_too_big`]); where it never
    /// says, the black-hole steps find it. Not during a recovery: after
    /// it, at the next sample.
    fn pmtu_expired(&mut self) {
        if self.recover.is_some() {
            return;
        }
        self.pmtu_expiry = NO_TIMER;
        let agreed = self.packet_mtu() - self.mss_limit + self.mss_limit_agreed;
        if agreed > self.packet_mtu() {
            self.step_packet_mtu(agreed);
            self.mtu_reported = false;
            self.stats.mss_path_mtu_raises += 1;
        }
    }

    fn on_syn_sent(&mut self, now: Instant, seg: &TcpRepr) {
        let f = seg.flags;
        if f.contains(TcpFlags::ACK) && seg.ack != self.iss + 1 {
            if !f.contains(TcpFlags::RST) {
                self.reset_reply(seg.ack);
            }
            return;
        }
        if f.contains(TcpFlags::RST) {
            if f.contains(TcpFlags::ACK) {
                self.stats.rst_received += 1;
                self.fail(ConnectionError::Refused);
            }
            return;
        }
        if !f.contains(TcpFlags::SYN) {
            return;
        }
        self.take_syn(now, seg);
        // The peer answered: the connect timeout is over.
        self.disarm(Timer::Connect);
        if f.contains(TcpFlags::ACK) {
            self.syn_acked = true;
            self.snd_wl1 = seg.seq;
            self.snd_wl2 = seg.ack;
            // The window in a SYN is never scaled.
            self.snd_wnd = seg.window as usize;
            self.max_snd_wnd = self.snd_wnd;
            if self.retries == 0 {
                // The SYN went out when the connection was created (Karn: only
                // if it was not retransmitted).
                self.rtt.sample(Duration::from_nanos(self.since_epoch(now)));
                self.stats.rtt_samples += 1;
            }
            self.retries = 0;
            self.rtt.reset_backoff();
            self.disarm(Timer::Retransmit);
            self.establish();
            self.ack_now = true;
        } else {
            // Simultaneous open: SYN-ACK with our ISS.
            self.state = State::SynReceived;
            self.send_syn = true;
            self.snd_wnd = seg.window as usize;
            self.snd_wl1 = seg.seq;
        }
    }

    /// Records the peer's SYN and negotiates options.
    fn take_syn(&mut self, now: Instant, seg: &TcpRepr) {
        self.irs = seg.seq;
        let o = &seg.options;
        if self.cfg.window_scaling
            && let Some(ws) = o.window_scale
        {
            self.ws_ok = true;
            self.snd_wscale = ws.min(14);
            self.rcv_wscale = self.cfg.window_shift();
        } else {
            self.ws_ok = false;
            self.snd_wscale = 0;
            self.rcv_wscale = 0;
        }
        self.sack_ok = self.cfg.sack && o.sack_permitted;
        self.ts_ok = self.cfg.timestamps && o.timestamp.is_some();
        if let Some(ts) = o.timestamp {
            self.set_ts_recent(now, ts.tsval);
        }
        // RFC 9293 §3.7.1: 536 when the option is absent.
        let peer_mss = o.mss.unwrap_or(536) as usize;
        let opt = if self.ts_ok { 12 } else { 0 };
        self.mss_limit = peer_mss.min(self.cfg.mss as usize).max(64 + opt);
        self.mss_limit_agreed = self.mss_limit;
        self.send_mss = self.mss_limit - opt;
        if self.cfg.clip_mss_to_frames {
            // Whole frames per segment (DESIGN.md: MSS clipping), so `seg`
            // sends page-aligned payload by reference.
            self.send_mss = clip_mss(self.send_mss, self.cfg.frame_len);
        }
        self.cc.set_mss(self.send_mss);
    }

    fn establish(&mut self) {
        self.state = State::Established;
        self.send.allocate(
            self.cfg
                .segment_per_frame
                .then(|| self.send_mss.min(self.cfg.frame_len)),
        );
        // The slots' length is known now: the limit in slots follows it.
        self.apply_send_limit();
        self.recv.allocate();
        if self.sack_ok {
            self.rxt_log.reserve_exact(RXT_LOG);
        }
        self.rcv_adv = self.window_edge();
        self.events |= EV_CONNECTED | EV_WRITABLE;
        if self.fin_queued {
            self.state = State::FinWait1;
        }
    }

    fn rcv_nxt(&self) -> SeqNumber {
        self.irs + 1 + self.recv.nxt() as usize + usize::from(self.fin_received)
    }

    fn seq_of(&self, off: u64) -> SeqNumber {
        self.iss + 1 + off as usize
    }

    /// Send offset of a received ACK number (relative to `una`).
    fn ack_off(&self, ack: SeqNumber) -> i64 {
        self.una as i64 + ack.distance(self.seq_of(self.una)) as i64
    }

    fn on_synchronized(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        parts: &[&[u8]],
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) {
        let payload_len: usize = parts.iter().map(|p| p.len()).sum();
        let f = seg.flags;
        let rcv_nxt = self.rcv_nxt();
        let rcv_wnd = self.rcv_adv.saturating_sub(self.recv.nxt()) as usize;
        // SYN-RECEIVED and the peer's SYN again: a retransmission (answer with
        // our SYN-ACK again) or, in a simultaneous open, its SYN-ACK.
        if self.state == State::SynReceived
            && f.contains(TcpFlags::SYN)
            && !f.contains(TcpFlags::RST)
            && seg.seq == self.irs
        {
            if f.contains(TcpFlags::ACK) && seg.ack == self.iss + 1 {
                self.syn_acked = true;
                self.retries = 0;
                self.rtt.reset_backoff();
                self.disarm(Timer::Retransmit);
                self.snd_wl1 = seg.seq;
                self.snd_wl2 = seg.ack;
                self.snd_wnd = seg.window as usize;
                self.max_snd_wnd = self.snd_wnd;
                self.establish();
                self.ack_now = true;
            } else {
                self.send_syn = true;
            }
            return;
        }
        // TIME-WAIT: a retransmitted FIN is re-acknowledged, the timer restarts.
        if self.state == State::TimeWait && f.contains(TcpFlags::FIN) && !f.contains(TcpFlags::RST)
        {
            self.ack_now = true;
            self.set_in(Timer::TimeWait, now, nanos(self.cfg.time_wait));
            return;
        }
        // PAWS (RFC 7323 §5).
        if self.ts_ok
            && !f.contains(TcpFlags::RST)
            && let Some(ts) = seg.options.timestamp
            && self.paws_rejects(now, seg, ts.tsval, payload_len, rcv_nxt)
        {
            if f.contains(TcpFlags::SYN) {
                // RFC 5961 §4.2: a SYN is challenged whatever its numbers
                // (Linux's `syn_challenge`).
                self.challenge_ack(now);
                return;
            }
            self.stats.paws_drops += 1;
            self.answer_invalid(now, payload_len + usize::from(f.contains(TcpFlags::FIN)));
            return;
        }
        // Acceptability (RFC 9293 §3.10.7.4), with a zero-length probe or FIN at
        // RCV.NXT accepted even into a zero window, and a bare ACK at the
        // right edge accepted too (as Linux's `tcp_sequence` does): a peer that
        // filled the window sends its ACKs with SEQ = SND.NXT = the edge,
        // and the strict test would drop every one of them while the window
        // stays full.
        let seg_len = payload_len + usize::from(f.contains(TcpFlags::SYN));
        let d = seg.seq.distance(rcv_nxt) as i64;
        let in_wnd = |x: i64| x >= 0 && (x as u64) < rcv_wnd as u64;
        let acceptable = if seg.seq == rcv_nxt {
            true
        } else if seg_len == 0 {
            in_wnd(d) || (d == rcv_wnd as i64 && !f.intersects(TcpFlags::RST | TcpFlags::FIN))
        } else {
            rcv_wnd > 0 && (in_wnd(d) || in_wnd(d + seg_len as i64 - 1))
        };
        if !acceptable {
            if f.contains(TcpFlags::SYN) && !f.contains(TcpFlags::RST) {
                self.challenge_ack(now);
                return;
            }
            // Sequence space (data or a FIN) that ends at or below RCV.NXT:
            // received already and sent again (Linux's drop reason
            // `TCP_OLD_SEQUENCE`), as after an ACK that was lost or late.
            let occupies = seg_len + usize::from(f.contains(TcpFlags::FIN));
            if !f.contains(TcpFlags::RST) && occupies > 0 && d + occupies as i64 <= 0 {
                self.stats.old_sequence += 1;
            } else {
                self.stats.out_of_window += 1;
            }
            if !f.contains(TcpFlags::RST) {
                if seg_len > 0 && d < 0 {
                    // What of it lies below RCV.NXT (and not below the
                    // stream's start): a duplicate, reported as one. (Into
                    // a closed window a segment may reach beyond RCV.NXT.)
                    let nxt = self.recv.nxt();
                    let start = rcv_nxt_off(nxt, d);
                    let end = rcv_nxt_off(nxt, d + payload_len as i64).min(nxt);
                    if end > start {
                        self.stats.duplicate_bytes += end - start;
                        self.note_dsack(start, end);
                    }
                }
                self.answer_invalid(now, occupies);
            }
            return;
        }
        // RST (RFC 5961 §3.2): only exactly at RCV.NXT; in window → challenge.
        if f.contains(TcpFlags::RST) {
            if seg.seq == rcv_nxt {
                self.stats.rst_received += 1;
                if self.state == State::SynReceived {
                    self.fail(ConnectionError::Refused);
                } else if matches!(
                    self.state,
                    State::LastAck | State::Closing | State::TimeWait
                ) {
                    self.finish(CloseReason::Normal);
                } else {
                    self.fail(ConnectionError::Reset);
                }
            } else {
                self.challenge_ack(now);
            }
            return;
        }
        // SYN in a synchronized state (RFC 5961 §4): challenge ACK.
        if f.contains(TcpFlags::SYN) {
            self.challenge_ack(now);
            return;
        }
        if !f.contains(TcpFlags::ACK) {
            return;
        }
        // Update TS.Recent (RFC 7323 §4.3).
        if self.ts_ok
            && let Some(ts) = seg.options.timestamp
        {
            let seg_off = self.recv.nxt() as i64 + d;
            // As Linux: TS.Recent of zero, or one unset for 24 days, is
            // replaced by any (see `paws_rejects`).
            if ((ts.tsval.wrapping_sub(self.ts_recent) as i32) >= 0
                || self.ts_recent == 0
                || self.ts_recent_expired(now))
                && seg_off <= self.last_ack_sent as i64
            {
                self.set_ts_recent(now, ts.tsval);
            }
        }
        if self.state == State::SynReceived {
            if seg.ack == self.iss + 1 {
                if self.retries == 0 {
                    // The SYN-ACK went out when the connection was created
                    // (Karn: only if it was not retransmitted).
                    self.rtt.sample(Duration::from_nanos(self.since_epoch(now)));
                    self.stats.rtt_samples += 1;
                }
                self.syn_acked = true;
                self.retries = 0;
                self.rtt.reset_backoff();
                self.disarm(Timer::Retransmit);
                self.snd_wl1 = seg.seq;
                self.snd_wl2 = seg.ack;
                self.snd_wnd = (seg.window as usize) << self.snd_wscale;
                self.max_snd_wnd = self.snd_wnd;
                self.establish();
            } else {
                self.reset_reply(seg.ack);
                return;
            }
        }
        if !self.on_ack(now, seg, payload_len) {
            return;
        }
        // Data and FIN.
        if matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2
        ) {
            self.on_data(now, seg, parts, payload_len, d, deliver);
        } else if payload_len > 0 {
            // Data after the peer's FIN: acknowledge what we have.
            self.ack_now = true;
        }
    }

    /// PAWS (RFC 7323 §5) as Linux applies it (`tcp_paws_discard`): a
    /// segment whose TSval is older than TS.Recent is rejected, except
    /// - one a tick older (Linux's `TCP_PAWS_WINDOW`);
    /// - any while TS.Recent is zero: some stacks send their SYN with
    ///   TSval 0 and count from elsewhere after it, where every later
    ///   TSval could look older than zero;
    /// - any once TS.Recent was set 24 days ago or more (RFC 7323 §5.5):
    ///   after an idle time that long, a peer's clock ticking every
    ///   millisecond has moved half the timestamp space on, and its TSvals
    ///   look older than the last it sent;
    /// - a pure duplicate ACK that changes nothing and is at most an RTO's
    ///   worth of ticks older, taking ticks as short as 1/1200 s
    ///   (`tcp_disordered_ack`): ACKs that the path reordered, whose SACK
    ///   blocks a recovery needs.
    fn paws_rejects(
        &self,
        now: Instant,
        seg: &TcpRepr,
        tsval: u32,
        payload_len: usize,
        rcv_nxt: SeqNumber,
    ) -> bool {
        let behind = self.ts_recent.wrapping_sub(tsval) as i32;
        if behind <= 1 || self.ts_recent == 0 || self.ts_recent_expired(now) {
            return false;
        }
        let window = (seg.window as usize) << self.snd_wscale;
        let updates_window = self.snd_wl1 < seg.seq
            || (seg.seq == self.snd_wl1 && (window > self.snd_wnd || window == 0));
        let replay = self.rtt.rto().as_millis() * 6 / 5;
        let disordered_dup_ack = seg.flags.contains(TcpFlags::ACK)
            && !seg.flags.intersects(TcpFlags::SYN | TcpFlags::FIN)
            && payload_len == 0
            && seg.seq == rcv_nxt
            && self.ack_off(seg.ack) == self.una as i64
            && !updates_window
            && behind as u128 <= replay;
        !disordered_dup_ack
    }

    /// Answers a segment that is not acceptable with an ACK (RFC 9293
    /// §3.10.7.4): at once where it `occupies` sequence space (data or a
    /// FIN, as Linux's `tcp_oow_rate_limited` spares them), else unless
    /// [`Connection::throttled`].
    fn answer_invalid(&mut self, now: Instant, occupies: usize) {
        if occupies == 0 && self.throttled(now) {
            return;
        }
        self.ack_now = true;
    }

    /// A challenge ACK (RFC 5961: an in-window RST, a SYN, an ACK too
    /// old), unless [`Connection::throttled`]: Linux's
    /// `tcp_send_challenge_ack` checks the same per-connection limit first
    /// (its host-wide one is off by default since 5.19).
    fn challenge_ack(&mut self, now: Instant) {
        if !self.throttled(now) {
            self.stats.challenge_acks += 1;
            self.ack_now = true;
        }
    }

    /// RFC 5961 §7's ACK throttling, as Linux's `tcp_oow_rate_limited`:
    /// true, and counted, if an answer to an unacceptable segment without
    /// data or a challenge ACK went out less than
    /// [`Config::invalid_ack_interval`] ago (see that setting for why);
    /// else that answer is this one, now.
    fn throttled(&mut self, now: Instant) -> bool {
        if self
            .last_invalid_ack
            .is_some_and(|t| now.saturating_duration_since(t) < self.cfg.invalid_ack_interval)
        {
            self.stats.invalid_acks_skipped += 1;
            return true;
        }
        self.last_invalid_ack = Some(now);
        false
    }

    /// ACK processing; false if the segment is to be dropped.
    fn on_ack(&mut self, now: Instant, seg: &TcpRepr, payload_len: usize) -> bool {
        let ack_off = self.ack_off(seg.ack);
        let fin_sent = self.fin_queued && self.max > self.send.tail();
        let top = self.max as i64;
        if ack_off > top {
            // Acknowledges something never sent.
            self.answer_invalid(now, payload_len);
            return false;
        }
        if ack_off < self.una as i64 - self.max_snd_wnd as i64 {
            // RFC 5961 §5: too old.
            self.challenge_ack(now);
            return false;
        }
        let ack_off = ack_off.max(0) as u64;
        let window = (seg.window as usize) << self.snd_wscale;
        // What this ACK reports delivered, for a recovery's PRR step.
        let una_before = self.una;
        let sacked_before = self.sacked.total();
        let mut sacked_removed = 0;
        let mut dupack = false;
        if ack_off > self.una && !self.sacked.is_empty() {
            // A hole below SACKed data is filled: by its original, late
            // (the path reorders), or by a retransmission.
            self.note_fill(ack_off);
        }
        if ack_off > self.una {
            let acked = (ack_off - self.una) as usize;
            let data_to = ack_off.min(self.send.tail());
            if self.send.ack(data_to) && !self.fin_queued {
                self.events |= EV_WRITABLE;
            }
            if let Some((off, t)) = self.rtt_timing
                && ack_off > off
            {
                let since = self.since_epoch(now);
                self.rtt
                    .sample(Duration::from_nanos(since.saturating_sub(t)));
                self.stats.rtt_samples += 1;
                self.rtt_timing = None;
                if since >= self.pmtu_expiry {
                    self.pmtu_expired();
                }
            } else if (self.retries > 0 || self.recover.is_some())
                && let Some(rtt) = self.echo_rtt(now, seg)
            {
                // RTTM (RFC 7323 §4): the echo names the transmission it
                // answers, so even an ACK of retransmitted data gives a sample
                // where Karn's rule forbids the timed-segment one (1 ms ticks).
                self.rtt.sample(rtt.max(Duration::from_millis(1)));
                self.stats.rtt_samples += 1;
                self.stats.ts_rtt_samples += 1;
            }
            self.una = ack_off;
            // The echo names a transmission from before the recovery's
            // first retransmission: originals filled the holes (TS.Recent
            // moves only with in-order data, RFC 7323 §4.3), late, not
            // lost (Linux's `tcp_packet_delayed`). Not where something
            // was retransmitted twice: after lost ACKs the echoes were
            // seen to name older transmissions than the fill's. Only in a
            // recovery (the ACK that covers its retransmissions ends it):
            // the common ACK reads no cold state.
            if self.recover.is_some()
                && let Some(rts) = self.undo.rxt_ts
                && !self.undo.again
                && let Some(ts) = seg.options.timestamp
                && ts.tsecr != 0
                && (ts.tsecr.wrapping_sub(rts) as i32) < 0
            {
                self.note_reordering(self.undo.fill_extent);
                if self.una >= self.rxt_high {
                    self.undo_recovery();
                }
            }
            self.measure_bdp(now);
            if self.nxt < self.una {
                self.nxt = self.una;
            }
            if self.high_rxt < self.una {
                self.high_rxt = self.una;
            }
            if !self.sacked.is_empty() {
                self.sacked.remove_below(key(self.una));
                sacked_removed = sacked_before - self.sacked.total();
                if self
                    .sacked
                    .as_slice()
                    .first()
                    .is_some_and(|r| r.0 == key(self.una))
                {
                    // The ACK stops where SACKed data begins: the peer
                    // dropped what it had SACKed (reneging, RFC 2018 §8).
                    // The scoreboard no longer says what it holds; what it
                    // said SACKed goes again at the next timeout, and at
                    // once if a timeout's resending had skipped it.
                    self.sacked.clear();
                    self.stats.sack_renegings += 1;
                    if self.nxt < self.max {
                        self.nxt = self.una;
                    }
                }
            }
            if self.retries != 0 {
                // (A stall begins only with a timeout: the common ACK reads
                // no cold state.)
                self.stall_since = NO_TIMER;
                self.mss_stepped_at = 0;
            }
            self.retries = 0;
            self.rtt.reset_backoff();
            self.dupacks = 0;
            match self.recover {
                Some(r) if self.una >= r => {
                    self.recover = None;
                    self.clear_rxt_log();
                    self.rescue_due = false;
                    self.disarm(Timer::Rescue);
                    self.cc.on_recovery_end(now);
                }
                Some(_) => {
                    if !self.sack_ok {
                        // NewReno partial ACK (RFC 6582): the next hole is lost.
                        self.force_retransmit = true;
                    }
                }
                None => {
                    // The window grows only while it is what limits
                    // sending (else it would grow without bound behind a
                    // receive window or a slow application, and then
                    // allow a burst that nothing has probed).
                    if self.is_cwnd_limited() {
                        let ack = Ack {
                            acked,
                            srtt: self.rtt.srtt(),
                            rtt_sample: self.echo_rtt(now, seg),
                            una: self.una,
                            sent: self.max.max(self.nxt),
                        };
                        self.cc.on_ack(now, &ack);
                    }
                }
            }
            if self.una >= self.max {
                self.disarm(Timer::Retransmit);
            } else {
                self.set_in(Timer::Retransmit, now, self.rtt.rto_ns());
            }
            self.tlp_out = false;
            self.tlp_second = false;
            if fin_sent && ack_off > self.send.tail() {
                self.fin_acked = true;
            }
        } else if ack_off == self.una
            && payload_len == 0
            && !seg.flags.intersects(TcpFlags::FIN | TcpFlags::SYN)
            && window == self.snd_wnd
            && self.max > self.una
        {
            dupack = true;
        }
        // SACK scoreboard.
        let mut dsack_only = false;
        if self.sack_ok {
            let blocks = seg.options.sack.as_slice();
            // RFC 2883 §4: the first block reports a duplicate if it lies
            // below the cumulative ACK or within the second block.
            if let Some(&(l, r)) = blocks.first()
                && (r.distance(seg.ack) <= 0
                    || blocks
                        .get(1)
                        .is_some_and(|&(l2, r2)| l.distance(l2) >= 0 && r.distance(r2) <= 0))
            {
                self.on_dsack(self.ack_off(l), self.ack_off(r));
                dsack_only = blocks.len() == 1;
            }
            for &(l, r) in blocks {
                let lo = self.ack_off(l);
                let hi = self.ack_off(r);
                let lo = lo.max(self.una as i64);
                let hi = hi.min(self.max as i64);
                if hi > lo {
                    self.sacked.insert(key(lo as u64), key(hi as u64));
                }
            }
        }
        if self.recover.is_some() && !self.rxt_log.is_empty() {
            self.find_lost_retransmissions();
        }
        // A duplicate ACK that only reports a duplicate says nothing left
        // the network (RFC 6675 §2: it must carry new SACK information).
        if dupack && !dsack_only {
            self.dupacks += 1;
            self.stats.dup_acks += 1;
        }
        // Loss detection: DupThresh duplicate ACKs or (SACK) the first byte
        // lost (neither without a duplicate ACK or a SACK block on record:
        // the common ACK reads no more).
        let dupthresh = if self.dupacks > 0 || !self.sacked.is_empty() {
            self.dupthresh()
        } else {
            u32::MAX
        };
        if self.recover.is_none()
            && self.max > self.una
            && (self.dupacks >= dupthresh || (self.sack_ok && self.is_lost(self.una)))
            && self.una >= self.rto_recover
        {
            if dupthresh < DUPTHRESH && self.dupacks >= dupthresh {
                self.stats.early_retransmits += 1;
            }
            // FlightSize (RFC 5681 §3.2, RFC 9438 §4.6): what was sent and
            // is not cumulatively acknowledged, SACKed or not. Not the pipe:
            // that leaves out the segments whose SACKs revealed the loss,
            // and a small window would be cut to half of β.
            let flight = (self.max - self.una) as usize;
            self.recover = Some(self.max);
            self.clear_rxt_log();
            self.undo = Undo {
                marker: Some(self.una),
                ..Undo::default()
            };
            self.tlp_due = false;
            self.cc.on_congestion_event(now, flight);
            // PRR: RecoverFS (RFC 9937 §6.1) is what may be reported
            // delivered in this recovery, this ACK's part included; the
            // window is the controller's target until an ACK reports
            // something delivered (this one may not: its SACK blocks may
            // be old).
            self.prr = Prr {
                recover_fs: ((self.max - una_before) as usize).saturating_sub(sacked_before),
                cwnd: self.cc.window(),
                ..Prr::default()
            };
            self.force_retransmit = true;
            self.high_rxt = self.una;
            self.stats.fast_retransmits += 1;
            if self.sack_ok && !self.sacked.is_empty() {
                self.stats.sack_recoveries += 1;
            }
        }
        if self.recover.is_some() {
            self.prr_step(una_before, sacked_before, sacked_removed, dupack);
        }
        // Any ACK shows the path alive: the probe waits a timeout from now.
        self.arm_loss_probe(now);
        // Window update (RFC 9293 §3.10.7.4, SND.WL1/WL2).
        if self.snd_wl1 < seg.seq || (self.snd_wl1 == seg.seq && self.snd_wl2 <= seg.ack) {
            let was_zero = self.snd_wnd == 0;
            self.snd_wnd = window;
            self.max_snd_wnd = self.max_snd_wnd.max(window);
            self.snd_wl1 = seg.seq;
            self.snd_wl2 = seg.ack;
            if was_zero && window > 0 {
                self.disarm(Timer::Persist);
                self.rtt.reset_backoff();
                self.probe_pending = false;
                self.probe_since = NO_TIMER;
                // What went beyond SND.UNA while the window was shut (a
                // probe's byte, which a peer like Linux drops: its ACK is
                // still at SND.UNA) goes again, from SND.UNA, with what
                // follows. (Left at SND.NXT past that byte, a transfer into
                // Linux stalled for good after three probes.)
                if self.nxt > self.una {
                    self.nxt = self.una;
                }
            }
        }
        if self.fin_acked {
            match self.state {
                State::FinWait1 => self.state = State::FinWait2,
                State::Closing => self.enter_time_wait(now),
                State::LastAck => {
                    self.finish(CloseReason::Normal);
                    return false;
                }
                _ => {}
            }
        }
        true
    }

    fn on_data(
        &mut self,
        now: Instant,
        seg: &TcpRepr,
        parts: &[&[u8]],
        payload_len: usize,
        d: i64,
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) {
        // A segment that begins before the stream's first byte (at the
        // sequence number of the peer's SYN, which carries no data) is
        // trimmed to it, as Linux trims what lies below RCV.NXT: those
        // leading bytes are not data.
        let start = self.recv.nxt() as i64 + d;
        let trim = usize::try_from(-start).unwrap_or(0);
        let payload_len = payload_len.saturating_sub(trim);
        let off = start.max(0) as u64;
        let edge = self.rcv_adv.max(self.window_edge());
        if payload_len > 0 {
            self.largest_seg = self
                .largest_seg
                .max(u32::try_from(payload_len).unwrap_or(u32::MAX));
            // A part that arrived before (below RCV.NXT, or within a block
            // held out of order) is the duplicate the next ACK reports.
            // (An in-order segment, the common case, looks up nothing.)
            let end = off + payload_len as u64;
            let nxt = self.recv.nxt();
            if off < nxt {
                self.note_dsack(off, end.min(nxt));
            } else if off > nxt
                && let Some((_, e)) = self.recv.ooo_containing(off)
            {
                self.note_dsack(off, end.min(e));
                // The block it lies in goes second (RFC 2883 §4).
                self.last_ooo = Some(off);
            }
            // Part by part, each at its place: in order, a part is offered
            // to `deliver` once everything before it was taken.
            let mut a = Accepted::default();
            let mut at = off;
            let mut trim = trim;
            for p in parts {
                let cut = trim.min(p.len());
                trim -= cut;
                let p = &p[cut..];
                if p.is_empty() {
                    continue;
                }
                a.add(self.recv.accept_with(at, p, edge, deliver));
                at += p.len() as u64;
            }
            if a.delivered > 0 {
                self.stats.bytes_delivered_direct += a.delivered as u64;
                self.recv.tune(now, self.rtt.srtt().or(self.rtt.min_rtt()));
            }
            // Only when there are some: the counter's line is cold.
            if a.duplicate > 0 {
                self.stats.duplicate_bytes += a.duplicate as u64;
            }
            if a.dropped {
                self.stats.ooo_dropped += 1;
                self.ack_now = true;
            } else if a.out_of_order {
                self.stats.ooo_segments += 1;
                self.last_ooo = Some(off);
                self.ack_now = true;
            }
            if a.in_order > 0 {
                self.stats.bytes_received += a.in_order as u64;
                self.events |= EV_READABLE;
                self.unacked_bytes += a.in_order;
                if self.recv.has_ooo() || a.in_order > payload_len || a.duplicate > 0 {
                    // Filled (part of) a hole: tell the sender at once.
                    self.ack_now = true;
                }
                if self.unacked_bytes >= 2 * self.largest_seg as usize {
                    self.ack_now = true;
                }
                // What remains of the window we offered holds no full segment:
                // the sender is stalled until it hears from us, so a delayed
                // ACK would only idle the connection.
                if (self.rcv_adv.saturating_sub(self.recv.nxt()) as usize)
                    < self.largest_seg as usize
                {
                    self.stats.window_full += 1;
                    self.ack_now = true;
                }
            } else if a.duplicate > 0 {
                self.ack_now = true;
            }
        }
        if seg.flags.contains(TcpFlags::FIN) {
            let fin_off = off + payload_len as u64;
            if fin_off <= edge {
                self.ooo_fin = fin_off;
            }
        }
        if self.ooo_fin == self.recv.nxt() && !self.fin_received {
            self.ooo_fin = NO_FIN;
            self.fin_received = true;
            self.events |= EV_READABLE;
            self.ack_now = true;
            match self.state {
                State::Established => self.state = State::CloseWait,
                State::FinWait1 => {
                    if self.fin_acked {
                        self.enter_time_wait(now);
                    } else {
                        self.state = State::Closing;
                    }
                }
                State::FinWait2 => self.enter_time_wait(now),
                _ => {}
            }
        }
        if !self.ack_now && self.unacked_bytes > 0 && !self.timers.armed(Timer::DelayedAck) {
            self.stats.delayed_acks += 1;
            let delay = self.delayed_ack();
            self.set_in(Timer::DelayedAck, now, nanos(delay));
        }
    }

    /// How long an ACK may wait for a second segment: the smoothed RTT
    /// within [`DELAYED_ACK_FLOOR`] and [`Config::delayed_ack`] (that
    /// alone before an RTT is known). A sender that waits for this ACK (its
    /// window full, or a loss probe of one segment after its flight's ACK
    /// was lost) idles meanwhile; on a path of tens of microseconds,
    /// Linux's 40 ms were hundreds of round trips.
    fn delayed_ack(&self) -> Duration {
        match self.rtt.srtt().or(self.rtt.min_rtt()) {
            Some(rtt) => rtt.clamp(
                DELAYED_ACK_FLOOR,
                self.cfg.delayed_ack.max(DELAYED_ACK_FLOOR),
            ),
            None => self.cfg.delayed_ack,
        }
    }

    /// Keeps `[from, to)` (offsets) for the next ACK's D-SACK block, if
    /// SACK is on: joined to the one kept where they touch (a run of
    /// duplicates before that ACK is one block), else in its place.
    fn note_dsack(&mut self, from: u64, to: u64) {
        if !self.sack_ok || to <= from {
            return;
        }
        self.dsack = Some(match self.dsack {
            Some((a, b)) if from <= b && to >= a => (a.min(from), b.max(to)),
            _ => (from, to),
        });
    }

    fn enter_time_wait(&mut self, now: Instant) {
        self.state = State::TimeWait;
        self.disarm(Timer::Retransmit);
        self.disarm(Timer::Persist);
        self.set_in(Timer::TimeWait, now, nanos(self.cfg.time_wait));
    }

    // ------------------------------------------------------------ sender

    /// Duplicate ACKs that signal a loss: 3, or fewer when fewer than four
    /// segments are outstanding and nothing new is waiting to go, so that
    /// three duplicates could never arrive (RFC 5827 early retransmit).
    fn dupthresh(&self) -> u32 {
        if self.nxt < self.send.tail() {
            return self.reordering;
        }
        let segments = (self.max - self.una).div_ceil(self.send_mss as u64);
        if segments < 4 {
            segments.saturating_sub(1).max(1) as u32
        } else {
            self.reordering
        }
    }

    /// An ACK moves SND.UNA to `ack_off` over a hole below SACKed data.
    /// Where nothing in what it acknowledges was ever retransmitted, the
    /// hole's original arrived after the data SACKed above it: the path
    /// reordered that far. Else it may have been the retransmission that
    /// filled it; how far is kept for a D-SACK to settle
    /// ([`Connection::on_dsack`]).
    fn note_fill(&mut self, ack_off: u64) {
        let Some(h) = self.sacked.highest() else {
            return;
        };
        let fack = self.una + h.distance(key(self.una)) as u64;
        let extent = fack.saturating_sub(self.una) as usize;
        if self.rxt_high <= self.una {
            self.note_reordering(extent);
        } else if self.undo.marker.is_some() && ack_off > self.una {
            self.undo.fill_extent = self.undo.fill_extent.max(extent);
        }
    }

    /// The path delivered a segment after `extent` bytes sent after it
    /// (counted from its start): a hole counts as lost only with more than
    /// that SACKed above it from now on (Linux's `tcp_check_sack_reordering`).
    fn note_reordering(&mut self, extent: usize) {
        let segs = extent.div_ceil(self.send_mss.max(1)) as u32;
        if segs > self.reordering {
            self.reordering = segs.min(MAX_REORDERING);
            self.stats.reordering = self.stats.reordering.max(u64::from(self.reordering));
        }
    }

    /// The peer reports `[lo, hi)` (offsets from the ISS's successor, as
    /// [`Connection::ack_off`] gives them) received twice (D-SACK). If
    /// that is data retransmitted since the last recovery began, two
    /// copies got there: one retransmission fewer that was needed. With
    /// none left, none was needed and the recovery is undone. Where
    /// nothing was retransmitted twice and the duplicate lies below the
    /// cumulative ACK, the two copies were the original, which filled the
    /// hole, and its one retransmission: the original was late, as far as
    /// the hole's fill showed. (After lost ACKs a probe sends a lost
    /// segment a second time, and the two retransmissions come back as a
    /// duplicate; a duplicate above SND.UNA may be a segment whose SACK the
    /// lost ACKs carried, sent again though it had arrived: neither is a
    /// sign of reordering.)
    fn on_dsack(&mut self, lo: i64, hi: i64) {
        self.stats.dsacks_received += 1;
        let Some(m) = self.undo.marker else { return };
        if hi <= m as i64 || lo >= self.rxt_high as i64 || hi <= lo {
            return;
        }
        let segs = ((hi - lo) as usize).div_ceil(self.send_mss.max(1)) as u32;
        self.undo.retrans = self.undo.retrans.saturating_sub(segs);
        if !self.undo.again && hi <= self.una as i64 {
            // Each was sent once again: the original got there too, late.
            self.note_reordering(self.undo.fill_extent);
        }
        if self.undo.retrans == 0 {
            self.undo_recovery();
        }
    }

    /// The last recovery was not needed (what it retransmitted had
    /// arrived, or was to): its window reduction is undone, and it ends if
    /// it still runs. (Not a measure of reordering by itself: after lost
    /// ACKs a segment whose SACK they carried looks lost, and is sent
    /// again needlessly, on a path that keeps its order.)
    fn undo_recovery(&mut self) {
        self.cc.undo();
        self.undo = Undo::default();
        self.stats.undone_recoveries += 1;
        if self.recover.is_some() {
            self.recover = None;
            self.clear_rxt_log();
            self.rescue_due = false;
            self.disarm(Timer::Rescue);
        }
    }

    /// RFC 9937's step on an ACK in a recovery (the one that began it
    /// too): counts what the ACK reports delivered and sets the window
    /// that holds sending until the next one. `sacked_before` was SACKed
    /// before the ACK, `sacked_removed` of it acknowledged cumulatively by
    /// it; `dupack`: it was a duplicate ACK.
    fn prr_step(
        &mut self,
        una_before: u64,
        sacked_before: usize,
        sacked_removed: usize,
        dupack: bool,
    ) {
        let advanced = (self.una - una_before) as usize;
        // Bytes this ACK SACKed for the first time.
        let newly_sacked = self
            .sacked
            .total()
            .saturating_sub(sacked_before - sacked_removed);
        let delivered = if self.sack_ok {
            // What was SACKed before and is now acknowledged cumulatively
            // was counted when it was SACKed.
            advanced - sacked_removed + newly_sacked
        } else if dupack {
            // Without SACK, a duplicate ACK stands for a segment that left.
            self.send_mss
        } else {
            advanced
        };
        if delivered == 0 {
            return;
        }
        self.prr.delivered += delivered;
        let pipe = self.pipe();
        let ssthresh = self.cc.ssthresh();
        let sndcnt = if pipe > ssthresh {
            // Proportional: ssthresh / RecoverFS of what was delivered.
            let due = (self.prr.delivered as u64 * ssthresh as u64)
                .div_ceil(self.prr.recover_fs.max(1) as u64) as usize;
            due.saturating_sub(self.prr.out)
        } else {
            // Below the target: what was delivered and not yet sent again
            // (at least this ACK's part), a segment more where the ACK
            // moved SND.UNA and showed no new loss (PRR-SSRB: slow start's
            // pace); never beyond the target.
            let mut n = self
                .prr
                .delivered
                .saturating_sub(self.prr.out)
                .max(delivered);
            if advanced > 0 && newly_sacked == 0 {
                n += self.send_mss;
            }
            n.min(ssthresh - pipe)
        };
        // The fast retransmission goes whatever the count (it does: see
        // `poll_data`'s first rule).
        let sndcnt = if self.prr.out == 0 && sndcnt == 0 {
            self.send_mss
        } else {
            sndcnt
        };
        self.prr.cwnd = pipe + sndcnt;
    }

    /// The congestion window sending is held to: in a recovery, PRR's.
    fn send_cwnd(&self) -> usize {
        if self.recover.is_some() {
            self.prr.cwnd
        } else {
            self.cc.window()
        }
    }

    /// RFC 6675 IsLost: more than (DupThresh − 1) · SMSS bytes SACKed above.
    fn is_lost(&self, off: u64) -> bool {
        if self.sacked.containing(key(off)).is_some() {
            return false;
        }
        self.sacked.total_above(key(off + 1)) > self.lost_above()
    }

    /// SACKed bytes above a hole beyond which it counts as lost: (DupThresh
    /// − 1) segments, DupThresh the path's reordering.
    fn lost_above(&self) -> usize {
        (self.reordering as usize - 1) * self.send_mss
    }

    /// RFC 6675 finds a hole lost once; if its retransmission is lost too,
    /// nothing there finds that but the loss probe or the RTO, and while
    /// the ACKs for the data sent since keep coming the probe waits, so it
    /// is the RTO (200 ms or more: with 2 % loss each way in the
    /// simulator, one to six a transfer, each resending the whole flight).
    /// A retransmission is lost when more than DupThresh − 1 segments'
    /// worth of data first sent after it are SACKed and it is not (what
    /// Linux's lost-retransmit detection and RACK, RFC 8985, find: later
    /// data got there, it did not). Walks the log from its oldest entry:
    /// the delivered go, the lost are marked (to be sent again first, and
    /// out of the pipe), and the first one still waiting ends the walk (the
    /// ones after it went later, above a higher SND.MAX).
    fn find_lost_retransmissions(&mut self) {
        let mut i = 0;
        while let Some(&r) = self.rxt_log.get(i) {
            let delivered = r.end <= self.una
                || self
                    .sacked
                    .containing(key(r.start.max(self.una)))
                    .is_some_and(|(_, hi)| hi.distance(key(r.end)) >= 0);
            if delivered {
                self.rxt_lost -= u32::from(r.lost);
                self.rxt_log.remove(i);
                continue;
            }
            if !r.lost {
                if self.sacked.total_above(key(r.mark)) <= self.lost_above() {
                    break;
                }
                self.rxt_log[i].lost = true;
                self.rxt_lost += 1;
                self.stats.lost_retransmits += 1;
            }
            i += 1;
        }
    }

    /// Follows a retransmission of `[start, end)` in a SACK recovery: it
    /// replaces what was followed of those bytes (a range's last
    /// transmission is the one that may be lost; a copy found lost and sent
    /// again by the loss probe is not sent a third time).
    fn log_retransmission(&mut self, start: u64, end: u64) {
        if !self.rxt_log.is_empty() {
            let mut lost = 0;
            self.rxt_log.retain(|r| {
                let keep = r.end <= start || r.start >= end;
                lost += u32::from(!keep && r.lost);
                keep
            });
            self.rxt_lost -= lost;
        }
        if self.rxt_log.len() < RXT_LOG {
            self.rxt_log.push_back(RxtSent {
                start,
                end,
                mark: self.max,
                lost: false,
            });
        }
    }

    fn clear_rxt_log(&mut self) {
        self.rxt_log.clear();
        self.rxt_lost = 0;
    }

    /// Bytes considered in the network (RFC 6675 SetPipe, by ranges).
    fn pipe(&self) -> usize {
        let outstanding = self.max.saturating_sub(self.una) as usize;
        if self.recover.is_some() && !self.sack_ok {
            // NewReno: count only what is beyond the retransmitted hole.
            return outstanding;
        }
        if self.recover.is_none() {
            // What was sent (after an RTO: sent again) and not SACKed; an
            // RTO took the rest out of the network.
            let sent = self.nxt.saturating_sub(self.una) as usize;
            let mut sacked = self.sacked.total();
            if self.nxt < self.max && sacked > 0 {
                sacked -= self.sacked.total_above(key(self.nxt));
            }
            return sent.saturating_sub(sacked);
        }
        // Holes below the loss boundary that are not retransmitted are out of
        // the network; SACKed bytes are out of the network.
        let sacked = self.sacked.total();
        let mut lost = 0usize;
        let mut at = self.una;
        for (s_off, e_off) in self.sacked_offsets() {
            if s_off > at {
                // Hole [at, s_off): lost if enough SACKed above it.
                if self.sacked.total_above(key(s_off)) > self.lost_above() {
                    let from = at.max(self.high_rxt);
                    lost += s_off.saturating_sub(from) as usize;
                }
            }
            at = at.max(e_off);
        }
        // Retransmissions found lost are out of the network too (those
        // bytes lie below `high_rxt`, which the holes above left out).
        if self.rxt_lost > 0 {
            for r in self.rxt_log.iter().filter(|r| r.lost) {
                lost += r
                    .end
                    .min(self.high_rxt)
                    .saturating_sub(r.start.max(self.una)) as usize;
            }
        }
        outstanding.saturating_sub(sacked + lost)
    }

    /// The SACK scoreboard's ranges as send offsets `[start, end)`,
    /// ascending.
    fn sacked_offsets(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        let una = self.una;
        let off = move |s: SeqNumber| una + s.distance(key(una)) as u64;
        self.sacked
            .as_slice()
            .iter()
            .map(move |&(s, e)| (off(s), off(e)))
    }

    /// First lost, not yet retransmitted hole at or above `high_rxt`
    /// (RFC 6675 NextSeg rule 1), with its length capped at the MSS.
    fn next_lost(&self) -> Option<(u64, usize)> {
        let mut at = self.una.max(self.high_rxt);
        for (s_off, e_off) in self.sacked_offsets() {
            if s_off > at && self.is_lost(at) {
                return Some((at, ((s_off - at) as usize).min(self.send_mss)));
            }
            at = at.max(e_off);
        }
        None
    }

    /// The unSACKed stretch `[start, end)` at or after send offset `off`:
    /// `start` is `off`, or the end of the SACKed range holding it; `end`
    /// where the next SACKed range begins (`u64::MAX` if none does).
    fn unsacked_from(&self, off: u64) -> (u64, u64) {
        let mut start = off;
        for (s_off, e_off) in self.sacked_offsets() {
            if e_off <= start {
                continue;
            }
            if s_off <= start {
                start = e_off;
            } else {
                return (start, s_off);
            }
        }
        (start, u64::MAX)
    }

    /// RFC 6675 NextSeg rule 3: the first unSACKed hole above `high_rxt`
    /// and below SACKed data, lost or not (for when neither a lost hole nor
    /// new data may go), capped at the MSS.
    fn next_unsacked_hole(&self) -> Option<(u64, usize)> {
        let mut at = self.una.max(self.high_rxt);
        let tail = self.send.tail();
        for (s_off, e_off) in self.sacked_offsets() {
            let end = s_off.min(tail);
            if end > at {
                return Some((at, ((end - at) as usize).min(self.send_mss)));
            }
            at = at.max(e_off);
        }
        None
    }

    /// RFC 6675 NextSeg rule 4: once per recovery, the segment that ends
    /// with the highest outstanding unSACKed byte (or carries the FIN):
    /// (offset, length, FIN). Narrower than the RFC, to keep it from being
    /// spurious: only with no unsent data left (the lost tail of a transfer,
    /// which nothing else repairs before the RTO; a window-limited sender
    /// gets ACKs that reveal its losses), only if that byte was not
    /// retransmitted in this recovery already, and (see `poll_data`) only
    /// once the tail has had two SRTTs to be SACKed, like Linux's tail loss
    /// probe: a tail still in flight when recovery starts is not lost.
    fn rescue_segment(&self) -> Option<(u64, usize, bool)> {
        if self.rescue_rxt.is_some_and(|r| self.una <= r) || self.nxt < self.send.tail() {
            return None;
        }
        let mut hi = self.max;
        for (s_off, e_off) in self.sacked_offsets().rev() {
            if e_off >= hi {
                hi = hi.min(s_off);
            } else {
                break;
            }
        }
        if hi <= self.una.max(self.high_rxt) {
            return None;
        }
        let tail = self.send.tail();
        let fin = self.fin_queued && hi > tail;
        let end = hi.min(tail);
        let start = end.saturating_sub(self.send_mss as u64).max(self.una);
        let len = end.saturating_sub(start) as usize;
        (len > 0 || fin).then_some((start, len, fin))
    }

    fn poll_data(&mut self, now: Instant, max_segs: usize) -> Option<Segment> {
        if matches!(self.state, State::FinWait2 | State::TimeWait) {
            return None;
        }
        let tail = self.send.tail();
        let fin_q = self.fin_queued;
        // 1. Fast retransmit / NewReno partial ACK: the first unacknowledged segment.
        if self.force_retransmit {
            self.force_retransmit = false;
            if self.una < self.max {
                let len = (self.max.min(tail).saturating_sub(self.una) as usize).min(self.send_mss);
                let fin = fin_q && self.una + len as u64 == tail && self.max > tail;
                if len > 0 || fin {
                    let seg = self.data_segment(now, self.una, len, fin, true, 1);
                    self.high_rxt = self.high_rxt.max(self.una + seg.len as u64);
                    return Some(seg);
                }
            }
        }
        // (The congestion window is read only where it is needed: a
        // connection that only receives never touches its controller.)
        // 2. SACK recovery: a retransmission found lost goes again first,
        // then the lost holes (RFC 6675 NextSeg rule 1).
        if self.rxt_lost > 0
            && let Some(i) = self.rxt_log.iter().position(|r| r.lost)
        {
            let r = self.rxt_log[i];
            let start = r.start.max(self.una);
            let len = (r.end.saturating_sub(start) as usize).min(self.send_mss);
            if self.pipe() + len <= self.send_cwnd() {
                self.rxt_log.remove(i);
                self.rxt_lost -= 1;
                if len > 0 {
                    self.stats.sack_retransmits += 1;
                    return Some(self.data_segment(now, start, len, false, true, 1));
                }
            }
        }
        if self.recover.is_some()
            && self.sack_ok
            && let Some((off, len)) = self.next_lost()
            && self.pipe() + len <= self.send_cwnd()
        {
            self.stats.sack_retransmits += 1;
            let seg = self.data_segment(now, off, len, false, true, 1);
            self.high_rxt = off + seg.len as u64;
            return Some(seg);
        }
        // 3. Persist timer fired: a zero-window probe (one byte at SND.UNA
        // beyond the window, or the FIN), or, into a window too small for the
        // sender's SWS rule, what fits (the RFC 9293 override timeout).
        if self.probe_pending {
            self.probe_pending = false;
            if self.snd_wnd == 0 {
                let len = tail.saturating_sub(self.una).min(1) as usize;
                let fin = len == 0 && fin_q && self.una == tail;
                if len > 0 || fin {
                    self.stats.window_probes += 1;
                    if self.probe_since == NO_TIMER {
                        self.probe_since = self.since_epoch(now);
                    }
                    let new = self.una == self.max;
                    let seg = self.data_segment(now, self.una, len, fin, false, 1);
                    if new {
                        self.probe_end = self.max;
                    }
                    self.disarm(Timer::Retransmit);
                    self.set_in(Timer::Persist, now, self.rtt.rto_ns());
                    return Some(seg);
                }
            } else if self.nxt == self.una
                && let Some(seg) = self.one_new_segment(now, tail, fin_q)
            {
                return Some(seg);
            }
        }
        // 4. Loss probe (RFC 8985 §7.3): in a stalled recovery the hole at
        // SND.UNA again; else new data if the receive window lets it go
        // (whatever the congestion window says), else the last segment
        // sent again. The peer answers with an ACK whose SACK blocks start
        // (or go on with) a recovery, instead of the RTO. New data goes as
        // two segments where two may, not one as the RFC has it: a
        // receiver acknowledges every second full-sized segment at once
        // (RFC 5681 §4.2) but may hold one alone for its delayed-ACK timer
        // (Linux: 40 ms), and when the probe is due because the one ACK of
        // a flight was lost, the receiver has the flight and a lone new
        // segment waits for that timer.
        if self.tlp_second {
            self.tlp_second = false;
            if self.nxt == self.max
                && let Some(seg) = self.one_new_segment(now, tail, fin_q)
            {
                return Some(seg);
            }
        }
        if self.tlp_due {
            self.tlp_due = false;
            if let Some(seg) = self.loss_probe(now, tail, fin_q) {
                self.stats.loss_probes += 1;
                self.tlp_out = true;
                self.set_in(Timer::Retransmit, now, self.rtt.rto_ns());
                return Some(seg);
            }
        }
        // 5. New data (or go-back-N after an RTO) within both windows.
        // Going back skips what the peer SACKed, and a segment sent again
        // ends where SACKed data begins.
        let mut avail_end = tail;
        if self.nxt < self.max && !self.sacked.is_empty() {
            let (nxt, end) = self.unsacked_from(self.nxt);
            self.nxt = nxt;
            avail_end = end.min(tail);
        }
        let wnd_edge = self.una + self.snd_wnd as u64;
        let avail = avail_end.saturating_sub(self.nxt) as usize;
        let wnd_room = wnd_edge.saturating_sub(self.nxt) as usize;
        let len = avail.min(wnd_room).min(self.send_mss);
        let fin = fin_q && self.nxt + len as u64 == tail;
        if len == 0 && fin {
            // A bare FIN (it needs no window).
            let retx = self.nxt < self.max;
            return Some(self.data_segment(now, tail, 0, true, retx, 1));
        }
        if len > 0 {
            let pipe = self.pipe();
            let sws_ok = len == self.send_mss
                || (len == avail && (!self.cfg.nagle || self.nxt == self.una))
                || len >= self.max_snd_wnd / 2
                || self.nxt < self.max;
            let cwnd = self.send_cwnd();
            let cwnd_ok = pipe + len <= cwnd || self.nxt == self.una;
            if sws_ok && !cwnd_ok {
                // Data and receive window wait for the congestion window.
                self.cwnd_validate(pipe, true);
            }
            if sws_ok && cwnd_ok {
                if self.pace_next != NO_TIMER && self.pace_next > self.since_epoch(now) {
                    self.timers.0[Timer::Pacing as usize] = self.pace_next;
                    return None;
                }
                let retx = self.sent_before(self.nxt);
                // Whole segments behind this one, as far as both windows and
                // `max_segs` allow (the tail that is not a whole segment
                // waits for the next call, where the rules above decide).
                let segs = if max_segs > 1 && !retx && len == self.send_mss {
                    let cwnd_room = cwnd.saturating_sub(pipe);
                    (avail.min(wnd_room).min(cwnd_room) / len).clamp(1, max_segs)
                } else {
                    1
                };
                let fin = fin_q && self.nxt + (segs * len) as u64 == tail;
                let seg = self.data_segment(now, self.nxt, segs * len, fin, retx, segs);
                // Limited by the congestion window if it leaves no room
                // for another segment of what data and window would allow.
                let flight = pipe + seg.len;
                let more = avail.min(wnd_room) > seg.len;
                self.cwnd_validate(flight, more && flight + self.send_mss > cwnd);
                if avail == seg.len && avail_end == tail && self.send.free() < self.send.frame_len()
                {
                    // All the buffer holds is sent and it has no room for
                    // more: it bounds the sender now.
                    self.send_buf_limited = true;
                }
                self.pace(now, seg.len);
                self.grow_send_buffer();
                self.arm_loss_probe(now);
                return Some(seg);
            }
        }
        // 6. SACK recovery with no lost hole and no new data to send (RFC
        // 6675 NextSeg rules 3 and 4): an unSACKed hole below SACKed data,
        // else once per recovery the highest unSACKed segment, so that a
        // lost tail is repaired without waiting for the RTO.
        if self.recover.is_some() && self.sack_ok {
            if let Some((off, len)) = self.next_unsacked_hole()
                && self.pipe() + len <= self.send_cwnd()
            {
                self.stats.sack_retransmits += 1;
                let seg = self.data_segment(now, off, len, false, true, 1);
                self.high_rxt = off + seg.len as u64;
                return Some(seg);
            }
            if let Some((off, len, fin)) = self.rescue_segment()
                && self.pipe() + len <= self.send_cwnd()
            {
                if self.rescue_due {
                    self.rescue_due = false;
                    self.stats.rescue_retransmits += 1;
                    self.rescue_rxt = self.recover;
                    // HighRxt stays (RFC 6675 step C.1).
                    return Some(self.data_segment(now, off, len, fin, true, 1));
                }
                if !self.timers.armed(Timer::Rescue) {
                    let wait = self.rtt.srtt().map_or(self.rtt.rto(), |s| 2 * s);
                    self.set_in(Timer::Rescue, now, nanos(wait));
                }
            }
        }
        // Nothing may be sent although data waits and nothing is in flight:
        // the window is closed or too small; probe (or override) later.
        if self.nxt == self.una
            && (tail > self.nxt || (fin_q && self.max <= tail))
            && !self.timers.armed(Timer::Retransmit)
            && !self.timers.armed(Timer::Persist)
        {
            self.set_in(Timer::Persist, now, self.rtt.rto_ns());
        }
        None
    }

    /// The loss probe [`poll_data`](Self::poll_data) sends when the probe
    /// timer fired: in a recovery, the segment at SND.UNA again; else the
    /// next new segment if there is one and the receive window takes it,
    /// else the last segment sent (with the FIN if that was sent).
    fn loss_probe(&mut self, now: Instant, tail: u64, fin_q: bool) -> Option<Segment> {
        if self.max <= self.una {
            return None;
        }
        if self.recover.is_some() {
            // A recovery that stalled: the hole at SND.UNA again (its
            // retransmission was lost, or every ACK since).
            let len = (self.max.min(tail).saturating_sub(self.una) as usize).min(self.send_mss);
            let fin = fin_q && self.una + len as u64 == tail && self.max > tail;
            if len == 0 && !fin {
                return None;
            }
            let seg = self.data_segment(now, self.una, len, fin, true, 1);
            self.high_rxt = self.high_rxt.max(self.una + seg.len as u64);
            return Some(seg);
        }
        if self.nxt == self.max
            && let Some(seg) = self.one_new_segment(now, tail, fin_q)
        {
            self.tlp_second = true;
            return Some(seg);
        }
        // The last segment: its data up to the highest byte sent, and the
        // FIN if the highest offset sent is the FIN's.
        let fin = fin_q && self.max > tail;
        let data_end = self.max.min(tail);
        let off = data_end.saturating_sub(self.send_mss as u64).max(self.una);
        let len = data_end.saturating_sub(off) as usize;
        if len == 0 && !fin {
            return None;
        }
        let off = if len == 0 { tail } else { off };
        Some(self.data_segment(now, off, len, fin, true, 1))
    }

    /// One segment of new data at `SND.NXT`, as much as the receive window
    /// and the MSS allow (whatever the congestion window says), the FIN
    /// with it if it ends the stream; `None` if none may go.
    fn one_new_segment(&mut self, now: Instant, tail: u64, fin_q: bool) -> Option<Segment> {
        let len = self.new_data_len(tail);
        if len == 0 {
            return None;
        }
        let fin = fin_q && self.nxt + len as u64 == tail;
        Some(self.data_segment(now, self.nxt, len, fin, false, 1))
    }

    /// Bytes of new data (up to `tail`) one segment at `SND.NXT` may carry
    /// within the receive window and the MSS.
    fn new_data_len(&self, tail: u64) -> usize {
        let room = (self.una + self.snd_wnd as u64).saturating_sub(self.nxt) as usize;
        (tail.saturating_sub(self.nxt) as usize)
            .min(room)
            .min(self.send_mss)
    }

    /// Arms the loss probe timer (RFC 8985 §7.2) while data is in flight,
    /// no RTO recovery runs and no probe is out: two smoothed RTTs and
    /// [`PROBE_SLACK`] ([`NEW_DATA_PROBE_SLACK`] where the probe will be
    /// new data: outside a recovery, with data unsent that the receive
    /// window takes), or with one segment in flight, which a peer may hold
    /// for its delayed ACK, two smoothed RTTs and the least RTO; never
    /// beyond the RTO. Disarms it otherwise.
    fn arm_loss_probe(&mut self, now: Instant) {
        let Some(srtt) = self.rtt.srtt_ns() else {
            return;
        };
        // Not after an RTO either, until what it sends again is out and an
        // ACK has reset the backoff (Linux's Loss state); nor into a shut
        // window, which the persist timer probes (what is in flight then is
        // the probe's byte: Linux's probes carry none, and arm no probe).
        if self.max <= self.una
            || self.snd_wnd == 0
            || self.tlp_out
            || self.retries > 0
            || self.nxt < self.max
            || !self.state.synchronized()
        {
            self.disarm(Timer::LossProbe);
            return;
        }
        let new_data = self.recover.is_none() && self.new_data_len(self.send.tail()) > 0;
        let extra = if self.max - self.una <= self.send_mss as u64 {
            self.cfg.rto_min
        } else if new_data {
            NEW_DATA_PROBE_SLACK
        } else {
            PROBE_SLACK
        };
        // In nanoseconds, as the timers keep it (on every ACK).
        let pto = srtt
            .saturating_mul(2)
            .saturating_add(nanos(extra))
            .min(self.rtt.rto_ns());
        self.set_in(Timer::LossProbe, now, pto);
    }

    /// Congestion window validation (RFC 7661 §4.3's "cwnd-limited", as
    /// Linux's `tcp_cwnd_validate` keeps it): after sending, with `flight`
    /// bytes in flight, and `limited` if the congestion window is what
    /// stopped more going. Within one window of sent data (until `una`
    /// passes what was sent when it began) a limited send marks the window
    /// limited and the largest flight is kept; the next window starts
    /// afresh.
    fn cwnd_validate(&mut self, flight: usize, limited: bool) {
        let flight = u32::try_from(flight).unwrap_or(u32::MAX);
        if self.una >= self.cwnd_usage_end
            || limited
            || (!self.cwnd_limited && flight > self.max_flight)
        {
            self.cwnd_limited = limited;
            self.max_flight = flight;
            self.cwnd_usage_end = self.max.max(self.nxt);
        }
    }

    /// The congestion window may grow: it limited sending in this window
    /// of data, or (slow start) it is less than twice the largest flight,
    /// so that slow start can double what was sent (Linux's
    /// `tcp_is_cwnd_limited`).
    fn is_cwnd_limited(&self) -> bool {
        if self.cwnd_limited {
            return true;
        }
        let cwnd = self.cc.window();
        cwnd < self.cc.ssthresh() && cwnd < 2 * self.max_flight as usize
    }

    /// Spaces new-data segments at `gain × cwnd / SRTT` (gain 2 in slow start,
    /// 1.2 after, as Linux does) when pacing is on and an RTT is known, at
    /// most at [`Config::max_pacing_rate`] (alone if pacing is off). Paced
    /// at that cap, a sender that comes late catches up
    /// ([`PACE_CATCH_UP`]).
    fn pace(&mut self, now: Instant, len: usize) {
        let cap = self.cfg.max_pacing_rate;
        if !self.cfg.pacing && cap == 0 {
            return;
        }
        let own = match self.rtt.srtt() {
            Some(srtt) if self.cfg.pacing => {
                let cwnd = self.cc.window();
                let gain = if cwnd < self.cc.ssthresh() { 2.0 } else { 1.2 };
                Some(gain * cwnd.max(self.send_mss) as f64 / srtt.as_secs_f64().max(1e-6))
            }
            _ => None,
        };
        let (rate, capped) = match own {
            Some(r) if cap > 0 && (cap as f64) < r => (cap as f64, true),
            Some(r) => (r, false),
            None if cap > 0 => (cap as f64, true),
            None => return,
        };
        // At most one second between segments, whatever a controller
        // reports; a cap set is kept to, however low.
        let secs = len as f64 / rate;
        let gap = nanos(Duration::from_secs_f64(if capped {
            secs.min(1e6)
        } else {
            secs.min(1.0)
        }));
        let now = self.since_epoch(now);
        let from = if self.pace_next == NO_TIMER {
            now
        } else if capped {
            // Late: what the cap allowed meanwhile goes now (bounded).
            self.pace_next.max(now.saturating_sub(nanos(PACE_CATCH_UP)))
        } else {
            self.pace_next.max(now)
        };
        self.pace_next = from.saturating_add(gap).min(NO_TIMER - 1);
    }

    /// Whether what goes from `off` went before: a retransmission. Not
    /// the byte a zero-window probe sent first, while nothing went beyond
    /// it (`probe_end`).
    #[inline]
    fn sent_before(&self, off: u64) -> bool {
        off < self.max && !(self.max == self.probe_end && off + 1 == self.probe_end)
    }

    /// A segment of `len` bytes at `off` (shortened to what one segment
    /// may carry), or with `segs` > 1 a burst of `segs` segments of
    /// `len / segs` bytes each (one segment if they would not fit whole).
    fn data_segment(
        &mut self,
        now: Instant,
        off: u64,
        len: usize,
        fin: bool,
        retx: bool,
        segs: usize,
    ) -> Segment {
        let mut r = self.header(TcpFlags::ACK, self.seq_of(off));
        self.finish_header(&mut r, now);
        // The MSS counts payload plus options (RFC 9293 §3.7.1): SACK blocks
        // shorten this segment.
        let max_one = self.mss_limit.saturating_sub(r.options.len()).max(1);
        let fl = self.send.frame_len() as u64;
        let each = len / segs.max(1);
        // A burst's segments are whole: each within what one segment may
        // carry, and, one segment per frame, each a whole slot.
        let whole = each <= max_one
            && (!self.cfg.segment_per_frame || (each as u64 == fl && off.is_multiple_of(fl)));
        let (mut len, seg_len) = if segs > 1 && whole {
            (each * segs, each)
        } else {
            let one = len.min(max_one);
            (one, one)
        };
        if self.cfg.segment_per_frame && len > 0 && seg_len == len {
            // Within one slot, so that its headers fit the slot's headroom.
            len = len.min((fl - off % fl) as usize);
        }
        let fin = fin && off + len as u64 == self.send.tail();
        if fin {
            r.flags |= TcpFlags::FIN;
        }
        if len > 0 && off + len as u64 == self.send.tail() {
            r.flags |= TcpFlags::PSH;
        }
        let end = off + len as u64 + u64::from(fin);
        let retx = retx || self.sent_before(off);
        if retx {
            self.stats.retransmits += 1;
            self.stats.bytes_retransmitted += len as u64;
            if let Some(m) = self.undo.marker {
                self.undo.retrans += len.div_ceil(self.send_mss.max(1)) as u32;
                // Below what was retransmitted already: perhaps a second
                // copy (a probe of the hole at SND.UNA).
                self.undo.again |= off < self.rxt_high && off + len as u64 > m;
                if self.ts_ok && self.undo.rxt_ts.is_none() {
                    self.undo.rxt_ts = Some(self.ts_now(now));
                }
            }
            self.rxt_high = self.rxt_high.max(off + len as u64);
            if self.recover.is_some() && self.sack_ok && len > 0 {
                self.log_retransmission(off, off + len as u64);
            }
            if let Some((t_off, _)) = self.rtt_timing
                && t_off >= off
                && t_off < end
            {
                self.rtt_timing = None;
            }
        } else if self.rtt_timing.is_none() && end > off {
            self.rtt_timing = Some((off, self.since_epoch(now)));
        }
        if off == self.nxt {
            self.nxt = end;
        }
        self.max = self.max.max(end);
        if end > off {
            self.arm_if_unset(Timer::Retransmit, now);
            self.disarm(Timer::Persist);
        }
        self.stats.bytes_sent += len as u64;
        if self.recover.is_some() {
            self.prr.out += len;
        }
        let mut seg = self.count_out(r, off, len);
        if seg_len < len {
            seg.seg_len = seg_len;
            self.stats.segments_sent += (seg.count() - 1) as u64;
        }
        seg
    }

    // ------------------------------------------------------------ receiver

    /// Right edge (receive offset) the buffer allows now.
    fn window_edge(&self) -> u64 {
        self.recv.nxt() + self.recv.window() as u64
    }

    /// Fills ACK, window and options into a header; clears ACK state.
    fn finish_header(&mut self, r: &mut TcpRepr, now: Instant) {
        // Receiver SWS avoidance (RFC 9293 §3.8.6.2.2): move the right edge
        // only by a meaningful amount.
        let nxt = self.recv.nxt();
        let edge = self.window_edge();
        let step = (self.recv.limit() / 2).min(self.cfg.mss as usize).max(1) as u64;
        let offer = if edge >= self.rcv_adv + step {
            edge
        } else {
            self.rcv_adv
        };
        let field = (offer.saturating_sub(nxt) >> self.rcv_wscale).min(0xffff);
        r.window = field as u16;
        // Acceptance stays bounded by the largest edge ever told.
        self.rcv_adv = self.rcv_adv.max(nxt + (field << self.rcv_wscale));
        if self.ts_ok {
            r.options.timestamp = Some(TcpTimestamp {
                tsval: self.ts_now(now),
                tsecr: self.ts_recent,
            });
        }
        if self.sack_ok && (self.recv.has_ooo() || self.dsack.is_some()) {
            let max_blocks = if self.ts_ok { 3 } else { 4 };
            let base = self.irs + 1;
            let mut blocks = SackBlocks::EMPTY;
            // A duplicate first, once (RFC 2883).
            if let Some((s, e)) = self.dsack.take() {
                blocks.push((base + s as usize, base + e as usize));
                self.stats.dsacks_sent += 1;
            }
            let first = self.last_ooo.and_then(|o| self.recv.ooo_containing(o));
            if let Some((s, e)) = first {
                blocks.push((base + s as usize, base + e as usize));
            }
            let mut v: [(u64, u64); 4] = [(0, 0); 4];
            let mut n = 0;
            for (s, e) in self.recv.ooo_ranges() {
                if Some((s, e)) != first {
                    // Keep the highest ranges (most recent in a bulk transfer).
                    if n < 4 {
                        v[n] = (s, e);
                        n += 1;
                    } else {
                        v.rotate_left(1);
                        v[3] = (s, e);
                    }
                }
            }
            for &(s, e) in v[..n].iter().rev() {
                if blocks.len() >= max_blocks {
                    break;
                }
                blocks.push((base + s as usize, base + e as usize));
            }
            r.options.sack = blocks;
        }
        self.last_ack_sent = self.recv.nxt() + u64::from(self.fin_received);
        self.ack_now = false;
        self.unacked_bytes = 0;
        self.disarm(Timer::DelayedAck);
    }

    // ------------------------------------------------------------ helpers

    fn header(&self, flags: TcpFlags, seq: SeqNumber) -> TcpRepr {
        TcpRepr {
            src_port: self.tuple.local.port(),
            dst_port: self.tuple.remote.port(),
            seq,
            ack: if flags.contains(TcpFlags::ACK) {
                self.rcv_nxt()
            } else {
                SeqNumber(0)
            },
            flags,
            window: 0,
            urgent: 0,
            options: TcpOptions::NONE,
        }
    }

    fn count_out(&mut self, repr: TcpRepr, offset: u64, len: usize) -> Segment {
        self.stats.segments_sent += 1;
        Segment::single(repr, offset, len)
    }

    /// The RTT an ACK's timestamp echo measures (RFC 7323 §4), 1-ms ticks:
    /// None without timestamps, an echo, or for one a minute old or more.
    fn echo_rtt(&self, now: Instant, seg: &TcpRepr) -> Option<Duration> {
        let ts = seg
            .options
            .timestamp
            .filter(|t| self.ts_ok && t.tsecr != 0)?;
        let ticks = self.ts_now(now).wrapping_sub(ts.tsecr);
        (ticks < 60_000).then(|| Duration::from_millis(u64::from(ticks)))
    }

    fn set_ts_recent(&mut self, now: Instant, tsval: u32) {
        self.ts_recent = tsval;
        self.ts_recent_at = self.seconds(now);
    }

    /// TS.Recent was set [`PAWS_IDLE`] ago or more: PAWS no longer holds
    /// it against a segment (RFC 7323 §5.5).
    fn ts_recent_expired(&self, now: Instant) -> bool {
        u64::from(self.seconds(now).saturating_sub(self.ts_recent_at)) >= PAWS_IDLE.as_secs()
    }

    /// `now` in whole seconds since the epoch (136 years fit).
    fn seconds(&self, now: Instant) -> u32 {
        u32::try_from(self.since_epoch(now) / 1_000_000_000).unwrap_or(u32::MAX)
    }

    fn ts_now(&self, now: Instant) -> u32 {
        let ms = (self.since_epoch(now) / 1_000_000) as u32;
        // A per-connection offset (RFC 7323 §5.4) from the ISS.
        ms.wrapping_add(self.iss.0)
    }

    /// Queues an RST for an unacceptable ACK (RFC 9293: `<SEQ=SEG.ACK><CTL=RST>`).
    fn reset_reply(&mut self, seq: SeqNumber) {
        self.pending_rst = Some((TcpFlags::RST, seq, SeqNumber(0)));
    }

    fn disarm(&mut self, t: Timer) {
        self.timers.0[t as usize] = NO_TIMER;
    }

    /// Arms `t` for `after` nanoseconds from `now` (no `Instant` to add and
    /// convert: the timers are nanoseconds since the epoch).
    fn set_in(&mut self, t: Timer, now: Instant, after: u64) {
        let mut at = self.since_epoch(now).saturating_add(after);
        // No later than the user timeout of a stall (which only a timeout
        // begins: the common arming reads no cold state) or a shut window.
        let since = match t {
            Timer::Retransmit if self.retries > 0 => self.stall_since,
            Timer::Persist => self.probe_since,
            _ => NO_TIMER,
        };
        if since != NO_TIMER
            && let Some(ut) = self.cfg.user_timeout
        {
            at = at.min(since.saturating_add(ut.as_nanos() as u64));
        }
        self.timers.0[t as usize] = at.min(NO_TIMER - 1);
    }

    /// Whether [`Config::user_timeout`] has passed since `since`
    /// (nanoseconds since the epoch; [`NO_TIMER`]: never).
    fn past_user_timeout(&self, since: u64, now: Instant) -> bool {
        self.cfg.user_timeout.is_some_and(|ut| {
            since != NO_TIMER && self.since_epoch(now).saturating_sub(since) >= ut.as_nanos() as u64
        })
    }

    fn arm_if_unset(&mut self, t: Timer, now: Instant) {
        if !self.timers.armed(t) {
            self.set_in(t, now, self.rtt.rto_ns());
        }
    }

    /// `at` as nanoseconds since the connection's epoch (for a timer):
    /// from the last conversion ([`Connection::clock`]), exact to the
    /// nanosecond either way, and kept for the next. A time before the
    /// epoch counts as the epoch (and is not kept: the clock stays exact).
    fn since_epoch(&self, at: Instant) -> u64 {
        let (last, ns) = self.clock.get();
        if last == at {
            return ns;
        }
        let at_ns = match at.checked_duration_since(last) {
            Some(d) => ns.saturating_add(nanos(d)).min(NO_TIMER - 1),
            None => match ns.checked_sub(nanos(last.saturating_duration_since(at))) {
                Some(n) => n,
                None => return 0,
            },
        };
        self.clock.set((at, at_ns));
        at_ns
    }

    fn expired(&self, t: Timer, now: Instant) -> bool {
        self.timers.armed(t) && self.timers.0[t as usize] <= self.since_epoch(now)
    }

    fn fail(&mut self, e: ConnectionError) {
        self.error = Some(e);
        self.finish(CloseReason::Error(e));
    }

    fn finish(&mut self, reason: CloseReason) {
        self.state = State::Closed;
        self.timers = Timers::NONE;
        if self.closed.is_none() {
            self.closed = Some(reason);
        }
    }
}

/// The RST to answer a segment that belongs to no connection (RFC 9293
/// §3.10.7.1); `None` for an incoming RST.
pub fn reset_for(seg: &TcpRepr, payload_len: usize) -> Option<TcpRepr> {
    if seg.flags.contains(TcpFlags::RST) {
        return None;
    }
    let mut r = TcpRepr {
        src_port: seg.dst_port,
        dst_port: seg.src_port,
        seq: SeqNumber(0),
        ack: SeqNumber(0),
        flags: TcpFlags::RST,
        window: 0,
        urgent: 0,
        options: TcpOptions::NONE,
    };
    if seg.flags.contains(TcpFlags::ACK) {
        r.seq = seg.ack;
    } else {
        let len = payload_len
            + usize::from(seg.flags.contains(TcpFlags::SYN))
            + usize::from(seg.flags.contains(TcpFlags::FIN));
        r.ack = seg.seq + len;
        r.flags = TcpFlags::RST | TcpFlags::ACK;
    }
    Some(r)
}

#[cfg(test)]
mod layout {
    use super::*;
    use std::mem::{offset_of, size_of};

    const LINE: usize = 64;

    /// The layout note on `Connection` holds: what a data segment or its
    /// ACK touches lies in its first lines, and the timers, the RTT
    /// estimator and the hot counters and settings each fit one line. (The
    /// cache misses it saves are counted by `benches/conns-cachesim.sh`.)
    #[test]
    fn hot_state_is_packed() {
        type C = Connection<HeapFrames>;
        // The scalars and small state before the timers: six lines.
        assert!(
            offset_of!(C, timers) <= 6 * LINE,
            "{}",
            offset_of!(C, timers)
        );
        assert!(offset_of!(C, tuple) < offset_of!(C, una));
        assert!(size_of::<Timers>() <= LINE);
        assert!(size_of::<RttEstimator>() <= LINE);
        // The sub-structures follow in this order, the cold fields after.
        assert!(offset_of!(C, timers) < offset_of!(C, rtt));
        assert!(offset_of!(C, rtt) < offset_of!(C, send));
        assert!(offset_of!(C, send) < offset_of!(C, recv));
        assert!(offset_of!(C, recv) < offset_of!(C, stats));
        assert!(offset_of!(C, stats) < offset_of!(C, cfg));
        assert!(offset_of!(C, cfg) < offset_of!(C, send_share));
        // Counters a segment moves: Stats' first line.
        for off in [
            offset_of!(Stats, segments_sent),
            offset_of!(Stats, segments_received),
            offset_of!(Stats, bytes_sent),
            offset_of!(Stats, bytes_received),
            offset_of!(Stats, bytes_delivered_direct),
            offset_of!(Stats, acks_sent),
            offset_of!(Stats, delayed_acks),
            offset_of!(Stats, rtt_samples),
        ] {
            assert!(off + 8 <= LINE, "{off}");
        }
        assert_eq!(offset_of!(C, stats) % LINE, 0);
        // Settings a segment reads: Config's first line.
        assert!(offset_of!(Config, delayed_ack) + size_of::<Duration>() <= LINE);
        for off in [
            offset_of!(Config, mss),
            offset_of!(Config, segment_per_frame),
            offset_of!(Config, pacing),
            offset_of!(Config, max_pacing_rate),
            offset_of!(Config, nagle),
        ] {
            assert!(off < LINE, "{off}");
        }
    }

    /// The clock converts any time to nanoseconds since the epoch, exactly,
    /// forwards and backwards from the last; a time before the epoch is the
    /// epoch and leaves the clock as it was.
    #[test]
    fn the_clock_is_exact_either_way() {
        let now = Instant::now();
        let c = opened(now);
        let ms = |m: u64| Duration::from_millis(m);
        assert_eq!(c.since_epoch(now + ms(5)), 5_000_000);
        assert_eq!(c.since_epoch(now + ms(5)), 5_000_000, "kept");
        assert_eq!(c.since_epoch(now + ms(2)), 2_000_000);
        assert_eq!(c.since_epoch(now - ms(3)), 0);
        assert_eq!(c.since_epoch(now + ms(1)), 1_000_000);
        let far = now + Duration::from_nanos(3_000_000_123);
        assert_eq!(c.since_epoch(far), 3_000_000_123);
        assert_eq!(c.since_epoch(now), 0);
    }

    /// A connection opened at `now` (its SYN not sent yet).
    fn opened(now: Instant) -> Connection {
        let isn = IsnGenerator::new(1, now);
        let t = FourTuple {
            local: "198.18.0.1:1000".parse().expect("address"),
            remote: "198.18.0.2:2000".parse().expect("address"),
        };
        Connection::connect(Config::default(), t, &isn, now)
    }

    /// A timer is kept to the nanosecond: set, read back, expired.
    #[test]
    fn timers_round_trip() {
        let now = Instant::now();
        let mut c = opened(now);
        // The connect timeout is armed from the start.
        let connect = now + Config::default().connect_timeout.expect("a default");
        assert_eq!(c.poll_timeout(), Some(connect));
        let at = now + Duration::from_nanos(1_234_567_891);
        c.set_in(Timer::Persist, now, 1_234_567_891);
        assert_eq!(c.poll_timeout(), Some(at));
        assert!(!c.expired(Timer::Persist, at - Duration::from_nanos(1)));
        assert!(c.expired(Timer::Persist, at));
        c.disarm(Timer::Persist);
        assert_eq!(c.poll_timeout(), Some(connect));
        assert!(!c.expired(Timer::Persist, connect));
    }
}
