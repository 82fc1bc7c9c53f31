//! What workers and the control thread tell each other: counters and
//! connection reports ([`Msg`]), and the messages of an application
//! connection ([`AppIn`] to the application, [`AppOut`] from it).

use std::time::{Duration, Instant};

use std::sync::Arc;

use crossbeam_channel::Sender;

use super::port::PortCounters;
use crate::tcp::isn::XorShift;
use crate::tcp::{CloseReason, CongestionAlgorithm, FourTuple, ListenerStats, Stats};
use crate::xsk::XskStats;

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
    /// The listener's counters (listen mode): SYNs taken and dropped, the
    /// most half-open connections held at once.
    pub listener: ListenerStats,
    /// Loop turns.
    pub turns: u64,
    /// Sleeps in `poll()`.
    pub sleeps: u64,
    /// Turns that found the TX ring or the frame pool full.
    pub tx_full_turns: u64,
    /// The most descriptors waiting on the TX ring at a kick (what one
    /// turn queued, plus what the kernel had not taken yet): the queue
    /// that an ACK read after the kick waited behind.
    pub tx_queued_max: u64,
    /// Payload bytes the receive windows of this worker's connections may
    /// offer in sum: full segments that fit the part of its RX ring set
    /// aside for data (and of the driver's queue, where that is smaller).
    pub rx_window_budget: u64,
    /// Light connections (receiving little: their receive window a few
    /// segments) whose peer used up that window, and that got their share
    /// back at once.
    pub light_promoted: u64,
    /// Connections that became established here.
    pub connections: u64,
    /// Connections this worker holds now, in any state (TIME-WAIT
    /// included), when the counters were taken.
    pub live: u64,
    /// Segments for no connection here (answered with a reset), and ICMP
    /// "packet too big" about none (not answered).
    pub no_connection: u64,
    /// ICMP "packet too big" messages about this worker's flows (RFC 1191,
    /// RFC 8201) that came in on its queue: taken to their connection here,
    /// or forwarded to its worker ...
    pub too_big: u64,
    /// ... of them, forwarded (also counted in `forwarded`).
    pub too_big_forwarded: u64,
    /// "Packet too big" messages its connections did not take: about a
    /// sequence number not in flight, or an MTU not below the one in force
    /// (each where the connection was when the message came).
    pub too_big_ignored: u64,
    /// Segments of a connection that another worker owns (RSS delivers the
    /// flow to our queue) or that is on its way here, dropped: there was
    /// no room to hold them, or the connection did not come within 50 ms.
    pub misplaced: u64,
    /// Segments of a connection on its way to this worker (asked for when
    /// its data came in on our queue, or handed over and in transit), held
    /// (the payload copied) and given to it when it came.
    pub held: u64,
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
    /// Connections refused with a reset: beyond `max_conns`, or after the
    /// first where the listener takes one stream (`recv` without
    /// `--keep-listening`).
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
    /// The peers' segments TCP did not take: PAWS failures
    /// ([`Stats::paws_drops`](crate::tcp::Stats::paws_drops)) ...
    pub tcp_paws_drops: u64,
    /// ... segments outside the receive window ...
    pub tcp_out_of_window: u64,
    /// ... and segments received already, sent again
    /// ([`Stats::old_sequence`](crate::tcp::Stats::old_sequence)).
    pub tcp_old_sequence: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub tcp_challenge_acks: u64,
    /// Unacceptable segments without data or a FIN left unanswered, and challenge
    /// ACKs not sent (RFC 5961 §7).
    pub tcp_unanswered: u64,
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
    /// Of those, what the peer acknowledged (less than written where the
    /// connection ended before the rest was).
    pub bytes_acked: u64,
    /// Payload bytes the application read.
    pub bytes_received: u64,
    /// TCP counters.
    pub stats: Stats,
    /// `--verify`: first stream offset that differed.
    pub mismatch: Option<u64>,
    /// Reading the source failed.
    pub source_error: Option<super::bulk::IoFailure>,
    /// When it was established (None: never).
    pub established: Option<Instant>,
    /// When its first SYN went, for an active open (None: a passive one).
    pub opened: Option<Instant>,
    /// The largest IP packet its segments made at the end
    /// ([`Connection::packet_mtu`](crate::tcp::Connection::packet_mtu)).
    pub packet_mtu: usize,
    /// When it ended (both FINs done, or the error; a bulk sender's when
    /// its FIN was acknowledged).
    pub ended: Instant,
    /// A bulk sender let go in FIN-WAIT-2 after the grace period: its
    /// stream was whole and acknowledged, the peer had not closed its
    /// direction.
    pub peer_open: bool,
    /// The congestion control it ran at the end (`cubic`, `reno`).
    pub congestion: &'static str,
    /// The rate its application sender was paced to, bits per second
    /// ([`AppOut::Send`]'s `rate`; None: not paced).
    pub pacing_rate: Option<u64>,
    /// Send-buffer bytes written one by one (copied or zeroed): a sender
    /// of zeros into zeroed frames adds nothing after the first lap
    /// ([`crate::tcp::Connection::send_bytes_touched`]).
    pub send_bytes_touched: u64,
    /// The MSS it sent with (payload bytes of a full segment).
    pub send_mss: usize,
    /// That MSS was rounded down to whole frames (`--mss-clip on`): below
    /// what its packets could carry.
    pub send_mss_clipped: bool,
    /// Its send buffer's limit at the end, bytes of UMEM frames (slots ×
    /// frame size): what auto-tuning grew it to within the worker's share
    /// ([`crate::tcp::Config::send_initial`]), or the fixed `--sndbuf`.
    pub send_buffer: usize,
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
    /// For the application of [`crate::worker::SinkKind::App`], and when
    /// the worker said it ([`Msg::app`]): the application's clock for it,
    /// however late the control thread gets to it.
    App(Instant, AppIn),
}

impl Msg {
    /// `msg` for the application, stamped now: after what it says happened
    /// (a clock read afresh, not the turn's, which a worker kept off its
    /// core between reading the clock and reading the ring took before the
    /// packet came).
    pub fn app(msg: AppIn) -> Msg {
        Msg::App(Instant::now(), msg)
    }
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
        /// Its congestion control now (`cubic`, `reno`; the engine's
        /// default until [`AppOut::Congestion`] changes it).
        congestion: &'static str,
        /// The most payload it sends per segment, as the handshake settled
        /// it (what a kernel socket's `TCP_MAXSEG` says).
        mss: u32,
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
        /// The connection's TCP state now (iperf3's `tcp_info` fields).
        tcp: TcpSample,
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

/// What an application sender sends ([`AppOut::Send`]).
#[derive(Debug, Clone, Default)]
pub enum Payload {
    /// Zeros: the send buffer's frames hold them after the first lap, so
    /// nothing is written per byte (iperf3's `-Z`).
    #[default]
    Zeros,
    /// These bytes over and over (iperf3's buffer without `-Z`): copied
    /// into a frame the first time; a frame that comes round again holding
    /// the same bytes (the ring's lap a multiple of their length) is sent
    /// as it is.
    Repeat(Arc<[u8]>),
    /// Bytes whose content does not matter to the peer (iperf3's random
    /// buffer): the first `period` of them over and over, where `period`
    /// is a power-of-two number of send-buffer slots, as many as these
    /// bytes fill and no more than the buffer's limit when sending begins
    /// ([`filler_period`]; one slot, the bytes repeated to fill it, if they
    /// are fewer). The limit is a power-of-two number of slots too (its
    /// auto-tuning starts it at 256 KiB of frames and doubles it; a fixed
    /// `--sndbuf` of a power of two), so its laps are whole
    /// periods and a slot that comes round holds what it must send again,
    /// whatever the slot's length (with [`Payload::Repeat`] of iperf3's
    /// 128 KiB, a lap of 1,448-byte slots never is: every byte was copied).
    /// A limit that is not (a share of the worker's frames among many
    /// connections) has the slots copied into as they come round.
    Filler(Arc<[u8]>),
    /// This file's bytes from its start (iperf3's `-F`), read straight into
    /// the frames by the bulk sender's reader
    /// ([`FileSource`](super::bulk::FileSource): `preadv2(RWF_NOWAIT)`, the
    /// page cache read ahead, the worker never waiting for a disk); a
    /// stream that reaches the end of the file sends nothing more.
    File(Arc<std::fs::File>),
}

/// The period [`Payload::Filler`] repeats with: the largest power-of-two
/// number of `slot_len`-byte slots within `len` bytes and within `limit`
/// slots, and at least one.
pub fn filler_period(len: usize, slot_len: usize, limit: usize) -> usize {
    let slot_len = slot_len.max(1);
    let slots = (len / slot_len).min(limit).max(1);
    (1 << slots.ilog2()) * slot_len
}

/// `len` pseudo-random bytes (the TCP core's [`XorShift`], seeded afresh
/// each call) for [`Payload::Filler`]: what iperf3 fills its buffer with,
/// so that a path that compresses gains nothing from them (it would from
/// zeros).
pub fn random_filler(len: usize) -> Arc<[u8]> {
    let mut rng = XorShift::new(super::engine::random_u64());
    let mut bytes = vec![0u8; len];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes()[..chunk.len()]);
    }
    bytes.into()
}

/// `len` bytes of iperf3's `--repeating-payload` pattern ("0123456789"
/// over and over, from '0' at the start of each block), for
/// [`Payload::Filler`].
pub fn repeating_pattern(len: usize) -> Arc<[u8]> {
    (0..len).map(|i| b'0' + (i % 10) as u8).collect()
}

/// [`Payload::Filler`]'s bytes for a send buffer of `limit` slots of
/// `slot_len` bytes: the first [`filler_period`] of them, repeated to fill
/// it if they are fewer.
pub(crate) fn filler_bytes(bytes: &[u8], slot_len: usize, limit: usize) -> Arc<[u8]> {
    let period = filler_period(bytes.len(), slot_len, limit);
    bytes.iter().cycle().take(period).copied().collect()
}

/// A connection's TCP state at a count, as iperf3 reads it from the
/// kernel's `tcp_info` each interval (`snd_cwnd`, `snd_wnd`, `rttvar`,
/// the MSS, the congestion control): here from xtcp's own TCP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpSample {
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// The peer's receive window (scaled), bytes.
    pub snd_wnd: u64,
    /// RTT variation (RFC 6298 RTTVAR), None before the first RTT sample.
    pub rttvar: Option<Duration>,
    /// MSS the connection sends with, bytes.
    pub mss: u32,
    /// The largest IP packet its segments make, bytes: the path MTU it
    /// keeps to (after a "packet too big", the MTU reported).
    pub pmtu: u32,
    /// The congestion control algorithm the connection runs.
    pub congestion: &'static str,
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
    /// Count received bytes and hand them to this sink (a writer thread's,
    /// [`spawn_writer`](super::bulk::spawn_writer): iperf3's `-F` on the
    /// receiving side), as much as it takes each turn: a writer that lags
    /// holds the bytes in TCP's receive buffer, and the worker never waits
    /// for a disk. The sink's stream ends when the connection stops or
    /// closes. A writer that failed resets the connection (the writer's
    /// thread returns why).
    CountInto(super::bulk::Sink),
    /// Send `payload` until [`AppOut::Stop`] (or `limit` bytes), counting
    /// it.
    Send {
        /// Most bytes to send (iperf3's `-n`/`-k` split over the streams).
        limit: Option<u64>,
        /// Pace to this many bits per second, averaged from `start` on
        /// (iperf3's `-b`, per stream); None: as fast as TCP goes.
        rate: Option<u64>,
        /// When the test started for the pacer: the application's clock
        /// when it gave the order, so that the time the order took to
        /// arrive is caught up.
        start: Instant,
        /// What to send.
        payload: Payload,
    },
    /// From now on send at most this many more bytes (None: no limit): a
    /// sending stream's `-n`/`-k` share, given when `-O`'s omitted
    /// seconds end (iperf3 counts the budgets after them).
    Budget(Option<u64>),
    /// Run this congestion control from now on (before data flows: iperf3's
    /// `-C`).
    Congestion(CongestionAlgorithm),
    /// Stop sending and counting; report the last count and [`AppIn::Stopped`].
    Stop,
    /// Never offer a receive window above this many bytes (iperf3's `-w`;
    /// clamped to the receive buffer).
    Window(usize),
    /// Pace what this connection sends at this many bytes a second at
    /// most (iperf3's `--fq-rate`, a socket's `SO_MAX_PACING_RATE`).
    MaxPacingRate(u64),
    /// Mark this connection's packets from now on (iperf3's `-S`/`--dscp`
    /// and `-L`, which iperf3 sets on a data connection once it is open).
    Marks(super::port::IpMarks),
    /// Close (FIN) once everything written so far is queued.
    Close,
    /// Reset.
    Abort,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filler_period_is_a_power_of_two_number_of_slots() {
        // iperf3's 128 KiB block: in 4 KiB slots all of it, in slots of a
        // 1,448-byte segment the 64 that fit (90 would).
        assert_eq!(filler_period(131_072, 4096, 64), 131_072);
        assert_eq!(filler_period(131_072, 1448, 64), 64 * 1448);
        assert_eq!(filler_period(3 * 4096, 4096, 64), 2 * 4096);
        // No more than the buffer's limit: a lap is whole periods.
        assert_eq!(filler_period(200 << 10, 1448, 64), 64 * 1448);
        assert_eq!(filler_period(131_072, 4096, 16), 16 * 4096);
        assert_eq!(filler_period(131_072, 4096, 24), 16 * 4096);
        // Fewer bytes than a slot: one slot of them, repeated.
        assert_eq!(filler_period(1000, 1448, 64), 1448);
        let b: Vec<u8> = (0..100u8).collect();
        let f = filler_bytes(&b, 256, 64);
        assert_eq!(f.len(), 256);
        assert!(f.iter().enumerate().all(|(i, &x)| x == (i % 100) as u8));
        assert_eq!(&filler_bytes(&[7; 10_000], 4096, 64)[..], &[7; 8192][..]);
        // Random: no byte value takes more than twice its share, and two
        // calls differ.
        let r = random_filler(1 << 16);
        let mut count = [0usize; 256];
        r.iter().for_each(|&b| count[usize::from(b)] += 1);
        assert!(count.iter().all(|&c| c < 2 * 256), "{count:?}");
        assert_ne!(r, random_filler(1 << 16));
        assert_eq!(&repeating_pattern(12)[..], b"012345678901");
    }
}
