//! The namespace's tables in redb, the errors of namespace operations,
//! and the permission checks every operation shares.

use super::path::components;
use redb::{Database, ReadableTable, TableDefinition};
use thiserror::Error;
use weft_wire::{Cred, ErrorCode, FileAttr, FileId, FileKind};
use weft_wire::{Decoder, Encoder};

pub(super) const INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("inodes");
pub(super) const DIRENTS: TableDefinition<(u64, &str), u64> = TableDefinition::new("dirents");
pub(super) const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
pub(super) const LINKS: TableDefinition<u64, &str> = TableDefinition::new("links");

/// The root directory's id.
pub const ROOT: FileId = FileId(1);

pub(super) const R: u32 = 4;
pub(super) const W: u32 = 2;
pub(super) const X: u32 = 1;

/// A failed namespace operation: a wire error code and a message.
#[derive(Debug, Error)]
#[error("{}: {message}", code.name())]
pub struct MetaError {
    pub code: ErrorCode,
    pub message: String,
    /// The database itself failed (not the request): the store recovers.
    pub(super) storage: bool,
    /// Not an error: another metadata shard keeps what the request names
    /// (the `Route` answer; found while walking its path).
    pub(super) route: Option<(u32, u32, FileId)>,
}

impl MetaError {
    /// The same error again, for each request of a group that failed together.
    pub(super) fn duplicate(&self) -> Self {
        MetaError { code: self.code, message: self.message.clone(), storage: self.storage, route: self.route }
    }
}

pub(super) fn err(code: ErrorCode, message: impl Into<String>) -> MetaError {
    MetaError { code, message: message.into(), storage: false, route: None }
}

/// The answer "ask shard `shard` of `shards`" (see [`MetaError::route`]).
pub(super) fn routed(shard: u32, shards: u32, parent: FileId) -> MetaError {
    MetaError { code: ErrorCode::Internal, message: format!("ask metadata shard {shard}"), storage: false, route: Some((shard, shards, parent)) }
}

impl MetaError {
    /// The response this error is answered with.
    pub(super) fn into_response(self) -> weft_wire::Response {
        match self.route {
            Some((shard, shards, parent)) => weft_wire::Response::Route { shard, shards, parent },
            None => weft_wire::Response::error(self.code, self.message),
        }
    }
}

macro_rules! db_err {
    ($($t:ty),*) => {$(
        impl From<$t> for MetaError {
            fn from(e: $t) -> Self {
                tracing::error!(target: "weft::meta", error = %e, "database error");
                let message = format!("metadata database: {e}");
                // redb passes the OS error's text through.
                let code = if message.contains("No space left") { ErrorCode::NoSpace } else { ErrorCode::Io };
                MetaError { code, message, storage: true, route: None }
            }
        }
    )*};
}
db_err!(redb::Error, redb::DatabaseError, redb::TransactionError, redb::TableError, redb::StorageError, redb::CommitError);

impl From<super::store::Unavailable> for MetaError {
    fn from(e: super::store::Unavailable) -> Self {
        // Not a storage error of this request: nothing to reopen now (the
        // next request tries again).
        MetaError { code: ErrorCode::Io, message: e.0, storage: false, route: None }
    }
}

pub(super) type Result<T> = std::result::Result<T, MetaError>;

pub(super) fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

pub(super) fn decode_attr(bytes: &[u8]) -> Result<FileAttr> {
    let mut d = Decoder::new(bytes);
    // Whole: a record with bytes left over is not of this format.
    FileAttr::decode(&mut d).and_then(|a| d.finish().map(|()| a)).map_err(|e| err(ErrorCode::Internal, format!("corrupt inode record: {e}")))
}

pub(super) fn encode_attr(a: &FileAttr) -> Vec<u8> {
    let mut e = Encoder::new();
    a.encode(&mut e);
    e.finish()
}

/// May `cred` access a file with `attr` for `want` (R, W, X bits)? Root may always.
pub(super) fn may(cred: Cred, attr: &FileAttr, want: u32) -> bool {
    cred.uid == 0 || attr.mode_permits(cred, want)
}

/// The sticky bit (mode 01000, as on /tmp): in such a directory only the
/// entry's owner, the directory's owner or root may remove or rename it.
pub(super) fn check_sticky(cred: Cred, dir: &FileAttr, entry: &FileAttr, path: &str) -> Result<()> {
    if dir.mode & 0o1000 == 0 || cred.uid == 0 || cred.uid == entry.uid || cred.uid == dir.uid {
        return Ok(());
    }
    Err(err(ErrorCode::Permission, format!("uid {} may not remove or rename {path}: the directory is sticky and uid {} owns it", cred.uid, entry.uid)))
}

pub(super) fn check(cred: Cred, attr: &FileAttr, want: u32, what: &str) -> Result<()> {
    if may(cred, attr, want) { Ok(()) } else { Err(err(ErrorCode::Permission, format!("uid {} may not {what}", cred.uid))) }
}

pub(super) fn split_parent(path: &str) -> Result<(Vec<&str>, &str)> {
    let mut comps = components(path).map_err(|m| err(ErrorCode::InvalidPath, m))?;
    let name = comps.pop().ok_or_else(|| err(ErrorCode::InvalidPath, "the root directory cannot be used here"))?;
    Ok((comps, name))
}

/// Both tables a path walk needs, read-only or inside a write transaction.
pub(super) struct Tables<I, D> {
    pub(super) inodes: I,
    pub(super) dirents: D,
}

impl<I: ReadableTable<u64, &'static [u8]>, D: ReadableTable<(u64, &'static str), u64>> Tables<I, D> {
    pub(super) fn inode(&self, id: u64) -> Result<FileAttr> {
        let v = self.inodes.get(id)?.ok_or_else(|| err(ErrorCode::Internal, format!("dangling file id {id}")))?;
        decode_attr(v.value())
    }

    pub(super) fn child(&self, dir: u64, name: &str) -> Result<Option<u64>> {
        Ok(self.dirents.get((dir, name))?.map(|v| v.value()))
    }

    /// The file entry `path` names, `id`. An entry without a file here is
    /// a name of a file another metadata shard keeps (a link across
    /// shards): requests on it are routed there, so only a request that
    /// raced the name's making or removal finds one.
    pub(super) fn entry(&self, id: u64, path: &str) -> Result<FileAttr> {
        match self.inodes.get(id)? {
            Some(v) => decode_attr(v.value()),
            None => Err(err(ErrorCode::Busy, format!("{path} is a name of a file another metadata shard keeps, made or removed just now; try again"))),
        }
    }

    /// Walks `comps` from the root, checking search permission on each directory.
    pub(super) fn walk(&self, cred: Cred, comps: &[&str]) -> Result<FileAttr> {
        let mut cur = self.inode(ROOT.0)?;
        for (i, c) in comps.iter().enumerate() {
            if cur.kind != FileKind::Dir {
                return Err(err(ErrorCode::NotDir, format!("/{} is not a directory", comps[..i].join("/"))));
            }
            check(cred, &cur, X, "search this directory")?;
            let id = self.child(cur.id.0, c)?.ok_or_else(|| err(ErrorCode::NotFound, format!("/{} does not exist", comps[..=i].join("/"))))?;
            // A name of a file another shard keeps (a link across shards)
            // is no directory: walks are of directories (a path's last
            // entry is looked up by `walk_from` or `entry`), or race it.
            cur = match self.inodes.get(id)? {
                Some(v) => decode_attr(v.value())?,
                None => return Err(err(ErrorCode::NotDir, format!("/{} is not a directory", comps[..=i].join("/")))),
            };
        }
        Ok(cur)
    }

    /// The last step of [`Tables::walk`]: entry `name` of `dir`, which the
    /// walk of `dir_comps` found.
    pub(super) fn walk_from(&self, cred: Cred, dir: FileAttr, dir_comps: &[&str], name: &str) -> Result<FileAttr> {
        if dir.kind != FileKind::Dir {
            return Err(err(ErrorCode::NotDir, format!("/{} is not a directory", dir_comps.join("/"))));
        }
        check(cred, &dir, X, "search this directory")?;
        let path = format!("/{}/{name}", dir_comps.join("/")).replacen("//", "/", 1);
        let id = self.child(dir.id.0, name)?.ok_or_else(|| err(ErrorCode::NotFound, format!("{path} does not exist")))?;
        self.entry(id, &path)
    }

    /// The parent directory of a path, checked to be a directory the caller may change.
    pub(super) fn parent_for_change(&self, cred: Cred, comps: &[&str]) -> Result<FileAttr> {
        let parent = self.walk(cred, comps)?;
        if parent.kind != FileKind::Dir {
            return Err(err(ErrorCode::NotDir, format!("/{} is not a directory", comps.join("/"))));
        }
        check(cred, &parent, W | X, "change this directory")?;
        Ok(parent)
    }

    pub(super) fn is_empty_dir(&self, id: u64) -> Result<bool> {
        Ok(self.dirents.range((id, "")..(id + 1, ""))?.next().is_none())
    }
}

/// The tables of a write transaction.
pub(super) type WriteTables<'tx> = Tables<redb::Table<'tx, u64, &'static [u8]>, redb::Table<'tx, (u64, &'static str), u64>>;

impl WriteTables<'_> {
    /// Directory `dir` gained or lost an entry: its times move to `now`,
    /// and its link count by `subdirs` (a subdirectory's ".." names it).
    pub(super) fn entries_changed(&mut self, dir: u64, subdirs: i32, now: i64) -> Result<()> {
        self.change_entries(dir, subdirs, now, false)?;
        CHANGED_DIRS.with(|c| c.borrow_mut().push((FileId(dir), now)));
        Ok(())
    }

    /// [`WriteTables::entries_changed`] told by another shard, at `at`:
    /// times move up to it, never back (it may arrive late).
    pub(super) fn entries_changed_since(&mut self, dir: u64, subdirs: i32, at: i64) -> Result<()> {
        self.change_entries(dir, subdirs, at, true)
    }

    fn change_entries(&mut self, dir: u64, subdirs: i32, at: i64, never_back: bool) -> Result<()> {
        let mut a = self.inode(dir)?;
        a.nlink = a.nlink.checked_add_signed(subdirs).ok_or_else(|| err(ErrorCode::Internal, format!("directory {dir}'s link count {} cannot change by {subdirs}", a.nlink)))?;
        let moved = |t: i64| if never_back { t.max(at) } else { at };
        a.mtime_ns = moved(a.mtime_ns);
        a.ctime_ns = moved(a.ctime_ns);
        self.inodes.insert(dir, encode_attr(&a).as_slice())?;
        Ok(())
    }
}

thread_local! {
    /// Directories whose entries this thread's transaction changed, with
    /// when (a sharded service tells their home shards; see
    /// `shards::Touched`). Cleared by the batch that reads it.
    pub(super) static CHANGED_DIRS: std::cell::RefCell<Vec<(FileId, i64)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The tables of a read-only transaction.
pub(super) type ReadTables = Tables<redb::ReadOnlyTable<u64, &'static [u8]>, redb::ReadOnlyTable<(u64, &'static str), u64>>;

pub(super) fn read_tables(db: &Database) -> Result<ReadTables> {
    let tx = db.begin_read()?;
    Ok(Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? })
}
