//! AF_XDP: UMEM, the four rings, binding, statistics. The main home of
//! `unsafe` in the engine (besides `sys` and the checksum's AVX2 call in
//! `wire::checksum`).
//!
//! # Frame ownership
//!
//! Every UMEM frame is owned by exactly one side at a time, and the types
//! say which: userspace holds a [`Frame`] token; handing a frame to a ring
//! consumes the token; only the paired ring gives it back.
//!
//! | ring        | direction       | takes a token          | gives a token back |
//! |-------------|-----------------|------------------------|--------------------|
//! | fill        | user → kernel   | [`FillQueue::fill`]    | —                  |
//! | RX          | kernel → user   | —                      | [`RxQueue::recv`]  |
//! | TX          | user → kernel   | [`TxBatch::push`]      | —                  |
//! | completion  | kernel → user   | —                      | [`CompQueue::complete`] |
//!
//! Frames never cross between the pairs inside the kernel: a frame given to
//! the fill ring comes back on RX, one given to TX comes back on completion.
//! With zero-copy the device reads TX frames directly, so a frame must not be
//! rewritten before its completion: the token makes that a compile error.
//!
//! # Rings
//!
//! [`ring`] has the producer/consumer logic (`reserve`/`submit`,
//! `peek`/`release`, Acquire/Release on the peer's index) over memory that
//! is either the kernel's mmap or a heap block ([`ring::FakeRing`]) so that
//! it can be unit-tested without a kernel.

mod mmap;
pub mod ring;
pub(crate) mod socket;
mod umem;

use std::io;

pub use socket::{
    BindInfo, BindMode, CompQueue, FillQueue, RELEASE_WAIT, RxDesc, RxQueue, TxBatch, TxDesc,
    TxQueue, Xsk, XskConfig, XskStats, describe_ifindex, ifindex, ifname,
};
pub use umem::{Frame, Umem, UmemConfig};

/// Errors of the AF_XDP layer. Each says what failed and what to do.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    /// A configuration value is out of range (checked before any syscall).
    #[error("invalid AF_XDP configuration: {0}")]
    Config(String),
    /// The interface does not exist in this network namespace.
    #[error("no interface named `{iface}` in this network namespace (list them with `ip link`)")]
    NoInterface {
        /// The name given.
        iface: String,
    },
    /// Missing privilege.
    #[error(
        "permission denied creating or binding an AF_XDP socket{missing}: run as root, or \
         grant CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF, CAP_PERFMON and CAP_IPC_LOCK (or raise \
         RLIMIT_MEMLOCK instead of CAP_IPC_LOCK)"
    )]
    Permission {
        /// `" (this process lacks CAP_…)"`, or empty when it has both
        /// capabilities AF_XDP sockets need or they are unknown.
        missing: String,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// Another socket holds the queue.
    #[error(
        "queue {queue} of {iface} is busy: another AF_XDP socket is bound to it (another \
         xtcp, or another AF_XDP program; a socket closed moments ago is released within \
         seconds)"
    )]
    QueueBusy {
        /// Interface.
        iface: String,
        /// Queue id.
        queue: u32,
    },
    /// Zero-copy was required but the driver cannot do it.
    #[error(
        "zero-copy AF_XDP is not supported on {iface} (driver: {driver}); use `--bind copy`, \
         or `--bind auto` to fall back to copy mode"
    )]
    NoZeroCopy {
        /// Interface.
        iface: String,
        /// Driver name as the kernel reports it.
        driver: String,
    },
    /// The kernel lacks a feature.
    #[error("{what} is not supported here: {hint}")]
    Unsupported {
        /// The feature.
        what: String,
        /// What to do.
        hint: String,
    },
    /// A system call failed.
    #[error("`{call}` failed ({detail}): {source}{}", if hint.is_empty() { String::new() } else { format!("; {hint}") })]
    Syscall {
        /// The call.
        call: &'static str,
        /// Its arguments, in words.
        detail: String,
        /// The kernel's error.
        #[source]
        source: io::Error,
        /// What the user can do, if anything.
        hint: String,
    },
}

impl XskError {
    /// [`XskError::Permission`], naming which of CAP_NET_RAW (socket) and
    /// CAP_NET_ADMIN (bind) the calling thread lacks.
    pub(crate) fn permission(source: io::Error) -> Self {
        use crate::caps::{NET_ADMIN, NET_RAW};
        let lacks: Vec<&str> = crate::caps::effective()
            .map(|c| {
                [NET_RAW, NET_ADMIN]
                    .into_iter()
                    .filter(|&n| !c.has(n))
                    .map(|n| n.name)
                    .collect()
            })
            .unwrap_or_default();
        XskError::Permission {
            missing: if lacks.is_empty() {
                String::new()
            } else {
                format!(" (this process lacks {})", lacks.join(" and "))
            },
            source,
        }
    }

    pub(crate) fn syscall(
        call: &'static str,
        detail: String,
        source: io::Error,
        hint: String,
    ) -> Self {
        XskError::Syscall {
            call,
            detail,
            source,
            hint,
        }
    }
}

/// The bind mode for a socket that transmits on `iface`, given the one
/// asked for. Where the driver has a known zero-copy TX defect
/// ([`crate::probe::zero_copy_tx_defect`]), `Auto` becomes `Copy`, and an
/// explicit `ZeroCopy` is kept; either way a warning names the defect.
pub fn tx_bind_mode(asked: BindMode, iface: &str) -> BindMode {
    if asked == BindMode::Copy {
        return asked;
    }
    let Some(defect) = crate::probe::zero_copy_tx_defect(&driver_name(iface)) else {
        return asked;
    };
    if asked == BindMode::Auto {
        tracing::warn!(
            "{iface}: {defect}. --bind auto uses copy mode (--bind zerocopy to send in \
             zero-copy mode anyway)"
        );
        BindMode::Copy
    } else {
        tracing::warn!("{iface}: {defect}. Sending in zero-copy mode, as --bind zerocopy asks");
        asked
    }
}

/// Whether sockets bound as `binds` say run in zero-copy mode, every one
/// of them (as the kernel confirmed it, `XDP_OPTIONS`); `false` for none.
pub fn all_zero_copy(binds: &[BindInfo]) -> bool {
    !binds.is_empty() && binds.iter().all(|b| b.zerocopy)
}

/// The interface's driver name (`ETHTOOL_GDRVINFO`), or `"unknown"`.
pub fn driver_name(iface: &str) -> String {
    ethtool_driver(iface).unwrap_or_else(|| "unknown".to_owned())
}

fn ethtool_driver(iface: &str) -> Option<String> {
    use std::os::fd::AsFd;
    let sock = ioctl_socket().ok()?;
    crate::sys::ethtool_drvinfo(sock.as_fd(), iface)
        .ok()
        .map(|d| d.driver)
}

/// A datagram socket for interface ioctls, in the calling thread's namespace.
fn ioctl_socket() -> Result<std::os::fd::OwnedFd, XskError> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket(2); result checked.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(XskError::syscall(
            "socket",
            "AF_INET for an interface ioctl".into(),
            io::Error::last_os_error(),
            String::new(),
        ));
    }
    // SAFETY: fresh fd we own.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) })
}

/// The interface's MAC address (`SIOCGIFHWADDR`) in the calling thread's
/// network namespace.
pub fn iface_mac(iface: &str) -> Result<[u8; 6], XskError> {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    iface_ioctl(iface, libc::SIOCGIFHWADDR, &mut ifr)?;
    // SAFETY: SIOCGIFHWADDR filled the ifru_hwaddr member of the union.
    let sa = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *b as u8;
    }
    Ok(mac)
}

/// The interface's first IPv4 address (`SIOCGIFADDR`), if it has one.
pub fn iface_ipv4(iface: &str) -> Result<Option<std::net::Ipv4Addr>, XskError> {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    ifr.ifr_ifru.ifru_addr.sa_family = libc::AF_INET as libc::sa_family_t;
    match iface_ioctl(iface, libc::SIOCGIFADDR, &mut ifr) {
        Ok(()) => {}
        Err(XskError::Syscall { source, .. })
            if source.raw_os_error() == Some(libc::EADDRNOTAVAIL) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    }
    // SAFETY: SIOCGIFADDR filled ifru_addr with a sockaddr_in (AF_INET),
    // which fits in the sockaddr member.
    let sin: libc::sockaddr_in = unsafe {
        std::ptr::read_unaligned((&raw const ifr.ifr_ifru.ifru_addr).cast::<libc::sockaddr_in>())
    };
    Ok(Some(std::net::Ipv4Addr::from(u32::from_be(
        sin.sin_addr.s_addr,
    ))))
}

fn iface_ioctl(iface: &str, req: libc::c_ulong, ifr: &mut libc::ifreq) -> Result<(), XskError> {
    use std::os::fd::AsRawFd;
    if iface.is_empty() || iface.len() >= libc::IFNAMSIZ || iface.contains('\0') {
        return Err(XskError::NoInterface {
            iface: iface.to_owned(),
        });
    }
    for (dst, src) in ifr.ifr_name.iter_mut().zip(iface.bytes()) {
        *dst = src as libc::c_char;
    }
    let sock = ioctl_socket()?;
    // SAFETY: `req` is an interface ioctl that reads ifr_name and writes one
    // member of the ifreq union; `ifr` is a valid, writable ifreq.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), req as _, ifr as *mut libc::ifreq) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENODEV) {
            return Err(XskError::NoInterface {
                iface: iface.to_owned(),
            });
        }
        return Err(XskError::syscall(
            "ioctl",
            format!("{req:#x} on {iface}"),
            e,
            String::new(),
        ));
    }
    Ok(())
}

/// The interface's MTU (`SIOCGIFMTU`).
pub fn iface_mtu(iface: &str) -> Result<u32, XskError> {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    iface_ioctl(iface, libc::SIOCGIFMTU, &mut ifr)?;
    // SAFETY: SIOCGIFMTU filled the ifru_mtu member.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
    Ok(mtu as u32)
}
