//! A client's session with its cluster: the endpoint every request goes
//! through, the cluster file, the metadata shards' routing, the lock
//! sessions and the recovery of calls across server restarts. The
//! [`crate::Client`] handle, every [`crate::File`] and every lock guard hold
//! one (shared), so files need no client and the client needs no file's
//! insides.

use crate::lock_session::{LockGuard, LockSession};
use crate::options::ClientOptions;
use crate::shard_route::ShardRouter;
use crate::{Error, Result};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use weft_net::{Call, ClusterFile, Endpoint};
use weft_wire::{Capability, Cred, FileAttr, FileId, FileKind, MetaReq, Request, Response, ServerId};

pub(crate) struct Session {
    pub(crate) cluster: ClusterFile,
    /// Every thread's and every file's requests, lock session included:
    /// one connection per server for the whole client.
    pub(crate) endpoint: Arc<Endpoint>,
    pub(crate) options: ClientOptions,
    /// A session with each lock server, started on first use (shared
    /// with the clients made by [`Client::with_cred`]).
    lock: Arc<Mutex<Vec<Option<Arc<LockSession>>>>>,
    /// Which metadata shard each request goes to.
    pub(crate) shards: Arc<ShardRouter>,
    /// Servers that did not come back within the recovery window.
    recovery: Arc<crate::recovery::Recovery>,
}

impl Session {
    /// A session with the cluster `cluster` describes (connections open lazily).
    pub(crate) fn new(cluster: ClusterFile, options: ClientOptions) -> Result<Self> {
        let addr = cluster.meta_server().addr;
        let auth = cluster.client_auth().map_err(|e| Error::Net(weft_net::NetError::Handshake { addr, reason: e.to_string() }))?;
        let endpoint = Endpoint::new(auth, options.endpoint.clone()).map_err(|e| Error::Io { addr, message: format!("cannot create poller: {e}") })?;
        let shards = Arc::new(ShardRouter::new(&cluster));
        let lock = Arc::new(Mutex::new(vec![None; cluster.lock_servers().len()]));
        Ok(Session { cluster, endpoint: Arc::new(endpoint), options, lock, shards, recovery: Default::default() })
    }

    /// This session acting as `cred`: the same connections, lock sessions,
    /// routes and recovery.
    pub(crate) fn with_cred(&self, cred: Cred) -> Session {
        let options = ClientOptions { cred, ..self.options.clone() };
        Session { cluster: self.cluster.clone(), endpoint: self.endpoint.clone(), options, lock: self.lock.clone(), shards: self.shards.clone(), recovery: self.recovery.clone() }
    }

    pub(crate) fn addr_of(&self, id: ServerId) -> Result<SocketAddr> {
        let meta = self.cluster.meta_server().addr;
        self.cluster.server(id).map(|s| s.addr).ok_or_else(|| Error::Protocol { addr: meta, what: format!("layout names server {} that is not in the cluster file", id.0) })
    }

    /// Whether `e` is a server this session reached going away (killed,
    /// restarting, stopping), which its calls wait for within the
    /// recovery window: not one never reached, nor one given up on.
    pub(crate) fn may_ride_through(&self, e: &Error) -> bool {
        e.server_went_away() && matches!(e, Error::Net(n) if self.recovery.may_come_back(&self.endpoint, n.addr()))
    }

    /// Runs a batch of calls on the shared endpoint (threads run theirs
    /// concurrently), riding through a restart of their servers.
    pub(crate) fn run(&self, calls: &mut [Call<'_>]) {
        let ep = &self.endpoint;
        self.recovery.run(ep, self.options.recovery, calls, |c, t| ep.run_within(c, usize::MAX, t));
    }

    /// Runs calls in slice order with at most `window` in flight.
    pub(crate) fn run_window(&self, calls: &mut [Call<'_>], window: usize) {
        let ep = &self.endpoint;
        self.recovery.run(ep, self.options.recovery, calls, |c, t| ep.run_within(c, window, t));
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
        let router = &self.shards;
        let op = self.recovery.tags.tag(op, router.count());
        if router.count() == 1 {
            // One shard: nothing to route or learn (no copy of the request).
            let mut calls = [Call::new(router.addrs[0], Request::Meta { cred: self.options.cred, op }.encode())];
            self.run(&mut calls);
            let [c] = calls;
            let addr = c.peer;
            return match Session::response(c)?.0 {
                Response::Route { shards, .. } => Err(shard_count_differs(addr, 1, shards)),
                r => Ok(r),
            };
        }
        let mut shard = router.first(&op);
        let body = Request::Meta { cred: self.options.cred, op: op.clone() }.encode();
        // A route answer is right unless directories change meanwhile.
        for _ in 0..4 {
            let addr = router.addrs[shard as usize];
            let mut calls = [Call::new(addr, body.clone())];
            self.run(&mut calls);
            let [c] = calls;
            match Session::response(c)?.0 {
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
    pub(crate) fn sync_meta(&self) -> Result<()> {
        if self.cluster.meta_sync_window_ms == 0 {
            return Ok(());
        }
        let body = Request::Meta { cred: self.options.cred, op: MetaReq::Sync }.encode();
        let mut calls: Vec<Call<'_>> = self.shards.addrs.iter().map(|a| Call::new(*a, body.clone())).collect();
        self.run(&mut calls);
        calls.into_iter().try_for_each(|c| Session::response(c).map(|_| ()))
    }

    pub(crate) fn meta_attr(&self, op: MetaReq) -> Result<FileAttr> {
        let addr = self.cluster.meta_server().addr;
        match self.meta(op)? {
            Response::Attr(a) => Ok(a),
            other => Err(Error::Protocol { addr, what: format!("expected attributes, got {other:?}") }),
        }
    }

    /// Attributes and the capability of a file opened, created or removed.
    pub(crate) fn meta_granted(&self, op: MetaReq) -> Result<(FileAttr, Capability)> {
        let addr = self.cluster.meta_server().addr;
        match self.meta(op)? {
            Response::Granted { attr, cap } => Ok((attr, cap)),
            other => Err(Error::Protocol { addr, what: format!("expected attributes and a capability, got {other:?}") }),
        }
    }

    /// This client's session with the lock server that keeps `file`'s
    /// locks (`ClusterFile::lock_servers`), started on first use.
    pub(crate) fn lock_session(&self, file: FileId) -> Result<Arc<LockSession>> {
        let servers = self.cluster.lock_servers();
        if servers.is_empty() {
            return Err(Error::BadRequest("the cluster file names no lock service".into()));
        }
        let k = weft_wire::shard::home_shard(file, servers.len() as u32) as usize;
        let mut sessions = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = &mut sessions[k];
        // A lapsed session was reported once (its access failed with
        // `LeaseExpired`); later accesses get a fresh one.
        if let Some(s) = slot.as_ref().filter(|s| !s.is_lapsed()) {
            return Ok(s.clone());
        }
        let s = Arc::new(LockSession::start(&self.cluster, servers[k].addr, self.endpoint.clone(), self.options.lock_wait)?);
        *slot = Some(s.clone());
        Ok(s)
    }

    /// Acquires in this client's session, or, when the lock service lost
    /// the session (it restarted, or the connection broke with the acquire
    /// unanswered) or could not be reached to start one, in a new session,
    /// asked again until the recovery window (or the caller's wait, if
    /// shorter) passes, once at least. Safe: this acquire holds nothing
    /// yet, and a restarted lock service grants nothing for one lease
    /// after its start. Not when a guard of the lapsed session still holds
    /// a lock: its holder may believe it holds bytes others have now, and
    /// this error is how the client learns it. `cap` gives the file's
    /// capability (renewed when due).
    pub(crate) fn acquire_lock(&self, id: FileId, cap: &dyn Fn() -> Result<Capability>, exclusive: bool, extents: &[weft_lock::Extent], wait_ms: Option<u32>) -> Result<LockGuard> {
        let began = std::time::Instant::now();
        let window = wait_ms.map_or(self.options.recovery, |ms| self.options.recovery.min(std::time::Duration::from_millis(ms.into())));
        let mut pause = std::time::Duration::from_millis(10);
        let mut first = true;
        loop {
            // The error, and whether a new session may ask again: the old
            // one lapsed, or none could be started.
            let attempt = match self.lock_session(id) {
                Ok(session) => {
                    let lock = cap().and_then(|cap| match wait_ms {
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
}

/// A server's route names another shard count than the cluster file's.
fn shard_count_differs(addr: SocketAddr, ours: u32, theirs: u32) -> Error {
    Error::Protocol { addr, what: format!("the cluster file names {ours} metadata shard(s) but the servers have {theirs}: use the cluster file they were started with") }
}
