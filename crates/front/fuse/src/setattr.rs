//! setattr: chmod, chown, truncate and utimens, each sent as a change of
//! the inode by its id (never by a path another mount may have moved).

use crate::attrs::{fuse_attr, nanos};
use crate::errno;
use crate::fs::WeftFs;
use crate::handle::lock;
use fuser::{Errno, FileAttr, FileHandle, INodeNo, TimeOrNow};
use std::sync::atomic::Ordering;
use weft_client::{AttrChange, Client, FileKind};

/// What one setattr asks to change (the kernel's optional fields; atime
/// and the BSD-only ones are not kept).
#[derive(Clone, Copy)]
pub(crate) struct Wanted {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub mtime: Option<TimeOrNow>,
    pub fh: Option<FileHandle>,
    /// The caller is root (keeps setuid and setgid on a truncate).
    pub by_root: bool,
    /// Nothing to change: the kernel asks for setuid and setgid to go.
    pub drop_privileges: bool,
}

impl WeftFs {
    /// Applies `w` to inode `ino` as caller `c`: the attributes after.
    pub(crate) fn set_attrs(&self, c: &Client, ino: INodeNo, w: Wanted) -> Result<FileAttr, Errno> {
        let id = weft_client::FileId(ino.0);
        // Each change names the inode by its id, never by a path another
        // mount may have moved meanwhile (it would change whatever the
        // path names now); a file gone is ESTALE.
        let e = |e: weft_client::Error| if matches!(e, weft_client::Error::NotFound(_)) { Errno::ESTALE } else { errno::of(&e) };
        // Held for the file's close (held_attrs.rs), or sent now, after
        // what is held.
        if let Some(a) = self.hold_attrs(c, ino, &w) {
            return Ok(a);
        }
        // This change may move what held ones would be built on.
        self.held.stop(ino.0);
        self.held.send(ino.0).map_err(e)?;
        // Changing mode or owner without the right is EPERM (chmod(2)).
        let owner_err = |err: weft_client::Error| if matches!(err, weft_client::Error::Permission(_)) { Errno::EPERM } else { e(err) };
        // The attributes the last change answered with: the reply, with
        // no stat of its own (each is a round trip, and tar makes three
        // such changes per file).
        let mut last = None;
        if let Some(m) = w.mode {
            last = Some(self.change_sized(c, ino, AttrChange::Mode(m & 0o7777)).map_err(owner_err)?);
        }
        if w.drop_privileges {
            // From the mode the file has now. One who may neither own nor
            // write it gets the attributes unchanged (chown(f, -1, -1) is
            // anyone's to call).
            match self.drop_privileges_of(c, id, None) {
                Ok(Some(a)) => last = Some((a, None)),
                Ok(None) | Err(weft_client::Error::Permission(_)) => {}
                Err(err) => return Err(e(err)),
            }
        }
        if w.uid.is_some() || w.gid.is_some() {
            let owner = AttrChange::Owner { uid: w.uid.unwrap_or(weft_client::KEEP_ID), gid: w.gid.unwrap_or(weft_client::KEEP_ID) };
            last = Some(self.change_sized(c, ino, owner).map_err(owner_err)?);
        }
        if let Some(s) = w.size {
            Self::within_max_size(s, 0)?;
            let ask = self.sizes.ask();
            // After the writes queued before it.
            self.writes.wait(ino.0);
            // The mode the file had when opened, for setuid and setgid.
            let mode = match w.fh.map(|fh| self.handle(fh)) {
                Some(Ok(h)) => {
                    if let Err(err) = h.file.truncate(s) {
                        // Perhaps done on some data servers.
                        self.sizes.unknown(ino.0);
                        return Err(e(err));
                    }
                    h.wrote.store(true, Ordering::Relaxed);
                    h.file.attr().mode
                }
                _ => {
                    // Opened by path: truncated only if it is this inode.
                    let f = c.open(&self.path_of(ino)?, true).map_err(e)?;
                    if f.id() != id {
                        // Another file now: closed again, untouched.
                        let _ = f.close();
                        return Err(Errno::ESTALE);
                    }
                    let mode = f.attr().mode;
                    if let Err(err) = f.truncate(s).and_then(|()| f.close()) {
                        self.sizes.unknown(ino.0);
                        return Err(e(err));
                    }
                    mode
                }
            };
            self.sizes.truncated(ino.0, ask, s);
            // Setuid and setgid go with a truncate by anyone but root (the
            // kernel leaves it to the file system: `FUSE_HANDLE_KILLPRIV`),
            // from the mode the file has now. The bytes are cut already: a
            // failure here is logged, not the truncate's.
            if !w.by_root {
                match self.drop_privileges_of(c, id, Some(mode)) {
                    Ok(Some(a)) => last = Some((a, None)),
                    Ok(None) => {}
                    Err(err) => tracing::warn!(target: "weft::fuse", ino = ino.0, error = %err, "could not drop the setuid/setgid bits of a file truncated"),
                }
            }
            // A truncate moves the times at once (not at the close).
            if w.mtime.is_none() {
                last = Some(self.change_sized(c, ino, AttrChange::Mtime(weft_client::TIME_NOW)).map_err(e)?);
            }
        }
        // The metadata service keeps one time, the mtime (atime is
        // reported equal to it); setting atime alone changes nothing.
        if w.mtime.is_some() && self.opts.writeback_cache {
            // The kernel's own times (its writeback cache keeps them) come
            // at fsync and close: set after the file's queued writes, so a
            // node that sees the new time sees the new bytes.
            self.writes.wait(ino.0);
        }
        match w.mtime {
            Some(TimeOrNow::SpecificTime(t)) => {
                let set = match self.change_sized(c, ino, AttrChange::Mtime(nanos(t))) {
                    Err(refused) => match self.writer_time(&refused) {
                        Some(now) => self.change_sized(c, ino, AttrChange::Mtime(now)).map_err(e),
                        None => Err(owner_err(refused)),
                    },
                    set => set.map_err(owner_err),
                };
                last = Some(set?);
                // A time set on purpose (cp -p, tar) stands: earlier
                // writes through open handles no longer touch it.
                for h in lock(&self.handles).values().filter(|h| h.file.attr().id.0 == ino.0) {
                    h.wrote.store(false, Ordering::Relaxed);
                }
            }
            Some(TimeOrNow::Now) => last = Some(self.change_sized(c, ino, AttrChange::Mtime(weft_client::TIME_NOW)).map_err(e)?),
            None => {}
        }
        match last {
            Some((a, known)) if a.kind == FileKind::File => {
                // What this mount knows (it writes the file) comes first;
                // else what the metadata service said with the change
                // (no writer anywhere); else asked.
                let size = match w.size.or_else(|| self.sizes.get(ino.0)).or(known) {
                    Some(s) => s,
                    None => self.size_now(c, ino)?,
                };
                Ok(self.kernel_attr(&a, size))
            }
            Some((a, _)) if a.kind == FileKind::Dir => Ok(fuse_attr(&a, 0)),
            _ => self.stat_ino(c, ino),
        }
    }

    /// Holds `w` for the close of inode `ino` if it is a file made here
    /// and open, and `w` changes only what its owner (or root) may: the
    /// attributes after. `None`: it must be sent now.
    fn hold_attrs(&self, c: &Client, ino: INodeNo, w: &Wanted) -> Option<FileAttr> {
        if w.size.is_some() || w.drop_privileges {
            return None;
        }
        // This mount knows its size (it made and writes the file).
        let size = self.sizes.get(ino.0)?;
        let cred = c.cred();
        // Root acts as nobody there: the service decides.
        if cred.uid == 0 && c.cluster().root_squash {
            return None;
        }
        let mut changes = Vec::with_capacity(3);
        if let Some(m) = w.mode {
            changes.push(AttrChange::Mode(m & 0o7777));
        }
        if w.uid.is_some() || w.gid.is_some() {
            changes.push(AttrChange::Owner { uid: w.uid.unwrap_or(weft_client::KEEP_ID), gid: w.gid.unwrap_or(weft_client::KEEP_ID) });
        }
        let explicit_time = match w.mtime {
            Some(TimeOrNow::SpecificTime(t)) => {
                changes.push(AttrChange::Mtime(nanos(t)));
                true
            }
            // The service's clock, at the change.
            Some(TimeOrNow::Now) => return None,
            None => false,
        };
        if changes.is_empty() {
            return None;
        }
        let a = self.held.hold(ino.0, c, cred.uid, &changes, nanos(std::time::SystemTime::now()))?;
        if explicit_time {
            // As when sent: earlier writes no longer touch the time.
            for h in lock(&self.handles).values().filter(|h| h.file.attr().id.0 == ino.0) {
                h.wrote.store(false, Ordering::Relaxed);
            }
        }
        Some(self.kernel_attr(&a, size))
    }
}
