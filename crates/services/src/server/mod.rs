//! One `weft serve` process: an event loop owns every connection
//! ([`reactor`]), each connection's protocol is the message layer's
//! sans-IO server machine (`weft_net::link::server`), requests run on a
//! worker pool ([`workers`]), and every byte a peer can make the server
//! buffer is drawn from one memory budget (`weft_net::budget`).
//!
//! A connection that sends bytes that are not Weft frames, breaks the
//! rendezvous rules or misses a deadline is closed (after an error frame
//! saying why, when it still listens); a request whose body does not decode
//! gets a `BadRequest` answer and the connection goes on. Either way every
//! other connection is untouched. See `docs/architecture.md` (server shape,
//! budgets, deadlines).

mod collectives;
mod conn_quota;
pub mod gate;
pub mod metrics;
mod reactor;
mod read_turns;
mod shutdown;
mod workers;

pub use weft_net::budget::{Charge, MemoryBudget};
pub use weft_net::link::{ConnLimits, Payload, ServerConn};
pub use read_turns::ReadTurns;
pub use shutdown::{Shutdown, DRAIN_LIMIT};

use crate::data::DataService;
use crate::lock::{Answer, LockService};
use crate::meta::MetaService;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use thiserror::Error;
use weft_net::{ClusterFile, Service};
use weft_wire::{CpuKind, Request, Response, ServerId, ServerStats, CPU_KINDS};

#[derive(Debug, Error)]
pub enum ServeError {
    #[error("server id {0} is not in the cluster file")]
    UnknownId(u32),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: std::net::SocketAddr, source: std::io::Error },
    #[error("cannot open the {service} service in {dir}: {reason}")]
    Open { service: &'static str, dir: String, reason: String },
}

#[derive(Default)]
struct Counters {
    /// CPU nanoseconds by [`CpuKind`], and the event loop thread's total.
    cpu_ns: [AtomicU64; CPU_KINDS],
    cpu_loop_ns: AtomicU64,
    /// The event loop's CPU spent on requests it served itself (metadata
    /// reads), counted under their kind instead of the loop's.
    cpu_loop_lent_ns: AtomicU64,
    requests: AtomicU64,
    bad_requests: AtomicU64,
    bytes_written: AtomicU64,
    bytes_read: AtomicU64,
    panics: AtomicU64,
    refused_connections: AtomicU64,
    coll_rounds: AtomicU64,
}

/// Where server `id` sits among the cluster's metadata shards.
fn shard_place(cluster: &ClusterFile, id: ServerId, endpoint: weft_net::EndpointConfig) -> crate::meta::ShardPlace {
    let shards = cluster.meta_shards();
    let index = shards.iter().position(|s| s.id == id.0).unwrap_or(0) as u32;
    let peers = shards.iter().enumerate().filter(|(k, _)| *k as u32 != index).map(|(k, s)| (k as u32, s.addr)).collect();
    // Shards prove the servers' secret to each other, in MUNGE mode too
    // (read from `key_file`, which only the servers' user can): a peer
    // that proved it is trusted with the identity its requests carry,
    // while a client's is the one MUNGE proved.
    let auth = (shards.len() > 1).then(|| weft_net::ClientAuth::Secret(cluster.secret()));
    crate::meta::ShardPlace { index, count: shards.len() as u32, peers, auth, endpoint }
}

/// The services of one server and its counters.
pub struct Server {
    id: u32,
    meta: Option<MetaService>,
    data: Option<DataService>,
    lock: Option<Arc<LockService>>,
    services: u8,
    pub(crate) gate: gate::Gate,
    counters: Counters,
    started: Instant,
    budget: Arc<MemoryBudget>,
    /// Connections open now (those over shared memory apart), and the
    /// most allowed (set by the event loop).
    connections: AtomicU64,
    shm_connections: AtomicU64,
    connection_limit: AtomicU64,
    /// The server's directory: its disk space is reported.
    dir: std::path::PathBuf,
    /// Serve uid 0 as nobody (the cluster file's `root_squash`).
    root_squash: bool,
    /// Server-directed collectives in progress.
    collectives: collectives::Collectives,
    /// Requests served by the workers, by kind (metrics).
    pub(crate) requests: metrics::requests::RequestMetrics,
    /// This server's settings, read once at start.
    pub(crate) config: crate::ServerConfig,
}

impl Server {
    /// Opens the services the cluster file gives server `id`, with this
    /// server's own settings.
    pub fn open(cluster: &ClusterFile, id: ServerId, config: crate::ServerConfig) -> Result<Self, ServeError> {
        let me = cluster.server(id).ok_or(ServeError::UnknownId(id.0))?;
        let has = |s| me.services.contains(&s);
        let dir = me.dir.display().to_string();
        let secret = cluster.server_secret().map_err(|e| ServeError::Open { service: "auth", dir: dir.clone(), reason: e.to_string() })?;
        let servers_auth = weft_net::ClientAuth::Secret(cluster.secret());
        let gate = match cluster.auth {
            weft_net::cluster::AuthMode::Secret => gate::Gate::new(secret),
            weft_net::cluster::AuthMode::Munge => {
                let munge = weft_net::munge::Munge::new(cluster.munge_socket.as_deref()).map_err(|e| ServeError::Open { service: "auth", dir: dir.clone(), reason: e.to_string() })?;
                gate::Gate::with_munge(secret, munge, me.addr)
            }
        };
        let meta = has(Service::Meta)
            .then(|| {
                let mut m = MetaService::open(&me.dir, cluster.data_servers(), cluster.default_stripe_size, gate.cap_key().clone(), Some(std::time::Duration::from_millis(cluster.meta_sync_window_ms)), shard_place(cluster, id, config.peer_endpoint.clone()))?;
                m.set_cap_lifetime(config.cap_lifetime);
                // Removed files' objects are deleted by this service, as
                // a server (proving the servers' secret).
                let servers = cluster.data_servers().into_iter().filter_map(|d| cluster.server(d).map(|s| (d, s.addr))).collect();
                m.start_reaper(crate::meta::ReapPlace { servers, auth: servers_auth, endpoint: config.peer_endpoint.clone() })?;
                Ok::<_, crate::meta::MetaError>(m)
            })
            .transpose()
            .map_err(|e| ServeError::Open { service: "meta", dir: dir.clone(), reason: e.to_string() })?;
        let data = has(Service::Data)
            .then(|| DataService::open(&me.dir, &config))
            .transpose()
            .map_err(|e| ServeError::Open { service: "data", dir: dir.clone(), reason: e.to_string() })?;
        // A marker in the server's directory tells a restart from a first
        // start: after a restart, locks wait out the old clients' leases.
        let lock = if has(Service::Lock) {
            let marker = me.dir.join("lock-service-ran");
            let restarted = marker.exists();
            if !restarted {
                std::fs::create_dir_all(&me.dir).and_then(|()| std::fs::write(&marker, b"")).map_err(|e| ServeError::Open { service: "lock", dir: dir.clone(), reason: format!("cannot write {}: {e}", marker.display()) })?;
            }
            Some(LockService::start(cluster.lock_ttl_ms, config.lock_limits, gate.cap_key().clone(), restarted))
        } else {
            None
        };
        let budget = MemoryBudget::new(config.memory);
        let services = u8::from(has(Service::Meta)) | u8::from(has(Service::Data)) << 1 | u8::from(has(Service::Lock)) << 2;
        Ok(Server {
            root_squash: cluster.root_squash,
            collectives: collectives::Collectives::new(config.coll_timeout, budget.clone()),
            dir: me.dir.clone(),
            id: id.0,
            budget,
            connections: AtomicU64::new(0),
            shm_connections: AtomicU64::new(0),
            connection_limit: AtomicU64::new(0),
            requests: Default::default(),
            config,
            meta,
            data,
            lock,
            services,
            gate,
            counters: Counters::default(),
            started: Instant::now(),
        })
    }

    pub fn stats(&self) -> ServerStats {
        let (objects, bytes_stored) = self.data.as_ref().map(DataService::usage).unwrap_or_default();
        let (disk_total, disk_free) = self.disk_space();
        let c = &self.counters;
        let l = self.lock.as_ref().map(|l| l.stats()).unwrap_or_default();
        ServerStats {
            locks_held: l.held,
            locks_waiting: l.waiting,
            locks_granted: l.granted,
            lock_wait_us: l.wait_us,
            services: self.services,
            requests: c.requests.load(Ordering::Relaxed),
            bad_requests: c.bad_requests.load(Ordering::Relaxed),
            bytes_written: c.bytes_written.load(Ordering::Relaxed),
            bytes_read: c.bytes_read.load(Ordering::Relaxed),
            bytes_stored,
            objects: objects + self.meta.as_ref().map_or(0, MetaService::file_count),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            connections: self.connections.load(Ordering::Relaxed),
            connection_limit: self.connection_limit.load(Ordering::Relaxed),
            memory_used: self.budget.used(),
            memory_limit: self.budget.limit(),
            panics: c.panics.load(Ordering::Relaxed),
            cpu_ns: std::array::from_fn(|k| c.cpu_ns[k].load(Ordering::Relaxed)),
            cpu_loop_ns: c.cpu_loop_ns.load(Ordering::Relaxed),
            disk_total,
            disk_free,
            coll_rounds: c.coll_rounds.load(Ordering::Relaxed),
            coll_failed: self.collectives.failed(),
            requests_by_kind: CpuKind::ALL.map(|k| self.requests.snapshot(k).requests),
            latency_us_by_kind: CpuKind::ALL.map(|k| self.requests.snapshot(k).latency_us),
            queue_depth: self.requests.queue_depth(),
            quota_refusals: self.quota_refusals().iter().map(|(_, n)| n).sum(),
            shm_connections: self.shm_connections.load(Ordering::Relaxed),
        }
    }

    /// Refusals by a per-user or server-wide quota since start, by table.
    pub fn quota_refusals(&self) -> [(&'static str, u64); 4] {
        [
            ("connections", self.counters.refused_connections.load(Ordering::Relaxed)),
            ("shared_pointers", self.meta.as_ref().map_or(0, MetaService::quota_refusals)),
            ("locks", self.lock.as_ref().map_or(0, |l| l.refused())),
            ("collectives", self.collectives.refused()),
        ]
    }

    /// Whether the event loop may serve `req` itself: no disk writes, no
    /// waiting for a turn, bounded work (a worker hand-off costs two thread
    /// wake-ups: it halved the rate of stats).
    pub(crate) fn answers_on_the_loop(&self, req: &Request) -> bool {
        match req {
            Request::Ping | Request::Sink | Request::Source { .. } => true,
            Request::Meta { op, .. } => self.meta.as_ref().is_some_and(|m| m.answers_on_the_loop(op)),
            _ => false,
        }
    }

    /// Whether the event loop may try to serve change `req` itself
    /// ([`Server::try_change_now`]): a metadata change whose commit does
    /// not wait for the disk, served at once when no other commit runs or
    /// waits, which saves the two thread wake-ups of a worker hand-off
    /// (a chmod through the mount: 225 -> 175 us).
    pub(crate) fn changes_on_the_loop(&self, req: &Request) -> bool {
        match req {
            Request::Meta { op, .. } => self.meta.as_ref().is_some_and(|m| m.changes_on_the_loop(op)),
            _ => false,
        }
    }

    /// Serves change `req` (one [`Server::changes_on_the_loop`] allows) at
    /// once; `None` when another commit runs or waits, or its commit would
    /// wait for the disk (a worker serves it).
    pub(crate) fn try_change_now(&self, req: &Request) -> Option<Response> {
        let (Request::Meta { cred, op }, Some(m)) = (req, &self.meta) else { return None };
        // A panic is contained as on a worker, and counted as served.
        let rsp = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.try_change_now(squash(*cred, self.root_squash), op))) {
            Ok(rsp) => rsp?,
            Err(_) => {
                self.count_panic();
                Response::error(weft_wire::ErrorCode::Internal, "the server failed while serving this request")
            }
        };
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        Some(rsp)
    }

    /// Records the event loop thread's CPU time so far (it calls this itself).
    pub(crate) fn note_loop_cpu(&self) {
        let lent = self.counters.cpu_loop_lent_ns.load(Ordering::Relaxed);
        self.counters.cpu_loop_ns.store(thread_cpu_ns().saturating_sub(lent), Ordering::Relaxed);
    }

    /// Counts a request the event loop served itself (not a ping) as a
    /// worker's would be: its kind, bytes and latency, and its CPU time
    /// (`cpu_ns`, taken from the loop's own).
    pub(crate) fn count_inline(&self, req_kind: CpuKind, bytes_in: u64, bytes_out: u64, arrived: std::time::Instant, cpu_ns: u64) {
        self.requests.served(req_kind, bytes_in, bytes_out, arrived.elapsed());
        self.count_cpu(req_kind, cpu_ns);
        self.counters.cpu_loop_lent_ns.fetch_add(cpu_ns, Ordering::Relaxed);
    }

    /// Serves one decoded request. `payload` is the request's bulk data;
    /// `out` receives the response's. `None`: the answer comes later,
    /// through an [`Answer`] made by `later` (a lock request that waits).
    /// `user`: the proven user the request counts for (see
    /// `conn_quota`; `None` for root and secret-proven peers).
    pub fn handle(&self, req: Request, payload: &[u8], out: &mut Vec<u8>, later: &dyn Fn() -> Answer, user: Option<u32>) -> Option<Response> {
        use weft_wire::ErrorCode;
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        out.clear();
        if let Request::Lock(op) = req {
            match &self.lock {
                Some(l) => l.handle(op, self.meta.as_ref(), later, user),
                None => Some(Response::error(ErrorCode::WrongService, "this server does not host the lock service")),
            }
        } else {
            Some(self.handle_now(req, payload, out))
        }
    }

    /// A lend (`DataReq::Lend`, its capability checked): the answer, and
    /// the object's read-only descriptor, which the event loop sends over
    /// the connection before the answer (or answers `Io` if it cannot).
    pub(crate) fn lend(&self, file: weft_wire::FileId) -> (Response, Option<std::fs::File>) {
        use weft_wire::ErrorCode;
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let Some(d) = &self.data else {
            return (Response::error(ErrorCode::WrongService, "this server does not host the data service"), None);
        };
        match d.lend(file) {
            Ok(Some(f)) => match f.metadata() {
                Ok(m) => (Response::Lent { dev: std::os::unix::fs::MetadataExt::dev(&m), ino: std::os::unix::fs::MetadataExt::ino(&m) }, Some(f)),
                Err(e) => (Response::error(ErrorCode::Io, format!("cannot lend file {}'s object: {e}", file.0)), None),
            },
            Ok(None) => (Response::error(ErrorCode::NotFound, format!("file {} has no object here yet", file.0)), None),
            Err(e) => (Response::error(ErrorCode::Io, format!("cannot lend file {}'s object: {e}", file.0)), None),
        }
    }

    /// Adds `ns` of a worker thread's CPU time to `kind` (the workers
    /// account all of their time: see [`workers`]).
    pub(crate) fn count_cpu(&self, kind: CpuKind, ns: u64) {
        self.counters.cpu_ns[kind as usize].fetch_add(ns, Ordering::Relaxed);
    }

    /// Bytes in all and free on the file system under the data directory.
    fn disk_space(&self) -> (u64, u64) {
        match nix::sys::statvfs::statvfs(&self.dir) {
            Ok(s) => (s.blocks().saturating_mul(s.fragment_size()), s.blocks_available().saturating_mul(s.fragment_size())),
            Err(_) => (0, 0),
        }
    }

    fn handle_now(&self, req: Request, payload: &[u8], out: &mut Vec<u8>) -> Response {
        use weft_wire::{DataReq, ErrorCode};
        let io_err = |e: std::io::Error| {
            let code = match e.kind() {
                _ if e.raw_os_error() == Some(libc::ENOSPC) => ErrorCode::NoSpace,
                _ if e.raw_os_error() == Some(libc::EFBIG) => ErrorCode::TooLarge,
                std::io::ErrorKind::NotFound => ErrorCode::NotFound,
                _ => ErrorCode::Io,
            };
            Response::error(code, e.to_string())
        };
        match req {
            Request::Ping | Request::Sink => Response::Ok,
            Request::Source { len } => {
                out.resize(len as usize, 0);
                Response::Read { object_size: len.into() }
            }
            Request::Status => Response::Stats(Box::new(self.stats())),
            Request::Lock(_) => unreachable!("handled above"),
            Request::Meta { cred, op } => match &self.meta {
                Some(m) => m.handle(squash(cred, self.root_squash), op),
                None => Response::error(ErrorCode::WrongService, "this server does not host the meta service"),
            },
            Request::Data { op, .. } => {
                let Some(d) = &self.data else {
                    return Response::error(ErrorCode::WrongService, "this server does not host the data service");
                };
                let op = match op {
                    // Fencing: a write under a lock whose lease ran out is
                    // refused (the bytes may be another client's now).
                    DataReq::LeasedWrite { file, pieces, lease } => match lease.check(self.gate.cap_key(), crate::lock::unix_ms()) {
                        Ok(()) => DataReq::Write { file, pieces },
                        Err(why) => {
                            tracing::info!(target: "weft::data", file = file.0, session = lease.session, "write refused: {why}");
                            let code = if matches!(why, weft_wire::LeaseRefusal::Forged { .. }) { ErrorCode::Permission } else { ErrorCode::LeaseExpired };
                            return Response::error(code, format!("file {}: {why}", file.0));
                        }
                    },
                    op => op,
                };
                match op {
                    DataReq::Write { file, pieces } => {
                        let Ok(total) = weft_wire::msg::data::pieces_total(&pieces) else { unreachable!("checked by the decoder") };
                        if total != payload.len() as u64 {
                            self.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
                            return Response::error(ErrorCode::BadRequest, format!("pieces total {total} bytes but the payload has {}", payload.len()));
                        }
                        match d.write(file, &pieces, payload) {
                            Ok(bytes) => {
                                self.counters.bytes_written.fetch_add(bytes, Ordering::Relaxed);
                                Response::Written { bytes }
                            }
                            Err(e) => io_err(e),
                        }
                    }
                    DataReq::Read { file, pieces, .. } => {
                        let Ok(total) = weft_wire::msg::data::pieces_total(&pieces) else { unreachable!("checked by the decoder") };
                        if total > weft_wire::limits::MAX_PAYLOAD_LEN.into() {
                            self.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
                            return Response::error(ErrorCode::BadRequest, format!("read of {total} bytes exceeds the payload limit {}", weft_wire::limits::MAX_PAYLOAD_LEN));
                        }
                        match d.read(file, &pieces, out) {
                            Ok(object_size) => {
                                self.counters.bytes_read.fetch_add(total, Ordering::Relaxed);
                                Response::Read { object_size }
                            }
                            Err(e) => io_err(e),
                        }
                    }
                    DataReq::Size { file } => d.size(file).map(|object_size| Response::Size { object_size }).unwrap_or_else(io_err),
                    DataReq::Truncate { file, size } => d.truncate(file, size).map(|()| Response::Ok).unwrap_or_else(io_err),
                    DataReq::Fsync { file } => d.fsync(file).map(|()| Response::Ok).unwrap_or_else(io_err),
                    DataReq::Delete { file } => d.delete(file).map(|()| Response::Ok).unwrap_or_else(io_err),
                    DataReq::Lend { .. } => Response::error(ErrorCode::Internal, "lends are answered by the worker pool"),
                    DataReq::CollWrite { .. } | DataReq::CollRead { .. } => Response::error(ErrorCode::Internal, "collective requests are held by the worker pool"),
                    DataReq::LeasedWrite { .. } => unreachable!("checked above"),
                }
            }
        }
    }
}

/// The identity a request is served as: with root squash, uid 0 becomes
/// nobody (gid too when it is 0), as NFS servers do.
fn squash(cred: weft_wire::Cred, on: bool) -> weft_wire::Cred {
    const NOBODY: u32 = 65534;
    if on && cred.uid == 0 {
        let groups: Vec<u32> = cred.groups().iter().map(|&g| if g == 0 { NOBODY } else { g }).collect();
        weft_wire::Cred::with_groups(NOBODY, if cred.gid == 0 { NOBODY } else { cred.gid }, &groups)
    } else {
        cred
    }
}

/// This thread's CPU time so far, in nanoseconds.
pub(crate) fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

pub(crate) fn cpu_kind(req: &Request) -> CpuKind {
    use weft_wire::DataReq;
    match req {
        Request::Meta { .. } => CpuKind::Meta,
        Request::Lock(_) => CpuKind::Lock,
        Request::Data { op: DataReq::Write { .. } | DataReq::LeasedWrite { .. } | DataReq::CollWrite { .. }, .. } => CpuKind::DataWrite,
        Request::Data { op: DataReq::Read { .. } | DataReq::CollRead { .. }, .. } => CpuKind::DataRead,
        Request::Data { .. } => CpuKind::DataOther,
        _ => CpuKind::Other,
    }
}


impl Server {
    /// A member's round of a server-directed collective (see
    /// [`collectives`]): held until its round is complete, then performed
    /// by this thread; every answer goes through `reply`.
    pub(crate) fn collective(&self, op: weft_wire::DataReq, buf: Payload, reply: collectives::Reply, user: Option<u32>) {
        use weft_wire::{DataReq, ErrorCode};
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let Some(d) = &self.data else {
            return reply(Response::error(ErrorCode::WrongService, "this server does not host the data service"), Payload::default());
        };
        let (file, tag, pieces, write) = match op {
            DataReq::CollWrite { file, tag, pieces } => (file, tag, pieces, true),
            DataReq::CollRead { file, tag, pieces } => (file, tag, pieces, false),
            _ => return reply(Response::error(ErrorCode::Internal, "not a collective request"), Payload::default()),
        };
        let total: u64 = pieces.iter().map(|p| p.len).sum();
        if write && total != buf.len() as u64 {
            self.count_bad_request();
            return reply(Response::error(ErrorCode::BadRequest, format!("pieces total {total} bytes but the payload has {}", buf.len())), Payload::default());
        }
        let Some(pieces_charge) = self.budget.try_charge((pieces.len() as u64 + 1) * collectives::BYTES_PER_PIECE) else {
            let why = format!("collective {:#x}: server memory budget exhausted", tag.id);
            self.collectives.fail((file, tag.id), &why);
            return reply(Response::error(ErrorCode::Busy, why), Payload::default());
        };
        let entry = collectives::Entry::new(pieces, buf, reply, tag.last, pieces_charge);
        if let Some(round) = self.collectives.join(file, tag, write, entry, Instant::now(), user) {
            let key = round.key;
            self.counters.coll_rounds.fetch_add(1, Ordering::Relaxed);
            match collectives::perform(d, file, round) {
                Ok(moved) => {
                    let counter = if write { &self.counters.bytes_written } else { &self.counters.bytes_read };
                    counter.fetch_add(moved, Ordering::Relaxed);
                    self.collectives.resume(key, Instant::now());
                }
                Err(why) => self.collectives.fail(key, &why),
            }
        }
    }

    /// Fails the collectives whose round ran out of time (the event loop's sweep).
    pub(crate) fn expire_collectives(&self, now: Instant) {
        self.collectives.expire(now);
    }

    fn count_bad_request(&self) {
        self.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
    }

    fn count_panic(&self) {
        self.counters.panics.fetch_add(1, Ordering::Relaxed);
        self.count_bad_request();
    }

    fn count_refused_connection(&self) {
        self.counters.refused_connections.fetch_add(1, Ordering::Relaxed);
    }

    /// Makes every metadata change answered so far durable (before a clean
    /// exit: a stop must lose nothing, even within a window), then
    /// `then` runs after the flush, with nothing answered in between
    /// (a clean exit passes `exit`); it gets whether the flush worked.
    pub fn flush_metadata_then(&self, then: impl FnOnce(bool)) {
        match &self.meta {
            Some(m) => m.flush_then(then),
            None => then(true),
        }
    }

    /// Waits, at most `limit`, until no request is queued for or running
    /// on a worker (a drain that ran out its time leaves some running:
    /// their data must not be removed under them). Whether they ended.
    pub fn wait_idle(&self, limit: std::time::Duration) -> bool {
        let until = Instant::now() + limit;
        while self.requests.in_service() > 0 {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        true
    }

    /// Bytes of the memory budget in use now, and its limit.
    pub fn memory(&self) -> (u64, u64) {
        (self.budget.used(), self.budget.limit())
    }
}

/// Serves `server`'s Prometheus metrics on `listener` (`GET /metrics`)
/// from a thread of its own.
pub fn serve_metrics(server: &Arc<Server>, listener: TcpListener) -> std::io::Result<()> {
    let cache = metrics::PageCache::new(Arc::clone(server));
    metrics::http::serve(listener, Arc::new(move || cache.page()))
}

/// Serves `listener` until the process ends: one event loop for every
/// connection, a worker pool for the requests.
pub fn run(server: Arc<Server>, listener: TcpListener) -> std::io::Result<()> {
    run_until(server, listener, Shutdown::new())
}

/// [`run`], until `shutdown` is triggered and the server has drained (see
/// [`shutdown`]); then it returns, and the caller makes the metadata
/// durable and exits.
pub fn run_until(server: Arc<Server>, listener: TcpListener, shutdown: Shutdown) -> std::io::Result<()> {
    reactor::Reactor::new(server, listener)?.run(&shutdown)
}
