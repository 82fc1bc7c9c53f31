//! iperf3's TCP test protocol, sans-IO: a [`ServerSession`] that a stock
//! `iperf3 -c` can test against, and a [`ClientSession`] that tests against a
//! stock `iperf3 -s` (3.12 and newer).
//!
//! Neither session touches a socket or reads a clock. The caller (the xtcp
//! engine, or a test driver over kernel sockets) owns the control connection,
//! the data connections and the time; a session consumes bytes read from the
//! control connection and produces bytes to write on it, events, and a
//! deadline. Data bytes never pass through a session: the caller moves them
//! and reports the counts with `record_bytes`, which the session turns into
//! iperf3's results exchange.
//!
//! # Call order (both sessions)
//!
//! 1. Create the session with the current time (`ServerSession::new` when a
//!    connection arrives and no test is running; `ClientSession::new` after
//!    the control connection is established).
//! 2. Loop until [`ServerSession::is_finished`] / [`ClientSession::is_finished`]:
//!    - inputs: `handle_control(now, bytes)` for every read from the control
//!      connection, `handle_control_eof(now, how)` when it reads EOF or fails
//!      ([`ControlEnd`] says which),
//!      `handle_timeout(now)` once `poll_timeout()` has passed;
//!    - outputs, after every input: write everything `poll_transmit()`
//!      returns, in order, then act on every `poll_event()`;
//!    - data: `record_bytes(id, len)` whenever a data connection moved
//!      bytes, then `note_progress(now)` (the idle timeout counts from it).
//! 3. Close the control connection once the session is finished (after the
//!    last `poll_transmit`).
//!
//! Events, in the order a good test produces them: [`Event::CreateStreams`]
//! → [`Event::StartTest`] → [`Event::TestEnd`] (stop sending; the server
//! also closes the data connections; then call `end_test(now, report)`) →
//! [`Event::PeerResults`] → [`Event::Done`].
//! [`Event::Error`] can come at any point and is always the last event.
//!
//! # Data connections
//!
//! - Server: [`route`] says what a new connection on the port is. While
//!   [`ServerSession::expects_streams`] is true, every new connection is a
//!   data connection: read [`COOKIE_LEN`] bytes from it and call
//!   [`ServerSession::accept_stream`]. On `Err`, write [`ACCESS_DENIED_BYTE`]
//!   and close it (the test goes on, as in iperf3). A new connection that
//!   arrives while a session exists but does not expect streams gets
//!   [`ACCESS_DENIED_BYTE`] and is closed without being read.
//! - Client: on [`Event::CreateStreams`], open the connections listed by
//!   [`ClientSession::streams`] *one after another, in order*, writing
//!   [`ClientSession::cookie`] first on each: the server assigns stream ids and
//!   directions in the order it accepts them.
//!
//! # Robustness
//!
//! Input is untrusted: a bad cookie, an unknown or out-of-place state byte, a
//! length prefix above the configured maximum, invalid JSON or parameters
//! out of range end the session with [`Event::Error`]; nothing panics. The
//! input buffer holds at most the largest JSON message allowed plus a few
//! bytes; the output holds at most one results document (its size bounded by
//! the stream count) and a few state bytes, as long as the caller drains
//! `poll_transmit`. Every phase that waits on the peer has a deadline; the
//! phase that waits on the caller (after [`Event::TestEnd`], until
//! `end_test`) has none.

mod access;
mod auth;
mod client;
mod connect;
mod limits;
mod meter;
mod proto;
mod serve;
mod server;
mod streams;

use std::time::Duration;

pub use access::{AccessList, Cidr, CidrError, parse_cidr_list};
pub use auth::{
    AuthConfigError, AuthError, Authenticator, Credentials, DEFAULT_TIME_SKEW, client_token,
    password_hash,
};
pub use client::{ClientConfig, ClientSession};
pub use connect::{ClientOutcome, ClientStart, Iperf3Client, OnStart};
pub use limits::{
    BITRATE_WINDOW_RANGE, BitrateLimit, BitrateLimitError, DEFAULT_BITRATE_WINDOW,
    RATE_SAMPLE_PERIOD, Refusal, parse_bitrate_limit,
};
pub use meter::{Interval, RttSummary, StreamInterval, StreamTcp};
pub use proto::{
    ACCESS_DENIED_BYTE, COOKIE_LEN, Cookie, DEFAULT_TCP_BLOCK_LEN, MAX_BLOCK_LEN, MAX_OMIT_SECS,
    MAX_TIME_SECS, Protocol, Results, State, StreamResult, TestParams, ierrno,
};
pub use serve::{
    Iperf3Server, MakeServerOutput, OnTestStart, StreamOutcome, TestOutcome, TestStart,
};
pub use server::{Route, ServerConfig, ServerOutput, ServerSession, route};
pub use streams::{Role, StreamId, StreamInfo, StreamStats};

/// Why a session ended early, or why a call was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("bad cookie (expected 36 printable ASCII characters and a NUL)")]
    BadCookie,
    #[error("cookie does not belong to this test")]
    WrongCookie,
    #[error("unknown state byte {0:#04x}")]
    UnknownState(u8),
    #[error("state {state:?} is not valid while {phase}")]
    UnexpectedState { state: State, phase: &'static str },
    #[error("JSON message of {len} bytes exceeds the limit of {max}")]
    MessageTooLong { len: usize, max: usize },
    #[error("control input buffer full ({max} bytes)")]
    BufferFull { max: usize },
    #[error("invalid JSON: {0}")]
    BadJson(String),
    #[error("invalid parameters: {0}")]
    BadParams(String),
    #[error("parameters refused (iperf3 error {errno}): {reason}")]
    Refused { errno: i32, reason: String },
    #[error("invalid results: {0}")]
    BadResults(String),
    #[error("results name stream {0}, which this test does not have")]
    UnknownStream(u32),
    #[error("control connection closed while {phase} ({how})")]
    ControlClosed {
        phase: &'static str,
        how: ControlEnd,
    },
    #[error("timed out while {phase}")]
    Timeout { phase: &'static str },
    /// The server sent `SERVER_TERMINATE` (it was interrupted), in
    /// iperf3's words.
    #[error("the server has terminated")]
    ServerTerminated,
    /// The client sent `CLIENT_TERMINATE` (it was interrupted), in iperf3's
    /// words.
    #[error("the client has terminated")]
    ClientTerminated,
    /// The client sent `IPERF_DONE` before the test was over: iperf3's
    /// client leaves so after an error of its own.
    #[error("the client ended the test while {phase} (IPERF_DONE): an error on its side")]
    ClientQuit { phase: &'static str },
    /// This side was interrupted (SIGINT or SIGTERM) and ended the test
    /// (`CLIENT_TERMINATE`), as iperf3's client on Ctrl-C.
    #[error("interrupt - the client has terminated")]
    Interrupted,
    /// This server was interrupted (SIGINT or SIGTERM) while a test ran,
    /// and told the client (`SERVER_TERMINATE`), as iperf3's server.
    #[error("interrupt - the server has terminated")]
    ServerInterrupted,
    #[error("the server refused the test (busy)")]
    AccessDenied,
    #[error("the server reported error {i_errno} (errno {errno}){}",
            proto::ierrno::message(*i_errno).map_or_else(String::new, |m| format!(": {m}")))]
    ServerError { i_errno: i32, errno: i32 },
    #[error("not accepting data streams now")]
    NotAcceptingStreams,
    #[error("`{call}` is not valid while {phase}")]
    WrongPhase {
        call: &'static str,
        phase: &'static str,
    },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("refused: client {addr} is not allowed (the server's allow/deny lists)")]
    Denied { addr: std::net::IpAddr },
    #[error("refused: the server is busy running a test")]
    Busy,
    #[error("refused: authentication failed: {0}")]
    Auth(AuthError),
    #[error(
        "ended by the server's bitrate limit: {bits_per_second} bit/s in both directions over \
         the last {seconds} s, limit {limit} bit/s"
    )]
    BitrateLimit {
        bits_per_second: u64,
        seconds: f64,
        limit: u64,
    },
    /// `flag`: the option that sets it.
    #[error("ended by the idle timeout ({flag}): no data or control progress for {} s",
            .idle.as_secs_f64())]
    IdleTimeout { idle: Duration, flag: &'static str },
    /// A data connection failed while the test ran.
    #[error("a data connection failed: {0}")]
    StreamFailed(crate::tcp::ConnectionError),
}

impl Error {
    /// A client's test that ended this way has its summary (iperf3's
    /// client prints one when the server or an interrupt ended the test),
    /// and both ends close in order; after any other error the client
    /// leaves at once.
    pub fn is_orderly_end(&self) -> bool {
        matches!(self, Error::ServerTerminated | Error::Interrupted)
    }
}

/// How the control connection ended, as the caller's transport saw it:
/// part of [`Error::ControlClosed`], so that a user reads whether the peer
/// closed it, reset it or stopped answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ControlEnd {
    /// The peer closed it in order (a FIN).
    #[error("the peer closed it")]
    Closed,
    /// The peer reset it (an RST).
    #[error("reset by the peer")]
    Reset,
    /// Retransmissions went unacknowledged until the transport gave up.
    #[error("timed out: the peer stopped acknowledging")]
    TimedOut,
    /// The connection request was answered with an RST.
    #[error("connection refused: is an iperf3 server listening there?")]
    Refused,
    /// The connection request went unanswered.
    #[error("no answer to the connection request")]
    NoAnswer,
    /// This side aborted it.
    #[error("aborted by this side")]
    Aborted,
}

impl From<crate::tcp::CloseReason> for ControlEnd {
    /// How the engine's TCP reports the end of a connection.
    fn from(r: crate::tcp::CloseReason) -> Self {
        use crate::tcp::{CloseReason, ConnectionError};
        match r {
            CloseReason::Normal => ControlEnd::Closed,
            CloseReason::Aborted => ControlEnd::Aborted,
            CloseReason::Error(ConnectionError::Reset) => ControlEnd::Reset,
            CloseReason::Error(
                ConnectionError::TimedOut
                | ConnectionError::UserTimeout
                | ConnectionError::ReceiveTimeout,
            ) => ControlEnd::TimedOut,
            CloseReason::Error(ConnectionError::Refused) => ControlEnd::Refused,
            CloseReason::Error(ConnectionError::ConnectTimeout) => ControlEnd::NoAnswer,
        }
    }
}

/// What the session asks of its caller.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Server: expect `count` data connections. Client: open them now (see
    /// the module doc). `reverse`: the server sends; `bidir`: both do.
    CreateStreams {
        count: u32,
        reverse: bool,
        bidir: bool,
    },
    /// All data connections are up: start moving data (sending streams send
    /// blocks of `params.block_len`, receiving streams read).
    StartTest { params: Box<TestParams> },
    /// The test is over: stop sending, then call `end_test` with this side's
    /// report.
    ///
    /// - Server: read what already arrived, then *close every data
    ///   connection* before writing what `end_test` queues
    ///   (`EXCHANGE_RESULTS`), as iperf3's server does on `TEST_END`. In
    ///   reverse mode iperf3's client (3.12 at least) makes its data sockets
    ///   blocking after it writes `TEST_END` and keeps reading them a whole
    ///   block at a time, at offsets that need not match the blocks written;
    ///   it reads the control connection again only once such a read
    ///   returns, so a server that merely stops sending hangs it.
    /// - Client: keep reading until the server closes the data connections
    ///   (iperf3's server closes them on `TEST_END`).
    TestEnd,
    /// The peer's results arrived.
    PeerResults(Box<Results>),
    /// The test completed; the control connection can be closed.
    Done,
    /// The test failed; close the control connection (after writing what
    /// `poll_transmit` still returns) and every data connection.
    Error(Error),
}

/// What the caller measured besides byte counts, given to `end_test`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EndReport {
    /// CPU utilisation of this side over the test, percent.
    pub cpu_util_total: f64,
    pub cpu_util_user: f64,
    pub cpu_util_system: f64,
    /// Whether retransmits were counted (via `record_retransmits`) on sending streams.
    pub sender_has_retransmits: bool,
    /// Congestion control algorithm used, if known.
    pub congestion_used: Option<String>,
}

/// CPU utilisation over a test, in percent of one core, split as iperf3
/// reports it (`cpu_utilization_percent`: total = user + system).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuUtil {
    /// User + system.
    pub total: f64,
    /// In user space.
    pub user: f64,
    /// In the kernel on this process's behalf.
    pub system: f64,
}

/// This process's CPU use since `cpu_start` (from
/// [`crate::worker::process_times`]) over the wall time since `started`;
/// zero before a start.
pub(crate) fn cpu_util(
    cpu_start: crate::worker::CpuTimes,
    started: Option<std::time::Instant>,
    now: std::time::Instant,
) -> CpuUtil {
    let wall = started.map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64());
    if wall > 0.0 {
        let d = crate::worker::process_times().since(cpu_start);
        CpuUtil {
            total: d.total() / wall * 100.0,
            user: d.user / wall * 100.0,
            system: d.system / wall * 100.0,
        }
    } else {
        CpuUtil::default()
    }
}

impl EndReport {
    /// The report of an engine side: CPU as [`cpu_util`] measures it,
    /// retransmits counted on sending streams.
    pub(crate) fn engine(util: CpuUtil) -> EndReport {
        EndReport {
            cpu_util_total: util.total,
            cpu_util_user: util.user,
            cpu_util_system: util.system,
            sender_has_retransmits: true,
            congestion_used: None,
        }
    }
}

/// Default time a peer may take for each handshake step.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Default time without any progress (data or control) before a running
/// test is abandoned; iperf3's `DEFAULT_NO_MSG_RCVD_TIMEOUT` is 120 s.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a data connection that failed while its test ran waits for
/// the peer's word on the control connection before it fails the test
/// itself: a peer that ends a test resets the data connections, and its
/// message (`SERVER_TERMINATE`, `CLIENT_TERMINATE`) may come after.
const STREAM_FAIL_GRACE: Duration = Duration::from_millis(200);

/// Default largest JSON message accepted.
pub const DEFAULT_MAX_JSON_LEN: usize = 64 * 1024;

/// Bounded control-connection input: bytes are appended by `push` and
/// consumed from the front by the `take_*` methods.
#[derive(Debug)]
struct ControlIn {
    buf: Vec<u8>,
    start: usize,
    max: usize,
}

impl ControlIn {
    fn new(max_json_len: usize) -> Self {
        ControlIn {
            buf: Vec::new(),
            start: 0,
            max: max_json_len.saturating_add(64),
        }
    }

    fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    fn push(&mut self, data: &[u8]) -> Result<(), Error> {
        if self.len().saturating_add(data.len()) > self.max {
            return Err(Error::BufferFull { max: self.max });
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.len() < n {
            return None;
        }
        let s = self.start;
        self.start += n;
        self.buf.get(s..s + n)
    }

    fn take_byte(&mut self) -> Option<u8> {
        self.take(1).and_then(|b| b.first().copied())
    }

    fn take_u32(&mut self) -> Option<u32> {
        let b: [u8; 4] = self.take(4)?.try_into().ok()?;
        Some(u32::from_be_bytes(b))
    }

    /// A complete JSON message, `Ok(None)` if more bytes are needed. The
    /// length is checked as soon as its 4 bytes are in.
    fn take_json(
        &mut self,
        max_len: usize,
    ) -> Result<Option<serde_json::Map<String, serde_json::Value>>, Error> {
        let Some(head) = self.buf.get(self.start..self.start + 4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > max_len {
            return Err(Error::MessageTooLong { len, max: max_len });
        }
        if self.len() < 4 + len {
            return Ok(None);
        }
        self.start += 4;
        let body = self.take(len).unwrap_or_default();
        proto::parse_json_object(body).map(Some)
    }
}

/// A decoded state byte, or the error for an unknown one.
fn decode_state(byte: u8) -> Result<State, Error> {
    State::from_byte(byte).ok_or(Error::UnknownState(byte))
}

#[cfg(test)]
mod serve_tests;
#[cfg(test)]
mod tests;
