//! Open files' lifetimes on the mount: a file removed (or renamed over)
//! while this mount has it open lives on under a hidden name until its last
//! close (POSIX unlink-while-open), a file written through a handle gets
//! its mtime when the handle is closed, and O_APPEND writes are atomic
//! across processes and mounts.

use crate::errno;
use crate::fs::{WeftFs, HIDDEN_PREFIX};
use crate::handle::{lock, Handle};
use fuser::{Errno, INodeNo};
use std::sync::atomic::Ordering;

/// The byte whose exclusive lock serializes appends to a file, Weft-wide:
/// the last one a lock may cover, which no data access reaches.
const APPEND_TOKEN: u64 = (1 << 63) - 1;

impl WeftFs {
    /// An O_APPEND write: the end of file is found and written at under an
    /// exclusive lock on [`APPEND_TOKEN`], so two appends (from any
    /// process on any mount) never land on the same bytes.
    pub(crate) fn append(&self, h: &Handle, data: &[u8]) -> Result<usize, Errno> {
        let e = |e: weft_client::Error| errno::of(&e);
        let token = weft_client::Extent::range(APPEND_TOKEN, APPEND_TOKEN + 1).map_err(|_| Errno::EINVAL)?;
        let turn = self.client.lock(&h.file, true, &[token]).map_err(e)?;
        let at = h.file.size().map_err(e)?;
        let n = h.file.write_at(at, data).map_err(e)?;
        // The bytes are written: a failed release must not make the caller
        // append them again (the lock then lapses with the session).
        if let Err(err) = turn.release() {
            tracing::warn!(target: "weft::fuse", error = %err, "could not release an append's lock");
        }
        Ok(n)
    }

    /// Removes `path` (a file): at once, or, if this mount has it open, by
    /// renaming it to a hidden name that its last close removes, so open
    /// handles keep reading and writing it (POSIX unlink-while-open).
    /// Removed as the user behind the request (`c`). The directory's new
    /// time, when the metadata service said it (an unlink's answer).
    pub(crate) fn remove_file(&self, c: &weft_client::Client, path: &str) -> Result<Option<i64>, Errno> {
        let ino = lock(&self.known).ino_at(path);
        let mut open = lock(&self.open_inodes);
        match ino.and_then(|i| open.get_mut(&i).map(|o| (i, o))) {
            Some((ino, o)) if o.handles > 0 && o.hidden.is_none() => {
                // A name no one can guess ahead (and so cannot block by
                // making it first, or have replaced by this rename).
                let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
                let hidden = format!("{dir}/{HIDDEN_PREFIX}{ino:x}-{:016x}", weft_client::random_u64());
                c.rename(path, &hidden).map_err(|e| errno::of(&e))?;
                o.hidden = Some((hidden.clone(), c.clone()));
                // Still under the open-inode lock: a last close that
                // follows finds the file by its hidden name.
                self.forget_path(path);
                self.remember(ino, &hidden);
                drop(open);
                self.rename_handles(path, &hidden);
                Ok(None)
            }
            _ => {
                drop(open);
                // The metadata service deletes the objects of a last name.
                let at = c.unlink_timed(path).map_err(|e| errno::of(&e))?;
                self.forget_path(path);
                Ok(at)
            }
        }
    }

    /// Waits (at most `budget`) until no file this mount set aside in
    /// directory `dir` is still open here. The kernel sends a file's
    /// release after close(2) has returned, so `rm -rf` may unlink a file
    /// just closed (set aside, as still open) and then remove its
    /// directory before that release comes.
    pub(crate) fn wait_hidden_closed(&self, dir: &str, budget: std::time::Duration) -> bool {
        // Each waiter holds one of the mount's request threads, which the
        // releases it waits for need: leave at least one free.
        let waiters = self.release_waiters.fetch_add(1, Ordering::AcqRel);
        let done = waiters + 1 < self.opts.threads && self.wait_hidden_closed_now(dir, budget);
        self.release_waiters.fetch_sub(1, Ordering::AcqRel);
        done
    }

    fn wait_hidden_closed_now(&self, dir: &str, budget: std::time::Duration) -> bool {
        let prefix = crate::fs::join(dir, HIDDEN_PREFIX);
        // Where each set-aside file is now (kept up to date through renames
        // of its directory; not the inode's path, which a hard link's other
        // names may take).
        let in_dir = |o: &crate::fs::OpenInode| o.hidden.as_ref().is_some_and(|(h, _)| h.strip_prefix(&prefix).is_some_and(|rest| !rest.contains('/')));
        let deadline = std::time::Instant::now() + budget;
        let mut open = lock(&self.open_inodes);
        loop {
            if !open.values().any(in_dir) && !lock(&self.removing).iter().any(|h| h.starts_with(&prefix)) {
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            open = self.closes.wait_timeout(open, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
    }

    /// `from` was renamed to `to`: hidden names of files set aside below
    /// it move along.
    pub(crate) fn hidden_moved(&self, from: &str, to: &str) {
        let below = format!("{from}/");
        for o in lock(&self.open_inodes).values_mut() {
            if let Some((h, _)) = &mut o.hidden
                && let Some(rest) = h.strip_prefix(&below)
            {
                *h = format!("{to}/{rest}");
            }
        }
    }

    /// Undoes [`WeftFs::remove_file`]'s hiding of `ino` (its rename over
    /// failed), so it keeps `path`.
    pub(crate) fn unhide(&self, ino: u64, path: &str) {
        let mut open = lock(&self.open_inodes);
        let Some((hidden, by)) = open.get_mut(&ino).and_then(|o| o.hidden.take()) else { return };
        if let Err(e) = by.rename(&hidden, path) {
            tracing::warn!(target: "weft::fuse", %hidden, error = %e, "could not restore a file set aside for a failed rename");
            if let Some(o) = open.get_mut(&ino) {
                o.hidden = Some((hidden, by));
            }
            return;
        }
        drop(open);
        self.remember(ino, path);
        self.rename_handles(&hidden, path);
    }

    /// Clears the setuid and setgid bits of `h`'s file for a write by `c`,
    /// once per handle, if the file had them when opened (a later
    /// chmod +s is not seen). A failure is logged and the write goes on:
    /// the bits are the file's, the bytes the writer's.
    pub(crate) fn drop_privileges(&self, c: &weft_client::Client, h: &Handle) {
        if h.privileges_dropped.load(Ordering::Relaxed) {
            return;
        }
        match self.drop_privileges_of(c, h.file.attr().id, Some(h.file.attr().mode)) {
            Ok(_) => h.privileges_dropped.store(true, Ordering::Relaxed),
            Err(e) => tracing::warn!(target: "weft::fuse", ino = h.file.attr().id.0, error = %e, "could not drop the setuid/setgid bits of a file written"),
        }
    }

    /// Drops the setuid and setgid bits of regular file `id` as `c` (a
    /// writer), from the mode it has now, if `mode_then` (when it was
    /// opened; `None`: not known) had any: its attributes after, if it
    /// changed. Never by the mode from the open: a chmod since (here or
    /// elsewhere) stands. A directory's setgid stays (it marks the group
    /// new entries take, and Linux never drops it this way).
    pub(crate) fn drop_privileges_of(&self, c: &weft_client::Client, id: weft_client::FileId, mode_then: Option<u32>) -> Result<Option<weft_client::FileAttr>, weft_client::Error> {
        if mode_then.is_some_and(|m| m & 0o6000 == 0) {
            return Ok(None);
        }
        let Ok(path) = self.path_of(INodeNo(id.0)) else { return Ok(None) };
        // After the changes held here (sent first; none held after it).
        self.held.stop(id.0);
        self.held.send(id.0)?;
        let (a, _) = c.stat(&path)?;
        let mode = a.mode & 0o7777;
        let kept = without_privileges(mode, c.cred().in_group(a.gid));
        if a.id != id || a.kind != weft_client::FileKind::File || kept == mode {
            return Ok(None);
        }
        self.change(c, INodeNo(a.id.0), weft_client::AttrChange::Mode(kept)).map(Some)
    }

    /// Sets the mtime of a file written through `h` since its last close
    /// (or explicit time); data servers do not tell the metadata service.
    /// Asked as the user who opened it (a writer, so allowed "now").
    pub(crate) fn touch_if_written(&self, h: &Handle) {
        if !h.wrote.swap(false, Ordering::Relaxed) {
            return;
        }
        if let Err(e) = self.change(&h.opener, INodeNo(h.file.id().0), weft_client::AttrChange::Mtime(weft_client::TIME_NOW)) {
            tracing::warn!(target: "weft::fuse", ino = h.file.id().0, error = %e, "could not set the mtime of a written file");
        }
    }

    /// A handle closed: the last close of a file removed while open
    /// removes it for good.
    pub(crate) fn closed(&self, ino: u64) {
        let hidden = {
            let mut open = lock(&self.open_inodes);
            let Some(o) = open.get_mut(&ino) else { return };
            o.handles -= 1;
            if o.handles > 0 {
                return;
            }
            // Where it is now: its directory may have been renamed since.
            // Its hidden name (kept through renames of its directory), never
            // the inode's path: another name of a hard-linked file may be it.
            let hidden = open.remove(&ino).and_then(|o| o.hidden);
            if let Some((h, _)) = &hidden {
                // Counted until its unlink is done, for `wait_hidden_closed`.
                lock(&self.removing).push(h.clone());
                // After the push: see `removals_mark`.
                self.removals.fetch_add(1, Ordering::AcqRel);
            }
            hidden
        };
        self.locks.release_inode(ino);
        if let Some((h, by)) = hidden {
            if let Err(e) = by.unlink(&h) {
                tracing::warn!(target: "weft::fuse", path = %h, error = %e, "could not remove a file unlinked while open");
            }
            // Its directory (wherever it went since) changed.
            self.dirs.changed_all();
            lock(&self.known).lost(ino);
            let open = lock(&self.open_inodes);
            let mut removing = lock(&self.removing);
            if let Some(i) = removing.iter().position(|r| *r == h) {
                removing.swap_remove(i);
            }
            drop(removing);
            drop(open);
            self.closes.notify_all();
        }
    }
}

/// `mode` after a write or truncate by someone who may not keep setuid
/// and setgid (Linux's `should_remove_suid` and, since 6.2,
/// `setattr_should_drop_sgid`): setuid goes; setgid goes with group
/// execute, or when the writer is not in the file's group (`in_group`);
/// a member keeps a setgid without group execute (it marks mandatory
/// locking).
pub(crate) fn without_privileges(mode: u32, in_group: bool) -> u32 {
    let mut m = mode & !0o4000;
    if m & 0o010 != 0 || !in_group {
        m &= !0o2000;
    }
    m
}
