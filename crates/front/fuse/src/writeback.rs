//! What the kernel's writeback cache (`weft mount --writeback-cache`)
//! asks of the mount beyond its usual requests: the kernel gathers small
//! writes in its page cache, places appends itself, reads a page in
//! before a partial write through the writer's own handle, keeps each
//! file's times, which it sends as explicit times at fsync and close, and
//! keeps each file's size, taking none from the mount but what an open
//! pushes.
//! (Failures of pages written back are per file: `write_behind.rs`.)

use crate::errno;
use crate::fs::WeftFs;
use crate::handle::Handle;
use fuser::{Errno, FileHandle, FopenFlags, INodeNo, Request};
use weft_client::{Client, Error};

impl WeftFs {
    /// Open flags the mount honours: direct I/O passes through. Appends
    /// bypass the page cache too: through it the kernel may split one
    /// write(2) at a page boundary into two requests, and another
    /// process's append could land between the halves. Not under the
    /// writeback cache, where the kernel places appends itself (and
    /// moves a file's time only for writes through its cache).
    pub(crate) fn fopen_flags(&self, flags: i32) -> FopenFlags {
        let direct = if self.opts.writeback_cache { libc::O_DIRECT } else { libc::O_DIRECT | libc::O_APPEND };
        if flags & direct != 0 { FopenFlags::FOPEN_DIRECT_IO } else { FopenFlags::empty() }
    }

    /// The open flags a handle keeps. Under the writeback cache the
    /// kernel places appends at its own end of file, writes pages back
    /// through any handle of the file, and makes O_SYNC writes durable by
    /// an fsync of their own: no handle's writes are appends or written
    /// through here.
    pub(crate) fn handle_flags(&self, flags: i32) -> i32 {
        if self.opts.writeback_cache { flags & !(libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC) } else { flags }
    }

    /// Reads `buf.len()` bytes at `offset` of `h`'s file. A handle opened
    /// write-only by a user who may not read the file has no read right;
    /// under the writeback cache the kernel still reads pages in through
    /// it (before a partial write), and gets them through the mount's own
    /// read handle (`Handle::page_reader`): the kernel keeps such a page
    /// for the write and never hands it to that handle.
    pub(crate) fn read_handle(&self, h: &Handle, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        if let Some(r) = h.page_reader.get() {
            return r.read_at(offset, buf).map_err(|e| errno::of(&e));
        }
        match h.file.read_at(offset, buf) {
            Err(Error::Permission(_)) if self.opts.writeback_cache && h.write_only => {
                let ino = h.file.id();
                let reader = self.client.open(&self.path_of(INodeNo(ino.0))?, false).map_err(|e| errno::of(&e))?;
                if reader.id() != ino {
                    // The name names another file now (another mount renamed).
                    return Err(Errno::ESTALE);
                }
                // Another read may have set one meanwhile: either serves.
                let _ = h.page_reader.set(reader);
                let r = h.page_reader.get().ok_or(Errno::EIO)?;
                r.read_at(offset, buf).map_err(|e| errno::of(&e))
            }
            r => r.map_err(|e| errno::of(&e)),
        }
    }

    /// Under the writeback cache the kernel keeps each file's size and
    /// takes none from the mount's answers, so a file another node grew
    /// since this kernel cached it would read short here, and a partial
    /// write past its old end would write zeros over the other node's
    /// bytes. At each open (but one that truncates) the size the data
    /// servers have now is pushed to the kernel: the file's last byte,
    /// stored at its place, grows the kernel's size to the servers' and
    /// never shrinks it (a store of no bytes changes no size). Close to
    /// open so holds for files other nodes grow; one another node shrank
    /// keeps its larger size here. Not when the file's mtime is the one it
    /// had when the kernel took its size (see `Known::size_basis`: the
    /// usual open, no round trip), nor while this mount has the file open
    /// for writing (the kernel may hold pages not yet written back, and
    /// its size is the newer). In the inode's `size_turn`, so that a
    /// truncate here never falls between the size asked and the push.
    pub(crate) fn push_size(&self, ino: INodeNo, h: &Handle) {
        let Some(notifier) = self.notifier.get().filter(|_| self.opts.writeback_cache) else { return };
        // Unchanged since the kernel took its size (the usual open).
        let mtime = h.file.attr().mtime_ns;
        if crate::handle::lock(&self.known).size_basis(ino.0) == Some(mtime) {
            return;
        }
        if crate::handle::lock(&self.handles).values().any(|o| o.writer && o.file.id().0 == ino.0) {
            return;
        }
        let _turn = self.size_turn(ino.0);
        let size = match h.file.size() {
            Ok(size) => size,
            // The open stands; its reads meet the same failure.
            Err(e) => return tracing::debug!(target: "weft::fuse", ino = ino.0, error = %e, "no size to push to the kernel at an open"),
        };
        let Some(at) = size.checked_sub(1) else { return crate::handle::lock(&self.known).took_size(ino.0, mtime) };
        let mut last = [0u8; 1];
        match self.read_handle(h, at, &mut last) {
            Ok(1) => match notifier.store(ino, at, &last) {
                Ok(()) => crate::handle::lock(&self.known).took_size(ino.0, mtime),
                Err(e) => tracing::debug!(target: "weft::fuse", ino = ino.0, error = %e, "the kernel took no size at an open"),
            },
            r => tracing::debug!(target: "weft::fuse", ino = ino.0, ?r, "no last byte to push to the kernel at an open"),
        }
    }

    /// Whom a setattr through handle `fh` acts as. Under the writeback
    /// cache the kernel sends a file's times (its own, kept since the
    /// writes) at any close or fsync of the file, a reader's too, with
    /// that caller's uid and the handle it writes back through, and from
    /// its flusher as root: a change of times alone through a write
    /// handle acts as the user who opened that handle, whose writes the
    /// times are (else a reader's close failed with EACCES). So does any
    /// change through a write handle by root where root is `nobody`
    /// (root_squash); root otherwise stays root.
    pub(crate) fn setattr_caller(&self, req: &Request, fh: Option<FileHandle>, times_only: bool) -> Client {
        let root = req.uid() == 0;
        let squashed = root && self.client.cluster().root_squash;
        if self.opts.writeback_cache && ((times_only && !root) || squashed)
            && let Some(Ok(h)) = fh.map(|fh| self.handle(fh))
            && h.writer
        {
            return h.opener.clone();
        }
        self.caller(req)
    }

    /// The time a setattr sets, when the service refused the explicit
    /// `mtime` asked. Under the writeback cache the kernel sends a file's
    /// times as explicit ones, also for a writer who is not the owner
    /// (whose write, fsync and close move the time) and for `touch`;
    /// the kernel (`default_permissions`) has already refused explicit
    /// times to all but the owner, so a refused one is a writer's, and
    /// is the service's "now". `None`: the refusal stands.
    pub(crate) fn writer_time(&self, refused: &Error) -> Option<i64> {
        (self.opts.writeback_cache && matches!(refused, Error::Permission(_))).then_some(weft_client::TIME_NOW)
    }
}
