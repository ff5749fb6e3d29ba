//! Directory changes a metadata shard pushes to the others (see
//! [`crate::shard`]). Each carries its coordinator's sequence number, so a
//! shard applies each once and in order, and a MAC under the servers' key,
//! so only a server may send one.
//!
//! # Wire format
//! `MetaReq::Replica`: `coord u32 | seq u64 | op | mac[32]`, with
//! `mac = blake3_keyed(key, "weft replica" | len u64 | coord | seq | op)`
//! (`len`: the byte length of `coord | seq | op`).

use super::meta::{Cred, FileAttr, FileKind};
use crate::limits::{MAX_LINK_TARGET_LEN, MAX_NAME_LEN, MAX_PATH_LEN};
use crate::{CapKey, DecodeError, Decoder, Encoder, FileId};

/// One change to the directories every shard keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaOp {
    /// A new directory `attr` named `name` in `parent`.
    Mkdir { parent: FileId, name: String, attr: FileAttr },
    /// Directory `dir`'s mode, owner and times (its link count is each
    /// shard's own count of the subdirectories it was told of).
    SetAttr { dir: FileId, mode: u32, uid: u32, gid: u32, mtime_ns: i64, ctime_ns: i64 },
    /// Directory `dir` is about to be removed: refuse new entries in it.
    /// Answered `NotEmpty` by a shard that holds an entry of it.
    Mark { dir: FileId },
    /// The removal was abandoned: entries may be made in `dir` again.
    Unmark { dir: FileId },
    /// Directory `dir`, named `name` in `parent`, is removed.
    Rmdir { parent: FileId, name: String, dir: FileId, time_ns: i64 },
    /// A rename across shards: shard `shard` takes file `attr` (and a
    /// symbolic link's `target`) at path `to`, as `cred` asks, with
    /// rename(2)'s checks there; answered `Renamed` or the refusal. Other
    /// shards only count the sequence number.
    Adopt { shard: u32, cred: Cred, to: String, attr: FileAttr, target: Option<String> },
    /// Entries of these directories were made or removed on the pushing
    /// shard at these times: their mtime and ctime move up to them.
    Touch { dirs: Vec<(FileId, i64)> },
    /// A directory rename's first step (sent by the rename coordinator,
    /// shard 0, which serializes them): directory `dir`, named `from` and
    /// replacing `replaces` (an empty directory) at `to`, or nothing. Each
    /// shard checks its own view and holds the names (answered `Ok`) or
    /// refuses (`Refused`).
    PrepareMove(DirMove),
    /// Every shard held: the rename is made, at `time_ns`.
    Move { dir: FileId, time_ns: i64 },
    /// A shard refused or did not answer: the names are released.
    Unprepare { dir: FileId },
    /// A hard link across shards: shard `shard` makes `to`, an entry of
    /// directory `parent` (refused if `to`'s directory is another one by
    /// then), another name of file `attr`, which the pushing shard keeps
    /// (and goes on keeping), with link(2)'s checks there as `cred`;
    /// answered `Ok` or the refusal. With `replace` (a rename of one of
    /// the file's names to `to`), a file `to` names is replaced as
    /// rename(2) does, and the answer is `Renamed` with the replaced file
    /// if that was its last name. Other shards only count the sequence
    /// number.
    Name { shard: u32, parent: FileId, cred: Cred, to: String, attr: FileAttr, replace: bool },
    /// A name `Name` made on shard `shard` (entry `name` of `parent`, for
    /// file `file`) was removed: that shard drops it (its listing's entry).
    Unname { shard: u32, parent: FileId, name: String, file: FileId, time_ns: i64 },
    /// The other way round: a rename on the pushing shard replaced its
    /// stub `name` of `parent`, a name of file `file`, which shard `shard`
    /// keeps, made by that shard's `Name` number `made` (0: a stub from
    /// before protocol 29). That shard drops its copy of the name and one
    /// link (the file goes with its last name), if the copy is still the
    /// one that `Name` made.
    Unlink { shard: u32, parent: FileId, name: String, file: FileId, made: u64, time_ns: i64 },
}

/// A directory rename every shard applies (see [`ReplicaOp::PrepareMove`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirMove {
    pub dir: FileId,
    /// The entry it leaves: (parent, name).
    pub from: (FileId, String),
    /// The entry it takes.
    pub to: (FileId, String),
    /// The empty directory `to` named before, if any.
    pub replaces: Option<FileId>,
}

impl DirMove {
    pub fn encode(&self, e: &mut Encoder) {
        e.u64(self.dir.0).u64(self.from.0 .0).str(&self.from.1).u64(self.to.0 .0).str(&self.to.1).u64(self.replaces.map_or(0, |d| d.0));
    }

    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let dir = FileId(d.u64()?);
        let from = (FileId(d.u64()?), name(d)?);
        let to = (FileId(d.u64()?), name(d)?);
        let replaces = Some(FileId(d.u64()?)).filter(|r| r.0 != 0);
        // The root (id 1) never moves nor is replaced; nothing moves into,
        // out of or over itself.
        let ids = [Some(dir), replaces];
        if dir.0 <= 1 || replaces.is_some_and(|r| r.0 <= 1) || ids.contains(&Some(to.0)) || ids.contains(&Some(from.0)) || replaces == Some(dir) || from == to {
            return Err(DecodeError::Invalid("a directory rename moves a directory other than the root to another name, replacing neither itself nor a parent"));
        }
        Ok(DirMove { dir, from, to, replaces })
    }
}

/// Directories one `Touch` names at most.
pub const MAX_TOUCHED: usize = 1024;

impl ReplicaOp {
    pub fn encode(&self, e: &mut Encoder) {
        match self {
            ReplicaOp::Mkdir { parent, name, attr } => {
                e.u8(1).u64(parent.0).str(name);
                attr.encode(e);
            }
            ReplicaOp::SetAttr { dir, mode, uid, gid, mtime_ns, ctime_ns } => {
                e.u8(2).u64(dir.0).u32(*mode).u32(*uid).u32(*gid).i64(*mtime_ns).i64(*ctime_ns);
            }
            ReplicaOp::Mark { dir } => {
                e.u8(3).u64(dir.0);
            }
            ReplicaOp::Unmark { dir } => {
                e.u8(4).u64(dir.0);
            }
            ReplicaOp::Rmdir { parent, name, dir, time_ns } => {
                e.u8(5).u64(parent.0).str(name).u64(dir.0).i64(*time_ns);
            }
            ReplicaOp::Adopt { shard, cred, to, attr, target } => {
                e.u8(6).u32(*shard);
                cred.encode(e);
                e.str(to);
                attr.encode(e);
                match target {
                    Some(t) => e.u8(1).str(t),
                    None => e.u8(0),
                };
            }
            ReplicaOp::Touch { dirs } => {
                e.u8(7).u32(dirs.len() as u32);
                for (dir, t) in dirs {
                    e.u64(dir.0).i64(*t);
                }
            }
            ReplicaOp::PrepareMove(m) => {
                e.u8(8);
                m.encode(e);
            }
            ReplicaOp::Move { dir, time_ns } => {
                e.u8(9).u64(dir.0).i64(*time_ns);
            }
            ReplicaOp::Unprepare { dir } => {
                e.u8(10).u64(dir.0);
            }
            ReplicaOp::Name { shard, parent, cred, to, attr, replace } => {
                e.u8(11).u32(*shard).u64(parent.0);
                cred.encode(e);
                e.str(to);
                attr.encode(e);
                e.bool(*replace);
            }
            ReplicaOp::Unname { shard, parent, name, file, time_ns } => {
                e.u8(12).u32(*shard).u64(parent.0).str(name).u64(file.0).i64(*time_ns);
            }
            ReplicaOp::Unlink { shard, parent, name, file, made, time_ns } => {
                e.u8(13).u32(*shard).u64(parent.0).str(name).u64(file.0).u64(*made).i64(*time_ns);
            }
        }
    }

    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(match d.u8()? {
            1 => {
                let (parent, name) = (FileId(d.u64()?), name(d)?);
                ReplicaOp::Mkdir { parent, name, attr: FileAttr::decode(d)? }
            }
            2 => ReplicaOp::SetAttr { dir: FileId(d.u64()?), mode: d.u32()?, uid: d.u32()?, gid: d.u32()?, mtime_ns: d.i64()?, ctime_ns: d.i64()? },
            3 => ReplicaOp::Mark { dir: FileId(d.u64()?) },
            4 => ReplicaOp::Unmark { dir: FileId(d.u64()?) },
            5 => ReplicaOp::Rmdir { parent: FileId(d.u64()?), name: name(d)?, dir: FileId(d.u64()?), time_ns: d.i64()? },
            6 => {
                let (shard, cred, to) = (d.u32()?, Cred::decode(d)?, d.str("path", MAX_PATH_LEN)?);
                let attr = FileAttr::decode(d)?;
                if attr.kind == FileKind::Dir {
                    return Err(DecodeError::Invalid("a directory does not move between shards"));
                }
                let target = if d.bool()? { Some(d.str("link target", MAX_LINK_TARGET_LEN)?) } else { None };
                ReplicaOp::Adopt { shard, cred, to, attr, target }
            }
            7 => {
                let n = d.count("touched directories", MAX_TOUCHED, 16)?;
                let dirs = (0..n).map(|_| Ok((FileId(d.u64()?), d.i64()?))).collect::<Result<_, DecodeError>>()?;
                ReplicaOp::Touch { dirs }
            }
            8 => ReplicaOp::PrepareMove(DirMove::decode(d)?),
            9 => ReplicaOp::Move { dir: FileId(d.u64()?), time_ns: d.i64()? },
            10 => ReplicaOp::Unprepare { dir: FileId(d.u64()?) },
            11 => {
                let (shard, parent, cred, to) = (d.u32()?, FileId(d.u64()?), Cred::decode(d)?, d.str("path", MAX_PATH_LEN)?);
                let attr = FileAttr::decode(d)?;
                if attr.kind == FileKind::Dir {
                    return Err(DecodeError::Invalid("a directory has no hard links"));
                }
                ReplicaOp::Name { shard, parent, cred, to, attr, replace: d.bool()? }
            }
            12 => ReplicaOp::Unname { shard: d.u32()?, parent: FileId(d.u64()?), name: name(d)?, file: FileId(d.u64()?), time_ns: d.i64()? },
            13 => ReplicaOp::Unlink { shard: d.u32()?, parent: FileId(d.u64()?), name: name(d)?, file: FileId(d.u64()?), made: d.u64()?, time_ns: d.i64()? },
            t => return Err(DecodeError::BadTag { what: "replica op", tag: t.into() }),
        })
    }

    /// The op's bytes, as stored in a coordinator's log.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        self.encode(&mut e);
        e.finish()
    }

    /// An op read back from a log, whole.
    pub fn from_bytes(b: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(b);
        let op = Self::decode(&mut d)?;
        d.finish()?;
        Ok(op)
    }
}

fn name(d: &mut Decoder<'_>) -> Result<String, DecodeError> {
    let n = d.str("name", MAX_NAME_LEN)?;
    if n.is_empty() || n.contains('/') || n == "." || n == ".." {
        return Err(DecodeError::Invalid("a directory name is non-empty, without '/', not . or .."));
    }
    Ok(n)
}

/// The MAC of a replica message.
pub fn seal(key: &CapKey, coord: u32, seq: u64, op: &ReplicaOp) -> [u8; 32] {
    let mut e = Encoder::new();
    e.u32(coord).u64(seq);
    op.encode(&mut e);
    key.mac_of(b"weft replica", &e.finish())
}

/// Whether `mac` is the MAC of this replica message (constant time).
pub fn check_seal(key: &CapKey, coord: u32, seq: u64, op: &ReplicaOp, mac: &[u8; 32]) -> bool {
    blake3::Hash::from(seal(key, coord, seq, op)) == blake3::Hash::from(*mac)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Secret;
    use proptest::prelude::*;

    fn some_ops() -> Vec<ReplicaOp> {
        let attr = FileAttr { id: FileId(9), kind: FileKind::Dir, mode: 0o755, uid: 1, gid: 2, mtime_ns: 3, ctime_ns: 4, nlink: 2, layout: None };
        let file = FileAttr { id: FileId(10), kind: FileKind::File, layout: None, nlink: 1, ..attr.clone() };
        vec![
            ReplicaOp::Mkdir { parent: FileId(1), name: "d".into(), attr: attr.clone() },
            ReplicaOp::SetAttr { dir: FileId(9), mode: 0o700, uid: 1, gid: 2, mtime_ns: 5, ctime_ns: 6 },
            ReplicaOp::Rmdir { parent: FileId(1), name: "d".into(), dir: FileId(9), time_ns: 7 },
            ReplicaOp::Touch { dirs: vec![(FileId(9), 11), (FileId(12), -1)] },
            ReplicaOp::PrepareMove(DirMove { dir: FileId(9), from: (FileId(1), "a".into()), to: (FileId(12), "b".into()), replaces: Some(FileId(13)) }),
            ReplicaOp::Adopt { shard: 2, cred: Cred::with_groups(5, 6, &[7]), to: "/a/b".into(), attr: file.clone(), target: Some("t".into()) },
            ReplicaOp::Name { shard: 1, parent: FileId(9), cred: Cred::new(5, 6), to: "/a/c".into(), attr: file, replace: true },
            ReplicaOp::Unname { shard: 1, parent: FileId(9), name: "c".into(), file: FileId(10), time_ns: 12 },
            ReplicaOp::Unlink { shard: 2, parent: FileId(9), name: "c".into(), file: FileId(10), made: 7, time_ns: 13 },
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Fuzzing by mutation (see `msg::tests::mutate`): a shard's log
        /// entry or a pushed change, changed, decodes to an error or to an
        /// op that encodes back to itself; never a panic.
        #[test]
        fn mutated_ops_are_errors_or_ops(k in 0usize..9, muts in crate::msg::tests::mutations()) {
            let op = &some_ops()[k];
            if let Ok(m) = ReplicaOp::from_bytes(&crate::msg::tests::mutate(op.to_bytes(), &muts)) {
                prop_assert_eq!(ReplicaOp::from_bytes(&m.to_bytes()).unwrap(), m);
            }
        }
    }

    #[test]
    fn ops_round_trip_and_a_changed_op_breaks_the_seal() {
        let key = CapKey::derive(&Secret::new(*b"0123456789abcdef"));
        let attr = FileAttr { id: FileId(9), kind: FileKind::Dir, mode: 0o755, uid: 1, gid: 2, mtime_ns: 3, ctime_ns: 4, nlink: 2, layout: None };
        let ops = [
            ReplicaOp::Mkdir { parent: FileId(1), name: "d".into(), attr: attr.clone() },
            ReplicaOp::SetAttr { dir: FileId(9), mode: 0o700, uid: 1, gid: 2, mtime_ns: 5, ctime_ns: 6 },
            ReplicaOp::Mark { dir: FileId(9) },
            ReplicaOp::Unmark { dir: FileId(9) },
            ReplicaOp::Rmdir { parent: FileId(1), name: "d".into(), dir: FileId(9), time_ns: 7 },
            ReplicaOp::Touch { dirs: vec![(FileId(9), 11), (FileId(12), -1)] },
            ReplicaOp::PrepareMove(DirMove { dir: FileId(9), from: (FileId(1), "a".into()), to: (FileId(12), "b".into()), replaces: Some(FileId(13)) }),
            ReplicaOp::PrepareMove(DirMove { dir: FileId(9), from: (FileId(1), "a".into()), to: (FileId(1), "b".into()), replaces: None }),
            ReplicaOp::Move { dir: FileId(9), time_ns: 8 },
            ReplicaOp::Unprepare { dir: FileId(9) },
            ReplicaOp::Adopt { shard: 2, cred: Cred::with_groups(5, 6, &[7]), to: "/a/b".into(), attr: FileAttr { id: FileId(10), kind: FileKind::Symlink, layout: None, ..attr.clone() }, target: Some("t".into()) },
            ReplicaOp::Name { shard: 1, parent: FileId(9), cred: Cred::new(5, 6), to: "/a/c".into(), attr: FileAttr { id: FileId(10), kind: FileKind::Fifo, layout: None, ..attr.clone() }, replace: true },
            ReplicaOp::Unname { shard: 1, parent: FileId(9), name: "c".into(), file: FileId(10), time_ns: 12 },
            ReplicaOp::Unlink { shard: 2, parent: FileId(9), name: "c".into(), file: FileId(10), made: 7, time_ns: 13 },
        ];
        for op in &ops {
            assert_eq!(&ReplicaOp::from_bytes(&op.to_bytes()).unwrap(), op);
            let mac = seal(&key, 2, 10, op);
            assert!(check_seal(&key, 2, 10, op, &mac));
            assert!(!check_seal(&key, 2, 11, op, &mac), "another sequence number");
            assert!(!check_seal(&key, 3, 10, op, &mac), "another coordinator");
        }
        assert!(!check_seal(&key, 2, 10, &ops[2], &seal(&key, 2, 10, &ops[3])));
        let dir_name = ReplicaOp::Name { shard: 1, parent: FileId(9), cred: Cred::new(5, 6), to: "/a/c".into(), attr: attr.clone(), replace: false };
        assert!(ReplicaOp::from_bytes(&dir_name.to_bytes()).is_err(), "a hard link of a directory");
        let mut bad = ops[4].to_bytes();
        bad[9 + 4] = b'/';
        assert!(ReplicaOp::from_bytes(&bad).is_err(), "a name with a slash");
        let ok = DirMove { dir: FileId(9), from: (FileId(1), "a".into()), to: (FileId(12), "b".into()), replaces: Some(FileId(13)) };
        for bad in [
            DirMove { replaces: Some(FileId(9)), ..ok.clone() },
            DirMove { to: (FileId(9), "b".into()), ..ok.clone() },
            DirMove { from: (FileId(9), "a".into()), ..ok.clone() },
            DirMove { dir: FileId(1), ..ok.clone() },
            DirMove { replaces: Some(FileId(1)), ..ok.clone() },
            DirMove { replaces: Some(FileId(12)), ..ok.clone() },
            DirMove { to: (FileId(1), "a".into()), ..ok.clone() },
        ] {
            assert!(ReplicaOp::from_bytes(&ReplicaOp::PrepareMove(bad.clone()).to_bytes()).is_err(), "{bad:?}");
        }
    }
}
