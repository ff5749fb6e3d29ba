//! What one user may hold of the lock service (issue 25): lock sessions,
//! and locks held or waiting, per proven user and in all. Before, one
//! user with read access to one file could fill the tables (a million
//! locks: 366 MB) and every other user's atomic-mode MPI-IO waited.
//!
//! Pure accounting, kept under the service's session mutex. Users are
//! those MUNGE proved (root, whose mount serves its node's users, and
//! peers that proved the servers' secret are not counted per user, only
//! in the total). A session belongs to the first proven user that uses
//! it: another user's request on it is refused.

use std::collections::HashMap;
use weft_lock::Owner;

/// The limits (`WEFT_MAX_LOCKS`, `WEFT_MAX_LOCKS_PER_USER`).
#[derive(Debug, Clone, Copy)]
pub struct LockLimits {
    /// Locks held or waiting, all sessions together: bounds the tables'
    /// memory (about 370 bytes a lock).
    pub max_locks: u64,
    pub max_locks_per_user: u64,
    pub max_sessions_per_user: usize,
}

impl Default for LockLimits {
    fn default() -> Self {
        LockLimits { max_locks: 262_144, max_locks_per_user: 65_536, max_sessions_per_user: 4_096 }
    }
}


#[derive(Debug, Default)]
struct UserShare {
    sessions: usize,
    locks: u64,
}

/// Why a request is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Another user's session.
    NotYours(String),
    /// A limit is reached; try again when locks are released.
    Full(String),
}

#[derive(Debug)]
pub struct LockQuota {
    limits: LockLimits,
    /// The user each counted session belongs to.
    owners: HashMap<Owner, u32>,
    /// Locks held or waiting per session.
    locks: HashMap<Owner, u64>,
    users: HashMap<u32, UserShare>,
    total: u64,
}

impl LockQuota {
    pub fn new(limits: LockLimits) -> Self {
        LockQuota { limits, owners: HashMap::new(), locks: HashMap::new(), users: HashMap::new(), total: 0 }
    }

    /// A request of session `owner` from `user` (`None`: not counted per
    /// user): the session becomes that user's on first use.
    pub fn claim(&mut self, owner: Owner, user: Option<u32>) -> Result<(), Refusal> {
        let Some(uid) = user else { return Ok(()) };
        match self.owners.get(&owner) {
            Some(&o) if o == uid => Ok(()),
            Some(&o) => Err(Refusal::NotYours(format!("lock session {} belongs to uid {o}, not uid {uid}", owner.0))),
            None => {
                let share = self.users.entry(uid).or_default();
                if share.sessions >= self.limits.max_sessions_per_user {
                    return Err(Refusal::Full(format!("uid {uid} has {} lock sessions on this server, the most one user may", share.sessions)));
                }
                share.sessions += 1;
                // Locks it took before (as root) count from now on, so
                // their release takes nothing from the user's others.
                share.locks += self.locks.get(&owner).copied().unwrap_or(0);
                self.owners.insert(owner, uid);
                Ok(())
            }
        }
    }

    /// One more lock (held or waiting) for `owner`, if the limits allow.
    pub fn charge(&mut self, owner: Owner) -> Result<(), Refusal> {
        if self.total >= self.limits.max_locks {
            // (Root's mount and secret-mode clients count in the total only.)
            return Err(Refusal::Full(format!("this server holds {} locks, its most (WEFT_MAX_LOCKS); try again when some are released", self.total)));
        }
        if let Some(uid) = self.owners.get(&owner) {
            let share = self.users.entry(*uid).or_default();
            if share.locks >= self.limits.max_locks_per_user {
                return Err(Refusal::Full(format!("uid {uid} holds or waits for {} locks on this server, the most one user may (WEFT_MAX_LOCKS_PER_USER)", share.locks)));
            }
            share.locks += 1;
        }
        *self.locks.entry(owner).or_default() += 1;
        self.total += 1;
        Ok(())
    }

    /// `n` of `owner`'s locks went (released, withdrawn, timed out).
    pub fn release(&mut self, owner: Owner, n: u64) {
        let Some(held) = self.locks.get_mut(&owner) else { return };
        let n = n.min(*held);
        *held -= n;
        if *held == 0 {
            self.locks.remove(&owner);
        }
        self.total = self.total.saturating_sub(n);
        if let Some(share) = self.owners.get(&owner).and_then(|uid| self.users.get_mut(uid)) {
            share.locks = share.locks.saturating_sub(n);
        }
    }

    /// Session `owner` ended (or expired): its locks and its place go.
    pub fn end(&mut self, owner: Owner) {
        let held = self.locks.get(&owner).copied().unwrap_or(0);
        self.release(owner, held);
        if let Some(uid) = self.owners.remove(&owner)
            && let Some(share) = self.users.get_mut(&uid)
        {
            share.sessions = share.sessions.saturating_sub(1);
            if share.sessions == 0 && share.locks == 0 {
                self.users.remove(&uid);
            }
        }
    }

    /// Locks held or waiting, in all.
    #[cfg(test)]
    pub fn total(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota() -> LockQuota {
        LockQuota::new(LockLimits { max_locks: 10, max_locks_per_user: 4, max_sessions_per_user: 2 })
    }

    #[test]
    fn one_user_fills_its_share_and_another_is_still_served() {
        let mut q = quota();
        let (a, b) = (Owner(1), Owner(2));
        q.claim(a, Some(1000)).unwrap();
        for _ in 0..4 {
            q.charge(a).unwrap();
        }
        assert!(matches!(q.charge(a), Err(Refusal::Full(why)) if why.contains("uid 1000 holds or waits for 4")));
        q.claim(b, Some(1001)).unwrap();
        q.charge(b).unwrap();
        // A released lock gives its place back.
        q.release(a, 1);
        q.charge(a).unwrap();
        assert_eq!(q.total(), 5);
    }

    #[test]
    fn the_total_bounds_everyone_and_ended_sessions_give_everything_back() {
        let mut q = quota();
        for s in 0..10 {
            q.claim(Owner(s), None).unwrap();
            q.charge(Owner(s)).unwrap();
        }
        assert!(matches!(q.charge(Owner(99)), Err(Refusal::Full(why)) if why.contains("WEFT_MAX_LOCKS")));
        for s in 0..10 {
            q.end(Owner(s));
        }
        assert_eq!(q.total(), 0);
        q.claim(Owner(7), Some(5)).unwrap();
        q.charge(Owner(7)).unwrap();
        q.end(Owner(7));
        assert!(q.users.is_empty() && q.owners.is_empty() && q.locks.is_empty(), "nothing left behind");
    }

    #[test]
    fn a_session_is_its_first_users_and_sessions_are_capped() {
        let mut q = quota();
        q.claim(Owner(1), Some(1000)).unwrap();
        assert!(matches!(q.claim(Owner(1), Some(1001)), Err(Refusal::NotYours(_))), "another user's session");
        q.claim(Owner(1), None).unwrap();
        q.claim(Owner(2), Some(1000)).unwrap();
        assert!(matches!(q.claim(Owner(3), Some(1000)), Err(Refusal::Full(why)) if why.contains("lock sessions")));
        q.end(Owner(2));
        q.claim(Owner(3), Some(1000)).unwrap();
        // Locks a session took as root count for the user that claims it.
        q.charge(Owner(4)).unwrap();
        q.end(Owner(1));
        q.claim(Owner(4), Some(1000)).unwrap();
        q.release(Owner(4), 1);
        assert_eq!(q.users[&1000].locks, 0);
        // Releasing more than held (a bug elsewhere) cannot underflow.
        q.release(Owner(3), 5);
        assert_eq!(q.total(), 0);
    }
}
