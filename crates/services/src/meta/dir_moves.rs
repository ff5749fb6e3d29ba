//! Directory renames on a sharded cluster.
//!
//! Every shard keeps a copy of every directory, so renaming one changes
//! every shard's copy; and the name it takes may hold a file that only
//! that name's shard knows of. So a directory rename is two-phase, made by
//! one coordinator, shard 0 ([`RENAMER`]), one at a time: two renames made
//! at once could each pass the "not into itself" check and together make
//! a loop.
//!
//! 1. Shard 0 checks rename(2)'s rules on its copy, holds the names itself
//!    and pushes `PrepareMove`. Each shard checks its own view (the
//!    directory still at its old name, the new name free or an empty
//!    directory none of its entries is in, nothing involved being removed)
//!    and holds: no new entry at the new name or inside the directory it
//!    replaces, no rmdir of the directories involved. It answers `Ok`, or
//!    `Refused` with rename(2)'s error.
//! 2. Every shard held: shard 0 makes the move and pushes `Move`;
//!    otherwise it pushes `Unprepare` and answers the refusal.
//!
//! Shard 0 restarted between the steps abandons the rename (it was not
//! answered); a shard that held waits for shard 0's word, which reaches it
//! in log order. So after any stop a directory has exactly one of its
//! names on every shard.

use super::entries;
use super::shards::{refused, Shards, MARKED};
use super::tables::{decode_attr, encode_attr, err, read_tables, split_parent, Result, Tables, DIRENTS, INODES};
use super::MetaService;
use redb::{ReadableTable, TableDefinition, WriteTransaction};
use weft_wire::{Cred, DirMove, ErrorCode, FileId, FileKind, ReplicaOp, Response};

/// Directory renames this shard holds the names of: directory id to
/// [`Held`].
pub(super) const PREPARED: TableDefinition<u64, &[u8]> = TableDefinition::new("prepared_dir_moves");

/// The shard that makes every directory rename.
pub(super) const RENAMER: u32 = 0;

/// A directory rename a shard holds, and whose `PrepareMove` it was.
struct Held {
    coord: u32,
    seq: u64,
    m: DirMove,
}

impl Held {
    fn encode(&self) -> Vec<u8> {
        let mut e = weft_wire::Encoder::new();
        e.u32(self.coord).u64(self.seq);
        self.m.encode(&mut e);
        e.finish()
    }

    fn decode(b: &[u8]) -> Result<Self> {
        let mut d = weft_wire::Decoder::new(b);
        let h = (|| Ok::<_, weft_wire::DecodeError>(Held { coord: d.u32()?, seq: d.u64()?, m: DirMove::decode(&mut d)? }))();
        h.map_err(|e| err(ErrorCode::Internal, format!("corrupt directory rename record: {e}")))
    }
}

fn held(tx: &WriteTransaction) -> Result<Vec<Held>> {
    let t = tx.open_table(PREPARED)?;
    let mut v = Vec::new();
    for item in t.iter()? {
        v.push(Held::decode(item?.1.value())?);
    }
    Ok(v)
}

/// Refuses a new entry `name` in `dir` that a held rename needs free: its
/// new name, or any name inside the directory it replaces.
pub(super) fn check_free(tx: &WriteTransaction, dir: FileId, name: &str, path: &str) -> Result<()> {
    for h in held(tx)? {
        if h.m.to.0 == dir && h.m.to.1 == name {
            return Err(err(ErrorCode::Busy, format!("a directory is being renamed to {path}; try again")));
        }
        if h.m.replaces == Some(dir) {
            return Err(err(ErrorCode::NotFound, format!("the directory of {path} is being replaced by a rename")));
        }
    }
    Ok(())
}

/// Whether a held rename involves directory `dir` (moves it, replaces it,
/// moves out of or into it): its rmdir waits.
pub(super) fn involves(tx: &WriteTransaction, dir: FileId) -> Result<bool> {
    Ok(held(tx)?.iter().any(|h| h.m.dir == dir || h.m.replaces == Some(dir) || h.m.to.0 == dir || h.m.from.0 == dir))
}

/// On a sharded cluster a directory's rename is shard 0's alone: one that
/// was routed here as a file's (its name held a file, or nothing, when it
/// was routed) is sent there, never made on this shard's copy only.
pub(super) fn not_a_directory(tx: &WriteTransaction, shards: &Shards, from: &str) -> Result<()> {
    if !shards.sharded() {
        return Ok(());
    }
    let comps = super::path::components(from).map_err(|m| err(ErrorCode::InvalidPath, m))?;
    let t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
    match t.walk(Cred::new(0, 0), &comps) {
        Ok(a) if a.kind == FileKind::Dir => Err(super::tables::routed(RENAMER, shards.place.count, FileId(0))),
        _ => Ok(()),
    }
}

/// A shard's first step: checks `m` against its own view and holds it.
/// `Some(refusal)` if it may not (nothing is held then).
pub(super) fn prepare(tx: &WriteTransaction, shards: &Shards, coord: u32, seq: u64, m: &DirMove) -> Result<Option<Response>> {
    let me = shards.place.index;
    let refuse = |code, message: String| Ok(Some(refused(code, format!("{message} (metadata shard {me})"))));
    if tx.open_table(PREPARED)?.get(m.dir.0)?.is_some() {
        return refuse(ErrorCode::Busy, format!("directory {} is being renamed already", m.dir.0));
    }
    let marked = tx.open_table(MARKED)?;
    for dir in [Some(m.dir), m.replaces, Some(m.to.0)].into_iter().flatten() {
        if marked.get(dir.0)?.is_some() {
            return refuse(ErrorCode::NotFound, format!("directory {} is being removed", dir.0));
        }
    }
    drop(marked);
    if involves(tx, m.dir)? || m.replaces.map(|r| involves(tx, r)).transpose()?.unwrap_or(false) {
        return refuse(ErrorCode::Busy, "another rename holds these directories; try again".into());
    }
    let t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
    if t.child(m.from.0 .0, &m.from.1)? != Some(m.dir.0) {
        return refuse(ErrorCode::NotFound, format!("directory {} is no longer named {:?} in directory {}", m.dir.0, m.from.1, m.from.0 .0));
    }
    if t.inodes.get(m.to.0 .0)?.is_none() {
        return refuse(ErrorCode::NotFound, format!("directory {} does not exist", m.to.0 .0));
    }
    let now = t.child(m.to.0 .0, &m.to.1)?;
    if now != m.replaces.map(|r| r.0) {
        // No file here for the name: another shard's file (a link across
        // shards), never a directory.
        let is_dir = match now {
            Some(id) => t.inodes.get(id)?.map(|v| super::tables::decode_attr(v.value())).transpose()?.is_some_and(|a| a.kind == FileKind::Dir),
            None => true,
        };
        return match is_dir {
            false => refuse(ErrorCode::NotDir, format!("{:?} is not a directory", m.to.1)),
            true => refuse(ErrorCode::Busy, format!("{:?} changed while it was being renamed to; try again", m.to.1)),
        };
    }
    if let Some(r) = m.replaces
        && shards.holds_entries_of(&t, r)?
    {
        return refuse(ErrorCode::NotEmpty, format!("{:?} is not empty", m.to.1));
    }
    drop(t);
    tx.open_table(PREPARED)?.insert(m.dir.0, Held { coord, seq, m: m.clone() }.encode().as_slice())?;
    Ok(None)
}

/// Whether this shard holds the rename of `dir` whose `PrepareMove` was
/// `(coord, seq)` (a resent one's answer).
pub(super) fn holds(tx: &WriteTransaction, dir: FileId, coord: u32, seq: u64) -> Result<bool> {
    let Some(v) = tx.open_table(PREPARED)?.get(dir.0)?.map(|v| v.value().to_vec()) else { return Ok(false) };
    let h = Held::decode(&v)?;
    Ok(h.coord == coord && h.seq == seq)
}

/// The second step, on every shard: the held rename of `dir` is made.
/// A shard that does not hold it (cannot happen: shard 0 moves only when
/// every shard held) changes nothing and says so in its log.
pub(super) fn apply_move(tx: &WriteTransaction, dir: FileId, time_ns: i64) -> Result<()> {
    let Some(v) = tx.open_table(PREPARED)?.remove(dir.0)?.map(|v| v.value().to_vec()) else {
        tracing::error!(target: "weft::meta", dir = dir.0, "a directory rename arrived that this shard did not hold: not applied");
        return Ok(());
    };
    let m = Held::decode(&v)?.m;
    let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
    if t.child(m.from.0 .0, &m.from.1)? == Some(dir.0) {
        t.dirents.remove((m.from.0 .0, m.from.1.as_str()))?;
    }
    if let Some(r) = m.replaces {
        t.dirents.remove((m.to.0 .0, m.to.1.as_str()))?;
        t.inodes.remove(r.0)?;
    }
    t.dirents.insert((m.to.0 .0, m.to.1.as_str()), dir.0)?;
    // The moved directory's ".." names its new parent; a replaced one's
    // is gone. (Both parents are held from removal while the rename is;
    // checked all the same, as the other replica ops do.)
    for (parent, links) in [(m.from.0, -1), (m.to.0, 1 - i32::from(m.replaces.is_some()))] {
        if t.inodes.get(parent.0)?.is_some() {
            t.entries_changed_since(parent.0, links, time_ns)?;
        }
    }
    let moved = t.inodes.get(dir.0)?.map(|v| decode_attr(v.value())).transpose()?;
    if let Some(mut a) = moved {
        a.ctime_ns = a.ctime_ns.max(time_ns);
        t.inodes.insert(dir.0, encode_attr(&a).as_slice())?;
    }
    Ok(())
}

/// Releases the held rename of `dir` (it was abandoned).
pub(super) fn unprepare(tx: &WriteTransaction, dir: FileId) -> Result<()> {
    tx.open_table(PREPARED)?.remove(dir.0)?;
    Ok(())
}

/// The renames this shard coordinated and held when it stopped: they
/// were not answered, and are abandoned at start.
pub(super) fn own_held(tx: &WriteTransaction, index: u32) -> Result<Vec<FileId>> {
    Ok(held(tx)?.into_iter().filter(|h| h.coord == index).map(|h| h.m.dir).collect())
}

impl MetaService {
    /// A directory's rename on a sharded cluster (this is shard 0): the
    /// two steps above, one rename at a time.
    pub(super) fn rename_dir(&self, cred: Cred, from: &str, to: &str) -> Result<Response> {
        // One at a time; others are told to try again rather than tie up
        // this shard's workers while a rename waits for the votes.
        let _one_at_a_time = match self.dir_renames.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Err(err(ErrorCode::Busy, format!("another directory rename is under way; try the rename of {from} again"))),
        };
        let prepared = self.commits.exclusive(|| -> Result<Option<(DirMove, u64)>> {
            let db = self.store.db()?;
            let m = {
                let root = Cred::new(0, 0);
                let t = read_tables(&db)?;
                let (from_parent, from_name) = split_parent(from)?;
                let (to_parent, to_name) = split_parent(to)?;
                let (src_dir, dst_dir) = (t.walk(root, &from_parent)?, t.walk(root, &to_parent)?);
                let dir = t.walk_from(root, src_dir.clone(), &from_parent, from_name)?.id;
                let replaces = t.child(dst_dir.id.0, to_name)?.map(FileId);
                DirMove { dir, from: (src_dir.id, from_name.to_owned()), to: (dst_dir.id, to_name.to_owned()), replaces }
            };
            // rename(2)'s checks on this shard's copy (permissions, the
            // sticky bit, not into itself, an empty directory replaced),
            // made and undone.
            let probe = db.begin_write()?;
            let checked = entries::rename(&probe, &self.shards, cred, from, to, |_, _| Ok(()));
            probe.abort()?;
            checked?;
            if m.replaces == Some(m.dir) || m.from == m.to {
                return Ok(None);
            }
            let tx = db.begin_write()?;
            let seq = self.shards.log(&tx, &ReplicaOp::PrepareMove(m.clone()))?;
            if let Some(Response::Refused { code, message }) = prepare(&tx, &self.shards, self.shards.place.index, seq, &m)? {
                return Err(err(code, message));
            }
            tx.commit()?;
            self.pending.note_durable();
            Ok(Some((m, seq)))
        })?;
        let Some((m, seq)) = prepared else { return Ok(Response::Renamed { replaced: None }) };
        let pushed = self.shards.push(&self.store);
        let votes = self.shards.take_votes(seq);
        let refusal = votes.iter().find_map(|(_, r)| match r {
            Response::Refused { code, message } => Some(err(*code, message.clone())),
            _ => None,
        });
        let problem = match (pushed, refusal) {
            (_, Some(e)) => Some(e),
            (Err(e), None) => Some(err(e.code, format!("{}; the rename of {from} was not made", e.message))),
            (Ok(()), None) if votes.len() != self.shards.place.peers.len() => Some(err(ErrorCode::Io, format!("not every metadata shard answered the rename of {from}; it was not made"))),
            (Ok(()), None) => None,
        };
        let decided = self.commits.exclusive(|| -> Result<()> {
            let db = self.store.db()?;
            let tx = db.begin_write()?;
            match problem {
                Some(_) => {
                    unprepare(&tx, m.dir)?;
                    self.shards.log(&tx, &ReplicaOp::Unprepare { dir: m.dir })?;
                }
                None => {
                    let time_ns = super::tables::now_ns();
                    apply_move(&tx, m.dir, time_ns)?;
                    self.shards.log(&tx, &ReplicaOp::Move { dir: m.dir, time_ns })?;
                }
            }
            tx.commit()?;
            self.pending.note_durable();
            Ok(())
        });
        // Not decided here (the database failed): shard 0's next start
        // abandons it.
        decided?;
        // Decided: a shard that did not take the decision yet gets it when
        // it answers (every shard held, so a Move cannot be refused). The
        // rename is made, and answered so.
        if let Err(p) = self.shards.push(&self.store) {
            tracing::warn!(target: "weft::meta", dir = m.dir.0, error = %p, "a directory rename's decision is not on every shard yet");
        }
        match problem {
            Some(e) => Err(e),
            None => Ok(Response::Renamed { replaced: None }),
        }
    }

    /// At start: the directory renames this shard held as their
    /// coordinator when it stopped are abandoned.
    pub(super) fn abandon_dir_moves(&self) -> Result<()> {
        let db = self.store.db()?;
        let tx = db.begin_write()?;
        for dir in own_held(&tx, self.shards.place.index)? {
            tracing::info!(target: "weft::meta", dir = dir.0, "abandoning a directory rename cut short by a stop");
            unprepare(&tx, dir)?;
            self.shards.log(&tx, &ReplicaOp::Unprepare { dir })?;
        }
        tx.commit()?;
        Ok(())
    }
}
