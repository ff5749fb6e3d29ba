//! Who holds a server's connections: at most a share per proven user, and
//! idle connections taken back when the server is full, so one user who
//! opens every connection it can and holds them idle cannot shut others
//! out (issue 25).
//!
//! Only users MUNGE proved are counted: root (a mount serving its node's
//! users) and peers that proved the servers' secret (other servers,
//! operators' tools, every client in secret mode, where a uid is only
//! asserted) are not. Idle connections of anyone are closed after
//! `ConnLimits::idle_timeout`, and at the connection limit the one idle
//! longest (past [`ConnQuota::evict_after`]) makes room for a new one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_net::budget::Account;
use weft_net::link::Identity;

/// The idle age past which a full server takes a connection back: a
/// minute at most, above the clients' reuse limit (`weft_net::IDLE_REUSE`),
/// so a well-behaved client never posts on a connection being taken.
const EVICT_AFTER: Duration = Duration::from_secs(60);

pub(super) struct ConnQuota {
    /// Connections each counted user holds, and the memory account they
    /// all draw from (one user holds one connection's share of the budget
    /// in all, however many connections it opens).
    per_user: HashMap<u32, (usize, Arc<Account>)>,
    /// The most one user may hold.
    pub(super) max_per_user: usize,
    /// Idle connections older than this may be taken back at the limit.
    pub(super) evict_after: Duration,
}

impl ConnQuota {
    /// One user may hold `per_user` connections, else half the server's;
    /// idle ones are taken back after half the idle timeout, at most a
    /// minute.
    pub(super) fn new(max_connections: usize, per_user: Option<usize>, idle_timeout: Duration) -> Self {
        let max_per_user = per_user.unwrap_or((max_connections / 2).max(1));
        ConnQuota { per_user: HashMap::new(), max_per_user, evict_after: EVICT_AFTER.min(idle_timeout / 2) }
    }

    /// A connection proved `who`: the uid it is counted for and that
    /// user's memory account (`None`: not counted, it keeps its own), or
    /// why it may not stay.
    pub(super) fn admit(&mut self, who: &Identity) -> Result<Option<(u32, Arc<Account>)>, String> {
        let Identity::Verified { uid, .. } = who else { return Ok(None) };
        if *uid == 0 {
            return Ok(None);
        }
        let (held, account) = self.per_user.entry(*uid).or_default();
        if *held >= self.max_per_user {
            return Err(format!("uid {uid} holds {held} connections to this server, the most one user may (WEFT_MAX_CONNECTIONS_PER_USER); close some first"));
        }
        *held += 1;
        Ok(Some((*uid, account.clone())))
    }

    /// A connection counted for `uid` closed.
    pub(super) fn release(&mut self, uid: Option<u32>) {
        let Some(uid) = uid else { return };
        if let Some((n, _)) = self.per_user.get_mut(&uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_user.remove(&uid);
            }
        }
    }

    /// Of connections `(slot, idle since)`, the one to take back for a
    /// new connection: idle longest, and for longer than `evict_after`.
    pub(super) fn victim(&self, idle: impl Iterator<Item = (usize, Instant)>, now: Instant) -> Option<usize> {
        idle.filter(|(_, since)| now.saturating_duration_since(*since) >= self.evict_after).min_by_key(|(_, since)| *since).map(|(k, _)| k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(uid: u32) -> Identity {
        Identity::Verified { uid, gid: uid, groups: vec![uid] }
    }

    #[test]
    fn a_user_holds_its_share_and_others_are_not_counted() {
        let mut q = ConnQuota::new(8, None, Duration::from_secs(300));
        assert_eq!(q.max_per_user, 4);
        let uid = |r: Result<Option<(u32, Arc<Account>)>, String>| r.map(|o| o.map(|(u, _)| u));
        let first = q.admit(&user(1000)).unwrap().unwrap().1;
        for _ in 1..4 {
            let (_, account) = q.admit(&user(1000)).unwrap().unwrap();
            assert!(Arc::ptr_eq(&account, &first), "one user's connections share one account");
        }
        assert!(q.admit(&user(1000)).unwrap_err().contains("uid 1000 holds 4"));
        // Another user, root and secret-proven peers are served.
        let other = q.admit(&user(1001)).unwrap().unwrap().1;
        assert!(!Arc::ptr_eq(&other, &first), "another user has its own");
        assert_eq!(uid(q.admit(&user(0))), Ok(None));
        assert_eq!(uid(q.admit(&Identity::Trusted)), Ok(None));
        q.release(Some(1000));
        assert_eq!(uid(q.admit(&user(1000))), Ok(Some(1000)), "a closed connection gives its place back");
        q.release(None);
    }

    #[test]
    fn the_connection_idle_longest_past_the_age_is_taken_back() {
        let q = ConnQuota::new(8, None, Duration::from_secs(10));
        assert_eq!(q.evict_after, Duration::from_secs(5));
        let now = Instant::now() + Duration::from_secs(100);
        let idle = [(1, now - Duration::from_secs(6)), (2, now - Duration::from_secs(9)), (3, now - Duration::from_secs(1))];
        assert_eq!(q.victim(idle.into_iter(), now), Some(2));
        assert_eq!(q.victim(idle[2..].iter().copied(), now), None, "nothing idle long enough");
    }
}
