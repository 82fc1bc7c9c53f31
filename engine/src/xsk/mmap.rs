//! An owned memory mapping, unmapped on drop.

use std::io;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;

/// An `mmap`ed region. The kernel may share it (rings, UMEM); what the
/// bytes mean and who may touch them is the owner's business.
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
    /// The whole mapping to unmap, where it is larger than the region
    /// (guard pages around an aligned area): start and length.
    whole: Option<(NonNull<u8>, usize)>,
}

// SAFETY: the mapping is plain memory owned by this value; access to its
// contents is synchronised by the users (ring protocol, frame ownership).
unsafe impl Send for Mmap {}
// SAFETY: as above; `Mmap` itself offers only the base pointer and length.
unsafe impl Sync for Mmap {}

/// The size of a huge page: 2 MiB (x86_64; arm64 with 4 KiB pages).
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// A base page, for the guard pages.
const PAGE: usize = 4096;

/// `MADV_POPULATE_WRITE` (Linux 5.14): fault the range in, writable.
const MADV_POPULATE_WRITE: libc::c_int = 23;

impl Mmap {
    /// Anonymous private memory (a UMEM area): on 2 MB hugepages reserved
    /// beforehand with `hugepages`, else on transparent huge pages where
    /// the kernel has them to give (the area 2 MiB-aligned and marked
    /// `MADV_HUGEPAGE`, so that `enabled = madvise` grants them too; the
    /// rest, and everything when the system's setting is `never`, on base
    /// pages). Every page is faulted in before it returns.
    pub(crate) fn anonymous(len: usize, hugepages: bool) -> io::Result<Mmap> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if hugepages {
            let flags = flags | libc::MAP_POPULATE | libc::MAP_HUGETLB | libc::MAP_HUGE_2MB;
            return Mmap::map(len, libc::PROT_READ | libc::PROT_WRITE, flags);
        }
        // Room to align the area to a huge page, with a guard page at
        // least on either side: inaccessible, so that the area's mapping
        // never merges with a neighbour and `/proc/self/smaps` counts its
        // pages alone (see `huge_bytes`).
        let whole_len = len
            .checked_add(HUGE_PAGE + 2 * PAGE)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let whole = Mmap::map(whole_len, libc::PROT_NONE, flags)?;
        let base = whole.ptr.as_ptr() as usize;
        let skew = (base + PAGE).next_multiple_of(HUGE_PAGE) - base;
        // The area owns the whole mapping from here on: its drop, on the
        // error paths below too, unmaps all of it.
        let m = Mmap {
            // SAFETY: skew ≤ HUGE_PAGE + PAGE - 1 and whole_len = len +
            // HUGE_PAGE + 2 PAGE: the area lies inside the mapping, a page
            // or more from either end.
            ptr: unsafe { whole.ptr.add(skew) },
            len,
            whole: Some((whole.ptr, whole_len)),
        };
        std::mem::forget(whole);
        let area = m.ptr.as_ptr().cast::<libc::c_void>();
        // SAFETY: the area is inside the mapping just made, which nothing
        // else uses yet.
        if unsafe { libc::mprotect(area, len, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // A hint: EINVAL where the kernel has no transparent huge pages,
        // and then base pages are what the area gets anyway.
        // SAFETY: advice on the area just mapped, which holds no data.
        let _ = unsafe { libc::madvise(area, len, libc::MADV_HUGEPAGE) };
        // SAFETY: as above; faulting the pages in writes zeros only.
        if unsafe { libc::madvise(area, len, MADV_POPULATE_WRITE) } != 0 {
            let e = io::Error::last_os_error();
            // Before Linux 5.14 (EINVAL) registering the UMEM faults the
            // pages in instead.
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(e);
            }
        }
        Ok(m)
    }

    /// Bytes of the region on huge pages now: all of it for reserved
    /// hugepages, else what `/proc/self/smaps` counts as `AnonHugePages`
    /// in its mapping (which the guard pages keep to itself). `None` where
    /// that cannot be read.
    pub(crate) fn huge_bytes(&self, hugetlb: bool) -> Option<u64> {
        if hugetlb {
            return Some(self.len as u64);
        }
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        anon_huge_bytes(&smaps, self.ptr.as_ptr() as usize, self.len)
    }

    fn map(len: usize, prot: libc::c_int, flags: libc::c_int) -> io::Result<Mmap> {
        // SAFETY: an anonymous mapping with a null hint touches no existing
        // memory; the result is checked for MAP_FAILED.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) };
        Mmap::check(ptr, len)
    }

    /// Maps `len` bytes of a socket's ring at page offset `pgoff`.
    pub(crate) fn ring(fd: BorrowedFd<'_>, len: usize, pgoff: u64) -> io::Result<Mmap> {
        use std::os::fd::AsRawFd;
        // SAFETY: a shared mapping of the socket's ring with a null hint; the
        // kernel validates offset and length; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff as libc::off_t,
            )
        };
        Mmap::check(ptr, len)
    }

    fn check(ptr: *mut libc::c_void, len: usize) -> io::Result<Mmap> {
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mmap {
            ptr,
            len,
            whole: None,
        })
    }

    /// Base address.
    #[inline]
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        let (ptr, len) = self.whole.unwrap_or((self.ptr, self.len));
        // SAFETY: ptr/len are exactly what mmap returned (the whole mapping
        // where the region lies inside a larger one), unmapped once.
        unsafe {
            libc::munmap(ptr.as_ptr().cast(), len);
        }
    }
}

/// `AnonHugePages` of the mapping `[start, start + len)` in `smaps` text, in
/// bytes; `None` if no mapping has exactly that range.
fn anon_huge_bytes(smaps: &str, start: usize, len: usize) -> Option<u64> {
    let head = format!("{start:x}-{:x} ", start + len);
    let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
    lines.next()?;
    lines
        // The next mapping's header line has no colon-terminated key.
        .take_while(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|k| k.ends_with(':'))
        })
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smaps_counts_the_mapping_of_exactly_that_range() {
        let smaps = "\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0 
Size:               4096 kB
AnonHugePages:      2048 kB
VmFlags: rd wr mr mw me ac hg 
7f0000400000-7f0000401000 ---p 00000000 00:00 0 
Size:                  4 kB
AnonHugePages:         0 kB
";
        assert_eq!(
            anon_huge_bytes(smaps, 0x7f00_0000_0000, 4 << 20),
            Some(2 << 20)
        );
        assert_eq!(anon_huge_bytes(smaps, 0x7f00_0040_0000, 4096), Some(0));
        // A range that is not a mapping of its own: unknown, not zero.
        assert_eq!(anon_huge_bytes(smaps, 0x7f00_0000_0000, 2 << 20), None);
    }

    /// What `huge_bytes` says, against the kernel's flags of each page
    /// (`/proc/self/pagemap` for the frame number, `/proc/kpageflags` for
    /// its THP bit): a source that shares nothing with `smaps`. Root only
    /// (frame numbers read as 0 otherwise).
    #[test]
    fn huge_bytes_agrees_with_the_page_flags() {
        use std::os::unix::fs::FileExt;
        const KPF_THP: u64 = 1 << 22;
        let len = 8 << 20;
        let m = Mmap::anonymous(len, false).unwrap();
        let reported = m.huge_bytes(false).unwrap();
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let Ok(flags) = std::fs::File::open("/proc/kpageflags") else {
            eprintln!("skipped: /proc/kpageflags cannot be read (not root)");
            return;
        };
        let mut thp = 0u64;
        for i in 0..len / PAGE {
            let mut e = [0u8; 8];
            let at = (m.as_ptr() as usize / PAGE + i) * 8;
            pagemap.read_exact_at(&mut e, at as u64).unwrap();
            let e = u64::from_le_bytes(e);
            assert!(
                e >> 63 == 1,
                "page {i} is not present: the area is populated"
            );
            let pfn = e & ((1 << 55) - 1);
            if pfn == 0 {
                eprintln!("skipped: frame numbers are hidden (not root)");
                return;
            }
            let mut f = [0u8; 8];
            flags.read_exact_at(&mut f, pfn * 8).unwrap();
            if u64::from_le_bytes(f) & KPF_THP != 0 {
                thp += PAGE as u64;
            }
        }
        assert_eq!(reported, thp);
        // Where the system grants them (not `never`), a fresh 8 MiB area
        // aligned for them gets some.
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        eprintln!(
            "transparent huge pages: {}; {thp} of {len} bytes",
            mode.trim()
        );
    }

    /// The area is aligned for huge pages, writable end to end, fenced by
    /// inaccessible pages, and its count is read from its own mapping.
    #[test]
    fn area_is_aligned_writable_and_counted_alone() {
        let len = (4 << 20) + 12288;
        let m = Mmap::anonymous(len, false).unwrap();
        assert_eq!(m.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(m.len(), len);
        // SAFETY: the test owns the mapping; in bounds.
        unsafe {
            m.as_ptr().write(1);
            m.as_ptr().add(len - 1).write(2);
        }
        let huge = m
            .huge_bytes(false)
            .expect("the area has a mapping of its own");
        assert!(
            huge <= len as u64 && huge.is_multiple_of(HUGE_PAGE as u64),
            "{huge}"
        );
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = m.as_ptr() as usize;
        // The guard pages on both sides are mappings without access.
        for l in smaps.lines() {
            let Some((range, rest)) = l.split_once(' ') else {
                continue;
            };
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            else {
                continue;
            };
            if b == start || a == start + len {
                assert!(rest.starts_with("---p"), "{l}");
            }
        }
    }
}
