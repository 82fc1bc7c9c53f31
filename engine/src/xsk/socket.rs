//! An AF_XDP socket bound to one queue of one interface, with its four rings.

use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use super::XskError;
use super::mmap::Mmap;
use super::ring::{ConsRing, ProdRing, RingMem};
use super::umem::{Frame, Umem};
use crate::frame::{Desc, FrameAddr};

/// `XDP_MAX_TX_SKB_BUDGET` (Linux 6.17 `if_xdp.h`; not in libc yet).
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// How to bind: copy, zero-copy, or zero-copy when the driver has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BindMode {
    /// `XDP_COPY`: works on every driver with XDP.
    Copy,
    /// `XDP_ZEROCOPY`: fails unless the driver supports it.
    ZeroCopy,
    /// Try zero-copy; if the driver refuses, log a notice and use copy.
    #[default]
    Auto,
}

/// Ring sizes and bind options of one socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct XskConfig {
    /// RX ring entries (power of two).
    pub rx_size: u32,
    /// TX ring entries (power of two).
    pub tx_size: u32,
    /// Fill ring entries (power of two; at least twice the RX ring is best).
    pub fill_size: u32,
    /// Completion ring entries (power of two).
    pub comp_size: u32,
    /// Copy / zero-copy / auto.
    pub bind: BindMode,
    /// `XDP_USE_NEED_WAKEUP`: the kernel says when it needs a syscall.
    pub need_wakeup: bool,
    /// `XDP_USE_SG`: packets larger than a frame arrive and leave as chains.
    pub multi_buffer: bool,
    /// Copy mode: descriptors the kernel sends per TX wakeup
    /// (`XDP_MAX_TX_SKB_BUDGET`, Linux 6.17+; the kernel's default is 32).
    /// `None` keeps the default; values are clamped to 32..=TX ring size.
    /// Ignored, with a debug log, where the kernel lacks the option.
    pub tx_budget: Option<u32>,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            rx_size: 2048,
            tx_size: 2048,
            fill_size: 4096,
            comp_size: 4096,
            bind: BindMode::Auto,
            need_wakeup: true,
            multi_buffer: false,
            tx_budget: Some(2048),
        }
    }
}

/// XDP socket statistics (`XDP_STATISTICS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct XskStats {
    /// Packets dropped for reasons other than a full ring / empty fill ring.
    pub rx_dropped: u64,
    /// Invalid descriptors on the fill ring.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors on the TX ring (e.g. longer than the MTU allows).
    pub tx_invalid_descs: u64,
    /// Packets dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty when kicked.
    pub tx_ring_empty_descs: u64,
}

/// How the socket ended up bound.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BindInfo {
    /// Interface name.
    pub iface: String,
    /// Interface index.
    pub ifindex: u32,
    /// Queue id.
    pub queue: u32,
    /// The kernel confirms zero-copy (`XDP_OPTIONS_ZEROCOPY`).
    pub zerocopy: bool,
    /// Bound with `XDP_USE_NEED_WAKEUP`.
    pub need_wakeup: bool,
    /// Bound with `XDP_USE_SG`.
    pub multi_buffer: bool,
    /// Shares the UMEM registered by another socket.
    pub shared_umem: bool,
}

/// A received descriptor: the frame (now owned by userspace), where the
/// data starts in it, its length, and whether more of the packet follows.
#[derive(Debug)]
pub struct RxDesc {
    /// The frame, given back by the kernel.
    pub frame: Frame,
    /// Offset of the data inside the frame.
    pub offset: u32,
    /// Data length.
    pub len: u32,
    /// More descriptors of this packet follow (`XDP_PKT_CONTD`).
    pub contd: bool,
}

/// A descriptor to transmit: the frame is handed to the kernel until the
/// completion ring returns it.
#[derive(Debug)]
pub struct TxDesc {
    /// The frame holding the data.
    pub frame: Frame,
    /// Offset of the data inside the frame.
    pub offset: u32,
    /// Data length.
    pub len: u32,
    /// More descriptors of this packet follow.
    pub contd: bool,
}

/// The fill ring: frames given to the kernel for receiving.
pub struct FillQueue {
    ring: ProdRing<u64>,
    fd: Arc<OwnedFd>,
    umem: Arc<Umem>,
}

/// The completion ring: transmitted frames coming back.
pub struct CompQueue {
    ring: ConsRing<u64>,
    umem: Arc<Umem>,
}

/// The RX ring: received packets.
pub struct RxQueue {
    ring: ConsRing<Desc>,
    umem: Arc<Umem>,
    fd: Arc<OwnedFd>,
}

/// The TX ring: packets to send.
pub struct TxQueue {
    ring: ProdRing<Desc>,
    fd: Arc<OwnedFd>,
    umem: Arc<Umem>,
}

impl FillQueue {
    /// Moves up to `max` frames from the end of `pool` to the fill ring;
    /// returns how many.
    #[inline]
    pub fn fill(&mut self, pool: &mut Vec<Frame>, max: u32) -> u32 {
        let want = max.min(pool.len() as u32);
        let (start, n) = self.ring.reserve(want);
        for i in 0..n {
            // `n <= pool.len()`, so pop always yields.
            if let Some(frame) = pool.pop() {
                let base = self.umem.check(&frame);
                self.ring.write(start.wrapping_add(i), base as u64);
            }
        }
        self.ring.submit(n);
        n
    }

    /// Frames the kernel has not used yet.
    pub fn in_flight(&self) -> u32 {
        self.ring.in_flight()
    }

    /// Ring size.
    pub fn size(&self) -> u32 {
        self.ring.size()
    }

    /// True if the kernel wants a wakeup to refill (need-wakeup mode).
    #[inline]
    pub fn needs_wakeup(&self) -> bool {
        self.ring.needs_wakeup()
    }

    /// Wakes the kernel's RX path (a non-blocking `recvfrom`).
    #[inline]
    pub fn wakeup(&self) {
        // SAFETY: a zero-length recvfrom with null buffers on our own socket
        // fd; the kernel treats it as a wakeup and writes nothing.
        unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
        }
    }
}

impl CompQueue {
    /// Takes up to `max` completed descriptors, pushing the tokens of the
    /// frames they free to `pool` (which should have capacity for all
    /// frames: no allocation then). A lent descriptor (see
    /// [`TxBatch::lend`]) frees nothing unless its frame was given back.
    #[inline]
    pub fn complete(&mut self, pool: &mut Vec<Frame>, max: u32) -> u32 {
        let (start, n) = self.ring.peek(max);
        for i in 0..n {
            let addr = self.ring.read(start.wrapping_add(i));
            // A lent descriptor only lowers its frame's count (the owner
            // keeps the token), unless it was the last of a frame given back.
            if let Some(frame) = self.umem.completed(FrameAddr(addr)) {
                pool.push(frame);
            }
        }
        self.ring.release(n);
        n
    }

    /// Ring size.
    pub fn size(&self) -> u32 {
        self.ring.size()
    }
}

impl RxQueue {
    /// Hands up to `max` received descriptors to `f`; returns how many.
    /// The ring entries are released even if `f` panics.
    #[inline]
    pub fn recv(&mut self, max: u32, mut f: impl FnMut(RxDesc)) -> u32 {
        struct Release<'a>(&'a mut ConsRing<Desc>, u32);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.release(self.1);
            }
        }
        let size = self.umem.frame_size();
        let (start, n) = self.ring.peek(max);
        // The headers of all that arrived start loading at once: each is a
        // cache miss (the kernel wrote it), and `f` parses them in turn.
        for i in 0..n {
            self.umem
                .prefetch(self.ring.read(start.wrapping_add(i)).addr);
        }
        let guard = Release(&mut self.ring, n);
        for i in 0..n {
            let d = guard.0.read(start.wrapping_add(i));
            f(RxDesc {
                frame: self.umem.token(d.addr),
                offset: d.addr.offset_in_frame(size) as u32,
                len: d.len,
                contd: d.is_contd(),
            });
        }
        drop(guard);
        n
    }

    /// Ring size.
    pub fn size(&self) -> u32 {
        self.ring.size()
    }

    /// Waits up to `timeout_ms` for packets (`poll(POLLIN)`); true if readable.
    pub fn poll(&self, timeout_ms: i32) -> bool {
        poll_fd(self.fd.as_fd(), libc::POLLIN, timeout_ms)
    }
}

/// Reserved TX slots; each [`push`](TxBatch::push) fills one. Dropping the
/// batch submits what was pushed and gives back the rest.
pub struct TxBatch<'a> {
    ring: &'a mut ProdRing<Desc>,
    umem: &'a Umem,
    start: u32,
    reserved: u32,
    pushed: u32,
}

impl TxBatch<'_> {
    /// Slots left in this batch.
    #[inline]
    pub fn remaining(&self) -> u32 {
        self.reserved - self.pushed
    }

    /// Queues one descriptor; gives it back if the batch is full or the
    /// descriptor does not fit its frame (`len` 0, or `offset + len` past
    /// the frame's end: the kernel would reject it and never complete the
    /// frame, or complete a neighbouring one).
    ///
    /// # Panics
    /// If the frame belongs to another UMEM.
    #[inline]
    pub fn push(&mut self, d: TxDesc) -> Result<(), TxDesc> {
        let base = self.umem.check(&d.frame);
        if self.pushed == self.reserved
            || d.len == 0
            || d.offset as usize + d.len as usize > self.umem.frame_size().bytes()
        {
            return Err(d);
        }
        let desc = Desc::new(FrameAddr(base as u64 + u64::from(d.offset)), d.len, d.contd);
        self.ring.write(self.start.wrapping_add(self.pushed), desc);
        self.pushed += 1;
        Ok(())
    }
}

impl TxBatch<'_> {
    /// Queues one descriptor for `len` bytes at `offset` in a frame that
    /// userspace keeps (a send buffer's): the frame counts as lent until the
    /// descriptor completes, and cannot be written meanwhile. False if the
    /// batch is full or the range does not fit the frame.
    ///
    /// # Panics
    /// If the frame belongs to another UMEM.
    #[inline]
    pub fn lend(&mut self, frame: &Frame, offset: u32, len: u32, contd: bool) -> bool {
        let base = self.umem.check(frame);
        if self.pushed == self.reserved
            || len == 0
            || offset as usize + len as usize > self.umem.frame_size().bytes()
        {
            return false;
        }
        self.umem.lend(base);
        let desc = Desc::new(FrameAddr(base as u64 + u64::from(offset)), len, contd);
        self.ring.write(self.start.wrapping_add(self.pushed), desc);
        self.pushed += 1;
        true
    }
}

impl Drop for TxBatch<'_> {
    fn drop(&mut self) {
        self.ring.cancel(self.reserved - self.pushed);
        self.ring.submit(self.pushed);
    }
}

impl TxQueue {
    /// Reserves up to `n` TX slots.
    #[inline]
    pub fn batch(&mut self, n: u32) -> TxBatch<'_> {
        let (start, reserved) = self.ring.reserve(n);
        TxBatch {
            ring: &mut self.ring,
            umem: &self.umem,
            start,
            reserved,
            pushed: 0,
        }
    }

    /// Ring size.
    pub fn size(&self) -> u32 {
        self.ring.size()
    }

    /// Descriptors submitted that the kernel has not consumed yet.
    pub fn in_flight(&self) -> u32 {
        self.ring.in_flight()
    }

    /// True if the kernel wants a `sendto` to process the ring.
    #[inline]
    pub fn needs_wakeup(&self) -> bool {
        self.ring.needs_wakeup()
    }

    /// Kicks the kernel's TX path (a non-blocking `sendto`). Transient
    /// errors (EAGAIN, EBUSY, ENOBUFS, ENETDOWN) are normal and returned as
    /// `Ok(false)`; others are returned.
    #[inline]
    pub fn kick(&self) -> io::Result<bool> {
        // SAFETY: a zero-length sendto with a null buffer on our own socket;
        // the kernel reads nothing from userspace memory for it.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN) => Ok(false),
            _ => Err(e),
        }
    }
}

/// An AF_XDP socket bound to one queue, with its rings.
///
/// The fields are the rings so that a worker can borrow them separately.
pub struct Xsk {
    /// Fill ring.
    pub fill: FillQueue,
    /// Completion ring.
    pub comp: CompQueue,
    /// RX ring.
    pub rx: RxQueue,
    /// TX ring.
    pub tx: TxQueue,
    fd: Arc<OwnedFd>,
    umem: Arc<Umem>,
    info: BindInfo,
}

impl std::fmt::Debug for Xsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xsk").field("info", &self.info).finish()
    }
}

impl AsFd for Xsk {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn check_ring_size(what: &str, n: u32) -> Result<(), XskError> {
    if !n.is_power_of_two() || !(64..=(1 << 20)).contains(&n) {
        return Err(XskError::Config(format!(
            "{what} ring size {n} must be a power of two in 64..=1048576"
        )));
    }
    Ok(())
}

fn setsockopt<T>(fd: BorrowedFd<'_>, opt: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: `val` points to a live T of the size we pass; the kernel only
    // reads it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A kernel struct that `getsockopt` may fill with whatever bytes the
/// kernel writes.
///
/// # Safety
///
/// Every byte pattern must be a valid value of the type (`#[repr(C)]`
/// or a newtype of one, integer fields only), as the kernel's struct for
/// the option is.
unsafe trait KernelStruct: Default {}

// SAFETY: newtypes of libc's `#[repr(C)]` structs of `u64` and `u32`
// fields: every byte pattern is a valid value.
unsafe impl KernelStruct for MmapOffsets {}
// SAFETY: as above (`xdp_options`: one `u32`).
unsafe impl KernelStruct for XdpOptions {}
// SAFETY: as above (`xdp_statistics`: `u64`s).
unsafe impl KernelStruct for Stats {}

fn getsockopt<T: KernelStruct>(fd: BorrowedFd<'_>, opt: libc::c_int) -> io::Result<(T, usize)> {
    let mut val = T::default();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `val` is a live, writable T and `len` its size; the kernel
    // writes at most `len` bytes and updates `len`, and any bytes it writes
    // make a valid T (`KernelStruct`).
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            (&mut val as *mut T).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok((val, len as usize))
    } else {
        Err(io::Error::last_os_error())
    }
}

fn poll_fd(fd: BorrowedFd<'_>, events: libc::c_short, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd, count 1.
    let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    r > 0 && p.revents & events != 0
}

/// Interface index of `iface` in the calling thread's network namespace.
pub fn ifindex(iface: &str) -> Result<u32, XskError> {
    let c = CString::new(iface).map_err(|_| XskError::NoInterface {
        iface: iface.to_owned(),
    })?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        let e = io::Error::last_os_error();
        // No such device; anything else (no file descriptor left for the
        // socket the lookup opens, …) says nothing about the interface.
        if e.raw_os_error() == Some(libc::ENODEV) {
            return Err(XskError::NoInterface {
                iface: iface.to_owned(),
            });
        }
        return Err(XskError::Syscall {
            call: "if_nametoindex",
            detail: format!("looking up the interface `{iface}`"),
            source: e,
            hint: String::new(),
        });
    }
    Ok(idx)
}

/// The name of interface `index` in the calling thread's network namespace
/// (`if_indextoname`), or `None` if there is none.
pub fn ifname(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` has the IF_NAMESIZE bytes if_indextoname may write,
    // including the NUL; the result is NULL or a pointer into `buf`.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success `buf` holds a NUL-terminated name.
    let name = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}

/// Interface `index` for messages: `"eth1 (index 3)"`, or `"index 3"` when
/// no interface has that index here.
pub fn describe_ifindex(index: u32) -> String {
    match ifname(index) {
        Some(name) => format!("{name} (index {index})"),
        None => format!("index {index}"),
    }
}

struct MmapOffsets(libc::xdp_mmap_offsets);

impl Default for RingOff {
    fn default() -> Self {
        RingOff(libc::xdp_ring_offset {
            producer: 0,
            consumer: 0,
            desc: 0,
            flags: 0,
        })
    }
}
struct RingOff(libc::xdp_ring_offset);

fn map_ring<T: Copy>(
    fd: BorrowedFd<'_>,
    off: &libc::xdp_ring_offset,
    size: u32,
    pgoff: u64,
    what: &'static str,
) -> Result<RingMem<T>, XskError> {
    let len = off.desc as usize + size as usize * size_of::<T>();
    let map = Mmap::ring(fd, len, pgoff).map_err(|e| {
        XskError::syscall(
            "mmap",
            format!("{what} ring, {size} entries"),
            e,
            "the memlock limit may be too low (`ulimit -l unlimited`)".to_owned(),
        )
    })?;
    let base = map.as_ptr();
    let owner: Arc<dyn std::any::Any + Send + Sync> = Arc::new(map);
    // SAFETY: the kernel lays out the ring at these offsets inside the
    // mapping (XDP_MMAP_OFFSETS), with u32 producer/consumer/flags words and
    // `size` entries of T (u64 for fill/completion, xdp_desc for RX/TX);
    // `owner` keeps the mapping alive; exactly one userspace role is built
    // per ring (this function is called once per ring), and the kernel plays
    // the other.
    unsafe {
        Ok(RingMem::new(
            base.add(off.producer as usize).cast(),
            base.add(off.consumer as usize).cast(),
            base.add(off.flags as usize).cast(),
            base.add(off.desc as usize).cast(),
            size,
            owner,
        ))
    }
}

/// How long binding a queue waits for the socket of a run that ended
/// moments before to be released ([`Xsk::bind_waiting`]): back-to-back
/// runs on one interface then just work; a queue another program holds is
/// reported busy after this.
pub const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Xsk {
    /// [`Xsk::bind`], waiting up to `wait` while the queue is busy: a
    /// socket closed moments before (the previous run's, say) holds its
    /// queue until the kernel releases it in deferred work, about a second
    /// later on an idle machine and more on a loaded one, and nothing but a
    /// bind shows when that is done. A queue that stays busy (another
    /// program's socket) is [`XskError::QueueBusy`] once `wait` is over.
    pub fn bind_waiting(
        umem: &Arc<Umem>,
        iface: &str,
        queue: u32,
        config: &XskConfig,
        wait: std::time::Duration,
    ) -> Result<Xsk, XskError> {
        let deadline = std::time::Instant::now() + wait;
        let mut said = false;
        loop {
            match Xsk::bind(umem, iface, queue, config) {
                Err(XskError::QueueBusy { .. }) if std::time::Instant::now() < deadline => {
                    if !said {
                        said = true;
                        tracing::info!(
                            iface,
                            queue,
                            "queue busy: waiting up to {wait:?} for a socket closed moments ago \
                             to be released"
                        );
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                r => return r,
            }
        }
    }

    /// Creates an AF_XDP socket on `iface` queue `queue` using `umem` and
    /// binds it as `config` says. The first socket bound on a UMEM
    /// registers it; later ones share it (`XDP_SHARED_UMEM`) with their own
    /// fill and completion rings.
    pub fn bind(
        umem: &Arc<Umem>,
        iface: &str,
        queue: u32,
        config: &XskConfig,
    ) -> Result<Xsk, XskError> {
        check_ring_size("RX", config.rx_size)?;
        check_ring_size("TX", config.tx_size)?;
        check_ring_size("fill", config.fill_size)?;
        check_ring_size("completion", config.comp_size)?;
        let ifindex = ifindex(iface)?;

        // SAFETY: plain socket(2) call; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => XskError::permission(e),
                Some(libc::EAFNOSUPPORT) => XskError::Unsupported {
                    what: "AF_XDP sockets".to_owned(),
                    hint: "the kernel was built without CONFIG_XDP_SOCKETS".to_owned(),
                },
                _ => XskError::syscall("socket", "AF_XDP".to_owned(), e, String::new()),
            });
        }
        // SAFETY: `raw` is a fresh fd we own.
        let fd = Arc::new(unsafe { OwnedFd::from_raw_fd(raw) });
        let bfd = fd.as_fd();

        let mut reg_state = umem
            .sockets
            .lock()
            .map_err(|_| XskError::Config("UMEM registration lock poisoned".into()))?;
        // A live socket on this UMEM, if any: bind sharing it. Otherwise
        // (first socket, or all earlier ones closed) register the UMEM here.
        reg_state.sockets.retain(|(w, _, _)| w.strong_count() > 0);
        if reg_state
            .sockets
            .iter()
            .any(|&(_, i, q)| i == ifindex && q == queue)
        {
            return Err(XskError::Config(format!(
                "this UMEM already has a socket on {iface} queue {queue}: xtcp binds one socket \
                 per queue (sharing a queue would need shared fill and completion rings)"
            )));
        }
        let sharer: Option<Arc<OwnedFd>> =
            reg_state.sockets.iter().find_map(|(w, _, _)| w.upgrade());
        let shared_fd: Option<RawFd> = sharer.as_ref().map(|f| f.as_raw_fd());
        if shared_fd.is_some()
            && (reg_state.need_wakeup != config.need_wakeup
                || reg_state.multi_buffer != config.multi_buffer)
        {
            return Err(XskError::Config(format!(
                "sockets sharing a UMEM inherit need-wakeup ({}) and multi-buffer ({}) from the \
                 first socket bound on it; this one asks for need-wakeup {} and multi-buffer {}",
                reg_state.need_wakeup,
                reg_state.multi_buffer,
                config.need_wakeup,
                config.multi_buffer
            )));
        }
        if shared_fd.is_none() {
            let reg = libc::xdp_umem_reg {
                addr: umem.area_ptr() as u64,
                len: umem.area_len() as u64,
                chunk_size: umem.frame_size().bytes() as u32,
                headroom: umem.config().headroom,
                flags: 0,
                tx_metadata_len: 0,
            };
            setsockopt(bfd, libc::XDP_UMEM_REG, &reg).map_err(|e| {
                // Without CAP_IPC_LOCK the kernel charges the UMEM's pages
                // to RLIMIT_MEMLOCK and refuses with ENOBUFS beyond it
                // (xdp_umem_account_pages); pinning them can fail with
                // ENOMEM or EPERM.
                let hint = match e.raw_os_error() {
                    Some(libc::ENOBUFS | libc::ENOMEM | libc::EPERM) => {
                        crate::caps::memlock_hint(crate::caps::memlock_soft(), reg.len)
                    }
                    _ => String::new(),
                };
                XskError::syscall(
                    "setsockopt(XDP_UMEM_REG)",
                    format!("{} bytes, chunk {}", reg.len, reg.chunk_size),
                    e,
                    hint,
                )
            })?;
        }
        let ring_opt = |opt, n: u32, what: &'static str| {
            setsockopt(bfd, opt, &n).map_err(|e| {
                XskError::syscall(
                    "setsockopt",
                    format!("{what} ring size {n}"),
                    e,
                    String::new(),
                )
            })
        };
        ring_opt(
            libc::XDP_UMEM_FILL_RING,
            config.fill_size,
            "XDP_UMEM_FILL_RING",
        )?;
        ring_opt(
            libc::XDP_UMEM_COMPLETION_RING,
            config.comp_size,
            "XDP_UMEM_COMPLETION_RING",
        )?;
        ring_opt(libc::XDP_RX_RING, config.rx_size, "XDP_RX_RING")?;
        ring_opt(libc::XDP_TX_RING, config.tx_size, "XDP_TX_RING")?;

        let (off, len): (MmapOffsets, usize) =
            getsockopt(bfd, libc::XDP_MMAP_OFFSETS).map_err(|e| {
                XskError::syscall("getsockopt", "XDP_MMAP_OFFSETS".into(), e, String::new())
            })?;
        if len != size_of::<libc::xdp_mmap_offsets>() {
            return Err(XskError::Unsupported {
                what: "XDP_MMAP_OFFSETS with ring flags".to_owned(),
                hint: "xtcp needs Linux 5.4 or newer".to_owned(),
            });
        }
        let off = off.0;
        let fill = map_ring::<u64>(
            bfd,
            &off.fr,
            config.fill_size,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            "fill",
        )?;
        let comp = map_ring::<u64>(
            bfd,
            &off.cr,
            config.comp_size,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            "completion",
        )?;
        let rx = map_ring::<Desc>(
            bfd,
            &off.rx,
            config.rx_size,
            libc::XDP_PGOFF_RX_RING as u64,
            "RX",
        )?;
        let tx = map_ring::<Desc>(
            bfd,
            &off.tx,
            config.tx_size,
            libc::XDP_PGOFF_TX_RING as u64,
            "TX",
        )?;

        let mut base_flags: u16 = 0;
        if config.need_wakeup {
            base_flags |= libc::XDP_USE_NEED_WAKEUP;
        }
        if config.multi_buffer {
            base_flags |= libc::XDP_USE_SG;
        }
        let do_bind = |mode_flag: u16| -> io::Result<()> {
            // With XDP_SHARED_UMEM the kernel takes the mode and the other
            // flags from the UMEM's first socket and refuses them here.
            let flags = if shared_fd.is_some() {
                libc::XDP_SHARED_UMEM
            } else {
                base_flags | mode_flag
            };
            let sa = libc::sockaddr_xdp {
                sxdp_family: libc::AF_XDP as u16,
                sxdp_flags: flags,
                sxdp_ifindex: ifindex,
                sxdp_queue_id: queue,
                sxdp_shared_umem_fd: shared_fd.unwrap_or(0) as u32,
            };
            // SAFETY: `sa` is a valid sockaddr_xdp of the size passed.
            let r = unsafe {
                libc::bind(
                    bfd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_xdp).cast(),
                    size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            if r == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        let bind_err = |e: io::Error, mode: &str| -> XskError {
            match e.raw_os_error() {
                Some(libc::EBUSY) => XskError::QueueBusy {
                    iface: iface.to_owned(),
                    queue,
                },
                Some(libc::EPERM | libc::EACCES) => XskError::permission(e),
                Some(libc::EOPNOTSUPP) if mode == "zero-copy" => XskError::NoZeroCopy {
                    iface: iface.to_owned(),
                    driver: super::driver_name(iface),
                },
                Some(libc::EOPNOTSUPP) if config.multi_buffer => XskError::Unsupported {
                    what: format!("multi-buffer (XDP_USE_SG) on {iface} in {mode} mode"),
                    hint: "Linux 6.6+ is needed for multi-buffer AF_XDP, and in zero-copy \
                           mode a driver that supports it; lower the MTU to fit one frame \
                           or use copy mode"
                        .to_owned(),
                },
                Some(libc::EINVAL) => XskError::syscall(
                    "bind",
                    format!("AF_XDP {iface} queue {queue}, {mode}"),
                    e,
                    format!(
                        "queue {queue} may not exist on {iface} (see `xtcp probe --iface {iface}`), \
                         or the device refused this mode"
                    ),
                ),
                _ => XskError::syscall(
                    "bind",
                    format!("AF_XDP {iface} queue {queue}, {mode}"),
                    e,
                    String::new(),
                ),
            }
        };
        match config.bind {
            BindMode::Copy => do_bind(libc::XDP_COPY).map_err(|e| bind_err(e, "copy"))?,
            BindMode::ZeroCopy => {
                do_bind(libc::XDP_ZEROCOPY).map_err(|e| bind_err(e, "zero-copy"))?
            }
            BindMode::Auto => match do_bind(libc::XDP_ZEROCOPY) {
                Ok(()) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                    tracing::info!(
                        iface,
                        queue,
                        "zero-copy is not offered here ({e}): copy mode, as --bind auto allows"
                    );
                    do_bind(libc::XDP_COPY).map_err(|e| bind_err(e, "copy"))?
                }
                Err(e) => return Err(bind_err(e, "zero-copy")),
            },
        }

        let (opts, _): (XdpOptions, usize) = getsockopt(bfd, libc::XDP_OPTIONS)
            .map_err(|e| XskError::syscall("getsockopt", "XDP_OPTIONS".into(), e, String::new()))?;
        let zerocopy = opts.0.flags & libc::XDP_OPTIONS_ZEROCOPY != 0;
        // A socket sharing a UMEM inherits the mode of the first one: make a
        // zero-copy request on a copy-mode UMEM an error, not a surprise.
        if config.bind == BindMode::ZeroCopy && !zerocopy {
            return Err(XskError::NoZeroCopy {
                iface: iface.to_owned(),
                driver: super::driver_name(iface),
            });
        }
        if let (Some(budget), false) = (config.tx_budget, zerocopy) {
            let budget = budget.clamp(32, config.tx_size);
            match setsockopt(bfd, XDP_MAX_TX_SKB_BUDGET, &budget) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => {
                    tracing::debug!("XDP_MAX_TX_SKB_BUDGET not supported by this kernel: {e}");
                }
                Err(e) => {
                    return Err(XskError::syscall(
                        "setsockopt",
                        format!("XDP_MAX_TX_SKB_BUDGET {budget}"),
                        e,
                        String::new(),
                    ));
                }
            }
        }
        reg_state
            .sockets
            .push((Arc::downgrade(&fd), ifindex, queue));
        reg_state.need_wakeup = config.need_wakeup;
        reg_state.multi_buffer = config.multi_buffer;
        drop(reg_state);
        drop(sharer);

        let info = BindInfo {
            iface: iface.to_owned(),
            ifindex,
            queue,
            zerocopy,
            need_wakeup: config.need_wakeup,
            multi_buffer: config.multi_buffer,
            shared_umem: shared_fd.is_some(),
        };
        Ok(Xsk {
            fill: FillQueue {
                ring: ProdRing::new(fill),
                fd: fd.clone(),
                umem: umem.clone(),
            },
            comp: CompQueue {
                ring: ConsRing::new(comp),
                umem: umem.clone(),
            },
            rx: RxQueue {
                ring: ConsRing::new(rx),
                umem: umem.clone(),
                fd: fd.clone(),
            },
            tx: TxQueue {
                ring: ProdRing::new(tx),
                fd: fd.clone(),
                umem: umem.clone(),
            },
            fd,
            umem: umem.clone(),
            info,
        })
    }

    /// How the socket is bound.
    pub fn info(&self) -> &BindInfo {
        &self.info
    }

    /// The UMEM.
    pub fn umem(&self) -> &Arc<Umem> {
        &self.umem
    }

    /// Reads `XDP_STATISTICS`.
    pub fn stats(&self) -> Result<XskStats, XskError> {
        let (s, _): (Stats, usize) =
            getsockopt(self.fd.as_fd(), libc::XDP_STATISTICS).map_err(|e| {
                XskError::syscall("getsockopt", "XDP_STATISTICS".into(), e, String::new())
            })?;
        let s = s.0;
        Ok(XskStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        })
    }

    /// Waits up to `timeout_ms` until the socket is readable or writable.
    pub fn poll(&self, events: libc::c_short, timeout_ms: i32) -> bool {
        poll_fd(self.fd.as_fd(), events, timeout_ms)
    }
}

struct XdpOptions(libc::xdp_options);
impl Default for XdpOptions {
    fn default() -> Self {
        XdpOptions(libc::xdp_options { flags: 0 })
    }
}

struct Stats(libc::xdp_statistics);
impl Default for Stats {
    fn default() -> Self {
        Stats(libc::xdp_statistics {
            rx_dropped: 0,
            rx_invalid_descs: 0,
            tx_invalid_descs: 0,
            rx_ring_full: 0,
            rx_fill_ring_empty_descs: 0,
            tx_ring_empty_descs: 0,
        })
    }
}

impl Default for MmapOffsets {
    fn default() -> Self {
        let z = || RingOff::default().0;
        MmapOffsets(libc::xdp_mmap_offsets {
            rx: z(),
            tx: z(),
            fr: z(),
            cr: z(),
        })
    }
}

/// A TX ring and a completion ring on heap memory, with the kernel's ends
/// for a test to play the kernel: it takes descriptors from the TX ring and
/// puts their addresses on the completion ring.
#[cfg(test)]
pub(crate) struct FakeTx {
    pub(crate) tx: TxQueue,
    pub(crate) comp: CompQueue,
    /// The kernel's end of the TX ring.
    pub(crate) tx_kernel: ConsRing<Desc>,
    /// The kernel's end of the completion ring.
    pub(crate) comp_kernel: ProdRing<u64>,
}

/// A UMEM of `frames` 4096-byte frames, for tests on fake rings.
#[cfg(test)]
pub(crate) fn heap_umem(frames: u32) -> Arc<Umem> {
    Arc::new(
        Umem::new(super::UmemConfig {
            frame_count: frames,
            ..super::UmemConfig::default()
        })
        .expect("a small anonymous mapping"),
    )
}

#[cfg(test)]
impl FakeTx {
    pub(crate) fn new(umem: &Arc<Umem>, size: u32) -> FakeTx {
        use super::ring::FakeRing;
        let (tx_prod, tx_kernel, _) = FakeRing::<Desc>::new(size, 0).split();
        let (comp_kernel, comp_cons, _) = FakeRing::<u64>::new(size, 0).split();
        let fd = Arc::new(OwnedFd::from(
            std::fs::File::open("/dev/null").expect("/dev/null"),
        ));
        FakeTx {
            tx: TxQueue {
                ring: tx_prod,
                fd,
                umem: umem.clone(),
            },
            comp: CompQueue {
                ring: comp_cons,
                umem: umem.clone(),
            },
            tx_kernel,
            comp_kernel,
        }
    }

    /// The kernel's part: takes up to `n` TX descriptors and completes them.
    pub(crate) fn transmit(&mut self, n: u32) -> Vec<Desc> {
        let (start, k) = self.tx_kernel.peek(n);
        let descs: Vec<Desc> = (0..k)
            .map(|i| self.tx_kernel.read(start.wrapping_add(i)))
            .collect();
        self.tx_kernel.release(k);
        let (cs, ck) = self.comp_kernel.reserve(k);
        assert_eq!(ck, k, "completion ring full");
        for (i, d) in descs.iter().enumerate() {
            self.comp_kernel.write(cs.wrapping_add(i as u32), d.addr.0);
        }
        self.comp_kernel.submit(k);
        descs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_frame_is_not_writable_until_its_last_descriptor_completes() {
        let umem = heap_umem(4);
        let mut frames = umem.take_frames();
        let mut fake = FakeTx::new(&umem, 8);
        let mut kept = frames.pop().unwrap();
        umem.frame_mut(&mut kept)[..3].copy_from_slice(b"abc");
        // Lent twice (a transmission and a retransmission), plus a frame
        // handed over whole.
        let whole = frames.pop().unwrap();
        let whole_addr = whole.addr();
        {
            let mut b = fake.tx.batch(3);
            assert!(
                b.push(TxDesc {
                    frame: whole,
                    offset: 0,
                    len: 10,
                    contd: false
                })
                .is_ok()
            );
            assert!(b.lend(&kept, 0, 3, false));
            assert!(b.lend(&kept, 1, 2, false));
            assert!(!b.lend(&kept, 4000, 200, false), "past the frame's end");
        }
        assert!(umem.is_lent(&kept));
        assert!(umem.try_frame_mut(&mut kept).is_none());
        assert_eq!(&umem.frame(&kept)[..3], b"abc", "readable while lent");
        // The kernel sends the whole frame and the first lent descriptor:
        // the whole frame's token comes back, one lent descriptor remains.
        let sent = fake.transmit(2);
        assert_eq!(sent.len(), 2);
        let mut pool = Vec::new();
        assert_eq!(fake.comp.complete(&mut pool, 8), 2);
        assert_eq!(pool.len(), 1);
        assert_eq!(pool.pop().unwrap().addr(), whole_addr);
        assert!(
            umem.is_lent(&kept),
            "a lent frame's token stays with its owner"
        );
        // The owner gives it up while still lent: the last completion
        // returns it.
        let kept_addr = kept.addr();
        assert!(umem.give_back(kept).is_none());
        fake.transmit(1);
        assert_eq!(fake.comp.complete(&mut pool, 8), 1);
        assert_eq!(pool.len(), 1);
        assert_eq!(pool.pop().unwrap().addr(), kept_addr);
        let mut kept2 = frames.pop().unwrap();
        {
            let mut b = fake.tx.batch(1);
            assert!(b.lend(&kept2, 0, 1, false));
        }
        let a = kept2.addr();
        fake.transmit(1);
        assert_eq!(fake.comp.complete(&mut pool, 8), 1);
        assert!(pool.is_empty(), "still owned: nothing returned");
        assert!(!umem.is_lent(&kept2));
        umem.frame_mut(&mut kept2)[0] = 1;
        // Given back with nothing in flight: returned at once.
        assert_eq!(umem.give_back(kept2).map(|f| f.addr()), Some(a));
    }

    #[test]
    fn the_given_back_frame_comes_back_once_and_unlent() {
        let umem = heap_umem(2);
        let mut frames = umem.take_frames();
        let mut fake = FakeTx::new(&umem, 4);
        let f = frames.pop().unwrap();
        {
            let mut b = fake.tx.batch(2);
            assert!(b.lend(&f, 0, 1, true));
            assert!(b.lend(&f, 1, 1, false));
        }
        assert!(umem.give_back(f).is_none());
        fake.transmit(2);
        let mut pool = Vec::new();
        assert_eq!(fake.comp.complete(&mut pool, 8), 2);
        assert_eq!(pool.len(), 1, "one token for two descriptors");
        let mut back = pool.pop().unwrap();
        assert!(!umem.is_lent(&back));
        umem.frame_mut(&mut back)[0] = 7;
    }

    #[test]
    #[should_panic(expected = "being transmitted")]
    fn writing_a_lent_frame_panics() {
        let umem = heap_umem(1);
        let mut f = umem.take_frames().pop().unwrap();
        let mut fake = FakeTx::new(&umem, 2);
        {
            let mut b = fake.tx.batch(1);
            assert!(b.lend(&f, 0, 1, false));
        }
        let _ = umem.frame_mut(&mut f);
    }
}
