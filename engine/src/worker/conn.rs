//! A connection as a worker holds it ([`Slot`]): the TCP connection, its
//! header template, and what its bytes come from and go to — a bulk
//! [`Source`] and [`Sink`] (`xtcp send`/`recv`, see [`super::bulk`]) or an
//! application connection ([`AppConn`]) whose orders ([`AppOut`]) and
//! reports ([`AppIn`]) travel to and from an application in the control
//! thread (the iperf3 server and client).
//!
//! The worker's loop ([`super::thread`]) gives each connection its turn:
//! [`Slot::app`] or [`Slot::app_conn`] fill the send buffer and drain the
//! receive buffer; [`take_direct`] hands in-order payload to the sink
//! straight from the receive frame; [`Slot::close_sink`] ends the stream
//! when the connection ends. None of it allocates per packet: application
//! data moves in chunks over bounded channels.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::bulk::{Produced, Sink, Source};
use super::msg::{AppIn, AppOut, Msg, TcpSample};
use super::port::HeaderCache;
use super::registry::Key;
use super::sendmem::UmemFrames;
use crate::tcp::{Connection, RecvWindow, State};

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
            tcp: TcpSample {
                cwnd: c.cwnd() as u64,
                snd_wnd: c.send_window() as u64,
                rttvar: c.rttvar(),
                mss: u32::try_from(c.send_mss()).unwrap_or(u32::MAX),
                congestion: c.congestion_name(),
            },
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
    pub(super) source_error: Option<std::io::ErrorKind>,
    pub(super) established: Option<Instant>,
    pub(super) reported: bool,
    /// Stop: reset at this time if not closed by then.
    pub(super) deadline: Option<Instant>,
    /// The worker's shares it applied last (their epoch).
    pub(super) shares_epoch: u64,
    /// An application connection (instead of source and sink).
    pub(super) appconn: Option<Box<AppConn>>,
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
            reported: false,
            deadline: None,
            shares_epoch: 0,
            appconn: None,
        }
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
