//! `xtcp send` and `xtcp recv`: bulk transfer over xtcp's own TCP on AF_XDP,
//! against any TCP peer (a kernel program such as socat, nc or iperf3's data
//! path, or another xtcp).

use std::io::{IsTerminal, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use xtcp_engine::tcp::{CloseReason, ConnectionError, Stats};
use xtcp_engine::worker::bulk::{
    FileSource, NO_STREAM, OpenOutput, Sink, Source, Written, spawn_reader, spawn_writer,
};
use xtcp_engine::worker::{
    ConnReport, EngineConfig, EngineReport, Progress, Role, SinkKind, UmemReport,
};

use crate::args::{EngineArgs, ListenFamily, parse_size};
use crate::outfile::ReplaceFile;
use crate::report::{count, rate_text, seconds_text};
use crate::xdpstats::XdpSummary;

/// Arguments of `xtcp send`.
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("input").args(["file", "pattern", "zeros"])))]
pub struct SendArgs {
    /// The receiver: an address (IPv4 or IPv6), or a name resolved (its
    /// first address); `HOST%DEV` names the interface too (as --iface).
    #[arg(
        short = 'c',
        long = "client",
        value_name = "HOST",
        required_unless_present = "connect"
    )]
    pub host: Option<String>,
    /// The receiver's port.
    #[arg(short, long, default_value_t = 5201,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    // The doc comment is clap's help text: its brackets are syntax, not links.
    #[allow(rustdoc::broken_intra_doc_links)]
    /// The earlier spelling of `-c HOST -p PORT`: ADDR:PORT, [IPV6]:PORT.
    #[arg(long, hide = true, value_name = "ADDR:PORT", conflicts_with_all = ["host", "port"])]
    pub connect: Option<SocketAddr>,
    /// Our address (default: the kernel's preferred source for the route);
    /// ADDR%DEV also names the interface, as --iface DEV does.
    #[arg(
        short = 'B',
        long = "bind-address",
        value_name = "ADDR[%DEV]",
        alias = "local",
        value_parser = crate::args::parse_addr_dev
    )]
    pub local: Option<crate::args::AddrDev>,
    /// Send this file (default, or `-`: standard input).
    #[arg(short = 'F', long)]
    pub file: Option<PathBuf>,
    /// Send the seeded pseudo-random stream (check it with `xtcp recv --verify SEED`).
    #[arg(long)]
    pub pattern: Option<u64>,
    /// Send zeros at no cost to produce them (the send buffer is never
    /// rewritten, like `iperf3 -Z`): for benchmarks.
    #[arg(long)]
    pub zeros: bool,
    /// Bytes per connection (with --pattern or --zeros), e.g. 1G; with
    /// --file, its first BYTES (as many as it has, or fewer).
    #[arg(short = 'n', long, value_parser = parse_size)]
    pub bytes: Option<u64>,
    /// Parallel connections (with --pattern or --zeros; each sends -n bytes).
    #[arg(
        short = 'P',
        long = "parallel",
        alias = "connections",
        value_name = "PARALLEL",
        default_value_t = 1
    )]
    pub connections: usize,
    /// Give up on a connection whose SYN has no answer after this many
    /// milliseconds (as iperf3's flag).
    #[arg(long, value_name = "MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub connect_timeout: u64,
    /// Print the final report as JSON on stdout.
    #[arg(short = 'J', long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl SendArgs {
    /// What cannot go together (see `Cmd::usage_error`).
    pub fn usage_error(&self) -> Option<String> {
        let generated = self.pattern.is_some() || self.zeros;
        if !(1..=1024).contains(&self.connections) {
            return Some(format!(
                "-P (--parallel) {} is outside 1..=1024",
                self.connections
            ));
        }
        let file = self.file.as_ref().is_some_and(|f| f.as_os_str() != "-");
        if self.bytes.is_some() && !generated && !file {
            return Some(
                "-n (--bytes) goes with --pattern SEED, --zeros or --file FILE (standard input: \
                 `head -c BYTES | xtcp send …`)"
                    .into(),
            );
        }
        if generated && self.bytes.is_none() {
            return Some(
                "--pattern and --zeros need -n BYTES (--bytes; per connection, e.g. 1G)".into(),
            );
        }
        if self.connections != 1 && !generated {
            return Some(
                "-P (--parallel) above 1 needs --pattern or --zeros (one input cannot feed \
                 several streams)"
                    .into(),
            );
        }
        None
    }

    /// `--connect ADDR:PORT` (an earlier spelling) as `-c ADDR -p PORT`.
    pub fn resolve_old_spellings(&mut self) {
        if let Some(a) = self.connect.take() {
            self.host = Some(a.ip().to_string());
            self.port = a.port();
        }
    }

    /// The receiver.
    pub fn remote(&self) -> anyhow::Result<SocketAddr> {
        use std::net::ToSocketAddrs;
        let r = match (self.connect, self.host.as_deref()) {
            (Some(a), _) => a,
            (None, Some(h)) => match crate::args::parse_ip(crate::args::split_dev(h).0) {
                Ok(ip) => SocketAddr::new(ip, self.port),
                Err(_) => (h, self.port)
                    .to_socket_addrs()
                    .with_context(|| format!("-c {h}: cannot resolve the host"))?
                    .next()
                    .with_context(|| format!("-c {h}: the name has no address"))?,
            },
            (None, None) => bail!("send needs the receiver: -c HOST [-p PORT]"),
        };
        let r = SocketAddr::new(r.ip().to_canonical(), r.port());
        let given = self.host.clone().unwrap_or_else(|| r.ip().to_string());
        crate::args::refuse_link_local("-c", &given, r.ip())?;
        Ok(r)
    }
}

/// Arguments of `xtcp recv`.
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("output").args(["out", "verify", "discard"])))]
pub struct RecvArgs {
    /// Address to listen on (default: every address of the interface: its
    /// IPv4 addresses and its IPv6 addresses but link-local ones; -4 or -6
    /// takes one family; `::` is every address too, `0.0.0.0` the IPv4
    /// ones); ADDR%DEV also names the interface, as --iface DEV does
    #[arg(short = 'B', long = "bind-address", value_name = "ADDR[%DEV]",
          value_parser = crate::args::parse_addr_dev)]
    pub addr: Option<crate::args::AddrDev>,
    #[command(flatten)]
    pub family: ListenFamily,
    /// Port to listen on.
    #[arg(short, long, default_value_t = 5201,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    // The doc comment is clap's help text: its brackets are syntax, not links.
    #[allow(rustdoc::broken_intra_doc_links)]
    /// The earlier spelling of `[-B ADDR] -p PORT`: [ADDR:]PORT.
    #[arg(long, hide = true, value_name = "[ADDR:]PORT", value_parser = parse_listen,
          conflicts_with_all = ["addr", "port"])]
    pub listen: Option<(Option<IpAddr>, u16)>,
    /// Write the received stream to this file (default, or `-`: standard
    /// output): it replaces FILE once the stream ended well (the peer's
    /// FIN); a stream that did not leaves FILE as it was and what arrived
    /// in FILE.partial.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Check the received stream against `xtcp send --pattern SEED`
    /// (with -n, its length too; without, an empty stream fails). A stream
    /// that differs is reset where it differs: its sender learns it failed.
    #[arg(long)]
    pub verify: Option<u64>,
    /// Each stream must hold exactly this many bytes (e.g. the -n of `xtcp
    /// send --pattern SEED -n BYTES`; K, M, G are 1024, 1024², 1024³): a
    /// shorter or longer one fails, and --out leaves FILE as it was. A
    /// longer one is reset as its bytes pass BYTES.
    #[arg(short = 'n', long, value_parser = parse_size, value_name = "BYTES")]
    pub bytes: Option<u64>,
    /// Count the received bytes and drop them.
    #[arg(long)]
    pub discard: bool,
    /// Serve connection after connection, several at once too, until interrupted (with --verify or --discard). Without it recv takes one connection and refuses others with a reset.
    #[arg(long)]
    pub keep_listening: bool,
    /// Reset a connection whose stream brings no byte for this many
    /// milliseconds (100..=86400000), and fail, as iperf3's --rcv-timeout
    /// ends a test: a sender that died without a word (its host gone, its
    /// link down) would hold recv for ever, as it would the kernel's TCP.
    /// Default: wait for ever (a sender may pause, as a pipe does).
    #[arg(long = "rcv-timeout", value_name = "MS",
          value_parser = clap::value_parser!(u64).range(100..=86_400_000))]
    pub rcv_timeout: Option<u64>,
    /// Print the final report as JSON on stdout.
    #[arg(short = 'J', long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl RecvArgs {
    /// `--listen [ADDR:]PORT` (an earlier spelling) as `[-B ADDR] -p PORT`.
    pub fn resolve_old_spellings(&mut self) {
        if let Some((addr, port)) = self.listen.take() {
            self.addr = addr.map(|ip| crate::args::AddrDev { ip, dev: None });
            self.port = port;
        }
    }

    /// What cannot go together (see `Cmd::usage_error`).
    pub fn usage_error(&self) -> Option<String> {
        let taken = self.verify.is_some() || self.discard;
        if self.keep_listening && !taken {
            return Some(
                "--keep-listening needs --verify SEED or --discard: an output file or standard \
                 output takes one connection's stream"
                    .to_owned(),
            );
        }
        let stdout = self.out.as_ref().is_none_or(|p| p.as_os_str() == "-");
        (self.json && !taken && stdout).then(|| {
            "--json writes to standard output: give --out FILE, --verify or --discard".to_owned()
        })
    }

    /// Where to listen.
    fn at(&self) -> (Option<IpAddr>, u16) {
        self.listen
            .unwrap_or((self.addr.as_ref().map(|a| a.ip), self.port))
    }
}

fn parse_listen(s: &str) -> Result<(Option<IpAddr>, u16), String> {
    if let Ok(p) = s.parse::<u16>() {
        return Ok((None, p));
    }
    s.parse::<SocketAddr>()
        .map(|a| (Some(a.ip().to_canonical()), a.port()))
        .map_err(|_| format!("`{s}` is not PORT, ADDR:PORT or [IPV6]:PORT"))
}

/// The report printed at the end.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    ok: bool,
    error: Option<String>,
    bytes: u64,
    seconds: f64,
    gbps: f64,
    retransmits: u64,
    /// Segments that arrived beyond a hole and were kept, all connections
    /// (see `ConnSummary::out_of_order`).
    out_of_order: u64,
    segments_sent: u64,
    segments_received: u64,
    /// Received bytes the sink took straight from the RX frames (the rest
    /// went through TCP's receive buffer).
    bytes_in_place: u64,
    cpu_seconds: f64,
    cpu_seconds_per_gib: f64,
    connections: Vec<ConnSummary>,
    /// Connections in the totals above but not in `connections`: they
    /// ended before the last 10,000 (`recv --keep-listening`, whose
    /// memory would otherwise grow with every connection; each was said
    /// on standard error as it ended).
    #[serde(skip_serializing_if = "is_zero")]
    connections_not_listed: usize,
    /// XDP statistics: steered, dropped at the redirect, per queue.
    xdp: XdpSummary,
    /// `recv --verify SEED`: the seed and the bytes found to match it, in
    /// all connections (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    verified: Option<Verified>,
    /// `recv -n`: each stream's length, checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    expected_bytes: Option<u64>,
    engine: &'a EngineReport,
    /// The connections' MSS steps, for what is said of them.
    #[serde(skip)]
    steps: Vec<MtuSteps>,
    /// Each connection was said as it ended (`recv --keep-listening`):
    /// the text lists again only those that failed.
    #[serde(skip)]
    each_said: bool,
}

#[derive(Debug, Serialize, Clone, Copy)]
struct Verified {
    seed: u64,
    bytes: u64,
}

/// What `recv` expects of each stream.
#[derive(Debug, Clone, Copy, Default)]
struct Expect {
    /// `--verify SEED`.
    verify: Option<u64>,
    /// `-n BYTES`: its exact length.
    bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
struct ConnSummary {
    id: usize,
    queue: u32,
    local: SocketAddr,
    remote: SocketAddr,
    result: String,
    bytes_sent: u64,
    bytes_received: u64,
    retransmits: u64,
    /// Data segments that arrived beyond a hole (after the peer's segments
    /// before them were lost, or overtaken) and were kept: what a receiver
    /// sees of the path's losses.
    out_of_order: u64,
    /// Of those, segments dropped: they made one hole too many to keep
    /// track of.
    out_of_order_dropped: u64,
    /// The send buffer's limit at the end, bytes of frames (auto-tuned, or
    /// `--sndbuf`).
    send_buffer: usize,
    seconds: f64,
    unacceptable: Unacceptable,
    /// `send`: the stream was whole and acknowledged, and the receiver had
    /// not closed its side `--grace` later: let go.
    peer_open: bool,
    /// The send MSS at the end (payload bytes a segment); `None` where
    /// the connection was never established.
    mss: Option<usize>,
    /// That MSS was rounded down to whole UMEM frames (`--mss-clip on`),
    /// below what its packets (`packet_mtu`) could carry.
    mss_clipped: bool,
    /// Times it stepped down for an MTU black hole (timeouts in a row
    /// while large segments were sent).
    mss_black_hole_steps: u64,
    /// Times it stepped down for an ICMP "packet too big" from the path.
    mss_path_mtu_steps: u64,
    /// Times it stepped down as the interface's own MTU fell during it.
    mss_link_mtu_steps: u64,
    /// Times it went back up to the MSS agreed at the handshake, as the
    /// MTU a hop reported expired (`--pmtu-expires`).
    mss_path_mtu_raises: u64,
    /// The MTU the last "packet too big" taken reported (below IP's least,
    /// the least is in force); `None` where none was taken.
    path_mtu_reported: Option<u64>,
    /// "Packet too big" messages about it that it did not take (about a
    /// sequence number not in flight, or an MTU not below its own).
    icmp_too_big_ignored: u64,
    /// The largest IP packet its segments made at the end (after a step
    /// down, the common MTU it stepped to); `None` where the connection
    /// was never established.
    packet_mtu: Option<usize>,
    /// `send`: from its first SYN to the connection established (not in
    /// `seconds`); `None` where it was not established.
    handshake_seconds: Option<f64>,
}

/// The peer's segments a connection did not take, and how it answered them
/// (what Linux counts in `TcpExt`): forged or stale segments show here.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Unacceptable {
    /// Failed PAWS: a timestamp older than the last one taken (RFC 7323).
    paws: u64,
    /// Outside the receive window.
    out_of_window: u64,
    /// Data or a FIN received already, sent again: the peer's
    /// retransmission where the original arrived (as after an ACK that was
    /// lost or late), or a stale segment.
    old_sequence: u64,
    /// ACKs sent to challenge an in-window RST, any SYN, or an ACK too old
    /// (RFC 5961).
    challenge_acks: u64,
    /// Of the unacceptable segments without data or a FIN, those left
    /// unanswered, and challenge ACKs not sent: together they get one
    /// answer per 500 ms (RFC 5961 §7, as Linux's `tcp_invalid_ratelimit`; Linux
    /// counts them in `TCPACKSkippedPAWS`, `TCPACKSkippedSeq` and
    /// `TCPACKSkippedChallenge`).
    answers_skipped: u64,
}

impl Unacceptable {
    pub(crate) fn of(s: &Stats) -> Unacceptable {
        Unacceptable {
            paws: s.paws_drops,
            out_of_window: s.out_of_window,
            old_sequence: s.old_sequence,
            challenge_acks: s.challenge_acks,
            answers_skipped: s.invalid_acks_skipped,
        }
    }
}

/// Why a run stopped before its connections ended by themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// It did not.
    No,
    /// SIGINT or SIGTERM.
    Interrupted,
    /// Its interface went away: nothing xtcp sends goes out, resets
    /// neither.
    IfaceGone,
}

impl Stop {
    fn of(interrupted: bool, iface_gone: bool) -> Stop {
        if iface_gone {
            Stop::IfaceGone
        } else if interrupted {
            Stop::Interrupted
        } else {
            Stop::No
        }
    }
}

/// A connection's end in words: Ok, or what went wrong; `stop`: why the
/// run stopped, if it did; `sending`: this side sends.
fn describe(
    r: &ConnReport,
    connect_timeout: Duration,
    stop: Stop,
    sending: bool,
) -> Result<(), String> {
    let interrupted = stop == Stop::Interrupted;
    if let Some(e) = r.source_error {
        return Err(format!("reading the input failed: {e}"));
    }
    if let Some(off) = r.mismatch {
        return Err(format!(
            "--verify failed: the stream differs from the pattern at byte {off}"
        ));
    }
    match r.reason {
        CloseReason::Normal => Ok(()),
        CloseReason::Aborted if stop == Stop::IfaceGone => {
            Err("aborted as the interface went away (no reset could reach the peer)".into())
        }
        CloseReason::Aborted if interrupted && r.established.is_none() => {
            Err("interrupted before the connection was established".into())
        }
        CloseReason::Aborted if interrupted && sending => Err(
            "interrupted before the stream's end: reset, so that the receiver knows its stream \
             is short"
                .into(),
        ),
        CloseReason::Aborted if interrupted => {
            Err("interrupted: reset after --grace (the peer had not closed)".into())
        }
        CloseReason::Aborted => Err("aborted (reset sent)".into()),
        CloseReason::Error(ConnectionError::ConnectTimeout) => {
            Err(connect_timeout_message(r, connect_timeout))
        }
        CloseReason::Error(e) => Err(e.to_string()),
    }
}

/// What an unanswered connect tried, for the user to act on.
pub fn connect_timeout_message(r: &ConnReport, waited: Duration) -> String {
    let syns = r.stats.segments_sent.max(1);
    format!(
        "no answer from {} within {:.1} s (--connect-timeout): {syns} SYN{} sent from {}; \
         is the address right, does something listen on port {}, and does a firewall \
         drop it?",
        r.tuple.remote,
        waited.as_secs_f64(),
        if syns == 1 { "" } else { "s" },
        r.tuple.local,
        r.tuple.remote.port(),
    )
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// How connection `r` ended, for its report: Ok, or what went wrong
/// (`stop`: why the run stopped, if it did; `sending`: this side sends;
/// `unserved`: packets of xtcp's that came in on a queue it does not
/// serve).
fn conn_result(
    r: &ConnReport,
    connect_timeout: Duration,
    stop: Stop,
    sending: bool,
    expect: Expect,
    unserved: Option<u64>,
) -> Result<(), String> {
    // One longer than -n was reset as it passed it: that is why.
    match expect.bytes {
        Some(n) if r.bytes_received > n => Err(format!(
            "the stream brought more than the {n} bytes of -n: reset after {} bytes",
            r.bytes_received
        )),
        _ => describe(r, connect_timeout, stop, sending)
            .and_then(|()| stream_as_expected(r.bytes_received, expect)),
    }
    .map_err(|e| match unserved {
        // The answers may never have reached xtcp.
        Some(n) if r.reason == CloseReason::Error(ConnectionError::ConnectTimeout) => {
            format!(
                "{e} ({} of xtcp's connections came in on a queue it does not serve, and \
                 were dropped: the answers may be among them; see the XDP line)",
                count(n, "packet")
            )
        }
        _ => e,
    })
}

/// The run's error for connection `r`'s.
fn conn_error(r: &ConnReport, e: &str) -> String {
    format!(
        "connection {} ({} → {}): {e}",
        r.id, r.tuple.local, r.tuple.remote
    )
}

/// Reports `recv --keep-listening` keeps for its final one: the last
/// this many; those before are in [`Earlier`]'s totals.
const KEPT_REPORTS: usize = 10_000;

/// Connections' counts summed, for a run's report.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Totals {
    connections: usize,
    bytes_acked: u64,
    bytes_received: u64,
    retransmits: u64,
    out_of_order: u64,
    segments_sent: u64,
    segments_received: u64,
    bytes_in_place: u64,
}

impl Totals {
    fn add(&mut self, r: &ConnReport) {
        self.connections += 1;
        self.bytes_acked += r.bytes_acked;
        self.bytes_received += r.bytes_received;
        self.retransmits += r.stats.retransmits;
        self.out_of_order += r.stats.ooo_segments;
        self.segments_sent += r.stats.segments_sent;
        self.segments_received += r.stats.segments_received;
        self.bytes_in_place += r.stats.bytes_delivered_direct;
    }
}

/// The connections a run's report no longer lists (they ended before the
/// last [`KEPT_REPORTS`]): their totals, and the first error among them.
#[derive(Debug, Default, Clone, PartialEq)]
struct Earlier {
    totals: Totals,
    error: Option<String>,
}

impl Earlier {
    /// `r` leaves the list; `result` is how it ended.
    fn fold(&mut self, r: &ConnReport, result: Result<(), String>) {
        self.totals.add(r);
        if let Err(e) = result {
            self.error.get_or_insert_with(|| conn_error(r, &e));
        }
    }
}

/// The last `cap` connection reports, in the order they ended, and the
/// others folded into [`Earlier`]: memory that does not grow with the
/// connections a run serves.
#[derive(Debug)]
struct Kept {
    cap: usize,
    reports: std::collections::VecDeque<ConnReport>,
    earlier: Earlier,
}

impl Kept {
    fn new(cap: usize) -> Kept {
        Kept {
            cap,
            // All of it at once (untouched pages cost nothing): grown by
            // doubling, the ring would end up larger than `cap`, and touch
            // it all as it turns.
            reports: std::collections::VecDeque::with_capacity(cap),
            earlier: Earlier::default(),
        }
    }

    /// `r` ended; the oldest kept one leaves if there are `cap`, its
    /// result from `result`.
    fn push(&mut self, r: &ConnReport, result: impl Fn(&ConnReport) -> Result<(), String>) {
        if self.reports.len() == self.cap
            && let Some(old) = self.reports.pop_front()
        {
            self.earlier.fold(&old, result(&old));
        }
        self.reports.push_back(r.clone());
    }
}

fn summarise<'a>(
    report: &'a EngineReport,
    cfg: &EngineConfig,
    sending: bool,
    writer: Option<Written>,
    expected: usize,
    expect: Expect,
    earlier: Option<&Earlier>,
) -> Summary<'a> {
    // The cause of everything else that failed, so said first: an
    // interface gone, then an output that failed (the connection it fed
    // was reset for it).
    let mut error = report.iface_gone.then(|| iface_gone(&report.iface));
    let unserved = report.steer.map(|s| s.no_socket).filter(|&n| n > 0);
    // The writer never got a stream (no connection came, said below as for
    // the other sinks), or its stream stopped short (its connection
    // failed, said below): not an output error.
    let output_failed = writer.as_ref().and_then(|w| {
        w.result
            .as_ref()
            .err()
            .filter(|e| e.kind() != NO_STREAM && e.kind() != std::io::ErrorKind::UnexpectedEof)
    });
    if let (Some(e), Some(w)) = (output_failed, &writer) {
        error.get_or_insert_with(|| {
            format!("writing the output failed after {} bytes: {e}", w.bytes)
        });
    }
    // Connections that ended before those listed (recv --keep-listening
    // keeps the last `KEPT_REPORTS`): their error comes first, as they
    // did.
    if let Some(e) = earlier.and_then(|e| e.error.clone()) {
        error.get_or_insert(e);
    }
    let conns: Vec<ConnSummary> = report
        .connections
        .iter()
        .map(|r| {
            let res = conn_result(
                r,
                cfg.tcp.connect_timeout.unwrap_or_default(),
                Stop::of(report.interrupted, report.iface_gone),
                sending,
                expect,
                unserved,
            );
            if let Err(e) = &res {
                error.get_or_insert_with(|| conn_error(r, e));
            }
            let steps = MtuSteps::of(r);
            ConnSummary {
                id: r.id,
                queue: r.queue,
                local: r.tuple.local,
                remote: r.tuple.remote,
                result: res.err().unwrap_or_else(|| "ok".into()),
                // Delivered as far as TCP knows: what the peer acknowledged
                // (all that was written, once the connection closed
                // cleanly; less where it ended before).
                bytes_sent: r.bytes_acked,
                bytes_received: r.bytes_received,
                retransmits: r.stats.retransmits,
                out_of_order: r.stats.ooo_segments,
                out_of_order_dropped: r.stats.ooo_dropped,
                send_buffer: r.send_buffer,
                seconds: r
                    .established
                    .map_or(0.0, |e| r.ended.saturating_duration_since(e).as_secs_f64()),
                unacceptable: Unacceptable::of(&r.stats),
                peer_open: r.peer_open,
                mss: steps.mss,
                mss_clipped: r.established.is_some() && r.send_mss_clipped,
                mss_black_hole_steps: steps.black_hole,
                mss_path_mtu_steps: steps.icmp,
                mss_link_mtu_steps: steps.link,
                mss_path_mtu_raises: steps.raised,
                path_mtu_reported: steps.reported,
                icmp_too_big_ignored: r.stats.icmp_too_big_ignored,
                packet_mtu: steps.mtu,
                handshake_seconds: r
                    .opened
                    .zip(r.established)
                    .map(|(o, e)| e.saturating_duration_since(o).as_secs_f64()),
            }
        })
        .collect();
    if let Some(w) = &writer
        && w.result.is_ok()
    {
        let got: u64 = conns.iter().map(|c| c.bytes_received).sum();
        if w.bytes != got {
            error.get_or_insert_with(|| {
                format!("the output has {} bytes of the {got} received", w.bytes)
            });
        }
    }
    // An interrupt that cut nothing fails nothing: a stream sent whole and
    // acknowledged, or received whole, is a success however the run was
    // then stopped (a cut one failed above, as its connection's result).
    // Every connection's counts: those listed and those before them.
    let not_listed = earlier.map_or(0, |e| e.totals.connections);
    let mut all = earlier.map(|e| e.totals).unwrap_or_default();
    for r in &report.connections {
        all.add(r);
    }
    if report.interrupted && all.connections == 0 {
        error.get_or_insert_with(|| "interrupted: no connection arrived".into());
    }
    if conns.len() < expected {
        let by = if report.interrupted {
            "interrupted: "
        } else {
            ""
        };
        error.get_or_insert_with(|| {
            format!("{by}{} of {expected} connections finished", conns.len())
        });
    }
    // Received into an output: what it holds.
    let bytes: u64 = match &writer {
        Some(w) if w.result.as_ref().is_err_and(|e| e.kind() == NO_STREAM) => 0,
        Some(w) => w.bytes,
        None if sending => all.bytes_acked,
        None => all.bytes_received,
    };
    let seconds = report.seconds;
    let gib = bytes as f64 / f64::from(1u32 << 30);
    Summary {
        steps: report.connections.iter().map(MtuSteps::of).collect(),
        bytes,
        seconds,
        gbps: if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds / 1e9
        } else {
            0.0
        },
        retransmits: all.retransmits,
        out_of_order: all.out_of_order,
        segments_sent: all.segments_sent,
        segments_received: all.segments_received,
        bytes_in_place: all.bytes_in_place,
        connections_not_listed: not_listed,
        each_said: false,
        cpu_seconds: report.cpu_seconds,
        cpu_seconds_per_gib: if gib > 0.0 {
            report.cpu_seconds / gib
        } else {
            0.0
        },
        verified: None,
        expected_bytes: expect.bytes,
        ok: error.is_none(),
        error,
        connections: conns,
        xdp: XdpSummary::of(report),
        engine: report,
    }
}

/// A stream that ended well against what `recv` expects of it: `-n`'s
/// length, and with `--verify` no empty stream (nothing was checked).
fn stream_as_expected(received: u64, expect: Expect) -> Result<(), String> {
    match expect.bytes {
        Some(n) if received != n => Err(format!(
            "the stream held {received} bytes, {} than the {n} of -n",
            if received < n { "fewer" } else { "more" }
        )),
        None if expect.verify.is_some() && received == 0 => Err(
            "--verify: the stream was empty, nothing to check (give -n 0 if that is right)".into(),
        ),
        _ => Ok(()),
    }
}

/// "UMEM 32 MiB, 30 MiB of it on huge pages (transparent), 2048-byte
/// frames".
fn umem_line(u: &UmemReport) -> String {
    let mib = |b: u64| format!("{:.0} MiB", b as f64 / f64::from(1 << 20));
    let huge = match u.huge_bytes {
        Some(h) => format!(
            "{} of it on huge pages ({})",
            mib(h),
            if u.reserved_hugepages {
                "reserved"
            } else {
                "transparent"
            }
        ),
        None => "huge pages unknown".to_owned(),
    };
    format!(
        "UMEM {}, {huge}, {}-byte frames",
        mib(u.bytes),
        u.frame_size
    )
}

/// A handshake this long took a retransmitted SYN (or SYN-ACK) at least:
/// the first retransmission waits a second (RFC 6298's initial RTO).
const HANDSHAKE_SLOW: f64 = 1.0;

/// Set once `send`/`recv --json` has printed its report: an error after
/// it is in the report; one before it gets a document of its own (see
/// [`json_error`]).
static JSON_PRINTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What `send`/`recv --json` prints on standard output when it fails
/// before its report (a bad argument, an interface, no answer to ARP): a
/// document that scripts can read, as iperf3 `-J` prints its error.
pub fn json_error(error: &str) {
    // (A struct: its fields in the report's order, `ok` first.)
    #[derive(Serialize)]
    struct Failed<'a> {
        ok: bool,
        error: &'a str,
    }
    if !JSON_PRINTED.swap(true, Ordering::SeqCst)
        && let Ok(doc) = serde_json::to_string_pretty(&Failed { ok: false, error })
    {
        println!("{doc}");
    }
}

/// A connection's MSS steps for an MTU on the path, as its report says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MtuSteps {
    id: usize,
    remote: SocketAddr,
    /// The send MSS and the largest IP packet at the end (None: never
    /// established).
    mss: Option<usize>,
    mtu: Option<usize>,
    /// Steps for an ICMP "packet too big", for a black hole, and for the
    /// interface's own MTU falling.
    icmp: u64,
    black_hole: u64,
    link: u64,
    /// Steps back up, as a reported MTU expired (`--pmtu-expires`).
    raised: u64,
    /// The MTU the last "packet too big" taken reported.
    reported: Option<u64>,
    /// It ended timed out: the segments of the stepped-down size were
    /// lost too, so no MTU was the cause.
    timed_out: bool,
}

impl MtuSteps {
    /// The same, named by `id` (the client's: iperf3's stream id).
    pub(crate) fn named(self, id: usize) -> MtuSteps {
        MtuSteps { id, ..self }
    }

    pub(crate) fn of(r: &ConnReport) -> MtuSteps {
        MtuSteps {
            id: r.id,
            remote: r.tuple.remote,
            mss: r.established.map(|_| r.send_mss),
            mtu: r.established.map(|_| r.packet_mtu),
            icmp: r.stats.mss_path_mtu_steps,
            black_hole: r.stats.mss_black_hole_steps,
            link: r.stats.mss_link_mtu_steps,
            raised: r.stats.mss_path_mtu_raises,
            reported: Some(r.stats.path_mtu_reported).filter(|&m| m > 0),
            timed_out: matches!(
                r.reason,
                CloseReason::Error(ConnectionError::TimedOut | ConnectionError::UserTimeout)
            ),
        }
    }
}

/// The route's gateway and device for the advice of [`mtu_notes`] (the
/// device too: a link-local gateway needs it).
pub(crate) fn route_via(e: &EngineReport) -> String {
    match e.gateway {
        Some(g) => format!("via {g} dev {}", e.iface),
        None => format!("dev {}", e.iface),
    }
}

/// What the connections' MSS steps were and what spares them (`via`: the
/// route's gateway or device, for the advice), a line for each text and
/// peer, the connections with the same one named together by their ids,
/// as `noun` (singular, plural) calls them.
pub(crate) fn mtu_notes(connections: &[MtuSteps], via: &str, noun: (&str, &str)) -> Vec<String> {
    let mut notes: Vec<(String, SocketAddr, Vec<usize>)> = Vec::new();
    for c in connections {
        let Some(text) = mtu_note(c, via) else {
            continue;
        };
        match notes
            .iter_mut()
            .find(|(t, r, _)| *t == text && *r == c.remote)
        {
            Some((_, _, ids)) => ids.push(c.id),
            None => notes.push((text, c.remote, vec![c.id])),
        }
    }
    notes
        .into_iter()
        .map(|(text, remote, mut ids)| {
            ids.sort_unstable();
            let who = match ids[..] {
                [one] => format!("{} {one}", noun.0),
                _ => match id_runs(&ids) {
                    Some(runs) => format!("{} {runs}", noun.1),
                    None => format!("{} {}", ids.len(), noun.1),
                },
            };
            format!("xtcp: {who} → {remote}: {text}")
        })
        .collect()
}

/// Ids in ascending order as runs, `0–7` or `1, 3–9`; None where that
/// takes more than four runs (the caller gives their number instead).
fn id_runs(ids: &[usize]) -> Option<String> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &id in ids {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == id => *last = id,
            _ => runs.push((id, id)),
        }
    }
    (runs.len() <= 4).then(|| {
        runs.iter()
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}–{b}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// What one connection's MSS steps were (`via`: the route's gateway or
/// device, for the advice); None where it took none.
fn mtu_note(c: &MtuSteps, via: &str) -> Option<String> {
    let (mss, mtu) = (c.mss?, c.mtu?);
    // (`replace`: it works where a route to the peer is there already.)
    let route = format!("`ip route replace {} {via} mtu {mtu}`", c.remote.ip());
    let least = if c.remote.is_ipv4() {
        "IPv4's least, 576"
    } else {
        "IPv6's least, 1280"
    };
    let times = |n: u64| match n {
        1 => "once".to_owned(),
        n => format!("{n} times"),
    };
    Some(match (c.icmp, c.black_hole) {
        (0, 0) if c.link > 0 => format!(
            "the interface's own MTU fell during the connection, and the MSS stepped down \
             with it to {mss} bytes (packets of {mtu})"
        ),
        (0, 0) => return None,
        (icmp, 0) if c.raised >= icmp => format!(
            "a hop reported an MTU of {} (ICMP \"packet too big\") and the MSS stepped down; \
             once that report had expired (--pmtu-expires) it went back up to {mss} bytes \
             (packets of {mtu}), and no hop refused those",
            c.reported.unwrap_or(0)
        ),
        (_, 0) => match c.reported {
            Some(r) if r < mtu as u64 => format!(
                "a hop reported an MTU of {r} (ICMP \"packet too big\"), below {least}: the MSS \
                 stepped down to {mss} bytes (packets of {mtu}); a report that low is forged, \
                 or a link below what IP allows"
            ),
            _ if c.raised > 0 => format!(
                "the path's MTU is {mtu} (a hop said so: ICMP \"packet too big\"), and the MSS \
                 stepped down to {mss} bytes {}, going back up in between as the report \
                 expired (--pmtu-expires); giving the route that MTU ({route}) spares the \
                 segments sent again",
                times(c.icmp)
            ),
            _ => format!(
                "the path's MTU is {mtu} (a hop said so: ICMP \"packet too big\"), and the MSS \
                 stepped down to {mss} bytes; giving the route that MTU ({route}) spares the \
                 segments sent again"
            ),
        },
        (_, bh) if bh > 0 && c.timed_out => format!(
            "large segments were lost timeout after timeout, and the MSS stepped down {} to \
             {mss} bytes (packets of {mtu}); those were lost too, until the connection timed \
             out: the path failed for every size (a link down, the peer gone), not for large \
             packets only",
            times(bh)
        ),
        (0, bh) => format!(
            "large segments were lost timeout after timeout, and the MSS stepped down {} to \
             {mss} bytes (packets of {mtu}): likely a hop on the path with a smaller MTU than \
             the segments were sized for, whose ICMP does not reach xtcp; if so, giving the \
             route that MTU ({route}) spares the timeouts",
            times(bh)
        ),
        (icmp, bh) => format!(
            "a hop reported an MTU of {} (ICMP \"packet too big\") and the MSS stepped down {}; \
             then large segments were lost timeout after timeout, and it stepped down {} more, \
             to {mss} bytes (packets of {mtu}): likely a hop further on with a smaller MTU whose \
             ICMP does not reach xtcp (or an outage); if so, giving the route that MTU ({route}) \
             spares the timeouts",
            c.reported.unwrap_or(0),
            times(icmp),
            times(bh)
        ),
    })
}

/// The summary's MSS is the one offered at the interface's `mtu`: where
/// connections sent smaller packets (`packet_mtus`, what a peer's MSS or
/// the path held them to), what they were, said after it.
fn held_to(packet_mtus: impl Iterator<Item = Option<usize>>, mtu: usize) -> String {
    distinct(packet_mtus.flatten().filter(|&m| m < mtu)).map_or_else(String::new, |each| {
        format!(
            " (the connections sent packets of at most {each} bytes: the peer's MSS or the \
             path's MTU)"
        )
    })
}

/// What the summary says of send MSSes that `--mss-clip on` rounded down
/// to whole frames of `frame` bytes ("" where none was).
fn clipped_to(msses: impl Iterator<Item = usize>, frame: usize) -> String {
    distinct(msses).map_or_else(String::new, |each| {
        format!(" (segments of {each} payload bytes: whole {frame}-byte frames, --mss-clip on)")
    })
}

/// The distinct values, in order, as "a, b" (None: no value).
fn distinct(values: impl Iterator<Item = usize>) -> Option<String> {
    let mut v: Vec<usize> = values.collect();
    v.sort_unstable();
    v.dedup();
    let each: Vec<String> = v.iter().map(ToString::to_string).collect();
    (!each.is_empty()).then(|| each.join(", "))
}

fn print_summary(s: &Summary<'_>, json: bool, verb: &str) -> anyhow::Result<()> {
    // (Said on standard error with --json too: JSON has `peer_open`,
    // `mss`, `mss_path_mtu_steps` and `mss_black_hole_steps`.)
    for line in mtu_notes(
        &s.steps,
        &route_via(s.engine),
        ("connection", "connections"),
    ) {
        eprintln!("{line}");
    }
    // A handshake that took a retransmitted SYN or more (the first waits
    // a second): said, as the seconds above begin after it.
    let unserved = s.xdp.no_socket.is_some_and(|n| n > 0);
    for c in &s.connections {
        if let Some(h) = c.handshake_seconds.filter(|&h| h >= HANDSHAKE_SLOW) {
            eprintln!(
                "xtcp: connection {} → {}: the handshake took {}: SYNs or their answers were \
                 lost and sent again{}; the summary's seconds begin once it was done",
                c.id,
                c.remote,
                seconds_text(h),
                if unserved {
                    " (some came in on a queue xtcp does not serve: see `no socket` on the XDP \
                     line)"
                } else {
                    ""
                }
            );
        }
    }
    let when = if s.engine.interrupted {
        "when send was interrupted"
    } else {
        "--grace later"
    };
    for c in s.connections.iter().filter(|c| c.peer_open) {
        eprintln!(
            "xtcp: connection {} → {}: the stream was whole and acknowledged, but the receiver \
             had not closed its side {when}: let go (the seconds end at the acknowledgement)",
            c.id, c.remote
        );
    }
    if json {
        JSON_PRINTED.store(true, Ordering::SeqCst);
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, s)?;
        writeln!(out)?;
        return Ok(());
    }
    let e = s.engine;
    let binds: Vec<&str> = e
        .bind
        .iter()
        .map(|b| if b.zerocopy { "zero-copy" } else { "copy" })
        .collect();
    // Per GiB only where the bytes say something of it (a few bytes'
    // setup time over them is no rate).
    let per_gib = if s.bytes >= 1 << 20 {
        format!(" ({:.2} s/GiB)", s.cpu_seconds_per_gib)
    } else {
        String::new()
    };
    // (What TCP delivered in place says something where there was a
    // stream to receive.)
    let in_place = if s.bytes_in_place > 0 {
        format!(
            " ({} taken in place from the RX frames)",
            count(s.bytes_in_place, "byte")
        )
    } else {
        String::new()
    };
    // Retransmits are the sender's to count: the receiver's own (a FIN or
    // SYN-ACK sent again) would read as the transfer's, as "0" where the
    // sender resent thousands (they are in recv's JSON). What a receiver
    // sees of the path's losses are the segments that came beyond a hole.
    let sending = verb == "sent";
    let retransmits = |n: u64, ooo: u64| {
        if sending {
            format!(", {}", count(n, "retransmit"))
        } else {
            format!(", {ooo} out of order")
        }
    };
    // What a sender counts is what the receiver acknowledged: after an
    // interruption the receiver may have taken up to a window more.
    let acked = if sending { " (acknowledged)" } else { "" };
    eprintln!(
        "xtcp: {verb} {}{acked} in {} = {}{}, {} sent, {} received{in_place}, CPU {:.2} s{per_gib}",
        count(s.bytes, "byte"),
        seconds_text(s.seconds),
        rate_text(s.bytes, s.seconds),
        retransmits(s.retransmits, s.out_of_order),
        count(s.segments_sent, "segment"),
        s.segments_received,
        s.cpu_seconds,
    );
    if let Some(v) = s.verified.filter(|_| s.connections.is_empty()) {
        eprintln!(
            "xtcp: --verify {}: no connection arrived, nothing was checked",
            v.seed
        );
    } else if let Some(v) = s.verified {
        eprintln!(
            "xtcp: --verify {}: the {} received match the pattern{}",
            v.seed,
            count(v.bytes, "byte"),
            if s.expected_bytes.is_some() {
                ", each stream as long as -n"
            } else {
                " (their length unchecked: -n BYTES checks it)"
            }
        );
    }
    let copied: u64 = e.workers.iter().map(|w| w.port.tx_copied).sum();
    let smaller = held_to(s.connections.iter().map(|c| c.packet_mtu), e.mtu as usize);
    let clipped = clipped_to(
        s.connections
            .iter()
            .filter(|c| c.mss_clipped)
            .filter_map(|c| c.mss),
        e.umem.frame_size,
    );
    eprintln!(
        "xtcp: {} MTU {} MSS {}{}{smaller}{clipped}, XDP {:?}, AF_XDP {}, rx checksums {:?}, \
         TX layout {:?}, {}{}",
        e.iface,
        e.mtu,
        e.mss,
        e.mss_ipv6
            .map(|m| format!(" over IPv4, {m} over IPv6"))
            .unwrap_or_default(),
        e.xdp_mode,
        binds.join("/"),
        e.rx_csum,
        e.tx_layout,
        umem_line(&e.umem),
        if copied > 0 {
            format!(
                " ({copied} segment{} copied: not at the start of a send-buffer frame)",
                if copied == 1 { "" } else { "s" }
            )
        } else {
            String::new()
        }
    );
    for line in queue_lines(e, "--max-conns, or recv's one stream taken") {
        eprintln!("xtcp: {line}");
    }
    for line in s.xdp.lines() {
        eprintln!("xtcp: {line}");
    }
    if s.connections_not_listed > 0 {
        eprintln!(
            "xtcp: {} before the last {} are in the totals above (each was said as it ended)",
            count(s.connections_not_listed as u64, "connection"),
            s.connections.len()
        );
    }
    for c in &s.connections {
        if c.result != "ok" || (s.connections.len() > 1 && !s.each_said) {
            eprintln!(
                "xtcp: connection {} {} → {} (queue {}): {}; {} sent, {} received{}",
                c.id,
                c.local,
                c.remote,
                c.queue,
                c.result,
                count(c.bytes_sent, "byte"),
                c.bytes_received,
                retransmits(c.retransmits, c.out_of_order)
            );
        }
    }
    Ok(())
}

/// The addresses a listener serves, as a banner names them:
/// `198.18.0.1:5201 and [2001:2::1]:5201`.
pub fn listening(at: &[SocketAddr]) -> String {
    let each: Vec<String> = at.iter().map(SocketAddr::to_string).collect();
    match each.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => each.concat(),
    }
}

struct Meter {
    tty: bool,
    last: Instant,
    /// A listener's interface: "listening on" it is printed once the
    /// engine is up (setup succeeded), with the addresses it serves.
    listener: Option<String>,
    /// Print a line per connection as it ends (`recv --keep-listening`).
    each: bool,
    /// The run's interrupt flag, for what those lines say of a connection
    /// reset as the stop's grace ran out.
    interrupted: Option<Arc<AtomicBool>>,
    /// `recv --keep-listening`: the reports kept for the final one (the
    /// engine keeps none), and what a stream must be (`-n`, `--verify`).
    kept: Option<(Kept, Expect)>,
}

impl Meter {
    fn new(listener: Option<String>, each: bool) -> Meter {
        Meter {
            tty: std::io::stderr().is_terminal(),
            last: Instant::now(),
            listener,
            each,
            interrupted: None,
            kept: None,
        }
    }

    fn show(&mut self, p: &Progress<'_>) {
        if let Some(iface) = self.listener.take() {
            eprintln!(
                "xtcp recv: listening on {} ({iface}, {})",
                listening(p.listen),
                bind_mode(p.zero_copy)
            );
        }
        self.ended(p.ended, p.iface_gone);
        if self.tty && self.last.elapsed() >= Duration::from_millis(500) {
            self.last = Instant::now();
            eprint!(
                "\rxtcp: sent {} MiB, received {} MiB, {} retransmits   ",
                p.bytes_sent >> 20,
                p.bytes_received >> 20,
                p.retransmits
            );
        }
    }

    /// A line for each connection in `ended` (those that ended since the
    /// last progress call), if asked for.
    fn ended(&mut self, ended: &[ConnReport], iface_gone: bool) {
        let stopped = Stop::of(
            self.interrupted
                .as_ref()
                .is_some_and(|f| f.load(Ordering::Relaxed)),
            iface_gone,
        );
        if let Some((kept, expect)) = self.kept.as_mut() {
            for r in ended {
                kept.push(r, |old| {
                    conn_result(old, Duration::ZERO, stopped, false, *expect, None)
                });
            }
        }
        if !self.each {
            return;
        }
        for r in ended {
            let secs = r
                .established
                .map_or(0.0, |e| r.ended.saturating_duration_since(e).as_secs_f64());
            let how = match describe(r, Duration::ZERO, stopped, false) {
                Ok(()) => "ok".to_owned(),
                Err(e) => format!("failed: {e}"),
            };
            eprintln!(
                "{}xtcp recv: connection {} from {}: {how}; {} received in {secs:.3} s",
                if self.tty { "\r" } else { "" },
                r.id,
                r.tuple.remote,
                count(r.bytes_received, "byte")
            );
        }
    }

    fn done(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

/// The flag the first SIGINT or SIGTERM sets (the engine then closes its
/// connections and hands every received byte to its output); a second one
/// ends the process at once, with status 130, and says so.
pub fn interrupt_flag() -> anyhow::Result<Arc<AtomicBool>> {
    interrupt_flag_writing(None, false, None, false)
}

/// What `send` (`sending`) and `recv` say on the first SIGINT/SIGTERM:
/// how their connections stop, which may take up to `--grace` (`grace`).
fn stopping(grace: Duration, sending: bool) -> String {
    let g = grace.as_secs_f64();
    if sending {
        format!(
            "xtcp: interrupted: a stream not sent to its end is reset at once (so that the \
             receiver knows it is short); one sent whole ends once it is acknowledged, or is \
             reset if that takes {g:.1} s (--grace); a second SIGINT/SIGTERM exits at once"
        )
    } else {
        format!(
            "xtcp: interrupted: stopping; if a connection is open, it awaits the peer's FIN for \
             up to {g:.1} s (--grace), then is reset; a second SIGINT/SIGTERM exits at once"
        )
    }
}

/// [`interrupt_flag`] that says `first` on the first signal; for `recv`
/// (`writer`: what it receives goes to an output) a second signal's
/// message says that what the writer did not write yet is lost, and
/// `keep`'s file written so far (`--out`'s, beside it) is renamed to its
/// second path, which the message names; with `json` (`--json`), the
/// message is also the document on standard output, as any error before
/// the report is.
fn interrupt_flag_writing(
    first: Option<String>,
    writer: bool,
    keep: Option<(std::path::PathBuf, std::path::PathBuf)>,
    json: bool,
) -> anyhow::Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let flag = Arc::new(AtomicBool::new(false));
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("installing the SIGINT/SIGTERM handler")?;
    let f = flag.clone();
    std::thread::Builder::new()
        .name("xtcp-signals".into())
        .spawn(move || {
            // The signals counted are those this thread received: the flag
            // is also set by the program itself (serve -1 after its test),
            // and a user's one Ctrl-C then is a first, not a second.
            let mut received = false;
            for sig in signals.forever() {
                if !received {
                    received = true;
                    f.store(true, Ordering::SeqCst);
                    if let Some(m) = &first {
                        eprintln!("{m}");
                    }
                    continue;
                }
                let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                let mut msg = format!(
                    "a second {name}: exiting at once, without finishing the stop (status 130)"
                );
                if writer {
                    msg.push_str("; received bytes not yet written are lost");
                }
                if let Some((tmp, partial)) = &keep {
                    if let Ok(to) = crate::outfile::move_aside(tmp, partial) {
                        msg.push_str(&format!(", those written are in {}", to.display()));
                    }
                }
                if json {
                    json_error(&msg);
                }
                eprintln!("xtcp: {msg}");
                std::process::exit(130);
            }
        })
        .context("starting the signal thread")?;
    Ok(flag)
}

/// A line per queue of what its worker saw: segments in and packets out,
/// what it dropped and why, what found no connection, went to another
/// queue or was refused, and the turns the TX ring or frames were full
/// (send's, recv's and serve's summaries); `refused` says what refuses a
/// connection.
pub(crate) fn queue_lines(e: &EngineReport, refused: &str) -> Vec<String> {
    e.workers
        .iter()
        .map(|w| {
            let p = &w.port;
            let drops = p.drop_malformed
                + p.drop_not_tcp
                + p.drop_fragment
                + p.drop_checksum
                + p.drop_not_ours
                + p.drop_oversize
                + p.drop_too_big;
            format!(
                "queue {}: rx {} segs, tx {} pkts, dropped {drops} (checksum {}, malformed {}), \
                 no connection {}, held {} and misplaced {} (another queue's), refused {} \
                 ({refused}), tx ring/frames full {} turns",
                w.queue,
                p.rx_segments,
                p.tx_packets,
                p.drop_checksum,
                p.drop_malformed,
                w.no_connection + w.listener.no_connection,
                w.held,
                w.misplaced,
                w.refused,
                w.tx_full_turns
            )
        })
        .collect()
}

/// `xtcp send`.
pub fn send(a: &SendArgs) -> anyhow::Result<()> {
    let remote = a.remote()?;
    // `-c HOST%DEV`, as iperf3's: the interface to run on.
    let dev = a.host.as_deref().and_then(|h| crate::args::split_dev(h).1);
    let bdev = a.local.as_ref().and_then(|l| l.dev.as_deref());
    let mut cfg = a.engine.with_dev(dev, bdev)?.config_to(remote.ip())?;
    let local = a.local.as_ref().map(|l| l.ip);
    if let Some(l) = local {
        crate::args::addr_on_iface(&cfg.iface, l, true)?;
    }
    cfg.tcp.connect_timeout = Some(Duration::from_millis(a.connect_timeout));
    let mut readers = Vec::new();
    // (What cannot go together was refused before: `SendArgs::usage_error`.)
    let sources: Vec<Source> = match (a.pattern, a.zeros, &a.file) {
        (Some(_), _, _) | (None, true, _) => {
            let len = a.bytes.unwrap_or(0);
            (0..a.connections)
                .map(|_| match a.pattern {
                    Some(seed) => Source::Pattern {
                        seed,
                        offset: 0,
                        len,
                    },
                    None => Source::Zeros { offset: 0, len },
                })
                .collect()
        }
        (None, false, input) => {
            let file = match input.as_ref().filter(|p| p.as_os_str() != "-") {
                Some(p) => {
                    // (Before opening it: a FIFO's open waits for a writer.)
                    if a.bytes.is_some() && std::fs::metadata(p).is_ok_and(|m| !m.is_file()) {
                        bail!(
                            "-n goes with a regular file; {} is not one (`head -c BYTES FILE | \
                             xtcp send …`)",
                            p.display()
                        );
                    }
                    let f = std::fs::File::open(p)
                        .with_context(|| format!("opening {}", p.display()))?;
                    let m = f
                        .metadata()
                        .with_context(|| format!("reading {}", p.display()))?;
                    if m.is_dir() {
                        bail!("{} is a directory: give a file to send", p.display());
                    }
                    Some((f, m.is_file(), m.len()))
                }
                None => None,
            };
            match file {
                // A regular file: the worker reads it straight into the
                // send buffer's frames.
                Some((f, true, len)) => {
                    let mut src = FileSource::new(f);
                    if let Some(n) = a.bytes {
                        if n > len {
                            bail!(
                                "-n {n}: {} has only {}",
                                a.file.as_deref().unwrap_or(Path::new("-")).display(),
                                count(len, "byte")
                            );
                        }
                        src = src.up_to(n);
                    }
                    vec![Source::File(src)]
                }
                other => {
                    let reader: Box<dyn std::io::Read + Send> = match other {
                        Some((f, ..)) => Box::new(f),
                        None => {
                            if std::io::stdin().is_terminal() {
                                bail!(
                                    "standard input is a terminal: give -F FILE, --pattern SEED \
                                     -n BYTES, or pipe data in"
                                );
                            }
                            Box::new(std::io::stdin())
                        }
                    };
                    let (src, t) = spawn_reader(reader).context("starting the reader thread")?;
                    readers.push(t);
                    vec![src]
                }
            }
        }
    };
    let flag = interrupt_flag_writing(Some(stopping(cfg.grace, true)), false, None, a.json)?;
    let mut meter = Meter::new(None, false);
    let role = Role::Connect {
        remote,
        local,
        sources,
    };
    let report = xtcp_engine::worker::run(&cfg, role, &flag, |p| meter.show(p))
        .with_context(|| format!("xtcp send on {}", cfg.iface))?;
    meter.done();
    drop(readers);
    let s = summarise(
        &report,
        &cfg,
        true,
        None,
        a.connections,
        Expect::default(),
        None,
    );
    print_summary(&s, a.json, "sent")?;
    if let Some(e) = s.error {
        bail!("{e}");
    }
    Ok(())
}

/// Fails unless `p` (given as `flag`) can be written, without changing
/// anything the user has: an existing file is opened for writing (not
/// truncated); a new one needs a directory where a file can be made (one
/// is made and removed to know: a directory like `/proc` or a read-only
/// mount refuses it). With `beside`, a file is made beside an existing one
/// too (what is written to a temporary file and renamed over it needs
/// that). What is no regular file (a FIFO, a device: written in place) is
/// not opened, only asked about (`access`): opening a FIFO and closing it
/// would end its reader's stream before a byte came.
pub(crate) fn check_writable(flag: &str, p: &std::path::Path) -> anyhow::Result<()> {
    check_writable_how(flag, p, false)
}

/// [`check_writable`] for what is written beside `p` and renamed over it.
pub(crate) fn check_replaceable(flag: &str, p: &std::path::Path) -> anyhow::Result<()> {
    check_writable_how(flag, p, true)
}

fn check_writable_how(flag: &str, p: &std::path::Path, beside: bool) -> anyhow::Result<()> {
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let exists = match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => bail!("{flag} {} is a directory", p.display()),
        // (A process's descriptor through /proc is written in place too.)
        Ok(m) if !m.is_file() || crate::outfile::through_proc(p).is_some() => {
            return rustix::fs::access(p, rustix::fs::Access::WRITE_OK)
                .map_err(std::io::Error::from)
                .with_context(|| format!("{flag} {}: cannot write it", p.display()));
        }
        Ok(_) => {
            std::fs::OpenOptions::new()
                .write(true)
                .open(p)
                .with_context(|| format!("{flag} {}: cannot write it", p.display()))?;
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !dir.is_dir() {
                bail!("{flag} {}: no directory {}", p.display(), dir.display());
            }
            false
        }
        Err(e) => return Err(e).with_context(|| format!("{flag} {}", p.display())),
    };
    if !exists || beside {
        let probe = dir.join(format!(".xtcp-write-check-{}", std::process::id()));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .with_context(|| {
                format!(
                    "{flag} {}: cannot make a file in {}",
                    p.display(),
                    dir.display()
                )
            })?;
        let _ = std::fs::remove_file(&probe);
    }
    Ok(())
}

/// Where `xtcp recv` puts what it receives.
enum RecvOutput {
    Verify(u64),
    Discard,
    File(std::path::PathBuf),
    Stdout,
}

/// `recv`'s output from its arguments, checked without touching anything:
/// a file must be writable, standard output neither a terminal nor taken
/// by `--json`, and `--keep-listening` needs an output that takes many
/// streams.
fn recv_output(a: &RecvArgs) -> anyhow::Result<RecvOutput> {
    if let Some(seed) = a.verify {
        return Ok(RecvOutput::Verify(seed));
    }
    if a.discard {
        return Ok(RecvOutput::Discard);
    }
    if let Some(p) = a.out.as_ref().filter(|p| p.as_os_str() != "-") {
        check_writable("--out", p)?;
        return Ok(RecvOutput::File(p.clone()));
    }
    if std::io::stdout().is_terminal() {
        bail!(
            "standard output is a terminal: give --out FILE, --verify SEED or --discard, or \
             redirect it"
        );
    }
    // (--json is refused with it before: `RecvArgs::usage_error`.)
    Ok(RecvOutput::Stdout)
}

/// One output for the first connection, written by a thread of its own
/// (kept in `writer`).
fn single_sink(
    open: OpenOutput,
    writer: &mut Option<std::thread::JoinHandle<Written>>,
) -> anyhow::Result<SinkKind> {
    let (sink, t) = spawn_writer(open).context("starting the writer thread")?;
    *writer = Some(t);
    Ok(first_only(sink))
}

/// `sink` for the first connection; later ones are refused.
fn first_only(sink: Sink) -> SinkKind {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let _ = tx.send(sink);
    SinkKind::Single(rx)
}

/// How a listener's banner names the sockets' mode.
pub fn bind_mode(zero_copy: bool) -> &'static str {
    if zero_copy { "zero-copy" } else { "copy mode" }
}

/// What a command says when its interface went away during the run.
pub fn iface_gone(iface: &str) -> String {
    format!(
        "the interface {iface} went away during the run (deleted, or its network namespace with \
         it): xtcp stopped"
    )
}

/// `xtcp recv`.
pub fn recv(a: &RecvArgs) -> anyhow::Result<()> {
    let (addr, port) = a.at();
    // The output is checked before the interface is looked up: a run refused
    // for its output names no interface it would have taken.
    let out = recv_output(a)?;
    let on = a.family.on(addr)?;
    let dev = a.addr.as_ref().and_then(|b| b.dev.as_deref());
    let mut cfg = a.engine.with_dev(None, dev)?.config_at(on)?;
    // A stream longer than -n is reset as it passes it.
    cfg.stream_limit = a.bytes;
    cfg.rcv_timeout = a.rcv_timeout.map(Duration::from_millis);
    let mut writer = None;
    let mut replace = None;
    // Without --keep-listening the first connection is the one stream:
    // later ones are refused (reset, counted), not served until the first
    // ends and then cut off.
    let sinks = match out {
        RecvOutput::Verify(seed) if a.keep_listening => SinkKind::Verify(seed),
        RecvOutput::Verify(seed) => first_only(Sink::Verify {
            seed,
            offset: 0,
            mismatch: None,
        }),
        RecvOutput::Discard if a.keep_listening => SinkKind::Discard,
        RecvOutput::Discard => first_only(Sink::Discard),
        RecvOutput::File(p) => {
            // Written beside it, made when the first connection brings its
            // first bytes or its end (not before), and renamed over it once
            // the stream ended well; else it goes to FILE.partial and FILE
            // stays as it was. Written unbuffered (the writer's chunks are
            // 256 KiB), so that what the writer counts is what the file
            // holds.
            let r = ReplaceFile::new("--out", &p)?;
            let (open_file, what) = (r.opener(), r.tmp().unwrap_or(p.as_path()).to_owned());
            replace = Some(r);
            let open: OpenOutput = Box::new(move || {
                let f = open_file().map_err(|e| {
                    std::io::Error::new(e.kind(), format!("opening {}: {e}", what.display()))
                })?;
                Ok(Box::new(f) as Box<dyn std::io::Write + Send>)
            });
            single_sink(open, &mut writer)?
        }
        // Standard output's descriptor itself, not Rust's line-buffered
        // `Stdout`: what the writer counts is what went out.
        RecvOutput::Stdout => single_sink(
            Box::new(|| {
                use std::os::fd::AsFd;
                let fd = std::io::stdout().as_fd().try_clone_to_owned()?;
                Ok(Box::new(std::fs::File::from(fd)) as Box<dyn std::io::Write + Send>)
            }),
            &mut writer,
        )?,
    };
    // (In place, a device or FIFO: nothing to rename.)
    let keep = replace
        .as_ref()
        .and_then(|r| Some((r.tmp()?.to_owned(), r.partial())));
    let flag = interrupt_flag_writing(
        Some(stopping(cfg.grace, false)),
        writer.is_some(),
        keep,
        a.json,
    )?;
    let expect = Expect {
        verify: a.verify,
        bytes: a.bytes,
    };
    let mut meter = Meter::new(Some(cfg.iface.clone()), a.keep_listening);
    meter.interrupted = Some(flag.clone());
    if a.keep_listening {
        // Connection after connection for as long as it runs: the last
        // ones' reports are kept here, the earlier ones' totals.
        cfg.keep_reports = false;
        meter.kept = Some((Kept::new(KEPT_REPORTS), expect));
    }
    let role = Role::Listen {
        on,
        port,
        sinks,
        keep_listening: a.keep_listening,
    };
    let mut report = xtcp_engine::worker::run(&cfg, role, &flag, |p| meter.show(p))
        .with_context(|| format!("xtcp recv on {}", cfg.iface))?;
    meter.done();
    let earlier = meter.kept.take().map(|(k, _)| {
        report.connections = k.reports.into();
        k.earlier
    });
    let written = writer.map(|t| {
        t.join().unwrap_or_else(|_| Written {
            bytes: 0,
            result: Err(std::io::Error::other("the writer thread panicked")),
        })
    });
    let expected = usize::from(!a.keep_listening);
    let mut s = summarise(
        &report,
        &cfg,
        false,
        written,
        expected,
        expect,
        earlier.as_ref(),
    );
    s.each_said = a.keep_listening;
    // --keep-listening serves until it is stopped: stopped with every
    // connection it served ended well, the run is a success, in the report
    // as in the exit status.
    if a.keep_listening
        && report.interrupted
        && s.error
            .as_deref()
            .is_some_and(|e| e.starts_with("interrupted"))
        && s.connections.iter().all(|c| c.result == "ok")
    {
        s.error = None;
        s.ok = true;
    }
    if let Some(r) = replace {
        let out = a
            .out
            .as_deref()
            .unwrap_or(std::path::Path::new(""))
            .display();
        if s.error.is_none() {
            let partial = r.partial();
            match r.commit() {
                Err(e) => {
                    s.error = Some(format!("{e:#}"));
                    s.ok = false;
                }
                Ok(()) if partial.exists() => eprintln!(
                    "xtcp: {} is from an earlier run that did not complete: remove it when you \
                     no longer need it",
                    partial.display()
                ),
                Ok(()) => {}
            }
        } else if let Some(e) = s.error.as_mut()
            && !r.in_place()
        {
            let existed =
                std::fs::metadata(a.out.as_deref().unwrap_or(std::path::Path::new(""))).is_ok();
            let was = if existed {
                "is as it was"
            } else {
                "was not made"
            };
            match r.keep_partial() {
                Ok(Some(p)) => e.push_str(&format!(
                    "; {out} {was}: the {} written are in {}",
                    count(s.bytes, "byte"),
                    p.display()
                )),
                Ok(None) if existed => e.push_str(&format!("; {out} is as it was")),
                Ok(None) => e.push_str(&format!("; {out} was not made")),
                Err(k) => e.push_str(&format!("; {k:#}")),
            }
        }
    }
    if s.error.is_none() {
        s.verified = a.verify.map(|seed| Verified {
            seed,
            bytes: s.bytes,
        });
    }
    print_summary(&s, a.json, "received")?;
    if let Some(e) = s.error {
        bail!("{e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(id: usize, remote: &str, steps: (u64, u64), reported: u64, mtu: usize) -> MtuSteps {
        let remote: SocketAddr = remote.parse().unwrap();
        let ip = if remote.is_ipv4() { 20 } else { 40 };
        MtuSteps {
            id,
            remote,
            mss: Some(mtu - ip - 32),
            mtu: Some(mtu),
            icmp: steps.0,
            black_hole: steps.1,
            link: 0,
            raised: 0,
            reported: Some(reported).filter(|&r| r > 0),
            timed_out: false,
        }
    }

    fn ended(id: usize, bytes: u64, reason: CloseReason) -> ConnReport {
        let now = Instant::now();
        ConnReport {
            id,
            queue: 0,
            tuple: xtcp_engine::tcp::FourTuple {
                local: "198.18.0.1:5201".parse().unwrap(),
                remote: format!("198.18.0.2:{}", 40000 + id).parse().unwrap(),
            },
            reason,
            bytes_sent: 0,
            bytes_acked: 0,
            bytes_received: bytes,
            stats: Stats {
                segments_received: bytes / 1000,
                ..Stats::default()
            },
            mismatch: None,
            source_error: None,
            established: Some(now),
            opened: None,
            packet_mtu: 1500,
            ended: now,
            peer_open: false,
            congestion: "cubic",
            pacing_rate: None,
            send_bytes_touched: 0,
            send_mss: 1448,
            send_mss_clipped: false,
            send_buffer: 0,
        }
    }

    /// `recv --keep-listening` keeps the last reports; the earlier ones
    /// are in the totals, and the first error among them stays the run's.
    #[test]
    fn kept_reports_are_the_last_and_the_earlier_are_in_the_totals() {
        let mut k = Kept::new(2);
        let result = |r: &ConnReport| {
            conn_result(r, Duration::ZERO, Stop::No, false, Expect::default(), None)
        };
        for (id, reason) in [
            CloseReason::Normal,
            CloseReason::Aborted,
            CloseReason::Normal,
            CloseReason::Aborted,
            CloseReason::Normal,
        ]
        .into_iter()
        .enumerate()
        {
            k.push(&ended(id, 10_000 * (id as u64 + 1), reason), result);
        }
        let ids: Vec<usize> = k.reports.iter().map(|r| r.id).collect();
        assert_eq!(ids, [3, 4]);
        assert_eq!(k.earlier.totals.connections, 3);
        assert_eq!(k.earlier.totals.bytes_received, 60_000);
        assert_eq!(k.earlier.totals.segments_received, 60);
        assert_eq!(
            k.earlier.error.as_deref(),
            Some("connection 1 (198.18.0.1:5201 → 198.18.0.2:40001): aborted (reset sent)")
        );
    }

    /// MSSes `--mss-clip` rounded down, each said once; none, nothing.
    #[test]
    fn clipped_msses_are_said_once_each() {
        assert_eq!(clipped_to([].into_iter(), 4096), "");
        assert_eq!(
            clipped_to([8192, 61440, 8192].into_iter(), 4096),
            " (segments of 8192, 61440 payload bytes: whole 4096-byte frames, --mss-clip on)"
        );
    }

    /// One line for the connections a note is the same for (a run of ids,
    /// or their number), one each where they differ; none without steps.
    #[test]
    fn mtu_notes_are_said_once_for_the_connections_they_share() {
        let via = "via 198.18.1.254";
        let mut cs: Vec<MtuSteps> = (0..4)
            .map(|i| conn(i, "198.18.2.2:5201", (1, 0), 1500, 1500))
            .collect();
        cs.push(conn(4, "198.18.2.2:5201", (0, 0), 0, 9000));
        let noun = ("connection", "connections");
        let n = mtu_notes(&cs, via, noun);
        assert_eq!(n.len(), 1, "{n:?}");
        assert!(
            n[0].starts_with(
                "xtcp: connections 0–3 → 198.18.2.2:5201: the path's MTU is 1500 (a hop said \
                 so: ICMP \"packet too big\"), and the MSS stepped down to 1448 bytes; giving \
                 the route that MTU (`ip route replace 198.18.2.2 via 198.18.1.254 mtu 1500`)"
            ),
            "{n:?}"
        );
        cs.remove(1);
        cs.push(conn(5, "198.18.2.2:5201", (0, 1), 0, 1500));
        let n = mtu_notes(&cs, via, noun);
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(n[0].starts_with("xtcp: connections 0, 2–3 → "), "{n:?}");
        assert!(
            n[1].starts_with("xtcp: connection 5 → ")
                && n[1].contains("timeout after timeout, and the MSS stepped down once to 1448"),
            "{n:?}"
        );
    }

    /// Steps for a black hole that ended in a timeout are no MTU's: the
    /// smaller segments were lost too (a link down, the peer gone), and
    /// no route's MTU is advised.
    #[test]
    fn a_connection_that_timed_out_after_black_hole_steps_blames_no_mtu() {
        let via = "dev eth1";
        let mut c = conn(0, "198.18.2.2:5201", (0, 2), 0, 576);
        let hole = mtu_note(&c, via).unwrap();
        assert!(hole.contains("likely a hop on the path"), "{hole}");
        c.timed_out = true;
        let down = mtu_note(&c, via).unwrap();
        assert!(
            down.contains("the path failed for every size") && !down.contains("ip route"),
            "{down}"
        );
    }

    /// What the summary says after the MSS offered: the smaller packets
    /// connections sent, each once, none where they sent at the MTU.
    #[test]
    fn the_summary_says_what_packets_were_held_to() {
        assert_eq!(held_to([Some(9000), None].into_iter(), 9000), "");
        assert_eq!(
            held_to(
                [Some(1500), Some(9000), Some(1500), Some(1400)].into_iter(),
                9000
            ),
            " (the connections sent packets of at most 1400, 1500 bytes: the peer's MSS or the \
             path's MTU)"
        );
    }

    /// Ids as runs: one, a run, runs; their number where runs are many.
    #[test]
    fn ids_are_said_as_runs() {
        assert_eq!(id_runs(&[3]).as_deref(), Some("3"));
        assert_eq!(id_runs(&[0, 1, 2, 3]).as_deref(), Some("0–3"));
        assert_eq!(id_runs(&[1, 3, 4, 5, 9]).as_deref(), Some("1, 3–5, 9"));
        assert_eq!(id_runs(&[1, 3, 5, 7, 9]), None);
    }

    /// Both kinds of step on one connection are both said (not as if no
    /// ICMP had come); a reported MTU below IP's least is said as what it
    /// is, with the least in force; a connection never established has
    /// no note.
    #[test]
    fn a_note_says_each_kind_of_step_and_a_report_below_the_least() {
        let via = "dev xa0";
        let both = conn(0, "198.18.2.2:5201", (1, 1), 4000, 1500);
        let n = mtu_note(&both, via).unwrap();
        assert!(
            n.starts_with(
                "a hop reported an MTU of 4000 (ICMP \"packet too big\") and the MSS stepped \
                 down once; then large segments were lost timeout after timeout, and it stepped \
                 down once more, to 1448 bytes (packets of 1500)"
            ),
            "{n}"
        );
        let low = conn(0, "198.18.2.2:5201", (1, 0), 68, 576);
        let n = mtu_note(&low, via).unwrap();
        assert!(
            n.starts_with(
                "a hop reported an MTU of 68 (ICMP \"packet too big\"), below IPv4's least, \
                 576: the MSS stepped down to 524 bytes (packets of 576)"
            ),
            "{n}"
        );
        let low6 = conn(0, "[2001:2::2]:5201", (1, 0), 300, 1280);
        assert!(
            mtu_note(&low6, via)
                .unwrap()
                .contains("below IPv6's least, 1280")
        );
        let mut never = conn(0, "198.18.2.2:5201", (0, 0), 0, 1500);
        never.mss = None;
        never.mtu = None;
        assert_eq!(mtu_note(&never, via), None);
    }

    /// A reported MTU that expired (`--pmtu-expires`): where the MSS ended
    /// back up, no route advice; where the hop refused the large segments
    /// again, the advice, and the steps back up said.
    #[test]
    fn a_note_says_where_the_mss_went_back_up() {
        let via = "dev xa0";
        let mut healed = conn(0, "198.18.2.2:5201", (1, 0), 1500, 9000);
        healed.raised = 1;
        let n = mtu_note(&healed, via).unwrap();
        assert!(
            n.starts_with(
                "a hop reported an MTU of 1500 (ICMP \"packet too big\") and the MSS stepped \
                 down; once that report had expired (--pmtu-expires) it went back up to 8948 \
                 bytes (packets of 9000), and no hop refused those"
            ),
            "{n}"
        );
        assert!(!n.contains("ip route"), "{n}");
        let mut again = conn(0, "198.18.2.2:5201", (3, 0), 1500, 1500);
        again.raised = 2;
        let n = mtu_note(&again, via).unwrap();
        assert!(
            n.starts_with(
                "the path's MTU is 1500 (a hop said so: ICMP \"packet too big\"), and the MSS \
                 stepped down to 1448 bytes 3 times, going back up in between as the report \
                 expired (--pmtu-expires); giving the route that MTU (`ip route replace \
                 198.18.2.2 dev xa0 mtu 1500`)"
            ),
            "{n}"
        );
    }
}
