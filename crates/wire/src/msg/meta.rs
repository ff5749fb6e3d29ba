//! Metadata-service messages: namespace operations and file attributes.
//!
//! # Wire format
//! `MetaReq`: `op u8 | fields...`, strings as `u32 len | utf8`.
//! `FileAttr`: `id u64 | kind u8 | mode u32 | uid u32 | gid u32 | mtime_ns i64 |
//! ctime_ns i64 | has_layout u8 | [stripe_size u64 | count u32 | server u32 * count]`.

use crate::limits::{MAX_DIR_PAGE, MAX_NAME_LEN, MAX_PATH_LEN, MAX_STRIPE_COUNT, MAX_STRIPE_SIZE};
use crate::{DecodeError, Decoder, Encoder, FileId, ServerId};

/// Most supplementary groups a request carries: 16, as NFS's AUTH_SYS
/// (a process in more groups is checked with its first 16).
pub const MAX_GROUPS: usize = 16;

/// Who asks: permission checks use it; uid 0 passes every check, as on
/// POSIX. Group permission bits apply to the primary group and to the
/// supplementary groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    groups: [u32; MAX_GROUPS],
    ngroups: u8,
}

impl Cred {
    /// An identity without supplementary groups.
    pub fn new(uid: u32, gid: u32) -> Self {
        Cred { uid, gid, groups: [0; MAX_GROUPS], ngroups: 0 }
    }

    /// An identity with supplementary groups (the first [`MAX_GROUPS`]).
    pub fn with_groups(uid: u32, gid: u32, groups: &[u32]) -> Self {
        let mut c = Cred::new(uid, gid);
        let n = groups.len().min(MAX_GROUPS);
        c.groups[..n].copy_from_slice(&groups[..n]);
        c.ngroups = n as u8;
        c
    }

    pub fn groups(&self) -> &[u32] {
        &self.groups[..usize::from(self.ngroups)]
    }

    /// Is `gid` this identity's primary or a supplementary group?
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups().contains(&gid)
    }

    pub fn encode(&self, e: &mut Encoder) {
        e.u32(self.uid).u32(self.gid).u8(self.ngroups);
        for g in self.groups() {
            e.u32(*g);
        }
    }

    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let (uid, gid) = (d.u32()?, d.u32()?);
        let n = usize::from(d.u8()?);
        if n > MAX_GROUPS {
            return Err(DecodeError::TooLong { what: "supplementary groups", len: n as u64, limit: MAX_GROUPS as u64 });
        }
        let mut groups = [0u32; MAX_GROUPS];
        for g in groups.iter_mut().take(n) {
            *g = d.u32()?;
        }
        Ok(Cred { uid, gid, groups, ngroups: n as u8 })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File = 1,
    Dir = 2,
    /// A symbolic link: its target is kept by the metadata service
    /// (`Readlink`); paths given to the service never follow links (a
    /// mount's kernel resolves them).
    Symlink = 3,
    /// A named pipe (FIFO): a name and attributes only; a mount's kernel
    /// makes the pipe.
    Fifo = 4,
    /// A Unix socket's name: attributes only, as a FIFO.
    Socket = 5,
}

/// How a file's bytes are spread: stripe `k` of the file lives on
/// `servers[k % servers.len()]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeLayout {
    pub stripe_size: u64,
    /// The data servers in stripe order; the first one is rotated per file.
    pub servers: Vec<ServerId>,
}

/// Layout wishes at create time; zero means "the cluster's default".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayoutHint {
    pub stripe_size: u64,
    pub stripe_count: u32,
}

/// A file's or directory's attributes as the metadata service keeps them.
/// The size is not here: it is the largest object end on the data servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileAttr {
    pub id: FileId,
    pub kind: FileKind,
    /// Permission bits (the low 12 bits of `st_mode`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// Names the entry has: a file's (or link's, FIFO's, socket's) hard
    /// links, 2 plus its subdirectories for a directory (as `st_nlink`).
    pub nlink: u32,
    /// Present for regular files only.
    pub layout: Option<StripeLayout>,
}

impl FileAttr {
    /// Do the mode bits give `cred` the access `want` (R = 4, W = 2,
    /// X = 1, or'ed)? The owner's bits, else the group's, else the
    /// others' (root is the caller's to decide).
    pub fn mode_permits(&self, cred: Cred, want: u32) -> bool {
        let bits = if cred.uid == self.uid {
            self.mode >> 6
        } else if cred.in_group(self.gid) {
            self.mode >> 3
        } else {
            self.mode
        };
        bits & want == want
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub attr: FileAttr,
    /// A file's size when the metadata service knows it (as `Stat`'s).
    pub size: Option<u64>,
    /// Another name of a file another metadata shard keeps (a hard link
    /// across shards): `attr` is as it was when the name was made; the
    /// client asks for the file's own (`Stat` of the name is routed there).
    pub elsewhere: bool,
}

/// One namespace operation. Paths are absolute (`/a/b`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaReq {
    Create { path: String, mode: u32, exclusive: bool, hint: LayoutHint },
    Mkdir { path: String, mode: u32 },
    Stat { path: String },
    /// Like `Stat`, but checks read or write permission on the file.
    Open { path: String, write: bool },
    /// Up to `max` entries whose names sort after `after` ("" for the first page).
    Readdir { path: String, after: String, max: u32 },
    Unlink { path: String },
    Rmdir { path: String },
    Rename { from: String, to: String },
    Chmod { path: String, mode: u32 },
    /// Changes owner and group: root, or the owner keeping the owner and
    /// choosing one of its groups (`_POSIX_CHOWN_RESTRICTED`, as Linux).
    /// [`KEEP_ID`] for either keeps it (chown(2)'s -1).
    Chown { path: String, uid: u32, gid: u32 },
    /// An MPI-IO shared file pointer, named by a random token its job's
    /// rank 0 drew at open. Answered with `Pointer` (the value before).
    SharedPointer { token: u64, op: PointerOp },
    /// Creates a symbolic link at `path` pointing to `target` (any text,
    /// not checked, as symlink(2)).
    Symlink { path: String, target: String },
    /// A symbolic link's target, answered with `Link`.
    Readlink { path: String },
    /// Sets the modification time (utimensat(2)); [`TIME_NOW`] means the
    /// service's clock. Answered with `Attr`.
    SetTimes { path: String, mtime_ns: i64 },
    /// Like `Stat`, answered with `Stat`: the attributes and the file's size
    /// when the service knows it (no writer has the file open).
    StatSize { path: String },
    /// A handle opened for writing (`Open { write: true }` or `Create`) is
    /// closed; `wrote`: it changed the file; `size`: the file's size as the
    /// handle knows it exactly (it made the file by an exclusive create and
    /// followed every change since, all its own), if it does. Answered `Ok`,
    /// or `Measure` when this close left no writer and the size must be
    /// measured: never when `size` is given and the handle was the only
    /// write open since the file last had none (the service takes `size`).
    Close { file: FileId, wrote: bool, size: Option<u64> },
    /// The size measured (asked of every data server) after a close that
    /// was answered `Measure { epoch }`.
    SetSize { file: FileId, epoch: u64, size: u64 },
    /// A fresh capability for a file already open, in exchange for the
    /// one it holds (which may have expired, but must be genuine): at most
    /// the old rights, less those the file's mode no longer gives the
    /// caller (its owner keeps them). `path` is the name the file was
    /// opened by: every directory on it must still let the caller search
    /// it, and a caller other than the owner must still find the file
    /// there. Answered with `Cap`.
    Renew { old: super::cap::Capability, path: String },
    /// An attribute change of file `file` named by its id, not a path (a
    /// mount's inode: another client may have renamed it meanwhile), with
    /// the rules of `Chmod`, `Chown` and `SetTimes`. Answered with `Attr`;
    /// `NotFound` if the file is gone. `changes` (1 to
    /// [`MAX_ATTR_CHANGES`]) are made in order, all or none: a mount sends
    /// those it held for a file it made and has open (tar's times, owner
    /// and mode) as one.
    Change { file: FileId, changes: Vec<AttrChange> },
    /// `StatSize` of file `file` by its id: root only (a mount, which
    /// stands behind the kernel's own path checks, asking for an inode
    /// another client renamed); answered with `Stat`.
    StatId { file: FileId },
    /// Makes a FIFO or a socket name at `path` (mknod(2); `kind` one of
    /// those two). Answered with `Attr`.
    Mknod { path: String, mode: u32, kind: FileKind },
    /// A new name `to` for the file or link at `from` (link(2)): its link
    /// count grows by one. Answered with `Attr` (the file's, after).
    Link { from: String, to: String },
    /// Makes every metadata change answered so far durable (fsync and
    /// fsyncdir on a cluster that commits metadata within a window).
    /// Answered with `Ok` once it is.
    Sync,
    /// `Readdir` on a cluster of `shards` metadata shards: the entries this
    /// shard keeps; the client asks every shard and merges by name.
    ReaddirShard { path: String, after: String, max: u32, shards: u32 },
    /// A directory change pushed by metadata shard `coord` (its `seq`-th);
    /// only servers may send it (`mac`, see [`super::replica`]).
    Replica { coord: u32, seq: u64, op: Box<super::replica::ReplicaOp>, mac: [u8; 32] },
    /// A namespace change or a pointer's fetch-and-add
    /// ([`MetaReq::answered_once`]) tagged so that
    /// sending it again is answered, not applied again: `client` is a
    /// random number the client drew, `seq` its count of such requests.
    /// The service keeps the answer under the tag, durable when the change
    /// is, for the same identity and request only. Answered as `op` is.
    Once { client: u64, seq: u64, op: Box<MetaReq> },
}

/// What [`MetaReq::Change`] changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrChange {
    Mode(u32),
    /// [`KEEP_ID`] keeps either.
    Owner { uid: u32, gid: u32 },
    /// [`TIME_NOW`] for the service's clock.
    Mtime(i64),
}

/// Most attribute changes one `Change` carries.
pub const MAX_ATTR_CHANGES: usize = 8;

/// `Chown`'s "leave this one as it is" (chown(2)'s -1).
pub const KEEP_ID: u32 = u32::MAX;

/// `SetTimes`' "now": the service's clock, allowed to anyone who may write
/// the file (an explicit time only to its owner or root).
pub const TIME_NOW: i64 = i64::MIN;

/// What to do to a shared file pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointerOp {
    /// Creates the pointer (or resets it) at this value.
    Set(u64),
    /// Adds atomically; the pointer must exist.
    FetchAdd(u64),
    /// Forgets the pointer (at the file's collective close).
    Release,
}

impl FileAttr {
    pub fn encode(&self, e: &mut Encoder) {
        e.u64(self.id.0).u8(self.kind as u8).u32(self.mode).u32(self.uid).u32(self.gid);
        e.i64(self.mtime_ns).i64(self.ctime_ns).u32(self.nlink);
        match &self.layout {
            None => {
                e.u8(0);
            }
            Some(l) => {
                e.u8(1).u64(l.stripe_size).u32(l.servers.len() as u32);
                for s in &l.servers {
                    e.u32(s.0);
                }
            }
        }
    }

    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let id = FileId(d.u64()?);
        let kind = match d.u8()? {
            1 => FileKind::File,
            2 => FileKind::Dir,
            3 => FileKind::Symlink,
            4 => FileKind::Fifo,
            5 => FileKind::Socket,
            t => return Err(DecodeError::BadTag { what: "file kind", tag: t.into() }),
        };
        let (mode, uid, gid) = (d.u32()?, d.u32()?, d.u32()?);
        let (mtime_ns, ctime_ns, nlink) = (d.i64()?, d.i64()?, d.u32()?);
        let layout = if d.bool()? {
            let stripe_size = d.u64()?;
            if stripe_size == 0 {
                return Err(DecodeError::Invalid("stripe size 0"));
            }
            if stripe_size > MAX_STRIPE_SIZE {
                return Err(DecodeError::TooLong { what: "stripe size", len: stripe_size, limit: MAX_STRIPE_SIZE });
            }
            let n = d.count("stripe count", MAX_STRIPE_COUNT, 4)?;
            if n == 0 {
                return Err(DecodeError::Invalid("stripe count 0"));
            }
            let servers = (0..n).map(|_| d.u32().map(ServerId)).collect::<Result<_, _>>()?;
            Some(StripeLayout { stripe_size, servers })
        } else {
            None
        };
        Ok(FileAttr { id, kind, mode, uid, gid, mtime_ns, ctime_ns, nlink, layout })
    }
}

fn path(d: &mut Decoder<'_>) -> Result<String, DecodeError> {
    d.str("path", MAX_PATH_LEN)
}

impl MetaReq {
    pub fn encode(&self, e: &mut Encoder) {
        match self {
            MetaReq::Create { path, mode, exclusive, hint } => {
                e.u8(1).str(path).u32(*mode).bool(*exclusive).u64(hint.stripe_size).u32(hint.stripe_count);
            }
            MetaReq::Mkdir { path, mode } => {
                e.u8(2).str(path).u32(*mode);
            }
            MetaReq::Stat { path } => {
                e.u8(3).str(path);
            }
            MetaReq::Open { path, write } => {
                e.u8(4).str(path).bool(*write);
            }
            MetaReq::Readdir { path, after, max } => {
                e.u8(5).str(path).str(after).u32(*max);
            }
            MetaReq::Unlink { path } => {
                e.u8(6).str(path);
            }
            MetaReq::Rmdir { path } => {
                e.u8(7).str(path);
            }
            MetaReq::Rename { from, to } => {
                e.u8(8).str(from).str(to);
            }
            MetaReq::Chmod { path, mode } => {
                e.u8(9).str(path).u32(*mode);
            }
            MetaReq::Chown { path, uid, gid } => {
                e.u8(10).str(path).u32(*uid).u32(*gid);
            }
            MetaReq::SharedPointer { token, op } => {
                e.u8(11).u64(*token);
                match op {
                    PointerOp::Set(v) => e.u8(1).u64(*v),
                    PointerOp::FetchAdd(v) => e.u8(2).u64(*v),
                    PointerOp::Release => e.u8(3).u64(0),
                };
            }
            MetaReq::Symlink { path, target } => {
                e.u8(12).str(path).str(target);
            }
            MetaReq::Readlink { path } => {
                e.u8(13).str(path);
            }
            MetaReq::SetTimes { path, mtime_ns } => {
                e.u8(14).str(path).i64(*mtime_ns);
            }
            MetaReq::StatSize { path } => {
                e.u8(15).str(path);
            }
            MetaReq::Close { file, wrote, size } => {
                e.u8(16).u64(file.0).bool(*wrote);
                match size {
                    Some(s) => e.u8(1).u64(*s),
                    None => e.u8(0),
                };
            }
            MetaReq::SetSize { file, epoch, size } => {
                e.u8(17).u64(file.0).u64(*epoch).u64(*size);
            }
            MetaReq::Renew { old, path } => {
                e.u8(18);
                old.encode(e);
                e.str(path);
            }
            MetaReq::StatId { file } => {
                e.u8(20).u64(file.0);
            }
            MetaReq::Mknod { path, mode, kind } => {
                e.u8(21).str(path).u32(*mode).u8(*kind as u8);
            }
            MetaReq::Link { from, to } => {
                e.u8(22).str(from).str(to);
            }
            MetaReq::Sync => {
                e.u8(23);
            }
            MetaReq::ReaddirShard { path, after, max, shards } => {
                e.u8(24).str(path).str(after).u32(*max).u32(*shards);
            }
            MetaReq::Replica { coord, seq, op, mac } => {
                e.u8(25).u32(*coord).u64(*seq);
                op.encode(e);
                e.raw(mac);
            }
            MetaReq::Once { client, seq, op } => {
                e.u8(26).u64(*client).u64(*seq);
                op.encode(e);
            }
            MetaReq::Change { file, changes } => {
                // Callers send 1 to MAX_ATTR_CHANGES (`Client::changes_sized`
                // checks, and decoders refuse others); a count over 255
                // would not fit its byte.
                debug_assert!((1..=MAX_ATTR_CHANGES).contains(&changes.len()), "{} attribute changes in one request", changes.len());
                e.u8(19).u64(file.0).u8(changes.len().min(usize::from(u8::MAX)) as u8);
                for change in changes.iter().take(usize::from(u8::MAX)) {
                    match change {
                        AttrChange::Mode(m) => e.u8(1).u32(*m),
                        AttrChange::Owner { uid, gid } => e.u8(2).u32(*uid).u32(*gid),
                        AttrChange::Mtime(t) => e.u8(3).i64(*t),
                    };
                }
            }
        }
    }

    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(match d.u8()? {
            1 => MetaReq::Create {
                path: path(d)?,
                mode: d.u32()?,
                exclusive: d.bool()?,
                hint: layout_hint(d)?,
            },
            2 => MetaReq::Mkdir { path: path(d)?, mode: d.u32()? },
            3 => MetaReq::Stat { path: path(d)? },
            4 => MetaReq::Open { path: path(d)?, write: d.bool()? },
            5 => {
                let (path, after, max) = readdir_page(d)?;
                MetaReq::Readdir { path, after, max }
            }
            6 => MetaReq::Unlink { path: path(d)? },
            7 => MetaReq::Rmdir { path: path(d)? },
            8 => MetaReq::Rename { from: path(d)?, to: path(d)? },
            9 => MetaReq::Chmod { path: path(d)?, mode: d.u32()? },
            10 => MetaReq::Chown { path: path(d)?, uid: d.u32()?, gid: d.u32()? },
            11 => {
                let token = d.u64()?;
                let (tag, v) = (d.u8()?, d.u64()?);
                let op = match tag {
                    1 => PointerOp::Set(v),
                    2 => PointerOp::FetchAdd(v),
                    3 if v == 0 => PointerOp::Release,
                    3 => return Err(DecodeError::Invalid("release carries a value")),
                    t => return Err(DecodeError::BadTag { what: "pointer op", tag: t.into() }),
                };
                MetaReq::SharedPointer { token, op }
            }
            12 => {
                let (path, target) = (path(d)?, d.str("link target", crate::limits::MAX_LINK_TARGET_LEN)?);
                if target.is_empty() || target.contains('\0') {
                    return Err(DecodeError::Invalid("a link target is non-empty text without NUL"));
                }
                MetaReq::Symlink { path, target }
            }
            13 => MetaReq::Readlink { path: path(d)? },
            14 => MetaReq::SetTimes { path: path(d)?, mtime_ns: d.i64()? },
            15 => MetaReq::StatSize { path: path(d)? },
            16 => MetaReq::Close { file: FileId(d.u64()?), wrote: d.bool()?, size: if d.bool()? { Some(d.u64()?) } else { None } },
            17 => MetaReq::SetSize { file: FileId(d.u64()?), epoch: d.u64()?, size: d.u64()? },
            18 => MetaReq::Renew { old: super::cap::Capability::decode(d)?, path: path(d)? },
            19 => {
                let file = FileId(d.u64()?);
                let n = usize::from(d.u8()?);
                if n == 0 {
                    return Err(DecodeError::Invalid("an attribute change of nothing"));
                }
                if n > MAX_ATTR_CHANGES {
                    return Err(DecodeError::TooLong { what: "attribute changes", len: n as u64, limit: MAX_ATTR_CHANGES as u64 });
                }
                let mut changes = Vec::with_capacity(n);
                for _ in 0..n {
                    changes.push(match d.u8()? {
                        1 => AttrChange::Mode(d.u32()?),
                        2 => AttrChange::Owner { uid: d.u32()?, gid: d.u32()? },
                        3 => AttrChange::Mtime(d.i64()?),
                        t => return Err(DecodeError::BadTag { what: "attribute change", tag: t.into() }),
                    });
                }
                MetaReq::Change { file, changes }
            }
            20 => MetaReq::StatId { file: FileId(d.u64()?) },
            21 => {
                let (path, mode) = (path(d)?, d.u32()?);
                let kind = match d.u8()? {
                    4 => FileKind::Fifo,
                    5 => FileKind::Socket,
                    t => return Err(DecodeError::BadTag { what: "special file kind", tag: t.into() }),
                };
                MetaReq::Mknod { path, mode, kind }
            }
            22 => MetaReq::Link { from: path(d)?, to: path(d)? },
            23 => MetaReq::Sync,
            24 => {
                let (path, after, max) = readdir_page(d)?;
                let shards = d.u32()?;
                if shards == 0 {
                    return Err(DecodeError::Invalid("a cluster has at least one metadata shard"));
                }
                MetaReq::ReaddirShard { path, after, max, shards }
            }
            25 => MetaReq::Replica { coord: d.u32()?, seq: d.u64()?, op: Box::new(super::replica::ReplicaOp::decode(d)?), mac: d.fixed()? },
            26 => {
                let (client, seq) = (d.u64()?, d.u64()?);
                // One level: a tagged request is a change, never another tag.
                if d.peek_u8()? == 26 {
                    return Err(DecodeError::Invalid("a tagged request inside another"));
                }
                let op = MetaReq::decode(d)?;
                if !op.answered_once() {
                    return Err(DecodeError::Invalid("only namespace changes are tagged to be answered once"));
                }
                MetaReq::Once { client, seq, op: Box::new(op) }
            }
            t => return Err(DecodeError::BadTag { what: "meta op", tag: t.into() }),
        })
    }
}

fn readdir_page(d: &mut Decoder<'_>) -> Result<(String, String, u32), DecodeError> {
    let p = path(d)?;
    let after = d.str("name", MAX_NAME_LEN)?;
    let max = d.u32()?;
    if max as usize > MAX_DIR_PAGE {
        return Err(DecodeError::TooLong { what: "readdir page", len: max.into(), limit: MAX_DIR_PAGE as u64 });
    }
    Ok((p, after, max))
}

impl MetaReq {
    /// The namespace changes a client tags ([`MetaReq::Once`]) so that a
    /// resend after its connection broke (a server restart) is answered
    /// once: each would fail or do something else when applied twice. And
    /// a shared pointer's fetch-and-add, which the pointer table answers
    /// once the same way (its answers are kept with the pointer).
    pub fn answered_once(&self) -> bool {
        // An add of 0 (a position asked) changes nothing: sent again as is.
        if let MetaReq::SharedPointer { op, .. } = self {
            return matches!(op, PointerOp::FetchAdd(n) if *n != 0);
        }
        matches!(
            self,
            MetaReq::Create { .. }
                | MetaReq::Mkdir { .. }
                | MetaReq::Symlink { .. }
                | MetaReq::Mknod { .. }
                | MetaReq::Link { .. }
                | MetaReq::Unlink { .. }
                | MetaReq::Rmdir { .. }
                | MetaReq::Rename { .. }
        )
    }

    /// The request itself, without its [`MetaReq::Once`] tag.
    pub fn untagged(&self) -> &MetaReq {
        match self {
            MetaReq::Once { op, .. } => op,
            op => op,
        }
    }

    /// The path a request names (a rename's or link's source; a listing's
    /// directory is not an entry of its own): where a sharded cluster
    /// keeps it.
    pub fn path(&self) -> Option<&str> {
        match self {
            MetaReq::Once { op, .. } => op.path(),
            MetaReq::Rename { from: p, .. }
            | MetaReq::Link { from: p, .. }
            | MetaReq::Create { path: p, .. }
            | MetaReq::Mkdir { path: p, .. }
            | MetaReq::Stat { path: p }
            | MetaReq::Open { path: p, .. }
            | MetaReq::Unlink { path: p }
            | MetaReq::Rmdir { path: p }
            | MetaReq::Chmod { path: p, .. }
            | MetaReq::Chown { path: p, .. }
            | MetaReq::Symlink { path: p, .. }
            | MetaReq::Readlink { path: p }
            | MetaReq::SetTimes { path: p, .. }
            | MetaReq::StatSize { path: p }
            | MetaReq::Mknod { path: p, .. } => Some(p),
            _ => None,
        }
    }

    /// The file a request names by its id.
    pub fn file(&self) -> Option<FileId> {
        match self {
            MetaReq::Close { file, .. } | MetaReq::SetSize { file, .. } | MetaReq::StatId { file } | MetaReq::Change { file, .. } => Some(*file),
            MetaReq::Renew { old, .. } => Some(old.file),
            _ => None,
        }
    }

    /// Whether the request only reads the namespace.
    pub fn reads_only(&self) -> bool {
        matches!(self, MetaReq::Stat { .. } | MetaReq::StatSize { .. } | MetaReq::StatId { .. } | MetaReq::Open { .. } | MetaReq::Readdir { .. } | MetaReq::ReaddirShard { .. } | MetaReq::Readlink { .. })
    }
}

/// A create's layout hint; 0 means "the cluster's default" for either field.
fn layout_hint(d: &mut Decoder<'_>) -> Result<LayoutHint, DecodeError> {
    let hint = LayoutHint { stripe_size: d.u64()?, stripe_count: d.u32()? };
    if hint.stripe_size > MAX_STRIPE_SIZE {
        return Err(DecodeError::TooLong { what: "stripe size", len: hint.stripe_size, limit: MAX_STRIPE_SIZE });
    }
    if hint.stripe_count as usize > MAX_STRIPE_COUNT {
        return Err(DecodeError::TooLong { what: "stripe count", len: hint.stripe_count.into(), limit: MAX_STRIPE_COUNT as u64 });
    }
    Ok(hint)
}

#[cfg(test)]
mod cred_tests {
    use super::*;

    #[test]
    fn groups_round_trip_and_more_than_sixteen_are_refused() {
        let c = Cred::with_groups(5, 6, &[7, 8, 9]);
        let mut e = Encoder::new();
        c.encode(&mut e);
        let bytes = e.finish();
        assert_eq!(Cred::decode(&mut Decoder::new(&bytes)).unwrap(), c);
        assert!(c.in_group(6) && c.in_group(8) && !c.in_group(10));
        // Only the first 16 are kept when building; 17 on the wire is an error.
        assert_eq!(Cred::with_groups(1, 1, &(0..40).collect::<Vec<_>>()).groups().len(), MAX_GROUPS);
        let mut raw = bytes[..8].to_vec();
        raw.push(17);
        raw.extend((0..17u32).flat_map(|g| g.to_le_bytes()));
        assert!(matches!(Cred::decode(&mut Decoder::new(&raw)), Err(DecodeError::TooLong { .. })));
    }
}
