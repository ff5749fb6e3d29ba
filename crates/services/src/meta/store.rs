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
    /// holds it shared for its whole transaction. `None` while a reopen
    /// has failed: requests then fail (never answered from an empty
    /// stand-in), and each tries the reopen again.
    db: RwLock<Option<Database>>,
    reserve_missing: AtomicBool,
}

/// The database, held for one operation.
pub struct DbGuard<'a>(RwLockReadGuard<'a, Option<Database>>);

impl std::ops::Deref for DbGuard<'_> {
    type Target = Database;
    fn deref(&self) -> &Database {
        self.0.as_ref().expect("a DbGuard holds an open database")
    }
}

/// The database could not be reopened after a storage error.
#[derive(Debug)]
pub struct Unavailable(pub String);

impl Store {
    /// Opens (or creates) `dir/meta.redb` and its reserve.
    pub fn open(dir: &Path) -> Result<Self, redb::DatabaseError> {
        let db_path = dir.join("meta.redb");
        let db = Database::create(&db_path)?;
        let s = Store { db_path, reserve_path: dir.join("meta.reserve"), db: RwLock::new(Some(db)), reserve_missing: AtomicBool::new(true) };
        s.restore_reserve();
        Ok(s)
    }

    /// The database, held for one operation; after a failed reopen, one
    /// more try to open it, so service resumes once the cause is gone.
    /// Whether the database is open and nobody is reopening it now (a
    /// reader would wait for that).
    pub fn at_hand(&self) -> bool {
        self.db.try_read().is_ok_and(|g| g.is_some())
    }

    pub fn db(&self) -> Result<DbGuard<'_>, Unavailable> {
        let guard = self.db.read().unwrap_or_else(PoisonError::into_inner);
        if guard.is_some() {
            return Ok(DbGuard(guard));
        }
        drop(guard);
        {
            let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
            if db.is_none() {
                match Database::create(&self.db_path) {
                    Ok(fresh) => {
                        *db = Some(fresh);
                        tracing::info!(target: "weft::meta", "metadata database reopened");
                    }
                    Err(e) => return Err(Unavailable(format!("the metadata database {} cannot be opened: {e}", self.db_path.display()))),
                }
            }
        }
        let guard = self.db.read().unwrap_or_else(PoisonError::into_inner);
        if guard.is_some() { Ok(DbGuard(guard)) } else { Err(Unavailable("the metadata database was closed again".into())) }
    }

    /// After a storage error: closes and reopens the database (waiting for
    /// operations in progress), first releasing the reserve if `free_space`.
    pub fn recover(&self, free_space: bool) {
        let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
        if free_space && std::fs::remove_file(&self.reserve_path).is_ok() {
            tracing::warn!(target: "weft::meta", "disk full: released the {RESERVE_BYTES}-byte reserve for a delete");
            self.reserve_missing.store(true, Ordering::Release);
        }
        // redb locks its file: the old handle closes before the new one opens.
        drop(db.take());
        match Database::create(&self.db_path) {
            Ok(fresh) => {
                *db = Some(fresh);
                tracing::info!(target: "weft::meta", "metadata database reopened after a storage error");
            }
            Err(e) => {
                // Left closed: every request fails with a clear error and
                // tries the reopen again (`db`).
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

#[cfg(test)]
mod tests {
    use super::*;
    use redb::TableDefinition;

    const T: TableDefinition<u64, u64> = TableDefinition::new("t");

    #[test]
    fn a_failed_reopen_fails_requests_instead_of_answering_from_nothing_and_heals() {
        let dir = std::env::temp_dir().join(format!("weft-store-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&dir).unwrap();
        {
            let db = store.db().unwrap();
            let tx = db.begin_write().unwrap();
            tx.open_table(T).unwrap().insert(1, 42).unwrap();
            tx.commit().unwrap();
        }
        // The database file cannot be opened for a while (here: a
        // directory stands in its place).
        let file = dir.join("meta.redb");
        let aside = dir.join("meta.redb.aside");
        std::fs::rename(&file, &aside).unwrap();
        std::fs::create_dir(&file).unwrap();
        store.recover(false);
        // Before the fix an empty in-memory database answered: key 1 "did
        // not exist", and writes went nowhere.
        let e = store.db().err().expect("no database while it cannot be opened");
        assert!(e.0.contains("cannot be opened"), "{}", e.0);
        // The cause goes; the next request opens it again, data intact.
        std::fs::remove_dir(&file).unwrap();
        std::fs::rename(&aside, &file).unwrap();
        let db = store.db().expect("reopened once possible");
        assert_eq!(db.begin_read().unwrap().open_table(T).unwrap().get(1).unwrap().unwrap().value(), 42);
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
