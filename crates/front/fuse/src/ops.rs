//! The kernel's requests (`fuser::Filesystem`), each mapped onto the
//! client; the state they share is in `fs.rs`.

use crate::attrs::fuse_attr;
use crate::errno;
use crate::fs::WeftFs;
use crate::handle::{lock, Handle};
use crate::setattr::Wanted;
use fuser::{
    Errno, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use std::time::SystemTime;
use weft_client::{AttrChange, CreateOptions, FileKind};

/// How long rmdir waits for the releases of files closed in the directory
/// (the kernel sends them right after close(2) returns).
const RELEASE_BUDGET: Duration = Duration::from_secs(2);

impl Filesystem for WeftFs {
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.child(parent, name).and_then(|p| {
            // A name never asked for in a directory made here moments ago.
            if name.to_str().is_some_and(|n| lock(&self.fresh).surely_absent(parent.0, n, std::time::Instant::now())) {
                return Err(Errno::ENOENT);
            }
            let (mark, asked) = (self.dirs.mark(), std::time::Instant::now());
            let a = self.stat(&self.caller(req), &p)?;
            self.counted(a.ino.0, &p);
            // A directory's, kept as a getattr's would be (`rm -rf` looks
            // each directory up, then removes what it holds).
            self.dirs.learned(&a, mark, asked);
            Ok(a)
        });
        match r {
            Ok(a) => reply.entry(&self.opts.entry_timeout, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// The kernel dropped `nlookup` references to `ino` (batches come
    /// here one by one): once it holds none, the mount forgets the inode.
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        lock(&self.known).forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        // A directory asked for moments ago, with this mount's creates in
        // it since (`dir_attrs`): trusted for what is left of the timeout.
        let ttl = self.opts.attr_timeout;
        if let Some((a, left)) = self.dirs.fresh(ino.0, ttl) {
            return reply.attr(&left, &a);
        }
        // A file made here and open, with its size known here (`held_attrs`).
        if let Some((a, left)) = self.held.known(ino.0, ttl)
            && let Some(size) = self.sizes.get(ino.0)
        {
            return reply.attr(&left, &self.kernel_attr(&a, size));
        }
        let (mark, asked) = (self.dirs.mark(), std::time::Instant::now());
        // Fresh attributes by path; an open file whose name is gone keeps
        // the attributes it was opened with (and its current size).
        let r = match (self.stat_ino(&self.caller(req), ino), fh.map(|fh| self.handle(fh))) {
            (Ok(a), _) => Ok(a),
            (Err(_), Some(Ok(h))) => {
                self.writes.wait(ino.0);
                h.file.size().map(|size| self.kernel_attr(h.file.attr(), size)).map_err(|e| errno::of(&e))
            }
            (Err(e), _) => Err(e),
        };
        if let Ok(a) = &r {
            self.dirs.learned(a, mark, asked);
        }
        match r {
            Ok(a) => reply.attr(&self.opts.attr_timeout, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A setattr that changes nothing is the kernel asking for setuid
        // and setgid to go (chown(f, -1, -1), or a write or truncate by
        // someone without CAP_FSETID), which it leaves to the file system.
        let drop_privileges = mode.is_none() && uid.is_none() && gid.is_none() && size.is_none() && mtime.is_none() && _atime.is_none();
        let wanted = Wanted { mode, uid, gid, size, mtime, fh, by_root: req.uid() == 0, drop_privileges };
        let times_only = mtime.is_some() && mode.is_none() && uid.is_none() && gid.is_none() && size.is_none();
        let mut c = self.caller(req);
        let before = self.removals_mark();
        let mut r = self.set_attrs(&c, ino, wanted);
        if matches!(r, Err(Errno::EACCES | Errno::EPERM))
            && let Some(writer) = self.times_writer(fh, times_only)
        {
            c = writer;
            r = self.set_attrs(&c, ino, wanted);
        }
        self.dirs.changed(ino.0);
        // The link count the change answered with may count a set-aside
        // name removed meanwhile: asked again (see `attrs_settled`).
        let r = match r {
            Ok(a) if self.removed_since(before) => Ok(self.stat_ino(&c, ino).unwrap_or(a)),
            r => r,
        };
        match r {
            Ok(a) => reply.attr(&self.opts.attr_timeout, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let r = self.child(parent, name).and_then(|p| {
            self.naming(parent, name);
            let (mark, asked) = (self.dirs.mark(), std::time::Instant::now());
            let r = self.caller(req).mkdir(&p, mode & !umask & 0o7777);
            self.made_in(parent, r.as_ref().ok(), mark);
            let a = r.map_err(|e| errno::of(&e))?;
            lock(&self.fresh).made(a.id.0, std::time::Instant::now());
            self.counted(a.id.0, &p);
            let a = fuse_attr(&a, 0);
            self.dirs.learned(&a, self.dirs.mark(), asked);
            Ok(a)
        });
        match r {
            Ok(a) => reply.entry(&self.opts.entry_timeout, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mark = self.dirs.mark();
        let r = self.child(parent, name).and_then(|p| {
            self.send_held_at(&p);
            self.remove_file(&self.caller(req), &p)
        });
        // rm -rf: the next unlink's permission check asks for the
        // directory's attributes, known here from this one's answer.
        self.entries_changed_in(parent, r.ok().flatten().map(|at| (at, 0)), mark);
        match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let c = self.caller(req);
        let r = self.child(parent, name).and_then(|p| {
            let mut r = c.rmdir(&p);
            // Not empty only for files closed but not yet released here
            // (`rm -rf` right after writing): wait for their releases.
            if matches!(r, Err(weft_client::Error::NotEmpty(_))) && self.wait_hidden_closed(&p, RELEASE_BUDGET) {
                r = c.rmdir(&p);
            }
            r.map(|()| self.forget_path(&p)).map_err(|e| errno::of(&e))
        });
        // The directory itself and its parent's link count.
        self.dirs.changed_all();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(&self, req: &Request, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags, reply: ReplyEmpty) {
        let c = self.caller(req);
        let r = (|| -> Result<(), Errno> {
            let (from, to) = (self.child(parent, name)?, self.child(newparent, newname)?);
            if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                return Err(Errno::EINVAL);
            }
            self.send_held_at(&from);
            self.send_held_at(&to);
            self.naming(newparent, newname);
            let target = c.stat(&to).ok();
            if flags.contains(RenameFlags::RENAME_NOREPLACE) && target.is_some() {
                return Err(Errno::EEXIST);
            }
            // A file replaced while open here lives on for its handles.
            let hidden = match &target {
                Some((a, _)) if a.kind != FileKind::Dir && lock(&self.open_inodes).get(&a.id.0).is_some_and(|o| o.handles > 0) => {
                    // Two names of one file: rename(2) does nothing, and the
                    // target must not be set aside as if replaced (the
                    // kernel checks this itself when it knows both names).
                    if c.stat(&from).is_ok_and(|(s, _)| s.id == a.id) {
                        return Ok(());
                    }
                    self.remember(a.id.0, &to);
                    self.remove_file(&c, &to)?;
                    Some(a.id.0)
                }
                _ => None,
            };
            if let Err(e) = c.rename(&from, &to) {
                // The target was set aside for nothing: put it back.
                if let Some(ino) = hidden {
                    self.unhide(ino, &to);
                }
                return Err(errno::of(&e));
            }
            // What `to` named before is gone; the renamed entry and
            // everything below it have new paths.
            self.forget_path(&to);
            lock(&self.known).renamed(&from, &to);
            self.hidden_moved(&from, &to);
            self.rename_handles(&from, &to);
            Ok(())
        })();
        // A directory moved changes its parents' link counts and its own
        // time: every directory is asked again.
        self.dirs.changed_all();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        // fcntl and flock locks come to the mount (and so to the lock
        // service) instead of staying in this kernel. A flock arrives as a
        // whole-file lock whose owner is the open file, released when its
        // last descriptor closes (release carries that owner).
        if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_POSIX_LOCKS | fuser::InitFlags::FUSE_FLOCK_LOCKS) {
            tracing::warn!(target: "weft::fuse", ?missing, "the kernel keeps some locks local: it lacks lock support for FUSE");
        }
        // Setuid and setgid are dropped here on write, truncate and chown
        // (by the metadata service), so the kernel does not stat the file
        // before each chown to drop them itself (a round trip per file
        // `tar` extracts as root).
        if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV) {
            tracing::info!(target: "weft::fuse", ?missing, "the kernel drops setuid and setgid itself (a stat before each chown)");
        }
        // Large requests: 1 MiB writes (the kernel's page limit allows no
        // more) and as much read-ahead as the kernel offers, so a stream
        // costs few round trips.
        let _ = config.set_max_write(1 << 20);
        // Listings with attributes when the kernel sees lookups follow a
        // readdir (`ls -l`, `find`, `du`).
        if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS | fuser::InitFlags::FUSE_READDIRPLUS_AUTO) {
            tracing::info!(target: "weft::fuse", ?missing, "the kernel lists directories without attributes");
        }
        // Append handles bypass the page cache (see `fopen_flags`); they
        // may still be mapped where the kernel allows it.
        if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP) {
            tracing::info!(target: "weft::fuse", ?missing, "files opened for appending cannot be mapped shared");
        }
        // Asked for (`--writeback-cache`): the kernel gathers small writes
        // in its page cache and sends them as pages.
        if self.opts.writeback_cache && config.add_capabilities(fuser::InitFlags::FUSE_WRITEBACK_CACHE).is_err() {
            tracing::warn!(target: "weft::fuse", "the kernel has no writeback cache for FUSE: writes go through as they come");
        }
        if let Err(most) = config.set_max_readahead(4 << 20) {
            let _ = config.set_max_readahead(most);
        }
        Ok(())
    }

    fn getlk(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, start: u64, end: u64, typ: i32, _pid: u32, reply: fuser::ReplyLock) {
        self.get_lock(fh, lock_owner, (start, end), typ, reply);
    }

    fn setlk(&self, _req: &Request, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, start: u64, end: u64, typ: i32, pid: u32, sleep: bool, reply: ReplyEmpty) {
        self.set_lock(ino, fh, lock_owner, (start, end), typ, pid, sleep, reply);
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &std::path::Path, reply: ReplyEntry) {
        let r = self.child(parent, link_name).and_then(|p| {
            let target = target.to_str().ok_or(Errno::EINVAL)?;
            self.naming(parent, link_name);
            // Linux's limit: PATH_MAX with the NUL.
            if target.len() >= weft_client::limits::MAX_LINK_TARGET_LEN {
                return Err(Errno::ENAMETOOLONG);
            }
            let mark = self.dirs.mark();
            let r = self.caller(req).symlink(target, &p);
            self.made_in(parent, r.as_ref().ok(), mark);
            let a = r.map_err(|e| errno::of(&e))?;
            self.counted(a.id.0, &p);
            Ok(fuse_attr(&a, target.len() as u64))
        });
        match r {
            Ok(a) => reply.entry(&self.opts.entry_timeout, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.path_of(ino).and_then(|p| self.caller(req).readlink(&p).map_err(|e| errno::of(&e))) {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.reserve(ino.0);
        let r = (|| -> Result<FileHandle, Errno> {
            let path = self.path_of(ino)?;
            // The open's checks read the file's mode: with this node's.
            // Another open ends the holding.
            self.held.stop(ino.0);
            self.held.send(ino.0).map_err(|e| errno::of(&e))?;
            let write = flags.0 & libc::O_ACCMODE != libc::O_RDONLY;
            // As the user: its capability carries that user's rights.
            let opener = self.caller(req);
            let file = opener.open(&path, write).map_err(|e| errno::of(&e))?;
            if file.attr().id.0 != ino.0 {
                // The name now names another file (another mount renamed).
                return Err(Errno::ESTALE);
            }
            let truncated = write && flags.0 & libc::O_TRUNC != 0;
            if truncated {
                // After the writes queued before it (another handle's).
                self.writes.wait(ino.0);
                let r = file.truncate(0);
                // Other handles' known size is not it any more.
                self.sizes.unknown(ino.0);
                r.map_err(|e| errno::of(&e))?;
                // Seen at once, as the truncate's (not at the close).
                self.change(&opener, ino, AttrChange::Mtime(weft_client::TIME_NOW)).map_err(|e| errno::of(&e))?;
            }
            let h = Handle::new(file, self.handle_flags(flags.0), opener);
            h.wrote.store(truncated, Ordering::Relaxed);
            if write {
                self.sizes.opened(ino.0, None);
            }
            Ok(self.keep_reserved(h))
        })();
        if r.is_err() {
            self.closed(ino.0);
        }
        match r {
            Ok(fh) => reply.opened(fh, self.fopen_flags(flags.0)),
            Err(e) => reply.error(e),
        }
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        let r = (|| -> Result<(FileAttr, FileHandle), Errno> {
            let path = self.child(parent, name)?;
            self.naming(parent, name);
            let opts = CreateOptions { mode: mode & !umask & 0o7777, exclusive: flags & libc::O_EXCL != 0, ..Default::default() };
            let opener = self.caller(req);
            let before = self.removals_mark();
            let mark = self.dirs.mark();
            let file = opener.create(&path, opts);
            // Made now by an exclusive create; else made or opened, not
            // known which.
            self.made_in(parent, file.as_ref().ok().filter(|_| flags & libc::O_EXCL != 0).map(|f| f.attr()), mark);
            let file = file.map_err(|e| errno::of(&e))?;
            if flags & libc::O_EXCL == 0 {
                // One held here (made between the lookup and this create)
                // is held no more: this is another open of it.
                self.held.stop(file.attr().id.0);
            }
            if flags & libc::O_TRUNC != 0 {
                let r = file.truncate(0);
                self.sizes.unknown(file.attr().id.0);
                r.map_err(|e| errno::of(&e))?;
            }
            // A file made here by O_EXCL, or just truncated, is empty: no
            // need to ask every data server.
            let size = if flags & (libc::O_EXCL | libc::O_TRUNC) != 0 { 0 } else { file.size().map_err(|e| errno::of(&e))? };
            // An existing file opened may have a name set aside here (and
            // being removed: asked again, as setattr does).
            let mut attr = self.kernel_attr(file.attr(), size);
            if self.removed_since(before)
                && let Ok(a) = self.stat_ino(&opener, INodeNo(file.attr().id.0))
            {
                attr = a;
            }
            self.counted(attr.ino.0, &path);
            if flags & libc::O_ACCMODE != libc::O_RDONLY {
                // A file this create made is empty (one it opened: asked later).
                self.sizes.opened(attr.ino.0, (flags & libc::O_EXCL != 0).then_some(0));
                if flags & libc::O_EXCL != 0 {
                    // Its attribute changes may wait for its close.
                    self.held.made(file.attr());
                }
            }
            Ok((attr, self.keep(Handle::new(file, self.handle_flags(flags), opener))))
        })();
        match r {
            Ok((a, fh)) => reply.created(&self.opts.entry_timeout, &a, Generation(0), fh, self.fopen_flags(flags)),
            Err(e) => reply.error(e),
        }
    }

    fn read(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyData) {
        let r = self.handle(fh).and_then(|h| {
            self.writes.wait(h.file.attr().id.0);
            let mut buf = vec![0u8; size as usize];
            let n = self.read_handle(&h, offset, &mut buf)?;
            buf.truncate(n);
            Ok(buf)
        });
        match r {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.handle(fh).and_then(|h| {
            Self::within_max_size(offset, data.len() as u64)?;
            // This mount drops setuid and setgid (`FUSE_HANDLE_KILLPRIV`:
            // the kernel leaves it to the file system) when the writer may
            // not keep them: anyone but root, as Linux's CAP_FSETID rule.
            if req.uid() != 0 || write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                self.drop_privileges(&self.caller(req), &h);
            }
            h.wrote.store(true, Ordering::Relaxed);
            let ino = h.file.attr().id.0;
            if h.append || h.sync {
                // In order after what is queued, and answered when done.
                self.writes.settle(&h)?;
                if h.append {
                    // Its offset is the end found under the append lock:
                    // unknown here before it (a size asked meanwhile is
                    // dropped) and after it (one asked during it too).
                    self.sizes.unknown(ino);
                    let r = self.append(&h, data);
                    self.sizes.unknown(ino);
                    return r;
                }
                let n = h.file.write_at(offset, data).map_err(|e| errno::of(&e))?;
                self.sizes.wrote(ino, offset + n as u64);
                return Ok(n);
            }
            self.writes.write(h.clone(), ino, offset, data.to_vec())
        });
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, reply: ReplyEmpty) {
        // close(2) waits for this (release comes later): the file's queued
        // writes are done, and their failure reported, before it returns,
        // and so is the mtime (close-to-open). The mtime moves after the
        // bytes landed, never before: a node that sees the new mtime
        // (make, rsync's quick check) must see the new bytes too.
        let h = self.handle(fh);
        let written = match &h {
            Ok(h) => self.writes.settle(h),
            Err(_) => {
                self.writes.wait(ino.0);
                Ok(())
            }
        };
        // Any close of the file by a process drops its record locks on it
        // (after the writes: the next holder must read them).
        self.locks.release_owner(ino.0, lock_owner.0);
        // Attribute changes held for the close go now, before the mtime
        // of writes since them; a failed send of them (now or earlier, by
        // another request) is this close's error.
        self.held.stop(ino.0);
        let sent = self.held.send(ino.0).map_err(|e| errno::of(&e));
        let sent = if self.held.failed(ino.0) { sent.and(Err(Errno::EIO)) } else { sent };
        if let Ok(h) = &h {
            self.touch_if_written(h);
        }
        match written.and(sent) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn release(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _flags: OpenFlags, lock_owner: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        self.writes.wait(ino.0);
        if let Some(o) = lock_owner {
            self.locks.release_owner(ino.0, o.0);
        }
        let h = lock(&self.handles).remove(&fh.0);
        if let Some(h) = h {
            if let Err(e) = h.take_error() {
                tracing::warn!(target: "weft::fuse", ino = ino.0, ?e, "a queued write failed and its handle was closed without a flush");
            }
            let id = h.file.attr().id.0;
            // Held changes of a file closed without a flush (none came).
            self.held.stop(id);
            if let Err(e) = self.held.send(id) {
                tracing::warn!(target: "weft::fuse", ino = id, error = %e, "attribute changes held for a file's close failed");
            }
            self.touch_if_written(&h);
            let writer = h.writer;
            // The write open ends at the metadata service, with the size if
            // it wrote (stat then answers without the data servers). A
            // handle another request still borrows (a setattr asking the
            // size through it) is waited for a moment; one still held then
            // is just dropped: its file's stats keep asking the data servers.
            let mut h = h;
            let mut tries = 0;
            let owned = loop {
                match Arc::try_unwrap(h) {
                    Ok(owned) => break Some(owned),
                    Err(shared) if tries < 100 => {
                        h = shared;
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(_) => break None,
                }
            };
            match owned {
                Some(h) => {
                    if let Err(e) = h.file.close() {
                        tracing::warn!(target: "weft::fuse", ino = id, error = %e, "closing a write handle at the metadata service failed");
                    }
                }
                None => tracing::debug!(target: "weft::fuse", ino = id, "handle released while in use; not reported closed"),
            }
            if writer {
                self.sizes.closed(id);
            }
            self.held.forget(id);
            self.closed(id);
        }
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self.handle(fh).and_then(|h| {
            self.writes.settle(&h)?;
            let ino = h.file.attr().id.0;
            let sent = self.held.send(ino).map_err(|e| errno::of(&e));
            if self.held.failed(ino) {
                sent.and(Err(Errno::EIO))?;
            }
            h.file.fsync().map_err(|e| errno::of(&e))
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// A directory's entries durable (its names: metadata only).
    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self.client.sync_meta() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno::of(&e)),
        }
    }

    /// Real totals: the data servers' file systems (space) and the
    /// metadata service's count of files.
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: fuser::ReplyStatfs) {
        const BLOCK: u64 = 4096;
        let (mut total, mut free, mut files) = (0u64, 0u64, 0u64);
        // A server that does not answer is left out: df shows what is known.
        for s in self.client.status() {
            let Ok(st) = s.stats else { continue };
            if st.services & 2 != 0 {
                total += st.disk_total;
                free += st.disk_free;
            }
            if st.services & 1 != 0 {
                files = st.objects;
            }
        }
        reply.statfs(total / BLOCK, free / BLOCK, free / BLOCK, files, u64::MAX / 2, BLOCK as u32, 255, BLOCK as u32);
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.list(&self.caller(req), ino) {
            Ok(all) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                lock(&self.listings).insert(fh, Arc::new(all));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let all = match self.listing(&self.caller(req), ino, fh, None) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        for (i, e) in all.entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(e.ino), i as u64 + 1, e.kind, &e.name) {
                break;
            }
        }
        reply.ok();
    }

    /// Entries with their attributes (the kernel asks for this instead of
    /// readdir when a listing is followed by lookups, as `ls -l` and `find`
    /// do): one metadata request per page instead of a lookup and a stat
    /// per entry. The kernel takes every attribute given here as current
    /// (an open file's cached size included), so they must be: a pass
    /// starts from a listing at most `FRESH` old, and an entry whose size
    /// the listing does not know (a writer has it open, a symbolic link),
    /// or any entry once the listing is older, is stat'ed on its own.
    fn readdirplus(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: fuser::ReplyDirectoryPlus) {
        const FRESH: Duration = Duration::from_millis(100);
        let c = self.caller(req);
        let all = match self.listing(&c, ino, fh, (offset == 0).then_some(FRESH)) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        let fresh = all.taken.elapsed() <= FRESH;
        for (i, e) in all.entries.iter().enumerate().skip(offset as usize) {
            let attr = match (&e.path, e.attr) {
                (Some(_), Some(a)) if e.exact && fresh => a,
                (Some(path), _) => match self.stat(&c, path) {
                    Ok(a) => a,
                    // Gone since the listing: left out of this page.
                    Err(_) => continue,
                },
                // "." and "..": the kernel makes no entry for them.
                (None, _) => crate::attrs::fuse_attr(&placeholder(e.ino), 0),
            };
            if reply.add(INodeNo(e.ino), i as u64 + 1, &e.name, &self.opts.entry_timeout, &attr, Generation(0)) {
                break;
            }
            // Every entry given but "." and ".." is a kernel reference, to
            // the inode given (a fresh stat may have found another there).
            if let Some(path) = &e.path {
                self.counted(attr.ino.0, path);
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        lock(&self.listings).remove(&fh.0);
        reply.ok();
    }

    // Not supported, answered without the library's warnings: extended
    // attributes (ENOSYS: the kernel then stops asking and tells programs
    // EOPNOTSUPP).
    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn setxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _value: &[u8], _flags: i32, _position: u32, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    /// A second name for a file (not a directory): kept by the metadata
    /// service, the file's link count one more.
    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let c = self.caller(req);
        let r = (|| -> Result<FileAttr, Errno> {
            let (from, to) = (self.path_of(ino)?, self.child(newparent, newname)?);
            let e = |e: weft_client::Error| if matches!(e, weft_client::Error::Permission(_)) { Errno::EPERM } else { errno::of(&e) };
            self.send_held_at(&from);
            self.naming(newparent, newname);
            let before = self.removals_mark();
            let a = c.link(&from, &to);
            self.dirs.changed(newparent.0);
            let a = a.map_err(e)?;
            if a.id.0 != ino.0 {
                // `from` named another file by now: undo, and say so.
                let _ = c.unlink(&to);
                return Err(Errno::ESTALE);
            }
            let size = if a.kind == FileKind::File { self.size_now(&c, ino)? } else { self.stat_ino(&c, ino)?.size };
            self.counted(ino.0, &to);
            let k = self.kernel_attr(&a, size);
            // As setattr: a set-aside name removed meanwhile.
            Ok(if self.removed_since(before) { self.stat_ino(&c, ino).unwrap_or(k) } else { k })
        })();
        match r {
            Ok(a) => reply.entry(&self.opts.entry_timeout, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// FIFOs and sockets (names and attributes, the kernel makes the pipe
    /// or socket), and regular files; devices are refused (EPERM).
    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, _rdev: u32, reply: ReplyEntry) {
        let c = self.caller(req);
        let r = self.child(parent, name).and_then(|p| {
            self.naming(parent, name);
            let perm = mode & !umask & 0o7777;
            let a = match mode & libc::S_IFMT {
                libc::S_IFIFO => c.mknod(&p, perm, FileKind::Fifo),
                libc::S_IFSOCK => c.mknod(&p, perm, FileKind::Socket),
                libc::S_IFREG | 0 => c.create(&p, CreateOptions { mode: perm, exclusive: true, ..Default::default() }).and_then(|f| {
                    let a = f.attr().clone();
                    f.close().map(|()| a)
                }),
                _ => return Err(Errno::EPERM),
            };
            self.dirs.changed(parent.0);
            let a = a.map_err(|e| errno::of(&e))?;
            self.counted(a.id.0, &p);
            Ok(fuse_attr(&a, 0))
        });
        match r {
            Ok(a) => reply.entry(&self.opts.entry_timeout, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }
}

/// Attributes for "." and ".." in a readdirplus page, which the kernel
/// does not use.
fn placeholder(ino: u64) -> weft_client::FileAttr {
    weft_client::FileAttr { id: weft_client::FileId(ino), kind: weft_client::FileKind::Dir, mode: 0o755, uid: 0, gid: 0, mtime_ns: 0, ctime_ns: 0, nlink: 2, layout: None }
}
