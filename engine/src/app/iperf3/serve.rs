//! The iperf3 server on the engine: [`Iperf3Server`] is an engine
//! [`App`]: it runs in the engine's control thread and drives a
//! [`ServerSession`] for each test, while the workers carry the control and
//! data connections (over xtcp's own TCP) and move the data themselves:
//! receiving streams are counted and dropped, sending streams send random
//! bytes as iperf3's server does (paced to the client's `-b`), and only the
//! counts reach this thread.
//!
//! A connection's first 37 bytes (a cookie, or for the control connection
//! the cookie that opens the test) come here; [`route`] decides what it is:
//! the control connection of a new test (relayed both ways from then on), a
//! data stream of the current test (counted, or sending from `StartTest`
//! on), or refused with iperf3's access-denied byte. On `TestEnd` every data
//! stream is stopped, its last count collected, and closed before the
//! results go out. A test that fails for any reason (bad cookie, bad JSON,
//! stalled or closed control connection: see [`ServerSession`]) ends that
//! test only; the server serves the next one.
//!
//! Refusals, each reported to `on_test` as a [`TestOutcome`] with
//! `refused` set (and `result` the error):
//!
//! - a connection from an address the allow/deny lists refuse gets
//!   `SERVER_ERROR` with `IEAUTHTEST` ("test authorization failed": iperf3
//!   has no address lists; of the answers a stock client knows, this is the
//!   one that says "you may not") and `errno` `EACCES`, and is closed
//!   without being read;
//! - a second client while a test runs gets iperf3's access-denied byte, as
//!   from a stock `iperf3 -s` ("the server is busy running a test. try
//!   again later"): without being read while the test runs, or after its
//!   cookie is read while the test connects its streams (then a new
//!   connection looks like a data connection and its cookie tells them
//!   apart, as in iperf3);
//! - parameters out of range or above a limit, and a token that does not
//!   pass: see [`ServerSession`].
//!
//! [`Iperf3Server::set_reload`] hands over new configurations: each applies
//! from the next connection on, a running test keeps the one it began with.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender};

use super::connect::send_limit;
use super::limits::Refusal;
use super::meter::{Interval, Meter, RttSummary, StreamTcp};
use super::proto::Results;
use super::proto::{Cookie, DEFAULT_TCP_BLOCK_LEN, State, ierrno};
use super::streams::StreamId;
use super::{
    ACCESS_DENIED_BYTE, COOKIE_LEN, ControlEnd, EndReport, Error, Event, Role, Route,
    STREAM_FAIL_GRACE, ServerConfig, ServerOutput, ServerSession, StreamInfo, TestParams, cpu_util,
    route,
};
use crate::tcp::{CongestionAlgorithm, FourTuple};
use crate::worker::{
    App, AppIn, AppOut, CpuTimes, IpMarks, Payload, process_times, random_filler, repeating_pattern,
};

/// The order that starts a sending stream: paced to the client's `-b`
/// (iperf3's `bandwidth`, per stream), random bytes as iperf3's server
/// sends (a path that compresses gains nothing from them), or iperf3's
/// repeating pattern if the client asked (`--repeating-payload`), at no
/// per-byte cost after the first lap ([`Payload::Filler`]).
fn send_order(params: &TestParams, limit: Option<u64>, start: Instant) -> AppOut {
    let len = params.block_len.max(1) as usize;
    AppOut::Send {
        limit,
        rate: params.bandwidth.filter(|&r| r > 0),
        payload: Payload::Filler(if params.repeating_payload {
            repeating_pattern(len)
        } else {
            random_filler(len)
        }),
        start,
    }
}

/// `errno` sent with the refusal of a denied address (`EACCES`).
const DENIED_ERRNO: i32 = 13;

/// How a finished or refused test went.
#[derive(Debug, Clone)]
pub struct TestOutcome {
    /// The client's control connection (for a refusal, the refused
    /// connection).
    pub client: FourTuple,
    /// Ok, or why it failed or was refused.
    pub result: Result<(), Error>,
    /// Why the connection was refused before a test ran (`result` then
    /// holds the error); `None` for a test that ran, or failed for another
    /// reason (a limit that ends a running test is a failure, not a
    /// refusal).
    pub refused: Option<Refusal>,
    /// The user authentication admitted, if it is configured.
    pub user: Option<String>,
    /// The client's parameters, if it got that far.
    pub params: Option<TestParams>,
    /// Data streams.
    pub streams: usize,
    /// Bytes received on data streams (omit period included).
    pub received: u64,
    /// Bytes sent on data streams.
    pub sent: u64,
    /// Retransmitted segments, summed over the test's sending streams.
    pub retransmits: u64,
    /// Seconds from `StartTest` (or with `-O`, the end of the omitted
    /// seconds) to `TestEnd`: those of the counted bytes.
    pub seconds: f64,
    /// This process's CPU use over the test (what the client was sent).
    pub cpu: super::CpuUtil,
    /// The congestion control of the test's sending streams (of its
    /// receiving ones when it sent nothing), as the engine ran it.
    pub congestion: Option<&'static str>,
    /// The rate each sending stream was paced to (the client's `-b`), bits
    /// per second.
    pub pacing_rate: Option<u64>,
    /// Per data stream, in stream order.
    pub stream_outcomes: Vec<StreamOutcome>,
    /// The client's results (its counts, CPU, congestion control), once
    /// exchanged.
    pub peer: Option<Results>,
    /// The test's cookie, once the client sent it.
    pub cookie: Option<Cookie>,
}

/// One data stream of a test as the server saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamOutcome {
    /// iperf3's stream id.
    pub id: StreamId,
    /// The server's direction on it.
    pub role: Role,
    /// Its addresses.
    pub tuple: FourTuple,
    /// Bytes the server counted on it (omit period excluded).
    pub bytes: u64,
    /// Retransmitted segments (sending streams).
    pub retransmits: u64,
    /// RTT statistics (sending streams with samples).
    pub rtt: Option<RttSummary>,
    /// Its TCP over the test: largest windows, MSS, congestion control.
    pub tcp: StreamTcp,
}

/// A test whose streams are all connected, as it starts (for output such
/// as `iperf3 -s`'s "Accepted connection from …" lines).
#[derive(Debug, Clone)]
pub struct TestStart {
    /// The client's control connection.
    pub client: FourTuple,
    /// The data streams: id, the server's direction, addresses.
    pub streams: Vec<(StreamInfo, FourTuple)>,
    /// The client's parameters.
    pub params: TestParams,
    /// The test's cookie.
    pub cookie: Option<Cookie>,
}

impl TestOutcome {
    /// The outcome of a connection refused before it had a session.
    fn refused(client: FourTuple, refusal: Refusal, error: Error) -> TestOutcome {
        TestOutcome {
            client,
            result: Err(error),
            refused: Some(refusal),
            user: None,
            params: None,
            streams: 0,
            received: 0,
            sent: 0,
            retransmits: 0,
            seconds: 0.0,
            cpu: super::CpuUtil::default(),
            congestion: None,
            pacing_rate: None,
            stream_outcomes: Vec::new(),
            peer: None,
            cookie: None,
        }
    }

    /// Whether `iperf3 -s -1` would have counted this as its one test and
    /// exited (see [`Refusal::ends_one_off`]).
    pub fn ends_one_off(&self) -> bool {
        self.refused.is_none_or(Refusal::ends_one_off)
    }
}

#[derive(Debug)]
enum Kind {
    Cookie(Vec<u8>),
    Control,
    Data(StreamInfo),
    Refused,
}

#[derive(Debug)]
struct Conn {
    out: Sender<AppOut>,
    kind: Kind,
    tuple: FourTuple,
    /// Its congestion control (the engine's, or the test's `congestion`).
    congestion: &'static str,
}

#[derive(Debug)]
struct Test {
    session: ServerSession,
    ctrl: usize,
    client: FourTuple,
    data: Vec<usize>,
    running: bool,
    /// Data streams asked to stop, not yet stopped.
    stopping: Option<Vec<usize>>,
    started: Option<Instant>,
    ended: Option<Instant>,
    cpu_start: CpuTimes,
    result: Option<Result<(), Error>>,
    meter: Meter,
    cpu: super::CpuUtil,
    /// The congestion control the test's streams ran (see
    /// [`TestOutcome::congestion`]).
    congestion: Option<&'static str>,
    peer: Option<Results>,
    /// Data connections by connection id: stream id and addresses.
    stream_tuples: HashMap<usize, (StreamId, FourTuple)>,
    /// A data connection failed while the test ran: when, its role, and
    /// how. The test fails [`STREAM_FAIL_GRACE`] later, unless the client
    /// has ended it meanwhile (a client that ends a test may reset its
    /// data connections before its word on the control connection comes).
    stream_failed: Option<(Instant, Role, crate::tcp::ConnectionError)>,
}

/// Called when a test starts (its streams all connected).
pub type OnTestStart = Box<dyn FnMut(&TestStart)>;

/// Makes what a client asking `--get-server-output` gets.
pub type MakeServerOutput = Box<dyn FnMut(&TestOutcome) -> ServerOutput>;

/// The iperf3 server application.
pub struct Iperf3Server {
    config: ServerConfig,
    reload: Option<Receiver<ServerConfig>>,
    conns: HashMap<usize, Conn>,
    test: Option<Test>,
    interval: Option<Duration>,
    on_interval: Box<dyn FnMut(&Interval)>,
    on_test: Box<dyn FnMut(&TestOutcome)>,
    on_start: Option<OnTestStart>,
    server_output: Option<MakeServerOutput>,
    /// Since when no connection arrived and no test ran.
    idle_since: Option<Instant>,
    /// `exit_when_idle` and idle for its time.
    idle_done: bool,
}

impl std::fmt::Debug for Iperf3Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iperf3Server")
            .field("conns", &self.conns.len())
            .field("test", &self.test.is_some())
            .finish()
    }
}

impl Iperf3Server {
    /// A server; `on_interval` is called every `interval` while a test
    /// runs (None: never), `on_test` when a test ends.
    pub fn new(
        config: ServerConfig,
        interval: Option<Duration>,
        on_interval: Box<dyn FnMut(&Interval)>,
        on_test: Box<dyn FnMut(&TestOutcome)>,
    ) -> Iperf3Server {
        Iperf3Server {
            config,
            reload: None,
            conns: HashMap::new(),
            test: None,
            interval,
            on_interval,
            on_test,
            on_start: None,
            server_output: None,
            idle_since: None,
            idle_done: false,
        }
    }

    /// `f` is called when a test starts (all its streams connected).
    pub fn set_on_start(&mut self, f: OnTestStart) {
        self.on_start = Some(f);
    }

    /// `f` makes what a client that asked for the server's output
    /// (`--get-server-output`) gets back: called once the client's results
    /// are in, with the test as the server counted it and `peer` those
    /// results (`result` Ok). Without it, a line with the byte counts.
    pub fn set_server_output(&mut self, f: MakeServerOutput) {
        self.server_output = Some(f);
    }

    /// New configurations arrive on `rx` (a reload: limits, allow/deny,
    /// users): [`App::poll`] takes the latest; it applies from the next
    /// connection on, and a running test goes on under the configuration
    /// it started with.
    pub fn set_reload(&mut self, rx: Receiver<ServerConfig>) {
        self.reload = Some(rx);
    }

    /// The configuration new connections get.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    fn order(&self, id: usize, o: AppOut) {
        if let Some(c) = self.conns.get(&id) {
            let _ = c.out.try_send(o);
        }
    }

    /// Writes `answer`, closes, and reads nothing more from `id`.
    fn refuse_with(&mut self, id: usize, answer: Vec<u8>) {
        self.order(id, AppOut::Write(answer));
        self.order(id, AppOut::Close);
        if let Some(c) = self.conns.get_mut(&id) {
            c.kind = Kind::Refused;
        }
    }

    /// iperf3's access-denied byte, without an outcome (a stray data
    /// connection of the running test).
    fn refuse(&mut self, id: usize) {
        self.refuse_with(id, vec![ACCESS_DENIED_BYTE]);
    }

    /// A second client while a test runs: iperf3's busy answer.
    fn busy(&mut self, id: usize, tuple: FourTuple) {
        self.refuse(id);
        (self.on_test)(&TestOutcome::refused(tuple, Refusal::Busy, Error::Busy));
    }

    /// A client the allow/deny lists refuse.
    fn deny(&mut self, id: usize, tuple: FourTuple) {
        let mut answer = vec![State::ServerError.to_byte()];
        answer.extend_from_slice(&ierrno::IEAUTHTEST.to_be_bytes());
        answer.extend_from_slice(&DENIED_ERRNO.to_be_bytes());
        self.refuse_with(id, answer);
        let addr = tuple.remote.ip().to_canonical();
        (self.on_test)(&TestOutcome::refused(
            tuple,
            Refusal::Denied,
            Error::Denied { addr },
        ));
    }

    fn permits(&self, tuple: &FourTuple) -> bool {
        self.config.access.permits(tuple.remote.ip())
    }

    /// Collects the last counts before the results: once every stream has
    /// stopped, close them and hand the report to the session.
    fn finish_end(&mut self, now: Instant) {
        let Some(t) = self.test.as_mut() else {
            return;
        };
        if t.stopping.as_ref().is_none_or(|s| !s.is_empty()) {
            return;
        }
        t.stopping = None;
        // The last interval (it ended with the test) once the last counts
        // are in.
        for iv in t.meter.finish(now) {
            (self.on_interval)(&iv);
        }
        let data = std::mem::take(&mut t.data);
        // The algorithm the sending streams ran (iperf3 reports the
        // sender's), else the receiving ones'.
        let of = |want: Role| {
            data.iter().find_map(|id| match self.conns.get(id) {
                Some(Conn {
                    kind: Kind::Data(i),
                    congestion,
                    ..
                }) if i.role == want => Some(*congestion),
                _ => None,
            })
        };
        t.congestion = of(Role::Send).or_else(|| of(Role::Receive));
        let cpu = cpu_util(t.cpu_start, t.started, now);
        t.cpu = cpu;
        let mut report = EndReport::engine(cpu);
        // The algorithm the streams ran as the engine reports it, else as
        // their counts carried it.
        report.congestion_used = t
            .congestion
            .or(t.meter.congestion(Role::Send))
            .or(t.meter.congestion(Role::Receive))
            .map(str::to_owned);
        if let Err(e) = t.session.end_test(now, report) {
            t.result.get_or_insert(Err(e));
        }
        for id in data {
            self.order(id, AppOut::Close);
        }
    }

    fn events(&mut self, now: Instant) {
        loop {
            let Some(t) = self.test.as_mut() else {
                return;
            };
            if let Some(bytes) = t.session.poll_transmit() {
                let ctrl = t.ctrl;
                self.order(ctrl, AppOut::Write(bytes));
                continue;
            }
            let Some(ev) = t.session.poll_event() else {
                break;
            };
            match ev {
                Event::CreateStreams { .. } => {}
                Event::PeerResults(r) => {
                    t.peer = Some(*r);
                    // The client asked for our output: made now that the
                    // client's counts are in, so that it has both ends'.
                    if t.session.params().is_some_and(|p| p.get_server_output) {
                        let snapshot = Self::outcome_of(t, now, Ok(()));
                        let output = match self.server_output.as_mut() {
                            Some(f) => f(&snapshot),
                            None => ServerOutput::Text(format!(
                                "xtcp serve: {} bytes received, {} sent\n",
                                snapshot.received, snapshot.sent
                            )),
                        };
                        if let Err(e) = t.session.send_server_output(now, output) {
                            t.result.get_or_insert(Err(e));
                        }
                    }
                }
                Event::StartTest { params } => {
                    t.running = true;
                    t.started = Some(now);
                    t.cpu_start = process_times();
                    let senders: Vec<usize> = t
                        .data
                        .iter()
                        .copied()
                        .filter(|id| {
                            matches!(self.conns.get(id).map(|c| &c.kind),
                                Some(Kind::Data(i)) if i.role == Role::Send)
                        })
                        .collect();
                    let infos: Vec<StreamInfo> = t
                        .data
                        .iter()
                        .filter_map(|id| match self.conns.get(id).map(|c| &c.kind) {
                            Some(Kind::Data(i)) => Some(*i),
                            _ => None,
                        })
                        .collect();
                    // Each sending stream's `-n`/`-k` share. With `-O`, none:
                    // the client counts what it receives from a moment of
                    // its own (stock iperf3 from the start, xtcp after the
                    // omitted seconds, which end here a little earlier), and
                    // a share spent short of its count would leave the test
                    // hanging; it ends the test (as against iperf3's server,
                    // which sends until then in any case).
                    let share = |id: usize| match self.conns.get(&id).map(|c| &c.kind) {
                        Some(Kind::Data(i)) if params.omit_secs == 0 => {
                            send_limit(&params, &infos, i.id)
                        }
                        _ => None,
                    };
                    let shares: Vec<(usize, Option<u64>)> =
                        senders.iter().map(|&id| (id, share(id))).collect();
                    t.meter
                        .start(now, &infos, Duration::from_secs(params.omit_secs.into()));
                    if let Some(f) = self.on_start.as_mut() {
                        let mut streams: Vec<(StreamInfo, FourTuple)> = t
                            .stream_tuples
                            .values()
                            .map(|&(sid, tu)| {
                                let info = infos.iter().find(|i| i.id == sid).copied();
                                (
                                    info.unwrap_or(StreamInfo {
                                        id: sid,
                                        role: Role::Receive,
                                    }),
                                    tu,
                                )
                            })
                            .collect();
                        streams.sort_by_key(|(i, _)| i.id);
                        f(&TestStart {
                            client: t.client,
                            streams,
                            params: (*params).clone(),
                            cookie: t.session.cookie().copied(),
                        });
                    }
                    for (id, limit) in shares {
                        self.order(id, send_order(&params, limit, now));
                    }
                }
                Event::TestEnd => {
                    t.running = false;
                    t.ended = Some(now);
                    t.meter.end_at(now);
                    let data = t.data.clone();
                    t.stopping = Some(data.clone());
                    for id in data {
                        self.order(id, AppOut::Stop);
                    }
                    self.finish_end(now);
                }
                Event::Done => {
                    t.result.get_or_insert(Ok(()));
                }
                Event::Error(e) => {
                    t.result.get_or_insert(Err(e));
                }
            }
        }
        if self.test.as_ref().is_some_and(|t| t.session.is_finished()) {
            self.end(now);
        }
    }

    /// The test is over: close what is left, report, forget it.
    ///
    /// Its data connections are reset, but where this server was
    /// interrupted: then they are stopped (what still comes is taken and
    /// dropped, uncounted) and closed, so that the client reads the control
    /// connection's last word (`SERVER_TERMINATE`) before a write of its
    /// meets a reset.
    fn end(&mut self, now: Instant) {
        let Some(mut t) = self.test.take() else {
            return;
        };
        let gently = matches!(t.result, Some(Err(Error::ServerInterrupted)));
        self.idle_since = Some(now);
        if t.running {
            // Ended while it ran (interrupted, its client gone, a limit):
            // its last interval ends now, as the test.
            t.running = false;
            t.ended = Some(now);
            t.cpu = cpu_util(t.cpu_start, t.started, now);
            t.meter.end_at(now);
            for iv in t.meter.finish(now) {
                (self.on_interval)(&iv);
            }
        }
        self.order(t.ctrl, AppOut::Close);
        for &id in &t.data {
            if gently {
                self.order(id, AppOut::Stop);
                self.order(id, AppOut::Close);
            } else {
                self.order(id, AppOut::Abort);
            }
        }
        // A finished session has always sent `Done` or `Error`, so the
        // default is not reached; it says what the session last saw.
        let result = t.result.clone().unwrap_or(Err(Error::ControlClosed {
            phase: "ending",
            how: ControlEnd::Closed,
        }));
        let outcome = Self::outcome_of(&t, now, result);
        (self.on_test)(&outcome);
    }

    /// The test as it stands at `now`, with `result`.
    fn outcome_of(t: &Test, now: Instant, result: Result<(), Error>) -> TestOutcome {
        let tuples: HashMap<StreamId, FourTuple> = t.stream_tuples.values().copied().collect();
        let stream_outcomes = t
            .session
            .streams()
            .iter()
            .map(|s| StreamOutcome {
                id: s.id,
                role: s.role,
                tuple: tuples.get(&s.id).copied().unwrap_or(t.client),
                bytes: s.counted_bytes(),
                retransmits: s.counted_retransmits().unwrap_or(0),
                rtt: t.meter.rtt(s.id),
                tcp: t.meter.tcp(s.id).unwrap_or_default(),
            })
            .collect();
        TestOutcome {
            client: t.client,
            result,
            refused: t.session.refusal(),
            user: t.session.user().map(str::to_owned),
            params: t.session.params().cloned(),
            streams: t.session.streams().len(),
            received: t.session.counted_bytes(Role::Receive),
            sent: t.session.counted_bytes(Role::Send),
            retransmits: t.session.retransmits(),
            // A test that did not reach TEST_END (ended by a limit, its
            // client gone) ran until now.
            // From the end of `-O`'s omitted seconds, as the counts.
            seconds: match (t.session.counted_from(), t.ended.unwrap_or(now)) {
                (Some(a), b) => b.saturating_duration_since(a).as_secs_f64(),
                (None, _) => 0.0,
            },
            cpu: t.cpu,
            // As the end of a test sets it; for one ended early (a limit,
            // its client gone), as the streams' counts carried it.
            congestion: t
                .congestion
                .or(t.meter.congestion(Role::Send))
                .or(t.meter.congestion(Role::Receive)),
            pacing_rate: t
                .session
                .params()
                .filter(|p| p.reverse || p.bidirectional)
                .and_then(|p| p.bandwidth)
                .filter(|&r| r > 0),
            stream_outcomes,
            peer: t.peer.clone(),
            cookie: t.session.cookie().copied(),
        }
    }
}

impl App for Iperf3Server {
    fn handle(&mut self, now: Instant, msg: AppIn) {
        match msg {
            AppIn::Opened {
                id,
                tuple,
                out,
                congestion,
                ..
            } => {
                self.idle_since = Some(now);
                let r = route(self.test.as_ref().map(|t| &t.session));
                self.conns.insert(
                    id,
                    Conn {
                        out,
                        kind: Kind::Cookie(Vec::with_capacity(COOKIE_LEN)),
                        tuple,
                        congestion,
                    },
                );
                match r {
                    Route::Control | Route::Refuse if !self.permits(&tuple) => {
                        self.deny(id, tuple);
                    }
                    Route::Control => {
                        self.test = Some(Test {
                            session: ServerSession::new(self.config.clone(), now)
                                .with_wall_clock(SystemTime::now()),
                            ctrl: id,
                            client: tuple,
                            data: Vec::new(),
                            running: false,
                            stopping: None,
                            started: None,
                            ended: None,
                            cpu_start: process_times(),
                            result: None,
                            meter: Meter::new(self.interval),
                            cpu: super::CpuUtil::default(),
                            congestion: None,
                            peer: None,
                            stream_tuples: HashMap::new(),
                            stream_failed: None,
                        });
                        if let Some(c) = self.conns.get_mut(&id) {
                            c.kind = Kind::Control;
                        }
                        self.order(id, AppOut::Relay);
                    }
                    Route::Data => {}
                    Route::Refuse => self.busy(id, tuple),
                }
            }
            AppIn::Data { id, bytes } => {
                let Some(c) = self.conns.get_mut(&id) else {
                    return;
                };
                match &mut c.kind {
                    Kind::Control => {
                        if let Some(t) = self.test.as_mut().filter(|t| t.ctrl == id) {
                            t.session.handle_control(now, &bytes);
                        }
                    }
                    Kind::Cookie(buf) => {
                        buf.extend_from_slice(&bytes);
                        if buf.len() < COOKIE_LEN {
                            return;
                        }
                        let cookie = std::mem::take(buf);
                        let accepted = match self.test.as_mut() {
                            Some(t) if t.session.expects_streams() => {
                                t.session.accept_stream(now, &cookie).ok()
                            }
                            _ => None,
                        };
                        match accepted {
                            Some(info) => {
                                c.kind = Kind::Data(info);
                                let running = self.test.as_ref().is_some_and(|t| t.running);
                                let mut window = None;
                                let mut congestion = None;
                                let mut tos = None;
                                let mut fq_rate = None;
                                if let Some(t) = self.test.as_mut() {
                                    t.data.push(id);
                                    t.stream_tuples.insert(id, (info.id, c.tuple));
                                    window = t.session.params().and_then(|p| p.window);
                                    tos = t.session.params().and_then(|p| p.tos);
                                    fq_rate = t.session.params().and_then(|p| p.fq_rate);
                                    congestion = t
                                        .session
                                        .params()
                                        .and_then(|p| p.congestion.as_deref())
                                        .and_then(CongestionAlgorithm::from_name);
                                }
                                // iperf3's `-w`: the receive window of every
                                // data connection.
                                if let Some(w) = window {
                                    self.order(id, AppOut::Window(w as usize));
                                }
                                // iperf3's `-S`/`--dscp`: the TOS byte (IPv6
                                // traffic class) of every data connection's
                                // packets. Its `-L` goes unused, as by a stock
                                // server (which sets it on its own connects only).
                                if let Some(tos) = tos {
                                    self.order(
                                        id,
                                        AppOut::Marks(IpMarks {
                                            tos: tos as u8,
                                            flow_label: 0,
                                        }),
                                    );
                                }
                                // iperf3's `--fq-rate` (bits a second): the most
                                // each data connection is paced at.
                                if let Some(r) = fq_rate {
                                    self.order(id, AppOut::MaxPacingRate(r / 8));
                                }
                                // iperf3's `-C`: the test's congestion control
                                // on every data connection (the session refused
                                // a name xtcp lacks).
                                if let Some(algo) = congestion {
                                    self.order(id, AppOut::Congestion(algo));
                                    if let Some(c) = self.conns.get_mut(&id) {
                                        c.congestion = algo.name();
                                    }
                                }
                                match info.role {
                                    Role::Receive => self.order(id, AppOut::Count),
                                    // A stream that arrives after the start (never
                                    // with iperf3) sends without a limit.
                                    Role::Send if running => {
                                        let test = self.test.as_ref();
                                        let start = test.and_then(|t| t.started).unwrap_or(now);
                                        let order = match test.and_then(|t| t.session.params()) {
                                            Some(p) => send_order(p, None, start),
                                            None => AppOut::Send {
                                                limit: None,
                                                rate: None,
                                                payload: Payload::Filler(random_filler(
                                                    DEFAULT_TCP_BLOCK_LEN as usize,
                                                )),
                                                start,
                                            },
                                        };
                                        self.order(id, order)
                                    }
                                    // Sends from StartTest on.
                                    Role::Send => self.order(id, AppOut::Count),
                                }
                            }
                            None => {
                                // The test's own cookie: a connection too
                                // many of the test itself. Another one: a
                                // second client.
                                let tuple = c.tuple;
                                let own = self.test.as_ref().and_then(|t| t.session.cookie())
                                    == Cookie::parse(&cookie).ok().as_ref();
                                if own {
                                    self.refuse(id);
                                } else if !self.permits(&tuple) {
                                    self.deny(id, tuple);
                                } else {
                                    self.busy(id, tuple);
                                }
                            }
                        }
                    }
                    Kind::Data(_) | Kind::Refused => {}
                }
            }
            AppIn::Eof { id } => {
                if let Some(t) = self.test.as_mut().filter(|t| t.ctrl == id) {
                    t.session.handle_control_eof(now, ControlEnd::Closed);
                }
            }
            AppIn::Count {
                id,
                bytes,
                retransmits,
                rtt,
                tcp,
            } => {
                if let (
                    Some(Conn {
                        kind: Kind::Data(info),
                        ..
                    }),
                    Some(t),
                ) = (self.conns.get(&id), self.test.as_mut())
                {
                    if t.data.contains(&id) || t.stopping.as_ref().is_some_and(|s| s.contains(&id))
                    {
                        t.session.record_bytes(info.id, bytes);
                        t.session.note_progress(now);
                        if info.role == Role::Send {
                            // Counts carry the retransmits since the last.
                            t.session.add_retransmits(info.id, retransmits);
                        }
                        t.meter.count(info.id, bytes, retransmits, rtt);
                        t.meter.sample(info.id, &tcp);
                    }
                }
            }
            AppIn::Stopped { id } => {
                if let Some(s) = self.test.as_mut().and_then(|t| t.stopping.as_mut()) {
                    s.retain(|&x| x != id);
                }
                self.finish_end(now);
            }
            AppIn::Closed { id, reason } => {
                let gone = self.conns.remove(&id);
                if let Some(t) = self.test.as_mut() {
                    if t.ctrl == id && !t.session.is_finished() {
                        t.session.handle_control_eof(now, reason.into());
                    }
                    // A data connection that fails while the test runs
                    // (reset, timed out) fails the test, as a stream's
                    // failed read or write fails iperf3's server's (in
                    // `poll`).
                    if let (Some(Kind::Data(info)), crate::tcp::CloseReason::Error(e)) =
                        (gone.map(|c| c.kind), reason)
                        && t.running
                        && t.stopping.is_none()
                        && t.data.contains(&id)
                    {
                        t.stream_failed.get_or_insert((now, info.role, e));
                    }
                    if let Some(s) = t.stopping.as_mut() {
                        s.retain(|&x| x != id);
                    }
                }
                self.finish_end(now);
            }
        }
        self.events(now);
    }

    fn poll(&mut self, now: Instant) {
        if let Some(rx) = &self.reload {
            // The latest wins.
            while let Ok(c) = rx.try_recv() {
                self.config = c;
            }
        }
        if self.test.is_none()
            && let Some(idle) = self.config.exit_when_idle
        {
            let since = *self.idle_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= idle {
                self.idle_done = true;
            }
        }
        if let Some(t) = self.test.as_mut() {
            if let Some((at, role, e)) = t.stream_failed
                && now >= at + STREAM_FAIL_GRACE
            {
                t.stream_failed = None;
                t.session.stream_failed(role, e);
            }
            if t.session.poll_timeout().is_some_and(|d| now >= d) {
                t.session.handle_timeout(now);
            }
            if let Some(at) = t.session.counted_from() {
                t.meter.end_omit(at);
            }
        }
        self.events(now);
        if let Some(t) = self.test.as_mut().filter(|t| t.running) {
            while let Some(iv) = t.meter.poll(now) {
                (self.on_interval)(&iv);
            }
        }
    }

    fn finished(&self) -> bool {
        self.idle_done
    }

    /// As iperf3's server on Ctrl-C: a test under way is told
    /// (`SERVER_TERMINATE`, which its client reports as "the server has
    /// terminated", with what it counted until then), and reported with
    /// what was counted until now, the error [`Error::ServerInterrupted`].
    /// Its data connections are closed, not reset (iperf3's server exits
    /// with them open, and the kernel resets them): a client writing then
    /// reads the server's word instead of failing on a reset.
    fn interrupt(&mut self, now: Instant) {
        let Some(t) = self.test.as_mut() else {
            return;
        };
        t.session.terminate(now);
        t.result = Some(Err(Error::ServerInterrupted));
        self.events(now);
        self.end(now);
    }
}
