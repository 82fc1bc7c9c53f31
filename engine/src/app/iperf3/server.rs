//! The server side of one iperf3 test: one [`ServerSession`] per control
//! connection.
//!
//! Call order (see the parent module for the loop): `new` when a control
//! connection is accepted and no session exists → `handle_control` /
//! `handle_control_eof` / `handle_timeout` → `poll_transmit`, `poll_event` →
//! on [`Event::CreateStreams`], route new connections to `accept_stream`
//! while `expects_streams()` → on [`Event::StartTest`] move data and
//! `record_bytes` → on [`Event::TestEnd`] stop, drain, close the data
//! connections, `end_test` → [`Event::PeerResults`] (when the client asked
//! for the server's output: `send_server_output`) → [`Event::Done`] or
//! [`Event::Error`], after which `is_finished()` is true.
//!
//! Protocol, server side: read the cookie; write `PARAM_EXCHANGE`; read the
//! parameters; write `CREATE_STREAMS`; accept the data connections; write
//! `TEST_START`, `TEST_RUNNING`; read `TEST_END`; close the data
//! connections (the caller does); write `EXCHANGE_RESULTS`; read the
//! client's results; write ours (with the server's output, made with the
//! client's results in) and `DISPLAY_RESULTS`; read `IPERF_DONE`.
//! `CLIENT_TERMINATE` is honoured at any point.
//!
//! Limits ([`ServerConfig`]), checked on the parameters in iperf3 3.20's
//! order: its range checks and the stream count, the max duration, the
//! requested bit rate, then the authentication token; a refusal is
//! `SERVER_ERROR` with iperf3's code, and [`ServerSession::refusal`] says
//! which. While running: the bitrate limit (averaged over its window) and
//! the idle timeout end the test with `SERVER_ERROR` too.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::access::AccessList;
use super::auth::Authenticator;
use super::limits::{BitrateLimit, RateWindow, Refusal};
use super::proto::{self, Cookie, State, TestParams, ierrno};
use super::streams::{StreamId, StreamInfo, StreamStats, StreamTable};
use super::{
    ControlEnd, ControlIn, DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_JSON_LEN,
    EndReport, Error, Event, Role, decode_state,
};

/// What to do with a connection just accepted on the iperf3 port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// No test is running: it is a control connection; create a
    /// [`ServerSession`] for it.
    Control,
    /// The running test expects data connections: read
    /// [`super::COOKIE_LEN`] bytes and call [`ServerSession::accept_stream`].
    Data,
    /// A test is running and expects no connection: write
    /// [`super::ACCESS_DENIED_BYTE`] and close, without reading (as iperf3).
    Refuse,
}

/// Routes a new connection given the current session, if any.
pub fn route(current: Option<&ServerSession>) -> Route {
    match current {
        None => Route::Control,
        Some(s) if s.is_finished() => Route::Control,
        Some(s) if s.expects_streams() => Route::Data,
        Some(_) => Route::Refuse,
    }
}

/// Server limits and timeouts. A session keeps the configuration it was
/// created with: a new one (a reload) applies to the next tests.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Largest JSON message (parameters or results) accepted.
    pub max_json_len: usize,
    /// Most data connections one test may ask for, both directions
    /// together (iperf3 allows `-P 128`, which is 256 with `--bidir`);
    /// more is refused with `IENUMSTREAMS`.
    pub max_streams: u32,
    /// Time the client may take for each handshake step (cookie and
    /// parameters, connecting the streams, sending results, `IPERF_DONE`).
    pub handshake_timeout: Duration,
    /// Time without data or control progress after which a running test is
    /// ended ([`Error::IdleTimeout`], `IENOMSG` to the client), in either
    /// direction (iperf3's `--rcv-timeout` watches only a receiving server;
    /// xtcp's `--rcv-timeout` sets this, and its `--idle-timeout` unless
    /// both are given).
    pub idle_timeout: Duration,
    /// The option that set `idle_timeout`, for the error.
    pub idle_timeout_flag: &'static str,
    /// Slack after `omit + time` before a timed test is declared dead.
    pub end_grace: Duration,
    /// Clients allowed and denied ([`super::Iperf3Server`] checks them when
    /// a connection opens).
    pub access: AccessList,
    /// iperf3's `--server-max-duration`: tests whose `-t` + `-O` exceeds
    /// it, or that have no time limit (`-n`, `-k`), are refused with
    /// `IEMAXSERVERTESTDURATIONEXCEEDED`. `None`: no limit.
    pub max_duration: Option<Duration>,
    /// iperf3's `--server-bitrate-limit`: asked for above it, refused; moving
    /// more on average while running, ended. `None`: no limit.
    pub bitrate_limit: Option<BitrateLimit>,
    /// iperf3's authentication: with it, a test is refused unless its
    /// parameters carry a token that passes.
    pub auth: Option<Arc<Authenticator>>,
    /// `iperf3 -s -1 --idle-timeout N`: the server finishes once no
    /// connection arrived for N while no test runs.
    pub exit_when_idle: Option<Duration>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_json_len: DEFAULT_MAX_JSON_LEN,
            max_streams: 256,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            idle_timeout_flag: "--idle-timeout",
            end_grace: Duration::from_secs(10),
            access: AccessList::default(),
            max_duration: None,
            bitrate_limit: None,
            auth: None,
            exit_when_idle: None,
        }
    }
}

impl ServerConfig {
    /// The limits iperf3 (3.20) checks on a client's parameters, after its
    /// own range checks: the max duration, then the requested rate (which
    /// wins when both fail, as in iperf3's `get_parameters`).
    fn check_limits(&self, p: &TestParams) -> Result<(), (Refusal, i32, String)> {
        let mut verdict = Ok(());
        if let Some(max) = self.max_duration {
            let total = u64::from(p.time_secs) + u64::from(p.omit_secs);
            if p.time_secs == 0 {
                verdict = Err((
                    Refusal::MaxDuration,
                    ierrno::IEMAXSERVERTESTDURATIONEXCEEDED,
                    format!(
                        "a test without a time limit (-n or -k instead of -t) exceeds the \
                         server's max duration of {} s",
                        max.as_secs()
                    ),
                ));
            } else if Duration::from_secs(total) > max {
                verdict = Err((
                    Refusal::MaxDuration,
                    ierrno::IEMAXSERVERTESTDURATIONEXCEEDED,
                    format!(
                        "-t {} + -O {} = {total} s exceeds the server's max duration of {} s",
                        p.time_secs,
                        p.omit_secs,
                        max.as_secs()
                    ),
                ));
            }
        }
        if let Some(limit) = self.bitrate_limit {
            let streams = u64::from(p.parallel) * if p.bidirectional { 2 } else { 1 };
            for (what, rate) in [("-b", p.bandwidth), ("--fq-rate", p.fq_rate)] {
                let total = streams.saturating_mul(rate.unwrap_or(0));
                if total > limit.bits_per_second {
                    verdict = Err((
                        Refusal::BitrateLimit,
                        ierrno::IETOTALRATE,
                        format!(
                            "{what} {} bit/s on {streams} streams = {total} bit/s exceeds the \
                             server's bitrate limit of {} bit/s",
                            rate.unwrap_or(0),
                            limit.bits_per_second
                        ),
                    ));
                }
            }
        }
        verdict
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Cookie,
    Params,
    CreateStreams,
    Running,
    AwaitReport,
    ClientResults,
    AwaitOutput,
    AwaitDone,
    Done,
    Failed,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Cookie => "waiting for the cookie",
            Phase::Params => "waiting for the parameters",
            Phase::CreateStreams => "waiting for the data connections",
            Phase::Running => "running",
            Phase::AwaitReport => "waiting for the local end report",
            Phase::ClientResults => "waiting for the client's results",
            Phase::AwaitOutput => "waiting for the server's output",
            Phase::AwaitDone => "waiting for IPERF_DONE",
            Phase::Done => "done",
            Phase::Failed => "failed",
        }
    }
}

/// What a server returns to a client that asked for its output
/// (`--get-server-output`): its text, or with `-J` its JSON document.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerOutput {
    /// `server_output_text`.
    Text(String),
    /// `server_output_json`.
    Json(serde_json::Value),
}

/// One iperf3 test, server side. See the module doc for the call order.
#[derive(Debug)]
pub struct ServerSession {
    config: ServerConfig,
    phase: Phase,
    input: ControlIn,
    output: Vec<u8>,
    events: VecDeque<Event>,
    cookie: Option<Cookie>,
    params: Option<TestParams>,
    table: StreamTable,
    accepted: u32,
    /// Deadline of the current waiting phase.
    deadline: Option<Instant>,
    ended: Option<Instant>,
    /// When the bytes began to count: the test's start, or with `-O` the
    /// end of the omitted seconds.
    counted_from: Option<Instant>,
    omit_end: Option<Instant>,
    hard_end: Option<Instant>,
    progress_mark: u64,
    progress_at: Instant,
    report: Option<EndReport>,
    /// Why the test was refused, once it was.
    refusal: Option<Refusal>,
    /// The wall clock at an instant (authentication compares the client's
    /// clock with it).
    wall: Option<(Instant, SystemTime)>,
    /// The authenticated user.
    user: Option<String>,
    /// The running check of the bitrate limit.
    rate: Option<RateWindow>,
}

impl ServerSession {
    /// A session for a control connection accepted at `now`. With
    /// authentication configured, also give the wall clock
    /// ([`Self::with_wall_clock`]).
    pub fn new(config: ServerConfig, now: Instant) -> ServerSession {
        let deadline = Some(now + config.handshake_timeout);
        ServerSession {
            input: ControlIn::new(config.max_json_len),
            config,
            phase: Phase::Cookie,
            output: Vec::new(),
            events: VecDeque::new(),
            cookie: None,
            params: None,
            table: StreamTable::default(),
            accepted: 0,
            deadline,
            ended: None,
            counted_from: None,
            omit_end: None,
            hard_end: None,
            progress_mark: 0,
            progress_at: now,
            report: None,
            refusal: None,
            wall: None,
            user: None,
            rate: None,
        }
    }

    /// The wall clock at the `now` given to [`Self::new`]: a token's time
    /// is compared with it (advanced by the instants given since). Without
    /// it every token is stale.
    pub fn with_wall_clock(mut self, wall: SystemTime) -> ServerSession {
        self.wall = Some((self.progress_at, wall));
        self
    }

    // ---- inputs -------------------------------------------------------

    /// Bytes read from the control connection.
    pub fn handle_control(&mut self, now: Instant, data: &[u8]) {
        if self.is_finished() || data.is_empty() {
            return;
        }
        self.progress_at = now;
        if let Err(e) = self.input.push(data) {
            self.fail(e, Some(ierrno::IEMESSAGE));
            return;
        }
        if let Err((e, code)) = self.process(now) {
            self.fail(e, code);
        }
    }

    /// The control connection reached EOF (or failed, as `how` says).
    pub fn handle_control_eof(&mut self, _now: Instant, how: ControlEnd) {
        match self.phase {
            Phase::Done | Phase::Failed => {}
            // The client has every result once DISPLAY_RESULTS is out;
            // iperf3 servers also accept a close here.
            Phase::AwaitDone => {
                self.phase = Phase::Done;
                self.events.push_back(Event::Done);
            }
            p => self.fail(
                Error::ControlClosed {
                    phase: p.name(),
                    how,
                },
                None,
            ),
        }
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
        }
        self.note_progress(now);
        let all = self.progress_mark;
        if self.phase == Phase::Running {
            if let Some(r) = self.rate.as_mut() {
                if let Err(over) = r.sample(now, all) {
                    let limit = self.config.bitrate_limit.map_or(0, |l| l.bits_per_second);
                    self.fail(
                        Error::BitrateLimit {
                            bits_per_second: over.bits_per_second,
                            seconds: over.seconds,
                            limit,
                        },
                        Some(ierrno::IETOTALRATE),
                    );
                    return;
                }
            }
            if now >= self.progress_at + self.config.idle_timeout {
                self.fail(
                    Error::IdleTimeout {
                        idle: self.config.idle_timeout,
                        flag: self.config.idle_timeout_flag,
                    },
                    Some(ierrno::IENOMSG),
                );
            } else if self.hard_end.is_some_and(|t| now >= t) {
                self.fail(
                    Error::Timeout {
                        phase: self.phase.name(),
                    },
                    Some(ierrno::IENOMSG),
                );
            }
            return;
        }
        if self.deadline.is_some_and(|d| now >= d) {
            let code = (self.phase != Phase::Cookie).then_some(ierrno::IENOMSG);
            self.fail(
                Error::Timeout {
                    phase: self.phase.name(),
                },
                code,
            );
        }
    }

    /// A new connection arrived while [`Self::expects_streams`] is true and
    /// `cookie` is the first [`super::COOKIE_LEN`] bytes read from it. On
    /// `Err`, write [`super::ACCESS_DENIED_BYTE`] on it and close it; the
    /// test goes on.
    pub fn accept_stream(&mut self, now: Instant, cookie: &[u8]) -> Result<StreamInfo, Error> {
        if self.phase != Phase::CreateStreams {
            return Err(Error::NotAcceptingStreams);
        }
        let got = Cookie::parse(cookie)?;
        if Some(got) != self.cookie {
            return Err(Error::WrongCookie);
        }
        let id = StreamId::from_index(self.accepted);
        let role = self
            .table
            .streams
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.role)
            .ok_or(Error::NotAcceptingStreams)?;
        self.accepted += 1;
        if self.accepted as usize == self.table.streams.len() {
            self.start(now);
        }
        Ok(StreamInfo { id, role })
    }

    /// Bytes moved on data stream `id` (received on a receiving stream, sent
    /// on a sending one). Returns false for an id this test does not have.
    pub fn record_bytes(&mut self, id: StreamId, len: u64) -> bool {
        self.table.record(id, len)
    }

    /// A data connection of role `role` failed while the test ran: the
    /// test fails, and the client is told as iperf3's server's stream
    /// errors read (`IESTREAMWRITE` or `IESTREAMREAD`, with the errno:
    /// "unable to write to stream socket: Connection timed out").
    pub fn stream_failed(&mut self, role: Role, e: crate::tcp::ConnectionError) {
        use crate::tcp::ConnectionError as E;
        let code = match role {
            Role::Send => ierrno::IESTREAMWRITE,
            Role::Receive => ierrno::IESTREAMREAD,
        };
        let errno = match e {
            E::Reset => 104,   // ECONNRESET
            E::Refused => 111, // ECONNREFUSED
            E::TimedOut | E::UserTimeout | E::ConnectTimeout | E::ReceiveTimeout => 110, // ETIMEDOUT
        };
        self.fail_errno(Error::StreamFailed(e), Some(code), errno);
    }

    /// Call at `now` after [`ServerSession::record_bytes`]: the idle timeout
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

    /// After [`Event::TestEnd`]: the data connections are counted and
    /// closed (see [`Event::TestEnd`] for why closing matters); send the
    /// results exchange.
    pub fn end_test(&mut self, now: Instant, report: EndReport) -> Result<(), Error> {
        if self.phase != Phase::AwaitReport {
            return Err(Error::WrongPhase {
                call: "end_test",
                phase: self.phase.name(),
            });
        }
        self.report = Some(report);
        self.send_state(State::ExchangeResults);
        self.enter(Phase::ClientResults, now);
        // The client may have pipelined its results already.
        if let Err((e, code)) = self.process(now) {
            self.fail(e, code);
        }
        Ok(())
    }

    /// After [`Event::PeerResults`], when the client asked for the
    /// server's output (`--get-server-output`): sends our results with
    /// `output`, which the caller made with the client's results in, so
    /// that it counts both ends (iperf3's server writes its output before
    /// it has the client's results, and 0 for what only the client
    /// counted).
    pub fn send_server_output(&mut self, now: Instant, output: ServerOutput) -> Result<(), Error> {
        if self.phase != Phase::AwaitOutput {
            return Err(Error::WrongPhase {
                call: "send_server_output",
                phase: self.phase.name(),
            });
        }
        self.send_results(now, Some(output));
        // What the client sent meanwhile.
        if let Err((e, code)) = self.process(now) {
            self.fail(e, code);
        }
        Ok(())
    }

    /// Our results (with `output`) and `DISPLAY_RESULTS`.
    fn send_results(&mut self, now: Instant, output: Option<ServerOutput>) {
        let report = self.report.clone().unwrap_or_default();
        // The counted bytes' time (the omitted seconds left out).
        let elapsed = match (self.counted_from, self.ended) {
            (Some(s), Some(e)) => e.saturating_duration_since(s),
            _ => Duration::ZERO,
        };
        let mut mine = self.table.results(&report, elapsed);
        match output {
            Some(ServerOutput::Json(v)) => mine.server_output_json = Some(v),
            Some(ServerOutput::Text(t)) => mine.server_output_text = Some(t),
            None => {}
        }
        proto::encode_json(&mine.to_json(), &mut self.output);
        self.send_state(State::DisplayResults);
        self.enter(Phase::AwaitDone, now);
    }

    /// The server is shutting down: tell the client (`SERVER_TERMINATE`)
    /// and finish.
    pub fn terminate(&mut self, _now: Instant) {
        if self.is_finished() {
            return;
        }
        if self.phase != Phase::Cookie {
            self.send_state(State::ServerTerminate);
        }
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
        if self.is_finished() {
            return None;
        }
        if self.phase == Phase::Running {
            // At the idle deadline `handle_timeout` looks for data progress
            // and moves the deadline if there was some.
            let idle = self.progress_at + self.config.idle_timeout;
            let rate = self.rate.as_ref().map(RateWindow::deadline);
            return [Some(idle), self.hard_end, self.omit_end, rate]
                .into_iter()
                .flatten()
                .min();
        }
        [self.deadline, self.omit_end].into_iter().flatten().min()
    }

    // ---- getters ------------------------------------------------------

    /// True while new connections are data connections of this test.
    pub fn expects_streams(&self) -> bool {
        self.phase == Phase::CreateStreams
    }

    /// True once the test is done or failed: close the control connection.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Done | Phase::Failed)
    }

    /// The test's cookie, once read.
    pub fn cookie(&self) -> Option<&Cookie> {
        self.cookie.as_ref()
    }

    /// The client's parameters, once received and accepted.
    pub fn params(&self) -> Option<&TestParams> {
        self.params.as_ref()
    }

    /// Per-stream counters (empty before the parameters are in).
    pub fn streams(&self) -> &[StreamStats] {
        &self.table.streams
    }

    /// Bytes counted (omit period excluded) on this side's streams of `role`.
    pub fn counted_bytes(&self, role: Role) -> u64 {
        self.table.total(role)
    }

    /// When this side's counts began: the test's start, or with `-O` the
    /// end of the omitted seconds (`None` before then).
    pub fn counted_from(&self) -> Option<Instant> {
        self.counted_from
    }

    /// Retransmits counted on this side's sending streams.
    pub fn retransmits(&self) -> u64 {
        self.table
            .streams
            .iter()
            .filter(|s| s.role == Role::Send)
            .fold(0u64, |a, s| {
                a.saturating_add(s.counted_retransmits().unwrap_or(0))
            })
    }

    /// Why the test was refused at its parameters (or its token), if it was.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refusal
    }

    /// The user the token authenticated, with authentication configured.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    // ---- internals ----------------------------------------------------

    fn enter(&mut self, phase: Phase, now: Instant) {
        self.phase = phase;
        self.deadline = Some(now + self.config.handshake_timeout);
    }

    fn send_state(&mut self, s: State) {
        self.output.push(s.to_byte());
    }

    /// Ends the session; with `code`, tells the client (`SERVER_ERROR`).
    fn fail(&mut self, e: Error, code: Option<i32>) {
        self.fail_errno(e, code, 0);
    }

    /// [`ServerSession::fail`] with the `errno` that goes with `code`.
    fn fail_errno(&mut self, e: Error, code: Option<i32>, errno: i32) {
        if self.is_finished() {
            return;
        }
        if let Some(code) = code {
            self.send_state(State::ServerError);
            self.output.extend_from_slice(&code.to_be_bytes());
            self.output.extend_from_slice(&errno.to_be_bytes());
        }
        if self.phase == Phase::Cookie {
            // No iperf3 client: not a test that failed.
            self.refusal.get_or_insert(Refusal::NoCookie);
        }
        self.phase = Phase::Failed;
        self.events.push_back(Event::Error(e));
    }

    fn start(&mut self, now: Instant) {
        let Some(p) = self.params.clone() else { return };
        let omit = Duration::from_secs(u64::from(p.omit_secs));
        self.send_state(State::TestStart);
        self.send_state(State::TestRunning);
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
            self.hard_end = Some(
                now + omit + Duration::from_secs(u64::from(p.time_secs)) + self.config.end_grace,
            );
        }
        if let Some(limit) = self.config.bitrate_limit {
            self.rate = Some(RateWindow::new(limit, now, self.table.all_bytes()));
        }
        self.events.push_back(Event::StartTest {
            params: Box::new(p),
        });
    }

    /// With authentication configured, the parameters' token must pass
    /// (iperf3 checks it after the parameters, as here).
    fn authenticate(&mut self, p: &TestParams, now: Instant) -> Result<(), super::AuthError> {
        let Some(auth) = self.config.auth.clone() else {
            return Ok(());
        };
        let unix_now = self.wall.map_or(0, |(at, wall)| {
            let wall = wall + now.saturating_duration_since(at);
            match wall.duration_since(SystemTime::UNIX_EPOCH) {
                Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
            }
        });
        self.user = Some(auth.check(p.authtoken.as_deref(), unix_now)?);
        Ok(())
    }

    /// Consumes as much buffered input as the phase allows.
    fn process(&mut self, now: Instant) -> Result<(), (Error, Option<i32>)> {
        loop {
            match self.phase {
                Phase::Cookie => {
                    let Some(b) = self.input.take(proto::COOKIE_LEN) else {
                        return Ok(());
                    };
                    // Not an iperf3 peer: close without answering.
                    let cookie = Cookie::parse(b).map_err(|e| (e, None))?;
                    self.cookie = Some(cookie);
                    self.send_state(State::ParamExchange);
                    self.enter(Phase::Params, now);
                }
                Phase::Params => {
                    let map = match self.input.take_json(self.config.max_json_len) {
                        Ok(Some(m)) => m,
                        Ok(None) => return Ok(()),
                        Err(e) => {
                            self.refusal = Some(Refusal::Params);
                            return Err((e, Some(ierrno::IERECVPARAMS)));
                        }
                    };
                    let params = TestParams::from_json(&map).map_err(|e| {
                        self.refusal = Some(Refusal::Params);
                        (e, Some(ierrno::IERECVPARAMS))
                    })?;
                    params
                        .validate(self.config.max_streams)
                        .map_err(|(errno, reason)| {
                            self.refusal = Some(if errno == ierrno::IENUMSTREAMS {
                                Refusal::MaxStreams
                            } else {
                                Refusal::Params
                            });
                            (Error::Refused { errno, reason }, Some(errno))
                        })?;
                    self.config
                        .check_limits(&params)
                        .map_err(|(refusal, errno, reason)| {
                            self.refusal = Some(refusal);
                            (Error::Refused { errno, reason }, Some(errno))
                        })?;
                    // `-C NAME`: iperf3's server fails the test when its
                    // kernel lacks the algorithm; xtcp when its engine does.
                    if let Some(name) = params.congestion.as_deref() {
                        if crate::tcp::CongestionAlgorithm::from_name(name).is_none() {
                            self.refusal = Some(Refusal::Params);
                            let errno = ierrno::IESETCONGESTION;
                            return Err((
                                Error::Refused {
                                    errno,
                                    reason: format!(
                                        "-C {name}: xtcp has no such congestion control (it has {})",
                                        crate::tcp::CongestionAlgorithm::NAMES
                                    ),
                                },
                                Some(errno),
                            ));
                        }
                    }
                    self.authenticate(&params, now).map_err(|e| {
                        self.refusal = Some(Refusal::Auth);
                        (Error::Auth(e), Some(ierrno::IEAUTHTEST))
                    })?;
                    self.table = StreamTable::new(
                        params.parallel,
                        params.reverse,
                        params.bidirectional,
                        false,
                    );
                    self.events.push_back(Event::CreateStreams {
                        count: params.stream_count(),
                        reverse: params.reverse,
                        bidir: params.bidirectional,
                    });
                    self.params = Some(params);
                    self.send_state(State::CreateStreams);
                    self.enter(Phase::CreateStreams, now);
                }
                Phase::CreateStreams | Phase::Running | Phase::AwaitReport | Phase::AwaitDone => {
                    let Some(b) = self.input.take_byte() else {
                        return Ok(());
                    };
                    let state = decode_state(b).map_err(|e| (e, Some(ierrno::IEMESSAGE)))?;
                    match (self.phase, state) {
                        (_, State::ClientTerminate) => return Err((Error::ClientTerminated, None)),
                        // iperf3 servers ignore a TEST_START from the client.
                        (Phase::Running, State::TestStart) => {}
                        (Phase::Running, State::TestEnd) => {
                            self.phase = Phase::AwaitReport;
                            self.deadline = None;
                            self.ended = Some(now);
                            self.events.push_back(Event::TestEnd);
                        }
                        (Phase::AwaitDone, State::IperfDone) => {
                            self.phase = Phase::Done;
                            self.deadline = None;
                            self.events.push_back(Event::Done);
                            return Ok(());
                        }
                        // iperf3's client says IPERF_DONE as it leaves after
                        // an error of its own (a stream it could not set
                        // up, a failed write).
                        (p, State::IperfDone) => {
                            return Err((Error::ClientQuit { phase: p.name() }, None));
                        }
                        (p, s) => {
                            return Err((
                                Error::UnexpectedState {
                                    state: s,
                                    phase: p.name(),
                                },
                                Some(ierrno::IEMESSAGE),
                            ));
                        }
                    }
                }
                Phase::ClientResults => {
                    let map = match self.input.take_json(self.config.max_json_len) {
                        Ok(Some(m)) => m,
                        Ok(None) => return Ok(()),
                        Err(e) => return Err((e, Some(ierrno::IERECVRESULTS))),
                    };
                    let max = self.table.streams.len();
                    let peer = proto::Results::from_json(&map, max)
                        .and_then(|r| self.table.check_peer(&r).map(|()| r))
                        .map_err(|e| (e, Some(ierrno::IERECVRESULTS)))?;
                    self.events.push_back(Event::PeerResults(Box::new(peer)));
                    if self.params.as_ref().is_some_and(|p| p.get_server_output) {
                        // Our results go with the output the caller makes
                        // now that the client's are in.
                        self.enter(Phase::AwaitOutput, now);
                        return Ok(());
                    }
                    self.send_results(now, None);
                }
                // (Nothing comes before our results.)
                Phase::AwaitOutput | Phase::Done | Phase::Failed => return Ok(()),
            }
        }
    }
}
