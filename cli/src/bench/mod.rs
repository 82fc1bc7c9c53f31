//! `xtcp bench`: xtcp against the kernel's TCP, side by side, over a sweep
//! of MTU, buffers, write size, streams, rings, frames, MSS clipping,
//! binding and the kernel's own options (offloads, zero-copy send, a
//! transmit queue), on a test network of its own (two namespaces joined by
//! a veth pair, offloads off), removed afterwards — or, with `--iface A,B`,
//! on two existing interfaces moved into those namespaces for the run and
//! handed back afterwards. `--preset` runs one of the published
//! experiments xtcp was built from ([`preset`]) and prints the published
//! table beside ours.
//!
//! Each point of the sweep first pings the idle path (shown for reference),
//! then runs, interleaved, `--repeat` times: kernel → kernel (stock iperf3
//! at both ends), xtcp client → kernel `iperf3 -s`, kernel `iperf3 -c` →
//! `xtcp serve`, and xtcp client → `xtcp serve`. Every run is an iperf3
//! test; the client's `-J` output gives the bytes, seconds, retransmits,
//! both sides' CPU utilisation (user and system) and the sender's own RTT
//! figures. The queueing delay is the sender's mean RTT less its minimum
//! RTT in the same run: both come from the same TCP sender's RTT estimator
//! on the same connection, so wake-up latency that an idle ping pays and a
//! busy connection does not cannot make it negative (docs/BENCHMARKS.md).
//! `--json` writes a self-describing record ([`record`]).

mod load;
mod plot;
pub mod preset;
mod record;

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use xtcp_engine::testnet::{TestNet, TestNetConfig};

use crate::report::{Output, Style};
use preset::Preset;

/// Arguments of `xtcp bench`. Every sweep flag takes a comma-separated
/// list; the sweep is every combination. A `--preset` sets the sweep of its
/// experiment; a sweep flag given with it replaces that axis of the preset.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BenchArgs {
    /// Run a published experiment (its sweep and parameters) and print the
    /// published table next to ours: loopback-mtu, lo0-space, rcvbuf-small,
    /// ring-queue, mss-clip (docs/REPRODUCTIONS.md). The axes it sets cannot
    /// be given too.
    #[arg(long, value_enum)]
    pub preset: Option<Preset>,
    /// MTUs to sweep [default: 1500,9000,16384,32768,65535].
    #[arg(long, value_delimiter = ',')]
    pub mtu: Vec<u32>,
    /// Receive buffers to sweep (`auto` or sizes like 64K): xtcp's
    /// `--rcvbuf`, and iperf3's `-w` on every client, which the server
    /// takes for its side (a kernel client applies it to its own send
    /// buffer too) [default: auto].
    #[arg(long, value_delimiter = ',')]
    pub rcvbuf: Vec<String>,
    /// Send buffers to sweep (`auto`, sizes like 128K, or `rcvbuf`: the
    /// point's receive buffer): xtcp's `--sndbuf` (auto: its auto-tuning, 256K up to 4M), and for
    /// the kernel ends `net.ipv4.tcp_wmem` = "4096 N N" in both namespaces
    /// (auto: the kernel's autotuning) [default: auto].
    #[arg(long, value_delimiter = ',')]
    pub sndbuf: Vec<String>,
    /// Application write/read sizes to sweep (iperf3's `-l`, e.g. 256 or
    /// 63K; `default`: iperf3's 128K), given to every client: a kernel
    /// client writes that much a call, and every server reads with it. An
    /// xtcp client takes it as iperf3's block size only: it sends from
    /// frames filled once, in full segments, whatever the size, so this
    /// axis changes the kernel's senders, not xtcp's [default: default].
    #[arg(long, value_delimiter = ',')]
    pub length: Vec<String>,
    /// Parallel streams to sweep (iperf3's `-P`) [default: 1].
    #[arg(
        short = 'P',
        long = "parallel",
        alias = "streams",
        value_name = "PARALLEL",
        value_delimiter = ','
    )]
    pub streams: Vec<u32>,
    /// TCP_NODELAY on the kernel senders (iperf3 `-N`) to sweep: `on`,
    /// `off`. xtcp's sender never holds small segments back (no Nagle), so
    /// the xtcp pairs run the same either way [default: off].
    #[arg(long, value_delimiter = ',')]
    pub nodelay: Vec<String>,
    /// xtcp's RX/TX ring entries to sweep (powers of two, 64..=16384;
    /// default: xtcp's 2048). On the veth test network only the xtcp ends
    /// have rings: the kernel pairs run the same at every ring size (see
    /// --kernel-txqueue for theirs). With --iface, a --ring given also sets
    /// the NICs' RX/TX rings (`ethtool -G`) for all four pairs, and puts
    /// the old sizes back afterwards.
    #[arg(long, value_delimiter = ',', value_parser = crate::args::parse_ring)]
    pub ring: Vec<u32>,
    /// xtcp's UMEM frame sizes to sweep (`auto`, 2048, 4096: xtcp's
    /// `--frame-size`); the kernel pairs have no frames and run the same at
    /// every size [default: auto].
    #[arg(long, value_delimiter = ',')]
    pub frame_size: Vec<String>,
    /// xtcp's TX bursts to sweep (`--tx-burst`: TX frames one loop turn
    /// queues for all its connections, sent before the ACKs that arrive
    /// meanwhile are read). The
    /// kernel pairs run the same at every value [default: 64].
    #[arg(long, value_delimiter = ',')]
    pub tx_burst: Vec<u32>,
    /// xtcp's MSS clipping to sweep (`on`, `off`: xtcp's `--mss-clip`,
    /// whole UMEM frames per segment); the kernel pairs run the same
    /// either way [default: on].
    #[arg(long, value_delimiter = ',')]
    pub mss_clip: Vec<String>,
    /// xtcp's transmit layouts to sweep (`chained`, `single`, `auto`; see
    /// `xtcp send --help`). On veth, whose `tx off` also turns off
    /// scatter-gather, the kernel copies a chained segment's pieces into
    /// one buffer; `single` costs smaller segments instead (at most a
    /// frame) [default: auto].
    #[arg(long, value_delimiter = ',')]
    pub tx_layout: Vec<String>,
    /// How the xtcp ends bind their AF_XDP sockets, to sweep: `copy`,
    /// `zerocopy`. veth has no AF_XDP zero-copy: zerocopy needs --iface
    /// with NICs that have it (`xtcp probe`) [default: copy].
    #[arg(long, value_delimiter = ',')]
    pub bind: Vec<String>,
    /// The kernel → kernel pair with the veth's TSO, GSO, GRO and checksum
    /// offloads `on` (veth's and a NIC's default) or `off`, to sweep. The
    /// pairs with an xtcp end always run with them off (an XDP program
    /// sees MTU-sized, checksummed packets, as from a NIC); the table's
    /// `koff` column says which the kernel pair used [default: off].
    #[arg(long, value_delimiter = ',')]
    pub kernel_offloads: Vec<String>,
    /// iperf3's `-Z` (sendfile) on the kernel senders, to sweep: `on`,
    /// `off`. xtcp's senders send from frames filled once either way
    /// [default: off].
    #[arg(long, value_delimiter = ',')]
    pub kernel_zerocopy: Vec<String>,
    /// A transmit queue for the kernel ends, to sweep: `none` (veth's
    /// default: no queue), a number of packets (a `pfifo` queue of that
    /// length on both veth ends: `tc qdisc … pfifo limit N`), or `ring`:
    /// the point's --ring, so the kernel's queue and xtcp's TX ring sweep
    /// together. On the bench's own veth pair only [default: none].
    #[arg(long, value_delimiter = ',')]
    pub kernel_txqueue: Vec<String>,
    /// Congestion control of every end, to sweep: `cubic`, `reno`
    /// (NewReno): iperf3's `-C` on every client (the server takes it for
    /// its side) and xtcp's `--cc`, so that the kernel's ends run the same
    /// algorithm as xtcp's whatever this host's default is (BBR, say, which
    /// xtcp does not have) [default: cubic].
    #[arg(long, value_delimiter = ',')]
    pub cc: Vec<String>,
    /// Run on two existing interfaces A,B (two NIC ports cabled back to
    /// back, or the ends of a veth pair) instead of a veth pair of bench's
    /// own. bench takes them over for the run: it moves them into its two
    /// namespaces, which flushes their addresses (not put back), sets its
    /// test addresses, the MTU and offloads, and afterwards — also on error
    /// or Ctrl-C — moves them back here with their MTU, offloads, rings and
    /// up/down state as they were. An interface with this host's default
    /// route is refused.
    #[arg(long, value_parser = parse_iface_pair, value_name = "A,B")]
    pub iface: Option<(String, String)>,
    /// Seconds per test (at least 3 for the RTT columns: a sender's RTT
    /// figures need three of its one-second interval readings, shown `-`
    /// otherwise).
    #[arg(
        short = 't',
        long = "time",
        alias = "duration",
        value_name = "SECS",
        default_value_t = 5,
        conflicts_with = "from"
    )]
    pub duration: u32,
    /// Repetitions of each point (medians are shown).
    #[arg(long, default_value_t = 1, conflicts_with = "from")]
    pub repeat: u32,
    /// Run only the first N points of the sweep (e.g. one short point of a
    /// preset, to check that it runs).
    #[arg(long, value_name = "N")]
    pub points: Option<usize>,
    /// Write the run as JSON: `{"meta": {...}, "samples": [...]}`
    /// (docs/BENCHMARKS.md, "Reading `xtcp bench`", its last part).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw Gbit/s, CPU s/GiB and (where measured) RTT under load against
    /// the swept parameter, xtcp beside the kernel, as SVG; with a preset,
    /// the published figure beside ours first, on the same axes.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Run nothing: read a record that `--json` wrote (this form or the
    /// bare list of samples of earlier versions) and print its table, its
    /// preset's published table, and with --plot draw it.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["json", "iface", "preset"])]
    pub from: Option<PathBuf>,
}

/// One point of the sweep: the value of every axis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Point {
    /// MTU of the link.
    pub mtu: u32,
    /// `--rcvbuf` value.
    pub rcvbuf: String,
    /// `--sndbuf` value (`rcvbuf` resolved to the receive buffer).
    pub sndbuf: String,
    /// `--length` value.
    pub length: String,
    /// Parallel streams.
    pub streams: u32,
    /// `--nodelay` value.
    pub nodelay: String,
    /// xtcp's RX/TX ring entries (and the NICs', with `--iface` and `--ring`).
    pub ring: u32,
    /// xtcp's `--frame-size` (in records of versions whose default was
    /// 4096, a number, or nothing: 4096).
    #[serde(default = "page_frames", deserialize_with = "number_or_text")]
    pub frame_size: String,
    /// xtcp's `--tx-burst`.
    pub tx_burst: u32,
    /// `--mss-clip` value.
    pub mss_clip: String,
    /// `--tx-layout` value.
    pub tx_layout: String,
    /// `--bind` value of the xtcp ends.
    pub bind: String,
    /// `--kernel-offloads` value (the kernel → kernel pair's offloads).
    pub kernel_offloads: String,
    /// `--kernel-zerocopy` value.
    pub kernel_zerocopy: String,
    /// `--kernel-txqueue` value (`ring` resolved to the ring size).
    pub kernel_txqueue: String,
    /// `--cc` value: every end's congestion control (`unset` in records
    /// of versions that left the kernel ends at the host's default).
    #[serde(default = "unset")]
    pub cc: String,
}

impl Default for Point {
    /// The defaults of every axis (also what a record of an earlier
    /// version, which lacks an axis, ran with).
    fn default() -> Point {
        Point {
            mtu: 1500,
            rcvbuf: "auto".into(),
            sndbuf: "auto".into(),
            length: "default".into(),
            streams: 1,
            nodelay: "off".into(),
            ring: DEFAULT_RING,
            frame_size: "auto".into(),
            tx_burst: 64,
            mss_clip: "on".into(),
            tx_layout: "auto".into(),
            bind: "copy".into(),
            kernel_offloads: "off".into(),
            kernel_zerocopy: "off".into(),
            kernel_txqueue: "none".into(),
            cc: "cubic".into(),
        }
    }
}

/// What a record that lacks `cc` ran with: the kernel ends at the host's
/// default, xtcp's at cubic.
fn unset() -> String {
    "unset".into()
}

/// What a record that lacks `frame_size` ran with.
fn page_frames() -> String {
    "4096".into()
}

/// A value recorded as text, or as a number by earlier versions.
fn number_or_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Value {
        Number(u64),
        Text(String),
    }
    Ok(match Value::deserialize(d)? {
        Value::Number(n) => n.to_string(),
        Value::Text(t) => t,
    })
}

/// A swept parameter's value at a point, as text.
type Dimension = fn(&Point) -> String;

/// The axes: name in the table, name in plots, value.
const DIMENSIONS: [(&str, &str, Dimension); 16] = [
    ("MTU", "MTU", |p| p.mtu.to_string()),
    ("rcvbuf", "rcvbuf", |p| p.rcvbuf.clone()),
    ("sndbuf", "sndbuf", |p| p.sndbuf.clone()),
    ("len", "length", |p| p.length.clone()),
    ("P", "streams", |p| p.streams.to_string()),
    ("nodel", "nodelay", |p| p.nodelay.clone()),
    ("ring", "ring", |p| p.ring.to_string()),
    ("frame", "frame size", |p| p.frame_size.clone()),
    ("burst", "TX burst", |p| p.tx_burst.to_string()),
    ("clip", "MSS clip", |p| p.mss_clip.clone()),
    ("layout", "TX layout", |p| p.tx_layout.clone()),
    ("bind", "bind", |p| p.bind.clone()),
    ("koff", "kernel offloads", |p| p.kernel_offloads.clone()),
    ("kzc", "kernel zero-copy", |p| p.kernel_zerocopy.clone()),
    ("kq", "kernel TX queue", |p| p.kernel_txqueue.clone()),
    ("cc", "congestion control", |p| p.cc.clone()),
];

/// The axes worth a column or a label among `points`: those that vary,
/// and those at a value other than their default (the MTU always).
fn shown_dimensions(points: &[Point]) -> Vec<usize> {
    let default = Point::default();
    (0..DIMENSIONS.len())
        .filter(|&d| {
            let f = DIMENSIONS[d].2;
            d == 0
                || points
                    .iter()
                    .any(|p| f(p) != f(&points[0]) || f(p) != f(&default))
        })
        .collect()
}

/// The axes that vary among `points`.
fn varying_dimensions(points: &[Point]) -> Vec<usize> {
    (0..DIMENSIONS.len())
        .filter(|&d| {
            let f = DIMENSIONS[d].2;
            points.iter().any(|p| f(p) != f(&points[0]))
        })
        .collect()
}

impl Point {
    /// The values of the axes `dims`, joined by `/` (`9000/auto/2048`).
    fn label_of(&self, dims: &[usize]) -> String {
        dims.iter()
            .map(|&d| (DIMENSIONS[d].2)(self))
            .collect::<Vec<_>>()
            .join("/")
    }

    /// Every axis, `name=value`, for progress and error messages.
    fn label(&self) -> String {
        DIMENSIONS
            .iter()
            .enumerate()
            .filter(|(i, (_, _, f))| *i == 0 || f(self) != f(&Point::default()))
            .map(|(_, (n, _, f))| format!("{n}={}", f(self)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// One measured run.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Sample {
    /// The point's axes.
    #[serde(flatten)]
    pub point: Point,
    /// Repetition.
    pub repeat: u32,
    /// "kernel → kernel", "xtcp → kernel", "kernel → xtcp", "xtcp → xtcp".
    pub pair: String,
    /// Receiver's Gbit/s: `bytes` over `seconds`.
    pub gbps: f64,
    /// Bytes the receiver got, as the client reports it
    /// (`end.sum_received.bytes`: the server's count, relayed by iperf3's
    /// protocol).
    pub bytes: u64,
    /// The receiver's seconds (`end.sum_received.seconds`).
    pub seconds: f64,
    /// Bytes the client wrote (`end.sum_sent.bytes`).
    pub sent_bytes: u64,
    /// The server's own count of the bytes it received, from its own `-J`
    /// document (stock `iperf3 -s -J`, or `xtcp serve -J`); `None` if it
    /// printed none.
    pub server_bytes: Option<u64>,
    /// Bytes B's interface received during the run (from the client's
    /// start to the server's exit), as its driver counts them (`ip -s
    /// link`): the data and the control connection, with their headers.
    pub link_rx_bytes: Option<u64>,
    /// Packets B's interface received during the run.
    pub link_rx_packets: Option<u64>,
    /// Sender's retransmits.
    pub retransmits: u64,
    /// Sender CPU, percent of one core (the client's `host_total`).
    pub cpu_sender: f64,
    /// Of which user space.
    pub cpu_sender_user: f64,
    /// Of which the kernel.
    pub cpu_sender_system: f64,
    /// Receiver CPU, percent of one core (the client's `remote_total`).
    pub cpu_receiver: f64,
    /// Of which user space.
    pub cpu_receiver_user: f64,
    /// Of which the kernel.
    pub cpu_receiver_system: f64,
    /// Both sides' CPU seconds per GiB moved.
    pub cpu_s_per_gib: Option<f64>,
    /// Gbit/s divided by the kernel → kernel run of the same repetition.
    pub ratio: Option<f64>,
    /// Jain's fairness index of the streams' received bytes (1 = equal;
    /// `None` with one stream).
    pub jain: Option<f64>,
    /// Round-trip time of the idle path, µs (ping before the point's runs;
    /// for reference: it includes the wake-up of an idle receiver).
    pub ping_rtt_us: Option<f64>,
    /// The data sender's congestion control, as the client's `-J` says
    /// (`end.sender_tcp_congestion`: a kernel client reads it from its
    /// socket, xtcp's client from its TCP); `None` where it says none.
    pub sender_congestion: Option<String>,
    /// The receiver's (`end.receiver_tcp_congestion`: the server's, as it
    /// reported it to the client).
    pub receiver_congestion: Option<String>,
    /// The sender's least RTT in the run, µs, averaged over streams, of
    /// its readings one per interval (the client's
    /// `intervals[].streams[].rtt`, as [`sender_rtts_us`] takes them): the
    /// path without queueing.
    pub min_rtt_us: Option<f64>,
    /// The sender's mean RTT under load, µs, averaged over streams, of the
    /// same readings; `None` where the client has too few.
    pub rtt_us: Option<f64>,
    /// `rtt_us` less `min_rtt_us`: the delay the load adds, µs (never
    /// negative; `None` where either is not reported).
    pub queue_delay_us: Option<f64>,
    /// Offloads of both ends during the run, as `ethtool -k` had them
    /// (`{"a": {"tso": "off", …}, "b": {…}}`).
    pub offloads: Option<serde_json::Value>,
    /// The client side's transmit queueing during the run, as `tc qdisc
    /// show` printed it (veth's `noqueue`, or the `pfifo` of
    /// `--kernel-txqueue`).
    pub qdisc: Option<String>,
    /// What the client says it applied: its `-J` output's
    /// `start.test_start` (streams, `blksize`, …) with `start`'s
    /// `sock_bufsize`, `sndbuf_actual` and `rcvbuf_actual` where it reports
    /// them.
    pub client_start: Option<serde_json::Value>,
    /// XDP statistics of the xtcp client end (xtcp → kernel, xtcp → xtcp;
    /// `None` for a kernel client): the `xdp` object of `xtcp client -J`,
    /// with `steered` (packets the steering program redirected to xtcp),
    /// `dropped_at_redirect` (lost before xtcp saw them: the driver's
    /// count where it has one, veth's `rx_queue_N_drops`, else the
    /// sockets' `rx_ring_full + rx_dropped`; `drops_source` says which),
    /// `drop_percent`, the sockets' `XDP_STATISTICS` summed (`rx_dropped`,
    /// `rx_ring_full`, `rx_fill_ring_empty_descs`, `rx_invalid_descs`,
    /// `tx_invalid_descs`, `tx_ring_empty_descs`), the driver's count
    /// (`driver`, `driver_counter`, `driver_drops`, or `driver_note` where
    /// the driver has none) and the same per queue in `queues`.
    pub xdp_client: Option<serde_json::Value>,
    /// The same for the xtcp server end (kernel → xtcp, xtcp → xtcp;
    /// `None` for a kernel server): the closing `{"xdp": …}` object of
    /// `xtcp serve -J`. Where xtcp receives the data, these are the
    /// interesting ones.
    pub xdp_server: Option<serde_json::Value>,
    /// xtcp's own counters of the client end (`None` for a kernel client):
    /// the `engine` object of `xtcp client -J`: drops by reason
    /// (`drop_malformed`, `drop_not_tcp`, `drop_fragment`,
    /// `drop_checksum`, `drop_not_ours`, `drop_oversize`), `tx_ring_full`,
    /// `tx_no_frame`, `tx_full_turns` (loop turns that found the TX ring or
    /// the frame pool full), `tx_queued_max` (the most descriptors waiting
    /// on a TX ring at a kick) and `turns`.
    pub engine_client: Option<serde_json::Value>,
    /// The same for the xtcp server end (`xtcp serve -J`'s closing
    /// document).
    pub engine_server: Option<serde_json::Value>,
    /// Redirect drops ÷ steered packets, percent, of the xtcp end that
    /// receives the data: the server in kernel → xtcp and xtcp → xtcp, the
    /// client (which receives the ACKs) in xtcp → kernel; `None` for
    /// kernel → kernel (the table's "drop %" column).
    pub drop_pct: Option<f64>,
    /// CPU that other processes used on the host during the client's run
    /// (bench's own servers and clients, and kernel threads, left out),
    /// percent of one core; `None` in records that predate it.
    pub other_cpu_pct: Option<f64>,
    /// The other process that used the most of it: `comm`, `pid`,
    /// `cpu_pct`.
    pub other_busiest: Option<load::Busiest>,
    /// CPU time the hypervisor took from this machine (`steal` of
    /// `/proc/stat`, all CPUs) during the run, percent of one core.
    pub steal_pct: Option<f64>,
}

fn parse_iface_pair(s: &str) -> Result<(String, String), String> {
    match s.split(',').map(str::trim).collect::<Vec<_>>()[..] {
        [a, b] if !a.is_empty() && !b.is_empty() => Ok((a.to_owned(), b.to_owned())),
        _ => Err(format!("--iface takes two interfaces as A,B, not `{s}`")),
    }
}

/// xtcp's default ring size, used when `--ring` is not given.
const DEFAULT_RING: u32 = 2048;

struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const PAIRS: [&str; 4] = [
    "kernel → kernel",
    "xtcp → kernel",
    "kernel → xtcp",
    "xtcp → xtcp",
];

/// Options of an xtcp end; its worker goes on the `core`-th core bench may
/// run on (round-robin; the two ends of xtcp → xtcp must not share a
/// core, and `taskset -c 2,3 xtcp bench` puts them on 2 and 3).
fn xtcp_engine_args(iface: &str, p: &Point, core: usize) -> Vec<String> {
    let core = xtcp_engine::worker::cores::mask_cores(core + 1)[core].to_string();
    let ring = p.ring.to_string();
    let tx_burst = p.tx_burst.to_string();
    let mut v: Vec<String> = [
        "--iface",
        iface,
        "--bind",
        &p.bind,
        "--rx-csum",
        "verify",
        "--rcvbuf",
        &p.rcvbuf,
        "--ring",
        &ring,
        "--frame-size",
        &p.frame_size,
        "--tx-burst",
        &tx_burst,
        "--mss-clip",
        &p.mss_clip,
        "--tx-layout",
        &p.tx_layout,
        "--cores",
        &core,
        "--cc",
        if p.cc == "reno" { "newreno" } else { "cubic" },
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if p.sndbuf != "auto" {
        v.extend(["--sndbuf".to_owned(), p.sndbuf.clone()]);
    }
    v
}

/// The iperf3 client options of a point that both kinds of client take
/// (`-t`, `-P`, `-l`, `-C`, and `-w`: the receiving end's buffer, which the
/// client sends to the server for its side), for an xtcp client `-Z`, and
/// for a kernel client its own (`-N`, and `-Z` with `--kernel-zerocopy
/// on`).
fn client_args(a: &BenchArgs, p: &Point, kernel: bool) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "-t".into(),
        a.duration.to_string(),
        "-P".into(),
        p.streams.to_string(),
        "-J".into(),
    ];
    if p.length != "default" {
        v.extend(["-l".into(), p.length.clone()]);
    }
    // Every pair's receiver gets the point's buffer: a kernel server from
    // the client's -w (an xtcp client's too: without it the kernel server
    // of xtcp → kernel kept its auto-tuned buffer while the other pairs'
    // receivers had the point's), an xtcp end from its --rcvbuf as well.
    if p.rcvbuf != "auto" {
        v.extend(["-w".into(), p.rcvbuf.clone()]);
    }
    if !kernel {
        // xtcp's zero source (frames filled once), as bench has always
        // measured xtcp's sender; its copying source is `xtcp client`'s
        // default, iperf3's habit.
        v.push("-Z".into());
    }
    // The point's congestion control on every client, which iperf3's
    // protocol hands the server for its side: a namespace's default, which
    // the host's would otherwise be, takes only those the host allows all
    // users, and root may set any on a socket.
    v.extend(["-C".into(), p.cc.clone()]);
    if kernel {
        if p.nodelay == "on" {
            v.push("-N".into());
        }
        if p.kernel_zerocopy == "on" {
            v.push("-Z".into());
        }
    }
    v
}

/// What one run printed: the client's `-J` output, the server's own count
/// and, for an xtcp server, the closing document `xtcp serve -J` prints
/// when it stops (`xdp`, `engine`, …); and what the link carried.
struct PairOutput {
    client: serde_json::Value,
    server_close: Option<serde_json::Value>,
    /// The server's own count of the bytes it received (its `-J`
    /// document's `end.sum_received.bytes`).
    server_bytes: Option<u64>,
    /// Bytes and packets B's interface received during the run.
    link: Option<(u64, u64)>,
    /// What else ran on the host during the client's run.
    load: load::OtherLoad,
}

/// The run's counters (with its `xdp` object) that `xtcp serve -1 -J`
/// printed in its test's document, as `xtcp_serve`.
fn serve_close(stdout: &str) -> Option<serde_json::Value> {
    serde_json::Deserializer::from_str(stdout)
        .into_iter::<serde_json::Value>()
        .filter_map(Result::ok)
        .filter_map(|mut v| v.get_mut("xtcp_serve").map(serde_json::Value::take))
        .find(|v| v.get("xdp").is_some())
}

/// Runs one iperf3 test for `pair`.
fn run_pair(net: &TestNet, pair: &str, a: &BenchArgs, point: &Point) -> anyhow::Result<PairOutput> {
    let me = std::env::current_exe().context("finding the xtcp binary")?;
    let me = me.to_string_lossy().into_owned();
    let server_ip = net.b.ip4.to_string();
    // The server on side B.
    let kernel_server = pair.ends_with("kernel");
    let server = if kernel_server {
        net.b
            .ns
            .command("iperf3")
            .args(["-s", "-1", "-J", "-B", &server_ip])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting iperf3 -s")?
    } else {
        // On the address the kernel's server takes (-B), so that both serve
        // IPv4 alone, with the same layout.
        let mut args = vec!["serve".to_string(), "-1".into(), "-J".into()];
        args.extend(["-B".into(), server_ip.clone()]);
        args.extend(xtcp_engine_args(&net.b.iface, point, 1));
        net.b
            .ns
            .command(&me)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting xtcp serve")?
    };
    let mut server = Reap(server);
    // The server's standard error, collected as it comes: xtcp serve's
    // banner says when it is set up; the rest (`ip netns exec`'s too)
    // explains a failure.
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = server.0.stderr.take().map(|mut pipe| {
        let log = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut pipe, &mut buf) {
                if let Ok(mut l) = log.lock() {
                    l.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        })
    });
    let log_text = || log.lock().map(|l| l.clone()).unwrap_or_default();
    // Its standard output (`-J`: the test's document; xtcp serve's then
    // its XDP statistics), read as it comes so that it never blocks.
    let stdout_reader = server.0.stdout.take().map(|mut pipe| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut pipe, &mut s);
            s
        })
    });
    // The client starts once the server is ready: the kernel's listening
    // socket, or xtcp's banner (printed once it is set up).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = if kernel_server {
            net.b
                .ns
                .command("ss")
                .args(["-Hltn", "sport = :5201"])
                .output()
                .is_ok_and(|o| !o.stdout.is_empty())
        } else {
            log_text().contains("listening on")
        };
        if ready {
            break;
        }
        if let Some(st) = server.0.try_wait()? {
            bail!(
                "the server exited ({st}) before it was ready: {}",
                log_text()
            );
        }
        if Instant::now() > deadline {
            bail!("the server was not ready within 60 s: {}", log_text());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let link_before = link_rx(net);
    let host_before = load::Host::now();
    let out = if pair.starts_with("kernel") {
        let mut args = vec!["-c".to_owned(), server_ip.clone()];
        args.extend(client_args(a, point, true));
        net.a
            .ns
            .command("timeout")
            .arg((a.duration + 30).to_string())
            .arg("iperf3")
            .args(&args)
            .output()?
    } else {
        let mut args = vec!["client".to_string()];
        args.extend(xtcp_engine_args(&net.a.iface, point, 0));
        args.extend(["-c".to_owned(), server_ip.clone()]);
        args.extend(client_args(a, point, false));
        net.a
            .ns
            .command("timeout")
            .arg((a.duration + 30).to_string())
            .arg(&me)
            .args(&args)
            .output()?
    };
    let others = load::Host::now().others_since(&host_before, std::process::id());
    // `-1` servers exit after their test (xtcp after its grace period and
    // its closing statistics); give them a moment, then reap. After a
    // failed client there is no test to wait for.
    let start = Instant::now();
    let patience = match (out.status.success(), kernel_server) {
        (false, _) => Duration::ZERO,
        (true, true) => Duration::from_secs(5),
        (true, false) => Duration::from_secs(20),
    };
    while server.0.try_wait()?.is_none() && start.elapsed() < patience {
        std::thread::sleep(Duration::from_millis(20));
    }
    let server_exited = server.0.try_wait()?.is_some();
    let link = link_before
        .zip(link_rx(net))
        .map(|((b0, p0), (b1, p1))| (b1.saturating_sub(b0), p1.saturating_sub(p0)));
    let server_err = || {
        let _ = server.0.kill();
        let _ = server.0.wait();
        if let Some(r) = reader {
            let _ = r.join();
        }
        log_text()
    };
    let v: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(_) => bail!(
            "no JSON from the client: {}; server: {}",
            String::from_utf8_lossy(&out.stderr),
            server_err()
        ),
    };
    if let Some(e) = v.get("error") {
        bail!("{e}; server: {}", server_err());
    }
    if !kernel_server && !server_exited {
        bail!(
            "xtcp serve -1 did not exit within {patience:?} after its test: {}",
            server_err()
        );
    }
    // A stock server that has not exited has printed no document, and
    // its count is missing (it is ended on return).
    let server_out = stdout_reader
        .filter(|_| server_exited)
        .and_then(|r| r.join().ok())
        .unwrap_or_default();
    let server_close = if kernel_server {
        None
    } else {
        match serve_close(&server_out) {
            Some(x) => Some(x),
            None => bail!(
                "xtcp serve -J printed no XDP statistics: {server_out}; {}",
                server_err()
            ),
        }
    };
    // The server's own count of what it received, from its own document
    // (the one with the test's `end`).
    let server_bytes = serde_json::Deserializer::from_str(&server_out)
        .into_iter::<serde_json::Value>()
        .filter_map(Result::ok)
        .find_map(|v| v["end"]["sum_received"]["bytes"].as_u64());
    if !pair.starts_with("kernel") && v.get("xdp").is_none() {
        bail!("xtcp client -J printed no XDP statistics");
    }
    // The receiver's count as the client relays it is the server's own:
    // a run where they differ, or where nothing arrived, measured nothing
    // that can be shown.
    let received = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    if received == 0 {
        bail!("nothing arrived in the test: {}", server_err());
    }
    if let Some(sb) = server_bytes.filter(|&sb| sb != received) {
        bail!(
            "the client reports {received} bytes received, the server's own count is \
             {sb}"
        );
    }
    Ok(PairOutput {
        client: v,
        server_close,
        server_bytes,
        link,
        load: others,
    })
}

/// Bytes and packets B's interface has received so far, as its driver
/// counts them (`ip -s link`); `None` if they cannot be read.
fn link_rx(net: &TestNet) -> Option<(u64, u64)> {
    let out = net
        .b
        .ns
        .exec(&["ip", "-j", "-s", "link", "show", "dev", &net.b.iface])
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let rx = &v[0]["stats64"]["rx"];
    Some((rx["bytes"].as_u64()?, rx["packets"].as_u64()?))
}

/// The least RTT readings a stream needs for its least and mean to say
/// anything about queueing (a reading per interval: one per second).
const MIN_RTT_READINGS: usize = 3;

/// The sender's (least, mean) RTT in µs, each averaged over the streams,
/// from its readings one per interval (`intervals[].streams[].rtt` of the
/// client's `-J`, the omitted ones left out): stock iperf3 makes its
/// `min_rtt` and `mean_rtt` of exactly these, while xtcp's client makes its
/// own of every sample (many a second), whose least is near the idle round
/// trip; from the intervals, every pair's figures are the same kind. `None`
/// if a stream has fewer than [`MIN_RTT_READINGS`].
fn sender_rtts_us(v: &serde_json::Value) -> Option<(f64, f64)> {
    let mut by_stream: Vec<(i64, Vec<f64>)> = Vec::new();
    for iv in v["intervals"].as_array()? {
        for st in iv["streams"].as_array()? {
            if st["sender"] != true || st["omitted"] == true {
                continue;
            }
            // (0: no estimate yet.)
            let (Some(id), Some(rtt)) = (
                st["socket"].as_i64(),
                st["rtt"].as_f64().filter(|r| *r > 0.0),
            ) else {
                continue;
            };
            match by_stream.iter_mut().find(|(i, _)| *i == id) {
                Some((_, r)) => r.push(rtt),
                None => by_stream.push((id, vec![rtt])),
            }
        }
    }
    if by_stream.is_empty() || by_stream.iter().any(|(_, r)| r.len() < MIN_RTT_READINGS) {
        return None;
    }
    let n = by_stream.len() as f64;
    let least = by_stream
        .iter()
        .map(|(_, r)| r.iter().copied().fold(f64::INFINITY, f64::min))
        .sum::<f64>()
        / n;
    let mean = by_stream
        .iter()
        .map(|(_, r)| r.iter().sum::<f64>() / r.len() as f64)
        .sum::<f64>()
        / n;
    Some((least, mean))
}

/// Mean less minimum RTT of the same sender: the delay the load adds.
/// `None` if either is missing, or if the figures contradict each other
/// (a minimum above the mean is not a measurement).
fn queue_delay_us(mean: Option<f64>, min: Option<f64>) -> Option<f64> {
    let d = mean? - min?;
    (d >= 0.0).then_some(d)
}

/// The idle round-trip time from A to B in µs: the average of `ping -c 5`.
fn ping_rtt_us(net: &TestNet) -> anyhow::Result<f64> {
    let out = net
        .a
        .ns
        .command("ping")
        .args(["-c", "5", "-i", "0.2", "-w", "10", "-q"])
        .arg(net.b.ip4.to_string())
        .stdin(Stdio::null())
        .output()
        .context("running ping (apt install iputils-ping)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_ping_avg_us(&text).with_context(|| {
        format!(
            "no round-trip time from `ping {}`: {} {}",
            net.b.ip4,
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

/// The average of ping's `rtt min/avg/max/mdev = 0.031/0.045/0.060/0.010 ms`, in µs.
fn parse_ping_avg_us(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.contains("min/avg/max"))?;
    let (_, values) = line.split_once('=')?;
    let mut words = values.split_whitespace();
    let avg: f64 = words.next()?.split('/').nth(1)?.parse().ok()?;
    let scale = match words.next()? {
        "ms" => 1e3,
        "us" | "µs" => 1.0,
        "s" => 1e6,
        _ => return None,
    };
    Some(avg * scale)
}

/// Jain's fairness index of `x`: (Σx)² ÷ (n Σx²); `None` for fewer than
/// two values or none above zero.
fn jain(x: &[f64]) -> Option<f64> {
    let sq: f64 = x.iter().map(|v| v * v).sum();
    (x.len() > 1 && sq > 0.0).then(|| x.iter().sum::<f64>().powi(2) / (x.len() as f64 * sq))
}

/// The client's `start.test_start`, with `start`'s buffer sizes.
fn client_start(v: &serde_json::Value) -> Option<serde_json::Value> {
    let start = v.get("start")?;
    let mut t = start.get("test_start")?.clone();
    for k in ["sock_bufsize", "sndbuf_actual", "rcvbuf_actual"] {
        if let Some(x) = start.get(k) {
            t[k] = x.clone();
        }
    }
    Some(t)
}

fn sample(out: &PairOutput, pair: &str, point: &Point) -> Sample {
    let v = &out.client;
    let e = &v["end"];
    let recv = e["sum_received"]["bytes"].as_u64().unwrap_or(0);
    let secs = e["sum_received"]["seconds"].as_f64().unwrap_or(0.0);
    let cpu = &e["cpu_utilization_percent"];
    let c = |k: &str| cpu[k].as_f64().unwrap_or(0.0);
    let (host, remote) = (c("host_total"), c("remote_total"));
    let gib = recv as f64 / f64::from(1u32 << 30);
    let per_stream: Vec<f64> = e["streams"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(|s| s["receiver"]["bytes"].as_f64())
                .collect()
        })
        .unwrap_or_default();
    let server = out.server_close.as_ref();
    let rtts = sender_rtts_us(v);
    Sample {
        point: point.clone(),
        repeat: 0,
        pair: pair.to_owned(),
        gbps: if secs > 0.0 {
            recv as f64 * 8.0 / secs / 1e9
        } else {
            0.0
        },
        bytes: recv,
        seconds: secs,
        sent_bytes: e["sum_sent"]["bytes"].as_u64().unwrap_or(0),
        server_bytes: out.server_bytes,
        link_rx_bytes: out.link.map(|l| l.0),
        link_rx_packets: out.link.map(|l| l.1),
        retransmits: e["sum_sent"]["retransmits"].as_u64().unwrap_or(0),
        cpu_sender: host,
        cpu_sender_user: c("host_user"),
        cpu_sender_system: c("host_system"),
        cpu_receiver: remote,
        cpu_receiver_user: c("remote_user"),
        cpu_receiver_system: c("remote_system"),
        cpu_s_per_gib: (gib > 0.0).then(|| (host + remote) / 100.0 * secs / gib),
        ratio: None,
        jain: jain(&per_stream),
        ping_rtt_us: None,
        sender_congestion: e["sender_tcp_congestion"].as_str().map(str::to_owned),
        receiver_congestion: e["receiver_tcp_congestion"].as_str().map(str::to_owned),
        min_rtt_us: rtts.map(|r| r.0),
        rtt_us: rtts.map(|r| r.1),
        queue_delay_us: queue_delay_us(rtts.map(|r| r.1), rtts.map(|r| r.0)),
        offloads: None,
        qdisc: None,
        client_start: client_start(v),
        xdp_client: v.get("xdp").cloned(),
        xdp_server: server.and_then(|s| s.get("xdp")).cloned(),
        engine_client: v.get("engine").cloned(),
        engine_server: server.and_then(|s| s.get("engine")).cloned(),
        drop_pct: None,
        other_cpu_pct: Some(out.load.other_cpu_pct),
        other_busiest: out.load.busiest.clone(),
        steal_pct: out.load.steal_pct,
    }
    .with_drop_pct()
}

impl Sample {
    /// Sets `drop_pct` from the xtcp end that receives the data: the
    /// server if it is xtcp, else the client if it is xtcp.
    fn with_drop_pct(mut self) -> Sample {
        self.drop_pct = self
            .xdp_server
            .as_ref()
            .or(self.xdp_client.as_ref())
            .and_then(|x| x["drop_percent"].as_f64());
        self
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The median of the values present; `None` if there are none.
fn median_of(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = v.flatten().collect();
    (!v.is_empty()).then(|| median(v))
}

/// A median of counts as a cell: whole, or with its `.5` where it lies
/// between two (not rounded: a ratio of two such medians then agrees with
/// the cells printed).
pub(crate) fn count_cell(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// `12.3`, or `-` for a value not measured.
fn or_dash(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// Every axis's values, after the preset and the defaults.
#[derive(Debug, Clone)]
struct Sweep {
    mtu: Vec<u32>,
    rcvbuf: Vec<String>,
    sndbuf: Vec<String>,
    length: Vec<String>,
    streams: Vec<u32>,
    nodelay: Vec<String>,
    ring: Vec<u32>,
    frame_size: Vec<String>,
    tx_burst: Vec<u32>,
    mss_clip: Vec<String>,
    tx_layout: Vec<String>,
    bind: Vec<String>,
    kernel_offloads: Vec<String>,
    kernel_zerocopy: Vec<String>,
    kernel_txqueue: Vec<String>,
    cc: Vec<String>,
}

/// The values given on the command line, else the preset's, else `default`.
fn pick<T: Clone>(given: &[T], preset: &[T], default: &[T]) -> Vec<T> {
    [given, preset, default]
        .into_iter()
        .find(|v| !v.is_empty())
        .unwrap_or_default()
        .to_vec()
}

fn sweep(a: &BenchArgs) -> Sweep {
    let p = a.preset.map(Preset::args).unwrap_or_default();
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Sweep {
        mtu: pick(&a.mtu, &p.mtu, &[1500, 9000, 16384, 32768, 65535]),
        rcvbuf: pick(&a.rcvbuf, &p.rcvbuf, &s(&["auto"])),
        sndbuf: pick(&a.sndbuf, &p.sndbuf, &s(&["auto"])),
        length: pick(&a.length, &p.length, &s(&["default"])),
        streams: pick(&a.streams, &p.streams, &[1]),
        nodelay: pick(&a.nodelay, &p.nodelay, &s(&["off"])),
        ring: pick(&a.ring, &p.ring, &[DEFAULT_RING]),
        frame_size: pick(&a.frame_size, &p.frame_size, &s(&["auto"])),
        tx_burst: pick(&a.tx_burst, &p.tx_burst, &[64]),
        mss_clip: pick(&a.mss_clip, &p.mss_clip, &s(&["on"])),
        tx_layout: pick(&a.tx_layout, &p.tx_layout, &s(&["auto"])),
        bind: pick(&a.bind, &p.bind, &s(&["copy"])),
        kernel_offloads: pick(&a.kernel_offloads, &p.kernel_offloads, &s(&["off"])),
        kernel_zerocopy: pick(&a.kernel_zerocopy, &p.kernel_zerocopy, &s(&["off"])),
        kernel_txqueue: pick(&a.kernel_txqueue, &p.kernel_txqueue, &s(&["none"])),
        cc: pick(&a.cc, &p.cc, &s(&["cubic"])),
    }
}

/// Every combination, MTU outermost, the kernel's transmit queue
/// innermost; `sndbuf rcvbuf` and `kernel-txqueue ring` take the point's
/// receive buffer and ring. Points that come out the same are run once.
fn points(w: &Sweep) -> Vec<Point> {
    fn expand<T>(v: Vec<Point>, values: &[T], set: impl Fn(&mut Point, &T)) -> Vec<Point> {
        let mut out = Vec::with_capacity(v.len() * values.len());
        for p in v {
            for x in values {
                let mut q = p.clone();
                set(&mut q, x);
                out.push(q);
            }
        }
        out
    }
    let mut v = vec![Point::default()];
    v = expand(v, &w.mtu, |p, x| p.mtu = *x);
    v = expand(v, &w.rcvbuf, |p, x| p.rcvbuf = x.clone());
    v = expand(v, &w.sndbuf, |p, x| {
        p.sndbuf = if x == "rcvbuf" {
            p.rcvbuf.clone()
        } else {
            x.clone()
        }
    });
    v = expand(v, &w.length, |p, x| p.length = x.clone());
    v = expand(v, &w.streams, |p, x| p.streams = *x);
    v = expand(v, &w.nodelay, |p, x| p.nodelay = x.clone());
    v = expand(v, &w.ring, |p, x| p.ring = *x);
    v = expand(v, &w.frame_size, |p, x| p.frame_size = x.clone());
    v = expand(v, &w.tx_burst, |p, x| p.tx_burst = *x);
    v = expand(v, &w.mss_clip, |p, x| p.mss_clip = x.clone());
    v = expand(v, &w.tx_layout, |p, x| p.tx_layout = x.clone());
    v = expand(v, &w.bind, |p, x| p.bind = x.clone());
    v = expand(v, &w.kernel_offloads, |p, x| p.kernel_offloads = x.clone());
    v = expand(v, &w.kernel_zerocopy, |p, x| p.kernel_zerocopy = x.clone());
    v = expand(v, &w.kernel_txqueue, |p, x| {
        p.kernel_txqueue = if x == "ring" {
            p.ring.to_string()
        } else {
            x.clone()
        }
    });
    v = expand(v, &w.cc, |p, x| p.cc = x.clone());
    let mut seen: Vec<Point> = Vec::with_capacity(v.len());
    for p in v {
        if !seen.contains(&p) {
            seen.push(p);
        }
    }
    seen
}

/// `values` are each one of `allowed`, else an error naming the flag.
fn one_of(flag: &str, values: &[String], allowed: &[&str]) -> anyhow::Result<()> {
    if values.is_empty() {
        bail!("{flag} needs at least one value");
    }
    for v in values {
        if !allowed.contains(&v.as_str()) {
            bail!("{flag} takes {}, not `{v}`", allowed.join(", "));
        }
    }
    Ok(())
}

/// `values` are each a size in `range` (bytes) or one of `words`.
fn sizes_or(
    flag: &str,
    values: &[String],
    words: &[&str],
    range: std::ops::RangeInclusive<u64>,
) -> anyhow::Result<()> {
    for v in values {
        if words.contains(&v.as_str()) {
            continue;
        }
        let n = crate::args::parse_size(v).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
        if !range.contains(&n) {
            bail!(
                "{flag} {v}: takes {} or a size in {}..={} bytes",
                words.join(", "),
                range.start(),
                range.end()
            );
        }
    }
    Ok(())
}

/// Each sweep axis's flag, and whether `a` sets it (the command line, or a
/// preset's [`Preset::args`]).
fn axes(a: &BenchArgs) -> [(&'static str, bool); 16] {
    [
        ("--mtu", !a.mtu.is_empty()),
        ("--rcvbuf", !a.rcvbuf.is_empty()),
        ("--sndbuf", !a.sndbuf.is_empty()),
        ("--length", !a.length.is_empty()),
        ("-P", !a.streams.is_empty()),
        ("--nodelay", !a.nodelay.is_empty()),
        ("--ring", !a.ring.is_empty()),
        ("--frame-size", !a.frame_size.is_empty()),
        ("--tx-burst", !a.tx_burst.is_empty()),
        ("--mss-clip", !a.mss_clip.is_empty()),
        ("--tx-layout", !a.tx_layout.is_empty()),
        ("--bind", !a.bind.is_empty()),
        ("--kernel-offloads", !a.kernel_offloads.is_empty()),
        ("--kernel-zerocopy", !a.kernel_zerocopy.is_empty()),
        ("--kernel-txqueue", !a.kernel_txqueue.is_empty()),
        ("--cc", !a.cc.is_empty()),
    ]
}

fn check_args(a: &BenchArgs, w: &Sweep) -> anyhow::Result<()> {
    if a.duration == 0 {
        bail!("-t (--time) must be at least 1");
    }
    if a.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    if let Some(preset) = a.preset {
        // A preset runs its published setup: an axis of its given too
        // would run another experiment under its name and beside its
        // published table.
        let both: Vec<&str> = axes(a)
            .into_iter()
            .zip(axes(&preset.args()))
            .filter_map(|((flag, given), (_, set))| (given && set).then_some(flag))
            .collect();
        if !both.is_empty() {
            let name = clap::ValueEnum::to_possible_value(&preset)
                .map(|v| v.get_name().to_owned())
                .unwrap_or_default();
            bail!(
                "--preset {name} sets {} itself, to its published setup: drop {}, or run your \
                 own sweep without --preset",
                both.join(", "),
                if both.len() == 1 { "it" } else { "them" }
            );
        }
    }
    if a.points == Some(0) {
        bail!("--points must be at least 1");
    }
    if w.mtu.is_empty() || w.frame_size.is_empty() || w.tx_burst.is_empty() {
        bail!("--mtu, --frame-size and --tx-burst need at least one value");
    }
    // The bench's network carries IPv6 too (its own veth pair, or the
    // interfaces of --iface, given its addresses), whose links have an MTU
    // of 1280 at least; veth's most is 65535.
    if let Some(m) = w.mtu.iter().find(|m| !(1280..=65535).contains(*m)) {
        bail!(
            "--mtu {m}: give MTUs from 1280 to 65535 (the bench's network carries IPv6 too, \
             whose least MTU is 1280)"
        );
    }
    one_of("--mss-clip", &w.mss_clip, &["on", "off"])?;
    one_of("--tx-layout", &w.tx_layout, &["auto", "chained", "single"])?;
    one_of("--frame-size", &w.frame_size, &["auto", "2048", "4096"])?;
    one_of("--nodelay", &w.nodelay, &["on", "off"])?;
    one_of("--bind", &w.bind, &["copy", "zerocopy"])?;
    one_of("--kernel-offloads", &w.kernel_offloads, &["on", "off"])?;
    one_of("--kernel-zerocopy", &w.kernel_zerocopy, &["on", "off"])?;
    one_of("--cc", &w.cc, &["cubic", "reno"])?;
    if w.rcvbuf.is_empty() {
        bail!("--rcvbuf needs at least one value");
    }
    // (At most iperf3's most for -w, which every client gets: 512 MiB.)
    sizes_or("--rcvbuf", &w.rcvbuf, &["auto"], 4096..=1 << 29)?;
    sizes_or("--sndbuf", &w.sndbuf, &["auto", "rcvbuf"], 16384..=1 << 30)?;
    sizes_or("--length", &w.length, &["default"], 1..=1 << 20)?;
    for q in &w.kernel_txqueue {
        if q != "none"
            && q != "ring"
            && !q.parse::<u32>().is_ok_and(|n| (1..=1_000_000).contains(&n))
        {
            bail!("--kernel-txqueue takes none, ring or 1..=1000000 packets, not `{q}`");
        }
    }
    if a.iface.is_some() && w.kernel_txqueue.iter().any(|q| q != "none") {
        bail!("--kernel-txqueue is set on the bench's own veth pair only, not with --iface");
    }
    for &n in &w.streams {
        if !(1..=128).contains(&n) {
            bail!("-P (--parallel) takes 1..=128 streams (iperf3's limit), not {n}");
        }
    }
    for &r in &w.ring {
        if !r.is_power_of_two() || !(64..=16384).contains(&r) {
            bail!("--ring takes powers of two in 64..=16384, not {r}");
        }
    }
    for &b in &w.tx_burst {
        if !(1..=65536).contains(&b) {
            bail!("--tx-burst takes 1..=65536 frames, not {b}");
        }
    }
    Ok(())
}

/// Builds the network: a veth pair of its own, or the `--iface` pair taken
/// over; checks that the interfaces take every MTU and ring size of the
/// sweep. Returns whether the NICs' rings follow `--ring`.
fn network(a: &BenchArgs, w: &Sweep) -> anyhow::Result<(TestNet, bool)> {
    let config = TestNetConfig {
        mtu: w.mtu.iter().copied().min().unwrap_or(1500),
        queues: 1,
        offloads: false,
    };
    let net = match &a.iface {
        None => {
            TestNet::new(config).context("building the test network (xtcp bench runs as root)")?
        }
        Some((x, y)) => {
            TestNet::adopt(x, y, config).with_context(|| format!("taking over {x} and {y}"))?
        }
    };
    if let Some(max) = net.max_mtu()? {
        if let Some(m) = w.mtu.iter().find(|&&m| m > max) {
            bail!(
                "--mtu {m}: {} and {} take at most {max}",
                net.a.iface,
                net.b.iface
            );
        }
    }
    let mut nic_rings = false;
    if net.is_adopted() && !a.ring.is_empty() {
        let rings = net.rings()?;
        if rings.iter().any(Option::is_none) {
            eprintln!(
                "xtcp bench: {} / {} have no ring sizes to set (veth?): --ring applies to the \
                 xtcp ends only",
                net.a.iface, net.b.iface
            );
        } else {
            for (iface, r) in [&net.a.iface, &net.b.iface]
                .into_iter()
                .zip(rings.iter().flatten())
            {
                if let Some(n) = w.ring.iter().find(|&&n| n > r.rx_max || n > r.tx_max) {
                    bail!(
                        "--ring {n}: {iface} takes at most rx {} tx {} (ethtool -g {iface})",
                        r.rx_max,
                        r.tx_max
                    );
                }
            }
            nic_rings = true;
        }
    }
    Ok((net, nic_rings))
}

/// Why the xtcp ends cannot bind in zero-copy mode here, if they cannot:
/// veth has no AF_XDP zero-copy; a NIC says so through `xtcp probe`.
fn zero_copy_missing(net: &TestNet) -> anyhow::Result<Option<String>> {
    use xtcp_engine::probe::Support;
    for side in [&net.a, &net.b] {
        let _in_ns = side.ns.enter()?;
        let r = xtcp_engine::probe::probe(&side.iface)
            .with_context(|| format!("probing {}", side.iface))?;
        if r.xdp.zero_copy != Support::Yes {
            return Ok(Some(format!(
                "{} (driver {}) has no AF_XDP zero-copy (xtcp's probe of it says {})",
                side.iface,
                r.interface.driver.as_deref().unwrap_or("unknown"),
                r.xdp.zero_copy.as_str()
            )));
        }
    }
    Ok(None)
}

/// `sysctl -w` in a namespace.
fn sysctl(ns: &xtcp_engine::testnet::Netns, key: &str, value: &str) -> anyhow::Result<()> {
    ns.exec(&["sysctl", "-q", "-w", &format!("{key}={value}")])
        .with_context(|| format!("setting {key} to {value}"))?;
    Ok(())
}

/// The offloads of both ends as JSON: `{"a": {"tso": "off", …}, "b": …}`.
fn offload_state(net: &TestNet) -> anyhow::Result<serde_json::Value> {
    let [a, b] = net.offloads()?;
    let obj = |v: Vec<(&str, String)>| {
        serde_json::Value::Object(
            v.into_iter()
                .map(|(k, x)| (k.to_owned(), serde_json::Value::String(x)))
                .collect(),
        )
    };
    Ok(serde_json::json!({ "a": obj(a), "b": obj(b) }))
}

/// The table: a column per shown axis, then the measurements.
struct Table {
    dims: Vec<usize>,
    widths: Vec<usize>,
}

impl Table {
    fn new(points: &[Point]) -> Table {
        let dims = shown_dimensions(points);
        let widths = dims
            .iter()
            .map(|&d| {
                points
                    .iter()
                    .map(|p| (DIMENSIONS[d].2)(p).len())
                    .chain([DIMENSIONS[d].0.chars().count()])
                    .max()
                    .unwrap_or(4)
            })
            .collect();
        Table { dims, widths }
    }

    fn header(&self) -> String {
        let mut line: String = self
            .dims
            .iter()
            .zip(&self.widths)
            .map(|(&d, &w)| format!("{:>w$} ", DIMENSIONS[d].0))
            .collect();
        line += &format!(
            "{:<16} {:>8} {:>6} {:>7} {:>7} {:>9} {:>9} {:>8} {:>10} {:>8} {:>9} {:>7}",
            "pair",
            "Gbit/s",
            "retr",
            "CPU tx%",
            "CPU rx%",
            "CPU s/GiB",
            "vs kernel",
            "ping µs",
            "min RTT µs",
            "RTT µs",
            "qdelay µs",
            "drop %"
        );
        line
    }

    /// What the columns are, under the table; with more than one sample
    /// a row (`--repeat`), that each cell is its own column's median.
    fn legend(repeats: usize) -> Vec<String> {
        let mut v = vec![
            "Gbit/s: the receiver's bytes over its seconds (10⁹ bits); retr, min RTT, RTT and \
             qdelay (RTT − min RTT): the sender's, RTTs of its readings one per second; ping: \
             the idle path, once per point before its runs; vs kernel: Gbit/s ÷ the two kernel \
             ends' of the same repetition; drop %: of the packets steered into the xtcp end \
             that receives the data (where xtcp sends to a kernel receiver: the client, which \
             receives the ACKs), those dropped at the redirect."
                .to_owned(),
            "CPU tx%, rx%: each end's process, user + system, % of one core (the kernel's \
             packet work runs in softirq and is charged to whichever task it interrupts, so \
             the split between the ends moves from run to run more than their sum does); CPU \
             s/GiB: both processes' CPU seconds per GiB received."
                .to_owned(),
        ];
        if repeats > 1 {
            v.push(format!(
                "Each cell is the median of its column over the {repeats} repetitions: the \
                 cells of one row may come from different runs (qdelay need not be RTT − min \
                 RTT there)."
            ));
        }
        v
    }

    /// The medians of `pair`'s samples at `p`.
    fn row(&self, p: &Point, pair: &str, of: &[&Sample]) -> String {
        let m = |f: &dyn Fn(&Sample) -> f64| median(of.iter().map(|s| f(s)).collect());
        let o = |f: &dyn Fn(&Sample) -> Option<f64>| median_of(of.iter().map(|s| f(s)));
        let ratio = if pair == PAIRS[0] {
            String::new()
        } else {
            or_dash(o(&|s| s.ratio), 2)
        };
        let mut line: String = self
            .dims
            .iter()
            .zip(&self.widths)
            .map(|(&d, &w)| format!("{:>w$} ", (DIMENSIONS[d].2)(p)))
            .collect();
        line += &format!(
            "{:<16} {:>8.2} {:>6} {:>7.1} {:>7.1} {:>9} {:>9} {:>8} {:>10} {:>8} {:>9} {:>7}",
            pair,
            m(&|s| s.gbps),
            count_cell(m(&|s| s.retransmits as f64)),
            m(&|s| s.cpu_sender),
            m(&|s| s.cpu_receiver),
            or_dash(o(&|s| s.cpu_s_per_gib), 2),
            ratio,
            or_dash(o(&|s| s.ping_rtt_us), 0),
            or_dash(o(&|s| s.min_rtt_us), 0),
            or_dash(o(&|s| s.rtt_us), 0),
            or_dash(o(&|s| s.queue_delay_us), 0),
            or_dash(o(&|s| s.drop_pct), 2),
        );
        line
    }

    /// Every point's rows, pairs in order, from `samples`.
    fn rows(&self, samples: &[Sample]) -> Vec<String> {
        let mut pts: Vec<&Point> = Vec::new();
        for s in samples {
            if !pts.contains(&&s.point) {
                pts.push(&s.point);
            }
        }
        let mut v = Vec::new();
        for p in pts {
            for pair in PAIRS {
                let of: Vec<&Sample> = samples
                    .iter()
                    .filter(|s| s.point == *p && s.pair == pair)
                    .collect();
                if !of.is_empty() {
                    v.push(self.row(p, pair, &of));
                }
            }
        }
        v
    }
}

/// The most samples one pair has at one point (the repetitions a row's
/// medians are of).
fn most_repeats(samples: &[Sample]) -> usize {
    samples
        .iter()
        .map(|s| {
            samples
                .iter()
                .filter(|t| t.point == s.point && t.pair == s.pair)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The programs bench runs, and the Debian packages they come in.
const PROGRAMS: [(&str, &str); 7] = [
    ("iperf3", "iperf3"),
    ("ip", "iproute2"),
    ("tc", "iproute2"),
    ("ss", "iproute2"),
    ("ethtool", "ethtool"),
    ("ping", "iputils-ping"),
    ("sysctl", "procps"),
];

/// Each of [`PROGRAMS`] is an executable file in `PATH`, else an error
/// that names those missing and their packages, before anything is set up
/// (a missing iperf3 showed as a server that "exited before it was
/// ready").
fn check_programs() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = |name: &str| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    };
    let missing: Vec<(&str, &str)> = PROGRAMS.into_iter().filter(|(p, _)| !found(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut packages: Vec<&str> = missing.iter().map(|m| m.1).collect();
    packages.dedup();
    let names: Vec<&str> = missing.iter().map(|m| m.0).collect();
    bail!(
        "bench runs {}, which {} not in PATH: apt install {}",
        names.join(", "),
        if names.len() == 1 { "is" } else { "are" },
        packages.join(" ")
    )
}

/// Arguments that cannot work, found before anything runs (a usage error:
/// exit status 2): a sweep's ([`check_args`]), or with `--from` the flags
/// that would not apply to a record.
pub fn usage_error(a: &BenchArgs) -> Option<String> {
    let r = if a.from.is_some() {
        check_from_args(a)
    } else {
        check_args(a, &sweep(a)).and_then(|()| check_bind(a))
    };
    r.err().map(|e| format!("{e:#}"))
}

/// `--bind zerocopy` given where it cannot be had: on the bench's own veth
/// pair. (A preset's zero-copy points are left out there with a note
/// instead: see [`bench()`].)
fn check_bind(a: &BenchArgs) -> anyhow::Result<()> {
    if a.iface.is_none() && a.bind.iter().any(|b| b == "zerocopy") {
        bail!(
            "--bind zerocopy: the bench's own network is a veth pair, which has no AF_XDP \
             zero-copy; give two NIC ports that have it (--iface A,B; `xtcp probe --iface IF` \
             says whether one does)"
        );
    }
    Ok(())
}

/// `xtcp bench`.
pub fn bench(a: &BenchArgs) -> anyhow::Result<()> {
    if let Some(from) = &a.from {
        return replay(a, from);
    }
    // (The arguments were checked before: `usage_error`.)
    let w = sweep(a);
    check_programs()?;
    // Where the record and the plot go, checked before the sweep: a path
    // that cannot be written would otherwise lose a sweep's results at its
    // end.
    if let Some(p) = &a.json {
        // Written beside it, then renamed over it.
        crate::bulk::check_replaceable("--json", p)?;
    }
    if let Some(p) = &a.plot {
        crate::bulk::check_writable("--plot", p)?;
    }
    // Files there before the sweep, which its outputs replace (said).
    let existed: Vec<PathBuf> = [&a.json, &a.plot]
        .into_iter()
        .flatten()
        .filter(|p| p.exists())
        .cloned()
        .collect();
    let ends = xtcp_engine::worker::cores::mask_cores(2);
    if ends[0] == ends[1] {
        eprintln!(
            "xtcp bench: this process may run on core {} only: the two ends of xtcp → xtcp \
             share it, each busy-polling, and that pair runs at a fraction of its rate; give \
             bench two cores (taskset -c A,B)",
            ends[0]
        );
    }
    let mut points = points(&w);
    // A reader of standard output that goes away (`| head`, `less` quit)
    // ends the printing, not the sweep, whose record (`--json`) is still
    // written; where no record holds the results, the sweep stops (below).
    let mut out = Output::open(None, Style::default())?;
    let before = record::Meta::start(a);
    // Ctrl-C ends the runs (iperf3 gets it too) and unwinds, so that the
    // interfaces and namespaces are cleaned up.
    let interrupted = interrupt_flag()?;
    let (mut net, nic_rings) = network(a, &w)?;
    if points.iter().any(|p| p.bind == "zerocopy") {
        if let Some(why) = zero_copy_missing(&net)? {
            if !a.bind.is_empty() {
                bail!("--bind zerocopy: {why}");
            }
            // The preset's zero-copy half: said, and left out.
            out.line(&format!(
                "zero-copy: not measured here: {why}. The points with --bind zerocopy are left \
                 out; run them on NICs that have it (--iface A,B), or see the zero-copy check \
                 of the VM guest (tests/vm/run.sh), where it is a functional check, not a \
                 performance figure."
            ));
            points.retain(|p| p.bind != "zerocopy");
        }
    }
    if let Some(n) = a.points {
        points.truncate(n);
    }
    let mut meta = before.with_network(&net, offload_state(&net).ok());
    let total = points.len() * a.repeat as usize * PAIRS.len();
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed}] {msg}")
            .context("progress bar template")?,
    );
    let table = Table::new(&points);
    let mut samples: Vec<Sample> = Vec::new();
    // (What a new namespace starts with: the host's default.)
    let host_cc = net
        .a
        .ns
        .exec(&["sysctl", "-n", "net.ipv4.tcp_congestion_control"])
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .context("reading net.ipv4.tcp_congestion_control")?;
    for line in conditions(&points, Some(&host_cc)) {
        bar.suspend(|| out.line(&line));
    }
    meta.host_cc = Some(host_cc);
    bar.suspend(|| out.line(&table.header()));
    let wmem = net
        .a
        .ns
        .exec(&["sysctl", "-n", "net.ipv4.tcp_wmem"])
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .context("reading net.ipv4.tcp_wmem")?;
    let mut sndbuf_now = "auto".to_owned();
    let mut txqueue_now = "none".to_owned();
    // A run that fails, or Ctrl-C, ends the sweep; what was measured until
    // then is kept: printed, recorded and plotted.
    let mut failure: Option<anyhow::Error> = None;
    for p in &points {
        let label = p.label();
        let mut point: Vec<Sample> = Vec::new();
        let ran = (|| -> anyhow::Result<()> {
            if net.config.mtu != p.mtu {
                net.set_mtu(p.mtu)
                    .with_context(|| format!("setting MTU {}", p.mtu))?;
                net.wait_carrier(Duration::from_secs(10), "the MTU change")?;
            }
            if nic_rings {
                net.set_ring(p.ring)
                    .with_context(|| format!("setting the NICs' rings to {}", p.ring))?;
                net.wait_carrier(Duration::from_secs(10), "ethtool -G")?;
            }
            if p.kernel_txqueue != txqueue_now {
                net.set_txqueue(p.kernel_txqueue.parse().ok())
                    .with_context(|| {
                        format!("setting the kernel's TX queue to {}", p.kernel_txqueue)
                    })?;
                txqueue_now = p.kernel_txqueue.clone();
            }
            if p.sndbuf != sndbuf_now {
                let value = match p.sndbuf.as_str() {
                    "auto" => wmem.clone(),
                    size => {
                        let n = crate::args::parse_size(size).map_err(anyhow::Error::msg)?;
                        format!("4096 {n} {n}")
                    }
                };
                for side in [&net.a, &net.b] {
                    sysctl(&side.ns, "net.ipv4.tcp_wmem", &value)?;
                }
                sndbuf_now = p.sndbuf.clone();
            }
            bar.set_message(format!("{label}: idle RTT"));
            let ping = ping_rtt_us(&net).with_context(|| {
                // (On interfaces of the user's, the likeliest cause.)
                let hint = match &a.iface {
                    Some((x, y)) => format!(
                        " (are {x} and {y} connected: a cable between the two ports, or the \
                         two ends of one veth pair?)"
                    ),
                    None => String::new(),
                };
                format!("{label}: idle RTT{hint}")
            })?;
            for rep in 0..a.repeat {
                let mut kernel_gbps = None;
                for pair in PAIRS {
                    if interrupted.load(Ordering::Relaxed) {
                        bail!("interrupted");
                    }
                    // Offloads on for the kernel pair only where asked; an xtcp
                    // end needs them off.
                    let offloads = pair == PAIRS[0] && p.kernel_offloads == "on";
                    if net.config.offloads != offloads {
                        net.set_offloads(offloads)
                            .context("switching the veth's offloads")?;
                    }
                    bar.set_message(format!("{label}: {pair} (run {}/{})", rep + 1, a.repeat));
                    let v = match run_pair(&net, pair, a, p) {
                        // Ctrl-C reached iperf3 too: say why the run failed.
                        Err(_) if interrupted.load(Ordering::Relaxed) => bail!("interrupted"),
                        r => r.with_context(|| format!("{label}, {pair}"))?,
                    };
                    let mut s = sample(&v, pair, p);
                    s.repeat = rep;
                    s.ping_rtt_us = Some(ping);
                    s.offloads = Some(offload_state(&net)?);
                    s.qdisc = net
                        .a
                        .ns
                        .exec(&["tc", "qdisc", "show", "dev", &net.a.iface])
                        .ok()
                        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
                    if pair == PAIRS[0] {
                        kernel_gbps = Some(s.gbps);
                    } else if let Some(k) = kernel_gbps.filter(|k| *k > 0.0) {
                        s.ratio = Some(s.gbps / k);
                    }
                    bar.inc(1);
                    if bar.is_hidden() {
                        eprintln!(
                            "[{}/{total}] {label} {pair}: {:.2} Gbit/s, RTT {} µs",
                            bar.position(),
                            s.gbps,
                            or_dash(s.rtt_us, 0)
                        );
                    }
                    point.push(s);
                }
            }
            Ok(())
        })();
        for line in table.rows(&point) {
            bar.suspend(|| out.line(&line));
        }
        samples.extend(point);
        if let Err(e) = ran {
            failure = Some(e);
            break;
        }
        if out.closed() && a.json.is_none() && a.plot.is_none() {
            failure = Some(anyhow::anyhow!(
                "standard output was closed, and no --json or --plot holds the results"
            ));
            break;
        }
    }
    bar.finish_and_clear();
    drop(net);
    meta.finish();
    let stopped = interrupted.load(Ordering::Relaxed);
    meta.incomplete = failure.as_ref().map(|e| {
        if stopped {
            "interrupted".to_owned()
        } else {
            format!("{e:#}")
        }
    });
    let runs = samples.len();
    let rec = record::Record {
        meta: Some(meta),
        samples,
    };
    if runs > 0 {
        for line in Table::legend(most_repeats(&rec.samples)) {
            out.line(&line);
        }
    }
    if let Some(note) = load_note(&rec.samples) {
        out.line(&note);
    }
    if let (Some(preset), None) = (a.preset, &failure) {
        for line in preset::compare(preset, &rec.samples) {
            out.line(&line);
        }
    }
    // Both written, whichever fails; where nothing was measured, neither:
    // a record or plot of an earlier run there stays as it was.
    let json = a.json.as_ref().filter(|_| runs > 0).map(|p| rec.write(p));
    let plot = a
        .plot
        .as_ref()
        .filter(|_| runs > 0)
        .map(|p| record::replace("--plot", p, plot::plot(a.preset, &rec.samples).as_bytes()));
    json.transpose()?;
    plot.transpose()?;
    if runs > 0 {
        for (flag, p) in [("--json", &a.json), ("--plot", &a.plot)] {
            if let Some(p) = p {
                let replaced = if existed.contains(p) {
                    " (it replaced the file that was there)"
                } else {
                    ""
                };
                eprintln!("xtcp bench: {flag} written to {}{replaced}", p.display());
            }
        }
    }
    if let Some(e) = failure {
        let outputs: Vec<String> = [&a.json, &a.plot]
            .into_iter()
            .flatten()
            .map(|p| p.display().to_string())
            .collect();
        let kept = match (&a.json, runs) {
            (_, 0) if outputs.is_empty() => String::new(),
            (_, 0) => format!("; {} left as they were", outputs.join(" and ")),
            (Some(p), _) if out.closed() => format!("; {} holds them", p.display()),
            (Some(p), _) => format!("; the table and {} hold them", p.display()),
            (None, _) if out.closed() => String::new(),
            (None, _) => "; the table holds them".to_owned(),
        };
        if stopped {
            // As a process ended by SIGINT: 128 + 2, once everything set up
            // is gone (the network: dropped above) and the results are out.
            eprintln!("xtcp bench: interrupted after {runs} of {total} runs{kept}");
            std::process::exit(130);
        }
        return Err(e.context(format!(
            "the sweep stopped after {runs} of {total} runs{kept}"
        )));
    }
    if out.closed() {
        let held: Vec<String> = [&a.json, &a.plot]
            .into_iter()
            .flatten()
            .map(|p| p.display().to_string())
            .collect();
        eprintln!(
            "xtcp bench: standard output was closed before the table's end; the sweep ran to \
             its end, its results in {}",
            held.join(" and ")
        );
    }
    Ok(())
}

/// Other processes' CPU (percent of one core) or steal time during a run
/// from which bench says that the host was not quiet.
const LOAD_NOTE_PCT: f64 = 10.0;

/// What bench says after the table where other processes or the
/// hypervisor took CPU time during the runs: the most of each, and where.
fn load_note(samples: &[Sample]) -> Option<String> {
    let most = |f: &dyn Fn(&Sample) -> Option<f64>| {
        samples
            .iter()
            .filter_map(|s| Some((f(s)?, s)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .filter(|(v, _)| *v >= LOAD_NOTE_PCT)
    };
    let other = most(&|s| s.other_cpu_pct);
    let steal = most(&|s| s.steal_pct);
    if other.is_none() && steal.is_none() {
        return None;
    }
    let at = |s: &Sample| format!("{}, {}", s.pair, s.point.label());
    let mut parts = Vec::new();
    if let Some((v, s)) = other {
        let busiest = s.other_busiest.as_ref().map_or(String::new(), |b| {
            format!(
                "; the busiest, {} (pid {}), {:.0} %",
                b.comm, b.pid, b.cpu_pct
            )
        });
        parts.push(format!(
            "other processes used up to {v:.0} % of a core ({}{busiest})",
            at(s)
        ));
    }
    if let Some((v, s)) = steal {
        parts.push(format!(
            "the hypervisor took up to {v:.0} % of a core from this VM (steal; {})",
            at(s)
        ));
    }
    Some(format!(
        "The host was not quiet: {}. On a host with few cores that takes time from the \
         pairs' ends, and ratios of runs under different loads mislead; --json has each \
         run's other_cpu_pct and steal_pct.",
        parts.join("; ")
    ))
}

/// The flag SIGINT, SIGTERM and SIGHUP set, which ends the sweep. Unlike
/// `send`'s, a second signal does not end the process at once, nor does a
/// closed terminal (SIGHUP): whatever comes, bench removes what it set up
/// (its namespaces, or puts adopted interfaces back) before it exits.
fn interrupt_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, flag.clone())
            .context("installing the SIGINT/SIGTERM/SIGHUP handler")?;
    }
    Ok(flag)
}

/// `--from FILE`: the table (and the preset's comparison, the plot) of a
/// record, run nothing.
/// With `--from`, what would shape a sweep does nothing: said, not
/// ignored (--preset, --iface and --json clap refuses).
fn check_from_args(a: &BenchArgs) -> anyhow::Result<()> {
    let given: Vec<&str> = axes(a)
        .into_iter()
        .chain([("--points", a.points.is_some())])
        .filter_map(|(flag, set)| set.then_some(flag))
        .collect();
    if !given.is_empty() {
        bail!(
            "--from prints a record and runs nothing: {} would not apply (drop {}; --plot \
             draws the record)",
            given.join(", "),
            if given.len() == 1 { "it" } else { "them" }
        );
    }
    Ok(())
}

/// What every end ran with where the table shows no column for it (a
/// dimension at its default for every point), said before the table: by a
/// sweep, and from its record by `--from`. `host_cc`: the host's default
/// congestion control, where known.
fn conditions(points: &[Point], host_cc: Option<&str>) -> Vec<String> {
    let mut v = Vec::new();
    if points.iter().all(|p| p.kernel_offloads == "off") {
        v.push(
            "The pair of two kernel ends runs with TSO, GSO, GRO and checksum offloads off, as \
             the pairs with an xtcp end (whose XDP program sees MTU-sized packets); \
             --kernel-offloads on,off adds the kernel at its fastest."
                .to_owned(),
        );
    }
    if points.iter().any(|p| p.cc == "unset") {
        v.push(
            "cc unset: bench of that version left the kernel's ends at the host's default \
             congestion control (xtcp's ran cubic)."
                .to_owned(),
        );
    } else {
        let mut ccs: Vec<&str> = Vec::new();
        for p in points {
            if !ccs.contains(&p.cc.as_str()) {
                ccs.push(&p.cc);
            }
        }
        let host = host_cc.map_or_else(String::new, |c| format!("; this host's default is {c}"));
        v.push(format!(
            "Every end runs {} (iperf3's -C on every client, which the server takes too; xtcp's \
             --cc{host}).",
            ccs.join(", then ")
        ));
    }
    if points.iter().all(|p| p.kernel_zerocopy == "off") {
        v.push(
            "The kernel's clients copy every byte they send from iperf3's buffer (iperf3 without \
             -Z), xtcp's send from frames filled once (-Z); --kernel-zerocopy on,off adds the \
             kernel's sendfile."
                .to_owned(),
        );
    }
    v
}

/// `--from`: a record's table (its arguments checked: [`check_from_args`]).
fn replay(a: &BenchArgs, from: &std::path::Path) -> anyhow::Result<()> {
    let rec = record::Record::read(from)?;
    let mut out = Output::open(None, Style::default())?;
    let preset = rec
        .meta
        .as_ref()
        .and_then(|m| m.preset.as_deref())
        .and_then(|p| <Preset as clap::ValueEnum>::from_str(p, false).ok());
    if let Some(m) = &rec.meta {
        out.line(&format!(
            "{}: xtcp {} ({}), kernel {}, {} × {}, {}: {}",
            from.display(),
            m.xtcp_version,
            m.git_commit.as_deref().unwrap_or("commit unknown"),
            m.kernel,
            m.cpus,
            m.cpu_model,
            m.date,
            m.command_line.join(" ")
        ));
        if let Some(why) = &m.incomplete {
            out.line(&format!(
                "{}: incomplete ({why}): the samples are the runs that completed",
                from.display()
            ));
        }
    } else {
        out.line(&format!(
            "{}: a bare list of samples (no meta: what ran where is not known); an axis a \
             sample does not have shows at its default",
            from.display()
        ));
    }
    let pts: Vec<Point> = rec.samples.iter().map(|s| s.point.clone()).collect();
    if pts.is_empty() {
        bail!("{}: no samples", from.display());
    }
    let host_cc = rec.meta.as_ref().and_then(|m| m.host_cc.as_deref());
    for line in conditions(&pts, host_cc) {
        out.line(&line);
    }
    let table = Table::new(&pts);
    out.line(&table.header());
    for line in table.rows(&rec.samples) {
        out.line(&line);
    }
    for line in Table::legend(most_repeats(&rec.samples)) {
        out.line(&line);
    }
    if let Some(note) = load_note(&rec.samples) {
        out.line(&note);
    }
    if let Some(preset) = preset {
        for line in preset::compare(preset, &rec.samples) {
            out.line(&line);
        }
    }
    if let Some(p) = &a.plot {
        std::fs::write(p, plot::plot(preset, &rec.samples))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_sweep_values_are_named() {
        #[derive(clap::Parser)]
        struct W {
            #[command(flatten)]
            a: BenchArgs,
        }
        use clap::Parser;
        let err = |args: &[&str]| {
            let w =
                W::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).unwrap();
            check_args(&w.a, &sweep(&w.a)).unwrap_err().to_string()
        };
        assert!(
            err(&["--tx-layout", "chained,twisted"])
                .contains("--tx-layout takes auto, chained, single, not `twisted`"),
            "{}",
            err(&["--tx-layout", "twisted"])
        );
        assert!(err(&["--mss-clip", "maybe"]).contains("--mss-clip takes on, off, not `maybe`"));
        let ok = W::try_parse_from(["bench", "--tx-layout", "single,auto"]).unwrap();
        assert!(check_args(&ok.a, &sweep(&ok.a)).is_ok());
        assert!(err(&["--kernel-txqueue", "lots"]).contains("--kernel-txqueue takes none, ring"));
        assert!(err(&["--sndbuf", "1K"]).contains("--sndbuf 1K: takes auto, rcvbuf or a size"));
        assert!(err(&["--streams", "0"]).contains("-P (--parallel) takes 1..=128"));
        assert!(err(&["--bind", "magic"]).contains("--bind takes copy, zerocopy"));
    }

    #[test]
    fn a_point_is_named_by_its_mtu_and_what_is_not_default() {
        let p = Point {
            rcvbuf: "8K".into(),
            streams: 32,
            ..Point::default()
        };
        assert_eq!(p.label(), "MTU=1500 rcvbuf=8K P=32");
    }

    /// The point's receive buffer reaches every pair's receiver: each
    /// client, xtcp's too, passes it as iperf3's -w (a kernel server takes
    /// it from there); `auto` passes nothing.
    #[test]
    fn every_client_passes_the_receive_buffer() {
        let a = BenchArgs::default();
        let p = Point {
            rcvbuf: "8K".into(),
            ..Point::default()
        };
        for kernel in [true, false] {
            let v = client_args(&a, &p, kernel);
            assert!(v.windows(2).any(|w| w == ["-w", "8K"]), "{v:?}");
            let v = client_args(&a, &Point::default(), kernel);
            assert!(!v.iter().any(|x| x == "-w"), "{v:?}");
        }
    }

    #[test]
    fn ping_average_in_microseconds() {
        let out = "--- 198.18.0.2 ping statistics ---\n\
                   5 packets transmitted, 5 received, 0% packet loss, time 816ms\n\
                   rtt min/avg/max/mdev = 0.031/0.045/0.060/0.010 ms\n";
        assert_eq!(parse_ping_avg_us(out), Some(45.0));
        assert_eq!(parse_ping_avg_us("100% packet loss"), None);
    }

    #[test]
    fn sender_rtts_come_from_the_interval_readings_averaged_over_streams() {
        let iv = |a: f64, b: f64| {
            serde_json::json!({ "streams": [
                { "socket": 5, "sender": true, "omitted": false, "rtt": a },
                { "socket": 7, "sender": true, "omitted": false, "rtt": b },
            ] })
        };
        // An omitted interval is left out.
        let mut ivs = vec![serde_json::json!({ "streams": [
            { "socket": 5, "sender": true, "omitted": true, "rtt": 1.0 },
            { "socket": 7, "sender": true, "omitted": true, "rtt": 1.0 },
        ] })];
        ivs.extend([iv(100.0, 300.0), iv(60.0, 80.0), iv(140.0, 520.0)]);
        let v = serde_json::json!({ "intervals": ivs });
        // Least: (60 + 80) / 2; means: 100 and 300, their mean 200.
        assert_eq!(sender_rtts_us(&v), Some((70.0, 200.0)));
        // Fewer than three readings: nothing to say about queueing.
        let v = serde_json::json!({ "intervals": [iv(100.0, 300.0), iv(60.0, 80.0)] });
        assert_eq!(sender_rtts_us(&v), None);
        // A receiver's streams have none.
        let v = serde_json::json!({ "intervals": [{ "streams": [
            { "socket": 5, "sender": false, "rtt": 5.0 }] }] });
        assert_eq!(sender_rtts_us(&v), None);
    }

    #[test]
    fn queueing_delay_is_mean_less_minimum_and_never_negative() {
        assert_eq!(queue_delay_us(Some(150.0), Some(50.0)), Some(100.0));
        assert_eq!(queue_delay_us(Some(50.0), Some(50.0)), Some(0.0));
        assert_eq!(queue_delay_us(Some(40.0), Some(50.0)), None);
        assert_eq!(queue_delay_us(None, Some(50.0)), None);
        assert_eq!(queue_delay_us(Some(40.0), None), None);
    }

    #[test]
    fn the_load_note_names_the_most_of_each_and_where() {
        let mut quiet = sample_at(512, 1500, "kernel → kernel", None);
        quiet.other_cpu_pct = Some(3.0);
        quiet.steal_pct = Some(0.5);
        // Nothing to say of a quiet host, nor of a record without loads.
        assert_eq!(load_note(std::slice::from_ref(&quiet)), None);
        assert_eq!(
            load_note(&[sample_at(512, 1500, "xtcp → kernel", None)]),
            None
        );
        let mut busy = sample_at(512, 9000, "xtcp → kernel", None);
        busy.other_cpu_pct = Some(64.6);
        busy.other_busiest = Some(load::Busiest {
            comm: "python3".into(),
            pid: 77,
            cpu_pct: 61.2,
        });
        busy.steal_pct = Some(2.0);
        let note = load_note(&[quiet.clone(), busy]).unwrap();
        assert!(
            note.starts_with(
                "The host was not quiet: other processes used up to 65 % of a core (xtcp → \
                 kernel, MTU=9000 ring=512; the busiest, python3 (pid 77), 61 %)."
            ),
            "{note}"
        );
        assert!(!note.contains("hypervisor"), "{note}");
        quiet.steal_pct = Some(12.0);
        let note = load_note(&[quiet]).unwrap();
        assert!(
            note.contains("the hypervisor took up to 12 % of a core from this VM (steal; kernel → kernel, MTU=1500 ring=512)"),
            "{note}"
        );
        assert!(!note.contains("other processes"), "{note}");
    }

    fn sample_at(ring: u32, mtu: u32, pair: &'static str, rtt: Option<f64>) -> Sample {
        Sample {
            point: Point {
                mtu,
                ring,
                ..Point::default()
            },
            pair: pair.into(),
            gbps: 10.0,
            cpu_sender: 50.0,
            cpu_receiver: 50.0,
            cpu_s_per_gib: Some(0.1),
            ping_rtt_us: Some(40.0),
            min_rtt_us: rtt.map(|r| r / 2.0),
            rtt_us: rtt,
            queue_delay_us: rtt.map(|r| r / 2.0),
            ..Sample::default()
        }
    }

    #[test]
    fn drop_share_is_the_receiving_xtcp_ends() {
        let x = |pct: f64| serde_json::json!({ "drop_percent": pct });
        let mut s = sample_at(2048, 1500, PAIRS[3], None);
        s.xdp_client = Some(x(0.5));
        s.xdp_server = Some(x(2.0));
        assert_eq!(
            s.with_drop_pct().drop_pct,
            Some(2.0),
            "xtcp → xtcp: the server's"
        );
        let mut s = sample_at(2048, 1500, PAIRS[1], None);
        s.xdp_client = Some(x(0.5));
        assert_eq!(
            s.with_drop_pct().drop_pct,
            Some(0.5),
            "xtcp → kernel: the client's"
        );
        let s = sample_at(2048, 1500, PAIRS[0], None);
        assert_eq!(s.with_drop_pct().drop_pct, None, "kernel → kernel: none");
        let out =
            "{\"start\": {}, \"end\": {},\n  \"xtcp_serve\": {\"xdp\": {\"steered\": 5}}\n}\n";
        assert_eq!(
            serve_close(out),
            Some(serde_json::json!({ "xdp": { "steered": 5 } }))
        );
        assert_eq!(serve_close("{\"start\": {}}"), None);
    }

    #[test]
    fn plot_uses_the_one_varying_parameter_or_point_labels() {
        let one: Vec<Sample> = [256, 2048]
            .iter()
            .flat_map(|&r| PAIRS.map(|p| sample_at(r, 9000, p, None)))
            .collect();
        let svg = plot::plot(None, &one);
        assert!(svg.contains("Gbit/s by ring (median)"), "{svg}");
        assert!(!svg.contains("RTT"), "no RTT panel without RTTs");
        let two: Vec<Sample> = [(256, 1500), (2048, 9000)]
            .iter()
            .flat_map(|&(r, m)| PAIRS.map(|p| sample_at(r, m, p, Some(90.0))))
            .collect();
        let svg = plot::plot(None, &two);
        assert!(svg.contains("by point (MTU/ring)"), "{svg}");
        assert!(svg.contains(">9000/2048<"), "{svg}");
        assert!(svg.contains("RTT under load"), "{svg}");
    }
}
