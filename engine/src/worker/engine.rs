//! The engine: sets up steering, sockets and workers for one interface,
//! runs a bulk transfer (active opens to one peer, or a listener), and
//! tears everything down again.
//!
//! Setup (the only place that may fail with an error for the user):
//!
//! 1. the interface: index, MAC, MTU, driver (`--rx-csum auto`: trust a veth
//!    peer, whose kernel hands over partial checksums; verify on NICs);
//! 2. addresses: for active opens the kernel's route to the peer (it must
//!    leave through this interface), its preferred source address and the
//!    next hop's MAC, resolved over netlink (ARP / neighbour discovery
//!    triggered when missing); for a listener the given address, or every
//!    address of the interface (IPv4, and IPv6 but link-local: one
//!    listener for all, each family with its own MSS) — replies to a
//!    client go to the MAC its packets came from;
//! 3. local ports reserved with kernel sockets (bound, never listening) so
//!    that no other program takes them while xtcp owns them; active opens
//!    use a block of consecutive ports, steered by one rule;
//! 4. the steering program (packets that match with no socket on their
//!    queue are dropped, so the kernel never resets xtcp's flows), one UMEM
//!    and AF_XDP socket per queue, registered in the XSKMAP;
//! 5. the segment size: the MTU less headers (or `mss`), clamped to one
//!    frame where the device takes only single-frame packets in zero-copy
//!    mode (`xdp-zc-max-segs` 1, e.g. virtio-net), multi-buffer otherwise.
//!
//! Run: one pinned thread per queue ([`super::thread`]); this thread
//! collects counters and connection reports over a channel and decides when
//! the run is over. Stop (the interrupt flag — SIGINT/SIGTERM in the CLI —
//! or the transfer done): workers send FINs (a reset instead where a
//! stream's source had more to give: the receiver then knows it is short),
//! reset what is not closed after the grace period (after an application's
//! failure, [`App::failed`], as soon as the peer acknowledged the FIN), and
//! exit; then the steering program detaches (it is held by a BPF link, so
//! even a crash leaves nothing attached) and only then the sockets close,
//! so that a packet of xtcp's never meets a queue without a socket
//! (`no_socket` in the XDP summary counts any that does).
//!
//! TIME-WAIT at exit: a worker that is stopping leaves as soon as every
//! connection it holds is closed or in TIME-WAIT with the ACK of the peer's
//! FIN sent (the kernel has taken it off the TX ring: in copy mode that is
//! the transmission itself; a zero-copy driver has it on its own ring) — our
//! FIN acknowledged, the peer's FIN received and acknowledged. That is all
//! a Linux application waits for (a lingering `close()` returns once its
//! FIN is acknowledged; the TIME-WAIT stays with the kernel), and nothing
//! sent or received can be lost after it. It does not wait out
//! [`tcp::Config::time_wait`]: xtcp's TIME-WAIT cannot outlive the process
//! (once xtcp has exited, its port belongs to the kernel again), so waiting
//! would only delay the exit, by a second by default. The cost: if
//! our last ACK is lost, the peer, in LAST-ACK, retransmits its FIN after
//! its RTO and gets a reset from our kernel, which closes it as the ACK
//! would have (its application has already seen the end of the stream).
//! While other connections of the worker are still open, TIME-WAIT goes on
//! as usual and re-acknowledges retransmitted FINs.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, bounded};

use super::bulk::Source;
pub use super::conn::COOKIE_BUDGET;
use super::conn::SinkKind;
use super::cores::{neighbour_warning, others_on, shared_within, validate_cores, worker_cores};
pub use super::msg::{AppIn, AppOut};
use super::msg::{ConnReport, Msg, WorkerCounters};
use super::port::{IpMarks, PortConfig, RxCsum, TxLayout, XskPort};
use super::registry::Registry;
use super::thread::{Ctl, Planned, Shared, WaitStrategy, Worker};
use crate::frame::FrameSize;
use crate::netlink::NetlinkSocket;
use crate::netlink::addr::serving_addrs;
use crate::netlink::neigh::{ResolveError, get_route, resolve};
use crate::probe::NetdevFeatures;
use crate::tcp::{self, FourTuple, IsnGenerator};
use crate::xdp::{AttachMode, NoSocket, Rule, SteerCounters, Steering, XdpError};
use crate::xsk::{
    BindInfo, BindMode, RELEASE_WAIT, Umem, UmemConfig, Xsk, XskConfig, XskError, driver_name,
    iface_ipv4, iface_mac, iface_mtu, ifindex,
};

/// XDP headroom the kernel keeps in front of a received packet.
const XDP_HEADROOM: usize = 256;
/// How long the kernel's neighbour resolution tries before it gives up
/// (three probes a second apart, its defaults), and so the longest a
/// connect waits for the peer's MAC (less if its connect timeout is less).
const NEIGH_WAIT: Duration = Duration::from_secs(3);
/// Descriptors per packet that copy mode takes (`MAX_SKB_FRAGS` + 1).
const COPY_MAX_DESCS: usize = 18;

/// The transmit layout as the user gives it (DESIGN.md, "Segment layout in
/// UMEM").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TxLayoutPolicy {
    /// Zero-copy: chained, unless the device takes fewer than three
    /// descriptors per packet (`xdp-zc-max-segs`; virtio-net's is 1). Copy
    /// mode: single when a full segment and its headers fit one frame (the
    /// kernel then copies one descriptor into one buffer), else chained.
    #[default]
    Auto,
    /// A header descriptor, then descriptors into the send buffer's frames
    /// (needs multi-buffer AF_XDP, `XDP_USE_SG`).
    Chained,
    /// One descriptor per segment, the headers in the frame's headroom; the
    /// MSS is at most a frame less its headroom.
    Single,
}

/// The UMEM frame size as the user gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FrameSizePolicy {
    /// 2048 bytes where the single-descriptor layout is used and a full
    /// segment with its headers fits such a frame (up to an MTU of about
    /// 1,700 bytes), else 4096; worked out at start, once the MTU and the
    /// device are known, with the layout.
    #[default]
    Auto,
    /// This size.
    Fixed(FrameSize),
}

/// Bytes at the start of each send-buffer frame kept for a segment's
/// headers in the single-descriptor layout (Ethernet + IPv6 + TCP with
/// options is at most 114; 256 keeps the slot a whole number of 256-byte
/// sum blocks).
pub const TX_HEADROOM: usize = 256;

/// Receive-checksum policy as the user gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RxCsumPolicy {
    /// Verify every segment.
    Verify,
    /// Accept without verifying.
    Trust,
    /// Trust on veth (partial checksums from the peer), verify elsewhere.
    Auto,
}

/// Everything about how the engine runs.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The interface.
    pub iface: String,
    /// Queues 0..queues, one worker each.
    pub queues: u32,
    /// Core of each worker (default: the cores of this process's affinity
    /// mask, those no other xtcp worker holds first, wrapping; see
    /// [`super::cores::worker_cores`]).
    pub cores: Option<Vec<usize>>,
    /// Native, generic or auto XDP.
    pub xdp_mode: AttachMode,
    /// Copy, zero-copy or auto.
    pub bind: BindMode,
    /// How idle workers wait.
    pub wait: WaitStrategy,
    /// UMEM frame size.
    pub frame_size: FrameSizePolicy,
    /// UMEM frames per queue (`None`: [`default_frames`] of the ring and
    /// the frame size).
    pub frames: Option<u32>,
    /// RX and TX ring entries (fill and completion rings get twice that).
    pub ring: u32,
    /// RX descriptors per batch (a turn takes batches until the RX ring is
    /// empty or a whole ring's worth was taken).
    pub batch: u32,
    /// Most TX frames (descriptors) one loop turn puts on the TX ring, for
    /// all its connections together (each takes at least half, so up to
    /// two connections send a burst each per turn, round-robin over
    /// turns): segments at MTU 1500 (one frame each), about bytes ÷ frame
    /// size at large MTUs; a connection's turn sends at least one segment.
    /// What one turn queues goes out before the ACKs that arrive meanwhile
    /// are read, so this bounds the queueing delay the engine adds (see
    /// docs/BENCHMARKS.md).
    pub tx_burst: u32,
    /// How segments are laid out in UMEM for transmission.
    pub tx_layout: TxLayoutPolicy,
    /// Back the UMEM with huge pages.
    pub hugepages: bool,
    /// Receive checksums.
    pub rx_csum: RxCsumPolicy,
    /// MSS to announce and send (default: MTU − IP − TCP headers).
    pub mss: Option<u16>,
    /// A connection's send buffer, bytes of UMEM frames, fixed; `None`
    /// auto-tunes it from [`DEFAULT_SEND_INITIAL`] up to
    /// [`DEFAULT_SEND_BUFFER`] ([`EngineConfig::send_buffer_bytes`]). Sets
    /// the `send_frames` and `send_initial` of `tcp` at start, once the
    /// frame size is known.
    pub send_buffer: Option<usize>,
    /// TCP parameters (its `mss`, and the send buffer's frames, are set
    /// at start from the MTU and the frame size).
    pub tcp: tcp::Config,
    /// Between FIN and RST when stopping.
    pub grace: Duration,
    /// A bulk receiver's connection (`recv`'s) that receives no byte for
    /// this long while its stream is open is reset and fails with
    /// [`tcp::ConnectionError::ReceiveTimeout`] (`recv --rcv-timeout`: a
    /// sender that died without a word would hold it for ever).
    pub rcv_timeout: Option<Duration>,
    /// Counter reports from workers.
    pub report_interval: Duration,
    /// Connections a worker holds at most.
    pub max_conns: usize,
    /// Bytes a received stream holds at most (`recv -n`): one that brings
    /// more is reset as soon as its bytes pass it (its sender learns the
    /// stream failed, and nothing more is written); `None`: no limit.
    pub stream_limit: Option<u64>,
    /// Keep every connection's report for [`EngineReport::connections`]
    /// (the default: a run's summary is made of them). A run that serves
    /// connection after connection for as long as it is left running
    /// (`serve`, `recv --keep-listening`) sets it `false`: each report then
    /// goes to `progress` once ([`Progress::ended`]) and is dropped (or
    /// kept there, as many as the caller chooses), so the run's memory does
    /// not grow with the connections it served.
    pub keep_reports: bool,
}

impl EngineConfig {
    /// Checks what can be checked before touching any interface, and the
    /// values that cannot work, naming the value and what is accepted:
    /// queue count, that every core in `cores` exists and is in this
    /// process's CPU affinity mask, ring, batch, burst, MSS and connect
    /// timeout. [`run`] calls it first; a command may call it earlier,
    /// before it prints or opens anything.
    pub fn validate(&self) -> Result<(), EngineError> {
        if self.queues == 0 {
            return Self::bad("--queues must be at least 1".into());
        }
        if let Some(c) = &self.cores {
            if c.len() != self.queues as usize {
                let n = |k: usize, w: &str| format!("{k} {w}{}", if k == 1 { "" } else { "s" });
                return Self::bad(format!(
                    "--cores lists {} for {} (--queues): give one core per queue",
                    n(c.len(), "core"),
                    n(self.queues as usize, "queue")
                ));
            }
            validate_cores("--cores", c)?;
        }
        if !self.ring.is_power_of_two() || !(64..=16384).contains(&self.ring) {
            return Self::bad(format!(
                "--ring {} must be a power of two in 64..=16384",
                self.ring
            ));
        }
        // The rings hold up to 4 × ring frames (fill 2 × ring, RX and TX
        // one each); the send buffers get the rest, at least a ring's worth
        // (with none, every connection sends from two segments).
        if let Some(f) = self.frames.filter(|&f| f < 5 * self.ring) {
            return Self::bad(format!(
                "--frames {f} is too few for --ring {r}: the rings hold up to {} (fill 2 × ring, \
                 RX and TX one ring each), and the send buffers need at least a ring's worth \
                 more: give at least {} (5 × ring), or leave --frames out (4 × ring and {} MiB \
                 of frames for the send buffers)",
                4 * self.ring,
                5 * self.ring,
                SEND_BYTES >> 20,
                r = self.ring
            ));
        }
        if self.batch == 0 || self.batch > self.ring {
            return Self::bad(format!(
                "--batch {} must be between 1 and the RX ring's size ({})",
                self.batch, self.ring
            ));
        }
        if self.tx_burst == 0 {
            return Self::bad("--tx-burst must be at least 1".into());
        }
        if let Some(m) = self.mss.filter(|&m| m < MIN_MSS_V4) {
            return Self::bad(format!(
                "--mss {m} is too small: give at least {MIN_MSS_V4} ({MIN_MSS_V6} over IPv6; \
                 RFC 9293), or leave it out to use the MTU's"
            ));
        }
        if let Some(n) = self
            .send_buffer
            .filter(|n| !(MIN_SEND_BUFFER..=1 << 30).contains(n))
        {
            return Self::bad(format!(
                "--sndbuf must be `auto` or between 16K and 1G, not {n} bytes"
            ));
        }
        if let Some(t) = self.tcp.connect_timeout.filter(|t| t.is_zero()) {
            return Self::bad(format!("--connect-timeout {t:?} must be above zero"));
        }
        Ok(())
    }

    /// The most bytes of frames a connection's send buffer holds: the
    /// auto-tuned buffer's ceiling, or the fixed size rounded up to a
    /// multiple of 4096 bytes (a whole number of frames of either size).
    pub fn send_buffer_bytes(&self) -> usize {
        self.send_buffer
            .map_or(DEFAULT_SEND_BUFFER, |n| n.next_multiple_of(4096))
    }

    fn bad(m: String) -> Result<(), EngineError> {
        Err(EngineError::Config(m))
    }
}

/// UMEM per queue for the send buffers, bytes of frames beyond what the
/// rings hold, by default (`--frames` left out): 8,192 frames of 4 KiB
/// (16,384 frames in all with the default rings), or 16,384 of 2 KiB. A
/// fixed count would leave less to the send buffers the larger the rings:
/// 16,384 frames with 4096-entry rings left none, and every connection
/// sent from two segments' worth (`xtcp bench --ring 4096` ran at a
/// quarter of the rate). Bytes rather than frames, so that where a frame
/// carries a segment of 1,448 bytes either way (the single-descriptor
/// layout at MTU 1500) the smaller frames hold twice the stream.
pub const SEND_BYTES: usize = 32 << 20;

/// A connection's send buffer by default, bytes of frames: at most
/// [`DEFAULT_SEND_BUFFER`], auto-tuned from [`DEFAULT_SEND_INITIAL`]
/// (`tcp::Config::send_initial`).
pub const DEFAULT_SEND_BUFFER: usize = 4 << 20;
/// Where an auto-tuned send buffer starts, bytes of frames.
pub const DEFAULT_SEND_INITIAL: usize = 256 << 10;
/// The smallest fixed send buffer: four page-sized frames.
const MIN_SEND_BUFFER: usize = 16 << 10;

/// The default UMEM frames per queue for `ring`-entry rings and frames of
/// `size`: the rings' 4 × ring and [`SEND_BYTES`] of frames.
pub fn default_frames(ring: u32, size: FrameSize) -> u32 {
    4 * ring + (SEND_BYTES / size.bytes()) as u32
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            iface: String::new(),
            queues: 1,
            cores: None,
            xdp_mode: AttachMode::Auto,
            bind: BindMode::Auto,
            wait: WaitStrategy::Adaptive,
            frame_size: FrameSizePolicy::Auto,
            frames: None,
            ring: 2048,
            batch: 64,
            tx_burst: 64,
            tx_layout: TxLayoutPolicy::Auto,
            hugepages: false,
            rx_csum: RxCsumPolicy::Auto,
            mss: None,
            send_buffer: None,
            tcp: tcp::Config {
                recv_buffer: 4 << 20,
                ..tcp::Config::default()
            },
            grace: Duration::from_secs(2),
            rcv_timeout: None,
            report_interval: Duration::from_millis(100),
            max_conns: 1024,
            stream_limit: None,
            keep_reports: true,
        }
    }
}

/// The transmit layout of `layout` and the UMEM frame size of `frames`,
/// for segments of up to `mss` bytes behind `ip_hl` bytes of IP header,
/// where the device takes `zc_segs` descriptors per packet in zero-copy
/// mode (`None`: copy mode).
///
/// The layout: zero-copy, chained (the device reads the payload where it
/// lies) unless the device takes too few descriptors per packet; copy
/// mode, single whenever a full segment fits a frame with its headers
/// (the kernel copies every descriptor into an skb of its own, so one
/// descriptor per segment is cheaper: one copy, no page fragments to
/// allocate or, without scatter-gather, to linearise), else chained.
///
/// The frame size, auto: 2048 bytes where that layout is single with
/// 2048-byte frames — a full segment with its headers fits one less
/// [`TX_HEADROOM`], which also fits it received, after the kernel's XDP
/// headroom, as one descriptor: an MSS of 1,698 at most over IPv4 (1,678
/// over IPv6), MTU 1500 and a little beyond. Every frame then carries one
/// segment either way, so a 4096-byte frame would leave more than half of
/// itself unused: with 2048-byte ones the same UMEM, and a send buffer of
/// the same bytes of frames, holds twice the stream. Else 4096, a page:
/// the chained layout's payload frames hold the stream whole, and larger
/// segments take fewer descriptors.
fn layout_and_frames(
    layout: TxLayoutPolicy,
    frames: FrameSizePolicy,
    zc_segs: Option<u32>,
    ip_hl: usize,
    mss: usize,
) -> (TxLayout, FrameSize) {
    let layout_with = |f: FrameSize| match layout {
        TxLayoutPolicy::Chained => TxLayout::Chained,
        TxLayoutPolicy::Single => TxLayout::Single,
        TxLayoutPolicy::Auto => match zc_segs {
            Some(s) if s < 3 => TxLayout::Single,
            Some(_) => TxLayout::Chained,
            None if 14 + ip_hl + 60 + mss <= f.bytes() - TX_HEADROOM => TxLayout::Single,
            None => TxLayout::Chained,
        },
    };
    let small = FrameSize::F2048;
    let f = match frames {
        FrameSizePolicy::Fixed(f) => f,
        FrameSizePolicy::Auto
            if layout_with(small) == TxLayout::Single
                && 14 + ip_hl + 60 + mss <= small.bytes() - TX_HEADROOM =>
        {
            small
        }
        FrameSizePolicy::Auto => FrameSize::F4096,
    };
    (layout_with(f), f)
}

/// Packets a veth queue holds in front of its XDP program
/// (`VETH_RING_SIZE` of the kernel's drivers/net/veth.c): what the peer
/// sends beyond it while XDP has not run yet is dropped before XDP (the
/// peer's TX dropped), whatever room the RX ring has.
pub const VETH_RING: u32 = 256;

/// The smallest `--mss` taken over IPv4: RFC 9293's default send MSS,
/// which every IPv4 host must accept (576-byte datagrams).
pub const MIN_MSS_V4: u16 = 536;
/// The smallest `--mss` taken over IPv6 (1280-byte minimum MTU).
pub const MIN_MSS_V6: u16 = 1220;

/// What to do.
#[derive(Debug)]
pub enum Role {
    /// Open one connection per source to `remote`.
    Connect {
        /// The peer.
        remote: SocketAddr,
        /// Our address (default: the route's preferred source).
        local: Option<IpAddr>,
        /// One source per connection.
        sources: Vec<Source>,
    },
    /// Plan `count` connections to `remote` for an application
    /// ([`run_app`]), which opens them one by one with
    /// [`Opener::open`] and speaks on them through [`AppIn`] / [`AppOut`]
    /// (e.g. the iperf3 client: the control connection, then each stream).
    ConnectApp {
        /// The peer.
        remote: SocketAddr,
        /// Our address (default: the route's preferred source).
        local: Option<IpAddr>,
        /// Connections planned.
        count: usize,
        /// Our ports (iperf3's `--cport`): connections 1.. from this port
        /// on, connection 0 (the control connection) the port after them;
        /// None: a free block of ephemeral ports.
        port: Option<u16>,
    },
    /// Accept connections on `on`'s addresses.
    Listen {
        /// The address, or which of the interface's ([`listen_addrs`]).
        on: ListenOn,
        /// Port.
        port: u16,
        /// Where received data goes.
        sinks: SinkKind,
        /// Keep serving after the first connection closed.
        keep_listening: bool,
    },
}

/// The addresses a listener serves: one, or those of its interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenOn {
    /// This address (`-B ADDR`).
    Addr(IpAddr),
    /// Every address of the interface: IPv4, and IPv6 but link-local.
    Every,
    /// Every IPv4 address of the interface (iperf3's `-4`).
    EveryV4,
    /// Every IPv6 address of the interface but link-local ones (`-6`).
    EveryV6,
}

impl ListenOn {
    /// Whether an address of the interface is one of these.
    pub fn takes(self, ip: IpAddr) -> bool {
        match self {
            ListenOn::Addr(a) => a == ip,
            ListenOn::Every => true,
            ListenOn::EveryV4 => ip.is_ipv4(),
            ListenOn::EveryV6 => ip.is_ipv6(),
        }
    }
}

/// The loopback interface is refused: on it the host talks to itself,
/// both ends of a flow are on this side of XDP, its TCP checksums are left
/// unfilled and nothing answers ARP (a listener on it answered nothing,
/// a sender waited for ARP).
///
/// An interface that is down is an error that says how to bring it up
/// (a listener on it waited for ever, a sender found no route); one up
/// without a carrier (a cable out, a veth's other end down) is said, as
/// nothing arrives or leaves until it has one. Where netlink cannot tell,
/// nothing is said.
fn check_link_up(iface: &str, index: u32) -> Result<(), EngineError> {
    use crate::netlink::route::{LinkSelector, get_link};
    let Ok(link) =
        NetlinkSocket::route().and_then(|mut s| get_link(&mut s, LinkSelector::Index(index)))
    else {
        return Ok(());
    };
    if link.is_loopback() {
        return Err(EngineError::Config(format!(
            "{iface} is the loopback interface: xtcp runs TCP with another host over a \
             network interface, and on loopback this host only talks to itself; give \
             --iface a network interface, or, to try xtcp on one machine, a veth pair between \
             two network namespaces (README, \"Trying it on one machine\")"
        )));
    }
    if !link.is_up() {
        return Err(EngineError::Config(format!(
            "{iface} is down: bring it up first (`ip link set {iface} up`)"
        )));
    }
    if !link.has_carrier() {
        tracing::warn!(
            "{iface} is up but has no carrier: nothing arrives or leaves until it has (a cable, \
             the switch port, or a veth pair's other end down?)"
        );
    }
    Ok(())
}

/// Errors of engine setup.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// AF_XDP socket or interface error.
    #[error(transparent)]
    Xsk(#[from] XskError),
    /// Steering program error.
    #[error(transparent)]
    Xdp(#[from] XdpError),
    /// Next-hop resolution failed.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// The configuration cannot work; the message says why and what to do.
    #[error("{0}")]
    Config(String),
    /// Reserving a port with the kernel failed.
    #[error("reserving {addr} with a kernel socket: {source}{hint}")]
    Reserve {
        /// Address and port.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
        /// What to do.
        hint: &'static str,
    },
    /// A worker thread could not start or died.
    #[error("worker thread: {0}")]
    Worker(String),
}

/// What a run did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EngineReport {
    /// Interface.
    pub iface: String,
    /// Steering program mode.
    pub xdp_mode: AttachMode,
    /// How each queue's socket is bound.
    pub bind: Vec<BindInfo>,
    /// The UMEM the queues share.
    pub umem: UmemReport,
    /// Receive-checksum policy in force.
    pub rx_csum: RxCsum,
    /// Transmit layout in force.
    pub tx_layout: TxLayout,
    /// Interface MTU.
    pub mtu: u32,
    /// The receive queues the interface has (sysfs), where known.
    pub rx_queues: Option<u32>,
    /// The gateway of the route to the peer a command connected to
    /// (`None`: on-link, or a listener).
    pub gateway: Option<IpAddr>,
    /// MSS announced (over IPv4 where both families are served).
    pub mss: u16,
    /// MSS announced over IPv6 where a listener serves both families
    /// (20 bytes less than over IPv4: the longer header in the same packet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mss_ipv6: Option<u16>,
    /// Connections, in order of their end (none where
    /// [`EngineConfig::keep_reports`] is `false`).
    #[serde(skip)]
    pub connections: Vec<ConnReport>,
    /// Final counters of each worker.
    pub workers: Vec<WorkerCounters>,
    /// Steering program counters.
    pub steer: Option<SteerCounters>,
    /// The driver's own count of failed XDP redirects over the run, per
    /// queue (veth: the increase of `ethtool -S` `rx_queue_N_drops`).
    pub driver_drops: crate::probe::DriverDrops,
    /// Seconds from the first connection established to the last ended.
    pub seconds: f64,
    /// CPU seconds of the whole process over the run (user + system).
    pub cpu_seconds: f64,
    /// Of those, in user space and in the kernel.
    pub cpu: CpuTimes,
    /// Stopped by the interrupt flag.
    pub interrupted: bool,
    /// Stopped because the interface went away (deleted, or its network
    /// namespace with it): its sockets can neither send nor receive.
    pub iface_gone: bool,
}

/// The UMEM a run used: its size and how much of it is on huge pages.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct UmemReport {
    /// Bytes.
    pub bytes: u64,
    /// Bytes of a frame ([`EngineConfig::frame_size`] resolved).
    pub frame_size: usize,
    /// Of those, on 2 MiB pages once the sockets were bound (`None`: not
    /// known, `/proc/self/smaps` unreadable). Reserved hugepages
    /// (`--hugepages`) are all of it; otherwise the kernel's transparent
    /// huge pages gave what it could.
    pub huge_bytes: Option<u64>,
    /// On reserved hugepages (`--hugepages`) rather than transparent ones.
    pub reserved_hugepages: bool,
}

/// Live totals for progress displays, and for metrics the latest counters
/// of each worker and of the steering program. Built on every control-loop
/// turn without allocating: `workers` borrows the control thread's copy.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress<'a> {
    /// The latest counters each worker reported (index = worker = queue),
    /// every [`EngineConfig::report_interval`].
    pub workers: &'a [WorkerCounters],
    /// The steering program's counters, read about every
    /// [`EngineConfig::report_interval`] (None until the first read, or
    /// where the map could not be read).
    pub steer: Option<SteerCounters>,
    /// Payload bytes sent, all workers.
    pub bytes_sent: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
    /// Retransmissions.
    pub retransmits: u64,
    /// Connections ended, since the start.
    pub closed: usize,
    /// The reports of the connections that ended since the last call, in
    /// the order they ended (each is given once; the last ones with the
    /// run's last call).
    pub ended: &'a [ConnReport],
    /// Received packets dropped for a bad TCP checksum.
    pub drop_checksum: u64,
    /// Received packets dropped for truncated or malformed headers.
    pub drop_malformed: u64,
    /// The addresses and port a listener serves (empty for active opens).
    pub listen: &'a [SocketAddr],
    /// Every socket is bound in zero-copy mode, as the kernel confirmed it
    /// (`XDP_OPTIONS`); `false` is copy mode.
    pub zero_copy: bool,
    /// The interface went away: the engine stops, and what it sends
    /// (resets too) no longer goes out ([`EngineReport::iface_gone`]).
    pub iface_gone: bool,
}

/// How often a listener reads its interface's addresses again.
const ADDRS_EVERY: Duration = Duration::from_secs(1);

/// A listener's interface addresses that `on` takes, read again: one added
/// since (`last`) is not served, one of those served that is gone is still
/// served while peers reach it; each change is said once, as a warning.
/// (The steering rules and port reservations are made at start: a new
/// address needs a restart.) `sock` is opened once, on the first read; a
/// read that fails changes nothing.
fn follow_addrs(
    iface: &str,
    index: u32,
    on: ListenOn,
    listening: &[SocketAddr],
    sock: &mut Option<NetlinkSocket>,
    last: &mut Vec<IpAddr>,
) {
    if sock.is_none() {
        *sock = NetlinkSocket::route().ok();
    }
    let Some(Ok((now, _tentative))) = sock.as_mut().map(|s| serving_addrs(s, index)) else {
        return;
    };
    let now: Vec<IpAddr> = now.into_iter().filter(|&ip| on.takes(ip)).collect();
    let served = |ip: &IpAddr| listening.iter().any(|l| l.ip() == *ip);
    for ip in now.iter().filter(|ip| !last.contains(ip)) {
        if served(ip) {
            tracing::info!("{ip} is on {iface} again: served");
        } else {
            tracing::warn!(
                "{ip} was added to {iface}: not served (xtcp serves the addresses it found at \
                 start: restart it, or give -B {ip}, to serve this one)"
            );
        }
    }
    for ip in last.iter().filter(|ip| !now.contains(ip) && served(ip)) {
        tracing::warn!("{ip} was removed from {iface}: still served, as long as peers reach it");
    }
    *last = now;
}

/// A kernel socket that keeps a port ours.
#[derive(Debug)]
struct Reservation(#[expect(dead_code, reason = "held for its effect")] OwnedFd);

fn reserve(addr: SocketAddr) -> std::io::Result<Reservation> {
    use rustix::net::{AddressFamily, SocketType, bind, socket};
    let fam = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = socket(fam, SocketType::STREAM, None)?;
    // Binds over TIME-WAIT remains of an earlier user of the port (a bench
    // runs kernel and xtcp servers in turn); a socket that is bound or
    // listening still makes this fail.
    rustix::net::sockopt::set_socket_reuseaddr(&fd, true)?;
    bind(&fd, &addr)?;
    // Then not any more: a kernel server binding the port afterwards with
    // SO_REUSEADDR (iperf3 -s, on any address that covers ours) would
    // otherwise share it with a socket that does not listen, and listen on
    // a port whose packets XDP takes from it. Now its `listen` fails with
    // EADDRINUSE.
    rustix::net::sockopt::set_socket_reuseaddr(&fd, false)?;
    Ok(Reservation(fd))
}

/// The addresses a listener serves: the one given, or of `iface` (index
/// `index`) every IPv4 address and every IPv6 address but link-local ones
/// that `on` takes (see [`serving_addrs`]), IPv4 first.
pub fn listen_addrs(iface: &str, index: u32, on: ListenOn) -> Result<Vec<IpAddr>, EngineError> {
    listen_addrs_and_tentative(iface, index, on).map(|(a, _)| a)
}

/// What a listener on `port` would meet, checked without setting anything
/// up (`serve --check-config`): the settings ([`EngineConfig::validate`]),
/// the interface and its receive queues, the addresses it would serve
/// ([`listen_addrs`], returned), and that the kernel would let it have the
/// port on each. A port in use counts as fine there: a running server (the
/// one a configuration is checked for, say) holds it.
pub fn check_listener(
    cfg: &EngineConfig,
    on: ListenOn,
    port: u16,
) -> Result<Vec<IpAddr>, EngineError> {
    cfg.validate()?;
    let index = ifindex(&cfg.iface)?;
    check_queues(cfg)?;
    let ips = listen_addrs(&cfg.iface, index, on)?;
    for &ip in &ips {
        let at = SocketAddr::new(ip, port);
        match reserve(at) {
            Err(e) if e.kind() != std::io::ErrorKind::AddrInUse => {
                return Err(EngineError::Reserve {
                    addr: at,
                    hint: unbindable(ip, &e),
                    source: e,
                });
            }
            _ => {}
        }
    }
    Ok(ips)
}

/// `--queues` against the receive queues the interface has: more is an
/// error; fewer, a warning (what arrives on the others never reaches
/// xtcp). Returns the interface's count, where sysfs says it.
fn check_queues(cfg: &EngineConfig) -> Result<Option<u32>, EngineError> {
    let n = rx_queues(&cfg.iface);
    let (q, iface) = (cfg.queues, &cfg.iface);
    match n {
        Some(n) if q > n => {
            return Err(EngineError::Config(format!(
                "--queues {q}: {iface} has {n} receive queue{}: give at most {n} (`ethtool -L` \
                 sets a NIC's channels)",
                if n == 1 { "" } else { "s" }
            )));
        }
        Some(n) if q < n => tracing::warn!(
            "{iface} has {n} receive queues and xtcp serves {q} (--queues {q}): a packet of \
             xtcp's connections that comes in on another queue (where the NIC's hash, or on \
             veth the peer's sending CPU, puts it) is dropped, counted as `no socket`, and its \
             sender sends it again after a timeout — a handshake can take seconds: give \
             --queues {n}, or give {iface} {q} queue{} (`ethtool -L`)",
            if q == 1 { "" } else { "s" }
        ),
        _ => {}
    }
    Ok(n)
}

/// The receive queues `iface` has (`/sys/class/net/IFACE/queues/rx-N`);
/// None where sysfs does not say.
fn rx_queues(iface: &str) -> Option<u32> {
    let dir = std::fs::read_dir(format!("/sys/class/net/{iface}/queues")).ok()?;
    let n = dir
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count();
    u32::try_from(n).ok().filter(|&n| n > 0)
}

/// [`listen_addrs`], and the addresses of the interface that `on` would
/// take but that are tentative (IPv6 duplicate address detection not
/// finished, or failed).
fn listen_addrs_and_tentative(
    iface: &str,
    index: u32,
    on: ListenOn,
) -> Result<(Vec<IpAddr>, Vec<IpAddr>), EngineError> {
    if let ListenOn::Addr(a) = on {
        return Ok((vec![a], Vec::new()));
    }
    let found = NetlinkSocket::route().and_then(|mut s| serving_addrs(&mut s, index));
    let taken = |v: Vec<IpAddr>| v.into_iter().filter(|&ip| on.takes(ip)).collect::<Vec<_>>();
    let (found, tentative) = match found {
        Ok((a, t)) => (Ok(taken(a)), taken(t)),
        Err(e) => (Err(e), Vec::new()),
    };
    // What the errors below say of the tentative addresses.
    let still = if tentative.is_empty() {
        String::new()
    } else {
        let t: Vec<String> = tentative.iter().map(IpAddr::to_string).collect();
        format!(" ({} still tentative)", t.join(", "))
    };
    match found {
        Ok(a) if a.len() > crate::xdp::MAX_RULES => Err(EngineError::Config(format!(
            "{iface} has {} addresses to listen on, more than xtcp steers at once ({}): give \
             the address to listen on (-B ADDR)",
            a.len(),
            crate::xdp::MAX_RULES
        ))),
        Ok(a) if !a.is_empty() => Ok((a, tentative)),
        Ok(_) if on == ListenOn::EveryV4 => Err(EngineError::Config(format!(
            "{iface} has no IPv4 address to listen on (-4){still}: add one, drop -4, or give the \
             address to listen on (-B ADDR)"
        ))),
        Ok(_) if on == ListenOn::EveryV6 => Err(EngineError::Config(format!(
            "{iface} has no IPv6 address to listen on (-6), not link-local, that has passed \
             duplicate address detection{still}: add one, drop -6, or give the address to \
             listen on (-B ADDR)"
        ))),
        Ok(_) => Err(EngineError::Config(format!(
            "{iface} has no address to listen on (an IPv4 address, or an IPv6 address, not \
             link-local, that has passed duplicate address detection){still}: add one, or give \
             the address to listen on (-B ADDR)"
        ))),
        Err(e) => Err(EngineError::Config(format!(
            "reading {iface}'s addresses (RTM_GETADDR): {e}: give the address to listen on \
             (-B ADDR)"
        ))),
    }
}

/// A fresh 64-bit seed: the standard hasher's random keys over the time.
pub(super) fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    h.finish()
}

/// Reserves `n` consecutive ports on `ip`.
/// `n` consecutive ports from `base` on (`--cport`), or an error that
/// names the one taken.
fn reserve_at(ip: IpAddr, base: u16, n: usize) -> Result<(u16, Vec<Reservation>), EngineError> {
    if usize::from(base) + n > 65536 {
        return Err(EngineError::Config(format!(
            "port {base}: {n} consecutive ports from it go past 65535; give at most {}",
            65536 - n
        )));
    }
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let at = SocketAddr::new(ip, base + i as u16);
        held.push(reserve(at).map_err(|e| EngineError::Reserve {
            addr: at,
            hint: if e.kind() == std::io::ErrorKind::AddrInUse {
                " (the port is in use: choose another --cport)"
            } else {
                unbindable(ip, &e)
            },
            source: e,
        })?);
    }
    Ok((base, held))
}

/// Why a kernel socket could not take `ip` (an error `e` other than the
/// port in use), for the user to act on: a privileged port needs
/// CAP_NET_BIND_SERVICE; a link-local IPv6 address needs the
/// interface scope xtcp does not carry; an address still tentative (IPv6
/// duplicate address detection not finished, or failed) cannot be bound
/// yet; else it is likely not one of this host's.
fn unbindable(ip: IpAddr, e: &std::io::Error) -> &'static str {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        return " (a port below net.ipv4.ip_unprivileged_port_start, 1024 by default, needs \
                 CAP_NET_BIND_SERVICE: run as root, add that capability (under systemd to the \
                 unit's CapabilityBoundingSet), or choose a port from 1024 up)";
    }
    if let IpAddr::V6(v6) = ip
        && v6.is_unicast_link_local()
    {
        return " (a link-local address needs its interface scope, which xtcp does not carry: \
                 give a global or unique-local address)";
    }
    let tentative = NetlinkSocket::route()
        .and_then(|mut s| crate::netlink::addr::get_addrs(&mut s))
        .is_ok_and(|a| a.iter().any(|a| a.addr == ip && !a.usable));
    if tentative {
        " (the address is tentative: IPv6 duplicate address detection has not finished, or \
         failed; start again once `ip address` no longer says tentative)"
    } else {
        " (is the address configured on the interface?)"
    }
}

/// The kernel's range of local ports for connections that name none, in
/// this network namespace (`net.ipv4.ip_local_port_range`, which IPv6
/// uses too), as `(low, high)`; Linux's default where it cannot be read.
fn local_port_range() -> (u32, u32) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| {
            let mut w = t.split_whitespace().map(str::parse::<u32>);
            Some((w.next()?.ok()?, w.next()?.ok()?))
        })
        .filter(|&(low, high)| low <= high && high <= 65535)
        .unwrap_or((32768, 60999))
}

/// `n` consecutive free ports on `ip` from the kernel's local port range,
/// at a random place in it.
fn reserve_block(ip: IpAddr, n: usize) -> Result<(u16, Vec<Reservation>), EngineError> {
    let (low, high) = local_port_range();
    // Bases from which `n` ports stay in the range.
    let Some(span) = (high - low + 1)
        .checked_sub(n as u32 - 1)
        .filter(|&s| s > 0)
    else {
        return Err(EngineError::Config(format!(
            "{n} connections need {n} local ports, and this namespace's range \
             (net.ipv4.ip_local_port_range) is {low}-{high}: {} ports; widen it, or give \
             fewer connections",
            high - low + 1
        )));
    };
    let mut last = None;
    for _ in 0..64 {
        let base = (low + (random_u64() % u64::from(span)) as u32) as u16;
        let mut held = Vec::with_capacity(n);
        let mut ok = true;
        for i in 0..n {
            match reserve(SocketAddr::new(ip, base + i as u16)) {
                Ok(r) => held.push(r),
                Err(e) => {
                    if e.kind() != std::io::ErrorKind::AddrInUse {
                        return Err(EngineError::Reserve {
                            addr: SocketAddr::new(ip, base + i as u16),
                            hint: unbindable(ip, &e),
                            source: e,
                        });
                    }
                    last = Some(e);
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            return Ok((base, held));
        }
    }
    Err(EngineError::Reserve {
        addr: SocketAddr::new(ip, 0),
        source: last.unwrap_or_else(|| std::io::Error::other("no free block")),
        hint: " (no block of free consecutive ports found; use fewer connections)",
    })
}

fn zc_max_segs(iface: &str) -> Option<u32> {
    match crate::probe::probe(iface).ok()?.xdp.netdev {
        NetdevFeatures::Reported {
            xdp_zc_max_segs, ..
        } => xdp_zc_max_segs,
        NetdevFeatures::Unknown { .. } => None,
    }
}

/// CPU seconds of this process (all threads), split as the kernel accounts
/// them: in user space, and in the kernel on its behalf (system calls such
/// as AF_XDP's `sendto` kicks, and on veth the peer's receive path).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct CpuTimes {
    /// User time, seconds.
    pub user: f64,
    /// System time, seconds.
    pub system: f64,
}

impl CpuTimes {
    /// User plus system.
    pub fn total(&self) -> f64 {
        self.user + self.system
    }

    /// What was used since `earlier`.
    pub fn since(&self, earlier: CpuTimes) -> CpuTimes {
        CpuTimes {
            user: (self.user - earlier.user).max(0.0),
            system: (self.system - earlier.system).max(0.0),
        }
    }
}

/// CPU time this process has used so far (all threads), from
/// `getrusage(RUSAGE_SELF)`; zero if that fails (it cannot for the
/// calling process).
pub fn process_times() -> CpuTimes {
    crate::sys::process_times().map_or_else(
        |_| CpuTimes::default(),
        |(u, s)| CpuTimes {
            user: u.as_secs_f64(),
            system: s.as_secs_f64(),
        },
    )
}

/// CPU seconds this process has used so far (all threads): user + system
/// of [`process_times`].
pub fn process_cpu() -> f64 {
    process_times().total()
}

/// The clock the control thread gives an [`App`]: a message from a
/// worker at the time the worker sent it ([`Msg::app`]: just after what it
/// says happened, a control message's bytes or a stream's count), not when
/// this thread got to it, which a busy machine can make many milliseconds
/// later; and never earlier than a time already given, so that the
/// application's clock only runs forward.
struct AppClock {
    last: Instant,
}

impl AppClock {
    fn new() -> AppClock {
        AppClock {
            last: Instant::now(),
        }
    }

    /// For a message the worker stamped `at`.
    fn at(&mut self, at: Instant) -> Instant {
        self.last = self.last.max(at);
        self.last
    }

    /// For the application's own turn.
    fn now(&mut self) -> Instant {
        self.at(Instant::now())
    }
}

/// An application that owns the connections of a listener
/// ([`SinkKind::App`]) and runs in the control thread: it learns of
/// connections and their bytes through [`AppIn`] and gives orders through
/// the [`AppOut`] sender each connection brings.
pub trait App {
    /// A message from a connection; `now` is when its worker sent it, not
    /// when the control thread got to it (and never before a time already
    /// given).
    fn handle(&mut self, now: Instant, msg: AppIn);
    /// Called on every control-loop turn (at least every millisecond).
    fn poll(&mut self, now: Instant);
    /// Called once before the workers start; [`Role::ConnectApp`] opens its
    /// connections through `opener`.
    fn start(&mut self, _opener: Opener) {}
    /// True once the application is done: the engine then stops (FIN, then
    /// RST after the grace period) and returns.
    fn finished(&self) -> bool {
        false
    }
    /// True if it finished with an error after which it leaves at once:
    /// the engine stops without waiting for the peers' FINs. A connection
    /// whose own FIN (and so all its data) the peer acknowledged is reset
    /// then instead of lingering until the peer closes too, where a
    /// process exiting after an error would leave that to its kernel.
    fn failed(&self) -> bool {
        false
    }
    /// The run is interrupted (the interrupt flag: SIGINT or SIGTERM in the
    /// CLI) before the application finished: what it writes now (iperf3's
    /// `CLIENT_TERMINATE`) goes ahead of the FINs; the engine stops next.
    fn interrupt(&mut self, _now: Instant) {}
    /// The workers have ended (after the run was stopped, however): every
    /// message that will come has been handled, and nothing more will.
    fn stopped(&mut self) {}
}

/// Opens the connections planned by [`Role::ConnectApp`].
#[derive(Debug, Clone)]
pub struct Opener {
    shared: Arc<Shared>,
}

impl Opener {
    /// Opens planned connection `i` (its worker sends the SYN on its next
    /// turn); [`AppIn::Opened`] with id `i` follows once it is established,
    /// or [`AppIn::Closed`] if it fails.
    pub fn open(&self, i: usize) {
        self.open_marked(i, IpMarks::default());
    }

    /// [`open`](Self::open), its packets marked with `marks` from the SYN
    /// on (as a socket whose `IP_TOS` or flow label is set before
    /// `connect`).
    pub fn open_marked(&self, i: usize, marks: IpMarks) {
        if let Some(p) = self.shared.plan.get(i) {
            p.tos.store(marks.tos, Ordering::Relaxed);
            p.flow_label.store(marks.flow_label, Ordering::Relaxed);
            p.go.store(true, Ordering::Release);
        }
    }

    /// Connections planned.
    pub fn planned(&self) -> usize {
        self.shared.plan.len()
    }
}

/// Runs a transfer to the end, or until `interrupt` is set; `progress` is
/// called about every 100 ms.
pub fn run(
    cfg: &EngineConfig,
    role: Role,
    interrupt: &AtomicBool,
    progress: impl FnMut(&Progress<'_>),
) -> Result<EngineReport, EngineError> {
    run_app(cfg, role, interrupt, progress, None)
}

/// [`run`] with an application for a listener's connections (give the
/// listener [`SinkKind::App`]).
pub fn run_app(
    cfg: &EngineConfig,
    role: Role,
    interrupt: &AtomicBool,
    mut progress: impl FnMut(&Progress<'_>),
    mut app: Option<&mut dyn App>,
) -> Result<EngineReport, EngineError> {
    cfg.validate()?;
    let iface = cfg.iface.as_str();
    let index = ifindex(iface)?;
    check_link_up(iface, index)?;
    let rx_queues = check_queues(cfg)?;
    let mac = iface_mac(iface)?;
    let mtu = iface_mtu(iface)?;

    // Addresses, ports, plan.
    let mut reservations = Vec::new();
    let isn = IsnGenerator::new(random_u64(), Instant::now());
    let mut plan = Vec::new();
    let mut sources = Vec::new();
    let mut next_hop_mac = [0u8; 6];
    // The route's MTU toward the peer we connect to, where it has one, and
    // its gateway.
    let mut route_mtu: Option<u32> = None;
    let mut gateway = None;
    let mut listen = Vec::new();
    let mut deferred = false;
    let mut cport = None;
    let role = match role {
        Role::ConnectApp {
            remote,
            local,
            count,
            port,
        } => {
            deferred = true;
            cport = port;
            Role::Connect {
                remote,
                local,
                sources: (0..count).map(|_| Source::Empty).collect(),
            }
        }
        r => r,
    };
    // A listener's addresses: which it takes (followed while it runs).
    let mut listen_on = None;
    let (locals, rules, sinks, keep_listening) = match role {
        Role::ConnectApp { .. } => unreachable!("mapped to Connect above"),
        Role::Connect {
            remote,
            local,
            sources: srcs,
        } => {
            if srcs.is_empty() || srcs.len() > u16::MAX as usize / 2 {
                return Err(EngineError::Config(
                    "the number of connections must be between 1 and 32767".into(),
                ));
            }
            // The route first: a peer behind another interface is an error
            // to report at once, not a neighbour to wait for.
            if let Ok(route) = NetlinkSocket::route()
                .map_err(|_| ())
                .and_then(|mut s| get_route(&mut s, remote.ip()).map_err(|_| ()))
            {
                if route.oif != index {
                    return Err(EngineError::Config(format!(
                        "the kernel routes {} through {}, not {iface} (index {index}): run xtcp on \
                        that interface, or add a route to {} via {iface}",
                        remote.ip(),
                        crate::xsk::describe_ifindex(route.oif),
                        remote.ip()
                    )));
                }
            }
            // The peer's MAC: waited for as long as the kernel's own
            // resolution tries, or the connect timeout if that is shorter.
            let wait = cfg
                .tcp
                .connect_timeout
                .map_or(NEIGH_WAIT, |t| t.min(NEIGH_WAIT));
            let hop = resolve(remote.ip(), wait).map_err(|e| match e {
                ResolveError::Netlink(n) if n.errno() == Some(libc::EPERM) => {
                    EngineError::Config(format!(
                        "asking the kernel for {}'s link-layer address (ARP or neighbour \
                         discovery) was refused: that needs CAP_NET_ADMIN; {}",
                        remote.ip(),
                        crate::xdp::net_admin_hint()
                    ))
                }
                e => e.into(),
            })?;
            if hop.route.oif != index {
                return Err(EngineError::Config(format!(
                    "the kernel routes {} through {}, not {iface} (index {index}): run xtcp on \
                    that interface, or add a route to {} via {iface}",
                    remote.ip(),
                    crate::xsk::describe_ifindex(hop.route.oif),
                    remote.ip()
                )));
            }
            next_hop_mac = hop.mac;
            route_mtu = hop.route.mtu;
            gateway = hop.route.gateway;
            let local = match local.or(hop.route.prefsrc) {
                Some(l) => l,
                None => iface_ipv4(iface)?.map(IpAddr::V4).ok_or_else(|| {
                    EngineError::Config(format!(
                        "no source address for {}: give one with -B ADDR",
                        remote.ip()
                    ))
                })?,
            };
            if local.is_ipv4() != remote.is_ipv4() {
                return Err(EngineError::Config(format!(
                    "local address {local} and peer {remote} are of different families"
                )));
            }
            let n = srcs.len();
            let (base, held) = match cport {
                Some(p) => reserve_at(local, p, n)?,
                None => reserve_block(local, n)?,
            };
            reservations = held;
            let n_workers = cfg.queues as usize;
            for (i, src) in srcs.into_iter().enumerate() {
                let port = match cport {
                    // The data connections from the port asked for, the
                    // control connection after them.
                    Some(_) if i == 0 => base + (n - 1) as u16,
                    Some(_) => base + (i - 1) as u16,
                    None => base + i as u16,
                };
                let tuple = FourTuple {
                    local: SocketAddr::new(local, port),
                    remote,
                };
                let (tx, rx) = bounded(1);
                let _ = tx.send(src);
                sources.push(tx);
                plan.push(Planned {
                    tuple,
                    iss: isn.isn(&tuple, Instant::now()),
                    opener: i % n_workers,
                    source: rx,
                    go: AtomicBool::new(!deferred),
                    tos: AtomicU8::new(0),
                    flow_label: AtomicU32::new(0),
                });
            }
            let rule = Rule {
                addr: Some(local),
                ports: base..=base + (plan.len() - 1) as u16,
            };
            (vec![local], vec![rule], SinkKind::Discard, false)
        }
        Role::Listen {
            on,
            port,
            sinks,
            keep_listening,
        } => {
            listen_on = Some(on);
            let (ips, tentative) = listen_addrs_and_tentative(iface, index, on)?;
            for t in tentative {
                tracing::warn!(
                    "{t} on {iface} is tentative (IPv6 duplicate address detection has not \
                     finished, or failed): not served; start again once `ip address` no \
                     longer says tentative, or give -B another address"
                );
            }
            let mut rules = Vec::new();
            for &ip in &ips {
                let at = SocketAddr::new(ip, port);
                reservations.push(reserve(at).map_err(|e| EngineError::Reserve {
                    hint: if e.kind() == std::io::ErrorKind::AddrInUse {
                        " (another program uses this port, or a connection of a kernel socket \
                         bound to it without SO_REUSEADDR is in TIME-WAIT (`ss -tan`, for up to \
                         a minute): stop it, wait, or choose another port)"
                    } else {
                        unbindable(ip, &e)
                    },
                    addr: at,
                    source: e,
                })?);
                listen.push(at);
                rules.push(Rule {
                    addr: Some(ip),
                    ports: port..=port,
                });
            }
            (ips, rules, sinks, keep_listening)
        }
    };
    drop(sources);

    // Segment size and frame layout, worked out for the longer header where
    // a listener serves both families (IPv6's, 20 bytes more than IPv4's);
    // its IPv4 connections then carry 20 bytes more payload in the same
    // packets (`mss_v4` below).
    let v6 = locals.iter().any(IpAddr::is_ipv6);
    let dual = v6 && locals.iter().any(IpAddr::is_ipv4);
    let ip_hl = if v6 { 40 } else { 20 };
    if let Some(m) = cfg.mss.filter(|&m| ip_hl == 40 && m < MIN_MSS_V6) {
        let v4_only = if dual {
            ", or serve IPv4 only (-4)"
        } else {
            ""
        };
        return Err(EngineError::Config(format!(
            "--mss {m} is too small for IPv6: give at least {MIN_MSS_V6} (RFC 9293, from \
             IPv6's 1280-byte minimum MTU), or leave it out to use the MTU's{v4_only}"
        )));
    }
    // What bounds the payload whatever the header: --mss, a frame.
    let mut payload_cap = cfg.mss.map_or(usize::MAX, usize::from);
    // A route to the peer with an MTU below the interface's (set on it, or
    // a path MTU the kernel learned) bounds the segments, as it bounds the
    // kernel's: a hop that takes less drops the larger ones.
    let path_mtu = match route_mtu.filter(|&m| m < mtu) {
        Some(m) => {
            tracing::info!(
                "the route to the peer has an MTU of {m}, below {iface}'s {mtu}: the segments \
                 fit {m}"
            );
            m
        }
        None => mtu,
    };
    let link_mss = (path_mtu as usize).saturating_sub(ip_hl + 20);
    let mut mss = cfg.mss.map_or(link_mss, |m| (m as usize).min(link_mss));
    // (Over IPv4 beside IPv6, 20 bytes more: `mss_v4` below.)
    let most = link_mss + if dual { 20 } else { 0 };
    if let Some(m) = cfg.mss.filter(|&m| usize::from(m) > most) {
        tracing::info!("--mss {m} is more than {iface}'s MTU of {mtu} carries: MSS {most}");
    }
    // Every connection transmits (its ACKs at least).
    let bind_mode = crate::xsk::tx_bind_mode(cfg.bind, iface);
    let zc_segs = if bind_mode == BindMode::Copy {
        None
    } else {
        zc_max_segs(iface)
    };
    let (layout, frame_size) =
        layout_and_frames(cfg.tx_layout, cfg.frame_size, zc_segs, ip_hl, mss);
    let fs = frame_size.bytes();
    let frames = cfg
        .frames
        .unwrap_or_else(|| default_frames(cfg.ring, frame_size));
    let rx_capacity = fs - XDP_HEADROOM;
    let chain = (14 + ip_hl + 20 + mss).div_ceil(rx_capacity);
    if layout == TxLayout::Chained
        && let Some(segs) = zc_segs
    {
        // A header, and a payload that may start inside a frame.
        if segs < 3 {
            return Err(EngineError::Config(format!(
                "{iface} takes {segs} descriptor(s) per packet in zero-copy mode \
                 (xdp-zc-max-segs), too few for the chained layout (a header and a payload \
                 of up to two pieces): use --tx-layout single, or --bind copy"
            )));
        }
        let most = (segs as usize - 2) * fs;
        if mss > most {
            tracing::info!(
                "{iface} takes at most {segs} descriptors per packet in zero-copy mode: MSS \
                 clamped from {mss} to {most}"
            );
            mss = most;
        }
        payload_cap = payload_cap.min(most);
    }
    // Receiving: a packet larger than a frame needs multi-buffer, which a
    // zero-copy device with one descriptor per packet does not take.
    let mut multi_buffer = chain > 1;
    if let Some(segs) = zc_segs.filter(|&s| (s as usize) < chain) {
        let one = rx_capacity - 14 - ip_hl - 20;
        tracing::warn!(
            "{iface} takes at most {segs} descriptor(s) per packet in zero-copy mode \
             (xdp-zc-max-segs): MSS clamped from {mss} to {one} so that every \
             segment fits one {fs}-byte frame (use --bind copy for full-MTU segments)"
        );
        mss = mss.min(one);
        multi_buffer = false;
    }
    if multi_buffer && chain > COPY_MAX_DESCS {
        return Err(EngineError::Config(format!(
            "an MSS of {mss} needs {chain} descriptors of {fs} bytes per packet, more than \
             AF_XDP takes ({COPY_MAX_DESCS}): use --frame-size 4096 or a smaller --mss"
        )));
    }
    match layout {
        // A header descriptor and the payload's: multi-buffer sending.
        TxLayout::Chained => {
            multi_buffer = true;
            let descs = 2 + (mss + if dual { 20 } else { 0 }).div_ceil(fs);
            if descs > COPY_MAX_DESCS {
                return Err(EngineError::Config(format!(
                    "an MSS of {mss} takes up to {descs} descriptors of {fs} bytes per segment \
                     (a header and the payload), more than AF_XDP takes ({COPY_MAX_DESCS}): use \
                     --frame-size 4096 or a smaller --mss"
                )));
            }
        }
        // Headers and payload in one frame.
        TxLayout::Single => {
            let one = fs - TX_HEADROOM;
            if mss > one {
                tracing::info!(
                    "single-descriptor layout: MSS {mss} clamped to {one} (one {fs}-byte frame \
                     less {TX_HEADROOM} bytes of headroom for the headers)"
                );
                mss = one;
            }
            payload_cap = payload_cap.min(one);
        }
    }
    let mss_v4 = if dual {
        (mss + 20).min(payload_cap)
    } else {
        mss
    };
    let mss_of =
        |ip: IpAddr| u16::try_from(if ip.is_ipv4() { mss_v4 } else { mss }).unwrap_or(u16::MAX);
    // The configuration's MSS is the largest; a listener gives each
    // address its family's.
    let listen: Vec<(SocketAddr, u16)> = listen.into_iter().map(|a| (a, mss_of(a.ip()))).collect();
    let mss_ipv6 = dual.then(|| u16::try_from(mss).unwrap_or(u16::MAX));
    let mss = u16::try_from(mss_v4).unwrap_or(u16::MAX);
    let mut tcp_cfg = cfg.tcp.clone();
    tcp_cfg.mss = mss;
    match layout {
        TxLayout::Chained => tcp_cfg.frame_len = fs.max(1),
        TxLayout::Single => {
            tcp_cfg.frame_len = fs - TX_HEADROOM;
            tcp_cfg.segment_per_frame = true;
        }
    }
    tcp_cfg.send_frames = cfg.send_buffer_bytes() / fs;
    tcp_cfg.send_initial = cfg
        .send_buffer
        .is_none()
        .then_some(DEFAULT_SEND_INITIAL / fs);

    let rx_csum = match cfg.rx_csum {
        RxCsumPolicy::Verify => RxCsum::Verify,
        RxCsumPolicy::Trust => RxCsum::Trust,
        RxCsumPolicy::Auto if driver_name(iface) == "veth" => RxCsum::Trust,
        RxCsumPolicy::Auto => RxCsum::Verify,
    };

    // Steering and sockets.
    let mut steering = Steering::attach(iface, cfg.xdp_mode)?;
    steering.set_no_socket(NoSocket::Drop)?;
    let xsk_cfg = XskConfig {
        rx_size: cfg.ring,
        tx_size: cfg.ring,
        fill_size: cfg.ring * 2,
        comp_size: cfg.ring * 2,
        bind: bind_mode,
        need_wakeup: true,
        multi_buffer,
        tx_budget: Some(cfg.ring),
    };
    // One UMEM for every queue (`XDP_SHARED_UMEM`), `frames` for each: a
    // connection handed over to another queue's worker takes its send
    // buffer, which is UMEM frames, with it.
    let umem = Arc::new(Umem::new(UmemConfig {
        frame_count: frames.saturating_mul(cfg.queues),
        frame_size,
        headroom: 0,
        hugepages: cfg.hugepages,
    })?);
    let mut all_frames = umem.take_frames();
    let mut ports = Vec::new();
    for q in 0..cfg.queues {
        let frames = all_frames.split_off(all_frames.len().saturating_sub(frames as usize));
        let xsk = Xsk::bind_waiting(&umem, iface, q, &xsk_cfg, RELEASE_WAIT)?;
        steering.register(q, &xsk)?;
        ports.push(XskPort::new(
            xsk,
            PortConfig {
                locals: locals.clone().into_boxed_slice(),
                local_mac: mac,
                next_hop_mac,
                rx_csum,
                mtu: mtu as usize,
                layout,
            },
            frames,
        ));
    }
    let bind: Vec<BindInfo> = ports.iter().map(|p| p.xsk().info().clone()).collect();
    let zero_copy = crate::xsk::all_zero_copy(&bind);
    let umem_report = UmemReport {
        bytes: umem.bytes(),
        frame_size: fs,
        huge_bytes: umem.huge_bytes(),
        reserved_hugepages: cfg.hugepages,
    };
    // The driver's redirect-drop counter, before anything is steered.
    let drops0 = crate::probe::driver_redirect_drops(iface, cfg.queues);
    steering.set_rules(&rules)?;

    let n_conns = plan.len();
    // Every queue's listener publishes its half-open connections there too.
    let max_half_open = 1024;
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        failed: AtomicBool::new(false),
        grace: cfg.grace,
        rcv_timeout: cfg.rcv_timeout,
        mtu_at_start: mtu as usize,
        link_mtu: AtomicUsize::new(mtu as usize),
        done: AtomicUsize::new(0),
        tcp: tcp_cfg,
        isn,
        registry: Registry::new(
            plan.len()
                + (cfg.max_conns + super::thread::time_wait_room(cfg.max_conns) + max_half_open)
                    * cfg.queues as usize,
        ),
        deferred,
        plan,
        next_hop_mac,
        listen,
        sinks,
        accepted: AtomicUsize::new(0),
        max_conns: cfg.max_conns,
        stream_limit: cfg.stream_limit,
        max_half_open,
        report_interval: cfg.report_interval,
        wait: cfg.wait,
        batch: cfg.batch,
        tx_burst: cfg.tx_burst.max(1) as usize,
        tx_headroom: match layout {
            TxLayout::Chained => 0,
            TxLayout::Single => TX_HEADROOM,
        },
        driver_queue: (driver_name(iface) == "veth").then_some(VETH_RING as usize),
    });
    if let Some(a) = app.as_mut() {
        a.start(Opener {
            shared: shared.clone(),
        });
    }
    let (tx, rx) = bounded::<Msg>(1024);
    let cores = worker_cores(cfg.cores.as_deref(), ports.len());
    for n in others_on(&cores) {
        for (i, _) in cores.iter().enumerate().filter(|(_, c)| **c == n.core) {
            tracing::warn!("{}", neighbour_warning(&format!("worker {i}"), &n));
        }
    }
    for line in shared_within(&cores) {
        tracing::warn!("{line}");
    }
    let mut handles = Vec::new();
    let (peers, mut inboxes): (Vec<_>, Vec<_>) =
        (0..ports.len()).map(|_| bounded::<Ctl>(4096)).unzip();
    inboxes.reverse();
    let cpu0 = process_times();
    for (i, port) in ports.into_iter().enumerate() {
        let core = cores[i];
        let inbox = inboxes.pop().expect("one inbox per port");
        let w = Worker::new(i, port, shared.clone(), tx.clone(), inbox, peers.clone());
        let h = std::thread::Builder::new()
            .name(format!("xtcp-q{i}"))
            .spawn(move || {
                if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
                    tracing::warn!("could not pin worker {i} to core {core}");
                }
                w.run()
            })
            .map_err(|e| EngineError::Worker(e.to_string()))?;
        handles.push(h);
    }
    drop(tx);

    // Control loop.
    let n = handles.len();
    let mut workers = vec![WorkerCounters::default(); n];
    let listening: Vec<SocketAddr> = shared.listen.iter().map(|l| l.0).collect();
    // Reports in the order they came: all of them, or with `keep_reports`
    // false those not yet given to `progress` (from `given` on).
    let mut connections: Vec<ConnReport> = Vec::new();
    let mut given = 0;
    let mut closed = 0;
    // The first connection established and the last one ended, so far.
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let mut exited = 0;
    let mut interrupted = false;
    let mut iface_gone = false;
    let mut stop_at: Option<Instant> = None;
    let mut died = None;
    // The steering program's counters, for progress: a map read (four
    // syscalls) per report interval, not per turn.
    let mut steer = None;
    let mut steer_read: Option<Instant> = None;
    // A listener's interface addresses as last read (served at start: the
    // listening ones), when, and the socket they are read with.
    let mut addrs: Vec<IpAddr> = listening.iter().map(SocketAddr::ip).collect();
    let mut addrs_read = Instant::now();
    let mut addrs_sock = None;
    let mut app_clock = AppClock::new();
    while exited < n {
        let wait = if app.is_some() {
            Duration::from_millis(1)
        } else {
            Duration::from_millis(100)
        };
        match rx.recv_timeout(wait) {
            Ok(Msg::Counters(i, c)) => workers[i] = c,
            Ok(Msg::Closed(r)) => {
                closed += 1;
                connections.push(*r);
            }
            Ok(Msg::Exited(_)) => exited += 1,
            Ok(Msg::App(at, m)) => {
                if let Some(a) = app.as_mut() {
                    a.handle(app_clock.at(at), m);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if let Some(a) = app.as_mut() {
            // Everything queued, then the application's own clock.
            while let Ok(m) = rx.try_recv() {
                match m {
                    Msg::Counters(i, c) => workers[i] = c,
                    Msg::Closed(r) => {
                        closed += 1;
                        connections.push(*r);
                    }
                    Msg::Exited(_) => exited += 1,
                    Msg::App(at, m) => a.handle(app_clock.at(at), m),
                }
            }
            a.poll(app_clock.now());
        }
        let done = if let Some(a) = app.as_ref() {
            a.finished()
        } else if n_conns > 0 {
            closed >= n_conns
        } else {
            !keep_listening && closed > 0
        };
        if stop_at.is_none() && (done || interrupt.load(Ordering::Relaxed)) {
            interrupted = !done;
            if interrupted && let Some(a) = app.as_mut() {
                a.interrupt(app_clock.now());
            }
            if app.as_ref().is_some_and(|a| a.failed()) {
                shared.failed.store(true, Ordering::Relaxed);
            }
            // Release: the application's last orders, sent on the
            // connections' channels before, are there when a worker sees it.
            shared.stop.store(true, Ordering::Release);
            stop_at = Some(Instant::now());
        }
        // The workers are done: what is left is drained, given to `progress`
        // below, and the loop ends.
        let finished = handles.iter().all(|h| h.is_finished());
        if finished {
            while let Ok(m) = rx.try_recv() {
                match m {
                    Msg::Counters(i, c) => workers[i] = c,
                    Msg::Closed(r) => {
                        closed += 1;
                        connections.push(*r);
                    }
                    Msg::Exited(_) => {}
                    Msg::App(at, m) => {
                        if let Some(a) = app.as_mut() {
                            a.handle(app_clock.at(at), m);
                        }
                    }
                }
            }
            if let Some(a) = app.as_mut() {
                a.stopped();
            }
        }
        if steer_read.is_none_or(|t| t.elapsed() >= cfg.report_interval) {
            steer_read = Some(Instant::now());
            steer = steering.counters().ok();
            // An interface that went away (deleted, or its namespace with
            // it) does not come back: a device of that name later is
            // another one, which these sockets are not bound to. (A link
            // that is only down comes back; the workers wait for it.)
            // (A lookup that fails for another reason, such as no file
            // descriptor left, proves nothing: it is tried again next time.)
            let gone = match ifindex(iface) {
                Ok(i) => i != index,
                Err(e) => matches!(e, XskError::NoInterface { .. }),
            };
            if stop_at.is_none() && gone {
                tracing::warn!(iface, "the interface went away: stopping");
                iface_gone = true;
                shared.stop.store(true, Ordering::Release);
                stop_at = Some(Instant::now());
            }
            if let Some(on) = listen_on
                && stop_at.is_none()
                && addrs_read.elapsed() >= ADDRS_EVERY
            {
                addrs_read = Instant::now();
                follow_addrs(iface, index, on, &listening, &mut addrs_sock, &mut addrs);
            }
            // Its MTU changed (`ip link set … mtu`): the workers follow, as
            // Linux's TCP follows its device's MTU.
            if let Ok(m) = iface_mtu(iface)
                && m as usize != shared.link_mtu.load(Ordering::Relaxed)
            {
                shared.link_mtu.store(m as usize, Ordering::Relaxed);
                tracing::info!(iface, mtu = m, "the interface's MTU changed");
            }
        }
        let new = &connections[given..];
        for r in new {
            first = match (first, r.established) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            last = last.max(Some(r.ended));
        }
        let mut p = Progress {
            workers: &workers,
            steer,
            closed,
            ended: new,
            listen: &listening,
            zero_copy,
            iface_gone,
            ..Progress::default()
        };
        for w in &workers {
            p.bytes_sent += w.tcp_bytes_sent;
            p.bytes_received += w.tcp_bytes_received;
            p.retransmits += w.tcp_retransmits;
            p.drop_checksum += w.port.drop_checksum;
            p.drop_malformed += w.port.drop_malformed;
        }
        progress(&p);
        if cfg.keep_reports {
            given = connections.len();
        } else {
            connections.clear();
        }
        if finished {
            break;
        }
        if stop_at.is_some_and(|t| t.elapsed() > cfg.grace + Duration::from_secs(10)) {
            died = Some("workers did not stop within the grace period".to_owned());
            break;
        }
    }
    // The workers' sockets stay open until the steering program is
    // detached: a peer's late packets of a closed connection (the ones
    // TIME-WAIT would have taken, or a retransmitted FIN) then still meet
    // a socket, unread, instead of a queue without one.
    let mut ports = Vec::with_capacity(n);
    for (i, h) in handles.into_iter().enumerate() {
        if h.is_finished() {
            match h.join() {
                Ok(port) => ports.push(port),
                Err(_) => died = Some(format!("worker {i} panicked")),
            }
        }
    }
    let cpu = process_times().since(cpu0);
    let cpu_seconds = cpu.total();
    let steer = steering.counters().ok();
    let driver_drops = crate::probe::DriverDrops::between(
        &drops0,
        &crate::probe::driver_redirect_drops(iface, cfg.queues),
    );
    let xdp_mode = steering.mode();
    drop(steering);
    drop(ports);
    drop(reservations);
    if let Some(d) = died {
        return Err(EngineError::Worker(d));
    }
    let seconds = match (first, last) {
        (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
        _ => 0.0,
    };
    Ok(EngineReport {
        iface: iface.to_owned(),
        xdp_mode,
        bind,
        umem: umem_report,
        rx_csum,
        tx_layout: layout,
        mtu,
        rx_queues,
        gateway,
        mss,
        mss_ipv6,
        connections,
        workers,
        steer,
        driver_drops,
        seconds,
        cpu_seconds,
        cpu,
        interrupted,
        iface_gone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message's time is the worker's stamp, however late it is handed
    /// over, and the application's clock never runs back: a stamp older
    /// than a time already given gives that time again.
    #[test]
    fn the_application_clock_takes_the_workers_stamps_and_runs_forward() {
        let mut clock = AppClock::new();
        let start = clock.last;
        let seen = start + Duration::from_millis(5);
        assert_eq!(clock.at(seen), seen);
        let turn = start + Duration::from_millis(9);
        assert_eq!(clock.at(turn), turn);
        // Stamped before the turn the application already had.
        assert_eq!(clock.at(seen), turn);
        assert!(clock.now() >= turn);
    }

    /// Auto takes 2048-byte frames exactly where a full segment takes the
    /// single-descriptor layout and fits one with [`TX_HEADROOM`] in
    /// front: up to an MSS of 1,698 over IPv4 and 1,678 over IPv6, in copy
    /// mode or on a device that takes fewer than three descriptors per
    /// packet in zero-copy mode; a given size stays. The layout is single
    /// in copy mode wherever a full segment fits the frame, and in
    /// zero-copy mode where the device takes fewer than three descriptors.
    #[test]
    fn auto_frames_are_small_only_for_one_segment_each() {
        use FrameSizePolicy::{Auto, Fixed};
        use TxLayout::{Chained as C, Single as S};
        use TxLayoutPolicy as L;
        let (small, page) = (FrameSize::F2048, FrameSize::F4096);
        for (layout, zc, ip_hl, mss, want) in [
            (L::Auto, None, 20, 1460, (S, small)),
            (L::Auto, None, 40, 1440, (S, small)),
            (L::Auto, None, 20, 1698, (S, small)),
            (L::Auto, None, 20, 1699, (S, page)),
            (L::Auto, None, 40, 1678, (S, small)),
            (L::Auto, None, 40, 1679, (S, page)),
            (L::Auto, None, 20, 3746, (S, page)),
            (L::Auto, None, 20, 3747, (C, page)),
            (L::Auto, None, 20, 8960, (C, page)),
            (L::Chained, None, 20, 1460, (C, page)),
            (L::Single, None, 20, 1460, (S, small)),
            (L::Single, Some(8), 20, 1460, (S, small)),
            (L::Auto, Some(1), 20, 1460, (S, small)),
            (L::Auto, Some(2), 20, 1460, (S, small)),
            (L::Auto, Some(3), 20, 1460, (C, page)),
            (L::Auto, Some(1), 20, 3000, (S, page)),
        ] {
            let what = format!("{layout:?} {zc:?} {ip_hl} {mss}");
            assert_eq!(
                layout_and_frames(layout, Auto, zc, ip_hl, mss),
                want,
                "{what}"
            );
            // Where auto took the small frame, a full segment fits it,
            // sent and received.
            if want.1 == small && layout == L::Auto && zc.is_none() {
                assert!(14 + ip_hl + 60 + mss <= small.bytes() - TX_HEADROOM);
                assert!(14 + ip_hl + 20 + mss <= small.bytes() - XDP_HEADROOM);
            }
            for f in [small, page] {
                let (l, got) = layout_and_frames(layout, Fixed(f), zc, ip_hl, mss);
                assert_eq!(got, f, "{what}");
                // Copy mode's auto layout follows the frame given.
                if layout == L::Auto && zc.is_none() {
                    let fits = 14 + ip_hl + 60 + mss <= f.bytes() - TX_HEADROOM;
                    assert_eq!(l == S, fits, "{what} {f:?}");
                }
            }
        }
    }

    #[test]
    fn bad_core_lists_are_refused() {
        let cfg = EngineConfig {
            queues: 1,
            cores: Some(vec![usize::MAX]),
            ..EngineConfig::default()
        };
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains(&format!("core {}", usize::MAX)), "{e}");
        let cfg = EngineConfig {
            queues: 2,
            cores: Some(vec![0]),
            ..EngineConfig::default()
        };
        assert!(
            cfg.validate()
                .unwrap_err()
                .to_string()
                .contains("one core per queue")
        );
    }

    /// A UMEM the rings would take whole is refused with the numbers.
    #[test]
    fn frames_must_leave_the_send_buffers_a_ring() {
        let cfg = |frames| EngineConfig {
            ring: 4096,
            frames: Some(frames),
            ..EngineConfig::default()
        };
        let e = cfg(16384).validate().unwrap_err().to_string();
        assert!(
            e.contains("--frames 16384 is too few for --ring 4096") && e.contains("at least 20480"),
            "{e}"
        );
        assert!(cfg(20480).validate().is_ok());
        assert!(EngineConfig::default().validate().is_ok());
    }
}
