//! The iperf3 client on the engine: [`Iperf3Client`] is an engine [`App`]
//! for [`crate::worker::Role::ConnectApp`]: it opens the control connection,
//! drives a [`ClientSession`], then opens the data streams one after
//! another in order (the server numbers them by arrival), writes the cookie
//! on each, and orders them to send (the caller's payload: a file, zeros
//! or random bytes) or to count what arrives. Data bytes stay in the
//! workers; only counts reach this thread.

use std::collections::HashMap;
use std::time::Instant;

use crossbeam_channel::Sender;

use super::CpuUtil;
use super::meter::{Interval, Meter, RttSummary, StreamTcp};
use super::{
    ClientConfig, ClientSession, ControlEnd, Cookie, EndReport, Error, Event, Results, Role,
    STREAM_FAIL_GRACE, StreamId, StreamInfo, StreamStats, cpu_util,
};
use crate::tcp::{CloseReason, FourTuple};
use crate::worker::bulk::Sink;
use crate::worker::{App, AppIn, AppOut, CpuTimes, IpMarks, Opener, process_times};

/// How the test went.
#[derive(Debug, Clone)]
pub struct ClientOutcome {
    /// Ok, or why it failed.
    pub result: Result<(), Error>,
    /// This side's counters per stream.
    pub streams: Vec<StreamStats>,
    /// The server's results.
    pub peer: Option<Results>,
    /// Seconds from `StartTest` (or with `-O`, the end of the omitted
    /// seconds) to `TestEnd`: those of the counted bytes.
    pub seconds: f64,
    /// This process's CPU use over the test, percent of one core.
    pub cpu_util: CpuUtil,
    /// RTT statistics per stream (same order as `streams`; None without
    /// samples, as for streams this side only received on).
    pub rtt: Vec<Option<RttSummary>>,
    /// Per stream (same order): its TCP over the test (largest windows,
    /// MSS, congestion control), as xtcp's TCP reported it.
    pub tcp: Vec<StreamTcp>,
    /// Per stream (same order): its addresses, once it was established.
    pub connected: Vec<Option<FourTuple>>,
    /// The control connection's addresses.
    pub control: Option<FourTuple>,
}

/// What a client knows as its test starts.
#[derive(Debug, Clone)]
pub struct ClientStart {
    /// Every data stream and its addresses.
    pub streams: Vec<(StreamInfo, FourTuple)>,
    /// The control connection's MSS, as its handshake settled it.
    pub control_mss: Option<u32>,
    /// The data streams' MSS (the first stream's; they share a path).
    pub stream_mss: Option<u32>,
}

/// Called when a client's test starts ([`ClientStart`]).
pub type OnStart = Box<dyn FnMut(&ClientStart)>;

/// The iperf3 client application.
pub struct Iperf3Client {
    config: ClientConfig,
    cookie: Cookie,
    session: Option<ClientSession>,
    opener: Option<Opener>,
    conns: HashMap<usize, Sender<AppOut>>,
    streams: Vec<StreamInfo>,
    running: bool,
    stopping: Option<Vec<usize>>,
    /// A data connection failed while the test ran: when, and how. The
    /// test fails [`STREAM_FAIL_GRACE`] later, unless the server has told
    /// why meanwhile (it resets the data connections as it ends a test:
    /// its message on the control connection may come after).
    stream_failed: Option<(Instant, crate::tcp::ConnectionError)>,
    started: Option<Instant>,
    ended: Option<Instant>,
    cpu_start: CpuTimes,
    peer: Option<Results>,
    outcome: Option<ClientOutcome>,
    meter: Meter,
    on_interval: Box<dyn FnMut(&Interval)>,
    /// Addresses by connection id (0: control).
    tuples: HashMap<usize, FourTuple>,
    /// Each connection's MSS once it is established.
    mss: HashMap<usize, u32>,
    on_start: Option<OnStart>,
    /// Where the receiving stream's bytes go (iperf3's `-F` with `-R`):
    /// handed to the first receiving stream that opens.
    sink: Option<Sink>,
    /// When the run was interrupted, while its streams stop (their last
    /// counts to come).
    interrupted: Option<Instant>,
    /// `-O`'s omitted seconds run: the sending streams send without their
    /// `-n`/`-k` share, given when they end (iperf3 counts the budgets
    /// after them; a share spent while omitting left the test nothing to
    /// count, and it never ended).
    omitting: bool,
}

impl std::fmt::Debug for Iperf3Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iperf3Client")
            .field("streams", &self.streams.len())
            .field("outcome", &self.outcome)
            .finish()
    }
}

/// Bytes sending stream `id` may send under `-n` / `-k`, or `None` for a
/// timed test. iperf3 counts the total over all streams: `-n` is split
/// evenly (rounded up), `-k` in whole blocks (the first streams one more
/// where they do not divide evenly), as iperf3 writes whole blocks.
pub fn send_limit(params: &super::TestParams, streams: &[StreamInfo], id: StreamId) -> Option<u64> {
    let senders = streams.iter().filter(|s| s.role == Role::Send);
    let n = senders.clone().count().max(1) as u64;
    if params.bytes > 0 {
        return Some(params.bytes.div_ceil(n));
    }
    if params.blocks == 0 {
        return None;
    }
    let place = senders.take_while(|s| s.id != id).count() as u64;
    let blocks = params.blocks / n + u64::from(place < params.blocks % n);
    Some(blocks.saturating_mul(u64::from(params.block_len)))
}

impl Iperf3Client {
    /// A client for one test; `on_interval` is called every `interval`
    /// while data moves (None: never).
    pub fn new(
        config: ClientConfig,
        cookie: Cookie,
        interval: Option<std::time::Duration>,
        on_interval: Box<dyn FnMut(&Interval)>,
    ) -> Iperf3Client {
        Iperf3Client {
            config,
            cookie,
            session: None,
            opener: None,
            conns: HashMap::new(),
            streams: Vec::new(),
            running: false,
            stopping: None,
            stream_failed: None,
            started: None,
            ended: None,
            cpu_start: CpuTimes::default(),
            peer: None,
            outcome: None,
            meter: Meter::new(interval),
            on_interval,
            tuples: HashMap::new(),
            mss: HashMap::new(),
            on_start: None,
            sink: None,
            interrupted: None,
            omitting: false,
        }
    }

    /// The first receiving stream hands what it gets to `sink` (a writer
    /// thread's: iperf3's `-F` with `-R`) instead of dropping it.
    pub fn set_sink(&mut self, sink: Sink) {
        self.sink = Some(sink);
    }

    /// Drops the sink if no stream took it (the test never got that far),
    /// so that its writer thread ends.
    pub fn release_sink(&mut self) {
        self.sink = None;
    }

    /// `f` is called when the test starts, with every data stream and its
    /// addresses (all connected by then).
    pub fn set_on_start(&mut self, f: OnStart) {
        self.on_start = Some(f);
    }

    /// Connections to plan: the control connection and every stream.
    pub fn connections(config: &ClientConfig) -> usize {
        let p = config.params.parallel.max(1) as usize;
        1 + if config.params.bidirectional {
            2 * p
        } else {
            p
        }
    }

    /// How the test went, once finished.
    pub fn outcome(&self) -> Option<&ClientOutcome> {
        self.outcome.as_ref()
    }

    /// The order that starts a sending stream: `-b` paces each stream to
    /// the rate (iperf3's `bandwidth` is per stream), the payload is
    /// [`ClientConfig::payload`].
    fn send_order(&self, limit: Option<u64>, now: Instant) -> AppOut {
        AppOut::Send {
            limit,
            rate: self.config.params.bandwidth,
            payload: self.config.payload.clone(),
            start: self.started.unwrap_or(now),
        }
    }

    /// What sending stream `id` may send now: its `-n`/`-k` share, none
    /// while `-O`'s seconds are omitted.
    fn limit(&self, id: StreamId) -> Option<u64> {
        if self.omitting {
            None
        } else {
            send_limit(&self.config.params, &self.streams, id)
        }
    }

    fn order(&self, id: usize, o: AppOut) {
        if let Some(c) = self.conns.get(&id) {
            let _ = c.try_send(o);
        }
    }

    fn info(&self, id: usize) -> Option<StreamInfo> {
        id.checked_sub(1).and_then(|i| self.streams.get(i)).copied()
    }

    fn finish(&mut self, now: Instant, result: Result<(), Error>) {
        if self.outcome.is_some() {
            return;
        }
        if self.running {
            // Ended while it ran (interrupted here, the server terminated,
            // the control connection lost): as iperf3's client, the last
            // interval, and the counts' seconds end now.
            self.running = false;
            self.ended = Some(now);
            self.meter.end_at(now);
            for iv in self.meter.finish(now) {
                (self.on_interval)(&iv);
            }
        }
        // As iperf3's client ends a test: the data connections closed,
        // IPERF_DONE (already queued) and then the control connection closed;
        // after a failure the data connections are reset (not after an
        // interrupt, nor once the server ended the test: what was written
        // is delivered).
        let ok = result
            .as_ref()
            .map_or_else(Error::is_orderly_end, |()| true);
        let ids: Vec<usize> = self.conns.keys().copied().collect();
        for id in ids {
            self.order(
                id,
                if id == 0 || ok {
                    AppOut::Close
                } else {
                    AppOut::Abort
                },
            );
        }
        // The counted bytes' seconds: from the end of `-O`'s omitted ones.
        let counted_from = self.session.as_ref().and_then(|s| s.counted_from());
        let seconds = match (counted_from, self.ended) {
            (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        let util = cpu_util(self.cpu_start, self.started, now);
        let streams: Vec<StreamStats> = self
            .session
            .as_ref()
            .map(|s| s.stream_stats().to_vec())
            .unwrap_or_default();
        let rtt = streams.iter().map(|s| self.meter.rtt(s.id)).collect();
        let tcp = streams
            .iter()
            .map(|s| self.meter.tcp(s.id).unwrap_or_default())
            .collect();
        let connected = (1..=streams.len())
            .map(|i| self.tuples.get(&i).copied())
            .collect();
        self.outcome = Some(ClientOutcome {
            result,
            streams,
            peer: self.peer.take(),
            seconds,
            cpu_util: util,
            rtt,
            tcp,
            connected,
            control: self.tuples.get(&0).copied(),
        });
    }

    fn end_when_stopped(&mut self, now: Instant) {
        if self.stopping.as_ref().is_none_or(|s| !s.is_empty()) {
            return;
        }
        self.stopping = None;
        if let Some(at) = self.interrupted {
            // The last counts of an interrupted test are in.
            self.finish(at, Err(Error::Interrupted));
            return;
        }
        // The last interval (it ended with the test) once the last counts
        // are in.
        for iv in self.meter.finish(now) {
            (self.on_interval)(&iv);
        }
        let mut report = EndReport::engine(cpu_util(self.cpu_start, self.started, now));
        // What iperf3 sends as `congestion_used`: its own sockets' algorithm
        // (the peer reports it as the sender's or receiver's).
        report.congestion_used = self
            .meter
            .congestion(Role::Send)
            .or(self.meter.congestion(Role::Receive))
            .map(str::to_owned);
        if let Some(s) = self.session.as_mut() {
            if let Err(e) = s.end_test(now, report) {
                self.finish(now, Err(e));
            }
        }
    }

    /// Opens data connection `i`, labelled with `-L` from its SYN on, as
    /// iperf3 sets the flow label before it connects (its `-S` only once
    /// the connection is open: [`AppIn::Opened`]).
    fn open_stream(&self, i: usize) {
        if let Some(o) = &self.opener {
            let flow_label = self.config.params.flow_label.unwrap_or(0);
            o.open_marked(i, IpMarks { tos: 0, flow_label });
        }
    }

    fn events(&mut self, now: Instant) {
        loop {
            let Some(s) = self.session.as_mut() else {
                return;
            };
            if let Some(bytes) = s.poll_transmit() {
                self.order(0, AppOut::Write(bytes));
                continue;
            }
            let Some(ev) = s.poll_event() else {
                break;
            };
            match ev {
                Event::CreateStreams { .. } => {
                    self.streams = s.streams();
                    if !self.streams.is_empty() {
                        self.open_stream(1);
                    }
                }
                Event::StartTest { .. } => {
                    self.running = true;
                    self.started = Some(now);
                    self.cpu_start = process_times();
                    let omit = std::time::Duration::from_secs(self.config.params.omit_secs.into());
                    self.meter.start(now, &self.streams, omit);
                    if let Some(f) = self.on_start.as_mut() {
                        let streams: Vec<(StreamInfo, FourTuple)> = self
                            .streams
                            .iter()
                            .enumerate()
                            .filter_map(|(i, s)| self.tuples.get(&(i + 1)).map(|t| (*s, *t)))
                            .collect();
                        f(&ClientStart {
                            streams,
                            control_mss: self.mss.get(&0).copied(),
                            stream_mss: self.mss.get(&1).copied(),
                        });
                    }
                    self.omitting = self.config.params.omit_secs > 0;
                    for (i, info) in self.streams.iter().enumerate() {
                        if info.role == Role::Send {
                            self.order(i + 1, self.send_order(self.limit(info.id), now));
                        }
                    }
                }
                Event::TestEnd => {
                    self.running = false;
                    self.ended = Some(now);
                    self.meter.end_at(now);
                    // TEST_END now, as iperf3's client writes it: the server
                    // stops sending and closes the data connections only
                    // then, so a receiving stream's last bytes come after it.
                    // The results wait for the last counts.
                    if let Err(e) = s.stop_test(now) {
                        self.finish(now, Err(e));
                        continue;
                    }
                    let ids: Vec<usize> = (1..=self.streams.len()).collect();
                    for id in &ids {
                        self.order(*id, AppOut::Stop);
                    }
                    self.stopping = Some(ids);
                    self.end_when_stopped(now);
                }
                Event::PeerResults(r) => self.peer = Some(*r),
                Event::Done => self.finish(now, Ok(())),
                Event::Error(e) => self.finish(now, Err(e)),
            }
        }
    }
}

impl App for Iperf3Client {
    fn start(&mut self, opener: Opener) {
        opener.open(0);
        self.opener = Some(opener);
    }

    fn finished(&self) -> bool {
        self.outcome.is_some()
    }

    /// As iperf3's client, which exits at once after an error (its kernel
    /// finishes the close): once the server has acknowledged `IPERF_DONE`
    /// and the FIN, xtcp leaves too.
    fn failed(&self) -> bool {
        self.outcome
            .as_ref()
            .is_some_and(|o| o.result.as_ref().is_err_and(|e| !e.is_orderly_end()))
    }

    /// As iperf3's client on Ctrl-C: `CLIENT_TERMINATE` to the server, the
    /// test's last interval and its outcome with what was sent until now
    /// (its seconds end here), the error [`Error::Interrupted`]. The
    /// streams are stopped first, so that what they wrote counts, as
    /// iperf3 counts its writes (and is delivered: the connections close);
    /// the outcome follows when their last counts are in.
    fn interrupt(&mut self, now: Instant) {
        if self.outcome.is_some() || self.interrupted.is_some() {
            return;
        }
        if let Some(s) = self.session.as_mut() {
            s.terminate(now);
        }
        self.events(now);
        if !self.running || self.outcome.is_some() {
            self.finish(now, Err(Error::Interrupted));
            return;
        }
        self.interrupted = Some(now);
        self.meter.end_at(now);
        let ids: Vec<usize> = (1..=self.streams.len()).collect();
        for id in &ids {
            self.order(*id, AppOut::Stop);
        }
        self.stopping = Some(ids);
        self.end_when_stopped(now);
    }

    fn stopped(&mut self) {
        // The workers are gone: no stream's last count is still to come.
        if let Some(at) = self.interrupted {
            self.finish(at, Err(Error::Interrupted));
        }
    }

    fn handle(&mut self, now: Instant, msg: AppIn) {
        match msg {
            AppIn::Opened {
                id: 0,
                out,
                tuple,
                mss,
                ..
            } => {
                self.tuples.insert(0, tuple);
                self.mss.insert(0, mss);
                // The session queues the cookie itself on the control connection.
                let _ = out.try_send(AppOut::Relay);
                self.conns.insert(0, out);
                match ClientSession::new(self.config.clone(), self.cookie, now) {
                    Ok(s) => self.session = Some(s),
                    Err(e) => self.finish(now, Err(e)),
                }
            }
            AppIn::Opened {
                id,
                out,
                tuple,
                mss,
                ..
            } => {
                let Some(info) = self.info(id) else {
                    let _ = out.try_send(AppOut::Abort);
                    return;
                };
                self.tuples.insert(id, tuple);
                self.mss.insert(id, mss);
                let _ = out.try_send(AppOut::Write(self.cookie.as_bytes().to_vec()));
                if let Some(w) = self.config.params.window {
                    let _ = out.try_send(AppOut::Window(w as usize));
                }
                // `--fq-rate`, `-S`/`--dscp` and `-L`, as iperf3 sets them
                // on each data connection (`-L` again: it marked the SYN).
                let p = &self.config.params;
                if let Some(r) = p.fq_rate {
                    let _ = out.try_send(AppOut::MaxPacingRate(r / 8));
                }
                if p.tos.is_some() || p.flow_label.is_some() {
                    let _ = out.try_send(AppOut::Marks(IpMarks {
                        tos: p.tos.unwrap_or(0) as u8,
                        flow_label: p.flow_label.unwrap_or(0),
                    }));
                }
                let _ = out.try_send(if info.role == Role::Send && self.running {
                    self.send_order(self.limit(info.id), now)
                } else if let Some(s) = (info.role == Role::Receive)
                    .then(|| self.sink.take())
                    .flatten()
                {
                    AppOut::CountInto(s)
                } else {
                    AppOut::Count
                });
                self.conns.insert(id, out);
                if id < self.streams.len() {
                    self.open_stream(id + 1);
                }
            }
            AppIn::Data { id: 0, bytes } => {
                if let Some(s) = self.session.as_mut() {
                    s.handle_control(now, &bytes);
                }
            }
            AppIn::Data { .. } => {}
            AppIn::Eof { id: 0 } => {
                if let Some(s) = self.session.as_mut() {
                    s.handle_control_eof(now, ControlEnd::Closed);
                }
            }
            AppIn::Eof { .. } => {}
            AppIn::Count {
                id,
                bytes,
                retransmits,
                rtt,
                tcp,
            } => {
                if let (Some(info), Some(s)) = (self.info(id), self.session.as_mut()) {
                    self.meter.sample(info.id, &tcp);
                    s.record_bytes(info.id, bytes);
                    s.note_progress(now);
                    if info.role == Role::Send {
                        // Counts carry the retransmits since the last.
                        s.add_retransmits(info.id, retransmits);
                    }
                    self.meter.count(info.id, bytes, retransmits, rtt);
                }
            }
            AppIn::Stopped { id } => {
                if let Some(s) = self.stopping.as_mut() {
                    s.retain(|&x| x != id);
                }
                self.end_when_stopped(now);
            }
            AppIn::Closed { id, reason } => {
                self.conns.remove(&id);
                if id == 0 {
                    if let Some(s) = self.session.as_mut() {
                        s.handle_control_eof(now, reason.into());
                    } else {
                        let how = reason.into();
                        self.finish(
                            now,
                            Err(Error::ControlClosed {
                                phase: "connecting",
                                how,
                            }),
                        );
                    }
                } else if let Some(s) = self.stopping.as_mut() {
                    s.retain(|&x| x != id);
                    self.end_when_stopped(now);
                } else if let (true, CloseReason::Error(e)) = (self.running, reason) {
                    // A data connection failed while the test ran (reset,
                    // timed out): the test fails, as iperf3's client's does
                    // when a stream's read or write fails (in `poll`).
                    self.stream_failed.get_or_insert((now, e));
                }
            }
        }
        self.events(now);
    }

    fn poll(&mut self, now: Instant) {
        if let Some((at, e)) = self.stream_failed
            && now >= at + STREAM_FAIL_GRACE
            && self.outcome.is_none()
        {
            if let Some(s) = self.session.as_mut() {
                s.quit(now);
            }
            self.events(now);
            // What was counted until the failure.
            self.finish(at, Err(Error::StreamFailed(e)));
        }
        if let Some(s) = self.session.as_mut() {
            if s.poll_timeout().is_some_and(|d| now >= d) {
                s.handle_timeout(now);
            }
            if let Some(t) = s.counted_from() {
                self.meter.end_omit(t);
                if std::mem::take(&mut self.omitting) {
                    // The omitted seconds are over: each sending stream's
                    // share, counted from now.
                    for (i, info) in self.streams.iter().enumerate() {
                        if info.role == Role::Send {
                            self.order(i + 1, AppOut::Budget(self.limit(info.id)));
                        }
                    }
                }
            }
        }
        self.events(now);
        if self.running {
            while let Some(iv) = self.meter.poll(now) {
                (self.on_interval)(&iv);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::iperf3::TestParams;

    fn streams(roles: &[Role]) -> Vec<StreamInfo> {
        // iperf3's stream ids: 1, then 3, 4, …
        roles
            .iter()
            .enumerate()
            .map(|(i, &role)| StreamInfo {
                id: StreamId(if i == 0 { 1 } else { i as u32 + 2 }),
                role,
            })
            .collect()
    }

    /// `-k` goes to the sending streams in whole blocks, the first ones a
    /// block more where they do not divide; `-n` evenly, rounded up.
    #[test]
    fn budgets_split_over_the_sending_streams() {
        let s = streams(&[Role::Send, Role::Receive, Role::Send, Role::Send]);
        let k = TestParams {
            blocks: 1001,
            block_len: 10_000,
            ..TestParams::default()
        };
        let per: Vec<Option<u64>> = [1, 4, 5].map(|id| send_limit(&k, &s, StreamId(id))).into();
        assert_eq!(per, [Some(3_340_000), Some(3_340_000), Some(3_330_000)]);
        let n = TestParams {
            bytes: 10,
            ..TestParams::default()
        };
        assert_eq!(send_limit(&n, &s, StreamId(5)), Some(4));
        assert_eq!(send_limit(&TestParams::default(), &s, StreamId(1)), None);
    }
}
