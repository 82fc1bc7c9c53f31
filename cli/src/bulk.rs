//! `xtcp send` and `xtcp recv`: bulk transfer over xtcp's own TCP on AF_XDP,
//! against any TCP peer (a kernel program such as socat, nc or iperf3's data
//! path, or another xtcp).

use std::io::{IsTerminal, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::ValueEnum;
use serde::Serialize;
use xtcp_engine::frame::FrameSize;
use xtcp_engine::tcp::{CloseReason, CongestionAlgorithm, ConnectionError, RecvWindow};
use xtcp_engine::worker::bulk::{
    FileSource, NO_STREAM, OpenOutput, Source, spawn_reader, spawn_writer,
};
use xtcp_engine::worker::{
    ConnReport, EngineConfig, EngineReport, Progress, Role, RxCsumPolicy, SinkKind, TxLayoutPolicy,
    WaitStrategy,
};
use xtcp_engine::xdp::AttachMode;
use xtcp_engine::xsk::BindMode;

use crate::xdpstats::XdpSummary;
use crate::xsk_bench::{BindArg, XdpModeArg, parse_frame_size};

/// `--wakeup`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WaitArg {
    /// Spin (one core at 100 %).
    Busy,
    /// Sleep in poll() whenever idle.
    NeedWakeup,
    /// Spin briefly after work, then sleep in poll().
    Adaptive,
}

/// `--rx-csum`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RxCsumArg {
    /// Verify every received checksum (NICs).
    Verify,
    /// Accept without verifying (a veth peer sends partial checksums).
    Trust,
    /// Trust on veth, verify elsewhere.
    Auto,
}

/// `--cc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CcArg {
    /// RFC 5681 NewReno.
    Newreno,
    /// RFC 9438 CUBIC.
    Cubic,
}

/// `on` / `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

/// A byte size: `65536`, `64K`, `4M`, `1G` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("`{s}`: unknown unit `{c}` (use K, M, G or T)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let v: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size like 65536, 64K, 4M or 1G"))?;
    v.checked_mul(mul)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// `--rcvbuf`: auto-tuned or fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RcvBuf {
    /// Window auto-tuned up to the default buffer.
    Auto,
    /// Fixed buffer and window, bytes.
    Fixed(u64),
}

fn parse_rcvbuf(s: &str) -> Result<RcvBuf, String> {
    if s == "auto" {
        Ok(RcvBuf::Auto)
    } else {
        parse_size(s).map(RcvBuf::Fixed)
    }
}

/// `--cores`: a list of core numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreList(pub Vec<usize>);

fn parse_cores(s: &str) -> Result<CoreList, String> {
    s.split(',')
        .map(|c| {
            c.trim()
                .parse()
                .map_err(|_| format!("`{s}` is not a list of core numbers like 0,1"))
        })
        .collect::<Result<Vec<usize>, String>>()
        .map(CoreList)
}

/// `--tx-layout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TxLayoutArg {
    /// By device and MTU (see `--tx-layout`).
    Auto,
    /// A header frame, then the payload's frames (multi-buffer).
    Chained,
    /// One descriptor per segment, headers in the frame's headroom.
    Single,
}

/// Engine options shared by `send` and `recv`.
#[derive(clap::Args, Debug, Clone)]
pub struct EngineArgs {
    /// Interface to run on (xtcp attaches its XDP program there).
    #[arg(long)]
    pub iface: String,
    /// Queues to serve (0..N), one pinned worker each.
    #[arg(long, default_value_t = 1)]
    pub queues: u32,
    /// Cores for the workers, one per queue (default: worker i on core i).
    #[arg(long, value_parser = parse_cores)]
    pub cores: Option<CoreList>,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: XdpModeArg,
    /// AF_XDP bind mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub bind: BindArg,
    /// How idle workers wait.
    #[arg(long, value_enum, default_value = "adaptive")]
    pub wakeup: WaitArg,
    /// UMEM frame size (2048 or 4096).
    #[arg(long, default_value = "4096", value_parser = parse_frame_size)]
    pub frame_size: FrameSize,
    /// UMEM frames per queue.
    #[arg(long, default_value_t = 16384)]
    pub frames: u32,
    /// RX/TX ring entries (power of two; fill/completion rings get twice).
    #[arg(long, default_value_t = 2048)]
    pub ring: u32,
    /// RX descriptors per loop turn.
    #[arg(long, default_value_t = 64)]
    pub batch: u32,
    /// Most TX frames one connection queues per loop turn (one per segment
    /// at MTU 1500, payload ÷ frame size at large MTUs). A turn's burst
    /// goes out ahead of the ACKs queued after it: larger bursts add
    /// queueing delay, smaller ones cost turns.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub tx_burst: u32,
    /// How segments are laid out for sending: `chained` (a header frame,
    /// then descriptors into the send buffer's frames: multi-buffer),
    /// `single` (one descriptor per segment, the headers in the payload
    /// frame's headroom; MSS at most a frame less 256 bytes), `auto`
    /// (zero-copy: chained, or single on devices that take one descriptor
    /// per packet; copy mode: single when a full segment fits one frame,
    /// else chained). xtcp copies no payload either way.
    #[arg(long, value_enum, default_value = "auto")]
    pub tx_layout: TxLayoutArg,
    /// Back the UMEM with huge pages.
    #[arg(long)]
    pub hugepages: bool,
    /// Receive-checksum policy.
    #[arg(long, value_enum, default_value = "auto")]
    pub rx_csum: RxCsumArg,
    /// MSS to announce and send (default: the MTU less IP and TCP headers).
    #[arg(long)]
    pub mss: Option<u16>,
    /// Round the sending MSS down to whole frames (8948 → 8192 with 4096-byte frames).
    #[arg(long, value_enum, default_value = "on")]
    pub mss_clip: OnOff,
    /// Receive buffer: `auto` (window auto-tuned up to 4M) or a fixed size (e.g. 64K).
    #[arg(long, default_value = "auto", value_parser = parse_rcvbuf)]
    pub rcvbuf: RcvBuf,
    /// Send buffer per connection.
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    pub sndbuf: u64,
    /// Congestion control.
    #[arg(long, value_enum, default_value = "cubic")]
    pub cc: CcArg,
    /// Seconds between FIN and RST when interrupted.
    #[arg(long, default_value_t = 2.0)]
    pub grace: f64,
    /// Connections each queue's worker holds at most. A connection beyond
    /// it is refused with a reset (counted as `refused`); those held go on
    /// undisturbed. Frames and the RX ring are shared among the
    /// connections held.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_conns: u32,
}

impl EngineArgs {
    pub fn config(&self) -> anyhow::Result<EngineConfig> {
        let mut c = EngineConfig {
            iface: self.iface.clone(),
            queues: self.queues,
            cores: self.cores.clone().map(|c| c.0),
            xdp_mode: match self.xdp_mode {
                XdpModeArg::Native => AttachMode::Native,
                XdpModeArg::Generic => AttachMode::Generic,
                XdpModeArg::Auto => AttachMode::Auto,
            },
            bind: match self.bind {
                BindArg::Copy => BindMode::Copy,
                BindArg::Zerocopy => BindMode::ZeroCopy,
                BindArg::Auto => BindMode::Auto,
            },
            wait: match self.wakeup {
                WaitArg::Busy => WaitStrategy::Busy,
                WaitArg::NeedWakeup => WaitStrategy::NeedWakeup,
                WaitArg::Adaptive => WaitStrategy::Adaptive,
            },
            frame_size: self.frame_size,
            frames: self.frames,
            ring: self.ring,
            batch: self.batch,
            tx_burst: self.tx_burst,
            tx_layout: match self.tx_layout {
                TxLayoutArg::Auto => TxLayoutPolicy::Auto,
                TxLayoutArg::Chained => TxLayoutPolicy::Chained,
                TxLayoutArg::Single => TxLayoutPolicy::Single,
            },
            hugepages: self.hugepages,
            rx_csum: match self.rx_csum {
                RxCsumArg::Verify => RxCsumPolicy::Verify,
                RxCsumArg::Trust => RxCsumPolicy::Trust,
                RxCsumArg::Auto => RxCsumPolicy::Auto,
            },
            mss: self.mss,
            grace: Duration::from_secs_f64(self.grace.clamp(0.0, 3600.0)),
            max_conns: self.max_conns as usize,
            ..EngineConfig::default()
        };
        if self.frames < self.ring * 4 {
            bail!(
                "--frames {} is too few for --ring {}: give at least 4 × ring",
                self.frames,
                self.ring
            );
        }
        let fs = self.frame_size.bytes() as u64;
        if self.sndbuf < 4 * fs || self.sndbuf > 1 << 30 {
            bail!("--sndbuf must be between {} and 1G", 4 * fs);
        }
        c.tcp.send_frames = self.sndbuf.div_ceil(fs) as usize;
        c.tcp.clip_mss_to_frames = self.mss_clip == OnOff::On;
        c.tcp.congestion = match self.cc {
            CcArg::Newreno => CongestionAlgorithm::NewReno,
            CcArg::Cubic => CongestionAlgorithm::Cubic,
        };
        match self.rcvbuf {
            RcvBuf::Auto => {}
            RcvBuf::Fixed(n) if (1024..=1 << 30).contains(&n) => {
                c.tcp.recv_buffer = n as usize;
                c.tcp.recv_window = RecvWindow::Fixed(n as usize);
            }
            RcvBuf::Fixed(_) => bail!("--rcvbuf must be `auto` or between 1K and 1G"),
        }
        Ok(c)
    }
}

/// Arguments of `xtcp send`.
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("input").args(["file", "pattern", "zeros"])))]
pub struct SendArgs {
    /// The receiver: ADDR:PORT (IPv6 as [ADDR]:PORT).
    #[arg(long)]
    pub connect: SocketAddr,
    /// Our address (default: the kernel's preferred source for the route).
    #[arg(long)]
    pub local: Option<IpAddr>,
    /// Send this file (default: standard input).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Send the seeded pseudo-random stream (check it with `xtcp recv --verify SEED`).
    #[arg(long)]
    pub pattern: Option<u64>,
    /// Send zeros at no cost to produce them (the send buffer is never
    /// rewritten, like `iperf3 -Z`): for benchmarks.
    #[arg(long)]
    pub zeros: bool,
    /// Bytes per connection (with --pattern or --zeros), e.g. 1G.
    #[arg(long, value_parser = parse_size)]
    pub bytes: Option<u64>,
    /// Parallel connections (with --pattern or --zeros; each sends --bytes).
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Give up on a connection whose SYN has no answer after this many
    /// milliseconds (as iperf3's flag).
    #[arg(long, value_name = "MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub connect_timeout: u64,
    /// Print the final report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Arguments of `xtcp recv`.
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("output").args(["out", "verify", "discard"])))]
pub struct RecvArgs {
    /// Where to listen: [ADDR:]PORT (default address: the interface's IPv4 address).
    #[arg(long, value_parser = parse_listen)]
    pub listen: (Option<IpAddr>, u16),
    /// Write the received stream to this file (default: standard output).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Check the received stream against `xtcp send --pattern SEED`.
    #[arg(long)]
    pub verify: Option<u64>,
    /// Count the received bytes and drop them.
    #[arg(long)]
    pub discard: bool,
    /// Serve connection after connection until interrupted (with --verify or --discard).
    #[arg(long)]
    pub keep_listening: bool,
    /// Print the final report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

fn parse_listen(s: &str) -> Result<(Option<IpAddr>, u16), String> {
    if let Ok(p) = s.parse::<u16>() {
        return Ok((None, p));
    }
    s.parse::<SocketAddr>()
        .map(|a| (Some(a.ip()), a.port()))
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
    segments_sent: u64,
    segments_received: u64,
    /// Received bytes the sink took straight from the RX frames (the rest
    /// went through TCP's receive buffer).
    bytes_in_place: u64,
    cpu_seconds: f64,
    cpu_seconds_per_gib: f64,
    connections: Vec<ConnSummary>,
    /// XDP statistics: steered, dropped at the redirect, per queue.
    xdp: XdpSummary,
    engine: &'a EngineReport,
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
    seconds: f64,
}

fn describe(r: &ConnReport, connect_timeout: Duration) -> Result<(), String> {
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

fn summarise<'a>(
    report: &'a EngineReport,
    cfg: &EngineConfig,
    sending: bool,
    writer: Option<anyhow::Result<u64>>,
    expected: usize,
) -> Summary<'a> {
    let mut error = None;
    let conns: Vec<ConnSummary> = report
        .connections
        .iter()
        .map(|r| {
            let res = describe(r, cfg.tcp.connect_timeout.unwrap_or_default());
            if let Err(e) = &res {
                error.get_or_insert_with(|| {
                    format!(
                        "connection {} ({} → {}): {e}",
                        r.id, r.tuple.local, r.tuple.remote
                    )
                });
            }
            ConnSummary {
                id: r.id,
                queue: r.queue,
                local: r.tuple.local,
                remote: r.tuple.remote,
                result: res.err().unwrap_or_else(|| "ok".into()),
                bytes_sent: r.bytes_sent,
                bytes_received: r.bytes_received,
                retransmits: r.stats.retransmits,
                seconds: r
                    .established
                    .map_or(0.0, |e| r.ended.saturating_duration_since(e).as_secs_f64()),
            }
        })
        .collect();
    let no_stream = |e: &anyhow::Error| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == NO_STREAM)
    };
    match &writer {
        // The writer never got a stream: no connection came (said below,
        // as for the other sinks), not an output error.
        Some(Err(e)) if no_stream(e) => {}
        Some(Err(e)) => {
            error.get_or_insert_with(|| format!("writing the output failed: {e:#}"));
        }
        Some(Ok(w)) => {
            let got: u64 = conns.iter().map(|c| c.bytes_received).sum();
            if *w != got {
                error.get_or_insert_with(|| {
                    format!("the output has {w} bytes of the {got} received")
                });
            }
        }
        None => {}
    }
    if report.interrupted && report.connections.is_empty() {
        error.get_or_insert_with(|| "interrupted: no connection arrived".into());
    }
    if report.interrupted {
        error.get_or_insert_with(|| "interrupted".into());
    }
    if conns.len() < expected {
        error.get_or_insert_with(|| format!("{} of {expected} connections finished", conns.len()));
    }
    let bytes: u64 = conns
        .iter()
        .map(|c| {
            if sending {
                c.bytes_sent
            } else {
                c.bytes_received
            }
        })
        .sum();
    let seconds = report.seconds;
    let gib = bytes as f64 / f64::from(1u32 << 30);
    Summary {
        ok: error.is_none(),
        error,
        bytes,
        seconds,
        gbps: if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds / 1e9
        } else {
            0.0
        },
        retransmits: report.connections.iter().map(|c| c.stats.retransmits).sum(),
        segments_sent: report
            .connections
            .iter()
            .map(|c| c.stats.segments_sent)
            .sum(),
        segments_received: report
            .connections
            .iter()
            .map(|c| c.stats.segments_received)
            .sum(),
        bytes_in_place: report
            .connections
            .iter()
            .map(|c| c.stats.bytes_delivered_direct)
            .sum(),
        cpu_seconds: report.cpu_seconds,
        cpu_seconds_per_gib: if gib > 0.0 {
            report.cpu_seconds / gib
        } else {
            0.0
        },
        connections: conns,
        xdp: XdpSummary::of(report),
        engine: report,
    }
}

fn print_summary(s: &Summary<'_>, json: bool, verb: &str) -> anyhow::Result<()> {
    if json {
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
    eprintln!(
        "xtcp: {verb} {} bytes in {:.3} s = {:.2} Gbit/s, {} retransmits, {} segments sent, \
         {} received ({} bytes taken in place from the RX frames), CPU {:.2} s ({:.2} s/GiB)",
        s.bytes,
        s.seconds,
        s.gbps,
        s.retransmits,
        s.segments_sent,
        s.segments_received,
        s.bytes_in_place,
        s.cpu_seconds,
        s.cpu_seconds_per_gib
    );
    let copied: u64 = e.workers.iter().map(|w| w.port.tx_copied).sum();
    eprintln!(
        "xtcp: {} MTU {} MSS {}, XDP {:?}, AF_XDP {}, rx checksums {:?}, TX layout {:?}{}",
        e.iface,
        e.mtu,
        e.mss,
        e.xdp_mode,
        binds.join("/"),
        e.rx_csum,
        e.tx_layout,
        if copied > 0 {
            format!(" ({copied} segments copied: not at the start of a send-buffer frame)")
        } else {
            String::new()
        }
    );
    for w in &e.workers {
        let p = &w.port;
        let drops = p.drop_malformed
            + p.drop_not_tcp
            + p.drop_fragment
            + p.drop_checksum
            + p.drop_not_ours
            + p.drop_oversize;
        eprintln!(
            "xtcp: queue {}: rx {} segs, tx {} pkts, dropped {drops} (checksum {}, malformed {}), \
             no connection {}, misplaced {}, refused {} (--max-conns), tx ring/frames full {} \
             turns",
            w.queue,
            p.rx_segments,
            p.tx_packets,
            p.drop_checksum,
            p.drop_malformed,
            w.no_connection,
            w.misplaced,
            w.refused,
            w.tx_full_turns
        );
    }
    for line in s.xdp.lines() {
        eprintln!("xtcp: {line}");
    }
    for c in &s.connections {
        if c.result != "ok" || s.connections.len() > 1 {
            eprintln!(
                "xtcp: connection {} {} → {} (queue {}): {}, {} bytes sent, {} received, \
                 {} retransmits",
                c.id,
                c.local,
                c.remote,
                c.queue,
                c.result,
                c.bytes_sent,
                c.bytes_received,
                c.retransmits
            );
        }
    }
    Ok(())
}

struct Meter {
    tty: bool,
    last: Instant,
    /// Printed once the engine is up (setup succeeded).
    banner: Option<String>,
}

impl Meter {
    fn new(banner: Option<String>) -> Meter {
        Meter {
            tty: std::io::stderr().is_terminal(),
            last: Instant::now(),
            banner,
        }
    }

    fn show(&mut self, p: &Progress<'_>) {
        if let Some(b) = self.banner.take() {
            eprintln!("{b}");
        }
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

    fn done(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

/// The flag the first SIGINT or SIGTERM sets (the engine then closes its
/// connections and hands every received byte to its output); a second one
/// ends the process at once, with status 130.
pub fn interrupt_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registered first, so it sees the flag as the earlier signal left it.
        signal_hook::flag::register_conditional_shutdown(sig, 130, flag.clone())
            .context("installing the SIGINT/SIGTERM handler")?;
        signal_hook::flag::register(sig, flag.clone())
            .context("installing the SIGINT/SIGTERM handler")?;
    }
    Ok(flag)
}

/// `xtcp send`.
pub fn send(a: &SendArgs) -> anyhow::Result<()> {
    let mut cfg = a.engine.config()?;
    cfg.tcp.connect_timeout = Some(Duration::from_millis(a.connect_timeout));
    if a.connections == 0 || a.connections > 1024 {
        bail!("--connections must be between 1 and 1024");
    }
    let mut readers = Vec::new();
    if a.bytes.is_some() && a.pattern.is_none() && !a.zeros {
        bail!("--bytes goes with --pattern SEED or --zeros");
    }
    let sources: Vec<Source> = match (a.pattern, a.zeros, &a.file) {
        (Some(_), _, _) | (None, true, _) => {
            let Some(len) = a.bytes else {
                bail!("--pattern and --zeros need --bytes N (per connection, e.g. 1G)");
            };
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
            if a.connections != 1 {
                bail!(
                    "--connections above 1 needs --pattern or --zeros (one input cannot feed \
                     several streams)"
                );
            }
            let file = match input {
                Some(p) => {
                    let f = std::fs::File::open(p)
                        .with_context(|| format!("opening {}", p.display()))?;
                    let regular = f
                        .metadata()
                        .with_context(|| format!("reading {}", p.display()))?
                        .is_file();
                    Some((f, regular))
                }
                None => None,
            };
            match file {
                // A regular file: the worker reads it straight into the
                // send buffer's frames.
                Some((f, true)) => vec![Source::File(FileSource::new(f))],
                other => {
                    let reader: Box<dyn std::io::Read + Send> = match other {
                        Some((f, _)) => Box::new(f),
                        None => {
                            if std::io::stdin().is_terminal() {
                                bail!(
                                    "standard input is a terminal: give --file F, --pattern SEED \
                                     --bytes N, or pipe data in"
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
    let flag = interrupt_flag()?;
    let mut meter = Meter::new(None);
    let role = Role::Connect {
        remote: a.connect,
        local: a.local,
        sources,
    };
    let report = xtcp_engine::worker::run(&cfg, role, &flag, |p| meter.show(p))
        .with_context(|| format!("xtcp send on {}", cfg.iface))?;
    meter.done();
    drop(readers);
    let s = summarise(&report, &cfg, true, None, a.connections);
    print_summary(&s, a.json, "sent")?;
    if let Some(e) = s.error {
        bail!("{e}");
    }
    Ok(())
}

/// Fails unless `p` can be written, without changing anything on disk: an
/// existing file is opened for writing (not truncated), a new one needs an
/// existing directory.
fn check_writable(p: &std::path::Path) -> anyhow::Result<()> {
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => bail!("--out {} is a directory", p.display()),
        Ok(_) => {
            std::fs::OpenOptions::new()
                .write(true)
                .open(p)
                .with_context(|| format!("--out {}: cannot write it", p.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => std::path::Path::new("."),
            };
            if !dir.is_dir() {
                bail!("--out {}: no directory {}", p.display(), dir.display());
            }
        }
        Err(e) => return Err(e).with_context(|| format!("--out {}", p.display())),
    }
    Ok(())
}

/// `xtcp recv`.
pub fn recv(a: &RecvArgs) -> anyhow::Result<()> {
    let cfg = a.engine.config()?;
    let (addr, port) = a.listen;
    let mut writer = None;
    let sinks = if let Some(seed) = a.verify {
        SinkKind::Verify(seed)
    } else if a.discard {
        SinkKind::Discard
    } else {
        if a.keep_listening {
            bail!(
                "--keep-listening needs --verify SEED or --discard: an output file or standard \
                 output takes one connection's stream"
            );
        }
        let open: OpenOutput = match &a.out {
            Some(p) => {
                check_writable(p)?;
                let p = p.clone();
                // Created (or truncated) when the first connection brings
                // its first bytes or its end, not before.
                Box::new(move || {
                    let f = std::fs::File::create(&p).map_err(|e| {
                        std::io::Error::new(e.kind(), format!("creating {}: {e}", p.display()))
                    })?;
                    Ok(Box::new(std::io::BufWriter::with_capacity(1 << 20, f))
                        as Box<dyn std::io::Write + Send>)
                })
            }
            None => {
                if std::io::stdout().is_terminal() {
                    bail!(
                        "standard output is a terminal: give --out FILE, --verify SEED or \
                         --discard, or redirect it"
                    );
                }
                if a.json {
                    bail!(
                        "--json writes to standard output: give --out FILE, --verify or --discard"
                    );
                }
                Box::new(|| Ok(Box::new(std::io::stdout()) as Box<dyn std::io::Write + Send>))
            }
        };
        let (sink, t) = spawn_writer(open).context("starting the writer thread")?;
        writer = Some(t);
        let (tx, rx) = crossbeam_channel::bounded(1);
        let _ = tx.send(sink);
        SinkKind::Single(rx)
    };
    let flag = interrupt_flag()?;
    let at = match addr {
        Some(ip) => SocketAddr::new(ip, port).to_string(),
        None => format!("port {port}"),
    };
    let mut meter = Meter::new(Some(format!(
        "xtcp recv: listening on {at} ({})",
        cfg.iface
    )));
    let role = Role::Listen {
        addr,
        port,
        sinks,
        keep_listening: a.keep_listening,
    };
    let report = xtcp_engine::worker::run(&cfg, role, &flag, |p| meter.show(p))
        .with_context(|| format!("xtcp recv on {}", cfg.iface))?;
    meter.done();
    let written = writer.map(|t| match t.join() {
        Ok(r) => r.map_err(anyhow::Error::from),
        Err(_) => Err(anyhow::anyhow!("the writer thread panicked")),
    });
    let expected = usize::from(!a.keep_listening);
    let s = summarise(&report, &cfg, false, written, expected);
    print_summary(&s, a.json, "received")?;
    if let Some(e) = s.error {
        if !(a.keep_listening
            && report.interrupted
            && s.connections.iter().all(|c| c.result == "ok"))
        {
            bail!("{e}");
        }
    }
    Ok(())
}
