//! Weft's open files, by the handle the shim gave each one (the address of
//! its own record). A handle is recognised by membership here, never by
//! reading memory behind it: the MPI library's handles are just absent.
//! Fortran handles get numbers of their own, from [`FORTRAN_BASE`] up.

use crate::file::OpenFile;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// First Fortran handle of a Weft file: far above the small indices both
/// MPIs hand out for their own files.
pub const FORTRAN_BASE: i32 = 0x4000_0000;

pub type Shared = Arc<RwLock<OpenFile>>;

#[derive(Default)]
struct Table {
    files: HashMap<usize, (Shared, i32)>,
    fortran: HashMap<i32, usize>,
    next_fortran: i32,
}

static TABLE: RwLock<Option<Table>> = RwLock::new(None);

fn with<T>(f: impl FnOnce(&mut Table) -> T) -> T {
    let mut g = TABLE.write().unwrap_or_else(PoisonError::into_inner);
    f(g.get_or_insert_with(Table::default))
}

/// Registers a file under `key`; returns its Fortran handle.
pub fn insert(key: usize, file: OpenFile) -> i32 {
    with(|t| {
        // Handles are reused only after 2^30 opens; skip any still open.
        let span = i32::MAX - FORTRAN_BASE;
        let mut f = FORTRAN_BASE + t.next_fortran;
        while t.fortran.contains_key(&f) {
            t.next_fortran = (t.next_fortran + 1) % span;
            f = FORTRAN_BASE + t.next_fortran;
        }
        t.next_fortran = (t.next_fortran + 1) % span;
        t.files.insert(key, (Arc::new(RwLock::new(file)), f));
        t.fortran.insert(f, key);
        f
    })
}

pub fn get(key: usize) -> Option<Shared> {
    let g = TABLE.read().unwrap_or_else(PoisonError::into_inner);
    g.as_ref()?.files.get(&key).map(|(f, _)| f.clone())
}

/// Every open file.
pub fn all() -> Vec<Shared> {
    let g = TABLE.read().unwrap_or_else(PoisonError::into_inner);
    g.as_ref().map_or_else(Vec::new, |t| t.files.values().map(|(f, _)| f.clone()).collect())
}

pub fn remove(key: usize) -> Option<Shared> {
    with(|t| {
        let (f, fh) = t.files.remove(&key)?;
        t.fortran.remove(&fh);
        Some(f)
    })
}

pub fn fortran_of(key: usize) -> Option<i32> {
    let g = TABLE.read().unwrap_or_else(PoisonError::into_inner);
    g.as_ref()?.files.get(&key).map(|(_, f)| *f)
}

pub fn key_of_fortran(f: i32) -> Option<usize> {
    let g = TABLE.read().unwrap_or_else(PoisonError::into_inner);
    g.as_ref()?.fortran.get(&f).copied()
}

/// Locks a file's state for a call of the program; a panic in an earlier
/// call does not lock it out.
pub fn lock(f: &Shared) -> RwLockWriteGuard<'_, OpenFile> {
    f.write().unwrap_or_else(PoisonError::into_inner)
}

/// Shares a file's state with other readers: for posting a nonblocking
/// independent access and for running it in the file's worker, which may
/// overlap (and call no collective step: see `comm::CComm`'s Sync).
pub fn read(f: &Shared) -> RwLockReadGuard<'_, OpenFile> {
    f.read().unwrap_or_else(PoisonError::into_inner)
}
