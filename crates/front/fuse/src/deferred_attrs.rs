//! Attribute changes of a file this mount is writing, answered at once and
//! sent to the metadata service with its close.
//!
//! `tar`, `cp -p` and `rsync` set the times, the owner and the mode of each
//! file they write just before closing it: three round trips to the
//! metadata service a file. While this mount has the file open for
//! writing, the changes that take nobody's rights away are kept here
//! instead, answered with the attributes they make, and sent together
//! (one round trip) when the file is closed or fsync'd; this mount's stats
//! show them at once, other clients at the close, as they see the data
//! (close-to-open). Kept:
//! * an explicit time (`utimensat` with a time, not "now"), by the owner
//!   or root;
//! * a mode that removes no bit (`fchmod` widening, or setting what is
//!   there; setuid and setgid included: clearing either goes at once), by
//!   the owner or root;
//! * an owner and group that are the file's already (`fchown` to itself),
//!   by the owner or root, of a file with neither setuid nor setgid (a
//!   chown clears them).
//!
//! Anything else is sent at once, after what is kept here for the file.
//! What the service refuses at the close (the owner changed meanwhile
//! elsewhere) is that close's error.

use crate::handle::lock;
use std::collections::HashMap;
use std::sync::Mutex;
use weft_client::{AttrChange, Client, FileAttr, KEEP_ID, TIME_NOW};

/// Files with changes kept at most: past this a change is sent at once.
const MAX_FILES: usize = 65_536;

struct Pending {
    /// The attributes as this mount shows them: the last the service
    /// said (at open), with the changes applied.
    view: FileAttr,
    /// Changes not yet sent, at most one of each kind.
    changes: Vec<AttrChange>,
    /// Who made them.
    by: Client,
}

#[derive(Default)]
pub(crate) struct DeferredAttrs {
    files: Mutex<HashMap<u64, Pending>>,
}

/// Whether `change`, asked by `uid` of a file whose attributes are `now`,
/// may wait for the close (see the module's documentation).
pub(crate) fn may_wait(now: &FileAttr, uid: u32, change: &AttrChange) -> bool {
    if uid != 0 && uid != now.uid {
        return false;
    }
    match *change {
        AttrChange::Mtime(t) => t != TIME_NOW,
        AttrChange::Mode(m) => now.mode & 0o7777 & !m == 0,
        // A chown clears setuid and setgid: never kept when there are any.
        AttrChange::Owner { uid, gid } => (uid == KEEP_ID || uid == now.uid) && (gid == KEEP_ID || gid == now.gid) && now.mode & 0o6000 == 0,
    }
}

/// `a` with `change` made.
fn apply(a: &mut FileAttr, change: &AttrChange, now_ns: i64) {
    match *change {
        AttrChange::Mtime(t) => a.mtime_ns = t,
        AttrChange::Mode(m) => a.mode = m & 0o7777,
        AttrChange::Owner { .. } => {}
    }
    a.ctime_ns = now_ns;
}

fn same_kind(a: &AttrChange, b: &AttrChange) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

impl DeferredAttrs {
    /// Keeps `changes` (all or none) of file `base.id` made by `by`, and
    /// returns the attributes they make; `None` if they must be sent now
    /// (after [`DeferredAttrs::take`]). `base`: its attributes as this
    /// mount knows them, used when none are kept yet.
    pub(crate) fn keep(&self, base: &FileAttr, by: &Client, changes: &[AttrChange], now_ns: i64) -> Option<FileAttr> {
        let mut files = lock(&self.files);
        let ino = base.id.0;
        let (mut view, kept) = match files.get(&ino) {
            Some(p) if p.by.cred() != by.cred() => return None,
            Some(p) => (p.view.clone(), p.changes.clone()),
            None if files.len() >= MAX_FILES => return None,
            None => (base.clone(), Vec::new()),
        };
        let mut all = kept;
        for change in changes {
            if !may_wait(&view, by.cred().uid, change) {
                return None;
            }
            apply(&mut view, change, now_ns);
            all.retain(|c| !same_kind(c, change));
            all.push(*change);
        }
        files.insert(ino, Pending { view: view.clone(), changes: all, by: by.clone() });
        Some(view)
    }

    /// The changes kept for `ino`, to send now, and who made them.
    pub(crate) fn take(&self, ino: u64) -> Option<(Client, Vec<AttrChange>)> {
        lock(&self.files).remove(&ino).filter(|p| !p.changes.is_empty()).map(|p| (p.by, p.changes))
    }

    /// `a` (as the service said it) with the changes kept for it.
    pub(crate) fn overlay(&self, a: &mut FileAttr) {
        if let Some(p) = lock(&self.files).get(&a.id.0) {
            a.mode = p.view.mode;
            a.mtime_ns = p.view.mtime_ns;
            a.ctime_ns = a.ctime_ns.max(p.view.ctime_ns);
        }
    }

    /// A write through this mount after an explicit time: the close sets
    /// the time "now" (as it would have after the change), so the kept
    /// time goes.
    pub(crate) fn wrote(&self, ino: u64) {
        let mut files = lock(&self.files);
        if let Some(p) = files.get_mut(&ino) {
            p.changes.retain(|c| !matches!(c, AttrChange::Mtime(_)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_client::{FileId, FileKind};

    fn file(mode: u32, uid: u32, gid: u32) -> FileAttr {
        FileAttr { id: FileId(9), kind: FileKind::File, mode, uid, gid, mtime_ns: 5, ctime_ns: 5, nlink: 1, layout: None }
    }

    #[test]
    fn only_changes_that_take_no_right_away_wait() {
        let f = file(0o600, 1000, 100);
        assert!(may_wait(&f, 1000, &AttrChange::Mode(0o644)), "widening");
        assert!(may_wait(&f, 0, &AttrChange::Mode(0o600)), "the same");
        assert!(may_wait(&f, 1000, &AttrChange::Mode(0o4600)), "adding setuid");
        assert!(!may_wait(&f, 1000, &AttrChange::Mode(0o400)), "taking write away");
        assert!(!may_wait(&file(0o4755, 1000, 100), 1000, &AttrChange::Mode(0o755)), "clearing setuid");
        assert!(!may_wait(&f, 1001, &AttrChange::Mode(0o644)), "not the owner");
        assert!(may_wait(&f, 1000, &AttrChange::Mtime(77)));
        assert!(!may_wait(&f, 1000, &AttrChange::Mtime(TIME_NOW)), "now is the service's clock");
        assert!(may_wait(&f, 0, &AttrChange::Owner { uid: 1000, gid: 100 }), "to itself");
        assert!(may_wait(&f, 1000, &AttrChange::Owner { uid: KEEP_ID, gid: 100 }));
        assert!(!may_wait(&f, 0, &AttrChange::Owner { uid: 0, gid: 100 }), "giving it away");
        assert!(!may_wait(&f, 1000, &AttrChange::Owner { uid: KEEP_ID, gid: 101 }), "another group");
        assert!(!may_wait(&file(0o4600, 1000, 100), 0, &AttrChange::Owner { uid: 1000, gid: 100 }), "to itself, clearing setuid");
    }
}
