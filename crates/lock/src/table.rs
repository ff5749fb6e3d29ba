//! One file's lock table.
//!
//! Rules (paper 004, plus fairness):
//!
//! 1. A request is a list of extents in one mode; it is granted whole or
//!    waits whole, so two lists can never deadlock on each other.
//! 2. Two locks conflict when an extent of one shares a byte with an extent
//!    of the other and at least one is exclusive.
//! 3. A request is granted at once only if it conflicts with no granted
//!    lock and no earlier waiting request; otherwise it waits. Waiters are
//!    served first come first served among those they conflict with, so a
//!    stream of readers cannot starve a writer.
//! 4. Releasing (or a lease expiring) grants, in arrival order, every
//!    waiter that now conflicts with no granted lock and no earlier waiter.
//!
//! Cost: m extents against n granted items is O(m log n + k) for the
//! interval queries (k = items that overlap in bounds).

use crate::extent::{Extent, ExtentError};
use crate::interval_tree::IntervalTree;
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

/// Identifies a lock; chosen by the lock service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockId(pub u64);

/// The session a lock belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(pub u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Atomic-mode readers: many at once.
    Shared,
    /// Writers: alone on their bytes.
    Exclusive,
}

impl Mode {
    fn conflicts(self, other: Mode) -> bool {
        self == Mode::Exclusive || other == Mode::Exclusive
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LockError {
    #[error("a lock request needs at least one extent")]
    Empty,
    #[error("bad extent: {0}")]
    Extent(#[from] ExtentError),
    #[error("lock id {0} is already in use")]
    DuplicateId(u64),
    #[error("no lock {0} here")]
    Unknown(u64),
    #[error("lock {lock} belongs to session {owner}, not to session {caller}")]
    NotOwner { lock: u64, owner: u64, caller: u64 },
    /// The file's table is full; the request is refused whole.
    #[error("the file's lock table holds {have} {what}; this request would pass the limit of {limit}")]
    Full { what: &'static str, have: usize, limit: usize },
    /// Checking the request against the table would take more than
    /// [`MAX_CHECKS`] overlap tests (many items share its bounds).
    #[error("checking this lock request against the file's {items} locked extents takes more than {limit} overlap tests; lock fewer, larger regions")]
    TooCostly { items: usize, limit: u64 },
}

/// Most overlap tests one check of a request against a table may make:
/// ~4 M, a fraction of a second under the file's mutex. Interval queries
/// visit every item whose bounds overlap, and items that do not conflict
/// (shared with shared, interleaved strided runs) do not stop the walk.
pub const MAX_CHECKS: u64 = 1 << 22;

/// Most extent items (granted and waiting) one file's table holds. Each
/// costs ~100 bytes and a share of every overlap query: 200,000 bounds a
/// table at ~20 MB while leaving room for thousands of list locks.
pub const MAX_TABLE_ITEMS: usize = 200_000;

/// Most requests waiting on one file: each release re-checks every waiter.
pub const MAX_TABLE_WAITERS: usize = 4_096;

/// A lock granted by a release (or an expiry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub lock: LockId,
    pub owner: Owner,
}

#[derive(Debug, Clone, Copy)]
struct Item {
    /// (The mode is the tree's.)
    extent: Extent,
    /// Arrival order of the lock (waiting tree only).
    seq: u64,
}

#[derive(Debug, Clone)]
struct Lock {
    owner: Owner,
    mode: Mode,
    extents: Vec<Extent>,
    /// (start, tree key) of each extent's item.
    keys: Vec<(u64, u64)>,
    /// `Some(seq)` while waiting.
    waiting: Option<u64>,
}

/// The locks of one file.
#[derive(Debug, Default)]
pub struct LockTable {
    /// Extent items in all trees (the cap applies to their sum).
    items: usize,
    /// Granted and waiting items, one tree per mode ([`tree_of`]): a shared
    /// request then walks only exclusive items, the only ones it can
    /// conflict with (many readers never cost each other a check).
    held: [IntervalTree<Item>; 2],
    waiting_items: [IntervalTree<Item>; 2],
    locks: HashMap<LockId, Lock>,
    queue: BTreeMap<u64, LockId>,
    next_seq: u64,
    next_key: u64,
}

/// The index of `mode`'s tree.
fn tree_of(mode: Mode) -> usize {
    match mode {
        Mode::Shared => 0,
        Mode::Exclusive => 1,
    }
}

impl LockTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// A table whose trees' shapes depend on `seed` (see
    /// [`IntervalTree::with_seed`]): the lock service passes a random one.
    pub fn with_seed(seed: u64) -> Self {
        let s = |k: u64| seed.rotate_left(16 * k as u32) ^ k.wrapping_mul(0x5851_F42D_4C95_7F2D);
        LockTable {
            held: [IntervalTree::with_seed(s(0)), IntervalTree::with_seed(s(1))],
            waiting_items: [IntervalTree::with_seed(s(2)), IntervalTree::with_seed(s(3))],
            ..Self::default()
        }
    }

    /// Granted locks.
    pub fn held(&self) -> usize {
        self.locks.len() - self.queue.len()
    }

    /// Waiting requests.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    /// Is lock `id` in the table (granted or waiting)?
    pub fn contains(&self, id: LockId) -> bool {
        self.locks.contains_key(&id)
    }

    /// Whose lock `id` is, if it is in the table.
    pub fn owner_of(&self, id: LockId) -> Option<Owner> {
        self.locks.get(&id).map(|l| l.owner)
    }

    /// Is lock `id` granted?
    pub fn is_granted(&self, id: LockId) -> bool {
        self.locks.get(&id).is_some_and(|l| l.waiting.is_none())
    }

    /// Does a lock of `mode` on `extents` conflict with a granted lock, or
    /// with a waiting one that arrived before `before`?
    /// Errs when the check would pass [`MAX_CHECKS`] overlap tests.
    fn blocked(&self, mode: Mode, extents: &[Extent], before: u64) -> Result<bool, LockError> {
        let mut checks = 0u64;
        let mut over = false;
        let mut count = || {
            checks += 1;
            over |= checks > MAX_CHECKS;
            over
        };
        // Only trees of modes that conflict with `mode` are walked.
        let modes: &[Mode] = if mode == Mode::Shared { &[Mode::Exclusive] } else { &[Mode::Shared, Mode::Exclusive] };
        let hit = extents.iter().any(|e| {
            let (a, b) = e.bounds();
            modes.iter().any(|&m| {
                let mut hit = |_: u64, _: u64, it: &Item| count() || it.extent.overlaps(e);
                if self.held[tree_of(m)].any_overlapping(a, b, &mut hit) {
                    return true;
                }
                let mut hit_earlier = |_: u64, _: u64, it: &Item| count() || (it.seq < before && it.extent.overlaps(e));
                self.waiting_items[tree_of(m)].any_overlapping(a, b, &mut hit_earlier)
            })
        });
        if over {
            return Err(LockError::TooCostly { items: self.items, limit: MAX_CHECKS });
        }
        Ok(hit)
    }

    /// Requests lock `id` for `owner`: `Ok(true)` if granted now, `Ok(false)`
    /// if it waits (a later release returns it in a [`Grant`]).
    pub fn acquire(&mut self, id: LockId, owner: Owner, mode: Mode, extents: Vec<Extent>) -> Result<bool, LockError> {
        if extents.is_empty() {
            return Err(LockError::Empty);
        }
        let extents = extents.into_iter().map(Extent::checked).collect::<Result<Vec<_>, _>>()?;
        if self.locks.contains_key(&id) {
            return Err(LockError::DuplicateId(id.0));
        }
        if self.items + extents.len() > MAX_TABLE_ITEMS {
            return Err(LockError::Full { what: "extents", have: self.items, limit: MAX_TABLE_ITEMS });
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let granted = !self.blocked(mode, &extents, seq)?;
        if !granted && self.queue.len() >= MAX_TABLE_WAITERS {
            return Err(LockError::Full { what: "waiting requests", have: self.queue.len(), limit: MAX_TABLE_WAITERS });
        }
        self.items += extents.len();
        let mut lock = Lock { owner, mode, extents, keys: Vec::new(), waiting: (!granted).then_some(seq) };
        let tree = if granted { &mut self.held[tree_of(mode)] } else { &mut self.waiting_items[tree_of(mode)] };
        for e in &lock.extents {
            let (a, b) = e.bounds();
            let key = self.next_key;
            self.next_key += 1;
            tree.insert(a, b, key, Item { extent: *e, seq });
            lock.keys.push((a, key));
        }
        if !granted {
            self.queue.insert(seq, id);
        }
        self.locks.insert(id, lock);
        Ok(granted)
    }

    /// Releases (or, if still waiting, cancels) `owner`'s lock `id`; returns
    /// the waiters this grants.
    pub fn release(&mut self, owner: Owner, id: LockId) -> Result<Vec<Grant>, LockError> {
        let lock = self.locks.get(&id).ok_or(LockError::Unknown(id.0))?;
        if lock.owner != owner {
            return Err(LockError::NotOwner { lock: id.0, owner: lock.owner.0, caller: owner.0 });
        }
        self.remove(id);
        Ok(self.drain())
    }

    /// Releases every lock of `owner` (its lease expired); returns the grants.
    pub fn release_owner(&mut self, owner: Owner) -> Vec<Grant> {
        let ids: Vec<LockId> = self.locks.iter().filter(|(_, l)| l.owner == owner).map(|(&id, _)| id).collect();
        if ids.is_empty() {
            return Vec::new();
        }
        for id in ids {
            self.remove(id);
        }
        self.drain()
    }

    fn remove(&mut self, id: LockId) {
        let lock = self.locks.remove(&id).expect("caller checked");
        self.items -= lock.keys.len();
        let tree = if lock.waiting.is_some() { &mut self.waiting_items[tree_of(lock.mode)] } else { &mut self.held[tree_of(lock.mode)] };
        for (start, key) in lock.keys {
            tree.remove(start, key);
        }
        if let Some(seq) = lock.waiting {
            self.queue.remove(&seq);
        }
    }

    /// Grants, in arrival order, every waiter nothing blocks any more.
    fn drain(&mut self) -> Vec<Grant> {
        let mut grants = Vec::new();
        let waiting: Vec<(u64, LockId)> = self.queue.iter().map(|(&s, &id)| (s, id)).collect();
        for (seq, id) in waiting {
            let lock = &self.locks[&id];
            // Too costly to check now counts as blocked: the waiter stays
            // until a later release or its wait runs out.
            if self.blocked(lock.mode, &lock.extents, seq).unwrap_or(true) {
                continue;
            }
            let lock = self.locks.get_mut(&id).expect("queued locks exist");
            lock.waiting = None;
            let keys = lock.keys.clone();
            let (owner, t) = (lock.owner, tree_of(lock.mode));
            for (start, key) in keys {
                let item = self.waiting_items[t].remove(start, key).expect("waiting item");
                let end = item.extent.bounds().1;
                self.held[t].insert(start, end, key, item);
            }
            self.queue.remove(&seq);
            grants.push(Grant { lock: id, owner });
        }
        grants
    }

    /// Checks the table's invariants; panics with the reason.
    pub fn check_invariants(&self) {
        for t in self.held.iter().chain(&self.waiting_items) {
            t.check_invariants();
        }
        let granted: Vec<(&LockId, &Lock)> = self.locks.iter().filter(|(_, l)| l.waiting.is_none()).collect();
        for (i, (a, la)) in granted.iter().enumerate() {
            for (b, lb) in &granted[i + 1..] {
                let clash = la.mode.conflicts(lb.mode) && la.extents.iter().any(|x| lb.extents.iter().any(|y| x.overlaps(y)));
                assert!(!clash, "granted locks {} and {} conflict", a.0, b.0);
            }
        }
        for (&seq, id) in &self.queue {
            let l = &self.locks[id];
            assert!(self.blocked(l.mode, &l.extents, seq).unwrap_or(true), "waiter {} could be granted", id.0);
        }
    }
}
