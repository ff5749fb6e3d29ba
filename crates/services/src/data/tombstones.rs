//! Which files were deleted, so a late write cannot bring their objects
//! back. Objects are created lazily on first write, so without this a client
//! still writing to a file another client removed would recreate its
//! object, and nothing would ever remove it (issue 8). File ids are never
//! reused, so a deleted id stays deleted.
//!
//! The ids are kept in memory and appended to `deleted.log` beside the
//! objects (8 bytes each), read back at start. Only the most recent
//! [`MAX_TOMBSTONES`] are remembered: a stray write to a file deleted longer
//! ago than that would recreate an orphan, a bounded leak in exchange for
//! bounded memory.

use std::collections::{HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;
use weft_wire::FileId;

/// Deleted ids remembered: 1 Mi ids, ~40 MB of memory at most.
pub const MAX_TOMBSTONES: usize = 1 << 20;

pub struct Tombstones {
    set: HashSet<FileId>,
    order: VecDeque<FileId>,
    log: File,
    logged: usize,
}

impl Tombstones {
    pub fn open(path: &Path) -> io::Result<Self> {
        let mut bytes = Vec::new();
        if let Ok(mut f) = File::open(path) {
            f.read_to_end(&mut bytes)?;
        }
        let mut t = Tombstones { set: HashSet::new(), order: VecDeque::new(), log: OpenOptions::new().create(true).append(true).open(path)?, logged: 0 };
        // A torn last record (crash mid-append) is ignored.
        for rec in bytes.chunks_exact(8) {
            t.remember(FileId(u64::from_le_bytes(rec.try_into().expect("8 bytes"))));
        }
        t.logged = bytes.len() / 8;
        // Cut the torn tail off before appending: left in place, it would
        // shift every later record and read back as other files' ids.
        if !bytes.len().is_multiple_of(8) {
            t.log.set_len(t.logged as u64 * 8)?;
        }
        // Rewrite a log that holds far more than is remembered.
        if t.logged > 2 * MAX_TOMBSTONES {
            let tmp = path.with_extension("log.new");
            let mut f = File::create(&tmp)?;
            for id in &t.order {
                f.write_all(&id.0.to_le_bytes())?;
            }
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            t.log = OpenOptions::new().append(true).open(path)?;
            t.logged = t.order.len();
        }
        Ok(t)
    }

    fn remember(&mut self, id: FileId) {
        if self.set.insert(id) {
            self.order.push_back(id);
            if self.order.len() > MAX_TOMBSTONES
                && let Some(old) = self.order.pop_front()
            {
                self.set.remove(&old);
            }
        }
    }

    pub fn contains(&self, id: FileId) -> bool {
        self.set.contains(&id)
    }

    /// Records a deletion. The log is not synced, and a failed append (a
    /// full disk, which the delete is about to relieve) is only logged: a
    /// lost record re-opens the orphan window for that one file after a
    /// restart, while refusing the delete would keep the disk full.
    pub fn insert(&mut self, id: FileId) {
        if self.set.contains(&id) {
            return;
        }
        self.remember(id);
        match self.log.write_all(&id.0.to_le_bytes()) {
            Ok(()) => self.logged += 1,
            Err(e) => {
                // A partial record would shift every later one: cut it off.
                let _ = self.log.set_len(self.logged as u64 * 8);
                tracing::warn!(target: "weft::data", file = id.0, error = %e, "cannot record the deletion in deleted.log");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletions_are_remembered_across_reopen_and_torn_records_ignored() {
        let dir = std::env::temp_dir().join(format!("weft-tomb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("deleted.log");
        let _ = std::fs::remove_file(&p);
        let mut t = Tombstones::open(&p).unwrap();
        t.insert(FileId(5));
        t.insert(FileId(9));
        t.insert(FileId(5));
        drop(t);
        OpenOptions::new().append(true).open(&p).unwrap().write_all(&[1, 2, 3]).unwrap();
        let mut t = Tombstones::open(&p).unwrap();
        assert!(t.contains(FileId(5)) && t.contains(FileId(9)) && !t.contains(FileId(6)));
        assert_eq!(t.order.len(), 2);
        // A deletion recorded after the torn tail reads back as itself.
        t.insert(FileId(77));
        drop(t);
        let t = Tombstones::open(&p).unwrap();
        assert_eq!(t.order.iter().copied().collect::<Vec<_>>(), [FileId(5), FileId(9), FileId(77)], "records after a torn tail stay aligned");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
