//! The client side of the message layer: a post/advance engine that every
//! thread of a process shares, over one connection per server.
//!
//! A caller builds a batch of [`Call`]s (request body, payload to send as
//! borrowed slices, buffers to receive the response payload into) and hands
//! them to [`Endpoint::run`], which posts them and returns when each call
//! has a result or the deadline passed. Payloads move between the sockets
//! and the callers' own buffers with no staging copy.
//!
//! Per call:
//!
//! | payload size            | frames                                            |
//! |-------------------------|---------------------------------------------------|
//! | `<= eager_limit`        | `Request(body, payload)` -> `Response`            |
//! | `>  eager_limit`        | `Rts(body)` -> `Cts` -> `Data(payload)` -> `Response` |
//!
//! **Threads.** There is no background thread. Of the threads waiting in
//! `run`, one at a time *drives*: it polls every connection and advances
//! all batches' frames, including other threads' (leader/followers). The
//! others sleep until their batch is done or the driver's own batch is, when
//! one of them takes over. A thread alone does its own I/O, as a
//! single-threaded engine would (a call alone on an idle connection drives
//! just that connection, `solo.rs`); requests of threads sharing a server
//! are multiplexed on one connection, answered in any order.
//!
//! Connections open on first use (by the thread that needs them, outside
//! the shared state, so a slow connect stalls no one else) and are kept. A
//! connection that breaks fails only the calls on it and is dropped; the
//! next call reconnects. A batch that times out withdraws its frames; a
//! connection it leaves mid-frame is dropped, since its next bytes belong
//! to a call that is gone.

mod batch;
mod config;
mod conn;
mod connect;
mod conns;
mod engine;
mod liveness;
mod posted;
mod rails;
mod slab;
mod solo;

pub use config::{EndpointConfig, TransportChoice, IDLE_REUSE};
pub use liveness::PING_AFTER;
pub use rails::{MAX_RAILS, SPLIT_MIN};
mod unanswered;
mod views;

use crate::handshake::ClientAuth;
pub use crate::link::body::Body;
pub use crate::link::client::Reply;
pub use posted::{Posted, Scope};
use crate::NetError;
use engine::{Engine, Slot};
use mio::{Events, Poll, Registry, Token, Waker};
use std::io;
use std::net::SocketAddr;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use weft_wire::limits::{MAX_BODY_LEN, MAX_PAYLOAD_LEN};

/// One request and where its answer goes.
#[derive(Debug)]
pub struct Call<'a> {
    pub peer: SocketAddr,
    /// The encoded request body (given back by a run, so the call can be
    /// run again).
    pub body: Vec<u8>,
    /// The request payload, gathered from these slices in order.
    pub send: Vec<&'a [u8]>,
    /// The response payload is scattered into these slices in order; a
    /// response payload longer than their sum is a protocol violation.
    pub recv: Vec<&'a mut [u8]>,
    /// Filled in by [`Endpoint::run`].
    pub result: Option<Result<Reply, NetError>>,
}

impl<'a> Call<'a> {
    pub fn new(peer: SocketAddr, body: Vec<u8>) -> Self {
        Call { peer, body, send: Vec::new(), recv: Vec::new(), result: None }
    }
}

/// Counters, as HG counts its extra-buffer RPCs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    pub connects: u64,
    /// Of them, over shared memory.
    pub shm_connects: u64,
    pub eager: u64,
    pub rendezvous: u64,
    pub dropped_connections: u64,
    /// Rails opened, parts sent over them, and parts sent again on a
    /// server's own connection after their rail failed.
    pub rail_connects: u64,
    pub rail_parts: u64,
    pub rail_resends: u64,
    /// Calls that went the short way of a call alone (`solo.rs`).
    pub solo: u64,
    /// Rendezvous payloads copied into a shared-memory connection's area
    /// (moved once, `Placed`) instead of through its ring.
    pub placed: u64,
}

/// The poll token of the waker that interrupts the driver's `poll`.
const WAKE: Token = Token(usize::MAX);

/// A client endpoint: its connections, shared by every thread of a client.
pub struct Endpoint {
    auth: ClientAuth,
    config: EndpointConfig,
    engine: Mutex<Engine>,
    /// Signalled whenever calls complete or the driver's turn is free.
    turn: Condvar,
    /// The poller; only the driving thread locks it.
    poller: Mutex<(Poll, Events)>,
    registry: Registry,
    waker: Waker,
    /// Servers that lately did not answer in time.
    unanswered: unanswered::Unanswered,
}

impl Endpoint {
    pub fn new(auth: impl Into<ClientAuth>, config: EndpointConfig) -> io::Result<Self> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = Waker::new(poll.registry(), WAKE)?;
        Ok(Endpoint {
            auth: auth.into(),
            engine: Mutex::new(Engine::new(config.eager_limit, config.idle_reuse, config.rails, config.ping_after)),
            config,
            turn: Condvar::new(),
            poller: Mutex::new((poll, Events::with_capacity(256))),
            registry,
            waker,
            unanswered: Default::default(),
        })
    }

    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    pub fn stats(&self) -> EndpointStats {
        let eng = self.lock();
        let mut s = eng.stats;
        s.placed += eng.conns.values().filter_map(|s| if let Slot::Ready(c) = s { Some(c.placed) } else { None }).sum::<u64>();
        s
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.lock().conns.values().filter(|s| matches!(s, Slot::Ready(_))).count()
    }

    /// The transport of the open connection to `peer` (`tcp`, `shm`), if any.
    pub fn transport_of(&self, peer: SocketAddr) -> Option<&'static str> {
        match self.lock().conns.get(&engine::ConnKey::primary(peer)) {
            Some(Slot::Ready(c)) => Some(c.transport.kind()),
            _ => None,
        }
    }

    /// The descriptors `peer` lent this process on its connection so far
    /// (`DataReq::Lend`, over shared memory only; none over TCP or with
    /// no connection), oldest first.
    pub fn take_lent(&self, peer: SocketAddr) -> Vec<std::os::fd::OwnedFd> {
        let mut eng = self.lock();
        let Some(engine::Slot::Ready(c)) = eng.conns.get_mut(&engine::ConnKey::primary(peer)) else { return Vec::new() };
        let fds = c.transport.take_lent();
        // Taking them may have taken a doorbell the driver waits for: the
        // connection is looked at again, and the driver woken to do it.
        c.readable = true;
        c.writable = true;
        drop(eng);
        let _ = self.waker.wake();
        fds
    }

    /// Whether this endpoint ever had a connection to `peer`.
    pub fn has_connected(&self, peer: SocketAddr) -> bool {
        self.lock().known.contains(&peer)
    }

    /// Batches of calls the engine holds now (posted and not yet taken
    /// back by their owners).
    pub fn batches_in_flight(&self) -> usize {
        self.lock().batches.len()
    }

    /// Runs one call alone; a shorthand for request/response exchanges.
    pub fn call(&self, peer: SocketAddr, body: Vec<u8>) -> Result<Reply, NetError> {
        self.call_within(peer, body, self.config.op_timeout)
    }

    /// [`Endpoint::call`] with its own deadline.
    pub fn call_within(&self, peer: SocketAddr, body: Vec<u8>, timeout: Duration) -> Result<Reply, NetError> {
        let mut calls = [Call::new(peer, body)];
        self.run_within(&mut calls, usize::MAX, timeout);
        let [c] = calls;
        c.result.expect("run fills every result")
    }

    /// Posts every call and waits until each has a result (success, its own
    /// error, or a timeout after `op_timeout`).
    pub fn run(&self, calls: &mut [Call<'_>]) {
        self.run_within(calls, usize::MAX, self.config.op_timeout);
    }

    /// Like [`Endpoint::run`], with at most `window` calls in flight: calls
    /// are posted in slice order, the next one as soon as one completes.
    /// This is how a scheduling strategy's order becomes the order on the
    /// wire (window 1 is the paper's one transfer per client at a time).
    pub fn run_window(&self, calls: &mut [Call<'_>], window: usize) {
        self.run_within(calls, window, self.config.op_timeout);
    }

    /// The general form: a window and a deadline of its own (`timeout`
    /// from now), e.g. for a lock request that may wait long.
    pub fn run_within(&self, calls: &mut [Call<'_>], window: usize, timeout: Duration) {
        let Some((id, eng)) = self.post_batch(calls, window, timeout) else { return };
        // From here the engine holds views of `calls`' buffers: they must be
        // withdrawn before this frame is left, also by unwinding (the lock
        // goes first: the guard takes it again).
        let guard = Abandon { ep: self, id };
        // A call alone may go the short way (`solo.rs`), and finish there;
        // it goes on with the lock the post took.
        let done = match calls {
            [c] => {
                let peer = c.peer;
                self.drive_solo(eng, id, peer, calls, timeout)
            }
            _ => {
                drop(eng);
                false
            }
        };
        if !done {
            self.wait_batch(id, calls, timeout);
        }
        std::mem::forget(guard);
    }

    /// Hands `calls` to the engine as a batch (nothing is sent yet);
    /// `None` if there are none. Calls no server may take fail here, before
    /// any byte goes out: a frame the server refuses would cost every
    /// thread its connection. The caller must keep `calls`' buffers alive
    /// until the batch is finished or cancelled (`wait_batch`, `Abandon`).
    /// Returns the batch's id, and the engine's lock still held (a call
    /// alone goes on with it).
    fn post_batch(&self, calls: &mut [Call<'_>], window: usize, timeout: Duration) -> Option<(u64, MutexGuard<'_, Engine>)> {
        if calls.is_empty() {
            return None;
        }
        let limits = |c: &Call<'_>| {
            let pay: usize = c.send.iter().map(|p| p.len()).sum();
            if c.body.len() > MAX_BODY_LEN as usize || pay > MAX_PAYLOAD_LEN as usize {
                let what = format!("a request of {} body and {pay} payload bytes exceeds the protocol's limits ({MAX_BODY_LEN}, {MAX_PAYLOAD_LEN})", c.body.len());
                return Some(NetError::Violation { addr: c.peer, what });
            }
            None
        };
        let now = Instant::now();
        // A call refused here has its result already: the batch keeps it
        // and never posts the call.
        for c in calls.iter_mut() {
            c.result = limits(c).or_else(|| self.unanswered.refuse(c.peer, now)).map(Err);
        }
        let mut eng = self.lock();
        let id = eng.add_batch(calls, window, timeout, now);
        Some((id, eng))
    }

    /// Drives (or waits for the driver) until batch `id` is done, then
    /// takes it out, filling `calls`' results.
    fn wait_batch(&self, id: u64, calls: &mut [Call<'_>], timeout: Duration) {
        let mut eng = self.lock();
        loop {
            let posted = eng.feed(id);
            let b = &eng.batches[id];
            if let Some(peer) = b.connect {
                // Past its deadline a batch opens nothing more (a server
                // that takes handshakes and closes at once would be
                // reconnected to for ever).
                if Instant::now() >= b.deadline {
                    eng.cancel(id);
                    continue;
                }
                eng = self.open(eng, id, peer);
                continue;
            }
            if b.is_done() {
                // Dropping a connection the batch left mid-frame may have
                // failed the driver's calls: it must look again.
                if eng.finish(id, calls) > 0 && eng.driving {
                    let _ = self.waker.wake();
                }
                self.wake_sleepers(eng);
                self.note_answers(calls, timeout);
                return;
            }
            if !eng.driving {
                // The driver fails batches past their deadline, this one too.
                eng.driving = true;
                drop(eng);
                self.drive(id);
                eng = self.lock();
                continue;
            }
            let deadline = b.deadline;
            let now = Instant::now();
            if now >= deadline {
                eng.cancel(id);
                continue;
            }
            if posted > 0 {
                // The driver may be asleep in poll: it writes what we queued.
                let _ = self.waker.wake();
            }
            eng.sleepers += 1;
            eng = self.turn.wait_timeout(eng, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
            eng.sleepers -= 1;
        }
    }

    /// Moves batch `id` on without waiting: posts what its window allows
    /// (opening a connection it needs, which may block up to the connect
    /// timeout), and, unless another thread is driving, makes one pass
    /// over every connection. Returns whether the batch is done.
    fn test_batch(&self, id: u64) -> bool {
        let mut eng = self.lock();
        loop {
            let posted = eng.feed(id);
            if let Some(peer) = eng.batches[id].connect {
                if Instant::now() >= eng.batches[id].deadline {
                    eng.cancel(id);
                    return true;
                }
                eng = self.open(eng, id, peer);
                continue;
            }
            if eng.batches[id].is_done() {
                return true;
            }
            if eng.batches[id].deadline <= Instant::now() {
                eng.cancel(id);
                return true;
            }
            if eng.driving {
                if posted > 0 {
                    let _ = self.waker.wake();
                }
                return false;
            }
            eng.driving = true;
            drop(eng);
            self.drive_pass();
            return self.lock().batches[id].is_done();
        }
    }

    /// Remembers which servers answered and which let a call run out the
    /// ordinary deadline (`op_timeout`; not one of the caller's own: a lock
    /// wait runs out a longer one with the server well, a probe a shorter
    /// one).
    fn note_answers(&self, calls: &[Call<'_>], timeout: Duration) {
        let hold = self.config.op_timeout.min(Duration::from_secs(10));
        for c in calls {
            if matches!(c.result, Some(Ok(_))) {
                self.unanswered.answered(c.peer);
            }
        }
        for c in calls {
            if matches!(c.result, Some(Err(NetError::Timeout { .. }))) && timeout == self.config.op_timeout {
                self.unanswered.timed_out(c.peer, hold, Instant::now());
            }
        }
    }

    /// Wakes the threads asleep on the endpoint, if any, and unlocks.
    fn wake_sleepers(&self, eng: MutexGuard<'_, Engine>) {
        let any = eng.sleepers > 0;
        drop(eng);
        if any {
            self.turn.notify_all();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drives every connection until batch `id` is done or needs its owner
    /// to open a connection; then hands the turn on.
    fn drive(&self, id: u64) {
        let _turn = TurnGuard(self);
        let mut poller = self.poller.lock().unwrap_or_else(PoisonError::into_inner);
        let (poll, events) = &mut *poller;
        loop {
            let timeout = {
                let mut eng = self.lock();
                let now = self.advance(&mut eng, events, Some(id));
                let b = &eng.batches[id];
                if b.is_done() || b.connect.is_some() {
                    return;
                }
                let next = match (eng.next_deadline(), eng.next_watch()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                next.map_or(self.config.op_timeout, |d| d.saturating_duration_since(now))
            };
            if !self.config.shm_poll.is_zero() && self.spin_for_input(self.config.shm_poll.min(timeout), poll, events) {
                continue;
            }
            if let Err(e) = poll.poll(events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                let mut eng = self.lock();
                eng.drop_all(&e);
                self.wake_sleepers(eng);
            }
        }
    }

    /// Looks at the shared-memory connections owed answers until one has
    /// input, another connection has an event (a poll without waiting,
    /// every few looks, so TCP answers are not held up by the spin), or
    /// `budget` passes; whether to skip the blocking poll (input is marked
    /// ready, events are in `events`).
    fn spin_for_input(&self, budget: Duration, poll: &mut Poll, events: &mut Events) -> bool {
        let until = Instant::now() + budget;
        for look in 0u32.. {
            match self.lock().mark_pending_input() {
                Some(true) => return true,
                None => return false,
                Some(false) => {}
            }
            if look % 8 == 7 && poll.poll(events, Some(Duration::ZERO)).is_ok() && !events.is_empty() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        }
        false
    }

    /// One pass of the driver without waiting: collects readiness and
    /// moves every connection's frames. The caller set `driving`.
    fn drive_pass(&self) {
        let _turn = TurnGuard(self);
        let mut poller = self.poller.lock().unwrap_or_else(PoisonError::into_inner);
        let (poll, events) = &mut *poller;
        if let Err(e) = poll.poll(events, Some(Duration::ZERO))
            && e.kind() != io::ErrorKind::Interrupted
        {
            self.lock().drop_all(&e);
            return;
        }
        self.advance(&mut self.lock(), events, None);
    }

    /// Applies the readiness `poll` reported, then posts and moves frames
    /// until nothing moves (or batch `until` is done), fails batches past
    /// their deadline and wakes the threads whose calls completed. Returns
    /// the time it looked at the clock.
    fn advance(&self, eng: &mut Engine, events: &mut Events, until: Option<u64>) -> Instant {
        for ev in events.iter().filter(|e| e.token() != WAKE) {
            eng.ready(ev);
        }
        events.clear();
        let mut wake_others = false;
        loop {
            let (posted, wants_connect) = eng.feed_all();
            let completed = eng.progress();
            // Payloads granted in this pass go out in the next.
            let split = eng.distribute_splits();
            wake_others |= completed > 0 || wants_connect;
            // Calls completed may let batches post more; stop once nothing
            // moves, or at once when the driver's own batch is done.
            if (posted == 0 && completed == 0 && split == 0) || until.is_some_and(|id| eng.batches[id].is_done()) {
                break;
            }
        }
        let now = Instant::now();
        wake_others |= eng.expire_due(now) > 0;
        if !self.config.ping_after.is_zero() && eng.next_watch().is_none_or(|t| now >= t) {
            let found = eng.watch_liveness(now);
            wake_others |= !found.stopped.is_empty();
            // Held for a ping's time only (not the deadline's 10 s): a lock
            // lease of 10 s must outlive a mistaken hold of its server.
            for peer in found.stopped {
                self.unanswered.timed_out(peer, self.config.ping_after.min(self.config.op_timeout), now);
            }
            for (peer, outcome) in found.probes {
                self.probe(peer, outcome);
            }
        }
        if wake_others && eng.sleepers > 0 {
            self.turn.notify_all();
        }
        now
    }
}

/// Gives up the driver's turn, also when the driver unwinds.
struct TurnGuard<'a>(&'a Endpoint);

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        let mut eng = self.0.lock();
        eng.driving = false;
        self.0.wake_sleepers(eng);
    }
}

/// Withdraws a batch whose owner leaves `run` without finishing it (only
/// by unwinding), so the engine keeps no view of the owner's buffers.
struct Abandon<'a> {
    ep: &'a Endpoint,
    id: u64,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        let mut eng = self.ep.lock();
        eng.cancel(self.id);
        eng.batches.remove(self.id);
        if eng.driving {
            let _ = self.ep.waker.wake();
        }
        self.ep.wake_sleepers(eng);
    }
}

/// `NetError` holds an `io::Error`, which is not `Clone`: calls that fail
/// together each get an equivalent error naming the same peer.
pub(crate) fn sibling(e: &NetError) -> NetError {
    match e {
        NetError::Timeout { addr, after } => NetError::Timeout { addr: *addr, after: *after },
        NetError::Unanswered { addr, ago } => NetError::Unanswered { addr: *addr, ago: *ago },
        NetError::Unreachable { addr, source } => {
            NetError::Unreachable { addr: *addr, source: io::Error::new(source.kind(), source.to_string()) }
        }
        NetError::Handshake { addr, reason } => NetError::Handshake { addr: *addr, reason: reason.clone() },
        NetError::Busy { addr, reason } => NetError::Busy { addr: *addr, reason: reason.clone() },
        NetError::Protocol { addr, source } => NetError::Protocol { addr: *addr, source: source.clone() },
        NetError::Violation { addr, what } => NetError::Violation { addr: *addr, what: what.clone() },
        NetError::Closed { addr, reason } => NetError::Closed { addr: *addr, reason: reason.clone() },
        NetError::Stopping { addr, reason } => NetError::Stopping { addr: *addr, reason: reason.clone() },
    }
}
