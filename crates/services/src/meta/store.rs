//! The metadata database file and what keeps it usable on a full disk.
//!
//! Once a redb commit fails with an I/O error (ENOSPC, say), every later
//! transaction of that `Database` fails with "Previous I/O error occurred",
//! and only closing and reopening clears it (issue 8: a full disk wedged the
//! namespace until restart, and even `rm`, which frees space, was refused).
//! So the store
//!
//! 1. reopens the database after a storage error, so reads work again at
//!    once and writes as soon as there is space;
//! 2. keeps headroom: a preallocated reserve file beside the database. An
//!    operation that frees space (unlink, rmdir, rename over a file) that
//!    fails for lack of space releases the reserve and runs again, so the
//!    namespace can always be shrunk; the reserve is made again once a
//!    commit succeeds and the space is there.

use redb::Database;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

/// Space kept back for deletes on a full disk: 8 MiB, room for thousands
/// of copy-on-write page updates of the namespace tables.
pub const RESERVE_BYTES: u64 = 8 << 20;

pub struct Store {
    db_path: PathBuf,
    reserve_path: PathBuf,
    /// Write-locked only to swap in a reopened database; every operation
    /// holds it shared for its whole transaction.
    db: RwLock<Database>,
    reserve_missing: AtomicBool,
}

impl Store {
    /// Opens (or creates) `dir/meta.redb` and its reserve.
    pub fn open(dir: &Path) -> Result<Self, redb::DatabaseError> {
        let db_path = dir.join("meta.redb");
        let db = Database::create(&db_path)?;
        let s = Store { db_path, reserve_path: dir.join("meta.reserve"), db: RwLock::new(db), reserve_missing: AtomicBool::new(true) };
        s.restore_reserve();
        Ok(s)
    }

    /// The database, held for one operation.
    pub fn db(&self) -> RwLockReadGuard<'_, Database> {
        self.db.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// After a storage error: closes and reopens the database (waiting for
    /// operations in progress), first releasing the reserve if `free_space`.
    pub fn recover(&self, free_space: bool) {
        let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
        if free_space && std::fs::remove_file(&self.reserve_path).is_ok() {
            tracing::warn!(target: "weft::meta", "disk full: released the {RESERVE_BYTES}-byte reserve for a delete");
            self.reserve_missing.store(true, Ordering::Release);
        }
        // redb locks its file: the old handle must close before the new one
        // opens, so an empty in-memory database stands in for a moment.
        let placeholder = Database::builder().create_with_backend(redb::backends::InMemoryBackend::new());
        let Ok(placeholder) = placeholder else { return };
        drop(std::mem::replace(&mut *db, placeholder));
        match Database::create(&self.db_path) {
            Ok(fresh) => {
                *db = fresh;
                tracing::info!(target: "weft::meta", "metadata database reopened after a storage error");
            }
            Err(e) => {
                // Left on the placeholder, every request fails with a clear
                // error; the next storage error retries the reopen.
                tracing::error!(target: "weft::meta", error = %e, "cannot reopen the metadata database");
            }
        }
    }

    /// Whether the disk under the database is nearly full (less free than
    /// the reserve holds). With a metadata window, commits are then made
    /// durable at once, so that a full disk fails the change that meets it
    /// rather than a later flush of changes already answered.
    pub fn space_low(&self) -> bool {
        let dir = self.db_path.parent().unwrap_or(Path::new("."));
        nix::sys::statvfs::statvfs(dir).is_ok_and(|v| v.blocks_available().saturating_mul(v.fragment_size()) < RESERVE_BYTES)
    }

    /// Gives the reserve's space back to the disk, for a commit that must
    /// not fail: making changes already answered durable.
    pub fn release_reserve(&self) {
        if std::fs::remove_file(&self.reserve_path).is_ok() {
            tracing::warn!(target: "weft::meta", "disk nearly full: released the {RESERVE_BYTES}-byte reserve to make answered changes durable");
            self.reserve_missing.store(true, Ordering::Release);
        }
    }

    /// Makes the reserve again if it is missing and the disk has room.
    pub fn restore_reserve(&self) {
        if !self.reserve_missing.load(Ordering::Acquire) {
            return;
        }
        let made = File::create(&self.reserve_path)
            .and_then(|f| nix::fcntl::posix_fallocate(&f, 0, RESERVE_BYTES as i64).map_err(|e| std::io::Error::from_raw_os_error(e as i32)).and_then(|()| f.sync_all()));
        match made {
            Ok(()) => self.reserve_missing.store(false, Ordering::Release),
            Err(e) => {
                let _ = std::fs::remove_file(&self.reserve_path);
                tracing::debug!(target: "weft::meta", error = %e, "no room for the reserve yet");
            }
        }
    }
}
