//! The lock service: one [`LockTable`] per file, each behind its own mutex,
//! sessions with leases, and acquires that wait without holding a thread
//! (paper 004's lock server).
//!
//! An `Acquire` that cannot be granted at once keeps its [`Answer`] in its
//! file's waiter list and the worker moves on; a release or an expiry that
//! grants it calls the answer, and a timer thread answers `Busy` when its
//! `wait_ms` runs out (the request is then withdrawn). A session whose lease
//! runs out (its client died, hung, or could not renew in time) loses all its
//! locks and waiting requests, and every later request of that session is
//! answered `LeaseExpired`, so the client learns that it lost its locks
//! instead of writing on as if it held them.
//!
//! Locking order: the grace's parked list (a reclaim holds it while it
//! makes its lock), the file map, then one file's table, then the session
//! table (innermost: taken with at most one file's table held, never held
//! while taking anything else). The timer thread therefore waits
//! behind at most one request on one file, and each request's work is
//! bounded by the table's caps and the closed-form overlap checks.

mod grace;
mod quota;
mod timer;

pub use quota::LockLimits;
use grace::Parked;
use quota::{LockQuota, Refusal};
pub use timer::unix_ms;
use timer::timer_loop;
use crate::meta::MetaService;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};
use weft_lock::{Extent, Grant, LeaseState, LockError, LockId, LockTable, Leases, Mode, Owner};
use weft_wire::{ErrorCode, FileId, LockReq, Response, WireExtent};

/// Sends a response to a request that was answered later.
pub type Answer = Box<dyn FnOnce(Response) + Send>;

/// How many expired session ids are remembered (to answer `LeaseExpired`
/// with "expired"); older ones are forgotten, and answered as unknown
/// sessions are (`LeaseExpired` too: only `Start` starts one).
const REMEMBERED_EXPIRIES: usize = 65_536;

struct Waiter {
    owner: Owner,
    since: Instant,
    answer: Answer,
    /// The grant's seal (see [`LockService::seal`]).
    seal: [u8; 32],
}

#[derive(Default)]
struct FileLocks {
    table: LockTable,
    waiters: HashMap<u64, Waiter>,
}

struct Sessions {
    leases: Leases,
    /// The files each live session has locks or requests on.
    files: HashMap<Owner, HashSet<FileId>>,
    expired: HashSet<Owner>,
    expired_order: VecDeque<Owner>,
    /// Who holds how many sessions and locks (see [`quota`]).
    quota: LockQuota,
}

impl Sessions {
    fn forget_later(&mut self, owner: Owner) {
        if self.expired.insert(owner) {
            self.expired_order.push_back(owner);
        }
        while self.expired_order.len() > REMEMBERED_EXPIRIES {
            if let Some(o) = self.expired_order.pop_front() {
                self.expired.remove(&o);
            }
        }
    }
}

/// Longest wait an acquire may ask for: 10 minutes (each waiting request
/// keeps a deadline entry until then).
const MAX_WAIT_MS: u32 = 600_000;

/// Lock-wait deadlines, earliest first: (deadline, file, lock id).
type Deadlines = BinaryHeap<Reverse<(Instant, FileId, u64)>>;

pub struct LockService {
    files: Mutex<HashMap<FileId, Arc<Mutex<FileLocks>>>>,
    sessions: Mutex<Sessions>,
    deadlines: Mutex<Deadlines>,
    /// Wakes the timer thread when an earlier deadline arrives.
    timer: Condvar,
    next_id: AtomicU64,
    /// Requests waiting now, over all files (to size the deadline heap).
    waiting: AtomicUsize,
    granted: AtomicU64,
    wait_us: AtomicU64,
    /// Requests refused by a quota or a full table (metrics).
    refused: AtomicU64,
    started: Instant,
    /// Seeds every table's tree shapes; unknown to clients.
    seed: u64,
    /// Seals the leases given with grants and renewals (the data servers
    /// check them: fencing).
    key: weft_wire::CapKey,
    /// After a restart, no lock is granted for one time to live (in the
    /// service's ms): clients of the service before may still write under
    /// leases it gave. Acquires wait here until then (`None` once over).
    grace_ms: u64,
    parked: Mutex<Option<Vec<Parked>>>,
}

/// Counters for `weft status`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LockStats {
    pub held: u64,
    pub waiting: u64,
    pub granted: u64,
    pub wait_us: u64,
}

/// A mutex whose holder panicked still guards consistent data here (every
/// update is completed before anything that can panic), so go on with it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn extent(w: WireExtent) -> Result<Extent, weft_lock::ExtentError> {
    match w {
        WireExtent::Range { start, end } => Extent::range(start, end),
        WireExtent::Strided { offset, len, stride, count } => Extent::strided(offset, len, stride, count),
    }
}

/// An acquire's or reclaim's mode and extents, checked, for a file that
/// exists; else the error to answer.
fn checked(meta: Option<&MetaService>, file: FileId, exclusive: bool, extents: Vec<WireExtent>) -> Result<(Mode, Vec<Extent>), (ErrorCode, String)> {
    let extents = extents.into_iter().map(extent).collect::<Result<Vec<_>, _>>().map_err(|e| (ErrorCode::BadRequest, format!("bad lock extent: {e}")))?;
    if let Some(m) = meta
        && !m.file_exists(file)
    {
        return Err((ErrorCode::NotFound, format!("no file with id {}", file.0)));
    }
    Ok((if exclusive { Mode::Exclusive } else { Mode::Shared }, extents))
}

fn err(code: ErrorCode, msg: impl Into<String>) -> Response {
    Response::error(code, msg)
}

/// Why a session's request is not served.
enum Denied {
    /// The session expired; its locks on these files are to be dropped.
    Lapsed(HashSet<FileId>),
    /// Another user's session, or a limit reached.
    Refused(Refusal),
}


fn expired(owner: Owner) -> Response {
    err(ErrorCode::LeaseExpired, format!("lock session {} expired: its locks were released", owner.0))
}

impl LockService {
    fn refusal(&self, r: Refusal) -> Response {
        match r {
            Refusal::NotYours(why) => err(ErrorCode::Permission, why),
            Refusal::Full(why) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                err(ErrorCode::Busy, why)
            }
        }
    }

    /// A lock service whose sessions live `ttl_ms` without renewal, held
    /// to `limits`, sealing leases with `key`. `restarted`: this server
    /// ran a lock service before, whose clients' leases may still be good
    /// for up to `ttl_ms`: no lock is granted until that time has passed.
    pub fn start(ttl_ms: u64, limits: LockLimits, key: weft_wire::CapKey, restarted: bool) -> Arc<Self> {
        let svc = Arc::new(LockService {
            files: Mutex::new(HashMap::new()),
            sessions: Mutex::new(Sessions {
                leases: Leases::new(ttl_ms.max(1)),
                files: HashMap::new(),
                expired: HashSet::new(),
                expired_order: VecDeque::new(),
                quota: LockQuota::new(limits),
            }),
            deadlines: Mutex::new(BinaryHeap::new()),
            timer: Condvar::new(),
            // Ids start at a random point, so an id a client held from
            // the service before a restart (taken back by `Reclaim`) is
            // unlikely to be one this service hands out.
            next_id: AtomicU64::new(rand::random::<u64>() >> 2 | 1),
            waiting: AtomicUsize::new(0),
            granted: AtomicU64::new(0),
            wait_us: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            started: Instant::now(),
            seed: rand::random(),
            key,
            grace_ms: if restarted { ttl_ms.max(1) } else { 0 },
            parked: Mutex::new(restarted.then(Vec::new)),
        });
        let weak: Weak<LockService> = Arc::downgrade(&svc);
        let tick = Duration::from_millis((ttl_ms / 4).clamp(10, 1000));
        std::thread::Builder::new()
            .name("weft-lock-timer".into())
            .spawn(move || timer_loop(&weak, tick))
            .expect("spawn the lock timer thread");
        svc
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The seal of lock `id` granted to `owner` (`weft_wire::lock_seal`):
    /// what a reclaim of it after a restart must show, so that nobody
    /// takes back a lock it was not granted.
    fn seal(&self, owner: Owner, file: FileId, id: u64, mode: Mode, extents: &[Extent]) -> [u8; 32] {
        let wire: Vec<WireExtent> = extents
            .iter()
            .map(|e| match *e {
                Extent::Range { start, end } => WireExtent::Range { start, end },
                Extent::Strided { offset, len, stride, count } => WireExtent::Strided { offset, len, stride, count },
            })
            .collect();
        weft_wire::lock_seal(&self.key, owner.0, file, id, mode == Mode::Exclusive, &wire)
    }

    /// `owner`'s lease as writes under its locks carry it: until a quarter
    /// of the time to live before its locks can go to others, by the wall
    /// clock, so a data server whose clock is at most that much behind
    /// refuses the session's writes before its bytes are granted again,
    /// and a write checked just before still lands first. An ended or
    /// unknown session's runs out now. Takes the sessions mutex
    /// (innermost).
    fn lease(&self, owner: Owner) -> weft_wire::Lease {
        let (expires, ttl) = {
            let s = lock(&self.sessions);
            (s.leases.expires_at(owner), s.leases.ttl_ms())
        };
        let wall = unix_ms();
        let left = expires.map_or(0, |e| e.saturating_sub(self.now_ms()));
        weft_wire::Lease::issue(&self.key, owner.0, wall.saturating_add(left).saturating_sub(ttl / 4))
    }

    /// Renews `owner`'s lease for `user`; the answer to send instead if
    /// the session expired (its locks dropped) or is another user's.
    fn touch(&self, owner: Owner, user: Option<u32>) -> Option<Response> {
        self.touch_or_start(owner, user, false)
    }

    /// [`LockService::touch`], or with `start` the start of a session
    /// this service does not know (else answered `LeaseExpired`).
    fn touch_or_start(&self, owner: Owner, user: Option<u32>, start: bool) -> Option<Response> {
        match self.renew(owner, None, user, start) {
            Ok(()) => None,
            Err(Denied::Lapsed(files)) => {
                self.drop_owner(owner, files);
                Some(expired(owner))
            }
            Err(Denied::Refused(r)) => Some(self.refusal(r)),
        }
    }

    /// The session-table half of [`LockService::touch`], and of an
    /// acquire (`acquiring`: one more lock on that file for the session,
    /// within the quota, and the file noted as one it uses): renews, or expires a lapsed session and returns the
    /// files whose locks the caller must drop (without holding any file's
    /// table: `drop_owner` takes them). The session's claim, its lease and
    /// its count change together, so no charge lands on an ended session.
    /// Takes only the sessions mutex, so it may be called while a file's
    /// table is held. A session this service does not know is started
    /// only by `start` (a `Start`); any other request of it is answered as
    /// lapsed: it is a session of the service before a restart (its locks
    /// are gone), or one forgotten long after it expired.
    fn renew(&self, owner: Owner, acquiring: Option<FileId>, user: Option<u32>, start: bool) -> Result<(), Denied> {
        let mut s = lock(&self.sessions);
        if s.expired.contains(&owner) {
            return Err(Denied::Lapsed(HashSet::new()));
        }
        let now = self.now_ms();
        if !start && s.leases.state(owner, now) == LeaseState::Unknown {
            return Err(Denied::Lapsed(HashSet::new()));
        }
        if s.leases.state(owner, now) == LeaseState::Lapsed {
            // Its time ran out before the timer noticed: expire it now,
            // never revive it (its locks may be promised to others).
            s.leases.end(owner);
            s.forget_later(owner);
            s.quota.end(owner);
            return Err(Denied::Lapsed(s.files.remove(&owner).unwrap_or_default()));
        }
        s.quota.claim(owner, user).map_err(Denied::Refused)?;
        if acquiring.is_some() {
            s.quota.charge(owner).map_err(Denied::Refused)?;
        }
        s.leases.renew(owner, now);
        if let Some(f) = acquiring {
            s.files.entry(owner).or_default().insert(f);
        }
        Ok(())
    }

    fn file(&self, file: FileId) -> Arc<Mutex<FileLocks>> {
        let seed = self.seed ^ file.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        lock(&self.files).entry(file).or_insert_with(|| Arc::new(Mutex::new(FileLocks { table: LockTable::with_seed(seed), waiters: HashMap::new() }))).clone()
    }

    /// Forgets `file`'s table if it is empty and nobody else holds it.
    fn tidy(&self, file: FileId) {
        let mut files = lock(&self.files);
        // Clones are made only under `files`, so a count of 1 means no other
        // thread can be about to use this table.
        if let Some(f) = files.get(&file)
            && Arc::strong_count(f) == 1
            && lock(f).table.is_empty()
        {
            files.remove(&file);
        }
    }

    /// Removes waiter `id` of a file's table (and counts it gone).
    fn take_waiter(&self, fl: &mut FileLocks, id: u64) -> Option<Waiter> {
        let w = fl.waiters.remove(&id)?;
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        Some(w)
    }

    /// Is lock `id` of `file` still waiting? (For pruning the deadline heap.)
    fn is_waiting(&self, file: FileId, id: u64) -> bool {
        let f = lock(&self.files).get(&file).cloned();
        f.is_some_and(|f| lock(&f).waiters.contains_key(&id))
    }

    /// Answers the waiters `grants` names.
    fn deliver(&self, fl: &mut FileLocks, grants: Vec<Grant>) {
        for g in grants {
            self.granted.fetch_add(1, Ordering::Relaxed);
            if let Some(w) = self.take_waiter(fl, g.lock.0) {
                self.wait_us.fetch_add(w.since.elapsed().as_micros() as u64, Ordering::Relaxed);
                (w.answer)(Response::Locked { lock: g.lock.0, lease: self.lease(w.owner), seal: w.seal });
            }
        }
    }

    /// Ends the sessions whose leases ran out: their locks go, their
    /// waiting requests are answered `LeaseExpired`.
    pub fn expire(&self) {
        let dead: Vec<(Owner, HashSet<FileId>)> = {
            let mut s = lock(&self.sessions);
            let now = self.now_ms();
            let owners = s.leases.expire(now);
            owners
                .into_iter()
                .map(|o| {
                    s.forget_later(o);
                    s.quota.end(o);
                    (o, s.files.remove(&o).unwrap_or_default())
                })
                .collect()
        };
        for (owner, files) in dead {
            tracing::info!(target: "weft::lock", session = owner.0, "lease expired: releasing its locks");
            self.drop_owner(owner, files);
        }
    }

    /// Drops an ended or expired session's locks and waiting requests on
    /// `files` (its quota was given back when it ended, with its lease).
    fn drop_owner(&self, owner: Owner, files: HashSet<FileId>) {
        for file in files {
            let f = self.file(file);
            {
                let mut fl = lock(&f);
                let mine: Vec<u64> = fl.waiters.iter().filter(|(_, w)| w.owner == owner).map(|(&id, _)| id).collect();
                for id in mine {
                    if let Some(w) = self.take_waiter(&mut fl, id) {
                        (w.answer)(expired(owner));
                    }
                }
                let grants = fl.table.release_owner(owner);
                self.deliver(&mut fl, grants);
            }
            drop(f);
            self.tidy(file);
        }
    }

    /// Answers `Busy` to waiters whose wait ran out; returns the next deadline.
    fn time_out_waiters(&self, now: Instant) -> Option<Instant> {
        loop {
            let (file, id) = {
                let mut d = lock(&self.deadlines);
                match d.peek() {
                    Some(Reverse((at, _, _))) if *at <= now => {
                        let Reverse((_, file, id)) = d.pop().expect("peeked");
                        (file, id)
                    }
                    Some(Reverse((at, _, _))) => return Some(*at),
                    None => return None,
                }
            };
            let f = self.file(file);
            {
                let mut fl = lock(&f);
                if let Some(w) = self.take_waiter(&mut fl, id) {
                    let grants = fl.table.release(w.owner, LockId(id)).unwrap_or_default();
                    lock(&self.sessions).quota.release(w.owner, 1);
                    let waited = w.since.elapsed();
                    (w.answer)(err(ErrorCode::Busy, format!("lock not granted within {} ms", waited.as_millis())));
                    self.deliver(&mut fl, grants);
                }
            }
            drop(f);
            self.tidy(file);
        }
    }

    /// Requests refused by a quota or a full table since start (a
    /// counter: no walk of the tables).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub fn stats(&self) -> LockStats {
        let files: Vec<Arc<Mutex<FileLocks>>> = lock(&self.files).values().cloned().collect();
        let (mut held, mut waiting) = (0, 0);
        for f in files {
            let fl = lock(&f);
            held += fl.table.held() as u64;
            waiting += fl.table.waiting() as u64;
        }
        LockStats { held, waiting, granted: self.granted.load(Ordering::Relaxed), wait_us: self.wait_us.load(Ordering::Relaxed) }
    }

    /// Serves one request of `user` (the proven user it counts for; `None`
    /// for root and peers that proved the servers' secret). `None`: the
    /// answer comes later through the [`Answer`] `later` makes (an
    /// acquire that waits).
    pub fn handle(&self, req: LockReq, meta: Option<&MetaService>, later: &dyn Fn() -> Answer, user: Option<u32>) -> Option<Response> {
        let owner = Owner(req.session());
        Some(match req {
            LockReq::Acquire { file, exclusive, wait_ms, extents, .. } => {
                let (mode, extents) = match checked(meta, file, exclusive, extents) {
                    Ok(x) => x,
                    Err((code, why)) => return Some(err(code, why)),
                };
                return self.acquire(owner, user, file, mode, wait_ms, extents, later);
            }
            LockReq::Reclaim { file, exclusive, lock: id, seal, extents, .. } => match checked(meta, file, exclusive, extents) {
                Ok((mode, extents)) => self.reclaim(owner, user, file, mode, LockId(id), seal, extents),
                Err((code, why)) => err(code, why),
            },
            LockReq::Release { file, lock: id, .. } => {
                if let Some(r) = self.touch(owner, user) {
                    return Some(r);
                }
                let f = self.file(file);
                let r = {
                    let mut fl = lock(&f);
                    match fl.table.release(owner, LockId(id)) {
                        Ok(grants) => {
                            lock(&self.sessions).quota.release(owner, 1);
                            // Releasing a request that still waits withdraws it.
                            if let Some(w) = self.take_waiter(&mut fl, id) {
                                (w.answer)(err(ErrorCode::Busy, format!("lock {id} withdrawn by its session")));
                            }
                            self.deliver(&mut fl, grants);
                            Response::Ok
                        }
                        Err(LockError::NotOwner { .. }) => err(ErrorCode::Permission, format!("lock {id} is not this session's")),
                        Err(e) => err(ErrorCode::BadRequest, format!("{e} on file {}", file.0)),
                    }
                };
                drop(f);
                self.tidy(file);
                r
            }
            LockReq::Renew { .. } => self.touch(owner, user).unwrap_or_else(|| Response::Leased(self.lease(owner))),
            LockReq::Start { .. } => self.touch_or_start(owner, user, true).unwrap_or_else(|| Response::Leased(self.lease(owner))),
            LockReq::End { .. } => {
                let files = {
                    let mut s = lock(&self.sessions);
                    if let Err(r) = s.quota.claim(owner, user) {
                        return Some(self.refusal(r));
                    }
                    // Ended for good: a later request of it is answered
                    // `LeaseExpired` (the client starts a new session).
                    s.leases.end(owner);
                    s.forget_later(owner);
                    s.quota.end(owner);
                    s.files.remove(&owner).unwrap_or_default()
                };
                self.drop_owner(owner, files);
                Response::Ok
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn acquire(&self, owner: Owner, user: Option<u32>, file: FileId, mode: Mode, wait_ms: u32, extents: Vec<Extent>, later: &dyn Fn() -> Answer) -> Option<Response> {
        if self.grace_ms > 0 {
            // Parked acquires are made first, in their order.
            self.end_grace();
            let left = self.grace_ms.saturating_sub(self.now_ms());
            if left > 0 {
                return self.park(Parked { owner, user, file, mode, wait_ms, since: Instant::now(), extents, answer: Box::new(|_| {}) }, left, later);
            }
        }
        let f = self.file(file);
        let mut fl = lock(&f);
        // An id a reclaimed lock kept may be in this table: take the next.
        let mut id = self.next_id.fetch_add(1, Ordering::Relaxed);
        while fl.table.contains(LockId(id)) {
            id = self.next_id.fetch_add(1, Ordering::Relaxed);
        }
        // The lease is renewed while this file's table is held, so an `End`
        // (or an expiry) of the session either sees this file among the
        // session's and releases the lock below after it is taken, or comes
        // first and this request is refused: no lock is left without a lease.
        match self.renew(owner, Some(file), user, false) {
            Ok(()) => {}
            Err(Denied::Lapsed(lapsed)) => {
                drop(fl);
                drop(f);
                self.drop_owner(owner, lapsed);
                return Some(expired(owner));
            }
            Err(Denied::Refused(r)) => return Some(self.refusal(r)),
        }
        let wait_ms = wait_ms.min(MAX_WAIT_MS);
        let seal = self.seal(owner, file, id, mode, &extents);
        let acquired = fl.table.acquire(LockId(id), owner, mode, extents);
        if acquired.is_err() {
            lock(&self.sessions).quota.release(owner, 1);
        }
        match acquired {
            Ok(true) => {
                self.granted.fetch_add(1, Ordering::Relaxed);
                Some(Response::Locked { lock: id, lease: self.lease(owner), seal })
            }
            Ok(false) => {
                let now = Instant::now();
                fl.waiters.insert(id, Waiter { owner, since: now, answer: later(), seal });
                self.waiting.fetch_add(1, Ordering::Relaxed);
                drop(fl);
                let at = now + Duration::from_millis(wait_ms.into());
                let mut d = lock(&self.deadlines);
                let earliest = d.peek().is_none_or(|Reverse((first, _, _))| at < *first);
                // Entries of requests granted or withdrawn stay until their
                // time; when they are most of the heap, it is rebuilt.
                if d.len() >= 4096 && d.len() > 2 * self.waiting.load(Ordering::Relaxed) {
                    let live: Vec<_> = std::mem::take(&mut *d).into_iter().filter(|Reverse((_, fid, lid))| self.is_waiting(*fid, *lid)).collect();
                    *d = live.into();
                }
                d.push(Reverse((at, file, id)));
                if earliest {
                    self.timer.notify_one();
                }
                None
            }
            Err(e @ (LockError::Full { .. } | LockError::TooCostly { .. })) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Some(err(ErrorCode::Busy, e.to_string()))
            }
            Err(e) => {
                drop(fl);
                drop(f);
                self.tidy(file);
                Some(err(ErrorCode::BadRequest, e.to_string()))
            }
        }
    }
}
