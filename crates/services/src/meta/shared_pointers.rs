//! MPI-IO shared file pointers (`MPI_File_read_shared`, `_ordered`, ...):
//! one counter per collective open, kept in memory by the metadata service
//! and changed by atomic fetch-and-add, so a job's ranks take disjoint
//! pieces of the file without a hidden file or a lock round trip.
//!
//! A pointer lives from its job's open (rank 0 sets it) to its close (rank
//! 0 releases it); a job that dies leaves it behind, so the table is
//! capped and pointers idle for an hour are dropped when it is full. A
//! restart of the metadata service forgets every pointer: the next access
//! fails with `NotFound` ("shared file pointer lost"), never a silent
//! restart at 0.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_wire::{ErrorCode, PointerOp};

/// Most pointers held at once (a few dozen bytes each).
pub const MAX_POINTERS: usize = 65_536;
/// Most pointers one user holds: a user who opens files collectively in a
/// loop without closing them fills their own share, not the table every
/// other user's MPI_File_open needs (64 users to fill it).
pub const MAX_POINTERS_PER_USER: usize = 1024;
/// Idle time after which a pointer may be dropped to make room.
const IDLE: Duration = Duration::from_secs(3600);

/// One pointer: its value, its owner, when it was last used.
struct Pointer {
    value: u64,
    uid: u32,
    used: Instant,
}

#[derive(Default)]
struct Table {
    pointers: HashMap<u64, Pointer>,
    /// Sets refused because a user's share or the table was full.
    refused: u64,
    /// Pointers held per user.
    held: HashMap<u32, usize>,
}

impl Table {
    fn drop_idle(&mut self, now: Instant, only: Option<u32>) {
        let held = &mut self.held;
        self.pointers.retain(|_, p| {
            let keep = now.duration_since(p.used) < IDLE || only.is_some_and(|u| u != p.uid);
            if !keep
                && let Some(n) = held.get_mut(&p.uid)
            {
                *n -= 1;
            }
            keep
        });
        self.held.retain(|_, n| *n > 0);
    }
}

#[derive(Default)]
pub struct SharedPointers {
    table: Mutex<Table>,
}

impl SharedPointers {
    /// Sets refused for a full share or table since start (metrics).
    pub fn refused(&self) -> u64 {
        self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner).refused
    }

    /// Applies `op`, asked by user `uid`, to pointer `token`; returns its
    /// value before. A pointer is its creator's: another user's token
    /// reads as absent.
    pub fn apply(&self, uid: u32, token: u64, op: PointerOp) -> Result<u64, (ErrorCode, String)> {
        let mut t = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let theirs = t.pointers.get(&token).is_some_and(|p| p.uid != uid);
        match op {
            _ if theirs => Err(lost()),
            PointerOp::Set(v) => {
                if let Some(p) = t.pointers.get_mut(&token) {
                    p.used = now;
                    return Ok(std::mem::replace(&mut p.value, v));
                }
                if t.held.get(&uid).copied().unwrap_or(0) >= MAX_POINTERS_PER_USER {
                    t.drop_idle(now, Some(uid));
                    if t.held.get(&uid).copied().unwrap_or(0) >= MAX_POINTERS_PER_USER {
                        t.refused += 1;
                        return Err((ErrorCode::Busy, format!("uid {uid} holds {MAX_POINTERS_PER_USER} shared file pointers, the most one user may: close the files opened with MPI_File_open (pointers idle for an hour are dropped)")));
                    }
                }
                if t.pointers.len() >= MAX_POINTERS {
                    t.drop_idle(now, None);
                    if t.pointers.len() >= MAX_POINTERS {
                        t.refused += 1;
                        return Err((ErrorCode::Busy, format!("{MAX_POINTERS} shared file pointers in use")));
                    }
                }
                t.pointers.insert(token, Pointer { value: v, uid, used: now });
                *t.held.entry(uid).or_insert(0) += 1;
                Ok(0)
            }
            PointerOp::FetchAdd(n) => {
                let p = t.pointers.get_mut(&token).ok_or_else(lost)?;
                let old = p.value;
                p.value = old.checked_add(n).ok_or_else(|| (ErrorCode::BadRequest, format!("shared file pointer {old} + {n} overflows")))?;
                p.used = now;
                Ok(old)
            }
            PointerOp::Release => {
                let Some(p) = t.pointers.remove(&token) else { return Ok(0) };
                if let Some(n) = t.held.get_mut(&p.uid) {
                    *n -= 1;
                    if *n == 0 {
                        t.held.remove(&p.uid);
                    }
                }
                Ok(p.value)
            }
        }
    }
}

fn lost() -> (ErrorCode, String) {
    (ErrorCode::NotFound, "shared file pointer lost (the metadata service restarted, or the file was closed)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_add_hands_out_disjoint_ranges_and_needs_a_set_pointer() {
        let p = SharedPointers::default();
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(1)).unwrap_err().0, ErrorCode::NotFound);
        assert_eq!(p.apply(1, 7, PointerOp::Set(100)).unwrap(), 0);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(10)).unwrap(), 100);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(5)).unwrap(), 110);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(u64::MAX)).unwrap_err().0, ErrorCode::BadRequest);
        assert_eq!(p.apply(1, 7, PointerOp::Release).unwrap(), 115);
        assert_eq!(p.apply(1, 7, PointerOp::FetchAdd(1)).unwrap_err().0, ErrorCode::NotFound);
    }

    #[test]
    fn a_full_table_refuses_new_pointers_but_serves_old_ones() {
        let p = SharedPointers::default();
        // Many users, each within their share, fill the table.
        for k in 0..MAX_POINTERS as u64 {
            p.apply((k / MAX_POINTERS_PER_USER as u64) as u32, k, PointerOp::Set(k)).unwrap();
        }
        assert_eq!(p.apply(9999, u64::MAX, PointerOp::Set(0)).unwrap_err().0, ErrorCode::Busy);
        assert_eq!(p.apply(0, 3, PointerOp::FetchAdd(1)).unwrap(), 3);
        assert_eq!(p.apply(0, 3, PointerOp::Set(0)).unwrap(), 4);
    }

    #[test]
    fn one_user_fills_only_their_own_share_and_cannot_touch_anothers() {
        let p = SharedPointers::default();
        for k in 0..MAX_POINTERS_PER_USER as u64 {
            p.apply(1000, k, PointerOp::Set(0)).unwrap();
        }
        let (code, msg) = p.apply(1000, 1 << 40, PointerOp::Set(0)).unwrap_err();
        assert!(code == ErrorCode::Busy && msg.contains("uid 1000"), "{msg}");
        // Everyone else is served (before: the whole table was one pool).
        assert_eq!(p.apply(1001, 1 << 41, PointerOp::Set(5)).unwrap(), 0);
        // Another user's token reads as absent, for every operation.
        assert_eq!(p.apply(1001, 3, PointerOp::FetchAdd(1)).unwrap_err().0, ErrorCode::NotFound);
        assert_eq!(p.apply(1001, 3, PointerOp::Set(9)).unwrap_err().0, ErrorCode::NotFound);
        assert_eq!(p.apply(1001, 3, PointerOp::Release).unwrap_err().0, ErrorCode::NotFound);
        assert_eq!(p.apply(1000, 3, PointerOp::FetchAdd(1)).unwrap(), 0);
        // A release gives the share back.
        p.apply(1000, 3, PointerOp::Release).unwrap();
        assert_eq!(p.apply(1000, 1 << 40, PointerOp::Set(0)).unwrap(), 0);
    }
}
