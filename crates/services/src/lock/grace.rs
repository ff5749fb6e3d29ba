//! The grace after a restart of the lock service: for one lease time no
//! lock is granted (clients of the service before may still write under
//! leases it gave), acquires wait for its end (parked), and the locks held
//! before are taken back (`Reclaim`) by the sessions that held them.

use super::{err, expired, lock, Answer, Denied, LockService};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Instant;
use weft_lock::{Extent, LockError, LockId, Mode, Owner};
use weft_wire::{ErrorCode, FileId, Response};

/// An acquire made during the grace after a restart, made when it ends
/// (charged to its session's quota meanwhile, as a waiting lock is).
pub(super) struct Parked {
    pub(super) owner: Owner,
    pub(super) user: Option<u32>,
    pub(super) file: FileId,
    pub(super) mode: Mode,
    pub(super) wait_ms: u32,
    pub(super) since: Instant,
    pub(super) extents: Vec<Extent>,
    pub(super) answer: Answer,
}

/// Acquires held through a grace at most, and their extents (beyond,
/// `Busy`): each user's share is bounded by its lock quota besides.
const MAX_PARKED: usize = 65_536;
const MAX_PARKED_EXTENTS: usize = 1 << 20;

impl LockService {
    /// Holds an acquire made during the grace after a restart (`left` ms
    /// of it to go) until the grace ends; one that would not wait that
    /// long (a try-lock) is answered `Busy` at once.
    pub(super) fn park(&self, mut p: Parked, left: u64, later: &dyn Fn() -> Answer) -> Option<Response> {
        if u64::from(p.wait_ms) < left {
            // The session is renewed all the same (as any request of it).
            return Some(self.touch(p.owner, p.user).unwrap_or_else(|| err(ErrorCode::Busy, format!("the lock service restarted moments ago and grants no lock for another {left} ms (locks held before may still be in use)"))));
        }
        // Charged as a waiting lock is (the session's quota), and renewed.
        match self.renew(p.owner, Some(p.file), p.user, false) {
            Ok(()) => {}
            Err(Denied::Lapsed(files)) => {
                self.drop_owner(p.owner, files);
                return Some(expired(p.owner));
            }
            Err(Denied::Refused(r)) => return Some(self.refusal(r)),
        }
        let mut parked = lock(&self.parked);
        let Some(list) = parked.as_mut() else {
            // The grace ended meanwhile: made as any acquire.
            drop(parked);
            lock(&self.sessions).quota.release(p.owner, 1);
            return self.acquire(p.owner, p.user, p.file, p.mode, p.wait_ms, p.extents, later);
        };
        let extents: usize = list.iter().map(|q| q.extents.len()).sum();
        if list.len() >= MAX_PARKED || extents + p.extents.len() > MAX_PARKED_EXTENTS {
            drop(parked);
            lock(&self.sessions).quota.release(p.owner, 1);
            return Some(err(ErrorCode::Busy, "the lock service restarted moments ago and grants no lock for one lease time; too many acquires wait for that"));
        }
        p.answer = later();
        list.push(p);
        None
    }

    /// Takes back `owner`'s lock `id` on `file`, held from the service
    /// before a restart: only during the grace after it (no other lock is
    /// granted then, so only reclaimed locks can conflict), and only if no
    /// lock reclaimed before conflicts (two clients cannot both have held
    /// the bytes, unless one's lease had lapsed: the first reclaim wins).
    /// The session must be live (started again). The grace is held open
    /// (the `parked` mutex) while the lock is made, so it cannot end
    /// halfway and let a parked acquire in first.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reclaim(&self, owner: Owner, user: Option<u32>, file: FileId, mode: Mode, id: LockId, seal: [u8; 32], extents: Vec<Extent>) -> Response {
        let too_late = |why: &str| err(ErrorCode::LeaseExpired, format!("lock {} of session {:#x} cannot be reclaimed: {why}", id.0, owner.0));
        if blake3::Hash::from(seal) != blake3::Hash::from(self.seal(owner, file, id.0, mode, &extents)) {
            return err(ErrorCode::Permission, format!("lock {} of session {:#x} cannot be reclaimed: no lock service of this cluster granted it so", id.0, owner.0));
        }
        self.end_grace();
        let parked = lock(&self.parked);
        if parked.is_none() {
            return too_late("the lock service is not in the grace after a restart (it did not restart, or restarted more than one lease time ago)");
        }
        let f = self.file(file);
        let mut fl = lock(&f);
        match self.renew(owner, Some(file), user, false) {
            Ok(()) => {}
            Err(Denied::Lapsed(lapsed)) => {
                drop(fl);
                drop(f);
                drop(parked);
                self.drop_owner(owner, lapsed);
                return expired(owner);
            }
            Err(Denied::Refused(r)) => return self.refusal(r),
        }
        // Asked again (its answer was lost, or the client's reclaim was
        // cut short): the seal proved it is this session's, and it is
        // already held.
        if fl.table.owner_of(id) == Some(owner) && fl.table.is_granted(id) {
            lock(&self.sessions).quota.release(owner, 1);
            return Response::Locked { lock: id.0, lease: self.lease(owner), seal };
        }
        let r = match fl.table.acquire(id, owner, mode, extents) {
            Ok(true) => {
                self.granted.fetch_add(1, Ordering::Relaxed);
                return Response::Locked { lock: id.0, lease: self.lease(owner), seal };
            }
            Ok(false) => {
                let grants = fl.table.release(owner, id).unwrap_or_default();
                self.deliver(&mut fl, grants);
                too_late("a lock reclaimed by another session holds some of its bytes")
            }
            Err(e @ (LockError::Full { .. } | LockError::TooCostly { .. })) => err(ErrorCode::Busy, e.to_string()),
            Err(LockError::DuplicateId(_)) => too_late("its id is in use"),
            Err(e) => err(ErrorCode::BadRequest, e.to_string()),
        };
        lock(&self.sessions).quota.release(owner, 1);
        drop(fl);
        drop(f);
        drop(parked);
        self.tidy(file);
        r
    }

    /// Once the grace after a restart is over, makes the acquires that
    /// waited for it (each granted, or waiting for what remains of its
    /// wait, as any other). One that fails inside is answered with the error.
    pub(super) fn end_grace(&self) {
        if self.now_ms() < self.grace_ms {
            return;
        }
        let Some(parked) = lock(&self.parked).take() else { return };
        for p in parked {
            let slot = Mutex::new(Some(p.answer));
            let later = || -> Answer { lock(&slot).take().unwrap_or_else(|| Box::new(|_| {})) };
            // Its charge moves to the acquire (which charges again).
            lock(&self.sessions).quota.release(p.owner, 1);
            let wait_ms = u32::try_from(u128::from(p.wait_ms).saturating_sub(p.since.elapsed().as_millis())).unwrap_or(0);
            let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.acquire(p.owner, p.user, p.file, p.mode, wait_ms, p.extents, &later)));
            let r = match made {
                Ok(Some(r)) => r,
                Ok(None) => continue,
                Err(_) => err(ErrorCode::Internal, "the lock request failed inside the server (a bug; see its log)"),
            };
            if let Some(answer) = lock(&slot).take() {
                answer(r);
            }
        }
    }

}
