//! An owned memory mapping, unmapped on drop.

use std::io;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;

/// An `mmap`ed region. The kernel may share it (rings, UMEM); what the
/// bytes mean and who may touch them is the owner's business.
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; access to its
// contents is synchronised by the users (ring protocol, frame ownership).
unsafe impl Send for Mmap {}
// SAFETY: as above; `Mmap` itself offers only the base pointer and length.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Anonymous private memory (a UMEM area), optionally on 2 MB hugepages.
    pub(crate) fn anonymous(len: usize, hugepages: bool) -> io::Result<Mmap> {
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        if hugepages {
            flags |= libc::MAP_HUGETLB | libc::MAP_HUGE_2MB;
        }
        // SAFETY: an anonymous mapping with a null hint touches no existing
        // memory; the result is checked for MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
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
        Ok(Mmap { ptr, len })
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
        // SAFETY: ptr/len are exactly what mmap returned, unmapped once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}
