//! The metadata service: directories, files, attributes and layouts in redb.
//!
//! Tables:
//!
//! | table      | key              | value                         |
//! |------------|------------------|-------------------------------|
//! | `inodes`   | `u64` file id    | `FileAttr` in its wire encoding |
//! | `dirents`  | `(u64 dir, name)`| `u64` child id                |
//! | `counters` | `"next_id"`, `"next_rr"`, `"id_ceiling"`, `"replica_seq"` | `u64` |
//! | `links`    | `u64` file id    | a symbolic link's target      |
//! | `orphans`  | `u64` file id    | removed file's data servers, its objects still to delete (see [`reaper`]) |
//!
//! and, on a cluster of several metadata shards, the directory log and
//! the records of renames across shards (see [`shards`]).
//!
//! Every mutation is one write transaction. With `meta_sync_window_ms = 0`
//! it is committed durably before the answer is sent, so an acknowledged
//! change survives a crash (DESIGN §4); with a window, durably within it
//! or at the next fsync (see [`sync_window`]).

mod attrs;
mod batch;
mod create;
mod dir_moves;
mod entries;
mod grants;
mod inline;
mod links_across;
mod name_moves;
mod migrate;
mod group_commit;
mod path;
mod pointer_log;
mod reaper;
mod reads;
mod replies;
mod sharded;
mod shards;
mod shared_pointers;
mod store;
mod sizes;
mod sync_window;
mod tables;

pub use path::components;
pub use reaper::ReapPlace;
pub use shards::ShardPlace;
pub use store::RESERVE_BYTES;
pub use tables::{MetaError, ROOT};
use tables::*;

use redb::{Database, ReadableTable, ReadableTableMetadata, WriteTransaction};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weft_wire::{AttrChange, Cred, ErrorCode, FileAttr, FileId, FileKind, LayoutHint, MetaReq, Response, ServerId, StripeLayout};
use attrs::Target;
use reads::{open_file, readdir, readlink, stat};
use create::NewEntry;

/// The metadata service of one server.
pub struct MetaService {
    store: Arc<store::Store>,
    data_servers: Vec<ServerId>,
    default_stripe_size: u64,
    pointers: shared_pointers::SharedPointers,
    /// Mutations waiting for, or in, a shared commit.
    commits: Arc<group_commit::GroupCommit<(Cred, MetaReq), Result<Response>>>,
    /// Commits are made durable within this (`None`: each before its answer).
    window: Option<Duration>,
    /// Whether a commit waits to be made durable (see [`sync_window`]).
    pending: Arc<sync_window::Pending>,
    /// Set inside a batch when it raised `id_ceiling` (that commit is made
    /// durable: no id under a durable ceiling is ever handed out twice).
    ceiling_moved: AtomicBool,
    /// One more than the highest id handed out by this process: a reopen
    /// after a storage error rolls `next_id` back with the lost changes,
    /// and their ids must not be handed out again.
    min_next_id: std::sync::atomic::AtomicU64,
    /// Sizes known without asking the data servers (see [`sizes`]).
    sizes: Arc<sizes::KnownSizes>,
    /// Capabilities for the data servers (see [`grants`]).
    grants: grants::Grants,
    /// This server's place among the metadata shards (see [`shards`]).
    shards: Arc<shards::Shards>,
    /// Set inside a batch when a change went into the directory log (that
    /// commit is made durable before any shard is told of it).
    logged: AtomicBool,
    /// Set when a rename replaced another shard's file's name (its stub):
    /// the `Unlink` it logged is pushed after the commit, not a second
    /// later by the pusher.
    unlinks_logged: AtomicBool,
    /// Wakes the thread deleting removed files' objects (see [`reaper`]).
    reap: Arc<reaper::Wake>,
    /// Held through a directory's rename (shard 0 makes them one at a
    /// time, see [`dir_moves`]).
    dir_renames: std::sync::Mutex<()>,
}

fn init_root(db: &Database) -> Result<()> {
    let tx = db.begin_write()?;
    {
        let mut inodes = tx.open_table(INODES)?;
        tx.open_table(DIRENTS)?;
        let mut counters = tx.open_table(COUNTERS)?;
        tx.open_table(LINKS)?;
        tx.open_table(shards::REPLOG)?;
        tx.open_table(shards::APPLIED)?;
        tx.open_table(shards::MARKED)?;
        tx.open_table(shards::MOVING)?;
        tx.open_table(shards::MOVED)?;
        tx.open_table(shards::ADOPTED)?;
        tx.open_table(links_across::STUBS)?;
        tx.open_table(links_across::LINKING)?;
        tx.open_table(links_across::UNNAMED)?;
        tx.open_table(name_moves::NAME_MOVES)?;
        tx.open_table(dir_moves::PREPARED)?;
        if inodes.get(ROOT.0)?.is_none() {
            let t = now_ns();
            let root = FileAttr { id: ROOT, kind: FileKind::Dir, mode: 0o777, uid: 0, gid: 0, mtime_ns: t, ctime_ns: t, nlink: 2, layout: None };
            inodes.insert(ROOT.0, encode_attr(&root).as_slice())?;
            counters.insert("next_id", ROOT.0 + 1)?;
            drop((inodes, counters));
            migrate::mark_new(&tx)?;
        } else {
            drop((inodes, counters));
            migrate::to_current(&tx)?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Ids are handed out under a durable ceiling, raised `ID_BLOCK` at a time
/// by a durable commit: a crash that loses the last window's creates
/// rolls `next_id` back, and ids of files lost with it may have objects on
/// the data servers, so a restart continues from the ceiling.
const ID_BLOCK: u64 = 4096;

/// Moves `next_id` up to the ceiling (durably); returns the first new id.
fn skip_to_ceiling(db: &Database) -> Result<u64> {
    // (Shards round each id up to their own residue when they hand it out.)
    let tx = db.begin_write()?;
    let first = {
        let mut counters = tx.open_table(COUNTERS)?;
        let next = counters.get("next_id")?.map_or(ROOT.0 + 1, |v| v.value());
        let ceiling = counters.get("id_ceiling")?.map_or(0, |v| v.value());
        let first = next.max(ceiling);
        counters.insert("next_id", first)?;
        first
    };
    tx.commit()?;
    Ok(first)
}

/// Whether answering this mutation must wait for its commit to be durable
/// even within a window. (Removals need not: their objects are deleted
/// by the service itself once they are, see [`reaper`].)
fn must_be_durable(op: &MetaReq) -> bool {
    matches!(op, MetaReq::Sync | MetaReq::Replica { .. })
}


/// What applying one mutation did besides answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Applied,
    /// A create that made a new file.
    Created,
    /// A tagged change answered from the answer kept when it was made.
    Replayed,
}



impl MetaService {
    /// Opens (or creates) the database in `dir/meta.redb`.
    /// Opens the service in `dir`. `window`: make commits durable within
    /// it rather than each before its answer (see [`sync_window`]).
    /// `place`: which metadata shard this is (see [`shards`]).
    pub fn open(dir: &Path, data_servers: Vec<ServerId>, default_stripe_size: u64, caps: weft_wire::CapKey, window: Option<Duration>, place: ShardPlace) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| err(ErrorCode::Io, format!("cannot create {}: {e}", dir.display())))?;
        let store = Arc::new(store::Store::open(dir)?);
        init_root(&*store.db()?)?;
        let first = skip_to_ceiling(&*store.db()?)?;
        let sizes = Arc::new(sizes::KnownSizes::new(first, place.index, place.count));
        let shards = Arc::new(shards::Shards::new(place, caps.clone(), sizes.clone())?);
        let svc = MetaService {
            store,
            data_servers,
            default_stripe_size,
            pointers: shared_pointers::SharedPointers::open(dir),
            commits: Default::default(),
            window: window.filter(|w| !w.is_zero()),
            pending: Default::default(),
            ceiling_moved: AtomicBool::new(false),
            min_next_id: std::sync::atomic::AtomicU64::new(first),
            sizes,
            grants: grants::Grants::new(caps),
            shards,
            logged: AtomicBool::new(false),
            unlinks_logged: AtomicBool::new(false),
            reap: Default::default(),
            dir_renames: Default::default(),
        };
        if let Some(w) = svc.window {
            sync_window::start(&svc.store, &svc.commits, &svc.pending, w).map_err(|e| err(ErrorCode::Io, format!("cannot start the metadata flusher: {e}")))?;
        }
        if svc.shards.sharded() {
            svc.start_sharded()?;
        }
        Ok(svc)
    }

    /// Starts deleting removed files' objects (see [`reaper`]): a server
    /// does; a service without it keeps their records.
    pub fn start_reaper(&self, place: ReapPlace) -> Result<()> {
        reaper::start(&self.store, &self.commits, &self.pending, self.window, self.grants.key().clone(), place, self.reap.clone()).map_err(|e| err(ErrorCode::Io, format!("cannot start deleting removed files' objects: {e}")))
    }

    /// Reopens the database after a storage error (see [`store`]). Commits
    /// not yet durable are gone with the old handle.
    fn reopen(&self, free_space: bool) {
        if self.pending.is_pending() {
            tracing::error!(target: "weft::meta", "metadata changes of the last window were not durable and are lost with the database's reopen");
            self.pending.note_lost();
        }
        self.store.recover(free_space);
        self.pending.note_durable();
    }

    /// Makes every commit so far durable, between batches, then runs
    /// `then` (with whether it worked) still between batches: a clean exit
    /// passes `exit`, so no change is answered after the last flush.
    pub fn flush_then(&self, then: impl FnOnce(bool)) {
        self.commits.exclusive(|| {
            let ok = self.window.is_none()
                || match sync_window::durable_empty_commit(&self.store, &self.pending) {
                    Ok(()) => {
                        self.pending.note_durable();
                        true
                    }
                    Err(e) => {
                        tracing::error!(target: "weft::meta", error = %e, "cannot make metadata changes durable");
                        false
                    }
                };
            then(ok)
        });
    }

    /// Is there a file or directory with this id?
    /// Whether the server's event loop may answer `op` itself (see
    /// [`reads::answers_on_the_loop`]): a cheap read, and the database
    /// open and not being reopened (the loop never waits for that).
    pub fn answers_on_the_loop(&self, op: &MetaReq) -> bool {
        reads::answers_on_the_loop(op) && self.store.at_hand()
    }

    /// Removed files whose objects still wait to be deleted (a data server
    /// that is down keeps them), as of the deleting thread's last round.
    pub fn orphans_waiting(&self) -> u64 {
        self.reap.waiting()
    }

    pub fn file_exists(&self, id: FileId) -> bool {
        let get = || -> Result<bool> { Ok(self.store.db()?.begin_read()?.open_table(INODES)?.get(id.0)?.is_some()) };
        get().unwrap_or(false)
    }

    /// Shared file pointers refused by their quota since start.
    pub fn quota_refusals(&self) -> u64 {
        self.pointers.refused()
    }

    /// How long the capabilities it signs live (`ServerConfig::cap_lifetime`).
    pub fn set_cap_lifetime(&mut self, lifetime: Duration) {
        self.grants.set_lifetime(lifetime);
    }

    /// Number of files and directories, root included.
    pub fn file_count(&self) -> u64 {
        let count = || -> Result<u64> { Ok(self.store.db()?.begin_read()?.open_table(INODES)?.len()?) };
        count().unwrap_or(0)
    }

    /// Serves one request; every failure becomes an error response. A
    /// storage failure reopens the database (see [`store`]); a delete that
    /// failed for lack of space runs once more with the reserve released.
    pub fn handle(&self, cred: Cred, op: MetaReq) -> Response {
        // First: on a sharded cluster even requests served from memory
        // (a close, a renewal, a shared pointer) may be another shard's.
        // Routed and split across shards by the request itself; a tag is
        // honoured where the change is this shard's alone (below).
        if let Some(answer) = self.sharded_request(cred, op.untagged()) {
            return answer;
        }
        // No database: the pointer table answers on its own (and logs the
        // change first, `pointer_log.rs`).
        let tag = match &op {
            MetaReq::Once { client, seq, .. } => Some((*client, *seq)),
            _ => None,
        };
        if let MetaReq::SharedPointer { token, op } = *op.untagged() {
            return match self.pointers.apply(cred.uid, token, op, tag) {
                Ok(value) => Response::Pointer { value },
                Err((code, message)) => Response::error(code, message),
            };
        }
        if let MetaReq::Close { file, .. } | MetaReq::SetSize { file, .. } = op {
            // Only someone who may write the file speaks for its writers.
            if let Err(e) = self.may_write(cred, file) {
                return Response::error(e.code, e.message);
            }
            return match op {
                MetaReq::Close { wrote, size, .. } => match self.sizes.closed(file, wrote, size) {
                    sizes::AfterClose::Nothing => Response::Ok,
                    sizes::AfterClose::Measure { epoch, sole } => Response::Measure { epoch, sole },
                },
                MetaReq::SetSize { epoch, size, .. } => {
                    self.sizes.measured(file, epoch, size);
                    Response::Ok
                }
                _ => unreachable!("matched above"),
            };
        }
        // Every commit is durable already unless there is a window.
        if matches!(op, MetaReq::Sync) && self.window.is_none() {
            return Response::Ok;
        }
        if let MetaReq::Renew { old, path } = op {
            let renewed = self.store.db().map_err(MetaError::from).and_then(|db| self.grants.renew(&db, cred, &old, &path, self.shards.sharded().then_some(&*self.shards)));
            return renewed.unwrap_or_else(|e| Response::error(e.code, e.message));
        }
        // The requests whose answer carries a capability.
        let granting = matches!(op.untagged(), MetaReq::Create { .. } | MetaReq::Open { .. } | MetaReq::Unlink { .. } | MetaReq::Rename { .. } | MetaReq::StatSize { .. } | MetaReq::StatId { .. }).then(|| op.untagged().clone());
        let r = match op {
            MetaReq::Stat { .. } | MetaReq::StatSize { .. } | MetaReq::StatId { .. } | MetaReq::Open { .. } | MetaReq::Readdir { .. } | MetaReq::Readlink { .. } => {
                let r = self.store.db().map_err(MetaError::from).and_then(|db| self.dispatch(&db, cred, &op));
                if let (MetaReq::Open { write: true, .. }, Ok(Response::Attr(a))) = (&op, &r) {
                    self.sizes.opened(a.id, false);
                }
                r
            }
            MetaReq::ReaddirShard { .. } => self.store.db().map_err(MetaError::from).and_then(|db| self.dispatch(&db, cred, &op)),
            _ => {
                let r = self.submit(cred, op.clone());
                return self.answer_change(cred, &op, r);
            }
        };
        match (r, granting) {
            (Ok(rsp), Some(op)) => self.grants.attach(cred, &op, rsp),
            (r, _) => r.unwrap_or_else(MetaError::into_response),
        }
    }

    /// The answer to change `op` once committed with result `r`.
    fn answer_change(&self, cred: Cred, op: &MetaReq, r: Result<Response>) -> Response {
        let r = self.after_commit(op.untagged(), r);
        let r = self.with_size(op.untagged(), r);
        let granting = matches!(op.untagged(), MetaReq::Create { .. } | MetaReq::Unlink { .. } | MetaReq::Rename { .. });
        match r {
            Ok(rsp) if granting => self.grants.attach(cred, op.untagged(), rsp),
            r => r.unwrap_or_else(MetaError::into_response),
        }
    }

    /// A file's attribute change (`Change`) answered with its size when the
    /// service knows it (no writer open), as `StatSize` would: a mount's
    /// setattr (tar sets times, owner and mode of each file) then needs no
    /// stat of its own after it.
    fn with_size(&self, op: &MetaReq, r: Result<Response>) -> Result<Response> {
        match (op, r) {
            (MetaReq::Change { .. }, Ok(Response::Attr(attr))) if attr.kind == FileKind::File => {
                let size = self.sizes.known(attr.id);
                Ok(Response::Stat { attr, size, cap: None })
            }
            (_, r) => r,
        }
    }

    /// One change made alone, between group commits, in one durable
    /// transaction (the steps of changes across shards, which log and
    /// push): the directories whose entries it changed are told to their
    /// homes (`Touch`). An error aborts it.
    fn commit_alone<T>(&self, change: impl FnOnce(&WriteTransaction) -> Result<T>) -> Result<T> {
        self.commits.exclusive(|| {
            let db = self.store.db()?;
            let tx = db.begin_write()?;
            tables::CHANGED_DIRS.with(|c| c.borrow_mut().clear());
            let r = change(&tx)?;
            self.pending.replies.flush(&tx)?;
            tx.commit()?;
            self.pending.note_durable();
            self.shards.touched(tables::CHANGED_DIRS.with(|c| std::mem::take(&mut *c.borrow_mut())));
            Ok(r)
        })
    }

    /// A mutation, in the next group commit.
    fn submit(&self, cred: Cred, op: MetaReq) -> Result<Response> {
        self.commits.submit(
            (cred, op),
            |batch| self.commit_batch(batch),
            |_| Err(err(ErrorCode::Internal, "the metadata commit this change was part of failed inside the server (a bug; see its log): the change was not made")),
        )
    }

    /// One mutation, and what it did besides answering. A tagged one
    /// (`Once`) is answered from the answer kept under its tag if there is
    /// one, else applied and its answer kept, in the same transaction.
    fn apply(&self, tx: &WriteTransaction, cred: Cred, op: &MetaReq, kept: Option<&mut replies::Replies<'_>>) -> Result<(Response, Outcome)> {
        if let MetaReq::Once { client, seq, op } = op {
            let kept = kept.ok_or_else(|| err(ErrorCode::Internal, "a tagged change without its batch's kept answers"))?;
            if let Some(answer) = kept.kept(*client, *seq, cred, op)? {
                let answer = match (&**op, answer) {
                    (MetaReq::Create { path, .. }, Response::Attr(a)) => Response::Attr(self.replayed_create(cred, path, &a)?),
                    (_, answer) => answer,
                };
                return Ok((answer, Outcome::Replayed));
            }
            let (answer, outcome) = self.apply(tx, cred, op, None)?;
            kept.keep(*client, *seq, cred, op, &answer);
            return Ok((answer, outcome));
        }
        if let MetaReq::Create { path, mode, exclusive, hint } = op {
            let (a, new) = self.insert_new_file(tx, cred, path, NewEntry { kind: FileKind::File, mode: *mode, exclusive: *exclusive, hint: *hint, target: None })?;
            return Ok((Response::Attr(a), if new { Outcome::Created } else { Outcome::Applied }));
        }
        self.apply_other(tx, cred, op).map(|r| (r, Outcome::Applied))
    }

    fn apply_other(&self, tx: &WriteTransaction, cred: Cred, op: &MetaReq) -> Result<Response> {
        match op {
            MetaReq::Mkdir { path, mode } => {
                let a = self.insert_new(tx, cred, path, NewEntry { kind: FileKind::Dir, mode: *mode, exclusive: true, hint: LayoutHint::default(), target: None })?;
                self.log_mkdir(tx, path, &a)?;
                Ok(Response::Attr(a))
            }
            MetaReq::Replica { coord, seq, op, .. } => self.shards.apply(tx, *coord, *seq, op),
            // Links' own permission bits are never used (as on Linux).
            MetaReq::Symlink { path, target } => self
                .insert_new(tx, cred, path, NewEntry { kind: FileKind::Symlink, mode: 0o777, exclusive: true, hint: LayoutHint::default(), target: Some(target) })
                .map(Response::Attr),
            // The file's attributes only with its last name (the service
            // deletes its objects, `reaper`; `grants` strips them from the
            // answer); the directory's new time for the asker's cache.
            MetaReq::Unlink { path } => entries::remove(tx, cred, path, false).map(|r| Response::Unlinked { file: r.last.then_some(r.attr), at_ns: r.at_ns }),
            MetaReq::Rmdir { path } => entries::remove(tx, cred, path, true).map(|_| Response::Ok),
            MetaReq::Link { from, to } => entries::link(tx, cred, from, to, |dir, name| self.check_owner(dir, name)).map(|(a, _)| Response::Attr(a)),
            // Its batch's commit is made durable (`must_be_durable`).
            MetaReq::Sync => Ok(Response::Ok),
            MetaReq::Mknod { path, mode, kind } => match kind {
                FileKind::Fifo | FileKind::Socket => self
                    .insert_new(tx, cred, path, NewEntry { kind: *kind, mode: *mode, exclusive: true, hint: LayoutHint::default(), target: None })
                    .map(Response::Attr),
                _ => Err(err(ErrorCode::BadRequest, "mknod makes FIFOs and sockets only")),
            },
            // A replaced file's objects are the service's to delete
            // (`reaper`); the client is told of none (`grants`).
            MetaReq::Rename { from, to } => {
                // Only a sharded cluster has stubs (and a log).
                let logged_before = if self.shards.sharded() { Some(self.shards.log_seq(tx)?) } else { None };
                let r = dir_moves::not_a_directory(tx, &self.shards, from)
                    .and_then(|()| entries::rename(tx, &self.shards, cred, from, to, |dir, name| self.check_owner(dir, name)))
                    .map(|replaced| Response::Renamed { replaced: replaced.map(|a| (a.clone(), weft_wire::Capability::none(a.id))) });
                // Over a stub: the `Unlink` it logged must be durable
                // before any shard can be pushed it.
                if let Some(before) = logged_before
                    && self.shards.log_seq(tx)? != before
                {
                    self.logged.store(true, std::sync::atomic::Ordering::Relaxed);
                    self.unlinks_logged.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                r
            }
            MetaReq::Chmod { path, mode } => self.change(tx, cred, Target::Path(path), &[AttrChange::Mode(*mode)]),
            MetaReq::SetTimes { path, mtime_ns } => self.change(tx, cred, Target::Path(path), &[AttrChange::Mtime(*mtime_ns)]),
            MetaReq::Chown { path, uid, gid } => self.change(tx, cred, Target::Path(path), &[AttrChange::Owner { uid: *uid, gid: *gid }]),
            MetaReq::Change { file, changes } => self.change(tx, cred, Target::Id(*file), changes),
            _ => Err(err(ErrorCode::Internal, "not a mutation")),
        }
    }

    /// A create answered again from its kept answer `made`: the file as it
    /// is now, if `path` still names it and `cred` may still write it (its
    /// owner always may, as with a renewal), since the answer carries a
    /// capability made from these attributes.
    fn replayed_create(&self, cred: Cred, path: &str, made: &FileAttr) -> Result<FileAttr> {
        let now = stat(&*self.store.db()?, cred, path, self.routing())?;
        if now.id != made.id {
            return Err(err(ErrorCode::NotFound, format!("{path} names another file than the one this create made")));
        }
        if now.uid != cred.uid && !tables::may(cred, &now, W) {
            return Err(err(ErrorCode::Permission, format!("{path}: no longer writable by uid {}", cred.uid)));
        }
        Ok(now)
    }

    /// Whether this shard keeps entry `name` of `dir`, else the route (as
    /// an error): a request routed on an earlier snapshot may find the
    /// directory made anew since.
    fn check_owner(&self, dir: FileId, name: &str) -> Result<()> {
        match self.routing().and_then(|s| s.route(dir, name)) {
            Some(Response::Route { shard, shards, parent }) => Err(tables::routed(shard, shards, parent)),
            _ => Ok(()),
        }
    }

    /// The shards, when there are several (reads route as they walk).
    fn routing(&self) -> Option<&shards::Shards> {
        self.shards.sharded().then_some(&*self.shards)
    }

    /// Whether `cred` may write file `id` (which must exist).
    fn may_write(&self, cred: Cred, id: FileId) -> Result<()> {
        let tx = self.store.db()?.begin_read()?;
        let inodes = tx.open_table(INODES)?;
        let attr = match inodes.get(id.0)? {
            Some(v) => decode_attr(v.value())?,
            None => return Err(err(ErrorCode::NotFound, format!("file {} does not exist", id.0))),
        };
        check(cred, &attr, W, "write this file")
    }

    /// Read-only requests, on a read transaction of their own.
    fn dispatch(&self, db: &Database, cred: Cred, op: &MetaReq) -> Result<Response> {
        match op {
            MetaReq::Stat { path } => stat(db, cred, path, self.routing()).map(Response::Attr),
            MetaReq::StatSize { path } => stat(db, cred, path, self.routing()).map(|attr| {
                let size = if attr.kind == FileKind::File { self.sizes.known(attr.id) } else { None };
                Response::Stat { attr, size, cap: None }
            }),
            MetaReq::StatId { file } => {
                if cred.uid != 0 {
                    return Err(err(ErrorCode::Permission, "only root (a mount) may stat a file by its id: an id says nothing of the path's search permissions"));
                }
                let attr = read_tables(db)?.inodes.get(file.0)?.map(|v| decode_attr(v.value())).transpose()?;
                let attr = attr.ok_or_else(|| err(ErrorCode::NotFound, format!("file {} does not exist", file.0)))?;
                let size = if attr.kind == FileKind::File { self.sizes.known(attr.id) } else { None };
                Ok(Response::Stat { attr, size, cap: None })
            }
            MetaReq::Open { path, write } => open_file(db, cred, path, *write, self.routing()).map(Response::Attr),
            MetaReq::Readdir { path, after, max } | MetaReq::ReaddirShard { path, after, max, .. } => readdir(db, cred, path, after, *max, self.shards.sharded().then_some(&*self.shards)).map(|r| match r {
                Response::Entries { mut entries, more } => {
                    self.sizes.fill(&mut entries);
                    Response::Entries { entries, more }
                }
                other => other,
            }),
            MetaReq::Readlink { path } => readlink(db, cred, path, self.routing()).map(|target| Response::Link { target }),
            _ => Err(err(ErrorCode::Internal, "not a read-only request")),
        }
    }
}


#[cfg(test)]
mod window_tests {
    use super::*;

    fn create(m: &MetaService, path: &str) -> FileAttr {
        match m.handle(Cred::new(0, 0), MetaReq::Create { path: path.into(), mode: 0o644, exclusive: true, hint: LayoutHint::default() }) {
            Response::Granted { attr, .. } => attr,
            other => panic!("create {path}: {other:?}"),
        }
    }

    /// A reopen after a storage error may drop the changes of the window,
    /// `next_id` with them: the ids they used are not handed out again
    /// (their objects may exist), and the next Sync reports the possible
    /// loss. (Here the old handle closes cleanly and keeps them; after a
    /// real storage error it cannot.)
    #[test]
    fn a_reopen_within_a_window_reuses_no_id_and_the_next_sync_reports_the_loss() {
        let dir = std::env::temp_dir().join(format!("weft-window-{}", rand::random::<u64>()));
        let key = weft_wire::CapKey::derive(&weft_wire::Secret::new(*b"0123456789abcdef"));
        let m = MetaService::open(&dir, vec![ServerId(1)], 65536, key, Some(Duration::from_secs(60)), ShardPlace::alone()).unwrap();
        let first = create(&m, "/a");
        // The first create raised the id ceiling (a durable commit); this
        // one is only in the window.
        let second = create(&m, "/b");
        m.commits.exclusive(|| m.reopen(false));
        let third = create(&m, "/c");
        assert!(third.id > second.id && second.id > first.id, "ids {} {} {}", first.id.0, second.id.0, third.id.0);
        assert!(matches!(m.handle(Cred::new(0, 0), MetaReq::Sync), Response::Error { code: ErrorCode::Io, .. }), "the loss is reported");
        assert!(matches!(m.handle(Cred::new(0, 0), MetaReq::Sync), Response::Ok), "once");
        drop(m);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An unlink of a file's last name tells its directory's new time and
    /// never the file (its layout is the service's to delete), answered
    /// first or again to a resend.
    #[test]
    fn an_unlink_tells_the_directorys_time_and_never_the_file() {
        let dir = std::env::temp_dir().join(format!("weft-unlinked-{}", rand::random::<u64>()));
        let key = weft_wire::CapKey::derive(&weft_wire::Secret::new(*b"0123456789abcdef"));
        let m = MetaService::open(&dir, vec![ServerId(1)], 65536, key, Some(Duration::from_secs(60)), ShardPlace::alone()).unwrap();
        let root = Cred::new(0, 0);
        let dir_times = |m: &MetaService| match m.handle(root, MetaReq::Stat { path: "/".into() }) {
            Response::Attr(a) | Response::Stat { attr: a, .. } => (a.mtime_ns, a.ctime_ns),
            other => panic!("stat /: {other:?}"),
        };
        create(&m, "/f");
        match m.handle(root, MetaReq::Unlink { path: "/f".into() }) {
            Response::Unlinked { file: None, at_ns } => assert_eq!(dir_times(&m), (at_ns, at_ns)),
            other => panic!("unlink /f: {other:?}"),
        }
        create(&m, "/g");
        let tagged = || MetaReq::Once { client: 7, seq: 1, op: Box::new(MetaReq::Unlink { path: "/g".into() }) };
        let first = m.handle(root, tagged());
        assert!(matches!(first, Response::Unlinked { file: None, .. }), "{first:?}");
        assert_eq!(m.handle(root, tagged()), first, "a resend is answered the same");
        drop(m);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
