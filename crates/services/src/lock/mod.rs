//! The lock service: one [`LockTable`] per file, sessions with leases, and
//! blocking acquires (paper 004's lock server).
//!
//! An `Acquire` that cannot be granted at once waits on its connection's
//! thread (each connection has one, so no one else waits behind it) until a
//! release or an expiry grants it, or its `wait_ms` runs out (then it is
//! withdrawn and answered `Busy`). A session whose lease runs out (its
//! client died or hung) loses all its locks and waiting requests; a
//! background thread checks leases every quarter of the time to live.

use crate::meta::MetaService;
use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use weft_lock::{Extent, Grant, LockError, LockId, LockTable, Leases, Mode, Owner};
use weft_wire::{ErrorCode, FileId, LockReq, Response, WireExtent};

enum Outcome {
    Granted,
    Expired,
}

struct Waiter {
    owner: Owner,
    since: Instant,
    wake: SyncSender<Outcome>,
}

struct State {
    tables: HashMap<FileId, LockTable>,
    /// Which file each live lock is on.
    lock_file: HashMap<u64, FileId>,
    leases: Leases,
    waiters: HashMap<u64, Waiter>,
    next_id: u64,
    granted: u64,
    wait_us: u64,
}

pub struct LockService {
    state: Mutex<State>,
    started: Instant,
}

/// Counters for `weft status`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LockStats {
    pub held: u64,
    pub waiting: u64,
    pub granted: u64,
    pub wait_us: u64,
}

fn extent(w: WireExtent) -> Result<Extent, weft_lock::ExtentError> {
    match w {
        WireExtent::Range { start, end } => Extent::range(start, end),
        WireExtent::Strided { offset, len, stride, count } => Extent::strided(offset, len, stride, count),
    }
}

fn err(code: ErrorCode, msg: impl Into<String>) -> Response {
    Response::error(code, msg)
}

impl State {
    /// Wakes the waiters `grants` names and counts their wait.
    fn deliver(&mut self, grants: Vec<Grant>) {
        for g in grants {
            self.granted += 1;
            if let Some(w) = self.waiters.remove(&g.lock.0) {
                self.wait_us += w.since.elapsed().as_micros() as u64;
                let _ = w.wake.try_send(Outcome::Granted);
            }
        }
    }

    /// Drops every lock and waiting request of `owner`.
    fn drop_owner(&mut self, owner: Owner) {
        let mut grants = Vec::new();
        for t in self.tables.values_mut() {
            grants.extend(t.release_owner(owner));
        }
        let dead: Vec<u64> = self.waiters.iter().filter(|(_, w)| w.owner == owner).map(|(&id, _)| id).collect();
        for id in dead {
            if let Some(w) = self.waiters.remove(&id) {
                let _ = w.wake.try_send(Outcome::Expired);
            }
        }
        self.tables.retain(|_, t| !t.is_empty());
        self.deliver(grants);
    }
}

impl LockService {
    /// A lock service whose sessions live `ttl_ms` without renewal.
    pub fn start(ttl_ms: u64) -> Arc<Self> {
        let svc = Arc::new(LockService {
            state: Mutex::new(State {
                tables: HashMap::new(),
                lock_file: HashMap::new(),
                leases: Leases::new(ttl_ms.max(1)),
                waiters: HashMap::new(),
                next_id: 1,
                granted: 0,
                wait_us: 0,
            }),
            started: Instant::now(),
        });
        let weak: Weak<LockService> = Arc::downgrade(&svc);
        let tick = Duration::from_millis((ttl_ms / 4).clamp(10, 1000));
        std::thread::spawn(move || {
            while let Some(s) = weak.upgrade() {
                s.expire();
                drop(s);
                std::thread::sleep(tick);
            }
        });
        svc
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Ends the sessions whose leases ran out.
    pub fn expire(&self) {
        let now = self.now_ms();
        let mut st = self.state.lock().expect("lock state");
        for owner in st.leases.expire(now) {
            tracing::info!(target: "weft::lock", session = owner.0, "lease expired: releasing its locks");
            st.drop_owner(owner);
        }
    }

    pub fn stats(&self) -> LockStats {
        let st = self.state.lock().expect("lock state");
        LockStats {
            held: st.tables.values().map(|t| t.held() as u64).sum(),
            waiting: st.tables.values().map(|t| t.waiting() as u64).sum(),
            granted: st.granted,
            wait_us: st.wait_us,
        }
    }

    pub fn handle(&self, req: LockReq, meta: Option<&MetaService>) -> Response {
        let owner = Owner(req.session());
        match req {
            LockReq::Acquire { file, exclusive, wait_ms, extents, .. } => {
                let extents = match extents.into_iter().map(extent).collect::<Result<Vec<_>, _>>() {
                    Ok(x) => x,
                    Err(e) => return err(ErrorCode::BadRequest, format!("bad lock extent: {e}")),
                };
                if let Some(m) = meta
                    && !m.file_exists(file)
                {
                    return err(ErrorCode::NotFound, format!("no file with id {}", file.0));
                }
                self.acquire(owner, file, if exclusive { Mode::Exclusive } else { Mode::Shared }, wait_ms, extents)
            }
            LockReq::Release { file, lock, .. } => {
                let mut st = self.state.lock().expect("lock state");
                let now = self.now_ms();
                st.leases.renew(owner, now);
                let Some(t) = st.tables.get_mut(&file) else {
                    return err(ErrorCode::BadRequest, format!("no lock {lock} on file {}", file.0));
                };
                match t.release(owner, LockId(lock)) {
                    Ok(grants) => {
                        st.lock_file.remove(&lock);
                        st.tables.retain(|_, t| !t.is_empty());
                        st.deliver(grants);
                        Response::Ok
                    }
                    Err(LockError::NotOwner { .. }) => err(ErrorCode::Permission, format!("lock {lock} is not this session's")),
                    Err(e) => err(ErrorCode::BadRequest, e.to_string()),
                }
            }
            LockReq::Renew { .. } => {
                let now = self.now_ms();
                self.state.lock().expect("lock state").leases.renew(owner, now);
                Response::Ok
            }
            LockReq::End { .. } => {
                let mut st = self.state.lock().expect("lock state");
                st.leases.end(owner);
                st.drop_owner(owner);
                Response::Ok
            }
        }
    }

    fn acquire(&self, owner: Owner, file: FileId, mode: Mode, wait_ms: u32, extents: Vec<Extent>) -> Response {
        let rx = {
            let mut st = self.state.lock().expect("lock state");
            let now = self.now_ms();
            st.leases.renew(owner, now);
            let id = st.next_id;
            st.next_id += 1;
            match st.tables.entry(file).or_default().acquire(LockId(id), owner, mode, extents) {
                Ok(true) => {
                    st.granted += 1;
                    st.lock_file.insert(id, file);
                    return Response::Locked { lock: id };
                }
                Ok(false) => {
                    st.lock_file.insert(id, file);
                    let (wake, rx) = sync_channel(1);
                    st.waiters.insert(id, Waiter { owner, since: Instant::now(), wake });
                    (id, rx)
                }
                Err(e) => {
                    st.tables.retain(|_, t| !t.is_empty());
                    return err(ErrorCode::BadRequest, e.to_string());
                }
            }
        };
        let (id, rx) = rx;
        match rx.recv_timeout(Duration::from_millis(wait_ms.into())) {
            Ok(Outcome::Granted) => Response::Locked { lock: id },
            Ok(Outcome::Expired) => err(ErrorCode::Busy, format!("session {} expired while waiting for lock {id}", owner.0)),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                let mut st = self.state.lock().expect("lock state");
                let Some(t) = st.tables.get_mut(&file) else {
                    return err(ErrorCode::Busy, format!("lock {id} was withdrawn"));
                };
                if t.is_granted(LockId(id)) {
                    // Granted in the instant the wait ended.
                    return Response::Locked { lock: id };
                }
                st.waiters.remove(&id);
                st.lock_file.remove(&id);
                let grants = st.tables.get_mut(&file).map(|t| t.release(owner, LockId(id)).unwrap_or_default()).unwrap_or_default();
                st.tables.retain(|_, t| !t.is_empty());
                st.deliver(grants);
                err(ErrorCode::Busy, format!("lock not granted within {wait_ms} ms"))
            }
        }
    }
}
