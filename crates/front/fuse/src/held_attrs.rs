//! Attribute changes held by the mount for a file it made and still has
//! open: tar sets the times, owner and mode of each file it extracts (three
//! round trips to the metadata service). The mount answers them itself and
//! sends them as one request at the file's first close (or fsync, or before
//! any other request about it), like the file's bytes: other nodes see them
//! at the close (close-to-open), this node at once (`overlay`).
//!
//! Only what the metadata service is sure to accept is held: changes by
//! the file's owner or root of a file made here by an exclusive create,
//! an explicit time (not "now", which is the service's clock), a chown by
//! root alone. Anything else is sent at once, after what is held.

use crate::handle::lock;
use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use weft_client::{AttrChange, Client, Error, FileAttr, FileId, FileKind, KEEP_ID, MAX_ATTR_CHANGES, TIME_NOW};

/// Files held at most (each a file made here and still open): past it, new
/// files' changes are sent at once.
const MAX_FILES: usize = 4096;

struct Held {
    /// The attributes after every change held or being sent: what this
    /// node is told.
    attr: FileAttr,
    /// Changes not yet sent, in order.
    changes: Vec<AttrChange>,
    /// Who made them: the request goes as that user.
    by: Option<Client>,
    /// Changes are on their way: another send waits for their answer.
    sending: bool,
    /// New changes may be held: false after the file's first close.
    holding: bool,
}

impl Held {
    /// Whether this node's answers must come from `attr`.
    fn ahead(&self) -> bool {
        self.sending || !self.changes.is_empty()
    }
}

#[derive(Default)]
pub(crate) struct HeldAttrs {
    files: Mutex<HashMap<u64, Held>>,
    /// A send finished.
    sent: Condvar,
}

impl HeldAttrs {
    /// File `attr` was made here (an exclusive create, open for writing):
    /// its changes may be held until its first close.
    pub(crate) fn made(&self, attr: &FileAttr) {
        let mut files = lock(&self.files);
        if files.len() < MAX_FILES && attr.kind == FileKind::File {
            files.insert(attr.id.0, Held { attr: attr.clone(), changes: Vec::new(), by: None, sending: false, holding: true });
        }
    }

    /// Holds `changes` of file `ino` asked by `caller` (acting as `uid`,
    /// the uid the metadata service will see) if the service is sure to
    /// accept them: the attributes after them, as of `now_ns`. `None`:
    /// send them now, after what is held (`send`).
    pub(crate) fn hold(&self, ino: u64, caller: &Client, uid: u32, changes: &[AttrChange], now_ns: i64) -> Option<FileAttr> {
        let mut files = lock(&self.files);
        let h = files.get_mut(&ino)?;
        if !h.holding || h.changes.len() + changes.len() > MAX_ATTR_CHANGES || h.by.as_ref().is_some_and(|by| by.cred() != caller.cred()) {
            return None;
        }
        let mut after = h.attr.clone();
        for &c in changes {
            apply(&mut after, uid, c)?;
        }
        after.ctime_ns = now_ns;
        h.attr = after.clone();
        h.changes.extend_from_slice(changes);
        h.by.get_or_insert_with(|| caller.clone());
        Some(after)
    }

    /// The file's first close: nothing more is held (what is, is sent by
    /// the caller).
    pub(crate) fn closing(&self, ino: u64) {
        if let Some(h) = lock(&self.files).get_mut(&ino) {
            h.holding = false;
        }
    }

    /// Sends what is held of file `ino`, and waits for a send under way:
    /// once this returns, the metadata service has every change held
    /// before the call. A file removed meanwhile (by another client) has
    /// nothing left to change. On an error the changes are dropped.
    pub(crate) fn send(&self, ino: u64) -> Result<(), Error> {
        let mut files = lock(&self.files);
        loop {
            let Some(h) = files.get_mut(&ino) else { return Ok(()) };
            if h.sending {
                files = self.sent.wait(files).unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            }
            if h.changes.is_empty() {
                return Ok(());
            }
            let changes = std::mem::take(&mut h.changes);
            let Some(by) = h.by.take() else { return Ok(()) };
            h.sending = true;
            drop(files);
            let r = by.changes_sized(FileId(ino), &changes);
            files = lock(&self.files);
            if let Some(h) = files.get_mut(&ino) {
                h.sending = false;
                match &r {
                    // The service's answer stands, unless more was held meanwhile.
                    Ok((a, _)) if h.changes.is_empty() => h.attr = a.clone(),
                    Ok(_) => {}
                    // Dropped: this node is told the service's attributes again.
                    Err(_) => {
                        h.changes.clear();
                        h.by = None;
                    }
                }
            }
            self.sent.notify_all();
            match r {
                Ok(_) | Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends what is held of every file (before a request whose checks at
    /// the metadata service may read a held file's owner or mode: an
    /// unlink or rename in a sticky directory, a link). The first error.
    pub(crate) fn send_all(&self) -> Result<(), Error> {
        let inos: Vec<u64> = lock(&self.files).iter().filter(|(_, h)| h.ahead()).map(|(&ino, _)| ino).collect();
        let mut first = Ok(());
        for ino in inos {
            if let Err(e) = self.send(ino) {
                first = first.and(Err(e));
            }
        }
        first
    }

    /// Forgets file `ino` (its last handle closed; anything held was sent).
    pub(crate) fn forget(&self, ino: u64) {
        let mut files = lock(&self.files);
        if files.get(&ino).is_some_and(|h| !h.ahead()) {
            files.remove(&ino);
        }
    }

    /// The attributes this node is told of `a`'s file: `a` (the metadata
    /// service's) unless changes of it are held or being sent, then those
    /// after them, with the service's link count.
    pub(crate) fn overlay(&self, a: &FileAttr) -> Option<FileAttr> {
        let files = lock(&self.files);
        let h = files.get(&a.id.0).filter(|h| h.ahead())?;
        let mut after = h.attr.clone();
        after.nlink = a.nlink;
        Some(after)
    }
}

/// `change` applied to `a` as the metadata service would apply it for
/// `uid` (attrs.rs's rules), if the service is sure to accept it; `None`
/// if it might refuse it or uses its own clock.
fn apply(a: &mut FileAttr, uid: u32, change: AttrChange) -> Option<()> {
    let owner = uid == 0 || uid == a.uid;
    match change {
        AttrChange::Mode(m) if owner => a.mode = m & 0o7777,
        AttrChange::Owner { uid: to_uid, gid: to_gid } if uid == 0 => {
            // Linux's rule for a chown by root of a regular file: setuid
            // goes, setgid too when group execute marks it a program.
            a.mode &= !0o4000;
            if a.mode & 0o2010 == 0o2010 {
                a.mode &= !0o2000;
            }
            if to_uid != KEEP_ID {
                a.uid = to_uid;
            }
            if to_gid != KEEP_ID {
                a.gid = to_gid;
            }
        }
        AttrChange::Mtime(t) if owner && t != TIME_NOW => a.mtime_ns = t,
        _ => return None,
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(mode: u32, uid: u32) -> FileAttr {
        FileAttr { id: FileId(7), kind: FileKind::File, mode, uid, gid: uid, mtime_ns: 1, ctime_ns: 1, nlink: 1, layout: None }
    }

    #[test]
    fn only_changes_the_service_surely_accepts_are_applied() {
        let mut a = file(0o6755, 1000);
        assert_eq!(apply(&mut a, 1000, AttrChange::Mode(0o600)), Some(()));
        assert_eq!(a.mode, 0o600);
        assert_eq!(apply(&mut a, 1001, AttrChange::Mode(0o644)), None, "not the owner");
        assert_eq!(apply(&mut a, 1000, AttrChange::Owner { uid: 1000, gid: 5 }), None, "a chown by a user may be refused (groups)");
        assert_eq!(apply(&mut a, 1000, AttrChange::Mtime(TIME_NOW)), None, "now is the service's clock");
        assert_eq!(apply(&mut a, 1000, AttrChange::Mtime(42)), Some(()));
        assert_eq!(a.mtime_ns, 42);
        assert_eq!(apply(&mut a, 1001, AttrChange::Mtime(43)), None, "an explicit time by another");
    }

    #[test]
    fn a_chown_by_root_drops_setuid_and_a_programs_setgid() {
        let mut a = file(0o6755, 1000);
        apply(&mut a, 0, AttrChange::Owner { uid: 5, gid: KEEP_ID }).unwrap();
        assert_eq!((a.mode, a.uid, a.gid), (0o0755, 5, 1000));
        let mut b = file(0o2644, 1000);
        apply(&mut b, 0, AttrChange::Owner { uid: KEEP_ID, gid: 9 }).unwrap();
        assert_eq!((b.mode, b.uid, b.gid), (0o2644, 1000, 9), "setgid without group execute marks mandatory locking, and stays");
    }
}
