//! A shared-memory connection's shared area: memory beside the rings where
//! a client puts a rendezvous payload itself, at the place the server's
//! `Cts` gave (`Grant::area_at`), so the bytes cross once (the client's
//! copy) instead of twice (into the ring, and out of it on the server).
//! The server hands the request its [`Slot`]; a data server writes the
//! file straight from it, and the slot goes back when the request is done.
//!
//! The server only ever copies a slot's bytes (into a file, or a buffer)
//! and never decides anything on them, so a client that changes them
//! meanwhile changes only what its own write stores. Memory: the area's
//! pages are made only when touched, and the allocator hands out the
//! lowest free place, so the area's high-water mark is what the server's
//! use of it holds; that mark is drawn from the server's shared-memory
//! budget, in steps of [`CHARGE_STEP`], and a grant that would pass the
//! budget is not placed (the payload comes through the ring as before).
//! An area left empty for [`IDLE_TRIM`] gives its pages and its charge
//! back ([`Area::trim`], from the server's sweep), so a connection that
//! wrote once does not keep 16 MiB drawn for its whole life. (A client
//! can fault in every page of the area itself: those count against its
//! own memory, not the server's budget.)

// Slots are views of memory mapped in another module.
#![allow(unsafe_code)]

use crate::budget::{Charge, MemoryBudget};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Places are multiples of this (and so are lengths, rounded up).
pub const ALIGN: usize = 4096;
/// The area's high-water mark is charged in steps of this.
pub const CHARGE_STEP: u64 = 1 << 20;
/// An area empty this long gives its pages and charge back.
pub const IDLE_TRIM: std::time::Duration = std::time::Duration::from_secs(1);

/// Free places of an area, lowest first fit: pure bookkeeping.
#[derive(Debug)]
pub struct Extents {
    /// start -> length of each free run; runs never touch (merged).
    free: BTreeMap<usize, usize>,
    len: usize,
}

impl Extents {
    pub fn new(len: usize) -> Self {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(0, len);
        }
        Extents { free, len }
    }

    /// The lowest place with `len` bytes free (`len` > 0), taken.
    pub fn take(&mut self, len: usize) -> Option<usize> {
        if len == 0 {
            return None;
        }
        let (&at, &run) = self.free.iter().find(|(_, run)| **run >= len)?;
        self.free.remove(&at);
        if run > len {
            self.free.insert(at + len, run - len);
        }
        Some(at)
    }

    /// Gives back `len` bytes at `at`, taken earlier.
    pub fn give(&mut self, at: usize, len: usize) {
        debug_assert!(at.checked_add(len).is_some_and(|e| e <= self.len), "a place inside the area");
        let (mut start, mut run) = (at, len);
        if let Some((&before, &blen)) = self.free.range(..at).next_back()
            && before + blen == at
        {
            self.free.remove(&before);
            start = before;
            run += blen;
        }
        if let Some(&alen) = self.free.get(&(at + len)) {
            self.free.remove(&(at + len));
            run += alen;
        }
        self.free.insert(start, run);
    }

    /// Bytes free in all.
    pub fn free_bytes(&self) -> usize {
        self.free.values().sum()
    }
}

/// What keeps the area's memory mapped (the connection's mapping).
pub trait Backing: Send + Sync {
    /// Frees the pages of `len` bytes from `at` (inside the area); they
    /// read as zeros after.
    fn punch(&self, _at: *const u8, _len: usize) {}
}

struct State {
    extents: Extents,
    /// The high-water mark's budget, and how much it covers.
    charge: Option<Charge>,
    charged: u64,
    /// Places held now, and when the last one went back.
    held: usize,
    emptied_at: Option<std::time::Instant>,
}

/// One connection's shared area, server side.
pub struct Area {
    base: *mut u8,
    len: usize,
    _backing: Arc<dyn Backing>,
    budget: Arc<MemoryBudget>,
    state: Mutex<State>,
}

// SAFETY: the area's memory stays mapped while `_backing` lives; this
// process only reads it (through slots), and its bookkeeping is behind a
// mutex.
unsafe impl Send for Area {}
unsafe impl Sync for Area {}

impl std::fmt::Debug for Area {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Area").field("len", &self.len).finish_non_exhaustive()
    }
}

impl Area {
    /// The `len` bytes at `base`, mapped while `backing` lives.
    ///
    /// # Safety
    /// `base..base + len` must stay mapped and readable while `backing`
    /// lives, and `base` must be [`ALIGN`]-aligned.
    pub unsafe fn new(base: *mut u8, len: usize, backing: Arc<dyn Backing>, budget: Arc<MemoryBudget>) -> Arc<Self> {
        Arc::new(Area { base, len, _backing: backing, budget, state: Mutex::new(State { extents: Extents::new(len), charge: None, charged: 0, held: 0, emptied_at: None }) })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A place for `len` bytes, or `None` (no room, or the budget would
    /// not cover the area's new high-water mark).
    pub fn place(self: &Arc<Self>, len: usize) -> Option<Slot> {
        let rounded = len.checked_next_multiple_of(ALIGN)?;
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let at = s.extents.take(rounded)?;
        let end = (at + rounded) as u64;
        if end > s.charged {
            let to = end.next_multiple_of(CHARGE_STEP).min(self.len as u64);
            match self.budget.try_charge(to - s.charged) {
                Some(c) => {
                    match &mut s.charge {
                        Some(held) => held.merge(c),
                        None => s.charge = Some(c),
                    }
                    s.charged = to;
                }
                None => {
                    s.extents.give(at, rounded);
                    return None;
                }
            }
        }
        s.held += 1;
        Some(Slot { area: self.clone(), at, len, rounded })
    }

    /// Gives the pages and the charge back if the area has held nothing
    /// for [`IDLE_TRIM`] (the server's sweep calls it). Returns the bytes
    /// given back.
    pub fn trim(&self, now: std::time::Instant) -> u64 {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let idle = s.emptied_at.is_some_and(|t| now.saturating_duration_since(t) >= IDLE_TRIM);
        if s.held > 0 || s.charged == 0 || !idle {
            return 0;
        }
        // Under the lock: no place is handed out meanwhile.
        self._backing.punch(self.base, self.len);
        let freed = s.charged;
        s.charge = None;
        s.charged = 0;
        freed
    }

    /// Bytes of the area's budget held (its high-water mark).
    pub fn charged(&self) -> u64 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).charged
    }
}

/// A payload's place in an area, held until the request is done.
pub struct Slot {
    area: Arc<Area>,
    at: usize,
    len: usize,
    rounded: usize,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("at", &self.at).field("len", &self.len).finish()
    }
}

impl Slot {
    /// Where it is in the area (what the `Cts` names).
    pub fn at(&self) -> u64 {
        self.at as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes the client put there. The client may still change them
    /// (it maps the same memory); the server only copies them.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: inside the area (`place` took it from the extents),
        // mapped while the area (held here) lives.
        unsafe { std::slice::from_raw_parts(self.area.base.add(self.at), self.len) }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.area.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.extents.give(self.at, self.rounded);
        s.held -= 1;
        if s.held == 0 {
            s.emptied_at = Some(std::time::Instant::now());
        }
    }
}

/// An area over plain heap memory, for tests of the protocol machines.
#[cfg(test)]
pub fn in_memory(len: usize, budget: Arc<MemoryBudget>) -> Arc<Area> {
    struct Heap(*mut u8, std::alloc::Layout);
    // SAFETY: owned heap memory, freed once.
    unsafe impl Send for Heap {}
    unsafe impl Sync for Heap {}
    impl Backing for Heap {}
    impl Drop for Heap {
        fn drop(&mut self) {
            // SAFETY: allocated below with this layout.
            unsafe { std::alloc::dealloc(self.0, self.1) }
        }
    }
    let layout = std::alloc::Layout::from_size_align(len.max(1), ALIGN).expect("a valid layout");
    // SAFETY: a non-zero size.
    let base = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!base.is_null(), "out of memory");
    // SAFETY: `Heap` keeps the allocation while the area lives.
    unsafe { Area::new(base, len, Arc::new(Heap(base, layout)), budget) }
}

/// Writes `bytes` at `at` of an [`in_memory`] area, as a client would.
#[cfg(test)]
pub fn fill(area: &Area, at: u64, bytes: &[u8]) {
    assert!(at as usize + bytes.len() <= area.len);
    // SAFETY: inside the area, checked above.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), area.base.add(at as usize), bytes.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Places never overlap, stay inside, and everything given back
        /// comes together again.
        #[test]
        fn places_never_overlap_and_all_come_back(ops in proptest::collection::vec((any::<bool>(), 1usize..40, any::<prop::sample::Index>()), 1..200)) {
            let len = 64;
            let mut e = Extents::new(len);
            let mut held: Vec<(usize, usize)> = Vec::new();
            for (take, n, pick) in ops {
                if take || held.is_empty() {
                    if let Some(at) = e.take(n) {
                        prop_assert!(at + n <= len);
                        for &(a, l) in &held {
                            prop_assert!(at + n <= a || a + l <= at, "{at}+{n} overlaps {a}+{l}");
                        }
                        held.push((at, n));
                    } else {
                        // Refused only when no free run is long enough.
                        let mut used = vec![false; len];
                        for &(a, l) in &held { used[a..a + l].iter_mut().for_each(|u| *u = true); }
                        let longest = used.split(|&u| u).map(<[bool]>::len).max().unwrap_or(0);
                        prop_assert!(longest < n, "{n} refused with a free run of {longest}");
                    }
                } else {
                    let (a, l) = held.swap_remove(pick.index(held.len()));
                    e.give(a, l);
                }
                prop_assert_eq!(e.free_bytes() + held.iter().map(|h| h.1).sum::<usize>(), len);
            }
            for (a, l) in held { e.give(a, l); }
            prop_assert_eq!(e.free.len(), 1, "merged into one run");
            prop_assert_eq!(e.take(len), Some(0));
        }
    }

    #[test]
    fn the_high_water_mark_is_charged_and_a_short_budget_places_nothing() {
        let budget = MemoryBudget::new(3 * CHARGE_STEP);
        let area = in_memory(8 << 20, budget.clone());
        let a = area.place(100).unwrap();
        assert_eq!((a.at(), a.len()), (0, 100));
        assert_eq!(area.charged(), CHARGE_STEP);
        let b = area.place(2 << 20).unwrap();
        assert_eq!(b.at(), ALIGN as u64, "the lowest free place, aligned");
        assert_eq!(area.charged(), 3 * CHARGE_STEP);
        assert_eq!(budget.used(), 3 * CHARGE_STEP);
        // A fourth step is past the budget: not placed, and the place is free again.
        assert!(area.place(1 << 20).is_none());
        drop(a);
        // Below the mark: no more charge needed.
        let c = area.place(ALIGN).unwrap();
        assert_eq!(c.at(), 0);
        fill(&area, c.at(), b"xyz");
        assert_eq!(&c.bytes()[..3], b"xyz");
        // Emptied once, then held again: not given back while held.
        drop((b, c));
        let held = area.place(10).unwrap();
        let now = std::time::Instant::now();
        assert_eq!(area.trim(now + IDLE_TRIM * 2), 0, "nothing given back while a place is held");
        drop(held);
        assert_eq!(budget.used(), 3 * CHARGE_STEP, "the mark stays while the area is busy");
        assert_eq!(area.trim(now), 0, "nor before it was idle for long");
        assert_eq!(area.trim(now + IDLE_TRIM * 2), 3 * CHARGE_STEP);
        assert_eq!((budget.used(), area.charged()), (0, 0));
        // Used again, it is charged again; dropped, it gives all back.
        let d = area.place(10).unwrap();
        assert_eq!((d.at(), budget.used()), (0, CHARGE_STEP));
        drop(d);
        drop(area);
        assert_eq!(budget.used(), 0);
    }
}
