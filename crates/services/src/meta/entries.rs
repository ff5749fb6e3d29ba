//! Names coming and going: unlink and rmdir, rename, and link (a second
//! name for a file). A file's inode lives while any name points to it
//! (its link count); its objects are deleted only with its last name.

use super::path::components;
use super::links_across::Stub;
use super::shards::{check_not_moving, Shards};
use super::tables::{check_sticky, encode_attr, err, may, now_ns, split_parent, Result, Tables, WriteTables, DIRENTS, INODES, LINKS, R, W};
use redb::{ReadableTable, WriteTransaction};
use weft_wire::{Cred, ErrorCode, FileAttr, FileId, FileKind};

/// What removing a name did.
pub(super) struct Removed {
    /// The inode, as it was (or is, if other names keep it).
    pub(super) attr: FileAttr,
    /// That was its last name: the inode is gone.
    pub(super) last: bool,
    /// The directory the name was in.
    pub(super) parent: FileId,
    /// The service's time of the removal: the directory's times now.
    pub(super) at_ns: i64,
}

/// Drops what an inode that is going away kept beside its record.
pub(super) fn forget_inode(tx: &WriteTransaction, attr: &FileAttr) -> Result<()> {
    if attr.kind == FileKind::Symlink {
        tx.open_table(LINKS)?.remove(attr.id.0)?;
    }
    // Its objects, deleted by the service once this is durable.
    super::reaper::orphan(tx, attr)
}

/// One name of inode `attr` is going: its link count drops, and at the
/// last the inode goes. True if that was the last.
pub(super) fn drop_name(t: &mut WriteTables<'_>, attr: &FileAttr, now: i64) -> Result<bool> {
    if attr.kind != FileKind::Dir && attr.nlink > 1 {
        let mut a = attr.clone();
        a.nlink -= 1;
        a.ctime_ns = now;
        t.inodes.insert(a.id.0, encode_attr(&a).as_slice())?;
        return Ok(false);
    }
    t.inodes.remove(attr.id.0)?;
    Ok(true)
}

/// Removes the entry `path` (a directory when `want_dir`, which must be
/// empty).
pub(super) fn remove(tx: &WriteTransaction, cred: Cred, path: &str, want_dir: bool) -> Result<Removed> {
    let (parent_comps, name) = split_parent(path)?;
    let removed = {
        let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
        let parent = t.parent_for_change(cred, &parent_comps)?;
        let id = t.child(parent.id.0, name)?.ok_or_else(|| err(ErrorCode::NotFound, format!("{path} does not exist")))?;
        let attr = t.entry(id, path)?;
        check_sticky(cred, &parent, &attr, path)?;
        check_not_moving(tx, attr.id, path)?;
        let dir = attr.kind == FileKind::Dir;
        match (want_dir, dir) {
            (false, true) => return Err(err(ErrorCode::IsDir, format!("{path} is a directory"))),
            (true, false) => return Err(err(ErrorCode::NotDir, format!("{path} is not a directory"))),
            (true, true) if !t.is_empty_dir(id)? => return Err(err(ErrorCode::NotEmpty, format!("{path} is not empty"))),
            _ => {}
        }
        let now = now_ns();
        t.dirents.remove((parent.id.0, name))?;
        let last = drop_name(&mut t, &attr, now)?;
        t.entries_changed(parent.id.0, -i32::from(dir), now)?;
        Removed { attr, last, parent: parent.id, at_ns: now }
    };
    if removed.last {
        forget_inode(tx, &removed.attr)?;
    }
    Ok(removed)
}

/// Renames `from` to `to`, replacing what `to` names (a file, or an empty
/// directory for a directory); returns a replaced file whose last name
/// that was (its objects are deleted by the service once this is durable).
/// `owner`: whether this shard keeps a name (else the route, as an error).
pub(super) fn rename(tx: &WriteTransaction, shards: &Shards, cred: Cred, from: &str, to: &str, owner: impl Fn(FileId, &str) -> Result<()>) -> Result<Option<FileAttr>> {
    let (from_parent, from_name) = split_parent(from)?;
    let (to_parent, to_name) = split_parent(to)?;
    let mut from_full = from_parent.clone();
    from_full.push(from_name);
    let mut to_full = to_parent.clone();
    to_full.push(to_name);
    if from_full == to_full {
        // Renaming an entry to itself changes nothing, but it must exist
        // (issue 8: rename(x, x) succeeded for a missing x).
        Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? }.walk(cred, &from_full)?;
        return Ok(None);
    }
    if to_full.len() > from_full.len() && to_full[..from_full.len()] == from_full[..] {
        return Err(err(ErrorCode::InvalidPath, format!("cannot move {from} into itself")));
    }
    let replaced = {
        let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
        let src_dir = t.parent_for_change(cred, &from_parent)?;
        let dst_dir = t.parent_for_change(cred, &to_parent)?;
        super::shards::check_unmarked(tx, dst_dir.id, to_name, to)?;
        let Some(id) = t.child(src_dir.id.0, from_name)? else {
            owner(src_dir.id, from_name)?;
            return Err(err(ErrorCode::NotFound, format!("{from} does not exist")));
        };
        let src = here(&t, id, from)?;
        // A file's name kept here that another shard would keep is another
        // name of a file this shard keeps (a link across shards).
        if src.kind != FileKind::Dir && owner(src_dir.id, from_name).is_err() {
            return Err(several_shards(from));
        }
        owner(dst_dir.id, to_name)?;
        check_sticky(cred, &src_dir, &src, from)?;
        check_not_moving(tx, src.id, from)?;
        if t.child(dst_dir.id.0, to_name)? == Some(id) {
            // Two names of one file: rename(2) does nothing.
            return Ok(None);
        }
        let now = now_ns();
        let old = replaceable(tx, &t, cred, &dst_dir, to_name, to, src.kind == FileKind::Dir, src.id)?;
        let replaced = drop_replaced(tx, &mut t, shards, old, dst_dir.id, to_name, now)?;
        t.dirents.remove((src_dir.id.0, from_name))?;
        t.dirents.insert((dst_dir.id.0, to_name), id)?;
        // Both directories changed; a directory moved takes its ".." link
        // along, and one replaced takes its own away.
        let moved_dir = i32::from(src.kind == FileKind::Dir);
        let replaced_dir = i32::from(replaced.as_ref().is_some_and(|(_, d)| d.kind == FileKind::Dir));
        t.entries_changed(src_dir.id.0, -moved_dir, now)?;
        t.entries_changed(dst_dir.id.0, moved_dir - replaced_dir, now)?;
        // The entry itself changed (its ctime, as Linux keeps it).
        let mut moved = t.inode(id)?;
        moved.ctime_ns = now;
        t.inodes.insert(id, encode_attr(&moved).as_slice())?;
        replaced
    };
    // A replaced file other names keep is not gone.
    let Some((true, dst)) = replaced else { return Ok(None) };
    forget_inode(tx, &dst)?;
    // Only a file has objects for the client to delete.
    Ok((dst.kind == FileKind::File).then_some(dst))
}

/// What a rename's new name names now, and goes.
pub(super) enum Replacing {
    /// A name of an inode kept here.
    Here(FileAttr),
    /// A name kept here of a file another shard keeps (a stub: a link
    /// across shards, see [`super::links_across`]).
    Stub(Stub),
}

/// The entry at `to_name` in `dst_dir` that a rename of a directory (`dir`)
/// or not to `to` would replace, checked as rename(2) does; `None` if the
/// name is free. `incoming` is the file taking the name (a stub of that
/// same file is not replaced: the file's shard answers that rename).
#[allow(clippy::too_many_arguments)]
pub(super) fn replaceable(tx: &WriteTransaction, t: &WriteTables<'_>, cred: Cred, dst_dir: &FileAttr, to_name: &str, to: &str, dir: bool, incoming: FileId) -> Result<Option<Replacing>> {
    let Some(old) = t.child(dst_dir.id.0, to_name)? else { return Ok(None) };
    let Some(v) = t.inodes.get(old)? else {
        return super::links_across::replaceable_stub(tx, cred, dst_dir, to_name, to, dir, incoming).map(|s| Some(Replacing::Stub(s)));
    };
    let dst = super::tables::decode_attr(v.value())?;
    check_sticky(cred, dst_dir, &dst, to)?;
    check_not_moving(tx, dst.id, to)?;
    match (dir, dst.kind == FileKind::Dir) {
        (false, true) => Err(err(ErrorCode::IsDir, format!("{to} is a directory"))),
        (true, false) => Err(err(ErrorCode::NotDir, format!("{to} is not a directory"))),
        (true, true) if !t.is_empty_dir(old)? => Err(err(ErrorCode::NotEmpty, format!("{to} is not empty"))),
        _ => Ok(Some(Replacing::Here(dst))),
    }
}

/// Drops the name `to_name` of `dir` a rename replaces: one link of an
/// inode here (with `true` if that was its last), or a stub, whose file's
/// shard is told to drop the link there (nothing is returned: the file
/// is not this shard's). The caller then gives the name its new entry.
pub(super) fn drop_replaced(tx: &WriteTransaction, t: &mut WriteTables<'_>, shards: &Shards, old: Option<Replacing>, dir: FileId, to_name: &str, now: i64) -> Result<Option<(bool, FileAttr)>> {
    match old {
        None => Ok(None),
        Some(Replacing::Here(dst)) => Ok(Some((drop_name(t, &dst, now)?, dst))),
        Some(Replacing::Stub(stub)) => {
            super::links_across::unlink_stub(tx, shards, dir, to_name, &stub, now)?;
            Ok(None)
        }
    }
}

/// The target shard's half of a rename across shards: file `attr` (not a
/// directory; a symbolic link with its `target`) takes the name `to` here,
/// replacing what rename(2) would; returns a replaced file whose last name
/// that was (its objects are deleted by the service once this is durable).
/// `shards` says whether this shard keeps an entry (the source routed the
/// rename on its own snapshot).
pub(super) fn adopt(tx: &WriteTransaction, shards: &Shards, cred: Cred, to: &str, attr: &FileAttr, target: Option<&str>) -> Result<Option<FileAttr>> {
    let (to_parent, to_name) = split_parent(to)?;
    let replaced = {
        let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
        let dst_dir = t.parent_for_change(cred, &to_parent)?;
        super::shards::check_unmarked(tx, dst_dir.id, to_name, to)?;
        if !shards.owns(dst_dir.id, to_name) {
            return Err(err(ErrorCode::CrossShard, format!("{to} is kept by another metadata shard than the rename was sent to (its directory was made anew); try again")));
        }
        if t.inodes.get(attr.id.0)?.is_some() {
            return Err(err(ErrorCode::Internal, format!("file {} is already on this shard", attr.id.0)));
        }
        let old = replaceable(tx, &t, cred, &dst_dir, to_name, to, false, attr.id)?;
        let now = now_ns();
        let replaced = drop_replaced(tx, &mut t, shards, old, dst_dir.id, to_name, now)?;
        let mut a = attr.clone();
        a.ctime_ns = now;
        t.inodes.insert(a.id.0, encode_attr(&a).as_slice())?;
        t.dirents.insert((dst_dir.id.0, to_name), a.id.0)?;
        t.entries_changed(dst_dir.id.0, 0, now)?;
        replaced
    };
    if let Some(target) = target {
        tx.open_table(LINKS)?.insert(attr.id.0, target)?;
    }
    let Some((true, dst)) = replaced else { return Ok(None) };
    forget_inode(tx, &dst)?;
    Ok((dst.kind == FileKind::File).then_some(dst))
}

/// The source shard's half of a rename across shards: checks that the
/// entry `from` may be renamed away as `cred` (search and write on its
/// directory, the sticky bit, not a directory, no other names) and returns
/// its directory and attributes.
pub(super) fn leaving(tx: &WriteTransaction, cred: Cred, from: &str) -> Result<(FileAttr, FileAttr)> {
    let (from_parent, from_name) = split_parent(from)?;
    let t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
    let dir = t.parent_for_change(cred, &from_parent)?;
    let id = t.child(dir.id.0, from_name)?.ok_or_else(|| err(ErrorCode::NotFound, format!("{from} does not exist")))?;
    let a = here(&t, id, from)?;
    check_sticky(cred, &dir, &a, from)?;
    check_not_moving(tx, a.id, from)?;
    if a.kind == FileKind::Dir || a.nlink > 1 {
        return Err(err(ErrorCode::CrossShard, format!("{from} is a directory or has other names: its rename to another metadata shard is not built yet")));
    }
    Ok((dir, a))
}

/// link(2): `to` becomes another name of what `from` names (not a
/// directory). As Linux's protected hard links: someone other than the
/// owner (or root) may link only a regular file it may read and write
/// that is neither setuid nor setgid-executable.
/// `owner`: whether this shard keeps a name (else the route, as an error;
/// the coordinator of a link across shards keeps a copy of the name, see
/// [`super::links_across`]). Returns the file's attributes after and the
/// directory of `to`.
pub(super) fn link(tx: &WriteTransaction, cred: Cred, from: &str, to: &str, owner: impl Fn(FileId, &str) -> Result<()>) -> Result<(FileAttr, FileId)> {
    let from_comps = components(from).map_err(|m| err(ErrorCode::InvalidPath, m))?;
    let (to_parent, to_name) = split_parent(to)?;
    let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
    let mut a = t.walk(cred, &from_comps)?;
    check_not_moving(tx, a.id, from)?;
    if a.kind == FileKind::Dir {
        return Err(err(ErrorCode::Permission, format!("{from} is a directory: directories have no hard links")));
    }
    let setgid_exec = a.mode & 0o2010 == 0o2010;
    let safe = a.kind == FileKind::File && a.mode & 0o4000 == 0 && !setgid_exec && may(cred, &a, R | W);
    if cred.uid != 0 && cred.uid != a.uid && !safe {
        return Err(err(ErrorCode::Permission, format!("uid {} may not link {from}: it neither owns it nor may read and write it (protected hard links)", cred.uid)));
    }
    let dir = t.parent_for_change(cred, &to_parent)?;
    super::shards::check_unmarked(tx, dir.id, to_name, to)?;
    owner(dir.id, to_name)?;
    if t.child(dir.id.0, to_name)?.is_some() {
        return Err(err(ErrorCode::Exists, format!("{to} already exists")));
    }
    a.nlink = a.nlink.checked_add(1).ok_or_else(|| err(ErrorCode::TooManyLinks, format!("{from} has the most links a file may have")))?;
    let now = now_ns();
    a.ctime_ns = now;
    t.inodes.insert(a.id.0, encode_attr(&a).as_slice())?;
    t.dirents.insert((dir.id.0, to_name), a.id.0)?;
    t.entries_changed(dir.id.0, 0, now)?;
    Ok((a, dir.id))
}

/// The file entry `id` names here; a name another shard keeps the file of
/// (a link across shards: its stub) is refused as a source: a rename of
/// one is made by the file's shard (`name_moves`), where requests on the
/// stub go. (A rename over one is made here: [`replaceable`].)
pub(super) fn here<I, D>(t: &Tables<I, D>, id: u64, path: &str) -> Result<FileAttr>
where
    I: ReadableTable<u64, &'static [u8]>,
    D: ReadableTable<(u64, &'static str), u64>,
{
    match t.inodes.get(id)? {
        Some(v) => super::tables::decode_attr(v.value()),
        None => Err(several_shards(path)),
    }
}

fn several_shards(path: &str) -> super::tables::MetaError {
    err(ErrorCode::CrossShard, format!("{path} is a name of a file with names on several metadata shards, and this shard does not make its rename: the shard that keeps the file does"))
}
