//! Riding through a server's restart (issue 25, item 5): calls that failed
//! because a server this client had reached went away (its connection
//! broke, connecting is refused, or it answered `Stopping`: a server
//! draining on SIGTERM) are sent again, with backoff, until it
//! answers or the recovery window passes, when sending again is safe: the
//! call was never sent (refused at connect), or its request is idempotent
//! ([`Request::is_idempotent`]). Others fail at once with the break's error.
//!
//! A server that did not come back within the window is given up on: later
//! calls to it fail at once, until one of them is answered.
//!
//! Namespace changes (create, mkdir, unlink, rename, ...) are sent tagged
//! ([`Tags`], `MetaReq::Once`): the metadata service keeps each one's
//! answer with the change, so a resend is answered, not applied twice, and
//! they are resent like idempotent requests.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weft_net::{Call, Endpoint, NetError};
use weft_wire::{MetaReq, Request, Response};

/// The default window (`WEFT_RECOVERY_MS`): a server restarted within it
/// is not noticed by applications.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// First wait between tries; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);


/// Servers given up on (see the module's documentation).
#[derive(Default)]
pub(crate) struct Recovery {
    gone: Mutex<HashSet<SocketAddr>>,
    /// Whether `gone` has entries: the success path looks only then.
    any_gone: AtomicBool,
    pub(crate) tags: Tags,
}

/// This client's tags for namespace changes: a random number drawn at its
/// start, and a count.
pub(crate) struct Tags {
    client: u64,
    next: AtomicU64,
}

impl Default for Tags {
    fn default() -> Self {
        Tags { client: rand::random(), next: AtomicU64::new(1) }
    }
}

impl Tags {
    /// `op` tagged if it is a namespace change, else as it is. On a
    /// cluster of several metadata shards, the changes that may span shards
    /// (rmdir, rename, link, unlink: the service makes them in steps that
    /// keep no answer) go untagged, so they fail rather than apply twice.
    pub(crate) fn tag(&self, op: MetaReq, shards: u32) -> MetaReq {
        let spanning = matches!(op, MetaReq::Rmdir { .. } | MetaReq::Rename { .. } | MetaReq::Link { .. } | MetaReq::Unlink { .. });
        if !op.answered_once() || (shards > 1 && spanning) {
            return op;
        }
        MetaReq::Once { client: self.client, seq: self.next.fetch_add(1, Ordering::Relaxed), op: Box::new(op) }
    }
}

/// The server is stopping and said it did not apply the call.
fn refused_stopping(c: &Call<'_>) -> bool {
    matches!(&c.result, Some(Ok(reply)) if Response::says_stopping(&reply.body))
}

/// The call's server went away: its connection broke or was refused, or
/// it is stopping.
fn went_away(c: &Call<'_>) -> bool {
    matches!(c.result, Some(Err(NetError::Unreachable { .. } | NetError::Stopping { .. }))) || refused_stopping(c)
}

/// Sending `c` again cannot apply it twice. Never a lock request: a lock
/// server keeps its locks in memory, so one resent after its restart could
/// be granted while the old holder still believes it holds the range.
fn resendable(c: &Call<'_>) -> bool {
    let Ok(req) = Request::decode(&c.body) else { return false };
    let unsent = matches!(&c.result, Some(Err(NetError::Unreachable { source, .. })) if source.kind() == std::io::ErrorKind::ConnectionRefused)
        || matches!(&c.result, Some(Err(NetError::Stopping { .. })))
        || refused_stopping(c);
    !matches!(req, Request::Lock(_)) && (unsent || req.is_idempotent())
}

impl Recovery {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<SocketAddr>> {
        self.gone.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether calls to `addr` are waited for when it goes away: this
    /// client reached it before, and has not given up on it.
    pub(crate) fn may_come_back(&self, ep: &Endpoint, addr: SocketAddr) -> bool {
        ep.has_connected(addr) && !(self.any_gone.load(Ordering::Relaxed) && self.lock().contains(&addr))
    }

    /// Runs `calls` with `run` (given the deadline of that run), then sends
    /// again those that may be, until their servers answer or `window`
    /// passes; a resend's deadline ends with the window.
    pub(crate) fn run(&self, ep: &Endpoint, window: Duration, calls: &mut [Call<'_>], mut run: impl FnMut(&mut [Call<'_>], Duration)) {
        let op_timeout = ep.config().op_timeout;
        run(calls, op_timeout);
        if self.any_gone.load(Ordering::Relaxed) {
            let mut gone = self.lock();
            for c in calls.iter().filter(|c| matches!(c.result, Some(Ok(_)))) {
                gone.remove(&c.peer);
            }
            self.any_gone.store(!gone.is_empty(), Ordering::Relaxed);
        }
        if window.is_zero() {
            return;
        }
        let began = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        loop {
            let again: Vec<usize> = {
                let gone = self.lock();
                (0..calls.len()).filter(|&i| went_away(&calls[i]) && !gone.contains(&calls[i].peer) && ep.has_connected(calls[i].peer) && resendable(&calls[i])).collect()
            };
            if again.is_empty() {
                return;
            }
            let left = window.saturating_sub(began.elapsed());
            if left.is_zero() {
                let mut gone = self.lock();
                for &i in &again {
                    gone.insert(calls[i].peer);
                    tracing::warn!(target: "weft::client", server = %calls[i].peer, window = ?window, "a server did not come back within the recovery window; calls to it fail at once until it answers");
                }
                self.any_gone.store(true, Ordering::Relaxed);
                return;
            }
            std::thread::sleep(backoff.min(left));
            backoff = (backoff * 2).min(MAX_BACKOFF);
            let left = window.saturating_sub(began.elapsed()).max(Duration::from_millis(1));
            let mut batch: Vec<Call<'_>> = again
                .iter()
                .map(|&i| {
                    let peer = calls[i].peer;
                    std::mem::replace(&mut calls[i], Call::new(peer, Vec::new()))
                })
                .collect();
            run(&mut batch, op_timeout.min(left));
            for (i, c) in again.into_iter().zip(batch) {
                calls[i] = c;
            }
        }
    }
}
