//! Sans-IO TCP (RFC 9293 with RFC 7323, 2018, 6298, 5681, 6675, 9937, 9438, 7661, 5961, 6528).
//!
//! The core consumes parsed segments ([`TcpRepr`] + payload bytes) and the
//! current time, and produces segments to send and the next deadline. It never
//! reads a clock, never touches a socket, never verifies checksums (the caller
//! drops corrupt packets before calling in) and is deterministic for given inputs
//! and ISN key.
//!
//! # Call order (per [`Connection`])
//!
//! 1. Feed inputs as they arrive: [`Connection::handle_segment`] for every
//!    segment of this 4-tuple, [`Connection::handle_timeout`] when the deadline
//!    from `poll_timeout` has passed (calling it early is harmless).
//! 2. Let the application act: [`Connection::write`] (or, in place,
//!    [`Connection::fill`], [`Connection::fill_vectored`],
//!    [`Connection::fill_zeros`], [`Connection::write_repeat`]) /
//!    [`Connection::read`] (or, by reference,
//!    [`Connection::read_slices`] + [`Connection::consume`]) /
//!    [`Connection::close`] / [`Connection::abort`].
//! 3. Drain outputs: [`Connection::poll_transmit`] until it returns `None`
//!    (the payload by reference, with its Internet sums, through
//!    [`Connection::payload_pieces`]), or [`Connection::poll_transmit_gso`],
//!    which hands out new data in bursts of whole segments that the caller
//!    cuts with [`Segment::part`] (the engine does; the TCP work is then
//!    done once a burst instead of once a segment), then [`Connection::poll_event`] until
//!    `None`, then [`Connection::poll_timeout`] for the next deadline.
//!
//! Every input may make new output available: after any input, repeat step 3.
//! A [`Listener`] follows the same order for passive opens and hands
//! established connections out through [`Listener::accept`].
//!
//! # Memory
//!
//! Send and receive buffers are allocated once, when the connection becomes
//! established (so a half-open connection is small); nothing on the per-segment
//! path allocates. The send buffer ([`send`]) is a ring of page-sized slots
//! whose bytes live in a [`SendMemory`] the caller chooses: in the engine,
//! UMEM frames the connection owns, so that segments are sent by reference
//! (descriptors into those frames) and never copied; [`HeapFrames`] for
//! sans-IO use. A slot is rewritten only once all its bytes are cumulatively
//! acknowledged (and, the memory's rule, once no transmission still reads
//! it). The Internet sums of every 256-byte block are computed as bytes are
//! written, so a segment's checksum costs no pass over its payload. Under
//! auto-tuning ([`Config::send_initial`]) the send buffer uses only some of
//! its slots at first and doubles them while it holds less than twice the
//! path's bandwidth-delay product (the rate bytes are acknowledged at, times
//! the smallest RTT), so that a sender on a short path keeps rotating the
//! same few frames, warm in the caches; where the buffer bounds a sender
//! whose ACKs come late (a busy peer that acknowledges a dozen segments at
//! a time), it doubles on trial and keeps the size only if the delivery
//! rate rises by a quarter. The receive buffer is a ring too;
//! out-of-order data is stored at its place in the ring and tracked in a
//! bounded range set, reported in SACK blocks (the block of the latest
//! segment first, then the highest others), and a segment that arrives
//! again is reported once in the next ACK's first block (RFC 2883
//! D-SACK), with the block it lies in after it.

//! # TIME-WAIT
//!
//! RFC 9293 holds TIME-WAIT for 2×MSL (4 minutes). xtcp is a dedicated engine
//! with RFC 6528 ISNs and (when negotiated) RFC 7323 timestamps with PAWS, which
//! protect a new incarnation from old duplicates; TIME-WAIT therefore lasts
//! [`Config::time_wait`] (1 s by default), long enough to re-acknowledge a lost
//! final FIN a few times, and is restarted by a retransmitted FIN. A FIN that
//! arrives later finds no connection: the caller answers it with
//! [`reset_for`], and the peer, in LAST-ACK, closes on that RST. A caller
//! about to exit may drop a connection as soon as
//! [`Connection::is_time_wait_quiet`] (the engine does: see
//! `worker::engine`), with the same outcome for a late FIN.
//!
//! # Loss recovery
//!
//! RTO per RFC 6298 (Karn's rule, doubling backoff reset by new ACKs, bounds
//! from [`Config`]); on expiry go-back-N from `SND.UNA` with a one-segment
//! window, skipping what the SACK scoreboard holds: the timeout keeps it, as
//! Linux does (RFC 2018 lets a receiver drop data it SACKed; one that does
//! shows it by an ACK that stops where SACKed data begins, and then the
//! scoreboard is cleared, `sack_renegings`). No fast recovery begins until
//! what was sent before the timeout is acknowledged (RFC 6675 §5.1).
//! Three duplicate ACKs (fewer with under four segments outstanding and
//! nothing unsent: RFC 5827 early retransmit), or (with SACK) more than 2·MSS
//! SACKed above `SND.UNA`, start a recovery: one window reduction, the first segment
//! retransmitted at once, then RFC 6675 NextSeg rule 1 (lost holes), new
//! data as the pipe allows, and rules 3–4 (an unSACKed hole; once a
//! recovery, the rescue retransmission of the highest unSACKed segment);
//! without SACK, NewReno partial ACKs retransmit the next hole.
//!
//! A retransmission that is lost too is found as Linux's lost-retransmit
//! detection (and RACK, RFC 8985) finds it: when more than DupThresh − 1
//! segments' worth of data first sent after it are SACKed and it is not,
//! it is out of the pipe and goes again before anything else (RFC 6675
//! alone never looks below HighRxt again, and while the ACKs for the data
//! sent since kept coming only the RTO found it: with 2 % loss each way in
//! the simulator, one to six timeouts a transfer, each sending the
//! SACKed flight again). Up to 32 retransmissions of a recovery are
//! followed at once; one that no later data can reveal (a send buffer
//! held by it, the end of the stream) is left to the loss probe below.
//!
//! What a recovery may send is Proportional Rate Reduction's (RFC 9937),
//! not RFC 6675's `cwnd − pipe`: each ACK counts what it reports delivered
//! (SND.UNA's advance plus bytes newly SACKed; without SACK, a duplicate
//! ACK counts as a segment), and while the pipe is above the controller's
//! target (ssthresh) the sender sends `ssthresh / RecoverFS` of all that
//! was delivered since the recovery began (RecoverFS: the flight then, less
//! what was SACKed before), so the flight comes down to the target evenly
//! from the first ACK on, where RFC 6675 sent nothing until the pipe fell
//! below it; below the target (heavy losses) it sends what was delivered,
//! a segment more on an ACK that moves SND.UNA and shows no new loss, never
//! beyond the target, where RFC 6675 filled the difference in one burst.
//! The recovery ends with the window at the target.
//!
//! Reordering: a hole counts as lost (IsLost, and DupThresh for duplicate
//! ACKs) once more than `reordering − 1` segments are SACKed above it;
//! `reordering` starts at RFC 6675's 3 and rises (up to 300, Linux's
//! `tcp_max_reordering`) to how late the path has shown a segment to be:
//! the bytes SACKed above a hole when an ACK shows it filled, where nothing
//! in it was retransmitted (the original came late), or where it was, once
//! (nothing in the recovery twice), and then the peer reports a duplicate
//! of it below the cumulative ACK, or the timestamp echo shows the original
//! filled it. (A duplicate alone is no such sign: after lost ACKs a segment
//! whose SACK they carried looks lost and is sent again, on a path that
//! keeps its order.) A recovery is needless when every one of
//! its retransmissions is reported received twice (the peer's D-SACK, RFC
//! 2883), or when, with timestamps, the ACK that acknowledges everything it
//! retransmitted echoes a timestamp older than its first retransmission
//! (the originals filled the holes, RFC 7323's TS.Recent moving only with
//! in-order data); then the congestion controller returns to its state
//! before the recovery (as Linux's undo). An RTO undoes nothing and, if
//! DupThresh segments were SACKed when it fired, sets `reordering` back to
//! 3. A duplicate ACK that carries only a D-SACK block is not counted as
//! one (RFC 6675 §2).
//!
//! Loss probe (RFC 8985 §7's tail loss probe, without RACK): while data is
//! in flight, no ACK for two smoothed RTTs and 10 ms, or 2 ms where the
//! probe will be new data, which was to go anyway (with one segment in
//! flight, which a delayed ACK may hold: the least RTO on top; never
//! beyond the RTO) sends one probe, whatever the congestion window says:
//! outside a recovery the next two new segments as far as the receive
//! window takes them (two, not RFC 8985's one: a receiver acknowledges
//! every second full-sized segment at once, RFC 5681 §4.2, but may hold a
//! lone one for its delayed ACK, Linux's 40 ms, and when the flight's one
//! ACK was lost the receiver has the flight and holds that lone segment),
//! else the last segment's worth of data (and the FIN) again; in a
//! recovery, the hole at `SND.UNA` again (its retransmission was lost, or
//! the ACKs were). The ACK it draws either shows everything arrived or
//! carries the SACK blocks that start (or go on with) a recovery, where
//! the RTO would have collapsed the window: on a path losing 1 % each way,
//! small windows lose a flight's last ACK, or a retransmission, often. One
//! probe until an ACK acknowledges new data; none after an RTO until an
//! ACK resets the backoff.
//!
//! Path MTU: an ICMP "packet too big" about a segment in flight (RFC 1191,
//! RFC 8201; the XDP program steers those about xtcp's flows to it) steps
//! the MSS down to the MTU it reports and sends what is in flight again,
//! without a congestion response; that MTU expires (`Config::pmtu_expires`,
//! 10 minutes as Linux's route exception), and the MSS goes back up to the
//! one agreed at the handshake, for the hop to refuse again where it is
//! still there. MTU black holes (RFC 4821 §3, as Linux's
//! `tcp_mtu_probing` detects them), where that ICMP is filtered or never
//! sent: two timeouts in a row while the
//! segment sent again is larger than the next smaller common MTU (9000,
//! 1500, 1280, 576) carries step the MSS down to that MTU's, the timeout
//! back at its base (six in a row where more than that MTU carries was
//! acknowledged at this MSS: the path took large segments, and an outage
//! is likelier); such a step does not climb back. The engine takes a route's MTU where the route has one
//! (set on it, or learned by the kernel's own connections).
//!
//! Congestion control is a [`CongestionControl`] trait object; it sees an
//! ACK's growth only while the congestion window is what limits sending
//! (RFC 7661's cwnd-limited test, as Linux applies it: in slow start while
//! the window is below twice the largest flight of the current window of
//! data, in congestion avoidance only where it stopped a send), so that a
//! sender held back by the peer's window or its source keeps a window it
//! has used. The initial slow start ends by HyStart++ (RFC 9406,
//! [`cc::HyStart`]) where the RTT that ACKs' timestamp echoes measure grows
//! by a threshold over a round, before the queue it fills overflows, as
//! Linux's CUBIC ends it by HyStart; [`Config::hystart`] turns it off.
//!
//! A closed (or too small) send window arms the persist timer: a one-byte probe
//! (or the bytes that fit), backed off like the RTO.
//!
//! # Not implemented
//!
//! RTTM on every ACK (RTT comes from one timed segment per round trip; timestamp
//! echoes are used only after a retransmission, where Karn's rule leaves no
//! timed segment), RACK's time-based loss
//! detection (TLP and a lost retransmission's detection are above; the
//! reordering allowance counts segments, not time), F-RTO and the undo of
//! an RTO, more than one recovery's undo at a time (a D-SACK that comes
//! after the next recovery began is not counted for the one before, as in
//! Linux), Linux's HyStart ACK-train test (HyStart++ judges by delay only),
//! ECN, urgent data, keep-alive, RFC 7661's reduction of
//! an unused window after an idle or application-limited period (the window
//! only stops growing).
//!
//! # Tests
//!
//! Unit tests sit with each piece; `tests.rs` holds scripted segment-by-segment
//! tests and deterministic simulations over [`sim`] (an always-on sweep of
//! seeded lossy runs and an `#[ignore]`d 5000-run long sweep); `linux.rs` runs
//! the core against the Linux kernel's TCP in a pair of network namespaces
//! (root only; skipped with a message otherwise).
//!
//! Not from `wire`, implemented here: the bounded sequence range set
//! ([`ranges`]), the keyed hash for ISNs ([`isn`]).

pub mod cc;
mod conn;
pub mod isn;
mod listener;
pub mod ranges;
mod recv;
pub mod rtt;
pub mod send;
pub mod sim;

#[cfg(test)]
mod linux;
#[cfg(test)]
mod tests;

pub use cc::{CongestionAlgorithm, CongestionControl, Cubic, NewReno};
pub use conn::{Connection, Segment, State, reset_for};
pub use isn::IsnGenerator;
pub use listener::{HalfOpenIndex, Listener, ListenerStats};
pub use recv::RecvWindow;
pub use send::{HeapFrames, MAX_PIECES, MAX_VECTORED, Piece, SendMemory};

pub use crate::wire::{SeqNumber, TcpFlags, TcpOptions, TcpRepr};

use std::net::SocketAddr;
use std::time::Duration;

/// Local and remote address of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FourTuple {
    /// Our address and port.
    pub local: SocketAddr,
    /// The peer's address and port.
    pub remote: SocketAddr,
}

/// Connection parameters. All durations are virtual: the caller's clock.
// `repr(C)`, the fields every segment reads first: they share one cache
// line (see the layout note on `Connection`).
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Config {
    /// MSS we announce (the largest payload we accept): MTU − IP − TCP header.
    pub mss: u16,
    /// One segment per send-buffer slot (the single-descriptor layout,
    /// where a segment's headers go into its slot's headroom): a slot holds
    /// `min(frame_len, send MSS)` bytes, so that every full segment is one
    /// whole slot, and no segment crosses a slot boundary.
    pub segment_per_frame: bool,
    /// Pace new data at 2 × (slow start) or 1.2 × (after) cwnd / SRTT instead
    /// of sending each window as a burst.
    pub pacing: bool,
    /// Nagle's algorithm (off by default: bulk transfer, small writes go out at once).
    pub nagle: bool,
    /// The longest a lone segment's ACK waits for a second one (RFC 9293:
    /// < 0.5 s); on a path whose RTT is shorter it waits the RTT, at least
    /// a millisecond. An ACK goes at once for every second full-size
    /// segment and for out-of-order data.
    pub delayed_ack: Duration,
    /// The most new data is paced at, bytes a second, whatever `pacing`
    /// says (Linux's `SO_MAX_PACING_RATE`, iperf3's `--fq-rate`): with
    /// `pacing` the smaller of the two rates, without it this one; 0: no
    /// cap. A sender paced at the cap that comes late (a busy host) sends
    /// what it allowed in up to the last 10 ms at once.
    pub max_pacing_rate: u64,
    /// Bytes of one send-buffer frame (page size). The send buffer is
    /// `send_frames` × `frame_len` bytes.
    pub frame_len: usize,
    /// Number of send-buffer frames.
    pub send_frames: usize,
    /// Send-buffer auto-tuning: the buffer starts with this many of its
    /// `send_frames` slots and doubles, up to all of them, while it holds
    /// less than twice the path's bandwidth-delay product (the rate its
    /// bytes are acknowledged at × the smallest RTT, measured over whole
    /// RTTs; the module doc, Memory). A sender on a short path so rotates
    /// through few frames, which stay in the CPU's caches, instead of
    /// touching the whole buffer's worth. Where the buffer bounds a sender
    /// whose ACKs come late (a peer slow to acknowledge: the smoothed RTT
    /// far above the smallest), it also doubles on trial, and keeps the
    /// size only if the delivery rate rises by a quarter
    /// ([`Stats::send_buffer_trials`]). `None`: all slots from the start.
    pub send_initial: Option<usize>,
    /// Receive buffer (the largest window we can ever advertise), bytes.
    pub recv_buffer: usize,
    /// Receive window policy.
    pub recv_window: RecvWindow,
    /// Round the sending MSS down to a whole number of frames when it holds
    /// at least one (`seg::clip_mss`: 8948 → 8192 with 4096-byte frames), so
    /// each full segment's payload is whole send-buffer frames.
    pub clip_mss_to_frames: bool,
    /// Offer window scaling (shift computed from `recv_buffer`).
    pub window_scaling: bool,
    /// Offer SACK.
    pub sack: bool,
    /// Offer timestamps.
    pub timestamps: bool,
    /// Congestion control.
    pub congestion: CongestionAlgorithm,
    /// The initial slow start ends by HyStart++ (RFC 9406) where the RTT
    /// grows, not only by a loss ([`cc::HyStart`]).
    pub hystart: bool,
    /// Initial congestion window, in segments (RFC 6928: 10).
    pub initial_cwnd_segments: usize,
    /// RTO before the first RTT sample (RFC 6298: 1 s).
    pub rto_initial: Duration,
    /// Lower bound of the RTO (RFC 6298 says 1 s; Linux uses 200 ms).
    pub rto_min: Duration,
    /// Upper bound of the RTO (RFC 6298: at least 60 s).
    pub rto_max: Duration,
    /// SYN / SYN-ACK transmissions before giving up.
    pub syn_retries: u32,
    /// An active open that has had no answer by then fails with
    /// [`ConnectionError::ConnectTimeout`] (None: only `syn_retries` bound it).
    pub connect_timeout: Option<Duration>,
    /// Consecutive RTO expiries (or unanswered window probes) before giving up.
    pub max_retries: u32,
    /// TIME-WAIT duration (see the module doc).
    pub time_wait: Duration,
    /// Largest number of discontiguous out-of-order ranges held (beyond it,
    /// out-of-order segments that would add a range are dropped).
    pub max_ooo_ranges: usize,
    /// Least time between two ACKs answering segments without data that are
    /// not acceptable (PAWS, outside the window, an ACK of what was never
    /// sent), challenge ACKs included (an in-window RST, a SYN, an ACK too
    /// old: RFC 5961): RFC 5961 §7's ACK throttling, per connection as
    /// Linux's `tcp_invalid_ratelimit` (500 ms too). Two ends that no
    /// longer agree on the sequence space (after a forged or corrupted
    /// segment was taken) would otherwise answer each other's ACKs for
    /// ever, as fast as the path carries them. A
    /// segment with data or a FIN is answered at once: it is no part of
    /// such a loop, and its sender may be waiting for that ACK.
    pub invalid_ack_interval: Duration,
    /// Linux's `TCP_USER_TIMEOUT` (iperf3's `--snd-timeout`): the
    /// connection fails with [`ConnectionError::UserTimeout`] once data it
    /// sent has gone unacknowledged this long (counted from when the
    /// retransmission timer that first expired was armed, as Linux counts
    /// from the first retransmitted segment's send), or its peer's window
    /// has stayed shut this long since the first zero-window probe; the
    /// timers are clamped so that this is seen on time. It then replaces
    /// `max_retries`, as in Linux. None: `max_retries` alone bounds it.
    pub user_timeout: Option<Duration>,
    /// How long an MTU that a hop reported ([`Connection::on_packet_too_big`])
    /// holds: then segments go at the MSS agreed at the handshake again,
    /// and where the path still takes less, its hop says so again (a round
    /// of segments sent again, no timeout). As Linux's route exception
    /// expires (`net.ipv4.route.mtu_expires`, 600 s) and its TCP then
    /// sizes segments by the route again; RFC 1191 §6.3 and RFC 8201 §4
    /// ask for no more often than every 5 minutes. A path that healed (a
    /// route changed back) takes the large segments again. None: never.
    /// Steps for a black hole ([`Stats::mss_black_hole_steps`]) do not
    /// expire.
    pub pmtu_expires: Option<Duration>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mss: 1460,
            frame_len: 4096,
            send_frames: 64,
            send_initial: None,
            recv_buffer: 256 * 1024,
            recv_window: RecvWindow::AutoTune { initial: 64 * 1024 },
            clip_mss_to_frames: true,
            segment_per_frame: false,
            window_scaling: true,
            sack: true,
            timestamps: true,
            congestion: CongestionAlgorithm::Cubic,
            hystart: true,
            initial_cwnd_segments: 10,
            pacing: false,
            max_pacing_rate: 0,
            nagle: false,
            rto_initial: Duration::from_secs(1),
            rto_min: Duration::from_millis(200),
            rto_max: Duration::from_secs(60),
            syn_retries: 6,
            connect_timeout: Some(Duration::from_secs(10)),
            max_retries: 15,
            delayed_ack: Duration::from_millis(40),
            time_wait: Duration::from_secs(1),
            max_ooo_ranges: 16,
            invalid_ack_interval: Duration::from_millis(500),
            user_timeout: None,
            pmtu_expires: Some(Duration::from_secs(600)),
        }
    }
}

impl Config {
    /// Send buffer size in bytes.
    pub fn send_buffer(&self) -> usize {
        self.frame_len * self.send_frames
    }

    /// Window-scale shift needed to advertise `recv_buffer` (RFC 7323: ≤ 14).
    pub fn window_shift(&self) -> u8 {
        let mut shift = 0u8;
        while shift < 14 && (self.recv_buffer >> shift) > 0xffff {
            shift += 1;
        }
        shift
    }
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Both FINs exchanged and acknowledged (after TIME-WAIT where it applies).
    Normal,
    /// The application called [`Connection::abort`] (an RST was sent).
    Aborted,
    /// An error ended it (also reported as [`Event::Error`]).
    Error(ConnectionError),
}

/// Errors that end a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    /// RST in answer to our SYN.
    #[error("connection refused")]
    Refused,
    /// The peer reset an established connection.
    #[error("connection reset by peer")]
    Reset,
    /// Retransmissions exhausted.
    #[error("connection timed out")]
    TimedOut,
    /// Our SYN went unanswered for [`Config::connect_timeout`].
    #[error("no answer to the connection request")]
    ConnectTimeout,
    /// Sent data went unacknowledged (or the peer's window stayed shut)
    /// for [`Config::user_timeout`].
    #[error(
        "no progress for the user timeout (--snd-timeout): sent data unacknowledged, or the peer's window shut"
    )]
    UserTimeout,
    /// The application reset it: no byte arrived for its receive timeout
    /// (`recv --rcv-timeout`) while the peer's stream was open.
    #[error(
        "no data for the receive timeout (--rcv-timeout): reset (the sender stopped sending, or died without a word)"
    )]
    ReceiveTimeout,
}

/// What a connection tells the application, through [`Connection::poll_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed.
    Connected,
    /// New in-order bytes (or the peer's FIN, then `read` returns 0) can be read.
    Readable,
    /// Send-buffer space was freed.
    Writable,
    /// A fatal error; a [`Event::Closed`] follows.
    Error(ConnectionError),
    /// The connection is closed; no more events follow.
    Closed(CloseReason),
}

/// Errors of the application-facing calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The connection is not (yet / any more) able to send.
    #[error("connection not writable in state {0:?}")]
    InvalidState(State),
    /// The application already called `close` (FIN queued).
    #[error("write after close")]
    Closed,
}

/// Counters, all monotonically increasing.
// `repr(C)`, the counters a data segment or its ACK moves first: they fill
// one cache line (see the layout note on `Connection`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Stats {
    /// Segments produced by `poll_transmit`.
    pub segments_sent: u64,
    /// Segments given to `handle_segment`.
    pub segments_received: u64,
    /// Payload bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Payload bytes received in order (delivered or buffered).
    pub bytes_received: u64,
    /// Of those, handed to the application straight from the received
    /// segment ([`Connection::handle_segment_with`]), never copied into the
    /// receive buffer.
    pub bytes_delivered_direct: u64,
    /// Pure ACKs sent.
    pub acks_sent: u64,
    /// ACKs whose sending was postponed by the delayed-ACK rule.
    pub delayed_acks: u64,
    /// RTT samples taken.
    pub rtt_samples: u64,
    /// Payload bytes retransmitted.
    pub bytes_retransmitted: u64,
    /// Segments retransmitted (any cause).
    pub retransmits: u64,
    /// Fast retransmits (entries into loss recovery).
    pub fast_retransmits: u64,
    /// Of those, started with fewer than three duplicate ACKs (RFC 5827).
    pub early_retransmits: u64,
    /// Of those, recoveries driven by SACK information.
    pub sack_recoveries: u64,
    /// Retransmissions sent from the SACK scoreboard (RFC 6675 NextSeg rule
    /// 1, lost holes, and rule 3, holes below SACKed data when nothing else
    /// may go).
    pub sack_retransmits: u64,
    /// Rescue retransmissions of the highest unSACKed segment (RFC 6675
    /// NextSeg rule 4; at most one per recovery).
    pub rescue_retransmits: u64,
    /// RTO expiries.
    pub rto_expirations: u64,
    /// Times the send MSS stepped down for an MTU black hole: timeouts in
    /// a row while segments larger than a smaller common MTU were sent
    /// (see `Connection::black_hole_step`).
    pub mss_black_hole_steps: u64,
    /// Times the send MSS stepped down for an ICMP "packet too big" about
    /// a segment in flight (`Connection::on_packet_too_big`).
    pub mss_path_mtu_steps: u64,
    /// Times the send MSS went back up to the one agreed at the handshake
    /// as an MTU a hop reported expired ([`Config::pmtu_expires`]).
    pub mss_path_mtu_raises: u64,
    /// Times the send MSS stepped down as the interface's own MTU fell
    /// during the connection (`Connection::on_link_mtu`).
    pub mss_link_mtu_steps: u64,
    /// The MTU the last "packet too big" taken reported (0: none; an old
    /// router's 0 as the plateau taken for it): below 576 (IPv4) or 1280
    /// (IPv6), the MTU in force is that floor instead.
    pub path_mtu_reported: u64,
    /// ICMP "packet too big" messages about this connection not taken:
    /// about a sequence number not in flight, or an MTU not below the one
    /// in force.
    pub icmp_too_big_ignored: u64,
    /// Tail loss probes sent (RFC 8985 §7): no ACK came for a probe
    /// timeout while data was in flight.
    pub loss_probes: u64,
    /// Retransmissions found lost in a SACK recovery: data first sent
    /// after one was SACKed, and it was not (each is then sent again).
    pub lost_retransmits: u64,
    /// ACKs that stopped where SACKed data began: the peer dropped data it
    /// had SACKed (RFC 2018 §8), and the scoreboard was cleared.
    pub sack_renegings: u64,
    /// Duplicate ACKs received.
    pub dup_acks: u64,
    /// Zero-window probes sent.
    pub window_probes: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub challenge_acks: u64,
    /// Segments dropped by PAWS (RFC 7323).
    pub paws_drops: u64,
    /// Segments outside the receive window, but for those in
    /// [`Stats::old_sequence`].
    pub out_of_window: u64,
    /// Segments whose data (or FIN) ends at or below RCV.NXT: received
    /// already and sent again, as after an ACK that was lost or late
    /// (Linux's drop reason `TCP_OLD_SEQUENCE`).
    pub old_sequence: u64,
    /// Segments received out of order and kept.
    pub ooo_segments: u64,
    /// Out-of-order segments dropped because the range set was full.
    pub ooo_dropped: u64,
    /// Duplicate (already received) payload bytes.
    pub duplicate_bytes: u64,
    /// ACKs sent that reported a duplicate in a D-SACK block (RFC 2883).
    pub dsacks_sent: u64,
    /// ACKs received that reported a duplicate in a D-SACK block.
    pub dsacks_received: u64,
    /// Recoveries undone: every retransmission of one was reported
    /// received twice (D-SACK), or the timestamp echo showed its holes
    /// filled by the originals: they were late, not lost.
    pub undone_recoveries: u64,
    /// The most reordering the path showed, segments (0: none beyond RFC
    /// 6675's three): while it holds, a hole counts as lost once more
    /// than this less one segments are SACKed above it.
    pub reordering: u64,
    /// RSTs sent.
    pub rst_sent: u64,
    /// RSTs received and accepted.
    pub rst_received: u64,
    /// Of `rtt_samples`, those from timestamp echoes after a retransmission
    /// (RTTM).
    pub ts_rtt_samples: u64,
    /// In-order segments that left less than a full segment of the window
    /// offered: the peer had sent all it was allowed and waited on this
    /// side (the receiver's view of `ss`' `rwnd_limited`).
    pub window_full: u64,
    /// Send-buffer sizes tried beyond the smallest-RTT estimate (the
    /// buffer bounded a sender whose ACKs came late; see
    /// [`Config::send_initial`]).
    pub send_buffer_trials: u64,
    /// Of those, kept: the delivery rate rose by a quarter.
    pub send_buffer_trials_kept: u64,
    /// Segments without data, not acceptable, left unanswered because an
    /// ACK answered one (or challenged one) less than
    /// [`Config::invalid_ack_interval`] before, and challenge ACKs not sent
    /// for the same reason (Linux's `TCPACKSkippedPAWS`,
    /// `TCPACKSkippedSeq` and `TCPACKSkippedChallenge` together).
    pub invalid_acks_skipped: u64,
}
