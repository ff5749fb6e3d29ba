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
//! root alone. Nor is a change that takes a right away from others (a
//! mode with fewer group or other bits, or without setuid or setgid, than
//! the service's; a chown of a file whose group may use it, or that is
//! setuid or setgid): that one goes at once, as before. Any change of
//! the file sent at once, and any other open of it, ends the holding (what
//! is held is built on what the mount knows of the file, which such a
//! change may move). A send that fails is reported by the holder's close
//! or fsync, as a queued write's failure is.

use crate::handle::lock;
use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use weft_client::{AttrChange, Client, Error, FileAttr, FileId, FileKind, KEEP_ID, MAX_ATTR_CHANGES, TIME_NOW};

/// Files held at most (each a file made here and still open): past it, new
/// files' changes are sent at once.
const MAX_FILES: usize = 4096;

struct Held {
    /// The attributes the metadata service has (as of its last answer).
    sent: FileAttr,
    /// When it last answered (the create, or a send).
    answered: Instant,
    /// The attributes after every change held or being sent: what this
    /// node is told.
    attr: FileAttr,
    /// Changes not yet sent, in order.
    changes: Vec<AttrChange>,
    /// Who made them: the request goes as that user.
    by: Option<Client>,
    /// Changes are on their way: another send waits for their answer.
    sending: bool,
    /// New changes may be held: false after the file's first close, a
    /// change sent at once, another open, or a failed send.
    holding: bool,
    /// A send failed: the holder's next close or fsync says so.
    failed: bool,
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

/// Clears a file's `sending` if its send ends by a panic (every other send
/// of the file waits for it); a send that returns clears it with its
/// answer, in one step (a waiting send must not record an answer first).
struct Sending<'a> {
    held: &'a HeldAttrs,
    ino: u64,
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(h) = self.held.files().get_mut(&self.ino) {
                h.sending = false;
            }
            self.held.sent.notify_all();
        }
    }
}

impl HeldAttrs {
    fn files(&self) -> MutexGuard<'_, HashMap<u64, Held>> {
        lock(&self.files)
    }

    /// File `attr` was made here (an exclusive create, open for writing):
    /// its changes may be held until its first close.
    pub(crate) fn made(&self, attr: &FileAttr) {
        let mut files = self.files();
        if files.len() >= MAX_FILES {
            // Those left only to report a failure whose holder is gone.
            files.retain(|_, h| h.holding || h.ahead());
        }
        if files.len() < MAX_FILES && attr.kind == FileKind::File {
            files.insert(attr.id.0, Held { sent: attr.clone(), answered: Instant::now(), attr: attr.clone(), changes: Vec::new(), by: None, sending: false, holding: true, failed: false });
        }
    }

    /// Holds `changes` of file `ino` asked by `caller` (acting as `uid`,
    /// the uid the metadata service will see) if the service is sure to
    /// accept them and they take no right from anyone: the attributes
    /// after them, as of `now_ns`. `None`: send them now, after what is
    /// held (`send`), and hold nothing more of the file (`stop`).
    pub(crate) fn hold(&self, ino: u64, caller: &Client, uid: u32, changes: &[AttrChange], now_ns: i64) -> Option<FileAttr> {
        let mut files = self.files();
        let h = files.get_mut(&ino)?;
        if !h.holding || h.changes.len() + changes.len() > MAX_ATTR_CHANGES || h.by.as_ref().is_some_and(|by| by.cred() != caller.cred()) {
            return None;
        }
        let mut after = h.attr.clone();
        for &c in changes {
            if takes_a_right(&h.sent, uid, c) {
                return None;
            }
            apply(&mut after, uid, c)?;
        }
        after.ctime_ns = now_ns;
        h.attr = after.clone();
        h.changes.extend_from_slice(changes);
        h.by.get_or_insert_with(|| caller.clone());
        Some(after)
    }

    /// Nothing more of file `ino` is held: its first close, another open,
    /// or a change sent at once (what was held is sent by the caller).
    pub(crate) fn stop(&self, ino: u64) {
        if let Some(h) = self.files().get_mut(&ino) {
            h.holding = false;
        }
    }

    /// Sends what is held of file `ino`, and waits for a send under way:
    /// once this returns, the metadata service has every change held
    /// before the call. A file removed meanwhile (by another client) has
    /// nothing left to change. On an error the changes are dropped, the
    /// holding ends, and `failed` says so later.
    pub(crate) fn send(&self, ino: u64) -> Result<(), Error> {
        let mut files = self.files();
        loop {
            let Some(h) = files.get_mut(&ino) else { return Ok(()) };
            if h.sending {
                files = self.sent.wait(files).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            if h.changes.is_empty() {
                return Ok(());
            }
            let changes = std::mem::take(&mut h.changes);
            let Some(by) = h.by.take() else { return Ok(()) };
            h.sending = true;
            drop(files);
            let guard = Sending { held: self, ino };
            let r = by.changes_sized(FileId(ino), &changes);
            files = self.files();
            drop(guard);
            if let Some(h) = files.get_mut(&ino) {
                h.sending = false;
                match &r {
                    Ok((a, _)) => {
                        h.sent = a.clone();
                        h.answered = Instant::now();
                        // The service's answer stands, unless more was held meanwhile.
                        if h.changes.is_empty() {
                            h.attr = a.clone();
                        }
                    }
                    Err(Error::NotFound(_)) => {}
                    // Dropped: this node is told the service's attributes again.
                    Err(_) => {
                        h.changes.clear();
                        h.by = None;
                        h.holding = false;
                        h.failed = true;
                        h.attr = h.sent.clone();
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

    /// The attributes of file `ino` while it is held, if the metadata
    /// service answered for it less than `within` ago, and what is left of
    /// that time: nothing but this mount has changed it since, short of
    /// another client (seen after `within`, as the kernel's cache would
    /// show it). A stat of a file being written (git records each file's
    /// attributes after writing it) needs no round trip.
    pub(crate) fn known(&self, ino: u64, within: Duration) -> Option<(FileAttr, Duration)> {
        let files = self.files();
        let h = files.get(&ino).filter(|h| h.holding)?;
        let left = within.checked_sub(h.answered.elapsed()).filter(|d| !d.is_zero())?;
        Some((h.attr.clone(), left))
    }

    /// Whether a send of file `ino`'s held changes failed since the last
    /// ask (for the holder's close or fsync to report), and forgets it (a
    /// close or fsync whose own send failed reports that one, and asks).
    pub(crate) fn failed(&self, ino: u64) -> bool {
        self.files().get_mut(&ino).is_some_and(|h| std::mem::take(&mut h.failed))
    }

    /// Forgets file `ino` (a handle of it released; anything held was
    /// sent), unless a failure is still to be reported to its holder.
    pub(crate) fn forget(&self, ino: u64) {
        let mut files = self.files();
        if files.get(&ino).is_some_and(|h| !h.ahead() && !h.failed) {
            files.remove(&ino);
        }
    }

    /// The attributes this node is told of `a`'s file: `a` (the metadata
    /// service's) unless changes of it are held or being sent, then those
    /// after them, with the service's link count.
    pub(crate) fn overlay(&self, a: &FileAttr) -> Option<FileAttr> {
        let files = self.files();
        let h = files.get(&a.id.0).filter(|h| h.ahead())?;
        let mut after = h.attr.clone();
        after.nlink = a.nlink;
        Some(after)
    }
}

/// Whether `change` by `uid` would take a right from someone else while
/// the metadata service has `sent`: held, they would keep it until the
/// close. A mode with fewer group or other bits, or without a setuid or
/// setgid bit, or (by root, of another's file) fewer owner bits; a chown of
/// a file whose group may use it or that is setuid or setgid (a chown
/// drops those bits), or away from a user.
fn takes_a_right(sent: &FileAttr, uid: u32, change: AttrChange) -> bool {
    let others = if uid == sent.uid { 0o6077 } else { 0o6777 };
    match change {
        AttrChange::Mode(m) => sent.mode & others & !m != 0,
        AttrChange::Owner { uid, gid } => {
            // Root loses nothing by giving a file away; the old group loses
            // what the group bits give it.
            let owner_loses = uid != KEEP_ID && uid != sent.uid && sent.uid != 0;
            let group_loses = gid != KEEP_ID && gid != sent.gid && sent.mode & 0o070 != 0;
            owner_loses || group_loses || sent.mode & 0o6000 != 0
        }
        AttrChange::Mtime(_) => false,
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
    fn what_takes_a_right_from_others_is_not_held() {
        // tar's: made 0600 by root, given to a user, opened up to 0644.
        let made = file(0o600, 0);
        assert!(!takes_a_right(&made, 0, AttrChange::Owner { uid: 1000, gid: 1000 }));
        assert!(!takes_a_right(&made, 0, AttrChange::Mode(0o644)));
        assert!(!takes_a_right(&made, 0, AttrChange::Mtime(5)));
        // Closing it to others, or dropping setuid, is sent at once.
        let open = file(0o4755, 1000);
        assert!(takes_a_right(&open, 1000, AttrChange::Mode(0o0700)));
        assert!(takes_a_right(&open, 1000, AttrChange::Mode(0o0755)));
        assert!(!takes_a_right(&open, 1000, AttrChange::Mode(0o4777)));
        // A chown of a setuid file drops setuid; of a file its group may
        // read, the group's reading; away from a user, the user's rights.
        assert!(takes_a_right(&open, 1000, AttrChange::Owner { uid: KEEP_ID, gid: KEEP_ID }));
        let group_reads = file(0o640, 1000);
        assert!(takes_a_right(&group_reads, 0, AttrChange::Owner { uid: KEEP_ID, gid: 7 }));
        assert!(!takes_a_right(&group_reads, 0, AttrChange::Owner { uid: KEEP_ID, gid: 1000 }));
        assert!(takes_a_right(&file(0o600, 1000), 0, AttrChange::Owner { uid: 5, gid: KEEP_ID }));
        // Root closing a user's file to that user.
        assert!(takes_a_right(&file(0o600, 1000), 0, AttrChange::Mode(0o000)));
        assert!(!takes_a_right(&file(0o600, 1000), 1000, AttrChange::Mode(0o400)), "the owner's own bits are the owner's");
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
