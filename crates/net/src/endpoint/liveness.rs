//! A server that stops answering while calls wait on it (stopped with
//! SIGSTOP, its node hung, a dead link that TCP has not noticed) is found
//! out before the calls' deadline (`WEFT_PING_AFTER_MS`,
//! `EndpointConfig::ping_after`, default [`PING_AFTER`]; 0 turns it off):
//! a connection owed answers on which no byte moved either way for that
//! long (a server still taking a long request's bytes is alive) is sent a
//! ping, which a server's event loop answers at once however busy its
//! disks or lock waits are. If that brings nothing within as long again,
//! the server may still be alive but not reading this connection (its
//! user past its share of the server's memory, 64 requests queued, a
//! frame waiting for memory: the ping waits behind the rest), so it is
//! asked on a fresh connection: a `Hello`, whose answer (the handshake's
//! challenge, or a refusal in words) its event loop sends before anything
//! is verified, whatever the other connection holds, and a stopped server
//! cannot send (no credential is made: a slow `munged` proves nothing).
//! No answer within as long again: the connection is dropped, its calls
//! fail with `Timeout`, and the server is held as unanswered for a ping's
//! time (calls to it fail at once meanwhile, see `unanswered.rs`). An
//! answer: the server is alive, and the connection is watched afresh (its
//! calls keep their own deadline). A server that is merely slow to do the
//! work answers the ping and is waited for. A server's connections (its
//! rails) share one probe at a time.

use super::batch::CallRef;
use super::engine::{ConnKey, Engine, Slot};
use crate::NetError;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The default `EndpointConfig::ping_after`: quiet this long, a ping;
/// unanswered as long again, a hello on a fresh connection; no answer
/// within as long again, the server is given up (after 15-18 s, where
/// the default deadline is 30 s).
pub const PING_AFTER: Duration = Duration::from_secs(5);

/// How a fresh-connection probe ended (see the module's text).
pub(super) const PROBING: u8 = 0;
pub(super) const PROBE_ANSWERED: u8 = 1;
pub(super) const PROBE_FAILED: u8 = 2;

/// What a look of the watch found.
#[derive(Default)]
pub(super) struct Findings {
    /// Servers given up (to be held as unanswered).
    pub stopped: Vec<SocketAddr>,
    /// Servers to ask on a fresh connection, each with where to say how
    /// it went (the caller makes the connection, off the engine's lock).
    pub probes: Vec<(SocketAddr, Arc<AtomicU8>)>,
}

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
    /// The fresh-connection probe asked once the ping went unanswered,
    /// and when it was asked (it has as long as the ping had).
    probe: Option<(Arc<AtomicU8>, Instant)>,
}

impl Engine {
    /// Looks at every connection owed answers (at most every
    /// [`LOOK_EVERY`]): pings the quiet ones, probes those whose ping went
    /// unanswered, drops those whose probe failed.
    pub(super) fn watch_liveness(&mut self, now: Instant) -> Findings {
        let after = self.ping_after;
        let mut found = Findings::default();
        if after.is_zero() {
            return found;
        }
        self.liveness.next_look = Some(now + LOOK_EVERY);
        let mut due: Option<Instant> = None;
        let mut stopped: Vec<(ConnKey, Duration)> = Vec::new();
        // One probe per server at a time, shared by its connections (its
        // rails): made when the first needs it.
        let mut asked: std::collections::HashMap<SocketAddr, (Arc<AtomicU8>, Instant)> = self
            .conns
            .iter()
            .filter_map(|(k, s)| match s {
                Slot::Ready(c) => c.watch.probe.clone().map(|p| (k.peer, p)),
                _ => None,
            })
            .collect();
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
                Some((_, seen)) if alive(seen) => c.watch = Watch { quiet_since: Some((now, moved)), pinged_at: None, probe: None },
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
                    Some(at) if now >= at + after => match c.watch.probe.as_ref().map(|(p, asked)| (p.load(Ordering::Acquire), *asked)) {
                        None => {
                            let probe = asked.entry(key.peer).or_insert_with(|| {
                                let p = Arc::new(AtomicU8::new(PROBING));
                                found.probes.push((key.peer, p.clone()));
                                (p, now)
                            });
                            c.watch.probe = Some(probe.clone());
                        }
                        // Alive, not reading this connection: watched afresh.
                        Some((PROBE_ANSWERED, _)) => c.watch = Watch { quiet_since: Some((now, moved)), pinged_at: None, probe: None },
                        Some((PROBE_FAILED, _)) => stopped.push((key, now.saturating_duration_since(since))),
                        // The probe's thread gives up by then; this is in case it hangs.
                        Some((_, asked)) if now >= asked + after + LOOK_EVERY => stopped.push((key, now.saturating_duration_since(since))),
                        Some(_) => {}
                    },
                    _ => {}
                },
            }
            let next = match (c.watch.quiet_since, c.watch.pinged_at, &c.watch.probe) {
                (_, Some(_), Some((_, asked))) => *asked + after + LOOK_EVERY,
                (_, Some(at), None) => at + after,
                (Some((since, _)), None, _) => since + after,
                (None, None, _) => continue,
            };
            due = Some(due.map_or(next, |d| d.min(next)));
        }
        self.liveness.due = due;
        self.liveness.wake = match (due, self.liveness.next_look) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for &(key, silent) in &stopped {
            tracing::warn!(target: "weft::net", peer = %key.peer, ?silent, "server not responding (neither a ping nor a fresh connection's hello answered); failing its calls");
            self.drop_conn(key, NetError::Timeout { addr: key.peer, after: silent });
        }
        found.stopped = stopped.into_iter().filter(|(k, _)| k.rail == 0).map(|(k, _)| k.peer).collect();
        found
    }

    /// When [`Engine::watch_liveness`] next has something to do: a
    /// connection due, or its next look (calls in flight are looked at
    /// then); before it the watch has nothing to do (the caller skips it).
    #[inline]
    pub(super) fn next_watch(&self) -> Option<Instant> {
        self.liveness.wake
    }
}
