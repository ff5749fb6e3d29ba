//! The client handle and namespace operations.

use crate::atomic::{LockGuard, LockSession};
use crate::file::File;
use crate::{Error, Result};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use crate::shard_route::ShardRouter;
use weft_net::settings::{BadSetting, Setting, Vars};
use weft_net::{Call, ClusterFile, Endpoint, EndpointConfig, ServerEntry};
use weft_wire::{AttrChange, Capability, Cred, DirEntry, FileAttr, FileId, FileKind, LayoutHint, MetaReq, PointerOp, Request, Response, ServerId, ServerStats};

/// How long a rename answered `Busy` (a shard's "try again") is asked again.
const RENAME_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Options of a client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub endpoint: EndpointConfig,
    /// Request size, order and pacing of data accesses (paper 000).
    pub schedule: crate::Schedule,
    /// Identity sent with namespace requests (the process's own by default).
    pub cred: Cred,
    /// List I/O: all of an access's pieces for one server travel in one
    /// request. Off (`WEFT_LIST_IO=0`) sends one request per piece, the
    /// baseline the non-contiguous benchmark compares against.
    pub list_io: bool,
    /// How long calls ride through a server's restart before failing
    /// (`WEFT_RECOVERY_MS`, 60 s; zero: fail at once). See [`crate::recovery`].
    pub recovery: std::time::Duration,
    /// Atomic mode's locks: what an access locks (`WEFT_LOCK_GRANULARITY`,
    /// list by default; the hint `weft_lock_granularity` per file).
    pub lock_granularity: crate::LockGranularity,
    /// How long an atomic access waits for its locks (`WEFT_LOCK_WAIT_MS`).
    pub lock_wait: std::time::Duration,
}

/// The defaults: no variables read (a front end passes its own to
/// [`ClientOptions::from_vars`]).
impl Default for ClientOptions {
    fn default() -> Self {
        // The process's effective identity and supplementary groups, from
        // the kernel (never a fallback to root).
        let groups: Vec<u32> = nix::unistd::getgroups().map(|g| g.into_iter().map(|g| g.as_raw()).collect()).unwrap_or_default();
        let cred = Cred::with_groups(nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw(), &groups);
        ClientOptions {
            endpoint: EndpointConfig::default(),
            schedule: crate::Schedule::default(),
            cred,
            list_io: true,
            recovery: crate::recovery::DEFAULT_WINDOW,
            lock_granularity: crate::LockGranularity::List,
            lock_wait: std::time::Duration::from_secs(60),
        }
    }
}

impl ClientOptions {
    /// The defaults, with the client variables that are set: read once,
    /// by the front end that makes the client (see `weft_net::settings`).
    pub fn from_vars(vars: &Vars<'_>) -> std::result::Result<Self, BadSetting> {
        let d = ClientOptions::default();
        Ok(ClientOptions {
            endpoint: EndpointConfig::from_vars(vars)?,
            schedule: crate::Schedule::from_vars(vars)?,
            list_io: vars.flag("WEFT_LIST_IO")?.unwrap_or(d.list_io),
            recovery: vars.u64("WEFT_RECOVERY_MS")?.map_or(d.recovery, std::time::Duration::from_millis),
            lock_granularity: vars.choice("WEFT_LOCK_GRANULARITY", "not file, range or list", |v| v.parse().ok())?.unwrap_or(d.lock_granularity),
            // 0 is a try-lock: granted only if free now.
            lock_wait: vars.u64("WEFT_LOCK_WAIT_MS")?.map_or(d.lock_wait, std::time::Duration::from_millis),
            ..d
        })
    }

    /// These options as `weft config` shows them.
    pub fn settings(&self, vars: &Vars<'_>) -> Vec<Setting> {
        let ms = |d: std::time::Duration| format!("{} ms", d.as_millis());
        let mut all = self.endpoint.settings(vars);
        all.extend(self.schedule.settings(vars));
        all.extend([
            Setting::new(vars, "WEFT_LIST_IO", u8::from(self.list_io), "an access's pieces for one server travel in one request (0: one request a piece)"),
            Setting::new(vars, "WEFT_RECOVERY_MS", ms(self.recovery), "calls ride through a server's restart this long before failing (0: fail at once)"),
            Setting::new(vars, "WEFT_LOCK_GRANULARITY", self.lock_granularity.name(), "what atomic mode locks: file, range or list"),
            Setting::new(vars, "WEFT_LOCK_WAIT_MS", ms(self.lock_wait), "how long an atomic access waits for its locks"),
        ]);
        all
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

pub(crate) struct Inner {
    pub(crate) cluster: ClusterFile,
    /// Every thread's and every file's requests, lock session included:
    /// one connection per server for the whole client.
    pub(crate) endpoint: Arc<Endpoint>,
    pub(crate) options: ClientOptions,
    /// A session with each lock server, started on first use (shared
    /// with the clients made by [`Client::with_cred`]).
    lock: Arc<Mutex<Vec<Option<Arc<LockSession>>>>>,
    /// Which metadata shard each request goes to.
    shards: Arc<ShardRouter>,
    /// Servers that did not come back within the recovery window.
    recovery: Arc<crate::recovery::Recovery>,
}

/// A connection to a Weft cluster. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl Client {
    /// Connects using the cluster file at `path` (connections open lazily).
    pub fn connect(path: &Path) -> Result<Self> {
        Self::with_options(ClusterFile::load(path)?, ClientOptions::default())
    }

    pub fn with_options(cluster: ClusterFile, options: ClientOptions) -> Result<Self> {
        let addr = cluster.meta_server().addr;
        let auth = cluster.client_auth().map_err(|e| Error::Net(weft_net::NetError::Handshake { addr, reason: e.to_string() }))?;
        let endpoint = Endpoint::new(auth, options.endpoint.clone())
            .map_err(|e| Error::Io { addr: cluster.meta_server().addr, message: format!("cannot create poller: {e}") })?;
        let shards = Arc::new(ShardRouter::new(&cluster));
        let lock = Arc::new(Mutex::new(vec![None; cluster.lock_servers().len()]));
        Ok(Client { inner: Arc::new(Inner { cluster, endpoint: Arc::new(endpoint), options, lock, shards, recovery: Default::default() }) })
    }

    /// The identity this client acts as.
    pub fn cred(&self) -> Cred {
        self.inner.options.cred
    }

    /// This client acting as `cred` for namespace requests (a FUSE mount
    /// creating files for the user who asked): same connections and lock
    /// session. Only a trusted process should assert another identity;
    /// see docs/security.md.
    pub fn with_cred(&self, cred: Cred) -> Client {
        let i = &self.inner;
        let options = ClientOptions { cred, ..i.options.clone() };
        Client { inner: Arc::new(Inner { cluster: i.cluster.clone(), endpoint: i.endpoint.clone(), options, lock: i.lock.clone(), shards: i.shards.clone(), recovery: i.recovery.clone() }) }
    }

    pub fn cluster(&self) -> &ClusterFile {
        &self.inner.cluster
    }

    pub(crate) fn addr_of(&self, id: ServerId) -> Result<SocketAddr> {
        let meta = self.inner.cluster.meta_server().addr;
        self.inner.cluster.server(id).map(|s| s.addr).ok_or_else(|| Error::Protocol { addr: meta, what: format!("layout names server {} that is not in the cluster file", id.0) })
    }

    /// Runs a batch of calls on the shared endpoint (threads run theirs
    /// concurrently), riding through a restart of their servers.
    pub(crate) fn run(&self, calls: &mut [Call<'_>]) {
        let ep = &self.inner.endpoint;
        self.inner.recovery.run(ep, self.inner.options.recovery, calls, |c, t| ep.run_within(c, usize::MAX, t));
    }

    /// Runs calls in slice order with at most `window` in flight.
    pub(crate) fn run_window(&self, calls: &mut [Call<'_>], window: usize) {
        let ep = &self.inner.endpoint;
        self.inner.recovery.run(ep, self.inner.options.recovery, calls, |c, t| ep.run_within(c, window, t));
    }

    /// How this client reaches `addr` now (`tcp`, `shm`), if connected.
    pub fn transport_of(&self, addr: std::net::SocketAddr) -> Option<&'static str> {
        self.inner.endpoint.transport_of(addr)
    }

    /// Connections this client has open now (one per server it has used).
    pub fn connections(&self) -> usize {
        self.inner.endpoint.connections()
    }

    /// Decodes a finished call's response, turning error responses into errors.
    pub(crate) fn response(call: Call<'_>) -> Result<(Response, usize)> {
        let addr = call.peer;
        let reply = call.result.expect("run fills every result")?;
        match Response::decode(&reply.body) {
            Ok(Response::Error { code, message }) => Err(Error::from_code(addr, code, message)),
            Ok(r) => Ok((r, reply.payload_len)),
            Err(e) => Err(Error::Protocol { addr, what: format!("undecodable response: {e}") }),
        }
    }

    /// A metadata request, sent to the shard that keeps what it names
    /// (see [`crate::shard_route`]); a shard's `Route` answer sends it on.
    pub(crate) fn meta(&self, op: MetaReq) -> Result<Response> {
        let router = &self.inner.shards;
        let op = self.inner.recovery.tags.tag(op, router.count());
        if router.count() == 1 {
            // One shard: nothing to route or learn (no copy of the request).
            let mut calls = [Call::new(router.addrs[0], Request::Meta { cred: self.inner.options.cred, op }.encode())];
            self.run(&mut calls);
            let [c] = calls;
            let addr = c.peer;
            return match Client::response(c)?.0 {
                Response::Route { shards, .. } => Err(shard_count_differs(addr, 1, shards)),
                r => Ok(r),
            };
        }
        let mut shard = router.first(&op);
        let body = Request::Meta { cred: self.inner.options.cred, op: op.clone() }.encode();
        // A route answer is right unless directories change meanwhile.
        for _ in 0..4 {
            let addr = router.addrs[shard as usize];
            let mut calls = [Call::new(addr, body.clone())];
            self.run(&mut calls);
            let [c] = calls;
            match Client::response(c)?.0 {
                Response::Route { shard: next, shards, parent } => {
                    if shards != router.count() {
                        return Err(shard_count_differs(addr, router.count(), shards));
                    }
                    if let Some(path) = op.path().filter(|_| parent.0 != 0) {
                        router.learn_parent(path, parent);
                    }
                    shard = next;
                }
                r => {
                    if let (MetaReq::Mkdir { path, .. } | MetaReq::StatSize { path } | MetaReq::Stat { path }, Response::Attr(a) | Response::Stat { attr: a, .. }) = (op.untagged(), &r)
                        && a.kind == FileKind::Dir
                    {
                        router.learn_dir(path, a.id);
                    }
                    return Ok(r);
                }
            }
        }
        Err(Error::Protocol { addr: router.addrs[shard as usize], what: "metadata shards kept sending the request on (directories changing under it?)".into() })
    }

    /// Makes every metadata change answered so far durable (on every
    /// shard): a no-op round trip saved when the cluster commits each
    /// change durably anyway (`meta_sync_window_ms = 0`).
    pub fn sync_meta(&self) -> Result<()> {
        if self.inner.cluster.meta_sync_window_ms == 0 {
            return Ok(());
        }
        let body = Request::Meta { cred: self.inner.options.cred, op: MetaReq::Sync }.encode();
        let mut calls: Vec<Call<'_>> = self.inner.shards.addrs.iter().map(|a| Call::new(*a, body.clone())).collect();
        self.run(&mut calls);
        calls.into_iter().try_for_each(|c| Client::response(c).map(|_| ()))
    }

    fn meta_attr(&self, op: MetaReq) -> Result<FileAttr> {
        let addr = self.inner.cluster.meta_server().addr;
        match self.meta(op)? {
            Response::Attr(a) => Ok(a),
            other => Err(Error::Protocol { addr, what: format!("expected attributes, got {other:?}") }),
        }
    }

    /// Attributes and the capability of a file opened, created or removed.
    fn meta_granted(&self, op: MetaReq) -> Result<(FileAttr, Capability)> {
        let addr = self.inner.cluster.meta_server().addr;
        match self.meta(op)? {
            Response::Granted { attr, cap } => Ok((attr, cap)),
            other => Err(Error::Protocol { addr, what: format!("expected attributes and a capability, got {other:?}") }),
        }
    }

    /// Creates (or, unless exclusive, opens) a regular file for writing.
    pub fn create(&self, path: &str, opts: CreateOptions) -> Result<File> {
        let hint = LayoutHint { stripe_size: opts.stripe_size, stripe_count: opts.stripe_count };
        let (attr, cap) = self.meta_granted(MetaReq::Create { path: path.into(), mode: opts.mode, exclusive: opts.exclusive, hint })?;
        let file = File::new(self.clone(), path, attr, cap, true).map(File::registered)?;
        // An exclusive create made the file: empty, and this handle sees
        // every change it makes.
        Ok(if opts.exclusive { file.made_empty() } else { file })
    }

    /// Opens an existing file, checking read (and if `write`, write) permission.
    pub fn open(&self, path: &str, write: bool) -> Result<File> {
        let addr = self.inner.cluster.meta_server().addr;
        let (attr, cap) = match self.meta(MetaReq::Open { path: path.into(), write })? {
            Response::Granted { attr, cap } => (attr, cap),
            // A directory: no data, no capability.
            Response::Attr(_) => return Err(Error::IsDir(path.into())),
            other => return Err(Error::Protocol { addr, what: format!("expected attributes and a capability, got {other:?}") }),
        };
        File::new(self.clone(), path, attr, cap, write).map(File::registered)
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
        File::new(self.clone(), path, attr, cap, write)
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Result<FileAttr> {
        self.meta_attr(MetaReq::Mkdir { path: path.into(), mode })
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
        let addr = self.inner.cluster.meta_server().addr;
        let (attr, known, cap) = match self.meta(op)? {
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
                File::new(self.clone(), &name, attr.clone(), cap, false)?.size()?
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
        self.meta_attr(MetaReq::Mknod { path: path.into(), mode, kind })
    }

    /// Gives the file (or link) at `from` another name, `to` (link(2));
    /// its attributes after (the link count one more).
    pub fn link(&self, from: &str, to: &str) -> Result<FileAttr> {
        self.meta_attr(MetaReq::Link { from: from.into(), to: to.into() })
    }

    /// Creates a symbolic link at `path` pointing to `target`.
    pub fn symlink(&self, target: &str, path: &str) -> Result<FileAttr> {
        self.meta_attr(MetaReq::Symlink { path: path.into(), target: target.into() })
    }

    /// A symbolic link's target.
    pub fn readlink(&self, path: &str) -> Result<String> {
        let addr = self.inner.cluster.meta_server().addr;
        match self.meta(MetaReq::Readlink { path: path.into() })? {
            Response::Link { target } => Ok(target),
            other => Err(Error::Protocol { addr, what: format!("expected a link target, got {other:?}") }),
        }
    }

    pub fn chmod(&self, path: &str, mode: u32) -> Result<FileAttr> {
        self.meta_attr(MetaReq::Chmod { path: path.into(), mode })
    }

    /// Sets the modification time of `path` (`None`: the metadata
    /// service's clock now, allowed to anyone who may write the file).
    pub fn set_mtime(&self, path: &str, mtime_ns: Option<i64>) -> Result<FileAttr> {
        self.meta_attr(MetaReq::SetTimes { path: path.into(), mtime_ns: mtime_ns.unwrap_or(weft_wire::TIME_NOW) })
    }

    /// Changes an attribute of file `file`, named by its id (not a path
    /// another client may have moved meanwhile); its attributes after.
    pub fn change(&self, file: FileId, change: AttrChange) -> Result<FileAttr> {
        self.meta_attr(MetaReq::Change { file, change })
    }

    /// Changes the owner and group of `path` (root only).
    pub fn chown(&self, path: &str, uid: u32, gid: u32) -> Result<FileAttr> {
        self.meta_attr(MetaReq::Chown { path: path.into(), uid, gid })
    }

    /// Applies `op` to the MPI-IO shared file pointer `token` (kept by the
    /// metadata service); returns its value before.
    pub fn shared_pointer(&self, token: u64, op: PointerOp) -> Result<u64> {
        let addr = self.inner.cluster.meta_server().addr;
        match self.meta(MetaReq::SharedPointer { token, op })? {
            Response::Pointer { value } => Ok(value),
            other => Err(Error::Protocol { addr, what: format!("expected a pointer, got {other:?}") }),
        }
    }

    /// Every entry of a directory, sorted by name.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        if self.inner.shards.count() > 1 {
            return self.readdir_sharded(path);
        }
        let addr = self.inner.cluster.meta_server().addr;
        let mut all = Vec::new();
        loop {
            let after = all.last().map(|e: &DirEntry| e.name.clone()).unwrap_or_default();
            match self.meta(MetaReq::Readdir { path: path.into(), after, max: weft_wire::limits::MAX_DIR_PAGE as u32 })? {
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
        let addrs = &self.inner.shards.addrs;
        let shards = addrs.len() as u32;
        let mut lists: Vec<Vec<DirEntry>> = vec![Vec::new(); addrs.len()];
        let mut open: Vec<usize> = (0..addrs.len()).collect();
        while !open.is_empty() {
            let mut calls: Vec<Call<'_>> = open
                .iter()
                .map(|&k| {
                    let after = lists[k].last().map(|e| e.name.clone()).unwrap_or_default();
                    let op = MetaReq::ReaddirShard { path: path.into(), after, max: weft_wire::limits::MAX_DIR_PAGE as u32, shards };
                    Call::new(addrs[k], Request::Meta { cred: self.inner.options.cred, op }.encode())
                })
                .collect();
            self.run(&mut calls);
            let mut still = Vec::new();
            for (k, c) in open.into_iter().zip(calls) {
                let addr = c.peer;
                match Client::response(c)?.0 {
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
        let addrs = &self.inner.shards.addrs;
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
                    Call::new(addrs[shard as usize], Request::Meta { cred: self.inner.options.cred, op }.encode())
                })
                .collect();
            // As many at once as a listing page's shards would send.
            self.run_window(&mut calls, 64);
            let mut next = Vec::new();
            for ((i, _), c) in todo.into_iter().zip(calls) {
                match Client::response(c).map(|r| r.0) {
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
        self.meta(MetaReq::Unlink { path: path.into() }).map(|_| ())
    }

    pub fn rmdir(&self, path: &str) -> Result<()> {
        self.meta(MetaReq::Rmdir { path: path.into() }).map(|_| ())
    }

    /// Renames `from` to `to`, replacing a file (or empty directory) at `to`.
    /// A shard's `Busy` (a directory rename under way, on a cluster of
    /// several metadata shards) is retried for up to [`RENAME_RETRY`].
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        // `Busy` is a shard's "try again" (another directory's rename waits
        // for its votes, the file is on its way to another shard): asked
        // again for a while before it reaches the caller.
        let give_up = std::time::Instant::now() + RENAME_RETRY;
        let mut pause = std::time::Duration::from_millis(1);
        // A file replaced: the metadata service deletes its objects.
        loop {
            match self.meta(MetaReq::Rename { from: from.into(), to: to.into() }) {
                Err(Error::Busy { .. }) if std::time::Instant::now() + pause < give_up => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_millis(100));
                }
                r => {
                    r?;
                    break;
                }
            }
        }
        // A directory renamed: the ids cached under both names are stale
        // (the shards would send requests on; this saves the round trips).
        self.inner.shards.forget_tree(from);
        self.inner.shards.forget_tree(to);
        Ok(())
    }


    /// This client's session with the lock server that keeps `file`'s
    /// locks (`ClusterFile::lock_servers`), started on first use.
    pub(crate) fn lock_session(&self, file: FileId) -> Result<Arc<LockSession>> {
        let servers = self.inner.cluster.lock_servers();
        if servers.is_empty() {
            return Err(Error::BadRequest("the cluster file names no lock service".into()));
        }
        let k = weft_wire::shard::home_shard(file, servers.len() as u32) as usize;
        let mut sessions = self.inner.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = &mut sessions[k];
        // A lapsed session was reported once (its access failed with
        // `LeaseExpired`); later accesses get a fresh one.
        if let Some(s) = slot.as_ref().filter(|s| !s.is_lapsed()) {
            return Ok(s.clone());
        }
        let s = Arc::new(LockSession::start(&self.inner.cluster, servers[k].addr, self.inner.endpoint.clone(), self.inner.options.lock_wait)?);
        *slot = Some(s.clone());
        Ok(s)
    }

    /// Locks `extents` of `file` (exclusive or shared), waiting until granted
    /// (at most the options' `lock_wait`, default 60 s, then `Busy`).
    pub fn lock(&self, file: &File, exclusive: bool, extents: &[weft_lock::Extent]) -> Result<LockGuard> {
        self.acquire_lock(file, exclusive, extents, None)
    }

    /// Locks like [`Client::lock`], but waits at most `wait` (zero: takes
    /// the lock only if it is free now); `Error::Busy` when not granted.
    pub fn lock_within(&self, file: &File, exclusive: bool, extents: &[weft_lock::Extent], wait: std::time::Duration) -> Result<LockGuard> {
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        self.acquire_lock(file, exclusive, extents, Some(wait_ms))
    }

    /// Acquires in this client's session, or, when the lock service lost
    /// the session (it restarted, or the connection broke with the acquire
    /// unanswered) or could not be reached to start one, in a new session,
    /// asked again until the recovery window (or the caller's wait, if
    /// shorter) passes, once at least. Safe: this acquire holds nothing
    /// yet, and a restarted lock service grants nothing for one lease
    /// after its start. Not when a guard of the lapsed session still holds
    /// a lock: its holder may believe it holds bytes others have now, and
    /// this error is how the client learns it.
    fn acquire_lock(&self, file: &File, exclusive: bool, extents: &[weft_lock::Extent], wait_ms: Option<u32>) -> Result<LockGuard> {
        let id = file.attr().id;
        let began = std::time::Instant::now();
        let window = wait_ms.map_or(self.inner.options.recovery, |ms| self.inner.options.recovery.min(std::time::Duration::from_millis(ms.into())));
        let mut pause = std::time::Duration::from_millis(10);
        let mut first = true;
        loop {
            // The error, and whether a new session may ask again: the old
            // one lapsed, or none could be started.
            let attempt = match self.lock_session(id) {
                Ok(session) => {
                    let lock = file.capability().and_then(|cap| match wait_ms {
                        Some(ms) => session.acquire_within(id, cap, exclusive, extents, ms),
                        None => session.acquire(id, cap, exclusive, extents),
                    });
                    match lock {
                        Ok(lock) => return Ok(LockGuard::new(session, id, lock)),
                        Err(e) => (e, session.is_lapsed() && !session.holds_locks()),
                    }
                }
                Err(e @ Error::Net(_)) => (e, true),
                Err(e) => (e, false),
            };
            match attempt {
                (_, true) if first || began.elapsed() + pause < window => {
                    first = false;
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
                (e, _) => return Err(e),
            }
        }
    }

    /// Asks every server of the cluster for its counters, all at once; one
    /// that is down, or does not answer within 5 s, is reported so.
    pub fn status(&self) -> Vec<ServerStatus> {
        let body = Request::Status.encode();
        let mut calls: Vec<Call<'_>> = self.inner.cluster.servers.iter().map(|s| Call::new(s.addr, body.clone())).collect();
        // A server that is down is reported as such, at once: not waited
        // for through the recovery window (`df` on a mount, `weft status`).
        self.inner.endpoint.run_within(&mut calls, usize::MAX, STATUS_TIMEOUT.min(self.inner.endpoint.config().op_timeout));
        calls
            .into_iter()
            .zip(&self.inner.cluster.servers)
            .map(|(c, s)| {
                let addr = c.peer;
                let stats = Client::response(c).and_then(|(r, _)| match r {
                    Response::Stats(st) => Ok(st),
                    other => Err(Error::Protocol { addr, what: format!("expected stats, got {other:?}") }),
                });
                ServerStatus { server: s.clone(), stats }
            })
            .collect()
    }
}

/// How long a status waits for a server's answer.
const STATUS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A server's route names another shard count than the cluster file's.
fn shard_count_differs(addr: SocketAddr, ours: u32, theirs: u32) -> Error {
    Error::Protocol { addr, what: format!("the cluster file names {ours} metadata shard(s) but the servers have {theirs}: use the cluster file they were started with") }
}

