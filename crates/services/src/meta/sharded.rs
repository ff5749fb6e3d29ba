//! The service's requests on a sharded cluster (see [`super::shards`]):
//! which shard answers, the directory changes pushed once committed, and
//! rmdir's two steps.

use super::{dir_moves, entries, links_across};
use super::path::components;
use super::shards::{self, MARKED};
use super::tables::{err, now_ns, read_tables, split_parent, Result, Tables, DIRENTS, INODES};
use super::{attrs, MetaError, MetaService, ROOT};
use redb::{Database, ReadableTable};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use weft_wire::shard::home_shard;
use weft_wire::{AttrChange, Cred, ErrorCode, FileAttr, FileId, FileKind, MetaReq, ReplicaOp, Response};

/// How often a shard retries pushing a log that a shard did not take.
const RETRY_EVERY: Duration = Duration::from_secs(1);

impl MetaService {
    /// Answers at once what sharding decides: a request for another shard
    /// (routed), a replica message without a valid seal, a listing made for
    /// another shard count, a rename across shards, a directory's rename,
    /// and rmdir (two steps).
    /// `None`: serve it as on one shard.
    pub(super) fn sharded_request(&self, cred: Cred, op: &MetaReq) -> Option<Response> {
        if let MetaReq::Replica { coord, seq, op, mac } = op {
            return self.shards.check_replica(*coord, *seq, op, mac).err().map(|e| Response::error(e.code, e.message));
        }
        let k = self.shards.place.count;
        let decided = || -> Result<Option<Response>> {
            match op {
                MetaReq::ReaddirShard { shards, .. } if *shards != k => return Err(shard_count_differs(*shards, k)),
                MetaReq::Readdir { .. } if k > 1 => return Err(shard_count_differs(1, k)),
                _ if k == 1 => return Ok(None),
                _ => {}
            }
            // The database is held only while routing: the steps below wait
            // for the commit turn, whose holder may need to reopen it.
            let route = self.route_of(&*self.store.db()?, op)?;
            match (route, op) {
                (Some(Decision::Answer(r)), _) => Ok(Some(*r)),
                (Some(Decision::RenameTo(target)), MetaReq::Rename { from, to }) => Ok(Some(self.rename_across(cred, from, to, target))),
                (Some(Decision::LinkTo(target)), MetaReq::Link { from, to }) => Ok(Some(self.link_across(cred, from, to, target))),
                (Some(Decision::UnlinkCopy), MetaReq::Unlink { path }) => Ok(Some(self.unlink_copy(cred, path))),
                (Some(Decision::MoveName(target)), MetaReq::Rename { from, to }) => Ok(Some(self.move_name(cred, from, to, target))),
                (Some(Decision::RenameDir), MetaReq::Rename { from, to }) => self.rename_dir(cred, from, to).map(Some),
                (_, MetaReq::Rmdir { path }) => self.rmdir_sharded(cred, path).map(|()| Some(Response::Ok)),
                _ => Ok(None),
            }
        };
        decided().unwrap_or_else(|e| Some(e.into_response()))
    }

    /// What is not this shard's alone to answer as on one shard: a route
    /// to another shard, a rename or link across shards (made here,
    /// two-phase), a directory's rename (by one shard), the removal of a
    /// name another shard keeps too (`links_across`).
    fn route_of(&self, db: &Database, op: &MetaReq) -> Result<Option<Decision>> {
        let s = &self.shards;
        let answer = |r: Option<Response>| r.map(|r| Decision::Answer(Box::new(r)));
        Ok(match op {
            MetaReq::ReaddirShard { .. } | MetaReq::Sync | MetaReq::Replica { .. } | MetaReq::Readdir { .. } => None,
            // Shared file pointers are in memory, spread by their token.
            MetaReq::SharedPointer { token, .. } => {
                let shard = (token % u64::from(s.place.count)) as u32;
                answer((shard != s.place.index).then_some(Response::Route { shard, shards: s.place.count, parent: FileId(0) }))
            }
            // Directories' renames are all made by one shard (`dir_moves`).
            MetaReq::Rename { from, .. } if self.is_dir(db, from)? => match s.place.index == dir_moves::RENAMER {
                true => Some(Decision::RenameDir),
                false => answer(Some(Response::Route { shard: dir_moves::RENAMER, shards: s.place.count, parent: FileId(0) })),
            },
            MetaReq::Rename { from, to } | MetaReq::Link { from, to } => match self.route_path(db, from, false)? {
                Some(route) => Some(Decision::Answer(Box::new(route))),
                None => {
                    let target = self.other_shard_of(db, to)?;
                    match op {
                        MetaReq::Rename { .. } if self.moves_name(db, from, target)? => Some(Decision::MoveName(target)),
                        MetaReq::Link { .. } => target.map(Decision::LinkTo),
                        _ => target.map(Decision::RenameTo),
                    }
                }
            },
            MetaReq::Unlink { path } if self.names_copy(db, path)? => Some(Decision::UnlinkCopy),
            _ => answer(match (op.file(), op.path()) {
                (Some(file), _) => self.route_file(db, file)?,
                // Reads route as they walk (`reads::stat`).
                (None, Some(_)) if op.reads_only() => None,
                // A change of a directory itself is made by its home.
                (None, Some(path)) => self.route_path(db, path, matches!(op, MetaReq::Chmod { .. } | MetaReq::Chown { .. } | MetaReq::SetTimes { .. } | MetaReq::Rmdir { .. }))?,
                (None, None) => None,
            }),
        })
    }

    /// The route for a request on `path`: the shard of its entry, or, for
    /// a change of the entry itself (`itself`) that is a directory, its
    /// home (which makes every change to it; a renamed directory's entry
    /// may be on another shard). The root is on every shard; its changes
    /// are made by its home shard.
    fn route_path(&self, db: &Database, path: &str, itself: bool) -> Result<Option<Response>> {
        // A bad path is the request's own error, reported where it is served.
        let Ok(comps) = components(path) else { return Ok(None) };
        let Some((name, parent_comps)) = comps.split_last() else {
            return Ok(self.shards.route_id(ROOT));
        };
        // Directories are on every shard: a parent that is not found, or
        // not searchable, is not found or refused on every shard alike.
        let t = read_tables(db)?;
        let Ok(parent) = t.walk(Cred::new(0, 0), parent_comps) else { return Ok(None) };
        if parent.kind != FileKind::Dir {
            return Ok(None);
        }
        if let Some(id) = t.child(parent.id.0, name)? {
            match t.inodes.get(id)?.map(|v| super::tables::decode_attr(v.value())).transpose()? {
                Some(a) if a.kind == FileKind::Dir && itself => return Ok(self.shards.route_id(FileId(id))),
                Some(a) if a.kind == FileKind::Dir => {}
                // A file kept here, by its own name or another shard's
                // (a link across shards, once made).
                Some(_) => return links_across::pending_copy_route(db, &self.shards, parent.id, name, FileId(id)),
                None => return links_across::stub_route(db, &self.shards, parent.id, name),
            }
        }
        match self.shards.route(parent.id, name) {
            Some(route) if !links_across::unnamed(db, parent.id, name)? => Ok(Some(route)),
            _ => Ok(None),
        }
    }

    /// Whether `path` names a directory here.
    fn is_dir(&self, db: &Database, path: &str) -> Result<bool> {
        let Ok(comps) = components(path) else { return Ok(false) };
        Ok(read_tables(db)?.walk(Cred::new(0, 0), &comps).is_ok_and(|a| a.kind == FileKind::Dir))
    }

    /// Where a request naming file `id` goes: here if its inode is here,
    /// else where it was renamed to, else its home; a file renamed here
    /// from its home and gone since is not found (not sent back home).
    fn route_file(&self, db: &Database, id: FileId) -> Result<Option<Response>> {
        if let Some(v) = read_tables(db)?.inodes.get(id.0)? {
            // Every shard has every directory, but only its home changes it.
            let home = home_shard(id, self.shards.place.count);
            let dir = super::tables::decode_attr(v.value())?.kind == FileKind::Dir;
            return Ok((dir && home != self.shards.place.index).then_some(Response::Route { shard: home, shards: self.shards.place.count, parent: FileId(0) }));
        }
        Ok(match shards::moved_to(db, id)? {
            Some(shard) => Some(Response::Route { shard, shards: self.shards.place.count, parent: FileId(0) }),
            None if home_shard(id, self.shards.place.count) != self.shards.place.index => Some(Response::error(ErrorCode::NotFound, format!("file {} does not exist", id.0))),
            None => None,
        })
    }

    /// The other shard a rename's or link's target name is kept by, if
    /// not this one.
    fn other_shard_of(&self, db: &Database, to: &str) -> Result<Option<u32>> {
        let t = read_tables(db)?;
        let (to_parent, to_name) = split_parent(to)?;
        let Ok(dst_dir) = t.walk(Cred::new(0, 0), &to_parent) else { return Ok(None) };
        if dst_dir.kind != FileKind::Dir || self.shards.owns(dst_dir.id, to_name) {
            return Ok(None);
        }
        Ok(Some(weft_wire::shard::entry_shard(dst_dir.id, to_name, self.shards.place.count)))
    }

    /// A rename of a file to a name another shard keeps, two-phase: this
    /// shard records the rename with an `Adopt` for `target` in its log
    /// (the file is changed no further here), pushes it, and when the
    /// target took the file (with rename(2)'s checks there) removes the
    /// source entry; if the target refused, nothing moved. A stop in
    /// between is finished from the log when this shard starts again.
    fn rename_across(&self, cred: Cred, from: &str, to: &str, target: u32) -> Response {
        let recorded = self.commit_alone(|tx| -> Result<u64> {
            let (dir, attr) = entries::leaving(tx, cred, from)?;
            links_across::check_not_copy(&self.shards, dir.id, split_parent(from)?.1, &attr, from)?;
            let link = if attr.kind == FileKind::Symlink { tx.open_table(super::tables::LINKS)?.get(attr.id.0)?.map(|v| v.value().to_owned()) } else { None };
            let (_, name) = split_parent(from)?;
            let seq = self.shards.log(tx, &ReplicaOp::Adopt { shard: target, cred, to: to.to_owned(), attr: attr.clone(), target: link })?;
            shards::start_moving(tx, attr.id, &shards::Moving { seq, parent: dir.id, name: name.to_owned() })?;
            Ok(seq)
        });
        let seq = match recorded {
            Ok(seq) => seq,
            Err(e) => return Response::error(e.code, e.message),
        };
        let pushed = self.shards.push(&self.store);
        match (self.shards.take_settled(seq), pushed) {
            (Some(r @ Response::Renamed { .. }), _) => self.grants.attach(cred, &MetaReq::Rename { from: from.into(), to: to.into() }, r),
            (Some(Response::Refused { code, message }), _) => Response::error(code, message),
            (Some(other), _) => Response::error(ErrorCode::Internal, format!("metadata shard {target} answered the rename of {from} with {other:?}")),
            (None, Err(e)) => Response::error(e.code, format!("{}; the rename of {from} is finished or undone when that shard answers", e.message)),
            (None, Ok(_)) => Response::error(ErrorCode::Io, format!("metadata shard {target} has not answered the rename of {from} yet; it is finished or undone when it does")),
        }
    }

    /// A new directory goes into the log, to be pushed to every shard.
    pub(super) fn log_mkdir(&self, tx: &redb::WriteTransaction, path: &str, attr: &FileAttr) -> Result<()> {
        if !self.shards.sharded() {
            return Ok(());
        }
        let (parent_comps, name) = split_parent(path)?;
        let parent = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? }.walk(Cred::new(0, 0), &parent_comps)?;
        self.shards.log(tx, &ReplicaOp::Mkdir { parent: parent.id, name: name.to_owned(), attr: attr.clone() })?;
        self.logged.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// An attribute change; a directory's goes into the log.
    pub(super) fn change(&self, tx: &redb::WriteTransaction, cred: Cred, target: attrs::Target<'_>, changes: &[AttrChange]) -> Result<Response> {
        let a = attrs::change(tx, cred, target, changes)?;
        if self.shards.sharded() && a.kind == FileKind::Dir {
            self.shards.log(tx, &ReplicaOp::SetAttr { dir: a.id, mode: a.mode, uid: a.uid, gid: a.gid, mtime_ns: a.mtime_ns, ctime_ns: a.ctime_ns })?;
            self.logged.store(true, Ordering::Relaxed);
        }
        Ok(Response::Attr(a))
    }

    /// After a mutation's commit: a directory change it logged is pushed
    /// to every shard before the answer. A shard that did not take it makes
    /// the answer an error (the change stays logged and is pushed again).
    pub(super) fn after_commit(&self, op: &MetaReq, r: Result<Response>) -> Result<Response> {
        // Only a directory's change is logged.
        let logged = match (op, &r) {
            (MetaReq::Mkdir { .. }, Ok(_)) => true,
            (MetaReq::Chmod { .. } | MetaReq::Chown { .. } | MetaReq::SetTimes { .. } | MetaReq::Change { .. }, Ok(Response::Attr(a))) => a.kind == FileKind::Dir,
            _ => false,
        };
        if logged && self.shards.sharded() {
            self.shards.push(&self.store)?;
        }
        // A rename's `Unlink` is pushed now, off the answer's path (a shard
        // that is down could hold a push for its timeout); one that does
        // not take it now takes it later (the rename stands either way).
        if matches!(op, MetaReq::Rename { .. }) && self.unlinks_logged.swap(false, Ordering::Relaxed) {
            let (shards, store) = (self.shards.clone(), self.store.clone());
            let pushed = std::thread::Builder::new().name("weft-meta-unlink".into()).spawn(move || {
                if let Err(e) = shards.push(&store) {
                    tracing::warn!(target: "weft::meta", error = %e, "a replaced name's link is not dropped on its file's shard yet");
                }
            });
            if let Err(e) = pushed {
                tracing::warn!(target: "weft::meta", error = %e, "cannot start a push: the pusher sends it within a second");
            }
        }
        r
    }

    /// rmdir on a sharded cluster: every local check, then `Mark` on every
    /// shard (one holding an entry of the directory refuses), then the
    /// removal, or `Unmark` if a shard refused.
    fn rmdir_sharded(&self, cred: Cred, path: &str) -> Result<()> {
        let (parent_comps, name) = split_parent(path)?;
        let (dir, mark) = self.commits.exclusive(|| -> Result<(FileId, u64)> {
            let db = self.store.db()?;
            let probe = db.begin_write()?;
            let found = entries::remove(&probe, cred, path, true);
            probe.abort()?;
            let dir = found?.attr.id;
            if home_shard(dir, self.shards.place.count) != self.shards.place.index {
                return Err(err(ErrorCode::Internal, format!("directory {path} was made by another shard")));
            }
            let tx = db.begin_write()?;
            if dir_moves::involves(&tx, dir)? {
                return Err(err(ErrorCode::Busy, format!("{path} is part of a directory rename; try again")));
            }
            tx.open_table(MARKED)?.insert(dir.0, 0)?;
            let seq = self.shards.log(&tx, &ReplicaOp::Mark { dir })?;
            tx.commit()?;
            self.pending.note_durable();
            Ok((dir, seq))
        })?;
        let pushed = self.shards.push(&self.store);
        // Whichever push carried the Mark kept its answers.
        let answers: Vec<(u32, bool)> = self.shards.take_votes(mark).into_iter().map(|(shard, r)| (shard, matches!(r, Response::Refused { .. }))).collect();
        if let Err(e) = pushed {
            self.unmark(dir);
            return Err(e);
        }
        let refused: Vec<u32> = answers.iter().filter(|(_, refused)| *refused).map(|(shard, _)| *shard).collect();
        if !refused.is_empty() || answers.len() != self.shards.place.peers.len() {
            self.unmark(dir);
            return Err(err(ErrorCode::NotEmpty, format!("{path} is not empty (metadata shards {refused:?} keep entries of it)")));
        }
        let removed = self.commits.exclusive(|| -> Result<()> {
            let db = self.store.db()?;
            let tx = db.begin_write()?;
            let parent = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? }.walk(cred, &parent_comps)?;
            entries::remove(&tx, cred, path, true)?;
            tx.open_table(MARKED)?.remove(dir.0)?;
            self.shards.log(&tx, &ReplicaOp::Rmdir { parent: parent.id, name: name.to_owned(), dir, time_ns: now_ns() })?;
            tx.commit()?;
            self.pending.note_durable();
            Ok(())
        });
        if let Err(e) = removed {
            self.unmark(dir);
            return Err(e);
        }
        self.shards.push(&self.store)
    }

    /// Abandons an rmdir: `dir` takes entries again here and, once pushed,
    /// on every shard (a failed push is retried in the background).
    fn unmark(&self, dir: FileId) {
        let logged = self.commits.exclusive(|| -> Result<()> {
            let db = self.store.db()?;
            let tx = db.begin_write()?;
            tx.open_table(MARKED)?.remove(dir.0)?;
            self.shards.log(&tx, &ReplicaOp::Unmark { dir })?;
            tx.commit()?;
            self.pending.note_durable();
            Ok(())
        });
        match logged.and_then(|()| self.shards.push(&self.store)) {
            Ok(_) => {}
            Err(e) => tracing::warn!(target: "weft::meta", dir = dir.0, error = %e, "an abandoned rmdir's unmark is not on every shard yet"),
        }
    }

    /// At start: rmdirs a stop cut short are abandoned, and a thread pushes
    /// whatever the log still holds until every shard took it.
    pub(super) fn start_sharded(&self) -> Result<()> {
        self.abandon_dir_moves()?;
        {
            let db = self.store.db()?;
            for dir in shards::own_marks(&db, &self.shards)? {
                tracing::info!(target: "weft::meta", dir = dir.0, "abandoning an rmdir cut short by a stop");
                let tx = db.begin_write()?;
                tx.open_table(MARKED)?.remove(dir.0)?;
                self.shards.log(&tx, &ReplicaOp::Unmark { dir })?;
                tx.commit()?;
            }
        }
        let store = Arc::downgrade(&self.store);
        let shards = Arc::downgrade(&self.shards);
        std::thread::Builder::new()
            .name("weft-meta-push".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(RETRY_EVERY);
                    let (Some(store), Some(shards)) = (store.upgrade(), shards.upgrade()) else { return };
                    if let Err(e) = shards.send_touches(&store) {
                        tracing::debug!(target: "weft::meta", error = %e, "directory times not told to every shard yet");
                    }
                    let pending = store.db().is_ok_and(|db| shards.log_pending(&db));
                    if pending && let Err(e) = shards.push(&store) {
                        tracing::debug!(target: "weft::meta", error = %e, "directory log not taken by every shard yet");
                    }
                }
            })
            .map_err(|e| err(ErrorCode::Io, format!("cannot start the directory log's pusher: {e}")))?;
        Ok(())
    }
}

/// What routing decided for a request this shard must not serve as on one shard.
enum Decision {
    /// Answer this (a route, an error).
    Answer(Box<Response>),
    /// A rename to a name the given shard keeps.
    RenameTo(u32),
    /// A directory's rename (this is the shard that makes them).
    RenameDir,
    /// A link to a name the given shard keeps (the file is kept here).
    LinkTo(u32),
    /// An unlink of this shard's copy of a name another shard keeps.
    UnlinkCopy,
    /// A rename of a name of a file with names on several shards, to a
    /// name the given shard keeps (`None`: this one).
    MoveName(Option<u32>),
}

fn shard_count_differs(client: u32, servers: u32) -> MetaError {
    err(ErrorCode::BadRequest, format!("this cluster has {servers} metadata shard(s) but the client's cluster file names {client}: use the cluster file the servers were started with"))
}
