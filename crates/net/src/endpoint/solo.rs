//! The short way for a call alone: a thread whose one-call batch is the
//! only batch in the engine, on an idle connection, drives just that
//! connection (post, write, wait, read) instead of passes over every
//! connection and batch. This is paper 003's common case, a small request
//! and its answer with nothing else in flight, and it is where the
//! instructions per request are counted (`weft bench net --icount`).
//!
//! It is the general driver narrowed, not a second protocol: the call is an
//! ordinary batch, the connection's machine posts and reads it, and the
//! moment anything else needs the driver (another thread's batch, another
//! connection's event, the connection dropped or not ready, the deadline or
//! the liveness watch due) it hands back to [`Endpoint::wait_batch`], which
//! goes on from where this left.

use super::batch::CallRef;
use super::conn::Readiness;
use super::engine::{post_call, ConnKey, Engine, Slot};
use super::{Endpoint, TurnGuard, WAKE};
use mio::{Events, Poll};
use std::io;
use std::sync::{MutexGuard, PoisonError};
use std::time::Instant;

impl Endpoint {
    /// Drives batch `id` (one call to `peer`) alone while nothing else is
    /// in the engine, from the engine's lock `eng` (the post's). Returns
    /// whether it finished it (its result is then in `calls`); if not, the
    /// caller waits for it as for any batch (`wait_batch`): left as any
    /// pass leaves one.
    pub(super) fn drive_solo<'e>(&'e self, mut eng: MutexGuard<'e, Engine>, id: u64, peer: std::net::SocketAddr, calls: &mut [super::Call<'_>], timeout: std::time::Duration) -> bool {
        let key = ConnKey::primary(peer);
        // (Whether its connection is idle, the loop's first pass looks.)
        if eng.driving || eng.batches.len() != 1 {
            return false;
        }
        // The turn is ours: only the driver locks the poller, so it is free.
        eng.driving = true;
        let turn = TurnGuard(self);
        let mut poller = self.poller.lock().unwrap_or_else(PoisonError::into_inner);
        let (poll, events) = &mut *poller;
        let (mut eng, quiet) = self.solo_loop(eng, id, key, poll, events);
        drop(poller);
        // The turn is given up here, with the lock held already.
        std::mem::forget(turn);
        eng.driving = false;
        // Done: taken out as `wait_batch` would (nobody drives now, so no
        // driver need look again at what finishing it dropped).
        let done = eng.batches[id].is_done();
        if done && quiet {
            // Its call went on one connection (a payload to split goes the
            // general way), answered and idle now: none holds anything of it.
            eng.take_out(id, calls);
        } else if done {
            eng.finish(id, calls);
        }
        self.wake_sleepers(eng);
        if done {
            self.note_answers(calls, timeout);
        }
        done
    }

    /// [`Endpoint::drive_solo`]'s loop, with the turn and the poller
    /// taken; returns the lock, once the batch is done or the general
    /// driver has to go on, and whether it ended done with its connection
    /// idle.
    fn solo_loop<'e>(&'e self, mut eng: MutexGuard<'e, Engine>, id: u64, key: ConnKey, poll: &mut Poll, events: &mut Events) -> (MutexGuard<'e, Engine>, bool) {
        let peer = key.peer;
        // The batch was made a moment ago: its clock reading serves the
        // post and the first wait (which may so end a few microseconds
        // past its bound, against bounds of seconds).
        let mut clock = Some(eng.batches[id].made);
        // The first pass posts the call, on the connection it looks up
        // to write it (as `Engine::feed` would).
        let mut posted = false;
        // Readiness our connection's poll event reported, applied at the
        // next pass's look at it.
        let mut seen: Option<Readiness> = None;
        // Looked up by its id (no hashing; a stale id finds nothing: a
        // connection dropped and opened again is another's, and the
        // general driver's). Calls alone to one server back to back find
        // the id the endpoint's last call alone used (one per endpoint).
        let conn_id = match eng.last_solo {
            Some((k, cid)) if k == key && eng.conns.holds(cid) => cid,
            _ => {
                let Some(cid) = eng.conns.id_of(&key) else { return (eng, false) };
                eng.last_solo = Some((key, cid));
                cid
            }
        };
        loop {
            let engine = &mut *eng;
            // A payload to split needs rails: the general driver opens them.
            let pay_len: usize = if posted { 0 } else { engine.batches.get(id).map_or(0, |b| b.calls[0].send.iter().map(|v| v.len()).sum()) };
            if !posted && engine.rails.missing(peer, pay_len, &engine.conns).is_some() {
                return (eng, false);
            }
            let Some((_, Slot::Ready(c))) = engine.conns.by_id_mut(conn_id) else { return (eng, false) };
            // First, whatever the pass does next: an edge-triggered event
            // lost here would leave the answer unread.
            if let Some(r) = seen.take() {
                c.on_readiness(r);
            }
            let b = &engine.batches[id];
            if b.is_done() || engine.batches.len() != 1 || b.connect.is_some() {
                return (eng, false);
            }
            let deadline = b.deadline;
            if !posted {
                // Busy with another's calls, or to be opened afresh: the
                // general driver's case.
                let now = clock.unwrap_or_else(Instant::now);
                if !c.is_idle() || !c.reusable(now, engine.idle_reuse) {
                    return (eng, false);
                }
                c.posted_at(now);
                let b = engine.batches.get_mut(id).expect("the batch driven");
                let sent = post_call(c, b, CallRef { batch: id, index: 0 }, pay_len, &mut engine.next_msg, &mut engine.stats, engine.eager_limit, Some(peer));
                engine.stats.solo += 1;
                posted = true;
                if let Err(e) = sent {
                    engine.drop_conn(key, e);
                    continue;
                }
            }
            let token = c.token;
            let batches = &mut engine.batches;
            // Until both sides would block: a read may queue output (a
            // `Cts` lets the payload go).
            let mut step = || loop {
                if c.writable && c.link.has_output() {
                    c.advance_write(peer, batches)?;
                }
                if c.readable {
                    c.advance_read(peer, batches).1?;
                }
                if !(c.writable && c.link.has_output()) {
                    return Ok(());
                }
            };
            if let Err(e) = step() {
                engine.drop_conn(key, e);
                continue;
            }
            // A payload granted to split goes out on the general pass,
            // which takes grants only from the engine's list (the
            // connection, read to `WouldBlock`, is not read again).
            if c.link.has_splits() {
                engine.splits.extend(c.link.take_splits().map(|g| (peer, g)));
                return (eng, false);
            }
            if engine.batches[id].is_done() {
                // Its one connection holds nothing of it if idle now.
                let idle = c.is_idle();
                return (eng, idle);
            }
            // Until an event, nothing moves here. The wait is cut short
            // where the general driver has work: the deadline, the
            // liveness watch (a ping after `ping_after` of silence).
            // The first wait starts when the batch was made: its deadline
            // is its timeout away (no clock arithmetic).
            let (now, to_deadline) = match clock.take() {
                Some(made) => (made, engine.batches[id].timeout),
                None => {
                    let now = Instant::now();
                    (now, deadline.saturating_duration_since(now))
                }
            };
            let mut wait = to_deadline;
            if !self.config.ping_after.is_zero() {
                wait = wait.min(self.config.ping_after);
            }
            if let Some(w) = engine.next_watch() {
                wait = wait.min(w.saturating_duration_since(now));
            }
            if wait.is_zero() {
                return (eng, false);
            }
            drop(eng);
            let spun = !self.config.shm_poll.is_zero() && self.spin_for_input(self.config.shm_poll.min(wait), poll, events);
            if !spun
                && let Err(e) = poll.poll(events, Some(wait))
                && e.kind() != io::ErrorKind::Interrupted
            {
                let mut eng = self.lock();
                eng.drop_all(&e);
                return (eng, false);
            }
            eng = self.lock();
            // The spin marks every shared-memory connection with input,
            // not only this one: another's is the general driver's.
            let mut elsewhere = spun && eng.conns.iter().any(|(k, s)| *k != key && matches!(s, Slot::Ready(c) if c.readable));
            for ev in events.iter() {
                if ev.token() == WAKE {
                    elsewhere = true;
                    continue;
                }
                if ev.token() != token {
                    elsewhere = true;
                    eng.ready(ev);
                } else {
                    seen = Some(Readiness::of(ev));
                }
            }
            events.clear();
            if elsewhere {
                // The general driver goes on from here, with what our
                // connection's event said.
                if let (Some(r), Some((_, Slot::Ready(c)))) = (seen, eng.conns.by_id_mut(conn_id)) {
                    c.on_readiness(r);
                }
                return (eng, false);
            }
        }
    }
}
