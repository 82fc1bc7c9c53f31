//! iperf3's output, shared by `xtcp client` and `xtcp serve`: the units
//! of `-f`, the text lines (`[ ID] Interval …` headers, interval and
//! summary lines, `--timestamps` prefixes), where they go (standard
//! output or `--logfile`, `--forceflush`), and the JSON document of a test
//! as `iperf3 -J` 3.12 writes it (client and server alike), built from
//! what xtcp's own TCP measured.
//!
//! The formats are iperf3's (`iperf_locale.c`, `units.c`); the document
//! carries every key iperf3 3.12 writes for a TCP test, with the same JSON
//! types, and xtcp's extras beside them (`test_start.bidir`, and what the
//! callers add: `xdp`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use std::cell::RefCell;
use std::rc::Rc;

use anyhow::Context;
use serde_json::{Value, json};
use xtcp_engine::app::iperf3::{
    ClientOutcome, Cookie, CpuUtil, Error as Iperf3Error, Interval, Role, RttSummary, ServerOutput,
    StreamTcp, TestOutcome, TestParams, TestStart,
};
use xtcp_engine::tcp::FourTuple;

/// The `version` xtcp reports: iperf3's shape ("iperf 3.12", the protocol
/// version it speaks), saying that it is xtcp.
pub(crate) const VERSION: &str = concat!("iperf 3.12 (xtcp ", env!("CARGO_PKG_VERSION"), ")");

/// iperf3's separator line.
pub(crate) const SEPARATOR: &str = "- - - - - - - - - - - - - - - - - - - - - - - - -";

/// `-f`: iperf3's unit letters (lowercase bits, uppercase bytes); `a`
/// (adaptive bits, iperf3's default) when the flag is absent.
pub(crate) fn parse_format(s: &str) -> Result<char, String> {
    match s {
        "k" | "m" | "g" | "t" | "K" | "M" | "G" | "T" => Ok(s.chars().next().unwrap_or('a')),
        _ => Err(format!(
            "-f {s:?}: the format must be one of k, m, g, t (Kbits, Mbits, Gbits, Tbits) or \
             K, M, G, T (KBytes, MBytes, GBytes, TBytes)"
        )),
    }
}

/// A number of bytes (`value`, as bytes) in the unit `fmt`, as iperf3's
/// `unit_snprintf` writes it: lowercase letters are bits (powers of 1000),
/// uppercase bytes (powers of 1024), `a`/`A` adaptive; four significant
/// places, then the singular unit ("Gbit", "MByte": the caller appends
/// "s" or "s/sec").
pub(crate) fn unit(value: f64, fmt: char) -> String {
    const BITS: [&str; 5] = ["bit", "Kbit", "Mbit", "Gbit", "Tbit"];
    const BYTES: [&str; 5] = ["Byte", "KByte", "MByte", "GByte", "TByte"];
    let bits = !fmt.is_ascii_uppercase();
    let mut n = if bits { value * 8.0 } else { value };
    let conv = match fmt.to_ascii_uppercase() {
        'K' => 1,
        'M' => 2,
        'G' => 3,
        'T' => 4,
        _ => {
            let step = if bits { 1000.0 } else { 1024.0 };
            let (mut t, mut c) = (n, 0);
            while t >= step && c < 4 {
                t /= step;
                c += 1;
            }
            c
        }
    };
    let base: f64 = if bits { 1000.0 } else { 1024.0 };
    n /= base.powi(conv);
    let label = if bits {
        BITS[conv as usize]
    } else {
        BYTES[conv as usize]
    };
    if n < 9.995 {
        format!("{n:4.2} {label}")
    } else if n < 99.95 {
        format!("{n:4.1} {label}")
    } else {
        format!("{n:4.0} {label}")
    }
}

/// A rate for xtcp's own report lines, in the unit that suits it
/// ("6.81 Gbit/s", "52.2 Kbit/s"; iperf3's adaptive units, four
/// significant places at most), so that a small transfer is not "0.00
/// Gbit/s". Zero without time.
pub(crate) fn rate_text(bytes: u64, seconds: f64) -> String {
    let per_s = if seconds > 0.0 {
        bytes as f64 / seconds
    } else {
        0.0
    };
    format!("{}/s", unit(per_s, 'a').trim_start())
}

/// A duration for xtcp's own report lines: seconds to the millisecond
/// ("2.004 s"), below a second milliseconds ("92.4 ms"), below a
/// millisecond microseconds ("85 µs").
pub(crate) fn seconds_text(seconds: f64) -> String {
    if seconds >= 1.0 {
        format!("{seconds:.3} s")
    } else if seconds >= 1e-3 {
        format!("{:.1} ms", seconds * 1e3)
    } else {
        format!("{:.0} µs", seconds * 1e6)
    }
}

/// "1 byte", "2 bytes": a count and its noun, singular for one.
pub(crate) fn count(n: u64, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// `t` formatted by the C library's `strftime` (`--timestamps` formats are
/// strftime's, as iperf3's), in local time or UTC.
pub(crate) fn strftime(format: &str, t: SystemTime, local: bool) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as libc::time_t);
    let Ok(fmt) = std::ffi::CString::new(format) else {
        return String::new();
    };
    let mut tm = std::mem::MaybeUninit::<libc::tm>::zeroed();
    // SAFETY: `secs` and `tm` are valid for the call; localtime_r/gmtime_r
    // write only into `tm` and return null on failure.
    let ok = unsafe {
        if local {
            !libc::localtime_r(&secs, tm.as_mut_ptr()).is_null()
        } else {
            !libc::gmtime_r(&secs, tm.as_mut_ptr()).is_null()
        }
    };
    if !ok {
        return String::new();
    }
    let mut buf = vec![0u8; 256 + format.len() * 8];
    // SAFETY: `buf` is writable for its length, `fmt` is NUL-terminated,
    // and `tm` was filled in above; strftime writes at most `buf.len()`
    // bytes and returns how many (0 if they did not fit).
    let n = unsafe {
        libc::strftime(
            buf.as_mut_ptr().cast(),
            buf.len(),
            fmt.as_ptr(),
            tm.as_ptr(),
        )
    };
    buf.truncate(n);
    String::from_utf8_lossy(&buf).into_owned()
}

/// `uname -snrvm`: what iperf3 reports as `system_info`.
pub(crate) fn system_info() -> String {
    let read = |f: &str| {
        std::fs::read_to_string(format!("/proc/sys/kernel/{f}"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    format!(
        "{} {} {} {} {}",
        read("ostype"),
        read("hostname"),
        read("osrelease"),
        read("version"),
        std::env::consts::ARCH
    )
}

/// How lines are written: `--forceflush`, `--timestamps[=FORMAT]`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Style {
    /// Flush after every line.
    pub forceflush: bool,
    /// strftime format of the prefix of every line.
    pub timestamps: Option<String>,
    /// `-T`: every line starts with `TITLE:  ` (after the time).
    pub title: Option<String>,
}

#[derive(Debug)]
enum Dest {
    Stdout,
    File(BufWriter<File>),
}

/// Where output goes: standard output, or `--logfile` (appended, as
/// iperf3's). Optionally keeps a copy of what it wrote (a server's text
/// for `--get-server-output`).
#[derive(Debug)]
pub(crate) struct Output {
    dest: Dest,
    style: Style,
    capture: Option<String>,
    /// Lines go to the capture only (`--json-lines`, whose output is the
    /// records: a client's `--get-server-output` still gets the text).
    capture_only: bool,
    /// Standard output failed (its reader went away: `| head`, `less`
    /// quit): said once, and nothing more is written there.
    closed: bool,
}

impl Output {
    /// Standard output, or `path` opened for appending (created if
    /// missing).
    pub(crate) fn open(path: Option<&Path>, style: Style) -> anyhow::Result<Output> {
        let dest = match path {
            None => Dest::Stdout,
            Some(path) => Dest::File(BufWriter::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| {
                        format!("--logfile {}: cannot open it for appending", path.display())
                    })?,
            )),
        };
        Ok(Output {
            dest,
            style,
            capture: None,
            capture_only: false,
            closed: false,
        })
    }

    /// Writes from now on where `new` writes (a log file opened again
    /// after rotation); the style and the capture stay.
    pub(crate) fn replace(&mut self, mut new: Output) {
        self.flush();
        std::mem::swap(&mut self.dest, &mut new.dest);
        std::mem::swap(&mut self.closed, &mut new.closed);
    }

    /// Whether standard output failed, and is no longer written.
    pub(crate) fn closed(&self) -> bool {
        self.closed
    }

    /// A failed write or flush: warned; standard output's is its reader
    /// gone, said once and written no more.
    fn failed(&mut self, e: &std::io::Error) {
        match self.dest {
            Dest::Stdout => {
                self.closed = true;
                tracing::warn!("writing to standard output: {e}; nothing more is written there");
            }
            Dest::File(_) => tracing::warn!("writing the output: {e}"),
        }
    }

    /// `xtcp: error: {msg}` as a line, if this output is a log file (as
    /// iperf3 writes its errors into `--logfile`; standard error has it
    /// too), flushed.
    pub(crate) fn error_into_file(&mut self, msg: &str) {
        if matches!(self.dest, Dest::File(_)) {
            self.line(&format!("xtcp: error: {msg}"));
            self.flush();
        }
    }

    /// Starts keeping a copy of every line from now on; `only`: the lines
    /// are kept, not written.
    pub(crate) fn start_capture(&mut self, only: bool) {
        self.capture = Some(String::new());
        self.capture_only = only;
    }

    /// Whether lines are being kept.
    pub(crate) fn capturing(&self) -> bool {
        self.capture.is_some()
    }

    /// The copy kept since [`Output::start_capture`]; keeping stops.
    pub(crate) fn take_capture(&mut self) -> Option<String> {
        self.capture_only = false;
        self.capture.take()
    }

    /// `text` (one line or several) and a newline, each line prefixed
    /// with the time if `--timestamps`; flushed with `--forceflush`.
    pub(crate) fn line(&mut self, text: &str) {
        self.line_kept(text, true);
    }

    /// As [`Output::line`], but never kept: xtcp's own line for a test,
    /// which is not iperf3's text for it.
    pub(crate) fn line_unkept(&mut self, text: &str) {
        self.line_kept(text, false);
    }

    /// [`Output::line`]; `keep`: into the capture too, if one is on.
    fn line_kept(&mut self, text: &str, keep: bool) {
        let time = self
            .style
            .timestamps
            .as_deref()
            .map(|f| strftime(f, SystemTime::now(), true));
        let prefix = match (time, &self.style.title) {
            (None, None) => None,
            (t, title) => Some(format!(
                "{}{}",
                t.unwrap_or_default(),
                title
                    .as_deref()
                    .map_or_else(String::new, |t| format!("{t}:  "))
            )),
        };
        self.write(text, prefix, keep);
    }

    /// A JSON text and a newline: as [`Output::line`], without the time
    /// prefix (iperf3 writes its JSON as it is, `--timestamps` or not),
    /// and never kept: a record or document is not a test's text.
    pub(crate) fn json(&mut self, text: &str) {
        self.write(text, None, false);
    }

    /// Writes `text` (each line after `prefix`); `keep`: into the capture
    /// too, if one is on.
    fn write(&mut self, text: &str, prefix: Option<String>, keep: bool) {
        let mut buf = String::with_capacity(text.len() + 32);
        for l in text.split('\n') {
            if let Some(p) = &prefix {
                buf.push_str(p);
            }
            buf.push_str(l);
            buf.push('\n');
        }
        if let Some(c) = self.capture.as_mut().filter(|_| keep) {
            c.push_str(&buf);
            if self.capture_only {
                return;
            }
        }
        if self.closed {
            return;
        }
        let r = match &mut self.dest {
            Dest::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(buf.as_bytes()).and_then(|()| {
                    if self.style.forceflush {
                        out.flush()
                    } else {
                        Ok(())
                    }
                })
            }
            Dest::File(f) => f.write_all(buf.as_bytes()).and_then(|()| {
                if self.style.forceflush {
                    f.flush()
                } else {
                    Ok(())
                }
            }),
        };
        if let Err(e) = r {
            self.failed(&e);
        }
    }

    /// Writes out what is buffered.
    pub(crate) fn flush(&mut self) {
        if self.closed {
            return;
        }
        let r = match &mut self.dest {
            Dest::Stdout => std::io::stdout().flush(),
            Dest::File(f) => f.flush(),
        };
        if let Err(e) = r {
            self.failed(&e);
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.flush();
    }
}

fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs
    } else {
        0.0
    }
}

/// Which side writes the document or the lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Client,
    Server,
}

/// iperf3's role tag of a stream in a bidirectional test.
fn tag(side: Side, bidir: bool, role: Role) -> &'static str {
    match (bidir, side, role) {
        (false, ..) => "",
        (true, Side::Client, Role::Send) => "[TX-C]",
        (true, Side::Client, Role::Receive) => "[RX-C]",
        (true, Side::Server, Role::Send) => "[TX-S]",
        (true, Side::Server, Role::Receive) => "[RX-S]",
    }
}

/// The column header iperf3 prints above interval lines (`sends`: this
/// side sends on some stream; `cwnd`: with the congestion window).
pub(crate) fn header(bidir: bool, sends: bool, cwnd: bool) -> &'static str {
    match (bidir, sends, cwnd) {
        (false, false, _) => "[ ID] Interval           Transfer     Bitrate",
        (false, true, false) => "[ ID] Interval           Transfer     Bitrate         Retr",
        (false, true, true) => "[ ID] Interval           Transfer     Bitrate         Retr  Cwnd",
        (true, _, false) => "[ ID][Role] Interval           Transfer     Bitrate         Retr",
        (true, _, true) => "[ ID][Role] Interval           Transfer     Bitrate         Retr  Cwnd",
    }
}

/// One line of iperf3's report: `[id]tag start-end sec transfer bitrate`,
/// then retransmits and the congestion window if given, then `tail`.
#[expect(clippy::too_many_arguments, reason = "the columns of one line")]
fn report_line(
    id: &str,
    tag: &str,
    start: f64,
    end: f64,
    bytes: u64,
    fmt: char,
    retr: Option<u64>,
    cwnd: Option<u64>,
    tail: &str,
) -> String {
    let transfer = unit(bytes as f64, 'A');
    let bitrate = unit(rate(bytes, end - start) / 8.0, fmt);
    let cols = match (retr, cwnd) {
        (Some(r), Some(c)) => format!("  {r:3}   {}s       ", unit(c as f64, 'A')),
        (Some(r), None) => format!("  {r:3}             "),
        _ => "                  ".to_owned(),
    };
    format!("[{id}]{tag} {start:6.2}-{end:<6.2} sec  {transfer}s  {bitrate}s/sec{cols}{tail}")
}

/// An interval as iperf3 prints it: a line per stream, and with several
/// streams a `[SUM]` line (per direction with `--bidir`) and a separator.
/// With `--bidir` each direction's streams come with their sum, the
/// client-to-server direction first (the client's sending streams, the
/// server's receiving ones), as iperf3 orders them.
pub(crate) fn interval_lines(iv: &Interval, side: Side, bidir: bool, fmt: char) -> Vec<String> {
    let omitted = if iv.omitted { "(omitted)" } else { "" };
    let grouped = grouped(iv.streams.iter().map(|s| s.role));
    let order = match side {
        Side::Client => [Role::Send, Role::Receive],
        Side::Server => [Role::Receive, Role::Send],
    };
    let mut lines = Vec::new();
    for role in order {
        let sends = role == Role::Send;
        let mut n = 0;
        for s in iv.streams.iter().filter(|s| s.role == role) {
            n += 1;
            lines.push(report_line(
                &format!("{:3}", s.id.0),
                tag(side, bidir, role),
                iv.start,
                iv.end,
                s.bytes,
                fmt,
                sends.then_some(s.retransmits),
                sends.then_some(s.snd_cwnd),
                omitted,
            ));
        }
        if !grouped || n < 2 {
            continue;
        }
        let retr = sends.then(|| {
            iv.streams
                .iter()
                .filter(|s| s.role == role)
                .map(|s| s.retransmits)
                .sum()
        });
        lines.push(report_line(
            "SUM",
            tag(side, bidir, role),
            iv.start,
            iv.end,
            iv.bytes(role),
            fmt,
            retr,
            None,
            omitted,
        ));
    }
    if grouped {
        lines.push(SEPARATOR.to_owned());
    }
    lines
}

/// Whether iperf3 prints `[SUM]` lines and a separator per interval: with
/// several streams in a direction (`-P 2` and more).
fn grouped(roles: impl Iterator<Item = Role>) -> bool {
    let (mut send, mut recv) = (0, 0);
    for r in roles {
        match r {
            Role::Send => send += 1,
            Role::Receive => recv += 1,
        }
    }
    send > 1 || recv > 1
}

/// One stream at the end of a test, seen from the side writing.
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamEnd {
    /// iperf3's stream id (xtcp's `socket`).
    pub id: u32,
    /// This side sends on it.
    pub local_sends: bool,
    /// Bytes its sender sent (ours, or the peer's report).
    pub sent: u64,
    /// Bytes its receiver received.
    pub received: u64,
    /// Its sender's retransmits (None: unknown).
    pub retransmits: Option<u64>,
    /// RTT statistics (this side's, when it sends).
    pub rtt: Option<RttSummary>,
    /// This side's TCP on it.
    pub tcp: StreamTcp,
    /// Its addresses (local, remote), once connected.
    pub addrs: Option<(SocketAddr, SocketAddr)>,
    /// Seconds the peer counted its end over (its results' `end_time`),
    /// where this side shows them: iperf3's client reports the server's
    /// end of each stream with the server's time, its own with its own.
    pub peer_seconds: Option<f64>,
}

/// A test, as the `-J` document and the summary lines describe it.
#[derive(Debug, Clone)]
pub(crate) struct TestReport<'a> {
    pub side: Side,
    /// The other end of the control connection.
    pub peer: SocketAddr,
    pub cookie: String,
    /// When the test began (`timestamp`).
    pub at: SystemTime,
    /// The MSS of xtcp's TCP on the test's connections.
    pub mss: u32,
    /// iperf3's `-w` (0: none).
    pub sock_bufsize: u64,
    /// xtcp's send and receive buffers per connection.
    pub sndbuf: u64,
    pub rcvbuf: u64,
    /// The interface's MTU: a sending stream's interval `pmtu` where the
    /// connection has not said its own yet (after a "packet too big", the
    /// MTU reported).
    pub pmtu: u32,
    pub params: &'a TestParams,
    pub intervals: &'a [Interval],
    pub streams: Vec<StreamEnd>,
    /// Seconds the test ran.
    pub seconds: f64,
    pub cpu: CpuUtil,
    pub remote_cpu: CpuUtil,
    /// Congestion control of the streams' senders and receivers, where
    /// known (ours from xtcp's TCP, the peer's from its results).
    pub sender_cc: Option<String>,
    pub receiver_cc: Option<String>,
    pub error: Option<String>,
    /// `-F`'s file: its name as given, and its size where it is sent
    /// (received: the bytes written are its size).
    pub diskfile: Option<(&'a str, Option<u64>)>,
}

/// iperf3's account of a stream's `-F` file: (sent, received, size,
/// percent sent, percent received); the size is the file's where it is
/// sent, the bytes received where it is written.
fn diskfile_counts(s: &StreamEnd, size: Option<u64>) -> (u64, u64, u64, u64, u64) {
    let size = size.unwrap_or(s.received);
    let pct = |b: u64| {
        if size == 0 {
            100
        } else {
            (b as f64 / size as f64 * 100.0) as u64
        }
    };
    (s.sent, s.received, size, pct(s.sent), pct(s.received))
}

impl TestReport<'_> {
    /// What a receiving stream holds at most: the receive buffer, or the
    /// window `-w` gave it where that is smaller (iperf3 reports the
    /// socket's `SO_RCVBUF` after `-w` set it).
    fn rcvbuf_actual(&self) -> u64 {
        match self.sock_bufsize {
            0 => self.rcvbuf,
            w => self.rcvbuf.min(w),
        }
    }

    /// Sums over the streams, (sent, received, retransmits); with
    /// `--bidir` over those whose sender is the client (`forward`) or the
    /// server.
    fn sums(&self, forward: bool) -> (u64, u64, u64) {
        let mut t = (0, 0, 0);
        for s in self.streams.iter().filter(|s| self.in_group(s, forward)) {
            t.0 += s.sent;
            t.1 += s.received;
            t.2 += s.retransmits.unwrap_or(0);
        }
        t
    }

    /// `s` counts in the sums of direction `forward` (without `--bidir`
    /// every stream is in the forward sums).
    fn in_group(&self, s: &StreamEnd, forward: bool) -> bool {
        if self.params.bidirectional {
            (s.local_sends == (self.side == Side::Client)) == forward
        } else {
            forward
        }
    }

    /// This side sends in the direction `forward` (without `--bidir`: in
    /// the test).
    fn we_send(&self, forward: bool) -> bool {
        if self.params.bidirectional {
            forward == (self.side == Side::Client)
        } else {
            (self.side == Side::Client) != self.params.reverse
        }
    }

    /// Seconds of stream `s`'s sending (`sender`) or receiving end: this
    /// side's where it counted that end, the peer's where the peer did.
    fn stream_secs(&self, s: &StreamEnd, sender: bool) -> f64 {
        if sender == s.local_sends {
            self.seconds
        } else {
            s.peer_seconds.unwrap_or(self.seconds)
        }
    }

    /// Seconds of direction `forward`'s sending (`sender`) or receiving
    /// sum: this side's where it counted, else the longest of the peer's
    /// streams.
    fn sum_secs(&self, forward: bool, sender: bool) -> f64 {
        if sender == self.we_send(forward) {
            return self.seconds;
        }
        self.streams
            .iter()
            .filter(|s| self.in_group(s, forward))
            .filter_map(|s| s.peer_seconds)
            .reduce(f64::max)
            .unwrap_or(self.seconds)
    }

    /// The document as `iperf3 -J` writes it.
    pub(crate) fn json(&self) -> Value {
        let p = self.params;
        let target = p.bandwidth.unwrap_or(0);
        let connected: Vec<Value> = self
            .streams
            .iter()
            .filter_map(|s| {
                let (l, r) = s.addrs?;
                Some(
                    json!({ "socket": s.id, "local_host": l.ip().to_canonical().to_string(),
                    "local_port": l.port(), "remote_host": r.ip().to_canonical().to_string(),
                    "remote_port": r.port() }),
                )
            })
            .collect();
        let timesecs = self
            .at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut start = json!({
            "connected": connected,
            "version": VERSION,
            "system_info": system_info(),
            "timestamp": { "time": strftime("%a, %d %b %Y %H:%M:%S GMT", self.at, false),
                           "timesecs": timesecs },
            "cookie": self.cookie,
            "target_bitrate": target,
            "sock_bufsize": self.sock_bufsize,
            "sndbuf_actual": self.sndbuf,
            "rcvbuf_actual": self.rcvbuf_actual(),
            "test_start": { "protocol": "TCP", "num_streams": p.parallel, "blksize": p.block_len,
                "omit": p.omit_secs, "duration": p.time_secs, "bytes": p.bytes,
                "blocks": p.blocks, "reverse": u8::from(p.reverse), "tos": p.tos.unwrap_or(0),
                "target_bitrate": target,
                // Not iperf3 3.12's (3.13+ has it).
                "bidir": u8::from(p.bidirectional) },
        });
        // As iperf3's: `tcp_mss` is `-M`'s value where it was given, else
        // `tcp_mss_default` the MSS the connections have.
        // (iperf3's server has no control connection MSS of its own to
        // tell: 0.)
        let server = self.side == Side::Server;
        match p.mss {
            Some(m) => start["tcp_mss"] = json!(m),
            None => start["tcp_mss_default"] = json!(if server { 0 } else { self.mss }),
        }
        let peer = json!({ "host": self.peer.ip().to_canonical().to_string(),
                           "port": self.peer.port() });
        match self.side {
            Side::Client => start["connecting_to"] = peer,
            Side::Server => start["accepted_connection"] = peer,
        }
        let intervals: Vec<Value> = self.intervals.iter().map(|iv| self.interval(iv)).collect();
        let side = |bytes: u64, retr: Option<u64>, sender: bool, secs: f64| {
            let mut v = json!({ "start": 0.0, "end": secs, "seconds": secs, "bytes": bytes,
                "bits_per_second": rate(bytes, secs), "sender": sender });
            if let Some(r) = retr {
                v["retransmits"] = json!(r);
            }
            v
        };
        // As `iperf3 -s -J` writes it, a server tells only its own side of
        // each stream: the other side's (which the client's results
        // carried) is zeros, without the sender's TCP figures, and so is
        // the client's CPU.
        let theirs_only = |sender: bool, secs: f64, id: u32| {
            json!({ "socket": id, "start": 0.0, "end": secs, "seconds": secs, "bytes": 0,
                "bits_per_second": 0.0, "sender": sender })
        };
        let streams: Vec<Value> = self
            .streams
            .iter()
            .map(|s| {
                let ours = s.local_sends;
                let rtt = s.rtt.filter(|_| ours);
                let us = |d: Option<std::time::Duration>| d.map_or(0, |d| d.as_micros() as u64);
                let (ts, tr) = (self.stream_secs(s, true), self.stream_secs(s, false));
                let mut v = json!({
                    "sender": { "socket": s.id, "start": 0.0, "end": ts, "seconds": ts,
                        "bytes": s.sent, "bits_per_second": rate(s.sent, ts),
                        "retransmits": s.retransmits.unwrap_or(0),
                        "max_snd_cwnd": if ours { s.tcp.max_snd_cwnd } else { 0 },
                        "max_snd_wnd": if ours { s.tcp.max_snd_wnd } else { 0 },
                        "max_rtt": us(rtt.map(|r| r.max)), "min_rtt": us(rtt.map(|r| r.min)),
                        "mean_rtt": us(rtt.and_then(|r| r.mean())), "sender": ours },
                    // As iperf3's: the receiver's `end` is its own time,
                    // `seconds` this side's (3.12 and its development
                    // tree alike).
                    "receiver": { "socket": s.id, "start": 0.0, "end": tr,
                        "seconds": self.seconds, "bytes": s.received,
                        "bits_per_second": rate(s.received, tr), "sender": ours },
                });
                if server && ours {
                    v["receiver"] = theirs_only(ours, tr, s.id);
                } else if server {
                    v["sender"] = theirs_only(ours, ts, s.id);
                }
                if let Some((name, size)) = self.diskfile {
                    let (sent, received, size, ps, pr) = diskfile_counts(s, size);
                    v["diskfile"] = json!({ "sent": sent, "received": received, "size": size,
                        "percent_sent": ps, "percent_received": pr, "filename": name });
                }
                v
            })
            .collect();
        // A direction's sums: the server's zeros for the side it did not do.
        let sums = |forward: bool| {
            let (sent, received, retransmits) = self.sums(forward);
            let we_send = self.we_send(forward);
            let secs = (self.sum_secs(forward, true), self.sum_secs(forward, false));
            let sent = match server && !we_send {
                true => side(0, None, we_send, secs.0),
                false => side(sent, Some(retransmits), we_send, secs.0),
            };
            let received = side(
                if server && we_send { 0 } else { received },
                None,
                we_send,
                secs.1,
            );
            (sent, received)
        };
        let (sent, received) = sums(true);
        let remote = match server {
            true => CpuUtil::default(),
            false => self.remote_cpu,
        };
        let mut end = json!({
            "streams": streams,
            "sum_sent": sent,
            "sum_received": received,
            "cpu_utilization_percent": {
                "host_total": self.cpu.total, "host_user": self.cpu.user,
                "host_system": self.cpu.system, "remote_total": remote.total,
                "remote_user": remote.user, "remote_system": remote.system,
            },
        });
        if p.bidirectional {
            let (sent, received) = sums(false);
            end["sum_sent_bidir_reverse"] = sent;
            end["sum_received_bidir_reverse"] = received;
        }
        // A server names only its own algorithm: as the sender's where it
        // sends (-R, --bidir), else as the receiver's (iperf3 3.12's).
        let (snd_cc, rcv_cc) = match (server, p.reverse || p.bidirectional) {
            (false, _) => (self.sender_cc.as_ref(), self.receiver_cc.as_ref()),
            (true, true) => (self.sender_cc.as_ref(), None),
            (true, false) => (None, self.receiver_cc.as_ref()),
        };
        if let Some(c) = snd_cc {
            end["sender_tcp_congestion"] = json!(c);
        }
        if let Some(c) = rcv_cc {
            end["receiver_tcp_congestion"] = json!(c);
        }
        let mut v = json!({ "start": start, "intervals": intervals, "end": end });
        if let Some(e) = &self.error {
            v["error"] = json!(e);
        }
        v
    }

    /// An interval as iperf3's `-J` writes it: per stream (a sending one
    /// with its TCP state: retransmits, cwnd, send window, RTT, RTT
    /// variance, path MTU), and summed (with `--bidir`, per direction).
    pub(crate) fn interval(&self, iv: &Interval) -> Value {
        interval_json(iv, self.side, self.params.bidirectional, self.pmtu)
    }

    /// A stream's summary lines (and with `-F` iperf3's line on its file,
    /// between them).
    fn stream_summary(&self, out: &mut Vec<String>, s: &StreamEnd, fmt: char, verbose: bool) {
        let bidir = self.params.bidirectional;
        let t = tag(
            self.side,
            bidir,
            if s.local_sends {
                Role::Send
            } else {
                Role::Receive
            },
        );
        let id = format!("{:3}", s.id);
        // A server prints only its own side of each stream.
        let (show_sender, show_receiver) = match self.side {
            Side::Client => (true, true),
            Side::Server => (s.local_sends, !s.local_sends),
        };
        if show_sender {
            out.push(report_line(
                &id,
                t,
                0.0,
                self.stream_secs(s, true),
                s.sent,
                fmt,
                Some(s.retransmits.unwrap_or(0)),
                None,
                "sender",
            ));
        } else if verbose {
            // iperf3 -s -V says what it does not show (no role tag).
            out.push(format!("[{id}] (sender statistics not available)"));
        }
        if let Some((name, size)) = self.diskfile {
            let (sent, received, size, ps, pr) = diskfile_counts(s, size);
            let (bytes, pct) = if s.local_sends {
                (sent, ps)
            } else {
                (received, pr)
            };
            out.push(format!(
                "        Sent {} / {} ({pct}%) of {name}",
                unit(bytes as f64, 'A'),
                unit(size as f64, 'A')
            ));
        }
        if show_receiver {
            out.push(report_line(
                &id,
                t,
                0.0,
                self.stream_secs(s, false),
                s.received,
                fmt,
                None,
                None,
                "receiver",
            ));
        } else if verbose {
            out.push(format!("[{id}] (receiver statistics not available)"));
        }
    }

    /// The summary lines as iperf3 prints them at the end (`verbose`:
    /// with "Test Complete. Summary Results:", the CPU and congestion
    /// control lines).
    pub(crate) fn summary_lines(&self, fmt: char, verbose: bool) -> Vec<String> {
        let bidir = self.params.bidirectional;
        // After intervals of several streams, their separator is the one.
        let roles = self.streams.iter().map(|s| {
            if s.local_sends {
                Role::Send
            } else {
                Role::Receive
            }
        });
        let mut out = if grouped(roles) && !self.intervals.is_empty() {
            Vec::new()
        } else {
            vec![SEPARATOR.to_owned()]
        };
        if verbose {
            out.push("Test Complete. Summary Results:".to_owned());
        }
        let any_retr = self.side == Side::Client || self.streams.iter().any(|s| s.local_sends);
        out.push(header(bidir, any_retr, false).to_owned());
        // As iperf3's: each direction's streams, then their sum (with
        // `--bidir` the client's sending streams first, the server's
        // receiving ones).
        for forward in [true, false] {
            let group: Vec<&StreamEnd> = self
                .streams
                .iter()
                .filter(|s| self.in_group(s, forward))
                .collect();
            for s in &group {
                self.stream_summary(&mut out, s, fmt, verbose);
            }
            if group.len() < 2 {
                continue;
            }
            let (sent, recv, retr) = self.sums(forward);
            let role = if self.we_send(forward) {
                Role::Send
            } else {
                Role::Receive
            };
            let t = tag(self.side, bidir, role);
            let (show_sender, show_receiver) = match self.side {
                Side::Client => (true, true),
                Side::Server => (self.we_send(forward), !self.we_send(forward)),
            };
            if show_sender {
                out.push(report_line(
                    "SUM",
                    t,
                    0.0,
                    self.sum_secs(forward, true),
                    sent,
                    fmt,
                    Some(retr),
                    None,
                    "sender",
                ));
            } else if verbose {
                out.push("[SUM] (sender statistics not available)".to_owned());
            }
            if show_receiver {
                out.push(report_line(
                    "SUM",
                    t,
                    0.0,
                    self.sum_secs(forward, false),
                    recv,
                    fmt,
                    None,
                    None,
                    "receiver",
                ));
            } else if verbose {
                out.push("[SUM] (receiver statistics not available)".to_owned());
            }
        }
        // (iperf3's server prints its CPU line only where it sends.)
        let sends = self.params.reverse || self.params.bidirectional;
        if verbose && (self.side == Side::Client || sends) {
            let (local, remote) = match (self.side, self.params.reverse) {
                (Side::Client, false) | (Side::Server, true) => ("sender", "receiver"),
                _ => ("receiver", "sender"),
            };
            out.push(format!(
                "CPU Utilization: local/{local} {:.1}% ({:.1}%u/{:.1}%s), remote/{remote} {:.1}% \
                 ({:.1}%u/{:.1}%s)",
                self.cpu.total,
                self.cpu.user,
                self.cpu.system,
                self.remote_cpu.total,
                self.remote_cpu.user,
                self.remote_cpu.system
            ));
        }
        if verbose {
            // A server tells only its own side's (iperf3 -s -V).
            let bidir = self.params.bidirectional;
            let (snd, rcv) = match self.side {
                Side::Client => (true, true),
                Side::Server => (self.params.reverse || bidir, !self.params.reverse || bidir),
            };
            if let Some(c) = self.sender_cc.as_ref().filter(|_| snd) {
                out.push(format!("snd_tcp_congestion {c}"));
            }
            if let Some(c) = self.receiver_cc.as_ref().filter(|_| rcv) {
                out.push(format!("rcv_tcp_congestion {c}"));
            }
        }
        out
    }
}

/// Output flags of `xtcp client` and `xtcp serve`: iperf3's `-f`,
/// `--forceflush`, `--timestamps`.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub(crate) struct StyleArgs {
    /// Unit of the bitrates (iperf3's -f): k, m, g, t for Kbits, Mbits,
    /// Gbits, Tbits per second; K, M, G, T for KBytes … TBytes per second
    /// (transfers stay adaptive, as iperf3's).
    #[arg(short = 'f', long = "format", value_name = "UNIT", value_parser = parse_format)]
    pub format: Option<char>,
    /// Flush the output after every line (iperf3's --forceflush).
    #[arg(long)]
    pub forceflush: bool,
    /// Prefix every output line with the local time, formatted by
    /// strftime FORMAT (iperf3's --timestamps; default "%c ").
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, require_equals = true,
          default_missing_value = "%c ")]
    pub timestamps: Option<String>,
}

impl StyleArgs {
    /// The unit letter (`a`, adaptive bits, by default).
    pub(crate) fn unit(&self) -> char {
        self.format.unwrap_or('a')
    }

    /// How lines are written.
    pub(crate) fn style(&self) -> Style {
        Style {
            forceflush: self.forceflush,
            timestamps: self.timestamps.clone(),
            title: None,
        }
    }
}

/// Output flags of `xtcp client` besides [`StyleArgs`].
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct ClientOutputArgs {
    /// More detail, as iperf3's -V: the version, system, time, cookie and
    /// test parameters at the start; "Test Complete. Summary Results:", the
    /// CPU utilisation and the congestion control at the end.
    #[arg(short = 'V', long)]
    pub verbose: bool,
    /// Write all output to FILE (appended) instead of standard output, as
    /// iperf3's --logfile.
    #[arg(long, value_name = "FILE")]
    pub logfile: Option<PathBuf>,
    /// One JSON object per line and event, as iperf3 3.17's --json-stream:
    /// {"event":"start","data":…}, "interval", "end" (and
    /// "server_output_json" / "server_output_text", "error", and xtcp's
    /// "xdp"); implies -J, as iperf3's.
    #[arg(long)]
    pub json_stream: bool,
    /// Ask the server for its output of the test and print it ("Server
    /// output:" and its text; with -J `server_output_json` or
    /// `server_output_text`).
    #[arg(long)]
    pub get_server_output: bool,
    #[command(flatten)]
    pub style: StyleArgs,
}

/// How `xtcp client` prints: iperf3's text, `-J`'s document at the end,
/// or `--json-stream`'s line per event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Text,
    Json,
    JsonStream,
}

#[derive(Debug, Default)]
struct ClientState {
    intervals: Vec<Interval>,
    started: bool,
    start_sent: bool,
}

/// `xtcp client`'s output over one test: shared by the engine's callbacks
/// (intervals, the start) and the end.
pub(crate) struct ClientRun {
    out: Rc<RefCell<Output>>,
    state: Rc<RefCell<ClientState>>,
    mode: Mode,
    verbose: bool,
    unit: char,
    params: TestParams,
    /// The server's address, and its name as given.
    host: std::net::IpAddr,
    host_name: String,
    port: u16,
    cookie: String,
    at: SystemTime,
    pmtu: u32,
    sndbuf: u64,
    rcvbuf: u64,
    get_server_output: bool,
    /// The summary (or the JSON document, or its end event) was written.
    finished: Rc<std::cell::Cell<bool>>,
    /// `-F`: the file as given, and its size where it is sent.
    diskfile: Option<(String, Option<u64>)>,
}

/// The document `iperf3 -J` writes for a test that failed before it had
/// one (it could not connect, say): no stream, no interval, the error.
fn failure_document(msg: &str) -> Value {
    json!({
        "start": { "connected": [], "version": VERSION, "system_info": system_info() },
        "intervals": [],
        "end": {},
        "error": msg,
    })
}

/// A client that failed before its run began (its arguments, its
/// interface): with `-J` the document that says so, with `--json-stream`
/// the error event; where the output goes (`--logfile`, or standard
/// output).
pub(crate) fn fail_before_the_run(a: &crate::client::ClientArgs, msg: &str) {
    let o = &a.output;
    if !(a.json_output || o.json_stream || o.logfile.is_some()) {
        return;
    }
    let Ok(mut out) = Output::open(o.logfile.as_deref(), o.style.style()) else {
        return;
    };
    if !(a.json_output || o.json_stream) {
        out.error_into_file(msg);
    } else if o.json_stream {
        out.json(&json_stream_line("error", json!(msg)));
    } else if let Ok(t) = serde_json::to_string_pretty(&failure_document(msg)) {
        out.json(&t);
    }
    out.flush();
}

impl ClientRun {
    pub(crate) fn new(
        a: &crate::client::ClientArgs,
        cfg: &xtcp_engine::worker::EngineConfig,
        params: &TestParams,
        cookie: &Cookie,
        host: std::net::IpAddr,
    ) -> anyhow::Result<ClientRun> {
        let o = &a.output;
        let mode = if o.json_stream {
            Mode::JsonStream
        } else if a.json_output {
            Mode::Json
        } else {
            Mode::Text
        };
        let mut style = o.style.style();
        // One object per line, each written at once (iperf3 flushes them).
        style.forceflush |= mode == Mode::JsonStream;
        style.title = a.title.clone();
        Ok(ClientRun {
            out: Rc::new(RefCell::new(Output::open(o.logfile.as_deref(), style)?)),
            state: Rc::default(),
            mode,
            verbose: o.verbose,
            unit: o.style.unit(),
            params: params.clone(),
            host,
            host_name: crate::args::split_dev(&a.host).0.to_owned(),
            port: a.port,
            cookie: cookie.as_str().to_owned(),
            at: SystemTime::now(),
            pmtu: xtcp_engine::xsk::iface_mtu(&cfg.iface).unwrap_or(0),
            sndbuf: cfg.send_buffer_bytes() as u64,
            rcvbuf: cfg.tcp.recv_buffer as u64,
            get_server_output: o.get_server_output,
            finished: Rc::default(),
            diskfile: a.file.as_ref().map(|f| {
                let size = (!a.reverse)
                    .then(|| std::fs::metadata(f).ok().map(|m| m.len()))
                    .flatten();
                (f.display().to_string(), size)
            }),
        })
    }

    /// The test failed (`msg`) before [`ClientRun::finish`] wrote its
    /// report: with `-J` the document that says so (as iperf3's when it
    /// cannot connect), with `--json-stream` the error event. Nothing in
    /// text mode (the error goes to standard error), nor after `finish`
    /// (its report carries the test's error).
    pub(crate) fn fail(&self, msg: &str) {
        if self.finished.replace(true) {
            // The outcome is written; in text, the error follows it into
            // a log file (as iperf3 writes its errors into `--logfile`).
            if self.mode == Mode::Text {
                self.out.borrow_mut().error_into_file(msg);
            }
            return;
        }
        let mut out = self.out.borrow_mut();
        match self.mode {
            Mode::Text => {
                out.error_into_file(msg);
                return;
            }
            Mode::Json => match serde_json::to_string_pretty(&failure_document(msg)) {
                Ok(t) => out.json(&t),
                Err(_) => return,
            },
            Mode::JsonStream => out.json(&json_stream_line("error", json!(msg))),
        }
        out.flush();
    }

    fn shell(&self) -> ClientRun {
        ClientRun {
            out: self.out.clone(),
            state: self.state.clone(),
            mode: self.mode,
            verbose: self.verbose,
            unit: self.unit,
            params: self.params.clone(),
            host: self.host,
            host_name: self.host_name.clone(),
            port: self.port,
            cookie: self.cookie.clone(),
            at: self.at,
            pmtu: self.pmtu,
            sndbuf: self.sndbuf,
            rcvbuf: self.rcvbuf,
            get_server_output: self.get_server_output,
            finished: self.finished.clone(),
            diskfile: self.diskfile.clone(),
        }
    }

    /// The engine is up and connects: iperf3's first lines.
    pub(crate) fn connecting(&self) {
        if self.mode != Mode::Text {
            return;
        }
        let mut out = self.out.borrow_mut();
        if self.verbose {
            out.line(VERSION);
            out.line(&system_info());
            out.line(&format!(
                "Time: {}",
                strftime("%a, %d %b %Y %H:%M:%S GMT", self.at, false)
            ));
        }
        out.line(&format!(
            "Connecting to host {}, port {}",
            self.host_name, self.port
        ));
        if self.params.reverse {
            out.line(&format!(
                "Reverse mode, remote host {} is sending",
                self.host_name
            ));
        }
        if self.verbose {
            out.line(&format!("      Cookie: {}", self.cookie));
        }
    }

    /// For [`xtcp_engine::app::iperf3::Iperf3Client::set_on_start`].
    pub(crate) fn on_start(&self) -> xtcp_engine::app::iperf3::OnStart {
        let me = self.shell();
        Box::new(move |start: &xtcp_engine::app::iperf3::ClientStart| {
            me.state.borrow_mut().started = true;
            if me.mode != Mode::Text {
                return;
            }
            let mut out = me.out.borrow_mut();
            if me.verbose {
                // iperf3 -V's MSS lines, once xtcp's handshakes settled
                // them ("(default)" unless -M set it).
                if let Some(m) = start.control_mss {
                    out.line(&format!("Control connection MSS {m}"));
                }
                // `-M`'s value where it was given, as iperf3 prints it.
                match (me.params.mss, start.stream_mss) {
                    (Some(m), _) => out.line(&format!("      TCP MSS: {m}")),
                    (None, Some(m)) => out.line(&format!("      TCP MSS: {m} (default)")),
                    (None, None) => {}
                }
            }
            for (s, t) in &start.streams {
                out.line(&connected_line(s.id.0, t));
            }
            if me.verbose {
                out.line(&starting_line(&me.params));
            }
            // As iperf3's: a client that only receives (-R) has no
            // retransmit and window columns.
            let sends = start.streams.iter().any(|(s, _)| s.role == Role::Send);
            out.line(header(me.params.bidirectional, sends, sends));
        })
    }

    /// For [`xtcp_engine::app::iperf3::Iperf3Client::new`]'s interval
    /// callback.
    pub(crate) fn on_interval(&self) -> Box<dyn FnMut(&Interval)> {
        let me = self.shell();
        Box::new(move |iv| {
            match me.mode {
                Mode::Text => {
                    let mut out = me.out.borrow_mut();
                    for l in interval_lines(iv, Side::Client, me.params.bidirectional, me.unit) {
                        out.line(&l);
                    }
                }
                Mode::JsonStream => {
                    let mss = iv.streams.iter().map(|s| s.mss).max().unwrap_or(0);
                    me.stream_start(mss, &[]);
                    let v = interval_json(iv, Side::Client, me.params.bidirectional, me.pmtu);
                    me.out.borrow_mut().json(&json_stream_line("interval", v));
                }
                Mode::Json => {}
            }
            me.state.borrow_mut().intervals.push(iv.clone());
        })
    }

    /// `--json-stream`: the start event, once.
    fn stream_start(&self, mss: u32, streams: &[StreamEnd]) {
        if std::mem::replace(&mut self.state.borrow_mut().start_sent, true) {
            return;
        }
        let r = self.report_with(mss, &[], streams.to_vec(), 0.0);
        let start = r.json()["start"].take();
        self.out
            .borrow_mut()
            .json(&json_stream_line("start", start));
    }

    fn report_with<'a>(
        &'a self,
        mss: u32,
        intervals: &'a [Interval],
        streams: Vec<StreamEnd>,
        seconds: f64,
    ) -> TestReport<'a> {
        TestReport {
            side: Side::Client,
            peer: SocketAddr::new(self.host, self.port),
            cookie: self.cookie.clone(),
            at: self.at,
            mss,
            sock_bufsize: self.params.window.map_or(0, u64::from),
            sndbuf: self.sndbuf,
            rcvbuf: self.rcvbuf,
            pmtu: self.pmtu,
            params: &self.params,
            intervals,
            streams,
            seconds,
            cpu: CpuUtil::default(),
            remote_cpu: CpuUtil::default(),
            sender_cc: None,
            receiver_cc: None,
            error: None,
            diskfile: self.diskfile.as_ref().map(|(n, s)| (n.as_str(), *s)),
        }
    }

    /// The test is over: the summary, the document or the last events.
    pub(crate) fn finish(
        &self,
        o: &ClientOutcome,
        xdp: &crate::xdpstats::XdpSummary,
        extra: serde_json::Map<String, Value>,
    ) -> anyhow::Result<()> {
        let streams = client_streams(o);
        let mss = o.tcp.iter().map(|t| t.mss).max().unwrap_or(0);
        let state = self.state.borrow();
        let intervals = state.intervals.clone();
        drop(state);
        let mut r = self.report_with(mss, &intervals, streams.clone(), o.seconds);
        r.cpu = o.cpu_util;
        if let Some(p) = &o.peer {
            r.remote_cpu = CpuUtil {
                total: p.cpu_util_total,
                user: p.cpu_util_user,
                system: p.cpu_util_system,
            };
        }
        // Ours from xtcp's TCP, the server's from its results.
        let local = o
            .tcp
            .iter()
            .map(|t| t.congestion)
            .find(|c| !c.is_empty())
            .map(str::to_owned);
        let remote = o.peer.as_ref().and_then(|p| p.congestion_used.clone());
        (r.sender_cc, r.receiver_cc) = if self.params.reverse {
            (remote, local)
        } else {
            (local, remote)
        };
        r.error = o.result.as_ref().err().map(ToString::to_string);
        self.finished.set(true);
        let server_text = o.peer.as_ref().and_then(|p| p.server_output_text.clone());
        let server_json = o.peer.as_ref().and_then(|p| p.server_output_json.clone());
        if self.mode == Mode::JsonStream {
            self.stream_start(mss, &streams);
        }
        let mut out = self.out.borrow_mut();
        match self.mode {
            Mode::Text => {
                // As iperf3's client: the summary of a test that ended
                // well, or that the server or an interrupt ended; after
                // another failure, only the error.
                let summary = o
                    .result
                    .as_ref()
                    .err()
                    .is_none_or(Iperf3Error::is_orderly_end);
                if summary {
                    for l in r.summary_lines(self.unit, self.verbose) {
                        out.line(&l);
                    }
                }
                for l in xdp.lines() {
                    out.line(&l);
                }
                if self.get_server_output {
                    // As iperf3: a blank line (with -T's or --timestamps'
                    // prefix), then the server's text as it sent it, none
                    // of its lines prefixed.
                    if let Some(t) = &server_text {
                        out.line("");
                        out.json(&format!("Server output:\n{t}"));
                    } else if let Some(v) = &server_json {
                        out.line("");
                        // (A server run with -J sent JSON: iperf3 labels it so.)
                        out.json(&format!(
                            "Server JSON output:\n{}",
                            serde_json::to_string_pretty(v)?
                        ));
                    }
                }
                // As iperf3: only a test that ended well is "Done".
                if r.error.is_none() {
                    out.line("\niperf Done.");
                }
            }
            Mode::Json => {
                let mut v = r.json();
                // Not iperf3's: xtcp's own XDP statistics of the run, and
                // what the caller adds (xtcp's counters, the title).
                v["xdp"] = serde_json::to_value(xdp)?;
                for (k, x) in extra {
                    v[k] = x;
                }
                if let Some(t) = server_text {
                    v["server_output_text"] = json!(t);
                }
                if let Some(j) = server_json {
                    v["server_output_json"] = j;
                }
                out.json(&serde_json::to_string_pretty(&v)?);
            }
            Mode::JsonStream => {
                let mut v = r.json();
                if let Some(e) = v.get("error").cloned() {
                    out.json(&json_stream_line("error", e));
                }
                if let Some(j) = server_json {
                    out.json(&json_stream_line("server_output_json", j));
                }
                if let Some(t) = server_text {
                    out.json(&json_stream_line("server_output_text", json!(t)));
                }
                out.json(&json_stream_line("xdp", serde_json::to_value(xdp)?));
                out.json(&json_stream_line("end", v["end"].take()));
            }
        }
        out.flush();
        Ok(())
    }
}

/// iperf3's line for a connected stream.
pub(crate) fn connected_line(id: u32, t: &FourTuple) -> String {
    format!(
        "[{id:3}] local {} port {} connected to {} port {}",
        t.local.ip().to_canonical(),
        t.local.port(),
        t.remote.ip().to_canonical(),
        t.remote.port()
    )
}

/// iperf3 -V's "Starting Test:" line.
pub(crate) fn starting_line(p: &TestParams) -> String {
    let what = if p.bytes > 0 {
        format!("{} bytes to send", p.bytes)
    } else if p.blocks > 0 {
        format!("{} blocks to send", p.blocks)
    } else {
        format!("{} second test", p.time_secs)
    };
    format!(
        "Starting Test: protocol: TCP, {} streams, {} byte blocks, omitting {} seconds, {what}, \
         tos {}",
        p.parallel,
        p.block_len,
        p.omit_secs,
        p.tos.unwrap_or(0)
    )
}

/// Where the server read fewer bytes than this client's sending streams
/// counted: (read, sent), summed over those streams. (A stock iperf3
/// server closes its data connections at `TEST_END` without reading what
/// they still hold.)
pub(crate) fn server_read_short(o: &ClientOutcome) -> Option<(u64, u64)> {
    o.peer.as_ref()?;
    let (read, sent) = client_streams(o)
        .iter()
        .filter(|s| s.local_sends)
        .fold((0, 0), |(r, t), s| (r + s.received, t + s.sent));
    (read < sent).then_some((read, sent))
}

/// The client's streams at the end: its own counts where it sent or
/// received, the server's results for the other end.
fn client_streams(o: &ClientOutcome) -> Vec<StreamEnd> {
    o.streams
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let peer = o
                .peer
                .as_ref()
                .and_then(|p| p.streams.iter().find(|r| r.id == s.id.0));
            let peer_bytes = peer.map_or(0, |r| r.bytes);
            let local_sends = s.role == Role::Send;
            let (sent, received, retransmits) = if local_sends {
                (s.counted_bytes(), peer_bytes, s.counted_retransmits())
            } else {
                (
                    peer_bytes,
                    s.counted_bytes(),
                    peer.and_then(|r| u64::try_from(r.retransmits).ok()),
                )
            };
            StreamEnd {
                id: s.id.0,
                local_sends,
                sent,
                received,
                retransmits,
                rtt: o.rtt.get(i).copied().flatten(),
                tcp: o.tcp.get(i).copied().unwrap_or_default(),
                addrs: o
                    .connected
                    .get(i)
                    .copied()
                    .flatten()
                    .map(|t| (t.local, t.remote)),
                peer_seconds: peer.and_then(|r| r.end_time),
            }
        })
        .collect()
}

/// How `xtcp serve` prints a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServeMode {
    /// iperf3 -s's text (and xtcp's line per test).
    Text,
    /// iperf3 -s -J's document per test.
    Json,
    /// `--json-lines`: xtcp's own line per test.
    JsonLines,
}

#[derive(Debug, Default)]
struct ServeState {
    tests: u64,
    intervals: Vec<Interval>,
    began: Option<SystemTime>,
    bidir: bool,
}

/// `xtcp serve`'s iperf3-shaped output: the banners, a test's start,
/// interval and summary lines, its `-J` document, and what a client that
/// asked `--get-server-output` gets (the same text, or the same document).
#[derive(Clone)]
pub(crate) struct ServeRun {
    pub out: Rc<RefCell<Output>>,
    state: Rc<RefCell<ServeState>>,
    pub mode: ServeMode,
    unit: char,
    port: u16,
    pmtu: u32,
    sndbuf: u64,
    rcvbuf: u64,
    /// `-V`.
    verbose: bool,
    /// `--mss`, as iperf3 -s -V tells its own `-M` (0: the default).
    mss: u16,
}

impl ServeRun {
    pub(crate) fn new(
        out: Rc<RefCell<Output>>,
        mode: ServeMode,
        unit: char,
        port: u16,
        cfg: &xtcp_engine::worker::EngineConfig,
        verbose: bool,
    ) -> ServeRun {
        ServeRun {
            out,
            state: Rc::default(),
            mode,
            unit,
            port,
            pmtu: xtcp_engine::xsk::iface_mtu(&cfg.iface).unwrap_or(0),
            sndbuf: cfg.send_buffer_bytes() as u64,
            rcvbuf: cfg.tcp.recv_buffer as u64,
            verbose,
            mss: cfg.mss.unwrap_or(0),
        }
    }

    /// With `-V`, iperf3 -s -V's first lines: the version and the host.
    pub(crate) fn verbose_header(&self) {
        if self.mode == ServeMode::Text && self.verbose {
            let mut out = self.out.borrow_mut();
            out.line(VERSION);
            out.line(&system_info());
        }
    }

    /// iperf3 -s's banner before each test.
    pub(crate) fn banner(&self) {
        if self.mode != ServeMode::Text {
            return;
        }
        let n = {
            let mut st = self.state.borrow_mut();
            st.tests += 1;
            st.tests
        };
        let rule = "-----------------------------------------------------------";
        self.out.borrow_mut().line(&format!(
            "{rule}\nServer listening on {} (test #{n})\n{rule}",
            self.port
        ));
    }

    /// A test starts: "Accepted connection from …", a line per stream, the
    /// column header. With `--get-server-output` the text of the test is
    /// kept from here on (with `--json-lines` only kept, not printed).
    pub(crate) fn start(&self, t: &TestStart) {
        {
            let mut st = self.state.borrow_mut();
            st.began = Some(SystemTime::now());
            st.intervals.clear();
            st.bidir = t.params.bidirectional;
        }
        let kept_only = self.mode == ServeMode::JsonLines && t.params.get_server_output;
        if self.mode != ServeMode::Text && !kept_only {
            return;
        }
        let mut out = self.out.borrow_mut();
        if t.params.get_server_output {
            out.start_capture(kept_only);
        }
        if self.verbose {
            out.line(&format!(
                "Time: {}",
                strftime("%a, %d %b %Y %H:%M:%S GMT", SystemTime::now(), false)
            ));
        }
        out.line(&format!(
            "Accepted connection from {}, port {}",
            t.client.remote.ip().to_canonical(),
            t.client.remote.port()
        ));
        if self.verbose {
            if let Some(c) = &t.cookie {
                out.line(&format!("      Cookie: {}", c.as_str()));
            }
            let default = if self.mss == 0 { " (default)" } else { "" };
            out.line(&format!("      TCP MSS: {}{default}", self.mss));
        }
        for (s, tuple) in &t.streams {
            out.line(&connected_line(s.id.0, tuple));
        }
        if self.verbose {
            out.line(&starting_line(&t.params));
        }
        let sends = t.streams.iter().any(|(s, _)| s.role == Role::Send);
        out.line(header(t.params.bidirectional, sends, sends));
    }

    /// An interval of the running test.
    pub(crate) fn interval(&self, iv: &Interval) {
        let bidir = {
            let mut st = self.state.borrow_mut();
            st.intervals.push(iv.clone());
            st.bidir
        };
        let mut out = self.out.borrow_mut();
        if self.mode == ServeMode::Text || out.capturing() {
            for l in interval_lines(iv, Side::Server, bidir, self.unit) {
                out.line(&l);
            }
        }
    }

    /// What a client that asked for the server's output gets: with `-J`
    /// the test's document, else the text printed for it so far and the
    /// summary (as iperf3 -s sends it). The client's own results are not
    /// in yet: the document's client-side counts are the server's.
    pub(crate) fn server_output(&self, o: &TestOutcome) -> ServerOutput {
        match self.mode {
            ServeMode::Json => ServerOutput::Json(self.document(o)),
            _ => {
                let mut text = self.out.borrow_mut().take_capture().unwrap_or_default();
                let st = self.state.borrow();
                if let Some(r) = self.report(o, &st.intervals, st.began) {
                    for l in r.summary_lines(self.unit, false) {
                        text.push_str(&l);
                        text.push('\n');
                    }
                }
                ServerOutput::Text(text)
            }
        }
    }

    /// The test is over: the summary lines (text) or the document (`-J`).
    /// Returns the document in `-J` mode for the caller to print.
    pub(crate) fn end(&self, o: &TestOutcome) -> Option<Value> {
        match self.mode {
            ServeMode::Json => {
                let v = self.document(o);
                if o.refused.is_none() {
                    self.state.borrow_mut().intervals.clear();
                }
                Some(v)
            }
            // (A client refused while a test runs ends here too: the running
            // test's text and intervals stay.)
            ServeMode::Text => {
                if o.refused.is_none() {
                    let _ = self.out.borrow_mut().take_capture();
                }
                let st = self.state.borrow();
                if o.refused.is_none() {
                    if let Some(r) = self.report(o, &st.intervals, st.began) {
                        let mut out = self.out.borrow_mut();
                        for l in r.summary_lines(self.unit, self.verbose) {
                            out.line(&l);
                        }
                    }
                }
                None
            }
            ServeMode::JsonLines => {
                // (Kept for `--get-server-output`, if the client never
                // asked for it after all.)
                if o.refused.is_none() {
                    let _ = self.out.borrow_mut().take_capture();
                }
                None
            }
        }
    }

    /// The test's `iperf3 -s -J` document (a refused or early-failed test:
    /// what is known, and `error`).
    pub(crate) fn document(&self, o: &TestOutcome) -> Value {
        let st = self.state.borrow();
        let default = TestParams::default();
        let began = st.began;
        let mut v = match self.report(o, &st.intervals, began) {
            Some(r) => r.json(),
            None => {
                let mut r = self.report_of(o, &default, &[], began);
                r.streams.clear();
                r.json()
            }
        };
        match &o.params {
            // No test ran: no parameters to describe.
            None => {
                if let Some(s) = v["start"].as_object_mut() {
                    s.remove("test_start");
                }
            }
            // The client's `-T` and `--extra-data`, as `iperf3 -s -J`
            // writes them.
            Some(p) => {
                if let Some(t) = &p.title {
                    v["title"] = t.clone().into();
                }
                if let Some(d) = &p.extra_data {
                    v["extra_data"] = d.clone().into();
                }
            }
        }
        v
    }

    fn report<'a>(
        &self,
        o: &'a TestOutcome,
        intervals: &'a [Interval],
        began: Option<SystemTime>,
    ) -> Option<TestReport<'a>> {
        let p = o.params.as_ref()?;
        Some(self.report_of(o, p, intervals, began))
    }

    fn report_of<'a>(
        &self,
        o: &'a TestOutcome,
        p: &'a TestParams,
        intervals: &'a [Interval],
        began: Option<SystemTime>,
    ) -> TestReport<'a> {
        let peer_stream = |id: u32| {
            o.peer
                .as_ref()
                .and_then(|r| r.streams.iter().find(|s| s.id == id))
        };
        let streams: Vec<StreamEnd> = o
            .stream_outcomes
            .iter()
            .map(|s| {
                let local_sends = s.role == Role::Send;
                // The client's count of the other end, once exchanged.
                let theirs = peer_stream(s.id.0).map_or(s.bytes, |r| r.bytes);
                let (sent, received) = if local_sends {
                    (s.bytes, theirs)
                } else {
                    (theirs, s.bytes)
                };
                let retransmits = if local_sends {
                    Some(s.retransmits)
                } else {
                    peer_stream(s.id.0).and_then(|r| u64::try_from(r.retransmits).ok())
                };
                StreamEnd {
                    id: s.id.0,
                    local_sends,
                    sent,
                    received,
                    retransmits,
                    rtt: s.rtt,
                    tcp: s.tcp,
                    addrs: Some((s.tuple.local, s.tuple.remote)),
                    // iperf3's server (3.12) shows both ends with its own time.
                    peer_seconds: None,
                }
            })
            .collect();
        let local = o
            .stream_outcomes
            .iter()
            .map(|s| s.tcp.congestion)
            .find(|c| !c.is_empty())
            .map(str::to_owned);
        let remote = o.peer.as_ref().and_then(|r| r.congestion_used.clone());
        let (sender_cc, receiver_cc) = if p.reverse || p.bidirectional {
            (local, remote)
        } else {
            (remote, local)
        };
        TestReport {
            side: Side::Server,
            peer: o.client.remote,
            cookie: o.cookie.map(|c| c.as_str().to_owned()).unwrap_or_default(),
            at: began.unwrap_or_else(SystemTime::now),
            mss: o
                .stream_outcomes
                .iter()
                .map(|s| s.tcp.mss)
                .max()
                .unwrap_or(0),
            sock_bufsize: p.window.map_or(0, u64::from),
            sndbuf: self.sndbuf,
            rcvbuf: self.rcvbuf,
            pmtu: self.pmtu,
            params: p,
            intervals,
            streams,
            seconds: o.seconds,
            cpu: o.cpu,
            remote_cpu: o.peer.as_ref().map_or_else(CpuUtil::default, |r| CpuUtil {
                total: r.cpu_util_total,
                user: r.cpu_util_user,
                system: r.cpu_util_system,
            }),
            sender_cc,
            receiver_cc,
            error: o.result.as_ref().err().map(ToString::to_string),
            diskfile: None,
        }
    }
}

/// See [`TestReport::interval`].
pub(crate) fn interval_json(iv: &Interval, side: Side, bidir: bool, pmtu: u32) -> Value {
    let secs = iv.seconds();
    let streams: Vec<Value> = iv
        .streams
        .iter()
        .map(|s| {
            let mut v = json!({ "socket": s.id.0, "start": iv.start, "end": iv.end,
                "seconds": secs, "bytes": s.bytes, "bits_per_second": rate(s.bytes, secs),
                "omitted": iv.omitted, "sender": s.role == Role::Send });
            if s.role == Role::Send {
                let us = |d: Option<std::time::Duration>| d.map_or(0, |d| d.as_micros() as u64);
                v["retransmits"] = json!(s.retransmits);
                v["snd_cwnd"] = json!(s.snd_cwnd);
                v["snd_wnd"] = json!(s.snd_wnd);
                v["rtt"] = json!(us(s.rtt));
                v["rttvar"] = json!(us(s.rttvar));
                // The connection's own (after a "packet too big", the MTU
                // reported), the interface's before its first count.
                v["pmtu"] = json!(if s.pmtu > 0 { s.pmtu } else { pmtu });
            }
            v
        })
        .collect();
    // The client's sends are the forward direction.
    let forward_role = match side {
        Side::Client => Role::Send,
        Side::Server => Role::Receive,
    };
    let sum = |roles: &[Role]| {
        let b: u64 = roles.iter().map(|&r| iv.bytes(r)).sum();
        let mut v = json!({ "start": iv.start, "end": iv.end, "seconds": secs, "bytes": b,
            "bits_per_second": rate(b, secs), "omitted": iv.omitted,
            "sender": roles.contains(&Role::Send) && (roles.len() == 1 || iv.sent() > 0) });
        if roles.contains(&Role::Send) {
            v["retransmits"] = json!(iv.retransmits());
        }
        v
    };
    if bidir {
        let reverse_role = match forward_role {
            Role::Send => Role::Receive,
            Role::Receive => Role::Send,
        };
        json!({ "streams": streams, "sum": sum(&[forward_role]),
                "sum_bidir_reverse": sum(&[reverse_role]) })
    } else {
        let roles: Vec<Role> = [Role::Send, Role::Receive]
            .into_iter()
            .filter(|&r| iv.streams.iter().any(|s| s.role == r))
            .collect();
        json!({ "streams": streams, "sum": sum(&roles) })
    }
}

/// The `--json-stream` line of an event (iperf3 3.17): `{"event": NAME,
/// "data": DATA}` on one line.
pub(crate) fn json_stream_line(event: &str, data: Value) -> String {
    json!({ "event": event, "data": data }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// iperf3's `unit_snprintf`, digits and units, on the numbers its
    /// own output above shows.
    #[test]
    fn own_rates_and_durations_in_units_that_suit_them() {
        assert_eq!(rate_text(6, 92e-6), "522 Kbit/s");
        assert_eq!(rate_text(999_288_832, 3.381), "2.36 Gbit/s");
        assert_eq!(rate_text(1_250_000, 1.0), "10.0 Mbit/s");
        assert_eq!(rate_text(5, 0.0), "0.00 bit/s");
        assert_eq!(seconds_text(3.3812), "3.381 s");
        assert_eq!(seconds_text(0.09243), "92.4 ms");
        assert_eq!(seconds_text(85.2e-6), "85 µs");
    }

    #[test]
    fn units_as_iperf3_prints_them() {
        assert_eq!(unit(1.78 * 1073741824.0, 'A'), "1.78 GByte");
        assert_eq!(unit(701.0 * 1048576.0, 'A'), " 701 MByte");
        assert_eq!(unit(509.0 * 1024.0, 'A'), " 509 KByte");
        assert_eq!(unit(0.0, 'A'), "0.00 Byte");
        // Rates: bytes per second in, bits out (powers of 1000).
        assert_eq!(unit(15.3e9 / 8.0, 'a'), "15.3 Gbit");
        assert_eq!(unit(4.79e9 / 8.0, 'a'), "4.79 Gbit");
        assert_eq!(unit(1753.0 * 1048576.0, 'M'), "1753 MByte");
        assert_eq!(unit(1e6 / 8.0, 'k'), "1000 Kbit");
        assert_eq!(unit(2.5e12 / 8.0, 'g'), "2500 Gbit");
        assert_eq!(unit(2.5e12 / 8.0, 't'), "2.50 Tbit");
        assert_eq!(unit(3.0 * 1099511627776.0, 'T'), "3.00 TByte");
        assert_eq!(unit(5.0 * 1024.0, 'K'), "5.00 KByte");
        assert_eq!(unit(8.0 * 1073741824.0, 'G'), "8.00 GByte");
    }

    #[test]
    fn bad_format_names_the_value_and_the_letters() {
        for ok in ["k", "m", "g", "t", "K", "M", "G", "T"] {
            assert!(parse_format(ok).is_ok(), "{ok}");
        }
        let e = parse_format("x").unwrap_err();
        assert!(e.contains("\"x\"") && e.contains("k, m, g, t"), "{e}");
        assert!(parse_format("mm").is_err());
    }

    /// The lines iperf3 3.12 printed on the test veth (see the module
    /// doc), column for column.
    #[test]
    fn lines_as_iperf3_prints_them() {
        let l = report_line(
            "  5",
            "",
            0.0,
            1.0,
            701 * 1048576,
            'a',
            Some(137),
            Some(2_453_667),
            "",
        );
        assert_eq!(
            l,
            "[  5]   0.00-1.00   sec   701 MBytes  5.88 Gbits/sec  137   2.34 MBytes       "
        );
        let l = report_line("  5", "", 0.0, 2.0, 1836098519, 'a', None, None, "receiver");
        assert_eq!(
            l,
            "[  5]   0.00-2.00   sec  1.71 GBytes  7.34 Gbits/sec                  receiver"
        );
        let l = report_line(
            "  8",
            "[TX-S]",
            0.0,
            2.0,
            1836098519,
            'M',
            Some(135),
            None,
            "sender",
        );
        assert_eq!(
            l,
            "[  8][TX-S]   0.00-2.00   sec  1.71 GBytes   876 MBytes/sec  135             sender"
        );
    }

    /// `[SUM]` and the separator per interval only with several streams
    /// in a direction, as iperf3 (not for `--bidir` with one each way).
    #[test]
    fn sums_and_separators_with_several_streams_in_a_direction() {
        use xtcp_engine::app::iperf3::{StreamId, StreamInterval};
        let st = |id, role| StreamInterval {
            id: StreamId(id),
            role,
            bytes: 1 << 20,
            retransmits: 1,
            rtt: None,
            rttvar: None,
            snd_cwnd: 1 << 16,
            snd_wnd: 1 << 16,
            mss: 1448,
            pmtu: 1500,
        };
        let iv = |streams| Interval {
            start: 0.0,
            end: 1.0,
            omitted: false,
            streams,
        };
        let one_each = iv(vec![st(1, Role::Send), st(3, Role::Receive)]);
        let l = interval_lines(&one_each, Side::Client, true, 'a');
        assert_eq!(l.len(), 2, "{l:?}");
        assert!(l[0].starts_with("[  1][TX-C]") && l[1].starts_with("[  3][RX-C]"));
        assert!(
            l[0].contains(" 64.0 KBytes") && !l[1].contains("KBytes"),
            "{l:?}"
        );
        let two = iv(vec![st(1, Role::Receive), st(3, Role::Receive)]);
        let l = interval_lines(&two, Side::Server, false, 'a');
        assert_eq!(l.len(), 4, "{l:?}");
        assert_eq!(
            l[2],
            "[SUM]   0.00-1.00   sec  2.00 MBytes  16.8 Mbits/sec                  "
        );
        assert_eq!(l[3], SEPARATOR);
        // --bidir -P 2: each direction's streams and then their sum, the
        // client-to-server direction first (iperf3's order on both sides).
        let kinds = |l: &[String]| -> Vec<String> {
            l.iter()
                .map(|x| x.split(']').take(2).collect::<Vec<_>>().join("]"))
                .collect()
        };
        let (s, r) = (Role::Send, Role::Receive);
        let client = iv(vec![st(1, s), st(3, s), st(5, r), st(7, r)]);
        let l = interval_lines(&client, Side::Client, true, 'a');
        assert_eq!(
            kinds(&l),
            [
                "[  1][TX-C",
                "[  3][TX-C",
                "[SUM][TX-C",
                "[  5][RX-C",
                "[  7][RX-C",
                "[SUM][RX-C",
                "- - - - - - - - - - - - - - - - - - - - - - - - -"
            ],
            "{l:?}"
        );
        let server = iv(vec![st(1, r), st(3, r), st(5, s), st(7, s)]);
        let l = interval_lines(&server, Side::Server, true, 'a');
        assert_eq!(
            kinds(&l)[..6],
            [
                "[  1][RX-S",
                "[  3][RX-S",
                "[SUM][RX-S",
                "[  5][TX-S",
                "[  7][TX-S",
                "[SUM][TX-S"
            ],
            "{l:?}"
        );
    }

    #[test]
    fn strftime_formats_as_the_c_library() {
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_796_147_887);
        assert_eq!(
            strftime("%a, %d %b %Y %H:%M:%S GMT", t, false),
            "Tue, 01 Dec 2026 17:58:07 GMT"
        );
        assert_eq!(strftime("%s", t, true), "1796147887");
    }
}
