//! Renames of one name of a file with names on several metadata shards
//! (see [`super::links_across`]): the file stays on its shard, which makes
//! the rename, and only the name moves.
//!
//! * The new name is kept by the file's shard: a local rename; if the old
//!   name was the copy of another shard's name, that shard is told
//!   (`Unname`), as for an unlink of it.
//! * The new name is kept by another shard: two steps, as a link. The
//!   file's shard checks rename(2)'s rules on the old name, keeps a copy of
//!   the new one and logs a `Name` with `replace`; the name's shard makes
//!   the stub, replacing what the name held as rename(2) does (a file,
//!   whose objects the service deletes if that was its last name;
//!   another shard's file's name or a directory refuse). Once it answers,
//!   the file's shard removes the old name (and tells its shard if it was
//!   a copy), or, on a refusal, the copy of the new one. Until then the
//!   file changes no further (`Busy`), and both names resolve for that
//!   moment, as in a file's rename across shards.

use super::links_across::{self, unname, COPIES};
use super::shards::{Answer, Shards};
use super::tables::{check_sticky, decode_attr, encode_attr, err, now_ns, read_tables, split_parent, Result, Tables, DIRENTS, INODES};
use super::{entries, MetaService};
use redb::{Database, ReadableTable, TableDefinition, WriteTransaction};
use weft_wire::{Capability, Cred, ErrorCode, FileAttr, FileId, FileKind, MetaReq, ReplicaOp, Response};

/// On the file's shard: names moving to another shard, file id to
/// [`NameMove`] (until the name's shard answers).
pub(super) const NAME_MOVES: TableDefinition<u64, &[u8]> = TableDefinition::new("name_moves");

/// A name of a file moving to another shard: the `Name` at `seq`, the name
/// it takes and the one it leaves, each (directory, name).
struct NameMove {
    seq: u64,
    to: (FileId, String),
    from: (FileId, String),
}

impl NameMove {
    fn encode(&self) -> Vec<u8> {
        let mut e = weft_wire::Encoder::new();
        e.u64(self.seq).u64(self.to.0 .0).str(&self.to.1).u64(self.from.0 .0).str(&self.from.1);
        e.finish()
    }

    fn decode(b: &[u8]) -> Result<Self> {
        let mut d = weft_wire::Decoder::new(b);
        let name = |d: &mut weft_wire::Decoder<'_>| d.str("name", weft_wire::limits::MAX_NAME_LEN);
        let m = (|| Ok::<_, weft_wire::DecodeError>(NameMove { seq: d.u64()?, to: (FileId(d.u64()?), name(&mut d)?), from: (FileId(d.u64()?), name(&mut d)?) }))();
        m.map_err(|e| err(ErrorCode::Internal, format!("corrupt name move record: {e}")))
    }
}

/// Refuses a change of a file one of whose names is moving to another shard.
pub(super) fn check_not_moving_name(tx: &WriteTransaction, id: FileId, path: &str) -> Result<()> {
    if tx.open_table(NAME_MOVES)?.get(id.0)?.is_some() {
        return Err(err(ErrorCode::Busy, format!("{path} is a file one of whose names is being renamed to another metadata shard; try again")));
    }
    Ok(())
}

/// Whether the copy `name` of `dir` for file `id` is the new name of a
/// move not answered yet (not made: requests on it go to its shard).
pub(super) fn pending_to(db: &Database, id: FileId, dir: FileId, name: &str) -> Result<bool> {
    Ok(moving(&db.begin_read()?.open_table(NAME_MOVES)?, id)?.is_some_and(|m| m.to.0 == dir && m.to.1 == name))
}

/// In a write transaction: the `Name` number of file `id`'s move to name
/// `name` of `dir`, if it waits for its answer.
pub(super) fn pending_to_in(tx: &WriteTransaction, id: FileId, dir: FileId, name: &str) -> Result<Option<u64>> {
    Ok(moving(&tx.open_table(NAME_MOVES)?, id)?.filter(|m| m.to.0 == dir && m.to.1 == name).map(|m| m.seq))
}

/// Whether name `name` of `dir` of file `id` is moving away, unanswered.
pub(super) fn moving_from(tx: &WriteTransaction, id: FileId, dir: FileId, name: &str) -> Result<bool> {
    Ok(moving(&tx.open_table(NAME_MOVES)?, id)?.is_some_and(|m| m.from.0 == dir && m.from.1 == name))
}

/// Records a move of file `id`'s name `from` to `to` waiting on `Name`
/// number `seq` (as `move_name_to` does), for tests of what settles with it.
#[cfg(test)]
pub(super) fn record_move(tx: &WriteTransaction, id: FileId, seq: u64, to: (FileId, &str), from: (FileId, &str)) {
    let m = NameMove { seq, to: (to.0, to.1.to_owned()), from: (from.0, from.1.to_owned()) };
    tx.open_table(NAME_MOVES).unwrap().insert(id.0, m.encode().as_slice()).unwrap();
}

/// File `id`'s name move, if one waits.
fn moving(moves: &impl ReadableTable<u64, &'static [u8]>, id: FileId) -> Result<Option<NameMove>> {
    moves.get(id.0)?.map(|v| NameMove::decode(v.value())).transpose()
}

/// The sequence numbers of moves not settled yet (their `Name`s stay in
/// the log until they are).
pub(super) fn unsettled(tx: &redb::ReadTransaction) -> Result<Vec<u64>> {
    let moves = tx.open_table(NAME_MOVES)?;
    let mut v = Vec::new();
    for item in moves.iter()? {
        v.push(NameMove::decode(item?.1.value())?.seq);
    }
    Ok(v)
}

/// The file's shard settles the moves whose name's shard answered: the
/// old name goes (and its shard is told if it was a copy), or on a
/// refusal the copy of the new one. Returns the answers by sequence number.
pub(super) fn settle(tx: &WriteTransaction, shards: &Shards, answers: &[&Answer]) -> Result<Vec<(u64, Response)>> {
    let records: Vec<(u64, NameMove)> = {
        let moves = tx.open_table(NAME_MOVES)?;
        let mut v = Vec::new();
        for item in moves.iter()? {
            let (k, val) = item?;
            v.push((k.value(), NameMove::decode(val.value())?));
        }
        v
    };
    let mut settled = Vec::new();
    for (id, m) in records {
        let Some(answer) = answers.iter().find(|a| a.seq == m.seq) else { continue };
        tx.open_table(NAME_MOVES)?.remove(id)?;
        settled.push((m.seq, answer.response.clone()));
        let took = matches!(answer.response, Response::Ok | Response::Renamed { .. });
        if took {
            tx.open_table(COPIES)?.insert((m.to.0 .0, m.to.1.as_str()), m.seq)?;
        }
        // The old name's stub replaced meanwhile: its link goes with it
        // unless the move took it.
        links_across::settle_moved_unlink(tx, FileId(id), (m.from.0, m.from.1.as_str()), took)?;
        // The name the rename leaves, or the copy of the one it did not take.
        let (dir, name) = if took { &m.from } else { &m.to };
        let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
        if t.child(dir.0, name)? != Some(id) {
            continue;
        }
        t.dirents.remove((dir.0, name.as_str()))?;
        if !took {
            continue;
        }
        if t.inodes.get(dir.0)?.is_some() {
            t.entries_changed(dir.0, 0, now_ns())?;
        }
        let kept = t.inodes.get(id)?.map(|v| decode_attr(v.value())).transpose()?;
        if let Some(mut a) = kept {
            a.ctime_ns = now_ns();
            t.inodes.insert(id, encode_attr(&a).as_slice())?;
        }
        drop(t);
        if !shards.owns(*dir, name) {
            unname(tx, shards, *dir, name, FileId(id))?;
            tx.open_table(COPIES)?.remove((dir.0, name.as_str()))?;
        }
    }
    Ok(settled)
}

impl MetaService {
    /// Whether a rename of `from` (a file's name found here) to a name
    /// `target` keeps (`None`: this shard) moves a name of a file with
    /// names on several shards: `from` is the copy of another shard's name,
    /// or the file has other names and `to` is another shard's.
    pub(super) fn moves_name(&self, db: &Database, from: &str, target: Option<u32>) -> Result<bool> {
        let Ok((parent_comps, name)) = split_parent(from) else { return Ok(false) };
        let t = read_tables(db)?;
        let Ok(parent) = t.walk(Cred::new(0, 0), &parent_comps) else { return Ok(false) };
        let Some(id) = t.child(parent.id.0, name)? else { return Ok(false) };
        let Some(v) = t.inodes.get(id)? else { return Ok(false) };
        let a = decode_attr(v.value())?;
        if a.kind == FileKind::Dir {
            return Ok(false);
        }
        Ok(!self.shards.owns(parent.id, name) || (target.is_some() && a.nlink > 1))
    }

    /// rename(2) of `from`, a name of a file kept here with names on
    /// several shards, to `to` (kept by shard `target`, or here).
    pub(super) fn move_name(&self, cred: Cred, from: &str, to: &str, target: Option<u32>) -> Response {
        let op = MetaReq::Rename { from: from.to_owned(), to: to.to_owned() };
        let answered = match target {
            None => self.rename_copy_here(cred, from, to),
            Some(shard) => self.move_name_to(cred, from, to, shard),
        };
        match answered {
            Ok(r) => {
                if let Response::Renamed { replaced: Some((a, _)) } = &r {
                    self.sizes.forget(a.id);
                }
                self.grants.attach(cred, &op, r)
            }
            Err(e) => e.into_response(),
        }
    }

    /// The new name is this shard's: a local rename, whose old name (the
    /// copy of another shard's) that shard then drops.
    fn rename_copy_here(&self, cred: Cred, from: &str, to: &str) -> Result<Response> {
        let replaced = self.commit_alone(|tx| -> Result<Option<FileAttr>> {
            let (from_comps, from_name) = split_parent(from)?;
            let (to_comps, to_name) = split_parent(to)?;
            let (from_dir, id, same) = {
                let t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
                let from_dir = t.parent_for_change(cred, &from_comps)?.id;
                let id = t.child(from_dir.0, from_name)?;
                // Renaming a name onto itself or onto another name of the
                // same file does nothing (rename(2)): the old name stays.
                let same = match t.walk(cred, &to_comps) {
                    Ok(to_dir) => id.is_some() && t.child(to_dir.id.0, to_name)? == id,
                    Err(_) => false,
                };
                (from_dir, id, same)
            };
            if same {
                return Ok(None);
            }
            // The old name is the copy: this shard makes its rename.
            let owner = |dir: FileId, name: &str| if dir == from_dir && name == from_name { Ok(()) } else { self.check_owner(dir, name) };
            let replaced = entries::rename(tx, &self.shards, cred, from, to, owner)?;
            if let Some(id) = id.filter(|_| !self.shards.owns(from_dir, from_name)) {
                unname(tx, &self.shards, from_dir, from_name, FileId(id))?;
            }
            Ok(replaced)
        })?;
        if let Err(e) = self.shards.push(&self.store) {
            tracing::warn!(target: "weft::meta", from, error = %e, "a renamed name is not off its own shard's listing yet");
        }
        Ok(Response::Renamed { replaced: replaced.map(|a| (a.clone(), Capability::none(a.id))) })
    }

    /// The new name is shard `target`'s: two steps (see the module's comment).
    fn move_name_to(&self, cred: Cred, from: &str, to: &str, target: u32) -> Result<Response> {
        let seq = self.commit_alone(|tx| -> Result<Option<u64>> {
            let (from_comps, from_name) = split_parent(from)?;
            let (to_comps, to_name) = split_parent(to)?;
            let seq = {
                let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
                let from_dir = t.parent_for_change(cred, &from_comps)?;
                let id = t.child(from_dir.id.0, from_name)?.ok_or_else(|| err(ErrorCode::NotFound, format!("{from} does not exist")))?;
                let mut a = entries::here(&t, id, from)?;
                check_sticky(cred, &from_dir, &a, from)?;
                super::shards::check_not_moving(tx, a.id, from)?;
                if a.kind == FileKind::Dir {
                    return Err(err(ErrorCode::Internal, format!("{from} is a directory: its rename is shard 0's")));
                }
                let to_dir = t.parent_for_change(cred, &to_comps)?;
                super::shards::check_unmarked(tx, to_dir.id, to_name, to)?;
                match t.child(to_dir.id.0, to_name)? {
                    // Two names of one file: rename(2) does nothing.
                    Some(other) if other == id => return Ok(None),
                    Some(other) => {
                        let is_dir = t.inodes.get(other)?.map(|v| decode_attr(v.value())).transpose()?.is_some_and(|o| o.kind == FileKind::Dir);
                        return Err(if is_dir {
                            err(ErrorCode::IsDir, format!("{to} is a directory"))
                        } else {
                            err(ErrorCode::CrossShard, format!("{to} is a name of another file this shard keeps, with names on several metadata shards: a name moving over it is not made (remove it first)"))
                        });
                    }
                    None => {}
                }
                a.ctime_ns = now_ns();
                t.inodes.insert(id, encode_attr(&a).as_slice())?;
                t.dirents.insert((to_dir.id.0, to_name), id)?;
                let seq = self.shards.log(tx, &ReplicaOp::Name { shard: target, parent: to_dir.id, cred, to: to.to_owned(), attr: a, replace: true })?;
                let m = NameMove { seq, to: (to_dir.id, to_name.to_owned()), from: (from_dir.id, from_name.to_owned()) };
                tx.open_table(NAME_MOVES)?.insert(id, m.encode().as_slice())?;
                seq
            };
            Ok(Some(seq))
        })?;
        let Some(seq) = seq else { return Ok(Response::Renamed { replaced: None }) };
        let pushed = self.shards.push(&self.store);
        let r = match (self.shards.take_settled(seq), pushed) {
            (Some(Response::Ok), _) => Ok(Response::Renamed { replaced: None }),
            (Some(r @ Response::Renamed { .. }), _) => Ok(r),
            (Some(Response::Refused { code, message }), _) => Err(err(code, message)),
            (Some(other), _) => Err(err(ErrorCode::Internal, format!("metadata shard {target} answered the rename to {to} with {other:?}"))),
            (None, Err(e)) => Err(err(e.code, format!("{}; the rename to {to} is made or undone when that shard answers", e.message))),
            (None, Ok(_)) => Err(err(ErrorCode::Io, format!("metadata shard {target} has not answered the rename to {to} yet; it is made or undone when it does"))),
        };
        // The old name's shard, if it was a copy, is told now (the settling
        // logged it).
        if r.is_ok()
            && let Err(e) = self.shards.push(&self.store)
        {
            tracing::warn!(target: "weft::meta", from, error = %e, "a renamed name is not off its own shard's listing yet");
        }
        r
    }
}
