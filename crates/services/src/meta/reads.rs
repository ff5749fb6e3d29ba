//! The read-only requests: stat, readlink, open's checks and listings,
//! each on a read transaction of its own.

use super::path::components;
use super::{links_across, shards};
use super::tables::{check, encode_attr, err, read_tables, routed, Result, LINKS, R, W};
use redb::Database;
use weft_wire::{Cred, DirEntry, ErrorCode, FileAttr, FileKind, MetaReq, Response};

/// Most components of a path the event loop walks itself: a deeper one
/// (up to thousands, within the path limit) goes to a worker, so no client
/// can make one request hold the loop for long.
const LOOP_WALK: usize = 64;

/// Whether a server's event loop may answer `op` itself rather than hand
/// it to a worker: a read transaction or memory alone, a short walk, never
/// the commit turn nor a disk write. (Not listings: a page may be as large
/// as a body. Not tagged requests: those are changes, but a shared
/// pointer's, whose log write is one record to the page cache and whose
/// rewrite is bounded, see `shared_pointers.rs`: a worker's hand-off
/// halved `write_shared`'s rate.) The caller also
/// checks the database is at hand ([`super::MetaService::answers_on_the_loop`]).
pub(super) fn answers_on_the_loop(op: &MetaReq) -> bool {
    let cheap = matches!(op, MetaReq::Stat { .. } | MetaReq::StatSize { .. } | MetaReq::StatId { .. } | MetaReq::Readlink { .. } | MetaReq::Open { write: false, .. } | MetaReq::Close { .. } | MetaReq::SetSize { .. }) || matches!(op.untagged(), MetaReq::SharedPointer { .. });
    cheap && bounded_walk(op)
}

/// Whether the paths `op` names are short enough to walk on the loop.
pub(super) fn bounded_walk(op: &MetaReq) -> bool {
    let short = |p: &str| p.bytes().filter(|&b| b == b'/').count() <= LOOP_WALK;
    let second = match op.untagged() {
        MetaReq::Rename { to, .. } | MetaReq::Link { to, .. } => Some(to.as_str()),
        _ => None,
    };
    op.path().is_none_or(short) && second.is_none_or(short)
}

/// The entry at `path`; on a sharded cluster, a route (as an error) if
/// another shard keeps it, found on the way (one walk, one transaction).
/// A directory is answered by its home, whose copy has its times (its
/// entry may be on another shard since a rename).
pub(super) fn stat(db: &Database, cred: Cred, path: &str, shards: Option<&shards::Shards>) -> Result<FileAttr> {
    let comps = components(path).map_err(|m| err(ErrorCode::InvalidPath, m))?;
    let t = read_tables(db)?;
    let (Some(s), Some((name, parent_comps))) = (shards, comps.split_last()) else { return t.walk(cred, &comps) };
    let parent = t.walk(cred, parent_comps)?;
    let found = t.walk_from(cred, parent.clone(), parent_comps, name);
    let route = match &found {
        Ok(a) if a.kind == FileKind::Dir => s.route_id(a.id),
        // A file kept here, by its own name or another shard's (a link
        // across shards, once made).
        Ok(a) => links_across::pending_copy_route(db, s, parent.id, name, a.id)?,
        // A name kept here of a file another shard keeps.
        Err(_) if parent.kind == FileKind::Dir && t.child(parent.id.0, name)?.is_some_and(|id| matches!(t.inodes.get(id), Ok(None))) => match links_across::stub_route(db, s, parent.id, name)? {
            Some(route) => Some(route),
            // Removed since this walk's snapshot.
            None => return Err(err(ErrorCode::NotFound, format!("{path} does not exist"))),
        },
        _ if parent.kind == FileKind::Dir => match s.route(parent.id, name) {
            Some(route) if !links_across::unnamed(db, parent.id, name)? => Some(route),
            _ => None,
        },
        _ => None,
    };
    match route {
        Some(Response::Route { shard, shards, parent }) => Err(routed(shard, shards, parent)),
        _ => found,
    }
}

pub(super) fn readlink(db: &Database, cred: Cred, path: &str, shards: Option<&shards::Shards>) -> Result<String> {
    let a = stat(db, cred, path, shards)?;
    if a.kind != FileKind::Symlink {
        return Err(err(ErrorCode::BadRequest, format!("{path} is not a symbolic link")));
    }
    let tx = db.begin_read()?;
    let links = tx.open_table(LINKS)?;
    let target = links.get(a.id.0)?.ok_or_else(|| err(ErrorCode::Internal, format!("symbolic link {path} has no target")))?;
    Ok(target.value().to_owned())
}

pub(super) fn open_file(db: &Database, cred: Cred, path: &str, write: bool, shards: Option<&shards::Shards>) -> Result<FileAttr> {
    let a = stat(db, cred, path, shards)?;
    if write && a.kind == FileKind::Dir {
        return Err(err(ErrorCode::IsDir, format!("{path} is a directory")));
    }
    if a.kind == FileKind::Symlink {
        return Err(err(ErrorCode::BadRequest, format!("{path} is a symbolic link: Weft's paths do not follow links (a mount's do)")));
    }
    if matches!(a.kind, FileKind::Fifo | FileKind::Socket) {
        return Err(err(ErrorCode::BadRequest, format!("{path} is a FIFO or socket: it has no data in Weft (a mount's kernel opens it)")));
    }
    check(cred, &a, if write { W } else { R }, if write { "write this file" } else { "read this file" })?;
    Ok(a)
}

/// A page of a directory's entries; on a sharded cluster those this
/// shard keeps (the client merges every shard's pages).
pub(super) fn readdir(db: &Database, cred: Cred, path: &str, after: &str, max: u32, shards: Option<&shards::Shards>) -> Result<Response> {
    let comps = components(path).map_err(|m| err(ErrorCode::InvalidPath, m))?;
    let t = read_tables(db)?;
    let dir = t.walk(cred, &comps)?;
    if dir.kind != FileKind::Dir {
        return Err(err(ErrorCode::NotDir, format!("{path} is not a directory")));
    }
    check(cred, &dir, R, "list this directory")?;
    let mut entries = Vec::new();
    let mut more = false;
    // A page also ends before its encoding would pass the body limit
    // (entries of wide files carry their whole server list).
    let mut bytes = 16usize;
    for item in t.dirents.range((dir.id.0, after)..(dir.id.0 + 1, ""))? {
        let (k, v) = item?;
        let name = k.value().1;
        if name == after || shards.is_some_and(|s| !s.owns(dir.id, name)) {
            continue;
        }
        // A name of a file another shard keeps: as it was when made, and
        // flagged (the client asks that shard).
        let (attr, elsewhere) = match t.inodes.get(v.value())? {
            Some(a) => (super::tables::decode_attr(a.value())?, false),
            None => match links_across::stub(db, dir.id, name)? {
                Some(stub) => (stub.attr, true),
                // Removed since this listing's snapshot.
                None => continue,
            },
        };
        let size = 4 + name.len() + encode_attr(&attr).len() + 9;
        if entries.len() == max as usize || (bytes + size > weft_wire::limits::MAX_BODY_LEN as usize && !entries.is_empty()) {
            more = true;
            break;
        }
        bytes += size;
        entries.push(DirEntry { name: name.to_owned(), attr, size: None, elsewhere });
    }
    Ok(Response::Entries { entries, more })
}
