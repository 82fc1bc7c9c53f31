//! Which worker owns which connection: a fixed-size, lock-free hash table
//! from a 4-tuple to a worker index, shared by all workers.
//!
//! A worker looks here only for a segment that matches none of its own
//! connections (a flow that RSS moved to another queue, or one that arrived
//! on another queue from the start): if another worker owns it, the segment's
//! worker asks for the connection to be handed over (see `thread`).
//!
//! Entries are one `AtomicU64` each: the upper 48 bits are a hash of the
//! tuple (never zero), the lower 16 the owner. Open addressing with a probe
//! limit; removal leaves a tombstone that insertion reuses. A lookup that
//! runs past the probe limit reports "unknown", which only costs a reset of
//! a connection in a table far fuller than the engine lets it get.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::tcp::FourTuple;

const EMPTY: u64 = 0;
const TOMBSTONE: u64 = 1;
const PROBES: usize = 64;

/// The table.
#[derive(Debug)]
pub struct Registry {
    slots: Box<[AtomicU64]>,
    mask: usize,
    hasher: std::hash::RandomState,
}

/// A tuple's key: 48 bits of hash, never zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key(u64);

impl Registry {
    /// A table for at least `capacity` connections (rounded up to a power of
    /// two, doubled to keep probes short).
    pub fn new(capacity: usize) -> Registry {
        let n = (capacity.max(64) * 2).next_power_of_two();
        Registry {
            slots: (0..n).map(|_| AtomicU64::new(EMPTY)).collect(),
            mask: n - 1,
            hasher: std::hash::RandomState::new(),
        }
    }

    /// The key of `tuple`.
    pub fn key(&self, tuple: &FourTuple) -> Key {
        let mut h = self.hasher.build_hasher();
        std::hash::Hash::hash(tuple, &mut h);
        let v = h.finish() >> 16;
        Key(if v == 0 { 1 } else { v })
    }

    fn start(&self, k: Key) -> usize {
        (k.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20) as usize & self.mask
    }

    /// Records `owner` for `k` (inserts or updates); false if the table is
    /// too full around `k`.
    pub fn set(&self, k: Key, owner: u16) -> bool {
        let entry = (k.0 << 16) | u64::from(owner);
        let s = self.start(k);
        // Update in place if present.
        for i in 0..PROBES {
            let slot = &self.slots[(s + i) & self.mask];
            let e = slot.load(Ordering::Acquire);
            if e == EMPTY {
                break;
            }
            if e != TOMBSTONE && e >> 16 == k.0 {
                slot.store(entry, Ordering::Release);
                return true;
            }
        }
        for i in 0..PROBES {
            let slot = &self.slots[(s + i) & self.mask];
            let e = slot.load(Ordering::Acquire);
            if (e == EMPTY || e == TOMBSTONE)
                && slot
                    .compare_exchange(e, entry, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return true;
            }
        }
        false
    }

    /// Records `owner` for `k` unless `k` is registered already: true if
    /// `k` is `owner`'s now (or was), false if another's or the table is
    /// too full around `k`. Of two workers claiming one key at once, one
    /// wins.
    pub fn claim(&self, k: Key, owner: u16) -> bool {
        let entry = (k.0 << 16) | u64::from(owner);
        let s = self.start(k);
        // A second look if another key took the free slot meanwhile.
        for _ in 0..2 {
            let mut free = None;
            for i in 0..PROBES {
                let at = (s + i) & self.mask;
                let e = self.slots[at].load(Ordering::Acquire);
                if e > TOMBSTONE && e >> 16 == k.0 {
                    return e == entry;
                }
                if e <= TOMBSTONE {
                    free.get_or_insert((at, e));
                }
                if e == EMPTY {
                    break;
                }
            }
            let Some((at, e)) = free else {
                return false;
            };
            match self.slots[at].compare_exchange(e, entry, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                // The other claimant of `k` won.
                Err(now) if now > TOMBSTONE && now >> 16 == k.0 => return now == entry,
                Err(_) => {}
            }
        }
        false
    }

    /// The owner of `k`, if registered.
    pub fn get(&self, k: Key) -> Option<u16> {
        let s = self.start(k);
        for i in 0..PROBES {
            let e = self.slots[(s + i) & self.mask].load(Ordering::Acquire);
            if e == EMPTY {
                return None;
            }
            if e != TOMBSTONE && e >> 16 == k.0 {
                return Some((e & 0xffff) as u16);
            }
        }
        None
    }

    /// Forgets `k`.
    pub fn remove(&self, k: Key) {
        let s = self.start(k);
        for i in 0..PROBES {
            let slot = &self.slots[(s + i) & self.mask];
            let e = slot.load(Ordering::Acquire);
            if e == EMPTY {
                return;
            }
            if e != TOMBSTONE && e >> 16 == k.0 {
                slot.store(TOMBSTONE, Ordering::Release);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn t(port: u16) -> FourTuple {
        FourTuple {
            local: SocketAddr::from(([198, 18, 0, 1], port)),
            remote: SocketAddr::from(([198, 18, 0, 2], 5201)),
        }
    }

    #[test]
    fn set_get_update_remove_and_reuse() {
        // Room for the 100 at once (256 slots). The table's seed is random:
        // filled beyond its capacity (100 in a table for 64: 128 slots, 78 %
        // full), a run of 64 taken slots leaves a key no slot within its
        // probes in about one run of 900 (a simulation of the probing: 228
        // of 200,000; none of 200,000 with 256 slots). It failed one CI run.
        let r = Registry::new(100);
        let keys: Vec<Key> = (0..100).map(|p| r.key(&t(p))).collect();
        for (i, k) in keys.iter().enumerate() {
            assert!(r.set(*k, (i % 3) as u16));
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(r.get(*k), Some((i % 3) as u16));
        }
        assert!(r.set(keys[5], 9));
        assert_eq!(r.get(keys[5]), Some(9));
        for k in &keys[..50] {
            r.remove(*k);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(r.get(*k).is_some(), i >= 50, "{i}");
        }
        // Churn: many more connections over time than the capacity, never
        // more than the capacity at once (50 live + 14); tombstones are reused.
        for round in 0..500u16 {
            let ks: Vec<Key> = (0..14).map(|p| r.key(&t(1000 + round * 14 + p))).collect();
            for k in &ks {
                assert!(r.set(*k, round));
            }
            for k in &ks {
                assert_eq!(r.get(*k), Some(round));
                r.remove(*k);
            }
        }
        assert_eq!(r.get(keys[99]), Some(0));
    }

    #[test]
    fn a_claim_keeps_the_first_owner() {
        let r = Registry::new(64);
        let (a, b) = (r.key(&t(1)), r.key(&t(2)));
        assert!(r.claim(a, 1));
        assert!(r.claim(a, 1), "again by the owner");
        assert!(!r.claim(a, 0), "another's");
        assert_eq!(r.get(a), Some(1));
        assert!(r.claim(b, 0));
        r.remove(a);
        assert!(!r.claim(b, 1));
        assert!(r.claim(a, 0), "free again once removed");
        // A tombstone in front of a claimed key is not taken for its place:
        // in a table at its capacity many keys sit behind removed ones. (At
        // its capacity, not beyond: see `set_get_update_remove_and_reuse`.)
        let r = Registry::new(100);
        let keys: Vec<Key> = (0..100).map(|p| r.key(&t(p))).collect();
        for k in &keys {
            assert!(r.claim(*k, 1));
        }
        for k in &keys[..50] {
            r.remove(*k);
        }
        for k in &keys[50..] {
            assert!(!r.claim(*k, 0), "still 1's");
            assert_eq!(r.get(*k), Some(1));
        }
        for k in &keys[..50] {
            assert!(r.claim(*k, 0), "free again once removed");
        }
        // Two workers claiming the same keys at once: each key has one owner,
        // and exactly the claims that said so won.
        let r = std::sync::Arc::new(Registry::new(4096));
        let hs: Vec<_> = (0..2u16)
            .map(|w| {
                let r = r.clone();
                std::thread::spawn(move || {
                    (0..2000u16)
                        .filter(|p| r.claim(r.key(&t(*p)), w))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let won: Vec<Vec<u16>> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(won[0].len() + won[1].len(), 2000);
        for (w, ps) in won.iter().enumerate() {
            for p in ps {
                assert_eq!(r.get(r.key(&t(*p))), Some(w as u16));
            }
        }
    }

    #[test]
    fn concurrent_inserts_all_land() {
        let r = std::sync::Arc::new(Registry::new(4096));
        let hs: Vec<_> = (0..4u16)
            .map(|w| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for p in 0..1000u16 {
                        assert!(r.set(r.key(&t(w * 1000 + p)), w));
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        for w in 0..4u16 {
            for p in 0..1000u16 {
                assert_eq!(r.get(r.key(&t(w * 1000 + p))), Some(w));
            }
        }
    }
}
