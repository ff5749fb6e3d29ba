//! Changes of an entry's attributes: owner, mode, times; the entry named
//! by a path (`Chmod`, `Chown`, `SetTimes`) or by its id (`Change`, a
//! mount's inode, which another client may have renamed meanwhile).

use super::path::components;
use super::tables::{check, encode_attr, err, may, now_ns, Result, Tables, DIRENTS, INODES, W};
use redb::{ReadableTable, WriteTransaction};
use weft_wire::{AttrChange, Cred, ErrorCode, FileAttr, FileId, FileKind};

/// Applies `changes`, in order, to the entry at `path`, or with id `file`,
/// as `cred`; returns its attributes after. One refused refuses them all
/// (the caller aborts the transaction).
pub(super) fn change(tx: &WriteTransaction, cred: Cred, target: Target<'_>, changes: &[AttrChange]) -> Result<FileAttr> {
    let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
    let (mut a, name) = match target {
        Target::Path(path) => {
            let comps = components(path).map_err(|m| err(ErrorCode::InvalidPath, m))?;
            (t.walk(cred, &comps)?, path.to_string())
        }
        Target::Id(id) => {
            let v = t.inodes.get(id.0)?.ok_or_else(|| err(ErrorCode::NotFound, format!("file {} does not exist", id.0)))?;
            let a = super::tables::decode_attr(v.value())?;
            // By id only for its owner (or root): ids are sequential, and
            // a writer's rights (times "now", dropping setuid) would let
            // anyone touch and read the attributes of files in directories
            // it cannot search. Others change by path.
            if cred.uid != 0 && cred.uid != a.uid {
                return Err(err(ErrorCode::Permission, format!("uid {} does not own file {}: change it by its path", cred.uid, id.0)));
            }
            (a, format!("file {}", id.0))
        }
    };
    super::shards::check_not_moving(tx, a.id, &name)?;
    for change in changes {
        match *change {
            AttrChange::Mode(mode) => chmod(cred, &mut a, mode, &name)?,
            AttrChange::Owner { uid, gid } => chown(cred, &mut a, uid, gid, &name)?,
            AttrChange::Mtime(t) => set_times(cred, &mut a, t, &name)?,
        }
    }
    a.ctime_ns = now_ns();
    t.inodes.insert(a.id.0, encode_attr(&a).as_slice())?;
    Ok(a)
}

/// An entry, by path or by id.
#[derive(Clone, Copy)]
pub(super) enum Target<'a> {
    Path(&'a str),
    Id(FileId),
}

/// Only root gives a file away (`_POSIX_CHOWN_RESTRICTED`); its owner may
/// change its group to one of the owner's own groups, or leave it. Any
/// chown of a regular file clears its setuid bit, and its setgid bit when
/// that marks a set-group-id program (group execute) or the caller is
/// neither root nor in the file's group: Linux's rule (even to the owner
/// it has, even by root).
fn chown(cred: Cred, a: &mut FileAttr, uid: u32, gid: u32, name: &str) -> Result<()> {
    let uid = if uid == weft_wire::KEEP_ID { a.uid } else { uid };
    let gid = if gid == weft_wire::KEEP_ID { a.gid } else { gid };
    // Linux's rule (_POSIX_CHOWN_RESTRICTED): root changes anything; the
    // owner may keep the owner and set the group to one of its own (or
    // keep the group it has).
    if cred.uid != 0 && (cred.uid != a.uid || uid != a.uid || !(cred.in_group(gid) || gid == a.gid)) {
        return Err(err(ErrorCode::Permission, format!("uid {} may not change the owner or group of {name}: only root, or its owner to a group of its own", cred.uid)));
    }
    if a.kind == FileKind::File {
        a.mode &= !0o4000;
        if a.mode & 0o2000 != 0 && (a.mode & 0o010 != 0 || (cred.uid != 0 && !cred.in_group(a.gid))) {
            a.mode &= !0o2000;
        }
    }
    a.uid = uid;
    a.gid = gid;
    Ok(())
}

/// utimensat(2): an explicit time only by the owner or root; "now" also by
/// anyone who may write the file.
fn set_times(cred: Cred, a: &mut FileAttr, mtime_ns: i64, name: &str) -> Result<()> {
    let owner = cred.uid == 0 || cred.uid == a.uid;
    if mtime_ns == weft_wire::TIME_NOW {
        if !owner {
            check(cred, a, W, "set the times of this file")?;
        }
        a.mtime_ns = now_ns();
    } else {
        if !owner {
            return Err(err(ErrorCode::Permission, format!("uid {} does not own {name}", cred.uid)));
        }
        a.mtime_ns = mtime_ns;
    }
    Ok(())
}

fn chmod(cred: Cred, a: &mut FileAttr, mode: u32, name: &str) -> Result<()> {
    let mode = mode & 0o7777;
    // A write or truncate by someone else who may write a file drops
    // its setuid and setgid bits (the kernel asks for that as the
    // writer): that change alone, of a regular file, needs no
    // ownership (a directory's setgid stays its owner's to change).
    let drops_privileges = a.kind == FileKind::File && mode != a.mode && mode | 0o6000 == a.mode | 0o6000 && mode & !a.mode & 0o6000 == 0;
    if cred.uid != 0 && cred.uid != a.uid && !(drops_privileges && may(cred, a, W)) {
        return Err(err(ErrorCode::Permission, format!("uid {} does not own {name}", cred.uid)));
    }
    a.mode = mode;
    Ok(())
}
