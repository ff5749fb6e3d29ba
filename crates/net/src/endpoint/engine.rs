//! The endpoint's shared state: its connections and the batches of every
//! thread using it. Every method runs with the endpoint's mutex held; the
//! socket calls it makes are non-blocking.

use super::batch::{Batch, CallRef};
use super::conns::{ConnId, Conns};
use super::slab::Slab;
use super::conn::Conn;
use crate::link::client::Hold;
use crate::transport::Transport;
use super::{sibling, Call, EndpointStats};
use crate::NetError;
use mio::{Interest, Registry};
use std::io;
use std::net::SocketAddr;
use std::time::Instant;

/// A connection of the endpoint: to server `peer`, rail `rail` (0 the
/// server's own connection, which carries every request; 1.. the extra
/// connections over which large payloads are split, see `rails.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ConnKey {
    pub(super) peer: SocketAddr,
    pub(super) rail: u8,
}

/// Looked up several times per call: an IPv4 key is hashed as one word
/// (the derived hash feeds the address's parts one by one).
impl std::hash::Hash for ConnKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self.peer {
            SocketAddr::V4(a) => state.write_u64(u64::from(a.ip().to_bits()) << 24 | u64::from(a.port()) << 8 | u64::from(self.rail)),
            SocketAddr::V6(a) => {
                state.write_u128(a.ip().to_bits());
                state.write_u64(u64::from(a.port()) << 40 | u64::from(a.flowinfo()) << 8 | u64::from(self.rail));
                state.write_u32(a.scope_id());
            }
        }
    }
}

impl ConnKey {
    pub(super) fn primary(peer: SocketAddr) -> Self {
        ConnKey { peer, rail: 0 }
    }
}

pub(super) enum Slot {
    /// A thread is opening it (outside the mutex); others wait.
    Connecting,
    Ready(Box<Conn>),
}

/// The batches the engine holds, by id.
pub(super) type Batches = Slab<Box<Batch>>;

#[derive(Default)]
pub(super) struct Engine {
    pub(super) conns: Conns,
    /// The connection of the endpoint's last call alone (`solo.rs`), by
    /// id: the next one to the same server skips the hash.
    pub(super) last_solo: Option<(ConnKey, ConnId)>,
    /// Rails per server (1: none), and what they carry (see `rails.rs`).
    pub(super) rails: super::rails::RailPlan,
    /// Silence before a ping, and a ping's wait (zero: no watch).
    pub(super) ping_after: std::time::Duration,
    /// When the liveness watch looks next (`liveness.rs`).
    pub(super) liveness: super::liveness::Schedule,
    /// Grants of payloads to split, as the connections reported them.
    pub(super) splits: Vec<(SocketAddr, crate::link::client::SplitGrant<CallRef>)>,
    pub(super) batches: Batches,
    /// Finished batches, kept with their call vectors for the next ones
    /// (a batch is made in place, and moved as a pointer: boxed, not kept
    /// in the vector itself).
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Batch>>,
    feed_ids: Vec<u64>,
    pub(super) next_msg: u64,
    /// A thread is driving the sockets (polling and advancing them).
    pub(super) driving: bool,
    /// Threads asleep on the endpoint's condition variable: waking nobody
    /// costs a system call, so it is skipped when this is 0.
    pub(super) sleepers: usize,
    pub(super) stats: EndpointStats,
    /// Servers this endpoint has had a connection to (a refused connect
    /// to one of them is a restart under way, not a wrong address).
    pub(super) known: std::collections::HashSet<SocketAddr>,
    pub(super) eager_limit: usize,
    /// See `EndpointConfig::idle_reuse`.
    pub(super) idle_reuse: std::time::Duration,
}

impl Engine {
    pub(super) fn new(eager_limit: usize, idle_reuse: std::time::Duration, rails: u8, ping_after: std::time::Duration) -> Self {
        Engine { next_msg: 1, eager_limit, idle_reuse, rails: super::rails::RailPlan::new(rails), ping_after, ..Engine::default() }
    }

    pub(super) fn add_batch(&mut self, calls: &mut [Call<'_>], window: usize, timeout: std::time::Duration, now: Instant) -> u64 {
        let mut b = self.spare.pop().unwrap_or_else(|| Box::new(Batch::empty(now)));
        b.refill(calls, window, timeout, now);
        self.batches.insert(b)
    }

    /// Posts what batch `id`'s window allows, in order, on ready
    /// connections; stops at a call whose server has no connection (and
    /// asks the owner to open it). Returns the number posted.
    pub(super) fn feed(&mut self, id: u64) -> usize {
        self.feed_at(id, None)
    }

    /// [`Engine::feed`] with the clock read at `clock` (a moment ago), if
    /// given, else when needed.
    pub(super) fn feed_at(&mut self, id: u64, mut clock: Option<Instant>) -> usize {
        let mut posted = 0;
        loop {
            let Some(b) = self.batches.get_mut(id) else { return posted };
            if b.next >= b.calls.len() || b.in_flight >= b.window || b.connect.is_some() {
                return posted;
            }
            let i = b.next;
            if b.calls[i].result.is_some() {
                // Failed before it was posted (refused, or its server is down).
                b.next += 1;
                continue;
            }
            let peer = b.calls[i].peer;
            let pay_len: usize = b.calls[i].send.iter().map(|v| v.len()).sum();
            // A payload to split needs its server's rails (after the
            // server's own connection: a server that is down costs one
            // connect timeout, not one per rail).
            if let Some(rail) = self.rails.missing(peer, pay_len, &self.conns) {
                let key = if matches!(self.conns.get(&ConnKey::primary(peer)), Some(Slot::Ready(_))) { rail } else { ConnKey::primary(peer) };
                if !matches!(self.conns.get(&key), Some(Slot::Connecting)) {
                    b.connect = Some(key);
                }
                return posted;
            }
            let conn = match self.conns.get_mut(&ConnKey::primary(peer)) {
                Some(Slot::Ready(c)) => c,
                Some(Slot::Connecting) => return posted,
                None => {
                    b.connect = Some(ConnKey::primary(peer));
                    return posted;
                }
            };
            // Coming out of idleness (the only time the clock is read).
            if conn.is_idle() {
                let now = clock.take().unwrap_or_else(Instant::now);
                if !conn.reusable(now, self.idle_reuse) {
                    self.drop_conn(ConnKey::primary(peer), closed_idle(peer));
                    continue;
                }
                conn.posted_at(now);
            }
            // Queued only: posting never fails here.
            let _ = post_call(conn, b, CallRef { batch: id, index: i }, pay_len, &mut self.next_msg, &mut self.stats, self.eager_limit, None);
            posted += 1;
        }
    }

    /// [`Engine::feed`] for every batch; returns the number posted and
    /// whether some batch now waits for its owner to connect.
    pub(super) fn feed_all(&mut self) -> (usize, bool) {
        // The ids' vector is kept, so a pass allocates nothing.
        let mut ids = std::mem::take(&mut self.feed_ids);
        ids.clear();
        ids.extend(self.batches.iter().map(|(id, _)| id));
        let posted = ids.iter().map(|&id| self.feed(id)).sum();
        self.feed_ids = ids;
        (posted, self.batches.values().any(|b| b.connect.is_some()))
    }

    /// Advances every connection that may make progress. Returns the
    /// number of calls completed.
    pub(super) fn progress(&mut self) -> usize {
        let mut completed = 0;
        let mut failed = Vec::new();
        let Engine { conns, batches, splits, .. } = self;
        for (&key, slot) in conns.iter_mut() {
            let Slot::Ready(c) = slot else { continue };
            let addr = key.peer;
            let mut step = || -> Result<(), NetError> {
                if c.readable {
                    let (answered, read) = c.advance_read(addr, batches);
                    completed += answered;
                    if c.link.has_splits() {
                        splits.extend(c.link.take_splits().map(|g| (addr, g)));
                    }
                    read?;
                }
                if c.writable && c.link.has_output() {
                    c.advance_write(addr, batches)?;
                }
                Ok(())
            };
            if let Err(e) = step() {
                failed.push((key, e));
            }
        }
        for (key, e) in failed {
            completed += self.drop_conn(key, e);
        }
        completed
    }

    /// Records readiness that `poll` reported for a connection.
    pub(super) fn ready(&mut self, ev: &mio::event::Event) {
        if let Some((_, Slot::Ready(c))) = self.conns.by_id_mut(ConnId::of_token(ev.token())) {
            c.on_event(ev);
        }
    }

    /// Marks ready every connection owed answers whose transport has
    /// input waiting (shared memory, seen without a system call). `None`
    /// if no shared-memory connection is owed answers (nothing to spin
    /// for), else whether one had input.
    pub(super) fn mark_pending_input(&mut self) -> Option<bool> {
        let (mut watched, mut any) = (false, false);
        for slot in self.conns.values_mut() {
            if let Slot::Ready(c) = slot
                && !c.link.is_idle()
                && c.transport.kind() == "shm"
            {
                watched = true;
                if c.transport.input_pending() {
                    c.readable = true;
                    c.writable = true;
                    any = true;
                }
            }
        }
        watched.then_some(any)
    }

    /// Drops a connection, failing every call still owed an answer on it
    /// with (a copy of) `e`. Returns how many calls that completed.
    pub(super) fn drop_conn(&mut self, key: ConnKey, e: NetError) -> usize {
        if !matches!(self.conns.get(&key), Some(Slot::Ready(_))) {
            return 0;
        }
        let Some(Slot::Ready(mut c)) = self.conns.remove(&key) else { return 0 };
        tracing::debug!(target: "weft::net", peer = %key.peer, rail = key.rail, error = %e, "connection dropped");
        // Closing the socket (when `c` drops) takes it out of the poller.
        self.stats.dropped_connections += 1;
        self.stats.placed += c.placed;
        if key.rail > 0 {
            // A rail is owed no answers: its parts go again on the server's
            // own connection, and no call fails with it.
            self.rail_lost(key, c.link.is_idle());
            return 0;
        }
        let mut completed = 0;
        for r in c.link.take_owed() {
            if let Some(b) = self.batches.get_mut(r.batch) {
                completed += b.complete(r.index, Err(sibling(&e)));
            }
        }
        completed
    }

    /// Fails every unanswered call of batches whose deadline has passed.
    /// Returns how many batches that ended.
    pub(super) fn expire_due(&mut self, now: Instant) -> usize {
        // Checked on every pass of the driver: no allocation unless due.
        if !self.batches.values().any(|b| !b.is_done() && b.deadline <= now) {
            return 0;
        }
        let due: Vec<u64> = self.batches.iter().filter(|(_, b)| !b.is_done() && b.deadline <= now).map(|(id, _)| id).collect();
        for &id in &due {
            self.cancel(id);
        }
        due.len()
    }

    /// Ends batch `id` now: its unanswered calls fail with `Timeout`, and
    /// no connection keeps anything of it.
    pub(super) fn cancel(&mut self, id: u64) {
        let Some(b) = self.batches.get_mut(id) else { return };
        let after = b.timeout;
        b.fail_rest(|addr| NetError::Timeout { addr, after });
        self.detach(id);
    }

    /// Makes sure no connection refers to batch `id` any more, so its
    /// owner's buffers may go: withdraws what can be withdrawn and drops
    /// connections left mid-frame (their other calls fail).
    pub(super) fn detach(&mut self, id: u64) -> usize {
        let mut broken = Vec::new();
        for (&key, slot) in self.conns.iter_mut() {
            let Slot::Ready(c) = slot else { continue };
            if c.is_idle() {
                continue;
            }
            match c.hold(id) {
                Hold::Nothing => {}
                Hold::Withdrawable => c.withdraw(id),
                Hold::MidFrame => broken.push(key),
            }
        }
        // Parts a rail still holds are parts the server's own connection
        // waits for: it goes too (as with a `Data` frame unsent).
        if broken.iter().any(|k| k.rail > 0) {
            let owners: Vec<ConnKey> = broken.iter().filter(|k| k.rail > 0).map(|k| ConnKey::primary(k.peer)).filter(|p| !broken.contains(p)).collect();
            // (A connection named twice is dropped once.)
            broken.extend(owners);
        }
        let n = broken.len();
        for key in broken {
            let addr = key.peer;
            let e = NetError::Unreachable {
                addr,
                source: io::Error::new(io::ErrorKind::TimedOut, "connection dropped: a call sharing it was abandoned mid-frame"),
            };
            self.drop_conn(key, e);
        }
        n
    }

    /// Takes a finished batch out, handing each call its result. Returns
    /// the number of connections that had to be dropped.
    pub(super) fn finish(&mut self, id: u64, calls: &mut [Call<'_>]) -> usize {
        let dropped = self.detach(id);
        self.take_out(id, calls);
        dropped
    }

    /// [`Engine::finish`] of a batch no connection holds anything of.
    pub(super) fn take_out(&mut self, id: u64, calls: &mut [Call<'_>]) {
        let mut b = self.batches.remove(id).expect("the owner's batch is in the engine");
        // Each call is left as `Batch::refill` takes it: no result, body
        // or views (no view of the caller's buffers outlives the call).
        for (c, bc) in calls.iter_mut().zip(b.calls.iter_mut()) {
            c.result = bc.result.take();
            // The caller may send it again (riding through a restart); the
            // body left behind is the caller's empty one.
            std::mem::swap(&mut c.body, &mut bc.body);
            bc.body.clear();
            // Their room stays, unless a list I/O call made it large.
            bc.send.clear();
            bc.recv.clear();
            if bc.send.capacity() > SPARE_VIEWS {
                bc.send = Vec::new();
            }
            if bc.recv.capacity() > SPARE_VIEWS {
                bc.recv = Vec::new();
            }
        }
        if self.spare.len() < SPARE_BATCHES && b.calls.capacity() <= SPARE_CALLS {
            self.spare.push(b);
        }
    }

    /// A connection opened by an owner thread.
    pub(super) fn install(&mut self, key: ConnKey, mut transport: Box<dyn Transport>, registry: &Registry) -> io::Result<()> {
        // Its id, under a mark until it is registered.
        let id = self.conns.insert(key, Slot::Connecting);
        // Writable too for shared memory, whose doorbells say room as well:
        // the wake-up when the server drains a doorbell has this side up by
        // the time the answer comes (a shorter round trip on a host slow to
        // wake a thread; docs/benchmarks.md, "The servers' share").
        if let Err(e) = registry.register(transport.source(), id.token(), Interest::READABLE | Interest::WRITABLE) {
            self.conns.remove(&key);
            return Err(e);
        }
        let mut conn = Conn::new(transport, id.token());
        if key.rail == 0 {
            conn.link.set_split_min(self.rails.split_min());
        } else {
            self.stats.rail_connects += 1;
        }
        if conn.transport.kind() == "shm" {
            self.stats.shm_connects += 1;
        }
        self.conns.insert(key, Slot::Ready(Box::new(conn)));
        self.stats.connects += 1;
        self.known.insert(key.peer);
        Ok(())
    }

    /// Opening `peer` failed: every call to it not yet posted, in every
    /// batch, fails with `e` at once (each would wait out its own connect).
    pub(super) fn connect_failed(&mut self, key: ConnKey, e: NetError) {
        if key.rail > 0 {
            // Calls go on without this rail (see `rails.rs`).
            self.rails.went_down(key.peer);
            return;
        }
        let peer = key.peer;
        for b in self.batches.values_mut() {
            for i in b.next..b.calls.len() {
                if b.calls[i].peer == peer {
                    b.complete(i, Err(sibling(&e)));
                }
            }
        }
    }

    /// The earliest deadline of an unfinished batch.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.batches.values().filter(|b| !b.is_done()).map(|b| b.deadline).min()
    }

    /// Fails every connection (the poller itself failed).
    pub(super) fn drop_all(&mut self, e: &io::Error) {
        let keys: Vec<ConnKey> = self.conns.iter().filter(|(_, s)| matches!(s, Slot::Ready(_))).map(|(&k, _)| k).collect();
        for key in keys {
            let addr = key.peer;
            self.drop_conn(key, NetError::Unreachable { addr, source: io::Error::new(e.kind(), e.to_string()) });
        }
    }
}

/// Batches kept for reuse (about one per thread in the endpoint), and the
/// most calls one may hold (a large batch goes back to the allocator).
const SPARE_BATCHES: usize = 8;
/// Views of a call's buffers a kept batch keeps room for.
const SPARE_VIEWS: usize = 16;
const SPARE_CALLS: usize = 64;

/// Posts call `at` of batch `b` on `conn`, its server's ready connection
/// (checked with [`Conn::reusable`] if it was idle), as the next message
/// (`next_msg`), eager up to `eager_limit` payload bytes, and counts it.
/// With `at_once` (the server's address) its frame is written at once if
/// nothing is queued before it ([`Conn::post_now`]: a call alone); an
/// error writing it is the connection's (the call is posted, and fails
/// when the connection is dropped).
#[allow(clippy::too_many_arguments)]
pub(super) fn post_call(conn: &mut Conn, b: &mut Batch, at: CallRef, pay_len: usize, next_msg: &mut u64, stats: &mut EndpointStats, eager_limit: usize, at_once: Option<SocketAddr>) -> Result<(), NetError> {
    let msg = *next_msg;
    *next_msg += 1;
    let eager = pay_len <= eager_limit;
    if eager { stats.eager += 1 } else { stats.rendezvous += 1 }
    let call = &mut b.calls[at.index];
    conn.used = true;
    call.posted = true;
    b.next += 1;
    b.in_flight += 1;
    match at_once {
        Some(addr) => conn.post_now(addr, msg, at, &b.calls[at.index], pay_len, eager),
        None => {
            conn.link.post(msg, at, &call.body, pay_len, eager);
            Ok(())
        }
    }
}

fn closed_idle(addr: SocketAddr) -> NetError {
    NetError::Unreachable { addr, source: io::Error::new(io::ErrorKind::UnexpectedEof, "idle connection closed by server") }
}
