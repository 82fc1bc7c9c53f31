//! The few system calls outside `xsk` that need `unsafe`, which rustix does
//! not wrap: the ethtool ioctl (its reply in a buffer that ends at a guard
//! page: `mmap`, `mprotect`, `munmap`), `setns`, a netlink socket option,
//! `mallopt` and `getrusage`.
//!
//! Every function here is safe to call: it validates its arguments, passes
//! the kernel only pointers to live, correctly sized `#[repr(C)]` values it
//! owns, and turns `-1` into [`io::Error::last_os_error`]. The ioctls act on
//! the network namespace of the socket they are issued on, i.e. the one the
//! creating thread was in.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `IFNAMSIZ`: interface names are at most 15 bytes plus a NUL.
pub const IFNAMSIZ: usize = 16;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
/// `ETH_SS_STATS`: the driver's statistics string set.
const ETH_SS_STATS: u32 = 1;
/// `ETH_GSTRING_LEN`: bytes per statistics name.
const ETH_GSTRING_LEN: usize = 32;
/// More statistics than any driver has (mlx5 with 128 channels has ~10k):
/// a larger count from the kernel is refused rather than allocated.
const MAX_STATS: usize = 1 << 20;
/// `SOL_NETLINK`.
const SOL_NETLINK: libc::c_int = 270;
/// `NETLINK_EXT_ACK`.
const NETLINK_EXT_ACK: libc::c_int = 11;

/// `struct ifreq` as used by `SIOCETHTOOL`: the name and `ifr_data`, padded
/// to the kernel's `sizeof(struct ifreq)` (40 bytes on 64-bit) or more.
#[repr(C)]
struct IfreqData {
    name: [u8; IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 24],
}

/// `struct ethtool_drvinfo` (196 bytes).
#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// What `ETHTOOL_GDRVINFO` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverInfo {
    /// Driver name, e.g. "veth", "mlx5_core", "virtio_net".
    pub driver: String,
    /// Driver version string (often the kernel version).
    pub version: String,
    /// Firmware version; empty when the device has none.
    pub firmware: String,
    /// Bus address, e.g. "0000:3b:00.0"; empty for virtual devices.
    pub bus_info: String,
    /// Statistics the driver keeps (`ethtool -S`), now.
    pub n_stats: u32,
}

/// What `ETHTOOL_GCHANNELS` reports: current and maximum channel counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Channels {
    /// RX-only channels now.
    pub rx: u32,
    /// TX-only channels now.
    pub tx: u32,
    /// Other channels (e.g. link interrupts) now.
    pub other: u32,
    /// Combined RX+TX channels now.
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

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn ifname_bytes(ifname: &str) -> io::Result<[u8; IFNAMSIZ]> {
    let b = ifname.as_bytes();
    if b.is_empty() || b.len() >= IFNAMSIZ || b.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {ifname:?} must be 1..=15 bytes without NUL"),
        ));
    }
    let mut name = [0u8; IFNAMSIZ];
    name[..b.len()].copy_from_slice(b);
    Ok(name)
}

/// Issues `SIOCETHTOOL` on `sock` for `ifname` with `cmd` pointing at `T`.
///
/// # Safety
///
/// `T` must be the `#[repr(C)]` ethtool struct of the layout that the
/// command word in its first field selects (the kernel copies that many
/// bytes from and to it), with integer and byte-array fields only.
unsafe fn ethtool<T>(sock: BorrowedFd<'_>, ifname: &str, cmd: &mut T) -> io::Result<()> {
    let mut ifr = IfreqData {
        name: ifname_bytes(ifname)?,
        data: (cmd as *mut T).cast(),
        _pad: [0; 24],
    };
    // SAFETY: `sock` is an open descriptor for the borrow's lifetime; `ifr`
    // is a live `struct ifreq`-compatible value at least as large as the
    // kernel's, with a NUL-terminated name; `ifr.data` points to `*cmd`, a
    // live, exclusively borrowed `#[repr(C)]` ethtool struct of the layout the
    // command word in its first field selects (this function's contract), so
    // the kernel's copy_from_user/copy_to_user stay in bounds.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Anonymous memory for an ethtool reply of variable length, placed so that
/// its last byte is the last byte before an inaccessible guard page.
///
/// `ETHTOOL_GSTRINGS` and `ETHTOOL_GSTATS` write as many entries as the
/// driver has *at the time of the call*, whatever count the caller sized
/// its buffer for; the count can grow in between (e.g. `ethtool -L` adds
/// queues). With the guard page, a longer reply makes the kernel's
/// `copy_to_user` fault and the ioctl fail with `EFAULT` instead of writing
/// past the buffer.
struct GuardedBuf {
    map: *mut libc::c_void,
    map_len: usize,
    /// Offset of the reply in the mapping (8-byte aligned).
    offset: usize,
    len: usize,
}

impl GuardedBuf {
    /// `len` zeroed bytes (rounded up to a multiple of 8) ending at a guard page.
    fn new(len: usize) -> io::Result<GuardedBuf> {
        let len = len.div_ceil(8).max(1) * 8;
        // SAFETY: sysconf has no memory arguments.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|&p| p > 0)
            .unwrap_or(4096);
        let data_len = len.div_ceil(page) * page;
        let map_len = data_len + page;
        // SAFETY: a fresh anonymous private mapping; no existing memory is
        // touched. The result is checked against MAP_FAILED.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let buf = GuardedBuf {
            map,
            map_len,
            offset: data_len - len,
            len,
        };
        // SAFETY: the range [map + data_len, map + map_len) is the last page
        // of the mapping just created, which nothing references yet.
        let rc =
            unsafe { libc::mprotect(map.cast::<u8>().add(data_len).cast(), page, libc::PROT_NONE) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(buf)
    }

    fn ptr(&self) -> *mut u8 {
        // SAFETY: `offset + len <= map_len - page`: inside the mapping.
        unsafe { self.map.cast::<u8>().add(self.offset) }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr()..ptr() + len` is readable, initialised (zeroed by
        // mmap, then written only by the kernel) memory owned by `self`; the
        // borrow of `self` keeps it mapped and unaliased by writers.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }

    fn write_u32(&mut self, at: usize, v: u32) {
        let mut b = v.to_ne_bytes();
        assert!(at + 4 <= self.len);
        // SAFETY: `at + 4 <= len` (checked): inside the writable reply area;
        // `&mut self` excludes other access; byte copy, no alignment needed.
        unsafe { std::ptr::copy_nonoverlapping(b.as_mut_ptr(), self.ptr().add(at), 4) };
    }

    fn read_u32(&self, at: usize) -> u32 {
        let b = &self.bytes()[at..at + 4];
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    }

    fn read_u64(&self, at: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.bytes()[at..at + 8]);
        u64::from_ne_bytes(a)
    }
}

impl Drop for GuardedBuf {
    fn drop(&mut self) {
        // SAFETY: `map`/`map_len` are the mapping `new` created; nothing
        // borrowed from it outlives `self`.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// `SIOCETHTOOL` with `ifr_data` pointing into `buf`, whose first bytes are
/// the ethtool command header.
fn ethtool_guarded(sock: BorrowedFd<'_>, ifname: &str, buf: &mut GuardedBuf) -> io::Result<()> {
    let mut ifr = IfreqData {
        name: ifname_bytes(ifname)?,
        data: buf.ptr().cast(),
        _pad: [0; 24],
    };
    // SAFETY: `sock` is open for the borrow's lifetime; `ifr` is a live
    // `struct ifreq`-compatible value with a NUL-terminated name; `ifr.data`
    // points to `buf`'s reply area, exclusively borrowed, which ends at a
    // PROT_NONE guard page: the kernel's copy_to_user either stays inside
    // the area or faults on the guard page and fails with EFAULT, so it
    // cannot write to memory other than `buf`'s mapping.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `ioctl(SIOCETHTOOL, ETHTOOL_GDRVINFO)`: the driver behind `ifname`.
///
/// `sock` is any socket (AF_INET or AF_UNIX datagram) created in the network
/// namespace to look in. Fails with `ENODEV` for an unknown name and
/// `EOPNOTSUPP` for devices without ethtool support.
pub fn ethtool_drvinfo(sock: BorrowedFd<'_>, ifname: &str) -> io::Result<DriverInfo> {
    let mut info = EthtoolDrvinfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        version: [0; 32],
        fw_version: [0; 32],
        bus_info: [0; 32],
        erom_version: [0; 32],
        reserved2: [0; 12],
        n_priv_flags: 0,
        n_stats: 0,
        testinfo_len: 0,
        eedump_len: 0,
        regdump_len: 0,
    };
    // SAFETY: `EthtoolDrvinfo` is `struct ethtool_drvinfo`, the layout of
    // ETHTOOL_GDRVINFO, its first field.
    unsafe { ethtool(sock, ifname, &mut info)? };
    Ok(DriverInfo {
        driver: c_string(&info.driver),
        version: c_string(&info.version),
        firmware: c_string(&info.fw_version),
        bus_info: c_string(&info.bus_info),
        n_stats: info.n_stats,
    })
}

/// `ioctl(SIOCETHTOOL, ETHTOOL_GCHANNELS)`: channel (queue) counts.
/// Many virtual devices (e.g. `lo`) answer `EOPNOTSUPP`.
pub fn ethtool_channels(sock: BorrowedFd<'_>, ifname: &str) -> io::Result<Channels> {
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    // SAFETY: `EthtoolChannels` is `struct ethtool_channels`, the layout
    // of ETHTOOL_GCHANNELS, its first field.
    unsafe { ethtool(sock, ifname, &mut ch)? };
    Ok(Channels {
        rx: ch.rx_count,
        tx: ch.tx_count,
        other: ch.other_count,
        combined: ch.combined_count,
        max_rx: ch.max_rx,
        max_tx: ch.max_tx,
        max_other: ch.max_other,
        max_combined: ch.max_combined,
    })
}

/// `ETHTOOL_GSTRINGS(ETH_SS_STATS)` and `ETHTOOL_GSTATS`: the driver's own
/// statistics (what `ethtool -S` shows), as (name, value) pairs in the
/// driver's order.
///
/// `EOPNOTSUPP` for a driver without statistics; `EAGAIN` if the driver's
/// set of statistics changed between the calls (try again).
pub fn ethtool_stats(sock: BorrowedFd<'_>, ifname: &str) -> io::Result<Vec<(String, u64)>> {
    let info_n = ethtool_drvinfo(sock, ifname)?.n_stats as usize;
    if info_n == 0 {
        return Ok(Vec::new());
    }
    if info_n > MAX_STATS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{ifname}: the driver reports {info_n} statistics, more than {MAX_STATS}"),
        ));
    }
    let changed = || {
        io::Error::new(
            io::ErrorKind::WouldBlock,
            format!("{ifname}: the driver's statistics changed while being read"),
        )
    };
    // struct ethtool_gstrings { u32 cmd, string_set, len; u8 data[]; }
    let mut names = GuardedBuf::new(12 + info_n * ETH_GSTRING_LEN)?;
    names.write_u32(0, ETHTOOL_GSTRINGS);
    names.write_u32(4, ETH_SS_STATS);
    names.write_u32(8, info_n as u32);
    ethtool_guarded(sock, ifname, &mut names).map_err(|e| {
        if e.raw_os_error() == Some(libc::EFAULT) {
            changed()
        } else {
            e
        }
    })?;
    let n = names.read_u32(8) as usize;
    // struct ethtool_stats { u32 cmd, n_stats; u64 data[]; }
    let mut values = GuardedBuf::new(8 + info_n * 8)?;
    values.write_u32(0, ETHTOOL_GSTATS);
    values.write_u32(4, info_n as u32);
    ethtool_guarded(sock, ifname, &mut values).map_err(|e| {
        if e.raw_os_error() == Some(libc::EFAULT) {
            changed()
        } else {
            e
        }
    })?;
    if n != info_n || values.read_u32(4) as usize != info_n {
        return Err(changed());
    }
    Ok((0..n)
        .map(|i| {
            let at = 12 + i * ETH_GSTRING_LEN;
            let name = c_string(&names.bytes()[at..at + ETH_GSTRING_LEN]);
            (name, values.read_u64(8 + i * 8))
        })
        .collect())
}

/// `setns(ns, CLONE_NEWNET)`: moves the calling thread (only it) into the
/// network namespace `ns` refers to (e.g. an open `/run/netns/NAME`).
/// Sockets the thread creates afterwards live in that namespace. Needs
/// `CAP_SYS_ADMIN`.
pub fn enter_netns(ns: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain syscall on a descriptor that is open for the borrow's
    // lifetime; no memory is passed. It changes only this thread's namespace.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)`: ask the kernel for error
/// strings in netlink error replies (kernels since 4.12).
pub fn set_netlink_ext_ack(sock: BorrowedFd<'_>) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: `sock` is open for the borrow's lifetime; the option value
    // pointer and length describe `one`, a live `c_int` on this stack frame.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            SOL_NETLINK,
            NETLINK_EXT_ACK,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Large allocations from now on are always fresh anonymous mappings
/// (glibc's `M_MMAP_THRESHOLD` fixed at `bytes`): their pages are zero and
/// take memory only once written. Without it glibc raises the threshold
/// each time a large block is freed, after which a connection's zeroed
/// multi-megabyte receive buffer comes from a thread's heap and is cleared
/// byte by byte: resident at once, though mostly never used (1,000
/// connections: 394 MiB against 116 MiB). Returns false where the C
/// library refused, or is not glibc.
#[cfg(target_env = "gnu")]
pub fn lazy_large_allocations(bytes: usize) -> bool {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt only changes the allocator's parameters; it touches
    // no memory of ours, and is called before the allocations it affects.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, v) == 1 }
}

/// See the glibc version: other C libraries keep their own policy.
#[cfg(not(target_env = "gnu"))]
pub fn lazy_large_allocations(_bytes: usize) -> bool {
    false
}

/// User and system CPU time of the whole process (every thread, running or
/// exited), from `getrusage(RUSAGE_SELF)`, as iperf3 measures its own.
pub fn process_times() -> io::Result<(std::time::Duration, std::time::Duration)> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is a live, correctly sized and aligned `struct rusage`
    // owned by this frame; the kernel writes it and reads nothing.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zero-initialised (a valid `rusage`: plain integers), and
    // filled in by the successful call above.
    let ru = unsafe { ru.assume_init() };
    let t = |tv: libc::timeval| {
        std::time::Duration::from_secs(tv.tv_sec.max(0) as u64)
            + std::time::Duration::from_micros(tv.tv_usec.clamp(0, 999_999) as u64)
    };
    Ok((t(ru.ru_utime), t(ru.ru_stime)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_layouts_match_the_kernel() {
        assert_eq!(std::mem::size_of::<EthtoolDrvinfo>(), 196);
        assert_eq!(std::mem::size_of::<EthtoolChannels>(), 36);
        // The kernel copies sizeof(struct ifreq) = 40 (64-bit) / 32 (32-bit).
        assert!(std::mem::size_of::<IfreqData>() >= 40);
    }

    #[test]
    fn rejects_bad_interface_names_before_any_syscall() {
        for bad in ["", "0123456789abcdef", "a\0b"] {
            let e = ifname_bytes(bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
        assert_eq!(&ifname_bytes("eth0").unwrap()[..5], b"eth0\0");
    }

    #[test]
    fn guarded_buffer_ends_at_the_guard_page_and_reads_back() {
        let mut b = GuardedBuf::new(12).unwrap();
        assert_eq!(b.len, 16, "rounded up to whole u64s");
        let page = b.map_len - (b.offset + b.len);
        assert_eq!(
            (b.offset + b.len) % 4096,
            0,
            "the reply ends where the guard page starts ({page} bytes of guard)"
        );
        assert_eq!(b.ptr() as usize % 8, 0);
        assert!(b.bytes().iter().all(|&x| x == 0));
        b.write_u32(4, 0xdead_beef);
        assert_eq!(b.read_u32(4), 0xdead_beef);
        assert_eq!(b.read_u64(8), 0);
    }

    #[test]
    fn ethtool_stats_of_a_missing_interface_is_enodev() {
        use std::os::fd::{AsFd, FromRawFd, OwnedFd};
        // SAFETY: plain socket(2); the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        assert!(raw >= 0);
        // SAFETY: `raw` is a fresh descriptor nothing else owns.
        let sock = unsafe { OwnedFd::from_raw_fd(raw) };
        let e = ethtool_stats(sock.as_fd(), "xtcp-no-such0").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
    }

    #[test]
    fn c_string_stops_at_nul_or_end() {
        assert_eq!(c_string(b"veth\0junk"), "veth");
        assert_eq!(c_string(b"full"), "full");
        assert_eq!(c_string(b""), "");
    }
}
