//! This client's session with a lock service (atomic mode, `Client::lock`,
//! the mount's fcntl locks): a lease renewed by a keeper thread, the locks
//! its guards hold, and taking them back when the service restarted.
//!
//! The lock service keeps its locks in memory. After a restart it knows
//! no session, grants no lock for one lease time (its grace), and during
//! that time takes back (`Reclaim`) the locks of sessions that held them
//! before, each shown with the seal its grant carried. A session reclaims
//! when the service answers it `LeaseExpired` while its lease still runs
//! by the client's own clock (the service's runs at least as long, so the
//! locks were still the session's when the old service stopped). It then
//! starts again under the same id and asks for each lock its guards
//! hold, under the same ids; until every one is back, no answer's lease
//! is kept for writes. A refusal (the grace was over: the service did not
//! restart, or restarted too long ago) ends the session (`End`), drops
//! its lease, and the guards' holders learn it from `LeaseExpired`; a
//! missing answer leaves the reclaim to be asked again while the lease
//! runs. A client paused or cut off past its lease never reclaims: its
//! locks may have gone to another client before the restart.

use crate::{Error, Result};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use weft_lock::Extent;
use weft_net::{ClusterFile, Endpoint};
use weft_wire::{Capability, FileId, Lease, LockReq, Request, Response, WireExtent};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
        let mut v = lock(&self.valid_until);
        *v = (*v).max(sent + self.ttl);
    }

    fn runs(&self) -> bool {
        Instant::now() < *lock(&self.valid_until)
    }

    /// `Err(LeaseExpired)` if the lease lapsed, or may have.
    fn check(&self, session: u64) -> Result<()> {
        if !self.lapsed.load(Ordering::Acquire) && self.runs() {
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
        let mut held = lock(&self.0);
        if held.is_none_or(|h| h.until_ms < fresh.until_ms) {
            *held = Some(fresh);
        }
    }

    fn get(&self) -> Option<Lease> {
        *lock(&self.0)
    }

    fn clear(&self) {
        *lock(&self.0) = None;
    }
}

/// A lock a guard holds, as it was granted (to ask again after a restart).
#[derive(Clone)]
struct Held {
    file: FileId,
    cap: Capability,
    exclusive: bool,
    seal: [u8; 32],
    extents: Vec<WireExtent>,
}

/// How a reclaim ended.
enum Reclaim {
    /// The session is live with every lock its guards hold.
    Live,
    /// The locks are lost: the session has lapsed.
    Lost(Error),
    /// The service did not answer (it may still be starting): asked again
    /// by the next request, while the lease runs.
    Again(Error),
}

/// What the session's callers and its keeper thread share.
struct Shared {
    addr: SocketAddr,
    session: u64,
    endpoint: Arc<Endpoint>,
    lease: LeaseClock,
    proof: LeaseProof,
    /// The locks its guards hold, by lock id.
    held: Mutex<HashMap<u64, Held>>,
    /// One reclaim at a time (and no lock registered during one).
    recovery: Mutex<()>,
    /// A reclaim began and has not ended (live or lost): the service may
    /// know the session again without its locks, so its answers prove
    /// nothing (no lease is kept from them) until the reclaim is made.
    reclaiming: AtomicBool,
    /// Reclaims made: a release answered "no such lock" after one is of a
    /// lock the reclaim did not take back because it was being released.
    reclaims: AtomicU64,
}

fn expect_ok(addr: SocketAddr, reply: std::result::Result<weft_net::Reply, weft_net::NetError>) -> Result<Response> {
    let reply = reply?;
    match Response::decode(&reply.body) {
        Ok(Response::Error { code, message }) => Err(Error::from_code(addr, code, message)),
        Ok(r) => Ok(r),
        Err(e) => Err(Error::Protocol { addr, what: format!("undecodable response: {e}") }),
    }
}

impl Shared {
    /// Sends one request; an answer renews the lease (the server renews on
    /// every request of the session) and its lease is kept for writes,
    /// unless a reclaim is under way.
    fn send(&self, req: &LockReq, timeout: Duration) -> Result<Response> {
        let sent = Instant::now();
        let r = expect_ok(self.addr, self.endpoint.call_within(self.addr, Request::Lock(req.clone()).encode(), timeout))?;
        if !self.reclaiming.load(Ordering::Acquire) {
            self.lease.renewed(sent);
            self.proof.note(&r);
        }
        Ok(r)
    }

    /// [`Shared::send`]; on `LeaseExpired` (or a reclaim left unfinished),
    /// reclaims the session's locks if the service restarted while they
    /// were good, and sends once more. Otherwise the session is lost.
    fn call(&self, req: LockReq, timeout: Duration) -> Result<Response> {
        let mut reclaimed = false;
        loop {
            if !reclaimed && self.reclaiming.load(Ordering::Acquire) {
                reclaimed = true;
                self.recover()?;
            }
            match self.send(&req, timeout) {
                Err(Error::LeaseExpired(_)) if !reclaimed => {
                    reclaimed = true;
                    self.recover()?;
                }
                Err(e @ Error::LeaseExpired(_)) => {
                    self.lose();
                    return Err(e);
                }
                other => return other,
            }
        }
    }

    /// A reclaim left to be asked again is `Busy` (not the `Net` error of
    /// the request that found it: that request was answered).
    fn recover(&self) -> Result<()> {
        match self.reclaim() {
            Reclaim::Live => Ok(()),
            Reclaim::Lost(e) => Err(e),
            Reclaim::Again(e) => Err(Error::Busy { addr: self.addr, message: format!("the lock service restarted and this session's locks are being taken back; asked again by the next request: {e}") }),
        }
    }

    /// The session is lost for good: no write carries its lease any more,
    /// and ending it frees what the service may still hold for it.
    fn lose(&self) {
        self.lease.lapsed.store(true, Ordering::Release);
        self.proof.clear();
        let end = Request::Lock(LockReq::End { session: self.session }).encode();
        let _ = self.endpoint.call_within(self.addr, end, self.endpoint.config().connect_timeout);
    }

    /// Takes the session's locks back from a restarted service. Only
    /// while the lease runs by this client's clock: the service's lease
    /// runs at least as long, so the locks were still this session's when
    /// the old service stopped, and nobody else can have been granted
    /// them since (a restarted service grants only reclaims in its grace).
    fn reclaim(&self) -> Reclaim {
        let _one = lock(&self.recovery);
        let lost = |why: String| {
            self.lose();
            self.reclaiming.store(false, Ordering::Release);
            tracing::error!(target: "weft::lock", session = self.session, "the session's locks are lost: {why}");
            Reclaim::Lost(Error::LeaseExpired(format!("lock session {:#x}: {why}", self.session)))
        };
        if self.lease.lapsed.load(Ordering::Acquire) {
            return Reclaim::Lost(Error::LeaseExpired(format!("lock session {:#x} lapsed", self.session)));
        }
        let timeout = self.endpoint.config().op_timeout;
        // Another request may have reclaimed while this one waited.
        if !self.reclaiming.load(Ordering::Acquire) {
            match self.send(&LockReq::Renew { session: self.session }, timeout) {
                Ok(_) => return Reclaim::Live,
                Err(Error::LeaseExpired(_)) => {}
                Err(e) => return Reclaim::Again(e),
            }
        }
        if !self.lease.runs() {
            return lost(format!("the lock service forgot the session after its {} ms lease ran out", self.lease.ttl.as_millis()));
        }
        self.reclaiming.store(true, Ordering::Release);
        let mut answers = Vec::new();
        match self.send(&LockReq::Start { session: self.session }, timeout) {
            Ok(r) => answers.push(r),
            Err(e @ Error::Net(_)) => return Reclaim::Again(e),
            Err(e) => return lost(format!("the session could not be started again: {e}")),
        }
        let held: Vec<(u64, Held)> = lock(&self.held).iter().map(|(&id, h)| (id, h.clone())).collect();
        for (id, h) in &held {
            let req = LockReq::Reclaim { session: self.session, file: h.file, cap: h.cap, exclusive: h.exclusive, lock: *id, seal: h.seal, extents: h.extents.clone() };
            match self.send(&req, timeout) {
                Ok(r @ Response::Locked { .. }) => answers.push(r),
                Ok(other) => return lost(format!("lock {id} was not reclaimed: answered {other:?}")),
                Err(e @ Error::Net(_)) => return Reclaim::Again(e),
                Err(e) => return lost(format!("lock {id} was not reclaimed after a restart of the lock service: {e}")),
            }
        }
        self.reclaiming.store(false, Ordering::Release);
        for r in &answers {
            self.proof.note(r);
        }
        self.reclaims.fetch_add(1, Ordering::AcqRel);
        // A guard released during the reclaim: its release may have gone
        // out (and failed) before its lock was taken back.
        let gone: Vec<(u64, FileId)> = {
            let now = lock(&self.held);
            held.iter().filter(|(id, _)| !now.contains_key(id)).map(|(id, h)| (*id, h.file)).collect()
        };
        for (id, file) in gone {
            let _ = self.send(&LockReq::Release { session: self.session, file, lock: id }, timeout);
        }
        tracing::info!(target: "weft::lock", session = self.session, locks = held.len(), "the lock service restarted: locks reclaimed");
        Reclaim::Live
    }

    fn release(&self, file: FileId, id: u64) -> Result<()> {
        let reclaims = self.reclaims.load(Ordering::Acquire);
        match self.call(LockReq::Release { session: self.session, file, lock: id }, self.endpoint.config().op_timeout) {
            Ok(_) => Ok(()),
            // Released during a reclaim (which then did not take it back,
            // or released it after): once that reclaim is over.
            Err(Error::BadRequest(m)) if m.contains("no lock") && {
                let _over = lock(&self.recovery);
                self.reclaims.load(Ordering::Acquire) != reclaims
            } => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// This client's session with the lock service.
pub(crate) struct LockSession {
    shared: Arc<Shared>,
    /// Deadline of an acquire: the server answers within `wait_ms`.
    acquire_timeout: Duration,
    wait_ms: u32,
    /// Releases handed to the keeper thread; dropping it stops the thread.
    releases: Mutex<Option<Sender<(FileId, u64)>>>,
    keeper: Option<std::thread::JoinHandle<()>>,
}

fn random_session() -> u64 {
    crate::random_u64()
}

/// The keeper thread: renews the lease and sends atomic mode's releases,
/// so an access does not wait for its release.
fn keep(s: &Shared, releases: std::sync::mpsc::Receiver<(FileId, u64)>, period: Duration, timeout: Duration) {
    let renew = LockReq::Renew { session: s.session };
    let mut next = Instant::now() + period;
    loop {
        let wait = next.saturating_duration_since(Instant::now());
        match releases.recv_timeout(wait) {
            Ok((file, lock)) => {
                if let Err(e) = s.release(file, lock) {
                    tracing::warn!(target: "weft::lock", lock, error = %e, "release failed");
                }
            }
            // Lapsed (an acquire went unanswered, the service forgot the
            // session and its locks could not be reclaimed): nothing to
            // renew. Ending it frees what the service may still grant it.
            Err(RecvTimeoutError::Timeout) if s.lease.lapsed.load(Ordering::Acquire) => {
                let end = Request::Lock(LockReq::End { session: s.session }).encode();
                let _ = s.endpoint.call_within(s.addr, end, timeout);
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                match s.call(renew.clone(), timeout) {
                    Ok(_) => {}
                    Err(Error::LeaseExpired(m)) => {
                        tracing::error!(target: "weft::lock", session = s.session, "lease lost: {m}");
                        // Lost for good: nothing to renew or release
                        // (releases then go, and fail, directly).
                        return;
                    }
                    Err(e) => {
                        // Soon again: the lease runs out otherwise, and
                        // with it the chance to reclaim after a restart.
                        tracing::warn!(target: "weft::lock", error = %e, "lease renewal failed; retrying");
                        next = Instant::now() + period / 3;
                        continue;
                    }
                }
                next = Instant::now() + period;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
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
        // Renewals go out every third of the lease and give up after
        // another third, so a slow or lost renewal is retried well inside
        // the lease.
        let ttl = Duration::from_millis(cluster.lock_ttl_ms.max(3));
        let period = ttl / 3;
        let keeper_timeout = period.min(base);
        let shared = Arc::new(Shared {
            addr,
            session: random_session(),
            endpoint,
            lease: LeaseClock { ttl, valid_until: Mutex::new(Instant::now()), lapsed: AtomicBool::new(false) },
            proof: LeaseProof::default(),
            held: Mutex::new(HashMap::new()),
            recovery: Mutex::new(()),
            reclaiming: AtomicBool::new(false),
            reclaims: AtomicU64::new(0),
        });
        // The session starts before its keeper renews it (a renewal of a
        // session the service does not know yet is refused).
        shared.send(&LockReq::Start { session: shared.session }, base)?;
        let (tx, rx) = channel::<(FileId, u64)>();
        let kept = shared.clone();
        let keeper = std::thread::Builder::new()
            .name("weft-lease".into())
            .spawn(move || keep(&kept, rx, period, keeper_timeout))
            .map_err(|e| Error::Io { addr, message: format!("cannot start the lease thread: {e}") })?;
        Ok(LockSession { shared, acquire_timeout, wait_ms, releases: Mutex::new(Some(tx)), keeper: Some(keeper) })
    }

    /// The lease writes under this session's locks carry (none once it
    /// lapsed: `LockGuard::fence`).
    pub(crate) fn lease_proof(&self) -> Option<Lease> {
        if self.is_lapsed() { None } else { self.shared.proof.get() }
    }

    /// Lost for good: the client starts a new session for later accesses.
    pub(crate) fn is_lapsed(&self) -> bool {
        self.shared.lease.lapsed.load(Ordering::Acquire)
    }

    /// Whether a guard of this session still holds a lock.
    pub(crate) fn holds_locks(&self) -> bool {
        !lock(&self.shared.held).is_empty()
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
        let s = &self.shared;
        let extents: Vec<WireExtent> = extents.iter().map(crate::atomic::wire).collect();
        let mut tries = 0;
        loop {
            s.lease.check(s.session)?;
            let reclaims = s.reclaims.load(Ordering::Acquire);
            let req = LockReq::Acquire { session: s.session, file, cap, exclusive, wait_ms, extents: extents.clone() };
            let answer = match s.call(req, self.acquire_timeout) {
                // No answer: the service may grant the lock later, to a
                // session that will never release it. Ending the session
                // frees whatever it holds; like a lapsed lease, later
                // accesses get a new one.
                Err(e @ Error::Net(_)) => {
                    s.lose();
                    return Err(e);
                }
                other => other?,
            };
            let Response::Locked { lock: id, seal, .. } = answer else {
                return Err(Error::Protocol { addr: s.addr, what: format!("expected Locked, got {answer:?}") });
            };
            // Registered outside a reclaim, so none misses it...
            let _quiet = lock(&s.recovery);
            if s.lease.lapsed.load(Ordering::Acquire) {
                return Err(Error::LeaseExpired(format!("lock session {:#x} lapsed while lock {id} was granted", s.session)));
            }
            // ... unless one ran between the grant and here: the grant may
            // have come from the service before a restart, and the lock
            // not be held now. Released and asked again (rare).
            if s.reclaims.load(Ordering::Acquire) != reclaims {
                // Not released: it would stay granted to this live session
                // with no guard to release it. Ending the session frees it.
                if s.send(&LockReq::Release { session: s.session, file, lock: id }, s.endpoint.config().op_timeout).is_err() {
                    s.lose();
                    return Err(Error::LeaseExpired(format!("lock session {:#x}: a lock granted as the lock service restarted could not be released", s.session)));
                }
                tries += 1;
                if tries >= 3 {
                    return Err(Error::Busy { addr: s.addr, message: "the lock service keeps restarting: lock not granted".into() });
                }
                continue;
            }
            lock(&s.held).insert(id, Held { file, cap, exclusive, seal, extents });
            return Ok(id);
        }
    }

    /// Asks the service to renew the lease now (reclaiming the locks if it
    /// restarted): `Ok` once writes may carry a lease that runs.
    pub(crate) fn renew(&self) -> Result<()> {
        let s = &self.shared;
        s.lease.check(s.session)?;
        s.call(LockReq::Renew { session: s.session }, s.endpoint.config().op_timeout)?;
        // A reclaim another thread began meanwhile is over, and made.
        let _over = lock(&s.recovery);
        if s.reclaiming.load(Ordering::Acquire) {
            return Err(Error::LeaseExpired(format!("lock session {:#x}: its locks are being reclaimed", s.session)));
        }
        s.lease.check(s.session)
    }

    /// Releases in the background (atomic mode: the I/O is done; the lock
    /// may be held a little longer, never shorter). Falls back to a
    /// synchronous release if the keeper is gone.
    fn release_soon(&self, file: FileId, id: u64) -> Result<()> {
        let sent = lock(&self.releases).as_ref().is_some_and(|tx| tx.send((file, id)).is_ok());
        if sent { Ok(()) } else { self.shared.release(file, id) }
    }
}

impl Drop for LockSession {
    fn drop(&mut self) {
        // Closing the channel lets the keeper send what is queued, then stop.
        lock(&self.releases).take();
        if let Some(h) = self.keeper.take() {
            let _ = h.join();
        }
        // A clean goodbye frees the locks at once instead of after the TTL.
        let s = &self.shared;
        let _ = s.send(&LockReq::End { session: s.session }, s.endpoint.config().op_timeout);
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
        LockGuard { file, lock: Some(lock), session }
    }

    /// The lock, once: no longer held by this guard.
    fn take(&mut self) -> Option<u64> {
        let l = self.lock.take();
        if let Some(id) = l {
            lock(&self.session.shared.held).remove(&id);
        }
        l
    }

    /// The lease writes under these locks carry (see [`Lease`]); `None`
    /// once the session lapsed.
    pub fn lease(&self) -> Option<Lease> {
        self.session.lease_proof()
    }

    /// The lease a write under these locks carries: `LeaseExpired` once
    /// the session lapsed (its locks may be another's) or holds no lease
    /// (dropped when it was lost). Read before the lapse is looked at: a
    /// lease read then is one the service gave, good until its time.
    pub(crate) fn fence(&self) -> Result<Lease> {
        let s = &self.session.shared;
        match s.proof.get() {
            Some(lease) if !self.session.is_lapsed() => Ok(lease),
            _ => Err(Error::LeaseExpired(format!("lock session {:#x} lapsed: its locks may be held by others now", s.session))),
        }
    }

    /// Renews the session's lease now, reclaiming its locks if the lock
    /// service restarted; `Err(LeaseExpired)` if they are lost.
    pub(crate) fn renew(&self) -> Result<()> {
        self.session.renew()
    }

    /// The lock service's id of this lock.
    pub fn id(&self) -> u64 {
        self.lock.unwrap_or(0)
    }

    pub fn release(mut self) -> Result<()> {
        match self.take() {
            Some(l) => self.session.shared.release(self.file, l),
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
            let _ = self.session.shared.release(self.file, l);
        }
    }
}
