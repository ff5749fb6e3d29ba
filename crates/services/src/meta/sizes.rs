//! File sizes the metadata service can answer without asking the data
//! servers (issue 12's stat fast path), in memory only.
//!
//! Clients write to the data servers directly, so the service learns a
//! size only from a client that measured it (asked every data server) at a
//! moment no write could be under way:
//!
//! * every write open (`Open { write: true }`, `Create`) counts a writer
//!   and starts a new epoch; its `Close` says whether it wrote;
//! * when a close leaves no writer and some writer wrote since the size was
//!   last known, the service answers `Measure { epoch }`: every writer has
//!   closed, so all their writes are done; the client measures and sends
//!   `SetSize { epoch, size }`, taken only if no write open came in between
//!   (the epoch is unchanged). A new file is known empty;
//! * a close that leaves no writer, of the only write open since the file
//!   last had none, may carry the size its handle knows exactly (it made
//!   the file by an exclusive create and followed every change since): it
//!   is taken at once, with no `Measure` and no `SetSize`;
//! * `StatSize` answers with the size only while no writer is open and the
//!   size is known; otherwise the client asks the data servers, as it does
//!   for a file whose writer died without closing (its count never returns
//!   to zero) or whose measuring client died (the size stays unknown).
//!
//! Nothing here is durable, so after a restart the service cannot know the
//! writers that opened a file before it: it tracks only files created since
//! it started (ids from `first` on), which no earlier instance ever saw.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use weft_wire::FileId;

/// Most files tracked. Past it, files with no writer are forgotten; if all
/// have writers (leaked by clients that died), new files are not tracked:
/// their stats ask the data servers.
const MAX_TRACKED: usize = 1 << 20;

#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    writers: u32,
    /// Bumped by every write open.
    epoch: u64,
    size: Option<u64>,
    /// Some writer wrote since `size` was last measured.
    dirty: bool,
    /// Write opens since the file last had no writer.
    busy_opens: u32,
}

/// What a writer's close asks of its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterClose {
    Nothing,
    /// Measure the size and send it with this epoch; `sole`: the closing
    /// handle was the only write open since the file last had no writer.
    Measure { epoch: u64, sole: bool },
}

pub struct KnownSizes {
    files: Mutex<HashMap<FileId, Entry>>,
    /// The first file id this instance of the service gave out.
    first: u64,
    /// This metadata shard and K: only files made here are tracked (one
    /// moved here by a rename had writers elsewhere).
    shard: u32,
    shards: u32,
    /// Files renamed to another shard: writers open then went on there.
    moved_out: Mutex<std::collections::HashSet<FileId>>,
    /// Too many files moved out to remember: nothing is tracked.
    overflowed: std::sync::atomic::AtomicBool,
}

impl KnownSizes {
    /// Tracks files with ids from `first` on, made by shard `shard` of `shards`.
    pub fn new(first: u64, shard: u32, shards: u32) -> Self {
        KnownSizes { files: Mutex::new(HashMap::new()), first, shard, shards, moved_out: Default::default(), overflowed: Default::default() }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<FileId, Entry>) -> T) -> T {
        f(&mut self.files.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The entry of a tracked file, made if there is room.
    fn entry<'a>(&self, m: &'a mut HashMap<FileId, Entry>, id: FileId, new: Entry) -> Option<&'a mut Entry> {
        if id.0 < self.first || self.overflowed.load(std::sync::atomic::Ordering::Relaxed) || weft_wire::shard::home_shard(id, self.shards) != self.shard || self.moved_out.lock().unwrap_or_else(PoisonError::into_inner).contains(&id) {
            return None;
        }
        if !m.contains_key(&id) && m.len() >= MAX_TRACKED {
            m.retain(|_, e| e.writers > 0);
            if m.len() >= MAX_TRACKED {
                return None;
            }
        }
        Some(m.entry(id).or_insert(new))
    }

    /// A write open; `created`: of a file this open made (known empty).
    pub fn opened(&self, id: FileId, created: bool) {
        let new = Entry { writers: 0, epoch: 0, size: created.then_some(0), dirty: false, busy_opens: 0 };
        self.with(|m| {
            // The create is committed before it is counted here: another
            // client may have opened the new file (and closed it) between.
            let seen = m.contains_key(&id);
            if let Some(e) = self.entry(m, id, new) {
                if e.writers == 0 {
                    e.busy_opens = 0;
                }
                e.busy_opens = e.busy_opens.saturating_add(1);
                if created && seen {
                    // Its creator is not its only writer: never sole.
                    e.busy_opens = e.busy_opens.saturating_add(1);
                }
                e.writers += 1;
                e.epoch += 1;
            }
        });
    }

    /// A write handle closed; `wrote`: it changed the file; `size`: the
    /// size the handle knows exactly, if it does. A close that leaves no
    /// writer, of the only write open since the file last had none, makes
    /// `size` the file's at once (what its client would have measured and
    /// sent after `Measure`, one round trip later).
    pub fn closed(&self, id: FileId, wrote: bool, size: Option<u64>) -> AfterClose {
        self.with(|m| {
            let Some(e) = m.get_mut(&id) else { return AfterClose::Nothing };
            e.writers = e.writers.saturating_sub(1);
            if wrote {
                e.dirty = true;
                e.size = None;
            }
            if e.writers > 0 || !(e.dirty || e.size.is_none()) {
                return AfterClose::Nothing;
            }
            let sole = e.busy_opens == 1;
            match size {
                Some(size) if sole => {
                    e.size = Some(size);
                    e.dirty = false;
                    AfterClose::Nothing
                }
                _ => AfterClose::Measure { epoch: e.epoch, sole },
            }
        })
    }

    /// A size measured after a close that left no writer, at `epoch`.
    pub fn measured(&self, id: FileId, epoch: u64, size: u64) {
        self.with(|m| {
            if let Some(e) = m.get_mut(&id)
                && e.writers == 0
                && e.epoch == epoch
            {
                e.size = Some(size);
                e.dirty = false;
            }
        });
    }

    /// The size, if known and no writer is open.
    pub fn known(&self, id: FileId) -> Option<u64> {
        self.with(|m| vouched(m.get(&id)))
    }

    /// Each file entry of a directory page gets its known size (one lock
    /// for the page).
    pub fn fill(&self, entries: &mut [weft_wire::DirEntry]) {
        self.with(|m| {
            for e in entries.iter_mut().filter(|e| e.attr.kind == weft_wire::FileKind::File) {
                e.size = vouched(m.get(&e.attr.id));
            }
        });
    }

    /// The file is gone.
    pub fn forget(&self, id: FileId) {
        self.with(|m| m.remove(&id));
    }

    /// The file moved to another shard: never vouched for here again.
    pub fn moved_out(&self, id: FileId) {
        self.forget(id);
        let mut m = self.moved_out.lock().unwrap_or_else(PoisonError::into_inner);
        if m.len() < MAX_TRACKED {
            m.insert(id);
        } else {
            // Rather than grow: vouch for nothing from now on.
            drop(m);
            self.with(HashMap::clear);
            self.overflowed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// An entry's size, if it is known and no writer is open.
fn vouched(e: Option<&Entry>) -> Option<u64> {
    e.filter(|e| e.writers == 0 && !e.dirty).and_then(|e| e.size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_is_known_only_when_measured_after_the_last_writer() {
        let s = KnownSizes::new(5, 0, 1);
        let f = FileId(7);
        assert_eq!(s.known(f), None, "never seen: ask the data servers");
        s.opened(f, true);
        assert_eq!(s.known(f), None, "its creator may be writing");
        assert_eq!(s.closed(f, false, None), AfterClose::Nothing, "created and closed unwritten: known empty");
        assert_eq!(s.known(f), Some(0));
        // Two writers; the first measures too early, the second's close
        // arrives first: only a measure after the last close counts.
        s.opened(f, false);
        s.opened(f, false);
        assert_eq!(s.closed(f, true, None), AfterClose::Nothing, "a writer is still open");
        assert_eq!(s.known(f), None);
        let AfterClose::Measure { epoch, sole } = s.closed(f, true, None) else { panic!("the last writer measures") };
        assert!(!sole, "two writers were open: the last one to close cannot know the size alone");
        assert_eq!(s.known(f), None, "not measured yet");
        s.measured(f, epoch, 1100);
        assert_eq!(s.known(f), Some(1100));
        // A write open between the last close and its measure voids it.
        s.opened(f, false);
        let AfterClose::Measure { epoch, sole } = s.closed(f, true, None) else { panic!() };
        assert!(sole, "one write open since the file had no writer");
        s.opened(f, false);
        s.measured(f, epoch, 5);
        assert_eq!(s.known(f), None, "a measure from an older epoch is dropped");
        assert_eq!(s.closed(f, false, None), AfterClose::Measure { epoch: epoch + 1, sole: true }, "still unknown: the last closer measures");
        s.measured(f, epoch + 1, 9);
        assert_eq!(s.known(f), Some(9));
        // Older files and forgotten ones are not vouched for.
        let older = FileId(4);
        s.opened(older, false);
        assert_eq!(s.closed(older, true, None), AfterClose::Nothing);
        assert_eq!(s.known(older), None, "a file from before this instance may have writers it never saw");
        s.forget(f);
        assert_eq!(s.known(f), None);
    }

    #[test]
    fn a_closer_is_sole_only_if_no_other_write_open_overlapped_its_own() {
        let s = KnownSizes::new(1, 0, 1);
        let f = FileId(3);
        s.opened(f, true);
        assert_eq!(s.closed(f, true, None), AfterClose::Measure { epoch: 1, sole: true });
        // A opens, B opens, A closes, B closes: B's open overlapped A's.
        s.opened(f, false);
        s.opened(f, false);
        assert_eq!(s.closed(f, true, None), AfterClose::Nothing);
        assert_eq!(s.closed(f, true, None), AfterClose::Measure { epoch: 3, sole: false });
        // A opens, B opens and closes, A closes: B wrote while A was open.
        s.opened(f, false);
        s.opened(f, false);
        assert_eq!(s.closed(f, true, None), AfterClose::Nothing);
        assert!(matches!(s.closed(f, false, None), AfterClose::Measure { sole: false, .. }));
        // Alone again after the file had no writer.
        s.opened(f, false);
        assert!(matches!(s.closed(f, true, None), AfterClose::Measure { sole: true, .. }));
    }

    /// A close that carries the size its handle knows: taken at once when
    /// that handle was the only write open since the file had none (no
    /// `Measure`, no `SetSize`); otherwise ignored, and measured as before.
    #[test]
    fn a_sole_writers_size_comes_with_its_close() {
        let s = KnownSizes::new(1, 0, 1);
        let f = FileId(3);
        s.opened(f, true);
        assert_eq!(s.closed(f, true, Some(4096)), AfterClose::Nothing, "the sole writer's size is taken");
        assert_eq!(s.known(f), Some(4096));
        // Two write opens overlapping: the size either one knows is not
        // the file's.
        s.opened(f, false);
        s.opened(f, false);
        assert_eq!(s.closed(f, true, Some(1)), AfterClose::Nothing, "a writer is still open");
        assert_eq!(s.known(f), None);
        assert_eq!(s.closed(f, true, Some(2)), AfterClose::Measure { epoch: 3, sole: false }, "not alone: measured");
        assert_eq!(s.known(f), None, "neither size was taken");
        s.measured(f, 3, 77);
        assert_eq!(s.known(f), Some(77));
        // Alone but not knowing the size: measured, as before.
        s.opened(f, false);
        assert_eq!(s.closed(f, true, None), AfterClose::Measure { epoch: 4, sole: true });
        // Another client opened, wrote and closed a new file between its
        // create's commit and the creator's count: the creator is not sole.
        let g = FileId(4);
        s.opened(g, false);
        assert!(matches!(s.closed(g, true, None), AfterClose::Measure { .. }));
        s.opened(g, true);
        assert!(matches!(s.closed(g, true, Some(10)), AfterClose::Measure { sole: false, .. }), "the creator's own size left out the other's bytes");
        assert_eq!(s.known(g), None);
    }
}
