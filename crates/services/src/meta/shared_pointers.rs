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
/// Idle time after which a pointer may be dropped to make room.
const IDLE: Duration = Duration::from_secs(3600);

#[derive(Default)]
pub struct SharedPointers {
    table: Mutex<HashMap<u64, (u64, Instant)>>,
}

impl SharedPointers {
    /// Applies `op` to pointer `token`; returns its value before.
    pub fn apply(&self, token: u64, op: PointerOp) -> Result<u64, (ErrorCode, String)> {
        let mut t = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        match op {
            PointerOp::Set(v) => {
                if !t.contains_key(&token) && t.len() >= MAX_POINTERS {
                    t.retain(|_, (_, used)| now.duration_since(*used) < IDLE);
                    if t.len() >= MAX_POINTERS {
                        return Err((ErrorCode::Busy, format!("{MAX_POINTERS} shared file pointers in use")));
                    }
                }
                Ok(t.insert(token, (v, now)).map_or(0, |(old, _)| old))
            }
            PointerOp::FetchAdd(n) => {
                let (v, used) = t.get_mut(&token).ok_or_else(lost)?;
                let old = *v;
                *v = old.checked_add(n).ok_or_else(|| (ErrorCode::BadRequest, format!("shared file pointer {old} + {n} overflows")))?;
                *used = now;
                Ok(old)
            }
            PointerOp::Release => Ok(t.remove(&token).map_or(0, |(v, _)| v)),
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
        assert_eq!(p.apply(7, PointerOp::FetchAdd(1)).unwrap_err().0, ErrorCode::NotFound);
        assert_eq!(p.apply(7, PointerOp::Set(100)).unwrap(), 0);
        assert_eq!(p.apply(7, PointerOp::FetchAdd(10)).unwrap(), 100);
        assert_eq!(p.apply(7, PointerOp::FetchAdd(5)).unwrap(), 110);
        assert_eq!(p.apply(7, PointerOp::FetchAdd(u64::MAX)).unwrap_err().0, ErrorCode::BadRequest);
        assert_eq!(p.apply(7, PointerOp::Release).unwrap(), 115);
        assert_eq!(p.apply(7, PointerOp::FetchAdd(1)).unwrap_err().0, ErrorCode::NotFound);
    }

    #[test]
    fn a_full_table_refuses_new_pointers_but_serves_old_ones() {
        let p = SharedPointers::default();
        for k in 0..MAX_POINTERS as u64 {
            p.apply(k, PointerOp::Set(k)).unwrap();
        }
        assert_eq!(p.apply(u64::MAX, PointerOp::Set(0)).unwrap_err().0, ErrorCode::Busy);
        assert_eq!(p.apply(3, PointerOp::FetchAdd(1)).unwrap(), 3);
        assert_eq!(p.apply(3, PointerOp::Set(0)).unwrap(), 4);
    }
}
