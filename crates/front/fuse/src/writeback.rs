//! What the kernel's writeback cache (`weft mount --writeback-cache`)
//! asks of the mount beyond its usual requests: the kernel gathers small
//! writes in its page cache, places appends itself, reads a page in
//! before a partial write through the writer's own handle, and keeps each
//! file's size and times, which it sends as explicit times at fsync and
//! close.
//! (Failures of pages written back are per file: `write_behind.rs`.)

use crate::errno;
use crate::fs::WeftFs;
use crate::handle::Handle;
use fuser::{Errno, FileHandle, FopenFlags, INodeNo};
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
    /// an fsync of their own: no handle's writes are appends here, nor
    /// written through but for direct I/O (which bypasses the cache).
    pub(crate) fn handle_flags(&self, flags: i32) -> i32 {
        match self.opts.writeback_cache {
            false => flags,
            // Direct I/O bypasses the cache, and its O_SYNC with it.
            true if flags & libc::O_DIRECT != 0 => flags & !libc::O_APPEND,
            true => flags & !(libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC),
        }
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

    /// Whom a change of times alone through write handle `fh`, refused to
    /// its caller, is made as again. Under the writeback cache the kernel
    /// sends a file's times (its own, kept since the writes) at any close
    /// or fsync of the file while writes left them unsent, a reader's too,
    /// with that caller's uid (root's from its flusher, `nobody` under
    /// root_squash) and the handle it writes back through (of the latest
    /// writer to open the file): the user who opened that handle, whose
    /// writes the times are (else a reader's close failed with EACCES, and
    /// the flusher's times were lost under root_squash). `None`: the
    /// refusal stands.
    pub(crate) fn times_writer(&self, fh: Option<FileHandle>, times_only: bool) -> Option<Client> {
        let h = fh.filter(|_| times_only && self.opts.writeback_cache).map(|fh| self.handle(fh))?.ok()?;
        h.writer.then(|| h.opener.clone())
    }

    /// The time a setattr sets, when the service refused the explicit
    /// `mtime` asked. Under the writeback cache the kernel sends a file's
    /// times as explicit ones, also for a writer who is not the owner
    /// (whose write, fsync and close move the time) and for `touch`;
    /// the kernel (`default_permissions`) has already refused explicit
    /// times to all but the owner and CAP_FOWNER holders, so a refused one
    /// is a writer's (or a CAP_FOWNER holder's the service does not know
    /// as root), and is the service's "now". `None`: the refusal stands.
    pub(crate) fn writer_time(&self, refused: &Error) -> Option<i64> {
        (self.opts.writeback_cache && matches!(refused, Error::Permission(_))).then_some(weft_client::TIME_NOW)
    }
}
