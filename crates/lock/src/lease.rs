//! Leases: every lock belongs to a client session that must renew itself
//! within a time to live; a session that does not (its client died or hung)
//! expires, and the caller releases its locks. Time is passed in, in
//! milliseconds, by the caller (pure floor: no clock).

use crate::table::Owner;
use std::collections::HashMap;

/// Where a session stands at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    Live,
    /// Known, and its time ran out (whether or not [`Leases::expire`] ran yet).
    Lapsed,
    Unknown,
}

#[derive(Debug, Clone)]
pub struct Leases {
    ttl_ms: u64,
    expires_at: HashMap<Owner, u64>,
}

impl Leases {
    pub fn new(ttl_ms: u64) -> Self {
        Leases { ttl_ms, expires_at: HashMap::new() }
    }

    pub fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }

    /// Starts or extends `owner`'s lease.
    pub fn renew(&mut self, owner: Owner, now_ms: u64) {
        self.expires_at.insert(owner, now_ms.saturating_add(self.ttl_ms));
    }

    /// When `owner`'s lease runs out, if it has one.
    pub fn expires_at(&self, owner: Owner) -> Option<u64> {
        self.expires_at.get(&owner).copied()
    }

    pub fn is_live(&self, owner: Owner, now_ms: u64) -> bool {
        self.state(owner, now_ms) == LeaseState::Live
    }

    /// A lapsed lease stays lapsed even if a renewal arrives before the
    /// periodic [`Leases::expire`] sweep: renewing must not revive it.
    pub fn state(&self, owner: Owner, now_ms: u64) -> LeaseState {
        match self.expires_at.get(&owner) {
            Some(&t) if now_ms < t => LeaseState::Live,
            Some(_) => LeaseState::Lapsed,
            None => LeaseState::Unknown,
        }
    }

    /// Ends `owner`'s session (a clean goodbye).
    pub fn end(&mut self, owner: Owner) {
        self.expires_at.remove(&owner);
    }

    /// Removes and returns every session whose lease has run out.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Owner> {
        let dead: Vec<Owner> = self.expires_at.iter().filter(|&(_, &t)| now_ms >= t).map(|(&o, _)| o).collect();
        for o in &dead {
            self.expires_at.remove(o);
        }
        dead
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_after_their_ttl_unless_renewed() {
        let mut l = Leases::new(100);
        l.renew(Owner(1), 0);
        l.renew(Owner(2), 0);
        assert!(l.expire(99).is_empty());
        l.renew(Owner(2), 90);
        assert_eq!(l.expire(100), [Owner(1)]);
        assert!(l.is_live(Owner(2), 189) && !l.is_live(Owner(1), 100));
        assert_eq!(l.state(Owner(2), 189), LeaseState::Live);
        assert_eq!(l.state(Owner(2), 190), LeaseState::Lapsed);
        assert_eq!(l.state(Owner(9), 0), LeaseState::Unknown);
        assert_eq!(l.expire(190), [Owner(2)]);
    }
}
