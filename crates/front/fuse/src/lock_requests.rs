//! The kernel's record-lock requests (fcntl F_GETLK, F_SETLK, F_SETLKW)
//! answered with the mount's lock table (`locks.rs`); F_SETLKW waits on a
//! thread of its own.

use crate::errno;
use crate::fs::WeftFs;
use crate::locks::{range, Want};
use fuser::{Errno, FileHandle, INodeNo, LockOwner, ReplyEmpty};
use std::sync::atomic::Ordering;

impl WeftFs {
    /// F_GETLK: the first lock of another owner in the way, if any.
    pub(crate) fn get_lock(&self, fh: FileHandle, lock_owner: LockOwner, (start, end): (u64, u64), typ: i32, reply: fuser::ReplyLock) {
        let r = (|| -> Result<Option<crate::locks::Conflict>, Errno> {
            let h = self.handle(fh)?;
            let Some(want) = Want::from_fcntl(typ) else { return Err(Errno::EINVAL) };
            let Some(r) = range(start, end) else { return Ok(None) };
            if want == Want::Unlock {
                return Ok(None);
            }
            self.locks.get(&h.file, lock_owner.0, r, want == Want::Write).map_err(|e| errno::of(&e))
        })();
        match r {
            Ok(Some((s, e, write, pid))) => reply.locked(s, e - 1, if write { libc::F_WRLCK } else { libc::F_RDLCK }, pid),
            Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
            Err(e) => reply.error(e),
        }
    }

    /// F_SETLK and F_SETLKW (`sleep`): lock, change or unlock a range.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn set_lock(&self, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, (start, end): (u64, u64), typ: i32, pid: u32, sleep: bool, reply: ReplyEmpty) {
        let h = match self.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(e),
        };
        let Some(want) = Want::from_fcntl(typ) else { return reply.error(Errno::EINVAL) };
        let Some(r) = range(start, end) else { return reply.ok() };
        // What was written under a write lock reaches the servers before
        // the lock goes or becomes a read lock, so the next holder (on any
        // mount) reads it.
        if want != Want::Write {
            self.writes.wait(ino.0);
        }
        let (locks, notifier) = (self.locks.clone(), self.notifier.clone());
        let finish = move |r: Result<bool, weft_client::Error>, reply: ReplyEmpty| match r {
            Ok(true) => {
                // A new lock may guard bytes another mount wrote since this
                // kernel cached them: drop the cached pages (as NFS does on
                // lock), so a program that locks before it reads sees them.
                if want != Want::Unlock
                    && let Some(n) = notifier.get()
                    && let Err(e) = n.inval_inode(ino, 0, 0)
                {
                    tracing::debug!(target: "weft::fuse", error = %e, "cache invalidation after a lock failed");
                }
                reply.ok()
            }
            Ok(false) => reply.error(Errno::EAGAIN),
            Err(e) => reply.error(errno::of(&e)),
        };
        if !sleep {
            return finish(locks.set(&h.file, lock_owner.0, r, want, pid, false), reply);
        }
        // F_SETLKW may wait long: on a thread of its own, so the mount's
        // request threads stay free (for the unlock it waits for, too).
        const MAX_WAITERS: usize = 256;
        let waiters = self.lock_waiters.clone();
        if waiters.fetch_add(1, Ordering::AcqRel) >= MAX_WAITERS {
            waiters.fetch_sub(1, Ordering::AcqRel);
            return reply.error(Errno::ENOLCK);
        }
        let spawned = std::thread::Builder::new().name("weft-lock-wait".into()).spawn(move || {
            finish(locks.set(&h.file, lock_owner.0, r, want, pid, true), reply);
            waiters.fetch_sub(1, Ordering::AcqRel);
        });
        if let Err(e) = spawned {
            tracing::error!(target: "weft::fuse", error = %e, "cannot start a lock waiter");
        }
    }
}
