//! Servers that lately let a call run out its deadline: calls to them fail
//! at once for a while (`hold`), so a stopped server costs a caller one
//! deadline, not one per call (a mount's `ls -l` made six exchanges with
//! it in turn, each waiting the whole deadline). After the hold, the next
//! call tries the server again; an answer clears it.

use crate::NetError;
// Keys are this process's own ids and its cluster's addresses: a fast hash.
use rustc_hash::FxHashMap as HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Servers remembered at most (a client talks to the servers of its
/// cluster file; past this the oldest entries go).
const MAX_PEERS: usize = 4096;

#[derive(Default)]
pub(crate) struct Unanswered {
    /// Per server: when its call ran out its deadline, and for how long
    /// calls to it fail at once.
    peers: Mutex<HashMap<SocketAddr, (Instant, Duration)>>,
    /// How many servers `peers` holds, read without the lock: almost
    /// always none, and then a call needs no lock here at all. (A call
    /// racing a timeout may miss its hold: the hold is a shortcut, not a
    /// rule.)
    held: AtomicUsize,
}

impl Unanswered {
    /// The error a call to `peer` fails with now, if it is held.
    #[inline]
    pub(crate) fn refuse(&self, peer: SocketAddr, now: Instant) -> Option<NetError> {
        if self.held.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.refuse_held(peer, now)
    }

    /// [`Unanswered::refuse`] while some server is held.
    #[cold]
    fn refuse_held(&self, peer: SocketAddr, now: Instant) -> Option<NetError> {
        let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        let &(since, hold) = peers.get(&peer)?;
        (now < since + hold).then(|| NetError::Unanswered { addr: peer, ago: now - since })
    }

    /// A call to `peer` ran out its deadline at `now`.
    pub(crate) fn timed_out(&self, peer: SocketAddr, hold: Duration, now: Instant) {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if peers.len() >= MAX_PEERS && !peers.contains_key(&peer) {
            peers.retain(|_, (since, hold)| now < *since + *hold);
            if peers.len() >= MAX_PEERS {
                self.held.store(peers.len(), Ordering::Relaxed);
                return;
            }
        }
        peers.insert(peer, (now, hold));
        self.held.store(peers.len(), Ordering::Relaxed);
    }

    /// `peer` answered.
    #[inline]
    pub(crate) fn answered(&self, peer: SocketAddr) {
        if self.held.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.answered_held(peer);
    }

    /// [`Unanswered::answered`] while some server is held.
    #[cold]
    fn answered_held(&self, peer: SocketAddr) {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        peers.remove(&peer);
        self.held.store(peers.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_held_for_a_while_after_a_timeout_and_freed_by_an_answer() {
        let u = Unanswered::default();
        let (a, b): (SocketAddr, SocketAddr) = ("127.0.0.1:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap());
        let t0 = Instant::now();
        assert!(u.refuse(a, t0).is_none());
        u.timed_out(a, Duration::from_secs(5), t0);
        assert!(matches!(u.refuse(a, t0 + Duration::from_secs(1)), Some(NetError::Unanswered { .. })));
        assert!(u.refuse(b, t0).is_none(), "only the server that did not answer");
        assert!(u.refuse(a, t0 + Duration::from_secs(5)).is_none(), "tried again after the hold");
        u.answered(a);
        assert!(u.refuse(a, t0 + Duration::from_secs(1)).is_none(), "an answer frees it");
    }
}
