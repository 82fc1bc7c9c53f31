//! The client side of one iperf3 test: a [`ClientSession`] per test.
//!
//! Call order (see the parent module for the loop): connect the control
//! connection, then `new` (which queues the cookie) → `handle_control` /
//! `handle_control_eof` / `handle_timeout` → `poll_transmit`, `poll_event` →
//! on [`Event::CreateStreams`] open the data connections listed by
//! `streams()`, in order, each starting with `cookie()` → on
//! [`Event::StartTest`] move data and `record_bytes` → the session raises
//! [`Event::TestEnd`] when the time, byte or block budget is spent (or call
//! `end_test` earlier to stop) → stop sending, keep reading, `end_test` →
//! [`Event::PeerResults`] → [`Event::Done`] (or [`Event::Error`]), after
//! which `is_finished()` is true.
//!
//! A side that receives cannot know its last count when the test ends: what
//! the server sent before it learnt of the end is still arriving, and the
//! server stops sending only on `TEST_END`. Then call `stop_test` at
//! [`Event::TestEnd`] (it writes `TEST_END` at once, as iperf3's client
//! does), keep counting until the server closed the data connections, and
//! call `end_test` with the report: this side's results wait for it.
//!
//! Protocol, client side: write the cookie; read `PARAM_EXCHANGE`; write the
//! parameters; read `CREATE_STREAMS`; connect the streams; read `TEST_START`
//! and `TEST_RUNNING`; move data; write `TEST_END`; read `EXCHANGE_RESULTS`;
//! write our results; read the server's; read `DISPLAY_RESULTS`; write
//! `IPERF_DONE`. `ACCESS_DENIED`, `SERVER_ERROR` (+ two error numbers) and
//! `SERVER_TERMINATE` end the test at any point.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::proto::{self, Cookie, Results, State, TestParams};
use super::streams::{StreamId, StreamInfo, StreamStats, StreamTable};
use super::{
    ControlEnd, ControlIn, DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_IDLE_TIMEOUT, EndReport, Error,
    Event, Role, decode_state,
};

/// Client parameters, limits and timeouts.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// What to ask the server for.
    pub params: TestParams,
    /// Largest JSON message accepted from the server (its results may carry
    /// its whole output when `get_server_output` is set).
    pub max_json_len: usize,
    /// Time the server may take for each handshake step.
    pub handshake_timeout: Duration,
    /// Time without data progress after which a running test is abandoned.
    pub idle_timeout: Duration,
    /// The option that sets `idle_timeout`, for the error.
    pub idle_timeout_flag: &'static str,
    /// What the sending streams send: iperf3's pattern over and over (the
    /// default, as iperf3 writes its buffer; a frame already holding the
    /// bytes is not rewritten), or zeros that cost nothing per byte (`-Z`).
    pub payload: crate::worker::Payload,
    /// A timed test that also ends once the sending streams have this many
    /// bytes acknowledged in all, the omitted seconds' included: the end of
    /// `-F`'s file on every stream (iperf3's `-F` ends at the file's end or
    /// at `-t`, `-n`, `-k`, whichever comes first; with `-O`, the file may
    /// end while its seconds are omitted, and the test then ends when they
    /// end). Not sent to the server.
    pub end_after_sent: Option<u64>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            params: TestParams::default(),
            max_json_len: 1024 * 1024,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            idle_timeout_flag: "--rcv-timeout",
            payload: crate::worker::Payload::Zeros,
            end_after_sent: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    ParamExchange,
    CreateStreams,
    TestStart,
    TestRunning,
    Running,
    AwaitReport,
    ExchangeResults,
    /// `EXCHANGE_RESULTS` came after `stop_test`: waiting for the caller's
    /// `end_test`.
    ResultsPending,
    ServerResults,
    DisplayResults,
    /// Reading the two error numbers after `SERVER_ERROR`.
    ServerErrorCodes,
    Done,
    Failed,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::ParamExchange => "waiting for PARAM_EXCHANGE",
            Phase::CreateStreams => "waiting for CREATE_STREAMS",
            Phase::TestStart => "waiting for TEST_START",
            Phase::TestRunning => "waiting for TEST_RUNNING",
            Phase::Running => "running",
            Phase::AwaitReport => "waiting for the local end report",
            Phase::ExchangeResults => "waiting for EXCHANGE_RESULTS",
            Phase::ResultsPending => "waiting for the local end report (results asked for)",
            Phase::ServerResults => "waiting for the server's results",
            Phase::DisplayResults => "waiting for DISPLAY_RESULTS",
            Phase::ServerErrorCodes => "reading the server's error",
            Phase::Done => "done",
            Phase::Failed => "failed",
        }
    }
}

/// One iperf3 test, client side. See the module doc for the call order.
#[derive(Debug)]
pub struct ClientSession {
    config: ClientConfig,
    cookie: Cookie,
    phase: Phase,
    input: ControlIn,
    output: Vec<u8>,
    events: VecDeque<Event>,
    table: StreamTable,
    deadline: Option<Instant>,
    ended: Option<Instant>,
    /// When the bytes began to count: the test's start, or with `-O` the
    /// end of the omitted seconds.
    counted_from: Option<Instant>,
    omit_end: Option<Instant>,
    test_end: Option<Instant>,
    progress_mark: u64,
    progress_at: Instant,
    report: Option<EndReport>,
    /// `TEST_END` written (by `stop_test` or `end_test`).
    test_end_sent: bool,
    peer_results: Option<Results>,
}

impl ClientSession {
    /// A session on a control connection established at `now`; queues the
    /// cookie for writing. `cookie` should come from
    /// [`Cookie::from_entropy`] with fresh random bytes.
    pub fn new(config: ClientConfig, cookie: Cookie, now: Instant) -> Result<ClientSession, Error> {
        config
            .params
            .validate(u32::MAX)
            .map_err(|(_, reason)| Error::Config(reason))?;
        Ok(ClientSession {
            input: ControlIn::new(config.max_json_len),
            output: cookie.as_bytes().to_vec(),
            deadline: Some(now + config.handshake_timeout),
            config,
            cookie,
            phase: Phase::ParamExchange,
            events: VecDeque::new(),
            table: StreamTable::default(),
            ended: None,
            counted_from: None,
            omit_end: None,
            test_end: None,
            progress_mark: 0,
            progress_at: now,
            report: None,
            test_end_sent: false,
            peer_results: None,
        })
    }

    // ---- inputs -------------------------------------------------------

    /// Bytes read from the control connection.
    pub fn handle_control(&mut self, now: Instant, data: &[u8]) {
        if self.is_finished() || data.is_empty() {
            return;
        }
        if let Err(e) = self.input.push(data) {
            self.fail(e);
            return;
        }
        if let Err(e) = self.process(now) {
            self.fail(e);
        }
    }

    /// The control connection reached EOF (or failed, as `how` says).
    pub fn handle_control_eof(&mut self, _now: Instant, how: ControlEnd) {
        if self.is_finished() {
            return;
        }
        // iperf3's server sends only `i_errno` after `SERVER_ERROR` when it
        // refuses a login (IEAUTHTEST), then closes: the error is that.
        if self.phase == Phase::ServerErrorCodes && self.input.len() >= 4 {
            let i_errno = self.input.take_u32().unwrap_or(0) as i32;
            self.fail(Error::ServerError { i_errno, errno: 0 });
            return;
        }
        self.fail(Error::ControlClosed {
            phase: self.phase.name(),
            how,
        });
    }

    /// Call when `poll_timeout()` has passed (calling early is harmless).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.is_finished() {
            return;
        }
        if self.omit_end.is_some_and(|t| now >= t) {
            self.table.end_omit();
            self.omit_end = None;
            self.counted_from = Some(now);
            self.check_budget();
        }
        self.note_progress(now);
        match self.phase {
            Phase::Running => {
                if self.test_end.is_some_and(|t| now >= t) {
                    self.finish_running();
                } else if now >= self.progress_at + self.config.idle_timeout {
                    self.fail(Error::IdleTimeout {
                        idle: self.config.idle_timeout,
                        flag: self.config.idle_timeout_flag,
                    });
                }
            }
            Phase::AwaitReport | Phase::ResultsPending => {}
            _ => {
                if self.deadline.is_some_and(|d| now >= d) {
                    self.fail(Error::Timeout {
                        phase: self.phase.name(),
                    });
                }
            }
        }
    }

    /// Bytes moved on data stream `id` (sent on a sending stream, received
    /// on a receiving one). Returns false for an id this test does not have.
    /// May raise [`Event::TestEnd`] when a byte or block budget is reached.
    pub fn record_bytes(&mut self, id: StreamId, len: u64) -> bool {
        let ok = self.table.record(id, len);
        if ok {
            self.check_budget();
        }
        ok
    }

    /// Call at `now` after [`ClientSession::record_bytes`]: the idle timeout
    /// counts from the last time bytes moved (checked at timeouts alone,
    /// it would count from the first check after them, up to a whole
    /// timeout late).
    pub fn note_progress(&mut self, now: Instant) {
        let all = self.table.all_bytes();
        if all != self.progress_mark {
            self.progress_mark = all;
            self.progress_at = now;
        }
    }

    /// `count` more retransmits on sending stream `id` (for a caller that
    /// counts them since its last report).
    pub fn add_retransmits(&mut self, id: StreamId, count: u64) -> bool {
        self.table.add_retransmits(id, count)
    }

    /// Ends the test: after [`Event::TestEnd`], or earlier to stop a running
    /// test. Writes `TEST_END` (unless `stop_test` did); this side's results
    /// are sent when the server asks for them (bytes recorded until then
    /// still count), or at once if it already asked.
    pub fn end_test(&mut self, now: Instant, report: EndReport) -> Result<(), Error> {
        let after_stop = self.test_end_sent
            && matches!(self.phase, Phase::ExchangeResults | Phase::ResultsPending)
            && self.report.is_none();
        if !after_stop {
            self.stop_test(now).map_err(|_| Error::WrongPhase {
                call: "end_test",
                phase: self.phase.name(),
            })?;
        }
        self.report = Some(report);
        if self.phase == Phase::ResultsPending {
            self.send_results(now);
        }
        if let Err(e) = self.process(now) {
            self.fail(e);
        }
        Ok(())
    }

    /// Ends the test without this side's report yet: writes `TEST_END` now
    /// (the server stops sending and closes the data connections); the
    /// results wait for `end_test`. Valid while running or after
    /// [`Event::TestEnd`].
    pub fn stop_test(&mut self, now: Instant) -> Result<(), Error> {
        if !matches!(self.phase, Phase::Running | Phase::AwaitReport) {
            return Err(Error::WrongPhase {
                call: "stop_test",
                phase: self.phase.name(),
            });
        }
        if self.ended.is_none() {
            self.ended = Some(now);
        }
        self.send_state(State::TestEnd);
        self.test_end_sent = true;
        self.enter(Phase::ExchangeResults, now);
        if let Err(e) = self.process(now) {
            self.fail(e);
        }
        Ok(())
    }

    /// Leaves the test after an error on this side (`IPERF_DONE` where the
    /// server expects none, as iperf3's client leaves when a data
    /// connection fails).
    pub fn quit(&mut self, _now: Instant) {
        if self.is_finished() {
            return;
        }
        self.send_state(State::IperfDone);
        self.phase = Phase::Failed;
    }

    /// Abandons the test (`CLIENT_TERMINATE`, as iperf3 on Ctrl-C).
    pub fn terminate(&mut self, _now: Instant) {
        if self.is_finished() {
            return;
        }
        self.send_state(State::ClientTerminate);
        self.phase = Phase::Failed;
    }

    // ---- outputs ------------------------------------------------------

    /// Bytes to write on the control connection, in order.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        (!self.output.is_empty()).then(|| std::mem::take(&mut self.output))
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When `handle_timeout` must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Done | Phase::Failed | Phase::AwaitReport | Phase::ResultsPending => {
                self.omit_end
            }
            Phase::Running => {
                let idle = self.progress_at + self.config.idle_timeout;
                [Some(idle), self.test_end, self.omit_end]
                    .into_iter()
                    .flatten()
                    .min()
            }
            _ => self.deadline,
        }
    }

    // ---- getters ------------------------------------------------------

    /// The cookie to write first on every data connection.
    pub fn cookie(&self) -> &Cookie {
        &self.cookie
    }

    /// The data connections to open, in order (empty before
    /// [`Event::CreateStreams`]).
    pub fn streams(&self) -> Vec<StreamInfo> {
        self.table
            .streams
            .iter()
            .map(|s| StreamInfo {
                id: s.id,
                role: s.role,
            })
            .collect()
    }

    /// Per-stream counters.
    pub fn stream_stats(&self) -> &[StreamStats] {
        &self.table.streams
    }

    /// Bytes counted (omit period excluded) on this side's streams of `role`.
    pub fn counted_bytes(&self, role: Role) -> u64 {
        self.table.total(role)
    }

    /// When this side's counts began: the test's start, or with `-O` the
    /// end of the omitted seconds (`None` before then). A rate is the
    /// counted bytes over the time from here to the test's end.
    pub fn counted_from(&self) -> Option<Instant> {
        self.counted_from
    }

    /// The server's results, once received.
    pub fn peer_results(&self) -> Option<&Results> {
        self.peer_results.as_ref()
    }

    /// The parameters this test asked for.
    pub fn params(&self) -> &TestParams {
        &self.config.params
    }

    /// True once the test is done or failed: close the control connection.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Done | Phase::Failed)
    }

    // ---- internals ----------------------------------------------------

    fn enter(&mut self, phase: Phase, now: Instant) {
        self.phase = phase;
        self.deadline = Some(now + self.config.handshake_timeout);
    }

    fn send_state(&mut self, s: State) {
        self.output.push(s.to_byte());
    }

    fn fail(&mut self, e: Error) {
        if self.is_finished() {
            return;
        }
        self.phase = Phase::Failed;
        self.events.push_back(Event::Error(e));
    }

    /// Byte and block budgets (`-n`, `-k`), counted after the omit period,
    /// in either direction, as iperf3 does; and [`ClientConfig::end_after_sent`],
    /// counted from the start. None ends the test while `-O`'s seconds are
    /// omitted (iperf3's neither): one met then ends it when they end.
    fn check_budget(&mut self) {
        if self.phase != Phase::Running || self.table.omitting {
            return;
        }
        if self
            .config
            .end_after_sent
            .is_some_and(|b| self.table.total_with_omitted(Role::Send) >= b)
        {
            self.finish_running();
            return;
        }
        let p = &self.config.params;
        let sent = self.table.total(Role::Send);
        let received = self.table.total(Role::Receive);
        let block = u64::from(p.block_len.max(1));
        let bytes_done = p.bytes != 0 && (sent >= p.bytes || received >= p.bytes);
        let blocks_done =
            p.blocks != 0 && (sent / block >= p.blocks || received / block >= p.blocks);
        if bytes_done || blocks_done {
            self.finish_running();
        }
    }

    fn finish_running(&mut self) {
        self.phase = Phase::AwaitReport;
        self.events.push_back(Event::TestEnd);
    }

    /// The seconds the counted bytes took (the omitted ones left out).
    fn elapsed(&self) -> Duration {
        match (self.counted_from, self.ended) {
            (Some(s), Some(e)) => e.saturating_duration_since(s),
            _ => Duration::ZERO,
        }
    }

    fn process(&mut self, now: Instant) -> Result<(), Error> {
        loop {
            match self.phase {
                Phase::Done | Phase::Failed => return Ok(()),
                Phase::ServerErrorCodes => {
                    if self.input.len() < 8 {
                        return Ok(());
                    }
                    let i_errno = self.input.take_u32().unwrap_or(0) as i32;
                    let errno = self.input.take_u32().unwrap_or(0) as i32;
                    return Err(Error::ServerError { i_errno, errno });
                }
                Phase::ServerResults => {
                    let Some(map) = self.input.take_json(self.config.max_json_len)? else {
                        return Ok(());
                    };
                    let peer = Results::from_json(&map, self.table.streams.len())?;
                    self.table.check_peer(&peer)?;
                    self.peer_results = Some(peer.clone());
                    self.events.push_back(Event::PeerResults(Box::new(peer)));
                    self.enter(Phase::DisplayResults, now);
                }
                phase => {
                    let Some(b) = self.input.take_byte() else {
                        return Ok(());
                    };
                    let state = decode_state(b)?;
                    match (phase, state) {
                        (_, State::AccessDenied) => return Err(Error::AccessDenied),
                        (_, State::ServerTerminate) => return Err(Error::ServerTerminated),
                        (_, State::ServerError) => self.phase = Phase::ServerErrorCodes,
                        (Phase::ParamExchange, State::ParamExchange) => {
                            proto::encode_json(&self.config.params.to_json(), &mut self.output);
                            self.enter(Phase::CreateStreams, now);
                        }
                        (Phase::CreateStreams, State::CreateStreams) => {
                            let p = &self.config.params;
                            self.table =
                                StreamTable::new(p.parallel, p.reverse, p.bidirectional, true);
                            self.events.push_back(Event::CreateStreams {
                                count: p.stream_count(),
                                reverse: p.reverse,
                                bidir: p.bidirectional,
                            });
                            self.enter(Phase::TestStart, now);
                        }
                        (Phase::TestStart, State::TestStart) => self.enter(Phase::TestRunning, now),
                        (Phase::TestRunning, State::TestRunning) => self.start(now),
                        (Phase::ExchangeResults, State::ExchangeResults) => {
                            if self.report.is_none() {
                                // After `stop_test`: the caller's counts are
                                // not final yet.
                                self.phase = Phase::ResultsPending;
                                self.deadline = None;
                                return Ok(());
                            }
                            self.send_results(now);
                        }
                        (Phase::DisplayResults, State::DisplayResults) => {
                            self.send_state(State::IperfDone);
                            self.phase = Phase::Done;
                            self.deadline = None;
                            self.events.push_back(Event::Done);
                            return Ok(());
                        }
                        (p, s) => {
                            return Err(Error::UnexpectedState {
                                state: s,
                                phase: p.name(),
                            });
                        }
                    }
                }
            }
        }
    }

    /// This side's results (once the server asked and the report is in).
    fn send_results(&mut self, now: Instant) {
        let report = self.report.clone().unwrap_or_default();
        let mine = self.table.results(&report, self.elapsed());
        proto::encode_json(&mine.to_json(), &mut self.output);
        self.enter(Phase::ServerResults, now);
    }

    fn start(&mut self, now: Instant) {
        let p = &self.config.params;
        let omit = Duration::from_secs(u64::from(p.omit_secs));
        self.phase = Phase::Running;
        self.deadline = None;
        self.progress_at = now;
        if p.omit_secs > 0 {
            self.table.omitting = true;
            self.omit_end = Some(now + omit);
        } else {
            self.counted_from = Some(now);
        }
        if p.time_secs > 0 {
            self.test_end = Some(now + omit + Duration::from_secs(u64::from(p.time_secs)));
        }
        self.events.push_back(Event::StartTest {
            params: Box::new(p.clone()),
        });
        // Bytes that came before TEST_RUNNING was read (the server sends
        // right after it, on other connections) count towards -n and -k:
        // a budget they fill ends the test now (else nothing more comes to
        // check it, and the test ran until killed).
        self.check_budget();
    }
}
