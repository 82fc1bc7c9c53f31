//! What xtcp's commands share on the command line, in one place: the
//! engine's options ([`EngineArgs`], flattened into `send`, `recv`, `serve`
//! and `client`), the value types and parsers that `xsk-bench` and `bench`
//! use too (sizes, ring sizes, frame sizes, wakeup strategies, core
//! lists), and the interface a command runs on when `--iface` is left out
//! (found over rtnetlink: the route to the peer, or the interface that
//! holds the bind address).
//!
//! One vocabulary: a flag means the same everywhere (`-c HOST -p PORT`,
//! `-B ADDR`, `-P N`, `-n BYTES`, `-t SECS`, `-i SECS`, `-J`, `--iface`,
//! `--cores`, `--ring`, `--wakeup spin|poll|…`). Spellings that an earlier
//! release used are hidden aliases for one release: they parse to the same
//! values and are not shown in `--help`.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::ValueEnum;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use xtcp_engine::frame::FrameSize;
use xtcp_engine::netlink::NetlinkSocket;
use xtcp_engine::netlink::addr::{Holder, IfaceAddrs, iface_holding, route_iface, serving_ifaces};
use xtcp_engine::tcp::{CongestionAlgorithm, RecvWindow};
use xtcp_engine::worker::{
    EngineConfig, FrameSizePolicy, ListenOn, RxCsumPolicy, TxLayoutPolicy, WaitStrategy,
};
use xtcp_engine::xdp::AttachMode;
use xtcp_engine::xsk::BindMode;

/// `-i`: seconds between interval lines, 0 (none but the whole test's)
/// or 0.1 to 60, as iperf3 takes them (it refuses others with this
/// message).
pub fn parse_interval(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if v == 0.0 || (0.1..=60.0).contains(&v) {
        Ok(v)
    } else {
        Err("invalid report interval (min = 0.1, max = 60 seconds)".into())
    }
}

/// `-t`: whole seconds, at most a day (iperf3's limit; 0: until
/// interrupted). A fraction is refused, not cut as iperf3's `atoi` cuts it.
pub fn parse_test_secs(s: &str) -> Result<u32, String> {
    let t = s.trim();
    match t.parse::<u32>() {
        Ok(v) if v <= 86_400 => Ok(v),
        Ok(_) => Err("test duration too long (maximum = 86400 seconds)".into()),
        Err(_) if t.parse::<f64>().is_ok_and(|f| f.is_finite() && f >= 0.0) => {
            Err(format!("`{s}`: give whole seconds"))
        }
        Err(_) => Err(format!("`{s}` is not a number of seconds")),
    }
}

/// `-O`: whole seconds, at most 60 (iperf3's limit).
pub fn parse_omit_secs(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(v) if v <= 60 => Ok(v),
        _ => Err(format!(
            "`{s}`: bogus value for --omit (whole seconds, 0 to 60)"
        )),
    }
}

/// `--grace`: seconds from 0 to an hour (NaN, infinities and negative
/// numbers refused, not clamped).
pub fn parse_grace(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}`: give seconds from 0 to 3600")),
    }
}

/// `--queues`: at least one (a worker each).
fn parse_queues(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("give 1 or more queues (a worker each)".into()),
    }
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
    let not_a_size = || format!("`{s}` is not a size like 65536, 64K, 1.5M or 1G");
    if num.contains('.') {
        // A fraction of a unit, as iperf3 takes it: whole bytes, rounded
        // down.
        let f: f64 = num.parse().map_err(|_| not_a_size())?;
        let bytes = (f * mul as f64).floor();
        if !bytes.is_finite() || bytes < 0.0 {
            return Err(not_a_size());
        }
        if bytes >= u64::MAX as f64 {
            return Err(format!("`{s}` is too large"));
        }
        return Ok(bytes as u64);
    }
    let v: u64 = num.parse().map_err(|_| not_a_size())?;
    v.checked_mul(mul)
        .ok_or_else(|| format!("`{s}` is too large"))
}

/// The RX/TX ring sizes every command takes (`--ring`): what the engine
/// accepts (`EngineConfig::validate`), and so what `xsk-bench` and `bench`
/// take too.
pub const RING_RANGE: std::ops::RangeInclusive<u32> = 64..=16384;

/// `--ring`: a power of two in [`RING_RANGE`].
pub fn parse_ring(s: &str) -> Result<u32, String> {
    let range = || {
        format!(
            "a power of two in {}..={}",
            RING_RANGE.start(),
            RING_RANGE.end()
        )
    };
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a ring size: give {}", range()))?;
    if !n.is_power_of_two() || !RING_RANGE.contains(&n) {
        return Err(format!("{n} is not {}", range()));
    }
    Ok(n)
}

/// The engines' `--frame-size`: `auto`, 2048 or 4096.
pub fn parse_frame_size_policy(s: &str) -> Result<FrameSizePolicy, String> {
    if s == "auto" {
        return Ok(FrameSizePolicy::Auto);
    }
    parse_frame_size(s)
        .map(FrameSizePolicy::Fixed)
        .map_err(|_| format!("frame size must be auto, 2048 or 4096, not `{s}`"))
}

/// `--frame-size`: 2048 or 4096.
pub fn parse_frame_size(s: &str) -> Result<FrameSize, String> {
    s.parse::<usize>()
        .ok()
        .and_then(FrameSize::from_bytes)
        .ok_or_else(|| format!("frame size must be 2048 or 4096, not `{s}`"))
}

/// `--rcvbuf`, `--sndbuf`: auto-tuned or fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufSize {
    /// Auto-tuned up to the default buffer (4M).
    Auto,
    /// Fixed, bytes.
    Fixed(u64),
}

/// `--rcvbuf`, `--sndbuf`: `auto` or a size.
pub fn parse_bufsize(s: &str) -> Result<BufSize, String> {
    if s == "auto" {
        Ok(BufSize::Auto)
    } else {
        parse_size(s).map(BufSize::Fixed)
    }
}

/// `--cores`: a list of core numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreList(pub Vec<usize>);

/// `--cores`: `0,1`.
pub fn parse_cores(s: &str) -> Result<CoreList, String> {
    s.split(',')
        .map(|c| {
            c.trim()
                .parse()
                .map_err(|_| format!("`{s}` is not a list of core numbers like 0,1"))
        })
        .collect::<Result<Vec<usize>, String>>()
        .map(CoreList)
}

/// `--xdp-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum XdpModeArg {
    /// Driver mode; fail if the driver has no native XDP.
    Native,
    /// SKB mode: works everywhere, slower; it sees packets after GRO (and
    /// on veth as the peer's TSO/GSO made them), so turn those off or the
    /// larger packets are dropped at the socket.
    Generic,
    /// Native, falling back to generic with a notice.
    Auto,
}

impl XdpModeArg {
    /// The engine's attach mode.
    pub fn mode(self) -> AttachMode {
        match self {
            XdpModeArg::Native => AttachMode::Native,
            XdpModeArg::Generic => AttachMode::Generic,
            XdpModeArg::Auto => AttachMode::Auto,
        }
    }
}

/// `--bind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BindArg {
    /// Copy mode.
    Copy,
    /// Zero-copy; fail if the driver has none.
    Zerocopy,
    /// Zero-copy when available, else copy (with a notice); copy for sending
    /// where the driver has a known zero-copy TX defect (`xtcp probe`).
    Auto,
}

impl BindArg {
    /// The AF_XDP bind mode.
    pub fn mode(self) -> BindMode {
        match self {
            BindArg::Copy => BindMode::Copy,
            BindArg::Zerocopy => BindMode::ZeroCopy,
            BindArg::Auto => BindMode::Auto,
        }
    }
}

/// `--wakeup`: how a loop waits for work. One set of names for every
/// command; each command takes the ones it has ([`engine_wakeup`],
/// [`xsk_wakeup`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wakeup {
    /// Spin, never sleep; a syscall only when the kernel asks for one
    /// (`XDP_USE_NEED_WAKEUP`).
    Spin,
    /// Sleep in `poll()` when there is nothing to do.
    Poll,
    /// Spin for a while after the last work, then sleep in `poll()`
    /// (the engine's).
    Adaptive,
    /// Spin, and kick TX after every batch without `XDP_USE_NEED_WAKEUP`
    /// (`xsk-bench`'s, like `xdpsock -m`).
    Kick,
}

/// One `--wakeup` value: its name, what it means, and whether it is an
/// earlier release's spelling (hidden).
type WakeupName = (&'static str, Wakeup, &'static str, bool);

/// The engine's `--wakeup` values (`send`, `recv`, `serve`, `client`);
/// `busy` and `need-wakeup` are the earlier names of `spin` and `poll`.
const ENGINE_WAKEUP: [WakeupName; 5] = [
    (
        "spin",
        Wakeup::Spin,
        "Spin: lowest latency, one core at 100 % whatever the load",
        false,
    ),
    (
        "poll",
        Wakeup::Poll,
        "Sleep in poll() as soon as a turn finds nothing to do (least CPU)",
        false,
    ),
    (
        "adaptive",
        Wakeup::Adaptive,
        "Spin for a while after the last work, then sleep in poll()",
        false,
    ),
    ("busy", Wakeup::Spin, "", true),
    ("need-wakeup", Wakeup::Poll, "", true),
];

/// `xsk-bench`'s `--wakeup` values; `need` and `busy` are the earlier
/// names of `spin` and `kick`.
const XSK_WAKEUP: [WakeupName; 5] = [
    (
        "spin",
        Wakeup::Spin,
        "Spin; a syscall only when the kernel asks for one (XDP_USE_NEED_WAKEUP)",
        false,
    ),
    ("poll", Wakeup::Poll, "poll() before each batch", false),
    (
        "kick",
        Wakeup::Kick,
        "Spin; kick TX after every batch, without XDP_USE_NEED_WAKEUP (like xdpsock -m)",
        false,
    ),
    ("need", Wakeup::Spin, "", true),
    ("busy", Wakeup::Kick, "", true),
];

fn wakeup_parser(names: &'static [WakeupName]) -> impl TypedValueParser<Value = Wakeup> {
    PossibleValuesParser::new(
        names
            .iter()
            .map(|&(n, _, help, hidden)| PossibleValue::new(n).help(help).hide(hidden)),
    )
    .map(move |s: String| {
        names
            .iter()
            .find(|(n, ..)| *n == s)
            .map_or(Wakeup::Spin, |&(_, w, ..)| w)
    })
}

/// The parser of the engine's `--wakeup` (spin, poll, adaptive).
pub fn engine_wakeup() -> impl TypedValueParser<Value = Wakeup> {
    wakeup_parser(&ENGINE_WAKEUP)
}

/// The parser of `xsk-bench`'s `--wakeup` (spin, poll, kick).
pub fn xsk_wakeup() -> impl TypedValueParser<Value = Wakeup> {
    wakeup_parser(&XSK_WAKEUP)
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

/// `--tx-layout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TxLayoutArg {
    /// By device and MTU (see `--tx-layout`).
    Auto,
    /// A header frame, then the payload's frames (multi-buffer).
    Chained,
    /// One descriptor per segment, headers in the frame's headroom.
    Single,
}

/// A listener's `-4` / `-6` (serve, recv), as `iperf3 -s` takes them.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct ListenFamily {
    /// Only IPv4: without -B, the interface's IPv4 addresses only.
    #[arg(short = '4', long = "version4", conflicts_with = "version6")]
    pub version4: bool,
    /// Only IPv6: without -B, the interface's IPv6 addresses only (but
    /// link-local ones).
    #[arg(short = '6', long = "version6")]
    pub version6: bool,
}

impl ListenFamily {
    /// The addresses to listen on: `-B`'s (of the family asked for, if
    /// one is), or the interface's of that family (of both by default). The
    /// unspecified address is every address, as for a socket bound to it:
    /// `-B 0.0.0.0` the interface's IPv4 ones, `-B ::` all of them (both
    /// families, as iperf3's dual-stack socket), or its IPv6 ones with -6.
    pub fn on(self, addr: Option<IpAddr>) -> anyhow::Result<ListenOn> {
        let (flag, want) = match (self.version4, self.version6) {
            (true, _) => ("-4", Some(false)),
            (_, true) => ("-6", Some(true)),
            _ => ("", None),
        };
        let family = |v6: bool| if v6 { "IPv6" } else { "IPv4" };
        match (addr, want) {
            (Some(a), Some(v6)) if a.is_ipv6() != v6 => bail!(
                "{flag}: -B {a} is an {} address; give an {} address or drop {flag}",
                family(a.is_ipv6()),
                family(v6)
            ),
            (Some(IpAddr::V6(a)), _) if a.is_unicast_link_local() => bail!(
                "-B {a}: a link-local address, which xtcp does not serve (an interface's IPv4 \
                 addresses and IPv6 ones but link-local): give one of those, or leave -B out"
            ),
            (Some(a), want) if a.is_unspecified() => Ok(match (a.is_ipv6(), want) {
                (false, _) => ListenOn::EveryV4,
                (true, Some(true)) => ListenOn::EveryV6,
                (true, _) => ListenOn::Every,
            }),
            (Some(a), _) => Ok(ListenOn::Addr(a)),
            (None, Some(false)) => Ok(ListenOn::EveryV4),
            (None, Some(true)) => Ok(ListenOn::EveryV6),
            (None, None) => Ok(ListenOn::Every),
        }
    }
}

/// iperf3's `-B ADDR[%DEV]` (and `-c HOST[%DEV]`): an address, and after
/// `%` the interface, iperf3's shorthand for `--bind-dev`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrDev {
    pub ip: IpAddr,
    pub dev: Option<String>,
}

/// An IP address as given; an IPv4-mapped IPv6 one (`::ffff:192.0.2.1`)
/// is the IPv4 address it maps, as iperf3 takes it.
pub fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.trim_matches(['[', ']'])
        .parse::<IpAddr>()
        .map(|ip| ip.to_canonical())
        .map_err(|_| format!("`{s}` is not an IP address"))
}

/// `ADDR[%DEV]`.
pub fn parse_addr_dev(s: &str) -> Result<AddrDev, String> {
    let (addr, dev) = split_dev(s);
    let ip = parse_ip(addr)
        .map_err(|_| format!("`{addr}` is not an IP address (give ADDR or ADDR%DEV)"))?;
    Ok(AddrDev {
        ip,
        dev: dev.map(str::to_owned),
    })
}

/// A peer at an IPv6 link-local address (fe80::/10) is refused, saying
/// why: xtcp finds its path by the kernel's routes, and a link-local
/// address has none without the interface it is scoped to, which the
/// engine does not carry.
pub fn refuse_link_local(flag: &str, given: &str, ip: IpAddr) -> anyhow::Result<()> {
    if let IpAddr::V6(v6) = ip
        && v6.is_unicast_link_local()
    {
        bail!(
            "{flag} {given}: a link-local peer (fe80::/10) is not one xtcp reaches: it finds \
             the path by the kernel's routes, which need a link-local address's interface \
             scope, and xtcp does not carry one (`%IFACE` names the interface to run on, not \
             the scope); give the peer a global or unique-local address (fd00::/8) and use that"
        );
    }
    Ok(())
}

/// `HOST[%DEV]` split at the `%`; a `%` with nothing after it is no
/// interface.
pub fn split_dev(s: &str) -> (&str, Option<&str>) {
    match s.split_once('%') {
        Some((a, d)) if !d.is_empty() => (a, Some(d)),
        Some((a, _)) => (a, None),
        None => (s, None),
    }
}

/// Engine options shared by `send`, `recv`, `serve` and `client`.
#[derive(clap::Args, Debug, Clone)]
pub struct EngineArgs {
    /// Interface to run on (xtcp attaches its XDP program there). Default:
    /// the interface the kernel routes the peer through (client, send), or
    /// the one that holds the -B address (serve, recv), without -B the only
    /// interface up with an address to serve; the one found is named on
    /// standard error.
    #[arg(long, visible_alias = "bind-dev")]
    pub iface: Option<String>,
    /// Queues to serve (0..N), one pinned worker each.
    #[arg(long, default_value_t = 1, value_parser = parse_queues)]
    pub queues: u32,
    /// Cores for the workers, one per queue (default: the cores this
    /// process may run on, so `taskset -c 2,3 xtcp …` uses 2 and 3, those
    /// that no other xtcp worker is pinned to first). A core given here
    /// (or left as the only choice) that another xtcp worker holds is named
    /// on standard error at start: two workers on one core share it.
    #[arg(long, value_parser = parse_cores)]
    pub cores: Option<CoreList>,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: XdpModeArg,
    /// AF_XDP bind mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub bind: BindArg,
    /// How idle workers wait.
    #[arg(long, default_value = "adaptive", value_parser = engine_wakeup())]
    pub wakeup: Wakeup,
    /// UMEM frame size: 2048, 4096, or auto: 2048 where each segment
    /// takes one frame of its own (the single-descriptor layout) and fits
    /// one of 2048 bytes with its headers (MTU up to about 1700), so that
    /// the UMEM and every send buffer hold twice the stream; else 4096.
    #[arg(long, default_value = "auto", value_parser = parse_frame_size_policy)]
    pub frame_size: FrameSizePolicy,
    /// UMEM frames per queue: what the rings hold (fill 2 × ring, RX and
    /// TX one ring each) and the send buffers' frames, at least a ring's
    /// worth: 5 × ring at least [default: 4 × ring, and 32 MiB of frames
    /// for the send buffers: 8192 of 4096 bytes, 16384 of 2048].
    #[arg(long)]
    pub frames: Option<u32>,
    /// RX/TX ring entries, a power of two in 64..=16384 (fill/completion
    /// rings get twice).
    #[arg(long, default_value = "2048", value_parser = parse_ring)]
    pub ring: u32,
    /// RX descriptors per batch (a loop turn takes batches until the RX
    /// ring is empty or a ring's worth was taken).
    #[arg(long, default_value_t = 64)]
    pub batch: u32,
    /// Most TX frames one loop turn queues, for all its connections (a
    /// few bursts per turn, round-robin; one frame per segment at MTU 1500,
    /// payload ÷ frame size at large MTUs). A turn's frames go out before
    /// the ACKs that arrive meanwhile are read: larger values add queueing
    /// delay (RTT), smaller ones cost turns.
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
    /// Back the UMEM with reserved 2 MB hugepages (reserve them first:
    /// `echo N > /proc/sys/vm/nr_hugepages`). Without it the UMEM is
    /// offered to the kernel's transparent huge pages, which it gets where
    /// /sys/kernel/mm/transparent_hugepage/enabled is `always` or
    /// `madvise`; the report says how much of it they back.
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
    #[arg(long, default_value = "auto", value_parser = parse_bufsize)]
    pub rcvbuf: BufSize,
    /// Send buffer per connection: `auto` (starts at 256K and doubles, up
    /// to 4M, while it holds less than twice the path's bandwidth-delay
    /// product, or, tried doubled where the peer acknowledges late, while
    /// that raises the rate) or a fixed size (e.g. 1M). Sizes are bytes
    /// of UMEM frames: in the single-descriptor layout a frame holds one
    /// segment's payload, 1448 bytes of a 2-KiB frame at MTU 1500, so the
    /// buffer holds about 70 % of its size of the stream (35 % with
    /// `--frame-size 4096`).
    #[arg(long, default_value = "auto", value_parser = parse_bufsize)]
    pub sndbuf: BufSize,
    /// Congestion control.
    #[arg(long, value_enum, default_value = "cubic")]
    pub cc: CcArg,
    /// Seconds between FIN and RST when stopping (interrupted, or the
    /// transfer or test over): the wait for the peer's FIN. After a
    /// client's failed test, a connection is reset as soon as the peer
    /// acknowledged its FIN. `send`, its stream and FIN acknowledged,
    /// waits this long for the receiver's FIN, then lets the connection go
    /// (no reset: the stream is whole). 0 to 3600.
    #[arg(long, default_value_t = 2.0, value_parser = parse_grace)]
    pub grace: f64,
    /// Connections each queue's worker holds at most. A connection beyond
    /// it is refused with a reset (counted as `refused`); those held go on
    /// undisturbed. Those in TIME-WAIT do not count: at the limit they end
    /// at once. Frames and the RX ring are shared among the connections
    /// held.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_conns: u32,
    /// Fail a connection whose sent data stays unacknowledged (or whose
    /// peer's window stays shut) for this many milliseconds:
    /// TCP_USER_TIMEOUT, as iperf3's --snd-timeout (0, the default: a limit
    /// of 15 retransmission timeouts in a row instead).
    #[arg(long, value_name = "MS", default_value_t = 0, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i64).range(0..=86_400_000))]
    pub snd_timeout: i64,
    /// Seconds an MTU that a hop on the path reported (ICMP "packet too
    /// big") holds for a connection: then its segments go at the MSS agreed
    /// at the handshake again, and where the path still takes less, the
    /// hop refuses them and says so again (as Linux's route MTU expires,
    /// net.ipv4.route.mtu_expires). 0: never; at most 86400.
    #[arg(long, value_name = "SECS", default_value_t = 600, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i64).range(0..=86_400))]
    pub pmtu_expires: i64,
}

impl EngineArgs {
    /// The engine's configuration for a command that connects to `peer`
    /// (client, send): on `--iface`, or else on the interface the kernel
    /// routes `peer` through (named on standard error).
    pub fn config_to(&self, peer: IpAddr) -> anyhow::Result<EngineConfig> {
        let mut c = self.config()?;
        c.iface = match &self.iface {
            Some(i) => i.clone(),
            None => iface_to(peer)?,
        };
        Ok(c)
    }

    /// The engine's configuration for a command that listens on `on`
    /// (serve, recv): on `--iface`, or else on the interface that holds
    /// the address, or the one that can serve (named on standard error).
    pub fn config_at(&self, on: ListenOn) -> anyhow::Result<EngineConfig> {
        let mut c = self.config()?;
        c.iface = match &self.iface {
            Some(i) => i.clone(),
            None => iface_at(on)?,
        };
        if let ListenOn::Addr(a) = on {
            addr_on_iface(&c.iface, a, false)?;
        }
        Ok(c)
    }

    /// These options with the interface `-c HOST%DEV` and `-B ADDR%DEV`
    /// name (iperf3's `--bind-dev DEV`); two different ones, or `--iface`
    /// naming another, is an error that names the flags that disagree.
    pub fn with_dev(&self, c: Option<&str>, b: Option<&str>) -> anyhow::Result<EngineArgs> {
        let (flag, dev) = match (c, b) {
            (Some(c), Some(b)) if c != b => {
                bail!("-c …%{c} and -B …%{b} name two interfaces: give one")
            }
            (Some(c), _) => ("-c", c),
            (None, Some(b)) => ("-B", b),
            (None, None) => return Ok(self.clone()),
        };
        let mut e = self.clone();
        match &self.iface {
            Some(i) if i != dev => {
                bail!("{flag} …%{dev} and --iface {i} name two interfaces: give one")
            }
            _ => e.iface = Some(dev.to_owned()),
        }
        Ok(e)
    }

    /// Everything but the interface, checked.
    fn config(&self) -> anyhow::Result<EngineConfig> {
        let mut c = EngineConfig {
            queues: self.queues,
            cores: self.cores.clone().map(|c| c.0),
            xdp_mode: self.xdp_mode.mode(),
            bind: self.bind.mode(),
            wait: match self.wakeup {
                Wakeup::Spin => WaitStrategy::Busy,
                Wakeup::Poll => WaitStrategy::NeedWakeup,
                Wakeup::Adaptive => WaitStrategy::Adaptive,
                Wakeup::Kick => bail!("--wakeup kick is xsk-bench's: use spin, poll or adaptive"),
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
            grace: Duration::from_secs_f64(self.grace),
            max_conns: self.max_conns as usize,
            ..EngineConfig::default()
        };
        c.send_buffer = match self.sndbuf {
            BufSize::Auto => None,
            BufSize::Fixed(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        };
        c.tcp.clip_mss_to_frames = self.mss_clip == OnOff::On;
        c.tcp.user_timeout =
            (self.snd_timeout > 0).then(|| Duration::from_millis(self.snd_timeout.unsigned_abs()));
        c.tcp.pmtu_expires =
            (self.pmtu_expires > 0).then(|| Duration::from_secs(self.pmtu_expires.unsigned_abs()));
        c.tcp.congestion = match self.cc {
            CcArg::Newreno => CongestionAlgorithm::NewReno,
            CcArg::Cubic => CongestionAlgorithm::Cubic,
        };
        match self.rcvbuf {
            BufSize::Auto => {}
            BufSize::Fixed(n) if (1024..=1 << 30).contains(&n) => {
                c.tcp.recv_buffer = n as usize;
                c.tcp.recv_window = RecvWindow::Fixed(n as usize);
            }
            BufSize::Fixed(_) => bail!("--rcvbuf must be `auto` or between 1K and 1G"),
        }
        Ok(c)
    }
}

/// A `-B` address that another interface holds is refused: what is sent
/// to it comes in there, where xtcp does not run (`sending`: the peer's
/// answers to a connection from it). An address no interface holds is
/// left to the engine (its error says so), as are the unspecified ones.
pub fn addr_on_iface(iface: &str, addr: IpAddr, sending: bool) -> anyhow::Result<()> {
    if addr.is_unspecified() {
        return Ok(());
    }
    let Ok(mut sock) = NetlinkSocket::route() else {
        return Ok(());
    };
    if let Ok(Holder::Found(link)) = iface_holding(&mut sock, addr)
        && link.name != iface
    {
        let what = if sending {
            "the peer's answers to a connection from it"
        } else {
            "what is sent to it"
        };
        bail!(
            "-B {addr} is an address of {}, not of {iface}: {what} would come in on {}, where \
             xtcp does not run; give -B an address of {iface}, or run on {} (--iface {}{})",
            link.name,
            link.name,
            link.name,
            link.name,
            if sending {
                ""
            } else {
                ", or leave --iface out: -B finds it"
            }
        );
    }
    Ok(())
}

fn route_socket() -> anyhow::Result<NetlinkSocket> {
    NetlinkSocket::route().context("cannot infer --iface: opening a netlink socket")
}

/// The interface the kernel routes `peer` through, named on standard
/// error; an error that says what was asked and what to do.
pub fn iface_to(peer: IpAddr) -> anyhow::Result<String> {
    let mut sock = route_socket()?;
    let (route, link) = route_iface(&mut sock, peer).map_err(|e| {
        anyhow::anyhow!(
            "cannot infer --iface: the kernel has no route to {peer} (RTM_GETROUTE: {}); \
             give --iface",
            crate::error_chain(&e.into())
        )
    })?;
    if route.local || link.is_loopback() {
        bail!(
            "cannot infer --iface: {peer} is routed through {} (an address of this host); \
             xtcp runs on a network interface: give --iface",
            link.name
        );
    }
    let via = route
        .gateway
        .map_or_else(String::new, |g| format!(" via {g}"));
    eprintln!("xtcp: using interface {} (route to {peer}{via})", link.name);
    Ok(link.name)
}

/// The interface that holds the address `on` gives, named on standard
/// error. Without an address, the one interface that is up, not loopback,
/// and has an address a listener would serve (IPv4, or IPv6 but
/// link-local, of the family asked for), as `iperf3 -s` needs no address
/// either (`-B 0.0.0.0` and `-B ::` are every address too); with several
/// such, nothing says which is meant: the error lists those that could be.
pub fn iface_at(on: ListenOn) -> anyhow::Result<String> {
    let mut sock = route_socket()?;
    let ListenOn::Addr(wanted) = on else {
        let mut found = serving_ifaces(&mut sock).map_err(|e| {
            anyhow::anyhow!(
                "cannot infer --iface: reading the interfaces' addresses (RTM_GETADDR): {}",
                crate::error_chain(&e.into())
            )
        })?;
        for (_, addrs) in &mut found {
            addrs.retain(|&ip| on.takes(ip));
        }
        found.retain(|(_, addrs)| !addrs.is_empty());
        if let [(name, addrs)] = found.as_slice() {
            eprintln!(
                "xtcp: using interface {name} (the only one up with an address to serve: {}; \
                 -B or --iface chooses)",
                join_addrs(addrs)
            );
            return Ok(name.clone());
        }
        let what = match on {
            ListenOn::EveryV4 => "an IPv4 address",
            ListenOn::EveryV6 => "an IPv6 address (not link-local)",
            _ => "an IPv4 or IPv6 address (not link-local)",
        };
        let listed = candidates(&found, what);
        bail!("cannot infer --iface without -B; {listed}: give --iface or -B ADDR");
    };
    let holder = iface_holding(&mut sock, wanted).map_err(|e| {
        anyhow::anyhow!(
            "cannot infer --iface: reading the interfaces' addresses (RTM_GETADDR): {}",
            crate::error_chain(&e.into())
        )
    })?;
    let found = match holder {
        Holder::Found(link) if link.is_loopback() => bail!(
            "cannot infer --iface: {wanted} is on {} (loopback); xtcp runs on a network \
             interface: give --iface and -B with one of its addresses",
            link.name
        ),
        Holder::Found(link) => {
            eprintln!("xtcp: using interface {} (holds {wanted})", link.name);
            return Ok(link.name);
        }
        Holder::NotFound(c) => c,
    };
    let listed = candidates(
        &found,
        if wanted.is_ipv4() {
            "an IPv4 address"
        } else {
            "an IPv6 address"
        },
    );
    bail!(
        "cannot infer --iface: no interface here has the address {wanted} (-B); {listed}: give \
         -B with one of their addresses, or --iface"
    )
}

fn join_addrs(addrs: &[IpAddr]) -> String {
    let a: Vec<String> = addrs.iter().map(IpAddr::to_string).collect();
    a.join(", ")
}

/// "the candidates are eth1 (192.0.2.1); eth2 (…)", or that there are none.
fn candidates(found: &[IfaceAddrs], what: &str) -> String {
    if found.is_empty() {
        return format!("no interface here is up with {what}");
    }
    let each: Vec<String> = found
        .iter()
        .map(|(name, addrs)| format!("{name} ({})", join_addrs(addrs)))
        .collect();
    format!("the candidates are {}", each.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4-mapped IPv6 address is its IPv4 address (as iperf3 takes
    /// it); others stay as given.
    #[test]
    fn mapped_addresses_are_their_ipv4_ones() {
        let ip = |s: &str| parse_ip(s).unwrap().to_string();
        assert_eq!(ip("::ffff:198.18.0.2"), "198.18.0.2");
        assert_eq!(ip("[::ffff:198.18.0.2]"), "198.18.0.2");
        assert_eq!(ip("2001:2::1"), "2001:2::1");
        assert_eq!(ip("198.18.0.1"), "198.18.0.1");
        assert!(parse_ip("nope").is_err());
        let a = parse_addr_dev("::ffff:198.18.0.2%eth1").unwrap();
        assert_eq!(
            (a.ip.to_string(), a.dev.as_deref()),
            ("198.18.0.2".into(), Some("eth1"))
        );
    }

    /// `--grace` takes 0 to 3600 seconds; NaN (which panicked making a
    /// Duration), infinities and negative numbers are refused with the
    /// range, by the parser (exit 2), not clamped.
    #[test]
    fn grace_is_refused_outside_its_range() {
        for ok in ["0", "2", "0.5", "3600"] {
            assert_eq!(parse_grace(ok), Ok(ok.parse().unwrap()), "{ok}");
        }
        for bad in ["nan", "NaN", "inf", "-inf", "-1", "3600.5", "1e30", "x", ""] {
            let e = parse_grace(bad).unwrap_err();
            assert!(e.contains("give seconds from 0 to 3600"), "{bad}: {e}");
        }
        let e = <crate::Cli as clap::Parser>::try_parse_from([
            "xtcp",
            "recv",
            "--discard",
            "--grace",
            "nan",
        ])
        .unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
    }

    /// iperf3's `ADDR%DEV`: the address, and the interface after `%`;
    /// `--iface` naming another is an error.
    #[test]
    fn an_address_may_name_its_interface() {
        let v4: IpAddr = "198.18.0.1".parse().unwrap();
        assert_eq!(
            parse_addr_dev("198.18.0.1%veth0"),
            Ok(AddrDev {
                ip: v4,
                dev: Some("veth0".into())
            })
        );
        assert_eq!(
            parse_addr_dev("[2001:2::1]"),
            Ok(AddrDev {
                ip: "2001:2::1".parse().unwrap(),
                dev: None
            })
        );
        assert_eq!(parse_addr_dev("198.18.0.1%").map(|a| a.dev), Ok(None));
        assert!(parse_addr_dev("nope%eth0").unwrap_err().contains("`nope`"));
        assert_eq!(
            split_dev("host.example%eth1"),
            ("host.example", Some("eth1"))
        );
        let cli = parse(&["client", "-c", "198.18.0.2", "--iface", "a0"]);
        let crate::Cmd::Client(c) = cli.cmd else {
            panic!()
        };
        assert_eq!(
            c.engine
                .with_dev(None, Some("a0"))
                .unwrap()
                .iface
                .as_deref(),
            Some("a0")
        );
        assert_eq!(
            c.engine.with_dev(None, None).unwrap().iface.as_deref(),
            Some("a0")
        );
        let e = c.engine.with_dev(None, Some("b0")).unwrap_err().to_string();
        assert!(e.contains("-B …%b0 and --iface a0 name two"), "{e}");
        let e = c.engine.with_dev(Some("a0"), Some("b0")).unwrap_err();
        assert!(
            e.to_string().contains("-c …%a0 and -B …%b0 name two"),
            "{e}"
        );
    }
    use clap::{CommandFactory, Parser};

    fn parse(args: &[&str]) -> crate::Cli {
        crate::Cli::try_parse_from(std::iter::once("xtcp").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// What a command line parses to, for comparing two spellings.
    fn parsed(args: &[&str]) -> String {
        let mut cli = parse(args);
        cli.cmd.resolve_old_spellings();
        format!("{:?}", cli.cmd)
    }

    /// Sizes as iperf3 takes them: binary units, fractions of one (whole
    /// bytes, rounded down), and clear errors for the rest.
    #[test]
    fn sizes() {
        for (s, n) in [
            ("65536", 65536),
            ("64K", 64 << 10),
            ("64k", 64 << 10),
            ("1.5M", 3 << 19),
            ("0.5K", 512),
            ("1.3K", 1331),
            ("2G", 2 << 30),
        ] {
            assert_eq!(parse_size(s), Ok(n), "{s}");
        }
        assert!(parse_size("1KB").unwrap_err().contains("unknown unit `B`"));
        assert!(parse_size("1.5.2M").unwrap_err().contains("is not a size"));
        assert!(parse_size("-1.5M").unwrap_err().contains("is not a size"));
        assert!(parse_size("NaNK").unwrap_err().contains("is not a size"));
        assert!(parse_size("20000000T").unwrap_err().contains("too large"));
        assert!(
            parse_size("2000000000.5T")
                .unwrap_err()
                .contains("too large")
        );
    }

    fn help(cmd: &str) -> String {
        crate::Cli::command()
            .find_subcommand_mut(cmd)
            .unwrap_or_else(|| panic!("no command {cmd}"))
            .render_long_help()
            .to_string()
    }

    /// `-4` / `-6` on serve and recv: a family of the interface's
    /// addresses, or a check of -B's; both at once are clap's error.
    #[test]
    fn minus_4_and_minus_6_choose_what_a_listener_serves() {
        let on = |args: &[&str]| {
            let cli = parse(args);
            let (family, addr) = match cli.cmd {
                crate::Cmd::Serve(a) => (a.family, a.addr.map(|b| b.ip)),
                crate::Cmd::Recv(a) => (a.family, a.addr.as_ref().map(|b| b.ip)),
                c => panic!("{c:?}"),
            };
            family.on(addr).map_err(|e| e.to_string())
        };
        let v4: IpAddr = "198.18.0.1".parse().unwrap();
        let v6: IpAddr = "2001:2::1".parse().unwrap();
        assert_eq!(on(&["serve"]), Ok(ListenOn::Every));
        assert_eq!(on(&["serve", "-4"]), Ok(ListenOn::EveryV4));
        assert_eq!(on(&["recv", "-6", "--discard"]), Ok(ListenOn::EveryV6));
        assert_eq!(on(&["serve", "-B", "198.18.0.1"]), Ok(ListenOn::Addr(v4)));
        // The unspecified address: every address, as a socket bound to it.
        assert_eq!(on(&["serve", "-B", "0.0.0.0"]), Ok(ListenOn::EveryV4));
        assert_eq!(on(&["serve", "-B", "::"]), Ok(ListenOn::Every));
        assert_eq!(
            on(&["recv", "-6", "-B", "::", "--discard"]),
            Ok(ListenOn::EveryV6)
        );
        assert!(on(&["serve", "-4", "-B", "::"]).is_err());
        let err = on(&["recv", "-B", "fe80::1", "--discard"]).unwrap_err();
        assert!(
            err.contains("-B fe80::1: a link-local address, which xtcp does not serve"),
            "{err}"
        );
        assert_eq!(
            on(&["serve", "-6", "-B", "2001:2::1"]),
            Ok(ListenOn::Addr(v6))
        );
        let err = on(&["recv", "-6", "-B", "198.18.0.1", "--discard"]).unwrap_err();
        assert!(
            err.contains("-6: -B 198.18.0.1 is an IPv4 address; give an IPv6 address or drop -6"),
            "{err}"
        );
        assert!(
            crate::Cli::try_parse_from(["xtcp", "serve", "-4", "-6"]).is_err(),
            "-4 with -6"
        );
        assert!(help("serve").contains("-4, --version4"));
        assert!(help("recv").contains("-6, --version6"));
    }

    /// The UMEM leaves the send buffers 32 MiB of frames whatever the
    /// rings (a fixed 16,384 frames left none at `--ring 4096`), and a
    /// `--frames` that leaves less than a ring is refused with the numbers.
    #[test]
    fn frames_leave_the_send_buffers_their_part_at_every_ring() {
        let engine = |extra: &[&str]| {
            let args = [
                &["send", "--iface", "x0", "-c", "198.18.0.2", "--zeros"],
                extra,
            ]
            .concat();
            match parse(&args).cmd {
                crate::Cmd::Send(a) => a.engine,
                c => panic!("{c:?}"),
            }
        };
        for ring in [64u32, 2048, 4096, 16384] {
            let e = engine(&["--ring", &ring.to_string()]).config().unwrap();
            assert_eq!((e.ring, e.frames), (ring, None));
            for (f, send) in [(FrameSize::F4096, 8192), (FrameSize::F2048, 16384)] {
                assert_eq!(
                    xtcp_engine::worker::default_frames(ring, f),
                    4 * ring + send
                );
            }
        }
        let e = engine(&["--ring", "4096", "--frames", "20480"]);
        assert_eq!(e.config().unwrap().frames, Some(20480));
        let err = engine(&["--ring", "4096", "--frames", "16384"])
            .config()
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--frames 16384 is too few for --ring 4096")
                && err.contains("at least 20480"),
            "{err}"
        );
    }

    /// Each earlier spelling parses to exactly what its new spelling does.
    #[test]
    fn old_spellings_parse_as_the_new_ones() {
        let same = |old: &[&str], new: &[&str]| {
            assert_eq!(parsed(old), parsed(new), "{old:?} vs {new:?}");
        };
        let e = ["--iface", "x0"];
        let with = |a: &[&'static str]| [a, &e[..]].concat();
        same(&["probe", "eth1"], &["probe", "--iface", "eth1"]);
        same(
            &with(&[
                "send",
                "--connect",
                "198.18.0.2:5300",
                "--zeros",
                "-n",
                "1M",
            ]),
            &with(&[
                "send",
                "-c",
                "198.18.0.2",
                "-p",
                "5300",
                "--zeros",
                "-n",
                "1M",
            ]),
        );
        same(
            &with(&["send", "--connect", "[2001:2::2]:9", "--zeros", "-n", "1M"]),
            &with(&["send", "-c", "2001:2::2", "-p", "9", "--zeros", "-n", "1M"]),
        );
        same(
            &with(&[
                "send",
                "-c",
                "198.18.0.2",
                "--local",
                "198.18.0.1",
                "--connections",
                "3",
                "--bytes",
                "1M",
                "--zeros",
                "--json",
            ]),
            &with(&[
                "send",
                "-c",
                "198.18.0.2",
                "-B",
                "198.18.0.1",
                "-P",
                "3",
                "-n",
                "1M",
                "--zeros",
                "-J",
            ]),
        );
        same(
            &with(&["recv", "--listen", "198.18.0.1:5300", "--discard"]),
            &with(&["recv", "-B", "198.18.0.1", "-p", "5300", "--discard"]),
        );
        same(
            &with(&["recv", "--listen", "5300", "--discard", "--json"]),
            &with(&["recv", "-p", "5300", "--discard", "-J"]),
        );
        for (old, new) in [("busy", "spin"), ("need-wakeup", "poll")] {
            for cmd in [
                &["send", "-c", "198.18.0.2", "--zeros", "-n", "1M"][..],
                &["recv", "--discard"],
                &["serve"],
                &["client", "-c", "198.18.0.2"],
            ] {
                same(
                    &[cmd, &e, &["--wakeup", old]].concat(),
                    &[cmd, &e, &["--wakeup", new]].concat(),
                );
            }
        }
        let xsk = ["xsk-bench", "--iface", "x0"];
        for (old, new) in [("need", "spin"), ("busy", "kick")] {
            same(
                &[&xsk[..], &["--wakeup", old]].concat(),
                &[&xsk[..], &["--wakeup", new]].concat(),
            );
        }
        same(
            &[&xsk[..], &["--duration", "2", "--core", "1", "--json"]].concat(),
            &[&xsk[..], &["-t", "2", "--cores", "1", "-J"]].concat(),
        );
        same(
            &["bench", "--streams", "2", "--duration", "3"],
            &["bench", "-P", "2", "-t", "3"],
        );
    }

    /// The old spellings work but `--help` shows only the new ones.
    #[test]
    fn help_shows_only_the_new_spellings() {
        let shows = |cmd: &str, yes: &[&str], no: &[&str]| {
            let h = help(cmd);
            for y in yes {
                assert!(h.contains(y), "`xtcp {cmd} --help` shows {y:?}:\n{h}");
            }
            for n in no {
                assert!(!h.contains(n), "`xtcp {cmd} --help` hides {n:?}:\n{h}");
            }
        };
        shows(
            "probe",
            &["--iface <IFACE>"],
            &["|IFACE", "[IFACE]", "<IFACE>  "],
        );
        shows(
            "send",
            &[
                "-c, --client <HOST>",
                "-p, --port <PORT>",
                "-B, --bind-address",
                "-P, --parallel",
                "-n, --bytes",
                "-J, --json",
                "spin:",
                "poll:",
                "adaptive:",
            ],
            &[
                "--connect <",
                "--local",
                "--connections",
                "busy",
                "need-wakeup",
            ],
        );
        shows(
            "recv",
            &[
                "-B, --bind-address <ADDR[%DEV]>",
                "-p, --port <PORT>",
                "-J, --json",
            ],
            &["--listen", "busy", "need-wakeup"],
        );
        for cmd in ["serve", "client"] {
            shows(
                cmd,
                &["spin:", "poll:", "adaptive:"],
                &["busy", "need-wakeup"],
            );
        }
        shows(
            "xsk-bench",
            &[
                "-t, --time",
                "-i, --interval",
                "-p, --port",
                "--cores <CORES>",
                "-J, --json",
                "spin:",
                "poll:",
                "kick:",
            ],
            &["--duration", "--core <", "need:", "busy"],
        );
        shows(
            "bench",
            &["-P, --parallel", "-t, --time"],
            &["--streams", "--duration"],
        );
    }

    /// One ring range and one parser for every command that takes `--ring`.
    #[test]
    fn one_ring_range_everywhere() {
        assert_eq!(parse_ring("64"), Ok(64));
        assert_eq!(parse_ring("16384"), Ok(16384));
        for bad in ["32", "32768", "65536", "100", "0"] {
            let e = parse_ring(bad).unwrap_err();
            assert!(e.contains(bad) && e.contains("64..=16384"), "{e}");
        }
        assert!(parse_ring("x").unwrap_err().contains("`x`"));
        let xsk = ["xsk-bench", "--iface", "x0", "--ring"];
        let send = ["send", "-c", "198.18.0.2", "--zeros", "-n", "1M", "--ring"];
        for cmd in [&xsk[..], &send, &["bench", "--ring"]] {
            for (v, ok) in [("16384", true), ("32768", false), ("96", false)] {
                let args = [cmd, &[v]].concat();
                let r = crate::Cli::try_parse_from(std::iter::once("xtcp").chain(args));
                match r {
                    Ok(_) => assert!(ok, "{cmd:?} {v} is refused"),
                    Err(e) => {
                        assert!(!ok, "{cmd:?} {v} is taken: {e}");
                        let e = e.to_string();
                        assert!(e.contains("--ring") && e.contains("64..=16384"), "{e}");
                    }
                }
            }
        }
    }

    /// Every complete `xtcp …` command in README's shell examples parses
    /// (with the new spellings: an old one would still parse, so they are
    /// looked for too).
    #[test]
    fn readme_examples_parse_and_use_the_new_spellings() {
        let readme = include_str!("../../README.md");
        let mut in_sh = false;
        let mut checked = 0;
        for line in readme.lines() {
            if line.starts_with("```") {
                in_sh = line == "```sh";
                continue;
            }
            // The command, not what a comment after it says.
            let code = line.split(" #").next().unwrap_or_default();
            let Some(at) = code
                .find("xtcp ")
                .filter(|_| in_sh && !line.trim_start().starts_with('#'))
            else {
                continue;
            };
            // (A trailing `&` runs it in the background: the shell's.)
            let cmd = code[at..].trim().trim_end_matches('&').trim_end();
            // Placeholders, alternatives, continued lines, pipes.
            if cmd.contains(['[', '<', '|', '\\', '$', '>']) || cmd.ends_with("...") {
                continue;
            }
            let words: Vec<&str> = cmd.split_whitespace().collect();
            let commands = [
                "probe",
                "xsk-bench",
                "send",
                "recv",
                "serve",
                "client",
                "bench",
            ];
            if !words.get(1).is_some_and(|w| commands.contains(w)) {
                continue;
            }
            if let Err(e) = crate::Cli::try_parse_from(&words) {
                panic!("README: `{cmd}`: {e}");
            }
            for old in [
                "--connect ",
                "--listen",
                "--connections",
                "--duration",
                "--streams",
                "--local",
                "--core ",
            ] {
                assert!(
                    !format!("{cmd} ").contains(old),
                    "README: `{cmd}` spells {old}"
                );
            }
            checked += 1;
        }
        assert!(checked >= 15, "only {checked} README commands found");
    }

    #[test]
    fn kick_is_xsk_bench_only_and_adaptive_the_engines() {
        let err = |args: &[&str]| {
            crate::Cli::try_parse_from(std::iter::once("xtcp").chain(args.iter().copied()))
                .unwrap_err()
                .to_string()
        };
        let e = err(&["serve", "--wakeup", "kick"]);
        assert!(e.contains("[possible values: spin, poll, adaptive]"), "{e}");
        let e = err(&["xsk-bench", "--iface", "x", "--wakeup", "adaptive"]);
        assert!(e.contains("[possible values: spin, poll, kick]"), "{e}");
    }
}
