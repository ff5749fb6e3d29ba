//! Atomic mode (MPI_File_set_atomicity): every access of a file in atomic
//! mode takes locks covering the bytes it touches, exclusive for writes and
//! shared for reads, does its I/O, and releases them. Locks come from the
//! cluster's lock service in one session per client, renewed by a
//! background thread; if the client dies its locks expire after the
//! cluster's `lock_ttl_ms`. The session's requests share the client's
//! endpoint (one connection to the lock server, with the namespace's); the
//! server answers an acquire that waits later, so renewals and releases
//! never queue behind it.
//!
//! | granularity | locks taken | hint `weft_lock_granularity` / `WEFT_LOCK_GRANULARITY` |
//! |---|---|---|
//! | whole file | one range `[0, 2^63)` | `file` |
//! | byte range | one range from the first to the last byte touched | `range` |
//! | list (default) | exactly the bytes touched: regions coalesced, equal strided blocks sent as one item | `list` |

use crate::{Error, Result};
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_lock::Extent;
use weft_net::{ClusterFile, Endpoint};
use weft_wire::limits::MAX_LOCK_EXTENTS;
use weft_wire::{Capability, FileId, Lease, LockReq, Request, Response, WireExtent};

/// How much of the file an atomic access locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockGranularity {
    WholeFile,
    ByteRange,
    List,
}

impl FromStr for LockGranularity {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "file" | "whole-file" => Ok(LockGranularity::WholeFile),
            "range" | "byte-range" => Ok(LockGranularity::ByteRange),
            "list" => Ok(LockGranularity::List),
            o => Err(Error::BadRequest(format!("lock granularity {o:?}: use file, range or list"))),
        }
    }
}

impl LockGranularity {
    pub fn name(self) -> &'static str {
        match self {
            LockGranularity::WholeFile => "file",
            LockGranularity::ByteRange => "range",
            LockGranularity::List => "list",
        }
    }

    /// The extents that lock `regions` ((offset, length), any order).
    pub fn extents(self, regions: &[(u64, u64)]) -> Result<Vec<Extent>> {
        let lo = regions.iter().filter(|r| r.1 > 0).map(|r| r.0).min();
        let hi = regions.iter().filter(|r| r.1 > 0).map(|r| r.0 + r.1).max();
        let (Some(lo), Some(hi)) = (lo, hi) else { return Ok(Vec::new()) };
        let bad = |e: weft_lock::ExtentError| Error::BadRequest(format!("cannot lock this access: {e}"));
        Ok(match self {
            LockGranularity::WholeFile => vec![Extent::range(0, weft_lock::extent::MAX_END).map_err(bad)?],
            LockGranularity::ByteRange => vec![Extent::range(lo, hi).map_err(bad)?],
            LockGranularity::List => {
                let list = if regions.windows(2).all(|w| w[0] <= w[1]) {
                    weft_lock::coalesce(regions)
                } else {
                    let mut sorted = regions.to_vec();
                    sorted.sort_unstable();
                    weft_lock::coalesce(&sorted)
                }
                .map_err(bad)?;
                // A list longer than one request may carry falls back to its
                // bounding range: more bytes locked, never fewer.
                if list.len() > MAX_LOCK_EXTENTS { vec![Extent::range(lo, hi).map_err(bad)?] } else { list }
            }
        })
    }
}

fn wire(e: &Extent) -> WireExtent {
    match *e {
        Extent::Range { start, end } => WireExtent::Range { start, end },
        Extent::Strided { offset, len, stride, count } => WireExtent::Strided { offset, len, stride, count },
    }
}

/// What this client knows of its lease: the server's lease runs at least
/// until `ttl` after the last renewal (or acquire) the client *sent* and saw
/// answered, since the server renews on receipt. Past that instant the
/// client can no longer trust that it holds its locks.
struct LeaseClock {
    ttl: Duration,
    valid_until: Mutex<Instant>,
    /// Set once the lease is known lost; the session is then replaced.
    lapsed: AtomicBool,
}

impl LeaseClock {
    /// A request sent at `sent` was answered: the lease runs to `sent + ttl`.
    fn renewed(&self, sent: Instant) {
        let mut v = self.valid_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *v = (*v).max(sent + self.ttl);
    }

    /// `Err(LeaseExpired)` if the lease lapsed, or may have.
    fn check(&self, session: u64) -> Result<()> {
        let until = *self.valid_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !self.lapsed.load(Ordering::Acquire) && Instant::now() < until {
            return Ok(());
        }
        self.lapsed.store(true, Ordering::Release);
        Err(Error::LeaseExpired(format!(
            "lock session {session:#x}: no renewal reached the lock service within its {} ms lease; its locks may be held by others now",
            self.ttl.as_millis()
        )))
    }
}

/// The lease the lock service gave with its last grant or renewal, which
/// writes under the session's locks carry (the data servers refuse them
/// once it ran out: fencing).
#[derive(Default)]
struct LeaseProof(Mutex<Option<Lease>>);

impl LeaseProof {
    /// Keeps the lease an answer carries (the latest runs longest).
    fn note(&self, r: &Response) {
        let fresh = match r {
            Response::Locked { lease, .. } | Response::Leased(lease) => *lease,
            _ => return,
        };
        let mut held = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.is_none_or(|h| h.until_ms < fresh.until_ms) {
            *held = Some(fresh);
        }
    }

    fn get(&self) -> Option<Lease> {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// This client's session with the lock service.
pub(crate) struct LockSession {
    addr: SocketAddr,
    session: u64,
    lease: Arc<LeaseClock>,
    proof: Arc<LeaseProof>,
    /// The client's endpoint.
    endpoint: Arc<Endpoint>,
    /// Deadline of an acquire: the server answers within `wait_ms`.
    acquire_timeout: Duration,
    wait_ms: u32,
    /// Releases handed to the keeper thread; dropping it stops the thread.
    releases: Mutex<Option<Sender<(FileId, u64)>>>,
    keeper: Option<std::thread::JoinHandle<()>>,
    /// Locks of this session its guards still hold.
    held: std::sync::atomic::AtomicUsize,
}

fn random_session() -> u64 {
    crate::random_u64()
}

fn expect_ok(addr: SocketAddr, reply: std::result::Result<weft_net::Reply, weft_net::NetError>) -> Result<Response> {
    let reply = reply?;
    match Response::decode(&reply.body) {
        Ok(Response::Error { code, message }) => Err(Error::from_code(addr, code, message)),
        Ok(r) => Ok(r),
        Err(e) => Err(Error::Protocol { addr, what: format!("undecodable response: {e}") }),
    }
}

impl LockSession {
    /// A session with the lock server at `addr` of `cluster`.
    /// `lock_wait`: how long an acquire may wait (the client's options).
    pub(crate) fn start(cluster: &ClusterFile, addr: SocketAddr, endpoint: Arc<Endpoint>, lock_wait: Duration) -> Result<Self> {
        let wait_ms = u32::try_from(lock_wait.as_millis()).unwrap_or(u32::MAX);
        let base = endpoint.config().op_timeout;
        // An acquire may legitimately wait `wait_ms`; the server answers by then.
        let acquire_timeout = Duration::from_millis(u64::from(wait_ms)) + base;
        let session = random_session();
        // The keeper thread renews the lease and sends atomic mode's
        // releases, so an access does not wait for its release. Renewals go
        // out every third of the lease and give up after another third, so a
        // slow or lost renewal is retried well inside the lease.
        let ttl = Duration::from_millis(cluster.lock_ttl_ms.max(3));
        let period = ttl / 3;
        let keeper_timeout = period.min(base);
        let keeper_ep = endpoint.clone();
        let lease = Arc::new(LeaseClock { ttl, valid_until: Mutex::new(Instant::now()), lapsed: AtomicBool::new(false) });
        let (tx, rx) = channel::<(FileId, u64)>();
        let proof = Arc::new(LeaseProof::default());
        // The session starts before its keeper renews it (a renewal of a
        // session the service does not know yet is refused).
        let sent = Instant::now();
        let started = expect_ok(addr, endpoint.call_within(addr, Request::Lock(LockReq::Start { session }).encode(), base))?;
        lease.renewed(sent);
        proof.note(&started);
        let keeper_lease = lease.clone();
        let keeper_proof = proof.clone();
        let keeper = std::thread::Builder::new()
            .name("weft-lease".into())
            .spawn(move || {
                let renew = Request::Lock(LockReq::Renew { session }).encode();
                let mut next = Instant::now() + period;
                loop {
                    let wait = next.saturating_duration_since(Instant::now());
                    match rx.recv_timeout(wait) {
                        Ok((file, lock)) => {
                            let body = Request::Lock(LockReq::Release { session, file, lock }).encode();
                            if let Err(e) = expect_ok(addr, keeper_ep.call(addr, body)) {
                                tracing::warn!(target: "weft::lock", lock, error = %e, "release failed");
                            }
                        }
                        // Lapsed (an acquire went unanswered, the service
                        // forgot the session): nothing to renew. Ending it
                        // frees what the service may still grant it.
                        Err(RecvTimeoutError::Timeout) if keeper_lease.lapsed.load(Ordering::Acquire) => {
                            let end = Request::Lock(LockReq::End { session }).encode();
                            let _ = keeper_ep.call_within(addr, end, keeper_timeout);
                            return;
                        }
                        Err(RecvTimeoutError::Timeout) => {
                            let sent = Instant::now();
                            match expect_ok(addr, keeper_ep.call_within(addr, renew.clone(), keeper_timeout)) {
                                Ok(r) => {
                                    keeper_lease.renewed(sent);
                                    keeper_proof.note(&r);
                                }
                                Err(Error::LeaseExpired(m)) => {
                                    tracing::error!(target: "weft::lock", session, "lease lost: {m}");
                                    keeper_lease.lapsed.store(true, Ordering::Release);
                                    // Lost for good: nothing to renew or release
                                    // (releases then go, and fail, directly).
                                    return;
                                }
                                Err(e) => tracing::warn!(target: "weft::lock", error = %e, "lease renewal failed; retrying"),
                            }
                            next = Instant::now() + period;
                        }
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .map_err(|e| Error::Io { addr, message: format!("cannot start the lease thread: {e}") })?;
        Ok(LockSession { addr, session, lease, proof, endpoint, acquire_timeout, wait_ms, releases: Mutex::new(Some(tx)), keeper: Some(keeper), held: Default::default() })
    }

    /// Sends one request; a successful answer renews the lease (the server
    /// renews on every request of the session), `LeaseExpired` ends it.
    fn call(&self, req: LockReq) -> Result<Response> {
        let sent = Instant::now();
        let timeout = if matches!(req, LockReq::Acquire { .. }) { self.acquire_timeout } else { self.endpoint.config().op_timeout };
        let reply = self.endpoint.call_within(self.addr, Request::Lock(req).encode(), timeout);
        match expect_ok(self.addr, reply) {
            Ok(r) => {
                self.lease.renewed(sent);
                self.proof.note(&r);
                Ok(r)
            }
            Err(e @ Error::LeaseExpired(_)) => {
                self.lease.lapsed.store(true, Ordering::Release);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// The lease writes under this session's locks carry.
    pub(crate) fn lease_proof(&self) -> Option<Lease> {
        self.proof.get()
    }

    /// Lost for good: the client starts a new session for later accesses.
    pub(crate) fn is_lapsed(&self) -> bool {
        self.lease.lapsed.load(Ordering::Acquire)
    }

    /// Whether a guard of this session still holds a lock.
    pub(crate) fn holds_locks(&self) -> bool {
        self.held.load(Ordering::Acquire) > 0
    }

    /// Blocks until the extents are locked; returns the lock id. Fails with
    /// `LeaseExpired`, before or after asking, if the session's lease
    /// lapsed: the bytes might be locked by another client.
    pub(crate) fn acquire(&self, file: FileId, cap: Capability, exclusive: bool, extents: &[Extent]) -> Result<u64> {
        self.acquire_within(file, cap, exclusive, extents, self.wait_ms)
    }

    /// [`LockSession::acquire`], waiting at most `wait_ms` (0: only if
    /// free now) before the service answers `Busy`.
    pub(crate) fn acquire_within(&self, file: FileId, cap: Capability, exclusive: bool, extents: &[Extent], wait_ms: u32) -> Result<u64> {
        self.lease.check(self.session)?;
        let req = LockReq::Acquire { session: self.session, file, cap, exclusive, wait_ms, extents: extents.iter().map(wire).collect() };
        let answer = match self.call(req) {
            // No answer: the service may grant the lock later, to a session
            // that will never release it. Ending the session frees whatever
            // it holds; like a lapsed lease, later accesses get a new one.
            Err(e @ Error::Net(_)) => {
                self.lease.lapsed.store(true, Ordering::Release);
                let end = Request::Lock(LockReq::End { session: self.session }).encode();
                let _ = self.endpoint.call_within(self.addr, end, self.endpoint.config().connect_timeout);
                return Err(e);
            }
            other => other?,
        };
        match answer {
            Response::Locked { lock, .. } => Ok(lock),
            other => Err(Error::Protocol { addr: self.addr, what: format!("expected Locked, got {other:?}") }),
        }
    }

    pub(crate) fn release(&self, file: FileId, lock: u64) -> Result<()> {
        self.call(LockReq::Release { session: self.session, file, lock }).map(|_| ())
    }

    /// Releases in the background (atomic mode: the I/O is done; the lock
    /// may be held a little longer, never shorter). Falls back to a
    /// synchronous release if the keeper is gone.
    pub(crate) fn release_soon(&self, file: FileId, lock: u64) -> Result<()> {
        let sent = self.releases.lock().expect("releases").as_ref().is_some_and(|tx| tx.send((file, lock)).is_ok());
        if sent { Ok(()) } else { self.release(file, lock) }
    }
}

impl Drop for LockSession {
    fn drop(&mut self) {
        // Closing the channel lets the keeper send what is queued, then stop.
        self.releases.lock().expect("releases").take();
        if let Some(h) = self.keeper.take() {
            let _ = h.join();
        }
        // A clean goodbye frees the locks at once instead of after the TTL.
        let _ = self.call(LockReq::End { session: self.session });
    }
}

/// Locks held until released or dropped.
pub struct LockGuard {
    file: FileId,
    lock: Option<u64>,
    /// The session that holds them (a later session of the client holds
    /// none of these).
    session: Arc<LockSession>,
}

impl LockGuard {
    pub(crate) fn new(session: Arc<LockSession>, file: FileId, lock: u64) -> Self {
        session.held.fetch_add(1, Ordering::AcqRel);
        LockGuard { file, lock: Some(lock), session }
    }

    /// The lock, once: no longer held by this guard.
    fn take(&mut self) -> Option<u64> {
        let l = self.lock.take();
        if l.is_some() {
            self.session.held.fetch_sub(1, Ordering::AcqRel);
        }
        l
    }

    /// The lease writes under these locks carry (see [`Lease`]).
    pub fn lease(&self) -> Option<Lease> {
        self.session.lease_proof()
    }

    /// The lock service's id of this lock.
    pub fn id(&self) -> u64 {
        self.lock.unwrap_or(0)
    }

    pub fn release(mut self) -> Result<()> {
        match self.take() {
            Some(l) => self.session.release(self.file, l),
            None => Ok(()),
        }
    }

    /// Releases without waiting for the lock service's answer.
    pub(crate) fn release_soon(mut self) -> Result<()> {
        match self.take() {
            Some(l) => self.session.release_soon(self.file, l),
            None => Ok(()),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(l) = self.take() {
            let _ = self.session.release(self.file, l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn granularities_cover_what_they_say() {
        let regions = [(100, 10), (120, 10), (140, 10), (200, 5)];
        assert_eq!(LockGranularity::ByteRange.extents(&regions).unwrap(), [Extent::range(100, 205).unwrap()]);
        assert_eq!(LockGranularity::WholeFile.extents(&regions).unwrap()[0].bounds().0, 0);
        let list = LockGranularity::List.extents(&regions).unwrap();
        assert_eq!(list, [Extent::strided(100, 10, 20, 3).unwrap(), Extent::range(200, 205).unwrap()]);
        assert!(LockGranularity::List.extents(&[]).unwrap().is_empty());
        assert!("sometimes".parse::<LockGranularity>().is_err());
    }
}
