//! The lock table against a naive reference: a list of locks scanned
//! linearly, conflicts decided on expanded byte sets. Random sequences of
//! acquires and releases from several owners must give the same grants in
//! the same order.

use proptest::prelude::*;
use std::collections::BTreeSet;
use weft_lock::{Extent, Grant, LockError, LockId, LockTable, Mode, Owner};

#[derive(Debug, Clone)]
enum Op {
    Acquire { owner: u64, exclusive: bool, extents: Vec<Extent> },
    Release { pick: prop::sample::Index, wrong_owner: bool },
    ReleaseOwner { owner: u64 },
}

struct Naive {
    /// (id, owner, mode, bytes, granted), in arrival order.
    locks: Vec<(LockId, Owner, Mode, BTreeSet<u64>, bool)>,
}

fn conflict(a: Mode, sa: &BTreeSet<u64>, b: Mode, sb: &BTreeSet<u64>) -> bool {
    (a == Mode::Exclusive || b == Mode::Exclusive) && !sa.is_disjoint(sb)
}

impl Naive {
    fn acquire(&mut self, id: LockId, owner: Owner, mode: Mode, bytes: BTreeSet<u64>) -> bool {
        let granted = !self.locks.iter().any(|l| conflict(mode, &bytes, l.2, &l.3));
        self.locks.push((id, owner, mode, bytes, granted));
        granted
    }

    fn drain(&mut self) -> Vec<Grant> {
        let mut grants = Vec::new();
        for i in 0..self.locks.len() {
            if self.locks[i].4 {
                continue;
            }
            let (mode, bytes) = (self.locks[i].2, self.locks[i].3.clone());
            let blocked = self.locks.iter().enumerate().any(|(j, l)| j != i && (l.4 || j < i) && conflict(mode, &bytes, l.2, &l.3));
            if !blocked {
                self.locks[i].4 = true;
                grants.push(Grant { lock: self.locks[i].0, owner: self.locks[i].1 });
            }
        }
        grants
    }
}

fn extent() -> impl Strategy<Value = Extent> {
    prop_oneof![
        (0u64..60, 1u64..12).prop_map(|(s, l)| Extent::range(s, s + l).unwrap()),
        (0u64..40, 1u64..4, 0u64..5, 1u64..6).prop_map(|(o, l, gap, c)| Extent::strided(o, l, l + gap, c).unwrap()),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..4, any::<bool>(), proptest::collection::vec(extent(), 1..4)).prop_map(|(owner, exclusive, extents)| Op::Acquire { owner, exclusive, extents }),
        3 => (any::<prop::sample::Index>(), proptest::bool::weighted(0.1)).prop_map(|(pick, wrong_owner)| Op::Release { pick, wrong_owner }),
        1 => (0u64..4).prop_map(|owner| Op::ReleaseOwner { owner }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn grants_and_wait_order_match_the_reference(ops in proptest::collection::vec(op(), 1..60)) {
        let mut t = LockTable::new();
        let mut naive = Naive { locks: Vec::new() };
        let mut next = 0u64;
        for op in ops {
            match op {
                Op::Acquire { owner, exclusive, extents } => {
                    let mode = if exclusive { Mode::Exclusive } else { Mode::Shared };
                    let bytes: BTreeSet<u64> = extents.iter().flat_map(|e| e.ranges()).flat_map(|(a, b)| a..b).collect();
                    let id = LockId(next);
                    next += 1;
                    let got = t.acquire(id, Owner(owner), mode, extents).unwrap();
                    prop_assert_eq!(got, naive.acquire(id, Owner(owner), mode, bytes));
                }
                Op::Release { pick, wrong_owner } => {
                    if naive.locks.is_empty() { continue; }
                    let k = pick.index(naive.locks.len());
                    let (id, owner) = (naive.locks[k].0, naive.locks[k].1);
                    if wrong_owner {
                        let err = t.release(Owner(owner.0 + 100), id).unwrap_err();
                        prop_assert_eq!(err, LockError::NotOwner { lock: id.0, owner: owner.0, caller: owner.0 + 100 });
                    } else {
                        let got = t.release(owner, id).unwrap();
                        naive.locks.remove(k);
                        prop_assert_eq!(got, naive.drain());
                    }
                }
                Op::ReleaseOwner { owner } => {
                    let mut got = t.release_owner(Owner(owner));
                    naive.locks.retain(|l| l.1 != Owner(owner));
                    let mut want = naive.drain();
                    got.sort_by_key(|g| g.lock);
                    want.sort_by_key(|g| g.lock);
                    prop_assert_eq!(got, want);
                }
            }
            t.check_invariants();
            prop_assert_eq!(t.held(), naive.locks.iter().filter(|l| l.4).count());
            prop_assert_eq!(t.waiting(), naive.locks.iter().filter(|l| !l.4).count());
        }
    }
}

#[test]
fn interleaved_strided_writers_do_not_wait_for_each_other() {
    // Paper 004's example: two processes writing 10 bytes, skipping 10, n times.
    let mut t = LockTable::new();
    let a = Extent::strided(0, 10, 20, 100_000).unwrap();
    let b = Extent::strided(10, 10, 20, 100_000).unwrap();
    assert!(t.acquire(LockId(1), Owner(1), Mode::Exclusive, vec![a]).unwrap());
    assert!(t.acquire(LockId(2), Owner(2), Mode::Exclusive, vec![b]).unwrap(), "list locking grants both");
    // Byte-range locking of the same accesses would serialize them.
    assert!(!t.acquire(LockId(3), Owner(3), Mode::Exclusive, vec![Extent::range(10, 2_000_000).unwrap()]).unwrap());
}

#[test]
fn a_writer_is_not_starved_by_a_stream_of_readers() {
    let mut t = LockTable::new();
    let r = || vec![Extent::range(0, 100).unwrap()];
    assert!(t.acquire(LockId(1), Owner(1), Mode::Shared, r()).unwrap());
    assert!(!t.acquire(LockId(2), Owner(2), Mode::Exclusive, r()).unwrap(), "writer waits for the reader");
    assert!(!t.acquire(LockId(3), Owner(3), Mode::Shared, r()).unwrap(), "a later reader waits behind the writer");
    assert_eq!(t.release(Owner(1), LockId(1)).unwrap(), [Grant { lock: LockId(2), owner: Owner(2) }]);
    assert_eq!(t.release(Owner(2), LockId(2)).unwrap(), [Grant { lock: LockId(3), owner: Owner(3) }]);
}

#[test]
fn lists_are_granted_whole_so_they_cannot_deadlock() {
    let mut t = LockTable::new();
    let x = Extent::range(0, 10).unwrap();
    let y = Extent::range(100, 110).unwrap();
    assert!(t.acquire(LockId(1), Owner(1), Mode::Exclusive, vec![x]).unwrap());
    // Owner 2 wants y then x, owner 3 wants x then y: both wait whole, neither holds a part.
    assert!(!t.acquire(LockId(2), Owner(2), Mode::Exclusive, vec![y, x]).unwrap());
    assert!(!t.acquire(LockId(3), Owner(3), Mode::Exclusive, vec![x, y]).unwrap());
    assert_eq!(t.release(Owner(1), LockId(1)).unwrap(), [Grant { lock: LockId(2), owner: Owner(2) }]);
    assert_eq!(t.release(Owner(2), LockId(2)).unwrap(), [Grant { lock: LockId(3), owner: Owner(3) }]);
}

#[test]
fn bad_requests_are_refused_and_disturb_nobody() {
    let mut t = LockTable::new();
    assert!(t.acquire(LockId(1), Owner(1), Mode::Exclusive, vec![Extent::range(0, 10).unwrap()]).unwrap());
    assert_eq!(t.acquire(LockId(2), Owner(2), Mode::Shared, vec![]), Err(LockError::Empty));
    assert!(matches!(t.acquire(LockId(2), Owner(2), Mode::Shared, vec![Extent::Range { start: 9, end: 3 }]), Err(LockError::Extent(_))));
    assert!(matches!(t.acquire(LockId(2), Owner(2), Mode::Shared, vec![Extent::Range { start: 0, end: u64::MAX }]), Err(LockError::Extent(_))));
    assert_eq!(t.acquire(LockId(1), Owner(2), Mode::Shared, vec![Extent::range(50, 60).unwrap()]), Err(LockError::DuplicateId(1)));
    assert_eq!(t.release(Owner(2), LockId(1)), Err(LockError::NotOwner { lock: 1, owner: 1, caller: 2 }));
    assert_eq!(t.release(Owner(1), LockId(77)), Err(LockError::Unknown(77)));
    assert!(t.is_granted(LockId(1)));
    t.check_invariants();
}

/// Issue 8: nothing bounded how many items one file's table held, and every
/// query pays for them.
#[test]
fn a_full_table_refuses_more_extents_and_more_waiters() {
    use weft_lock::table::{MAX_TABLE_ITEMS, MAX_TABLE_WAITERS};
    let mut t = LockTable::with_seed(7);
    let list: Vec<Extent> = (0..30_000u64).map(|k| Extent::range(k * 2, k * 2 + 1).unwrap()).collect();
    let mut id = 0;
    while t.acquire(LockId(id), Owner(1), Mode::Shared, list.clone()).is_ok() {
        id += 1;
    }
    assert_eq!(id as usize, MAX_TABLE_ITEMS / list.len());
    assert!(matches!(t.acquire(LockId(id), Owner(1), Mode::Shared, list.clone()), Err(LockError::Full { what: "extents", .. })));
    for k in 0..MAX_TABLE_WAITERS as u64 {
        assert_eq!(t.acquire(LockId(1_000 + k), Owner(2), Mode::Exclusive, vec![Extent::range(0, 1).unwrap()]), Ok(false));
    }
    let over = t.acquire(LockId(999_999), Owner(2), Mode::Exclusive, vec![Extent::range(0, 1).unwrap()]);
    assert!(matches!(over, Err(LockError::Full { what: "waiting requests", .. })));
    // Releasing frees room again.
    assert!(t.release_owner(Owner(2)).is_empty());
    t.release(Owner(1), LockId(0)).unwrap();
    assert_eq!(t.acquire(LockId(id), Owner(1), Mode::Shared, list), Ok(true));
    t.check_invariants();
}

/// Review of issue 8: many items sharing a request's bounds that do not
/// conflict with it (interleaved strided runs) made every check walk them
/// all under the file's mutex. A check is now bounded and refused past it.
#[test]
fn a_check_that_would_walk_too_many_items_is_refused() {
    use weft_lock::table::MAX_CHECKS;
    let mut t = LockTable::with_seed(3);
    let evens: Vec<Extent> = (0..30_000u64).map(|k| Extent::strided(2 * k, 1, 60_000, 1 << 40).unwrap()).collect();
    let odds: Vec<Extent> = (0..30_000u64).map(|k| Extent::strided(2 * k + 1, 1, 60_000, 1 << 40).unwrap()).collect();
    assert_eq!(t.acquire(LockId(1), Owner(1), Mode::Exclusive, evens), Ok(true));
    match t.acquire(LockId(2), Owner(2), Mode::Exclusive, odds) {
        Err(LockError::TooCostly { limit, .. }) => assert_eq!(limit, MAX_CHECKS),
        other => panic!("{other:?}"),
    }
    // A small request still gets its answer.
    assert_eq!(t.acquire(LockId(3), Owner(2), Mode::Exclusive, vec![Extent::range(1, 2).unwrap()]), Ok(true));
    t.check_invariants();
}

/// Readers never cost each other a check: shared items live in a tree of
/// their own, and a shared request walks only the exclusive ones.
#[test]
fn many_readers_of_the_same_bytes_are_granted_at_once() {
    let mut t = LockTable::with_seed(4);
    let wide: Vec<Extent> = (0..30_000u64).map(|k| Extent::range(k, 1 << 62).unwrap()).collect();
    for id in 0..6 {
        assert_eq!(t.acquire(LockId(id), Owner(id), Mode::Shared, wide.clone()), Ok(true));
    }
    // A writer conflicts at its first item.
    assert_eq!(t.acquire(LockId(99), Owner(99), Mode::Exclusive, vec![Extent::range(5, 6).unwrap()]), Ok(false));
    t.check_invariants();
}
