//! Frames and descriptors: the vocabulary shared by `seg`, `tcp` and `xsk`.
//!
//! A UMEM is one contiguous memory region cut into equal frames (chunks) of
//! [`FrameSize`] bytes. A frame is named by its byte offset from the start of
//! the UMEM ([`FrameAddr`]). A packet on a ring is a [`Desc`]: an address
//! (which may point inside a frame, past its headroom), a length and option
//! flags; a packet larger than one frame is a chain of descriptors in which
//! every descriptor but the last carries [`Desc::CONTD`].
//!
//! [`Desc`] has the layout of the kernel's `struct xdp_desc`, so rings hold
//! it directly.

use std::fmt;

/// Byte offset of a frame (or of data inside a frame) from the start of the UMEM.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FrameAddr(pub u64);

impl FrameAddr {
    /// The start of the frame that contains this address.
    #[inline]
    pub fn frame_base(self, size: FrameSize) -> FrameAddr {
        FrameAddr(self.0 & !(size.bytes() as u64 - 1))
    }

    /// Offset of this address inside its frame.
    #[inline]
    pub fn offset_in_frame(self, size: FrameSize) -> usize {
        (self.0 & (size.bytes() as u64 - 1)) as usize
    }

    /// Index of the frame that contains this address.
    #[inline]
    pub fn frame_index(self, size: FrameSize) -> usize {
        (self.0 >> size.shift()) as usize
    }

    /// This address moved forward by `len` bytes.
    #[inline]
    #[must_use]
    #[expect(
        clippy::should_implement_trait,
        reason = "offset arithmetic, not a sum of two addresses"
    )]
    pub fn add(self, len: usize) -> FrameAddr {
        FrameAddr(self.0 + len as u64)
    }
}

impl fmt::Debug for FrameAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FrameAddr({:#x})", self.0)
    }
}

/// Size of a UMEM frame. The kernel accepts 2048..=PAGE_SIZE; xtcp uses
/// the two power-of-two sizes (aligned chunk mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub enum FrameSize {
    /// 2048-byte frames: two per page.
    F2048,
    /// 4096-byte frames: one page each (the type's default; the engine's
    /// `--frame-size auto` picks a size per MTU and layout).
    #[default]
    F4096,
}

impl FrameSize {
    /// Size in bytes.
    #[inline]
    pub const fn bytes(self) -> usize {
        match self {
            FrameSize::F2048 => 2048,
            FrameSize::F4096 => 4096,
        }
    }

    /// log2 of the size.
    #[inline]
    pub const fn shift(self) -> u32 {
        match self {
            FrameSize::F2048 => 11,
            FrameSize::F4096 => 12,
        }
    }

    /// Parses 2048 or 4096.
    pub fn from_bytes(bytes: usize) -> Option<FrameSize> {
        match bytes {
            2048 => Some(FrameSize::F2048),
            4096 => Some(FrameSize::F4096),
            _ => None,
        }
    }
}

/// One descriptor on an RX or TX ring (layout of `struct xdp_desc`).
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Desc {
    /// Where the data starts, as an offset into the UMEM.
    pub addr: FrameAddr,
    /// Length of the data in bytes.
    pub len: u32,
    /// Option flags; [`Desc::CONTD`] marks "more descriptors of this packet follow".
    pub options: u32,
}

impl Desc {
    /// `XDP_PKT_CONTD`: this descriptor is not the last of its packet.
    pub const CONTD: u32 = 1;

    /// A descriptor for `len` bytes at `addr`, continued if `contd`.
    #[inline]
    pub fn new(addr: FrameAddr, len: u32, contd: bool) -> Desc {
        Desc {
            addr,
            len,
            options: if contd { Desc::CONTD } else { 0 },
        }
    }

    /// True if more descriptors of the same packet follow this one.
    #[inline]
    pub fn is_contd(&self) -> bool {
        self.options & Desc::CONTD != 0
    }
}

impl fmt::Debug for Desc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Desc({:#x}+{}{})",
            self.addr.0,
            self.len,
            if self.is_contd() { ", contd" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addr_arithmetic() {
        let a = FrameAddr(3 * 4096 + 256);
        assert_eq!(a.frame_base(FrameSize::F4096), FrameAddr(3 * 4096));
        assert_eq!(a.offset_in_frame(FrameSize::F4096), 256);
        assert_eq!(a.frame_index(FrameSize::F4096), 3);
        assert_eq!(a.frame_index(FrameSize::F2048), 6);
        assert_eq!(a.add(10), FrameAddr(3 * 4096 + 266));
    }

    #[test]
    fn desc_matches_kernel_layout() {
        assert_eq!(std::mem::size_of::<Desc>(), 16);
        assert_eq!(std::mem::align_of::<Desc>(), 8);
        let d = Desc::new(FrameAddr(8192), 100, true);
        assert!(d.is_contd());
        assert!(!Desc::new(FrameAddr(0), 1, false).is_contd());
        assert_eq!(FrameSize::from_bytes(2048), Some(FrameSize::F2048));
        assert_eq!(FrameSize::from_bytes(3000), None);
    }
}
