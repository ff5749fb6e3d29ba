//! Sizes of the files this mount is writing, known here without asking the
//! data servers.
//!
//! A file open for writing has no size at the metadata service (the data
//! servers hold it), so each stat or attribute change of it would ask every
//! data server. While this mount writes a file, it knows the size as well
//! as those servers do, within the bound the kernel's own attribute cache
//! already has: the size was asked of the servers (or made: a new file, a
//! truncate) at most the attribute timeout ago, and every write this mount
//! queued since extends it. Writes by other mounts within that time show at
//! the next ask after it (close-to-open: docs/posix.md). A write generation
//! keeps an answer that raced a later local write from overwriting it.

use crate::handle::lock;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Entry {
    /// Handles of this mount open for writing the file.
    writers: usize,
    /// The size and when it was last learned from the servers or made.
    size: Option<(u64, Instant)>,
    /// The change count when the size last changed here (writes,
    /// truncates, failures), or when the entry was made.
    changed: u64,
}

/// What a size ask started from: the change count then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask(u64);

#[derive(Default)]
struct Files {
    by_ino: HashMap<u64, Entry>,
    /// Changes made here so far, every file together.
    changes: u64,
}

impl Files {
    fn change(&mut self, ino: u64) -> Option<&mut Entry> {
        self.changes += 1;
        let now = self.changes;
        let e = self.by_ino.get_mut(&ino)?;
        e.changed = now;
        Some(e)
    }
}

pub(crate) struct LocalSizes {
    /// How long a learned size is trusted (the attribute timeout).
    trust: Duration,
    files: Mutex<Files>,
}

impl LocalSizes {
    pub(crate) fn new(trust: Duration) -> Self {
        LocalSizes { trust, files: Mutex::new(Files::default()) }
    }

    /// A handle opened `ino` for writing; `made` is its size if the open
    /// made a new file (0).
    pub(crate) fn opened(&self, ino: u64, made: Option<u64>) {
        let mut files = lock(&self.files);
        let e = files.by_ino.entry(ino).or_insert(Entry { writers: 0, size: None, changed: 0 });
        e.writers += 1;
        let first = e.writers == 1;
        // A first writer here starts from what the servers say (another
        // mount may have written since a size kept from a close here), and
        // an answer asked before this open is not taken.
        if let Some(e) = files.change(ino)
            && (first || made.is_some())
        {
            e.size = made.map(|size| (size, Instant::now()));
        }
    }

    /// A write handle of `ino` was released: at the last, the size is the
    /// metadata service's again (learned at that close).
    pub(crate) fn closed(&self, ino: u64) {
        let mut files = lock(&self.files);
        let Some(e) = files.by_ino.get_mut(&ino) else { return };
        e.writers = e.writers.saturating_sub(1);
        if e.writers == 0 {
            files.by_ino.remove(&ino);
        }
    }

    /// This mount wrote (or queued) bytes of `ino` up to `end`.
    pub(crate) fn wrote(&self, ino: u64, end: u64) {
        if let Some(e) = lock(&self.files).change(ino)
            && let Some((s, _)) = &mut e.size
        {
            *s = (*s).max(end);
        }
    }

    /// This mount set `ino`'s size to `size`, having asked before it began:
    /// known, unless a write was queued here meanwhile (it may have landed
    /// before or after).
    pub(crate) fn truncated(&self, ino: u64, ask: Ask, size: u64) {
        let mut files = lock(&self.files);
        let untouched = files.by_ino.get(&ino).is_some_and(|e| e.changed <= ask.0);
        if let Some(e) = files.change(ino) {
            e.size = untouched.then(|| (size, Instant::now()));
        }
    }

    /// The size is not known here any more (a write whose end is not known
    /// here, or a queued write that failed).
    pub(crate) fn unknown(&self, ino: u64) {
        if let Some(e) = lock(&self.files).change(ino) {
            e.size = None;
        }
    }

    /// `ino`'s size, if known here and learned within the trust.
    pub(crate) fn get(&self, ino: u64) -> Option<u64> {
        let files = lock(&self.files);
        let (size, learned) = files.by_ino.get(&ino)?.size?;
        (learned.elapsed() < self.trust).then_some(size)
    }

    /// Before asking the servers for a size, or changing it there.
    pub(crate) fn ask(&self) -> Ask {
        Ask(lock(&self.files).changes)
    }

    /// The servers said `size` for `ino` to `ask`, with every write this
    /// mount queued before it in it: kept unless it changed here since.
    pub(crate) fn learned(&self, ino: u64, ask: Ask, size: u64) {
        if let Some(e) = lock(&self.files).by_ino.get_mut(&ino)
            && e.changed <= ask.0
        {
            e.size = Some((size, Instant::now()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_new_file_grows_with_its_writes_and_is_forgotten_at_the_last_close() {
        let s = LocalSizes::new(HOUR);
        s.opened(7, Some(0));
        assert_eq!(s.get(7), Some(0));
        s.wrote(7, 100);
        s.wrote(7, 40);
        assert_eq!(s.get(7), Some(100), "a write inside the file does not shrink it");
        s.opened(7, None);
        s.closed(7);
        assert_eq!(s.get(7), Some(100), "another writer is still open");
        s.closed(7);
        assert_eq!(s.get(7), None, "no writer here: the metadata service says");
        s.wrote(7, 500);
        assert_eq!(s.get(7), None, "a file not open for writing here is not tracked");
    }

    #[test]
    fn an_answer_that_raced_a_local_change_is_dropped() {
        let s = LocalSizes::new(HOUR);
        s.opened(3, None);
        assert_eq!(s.get(3), None, "opened without a size: asked first");
        let ask = s.ask();
        s.wrote(3, 4096);
        s.learned(3, ask, 10);
        assert_eq!(s.get(3), None, "the answer may miss the write");
        let ask = s.ask();
        s.wrote(8, 1);
        s.learned(3, ask, 4096);
        assert_eq!(s.get(3), Some(4096), "a write of another file does not matter");
        let ask = s.ask();
        s.truncated(3, ask, 5);
        s.learned(3, ask, 4096);
        assert_eq!(s.get(3), Some(5), "the truncate made here stands");
        let ask = s.ask();
        s.wrote(3, 9000);
        s.truncated(3, ask, 0);
        assert_eq!(s.get(3), None, "a write queued during a truncate may land after it");
        let ask = s.ask();
        s.truncated(3, ask, 0);
        s.unknown(3);
        assert_eq!(s.get(3), None);
    }

    #[test]
    fn a_writer_that_came_and_went_during_an_ask_makes_the_answer_unknown() {
        let s = LocalSizes::new(HOUR);
        let ask = s.ask();
        s.opened(4, None);
        s.wrote(4, 100);
        s.closed(4);
        s.opened(4, None);
        s.truncated(4, ask, 0);
        assert_eq!(s.get(4), None);
        let ask = s.ask();
        s.truncated(4, ask, 0);
        assert_eq!(s.get(4), Some(0));
    }

    #[test]
    fn a_new_writer_asks_again_and_an_answer_from_before_its_open_is_dropped() {
        let s = LocalSizes::new(HOUR);
        s.opened(5, Some(0));
        s.wrote(5, 10);
        s.closed(5);
        s.opened(5, None);
        assert_eq!(s.get(5), None, "a new open asks again (close-to-open: another mount may have written since)");
        let ask = s.ask();
        s.learned(5, ask, 15);
        s.wrote(5, 20);
        assert_eq!(s.get(5), Some(20), "a new writer grows it");
        s.closed(5);
        let ask = s.ask();
        s.opened(5, None);
        s.learned(5, ask, 99);
        assert_eq!(s.get(5), None, "asked before the open");
    }

    #[test]
    fn a_size_is_trusted_no_longer_than_the_attribute_timeout() {
        let s = LocalSizes::new(Duration::ZERO);
        s.opened(9, Some(0));
        s.wrote(9, 10);
        assert_eq!(s.get(9), None, "with no attribute caching every size is asked");
        let s = LocalSizes::new(Duration::from_millis(50));
        s.opened(9, Some(0));
        s.wrote(9, 10);
        assert_eq!(s.get(9), Some(10));
        std::thread::sleep(Duration::from_millis(80));
        s.wrote(9, 20);
        assert_eq!(s.get(9), None, "local writes do not renew what was learned from the servers");
    }
}
