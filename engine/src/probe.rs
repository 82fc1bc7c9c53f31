//! `probe`: what an interface and this host offer xtcp, read from the kernel.
//!
//! Per-interface facts come from netlink sockets and ioctls on sockets that
//! [`probe`] creates in the calling thread, so they describe the network
//! namespace that thread is in (a thread that `setns`'d sees its new
//! namespace; `/sys/class/net` would show the sysfs mounter's instead).
//! Host facts (kernel, capabilities, memlock, hugepages) come from `uname`,
//! `getrlimit` and `/proc`.
//!
//! Nothing the report can live without is fatal: a kernel without the
//! generic netlink `netdev` family (before 6.3) gives XDP features
//! "unknown" with the reason; a driver without ethtool channel support gives
//! the queue counts rtnetlink has. Only a missing interface, an invalid name,
//! a refused permission or a failing netlink socket are errors.

use std::fmt::Write as _;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use serde::Serialize;

use crate::caps::{self, CapSet};
use crate::netlink::genl::{self, NetdevDev, XdpFeatures};
use crate::netlink::route::{self, LinkInfo, LinkSelector, XdpAttachment};
use crate::netlink::{NetlinkError, NetlinkSocket};
use crate::sys::{self, Channels};

/// Everything `xtcp probe` reports.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    /// The interface itself.
    pub interface: Interface,
    /// Queue (channel) counts.
    pub queues: Queues,
    /// MTU now and the limits the device accepts.
    pub mtu: Mtu,
    /// XDP and AF_XDP capabilities.
    pub xdp: Xdp,
    /// The running kernel.
    pub kernel: Kernel,
    /// Capabilities and limits of this process.
    pub privileges: Privileges,
    /// 2 MB hugepages for UMEM.
    pub hugepages: Hugepages,
    /// What could not be determined, and why.
    pub notes: Vec<String>,
}

/// Identity and state of the interface.
#[derive(Debug, Clone, Serialize)]
pub struct Interface {
    /// Kernel name.
    pub name: String,
    /// Interface index in its network namespace.
    pub ifindex: u32,
    /// Driver name from `ETHTOOL_GDRVINFO` ("veth", "mlx5_core", …).
    pub driver: Option<String>,
    /// Driver version string.
    pub driver_version: Option<String>,
    /// Firmware version (absent when empty).
    pub firmware: Option<String>,
    /// Bus address (absent for virtual devices).
    pub bus_info: Option<String>,
    /// rtnetlink link kind of virtual devices ("veth", "bridge", …).
    pub kind: Option<String>,
    /// Administratively up.
    pub up: bool,
    /// Operational state ("up", "down", "unknown", …).
    pub operstate: Option<&'static str>,
}

/// Where the queue counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueSource {
    /// `ETHTOOL_GCHANNELS`.
    Ethtool,
    /// `IFLA_NUM_RX_QUEUES` / `IFLA_NUM_TX_QUEUES` (the driver has no
    /// channel support). These are the queues the device allocated, an upper
    /// bound on the ones in use: a bind to a queue below it can still fail.
    Rtnetlink,
}

/// Queue counts. AF_XDP binds to an RX queue id below `rx`.
#[derive(Debug, Clone, Serialize)]
pub struct Queues {
    /// RX queues in use: ethtool's rx + combined channels, else rtnetlink's count.
    pub rx: u32,
    /// TX queues in use: ethtool's tx + combined channels, else rtnetlink's count.
    pub tx: u32,
    /// Where `rx` and `tx` came from.
    pub source: QueueSource,
    /// Raw ethtool channel counts, where the driver reports them.
    pub channels: Option<ChannelCounts>,
    /// RX queues the device was allocated with (`IFLA_NUM_RX_QUEUES`).
    pub allocated_rx: Option<u32>,
    /// TX queues the device was allocated with (`IFLA_NUM_TX_QUEUES`).
    pub allocated_tx: Option<u32>,
}

/// `ETHTOOL_GCHANNELS` as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChannelCounts {
    /// RX-only channels.
    pub rx: u32,
    /// TX-only channels.
    pub tx: u32,
    /// Other channels.
    pub other: u32,
    /// Combined channels.
    pub combined: u32,
    /// Maximum RX-only channels.
    pub max_rx: u32,
    /// Maximum TX-only channels.
    pub max_tx: u32,
    /// Maximum other channels.
    pub max_other: u32,
    /// Maximum combined channels.
    pub max_combined: u32,
}

impl From<Channels> for ChannelCounts {
    fn from(c: Channels) -> Self {
        ChannelCounts {
            rx: c.rx,
            tx: c.tx,
            other: c.other,
            combined: c.combined,
            max_rx: c.max_rx,
            max_tx: c.max_tx,
            max_other: c.max_other,
            max_combined: c.max_combined,
        }
    }
}

/// MTU now and its limits.
#[derive(Debug, Clone, Serialize)]
pub struct Mtu {
    /// Current MTU in bytes.
    pub current: u32,
    /// Smallest settable MTU (kernel ≥ 4.18).
    pub min: Option<u32>,
    /// Largest settable MTU; `None` when the kernel is older than 4.18 or
    /// the driver sets no maximum (see the notes).
    pub max: Option<u32>,
}

/// Whether something is available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Support {
    /// Available.
    Yes,
    /// Not available.
    No,
    /// Could not be determined (see the notes).
    Unknown,
}

impl Support {
    fn from_bool(b: bool) -> Self {
        if b { Support::Yes } else { Support::No }
    }

    /// "yes", "no" or "unknown".
    pub fn as_str(self) -> &'static str {
        match self {
            Support::Yes => "yes",
            Support::No => "no",
            Support::Unknown => "unknown",
        }
    }
}

/// The netdev family's report, or why there is none.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum NetdevFeatures {
    /// The kernel answered `dev-get`.
    Reported {
        /// `xdp-features` decoded ("basic", "redirect", "ndo-xmit",
        /// "xsk-zerocopy", "hw-offload", "rx-sg", "ndo-xmit-sg", "bit-N").
        xdp_features: Vec<String>,
        /// `xdp-features` as the raw bitmask.
        xdp_features_raw: u64,
        /// `xdp-zc-max-segs` (reported for zero-copy devices only).
        xdp_zc_max_segs: Option<u32>,
        /// `xdp-rx-metadata-features` decoded (kernel ≥ 6.8).
        xdp_rx_metadata_features: Option<Vec<String>>,
        /// `xsk-features` decoded (kernel ≥ 6.8).
        xsk_features: Option<Vec<String>>,
    },
    /// No answer; `reason` says why.
    Unknown {
        /// Why the features are unknown.
        reason: String,
    },
}

/// An XDP attach mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum XdpMode {
    /// In the driver (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// In the generic stack (`XDP_FLAGS_SKB_MODE`), on every device.
    Generic,
    /// On the NIC (`XDP_FLAGS_HW_MODE`).
    Offload,
}

impl XdpMode {
    /// "native", "generic" or "offload".
    pub fn as_str(self) -> &'static str {
        match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
            XdpMode::Offload => "offload",
        }
    }
}

/// Whether an attach mode should work. `verified` is false when this is
/// inferred from features rather than tried; a loader that attaches for real
/// can replace the entry with a verified one.
#[derive(Debug, Clone, Serialize)]
pub struct AttachModeSupport {
    /// The mode.
    pub mode: XdpMode,
    /// Whether it should work.
    pub expected: Support,
    /// Whether a real attach confirmed `expected`.
    pub verified: bool,
    /// The evidence.
    pub reason: String,
}

/// XDP capabilities and state.
#[derive(Debug, Clone, Serialize)]
pub struct Xdp {
    /// What the netdev generic netlink family reports.
    pub netdev: NetdevFeatures,
    /// AF_XDP zero-copy (`xsk-zerocopy`).
    pub zero_copy: Support,
    /// Multi-buffer frames in native XDP (`rx-sg`), i.e. MTU above one frame
    /// in copy mode.
    pub multi_buffer: Support,
    /// Multi-buffer in zero-copy mode (`xsk-zerocopy` and `xdp-zc-max-segs` > 1);
    /// without it, zero-copy segments must fit one descriptor.
    pub zero_copy_multi_buffer: Support,
    /// A known defect of this driver on this kernel that makes zero-copy
    /// transmission unsafe ([`zero_copy_tx_defect`]), or `None`.
    pub zero_copy_tx_defect: Option<&'static str>,
    /// Attach modes, most preferred first.
    pub attach_modes: Vec<AttachModeSupport>,
    /// What is attached now (rtnetlink `IFLA_XDP`).
    pub attached: XdpAttachment,
}

impl Xdp {
    /// The entry for `mode`.
    pub fn attach_mode(&self, mode: XdpMode) -> Option<&AttachModeSupport> {
        self.attach_modes.iter().find(|m| m.mode == mode)
    }

    /// Records the outcome of a real trial attach in `mode` (for the loader),
    /// replacing the inferred entry: `expected` becomes what happened and
    /// `verified` true.
    pub fn record_trial(&mut self, mode: XdpMode, worked: bool, detail: impl Into<String>) {
        let entry = AttachModeSupport {
            mode,
            expected: Support::from_bool(worked),
            verified: true,
            reason: detail.into(),
        };
        match self.attach_modes.iter_mut().find(|m| m.mode == mode) {
            Some(m) => *m = entry,
            None => self.attach_modes.push(entry),
        }
    }
}

/// The running kernel (`uname`).
#[derive(Debug, Clone, Serialize)]
pub struct Kernel {
    /// Release, e.g. "6.18.0".
    pub release: String,
    /// Build version string.
    pub version: String,
    /// Machine, e.g. "x86_64".
    pub machine: String,
}

/// One capability and whether it is in the effective set.
#[derive(Debug, Clone, Serialize)]
pub struct Capability {
    /// Its name, e.g. "CAP_NET_ADMIN".
    pub name: &'static str,
    /// Whether this thread has it effective.
    pub effective: bool,
}

/// A resource limit value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// A number of bytes.
    Bytes(u64),
    /// `RLIM_INFINITY`.
    Unlimited,
}

impl Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Limit::Bytes(b) => s.serialize_u64(*b),
            Limit::Unlimited => s.serialize_str("unlimited"),
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Bytes(b) => write!(f, "{b} bytes"),
            Limit::Unlimited => f.write_str("unlimited"),
        }
    }
}

/// Privileges of the probing thread.
#[derive(Debug, Clone, Serialize)]
pub struct Privileges {
    /// Effective user id.
    pub euid: u32,
    /// The capabilities xtcp uses, from `CapEff` in `/proc/thread-self/status`.
    /// Empty if that could not be read (see the notes).
    pub capabilities: Vec<Capability>,
    /// `RLIMIT_MEMLOCK` soft limit (UMEM pages count against it without
    /// `CAP_IPC_LOCK`).
    pub memlock_soft: Limit,
    /// `RLIMIT_MEMLOCK` hard limit.
    pub memlock_hard: Limit,
    /// Bytes of locked memory one queue's UMEM takes with the engine's
    /// defaults, at most (16384 frames × 4096 bytes; 24,576 × 2048 where
    /// auto takes the smaller frames; the rings are not charged to the
    /// memlock limit).
    pub umem_default_bytes: u64,
    /// Whether the memlock limit lets one queue register the default UMEM:
    /// `CAP_IPC_LOCK` lifts the limit, otherwise the soft limit must hold
    /// it (less what the user's other processes have locked already).
    /// `None` when the capabilities could not be read.
    pub memlock_covers_default_umem: Option<bool>,
    /// What is missing for attaching XDP and binding AF_XDP sockets, each
    /// naming the capability or limit needed; empty when nothing is.
    pub missing: Vec<String>,
}

/// 2 MB hugepages.
#[derive(Debug, Clone, Serialize)]
pub struct Hugepages {
    /// Page size in KiB (2048).
    pub page_size_kib: u32,
    /// Pages reserved in the pool, if known.
    pub total: Option<u64>,
    /// Pages free in the pool, if known.
    pub free: Option<u64>,
    /// The system's transparent huge page mode (`always`, `madvise` or
    /// `never`, from `/sys/kernel/mm/transparent_hugepage/enabled`), if
    /// known: the UMEM asks for them (`MADV_HUGEPAGE`), so it gets them
    /// unless this is `never`.
    pub transparent: Option<String>,
}

/// `probe` failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The interface does not exist in the caller's network namespace.
    #[error("no interface named {iface:?} in this network namespace; list them with `ip link`")]
    NoSuchInterface {
        /// The name asked for.
        iface: String,
    },
    /// The name cannot be an interface name.
    #[error("{iface:?} is not a valid interface name: {reason}")]
    InvalidName {
        /// The name given.
        iface: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The kernel refused for lack of privilege.
    #[error("`{call}` was refused: it needs {needed}; run as root or grant it (e.g. `setcap {needed_cap}+ep \"$(command -v xtcp)\"`)", needed_cap = .needed.to_lowercase())]
    PermissionDenied {
        /// The call or request refused.
        call: &'static str,
        /// The capability it needs.
        needed: &'static str,
        /// The OS error (EPERM / EACCES).
        #[source]
        source: io::Error,
    },
    /// A call that needs no privilege was refused: a sandbox forbids it.
    #[error(
        "`{call}` was refused although it needs no privilege: a seccomp filter or a security \
         module (SELinux, AppArmor) forbids it here; run xtcp outside that sandbox or allow it"
    )]
    RefusedByPolicy {
        /// The call or request refused.
        call: &'static str,
        /// The OS error (EPERM / EACCES).
        #[source]
        source: io::Error,
    },
    /// A system call failed.
    #[error("`{call}` failed")]
    Syscall {
        /// The call, e.g. "socket(AF_INET, SOCK_DGRAM)".
        call: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A netlink request failed.
    #[error("netlink request `{request}` failed")]
    Netlink {
        /// The request, e.g. "RTM_GETLINK".
        request: &'static str,
        /// What went wrong.
        #[source]
        source: NetlinkError,
    },
}

fn is_permission(errno: Option<i32>) -> bool {
    matches!(errno, Some(libc::EPERM) | Some(libc::EACCES))
}

/// Maps a netlink failure of `request` (a read-only request that needs no
/// capability); a refusal becomes `RefusedByPolicy`.
fn netlink_error(request: &'static str) -> impl FnOnce(NetlinkError) -> ProbeError {
    move |e| match e {
        NetlinkError::Io { source, .. } | NetlinkError::Kernel { source, .. }
            if is_permission(source.raw_os_error()) =>
        {
            ProbeError::RefusedByPolicy {
                call: request,
                source,
            }
        }
        e => ProbeError::Netlink { request, source: e },
    }
}

/// An error and its sources on one line, for notes.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let _ = write!(s, ": {c}");
        cur = c.source();
    }
    s
}

/// Checks `iface` the way the kernel's `dev_valid_name` does (alternative
/// names may be up to 127 bytes).
fn validate_name(iface: &str) -> Result<(), ProbeError> {
    let invalid = |reason| {
        Err(ProbeError::InvalidName {
            iface: iface.to_owned(),
            reason,
        })
    };
    if iface.is_empty() {
        return invalid("it is empty");
    }
    if iface.len() > 127 {
        return invalid("it is longer than 127 bytes");
    }
    if iface == "." || iface == ".." {
        return invalid("\".\" and \"..\" are not allowed");
    }
    if iface
        .bytes()
        .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace())
    {
        return invalid("it contains '/', ':', a NUL or whitespace");
    }
    Ok(())
}

/// Probes `iface` in the calling thread's network namespace.
pub fn probe(iface: &str) -> Result<ProbeReport, ProbeError> {
    validate_name(iface)?;
    let mut notes = Vec::new();

    let mut rt = NetlinkSocket::route().map_err(netlink_error("socket(NETLINK_ROUTE)"))?;
    let link = match route::get_link(&mut rt, LinkSelector::Name(iface)) {
        Ok(link) => link,
        Err(e) if e.errno() == Some(libc::ENODEV) => {
            return Err(ProbeError::NoSuchInterface {
                iface: iface.to_owned(),
            });
        }
        Err(e) => return Err(netlink_error("RTM_GETLINK")(e)),
    };
    tracing::debug!(?link, "rtnetlink link");

    let ioctl_sock = ioctl_socket()?;
    let (driver, channels) = ethtool_info(ioctl_sock.as_fd(), &link, &mut notes)?;
    let queues = queues(&link, channels, &mut notes);
    let mtu = Mtu {
        current: link.mtu.unwrap_or(0),
        min: link.min_mtu,
        // 0 means the driver sets no maximum (e.g. `lo`).
        max: link.max_mtu.filter(|&m| m != 0),
    };
    match link.max_mtu {
        None => notes.push(
            "the kernel does not report MTU limits (IFLA_MIN_MTU/IFLA_MAX_MTU need Linux 4.18)"
                .into(),
        ),
        Some(0) => notes.push("the driver sets no maximum MTU (IFLA_MAX_MTU is 0)".into()),
        Some(_) => {}
    }

    let netdev = netdev_dev(link.ifindex);
    let mut xdp = xdp_report(netdev, link.xdp, &mut notes);
    xdp.zero_copy_tx_defect = driver.as_ref().and_then(|d| zero_copy_tx_defect(&d.driver));

    let interface = Interface {
        name: link.name.clone(),
        ifindex: link.ifindex,
        driver: driver.as_ref().map(|d| d.driver.clone()),
        driver_version: driver
            .as_ref()
            .map(|d| d.version.clone())
            .filter(|s| !s.is_empty()),
        firmware: driver
            .as_ref()
            .map(|d| d.firmware.clone())
            .filter(|s| !s.is_empty()),
        bus_info: driver
            .as_ref()
            .map(|d| d.bus_info.clone())
            .filter(|s| !s.is_empty()),
        kind: link.kind.clone(),
        up: link.is_up(),
        operstate: link.operstate_name(),
    };

    Ok(ProbeReport {
        interface,
        queues,
        mtu,
        xdp,
        kernel: kernel(),
        privileges: privileges(&mut notes),
        hugepages: hugepages(&mut notes),
        notes,
    })
}

/// What [`zero_copy_tx_defect`] says of virtio_net built as a module.
const VIRTIO_NET_XSK_HDR_DEFECT: &str = concat!(
    "virtio_net is a module here, and it maps the virtio-net header it sends with every ",
    "zero-copy packet at a wrong physical address (its static `xsk_hdr`; a Linux bug since ",
    "6.11): unless the memory there holds a valid header, the host drops every packet sent ",
    "in zero-copy mode while this side sees each one complete"
);

/// A known defect of `driver` on the running kernel that makes AF_XDP
/// zero-copy transmission unsafe, or `None` when none is known.
///
/// One is known. virtio_net (Linux 6.11 and later; no fix upstream as of
/// 2026-12) sends every zero-copy packet with one shared virtio-net header,
/// a static variable (`xsk_hdr`) that it maps with `dma_map_single`. When
/// the driver is a module, as in Debian's kernels, that is a module
/// address, which the kernel translates as if it lay in the kernel image:
/// the device reads the header from an unrelated physical address, which
/// KASLR moves from boot to boot. Where that memory holds anything but a
/// valid header, a tap on the host refuses each packet (EINVAL, counted
/// nowhere). `tests/vm` caught it on CI and reproduces it by writing over
/// those 12 bytes. Built into the kernel, the variable lies in the kernel
/// image and the translation is right, so only the module is named: it has
/// an `initstate` in sysfs, and `/proc/kallsyms` lists the variable (names
/// are listed to everyone; addresses only to the privileged). The listing
/// (tens of thousands of lines) is read once per process: the binding
/// and the probe behind the MSS clamp both ask at start.
pub fn zero_copy_tx_defect(driver: &str) -> Option<&'static str> {
    static VIRTIO_NET: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    if driver != "virtio_net" {
        return None;
    }
    *VIRTIO_NET.get_or_init(|| {
        if !std::path::Path::new("/sys/module/virtio_net/initstate").exists() {
            return None;
        }
        let kallsyms = std::fs::File::open("/proc/kallsyms").ok()?;
        has_module_symbol(io::BufReader::new(kallsyms), "xsk_hdr", "virtio_net")
            .then_some(VIRTIO_NET_XSK_HDR_DEFECT)
    })
}

/// Whether a `/proc/kallsyms` listing has symbol `name` of module `module`
/// (lines such as `ffffffffc020c5d0 b xsk_hdr\t[virtio_net]`).
fn has_module_symbol(listing: impl io::BufRead, name: &str, module: &str) -> bool {
    listing.lines().map_while(Result::ok).any(|line| {
        let mut f = line.split_ascii_whitespace().skip(2);
        f.next() == Some(name)
            && f.next()
                .and_then(|m| m.strip_prefix('['))
                .and_then(|m| m.strip_suffix(']'))
                == Some(module)
    })
}

/// Driver statistics that count packets the driver dropped because an XDP
/// redirect failed (into an AF_XDP socket: RX ring full, fill ring empty),
/// per RX queue: the driver name and the name pattern, with `N` for the
/// queue. Only drivers whose counter has been checked against the AF_XDP
/// socket's own statistics are listed.
const REDIRECT_DROP_COUNTERS: &[(&str, &str)] = &[
    // drivers/net/veth.c: `xdp_do_redirect` failed → `rx_drops` of the
    // receiving queue (also other receive drops of that queue, e.g. an skb
    // that could not be converted for XDP).
    ("veth", "rx_queue_N_drops"),
];

/// The driver's own redirect-drop counter of each queue, read once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriverDropSnapshot {
    /// Driver name ("unknown" if ethtool does not say).
    pub driver: String,
    /// The counter's name pattern (`N` = queue), if the driver has one.
    pub counter: Option<&'static str>,
    /// Its value for queues 0.., if the driver has it; otherwise why not.
    pub values: Result<Vec<u64>, String>,
    /// veth only (`None` for other drivers): the peer's `tx_dropped`, the
    /// packets it could not hand to this end — the 256-packet queue in
    /// front of this end's XDP program full (or a packet over this end's
    /// MTU) — which XDP never saw; or why it could not be read.
    pub peer_tx_dropped: Option<Result<u64, String>>,
}

/// Reads the driver's redirect-drop counter (`ethtool -S`, e.g. veth's
/// `rx_queue_N_drops`) of queues `0..queues` of `iface`, in the calling
/// thread's network namespace. Never fails: what could not be read is said
/// in [`DriverDropSnapshot::values`].
pub fn driver_redirect_drops(iface: &str, queues: u32) -> DriverDropSnapshot {
    let sock = match ioctl_socket() {
        Ok(s) => s,
        Err(e) => {
            return DriverDropSnapshot {
                driver: "unknown".into(),
                counter: None,
                values: Err(e.to_string()),
                peer_tx_dropped: None,
            };
        }
    };
    let driver = match sys::ethtool_drvinfo(sock.as_fd(), iface) {
        Ok(d) => d.driver,
        Err(e) => {
            // (Gone, most likely: deleted while xtcp ran.)
            return DriverDropSnapshot {
                driver: "unknown".into(),
                counter: None,
                values: Err(format!("unread ({iface}'s driver did not answer: {e})")),
                peer_tx_dropped: None,
            };
        }
    };
    let Some(&(_, counter)) = REDIRECT_DROP_COUNTERS.iter().find(|(d, _)| *d == driver) else {
        return DriverDropSnapshot {
            values: Err(format!("not reported by driver {driver}")),
            driver,
            counter: None,
            peer_tx_dropped: None,
        };
    };
    let stats = match sys::ethtool_stats(sock.as_fd(), iface) {
        Ok(s) => s,
        // The set changed under us (queues added): once more.
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            match sys::ethtool_stats(sock.as_fd(), iface) {
                Ok(s) => s,
                Err(e) => return failed(iface, driver, counter, e),
            }
        }
        Err(e) => return failed(iface, driver, counter, e),
    };
    let values = (0..queues)
        .map(|q| {
            let name = counter.replace('N', &q.to_string());
            stats
                .iter()
                .find(|(n, _)| *n == name)
                .map(|&(_, v)| v)
                .ok_or_else(|| format!("{iface} (driver {driver}) has no statistic {name}"))
        })
        .collect();
    DriverDropSnapshot {
        peer_tx_dropped: (driver == "veth").then(|| veth_peer_tx_dropped(iface)),
        driver,
        counter: Some(counter),
        values,
    }
}

fn failed(iface: &str, driver: String, counter: &'static str, e: io::Error) -> DriverDropSnapshot {
    DriverDropSnapshot {
        values: Err(format!(
            "reading the driver statistics (ioctl SIOCETHTOOL, ETHTOOL_GSTATS) failed: {e}"
        )),
        peer_tx_dropped: (driver == "veth").then(|| veth_peer_tx_dropped(iface)),
        driver,
        counter: Some(counter),
    }
}

/// The `tx_dropped` of veth `iface`'s peer, in whichever namespace it is
/// (rtnetlink: `IFLA_LINK` and `IFLA_LINK_NETNSID` of `iface`, then the
/// peer's statistics through `IFLA_TARGET_NETNSID`).
fn veth_peer_tx_dropped(iface: &str) -> Result<u64, String> {
    use crate::netlink::route::{LinkSelector, get_link, get_tx_dropped};
    let mut sock = crate::netlink::NetlinkSocket::route().map_err(|e| format!("rtnetlink: {e}"))?;
    let link = get_link(&mut sock, LinkSelector::Name(iface))
        .map_err(|e| format!("reading {iface}: {e}"))?;
    let peer = link
        .link
        .ok_or_else(|| format!("{iface} names no peer (IFLA_LINK)"))?;
    get_tx_dropped(&mut sock, peer, link.link_netnsid)
        .map_err(|e| format!("reading the statistics of {iface}'s peer: {e}"))
}

/// What the driver's redirect-drop counter rose by over a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriverDrops {
    /// Driver name.
    pub driver: String,
    /// The counter's name pattern (`N` = queue), e.g. `rx_queue_N_drops`;
    /// `None` where the driver has none.
    pub counter: Option<&'static str>,
    /// The increase, per queue (index = queue); `None` where the driver
    /// has no such counter or it could not be read (see `note`).
    pub per_queue: Option<Vec<u64>>,
    /// Sum of `per_queue`.
    pub total: Option<u64>,
    /// Why there are no numbers, e.g. "not reported by driver mlx5_core".
    pub note: Option<String>,
    /// veth only: the increase of the peer's `tx_dropped`, packets lost
    /// before this end's XDP program saw them
    /// ([`DriverDropSnapshot::peer_tx_dropped`]); `None` for other drivers
    /// or when it could not be read (then `peer_note` says why).
    pub peer_tx_dropped: Option<u64>,
    /// Why a veth's peer count is missing.
    pub peer_note: Option<String>,
}

impl DriverDrops {
    /// The increase from `start` to `end` (snapshots of the same queues).
    pub fn between(start: &DriverDropSnapshot, end: &DriverDropSnapshot) -> DriverDrops {
        let per_queue = match (&start.values, &end.values) {
            (Ok(a), Ok(b)) if a.len() == b.len() => Ok(a
                .iter()
                .zip(b)
                .map(|(a, b)| b.saturating_sub(*a))
                .collect::<Vec<u64>>()),
            (Ok(_), Ok(_)) => Err("the queue count changed during the run".to_owned()),
            (Err(e), _) | (_, Err(e)) => Err(e.clone()),
        };
        let (per_queue, note) = match per_queue {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(e)),
        };
        let (peer_tx_dropped, peer_note) = match (&start.peer_tx_dropped, &end.peer_tx_dropped) {
            (Some(Ok(a)), Some(Ok(b))) => (Some(b.saturating_sub(*a)), None),
            (Some(Err(e)), _) | (_, Some(Err(e))) => (None, Some(e.clone())),
            _ => (None, None),
        };
        DriverDrops {
            driver: end.driver.clone(),
            counter: end.counter,
            total: per_queue.as_ref().map(|v| v.iter().sum()),
            per_queue,
            note,
            peer_tx_dropped,
            peer_note,
        }
    }
}

/// A datagram socket for ethtool ioctls: AF_INET, or AF_UNIX where IPv4 is
/// compiled out. Either acts on its own network namespace.
fn ioctl_socket() -> Result<OwnedFd, ProbeError> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, socket_with};
    socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .or_else(|_| {
        socket_with(
            AddressFamily::UNIX,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            None,
        )
    })
    .map_err(|e| ProbeError::Syscall {
        call: "socket(AF_INET/AF_UNIX, SOCK_DGRAM)",
        source: e.into(),
    })
}

fn ethtool_info(
    sock: std::os::fd::BorrowedFd<'_>,
    link: &LinkInfo,
    notes: &mut Vec<String>,
) -> Result<(Option<sys::DriverInfo>, Option<Channels>), ProbeError> {
    let gone = |e: &io::Error| e.raw_os_error() == Some(libc::ENODEV);
    let driver = match sys::ethtool_drvinfo(sock, &link.name) {
        Ok(d) => Some(d),
        Err(e) if gone(&e) => {
            return Err(ProbeError::NoSuchInterface {
                iface: link.name.clone(),
            });
        }
        Err(e) => {
            notes.push(format!(
                "driver unknown: ioctl(SIOCETHTOOL, ETHTOOL_GDRVINFO) failed: {e}"
            ));
            None
        }
    };
    let channels = match sys::ethtool_channels(sock, &link.name) {
        Ok(c) => Some(c),
        Err(e) if gone(&e) => {
            return Err(ProbeError::NoSuchInterface {
                iface: link.name.clone(),
            });
        }
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => None,
        Err(e) => {
            notes.push(format!("ioctl(SIOCETHTOOL, ETHTOOL_GCHANNELS) failed: {e}"));
            None
        }
    };
    Ok((driver, channels))
}

fn queues(link: &LinkInfo, channels: Option<Channels>, notes: &mut Vec<String>) -> Queues {
    // A driver that answers with no RX or no TX channel at all is not
    // telling the truth about its queues; rtnetlink's counts are better.
    let channels = channels.filter(|c| {
        let usable = c.rx.saturating_add(c.combined) > 0 && c.tx.saturating_add(c.combined) > 0;
        if !usable {
            notes.push(format!(
                "ethtool reports no RX or no TX channel ({c:?}); using rtnetlink queue counts"
            ));
        }
        usable
    });
    match channels {
        Some(c) => Queues {
            rx: c.rx.saturating_add(c.combined),
            tx: c.tx.saturating_add(c.combined),
            source: QueueSource::Ethtool,
            channels: Some(c.into()),
            allocated_rx: link.num_rx_queues,
            allocated_tx: link.num_tx_queues,
        },
        None => {
            if link.num_rx_queues.is_none() {
                notes.push("queue counts unknown: no ethtool channels and no IFLA_NUM_RX_QUEUES; assuming 1".into());
            } else {
                notes.push(
                    "queue counts are the allocated ones (IFLA_NUM_*_QUEUES; the driver reports no \
                     channels): an upper bound on the queues in use"
                        .into(),
                );
            }
            Queues {
                rx: link.num_rx_queues.unwrap_or(1),
                tx: link.num_tx_queues.unwrap_or(1),
                source: QueueSource::Rtnetlink,
                channels: None,
                allocated_rx: link.num_rx_queues,
                allocated_tx: link.num_tx_queues,
            }
        }
    }
}

/// Why the netdev features are unavailable, or the device's entry.
fn netdev_dev(ifindex: u32) -> Result<NetdevDev, String> {
    let mut sock = NetlinkSocket::generic()
        .map_err(|e| format!("cannot open a generic netlink socket: {}", chain(&e)))?;
    let family = match genl::resolve_family(&mut sock, genl::NETDEV_FAMILY_NAME) {
        Ok(Some(f)) => f,
        Ok(None) => {
            return Err(
                "the kernel has no generic netlink family \"netdev\" (it came with Linux 6.3)"
                    .into(),
            );
        }
        Err(e) => {
            return Err(format!(
                "resolving generic netlink family \"netdev\": {}",
                chain(&e)
            ));
        }
    };
    genl::netdev_dev_get(&mut sock, family, ifindex)
        .map_err(|e| format!("netdev dev-get: {}", chain(&e)))
}

/// Derives the XDP section from the netdev answer and `IFLA_XDP`.
fn xdp_report(
    netdev: Result<NetdevDev, String>,
    attached: XdpAttachment,
    notes: &mut Vec<String>,
) -> Xdp {
    let dev = match netdev {
        Ok(dev) if dev.xdp_features.is_some() => Ok(dev),
        Ok(_) => Err("the netdev dev-get reply has no xdp-features attribute".to_owned()),
        Err(reason) => Err(reason),
    };
    let (netdev, zero_copy, multi_buffer, zc_mb, native, offload) = match dev {
        Ok(dev) => {
            let f = dev.xdp_features.unwrap_or_default();
            let zc = f.contains(XdpFeatures::XSK_ZEROCOPY);
            let zc_mb = match dev.xdp_zc_max_segs {
                Some(segs) => Support::from_bool(zc && segs > 1),
                // Only zero-copy devices report the attribute.
                None if !zc => Support::No,
                None => Support::Unknown,
            };
            let basic = f.contains(XdpFeatures::BASIC);
            let native = AttachModeSupport {
                mode: XdpMode::Native,
                expected: Support::from_bool(basic),
                verified: false,
                reason: if basic {
                    "xdp-features has \"basic\"".into()
                } else {
                    "xdp-features lacks \"basic\": the driver has no native XDP".into()
                },
            };
            let hw = f.contains(XdpFeatures::HW_OFFLOAD);
            let offload = AttachModeSupport {
                mode: XdpMode::Offload,
                expected: Support::from_bool(hw),
                verified: false,
                reason: format!(
                    "xdp-features {} \"hw-offload\"",
                    if hw { "has" } else { "lacks" }
                ),
            };
            let report = NetdevFeatures::Reported {
                xdp_features: f.names(),
                xdp_features_raw: f.0,
                xdp_zc_max_segs: dev.xdp_zc_max_segs,
                xdp_rx_metadata_features: dev.xdp_rx_metadata.map(|m| m.names()),
                xsk_features: dev.xsk_features.map(|x| x.names()),
            };
            (
                report,
                Support::from_bool(zc),
                Support::from_bool(f.contains(XdpFeatures::RX_SG)),
                zc_mb,
                native,
                offload,
            )
        }
        Err(reason) => {
            notes.push(format!("XDP features unknown: {reason}"));
            let unknown = |mode| AttachModeSupport {
                mode,
                expected: Support::Unknown,
                verified: false,
                reason: "XDP features unknown".into(),
            };
            (
                NetdevFeatures::Unknown { reason },
                Support::Unknown,
                Support::Unknown,
                Support::Unknown,
                unknown(XdpMode::Native),
                unknown(XdpMode::Offload),
            )
        }
    };
    let generic = AttachModeSupport {
        mode: XdpMode::Generic,
        expected: Support::Yes,
        verified: false,
        reason: "generic XDP works on every device".into(),
    };
    Xdp {
        netdev,
        zero_copy,
        multi_buffer,
        zero_copy_multi_buffer: zc_mb,
        zero_copy_tx_defect: None,
        attach_modes: vec![native, generic, offload],
        attached,
    }
}

fn kernel() -> Kernel {
    let u = rustix::system::uname();
    let s = |c: &std::ffi::CStr| c.to_string_lossy().into_owned();
    Kernel {
        release: s(u.release()),
        version: s(u.version()),
        machine: s(u.machine()),
    }
}

fn limit(v: Option<u64>) -> Limit {
    v.map_or(Limit::Unlimited, Limit::Bytes)
}

/// Locked bytes of one queue's UMEM with the engine's defaults, at most:
/// its frames are 2048 or 4096 bytes, as the MTU and layout decide, and
/// the 4096-byte ones take more (the rings' frames are twice the bytes).
fn umem_default_bytes() -> u64 {
    use crate::frame::FrameSize;
    let ring = crate::worker::EngineConfig::default().ring;
    let f = FrameSize::F4096;
    u64::from(crate::worker::default_frames(ring, f)) * f.bytes() as u64
}

/// What is missing for XDP + AF_XDP given effective caps and memlock.
fn missing_privileges(cap_eff: Option<CapSet>, memlock_soft: Limit) -> Vec<String> {
    let Some(eff) = cap_eff else {
        return vec!["capabilities unknown (could not read CapEff)".into()];
    };
    let mut missing = Vec::new();
    if !eff.has(caps::NET_ADMIN) {
        missing.push("CAP_NET_ADMIN (to attach XDP programs)".into());
    }
    if !eff.has(caps::NET_RAW) {
        missing.push("CAP_NET_RAW (to create AF_XDP sockets)".into());
    }
    if !eff.has_or_sys_admin(caps::BPF) {
        missing.push("CAP_BPF or CAP_SYS_ADMIN (to load BPF programs and maps)".into());
    }
    if !eff.has_or_sys_admin(caps::PERFMON) {
        missing.push(
            "CAP_PERFMON or CAP_SYS_ADMIN (the verifier refuses the steering program's \
             pointer arithmetic without it)"
                .into(),
        );
    }
    let soft = match memlock_soft {
        Limit::Bytes(b) => Some(b),
        Limit::Unlimited => None,
    };
    let need = umem_default_bytes();
    if caps::memlock_covers(Some(eff), soft, need) == Some(false) {
        missing.push(format!(
            "CAP_IPC_LOCK or RLIMIT_MEMLOCK of at least {need} bytes per queue (the default \
             UMEM's pages are charged to it; soft limit is {} bytes): `ulimit -l unlimited`, \
             systemd `LimitMEMLOCK=infinity`, or fewer --frames",
            soft.unwrap_or_default()
        ));
    }
    missing
}

fn privileges(notes: &mut Vec<String>) -> Privileges {
    // Capabilities are per thread: prefer this thread's view.
    let status = caps::thread_status();
    let cap_eff = match &status {
        Ok(s) => caps::parse_cap_eff(s),
        Err(_) => None,
    };
    match (&status, cap_eff) {
        (Err(e), _) => notes.push(format!(
            "capabilities unknown: reading /proc/thread-self/status: {e}"
        )),
        (Ok(_), None) => {
            notes.push("capabilities unknown: no CapEff line in /proc/thread-self/status".into())
        }
        _ => {}
    }
    let rl = rustix::process::getrlimit(rustix::process::Resource::Memlock);
    let memlock_soft = limit(rl.current);
    let capabilities = cap_eff
        .map(|eff| {
            caps::REPORTED
                .iter()
                .map(|&c| Capability {
                    name: c.name,
                    effective: eff.has(c),
                })
                .collect()
        })
        .unwrap_or_default();
    let umem = umem_default_bytes();
    Privileges {
        euid: rustix::process::geteuid().as_raw(),
        capabilities,
        memlock_soft,
        memlock_hard: limit(rl.maximum),
        umem_default_bytes: umem,
        memlock_covers_default_umem: caps::memlock_covers(cap_eff, rl.current, umem),
        missing: missing_privileges(cap_eff, memlock_soft),
    }
}

/// Parses `HugePages_Total`, `HugePages_Free` and `Hugepagesize` (kB) from
/// `/proc/meminfo` text.
fn parse_meminfo_hugepages(meminfo: &str) -> (Option<u64>, Option<u64>, Option<u64>) {
    let field = |name: &str| {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    (
        field("HugePages_Total:"),
        field("HugePages_Free:"),
        field("Hugepagesize:"),
    )
}

fn hugepages(notes: &mut Vec<String>) -> Hugepages {
    const DIR: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB";
    let read = |f: &str| {
        std::fs::read_to_string(format!("{DIR}/{f}"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let (mut total, mut free) = (read("nr_hugepages"), read("free_hugepages"));
    if total.is_none() || free.is_none() {
        // No sysfs (or no 2 MB size): /proc/meminfo describes the default size.
        match std::fs::read_to_string("/proc/meminfo") {
            Ok(m) => match parse_meminfo_hugepages(&m) {
                (t, f, Some(2048)) => (total, free) = (t, f),
                _ => notes
                    .push("2 MB hugepages unknown: not the default size and no sysfs entry".into()),
            },
            Err(e) => notes.push(format!("hugepages unknown: reading /proc/meminfo: {e}")),
        }
    }
    let transparent = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .and_then(|m| thp_mode(&m));
    if transparent.is_none() {
        notes.push("transparent huge pages unknown: the kernel has none, or no sysfs".into());
    }
    Hugepages {
        page_size_kib: 2048,
        total,
        free,
        transparent,
    }
}

/// The selected word (in brackets) of a sysfs choice: "always [madvise]
/// never" → "madvise".
fn thp_mode(s: &str) -> Option<String> {
    s.split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selected_thp_mode_is_the_bracketed_word() {
        assert_eq!(
            thp_mode("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            thp_mode("[always] madvise never").as_deref(),
            Some("always")
        );
        assert_eq!(thp_mode("always madvise never"), None);
    }

    #[test]
    fn driver_drops_are_the_increase_or_say_why_not() {
        let snap = |v: Result<Vec<u64>, String>| DriverDropSnapshot {
            driver: "veth".into(),
            counter: Some("rx_queue_N_drops"),
            values: v,
            peer_tx_dropped: Some(Ok(10)),
        };
        let d = DriverDrops::between(&snap(Ok(vec![5, 7])), &snap(Ok(vec![9, 7])));
        assert_eq!(d.per_queue, Some(vec![4, 0]));
        assert_eq!(d.total, Some(4));
        assert_eq!(d.note, None);
        assert_eq!((d.peer_tx_dropped, d.peer_note), (Some(0), None));
        let mut later = snap(Ok(vec![5, 7]));
        later.peer_tx_dropped = Some(Ok(13));
        assert_eq!(
            DriverDrops::between(&snap(Ok(vec![5, 7])), &later).peer_tx_dropped,
            Some(3)
        );
        later.peer_tx_dropped = Some(Err("reading the statistics failed".into()));
        let d = DriverDrops::between(&snap(Ok(vec![5, 7])), &later);
        assert_eq!(d.peer_tx_dropped, None);
        assert_eq!(
            d.peer_note.as_deref(),
            Some("reading the statistics failed")
        );
        let d = DriverDrops::between(&snap(Ok(vec![5])), &snap(Ok(vec![9, 7])));
        assert_eq!(d.total, None);
        assert!(d.note.unwrap().contains("queue count changed"));
        let none = DriverDropSnapshot {
            driver: "mlx5_core".into(),
            counter: None,
            values: Err("not reported by driver mlx5_core".into()),
            peer_tx_dropped: None,
        };
        let d = DriverDrops::between(&none, &none);
        assert_eq!(d.per_queue, None);
        assert_eq!(d.note.as_deref(), Some("not reported by driver mlx5_core"));
    }

    #[test]
    fn only_a_known_driver_is_read_and_a_missing_interface_says_so() {
        let s = driver_redirect_drops("xtcp-no-such0", 1);
        assert_eq!(s.driver, "unknown");
        let e = s.values.unwrap_err();
        assert!(
            e.starts_with("unread (xtcp-no-such0's driver did not answer: "),
            "no ethtool answer: no counter claimed, and why: {e}"
        );
    }
    use crate::netlink::genl::{XdpRxMetadata, XskFeatures};
    use crate::netlink::route::XdpAttachMode;

    fn dev(features: u64, zc_segs: Option<u32>) -> NetdevDev {
        NetdevDev {
            ifindex: 3,
            xdp_features: Some(XdpFeatures(features)),
            xdp_zc_max_segs: zc_segs,
            xdp_rx_metadata: Some(XdpRxMetadata(0)),
            xsk_features: Some(XskFeatures(0)),
        }
    }

    fn mode(x: &Xdp, m: XdpMode) -> Support {
        x.attach_modes
            .iter()
            .find(|a| a.mode == m)
            .unwrap()
            .expected
    }

    #[test]
    fn module_symbols_are_matched_by_name_and_module() {
        // As /proc/kallsyms lists them, addresses hidden or not.
        let listing = "ffffffff81000000 T _text\n\
                       0000000000000000 t virtnet_poll\t[virtio_net]\n\
                       ffffffffc020c5d0 b xsk_hdr\t[virtio_net]\n\
                       ffffffffc0300000 b xsk_hdr_len\t[other]\n";
        assert!(has_module_symbol(
            listing.as_bytes(),
            "xsk_hdr",
            "virtio_net"
        ));
        assert!(has_module_symbol(
            listing.as_bytes(),
            "virtnet_poll",
            "virtio_net"
        ));
        // The same name in another module, a prefix, a built-in symbol.
        let other = "ffffffffc020c5d0 b xsk_hdr\t[virtio_net_x]\n\
                     ffffffffc020c5d0 b xsk_hdr_v2\t[virtio_net]\n\
                     ffffffff82000000 b xsk_hdr\n";
        assert!(!has_module_symbol(
            other.as_bytes(),
            "xsk_hdr",
            "virtio_net"
        ));
        assert!(!has_module_symbol(&b""[..], "xsk_hdr", "virtio_net"));
    }

    #[test]
    fn only_virtio_net_can_have_the_zero_copy_tx_defect() {
        for driver in ["veth", "mlx5_core", "ice", "unknown"] {
            assert_eq!(zero_copy_tx_defect(driver), None, "{driver}");
        }
    }

    #[test]
    fn veth_like_features() {
        let mut notes = Vec::new();
        let x = xdp_report(Ok(dev(0x67, None)), XdpAttachment::default(), &mut notes);
        assert_eq!(x.zero_copy, Support::No);
        assert_eq!(x.multi_buffer, Support::Yes);
        assert_eq!(x.zero_copy_multi_buffer, Support::No);
        assert_eq!(mode(&x, XdpMode::Native), Support::Yes);
        assert_eq!(mode(&x, XdpMode::Generic), Support::Yes);
        assert_eq!(mode(&x, XdpMode::Offload), Support::No);
        assert!(notes.is_empty());
        let NetdevFeatures::Reported { xdp_features, .. } = &x.netdev else {
            panic!("{x:?}")
        };
        assert_eq!(
            xdp_features,
            &["basic", "redirect", "ndo-xmit", "rx-sg", "ndo-xmit-sg"]
        );
    }

    #[test]
    fn zero_copy_single_segment_vs_multi_segment() {
        let mut notes = Vec::new();
        // virtio-net style: zero-copy, one segment.
        let x = xdp_report(Ok(dev(0x0f, Some(1))), XdpAttachment::default(), &mut notes);
        assert_eq!(
            (x.zero_copy, x.zero_copy_multi_buffer, x.multi_buffer),
            (Support::Yes, Support::No, Support::No)
        );
        // mlx5 style: zero-copy with multi-buffer.
        let x = xdp_report(Ok(dev(0x2f, Some(8))), XdpAttachment::default(), &mut notes);
        assert_eq!(
            (x.zero_copy, x.zero_copy_multi_buffer, x.multi_buffer),
            (Support::Yes, Support::Yes, Support::Yes)
        );
    }

    #[test]
    fn trial_attach_replaces_the_inference() {
        let mut x = xdp_report(
            Ok(dev(0x23, None)),
            XdpAttachment::default(),
            &mut Vec::new(),
        );
        assert!(!x.attach_mode(XdpMode::Native).unwrap().verified);
        x.record_trial(XdpMode::Native, false, "EOPNOTSUPP from bpf_link_create");
        let m = x.attach_mode(XdpMode::Native).unwrap();
        assert_eq!((m.expected, m.verified), (Support::No, true));
        assert_eq!(m.reason, "EOPNOTSUPP from bpf_link_create");
        assert_eq!(x.attach_modes.len(), 3);
        assert_eq!(
            x.attach_mode(XdpMode::Generic).unwrap().expected,
            Support::Yes
        );
    }

    #[test]
    fn no_native_xdp_means_generic_only() {
        let x = xdp_report(Ok(dev(0, None)), XdpAttachment::default(), &mut Vec::new());
        assert_eq!(mode(&x, XdpMode::Native), Support::No);
        assert_eq!(mode(&x, XdpMode::Generic), Support::Yes);
    }

    #[test]
    fn old_kernel_gives_unknown_with_reason_not_failure() {
        let mut notes = Vec::new();
        let reason = "the kernel has no generic netlink family \"netdev\" (it came with Linux 6.3)";
        let attached = XdpAttachment {
            mode: XdpAttachMode::Generic,
            prog_id: Some(9),
            ..XdpAttachment::default()
        };
        let x = xdp_report(Err(reason.into()), attached, &mut notes);
        assert_eq!(x.zero_copy, Support::Unknown);
        assert_eq!(x.multi_buffer, Support::Unknown);
        assert_eq!(mode(&x, XdpMode::Native), Support::Unknown);
        assert_eq!(mode(&x, XdpMode::Generic), Support::Yes);
        assert_eq!(x.attached.prog_id, Some(9));
        assert!(matches!(&x.netdev, NetdevFeatures::Unknown { reason: r } if r == reason));
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("netdev"));
        let json = serde_json::to_value(&x).unwrap();
        assert_eq!(json["netdev"]["status"], "unknown");
        assert_eq!(json["zero_copy"], "unknown");
    }

    #[test]
    fn reply_without_features_attribute_is_unknown() {
        let mut d = dev(0, None);
        d.xdp_features = None;
        let x = xdp_report(Ok(d), XdpAttachment::default(), &mut Vec::new());
        assert!(matches!(x.netdev, NetdevFeatures::Unknown { .. }));
    }

    #[test]
    fn queue_counts_from_channels_or_rtnetlink() {
        let link = LinkInfo {
            num_rx_queues: Some(8),
            num_tx_queues: Some(8),
            ..LinkInfo::default()
        };
        let mut notes = Vec::new();
        // mlx5 style: combined channels only.
        let ch = Channels {
            combined: 6,
            max_combined: 8,
            ..Channels::default()
        };
        let q = queues(&link, Some(ch), &mut notes);
        assert_eq!((q.rx, q.tx, q.source), (6, 6, QueueSource::Ethtool));
        // veth style: separate RX and TX.
        let ch = Channels {
            rx: 4,
            tx: 2,
            ..Channels::default()
        };
        let q = queues(&link, Some(ch), &mut notes);
        assert_eq!((q.rx, q.tx), (4, 2));
        assert!(notes.is_empty());
        // No channel support, or nonsense: rtnetlink.
        let q = queues(&link, None, &mut notes);
        assert_eq!((q.rx, q.tx, q.source), (8, 8, QueueSource::Rtnetlink));
        let q = queues(&link, Some(Channels::default()), &mut notes);
        assert_eq!((q.rx, q.tx, q.source), (8, 8, QueueSource::Rtnetlink));
        // One note for the unusable channels, and each rtnetlink fallback
        // says its counts are the allocated ones.
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert_eq!(notes.iter().filter(|n| n.contains("allocated")).count(), 2);
    }

    #[test]
    fn cap_eff_parsing_and_missing_list() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\nCapBnd:\t0\n";
        let all = caps::parse_cap_eff(status).unwrap();
        assert_eq!(all, CapSet(0x1ff_ffff_ffff));
        assert!(missing_privileges(Some(all), Limit::Bytes(8 << 20)).is_empty());
        assert_eq!(caps::parse_cap_eff("Name: x\n"), None);

        let none = missing_privileges(Some(CapSet(0)), Limit::Bytes(65536));
        assert_eq!(none.len(), 5, "{none:?}");
        assert!(none[0].starts_with("CAP_NET_ADMIN"));
        assert!(none[3].starts_with("CAP_PERFMON"), "{none:?}");
        assert!(
            none[4].contains("65536") && none[4].contains("67108864"),
            "{none:?}"
        );
        // Unlimited memlock, or one that holds the default UMEM, needs no
        // CAP_IPC_LOCK.
        assert_eq!(
            missing_privileges(Some(CapSet(0)), Limit::Unlimited).len(),
            4
        );
        assert_eq!(
            missing_privileges(Some(CapSet(0)), Limit::Bytes(64 << 20)).len(),
            4
        );
        // The documented set: CAP_NET_ADMIN + CAP_NET_RAW + CAP_BPF +
        // CAP_PERFMON, and memlock or CAP_IPC_LOCK.
        let documented = CapSet((1 << 12) | (1 << 13) | (1 << 38) | (1 << 39));
        assert!(missing_privileges(Some(documented), Limit::Bytes(64 << 20)).is_empty());
        let m = missing_privileges(Some(documented), Limit::Bytes(8 << 20));
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("CAP_IPC_LOCK or RLIMIT_MEMLOCK"), "{m:?}");
        // Without CAP_PERFMON.
        let no_perfmon = CapSet((1 << 12) | (1 << 13) | (1 << 14) | (1 << 39));
        let m = missing_privileges(Some(no_perfmon), Limit::Bytes(0));
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("CAP_PERFMON"), "{m:?}");
        // CAP_SYS_ADMIN stands in for CAP_BPF and CAP_PERFMON.
        let sys_admin_net = CapSet((1 << 21) | (1 << 12) | (1 << 13) | (1 << 14));
        assert!(missing_privileges(Some(sys_admin_net), Limit::Bytes(0)).is_empty());
    }

    #[test]
    fn meminfo_hugepages() {
        let m = "MemTotal: 1 kB\nHugePages_Total:      64\nHugePages_Free:       60\nHugepagesize:       2048 kB\n";
        assert_eq!(parse_meminfo_hugepages(m), (Some(64), Some(60), Some(2048)));
        assert_eq!(parse_meminfo_hugepages(""), (None, None, None));
    }

    #[test]
    fn name_validation() {
        for bad in ["", ".", "..", "a/b", "a b", "a:b", "a\0"] {
            assert!(
                matches!(validate_name(bad), Err(ProbeError::InvalidName { .. })),
                "{bad:?}"
            );
        }
        assert!(validate_name(&"x".repeat(128)).is_err());
        assert!(validate_name("eth0").is_ok());
        assert!(validate_name("enp0s31f6-very-long-altname").is_ok());
    }

    #[test]
    fn refusals_of_unprivileged_requests_blame_the_sandbox() {
        let e = netlink_error("RTM_GETLINK")(NetlinkError::Kernel {
            message: None,
            source: io::Error::from_raw_os_error(libc::EPERM),
        });
        assert!(
            matches!(
                e,
                ProbeError::RefusedByPolicy {
                    call: "RTM_GETLINK",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("seccomp"), "{e}");
        let e = netlink_error("RTM_GETLINK")(NetlinkError::Unexpected { kind: 3 });
        assert!(matches!(
            e,
            ProbeError::Netlink {
                request: "RTM_GETLINK",
                ..
            }
        ));
    }

    #[test]
    fn limits_serialize_as_number_or_unlimited() {
        assert_eq!(serde_json::to_string(&Limit::Bytes(5)).unwrap(), "5");
        assert_eq!(
            serde_json::to_string(&Limit::Unlimited).unwrap(),
            "\"unlimited\""
        );
    }
}
