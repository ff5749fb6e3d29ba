//! A server that stops answering while calls wait on it (stopped with
//! SIGSTOP, its node hung, a dead link that TCP has not noticed) is found
//! out before the calls' deadline, when asked (`WEFT_PING_AFTER_MS`,
//! `EndpointConfig::ping_after`; off by default): a connection owed
//! answers on which no byte moved either way for that long (a server
//! still taking a long request's bytes is alive) is sent a ping, which a
//! server's event loop answers at once however busy its disks or lock
//! waits are; if that brings nothing within as long again, the connection
//! is dropped, its calls fail with `Timeout`, and the server is held as
//! unanswered (calls to it fail at once for a while, see `unanswered.rs`).
//! A server that is merely slow to do the work answers the ping and is
//! waited for.
//!
//! Why off by default: the ping travels behind the connection's other
//! bytes, and a server that stopped reading the connection (its user past
//! its share of the server's memory, 64 requests queued, a frame waiting
//! for memory) does not see it while it works through the rest: a busy
//! server would be taken for a dead one. Asking it on a fresh connection
//! (whose handshake a stopped server cannot answer) is the next step.

use super::batch::CallRef;
use super::engine::{Engine, Slot};
use crate::NetError;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A good `EndpointConfig::ping_after` when the watch is wanted: quiet
/// this long, a ping; unanswered as long again, the server is given up.
pub const PING_AFTER: Duration = Duration::from_secs(5);

/// The tag of a ping the endpoint sends itself: no batch has this id, so
/// its answer completes nothing.
pub(super) const PROBE: CallRef = CallRef { batch: u64::MAX, index: 0 };

/// How often the watch looks (its cost per call is then one comparison).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// When the watch looks next, and the earliest time one of its
/// connections is due (a ping to send or to give up on).
#[derive(Debug, Default)]
pub(super) struct Schedule {
    next_look: Option<Instant>,
    due: Option<Instant>,
    /// The earlier of the two: before it, nothing to do.
    wake: Option<Instant>,
}

/// What the watch knows of one connection.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// Since when it has been owed answers and no byte moved, and the
    /// byte counts (read, written) then; `None` while it is owed nothing.
    quiet_since: Option<(Instant, (u64, u64))>,
    /// When its ping went out, if one is out.
    pinged_at: Option<Instant>,
}

impl Engine {
    /// Looks at every connection owed answers (at most every
    /// [`LOOK_EVERY`]): pings the quiet ones, drops those whose ping went
    /// unanswered. Returns the servers dropped (to be held as unanswered).
    pub(super) fn watch_liveness(&mut self, now: Instant) -> Vec<SocketAddr> {
        let after = self.ping_after;
        if after.is_zero() {
            return Vec::new();
        }
        self.liveness.next_look = Some(now + LOOK_EVERY);
        let mut due: Option<Instant> = None;
        let mut stopped = Vec::new();
        for (&key, slot) in self.conns.iter_mut() {
            let Slot::Ready(c) = slot else { continue };
            if c.link.is_idle() {
                c.watch = Watch::default();
                continue;
            }
            let moved = (c.read_bytes, c.written_bytes);
            // Once the ping is out only an answer counts (the ping's own
            // bytes going out are not the server's doing).
            let alive = |seen: (u64, u64)| if c.watch.pinged_at.is_some() { seen.0 != moved.0 } else { seen != moved };
            match c.watch.quiet_since {
                Some((_, seen)) if alive(seen) => c.watch = Watch { quiet_since: Some((now, moved)), pinged_at: None },
                None => c.watch.quiet_since = Some((now, moved)),
                Some((since, _)) => match c.watch.pinged_at {
                    None if now >= since + after => {
                        let msg = self.next_msg;
                        self.next_msg += 1;
                        c.link.post(msg, PROBE, &weft_wire::Request::Ping.encode(), 0, true);
                        c.watch.pinged_at = Some(now);
                        // Out now: the driver may sleep until the ping's
                        // deadline. A failure shows on the next read.
                        if c.writable {
                            let _ = c.advance_write(key.peer, &self.batches);
                        }
                    }
                    Some(at) if now >= at + after => stopped.push((key, now.saturating_duration_since(since))),
                    _ => {}
                },
            }
            let next = match (c.watch.quiet_since, c.watch.pinged_at) {
                (_, Some(at)) => at + after,
                (Some((since, _)), None) => since + after,
                (None, None) => continue,
            };
            due = Some(due.map_or(next, |d| d.min(next)));
        }
        self.liveness.due = due;
        self.liveness.wake = self.next_watch();
        if stopped.is_empty() {
            return Vec::new();
        }
        for &(key, silent) in &stopped {
            tracing::warn!(target: "weft::net", peer = %key.peer, ?silent, "server not responding (a ping went unanswered); failing its calls");
            self.drop_conn(key, NetError::Timeout { addr: key.peer, after: silent });
        }
        stopped.into_iter().filter(|(k, _)| k.rail == 0).map(|(k, _)| k.peer).collect()
    }

    /// Before this the watch has nothing to do (the caller skips it).
    pub(super) fn liveness_wake(&self) -> Option<Instant> {
        self.liveness.wake
    }

    /// When [`Engine::watch_liveness`] next has something to do: a
    /// connection due, or its next look (calls in flight are looked at
    /// then).
    pub(super) fn next_watch(&self) -> Option<Instant> {
        match (self.liveness.due, self.liveness.next_look) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
