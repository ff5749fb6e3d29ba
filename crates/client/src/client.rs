//! The client handle and namespace operations.

use crate::lock_session::LockGuard;
use crate::file::File;
use crate::options::ClientOptions;
use crate::session::Session;
use crate::{Error, Result};
use std::path::Path;
use std::sync::Arc;
use weft_net::{Call, ClusterFile, ServerEntry};
use weft_wire::{AttrChange, Capability, Cred, DirEntry, FileAttr, FileId, FileKind, LayoutHint, MetaReq, PointerOp, Request, Response, ServerStats};

/// How long a request answered `Busy` (a shard's "try again": a rename
/// across shards under way) is asked again.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// `ask`, asked again while a shard answers `Busy`, for up to [`BUSY_RETRY`].
fn while_busy<T>(mut ask: impl FnMut() -> Result<T>) -> Result<T> {
    let give_up = std::time::Instant::now() + BUSY_RETRY;
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match ask() {
            Err(Error::Busy { .. }) if std::time::Instant::now() + pause < give_up => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

/// How to create a file.
#[derive(Debug, Clone, Copy)]
pub struct CreateOptions {
    pub mode: u32,
    /// Fail with `Exists` if the file exists (else open it).
    pub exclusive: bool,
    /// Bytes per stripe; 0 for the cluster's default.
    pub stripe_size: u64,
    /// Servers to stripe over; 0 for all data servers.
    pub stripe_count: u32,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions { mode: 0o644, exclusive: false, stripe_size: 0, stripe_count: 0 }
    }
}

/// One server's answer to `status`.
#[derive(Debug)]
pub struct ServerStatus {
    pub server: ServerEntry,
    pub stats: Result<ServerStats>,
}
/// A connection to a Weft cluster. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct Client {
    session: Arc<Session>,
}

impl Client {
    /// Connects using the cluster file at `path` (connections open lazily).
    pub fn connect(path: &Path) -> Result<Self> {
        Self::with_options(ClusterFile::load(path)?, ClientOptions::default())
    }

    pub fn with_options(cluster: ClusterFile, options: ClientOptions) -> Result<Self> {
        Ok(Client { session: Arc::new(Session::new(cluster, options)?) })
    }

    /// The identity this client acts as.
    pub fn cred(&self) -> Cred {
        self.session.options.cred
    }

    /// This client acting as `cred` for namespace requests (a FUSE mount
    /// creating files for the user who asked): same connections and lock
    /// session. Only a trusted process should assert another identity;
    /// see docs/security.md.
    pub fn with_cred(&self, cred: Cred) -> Client {
        Client { session: Arc::new(self.session.with_cred(cred)) }
    }

    pub fn cluster(&self) -> &ClusterFile {
        &self.session.cluster
    }

    /// How this client reaches `addr` now (`tcp`, `shm`), if connected.
    pub fn transport_of(&self, addr: std::net::SocketAddr) -> Option<&'static str> {
        self.session.endpoint.transport_of(addr)
    }

    /// The message layer's counters (connections, eager and rendezvous
    /// requests, rails) of this client.
    pub fn endpoint_stats(&self) -> weft_net::EndpointStats {
        self.session.endpoint.stats()
    }

    /// Connections this client has open now (one per server it has used).
    pub fn connections(&self) -> usize {
        self.session.endpoint.connections()
    }


    /// Makes every metadata change answered so far durable (on every
    /// shard): a no-op round trip saved when the cluster commits each
    /// change durably anyway (`meta_sync_window_ms = 0`).
    pub fn sync_meta(&self) -> Result<()> {
        self.session.sync_meta()
    }

    /// Creates (or, unless exclusive, opens) a regular file for writing.
    pub fn create(&self, path: &str, opts: CreateOptions) -> Result<File> {
        let hint = LayoutHint { stripe_size: opts.stripe_size, stripe_count: opts.stripe_count };
        let (attr, cap) = self.session.meta_granted(MetaReq::Create { path: path.into(), mode: opts.mode, exclusive: opts.exclusive, hint })?;
        let file = File::new(self.session.clone(), path, attr, cap, true).map(File::registered)?;
        // An exclusive create made the file: empty, and this handle sees
        // every change it makes.
        Ok(if opts.exclusive { file.made_empty() } else { file })
    }

    /// Opens an existing file, checking read (and if `write`, write) permission.
    pub fn open(&self, path: &str, write: bool) -> Result<File> {
        let addr = self.session.cluster.meta_server().addr;
        let (attr, cap) = match self.session.meta(MetaReq::Open { path: path.into(), write })? {
            Response::Granted { attr, cap } => (attr, cap),
            // A directory: no data, no capability.
            Response::Attr(_) => return Err(Error::IsDir(path.into())),
            other => return Err(Error::Protocol { addr, what: format!("expected attributes and a capability, got {other:?}") }),
        };
        File::new(self.session.clone(), path, attr, cap, write).map(File::registered)
    }

    /// A file another process of the same job has opened or created
    /// (MPI-IO's collective open: one rank asks the metadata service and
    /// passes the attributes on), without asking the metadata service again.
    /// An adopted handle is not counted as a writer: the process that opened
    /// the file must keep its own handle open until every adopted handle is
    /// done writing, then close it with [`File::close_after_writes_elsewhere`]
    /// (so stat never vouches for a size while they write).
    /// The capability comes with the attributes (rank 0's, renewed by each
    /// handle on its own when it ages).
    pub fn adopt(&self, path: &str, attr: FileAttr, cap: Capability, write: bool) -> Result<File> {
        File::new(self.session.clone(), path, attr, cap, write)
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Result<FileAttr> {
        self.session.meta_attr(MetaReq::Mkdir { path: path.into(), mode })
    }

    /// Attributes and, for a file, its size: from the metadata service when
    /// it knows it (no writer open), else asked of the data servers; a
    /// symbolic link's size is its target's length, as lstat(2)'s.
    pub fn stat(&self, path: &str) -> Result<(FileAttr, u64)> {
        self.stat_by(MetaReq::StatSize { path: path.into() }, Some(path), &|_| None)
    }

    /// [`Client::stat`], taking the size of a file open for writing from
    /// `known` when it has it, instead of asking the data servers (a mount
    /// knows the sizes of the files it writes).
    pub fn stat_knowing(&self, path: &str, known: &dyn Fn(FileId) -> Option<u64>) -> Result<(FileAttr, u64)> {
        self.stat_by(MetaReq::StatSize { path: path.into() }, Some(path), known)
    }

    /// [`Client::stat`] of file `file` by its id: root only (a mount asking
    /// for an inode whose path another client changed). A symbolic link's
    /// size is not known this way (0).
    pub fn stat_id(&self, file: FileId) -> Result<(FileAttr, u64)> {
        self.stat_by(MetaReq::StatId { file }, None, &|_| None)
    }

    /// A stat by `op`; `path` names the entry, when known.
    fn stat_by(&self, op: MetaReq, path: Option<&str>, local: &dyn Fn(FileId) -> Option<u64>) -> Result<(FileAttr, u64)> {
        let addr = self.session.cluster.meta_server().addr;
        let (attr, known, cap) = match self.session.meta(op)? {
            Response::Stat { attr, size, cap } => (attr, size, cap),
            other => return Err(Error::Protocol { addr, what: format!("expected attributes, got {other:?}") }),
        };
        // Known to the metadata service (no writer has the file open), or
        // else to the caller (its writer).
        let known = known.or_else(|| if attr.kind == FileKind::File { local(attr.id) } else { None });
        let size = match (attr.kind, known, cap) {
            (FileKind::File, Some(size), _) => size,
            (FileKind::File, None, Some(cap)) if attr.layout.is_some() => {
                let name = path.map_or_else(|| format!("file {}", attr.id.0), str::to_string);
                File::new(self.session.clone(), &name, attr.clone(), cap, false)?.size()?
            }
            (FileKind::File, None, None) => return Err(Error::Protocol { addr, what: "a size neither known nor with a capability to ask for it".into() }),
            (FileKind::Symlink, ..) => match path {
                Some(p) => self.readlink(p)?.len() as u64,
                None => 0,
            },
            _ => 0,
        };
        Ok((attr, size))
    }

    /// Makes a FIFO or a socket's name at `path` (`kind` one of those two):
    /// attributes only; a mount's kernel makes the pipe or socket.
    pub fn mknod(&self, path: &str, mode: u32, kind: FileKind) -> Result<FileAttr> {
        self.session.meta_attr(MetaReq::Mknod { path: path.into(), mode, kind })
    }

    /// Gives the file (or link) at `from` another name, `to` (link(2));
    /// its attributes after (the link count one more).
    pub fn link(&self, from: &str, to: &str) -> Result<FileAttr> {
        self.session.meta_attr(MetaReq::Link { from: from.into(), to: to.into() })
    }

    /// Creates a symbolic link at `path` pointing to `target`.
    pub fn symlink(&self, target: &str, path: &str) -> Result<FileAttr> {
        self.session.meta_attr(MetaReq::Symlink { path: path.into(), target: target.into() })
    }

    /// A symbolic link's target.
    pub fn readlink(&self, path: &str) -> Result<String> {
        let addr = self.session.cluster.meta_server().addr;
        match self.session.meta(MetaReq::Readlink { path: path.into() })? {
            Response::Link { target } => Ok(target),
            other => Err(Error::Protocol { addr, what: format!("expected a link target, got {other:?}") }),
        }
    }

    pub fn chmod(&self, path: &str, mode: u32) -> Result<FileAttr> {
        self.session.meta_attr(MetaReq::Chmod { path: path.into(), mode })
    }

    /// Sets the modification time of `path` (`None`: the metadata
    /// service's clock now, allowed to anyone who may write the file).
    pub fn set_mtime(&self, path: &str, mtime_ns: Option<i64>) -> Result<FileAttr> {
        self.session.meta_attr(MetaReq::SetTimes { path: path.into(), mtime_ns: mtime_ns.unwrap_or(weft_wire::TIME_NOW) })
    }

    /// Changes an attribute of file `file`, named by its id (not a path
    /// another client may have moved meanwhile); its attributes after.
    pub fn change(&self, file: FileId, change: AttrChange) -> Result<FileAttr> {
        self.change_sized(file, change).map(|(a, _)| a)
    }

    /// [`Client::change`], and the file's size when the metadata service
    /// knows it (a file no one has open for writing): what a stat after
    /// the change would say, without asking.
    pub fn change_sized(&self, file: FileId, change: AttrChange) -> Result<(FileAttr, Option<u64>)> {
        self.changes_sized(file, &[change])
    }

    /// [`Client::change_sized`] of several changes, made in order in one
    /// request, all or none (1 to [`weft_wire::MAX_ATTR_CHANGES`]). A
    /// shard's `Busy` is retried for up to [`BUSY_RETRY`].
    pub fn changes_sized(&self, file: FileId, changes: &[AttrChange]) -> Result<(FileAttr, Option<u64>)> {
        if changes.is_empty() || changes.len() > weft_wire::MAX_ATTR_CHANGES {
            return Err(Error::BadRequest(format!("{} attribute changes in one request: 1 to {} may go", changes.len(), weft_wire::MAX_ATTR_CHANGES)));
        }
        let addr = self.session.cluster.meta_server().addr;
        // A file whose name is moving to another shard answers `Busy`.
        match while_busy(|| self.session.meta(MetaReq::Change { file, changes: changes.to_vec() }))? {
            Response::Stat { attr, size, .. } => Ok((attr, size)),
            // Not a regular file (a directory, a symbolic link, ...).
            Response::Attr(attr) => Ok((attr, None)),
            other => Err(Error::Protocol { addr, what: format!("expected attributes, got {other:?}") }),
        }
    }

    /// Changes the owner and group of `path` (root only).
    pub fn chown(&self, path: &str, uid: u32, gid: u32) -> Result<FileAttr> {
        self.session.meta_attr(MetaReq::Chown { path: path.into(), uid, gid })
    }

    /// Applies `op` to the MPI-IO shared file pointer `token` (kept by the
    /// metadata service); returns its value before.
    pub fn shared_pointer(&self, token: u64, op: PointerOp) -> Result<u64> {
        let addr = self.session.cluster.meta_server().addr;
        match self.session.meta(MetaReq::SharedPointer { token, op })? {
            Response::Pointer { value } => Ok(value),
            other => Err(Error::Protocol { addr, what: format!("expected a pointer, got {other:?}") }),
        }
    }

    /// Every entry of a directory, sorted by name.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        if self.session.shards.count() > 1 {
            return self.readdir_sharded(path);
        }
        let addr = self.session.cluster.meta_server().addr;
        let mut all = Vec::new();
        loop {
            let after = all.last().map(|e: &DirEntry| e.name.clone()).unwrap_or_default();
            match self.session.meta(MetaReq::Readdir { path: path.into(), after, max: weft_wire::limits::MAX_DIR_PAGE as u32 })? {
                Response::Entries { entries, more } => {
                    all.extend(entries);
                    if !more {
                        return Ok(all);
                    }
                }
                other => return Err(Error::Protocol { addr, what: format!("expected entries, got {other:?}") }),
            }
        }
    }

    /// [`Client::readdir`] on a sharded cluster: every shard's entries,
    /// page by page from all shards at once, merged by name.
    fn readdir_sharded(&self, path: &str) -> Result<Vec<DirEntry>> {
        let addrs = &self.session.shards.addrs;
        let shards = addrs.len() as u32;
        let mut lists: Vec<Vec<DirEntry>> = vec![Vec::new(); addrs.len()];
        let mut open: Vec<usize> = (0..addrs.len()).collect();
        while !open.is_empty() {
            let mut calls: Vec<Call<'_>> = open
                .iter()
                .map(|&k| {
                    let after = lists[k].last().map(|e| e.name.clone()).unwrap_or_default();
                    let op = MetaReq::ReaddirShard { path: path.into(), after, max: weft_wire::limits::MAX_DIR_PAGE as u32, shards };
                    Call::new(addrs[k], Request::Meta { cred: self.session.options.cred, op }.encode())
                })
                .collect();
            self.session.run(&mut calls);
            let mut still = Vec::new();
            for (k, c) in open.into_iter().zip(calls) {
                let addr = c.peer;
                match Session::response(c)?.0 {
                    Response::Entries { entries, more } => {
                        lists[k].extend(entries);
                        if more {
                            still.push(k);
                        }
                    }
                    other => return Err(Error::Protocol { addr, what: format!("expected entries, got {other:?}") }),
                }
            }
            open = still;
        }
        let mut all: Vec<(usize, DirEntry)> = lists.into_iter().enumerate().flat_map(|(k, l)| l.into_iter().map(move |e| (k, e))).collect();
        all.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        self.refresh_elsewhere(path, &mut all);
        Ok(all.into_iter().map(|(_, e)| e).collect())
    }

    /// Names of files another shard keeps (hard links across shards) come
    /// in a listing with the file's attributes as they were: asked for
    /// anew, all at once, from the shard that listed each (whose stub sends
    /// the request on), then from the file's shard. A name removed since
    /// leaves the listing; one whose shard does not answer stays as listed
    /// (still flagged). `all`: (shard that listed it, entry).
    fn refresh_elsewhere(&self, dir_path: &str, all: &mut Vec<(usize, DirEntry)>) {
        let dir = dir_path.trim_end_matches('/');
        let addrs = &self.session.shards.addrs;
        let count = addrs.len() as u32;
        let mut todo: Vec<(usize, u32)> = all.iter().enumerate().filter(|(_, (_, e))| e.elsewhere).map(|(i, (k, _))| (i, *k as u32)).collect();
        let mut gone = Vec::new();
        for _ in 0..2 {
            if todo.is_empty() {
                break;
            }
            let mut calls: Vec<Call<'_>> = todo
                .iter()
                .map(|&(i, shard)| {
                    let op = MetaReq::Stat { path: format!("{dir}/{}", all[i].1.name) };
                    Call::new(addrs[shard as usize], Request::Meta { cred: self.session.options.cred, op }.encode())
                })
                .collect();
            // As many at once as a listing page's shards would send.
            self.session.run_window(&mut calls, 64);
            let mut next = Vec::new();
            for ((i, _), c) in todo.into_iter().zip(calls) {
                match Session::response(c).map(|r| r.0) {
                    Ok(Response::Attr(a)) => (all[i].1.attr, all[i].1.elsewhere) = (a, false),
                    Ok(Response::Route { shard, shards, .. }) if shards == count && shard < count => next.push((i, shard)),
                    Err(Error::NotFound(_)) => gone.push(i),
                    _ => {}
                }
            }
            todo = next;
        }
        gone.sort_unstable();
        for i in gone.into_iter().rev() {
            all.remove(i);
        }
    }

    /// Removes a name; with a file's last name, the metadata service
    /// deletes its objects once the removal is durable.
    pub fn unlink(&self, path: &str) -> Result<()> {
        self.unlink_timed(path).map(|_| ())
    }

    /// [`Client::unlink`], and the time its directory's mtime and ctime
    /// moved to (the metadata service's clock, in ns; on several metadata
    /// shards the directory's home shard moves them only forward to it),
    /// when it says (a service older than version 26 does not).
    pub fn unlink_timed(&self, path: &str) -> Result<Option<i64>> {
        match self.session.meta(MetaReq::Unlink { path: path.into() })? {
            Response::Unlinked { at_ns, .. } => Ok(Some(at_ns)),
            _ => Ok(None),
        }
    }

    pub fn rmdir(&self, path: &str) -> Result<()> {
        self.session.meta(MetaReq::Rmdir { path: path.into() }).map(|_| ())
    }

    /// Renames `from` to `to`, replacing a file (or empty directory) at `to`.
    /// A shard's `Busy` (a directory rename under way, on a cluster of
    /// several metadata shards) is retried for up to [`BUSY_RETRY`].
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        // `Busy` is a shard's "try again" (another directory's rename waits
        // for its votes, the file is on its way to another shard): asked
        // again for a while before it reaches the caller. A file replaced:
        // the metadata service deletes its objects.
        while_busy(|| self.session.meta(MetaReq::Rename { from: from.into(), to: to.into() }))?;
        // A directory renamed: the ids cached under both names are stale
        // (the shards would send requests on; this saves the round trips).
        self.session.shards.forget_tree(from);
        self.session.shards.forget_tree(to);
        Ok(())
    }


    /// Locks `extents` of `file` (exclusive or shared), waiting until granted
    /// (at most the options' `lock_wait`, default 60 s, then `Busy`).
    pub fn lock(&self, file: &File, exclusive: bool, extents: &[weft_lock::Extent]) -> Result<LockGuard> {
        self.session.acquire_lock(file.id(), &|| file.capability(), exclusive, extents, None)
    }

    /// Locks like [`Client::lock`], but waits at most `wait` (zero: takes
    /// the lock only if it is free now); `Error::Busy` when not granted.
    pub fn lock_within(&self, file: &File, exclusive: bool, extents: &[weft_lock::Extent], wait: std::time::Duration) -> Result<LockGuard> {
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        self.session.acquire_lock(file.id(), &|| file.capability(), exclusive, extents, Some(wait_ms))
    }

    /// Asks every server of the cluster for its counters, all at once; one
    /// that is down, or does not answer within 5 s, is reported so.
    pub fn status(&self) -> Vec<ServerStatus> {
        let body = Request::Status.encode();
        let mut calls: Vec<Call<'_>> = self.session.cluster.servers.iter().map(|s| Call::new(s.addr, body.clone())).collect();
        // A server that is down is reported as such, at once: not waited
        // for through the recovery window (`df` on a mount, `weft status`).
        self.session.endpoint.run_within(&mut calls, usize::MAX, STATUS_TIMEOUT.min(self.session.endpoint.config().op_timeout));
        calls
            .into_iter()
            .zip(&self.session.cluster.servers)
            .map(|(c, s)| {
                let addr = c.peer;
                let stats = Session::response(c).and_then(|(r, _)| match r {
                    Response::Stats(st) => Ok(*st),
                    other => Err(Error::Protocol { addr, what: format!("expected stats, got {other:?}") }),
                });
                ServerStatus { server: s.clone(), stats }
            })
            .collect()
    }
}

/// How long a status waits for a server's answer.
const STATUS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
