//! Attributes of directories this mount asked for moments ago, kept up to
//! date with the entries it makes in them. Each create makes the kernel
//! drop its directory's attributes, and with `default_permissions` it asks
//! for them again before the next create there (for the mode): one round
//! trip per file `tar xf` or `git clone` writes. The metadata service
//! gives a new entry's directory the new entry's change time and one more
//! link for a subdirectory (`create.rs`), so the mount can say what the
//! directory's attributes are after its own creates, and an unlink's
//! answer carries the directory's new time (on one metadata shard: on
//! several, the directory's home shard learns the time later, so there
//! the mount asks again). Attributes come from getattrs and lookups.
//! Another client's changes show once the attribute timeout since the
//! service was last asked has passed, as with the kernel's own cache; any
//! other change through this mount (an rmdir, a rename, a setattr)
//! forgets them.

use crate::handle::lock;
use fuser::FileAttr;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Directories kept at most; past it, all are forgotten.
const MAX_DIRS: usize = 1024;

struct Kept {
    attr: FileAttr,
    /// When the metadata service said so (own changes since do not renew it).
    asked: Instant,
}

#[derive(Default)]
struct State {
    dirs: HashMap<u64, Kept>,
    /// Moves at every event below: a request's [`Mark`] is its value when
    /// the request started.
    clock: u64,
    /// When each directory last changed or was learned: an answer asked
    /// before that must not replace what the change made, and a change
    /// made after a mark may have landed before the request's.
    touched: HashMap<u64, u64>,
    /// When every directory was last forgotten (also when `touched` was
    /// emptied to bound it).
    all_touched: u64,
}

impl State {
    /// Whether directory `dir` is untouched since `mark`.
    fn untouched(&self, dir: u64, mark: Mark) -> bool {
        self.all_touched <= mark.0 && self.touched.get(&dir).is_none_or(|&t| t <= mark.0)
    }

    /// Records an event of directory `dir`.
    fn touch(&mut self, dir: u64) {
        self.clock += 1;
        if self.touched.len() >= MAX_DIRS {
            self.touched.clear();
            self.all_touched = self.clock;
        }
        self.touched.insert(dir, self.clock);
    }
}

/// Where the kept attributes stood when a request started.
#[derive(Clone, Copy)]
pub(crate) struct Mark(u64);

#[derive(Default)]
pub(crate) struct DirAttrs {
    state: Mutex<State>,
}

impl DirAttrs {
    /// Taken before asking the metadata service or changing a directory.
    pub(crate) fn mark(&self) -> Mark {
        Mark(lock(&self.state).clock)
    }

    /// Directory attributes `attr` the metadata service gave, asked at
    /// `asked` after `mark`: kept, unless something changed meanwhile. A
    /// create under way may be in them already: it is not added again.
    pub(crate) fn learned(&self, attr: &FileAttr, mark: Mark, asked: Instant) {
        let mut s = lock(&self.state);
        if attr.kind != fuser::FileType::Directory || !s.untouched(attr.ino.0, mark) {
            return;
        }
        s.touch(attr.ino.0);
        if s.dirs.len() >= MAX_DIRS {
            s.dirs.clear();
        }
        s.dirs.insert(attr.ino.0, Kept { attr: *attr, asked });
    }

    /// The attributes of directory `ino` if the service gave them less than
    /// `within` ago (with this mount's creates in it since), and what is
    /// left of that time (the kernel may keep them that long).
    pub(crate) fn fresh(&self, ino: u64, within: Duration) -> Option<(FileAttr, Duration)> {
        let s = lock(&self.state);
        let k = s.dirs.get(&ino)?;
        let left = within.checked_sub(k.asked.elapsed()).filter(|d| !d.is_zero())?;
        Some((k.attr, left))
    }

    /// An entry made or removed in directory `dir` at `at` (the service's
    /// time of the change: a new entry's change time, an unlink's answer),
    /// `subdirs` its link count's change, by a request that started at
    /// `mark`, on a cluster of one metadata shard. Kept only if nothing
    /// else changed or was learned since `mark`: two changes at once may
    /// have landed in either order, and an answer asked meanwhile may
    /// count this one already.
    pub(crate) fn entries_changed(&self, dir: u64, at: SystemTime, subdirs: i32, mark: Mark) {
        let mut s = lock(&self.state);
        let alone = s.untouched(dir, mark);
        s.touch(dir);
        if !alone {
            s.dirs.remove(&dir);
            return;
        }
        // The service sets both times to the entry's, even back (after a
        // utimes of the directory to the future).
        if let Some(k) = s.dirs.get_mut(&dir) {
            (k.attr.mtime, k.attr.atime, k.attr.ctime, k.attr.crtime) = (at, at, at, at);
            k.attr.nlink = k.attr.nlink.saturating_add_signed(subdirs);
        }
    }

    /// Directory `ino` changed in a way not kept here (an rmdir, a
    /// rename, a link, a setattr, a request that failed): asked again
    /// next time.
    pub(crate) fn changed(&self, ino: u64) {
        let mut s = lock(&self.state);
        s.touch(ino);
        s.dirs.remove(&ino);
    }

    /// A change whose directories are not known here (a rename of a
    /// directory moves its parents' link counts): all asked again.
    pub(crate) fn changed_all(&self) {
        let mut s = lock(&self.state);
        s.clock += 1;
        s.all_touched = s.clock;
        s.touched.clear();
        s.dirs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuser::{FileType, INodeNo};

    fn dir(ino: u64, t: u64) -> FileAttr {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(t);
        FileAttr { ino: INodeNo(ino), size: 0, blocks: 0, atime: at, mtime: at, ctime: at, crtime: at, kind: FileType::Directory, perm: 0o755, nlink: 2, uid: 0, gid: 0, rdev: 0, blksize: 4096, flags: 0 }
    }

    fn secs(t: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(t)
    }

    #[test]
    fn creates_move_the_times_and_subdirectories_the_link_count() {
        let d = DirAttrs::default();
        d.learned(&dir(5, 100), d.mark(), Instant::now());
        d.entries_changed(5, secs(110), 0, d.mark());
        d.entries_changed(5, secs(120), 1, d.mark());
        let a = d.fresh(5, Duration::from_secs(1)).unwrap().0;
        assert_eq!((a.mtime, a.ctime, a.atime, a.nlink), (secs(120), secs(120), secs(120), 3));
        // The service sets them to the entry's time, also back from a
        // time set in the future.
        d.learned(&dir(5, 900), d.mark(), Instant::now());
        d.entries_changed(5, secs(130), 0, d.mark());
        assert_eq!(d.fresh(5, Duration::from_secs(1)).unwrap().0.mtime, secs(130));
    }

    #[test]
    fn anything_between_a_mark_and_its_answer_drops_the_answer() {
        let d = DirAttrs::default();
        // An answer asked before a create landed must not undo it.
        let asked = d.mark();
        d.learned(&dir(5, 100), d.mark(), Instant::now());
        d.entries_changed(5, secs(110), 0, d.mark());
        d.learned(&dir(5, 100), asked, Instant::now());
        assert_eq!(d.fresh(5, Duration::from_secs(1)).unwrap().0.mtime, secs(110));
        // An answer learned while a mkdir was under way may count it: the
        // mkdir does not add its link again.
        let mkdir = d.mark();
        let mut counted = dir(5, 140);
        counted.nlink = 4;
        d.learned(&counted, d.mark(), Instant::now());
        d.entries_changed(5, secs(140), 1, mkdir);
        assert!(d.fresh(5, Duration::from_secs(1)).is_none(), "asked again rather than counted twice");
        d.learned(&dir(5, 100), d.mark(), Instant::now());
        // Two creates at once: either order at the service, so forgotten.
        let (a, b) = (d.mark(), d.mark());
        d.entries_changed(5, secs(130), 1, a);
        d.entries_changed(5, secs(125), 1, b);
        assert!(d.fresh(5, Duration::from_secs(1)).is_none());
        // A removal forgets the directory; an answer asked before it is dropped.
        d.learned(&dir(6, 100), d.mark(), Instant::now());
        let before = d.mark();
        d.changed(6);
        d.learned(&dir(6, 100), before, Instant::now());
        assert!(d.fresh(6, Duration::from_secs(1)).is_none());
    }

    #[test]
    fn changes_of_other_directories_disturb_nothing() {
        let d = DirAttrs::default();
        d.learned(&dir(5, 100), d.mark(), Instant::now());
        // A create in 5 under way while 6 is looked up and 7 changes.
        let create = d.mark();
        d.learned(&dir(6, 100), d.mark(), Instant::now());
        d.changed(7);
        d.entries_changed(5, secs(110), 0, create);
        assert_eq!(d.fresh(5, Duration::from_secs(1)).unwrap().0.mtime, secs(110));
        assert!(d.fresh(6, Duration::from_secs(1)).is_some());
        // Forgetting all does disturb it.
        let create = d.mark();
        d.changed_all();
        d.learned(&dir(5, 100), create, Instant::now());
        assert!(d.fresh(5, Duration::from_secs(1)).is_none());
    }

    #[test]
    fn kept_only_within_the_time_given() {
        let d = DirAttrs::default();
        d.learned(&dir(5, 100), d.mark(), Instant::now() - Duration::from_secs(2));
        assert!(d.fresh(5, Duration::from_secs(1)).is_none());
        assert!(d.fresh(5, Duration::from_secs(3)).is_some());
        d.changed_all();
        assert!(d.fresh(5, Duration::from_secs(3)).is_none());
    }
}
