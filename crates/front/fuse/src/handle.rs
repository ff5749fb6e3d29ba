//! An open file of the mount, and the one mutex helper every file uses.

use fuser::Errno;
use std::sync::{Mutex, MutexGuard, PoisonError};
use weft_client::File;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An open file of the mount.
pub(crate) struct Handle {
    pub(crate) file: File,
    pub(crate) append: bool,
    /// O_SYNC / O_DSYNC: writes are answered once the servers have them.
    pub(crate) sync: bool,
    /// Opened for writing (counted in the mount's local sizes).
    pub(crate) writer: bool,
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
}

impl Handle {
    pub(crate) fn new(file: File, flags: i32, opener: weft_client::Client) -> Self {
        let sync = flags & (libc::O_SYNC | libc::O_DSYNC) != 0;
        let writer = flags & libc::O_ACCMODE != libc::O_RDONLY;
        Handle { file, append: flags & libc::O_APPEND != 0, sync, writer, wrote: std::sync::atomic::AtomicBool::new(false), privileges_dropped: std::sync::atomic::AtomicBool::new(false), failed: Mutex::new(None), opener }
    }

    /// Records a queued write's failure for this handle's next write,
    /// fsync or close.
    pub(crate) fn fail(&self, e: Errno) {
        lock(&self.failed).get_or_insert(e);
    }

    pub(crate) fn take_error(&self) -> Result<(), Errno> {
        lock(&self.failed).take().map_or(Ok(()), Err)
    }
}
