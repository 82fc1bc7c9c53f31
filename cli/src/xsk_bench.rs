//! `xtcp xsk-bench`: raw AF_XDP packet rates on one queue, like xdpsock.
//!
//! Modes: `rxdrop` (steer TCP packets for `--port` to the socket, count and
//! recycle them), `txonly` (send a fixed TCP packet of `--size` bytes as
//! fast as the ring allows; the frames are written once at start and never
//! touched again), `l2fwd` (swap MAC addresses and send each received
//! packet back out). With `--testnet` it builds its own two-namespace veth
//! network and runs txonly on one side against `--mode` on the other.
//!
//! `--stamp` (txonly) rewrites each packet's payload with a new generation
//! number every time its frames come back from the completion ring: a frame
//! is written only while userspace owns it, so a receiver that finds a
//! payload mixing two generations (or a bad TCP checksum) has caught a frame
//! reused before its completion. The payload is the generation as 8
//! big-endian bytes, repeated; generations start at 1 and increase by one
//! per packet, in send order.
//!
//! Zero-copy devices that take one descriptor per packet (virtio-net reports
//! `xdp-zc-max-segs = 1`) cannot carry a multi-buffer chain: a packet size or
//! MTU that needs one is refused with `--bind zerocopy`, and makes
//! `--bind auto` choose copy mode.
//!
//! Rates count Ethernet frames without FCS/preamble: Gbit/s = frame bytes × 8.

use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::ValueEnum;
use serde::Serialize;
use xtcp_engine::frame::FrameSize;
use xtcp_engine::netlink::NetlinkSocket;
use xtcp_engine::netlink::neigh::{get_route, resolve};
use xtcp_engine::probe::NetdevFeatures;
use xtcp_engine::testnet::{TestNet, TestNetConfig};
use xtcp_engine::wire::checksum;
use xtcp_engine::worker::cores::{neighbour_warning, others_on};
use xtcp_engine::xdp::{AttachMode, Rule, SteerCounters, Steering};
use xtcp_engine::xsk::{
    self, BindInfo, BindMode, Frame, RELEASE_WAIT, RxDesc, TxDesc, Umem, UmemConfig, Xsk,
    XskConfig, XskStats,
};

use crate::args::{
    BindArg, CoreList, Wakeup, XdpModeArg, parse_cores, parse_frame_size, parse_ring, xsk_wakeup,
};
use crate::bulk::interrupt_flag;

/// What the socket does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Receive steered packets and drop them.
    Rxdrop,
    /// Transmit one fixed packet as fast as possible.
    Txonly,
    /// Send every received packet back with MAC addresses swapped.
    L2fwd,
}

/// A MAC address `aa:bb:cc:dd:ee:ff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mac(pub [u8; 6]);

impl FromStr for Mac {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 6 {
            return Err(format!("`{s}` is not a MAC address like 02:00:00:00:00:01"));
        }
        let mut m = [0u8; 6];
        for (o, p) in m.iter_mut().zip(parts) {
            *o = u8::from_str_radix(p, 16)
                .map_err(|_| format!("`{s}` is not a MAC address like 02:00:00:00:00:01"))?;
        }
        Ok(Mac(m))
    }
}

fn parse_secs(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(0.01..=86400.0).contains(&v) {
        return Err(format!("{v} s is outside 0.01..=86400"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// `-i`: seconds as [`parse_secs`], or 0: no interval reports, only the
/// summary (as xdpsock has none).
fn parse_interval(s: &str) -> Result<Duration, String> {
    if s.trim().parse::<f64>() == Ok(0.0) {
        return Ok(Duration::ZERO);
    }
    parse_secs(s)
}

/// Arguments of `xtcp xsk-bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct XskBenchArgs {
    /// Interface to run on (not needed with --testnet).
    #[arg(long, required_unless_present = "testnet")]
    pub iface: Option<String>,
    /// Queue id.
    #[arg(long, default_value_t = 0)]
    pub queue: u32,
    /// What to do. With --testnet: side A's role (rxdrop or l2fwd); side B runs txonly.
    #[arg(long, value_enum, default_value = "rxdrop")]
    pub mode: Mode,
    /// UMEM frame size: 2048 or 4096.
    #[arg(long, default_value = "4096", value_parser = parse_frame_size)]
    pub frame_size: FrameSize,
    /// UMEM frames.
    #[arg(long, default_value_t = 16384)]
    pub frames: u32,
    /// Bytes the kernel keeps free at the start of each RX frame, after its
    /// own 256-byte XDP headroom (UMEM headroom).
    #[arg(long, default_value_t = 0)]
    pub headroom: u32,
    /// RX/TX ring size, a power of two in 64..=16384 (fill/completion
    /// rings get twice this).
    #[arg(long, default_value = "2048", value_parser = parse_ring)]
    pub ring: u32,
    /// Packets per batch.
    #[arg(long, default_value_t = 64)]
    pub batch: u32,
    /// txonly packet size in bytes (Ethernet frame without FCS), 60..=65535;
    /// above one frame it is sent as a multi-buffer chain.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// How long to run, in seconds; Ctrl-C (SIGINT or SIGTERM) ends the run
    /// early with its report (and --testnet's network removed).
    #[arg(short = 't', long = "time", alias = "duration", value_name = "SECS",
          default_value = "10", value_parser = parse_secs)]
    pub duration: Duration,
    /// Report interval, in seconds (0: none, only the summary).
    #[arg(short = 'i', long, value_name = "SECS", default_value = "1", value_parser = parse_interval)]
    pub interval: Duration,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: XdpModeArg,
    /// AF_XDP bind mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub bind: BindArg,
    /// When to make syscalls.
    #[arg(long, default_value = "spin", value_parser = xsk_wakeup())]
    pub wakeup: Wakeup,
    /// TCP destination port: steered to the socket (rxdrop, l2fwd) or put
    /// in the packets (txonly).
    #[arg(short, long, default_value_t = 5201)]
    pub port: u16,
    /// txonly: source IPv4 address (default: the interface's).
    #[arg(long)]
    pub src_ip: Option<Ipv4Addr>,
    /// txonly: destination IPv4 address (needed, but for --testnet's).
    #[arg(long)]
    pub dst_ip: Option<Ipv4Addr>,
    /// txonly: destination MAC (default: the kernel's next hop for --dst-ip,
    /// resolved with ARP if needed).
    #[arg(long)]
    pub dst_mac: Option<Mac>,
    // The doc comment is clap's help text: its brackets are syntax, not links.
    #[allow(rustdoc::broken_intra_doc_links)]
    /// Pin the worker to this CPU core; with --testnet, CORE_A[,CORE_B]:
    /// side A's worker, and side B's (default: the second and first cores).
    #[arg(long, alias = "core", value_parser = parse_cores)]
    pub cores: Option<CoreList>,
    /// Back the UMEM with reserved 2 MB hugepages (without: transparent
    /// huge pages where the system grants them).
    #[arg(long)]
    pub hugepages: bool,
    /// Build a test network (two namespaces, one veth pair) and run txonly on
    /// side B against --mode on side A.
    #[arg(long)]
    pub testnet: bool,
    /// txonly: stamp every packet's payload with a generation number,
    /// rewritten only after the packet's frames have completed (8-byte
    /// big-endian generation repeated over the payload, starting at 1,
    /// TCP checksum kept valid). A receiver that sees a payload mixing two
    /// generations has caught a TX frame rewritten before its completion.
    #[arg(long)]
    pub stamp: bool,
    /// Print one JSON object at the end instead of text (progress lines
    /// such as the bind result go to stderr).
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// One report interval.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Sample {
    /// Which worker ("rx", "tx", "fwd").
    pub side: &'static str,
    /// Seconds since start, at the end of the interval.
    pub t: f64,
    /// Packets in the interval.
    pub packets: u64,
    /// Frame bytes in the interval.
    pub bytes: u64,
    /// Packets per second.
    pub pps: f64,
    /// Gbit/s of frame bytes.
    pub gbps: f64,
}

/// End-of-run result of one worker.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerReport {
    /// Which worker.
    pub side: &'static str,
    /// Mode.
    pub mode: Mode,
    /// Bind result.
    pub bind: BindInfo,
    /// Steering program mode, if attached.
    pub xdp_mode: Option<AttachMode>,
    /// Packets.
    pub packets: u64,
    /// Frame bytes.
    pub bytes: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Packets per second.
    pub pps: f64,
    /// Gbit/s.
    pub gbps: f64,
    /// Loop turns that found no room on the TX ring (txonly, l2fwd).
    pub tx_ring_full_events: u64,
    /// Loop turns that had no free frame to send (txonly: all in flight).
    pub no_free_frame_events: u64,
    /// Wakeup syscalls made.
    pub wakeups: u64,
    /// XDP_STATISTICS at the end.
    pub xdp_stats: XskStats,
    /// Steering program counters at the end, if attached.
    pub steer: Option<SteerCounters>,
    /// Interval samples.
    pub intervals: Vec<Sample>,
}

/// Everything one worker needs.
#[derive(Clone, Debug)]
struct WorkerSpec {
    side: &'static str,
    iface: String,
    queue: u32,
    mode: Mode,
    frame_size: FrameSize,
    frames: u32,
    headroom: u32,
    ring: u32,
    batch: u32,
    size: usize,
    duration: Duration,
    interval: Duration,
    xdp_mode: AttachMode,
    bind: BindMode,
    wakeup: Wakeup,
    port: u16,
    src_ip: Option<Ipv4Addr>,
    dst_ip: Option<Ipv4Addr>,
    dst_mac: Option<[u8; 6]>,
    core: Option<usize>,
    hugepages: bool,
    stamp: bool,
    /// Receivers: once `stop` is set, keep receiving until no packet has
    /// come for this long (what the sender had in flight is counted);
    /// `None`: end at once.
    drain: Option<Duration>,
}

/// Copy-mode XDP headroom the kernel keeps in front of received data.
const XDP_PACKET_HEADROOM: usize = 256;

/// Runs the command.
pub fn run(args: &XskBenchArgs) -> anyhow::Result<()> {
    validate(args)?;
    let spec = |side, iface: String, mode| WorkerSpec {
        side,
        iface,
        queue: args.queue,
        mode,
        frame_size: args.frame_size,
        frames: args.frames,
        headroom: args.headroom,
        ring: args.ring,
        batch: args.batch,
        size: args.size,
        duration: args.duration,
        interval: args.interval,
        xdp_mode: args.xdp_mode.mode(),
        bind: args.bind.mode(),
        wakeup: args.wakeup,
        port: args.port,
        src_ip: args.src_ip,
        dst_ip: args.dst_ip,
        dst_mac: args.dst_mac.map(|m| m.0),
        core: args.cores.as_ref().and_then(|c| c.0.first().copied()),
        hugepages: args.hugepages,
        stamp: args.stamp,
        drain: None,
    };
    if args.testnet {
        return run_testnet(args, spec);
    }
    let iface = args.iface.clone().context("--iface is required")?;
    let s = spec(side_name(args.mode), iface, args.mode);
    let (tx, rx) = mpsc::channel();
    let stop = interrupt_flag()?;
    let json = args.json;
    let report = std::thread::scope(|sc| {
        let stop = &*stop;
        let s = &s;
        let h = named(s.queue).spawn_scoped(sc, move || worker(s, stop, &tx, None))?;
        for msg in rx {
            if !json {
                print_msg(&msg);
            } else if let Msg::Bound(..) = msg {
                eprintln!("{}", msg_line(&msg));
            }
        }
        h.join().expect("worker thread panicked")
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

fn side_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Rxdrop => "rx",
        Mode::Txonly => "tx",
        Mode::L2fwd => "fwd",
    }
}

fn validate(args: &XskBenchArgs) -> anyhow::Result<()> {
    if !(60..=65535).contains(&args.size) {
        bail!("--size {} is outside 60..=65535 bytes", args.size);
    }
    if args.batch == 0 || args.batch > args.ring {
        bail!(
            "--batch {} must be in 1..=--ring ({})",
            args.batch,
            args.ring
        );
    }
    if args.frames < 4 * args.ring {
        bail!(
            "--frames {} is too few for --ring {}: at least 4 × ring frames are needed \
             (fill ring = 2 × ring, plus RX/TX in flight)",
            args.frames,
            args.ring
        );
    }
    if args.testnet && args.mode == Mode::Txonly {
        bail!(
            "with --testnet, --mode picks side A's role (rxdrop or l2fwd); side B always runs txonly"
        );
    }
    if args.testnet && args.iface.is_some() {
        bail!("--testnet builds its own interfaces: drop --iface");
    }
    if args.mode == Mode::Txonly && !args.testnet && args.dst_ip.is_none() {
        bail!("--mode txonly needs --dst-ip, the packets' destination");
    }
    if let Some(CoreList(c)) = &args.cores {
        let most = if args.testnet { 2 } else { 1 };
        if c.len() > most {
            bail!(
                "--cores {}: give {} (one worker{})",
                c.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
                if args.testnet {
                    "one or two cores"
                } else {
                    "one core"
                },
                if args.testnet { " per side" } else { "" }
            );
        }
        xtcp_engine::worker::validate_cores("--cores", c)?;
    }
    if args.stamp && args.mode != Mode::Txonly && !args.testnet {
        bail!("--stamp applies to txonly (the sender): add --mode txonly or drop --stamp");
    }
    // The sender's addresses mean nothing to the other modes: refused, as
    // --stamp is, not ignored (--testnet sets its own).
    if args.mode != Mode::Txonly || args.testnet {
        for (flag, given) in [
            ("--src-ip", args.src_ip.is_some()),
            ("--dst-ip", args.dst_ip.is_some()),
            ("--dst-mac", args.dst_mac.is_some()),
        ] {
            if given {
                bail!(
                    "{flag} applies to txonly on an interface of yours (the sender's \
                     addresses; --testnet sets its own): add --mode txonly or drop {flag}"
                );
            }
        }
    }
    Ok(())
}

enum Msg {
    Bound(&'static str, BindInfo, Option<AttachMode>),
    Sample(Sample),
}

fn print_msg(m: &Msg) {
    println!("{}", msg_line(m));
}

fn msg_line(m: &Msg) -> String {
    match m {
        Msg::Bound(side, b, xdp) => format!(
            "# {side}: {} queue {} bound, {}{}{}{}",
            b.iface,
            b.queue,
            if b.zerocopy { "zero-copy" } else { "copy mode" },
            if b.need_wakeup { ", need-wakeup" } else { "" },
            if b.multi_buffer { ", multi-buffer" } else { "" },
            match xdp {
                Some(AttachMode::Native) => ", XDP native",
                Some(AttachMode::Generic) => ", XDP generic",
                _ => "",
            }
        ),
        Msg::Sample(s) => format!(
            "{:>7.2}s  {:<3} {:>10.3} Mpps {:>8.3} Gbit/s",
            s.t,
            s.side,
            s.pps / 1e6,
            s.gbps
        ),
    }
}

fn print_report(r: &WorkerReport) {
    println!(
        "{}: {} packets, {} bytes in {:.2} s: {:.3} Mpps, {:.3} Gbit/s",
        r.side,
        r.packets,
        r.bytes,
        r.seconds,
        r.pps / 1e6,
        r.gbps
    );
    let s = &r.xdp_stats;
    println!(
        "{}: XDP statistics: rx_dropped {} rx_invalid {} tx_invalid {} rx_ring_full {} \
         fill_ring_empty {} tx_ring_empty {}; TX ring full {}, no free frame {}, wakeups {}",
        r.side,
        s.rx_dropped,
        s.rx_invalid_descs,
        s.tx_invalid_descs,
        s.rx_ring_full,
        s.rx_fill_ring_empty_descs,
        s.tx_ring_empty_descs,
        r.tx_ring_full_events,
        r.no_free_frame_events,
        r.wakeups
    );
    if let Some(c) = &r.steer {
        println!(
            "{}: steering: steered {} passed {} malformed {} no-socket {}",
            r.side, c.steered, c.passed, c.malformed, c.no_socket
        );
    }
}

/// Counts and emits interval samples.
struct Meter<'a> {
    side: &'static str,
    start: Instant,
    last: Instant,
    last_packets: u64,
    last_bytes: u64,
    interval: Duration,
    out: &'a mpsc::Sender<Msg>,
    samples: Vec<Sample>,
}

impl Meter<'_> {
    fn tick(&mut self, now: Instant, packets: u64, bytes: u64) {
        if self.interval.is_zero() || now.duration_since(self.last) < self.interval {
            return;
        }
        self.emit(now, packets, bytes);
    }

    /// The last, shorter interval at the end of the run: emitted if any
    /// packet moved in it or it is a tenth of an interval or more (as
    /// iperf3 does), so that the intervals add up to the totals.
    fn finish(&mut self, now: Instant, packets: u64, bytes: u64) {
        if self.interval.is_zero()
            || (packets == self.last_packets && now.duration_since(self.last) < self.interval / 10)
        {
            return;
        }
        self.emit(now, packets, bytes);
    }

    fn emit(&mut self, now: Instant, packets: u64, bytes: u64) {
        let dt = now.duration_since(self.last).as_secs_f64();
        let p = packets - self.last_packets;
        let b = bytes - self.last_bytes;
        let s = Sample {
            side: self.side,
            t: now.duration_since(self.start).as_secs_f64(),
            packets: p,
            bytes: b,
            pps: p as f64 / dt,
            gbps: b as f64 * 8.0 / dt / 1e9,
        };
        self.samples.push(s);
        let _ = self.out.send(Msg::Sample(s));
        self.last = now;
        self.last_packets = packets;
        self.last_bytes = bytes;
    }
}

/// Builds the txonly packet: Ethernet + IPv4 + TCP (ACK) + pattern payload.
fn build_packet(spec: &WorkerSpec) -> anyhow::Result<Vec<u8>> {
    let src_mac = xsk::iface_mac(&spec.iface)?;
    let dst_ip = spec.dst_ip.context("txonly needs --dst-ip")?;
    let src_ip = match spec.src_ip {
        Some(ip) => ip,
        None => xsk::iface_ipv4(&spec.iface)?
            .with_context(|| format!("{} has no IPv4 address: pass --src-ip", spec.iface))?,
    };
    let dst_mac = match spec.dst_mac {
        Some(m) => m,
        None => {
            // The kernel's next hop, resolved (ARP) if it is not known yet;
            // the route first, so that another interface is reported at
            // once rather than after an ARP wait there.
            let ifindex = xsk::ifindex(&spec.iface)?;
            let wrong_iface = |oif: u32| {
                anyhow::anyhow!(
                    "the kernel routes {dst_ip} through {}, not {} (index {ifindex}): \
                     pass --dst-mac to send there anyway",
                    xsk::describe_ifindex(oif),
                    spec.iface
                )
            };
            if let Ok(route) = NetlinkSocket::route()
                .map_err(|_| ())
                .and_then(|mut s| get_route(&mut s, IpAddr::V4(dst_ip)).map_err(|_| ()))
                && route.oif != ifindex
            {
                return Err(wrong_iface(route.oif));
            }
            let hop = resolve(IpAddr::V4(dst_ip), Duration::from_secs(3))
                .with_context(|| format!("finding the MAC of {dst_ip} (or pass --dst-mac)"))?;
            if hop.route.oif != ifindex {
                return Err(wrong_iface(hop.route.oif));
            }
            hop.mac
        }
    };
    let payload_len = spec.size.saturating_sub(14 + 20 + 20);
    let payload: Vec<u8> = (0..payload_len).map(|i| (i % 251) as u8).collect();
    let b = etherparse::PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv4(src_ip.octets(), dst_ip.octets(), 64)
        .tcp(40000, spec.port, 1, 65535)
        .ack(1);
    let mut pkt = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut pkt, &payload)?;
    // Ethernet pads to 60 bytes; so do we, so that size means frame size.
    pkt.resize(spec.size.max(pkt.len()), 0);
    Ok(pkt)
}

/// A thread for the worker of `queue`, named as the engine names its
/// workers (`xtcp-q0`), so that other xtcp processes see it when they
/// look for workers on the cores they are about to use.
fn named(queue: u32) -> std::thread::Builder {
    std::thread::Builder::new().name(format!("xtcp-q{queue}"))
}

/// Runs one side. `ready` is dropped once the socket is bound and its fill
/// ring full (or on an error before that): whoever waits on its receiver
/// then knows it may start sending.
fn worker(
    spec: &WorkerSpec,
    stop: &AtomicBool,
    out: &mpsc::Sender<Msg>,
    ready: Option<mpsc::Sender<()>>,
) -> anyhow::Result<WorkerReport> {
    if let Some(core) = spec.core {
        let ids = core_affinity::get_core_ids().unwrap_or_default();
        let id = ids
            .into_iter()
            .find(|c| c.id == core)
            .with_context(|| format!("--cores {core}: no such CPU core"))?;
        if !core_affinity::set_for_current(id) {
            bail!("cannot pin the worker to core {core}");
        }
        for n in others_on(&[core]) {
            tracing::warn!(
                "{}",
                neighbour_warning(&format!("the {} worker", spec.side), &n)
            );
        }
    }
    let fs = spec.frame_size.bytes();
    let mtu = xsk::iface_mtu(&spec.iface)? as usize;
    let rx_capacity = fs
        .checked_sub(XDP_PACKET_HEADROOM + spec.headroom as usize)
        .filter(|&c| c >= 256)
        .with_context(|| {
            format!(
                "--headroom {} leaves too little room in a {fs}-byte frame \
                 (the kernel keeps {XDP_PACKET_HEADROOM} bytes too)",
                spec.headroom
            )
        })?;
    let multi_buffer = match spec.mode {
        Mode::Txonly => spec.size > fs,
        Mode::Rxdrop | Mode::L2fwd => mtu + 14 > rx_capacity,
    };
    if spec.mode == Mode::Txonly && spec.size > mtu + 14 {
        bail!(
            "--size {} exceeds what {} carries (MTU {mtu} + 14-byte Ethernet header); \
             the device would drop it silently: raise the MTU or lower --size",
            spec.size,
            spec.iface
        );
    }
    // Descriptors per packet: what the device must take in one chain.
    let chain_len = match spec.mode {
        Mode::Txonly => spec.size.div_ceil(fs),
        Mode::Rxdrop | Mode::L2fwd => (mtu + 14).div_ceil(rx_capacity),
    };
    let mut bind = zero_copy_chain_guard(spec, chain_len, mtu, rx_capacity)?;
    if spec.mode != Mode::Rxdrop {
        bind = xtcp_engine::xsk::tx_bind_mode(bind, &spec.iface);
    }
    // Everything that can be checked before touching the interface is.
    let pkt = match spec.mode {
        Mode::Txonly => Some(build_packet(spec)?),
        Mode::Rxdrop | Mode::L2fwd => None,
    };
    let steering = match spec.mode {
        Mode::Rxdrop | Mode::L2fwd => {
            let mut st = Steering::attach(&spec.iface, spec.xdp_mode)?;
            st.set_rules(&[Rule::port(spec.port)])?;
            Some(st)
        }
        Mode::Txonly => None,
    };
    let umem = Arc::new(Umem::new(UmemConfig {
        frame_count: spec.frames,
        frame_size: spec.frame_size,
        headroom: spec.headroom,
        hugepages: spec.hugepages,
    })?);
    let cfg = XskConfig {
        rx_size: spec.ring,
        tx_size: spec.ring,
        fill_size: spec.ring * 2,
        comp_size: spec.ring * 2,
        bind,
        need_wakeup: spec.wakeup == Wakeup::Spin,
        multi_buffer,
        tx_budget: Some(spec.ring),
    };
    // A run that ended moments before may hold the queue a little longer.
    let mut x = Xsk::bind_waiting(&umem, &spec.iface, spec.queue, &cfg, RELEASE_WAIT)?;
    if x.info().zerocopy && chain_len > 1 {
        // The kernel should have refused this bind already; never send a
        // chain the device cannot take, whatever it said.
        let segs = zc_max_segs(&spec.iface)?;
        if segs.is_none_or(|s| (s as usize) < chain_len) {
            bail!(
                "{} is bound in zero-copy mode, but a packet here needs {chain_len} descriptors \
                 and the device takes at most {} per packet (xdp-zc-max-segs): {}",
                spec.iface,
                segs.map_or_else(|| "an unknown number".to_owned(), |s| s.to_string()),
                fit_hint(spec, mtu, rx_capacity)
            );
        }
    }
    let mut steering = steering;
    if let Some(st) = steering.as_mut() {
        st.register(spec.queue, &x)?;
    }
    let xdp_mode = steering.as_ref().map(|s| s.mode());

    let mut pool = umem.take_frames();
    if let Some(pkt) = &pkt {
        let k = pkt.len().div_ceil(fs);
        if !x.info().zerocopy && k > COPY_MAX_DESCS {
            bail!(
                "a {}-byte packet needs {k} descriptors of {fs} bytes, more than copy mode \
                 takes ({COPY_MAX_DESCS}): use --frame-size 4096 or a smaller --size",
                pkt.len()
            );
        }
    } else {
        // Receivers start with a full fill ring.
        let n = x.fill.size();
        x.fill.fill(&mut pool, n);
    }
    let _ = out.send(Msg::Bound(spec.side, x.info().clone(), xdp_mode));
    drop(ready);

    let start = Instant::now();
    let mut meter = Meter {
        side: spec.side,
        start,
        last: start,
        last_packets: 0,
        last_bytes: 0,
        interval: spec.interval,
        out,
        samples: Vec::new(),
    };
    let end = start + spec.duration;
    let mut c = Counts::default();
    match spec.mode {
        Mode::Rxdrop => rxdrop(spec, &mut x, pool, end, stop, &mut meter, &mut c),
        Mode::L2fwd => l2fwd(spec, &mut x, &umem, pool, end, stop, &mut meter, &mut c)?,
        Mode::Txonly => {
            let pkt = pkt.as_deref().unwrap_or_default();
            txonly(
                spec, &mut x, &umem, pool, pkt, end, stop, &mut meter, &mut c,
            )?
        }
    }
    // The last interval ends where the window does (a receiver's last
    // packet, not the quiet time it waited after it).
    let window_end = c.window.map_or_else(Instant::now, |w| w.1);
    meter.finish(window_end.max(meter.last), c.packets, c.bytes);
    // Rates over the window in which packets moved (receivers: first to
    // last packet; senders: the send loop), not start-up or drain time.
    let seconds = c
        .window
        .map(|(a, b)| b.duration_since(a).as_secs_f64())
        .filter(|&s| s > 0.0)
        .unwrap_or_else(|| start.elapsed().as_secs_f64());
    let xdp_stats = x.stats()?;
    let steer = match &steering {
        Some(s) => Some(s.counters()?),
        None => None,
    };
    Ok(WorkerReport {
        side: spec.side,
        mode: spec.mode,
        bind: x.info().clone(),
        xdp_mode,
        packets: c.packets,
        bytes: c.bytes,
        seconds,
        pps: c.packets as f64 / seconds,
        gbps: c.bytes as f64 * 8.0 / seconds / 1e9,
        tx_ring_full_events: c.ring_full,
        no_free_frame_events: c.no_frames,
        wakeups: c.wakeups,
        xdp_stats,
        steer,
        intervals: meter.samples,
    })
}

/// The device's `xdp-zc-max-segs` from the netdev netlink family: the most
/// descriptors one packet may span in zero-copy mode (`None`: not reported,
/// i.e. no zero-copy or a kernel older than 6.6).
fn zc_max_segs(iface: &str) -> anyhow::Result<Option<u32>> {
    let report = xtcp_engine::probe::probe(iface)
        .with_context(|| format!("reading xdp-zc-max-segs of {iface}"))?;
    Ok(match report.xdp.netdev {
        NetdevFeatures::Reported {
            xdp_zc_max_segs, ..
        } => xdp_zc_max_segs,
        NetdevFeatures::Unknown { .. } => None,
    })
}

/// What to change so that a packet fits one descriptor.
fn fit_hint(spec: &WorkerSpec, mtu: usize, rx_capacity: usize) -> String {
    let fs = spec.frame_size.bytes();
    match spec.mode {
        Mode::Txonly => format!(
            "use --size {fs} or less (one {fs}-byte frame), or --bind copy \
             (or --bind auto, which then picks copy mode)"
        ),
        Mode::Rxdrop | Mode::L2fwd => format!(
            "lower the MTU of {} from {mtu} to {} or less (`ip link set dev {} mtu {}`) \
             so that a packet fits one {fs}-byte frame, or use --bind copy \
             (or --bind auto, which then picks copy mode)",
            spec.iface,
            rx_capacity - 14,
            spec.iface,
            rx_capacity - 14
        ),
    }
}

/// Refuses (`--bind zerocopy`) or falls back to copy mode (`--bind auto`)
/// when a packet needs `chain_len` descriptors and the device takes fewer
/// in zero-copy mode; returns the bind mode to use.
fn zero_copy_chain_guard(
    spec: &WorkerSpec,
    chain_len: usize,
    mtu: usize,
    rx_capacity: usize,
) -> anyhow::Result<BindMode> {
    if chain_len <= 1 || spec.bind == BindMode::Copy {
        return Ok(spec.bind);
    }
    let Some(segs) = zc_max_segs(&spec.iface)? else {
        // No zero-copy here: the bind itself says so (zerocopy) or falls
        // back (auto).
        return Ok(spec.bind);
    };
    if segs as usize >= chain_len {
        return Ok(spec.bind);
    }
    let what = match spec.mode {
        Mode::Txonly => format!("--size {} needs a {chain_len}-descriptor chain", spec.size),
        Mode::Rxdrop | Mode::L2fwd => format!(
            "MTU {mtu} needs up to {chain_len} descriptors per received packet \
             ({rx_capacity} bytes fit one frame)"
        ),
    };
    match spec.bind {
        BindMode::ZeroCopy => bail!(
            "{what}, but {} takes at most {segs} descriptor{} per packet in zero-copy mode \
             (xdp-zc-max-segs = {segs}, see `xtcp probe --iface {}`): {}",
            spec.iface,
            if segs == 1 { "" } else { "s" },
            spec.iface,
            fit_hint(spec, mtu, rx_capacity)
        ),
        BindMode::Auto | BindMode::Copy => {
            tracing::warn!(
                "{what}, but {} takes at most {segs} per packet in zero-copy mode \
                 (xdp-zc-max-segs = {segs}): using copy mode",
                spec.iface
            );
            Ok(BindMode::Copy)
        }
    }
}

#[derive(Default)]
struct Counts {
    packets: u64,
    bytes: u64,
    ring_full: u64,
    no_frames: u64,
    wakeups: u64,
    /// When packets started and stopped moving.
    window: Option<(Instant, Instant)>,
}

impl Counts {
    #[inline]
    fn saw_packets(&mut self, now: Instant) {
        match &mut self.window {
            Some((_, last)) => *last = now,
            None => self.window = Some((now, now)),
        }
    }
}

/// Whether a receiving loop ends now: at `end`; when `stop` is set, at
/// once or, with `spec.drain`, once no packet has come for that long since
/// the later of the stop and the last packet (`stopped` remembers when the
/// stop was first seen).
fn receiver_done(
    spec: &WorkerSpec,
    now: Instant,
    end: Instant,
    stop: &AtomicBool,
    last_packet: Option<Instant>,
    stopped: &mut Option<Instant>,
) -> bool {
    if now >= end {
        return true;
    }
    if !stop.load(Ordering::Relaxed) {
        return false;
    }
    let Some(quiet) = spec.drain else {
        return true;
    };
    let since = *stopped.get_or_insert(now);
    let since = last_packet.map_or(since, |l| l.max(since));
    now.duration_since(since) >= quiet
}

/// Descriptors one packet may span in copy mode (`MAX_SKB_FRAGS` + 1).
const COPY_MAX_DESCS: usize = 18;

fn rxdrop(
    spec: &WorkerSpec,
    x: &mut Xsk,
    mut pool: Vec<Frame>,
    end: Instant,
    stop: &AtomicBool,
    meter: &mut Meter<'_>,
    c: &mut Counts,
) {
    let mut stopped = None;
    // Once done, what the kernel had already put in the RX ring is taken
    // and counted (its redirect counted it as delivered), at most a ring's
    // worth, so a sender that goes on cannot keep the loop alive.
    let mut drain_left: Option<u32> = None;
    loop {
        let now = Instant::now();
        if drain_left.is_none()
            && receiver_done(spec, now, end, stop, c.window.map(|w| w.1), &mut stopped)
        {
            drain_left = Some(x.rx.size());
        }
        if drain_left.is_none() {
            meter.tick(now, c.packets, c.bytes);
            if spec.wakeup == Wakeup::Poll && !x.rx.poll(100) {
                continue;
            }
        }
        let max = drain_left.map_or(spec.batch, |left| left.min(spec.batch));
        let n = x.rx.recv(max, |d: RxDesc| {
            c.bytes += u64::from(d.len);
            c.packets += u64::from(!d.contd);
            pool.push(d.frame);
        });
        if let Some(left) = drain_left.as_mut() {
            *left -= n;
            if n == 0 || *left == 0 {
                break;
            }
        }
        if n > 0 {
            c.saw_packets(now);
            let want = pool.len() as u32;
            x.fill.fill(&mut pool, want);
        } else if spec.wakeup == Wakeup::Spin && x.fill.needs_wakeup() {
            c.wakeups += 1;
            x.fill.wakeup();
        }
    }
}

#[expect(clippy::too_many_arguments, reason = "one loop's state, kept explicit")]
fn l2fwd(
    spec: &WorkerSpec,
    x: &mut Xsk,
    umem: &Umem,
    mut pool: Vec<Frame>,
    end: Instant,
    stop: &AtomicBool,
    meter: &mut Meter<'_>,
    c: &mut Counts,
) -> anyhow::Result<()> {
    let mut first_of_packet = true;
    let mut stopped = None;
    loop {
        let now = Instant::now();
        if receiver_done(spec, now, end, stop, c.window.map(|w| w.1), &mut stopped) {
            break;
        }
        meter.tick(now, c.packets, c.bytes);
        // Completed TX frames go back to the fill ring.
        x.comp.complete(&mut pool, spec.batch * 4);
        if !pool.is_empty() {
            let n = pool.len() as u32;
            x.fill.fill(&mut pool, n);
        }
        if spec.wakeup == Wakeup::Poll && !x.rx.poll(100) {
            continue;
        }
        let mut batch = x.tx.batch(spec.batch);
        let room = batch.remaining();
        if room == 0 {
            c.ring_full += 1;
        }
        let n = x.rx.recv(room, |mut d: RxDesc| {
            if first_of_packet && d.len >= 12 {
                let off = d.offset as usize;
                let data = umem.frame_mut(&mut d.frame);
                let (dst, src) = data[off..off + 12].split_at_mut(6);
                dst.swap_with_slice(src);
            }
            first_of_packet = !d.contd;
            c.bytes += u64::from(d.len);
            c.packets += u64::from(!d.contd);
            // Room was reserved for every descriptor we take.
            let _ = batch.push(TxDesc {
                frame: d.frame,
                offset: d.offset,
                len: d.len,
                contd: d.contd,
            });
        });
        drop(batch);
        if n > 0 {
            c.saw_packets(now);
        }
        // Kick whenever descriptors wait on the TX ring, also on turns that
        // received nothing (a full TX ring leaves no room to receive).
        if x.tx.in_flight() > 0 && (spec.wakeup != Wakeup::Spin || x.tx.needs_wakeup()) {
            c.wakeups += 1;
            x.tx.kick().context("sendto (TX wakeup) failed")?;
        }
        if n == 0 && spec.wakeup == Wakeup::Spin && x.fill.needs_wakeup() {
            c.wakeups += 1;
            x.fill.wakeup();
        }
    }
    Ok(())
}

#[expect(clippy::too_many_arguments, reason = "one loop's state, kept explicit")]
fn txonly(
    spec: &WorkerSpec,
    x: &mut Xsk,
    umem: &Umem,
    pool: Vec<Frame>,
    pkt: &[u8],
    end: Instant,
    stop: &AtomicBool,
    meter: &mut Meter<'_>,
    c: &mut Counts,
) -> anyhow::Result<()> {
    let fs = umem.frame_size().bytes();
    let k = pkt.len().div_ceil(fs);
    let last_len = (pkt.len() - (k - 1) * fs) as u32;
    // Frame i holds piece (i mod k) of the packet, written once here; a
    // chain takes one free frame of each position.
    let mut free: Vec<Vec<Frame>> = (0..k).map(|_| Vec::with_capacity(pool.len())).collect();
    for mut f in pool {
        let pos = f.addr().frame_index(umem.frame_size()) % k;
        let piece = &pkt[pos * fs..((pos + 1) * fs).min(pkt.len())];
        umem.frame_mut(&mut f)[..piece.len()].copy_from_slice(piece);
        free[pos].push(f);
    }
    let mut done: Vec<Frame> = Vec::with_capacity(umem.frame_count() as usize);
    let size = pkt.len() as u64;
    let mut completed_pieces: u64 = 0;
    let mut submitted_pieces: u64 = 0;
    let mut stamper = spec.stamp.then(|| Stamper::new(pkt, fs));
    let mut chain: Vec<Frame> = Vec::with_capacity(k);
    let loop_start = Instant::now();
    let loop_end = loop {
        let now = Instant::now();
        if now >= end || stop.load(Ordering::Relaxed) {
            break now;
        }
        c.packets = completed_pieces / k as u64;
        c.bytes = c.packets * size;
        meter.tick(now, c.packets, c.bytes);
        let max_comp = spec.batch * k as u32 * 2;
        if k == 1 {
            // One position: completed frames go straight to its list.
            completed_pieces += u64::from(x.comp.complete(&mut free[0], max_comp));
        } else {
            completed_pieces += u64::from(x.comp.complete(&mut done, max_comp));
            for f in done.drain(..) {
                let pos = f.addr().frame_index(umem.frame_size()) % k;
                free[pos].push(f);
            }
        }
        if spec.wakeup == Wakeup::Poll {
            x.poll(libc::POLLOUT, 100);
        }
        let mut batch = x.tx.batch(spec.batch * k as u32);
        // Whole chains that fit both the reserved slots and the free
        // frames, worked out once per batch, as the C reference does.
        let room = batch.remaining() as usize / k;
        let frames = free.iter().map(Vec::len).min().unwrap_or(0);
        if room == 0 {
            c.ring_full += 1;
        } else if frames == 0 {
            c.no_frames += 1;
        }
        let queued = room.min(frames);
        for _ in 0..queued {
            // Each list holds at least `queued` frames.
            chain.extend(free.iter_mut().filter_map(Vec::pop));
            if let Some(st) = stamper.as_mut() {
                // The frames came from the free lists: userspace owns them,
                // their last transmission has completed.
                st.stamp(umem, &mut chain);
            }
            for (pos, frame) in chain.drain(..).enumerate() {
                let last = pos + 1 == k;
                let _ = batch.push(TxDesc {
                    frame,
                    offset: 0,
                    len: if last { last_len } else { fs as u32 },
                    contd: !last,
                });
            }
        }
        drop(batch);
        submitted_pieces += (queued * k) as u64;
        let outstanding = submitted_pieces > completed_pieces;
        if outstanding && (spec.wakeup != Wakeup::Spin || x.tx.needs_wakeup()) {
            c.wakeups += 1;
            if let Err(e) = x.tx.kick() {
                return Err(e).context("sendto (TX wakeup) failed");
            }
        }
    };
    // Wait (bounded) for what was submitted in the window to complete, so
    // that it is counted; the rate still divides by the send window.
    let drain_end = Instant::now() + Duration::from_secs(1);
    while completed_pieces < submitted_pieces && Instant::now() < drain_end {
        c.wakeups += 1;
        let _ = x.tx.kick();
        completed_pieces += u64::from(x.comp.complete(&mut done, u32::MAX));
        done.clear();
        std::hint::spin_loop();
    }
    if completed_pieces < submitted_pieces {
        tracing::warn!(
            "{} descriptors still not completed 1 s after the run",
            submitted_pieces - completed_pieces
        );
    }
    c.packets = completed_pieces / k as u64;
    c.bytes = c.packets * size;
    c.window = Some((loop_start, loop_end));
    Ok(())
}

/// Offsets in the txonly packet (Ethernet + IPv4 without options + TCP
/// without options).
const TCP_OFFSET: usize = 14 + 20;
const PAYLOAD_OFFSET: usize = TCP_OFFSET + 20;

/// `--stamp`: writes generation `n` over the payload of packet `n` and
/// fixes the TCP checksum, just before the packet goes to the TX ring.
struct Stamper {
    /// Sum of the pseudo-header and the TCP header with a zero checksum.
    base: u16,
    /// Packet length.
    len: usize,
    /// UMEM frame size (one piece of the packet per frame).
    frame_size: usize,
    /// The generation of the last stamped packet.
    generation: u64,
}

impl Stamper {
    fn new(pkt: &[u8], frame_size: usize) -> Self {
        let ip = |o: usize| Ipv4Addr::new(pkt[o], pkt[o + 1], pkt[o + 2], pkt[o + 3]);
        let mut tcp_header = [0u8; 20];
        tcp_header.copy_from_slice(&pkt[TCP_OFFSET..PAYLOAD_OFFSET]);
        tcp_header[16..18].fill(0);
        let pseudo =
            checksum::pseudo_v4(ip(14 + 12), ip(14 + 16), 6, (pkt.len() - TCP_OFFSET) as u32);
        Stamper {
            base: checksum::add(pseudo, checksum::sum(&tcp_header)),
            len: pkt.len(),
            frame_size,
            generation: 0,
        }
    }

    /// Stamps the next generation into `chain` (piece `i` of the packet in
    /// `chain[i]`, the header already in piece 0).
    fn stamp(&mut self, umem: &Umem, chain: &mut [Frame]) {
        self.generation += 1;
        let pattern = self.generation.to_be_bytes();
        let mut sum = self.base;
        let fs = self.frame_size;
        for (pos, frame) in chain.iter_mut().enumerate() {
            let start = pos * fs;
            let end = (start + fs).min(self.len);
            let from = PAYLOAD_OFFSET.max(start);
            if from >= end {
                continue;
            }
            let data = &mut umem.frame_mut(frame)[from - start..end - start];
            let mut phase = pattern;
            phase.rotate_left((from - PAYLOAD_OFFSET) % 8);
            for chunk in data.chunks_mut(8) {
                chunk.copy_from_slice(&phase[..chunk.len()]);
            }
            sum = checksum::combine(sum, checksum::sum(data), from - TCP_OFFSET);
        }
        let csum = !sum;
        let head = umem.frame_mut(&mut chain[0]);
        head[TCP_OFFSET + 16..TCP_OFFSET + 18].copy_from_slice(&csum.to_be_bytes());
    }
}

/// Both sides of the test network: txonly on B against rxdrop/l2fwd on A.
#[derive(Debug, Serialize)]
struct TestnetReport {
    mtu: u32,
    size: usize,
    tx: WorkerReport,
    rx: WorkerReport,
    /// Packets sent by B that A did not count.
    lost: i64,
}

fn run_testnet(
    args: &XskBenchArgs,
    spec: impl Fn(&'static str, String, Mode) -> WorkerSpec,
) -> anyhow::Result<()> {
    let mtu = (args.size as u32).saturating_sub(14).max(1500);
    let net = TestNet::new(TestNetConfig {
        mtu,
        queues: 1,
        offloads: false,
    })
    .context("building the test network")?;
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let (tx_core, rx_core) = if cores.len() >= 2 {
        (Some(cores[0].id), Some(cores[1].id))
    } else {
        (None, None)
    };
    let mut a = spec(side_name(args.mode), net.a.iface.clone(), args.mode);
    let given = args.cores.as_ref().map_or(&[][..], |c| &c.0[..]);
    a.core = given.first().copied().or(rx_core);
    let mut b = spec("tx", net.b.iface.clone(), Mode::Txonly);
    b.core = given.get(1).copied().or(tx_core);
    b.src_ip = Some(net.b.ip4);
    b.dst_ip = Some(net.a.ip4);
    b.dst_mac = Some(net.a.mac);
    // The receiver starts first and ends after the sender: once B is done
    // (its sends completed), A is stopped and counts what still arrives
    // until the link has been quiet for a while. Its own --duration only
    // bounds a sender that never ends.
    a.duration = args.duration + Duration::from_secs(30);
    a.drain = Some(Duration::from_millis(200));
    if !args.json {
        println!(
            "# test network: {} ({}) <-> {} ({}), MTU {mtu}",
            net.a.iface,
            net.a.ns.name(),
            net.b.iface,
            net.b.ns.name()
        );
    }
    let (txc, rxc) = mpsc::channel();
    let stop = interrupt_flag()?;
    let json = args.json;
    let (ra, rb) = std::thread::scope(|sc| -> anyhow::Result<_> {
        let txc_a = txc.clone();
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let stop = &*stop;
        let ha = named(a.queue).spawn_scoped(sc, move || {
            let _g = net.a.ns.enter()?;
            let r = worker(&a, stop, &txc_a, Some(ready_tx));
            if r.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            drop(txc_a);
            r
        })?;
        // Wait until A is bound and its fill ring full before B sends; if A
        // failed instead, B never starts.
        let _ = ready_rx.recv_timeout(Duration::from_secs(10));
        if ha.is_finished() {
            drop(txc);
            let ra = ha.join().expect("rx worker panicked");
            return Err(ra
                .err()
                .unwrap_or_else(|| anyhow::anyhow!("side A ended before B started")));
        }
        let txc_b = txc.clone();
        let hb = named(b.queue)
            .spawn_scoped(sc, move || {
                let r = net
                    .b
                    .ns
                    .enter()
                    .map_err(anyhow::Error::from)
                    .and_then(|_g| worker(&b, stop, &txc_b, None));
                // Done or failed: either way A stops (after draining).
                stop.store(true, Ordering::Relaxed);
                drop(txc_b);
                r
            })
            .inspect_err(|_| stop.store(true, Ordering::Relaxed))?;
        drop(txc);
        for msg in rxc {
            if !json {
                print_msg(&msg);
            }
        }
        let rb = hb.join().expect("tx worker panicked");
        let ra = ha.join().expect("rx worker panicked");
        Ok((ra?, rb?))
    })?;
    let report = TestnetReport {
        mtu,
        size: args.size,
        lost: rb.packets as i64 - ra.packets as i64,
        tx: rb,
        rx: ra,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report.tx);
        print_report(&report.rx);
        println!(
            "sent {} received {} ({} not received)",
            report.tx.packets, report.rx.packets, report.lost
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A txonly-like packet of `size` bytes, built by etherparse.
    fn packet(size: usize) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([198, 18, 0, 2], [198, 18, 0, 3], 64)
            .tcp(40000, 5203, 1, 65535)
            .ack(1);
        let payload: Vec<u8> = (0..size - PAYLOAD_OFFSET)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut pkt = Vec::new();
        b.write(&mut pkt, &payload).unwrap();
        assert_eq!(pkt.len(), size);
        pkt
    }

    /// Stamps `rounds` generations into the frames of one chain and checks
    /// each result with etherparse: single generation, valid TCP checksum.
    fn stamp_and_check(size: usize, frame_size: FrameSize) {
        let umem = Umem::new(UmemConfig {
            frame_count: 8,
            frame_size,
            headroom: 0,
            hugepages: false,
        })
        .unwrap();
        let fs = frame_size.bytes();
        let pkt = packet(size);
        let k = size.div_ceil(fs);
        let mut chain: Vec<Frame> = umem.take_frames().into_iter().take(k).collect();
        for (pos, f) in chain.iter_mut().enumerate() {
            let piece = &pkt[pos * fs..((pos + 1) * fs).min(size)];
            umem.frame_mut(f)[..piece.len()].copy_from_slice(piece);
        }
        let mut st = Stamper::new(&pkt, fs);
        for generation in 1..=3u64 {
            st.stamp(&umem, &mut chain);
            let mut wire = Vec::new();
            for (pos, f) in chain.iter_mut().enumerate() {
                let len = (size - pos * fs).min(fs);
                wire.extend_from_slice(&umem.frame_mut(f)[..len]);
            }
            let h = etherparse::PacketHeaders::from_ethernet_slice(&wire).unwrap();
            let Some(etherparse::NetHeaders::Ipv4(ip, _)) = &h.net else {
                panic!("no IPv4 header")
            };
            let Some(etherparse::TransportHeader::Tcp(tcp)) = &h.transport else {
                panic!("no TCP header")
            };
            let payload = h.payload.slice();
            assert_eq!(payload.len(), size - PAYLOAD_OFFSET);
            let want: Vec<u8> = (0..payload.len())
                .map(|i| generation.to_be_bytes()[i % 8])
                .collect();
            assert_eq!(payload, &want[..], "size {size}, generation {generation}");
            assert_eq!(
                tcp.checksum,
                tcp.calc_checksum_ipv4(ip, payload).unwrap(),
                "size {size}, generation {generation}"
            );
        }
    }

    #[test]
    fn stamp_keeps_the_tcp_checksum_valid_in_one_frame_and_in_chains() {
        for size in [60, 61, 64, 1500, 4096] {
            stamp_and_check(size, FrameSize::from_bytes(4096).unwrap());
        }
        // Chains: the payload (and the checksum sum) continues across frames.
        for size in [2049, 4097, 6000, 9000] {
            stamp_and_check(size, FrameSize::from_bytes(2048).unwrap());
        }
    }
}
