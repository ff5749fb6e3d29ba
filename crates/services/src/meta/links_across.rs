//! Hard links across metadata shards.
//!
//! A file lives on one shard: the one that keeps its first name (or took
//! it in a rename). A link whose new name another shard keeps is made in
//! two steps, as a rename across shards is. The file's shard (the
//! coordinator) checks link(2)'s rules, counts the link, keeps a copy of
//! the name among its own entries (so a request on the name, sent on to
//! it, resolves there) and logs a `Name` for the name's shard. That shard
//! checks its directory (the name free, write permission) and keeps the
//! name as a stub naming the file's shard: listings show it, and requests
//! on it are sent there. If it refuses, the coordinator takes the count
//! and the copy back. Until the answer the file changes no further
//! (`Busy`), as a file being renamed across shards.
//!
//! Removing such a name is made by the coordinator (the stub sends it
//! there) and told to the name's shard (`Unname`) before the answer.
//! Renaming such a name moves the name, never the file (`name_moves`).
//! A rename over a stub is made by the name's shard: the stub goes with
//! the rename, and the file's shard is told (`Unlink`, logged with it),
//! which drops its copy of the name and one link when it takes that (the
//! file goes with its last name), only if its copy is still the one the
//! stub's `Name` made (`COPIES`; a name moving away settles it with the
//! move, `UNLINKED_MOVING`). Until then the file's link count there is
//! one too many: never too few, so no data goes early.

use super::shards::{refused, Answer, Moving, Shards};
use super::tables::{decode_attr, err, now_ns, read_tables, split_parent, MetaError, Result, Tables, DIRENTS, INODES};
use super::{entries, MetaService};
use redb::{Database, ReadableTable, TableDefinition, WriteTransaction};
use weft_wire::{Cred, ErrorCode, FileAttr, FileId, FileKind, MetaReq, ReplicaOp, Response};

/// On a name's shard: names of files another shard keeps, (directory,
/// name) to [`Stub`].
pub(super) const STUBS: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("name_stubs");
/// On the coordinator: links whose name's shard has not answered yet,
/// file id to the `Name`'s sequence number and the name (a [`Moving`]).
pub(super) const LINKING: TableDefinition<u64, &[u8]> = TableDefinition::new("linking_files");
/// On the coordinator: copies of names removed whose `Unname` not every
/// shard took yet, (directory, name) to its sequence number. A request the
/// name's shard's stub still sends here is answered here (not found), not
/// sent back.
pub(super) const UNNAMED: TableDefinition<(u64, &str), u64> = TableDefinition::new("unnamed_copies");

/// On the file's shard: which `Name` (its sequence number here) made the
/// copy of another shard's name that stands now, (directory, name) to it;
/// an `Unlink` drops a copy only if it names the same `Name` (a copy made
/// since, by a later link, is another name).
pub(super) const COPIES: TableDefinition<(u64, &str), u64> = TableDefinition::new("name_copies");
/// On the file's shard: files whose name moving away was replaced on its
/// own shard, or whose directory went, while the move waited (an
/// `Unlink` or a `Rmdir` came); the move's settling drops that name's
/// link if the move did not take it.
pub(super) const UNLINKED_MOVING: TableDefinition<u64, u64> = TableDefinition::new("unlinked_moving");

/// A name kept here of a file shard `shard` keeps; `attr` as it was when
/// the name was made (a listing shows it, flagged, and the client asks);
/// `made`: the sequence number of the file's shard's `Name` that made it
/// (0 for stubs made before it was kept).
pub(super) struct Stub {
    pub(super) shard: u32,
    pub(super) attr: FileAttr,
    pub(super) made: u64,
}

impl Stub {
    fn encode(&self) -> Vec<u8> {
        let mut e = weft_wire::Encoder::new();
        e.u32(self.shard);
        self.attr.encode(&mut e);
        e.u64(self.made);
        e.finish()
    }

    fn decode(b: &[u8]) -> Result<Self> {
        let mut d = weft_wire::Decoder::new(b);
        let shard = d.u32().map_err(corrupt)?;
        let attr = FileAttr::decode(&mut d).map_err(corrupt)?;
        let made = match d.rest() {
            [] => 0,
            rest => u64::from_le_bytes(rest.try_into().map_err(|_| err(ErrorCode::Internal, "corrupt name stub: a bad trailer"))?),
        };
        Ok(Stub { shard, attr, made })
    }
}

fn corrupt(e: weft_wire::DecodeError) -> MetaError {
    err(ErrorCode::Internal, format!("corrupt name stub: {e}"))
}

/// The stub entry `name` of `dir` is, if it is one.
pub(super) fn stub(db: &Database, dir: FileId, name: &str) -> Result<Option<Stub>> {
    let tx = db.begin_read()?;
    let stubs = tx.open_table(STUBS)?;
    stubs.get((dir.0, name))?.map(|v| Stub::decode(v.value())).transpose()
}

/// The answer sending a request on stub `name` of `dir` to the shard that
/// keeps its file; `None` if it is not a stub.
pub(super) fn stub_route(db: &Database, shards: &Shards, dir: FileId, name: &str) -> Result<Option<Response>> {
    Ok(stub(db, dir, name)?.map(|s| Response::Route { shard: s.shard, shards: shards.place.count, parent: dir }))
}

/// Whether entry `name` of `dir` (a file's, not a directory's) is the
/// coordinator's copy of a name another shard keeps.
fn is_copy(shards: &Shards, dir: FileId, name: &str, attr: &FileAttr) -> bool {
    shards.sharded() && attr.kind != FileKind::Dir && !shards.owns(dir, name)
}

/// Refuses a rename across shards of `name` of `dir` when it is such a copy.
pub(super) fn check_not_copy(shards: &Shards, dir: FileId, name: &str, attr: &FileAttr, path: &str) -> Result<()> {
    if is_copy(shards, dir, name, attr) {
        return Err(err(ErrorCode::CrossShard, format!("{path} is a name of a file with names on several metadata shards: renaming it is not built yet (remove it, or rename another of its names)")));
    }
    Ok(())
}

/// Whether a request on entry `name` of `dir`, which this shard has no
/// entry for, is answered here: the copy of a name removed here whose
/// removal its own shard has not taken yet (its stub sends requests here).
pub(super) fn unnamed(db: &Database, dir: FileId, name: &str) -> Result<bool> {
    Ok(db.begin_read()?.open_table(UNNAMED)?.get((dir.0, name))?.is_some())
}

/// The route for a request on the copy here (entry `name` of `dir`, of
/// file `id`) of a name another shard keeps, while the link that made it
/// waits for that shard's answer: the name is not made yet, so the
/// request goes to the name's shard (which does not know it, or sends it
/// back once it does). `None`: serve it here.
pub(super) fn pending_copy_route(db: &Database, shards: &Shards, dir: FileId, name: &str, id: FileId) -> Result<Option<Response>> {
    if !shards.sharded() || shards.owns(dir, name) {
        return Ok(None);
    }
    let tx = db.begin_read()?;
    let linking = match tx.open_table(LINKING)?.get(id.0)? {
        Some(v) => Moving::decode(v.value()).map(|m| m.parent == dir && m.name == name)?,
        None => false,
    };
    let pending = linking || super::name_moves::pending_to(db, id, dir, name)?;
    Ok(if pending { shards.route(dir, name) } else { None })
}

/// Forgets the removed copies whose `Unname` every shard took (`taken`:
/// the last log entry every shard has).
pub(super) fn forget_unnamed(tx: &WriteTransaction, taken: u64) -> Result<()> {
    let mut unnamed = tx.open_table(UNNAMED)?;
    let done: Vec<(u64, String)> = unnamed
        .iter()?
        .filter_map(|item| match item {
            Ok((k, v)) if v.value() <= taken => Some(Ok((k.value().0, k.value().1.to_owned()))),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect::<std::result::Result<_, _>>()?;
    for (dir, name) in done {
        unnamed.remove((dir, name.as_str()))?;
    }
    Ok(())
}

/// The copy `name` of `dir` (of `file`) is gone here: its own shard is
/// told (`Unname`, logged in `tx`), and until every shard took that, a
/// request its stub still sends here is answered here (`UNNAMED`).
pub(super) fn unname(tx: &WriteTransaction, shards: &Shards, dir: FileId, name: &str, file: FileId) -> Result<()> {
    let shard = weft_wire::shard::entry_shard(dir, name, shards.place.count);
    let seq = shards.log(tx, &ReplicaOp::Unname { shard, parent: dir, name: name.to_owned(), file, time_ns: now_ns() })?;
    tx.open_table(UNNAMED)?.insert((dir.0, name), seq)?;
    Ok(())
}

/// Refuses a change of a file whose link across shards waits for its answer.
pub(super) fn check_not_linking(tx: &WriteTransaction, id: FileId, path: &str) -> Result<()> {
    if tx.open_table(LINKING)?.get(id.0)?.is_some() {
        return Err(err(ErrorCode::Busy, format!("{path} is being linked on another metadata shard; try again")));
    }
    Ok(())
}

impl MetaService {
    /// Whether `path` names, here, the copy of a name another shard keeps.
    pub(super) fn names_copy(&self, db: &Database, path: &str) -> Result<bool> {
        let Ok((parent_comps, name)) = split_parent(path) else { return Ok(false) };
        let t = read_tables(db)?;
        let Ok(parent) = t.walk(Cred::new(0, 0), &parent_comps) else { return Ok(false) };
        let Some(id) = t.child(parent.id.0, name)? else { return Ok(false) };
        let Some(v) = t.inodes.get(id)? else { return Ok(false) };
        Ok(is_copy(&self.shards, parent.id, name, &decode_attr(v.value())?))
    }

    /// link(2) of `from` (a file kept here) to `to`, a name shard
    /// `target` keeps: counted and logged here, then made there; undone if
    /// it refuses (see the module's comment).
    pub(super) fn link_across(&self, cred: Cred, from: &str, to: &str, target: u32) -> Response {
        let recorded = self.commit_alone(|tx| -> Result<(u64, FileAttr)> {
            // The copy of the name is made with link(2)'s checks here; the
            // name's shard checks the name itself.
            let (attr, dir) = entries::link(tx, cred, from, to, |_, _| Ok(()))?;
            let (_, name) = split_parent(to)?;
            let seq = self.shards.log(tx, &ReplicaOp::Name { shard: target, parent: dir, cred, to: to.to_owned(), attr: attr.clone(), replace: false })?;
            tx.open_table(LINKING)?.insert(attr.id.0, Moving { seq, parent: dir, name: name.to_owned() }.encode().as_slice())?;
            Ok((seq, attr))
        });
        let (seq, attr) = match recorded {
            Ok(r) => r,
            Err(e) => return e.into_response(),
        };
        let pushed = self.shards.push(&self.store);
        match (self.shards.take_settled(seq), pushed) {
            (Some(Response::Ok), _) => Response::Attr(attr),
            (Some(Response::Refused { code, message }), _) => Response::error(code, message),
            (Some(other), _) => Response::error(ErrorCode::Internal, format!("metadata shard {target} answered the link {to} with {other:?}")),
            (None, Err(e)) => Response::error(e.code, format!("{}; the link {to} is made or undone when that shard answers", e.message)),
            (None, Ok(_)) => Response::error(ErrorCode::Io, format!("metadata shard {target} has not answered the link {to} yet; it is made or undone when it does")),
        }
    }

    /// unlink(2) of the copy here of a name another shard keeps: removed
    /// here (the link count is kept here) and pushed to that shard before
    /// the answer. A shard that does not take it now takes it when it
    /// answers; meanwhile its stub still sends requests on the name here,
    /// which answers them (not found) from `UNNAMED`.
    pub(super) fn unlink_copy(&self, cred: Cred, path: &str) -> Response {
        let removed = self.commit_alone(|tx| -> Result<entries::Removed> {
            let r = entries::remove(tx, cred, path, false)?;
            let (_, name) = split_parent(path)?;
            if is_copy(&self.shards, r.parent, name, &r.attr) {
                unname(tx, &self.shards, r.parent, name, r.attr.id)?;
                tx.open_table(COPIES)?.remove((r.parent.0, name))?;
            }
            Ok(r)
        });
        let removed = match removed {
            Ok(r) => r,
            Err(e) => return e.into_response(),
        };
        if let Err(e) = self.shards.push(&self.store) {
            tracing::warn!(target: "weft::meta", path, error = %e, "a removed name is not off its own shard's listing yet");
        }
        if !removed.last {
            return Response::Unlinked { file: None, at_ns: removed.at_ns };
        }
        self.sizes.forget(removed.attr.id);
        let op = MetaReq::Unlink { path: path.to_owned() };
        self.grants.attach(cred, &op, Response::Unlinked { file: Some(removed.attr), at_ns: removed.at_ns })
    }
}

/// The name's shard's half of a link across shards (a pushed `Name` from
/// `coord`): `to` becomes a stub for file `attr`, with link(2)'s checks of
/// its directory as `cred`, which must still be directory `parent` (the
/// one the file's shard keeps its copy of the name in). With `replace` (a
/// rename's), a file `to` names is replaced as rename(2) does; returned if
/// that was its last name (its objects are deleted by the service once this is durable). The
/// outer error is the database's; the inner one the refusal.
#[allow(clippy::too_many_arguments)]
pub(super) fn take_name(tx: &WriteTransaction, shards: &Shards, (coord, seq): (u32, u64), parent: FileId, cred: Cred, to: &str, attr: &FileAttr, replace: bool) -> Result<std::result::Result<Option<FileAttr>, MetaError>> {
    let made = (|| -> Result<Option<FileAttr>> {
        let (to_parent, to_name) = split_parent(to)?;
        let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
        let dir = t.parent_for_change(cred, &to_parent)?;
        if dir.id != parent {
            return Err(err(ErrorCode::NotFound, format!("the directory of {to} was removed or replaced while the link was being made")));
        }
        super::shards::check_unmarked(tx, dir.id, to_name, to)?;
        if !shards.owns(dir.id, to_name) {
            return Err(err(ErrorCode::CrossShard, format!("{to} is kept by another metadata shard than the link was sent to (its directory was made anew); try again")));
        }
        if t.child(dir.id.0, to_name)?.is_some() && !replace {
            return Err(err(ErrorCode::Exists, format!("{to} already exists")));
        }
        if t.inodes.get(attr.id.0)?.is_some() {
            return Err(err(ErrorCode::Internal, format!("file {} is kept by this shard too", attr.id.0)));
        }
        let now = now_ns();
        let old = entries::replaceable(tx, &t, cred, &dir, to_name, to, false, attr.id)?;
        let replaced = entries::drop_replaced(tx, &mut t, shards, old, dir.id, to_name, now)?;
        t.dirents.insert((dir.id.0, to_name), attr.id.0)?;
        tx.open_table(STUBS)?.insert((dir.id.0, to_name), Stub { shard: coord, attr: attr.clone(), made: seq }.encode().as_slice())?;
        t.entries_changed(dir.id.0, 0, now)?;
        drop(t);
        let Some((true, old)) = replaced else { return Ok(None) };
        entries::forget_inode(tx, &old)?;
        Ok((old.kind == FileKind::File).then_some(old))
    })();
    match made {
        Err(e) if e.storage => Err(e),
        r => Ok(r),
    }
}

/// A rename's new name `to`, entry `name` of `dir`, is a stub here (or
/// an entry with no inode here): what it replaces, checked as rename(2)
/// checks a file's name (not by a directory). Refused (EXDEV, so `mv`
/// copies) in a sticky directory unless `cred` is root or owns the
/// directory (the stub's owner is as it was when the name was made, and
/// may have changed since), and for a stub of the file taking the name
/// (its own shard makes that rename, which does nothing).
pub(super) fn replaceable_stub(tx: &WriteTransaction, cred: Cred, dir: &FileAttr, name: &str, to: &str, want_dir: bool, incoming: FileId) -> Result<Stub> {
    let cross = |why: &str| err(ErrorCode::CrossShard, format!("{to} is a name of a file another metadata shard keeps: {why}"));
    let stub = tx.open_table(STUBS)?.get((dir.id.0, name))?.map(|v| Stub::decode(v.value())).transpose()?;
    let Some(stub) = stub else { return Err(cross("it is being made or renamed; try again")) };
    if want_dir {
        return Err(err(ErrorCode::NotDir, format!("{to} is not a directory")));
    }
    if stub.attr.id == incoming {
        return Err(cross("the rename is that shard's to make"));
    }
    if dir.mode & 0o1000 != 0 && cred.uid != 0 && cred.uid != dir.uid {
        return Err(cross("in a sticky directory only its owner or root replaces it by a rename (remove it first)"));
    }
    Ok(stub)
}

/// A rename replaced stub `name` of `dir` (`stub`): it goes here, and the
/// file's shard is told to drop that name's link (`Unlink`, logged in `tx`
/// and pushed with the rest of this shard's log).
pub(super) fn unlink_stub(tx: &WriteTransaction, shards: &Shards, dir: FileId, name: &str, stub: &Stub, now: i64) -> Result<()> {
    // Logged first: a full log refuses (`Busy`) before anything changed.
    shards.log(tx, &ReplicaOp::Unlink { shard: stub.shard, parent: dir, name: name.to_owned(), file: stub.attr.id, made: stub.made, time_ns: now })?;
    tx.open_table(STUBS)?.remove((dir.0, name))?;
    Ok(())
}

/// A pushed `Unlink`: a rename on the name's shard replaced its stub
/// `name` of `parent`, a name of `file`, kept here, made by `Name` number
/// `made`. The copy of the name goes, and one link (the file with its
/// last: its objects are deleted once this is durable), once, and only
/// that copy's: nothing changes if the copy is gone (the name was removed
/// or moved here meanwhile, which took its link then), or is another
/// one (made by a later link or move, whose answer is pending or came
/// first). If the name is moving away now, its move settles it
/// ([`settle_moved_unlink`]). Never a directory, nor a name this shard
/// keeps itself (`owned`).
pub(super) fn drop_copy(tx: &WriteTransaction, owned: bool, parent: FileId, name: &str, file: FileId, made: u64) -> Result<()> {
    if owned {
        return Ok(());
    }
    let attr = {
        let t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
        if t.child(parent.0, name)? != Some(file.0) {
            return Ok(());
        }
        match t.inodes.get(file.0)?.map(|v| decode_attr(v.value())).transpose()? {
            Some(a) if a.kind != FileKind::Dir => a,
            _ => return Ok(()),
        }
    };
    // The copy is that `Name`'s: the one a link or move waits on whose
    // answer (taken) has not come back yet, or the settled one it made;
    // not one made since. (A stub from before `made` was kept names no
    // copy settled since.)
    let stood = tx.open_table(COPIES)?.get((parent.0, name))?.map(|v| v.value());
    let its_copy = match pending_seq(tx, file, parent, name)? {
        Some(seq) => seq == made,
        None if made == 0 => stood.is_none(),
        None => stood == Some(made),
    };
    if !its_copy {
        return Ok(());
    }
    drop_link_unless_moving(tx, parent, name, &attr)
}

/// The `Name` number of a link or move of `file` that waits on its copy
/// `name` of `dir` (made, not answered yet).
fn pending_seq(tx: &WriteTransaction, file: FileId, dir: FileId, name: &str) -> Result<Option<u64>> {
    match tx.open_table(LINKING)?.get(file.0)?.map(|v| Moving::decode(v.value())).transpose()? {
        Some(m) if m.parent == dir && m.name == name => Ok(Some(m.seq)),
        _ => super::name_moves::pending_to_in(tx, file, dir, name),
    }
}

/// The name `name` of `dir` of file `attr` is gone on its own shard: its
/// copy (if still here) and one link go, the file with its last; if the
/// name is moving away, its move's answer decides instead
/// ([`settle_moved_unlink`]).
fn drop_link_unless_moving(tx: &WriteTransaction, dir: FileId, name: &str, attr: &FileAttr) -> Result<()> {
    if super::name_moves::moving_from(tx, attr.id, dir, name)? {
        tx.open_table(UNLINKED_MOVING)?.insert(attr.id.0, 0)?;
        return Ok(());
    }
    drop_link(tx, dir, name, attr)
}

/// Drops the copy `name` of `dir` (if still here) of file `attr` and one
/// link, the file with its last (its objects are deleted once this is
/// durable); this shard's clock, as for every change of the file here.
fn drop_link(tx: &WriteTransaction, dir: FileId, name: &str, attr: &FileAttr) -> Result<()> {
    tx.open_table(COPIES)?.remove((dir.0, name))?;
    let last = {
        let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
        if t.child(dir.0, name)? == Some(attr.id.0) {
            t.dirents.remove((dir.0, name))?;
        }
        entries::drop_name(&mut t, attr, now_ns())?
    };
    if last {
        entries::forget_inode(tx, attr)?;
    }
    Ok(())
}

/// A copy `name` of `dir` left in a directory every shard removes: its
/// name is gone on its own shard (which held no entry of the directory,
/// or the removal would have been refused), so unless a link or move
/// still waits on it (whose answer takes it back), the `Unlink` of a
/// rename over it is on its way: its link goes now (and that `Unlink`
/// finds nothing), not never; if the name is moving away, its move's
/// answer decides ([`settle_moved_unlink`]). Directories' copies are not
/// this.
pub(super) fn drop_orphan_copy(tx: &WriteTransaction, dir: FileId, name: &str, file: FileId) -> Result<()> {
    let attr = match tx.open_table(INODES)?.get(file.0)?.map(|v| decode_attr(v.value())).transpose()? {
        Some(a) if a.kind != FileKind::Dir => a,
        _ => return Ok(()),
    };
    if pending_seq(tx, file, dir, name)?.is_some() {
        return Ok(());
    }
    drop_link_unless_moving(tx, dir, name, &attr)
}

/// A name move of `file` away from `(dir, name)` settled: if that name's
/// stub was replaced while the move waited, or its directory removed
/// (`UNLINKED_MOVING`, the one record that its link goes once), and the
/// move was refused (`took` false), the name's copy (if still there) and
/// link go now; if the move took the name, its link is the new name's.
pub(super) fn settle_moved_unlink(tx: &WriteTransaction, file: FileId, (dir, name): (FileId, &str), took: bool) -> Result<()> {
    if tx.open_table(UNLINKED_MOVING)?.remove(file.0)?.is_none() || took {
        return Ok(());
    }
    let Some(attr) = tx.open_table(INODES)?.get(file.0)?.map(|v| decode_attr(v.value())).transpose()? else { return Ok(()) };
    drop_link(tx, dir, name, &attr)
}

/// A pushed `Unname` from `coord`: the stub `name` of `parent` for `file`
/// goes, if it is still there and `coord`'s.
pub(super) fn drop_name(tx: &WriteTransaction, coord: u32, parent: FileId, name: &str, file: FileId, time_ns: i64) -> Result<()> {
    let mut stubs = tx.open_table(STUBS)?;
    let ours = stubs.get((parent.0, name))?.map(|v| Stub::decode(v.value())).transpose()?.is_some_and(|s| s.shard == coord && s.attr.id == file);
    if !ours {
        return Ok(());
    }
    stubs.remove((parent.0, name))?;
    let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
    if t.child(parent.0, name)? == Some(file.0) {
        t.dirents.remove((parent.0, name))?;
    }
    if t.inodes.get(parent.0)?.is_some() {
        t.entries_changed(parent.0, 0, time_ns)?;
    }
    Ok(())
}

/// The coordinator settles the links whose name's shard answered: kept if
/// it made the name, else the count and the copy are taken back. Returns
/// the answers by sequence number.
pub(super) fn settle(tx: &WriteTransaction, answers: &[&Answer]) -> Result<Vec<(u64, Response)>> {
    let mut linking = tx.open_table(LINKING)?;
    let records: Vec<(u64, Moving)> = linking.iter()?.map(|item| item.map_err(MetaError::from).and_then(|(k, v)| Ok((k.value(), Moving::decode(v.value())?)))).collect::<Result<_>>()?;
    let mut settled = Vec::new();
    for (id, m) in records {
        let Some(answer) = answers.iter().find(|a| a.seq == m.seq) else { continue };
        linking.remove(id)?;
        settled.push((m.seq, answer.response.clone()));
        if matches!(answer.response, Response::Ok) {
            tx.open_table(COPIES)?.insert((m.parent.0, m.name.as_str()), m.seq)?;
            continue;
        }
        let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
        if t.child(m.parent.0, &m.name)? == Some(id) {
            t.dirents.remove((m.parent.0, m.name.as_str()))?;
        }
        // The file changed no further meanwhile (`check_not_linking`), but
        // for another name's `Unlink` (`drop_copy`): the count taken back
        // may then be its last.
        let kept = t.inodes.get(id)?.map(|v| decode_attr(v.value())).transpose()?;
        if let Some(a) = kept
            && entries::drop_name(&mut t, &a, now_ns())?
        {
            drop(t);
            entries::forget_inode(tx, &a)?;
        }
    }
    Ok(settled)
}

/// The sequence numbers of links not settled yet (their `Name`s stay in
/// the log until they are).
pub(super) fn unsettled(tx: &redb::ReadTransaction) -> Result<Vec<u64>> {
    let linking = tx.open_table(LINKING)?;
    let mut v = Vec::new();
    for item in linking.iter()? {
        v.push(Moving::decode(item?.1.value())?.seq);
    }
    Ok(v)
}

/// A name's shard's answer to a resent `Name` (the first was lost).
pub(super) fn answer_again(took: bool) -> Response {
    if took { Response::Ok } else { refused(ErrorCode::Busy, "this link or rename was refused before") }
}

#[cfg(test)]
mod tests {
    use super::super::tables::encode_attr;
    use super::*;
    use weft_wire::StripeLayout;

    const DIR: FileId = FileId(5);
    const FILE: FileId = FileId(9);

    /// A database in a file removed when the test ends.
    struct TempDb(Database, std::path::PathBuf);

    impl Drop for TempDb {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.1);
        }
    }

    fn db() -> TempDb {
        let path = std::env::temp_dir().join(format!("weft-links-{}.redb", rand::random::<u64>()));
        TempDb(Database::create(&path).unwrap(), path)
    }

    /// A link of `FILE` to `name` of `DIR` waiting on `Name` number `seq`.
    fn waiting_link(tx: &WriteTransaction, name: &str, seq: u64) {
        tx.open_table(LINKING).unwrap().insert(FILE.0, Moving { seq, parent: DIR, name: name.into() }.encode().as_slice()).unwrap();
    }

    /// File `FILE` with `nlink` links, one of them the copy `name` of `DIR`
    /// made by `Name` number `made`.
    fn with_copy(tx: &WriteTransaction, name: &str, nlink: u32, made: u64) {
        let attr = FileAttr { id: FILE, kind: FileKind::File, mode: 0o644, uid: 0, gid: 0, mtime_ns: 1, ctime_ns: 1, nlink, layout: Some(StripeLayout { stripe_size: 65536, servers: vec![weft_wire::ServerId(0)] }) };
        tx.open_table(INODES).unwrap().insert(FILE.0, encode_attr(&attr).as_slice()).unwrap();
        tx.open_table(DIRENTS).unwrap().insert((DIR.0, name), FILE.0).unwrap();
        tx.open_table(COPIES).unwrap().insert((DIR.0, name), made).unwrap();
    }

    fn links(tx: &WriteTransaction) -> Option<u32> {
        tx.open_table(INODES).unwrap().get(FILE.0).unwrap().map(|v| decode_attr(v.value()).unwrap().nlink)
    }

    fn named(tx: &WriteTransaction, name: &str) -> bool {
        tx.open_table(DIRENTS).unwrap().get((DIR.0, name)).unwrap().is_some()
    }

    #[test]
    fn an_unlink_drops_only_the_copy_its_stub_stood_for() {
        let db = db();
        let tx = db.0.begin_write().unwrap();
        with_copy(&tx, "n", 3, 7);
        // Another copy (made by a later `Name`), a name this shard keeps,
        // another file: nothing changes.
        drop_copy(&tx, false, DIR, "n", FILE, 6).unwrap();
        drop_copy(&tx, true, DIR, "n", FILE, 7).unwrap();
        drop_copy(&tx, false, DIR, "n", FileId(10), 7).unwrap();
        drop_copy(&tx, false, DIR, "other", FILE, 7).unwrap();
        assert_eq!((links(&tx), named(&tx, "n")), (Some(3), true));
        // A copy a link still waits on: not the one the stub stood for.
        waiting_link(&tx, "n", 8);
        drop_copy(&tx, false, DIR, "n", FILE, 7).unwrap();
        assert_eq!((links(&tx), named(&tx, "n")), (Some(3), true));
        tx.open_table(LINKING).unwrap().remove(FILE.0).unwrap();
        // The copy a link waits on whose `Name` made the stub: that link
        // was taken, its answer not back yet: it goes.
        with_copy(&tx, "w", 4, 0);
        tx.open_table(COPIES).unwrap().remove((DIR.0, "w")).unwrap();
        waiting_link(&tx, "w", 12);
        drop_copy(&tx, false, DIR, "w", FILE, 12).unwrap();
        assert_eq!((links(&tx), named(&tx, "w")), (Some(3), false));
        tx.open_table(LINKING).unwrap().remove(FILE.0).unwrap();
        // The copy it stood for: it goes with one link, once.
        drop_copy(&tx, false, DIR, "n", FILE, 7).unwrap();
        assert_eq!((links(&tx), named(&tx, "n")), (Some(2), false));
        drop_copy(&tx, false, DIR, "n", FILE, 7).unwrap();
        assert_eq!(links(&tx), Some(2), "applied twice");
        // A stub from before `made` was kept (0) matches by name and file,
        // but not a copy settled since (which has its `Name`'s number).
        with_copy(&tx, "old", 2, 0);
        tx.open_table(COPIES).unwrap().remove((DIR.0, "old")).unwrap();
        drop_copy(&tx, false, DIR, "old", FILE, 0).unwrap();
        assert_eq!((links(&tx), named(&tx, "old")), (Some(1), false));
        with_copy(&tx, "new", 2, 13);
        drop_copy(&tx, false, DIR, "new", FILE, 0).unwrap();
        assert_eq!((links(&tx), named(&tx, "new")), (Some(2), true));
        drop_copy(&tx, false, DIR, "new", FILE, 13).unwrap();
        assert_eq!(links(&tx), Some(1));
        // The last link: the file goes, its objects to the reaper.
        with_copy(&tx, "last", 1, 11);
        drop_copy(&tx, false, DIR, "last", FILE, 11).unwrap();
        assert_eq!((links(&tx), named(&tx, "last")), (None, false));
    }

    #[test]
    fn a_directory_is_never_dropped_as_a_copy() {
        let db = db();
        let tx = db.0.begin_write().unwrap();
        let attr = FileAttr { id: FILE, kind: FileKind::Dir, mode: 0o755, uid: 0, gid: 0, mtime_ns: 1, ctime_ns: 1, nlink: 2, layout: None };
        tx.open_table(INODES).unwrap().insert(FILE.0, encode_attr(&attr).as_slice()).unwrap();
        tx.open_table(DIRENTS).unwrap().insert((DIR.0, "sub"), FILE.0).unwrap();
        drop_copy(&tx, false, DIR, "sub", FILE, 0).unwrap();
        assert_eq!((links(&tx), named(&tx, "sub")), (Some(2), true));
    }

    #[test]
    fn a_refused_link_after_an_unlink_takes_the_last_link_and_an_orphan_copy_its_own() {
        let db = db();
        let tx = db.0.begin_write().unwrap();
        // F: one settled copy "a" and a link to "b" waiting (two links).
        with_copy(&tx, "a", 2, 7);
        tx.open_table(DIRENTS).unwrap().insert((DIR.0, "b"), FILE.0).unwrap();
        waiting_link(&tx, "b", 8);
        drop_copy(&tx, false, DIR, "a", FILE, 7).unwrap();
        assert_eq!(links(&tx), Some(1));
        // In a directory removed everywhere meanwhile, the waiting copy is
        // left to the link's answer.
        drop_orphan_copy(&tx, DIR, "b", FILE).unwrap();
        assert_eq!(links(&tx), Some(1));
        // Refused: that was the last link, and the file goes.
        let answer = Answer { seq: 8, shard: 2, response: refused(ErrorCode::Exists, "taken"), vote: false };
        let settled = settle(&tx, &[&answer]).unwrap();
        assert_eq!(settled.len(), 1);
        assert_eq!((links(&tx), named(&tx, "b")), (None, false));
        // A settled copy left in a removed directory takes its link along.
        with_copy(&tx, "c", 2, 9);
        tx.open_table(DIRENTS).unwrap().remove((DIR.0, "c")).unwrap();
        drop_orphan_copy(&tx, DIR, "c", FILE).unwrap();
        assert_eq!(links(&tx), Some(1));
    }

    #[test]
    fn a_copy_moving_away_when_its_directory_goes_is_left_to_the_move() {
        let db = db();
        let tx = db.0.begin_write().unwrap();
        // F: copies "m" (moving to another name) and "k"; three links.
        with_copy(&tx, "m", 3, 7);
        with_copy(&tx, "k", 3, 8);
        super::super::name_moves::record_move(&tx, FILE, 9, (FileId(6), "to"), (DIR, "m"));
        // The directory goes on every shard: the copy's entry goes, its
        // link waits for the move.
        tx.open_table(DIRENTS).unwrap().remove((DIR.0, "m")).unwrap();
        drop_orphan_copy(&tx, DIR, "m", FILE).unwrap();
        assert_eq!(links(&tx), Some(3));
        // Taken: the link is the new name's.
        settle_moved_unlink(&tx, FILE, (DIR, "m"), true).unwrap();
        assert_eq!(links(&tx), Some(3));
        // Refused (another time): the link goes, once, though the entry
        // is gone already.
        drop_orphan_copy(&tx, DIR, "m", FILE).unwrap();
        settle_moved_unlink(&tx, FILE, (DIR, "m"), false).unwrap();
        settle_moved_unlink(&tx, FILE, (DIR, "m"), false).unwrap();
        assert_eq!(links(&tx), Some(2));
    }
}
