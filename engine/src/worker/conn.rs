//! A connection as a worker holds it ([`Slot`]): the TCP connection, its
//! header template, and what its bytes come from and go to — a bulk
//! [`Source`] and [`Sink`] (`xtcp send`/`recv`, see [`super::bulk`]) or an
//! application connection ([`AppConn`]) whose orders ([`AppOut`]) and
//! reports ([`AppIn`]) travel to and from an application in the control
//! thread (the iperf3 server and client).
//!
//! The worker's loop ([`super::thread`]) gives each connection its turn:
//! `Slot::app` or `Slot::app_conn` fill the send buffer and drain the
//! receive buffer; `take_direct` hands in-order payload to the sink
//! straight from the receive frame; `Slot::end` ends the stream when the
//! connection ends and reports the connection to the control thread.
//! Bulk connections and counting or sending streams allocate nothing per
//! packet. A relayed connection's bytes (iperf3's control connection, its
//! cookie: a few hundred bytes a test) go to the application as a `Vec` a
//! turn that brought some, and what it writes comes the same way: bounded
//! channels, not the data path.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::bulk::{FileSource, IoFailure, Produced, Sink, Source};
use super::msg::{AppIn, AppOut, ConnReport, Msg, Payload, TcpSample, filler_bytes};
use super::port::HeaderCache;
use super::registry::Key;
use super::sendmem::UmemFrames;
use crate::tcp::{CloseReason, Connection, RecvWindow, State};

/// A connection whose send buffer is UMEM frames.
pub(super) type Conn = Connection<UmemFrames>;

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
    pub(super) id: usize,
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
    pub(super) announce: Option<Sender<AppOut>>,
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
    /// [`AppMode::Send`]: the pacing rate, bits per second.
    pub(super) rate: Option<u64>,
    /// When the paced sender's test started (its order's `start`).
    rate_start: Option<Instant>,
    /// What [`AppMode::Send`] sends, and where in a repeated payload the
    /// next byte comes from.
    payload: Payload,
    pay_off: usize,
    /// [`Payload::File`]: its reader (made at the first send), and
    /// whether it reached the end of the file.
    file: Option<FileSource>,
    file_done: bool,
    /// The file (sent or received) failed: why.
    pub(super) io_error: Option<IoFailure>,
}

impl AppConn {
    /// A connection `id` taking orders from `orders`; `announce` is the
    /// sender handed to the application once an active open is established
    /// (`None`: accepted, announced at once by the caller).
    pub(super) fn new(
        id: usize,
        orders: Receiver<AppOut>,
        announce: Option<Sender<AppOut>>,
    ) -> AppConn {
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
            rate: None,
            rate_start: None,
            payload: Payload::Zeros,
            pay_off: 0,
            file: None,
            file_done: false,
            io_error: None,
        }
    }

    /// Hands received bytes (in at most two pieces) to the connection's
    /// `sink` (dropped, or a writer thread's with [`AppOut::CountInto`])
    /// and counts what it took; returns that count.
    fn take(&mut self, sink: &mut Sink, src: (&[u8], &[u8])) -> usize {
        let n = sink.consume(src);
        self.counted += n as u64;
        n
    }

    /// Bytes a paced sender may commit now: what the rate allows since its
    /// start (plus one [`PACE_CHUNK`] to start with) less what it
    /// committed, but nothing until a whole chunk is due, so that pacing
    /// does not cut the stream into small segments. Unpaced: `want`.
    fn pace_allowance(&mut self, now: Instant, want: usize) -> usize {
        let Some(rate) = self.rate else { return want };
        let start = *self.rate_start.get_or_insert(now);
        let nanos = now.saturating_duration_since(start).as_nanos();
        let due = (u128::from(rate) * nanos / 8_000_000_000) as u64 + PACE_CHUNK as u64;
        let room = due.saturating_sub(self.committed);
        if room < PACE_CHUNK as u64 {
            return 0;
        }
        want.min(usize::try_from(room).unwrap_or(usize::MAX))
    }

    /// Reports the bytes and retransmissions since the last count.
    fn report_count(&mut self, c: &Conn, out: &Sender<Msg>) {
        let retrans = c.stats().retransmits;
        let _ = out.send(Msg::app(AppIn::Count {
            id: self.id,
            bytes: std::mem::take(&mut self.counted),
            retransmits: retrans - self.retransmits,
            rtt: c.srtt(),
            tcp: TcpSample {
                cwnd: c.cwnd() as u64,
                snd_wnd: c.send_window() as u64,
                rttvar: c.rttvar(),
                mss: u32::try_from(c.send_mss()).unwrap_or(u32::MAX),
                pmtu: u32::try_from(c.packet_mtu()).unwrap_or(u32::MAX),
                congestion: c.congestion_name(),
            },
        }));
        self.retransmits = retrans;
    }

    /// At the connection's end: the last count, if the stream still counts
    /// (not once stopped: [`AppIn::Stopped`] said no count follows).
    pub(super) fn final_count(&mut self, c: &Conn, out: &Sender<Msg>) {
        if matches!(
            self.mode,
            AppMode::Count | AppMode::Send | AppMode::Draining
        ) {
            self.report_count(c, out);
        }
    }

    /// Reports the last count, then that the stream stopped.
    fn stopped(&mut self, c: &Conn, out: &Sender<Msg>) {
        self.report_count(c, out);
        let _ = out.send(Msg::app(AppIn::Stopped { id: self.id }));
    }
}

/// A paced sender commits bytes in pieces of at least this many.
pub(super) const PACE_CHUNK: usize = 16 * 1024;

/// Counts are reported at least this often while data moves.
const COUNT_INTERVAL: Duration = Duration::from_millis(5);

/// A connection with its application state (moves between workers whole).
#[derive(Debug)]
pub struct Slot {
    pub(super) conn: Conn,
    /// The connection's header template.
    pub(super) hdr: HeaderCache,
    pub(super) key: Key,
    pub(super) mac: [u8; 6],
    pub(super) id: usize,
    pub(super) source: Source,
    pub(super) sink: Sink,
    pub(super) src_done: bool,
    pub(super) sink_done: bool,
    pub(super) written: u64,
    pub(super) read: u64,
    pub(super) source_error: Option<IoFailure>,
    pub(super) established: Option<Instant>,
    /// An active open's first SYN (`None` for a passive one: its
    /// handshake was the listener's).
    pub(super) opened: Option<Instant>,
    pub(super) reported: bool,
    /// Stop: reset at this time if not closed by then.
    pub(super) deadline: Option<Instant>,
    /// A bulk sender's stream sent and acknowledged, its FIN too: when it
    /// entered FIN-WAIT-2 (the transfer's end), to wait `grace` from for
    /// the peer's FIN.
    pub(super) fin_acked: Option<Instant>,
    /// It was let go after `grace` in FIN-WAIT-2, the peer's direction
    /// still open.
    pub(super) peer_open: bool,
    /// The worker's shares it applied last (their epoch).
    pub(super) shares_epoch: u64,
    /// It received little in the worker's last sweep of the shares, and
    /// never had to be waited on: a small receive window is all it gets
    /// (see `Worker::sweep_shares`).
    pub(super) light: bool,
    /// Its `bytes_received` and `window_full` at the last sweep (`None`:
    /// none yet since it came to this worker).
    pub(super) swept: Option<(u64, u64)>,
    /// An application connection (instead of source and sink).
    pub(super) appconn: Option<Box<AppConn>>,
    /// Bytes its stream may hold: more, and it is reset
    /// ([`super::EngineConfig::stream_limit`]).
    pub(super) stream_limit: Option<u64>,
    /// A bulk receiver's `bytes_received` when it last changed, and when
    /// ([`super::EngineConfig::rcv_timeout`] counts from there).
    pub(super) rx_seen: Option<(u64, Instant)>,
    /// The interface MTU it followed last (`Connection::on_link_mtu`; 0:
    /// the one at start).
    pub(super) link_mtu: usize,
}

impl Slot {
    pub(super) fn new(
        conn: Conn,
        key: Key,
        mac: [u8; 6],
        id: usize,
        source: Source,
        sink: Sink,
    ) -> Slot {
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
            opened: None,
            reported: false,
            deadline: None,
            fin_acked: None,
            peer_open: false,
            shares_epoch: 0,
            light: false,
            swept: None,
            appconn: None,
            stream_limit: None,
            rx_seen: None,
            link_mtu: 0,
        }
    }

    /// A bulk receiver (`recv`'s: no source, no application) whose peer's
    /// stream is open: what [`super::EngineConfig::rcv_timeout`] applies
    /// to.
    pub(super) fn awaits_stream(&self) -> bool {
        self.appconn.is_none()
            && matches!(self.source, Source::Empty)
            && self.conn.state() == State::Established
    }

    /// With `timeout` ([`super::EngineConfig::rcv_timeout`]): when this
    /// connection is reset unless a byte comes first.
    pub(super) fn rcv_deadline(&self, timeout: Option<Duration>) -> Option<Instant> {
        let t = timeout.filter(|_| self.awaits_stream())?;
        self.rx_seen.map(|(_, at)| at + t)
    }

    /// A bulk sender whose stream and FIN are acknowledged (FIN-WAIT-2):
    /// its transfer is whole, only the peer's FIN is awaited.
    pub(super) fn sent_whole(&self) -> bool {
        self.appconn.is_none() && self.src_done && self.conn.state() == State::FinWait2
    }

    /// Lets a connection that [`sent_whole`](Self::sent_whole) go without
    /// the peer's FIN (no reset: there is nothing for one to say).
    pub(super) fn let_go(&mut self) {
        self.peer_open = true;
        self.conn.let_go();
    }

    /// True if its next turn has work to do without anything arriving: an
    /// application connection (orders come over a channel), a source that
    /// can go on into free send-buffer space (a pipe or a file that had
    /// nothing yet, or frames that were short), a sink that left bytes in
    /// the receive buffer or has not taken the end of the stream yet.
    pub(super) fn wants_turn(&self) -> bool {
        if self.appconn.is_some() {
            return true;
        }
        let c = &self.conn;
        let open = matches!(c.state(), State::Established | State::CloseWait);
        let sender = !matches!(self.source, Source::Empty);
        (open && sender && !self.src_done && self.deadline.is_none() && c.send_capacity() > 0)
            || (!self.sink_done && (c.readable() > 0 || c.read_closed()))
    }

    /// An application connection's turn: apply the application's orders,
    /// write what it queued, send / count / relay as its mode says.
    pub(super) fn app_conn(&mut self, now: Instant, a: &mut AppConn, out: &Sender<Msg>) {
        let c = &mut self.conn;
        while let Ok(o) = a.orders.try_recv() {
            match o {
                AppOut::Write(b) => a.pending.extend_from_slice(&b),
                AppOut::Relay => {
                    a.mode = AppMode::Relay;
                }
                AppOut::Count => a.mode = AppMode::Count,
                AppOut::CountInto(sink) => {
                    a.mode = AppMode::Count;
                    self.sink = sink;
                }
                AppOut::Send {
                    limit,
                    rate,
                    payload,
                    start,
                } => {
                    a.mode = AppMode::Send;
                    a.send_left = limit.unwrap_or(u64::MAX);
                    a.rate = rate.filter(|&r| r > 0);
                    a.rate_start = Some(start.min(now));
                    a.payload = payload;
                }
                AppOut::Budget(limit) => a.send_left = limit.unwrap_or(u64::MAX),
                AppOut::Congestion(algo) => c.set_congestion(algo),
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
                AppOut::Marks(m) => self.hdr.set_marks(m),
                AppOut::MaxPacingRate(r) => c.set_max_pacing_rate(r),
                AppOut::Close => a.close = true,
                AppOut::Abort => {
                    a.pending.clear();
                    c.abort(now);
                }
            }
        }
        if self.sink.broken() && a.io_error.is_none() {
            // The writer thread failed (it returns why).
            a.io_error = Some(std::io::ErrorKind::BrokenPipe.into());
        }
        if a.io_error.is_some() && matches!(c.state(), State::Established | State::CloseWait) {
            // The file failed (read or write): reset, the report says why.
            c.abort(now);
        }
        let open = matches!(c.state(), State::Established | State::CloseWait);
        if open && !a.pending.is_empty() {
            let n = c.write(&a.pending).unwrap_or(0);
            a.pending.drain(..n);
            self.written += n as u64;
        }
        if open && a.mode == AppMode::Send && a.pending.is_empty() && !a.close {
            a.send_base.get_or_insert(self.written);
            if a.send_left > 0 {
                let want = usize::try_from(a.send_left).unwrap_or(usize::MAX);
                let want = a.pace_allowance(now, want);
                if let Payload::Filler(p) = &a.payload {
                    // Its period, now that the slots are sized (once).
                    let bytes = filler_bytes(p, c.send_slot_len(), c.send_limit());
                    a.payload = Payload::Repeat(bytes);
                }
                let n = match &a.payload {
                    // Zeros cost nothing once a slot holds them.
                    Payload::Zeros if want > 0 => c.fill_zeros(want).unwrap_or(0),
                    Payload::Zeros => 0,
                    // The file's bytes, read straight into the frames, up
                    // to 16 slots a call and never waiting for the disk
                    // (`xtcp send --file`'s reader); at its end the stream
                    // sends nothing more.
                    Payload::File(f) => {
                        let src = a.file.get_or_insert_with(|| FileSource::new(f.clone()));
                        if a.file_done || a.io_error.is_some() {
                            0
                        } else {
                            let (n, st) = fill_from_file(c, src, want);
                            match st {
                                Produced::More => {}
                                Produced::Done => a.file_done = true,
                                Produced::Failed(e) => a.io_error = Some(e),
                            }
                            n
                        }
                    }
                    // The pattern, as iperf3 writes its buffer: copied
                    // into a slot only where the slot does not hold those
                    // bytes already from an earlier lap.
                    Payload::Repeat(p) if !p.is_empty() => {
                        let n = c.write_repeat(p, a.pay_off, want).unwrap_or(0);
                        a.pay_off = (a.pay_off + n) % p.len();
                        n
                    }
                    Payload::Repeat(_) | Payload::Filler(_) => 0,
                };
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
                AppMode::Count | AppMode::Draining => {
                    // Bytes waiting keep a drain going, taken or not.
                    if let Some((seen, _)) = a.drain.as_mut() {
                        *seen = now;
                    }
                    a.take(&mut self.sink, (x, y))
                }
                // Dropped uncounted.
                AppMode::Stopped => avail,
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
                    let _ = out.send(Msg::app(AppIn::Data { id: a.id, bytes: v }));
                    take
                }
                // A sender discards what it receives.
                AppMode::Send => avail,
            };
            if n == 0 {
                // The sink's writer lags: the bytes wait in the buffer.
                break;
            }
            c.consume(now, n);
            self.read += n as u64;
        }
        self.sink.flush_stale(now);
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
                // The stream ends: what arrived before counts, also what a
                // lagging writer left in the buffer (waiting for it, once).
                if !self.sink_done {
                    let n = self.sink.close(c.read_slices());
                    a.counted += n as u64;
                    c.consume(now, n);
                    self.read += n as u64;
                    self.sink_done = true;
                }
                a.mode = AppMode::Stopped;
                a.stopped(c, out);
            }
        }
        if c.read_closed() && c.readable() == 0 && !a.eof_sent {
            a.eof_sent = true;
            let _ = out.send(Msg::app(AppIn::Eof { id: a.id }));
        }
    }

    /// The application's turn: fill the send buffer, drain the receive
    /// buffer, close when the source is done (sender) or when the peer's
    /// stream ended and the sink has it all (receiver).
    pub(super) fn app(&mut self, now: Instant) {
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
                    fill_from_file(c, f, usize::MAX)
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
        self.sink.flush_stale(now);
        if self.sink.broken() {
            // The output failed (the writer thread says how): stop the
            // sender rather than leave it facing a closed window.
            c.abort(now);
            return;
        }
        // A stream that failed its check (the pattern, or more bytes than
        // it may hold): reset at once, so that its sender learns it failed
        // and nothing more is written.
        let failed = matches!(
            self.sink,
            Sink::Verify {
                mismatch: Some(_),
                ..
            }
        ) || self.stream_limit.is_some_and(|l| self.read > l);
        if failed && !matches!(c.state(), State::Closed) {
            c.abort(now);
            return;
        }
        if c.read_closed() && c.readable() == 0 && !self.sink_done {
            if self.sink.finish() {
                self.sink_done = true;
                if !sender && self.deadline.is_none() {
                    c.close(now);
                }
            } else if self.sink.broken() {
                // The writer failed after it had every byte: the stream
                // cannot end well; its sender learns so.
                c.abort(now);
            }
        }
    }

    /// An application's connection ended: its sink's stream ends with
    /// what the sink took (a writer thread flushes and returns), if it has
    /// not ended already when the stream stopped. What the receive buffer
    /// holds is the application's (a control connection's last bytes).
    pub(super) fn end_app_sink(&mut self) {
        if !self.sink_done {
            self.sink.close((&[], &[]));
            self.sink_done = true;
        }
    }

    /// The connection ended (`reason`), or its sender is done: the sink's
    /// stream ends, and the connection is reported (once) to the control
    /// thread.
    pub(super) fn end(
        &mut self,
        now: Instant,
        reason: CloseReason,
        queue: u32,
        frame_bytes: usize,
        out: &Sender<Msg>,
    ) {
        if self.appconn.is_none() {
            self.close_sink(now);
        } else {
            self.end_app_sink();
        }
        if self.reported {
            return;
        }
        self.reported = true;
        let r = ConnReport {
            id: self.id,
            queue,
            tuple: self.conn.tuple(),
            reason,
            bytes_sent: self.written,
            bytes_acked: self.conn.bytes_acked(),
            bytes_received: self.read,
            stats: *self.conn.stats(),
            mismatch: match self.sink {
                Sink::Verify { mismatch, .. } => mismatch,
                _ => None,
            },
            source_error: self
                .source_error
                .or(self.appconn.as_ref().and_then(|a| a.io_error)),
            established: self.established,
            opened: self.opened,
            packet_mtu: self.conn.packet_mtu(),
            // A bulk sender's transfer ended when its FIN was
            // acknowledged: the wait for the peer's is not
            // part of it.
            ended: self.fin_acked.unwrap_or(now).min(now),
            peer_open: self.peer_open,
            congestion: self.conn.congestion_name(),
            pacing_rate: self.appconn.as_ref().and_then(|a| a.rate),
            send_bytes_touched: self.conn.send_bytes_touched(),
            send_mss: self.conn.send_mss(),
            send_mss_clipped: self.conn.send_mss_clipped(),
            send_buffer: self.conn.send_limit() * frame_bytes,
        };
        let _ = out.send(Msg::Closed(Box::new(r)));
    }

    /// An application's connection closed (`reason`): a stream that ends
    /// while it counts (it failed, or the peer closed it) reports what it
    /// moved and retransmitted last, and its TCP state then, first.
    pub(super) fn app_closed(&mut self, reason: CloseReason, out: &Sender<Msg>) {
        if let Some(a) = self.appconn.as_mut() {
            a.final_count(&self.conn, out);
            let _ = out.send(Msg::app(AppIn::Closed { id: a.id, reason }));
        }
    }

    /// The connection ended, or its sender is done: the sink takes the rest
    /// of the receive buffer (every byte we acknowledged) and the stream is
    /// ended, waiting for the writer if it must (once per connection, off
    /// the per-packet path).
    pub(super) fn close_sink(&mut self, now: Instant) {
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

/// Reads `file` straight into the free send-buffer space of `c`, at most
/// `want` bytes, up to 16 slots a vectored read, until the space, the bytes
/// wanted or what the page cache holds run out (never waiting for the
/// disk: see [`FileSource`]). Returns the bytes read and what the file
/// said last.
fn fill_from_file(c: &mut Conn, file: &mut FileSource, want: usize) -> (usize, Produced) {
    let mut total = 0;
    while total < want {
        let room = want - total;
        let mut st = Produced::More;
        let n = c
            .fill_vectored(|bufs| {
                let mut left = room;
                for b in bufs.iter_mut() {
                    let k = b.len().min(left);
                    *b = &mut std::mem::take(b)[..k];
                    left -= k;
                }
                let (n, s) = file.produce_vectored(bufs);
                st = s;
                n
            })
            .unwrap_or(0);
        total += n;
        match st {
            Produced::More if n > 0 => {}
            st => return (total, st),
        }
    }
    (total, Produced::More)
}

/// In-order payload offered straight from the receive frame
/// ([`Connection::handle_segment_with`]): what the connection's sink or
/// application takes now, as its turn would from the receive buffer
/// (`Slot::app`, `Slot::app_conn`). Bytes an application wants relayed to
/// its thread (control connections, cookies) stay in the buffer.
pub(super) fn take_direct(
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
                if let Some((seen, _)) = a.drain.as_mut() {
                    *seen = now;
                }
                a.take(sink, (bytes, &[]))
            }
            // Stopped: dropped uncounted; a sender discards what it receives.
            AppMode::Stopped | AppMode::Send => bytes.len(),
            AppMode::Relay | AppMode::Cookie => 0,
        },
    };
    *read += n as u64;
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A paced sender may commit what the rate allows since its first
    /// byte, in pieces of at least `PACE_CHUNK`: over a second, the rate.
    #[test]
    fn pacing_allows_the_rate_in_whole_chunks() {
        let (_tx, rx) = crossbeam_channel::bounded(1);
        let mut a = AppConn::new(1, rx, None);
        let t0 = Instant::now();
        assert_eq!(a.pace_allowance(t0, 1 << 30), 1 << 30, "unpaced");
        a.rate = Some(8_000_000); // 1 MB/s
        let chunk = PACE_CHUNK;
        assert_eq!(a.pace_allowance(t0, 1 << 30), chunk, "one chunk to start");
        assert_eq!(a.pace_allowance(t0, 100), 100, "at most what is wanted");
        a.committed = chunk as u64;
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(a.pace_allowance(at(1), 1 << 30), 0, "less than a chunk due");
        assert_eq!(a.pace_allowance(at(17), 1 << 30), 17_000, "17 ms at 1 MB/s");
        // Committing all it is allowed, turn after turn: one second sends
        // the rate, plus the first chunk.
        let mut t = 0;
        while t <= 1000 {
            a.committed += a.pace_allowance(at(t), 1 << 30) as u64;
            t += 1;
        }
        let sent = a.committed - chunk as u64;
        assert!(
            (1_000_000 - chunk as u64..=1_000_000).contains(&sent),
            "{sent} bytes in 1 s at 1 MB/s"
        );
    }
}
