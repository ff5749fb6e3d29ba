//! POSIX record locks (`fcntl` F_GETLK/F_SETLK/F_SETLKW) on the mount,
//! through Weft's lock service, so processes on different mounts (and
//! nodes) exclude each other.
//!
//! The lock service knows locks, not POSIX owners: two locks conflict
//! whoever holds them. The mount therefore keeps each owner's (process's)
//! ranges itself and applies POSIX's rules here: an owner's locks never
//! conflict with each other, a new lock replaces the owner's locks on its
//! range (upgrade, downgrade, split), unlocking a part splits a lock, and
//! closing any descriptor of the file releases all of the owner's locks
//! on it. Conflicts between owners of this mount are found here; conflicts
//! with other mounts by the service. Every held range is one service lock.
//!
//! Nothing waits in the service while this table is held: requests ask
//! with a zero wait (granted now or `Busy`), and F_SETLKW retries after a
//! short sleep, so an unlock by another process of this mount is never
//! stuck behind a waiting lock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use weft_client::{Client, Error, Extent, File, LockGuard};

/// The largest end the lock service takes (2^63): "to end of file".
const END: u64 = 1 << 63;

/// One range an owner holds, with its lock in the service.
struct Held {
    start: u64,
    /// Exclusive end.
    end: u64,
    write: bool,
    pid: u32,
    /// Released when dropped.
    _guard: LockGuard,
}

/// A lock that keeps a request from being granted: (start, exclusive end,
/// write, pid); pid 0 when it is another mount's.
pub(crate) type Conflict = (u64, u64, bool, u32);

/// What a lock request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    Read,
    Write,
    Unlock,
}

impl Want {
    pub(crate) fn from_fcntl(typ: i32) -> Option<Want> {
        match typ {
            libc::F_RDLCK => Some(Want::Read),
            libc::F_WRLCK => Some(Want::Write),
            libc::F_UNLCK => Some(Want::Unlock),
            _ => None,
        }
    }
}

/// FUSE's inclusive `[start, end]` (end `OFFSET_MAX` for "to EOF") as the
/// half-open range the lock service takes. Record locks stop short of the
/// last lockable byte, 2^63 - 1, which serializes appends (`open_files`).
pub(crate) fn range(start: u64, end_inclusive: u64) -> Option<(u64, u64)> {
    let end = end_inclusive.min(END - 3) + 1;
    (start < end).then_some((start, end))
}

pub(crate) struct PosixLocks {
    client: Client,
    /// (inode, owner) -> the owner's ranges, disjoint.
    held: Mutex<HashMap<(u64, u64), Vec<Held>>>,
}

/// A service lock on `[start, end)`, taken only if free now.
fn take(client: &Client, file: &File, start: u64, end: u64, write: bool) -> Result<Option<LockGuard>, Error> {
    let extent = Extent::range(start, end).map_err(|e| Error::BadRequest(format!("lock range: {e}")))?;
    match client.lock_within(file, write, &[extent], Duration::ZERO) {
        Ok(g) => Ok(Some(g)),
        Err(Error::Busy { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

impl PosixLocks {
    pub(crate) fn new(client: Client) -> Self {
        PosixLocks { client, held: Mutex::new(HashMap::new()) }
    }

    /// F_SETLK / F_SETLKW for `owner`: `Ok(false)` when the range is locked
    /// by another owner (only without `wait`).
    pub(crate) fn set(&self, file: &File, owner: u64, (start, end): (u64, u64), want: Want, pid: u32, wait: bool) -> Result<bool, Error> {
        let ino = file.attr().id.0;
        let mut pause = Duration::from_millis(2);
        loop {
            if self.try_set(file, ino, owner, start, end, want, pid)? {
                return Ok(true);
            }
            if !wait {
                return Ok(false);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn try_set(&self, file: &File, ino: u64, owner: u64, start: u64, end: u64, want: Want, pid: u32) -> Result<bool, Error> {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if want != Want::Unlock && local_conflict(&held, ino, owner, start, end, want == Want::Write).is_some() {
            return Ok(false);
        }
        let mine = held.entry((ino, owner)).or_default();
        // The owner's own ranges under the new one would conflict with it in
        // the service (one of them a write): they go first, and come back
        // if the new lock cannot be had.
        let (over, keep): (Vec<Held>, Vec<Held>) = std::mem::take(mine).into_iter().partition(|h| h.start < end && start < h.end);
        *mine = keep;
        let clash = over.iter().any(|h| h.write || want == Want::Write);
        let mut old: Vec<(u64, u64, bool, u32)> = over.iter().map(|h| (h.start, h.end, h.write, h.pid)).collect();
        let mut over = Some(over);
        if clash {
            drop(over.take());
        }
        let new = match want {
            Want::Unlock => None,
            w => match take(&self.client, file, start, end, w == Want::Write)? {
                Some(g) => Some(Held { start, end, write: w == Want::Write, pid, _guard: g }),
                None => {
                    // Not granted: the owner keeps what it had.
                    let restored = match over.take() {
                        Some(v) => v,
                        None => retake(&self.client, file, &old),
                    };
                    let mine = held.entry((ino, owner)).or_default();
                    mine.extend(restored);
                    mine.sort_by_key(|h| h.start);
                    return Ok(false);
                }
            },
        };
        // The parts of the old ranges outside the new one stay locked.
        old = old.into_iter().flat_map(|(s, e, w, p)| [(s, e.min(start), w, p), (s.max(end), e, w, p)]).filter(|r| r.0 < r.1).collect();
        let kept = retake(&self.client, file, &old);
        drop(over);
        let mine = held.entry((ino, owner)).or_default();
        mine.extend(kept);
        mine.extend(new);
        mine.sort_by_key(|h| h.start);
        if mine.is_empty() {
            held.remove(&(ino, owner));
        }
        Ok(true)
    }

    /// F_GETLK: a lock that would keep `owner` from locking the range, if any.
    pub(crate) fn get(&self, file: &File, owner: u64, (start, end): (u64, u64), write: bool) -> Result<Option<Conflict>, Error> {
        let ino = file.attr().id.0;
        let held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = local_conflict(&held, ino, owner, start, end, write) {
            return Ok(Some(c));
        }
        // Other mounts: probe the parts the owner does not hold itself
        // (its own locks would conflict with the probe).
        let mut gaps = vec![(start, end)];
        for h in held.get(&(ino, owner)).into_iter().flatten() {
            gaps = gaps.into_iter().flat_map(|(s, e)| [(s, e.min(h.start)), (s.max(h.end), e)]).filter(|g| g.0 < g.1).collect();
        }
        for (s, e) in gaps {
            match take(&self.client, file, s, e, write)? {
                Some(g) => drop(g),
                None => return Ok(Some((s, e, write, 0))),
            }
        }
        Ok(None)
    }

    /// Releases every lock held on inode `ino` by anyone on this mount (its
    /// last handle here closed: no process here can hold a lock on it any
    /// more, whatever owner the kernel named at close).
    pub(crate) fn release_inode(&self, ino: u64) {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let gone: Vec<Vec<Held>> = held.extract_if(|(i, _), _| *i == ino).map(|(_, v)| v).collect();
        drop(held);
        drop(gone);
    }

    /// Releases every lock `owner` holds on inode `ino` (any close of the
    /// file by that process, as POSIX says).
    pub(crate) fn release_owner(&self, ino: u64, owner: u64) {
        let gone = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&(ino, owner));
        drop(gone);
    }
}

/// Takes the service locks for `ranges` (parts of locks the owner held a
/// moment ago). Another mount may have taken one in between: that part is
/// lost, and said so.
fn retake(client: &Client, file: &File, ranges: &[(u64, u64, bool, u32)]) -> Vec<Held> {
    let mut out = Vec::new();
    for &(start, end, write, pid) in ranges {
        match take(client, file, start, end, write) {
            Ok(Some(guard)) => out.push(Held { start, end, write, pid, _guard: guard }),
            Ok(None) => tracing::warn!(target: "weft::fuse", start, end, "a split record lock was taken by another mount in between"),
            Err(e) => tracing::warn!(target: "weft::fuse", start, end, error = %e, "could not keep part of a record lock"),
        }
    }
    out
}

/// The first lock of another owner of this mount that conflicts.
fn local_conflict(held: &HashMap<(u64, u64), Vec<Held>>, ino: u64, owner: u64, start: u64, end: u64, write: bool) -> Option<Conflict> {
    held.iter()
        .filter(|((i, o), _)| *i == ino && *o != owner)
        .flat_map(|(_, v)| v.iter())
        .find(|h| h.start < end && start < h.end && (write || h.write))
        .map(|h| (h.start, h.end, h.write, h.pid))
}
