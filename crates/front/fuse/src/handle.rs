//! An open file of the mount, and the one mutex helper every file uses.

use fuser::Errno;
use std::sync::{Mutex, MutexGuard, PoisonError};
use weft_client::File;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The mount's open handles, by file handle number.
pub(crate) type Handles = std::sync::Arc<Mutex<std::collections::HashMap<u64, std::sync::Arc<Handle>>>>;

/// An open file of the mount.
pub(crate) struct Handle {
    pub(crate) file: File,
    pub(crate) append: bool,
    /// O_SYNC / O_DSYNC: writes are answered once the servers have them
    /// (under the writeback cache, direct I/O handles only: `writeback.rs`).
    pub(crate) sync: bool,
    /// Opened for writing (counted in the mount's local sizes).
    pub(crate) writer: bool,
    /// Opened for writing only (O_WRONLY).
    pub(crate) write_only: bool,
    /// Written through: its last close sets the file's mtime (data
    /// servers do not tell the metadata service of writes).
    pub(crate) wrote: std::sync::atomic::AtomicBool,
    /// A write through it cleared the file's setuid and setgid bits.
    pub(crate) privileges_dropped: std::sync::atomic::AtomicBool,
    /// The first failure of a queued write through this handle, not yet
    /// reported.
    failed: Mutex<Option<Errno>>,
    /// The user who opened it: its close sets the mtime as that user (the
    /// kernel's release carries no identity, and under root_squash the
    /// mount's own is `nobody`).
    pub(crate) opener: weft_client::Client,
    /// Under the writeback cache, the kernel reads a page in before a
    /// partial write through the writer's own handle, which may lack the
    /// read right (a file its writer may not read): the mount's own read
    /// handle of the file, opened at the first such read. The kernel never
    /// gives that page to the writer (its handle cannot read).
    pub(crate) page_reader: std::sync::OnceLock<File>,
}

impl Handle {
    pub(crate) fn new(file: File, flags: i32, opener: weft_client::Client) -> Self {
        let sync = flags & (libc::O_SYNC | libc::O_DSYNC) != 0;
        let writer = flags & libc::O_ACCMODE != libc::O_RDONLY;
        Handle { file, append: flags & libc::O_APPEND != 0, sync, writer, write_only: flags & libc::O_ACCMODE == libc::O_WRONLY, wrote: std::sync::atomic::AtomicBool::new(false), privileges_dropped: std::sync::atomic::AtomicBool::new(false), failed: Mutex::new(None), opener, page_reader: std::sync::OnceLock::new() }
    }

    /// Records a queued write's failure for this handle's next fsync or
    /// close (and write, but under the writeback cache: `write_behind.rs`).
    pub(crate) fn fail(&self, e: Errno) {
        lock(&self.failed).get_or_insert(e);
    }

    pub(crate) fn take_error(&self) -> Result<(), Errno> {
        lock(&self.failed).take().map_or(Ok(()), Err)
    }
}
