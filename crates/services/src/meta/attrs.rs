//! Changes of an entry's attributes: owner, mode, times.

use super::path::components;
use super::tables::{check, encode_attr, err, may, now_ns, Result, Tables, DIRENTS, INODES, W};
use redb::WriteTransaction;
use weft_wire::{Cred, ErrorCode, FileAttr, FileKind};

/// Only root gives a file away (`_POSIX_CHOWN_RESTRICTED`); its owner may
/// change its group to one of the owner's own groups, or leave it. Changing the owner
/// or group clears a file's setuid and setgid bits, as POSIX asks.
pub(super) fn chown(tx: &WriteTransaction, cred: Cred, path: &str, uid: u32, gid: u32) -> Result<FileAttr> {
    let comps = components(path).map_err(|m| err(ErrorCode::InvalidPath, m))?;
    let attr = {
        let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
        let mut a = t.walk(cred, &comps)?;
        let uid = if uid == weft_wire::KEEP_ID { a.uid } else { uid };
        let gid = if gid == weft_wire::KEEP_ID { a.gid } else { gid };
        // Linux's rule (_POSIX_CHOWN_RESTRICTED): root changes anything; the
        // owner may keep the owner and set the group to one of its own (or
        // keep the group it has).
        if cred.uid != 0 && (cred.uid != a.uid || uid != a.uid || !(cred.in_group(gid) || gid == a.gid)) {
            return Err(err(ErrorCode::Permission, format!("uid {} may not change the owner or group of {path}: only root, or its owner to a group of its own", cred.uid)));
        }
        if a.kind == FileKind::File && (a.uid != uid || a.gid != gid) {
            a.mode &= !0o6000;
        }
        a.uid = uid;
        a.gid = gid;
        a.ctime_ns = now_ns();
        t.inodes.insert(a.id.0, encode_attr(&a).as_slice())?;
        a
    };
    Ok(attr)
}

/// utimensat(2): an explicit time only by the owner or root; "now" also by
/// anyone who may write the file.
pub(super) fn set_times(tx: &WriteTransaction, cred: Cred, path: &str, mtime_ns: i64) -> Result<FileAttr> {
    let comps = components(path).map_err(|m| err(ErrorCode::InvalidPath, m))?;
    let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
    let mut a = t.walk(cred, &comps)?;
    let owner = cred.uid == 0 || cred.uid == a.uid;
    let now = now_ns();
    if mtime_ns == weft_wire::TIME_NOW {
        if !owner {
            check(cred, &a, W, "set the times of this file")?;
        }
        a.mtime_ns = now;
    } else {
        if !owner {
            return Err(err(ErrorCode::Permission, format!("uid {} does not own {path}", cred.uid)));
        }
        a.mtime_ns = mtime_ns;
    }
    a.ctime_ns = now;
    t.inodes.insert(a.id.0, encode_attr(&a).as_slice())?;
    Ok(a)
}

pub(super) fn chmod(tx: &WriteTransaction, cred: Cred, path: &str, mode: u32) -> Result<FileAttr> {
    let comps = components(path).map_err(|m| err(ErrorCode::InvalidPath, m))?;
    let attr = {
        let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
        let mut a = t.walk(cred, &comps)?;
        let mode = mode & 0o7777;
        // A write or truncate by someone else who may write a file drops
        // its setuid and setgid bits (the kernel asks for that as the
        // writer): that change alone, of a regular file, needs no
        // ownership (a directory's setgid stays its owner's to change).
        let drops_privileges = a.kind == FileKind::File && mode != a.mode && mode | 0o6000 == a.mode | 0o6000 && mode & !a.mode & 0o6000 == 0;
        if cred.uid != 0 && cred.uid != a.uid && !(drops_privileges && may(cred, &a, W)) {
            return Err(err(ErrorCode::Permission, format!("uid {} does not own {path}", cred.uid)));
        }
        a.mode = mode;
        a.ctime_ns = now_ns();
        t.inodes.insert(a.id.0, encode_attr(&a).as_slice())?;
        a
    };
    Ok(attr)
}
