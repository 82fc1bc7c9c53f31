//! UMEM: the packet memory shared by userspace and the kernel, and the
//! [`Frame`] token that says who owns a frame.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, Weak};

use super::XskError;
use super::mmap::{HUGE_PAGE, Mmap};
use crate::frame::{FrameAddr, FrameSize};

/// How to build a UMEM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UmemConfig {
    /// Number of frames.
    pub frame_count: u32,
    /// Frame (chunk) size.
    pub frame_size: FrameSize,
    /// Bytes the kernel leaves free at the start of each RX frame (after its
    /// own XDP headroom) for headers a TX path wants to prepend.
    pub headroom: u32,
    /// Back the area with 2 MB hugepages (must be reserved beforehand:
    /// `/proc/sys/vm/nr_hugepages`). Without, the area is offered to the
    /// kernel's transparent huge pages (see [`Umem::huge_bytes`]).
    pub hugepages: bool,
}

impl Default for UmemConfig {
    fn default() -> Self {
        UmemConfig {
            frame_count: 8192,
            frame_size: FrameSize::F4096,
            headroom: 0,
            hugepages: false,
        }
    }
}

/// Ownership token of one UMEM frame held by userspace.
///
/// It cannot be cloned or built by hand: frames come from
/// [`Umem::take_frames`] (once, all of them) and come back from the RX and
/// completion rings. Handing a frame to the fill or TX ring consumes its
/// token, so the frame cannot be touched while the kernel owns it.
///
/// A token also names its UMEM: using it with another UMEM (or its rings)
/// panics instead of aliasing another UMEM's frame.
///
/// A frame can also be *lent* to the TX ring while userspace keeps its token
/// ([`crate::xsk::TxBatch::lend`]): a send buffer's frame that is transmitted
/// by reference, maybe several times over (retransmissions). The UMEM counts
/// the descriptors in flight per frame; while any is, the frame cannot be
/// written ([`Umem::frame_mut`] panics, [`Umem::try_frame_mut`] says no) and
/// [`Umem::give_back`] leaves the token with the completion ring, which hands
/// it out once the last descriptor completes.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    addr: FrameAddr,
    umem: u32,
}

impl Frame {
    /// The frame's base address.
    #[inline]
    pub fn addr(&self) -> FrameAddr {
        self.addr
    }
}

/// The sockets bound on a UMEM and the bind flags they share: sockets that
/// share a UMEM inherit copy/zero-copy, need-wakeup and multi-buffer from the
/// first (the kernel refuses those flags with `XDP_SHARED_UMEM`).
#[derive(Default)]
pub(crate) struct Registration {
    /// Each socket with the interface index and queue it is bound to.
    pub(crate) sockets: Vec<(Weak<OwnedFd>, u32, u32)>,
    pub(crate) need_wakeup: bool,
    pub(crate) multi_buffer: bool,
}

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// A registered (or to-be-registered) UMEM area.
///
/// Share it between sockets of several queues with `Arc<Umem>`: the first
/// socket bound registers it, the others bind with `XDP_SHARED_UMEM`.
pub struct Umem {
    area: Mmap,
    config: UmemConfig,
    frames_taken: AtomicBool,
    id: u32,
    /// The sockets bound on this UMEM (for `XDP_SHARED_UMEM`). Weak: the
    /// UMEM must not keep a socket, and with it its queue, alive.
    pub(crate) sockets: Mutex<Registration>,
    /// Per frame: TX descriptors lent out and not completed, plus
    /// [`GIVEN_BACK`] once the token was given up while some were.
    lent: Box<[AtomicU32]>,
}

/// Flag in [`Umem`]'s lent count: the owner gave the token up while
/// descriptors were in flight; the last completion returns it.
const GIVEN_BACK: u32 = 1 << 31;

impl std::fmt::Debug for Umem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Umem")
            .field("id", &self.id)
            .field("config", &self.config)
            .finish()
    }
}

impl Umem {
    /// Maps a UMEM area of `frame_count × frame_size` bytes.
    pub fn new(config: UmemConfig) -> Result<Umem, XskError> {
        if config.frame_count == 0 || config.frame_count > (1 << 24) {
            return Err(XskError::Config(format!(
                "UMEM frame count {} is out of range 1..=16777216",
                config.frame_count
            )));
        }
        let fs = config.frame_size.bytes() as u32;
        if config.headroom > fs / 2 {
            return Err(XskError::Config(format!(
                "UMEM headroom {} is too large for {fs}-byte frames (at most {})",
                config.headroom,
                fs / 2
            )));
        }
        let len = config.frame_count as usize * config.frame_size.bytes();
        let len = if config.hugepages {
            len.next_multiple_of(HUGE_PAGE)
        } else {
            len
        };
        let area = Mmap::anonymous(len, config.hugepages).map_err(|e| {
            let hint = if config.hugepages {
                format!(
                    "{} MB of 2 MB hugepages are needed: reserve them with \
                     `echo N > /proc/sys/vm/nr_hugepages`, or leave hugepages off",
                    len >> 20
                )
            } else {
                // (Not locked here: the memlock limit is checked where the
                // area is registered, XDP_UMEM_REG.)
                let available = std::fs::read_to_string("/proc/meminfo")
                    .ok()
                    .and_then(|m| {
                        m.lines()
                            .find_map(|l| l.strip_prefix("MemAvailable:"))
                            .and_then(|v| {
                                v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
                            })
                    })
                    .map(|kb| format!(" ({} MiB available)", kb >> 10))
                    .unwrap_or_default();
                format!(
                    "the kernel would not give {} MiB of memory{available}: the UMEM is \
                     --frames × the frame size ({} × {fs} bytes): give fewer --frames",
                    len >> 20,
                    config.frame_count
                )
            };
            XskError::syscall("mmap", format!("UMEM of {len} bytes"), e, hint)
        })?;
        Ok(Umem {
            area,
            config,
            frames_taken: AtomicBool::new(false),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            sockets: Mutex::new(Registration::default()),
            lent: (0..config.frame_count).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// Bytes of the area.
    pub fn bytes(&self) -> u64 {
        self.area.len() as u64
    }

    /// Bytes of the area on 2 MiB pages now: all with reserved hugepages;
    /// else those the kernel's transparent huge pages backed it with (the
    /// system's `/sys/kernel/mm/transparent_hugepage/enabled` decides,
    /// and memory that is fragmented gets fewer). Huge pages spare the
    /// worker a TLB miss for most frames it writes headers into: with
    /// base pages, each of a UMEM's thousands of frames is a page of its
    /// own. `None` where `/proc/self/smaps` cannot be read.
    pub fn huge_bytes(&self) -> Option<u64> {
        self.area.huge_bytes(self.config.hugepages)
    }

    /// The configuration this UMEM was built with.
    pub fn config(&self) -> &UmemConfig {
        &self.config
    }

    /// Frame size.
    #[inline]
    pub fn frame_size(&self) -> FrameSize {
        self.config.frame_size
    }

    /// Number of frames.
    #[inline]
    pub fn frame_count(&self) -> u32 {
        self.config.frame_count
    }

    pub(crate) fn area_ptr(&self) -> *mut u8 {
        self.area.as_ptr()
    }

    pub(crate) fn area_len(&self) -> usize {
        self.area.len()
    }

    /// Starts loading the cache line at `addr` (an address in the area,
    /// as descriptors carry it) into the CPU's caches, without waiting:
    /// for a received packet's headers, which the kernel wrote (often from
    /// another core) and the worker is about to parse. Addresses outside
    /// the area are ignored.
    #[inline]
    pub(crate) fn prefetch(&self, addr: FrameAddr) {
        let Ok(off) = usize::try_from(addr.0) else {
            return;
        };
        if off >= self.area.len() {
            return;
        }
        let p = self
            .area
            .as_ptr()
            .wrapping_add(off)
            .cast::<i8>()
            .cast_const();
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint that reads nothing into the program
        // and cannot fault; SSE, which it needs, is part of every x86_64.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }

    /// The tokens of all frames, the first time it is called; afterwards an
    /// empty vector (each frame has exactly one token).
    pub fn take_frames(&self) -> Vec<Frame> {
        if self.frames_taken.swap(true, Ordering::AcqRel) {
            return Vec::new();
        }
        let fs = self.config.frame_size.bytes() as u64;
        (0..u64::from(self.config.frame_count))
            .map(|i| Frame {
                addr: FrameAddr(i * fs),
                umem: self.id,
            })
            .collect()
    }

    /// The token of the frame holding `addr`, an address the kernel
    /// returned (RX or completion ring).
    ///
    /// # Panics
    /// If `addr` lies outside the UMEM (the kernel returns only addresses
    /// it was given, so it would be a kernel bug): every token of a UMEM is
    /// a whole frame inside it, which is what [`Umem::check`] relies on.
    #[inline]
    pub(crate) fn token(&self, addr: FrameAddr) -> Frame {
        let size = self.config.frame_size;
        assert!(
            addr.frame_index(size) < self.config.frame_count as usize,
            "the kernel returned {addr:?}, outside UMEM {}",
            self.id
        );
        Frame {
            addr: addr.frame_base(size),
            umem: self.id,
        }
    }

    /// Panics unless `frame` is a token of this UMEM; returns its offset.
    /// A token is a whole frame inside its UMEM from the start (tokens are
    /// made only by [`Umem::take_frames`] and [`Umem::token`]), so naming
    /// the UMEM is all there is to check: one comparison on every frame
    /// access, of which sending a segment makes several.
    #[inline]
    pub(crate) fn check(&self, frame: &Frame) -> usize {
        assert!(
            frame.umem == self.id,
            "frame {:?} of UMEM {} does not belong to UMEM {}",
            frame.addr,
            frame.umem,
            self.id
        );
        frame.addr.0 as usize
    }

    /// The bytes of a frame userspace owns.
    #[inline]
    pub fn frame<'a>(&'a self, frame: &'a Frame) -> &'a [u8] {
        let base = self.check(frame);
        // SAFETY: a token of this UMEM (`check`) is a whole frame inside the
        // mapping (`take_frames`, `token`); the token proves userspace owns
        // the frame (the kernel does not write it), and the shared borrow of
        // the token prevents a concurrent `frame_mut`.
        unsafe {
            std::slice::from_raw_parts(self.area.as_ptr().add(base), self.config.frame_size.bytes())
        }
    }

    /// True while TX descriptors lent from this frame have not completed.
    #[inline]
    pub fn is_lent(&self, frame: &Frame) -> bool {
        let base = self.check(frame);
        self.lent[base >> self.config.frame_size.shift()].load(Ordering::Relaxed) != 0
    }

    /// Counts one more descriptor lent from the frame at `base`.
    ///
    /// The counts are plain loads and stores, not read-modify-write atomics
    /// (a locked instruction drains the store buffer: measured at ~4 % of a
    /// sender's cycles at MTU 1500). That is sound because one thread at a
    /// time touches a frame's count: the thread that owns the frame's token
    /// lends it, and its descriptors complete on that thread's socket. A
    /// lent frame's token must not move to another thread until its count
    /// is back to zero ([`Umem::is_lent`]); the engine hands a connection
    /// over to another worker only then.
    #[inline]
    pub(crate) fn lend(&self, base: usize) {
        let c = &self.lent[base >> self.config.frame_size.shift()];
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// A completed descriptor at `addr`: its token if the frame is free now
    /// (it was handed over whole, or it was lent, given back, and this was
    /// its last descriptor), else `None` (its owner still holds the token).
    #[inline]
    pub(crate) fn completed(&self, addr: FrameAddr) -> Option<Frame> {
        let idx = addr.frame_index(self.config.frame_size);
        let c = self.lent.get(idx)?;
        let token = self.token(addr);
        match c.load(Ordering::Relaxed) {
            0 => Some(token),
            n if n == GIVEN_BACK | 1 => {
                c.store(0, Ordering::Relaxed);
                Some(token)
            }
            n => {
                c.store(n - 1, Ordering::Relaxed);
                None
            }
        }
    }

    /// The owner is done with a frame: the token back if no descriptor of
    /// it is in flight, else `None` — the completion ring returns the token
    /// when the last one completes.
    pub fn give_back(&self, frame: Frame) -> Option<Frame> {
        let base = self.check(&frame);
        let c = &self.lent[base >> self.config.frame_size.shift()];
        match c.load(Ordering::Relaxed) {
            0 => Some(frame),
            n => {
                c.store(n | GIVEN_BACK, Ordering::Relaxed);
                None
            }
        }
    }

    /// The bytes of a frame userspace owns, writable, or `None` while TX
    /// descriptors lent from it are in flight.
    #[inline]
    pub fn try_frame_mut<'a>(&'a self, frame: &'a mut Frame) -> Option<&'a mut [u8]> {
        let base = self.check(frame);
        if self.lent[base >> self.config.frame_size.shift()].load(Ordering::Relaxed) != 0 {
            return None;
        }
        // SAFETY: as in `frame_mut`, whose assertion is the test just made.
        Some(unsafe { self.writable(frame, base) })
    }

    /// The bytes of a frame userspace owns, writable.
    ///
    /// # Panics
    /// If the frame is lent to the TX ring (see [`Umem::try_frame_mut`]).
    #[inline]
    pub fn frame_mut<'a>(&'a self, frame: &'a mut Frame) -> &'a mut [u8] {
        let base = self.check(frame);
        assert!(
            self.lent[base >> self.config.frame_size.shift()].load(Ordering::Relaxed) == 0,
            "frame {:?} is being transmitted: it cannot be written until it completes",
            frame.addr
        );
        // SAFETY: a token of this UMEM (`check`) is a whole frame inside the
        // mapping (`take_frames`, `token`); tokens are unique per frame and
        // this one is borrowed exclusively, so no other slice of the frame
        // exists; the kernel does not touch frames whose token userspace
        // holds, and none of this frame's descriptors is lent to the TX ring
        // (asserted above: the kernel may be reading those).
        unsafe { self.writable(frame, base) }
    }

    /// The bytes of `frame`, at `base`, writable.
    ///
    /// # Safety
    /// `frame` is a token of this UMEM (`base` its offset, from `check`),
    /// and none of its descriptors is lent to the TX ring.
    #[inline]
    unsafe fn writable<'a>(&'a self, frame: &'a mut Frame, base: usize) -> &'a mut [u8] {
        debug_assert_eq!(frame.addr.0 as usize, base);
        // SAFETY: the caller's contract: in bounds; the only slice of the
        // frame (its token is borrowed exclusively for the slice's life);
        // nothing in the kernel reads or writes it meanwhile.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.area.as_ptr().add(base),
                self.config.frame_size.bytes(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_taken_once_and_address_the_area() {
        let umem = Umem::new(UmemConfig {
            frame_count: 16,
            frame_size: FrameSize::F2048,
            ..UmemConfig::default()
        })
        .unwrap();
        let mut frames = umem.take_frames();
        assert_eq!(frames.len(), 16);
        assert!(umem.take_frames().is_empty());
        assert_eq!(frames[3].addr(), FrameAddr(3 * 2048));
        umem.frame_mut(&mut frames[3])[..4].copy_from_slice(b"xtcp");
        assert_eq!(&umem.frame(&frames[3])[..4], b"xtcp");
        assert_eq!(umem.frame(&frames[2])[0], 0);
        assert_eq!(umem.token(FrameAddr(3 * 2048 + 256)), frames[3]);
    }

    #[test]
    fn bad_configs_are_refused() {
        let e = Umem::new(UmemConfig {
            frame_count: 0,
            ..UmemConfig::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("frame count"), "{e}");
        let e = Umem::new(UmemConfig {
            headroom: 4000,
            ..UmemConfig::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("headroom"), "{e}");
    }

    #[test]
    #[should_panic(expected = "does not belong")]
    fn foreign_frame_is_refused() {
        let small = Umem::new(UmemConfig {
            frame_count: 2,
            ..UmemConfig::default()
        })
        .unwrap();
        let big = Umem::new(UmemConfig {
            frame_count: 8,
            ..UmemConfig::default()
        })
        .unwrap();
        let frames = big.take_frames();
        // Even an address that exists in `small` is refused: the token names `big`.
        let _ = small.frame(&frames[1]);
    }
}
