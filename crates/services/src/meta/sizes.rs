//! File sizes the metadata service can answer without asking the data
//! servers (issue 12's stat fast path), in memory only.
//!
//! The rule: a size is known from a writer's close (the client asks the
//! data servers after its last write and reports the result) or from a
//! create (a new file is empty), and only while no handle opened for
//! writing is still open: every write open (`Open { write: true }`,
//! `Create`) counts one writer until its `Close`. Clients write to the
//! data servers directly, so while a writer is open only they know the
//! size: `StatSize` then answers without one and the client asks the data
//! servers, as it does for a file whose writer died without closing (its
//! count never returns to zero).
//!
//! Nothing here is durable, so after a restart this service cannot know
//! the writers that opened a file before it: it vouches only for files
//! created since it started (ids from `first` on), which no earlier
//! instance ever saw. Older files' stats ask the data servers.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use weft_wire::FileId;

/// Most files tracked; past it, files with no writer are forgotten (their
/// stats ask the data servers again).
const MAX_TRACKED: usize = 1 << 20;

#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    writers: u32,
    size: Option<u64>,
}

pub struct KnownSizes {
    files: Mutex<HashMap<FileId, Entry>>,
    /// The first file id this instance of the service gave out.
    first: u64,
}

impl KnownSizes {
    /// Vouches for files with ids from `first` on.
    pub fn new(first: u64) -> Self {
        KnownSizes { files: Mutex::new(HashMap::new()), first }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<FileId, Entry>) -> T) -> T {
        let mut m = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        if m.len() >= MAX_TRACKED {
            m.retain(|_, e| e.writers > 0);
        }
        f(&mut m)
    }

    /// A new, empty file, opened for writing by its creator.
    pub fn created(&self, id: FileId) {
        self.with(|m| m.insert(id, Entry { writers: 1, size: Some(0) }));
    }

    /// A write open of an existing file.
    pub fn opened(&self, id: FileId) {
        self.with(|m| m.entry(id).or_default().writers += 1);
    }

    /// A write handle closed; `size` is the file's size after its writes.
    pub fn closed(&self, id: FileId, size: Option<u64>) {
        self.with(|m| {
            if let Some(e) = m.get_mut(&id) {
                e.writers = e.writers.saturating_sub(1);
                if size.is_some() {
                    e.size = size;
                }
            }
        });
    }

    /// The size, if known and no writer is open.
    pub fn known(&self, id: FileId) -> Option<u64> {
        if id.0 < self.first {
            return None;
        }
        self.with(|m| m.get(&id).filter(|e| e.writers == 0).and_then(|e| e.size))
    }

    /// The file is gone.
    pub fn forget(&self, id: FileId) {
        self.with(|m| m.remove(&id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_is_known_only_while_no_writer_is_open() {
        let s = KnownSizes::new(5);
        let f = FileId(7);
        assert_eq!(s.known(f), None, "never seen: ask the data servers");
        s.created(f);
        assert_eq!(s.known(f), None, "its creator may be writing");
        s.closed(f, None);
        assert_eq!(s.known(f), Some(0), "created and closed unwritten");
        s.opened(f);
        s.opened(f);
        s.closed(f, Some(100));
        assert_eq!(s.known(f), None, "one writer still open");
        s.closed(f, Some(250));
        assert_eq!(s.known(f), Some(250), "the last close's report");
        s.closed(f, Some(1));
        assert_eq!(s.known(f), Some(1), "a close with no writer open is taken as is: counts never go below zero");
        let g = FileId(8);
        s.opened(g);
        s.closed(g, None);
        assert_eq!(s.known(g), None, "opened and closed unwritten, size never learned");
        s.forget(f);
        assert_eq!(s.known(f), None);
        let older = FileId(4);
        s.opened(older);
        s.closed(older, Some(9));
        assert_eq!(s.known(older), None, "a file from before this instance may have writers it never saw");
    }
}
