//! iperf3's control-connection vocabulary: state bytes, the cookie, the
//! length-prefixed JSON messages, the parameter and result documents.
//!
//! Contract: pure functions and plain data. Every parser takes untrusted bytes
//! and returns `Result`; none panics, none allocates more than its input (plus
//! the bounded JSON document it was asked to parse).
//!
//! Wire format (as spoken by iperf3 3.12 and newer):
//! - cookie: 36 printable ASCII characters and a NUL, 37 bytes, sent first on
//!   the control connection and on every data connection;
//! - state: one signed byte ([`State`]);
//! - JSON message: a 4-byte big-endian length, then that many bytes of JSON
//!   (no terminator);
//! - after [`State::ServerError`], two 4-byte big-endian integers: iperf3's
//!   error number and the system `errno`.

use std::fmt;

use serde_json::{Map, Value, json};

use super::Error;

/// Length of a cookie on the wire: 36 characters and a NUL.
pub const COOKIE_LEN: usize = 37;

/// iperf3's default TCP block size (`DEFAULT_TCP_BLKSIZE`), used when the
/// client does not send `len`.
pub const DEFAULT_TCP_BLOCK_LEN: u32 = 128 * 1024;

/// Largest TCP block size iperf3 accepts (`MAX_BLOCKSIZE`).
pub const MAX_BLOCK_LEN: u32 = 1024 * 1024;

/// Longest test iperf3 accepts, seconds (`MAX_TIME`).
pub const MAX_TIME_SECS: u32 = 86_400;

/// Longest omit period iperf3 accepts, seconds (`MAX_OMIT_TIME`).
pub const MAX_OMIT_SECS: u32 = 600;

/// The byte a server writes on a connection it refuses (busy server, or a data
/// connection with a wrong cookie) before closing it.
pub const ACCESS_DENIED_BYTE: u8 = State::AccessDenied.to_byte();

/// A control-connection state byte (`iperf_api.h`, "states").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    TestStart,
    TestRunning,
    ResultRequest,
    TestEnd,
    StreamBegin,
    StreamRunning,
    StreamEnd,
    AllStreamsEnd,
    ParamExchange,
    CreateStreams,
    ServerTerminate,
    ClientTerminate,
    ExchangeResults,
    DisplayResults,
    IperfStart,
    IperfDone,
    AccessDenied,
    ServerError,
}

impl State {
    /// The state's value as iperf3 defines it (a `signed char`).
    pub const fn to_i8(self) -> i8 {
        match self {
            State::TestStart => 1,
            State::TestRunning => 2,
            State::ResultRequest => 3,
            State::TestEnd => 4,
            State::StreamBegin => 5,
            State::StreamRunning => 6,
            State::StreamEnd => 7,
            State::AllStreamsEnd => 8,
            State::ParamExchange => 9,
            State::CreateStreams => 10,
            State::ServerTerminate => 11,
            State::ClientTerminate => 12,
            State::ExchangeResults => 13,
            State::DisplayResults => 14,
            State::IperfStart => 15,
            State::IperfDone => 16,
            State::AccessDenied => -1,
            State::ServerError => -2,
        }
    }

    /// The byte on the wire.
    pub const fn to_byte(self) -> u8 {
        self.to_i8().to_be_bytes()[0]
    }

    /// Decodes a state byte; `None` for a value iperf3 does not define.
    pub const fn from_byte(byte: u8) -> Option<State> {
        Some(match i8::from_be_bytes([byte]) {
            1 => State::TestStart,
            2 => State::TestRunning,
            3 => State::ResultRequest,
            4 => State::TestEnd,
            5 => State::StreamBegin,
            6 => State::StreamRunning,
            7 => State::StreamEnd,
            8 => State::AllStreamsEnd,
            9 => State::ParamExchange,
            10 => State::CreateStreams,
            11 => State::ServerTerminate,
            12 => State::ClientTerminate,
            13 => State::ExchangeResults,
            14 => State::DisplayResults,
            15 => State::IperfStart,
            16 => State::IperfDone,
            -1 => State::AccessDenied,
            -2 => State::ServerError,
            _ => return None,
        })
    }
}

/// iperf3 error numbers (`i_errno`) this implementation sends after
/// [`State::ServerError`] or recognises in one.
pub mod ierrno {
    /// Not implemented (used here for a protocol other than TCP).
    pub const IEUNIMP: i32 = 13;
    /// Too many parallel streams.
    pub const IENUMSTREAMS: i32 = 6;
    /// Block size out of range.
    pub const IEBLOCKSIZE: i32 = 7;
    /// Test duration out of range.
    pub const IEDURATION: i32 = 5;
    /// Omit period out of range.
    pub const IEOMIT: i32 = 12;
    /// Both reverse and bidirectional.
    pub const IEREVERSEBIDIR: i32 = 25;
    /// A TOS value beyond a byte.
    pub const IEBADTOS: i32 = 21;
    /// The test's total bit rate is above the server's limit
    /// (`--server-bitrate-limit`): asked for, or measured while running.
    pub const IETOTALRATE: i32 = 27;
    /// `-t` + `-O` above the server's `--server-max-duration`, or no time
    /// limit (iperf3 3.20; older clients print "int_errno=37").
    pub const IEMAXSERVERTESTDURATIONEXCEEDED: i32 = 37;
    /// Unknown control message.
    pub const IEMESSAGE: i32 = 110;
    /// Parameters could not be received or parsed.
    pub const IERECVPARAMS: i32 = 114;
    /// Results could not be received or parsed.
    pub const IERECVRESULTS: i32 = 117;
    /// The server is busy.
    pub const IEACCESSDENIED: i32 = 121;
    /// The congestion control asked for (`-C`) is not one the server has
    /// ("unable to set TCP_CONGESTION").
    pub const IESETCONGESTION: i32 = 134;
    /// Authentication failed, "test authorization failed" (also sent to a
    /// client whose address the server's allow/deny lists refuse).
    pub const IEAUTHTEST: i32 = 142;
    /// Nothing received for too long.
    pub const IENOMSG: i32 = 144;
    /// A data stream's write failed (its errno follows).
    pub const IESTREAMWRITE: i32 = 205;
    /// A data stream's read failed (its errno follows).
    pub const IESTREAMREAD: i32 = 206;

    /// What iperf3's `iperf_strerror` says for `i_errno` (the ones a server
    /// sends a client; None for others).
    pub fn message(i_errno: i32) -> Option<&'static str> {
        Some(match i_errno {
            IEDURATION => "test duration too long (maximum = 86400 seconds)",
            IENUMSTREAMS => "number of parallel streams too large (maximum = 128)",
            IEBLOCKSIZE => "block size too large (maximum = 1048576 bytes)",
            IEOMIT => "bogus value for --omit",
            IEUNIMP => "an option you are trying to set is not implemented yet",
            IEREVERSEBIDIR => "cannot be both reverse and bidirectional",
            IEBADTOS => "bad TOS value (must be between 0 and 255 inclusive)",
            IETOTALRATE => "total required bandwidth is larger than server limit",
            IEMAXSERVERTESTDURATIONEXCEEDED => {
                "client's requested duration exceeds the server's maximum permitted limit"
            }
            IEACCESSDENIED => "the server is busy running a test. try again later",
            IESETCONGESTION => {
                "unable to set TCP_CONGESTION: Supplied congestion control algorithm not supported on this host"
            }
            IEAUTHTEST => "test authorization failed",
            IENOMSG => "idle timeout for receiving data",
            IESTREAMWRITE => "unable to write to stream socket",
            IESTREAMREAD => "unable to read from stream socket",
            IERECVPARAMS => "unable to receive parameters from client",
            _ => return None,
        })
    }
}

/// The 37-byte test identifier: 36 printable ASCII characters and a NUL.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cookie([u8; COOKIE_LEN]);

impl Cookie {
    /// The alphabet iperf3's `make_cookie` draws from.
    const ALPHABET: &'static [u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

    /// Builds a cookie the way iperf3 does, from 36 bytes of entropy supplied
    /// by the caller (this module reads no random source).
    pub fn from_entropy(entropy: &[u8; COOKIE_LEN - 1]) -> Cookie {
        let mut out = [0u8; COOKIE_LEN];
        for (o, e) in out.iter_mut().zip(entropy) {
            *o = Self::ALPHABET[usize::from(*e) % Self::ALPHABET.len()];
        }
        Cookie(out)
    }

    /// Validates a cookie read from the wire: exactly [`COOKIE_LEN`] bytes,
    /// 36 printable non-space ASCII characters and a trailing NUL.
    pub fn parse(bytes: &[u8]) -> Result<Cookie, Error> {
        let arr: [u8; COOKIE_LEN] = bytes.try_into().map_err(|_| Error::BadCookie)?;
        let (body, nul) = arr.split_at(COOKIE_LEN - 1);
        if nul != [0] || !body.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return Err(Error::BadCookie);
        }
        Ok(Cookie(arr))
    }

    /// The 37 bytes to write.
    pub fn as_bytes(&self) -> &[u8; COOKIE_LEN] {
        &self.0
    }

    /// The 36 characters, without the NUL.
    pub fn as_str(&self) -> &str {
        // Construction guarantees ASCII; the fallback is unreachable but not a panic.
        std::str::from_utf8(&self.0[..COOKIE_LEN - 1]).unwrap_or("")
    }
}

impl fmt::Debug for Cookie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cookie({:?})", self.as_str())
    }
}

/// Frames a JSON value as iperf3's `JSON_write` does: 4-byte big-endian
/// length, then the compact JSON text.
pub fn encode_json(value: &Value, out: &mut Vec<u8>) {
    let text = value.to_string();
    let len = u32::try_from(text.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(text.as_bytes());
}

/// Parses the body of a JSON message into an object.
pub fn parse_json_object(body: &[u8]) -> Result<Map<String, Value>, Error> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Error::BadJson("not a JSON object".into())),
        Err(e) => Err(Error::BadJson(e.to_string())),
    }
}

/// A JSON number as a non-negative integer. cJSON prints large integers as
/// doubles (`%1.15g`, so `1e+15` is possible); both forms are accepted, with a
/// fractional part truncated as cJSON's `valueint` does.
fn as_u64(v: &Value) -> Option<u64> {
    if let Some(u) = v.as_u64() {
        return Some(u);
    }
    let f = v.as_f64()?;
    // `u64::MAX as f64` rounds up to 2^64, so compare strictly below it.
    (f.is_finite() && f >= 0.0 && f < u64::MAX as f64).then_some(f as u64)
}

/// A JSON number as a signed integer. Debian's iperf3 3.12 (system cJSON
/// 1.7.15) prints -1 as `18446744073709551615`: integers above `i64::MAX`
/// are read as the two's-complement value they were printed from.
fn as_i64(v: &Value) -> Option<i64> {
    if let Some(i) = v.as_i64() {
        return Some(i);
    }
    if let Some(u) = v.as_u64() {
        return Some(i64::from_ne_bytes(u.to_ne_bytes()));
    }
    let f = v.as_f64()?;
    (f.is_finite() && f >= i64::MIN as f64 && f < i64::MAX as f64).then_some(f as i64)
}

fn field_u64(map: &Map<String, Value>, key: &'static str) -> Result<Option<u64>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => as_u64(v)
            .map(Some)
            .ok_or_else(|| format!("`{key}` is not a non-negative number")),
    }
}

fn field_u32(map: &Map<String, Value>, key: &'static str) -> Result<Option<u32>, String> {
    match field_u64(map, key)? {
        None => Ok(None),
        Some(v) => u32::try_from(v)
            .map(Some)
            .map_err(|_| format!("`{key}` = {v} is out of range")),
    }
}

fn field_string(map: &Map<String, Value>, key: &'static str) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{key}` is not a string")),
    }
}

/// Presence flags: iperf3 tests only whether the key exists (`tcp`, `reverse`,
/// ...) or sends a number (`get_server_output`, `zerocopy`). A present key
/// counts unless it is `false`, `0` or `null`.
fn field_flag(map: &Map<String, Value>, key: &'static str) -> bool {
    match map.get(key) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(v) if v.as_f64() == Some(0.0) => false,
        Some(_) => true,
    }
}

/// Transport of the test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// As iperf3 names it: "TCP", "UDP", "SCTP".
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

/// The test parameters the client sends at `PARAM_EXCHANGE`.
#[derive(Clone, Debug, PartialEq)]
pub struct TestParams {
    pub protocol: Protocol,
    /// Seconds at the start whose bytes are not counted (`-O`).
    pub omit_secs: u32,
    /// Test length in seconds (`-t`); 0 when the end is set by bytes or blocks.
    pub time_secs: u32,
    /// Bytes to transfer (`-n`), 0 = not set.
    pub bytes: u64,
    /// Blocks to transfer (`-k`), 0 = not set.
    pub blocks: u64,
    /// `-M`
    pub mss: Option<u32>,
    /// `-N`
    pub nodelay: bool,
    /// Parallel streams per direction (`-P`), at least 1.
    pub parallel: u32,
    /// `-R`: the server sends.
    pub reverse: bool,
    /// `--bidir`: both send.
    pub bidirectional: bool,
    /// Socket buffer size (`-w`).
    pub window: Option<u32>,
    /// Block (write) size (`-l`).
    pub block_len: u32,
    /// Target bit rate (`-b`), bits per second.
    pub bandwidth: Option<u64>,
    pub fq_rate: Option<u64>,
    pub pacing_timer: Option<u64>,
    pub burst: Option<u64>,
    pub tos: Option<u32>,
    pub flow_label: Option<u32>,
    pub title: Option<String>,
    pub extra_data: Option<String>,
    pub congestion: Option<String>,
    pub congestion_used: Option<String>,
    pub get_server_output: bool,
    pub udp_counters_64bit: bool,
    pub repeating_payload: bool,
    pub zerocopy: bool,
    pub dont_fragment: bool,
    pub authtoken: Option<String>,
    pub client_version: Option<String>,
    /// `-A n,m`: the core the server should run on (`server_affinity`).
    pub server_affinity: Option<u32>,
}

impl Default for TestParams {
    /// iperf3's client defaults: TCP, 10 s, one stream, 128 KiB blocks.
    fn default() -> Self {
        TestParams {
            protocol: Protocol::Tcp,
            omit_secs: 0,
            time_secs: 10,
            bytes: 0,
            blocks: 0,
            mss: None,
            nodelay: false,
            parallel: 1,
            reverse: false,
            bidirectional: false,
            window: None,
            block_len: DEFAULT_TCP_BLOCK_LEN,
            bandwidth: None,
            fq_rate: None,
            pacing_timer: None,
            burst: None,
            tos: None,
            flow_label: None,
            title: None,
            extra_data: None,
            congestion: None,
            congestion_used: None,
            get_server_output: false,
            udp_counters_64bit: false,
            repeating_payload: false,
            zerocopy: false,
            dont_fragment: false,
            authtoken: None,
            client_version: None,
            server_affinity: None,
        }
    }
}

impl TestParams {
    /// Number of data connections the client opens: `parallel`, doubled for
    /// a bidirectional test.
    pub fn stream_count(&self) -> u32 {
        if self.bidirectional {
            self.parallel.saturating_mul(2)
        } else {
            self.parallel
        }
    }

    /// Parses the client's parameter document (`get_parameters`). Unknown
    /// keys are ignored, as iperf3 does; known keys of the wrong type are an
    /// error. Range checks are [`TestParams::validate`]'s job.
    pub fn from_json(map: &Map<String, Value>) -> Result<TestParams, Error> {
        Self::from_json_inner(map).map_err(Error::BadParams)
    }

    fn from_json_inner(map: &Map<String, Value>) -> Result<TestParams, String> {
        let protocol = if field_flag(map, "sctp") {
            Protocol::Sctp
        } else if field_flag(map, "udp") {
            Protocol::Udp
        } else if field_flag(map, "tcp") {
            Protocol::Tcp
        } else {
            return Err("no protocol (`tcp`, `udp` or `sctp`)".into());
        };
        let d = TestParams::default();
        Ok(TestParams {
            protocol,
            omit_secs: field_u32(map, "omit")?.unwrap_or(0),
            time_secs: field_u32(map, "time")?.unwrap_or(d.time_secs),
            bytes: field_u64(map, "num")?.unwrap_or(0),
            blocks: field_u64(map, "blockcount")?.unwrap_or(0),
            mss: field_u32(map, "MSS")?.filter(|&v| v != 0),
            nodelay: field_flag(map, "nodelay"),
            parallel: field_u32(map, "parallel")?.unwrap_or(1),
            reverse: field_flag(map, "reverse"),
            bidirectional: field_flag(map, "bidirectional"),
            window: field_u32(map, "window")?.filter(|&v| v != 0),
            block_len: field_u32(map, "len")?
                .filter(|&v| v != 0)
                .unwrap_or(DEFAULT_TCP_BLOCK_LEN),
            bandwidth: field_u64(map, "bandwidth")?.filter(|&v| v != 0),
            fq_rate: field_u64(map, "fqrate")?.filter(|&v| v != 0),
            pacing_timer: field_u64(map, "pacing_timer")?,
            burst: field_u64(map, "burst")?.filter(|&v| v != 0),
            tos: field_u32(map, "TOS")?.filter(|&v| v != 0),
            flow_label: field_u32(map, "flowlabel")?.filter(|&v| v != 0),
            title: field_string(map, "title")?,
            extra_data: field_string(map, "extra_data")?,
            congestion: field_string(map, "congestion")?,
            congestion_used: field_string(map, "congestion_used")?,
            get_server_output: field_flag(map, "get_server_output"),
            udp_counters_64bit: field_flag(map, "udp_counters_64bit"),
            repeating_payload: field_flag(map, "repeating_payload"),
            zerocopy: field_flag(map, "zerocopy"),
            dont_fragment: field_flag(map, "dont_fragment"),
            authtoken: field_string(map, "authtoken")?,
            client_version: field_string(map, "client_version")?,
            server_affinity: field_u32(map, "server_affinity")?,
        })
    }

    /// Checks the ranges iperf3 itself enforces, and what this implementation
    /// supports (TCP only, at most `max_streams` data connections). Returns the
    /// iperf3 error number to report with the reason.
    pub fn validate(&self, max_streams: u32) -> Result<(), (i32, String)> {
        if self.protocol != Protocol::Tcp {
            return Err((
                ierrno::IEUNIMP,
                format!(
                    "{} tests are not supported (xtcp serves TCP tests)",
                    self.protocol.name()
                ),
            ));
        }
        if self.parallel == 0 || self.stream_count() > max_streams {
            return Err((
                ierrno::IENUMSTREAMS,
                format!(
                    "{} data streams requested, limit {max_streams} (--max-streams, within --max-conns)",
                    self.stream_count()
                ),
            ));
        }
        if self.block_len > MAX_BLOCK_LEN {
            return Err((
                ierrno::IEBLOCKSIZE,
                format!("block length {} too large", self.block_len),
            ));
        }
        if self.time_secs > MAX_TIME_SECS {
            return Err((
                ierrno::IEDURATION,
                format!("test time {} s too long", self.time_secs),
            ));
        }
        if self.omit_secs > MAX_OMIT_SECS {
            return Err((
                ierrno::IEOMIT,
                format!("omit {} s too long", self.omit_secs),
            ));
        }
        if self.tos.is_some_and(|t| t > 0xff) {
            return Err((
                ierrno::IEBADTOS,
                format!("TOS {} is not a byte", self.tos.unwrap_or(0)),
            ));
        }
        if self.reverse && self.bidirectional {
            return Err((
                ierrno::IEREVERSEBIDIR,
                "both reverse and bidirectional".into(),
            ));
        }
        Ok(())
    }

    /// The parameter document a client sends (`send_parameters`).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        let proto = match self.protocol {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        };
        m.insert(proto.into(), Value::Bool(true));
        m.insert("omit".into(), json!(self.omit_secs));
        m.insert("time".into(), json!(self.time_secs));
        m.insert("num".into(), json!(self.bytes));
        m.insert("blockcount".into(), json!(self.blocks));
        if let Some(v) = self.mss {
            m.insert("MSS".into(), json!(v));
        }
        if self.nodelay {
            m.insert("nodelay".into(), Value::Bool(true));
        }
        m.insert("parallel".into(), json!(self.parallel));
        if self.reverse {
            m.insert("reverse".into(), Value::Bool(true));
        }
        if self.bidirectional {
            m.insert("bidirectional".into(), Value::Bool(true));
        }
        if let Some(v) = self.window {
            m.insert("window".into(), json!(v));
        }
        m.insert("len".into(), json!(self.block_len));
        let numbers = [
            ("bandwidth", self.bandwidth),
            ("fqrate", self.fq_rate),
            ("pacing_timer", self.pacing_timer),
            ("burst", self.burst),
            ("TOS", self.tos.map(u64::from)),
            ("flowlabel", self.flow_label.map(u64::from)),
            ("server_affinity", self.server_affinity.map(u64::from)),
        ];
        for (k, v) in numbers {
            if let Some(v) = v {
                m.insert(k.into(), json!(v));
            }
        }
        let strings = [
            ("title", &self.title),
            ("extra_data", &self.extra_data),
            ("congestion", &self.congestion),
            ("congestion_used", &self.congestion_used),
            ("authtoken", &self.authtoken),
            ("client_version", &self.client_version),
        ];
        for (k, v) in strings {
            if let Some(v) = v {
                m.insert(k.into(), json!(v));
            }
        }
        let flags = [
            ("get_server_output", self.get_server_output),
            ("udp_counters_64bit", self.udp_counters_64bit),
            ("repeating_payload", self.repeating_payload),
            ("zerocopy", self.zerocopy),
            ("dont_fragment", self.dont_fragment),
        ];
        for (k, v) in flags {
            if v {
                m.insert(k.into(), json!(1));
            }
        }
        Value::Object(m)
    }
}

/// One stream's entry in a results document.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamResult {
    pub id: u32,
    /// Bytes sent (by a sending stream) or received (by a receiving one),
    /// omitted seconds excluded.
    pub bytes: u64,
    /// Retransmits, -1 when unknown or not a sender.
    pub retransmits: i64,
    pub jitter: f64,
    pub errors: i64,
    pub packets: i64,
    /// Seconds since the stream's start (iperf3 always sends 0).
    pub start_time: Option<f64>,
    /// Seconds from the stream's start to its end.
    pub end_time: Option<f64>,
}

/// A side's results document (`send_results` / `get_results`).
#[derive(Clone, Debug, PartialEq)]
pub struct Results {
    pub cpu_util_total: f64,
    pub cpu_util_user: f64,
    pub cpu_util_system: f64,
    /// 1 if the sender counted retransmits, 0 if not, -1 if this side only received.
    pub sender_has_retransmits: i64,
    pub congestion_used: Option<String>,
    pub streams: Vec<StreamResult>,
    /// `server_output_text`, when the server sends it.
    pub server_output_text: Option<String>,
    /// `server_output_json` (a server with `-J`), when the server sends it.
    pub server_output_json: Option<Value>,
}

impl Results {
    /// Parses a results document. Required keys are those iperf3's
    /// `get_results` requires; at most `max_streams` entries are accepted.
    pub fn from_json(map: &Map<String, Value>, max_streams: usize) -> Result<Results, Error> {
        Self::from_json_inner(map, max_streams).map_err(Error::BadResults)
    }

    fn from_json_inner(map: &Map<String, Value>, max_streams: usize) -> Result<Results, String> {
        let float = |m: &Map<String, Value>, k: &'static str| -> Result<f64, String> {
            m.get(k)
                .and_then(Value::as_f64)
                .ok_or_else(|| format!("`{k}` missing or not a number"))
        };
        let int = |m: &Map<String, Value>, k: &'static str| -> Result<i64, String> {
            m.get(k)
                .and_then(as_i64)
                .ok_or_else(|| format!("`{k}` missing or not a number"))
        };
        let streams_v = match map.get("streams") {
            Some(Value::Array(a)) => a,
            _ => return Err("`streams` missing or not an array".into()),
        };
        if streams_v.len() > max_streams {
            return Err(format!("{} streams, limit {max_streams}", streams_v.len()));
        }
        let mut streams = Vec::with_capacity(streams_v.len());
        for s in streams_v {
            let Value::Object(s) = s else {
                return Err("a `streams` entry is not an object".into());
            };
            let id = s
                .get("id")
                .and_then(as_u64)
                .and_then(|v| u32::try_from(v).ok())
                .ok_or("stream `id` missing or invalid")?;
            let bytes = s
                .get("bytes")
                .and_then(as_u64)
                .ok_or("stream `bytes` missing or invalid")?;
            streams.push(StreamResult {
                id,
                bytes,
                retransmits: int(s, "retransmits")?,
                jitter: float(s, "jitter")?,
                errors: int(s, "errors")?,
                packets: int(s, "packets")?,
                start_time: s.get("start_time").and_then(Value::as_f64),
                end_time: s.get("end_time").and_then(Value::as_f64),
            });
        }
        Ok(Results {
            cpu_util_total: float(map, "cpu_util_total")?,
            cpu_util_user: float(map, "cpu_util_user")?,
            cpu_util_system: float(map, "cpu_util_system")?,
            sender_has_retransmits: int(map, "sender_has_retransmits")?,
            congestion_used: field_string(map, "congestion_used")?,
            streams,
            server_output_text: field_string(map, "server_output_text")?,
            server_output_json: match map.get("server_output_json") {
                None | Some(Value::Null) => None,
                Some(v @ Value::Object(_)) => Some(v.clone()),
                Some(_) => return Err("`server_output_json` is not an object".into()),
            },
        })
    }

    /// The document as iperf3's `send_results` writes it.
    pub fn to_json(&self) -> Value {
        let streams: Vec<Value> = self
            .streams
            .iter()
            .map(|s| {
                json!({
                    "id": s.id,
                    "bytes": s.bytes,
                    "retransmits": s.retransmits,
                    "jitter": s.jitter,
                    "errors": s.errors,
                    "omitted_errors": 0,
                    "packets": s.packets,
                    "omitted_packets": 0,
                    "start_time": s.start_time.unwrap_or(0.0),
                    "end_time": s.end_time.unwrap_or(0.0),
                })
            })
            .collect();
        let mut m = Map::new();
        m.insert("cpu_util_total".into(), json!(self.cpu_util_total));
        m.insert("cpu_util_user".into(), json!(self.cpu_util_user));
        m.insert("cpu_util_system".into(), json!(self.cpu_util_system));
        m.insert(
            "sender_has_retransmits".into(),
            json!(self.sender_has_retransmits),
        );
        if let Some(c) = &self.congestion_used {
            m.insert("congestion_used".into(), json!(c));
        }
        if let Some(t) = &self.server_output_text {
            m.insert("server_output_text".into(), json!(t));
        }
        if let Some(v) = &self.server_output_json {
            m.insert("server_output_json".into(), v.clone());
        }
        m.insert("streams".into(), Value::Array(streams));
        Value::Object(m)
    }
}
