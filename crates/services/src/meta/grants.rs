//! Capabilities the metadata service issues (see `weft_wire::msg::cap`):
//! with every open and create of a file, with a stat whose size the data
//! servers must be asked for, and on renewal.
//!
//! Rights follow POSIX's open: read if the caller may read the file (or
//! opened it read-only, which checked that), write if it opened for
//! writing, size always. Delete is never given out: the service deletes
//! removed files' objects itself (`reaper`, with capabilities it signs
//! for itself that never expire: the file's id is never used again).
//! The rest expire after `WEFT_CAP_LIFETIME_S` (600 s);
//! clients renew them in exchange for the old one, never from a file id
//! alone (an id says nothing of the path's search permissions).

use super::path::components;
use super::shards::Shards;
use super::tables::{decode_attr, err, may, read_tables, MetaError, Result, R, W};
use redb::Database;
use weft_wire::{rights, CapKey, Capability, Cred, FileAttr, FileId, FileKind, MetaReq, Response};

/// Issues capabilities under the servers' key.
pub(super) struct Grants {
    key: CapKey,
    lifetime_s: u64,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Grants {
    /// The key capabilities are signed with.
    pub(super) fn key(&self) -> &CapKey {
        &self.key
    }

    /// Signs with `key`; capabilities live ten minutes unless
    /// [`Grants::set_lifetime`] says otherwise.
    pub(super) fn new(key: CapKey) -> Self {
        Grants { key, lifetime_s: 600 }
    }

    pub(super) fn set_lifetime(&mut self, lifetime: std::time::Duration) {
        self.lifetime_s = lifetime.as_secs().max(1);
    }

    fn issue(&self, file: FileId, rights: u8) -> Capability {
        let expires = if rights == rights::DELETE { u64::MAX } else { unix_now().saturating_add(self.lifetime_s) };
        self.key.issue(file, rights, expires)
    }

    /// Adds the capability a successful answer to `op` comes with.
    pub(super) fn attach(&self, cred: Cred, op: &MetaReq, r: Response) -> Response {
        let is_file = |a: &FileAttr| a.kind == FileKind::File && a.layout.is_some();
        match (op, r) {
            (MetaReq::Create { .. }, Response::Attr(attr)) => {
                // A create that opened an existing file checked write only.
                let read = if may(cred, &attr, R) || attr.uid == cred.uid { rights::READ } else { 0 };
                let cap = self.issue(attr.id, read | rights::WRITE | rights::SIZE);
                Response::Granted { attr, cap }
            }
            (MetaReq::Open { write, .. }, Response::Attr(attr)) if is_file(&attr) => {
                let read = if !write || may(cred, &attr, R) { rights::READ } else { 0 };
                let cap = self.issue(attr.id, read | if *write { rights::WRITE } else { 0 } | rights::SIZE);
                Response::Granted { attr, cap }
            }
            // A removed file's objects are the service's to delete (see
            // `reaper`): no answer carries the right, nor the file.
            (MetaReq::Unlink { .. }, Response::Unlinked { at_ns, .. }) => Response::Unlinked { file: None, at_ns },
            // An answer kept by a build before `Unlinked` (version 25),
            // replayed after an upgrade.
            (MetaReq::Unlink { .. }, Response::Attr(_)) => Response::Ok,
            (MetaReq::Rename { .. }, Response::Renamed { .. }) => Response::Renamed { replaced: None },
            (MetaReq::StatSize { .. } | MetaReq::StatId { .. }, Response::Stat { attr, size: None, .. }) if is_file(&attr) => {
                let cap = Some(self.issue(attr.id, rights::SIZE));
                Response::Stat { attr, size: None, cap }
            }
            (_, r) => r,
        }
    }

    /// `MetaReq::Renew`: a genuine capability (expired or not) for a
    /// fresh one with at most its rights: read and write only while the
    /// file's mode still gives them to the caller, or the caller owns the
    /// file (as an NFS server lets an owner keep writing a file it made
    /// read-only); size always; delete never (it does not expire).
    ///
    /// The path the file was opened by is walked again as the caller: a
    /// directory on it that no longer lets the caller search it ends the
    /// renewal, so a `chmod` of a directory revokes within one capability
    /// lifetime; and the path must still name the file (else it was
    /// renamed or removed: reopen it by its name now). For every caller,
    /// its owner too, or a made-up path would pass any directory; root
    /// alone keeps renewing a file whose name moved. On a sharded cluster
    /// a name whose entry another shard keeps (the file was renamed onto
    /// it) cannot be checked here, and renews for root only.
    pub(super) fn renew(&self, db: &Database, cred: Cred, old: &Capability, path: &str, shards: Option<&Shards>) -> Result<Response> {
        if self.key.check(old, old.file, rights::ALL, 0).is_err() || old.rights & rights::DELETE != 0 {
            return Err(err(weft_wire::ErrorCode::Permission, format!("file {}: only a capability this cluster issued for reading or writing can be renewed", old.file.0)));
        }
        let t = read_tables(db)?;
        let attr = match t.inodes.get(old.file.0)? {
            Some(v) => decode_attr(v.value())?,
            None => return Err(err(weft_wire::ErrorCode::NotFound, format!("file {} does not exist (removed while open?)", old.file.0))),
        };
        let refused = |why: String| err(weft_wire::ErrorCode::Permission, format!("{path}: the capability of file {} is not renewed: {why}", old.file.0));
        let closed = |e: MetaError| refused(format!("a directory on its path no longer lets you search it ({})", e.message));
        let moved = || refused("that name no longer names this file (renamed or removed): reopen it by its name now".into());
        let comps = components(path).map_err(|m| err(weft_wire::ErrorCode::InvalidPath, m))?;
        let Some((name, dir_comps)) = comps.split_last() else { return Err(refused("it names the root directory".into())) };
        let dir = match t.walk(cred, dir_comps) {
            Ok(d) => d,
            Err(e) if e.code == weft_wire::ErrorCode::Permission => return Err(closed(e)),
            Err(_) if cred.uid == 0 => return self.renewed(cred, old, &attr),
            Err(_) => return Err(moved()),
        };
        // (A name kept here too, for a file kept here, is checked here.)
        if dir.kind == FileKind::Dir && shards.is_some_and(|s| s.route(dir.id, name).is_some()) && t.child(dir.id.0, name)?.is_none() {
            return if cred.uid == 0 { self.renewed(cred, old, &attr) } else { Err(refused("its name is kept by another metadata shard (it was renamed there): reopen it by its name now".into())) };
        }
        match t.walk_from(cred, dir, dir_comps, name) {
            Err(e) if e.code == weft_wire::ErrorCode::Permission => Err(closed(e)),
            Ok(a) if a.id == old.file => self.renewed(cred, old, &attr),
            _ if cred.uid == 0 => self.renewed(cred, old, &attr),
            _ => Err(moved()),
        }
    }

    /// The fresh capability of a renewal that passed the path's checks.
    fn renewed(&self, cred: Cred, old: &Capability, attr: &FileAttr) -> Result<Response> {
        let keeps = |right: u8, bit: u32| old.rights & right != 0 && (attr.uid == cred.uid || may(cred, attr, bit));
        let rights = rights::SIZE | if keeps(rights::READ, R) { rights::READ } else { 0 } | if keeps(rights::WRITE, W) { rights::WRITE } else { 0 };
        Ok(Response::Cap(self.issue(old.file, rights)))
    }
}
