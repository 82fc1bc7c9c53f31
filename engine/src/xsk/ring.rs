//! Single-producer/single-consumer rings shared with the kernel.
//!
//! The layout is the kernel's: a producer index, a consumer index, a flags
//! word and a power-of-two array of entries; slot = index & mask, indices
//! wrap at 2^32. Each side caches the other side's index and re-reads it
//! (Acquire) only when the cache says the ring is full/empty; it publishes
//! its own index with Release after writing/reading the entries. These are
//! libxdp's `xsk.h` verbs: producers `reserve`/`submit`, consumers
//! `peek`/`release`.
//!
//! `RingMem` is the memory (a kernel mmap, or a heap block in tests, see
//! [`FakeRing`]); [`ProdRing`] and [`ConsRing`] are the two roles. Both keep
//! their memory alive through an `Arc`, so a ring can never outlive it.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Flag in the ring's flags word: the kernel wants a wakeup syscall.
pub const NEED_WAKEUP: u32 = 1;

/// Pointers into one ring's memory plus whatever keeps that memory alive.
pub(crate) struct RingMem<T> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    entries: *mut T,
    size: u32,
    _owner: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the pointers target memory kept alive by `_owner` (Send + Sync);
// all shared words are atomics and each entry is accessed by exactly one
// side at a time, as the index protocol guarantees.
unsafe impl<T: Send> Send for RingMem<T> {}

impl<T: Copy> RingMem<T> {
    /// Builds a ring view from raw pointers.
    ///
    /// # Safety
    /// `producer`, `consumer` and `flags` must point to aligned `u32` words
    /// and `entries` to `size` aligned `T`s, all valid for as long as
    /// `owner` is alive; `size` must be a power of two; at most one
    /// [`ProdRing`] and one [`ConsRing`] may be built over the same memory.
    pub(crate) unsafe fn new(
        producer: *const AtomicU32,
        consumer: *const AtomicU32,
        flags: *const AtomicU32,
        entries: *mut T,
        size: u32,
        owner: Arc<dyn Any + Send + Sync>,
    ) -> RingMem<T> {
        debug_assert!(size.is_power_of_two());
        RingMem {
            producer,
            consumer,
            flags,
            entries,
            size,
            _owner: owner,
        }
    }

    #[inline]
    fn producer(&self) -> &AtomicU32 {
        // SAFETY: valid and aligned for the life of `_owner` (contract of `new`).
        unsafe { &*self.producer }
    }

    #[inline]
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }

    #[inline]
    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.flags }
    }

    #[inline]
    fn write(&self, idx: u32, value: T) {
        let slot = (idx & (self.size - 1)) as usize;
        // SAFETY: slot < size, so the pointer is inside the entry array; the
        // one caller (`ProdRing::write`) checked that `idx` is reserved and
        // not submitted, so the consumer does not read it until the Release
        // store in `submit`.
        unsafe { self.entries.add(slot).write_volatile(value) }
    }

    #[inline]
    fn read(&self, idx: u32) -> T {
        let slot = (idx & (self.size - 1)) as usize;
        // SAFETY: slot < size; the one caller (`ConsRing::read`) checked that
        // `idx` is peeked and not released: it observed, with Acquire, a
        // producer index past `idx`, so the entry is fully written and the
        // producer won't touch it until we release it.
        unsafe { self.entries.add(slot).read_volatile() }
    }
}

/// The producing side of a ring (fill and TX rings, from userspace).
pub struct ProdRing<T> {
    mem: RingMem<T>,
    /// Next index to reserve.
    cached_prod: u32,
    /// Consumer index + size, as last read.
    cached_cons: u32,
    /// Index up to which entries are published.
    published: u32,
    _t: PhantomData<T>,
}

impl<T: Copy> ProdRing<T> {
    pub(crate) fn new(mem: RingMem<T>) -> ProdRing<T> {
        let prod = mem.producer().load(Ordering::Relaxed);
        let cons = mem.consumer().load(Ordering::Acquire);
        let size = mem.size;
        ProdRing {
            mem,
            cached_prod: prod,
            cached_cons: cons.wrapping_add(size),
            published: prod,
            _t: PhantomData,
        }
    }

    /// Ring size in entries.
    #[inline]
    pub fn size(&self) -> u32 {
        self.mem.size
    }

    /// Free entries, re-reading the consumer index if fewer than `wanted`
    /// are known to be free.
    #[inline]
    pub fn free(&mut self, wanted: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= wanted {
            return free;
        }
        self.cached_cons = self
            .mem
            .consumer()
            .load(Ordering::Acquire)
            .wrapping_add(self.mem.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Reserves up to `n` entries; returns the first index and how many.
    #[inline]
    pub fn reserve(&mut self, n: u32) -> (u32, u32) {
        let got = self.free(n).min(n);
        let start = self.cached_prod;
        self.cached_prod = self.cached_prod.wrapping_add(got);
        (start, got)
    }

    /// Reserves exactly `n` entries or none (for multi-buffer chains).
    #[inline]
    pub fn reserve_exact(&mut self, n: u32) -> Option<u32> {
        if self.free(n) < n {
            return None;
        }
        let start = self.cached_prod;
        self.cached_prod = self.cached_prod.wrapping_add(n);
        Some(start)
    }

    /// Writes a reserved, not yet submitted entry.
    ///
    /// # Panics
    ///
    /// Outside the reserved range: the consumer may be reading there (a
    /// check, not a debug assertion, since `RingMem::write`'s soundness
    /// rests on it; one predictable branch an entry).
    #[inline]
    pub fn write(&mut self, idx: u32, value: T) {
        assert!(
            idx.wrapping_sub(self.published) < self.cached_prod.wrapping_sub(self.published),
            "write outside the reserved range"
        );
        self.mem.write(idx, value);
    }

    /// Gives back the last `n` reserved entries without publishing them.
    #[inline]
    pub fn cancel(&mut self, n: u32) {
        debug_assert!(n <= self.cached_prod.wrapping_sub(self.published));
        self.cached_prod = self.cached_prod.wrapping_sub(n);
    }

    /// Publishes the next `n` reserved entries to the consumer (Release).
    #[inline]
    pub fn submit(&mut self, n: u32) {
        debug_assert!(n <= self.cached_prod.wrapping_sub(self.published));
        self.published = self.published.wrapping_add(n);
        self.mem.producer().store(self.published, Ordering::Release);
    }

    /// Entries published but not yet consumed by the other side.
    #[inline]
    pub fn in_flight(&self) -> u32 {
        let cons = self.mem.consumer().load(Ordering::Acquire);
        self.published.wrapping_sub(cons)
    }

    /// True if the consumer asked for a wakeup (`XDP_RING_NEED_WAKEUP`).
    ///
    /// A full fence first: the flag must be read after the producer index
    /// was published (a store-load order that Release alone does not give),
    /// or a wakeup the kernel asked for just then could be missed.
    #[inline]
    pub fn needs_wakeup(&self) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.mem.flags().load(Ordering::Relaxed) & NEED_WAKEUP != 0
    }
}

/// The consuming side of a ring (RX and completion rings, from userspace).
pub struct ConsRing<T> {
    mem: RingMem<T>,
    /// Producer index as last read.
    cached_prod: u32,
    /// Next index to peek.
    cached_cons: u32,
    /// Index up to which entries are released.
    released: u32,
    _t: PhantomData<T>,
}

impl<T: Copy> ConsRing<T> {
    pub(crate) fn new(mem: RingMem<T>) -> ConsRing<T> {
        let cons = mem.consumer().load(Ordering::Relaxed);
        let prod = mem.producer().load(Ordering::Acquire);
        ConsRing {
            mem,
            cached_prod: prod,
            cached_cons: cons,
            released: cons,
            _t: PhantomData,
        }
    }

    /// Ring size in entries.
    #[inline]
    pub fn size(&self) -> u32 {
        self.mem.size
    }

    /// Entries available, re-reading the producer index when none are known.
    #[inline]
    pub fn available(&mut self, wanted: u32) -> u32 {
        let mut n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n < wanted {
            self.cached_prod = self.mem.producer().load(Ordering::Acquire);
            n = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        n
    }

    /// Takes up to `n` entries; returns the first index and how many.
    #[inline]
    pub fn peek(&mut self, n: u32) -> (u32, u32) {
        let got = self.available(n).min(n);
        let start = self.cached_cons;
        self.cached_cons = self.cached_cons.wrapping_add(got);
        (start, got)
    }

    /// Reads a peeked, not yet released entry.
    ///
    /// # Panics
    ///
    /// Outside the peeked range: the producer may be writing there (a
    /// check, as in [`ProdRing::write`]).
    #[inline]
    pub fn read(&self, idx: u32) -> T {
        assert!(
            idx.wrapping_sub(self.released) < self.cached_cons.wrapping_sub(self.released),
            "read outside the peeked range"
        );
        self.mem.read(idx)
    }

    /// Puts back the last `n` peeked entries, to be peeked again later.
    #[inline]
    pub fn unpeek(&mut self, n: u32) {
        debug_assert!(n <= self.cached_cons.wrapping_sub(self.released));
        self.cached_cons = self.cached_cons.wrapping_sub(n);
    }

    /// Returns the next `n` peeked entries to the producer (Release).
    #[inline]
    pub fn release(&mut self, n: u32) {
        debug_assert!(n <= self.cached_cons.wrapping_sub(self.released));
        self.released = self.released.wrapping_add(n);
        self.mem.consumer().store(self.released, Ordering::Release);
    }

    /// True if the producer asked for a wakeup.
    #[inline]
    pub fn needs_wakeup(&self) -> bool {
        self.mem.flags().load(Ordering::Relaxed) & NEED_WAKEUP != 0
    }
}

/// Ring memory on the heap with both ends available: the "fake kernel" that
/// unit tests (and benchmarks of the ring logic) drive.
pub struct FakeRing<T> {
    block: Arc<FakeBlock<T>>,
}

struct FakeBlock<T> {
    producer: AtomicU32,
    consumer: AtomicU32,
    flags: AtomicU32,
    entries: Box<[std::cell::UnsafeCell<T>]>,
}

// SAFETY: entries are only accessed through the ring protocol (one side per
// entry at a time); the index words are atomics.
unsafe impl<T: Send> Sync for FakeBlock<T> {}

impl<T: Copy + Default + Send + 'static> FakeRing<T> {
    /// A ring of `size` entries (a power of two) whose indices start at
    /// `start` (to test wrap-around at 2^32).
    ///
    /// # Panics
    /// If `size` is not a power of two.
    pub fn new(size: u32, start: u32) -> FakeRing<T> {
        assert!(size.is_power_of_two(), "ring size must be a power of two");
        let entries = (0..size)
            .map(|_| std::cell::UnsafeCell::new(T::default()))
            .collect();
        FakeRing {
            block: Arc::new(FakeBlock {
                producer: AtomicU32::new(start),
                consumer: AtomicU32::new(start),
                flags: AtomicU32::new(0),
                entries,
            }),
        }
    }

    fn mem(&self) -> RingMem<T> {
        let b = &*self.block;
        // SAFETY: all pointers come from the Arc'd block, which the RingMem
        // keeps alive; UnsafeCell<T> has T's layout; size is a power of two
        // (checked in `new`); each FakeRing hands out one producer and one
        // consumer (the `split` method consumes it).
        unsafe {
            RingMem::new(
                &b.producer,
                &b.consumer,
                &b.flags,
                b.entries.as_ptr() as *mut T,
                b.entries.len() as u32,
                self.block.clone(),
            )
        }
    }

    /// Splits into the producer and consumer ends.
    pub fn split(self) -> (ProdRing<T>, ConsRing<T>, FakeFlags) {
        let flags = FakeFlags {
            block: self.block.clone(),
        };
        (ProdRing::new(self.mem()), ConsRing::new(self.mem()), flags)
    }
}

/// Lets a test play the kernel's part in setting the ring's flags word.
pub struct FakeFlags {
    block: Arc<dyn FlagsWord>,
}

trait FlagsWord: Send + Sync {
    fn word(&self) -> &AtomicU32;
}

impl<T: Send> FlagsWord for FakeBlock<T> {
    fn word(&self) -> &AtomicU32 {
        &self.flags
    }
}

impl FakeFlags {
    /// Sets or clears `XDP_RING_NEED_WAKEUP`.
    pub fn set_need_wakeup(&self, on: bool) {
        let w = self.block.word();
        if on {
            w.fetch_or(NEED_WAKEUP, Ordering::Relaxed);
        } else {
            w.fetch_and(!NEED_WAKEUP, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A producer writes only what it reserved and has not submitted (the
    /// consumer may be reading the rest): checked in release builds too.
    #[test]
    #[should_panic(expected = "write outside the reserved range")]
    fn a_write_of_a_submitted_entry_panics() {
        let (mut p, _c, _) = FakeRing::<u64>::new(8, 0).split();
        let (start, n) = p.reserve(2);
        assert_eq!(n, 2);
        p.write(start, 1);
        p.submit(1);
        p.write(start, 2);
    }

    /// A consumer reads only what it peeked and has not released.
    #[test]
    #[should_panic(expected = "read outside the peeked range")]
    fn a_read_past_the_peeked_entries_panics() {
        let (mut p, mut c, _) = FakeRing::<u64>::new(8, 0).split();
        let (start, _) = p.reserve(4);
        for i in 0..4 {
            p.write(start.wrapping_add(i), 7);
        }
        p.submit(4);
        let (s, got) = c.peek(2);
        assert_eq!(got, 2);
        c.read(s.wrapping_add(2));
    }

    #[test]
    fn fill_then_drain() {
        let (mut p, mut c, _) = FakeRing::<u64>::new(8, 0).split();
        let (start, n) = p.reserve(8);
        assert_eq!(n, 8);
        for i in 0..n {
            p.write(start.wrapping_add(i), u64::from(i) * 10);
        }
        // Not visible before submit.
        assert_eq!(c.peek(8).1, 0);
        p.submit(8);
        assert_eq!(p.reserve(1).1, 0, "full ring reserves nothing");
        let (s, got) = c.peek(16);
        assert_eq!(got, 8);
        let v: Vec<u64> = (0..got).map(|i| c.read(s.wrapping_add(i))).collect();
        assert_eq!(v, [0, 10, 20, 30, 40, 50, 60, 70]);
        // Still full for the producer until released.
        assert_eq!(p.free(1), 0);
        c.release(3);
        assert_eq!(p.free(1), 3);
        c.release(5);
        assert_eq!(p.free(8), 8);
    }

    #[test]
    fn partial_batches_and_wraparound_at_u32_max() {
        // Indices start 5 below 2^32 so they wrap during the test.
        let (mut p, mut c, _) = FakeRing::<u32>::new(4, u32::MAX - 4).split();
        let mut next_in = 0u32;
        let mut next_out = 0u32;
        for round in 0..50u32 {
            let want = round % 5 + 1;
            let (s, n) = p.reserve(want);
            assert!(n <= want);
            for i in 0..n {
                p.write(s.wrapping_add(i), next_in);
                next_in += 1;
            }
            p.submit(n);
            let take = (round * 7) % 4 + 1;
            let (s, n) = c.peek(take);
            for i in 0..n {
                assert_eq!(c.read(s.wrapping_add(i)), next_out);
                next_out += 1;
            }
            c.release(n);
        }
        // Drain the rest.
        let (s, n) = c.peek(u32::MAX);
        for i in 0..n {
            assert_eq!(c.read(s.wrapping_add(i)), next_out);
            next_out += 1;
        }
        c.release(n);
        assert_eq!(next_in, next_out);
        assert!(next_in > 40, "the ring moved data: {next_in}");
    }

    #[test]
    fn reserve_exact_is_all_or_nothing() {
        let (mut p, mut c, _) = FakeRing::<u64>::new(4, 0).split();
        let s = p.reserve_exact(3).unwrap();
        for i in 0..3 {
            p.write(s + i, 1);
        }
        p.submit(3);
        assert!(p.reserve_exact(2).is_none());
        let s = p.reserve_exact(1).unwrap();
        p.write(s, 2);
        p.submit(1);
        let (_, n) = c.peek(4);
        assert_eq!(n, 4);
        c.release(4);
        assert!(p.reserve_exact(4).is_some());
    }

    #[test]
    fn cancel_and_unpeek() {
        let (mut p, mut c, _) = FakeRing::<u64>::new(8, 0).split();
        let (s, n) = p.reserve(4);
        assert_eq!(n, 4);
        p.write(s, 7);
        p.write(s + 1, 8);
        p.cancel(2);
        p.submit(2);
        let (s, n) = c.peek(8);
        assert_eq!(n, 2);
        assert_eq!(c.read(s), 7);
        c.unpeek(1);
        c.release(1);
        let (s, n) = c.peek(8);
        assert_eq!((n, c.read(s)), (1, 8));
        c.release(1);
        assert_eq!(p.in_flight(), 0);
    }

    #[test]
    fn need_wakeup_flag() {
        let (p, c, flags) = FakeRing::<u64>::new(2, 0).split();
        assert!(!p.needs_wakeup() && !c.needs_wakeup());
        flags.set_need_wakeup(true);
        assert!(p.needs_wakeup() && c.needs_wakeup());
        flags.set_need_wakeup(false);
        assert!(!p.needs_wakeup());
    }

    #[test]
    fn producer_and_consumer_on_two_threads() {
        let (mut p, mut c, _) = FakeRing::<u64>::new(64, 1000).split();
        const N: u64 = 200_000;
        let t = std::thread::spawn(move || {
            let mut next = 0u64;
            let mut spins = 0u64;
            while next < N {
                let (s, n) = p.reserve(16);
                for i in 0..n {
                    p.write(s.wrapping_add(i), next);
                    next += 1;
                    if next == N {
                        p.cancel(n - i - 1);
                        p.submit(i + 1);
                        return;
                    }
                }
                p.submit(n);
                spins += 1;
                assert!(spins < 100_000_000, "producer stuck");
                if n == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let mut expect = 0u64;
        let mut spins = 0u64;
        while expect < N {
            let (s, n) = c.peek(32);
            for i in 0..n {
                assert_eq!(c.read(s.wrapping_add(i)), expect);
                expect += 1;
            }
            c.release(n);
            spins += 1;
            assert!(spins < 100_000_000, "consumer stuck");
            if n == 0 {
                std::thread::yield_now();
            }
        }
        t.join().unwrap();
    }
}
