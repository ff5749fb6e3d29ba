//! One `weft serve` process: listens, checks each connection's handshake,
//! and serves its requests on a thread of its own.
//!
//! A connection that sends bytes that are not Weft frames, or breaks the
//! rendezvous rules, is closed; a request whose body does not decode gets a
//! `BadRequest` answer and the connection goes on. Either way every other
//! connection is untouched.

mod conn;
mod read_turns;

pub use read_turns::{ReadTurns, Turn};

use crate::data::DataService;
use crate::lock::LockService;
use crate::meta::MetaService;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use thiserror::Error;
use weft_net::{ClusterFile, Service};
use weft_wire::{Request, Response, Secret, ServerId, ServerStats};

/// Most connections served at once; more are closed at accept. Each costs a
/// thread, and 1024 covers a large job's clients on one server.
pub const MAX_CONNECTIONS: usize = 1024;

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
    requests: AtomicU64,
    bad_requests: AtomicU64,
    bytes_written: AtomicU64,
    bytes_read: AtomicU64,
}

/// The services of one server and its counters.
pub struct Server {
    meta: Option<MetaService>,
    data: Option<DataService>,
    lock: Option<Arc<LockService>>,
    services: u8,
    secret: Secret,
    counters: Counters,
    started: Instant,
    connections: AtomicUsize,
    /// The order in which waiting reads are served.
    pub read_turns: ReadTurns,
}

impl Server {
    /// Opens the services the cluster file gives server `id`.
    pub fn open(cluster: &ClusterFile, id: ServerId) -> Result<Self, ServeError> {
        let me = cluster.server(id).ok_or(ServeError::UnknownId(id.0))?;
        let has = |s| me.services.contains(&s);
        let dir = me.dir.display().to_string();
        let meta = has(Service::Meta)
            .then(|| MetaService::open(&me.dir, cluster.data_servers(), cluster.default_stripe_size))
            .transpose()
            .map_err(|e| ServeError::Open { service: "meta", dir: dir.clone(), reason: e.to_string() })?;
        let data = has(Service::Data)
            .then(|| DataService::open(&me.dir))
            .transpose()
            .map_err(|e| ServeError::Open { service: "data", dir: dir.clone(), reason: e.to_string() })?;
        let lock = has(Service::Lock).then(|| LockService::start(cluster.lock_ttl_ms));
        let services = u8::from(has(Service::Meta)) | u8::from(has(Service::Data)) << 1 | u8::from(has(Service::Lock)) << 2;
        Ok(Server {
            meta,
            data,
            lock,
            services,
            secret: cluster.secret(),
            counters: Counters::default(),
            started: Instant::now(),
            connections: AtomicUsize::new(0),
            read_turns: ReadTurns::new(id.0, read_slots()),
        })
    }

    pub fn stats(&self) -> ServerStats {
        let (objects, bytes_stored) = self.data.as_ref().map(DataService::usage).unwrap_or_default();
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
        }
    }

    /// Serves one decoded request. `payload` is the request's bulk data;
    /// `out` receives the response's.
    pub fn handle(&self, req: Request, payload: &[u8], out: &mut Vec<u8>) -> Response {
        use weft_wire::{DataReq, ErrorCode};
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        out.clear();
        let io_err = |e: std::io::Error| Response::error(ErrorCode::Io, e.to_string());
        match req {
            Request::Ping | Request::Sink => Response::Ok,
            Request::Source { len } => {
                out.resize(len as usize, 0);
                Response::Read { object_size: len.into() }
            }
            Request::Status => Response::Stats(self.stats()),
            Request::Lock(op) => match &self.lock {
                Some(l) => l.handle(op, self.meta.as_ref()),
                None => Response::error(ErrorCode::WrongService, "this server does not host the lock service"),
            },
            Request::Meta { cred, op } => match &self.meta {
                Some(m) => m.handle(cred, op),
                None => Response::error(ErrorCode::WrongService, "this server does not host the meta service"),
            },
            Request::Data(op) => {
                let Some(d) = &self.data else {
                    return Response::error(ErrorCode::WrongService, "this server does not host the data service");
                };
                match op {
                    DataReq::Write { file, pieces } => {
                        let total: u64 = pieces.iter().map(|p| p.len).sum();
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
                        let total: u64 = pieces.iter().map(|p| p.len).sum();
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
                }
            }
        }
    }
}

impl Server {
    /// Serves a write whose `pay_len` payload bytes are still on `src`:
    /// they go from the socket straight into the object file. Returns `Err`
    /// only when the connection itself failed.
    pub(crate) fn write_streamed(
        &self,
        file: weft_wire::FileId,
        pieces: &[weft_wire::Piece],
        pay_len: u32,
        src: &mut std::io::BufReader<std::net::TcpStream>,
        splicer: &mut crate::data::Splicer,
    ) -> std::io::Result<Response> {
        use crate::data::{skip, StreamError};
        use weft_wire::ErrorCode;
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let total: u64 = pieces.iter().map(|p| p.len).sum();
        let refuse = |src: &mut std::io::BufReader<std::net::TcpStream>, code, msg: String| -> std::io::Result<Response> {
            self.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
            skip(src, pay_len.into())?;
            Ok(Response::error(code, msg))
        };
        let Some(d) = &self.data else {
            return refuse(src, ErrorCode::WrongService, "this server does not host the data service".into());
        };
        if total != u64::from(pay_len) {
            return refuse(src, ErrorCode::BadRequest, format!("pieces total {total} bytes but the payload has {pay_len}"));
        }
        match d.write_streamed(file, pieces, src, splicer) {
            Ok(bytes) => {
                self.counters.bytes_written.fetch_add(bytes, Ordering::Relaxed);
                Ok(Response::Written { bytes })
            }
            Err(StreamError::File(e)) => Ok(Response::error(ErrorCode::Io, e.to_string())),
            Err(StreamError::Stream(e)) => Err(e),
        }
    }
}

/// Reads a data server serves at once when clients ask for ordering
/// (`WEFT_READ_SLOTS`, default 1: the paper's one transfer per server at a time).
fn read_slots() -> usize {
    std::env::var("WEFT_READ_SLOTS").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(1)
}

/// Serves `listener` forever (until the process is stopped). Every accepted
/// connection gets its own thread; a failing connection ends only itself.
pub fn run(server: Arc<Server>, listener: TcpListener) {
    let mut backoff_ms = 1;
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                backoff_ms = 1;
                if server.connections.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                    server.connections.fetch_sub(1, Ordering::AcqRel);
                    tracing::warn!(target: "weft::server", %peer, "connection limit {MAX_CONNECTIONS} reached, closing");
                    continue;
                }
                let s = server.clone();
                std::thread::spawn(move || {
                    conn::serve(&s, stream, peer);
                    s.connections.fetch_sub(1, Ordering::AcqRel);
                });
            }
            Err(e) => {
                // Out of descriptors or similar: back off, do not spin.
                tracing::warn!(target: "weft::server", error = %e, "accept failed");
                std::thread::sleep(std::time::Duration::from_millis(backoff_ms));
                backoff_ms = (backoff_ms * 2).min(1000);
            }
        }
    }
}
