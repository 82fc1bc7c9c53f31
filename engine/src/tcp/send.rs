//! The send buffer: a ring of `frames` page-sized frames holding the stream
//! from the oldest unacknowledged byte to the last byte written.
//!
//! Stream byte `o` (offset from the first byte after the SYN) lives in frame
//! `(o / frame_len) % frames` at `o % frame_len`. A frame becomes writable again
//! only when every byte in it is cumulatively acknowledged, so a frame that a
//! segment references (in flight, or to be retransmitted) is never rewritten.
//! The memory is plain bytes here; the worker maps frame indices onto UMEM
//! frames ([`FrameChunk`]) so that `seg` can send payload by reference.

/// A piece of a segment's payload inside one send-buffer frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameChunk {
    /// Frame index in the ring, `0..frames`.
    pub frame: usize,
    /// Offset inside the frame.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

#[derive(Debug)]
pub(crate) struct SendBuffer {
    data: Vec<u8>,
    frame_len: usize,
    frames: usize,
    /// Stream offset of the oldest unacknowledged byte.
    head: u64,
    /// Stream offset one past the last written byte.
    tail: u64,
}

impl SendBuffer {
    pub(crate) fn new(frame_len: usize, frames: usize) -> SendBuffer {
        SendBuffer {
            data: Vec::new(),
            frame_len: frame_len.max(1),
            frames: frames.max(1),
            head: 0,
            tail: 0,
        }
    }

    /// Allocates the memory (once, when the connection is established).
    pub(crate) fn allocate(&mut self) {
        if self.data.is_empty() {
            self.data = vec![0; self.frame_len * self.frames];
        }
    }

    /// Bytes of buffer memory allocated (0 until `allocate`).
    pub(crate) fn allocated(&self) -> usize {
        self.data.len()
    }

    fn capacity(&self) -> u64 {
        (self.frame_len * self.frames) as u64
    }

    /// Bytes the application can write now (whole released frames).
    pub(crate) fn free(&self) -> usize {
        if self.data.is_empty() {
            return 0;
        }
        let first_frame_start = self.head - self.head % self.frame_len as u64;
        (first_frame_start + self.capacity() - self.tail) as usize
    }

    /// Bytes written and not yet acknowledged.
    pub(crate) fn len(&self) -> usize {
        (self.tail - self.head) as usize
    }

    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    /// Copies as much of `buf` as fits; returns the count.
    pub(crate) fn write(&mut self, buf: &[u8]) -> usize {
        let n = buf.len().min(self.free());
        let cap = self.data.len();
        let mut done = 0;
        while done < n {
            let pos = ((self.tail + done as u64) % cap as u64) as usize;
            let k = (n - done).min(cap - pos);
            self.data[pos..pos + k].copy_from_slice(&buf[done..done + k]);
            done += k;
        }
        self.tail += n as u64;
        n
    }

    /// The free space as up to two writable slices (in stream order).
    pub(crate) fn free_slices_mut(&mut self) -> (&mut [u8], &mut [u8]) {
        let n = self.free();
        let cap = self.data.len();
        if n == 0 {
            return (&mut [], &mut []);
        }
        let pos = (self.tail % cap as u64) as usize;
        let first = n.min(cap - pos);
        let (lo, hi) = self.data.split_at_mut(pos);
        (&mut hi[..first], &mut lo[..n - first])
    }

    /// Appends `n` bytes already placed through `free_slices_mut`.
    pub(crate) fn commit(&mut self, n: usize) -> usize {
        let n = n.min(self.free());
        self.tail += n as u64;
        n
    }

    /// Acknowledges everything below stream offset `to`. Returns true if a
    /// frame was released.
    pub(crate) fn ack(&mut self, to: u64) -> bool {
        let to = to.min(self.tail);
        if to <= self.head {
            return false;
        }
        let fl = self.frame_len as u64;
        let released = to / fl != self.head / fl;
        self.head = to;
        released
    }

    /// The bytes at `[offset, offset+len)` as up to two slices.
    pub(crate) fn slices(&self, offset: u64, len: usize) -> (&[u8], &[u8]) {
        let cap = self.data.len();
        if cap == 0 || len == 0 {
            return (&[], &[]);
        }
        debug_assert!(offset >= self.head && offset + len as u64 <= self.tail);
        let pos = (offset % cap as u64) as usize;
        let first = len.min(cap - pos);
        (&self.data[pos..pos + first], &self.data[..len - first])
    }

    /// The frames holding `[offset, offset+len)`.
    pub(crate) fn frame_chunks(
        &self,
        offset: u64,
        len: usize,
    ) -> impl Iterator<Item = FrameChunk> + '_ {
        let fl = self.frame_len as u64;
        let frames = self.frames as u64;
        let end = offset + len as u64;
        let mut at = offset;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let in_frame = at % fl;
            let k = (fl - in_frame).min(end - at);
            let c = FrameChunk {
                frame: ((at / fl) % frames) as usize,
                offset: in_frame as usize,
                len: k as usize,
            };
            at += k;
            Some(c)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_released_only_when_fully_acked() {
        let mut b = SendBuffer::new(8, 4);
        assert_eq!(b.free(), 0, "not allocated yet");
        b.allocate();
        assert_eq!(b.write(&[1; 40]), 32);
        assert_eq!(b.free(), 0);
        assert!(!b.ack(7));
        assert_eq!(b.free(), 0, "frame 0 still holds byte 7");
        assert!(b.ack(9));
        assert_eq!(b.free(), 8);
        assert_eq!(b.write(&(0..10).collect::<Vec<u8>>()), 8);
        let (a, c) = b.slices(30, 6);
        assert_eq!((a, c), (&[1u8, 1][..], &[0u8, 1, 2, 3][..]));
        let chunks: Vec<_> = b.frame_chunks(14, 20).collect();
        assert_eq!(
            chunks,
            vec![
                FrameChunk {
                    frame: 1,
                    offset: 6,
                    len: 2
                },
                FrameChunk {
                    frame: 2,
                    offset: 0,
                    len: 8
                },
                FrameChunk {
                    frame: 3,
                    offset: 0,
                    len: 8
                },
                FrameChunk {
                    frame: 0,
                    offset: 0,
                    len: 2
                },
            ]
        );
    }
}
