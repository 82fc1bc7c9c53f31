//! A worker's connections: a slab of [`Slot`]s at stable positions, found
//! by their 4-tuple through a hash index, with a ready list and a timer heap
//! so that a turn touches only the connections that have work. Generic
//! over what it holds ([`Keyed`]: anything with a 4-tuple), so that the
//! criterion bench `benches/benches/conns.rs` can measure the lookup with
//! the TCP path behind it from 1 to 1,000 connections.
//!
//! - Lookup is O(1): open addressing with linear probing over positions,
//!   twice the capacity rounded up to a power of two, keyed by a seeded
//!   multiply-xorshift of the tuple (the seed is random per worker, so a
//!   peer cannot choose ports that collide); removal shifts the entries
//!   after it back (no tombstones, so probes stay short under churn).
//! - [`Table::mark`] puts a connection at the back of the ready queue
//!   (once, however often it is marked); the worker marks a connection when
//!   a segment or a hand-over arrives for it, when its timer fires, and
//!   when its turn ended with work left (a TX budget used up, a source or
//!   sink that could not go on). A turn takes connections from the front
//!   with [`Table::pop_ready`], as many as it has budget for and at most
//!   those queued when it began ([`Table::ready_len`]); the ones it did not
//!   reach stay at the front, untouched, for the next turn. So a turn
//!   costs what it serves, however many connections wait: with 1,000
//!   ready and a budget for two, it reads two.
//! - [`Table::arm`] keeps a min-heap of timer deadlines: an entry is pushed
//!   only when a connection's deadline moves earlier than the one it has
//!   armed; entries left behind by a later re-arm are dropped when they
//!   come up ([`Table::due`]), and the heap is rebuilt from the slots in
//!   the rare case it fills up.
//!
//! Everything has its capacity from the start: nothing allocates after
//! [`Table::new`].

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use super::conn::Slot;
use crate::tcp::{Connection, FourTuple};

/// What a [`Table`] holds: something found by its connection's 4-tuple.
pub trait Keyed {
    /// The 4-tuple it is found by (local = our end).
    fn tuple(&self) -> FourTuple;
}

impl Keyed for Slot {
    #[inline]
    fn tuple(&self) -> FourTuple {
        self.conn.tuple()
    }
}

impl Keyed for Connection {
    #[inline]
    fn tuple(&self) -> FourTuple {
        Connection::tuple(self)
    }
}

const EMPTY: u32 = u32::MAX;

/// The table (see the module doc).
#[derive(Debug)]
pub struct Table<T: Keyed = Slot> {
    slots: Vec<Option<T>>,
    /// Per position: on the ready list, the deadline armed.
    entries: Vec<Entry>,
    free: Vec<u32>,
    len: usize,
    index: Box<[u32]>,
    mask: usize,
    seed: u64,
    ready: VecDeque<u32>,
    timers: BinaryHeap<Reverse<(Instant, u32)>>,
}

/// Per-position bookkeeping of the table.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// In the ready queue.
    queued: bool,
    /// The deadline it has an entry in the heap for.
    armed: Option<Instant>,
}

fn words(a: &SocketAddr) -> (u64, u64) {
    let ip = match a.ip() {
        IpAddr::V4(v) => u128::from(v.to_ipv6_mapped()),
        IpAddr::V6(v) => u128::from(v),
    };
    ((ip >> 64) as u64, ip as u64 ^ (u64::from(a.port()) << 17))
}

fn mix(h: u64, w: u64) -> u64 {
    let x = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

impl<T: Keyed> Table<T> {
    /// Room for `capacity` connections.
    pub fn new(capacity: usize) -> Table<T> {
        let capacity = capacity.max(1);
        let n = (capacity * 2).next_power_of_two();
        Table {
            slots: (0..capacity).map(|_| None).collect(),
            entries: vec![Entry::default(); capacity],
            free: (0..capacity as u32).rev().collect(),
            len: 0,
            index: vec![EMPTY; n].into_boxed_slice(),
            mask: n - 1,
            seed: std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), 0u64) | 1,
            ready: VecDeque::with_capacity(capacity),
            timers: BinaryHeap::with_capacity(capacity * 4),
        }
    }

    fn home(&self, local: &SocketAddr, remote: &SocketAddr) -> usize {
        let (a, b) = words(local);
        let (c, d) = words(remote);
        let h = mix(mix(mix(mix(self.seed, a), b), c), d);
        (h >> 20) as usize & self.mask
    }

    /// Connections held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no connection is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when no more fit.
    pub fn is_full(&self) -> bool {
        self.free.is_empty()
    }

    /// The position of the connection from `remote` to `local`.
    #[inline]
    pub fn find(&self, local: &SocketAddr, remote: &SocketAddr) -> Option<usize> {
        let mut i = self.home(local, remote);
        loop {
            let p = self.index[i];
            if p == EMPTY {
                return None;
            }
            if let Some(s) = &self.slots[p as usize] {
                let t = s.tuple();
                if t.local == *local && t.remote == *remote {
                    return Some(p as usize);
                }
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The position of the connection `tuple`.
    pub fn find_tuple(&self, tuple: &FourTuple) -> Option<usize> {
        self.find(&tuple.local, &tuple.remote)
    }

    /// Adds `slot`, ready for a turn; gives it back when the table is full.
    pub fn insert(&mut self, slot: T) -> Result<usize, T> {
        let Some(p) = self.free.pop() else {
            return Err(slot);
        };
        let t = slot.tuple();
        let mut i = self.home(&t.local, &t.remote);
        while self.index[i] != EMPTY {
            i = (i + 1) & self.mask;
        }
        self.index[i] = p;
        // A position still in the ready queue from the connection removed
        // from it stays there, now for this one: the queue holds each
        // position once, so it never outgrows its capacity.
        let queued = self.entries[p as usize].queued;
        self.entries[p as usize] = Entry {
            queued,
            armed: None,
        };
        self.slots[p as usize] = Some(slot);
        self.len += 1;
        self.mark(p as usize);
        Ok(p as usize)
    }

    /// Takes the connection at `pos` out.
    pub fn remove(&mut self, pos: usize) -> Option<T> {
        let slot = self.slots.get_mut(pos)?.take()?;
        let t = slot.tuple();
        let mut i = self.home(&t.local, &t.remote);
        while self.index[i] != pos as u32 {
            i = (i + 1) & self.mask;
        }
        // Backward shift: move up every entry after the hole that may live
        // there (its home is not cyclically within (hole, entry]).
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let p = self.index[j];
            if p == EMPTY {
                break;
            }
            let home = match &self.slots[p as usize] {
                Some(s) => {
                    let u = s.tuple();
                    self.home(&u.local, &u.remote)
                }
                None => j,
            };
            if (j.wrapping_sub(home) & self.mask) >= (j.wrapping_sub(i) & self.mask) {
                self.index[i] = p;
                i = j;
            }
        }
        self.index[i] = EMPTY;
        self.free.push(pos as u32);
        self.len -= 1;
        Some(slot)
    }

    /// The connection at `pos`.
    #[inline]
    pub fn get_mut(&mut self, pos: usize) -> Option<&mut T> {
        self.slots.get_mut(pos)?.as_mut()
    }

    /// Positions there are (held or free).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Every connection (for what is not per packet: stop, reports).
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten()
    }

    /// Every connection, writable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().flatten()
    }

    /// Puts the connection at `pos` at the back of the ready queue (once).
    #[inline]
    pub fn mark(&mut self, pos: usize) {
        if self.slots.get(pos).is_some_and(Option::is_some) && !self.entries[pos].queued {
            self.entries[pos].queued = true;
            // Within the capacity reserved at `new`: each position is in
            // the queue at most once.
            self.ready.push_back(pos as u32);
        }
    }

    /// Marks every connection (their shares changed, or the engine stops).
    pub fn mark_all(&mut self) {
        for p in 0..self.slots.len() {
            self.mark(p);
        }
    }

    /// Connections in the ready queue: a turn serves at most these, so
    /// that one marked during the turn waits for the next.
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// The position at the front of the ready queue, taken off it (its
    /// connection may have been removed since it was marked: then
    /// [`Table::get_mut`] finds none there).
    #[inline]
    pub fn pop_ready(&mut self) -> Option<usize> {
        let p = self.ready.pop_front()? as usize;
        self.entries[p].queued = false;
        Some(p)
    }

    /// Records that the connection at `pos` needs a turn at `at`.
    #[inline]
    pub fn arm(&mut self, pos: usize, at: Option<Instant>) {
        let (Some(at), Some(Some(_))) = (at, self.slots.get(pos)) else {
            return;
        };
        let e = &mut self.entries[pos];
        if e.armed.is_some_and(|a| a <= at) {
            // An entry at or before `at` is in the heap: it gives the turn,
            // and the turn arms again.
            return;
        }
        e.armed = Some(at);
        if self.timers.len() == self.timers.capacity() {
            self.rebuild_timers();
        }
        self.timers.push(Reverse((at, pos as u32)));
    }

    fn rebuild_timers(&mut self) {
        self.timers.clear();
        for (p, (s, e)) in self.slots.iter().zip(&self.entries).enumerate() {
            if let (Some(_), Some(at)) = (s, e.armed) {
                self.timers.push(Reverse((at, p as u32)));
            }
        }
    }

    /// Marks every connection whose armed deadline has come.
    pub fn due(&mut self, now: Instant) {
        while let Some(&Reverse((at, p))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let p = p as usize;
            if self.slots[p].is_some() && self.entries[p].armed == Some(at) {
                self.entries[p].armed = None;
                self.mark(p);
            }
        }
    }

    /// The earliest armed deadline (entries left behind may make it early,
    /// never late).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((at, _))| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::{Config, Connection, SeqNumber};
    use crate::worker::bulk::{Sink, Source};
    use crate::worker::registry::Registry;
    use crate::worker::sendmem::UmemFrames;
    use std::time::Duration;

    fn tuple(port: u16) -> FourTuple {
        FourTuple {
            local: SocketAddr::from(([198, 18, 0, 1], 5201)),
            remote: SocketAddr::from(([198, 18, 0, 2], port)),
        }
    }

    fn slot(r: &Registry, port: u16, now: Instant) -> Slot {
        let t = tuple(port);
        let c = Connection::connect_in(
            Config::default(),
            t,
            SeqNumber(1),
            now,
            UmemFrames::default(),
        );
        Slot::new(
            c,
            r.key(&t),
            [0; 6],
            port as usize,
            Source::Empty,
            Sink::Discard,
        )
    }

    /// Inserts and removals in any order (the removals shift entries back
    /// in the index) leave every connection held findable and none other.
    #[test]
    fn lookup_survives_churn() {
        let now = Instant::now();
        let r = Registry::new(64);
        let mut t: Table = Table::new(300);
        let mut held = std::collections::BTreeMap::new();
        let mut rng = 0x1234_5678_u64;
        for step in 0..20_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let port = 1000 + (rng % 600) as u16;
            match held.get(&port) {
                Some(&pos) => {
                    let s = t.remove(pos).expect("held");
                    assert_eq!(s.conn.tuple(), tuple(port));
                    held.remove(&port);
                }
                None if !t.is_full() => {
                    let pos = t.insert(slot(&r, port, now)).expect("room");
                    held.insert(port, pos);
                }
                None => assert!(t.insert(slot(&r, port, now)).is_err(), "full"),
            }
            if step % 997 == 0 || step > 19_900 {
                for p in 1000..1600u16 {
                    let tp = tuple(p);
                    assert_eq!(t.find(&tp.local, &tp.remote), held.get(&p).copied(), "{p}");
                }
            }
        }
        assert_eq!(t.len(), held.len());
    }

    /// Everything waiting in the ready queue, taken off it.
    fn drain(t: &mut Table) -> Vec<usize> {
        (0..t.ready_len()).filter_map(|_| t.pop_ready()).collect()
    }

    /// A turn that stops early leaves the rest at the front, in their
    /// order, ahead of those marked after; a connection served and marked
    /// again goes to the back; the queue holds each position once.
    #[test]
    fn a_turn_cut_short_leaves_the_rest_first() {
        let now = Instant::now();
        let r = Registry::new(64);
        let mut t: Table = Table::new(8);
        let p: Vec<usize> = (1..=4)
            .map(|i| t.insert(slot(&r, i, now)).ok().unwrap())
            .collect();
        assert_eq!(t.ready_len(), 4, "inserted ones are ready");
        // A turn serves two, then its budget runs out; the first of them
        // still has work.
        assert_eq!(t.pop_ready(), Some(p[0]));
        assert_eq!(t.pop_ready(), Some(p[1]));
        t.mark(p[0]);
        t.mark(p[3]);
        t.mark(p[0]);
        assert_eq!(t.ready_len(), 3);
        assert_eq!(drain(&mut t), [p[2], p[3], p[0]]);
        assert_eq!(t.pop_ready(), None);
    }

    /// A connection removed while it waits leaves an empty position in the
    /// queue; one inserted there takes that place in line instead of
    /// queueing twice.
    #[test]
    fn a_removed_connection_leaves_its_place() {
        let now = Instant::now();
        let r = Registry::new(64);
        let mut t: Table = Table::new(2);
        let a = t.insert(slot(&r, 1, now)).ok().unwrap();
        let b = t.insert(slot(&r, 2, now)).ok().unwrap();
        t.remove(a);
        assert_eq!(t.pop_ready(), Some(a));
        assert!(t.get_mut(a).is_none(), "nothing there now");
        t.mark(b);
        let c = t.insert(slot(&r, 3, now)).ok().unwrap();
        assert_eq!(c, a);
        t.remove(b);
        let d = t.insert(slot(&r, 4, now)).ok().unwrap();
        assert_eq!(d, b);
        // b's place in line is d's; c queued behind it; nothing twice.
        assert_eq!(t.ready_len(), 2);
        assert_eq!(drain(&mut t), [d, c]);
    }

    /// A connection is on the ready list once however often it is marked,
    /// a timer marks it when due, and a deadline left behind by an earlier
    /// re-arm or by a removed connection marks nothing.
    #[test]
    fn ready_list_and_timers() {
        let now = Instant::now();
        let r = Registry::new(64);
        let mut t: Table = Table::new(8);
        let a = t.insert(slot(&r, 1, now)).ok().unwrap();
        let b = t.insert(slot(&r, 2, now)).ok().unwrap();
        t.mark(a);
        t.mark(a);
        assert_eq!(drain(&mut t), [a, b], "inserted ones are ready, once");
        assert!(drain(&mut t).is_empty());
        let ms = |n| now + Duration::from_millis(n);
        t.arm(a, Some(ms(10)));
        t.arm(a, Some(ms(20)));
        t.arm(b, Some(ms(30)));
        t.arm(b, Some(ms(5)));
        assert_eq!(t.next_deadline(), Some(ms(5)));
        t.due(ms(6));
        assert_eq!(drain(&mut t), [b], "b re-armed earlier");
        t.due(ms(15));
        assert_eq!(drain(&mut t), [a], "a's first deadline stands");
        // b's deadline of 30 was left behind (it fired at 5, not re-armed);
        // a is removed and its slot taken by c, which armed nothing.
        t.remove(a);
        let c = t.insert(slot(&r, 3, now)).ok().unwrap();
        assert_eq!(c, a, "the position is reused");
        drain(&mut t);
        t.due(ms(40));
        let turn = drain(&mut t);
        assert!(turn.is_empty(), "{turn:?}");
        assert_eq!(t.next_deadline(), None);
    }
}
