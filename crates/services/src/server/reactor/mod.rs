//! The event loop of a server: one thread owns the listener and every
//! connection (accept, handshake, framing, sending), driven by epoll through
//! mio. Requests go to the worker pool; their results come back through a
//! channel and a waker. Nothing here blocks on a peer: sockets are
//! non-blocking, and every wait is an absolute deadline checked by a sweep.
//!
//! Per connection the loop keeps a [`Conn`] (the protocol, sans I/O), its
//! socket, and a FIFO of requests: one request of a connection is served at
//! a time, in arrival order (as a thread per connection did), while
//! different connections are served in parallel by the pool. A lock request
//! that must wait does not hold its connection's turn: it is answered later.
//!
//! Beside this file: `accept.rs` (new connections and the connection
//! limit), `dispatch.rs` (starting requests: on the loop or at the
//! pool), `rails.rs` (parts of one payload over several connections),
//! `sweep.rs` (deadlines, retries after memory returns, read turns, idle
//! connections taken back) and `drain.rs` (shutdown).

mod accept;
mod dispatch;
mod drain;
mod rails;
mod sweep;

use accept::max_connections;
use super::Server;
use super::conn_quota::ConnQuota;
use super::read_turns::ReadTurns;
use super::workers::{ConnRef, Done, Job, Replier, Verifier, VerifyJob, Workers};
use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};
use weft_net::budget::Charge;
use weft_net::budget::MemoryBudget;
use weft_net::link::frames::relent;
use weft_net::link::{ConnLimits, Event, Payload, ServerConn as Conn};
use weft_net::transport::Transport;
use weft_net::transport::shm::socket_addr;
use weft_wire::{ErrorCode, MsgId, Request, Response};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// Clients on this node asking for shared-memory rings.
const SHM_LISTENER: Token = Token(2);
/// Slot k is token k + FIRST_SLOT.
const FIRST_SLOT: usize = 3;

/// How often deadlines are checked: a deadline is enforced within this.
const SWEEP_EVERY: Duration = Duration::from_millis(200);

/// Most iovecs per `writev` (Linux's `IOV_MAX`).
const MAX_IOVECS: usize = 1024;

struct Slot {
    conn: Conn,
    stream: Box<dyn Transport>,
    /// The memory of a shared-memory connection's rings.
    _rings: Option<Charge>,
    peer: SocketAddr,
    generation: u64,
    /// Requests of this connection not yet dispatched, in arrival order.
    ready: VecDeque<Job>,
    /// Its requests with a worker or waiting for a read turn.
    in_service: usize,
    /// The connection waits for memory (a frame, a grant or a response buffer).
    stalled: bool,
    /// The user it is counted for (see [`ConnQuota`]).
    user: Option<u32>,
    /// Refused for its user's share of connections (not a bad request).
    over_quota: bool,
    /// A poll event saw the peer close (or an error): read until the end
    /// of stream, never stopping at a short read.
    read_closed: bool,
}

pub struct Reactor {
    server: Arc<Server>,
    poll: Poll,
    listener: TcpListener,
    /// `None` if the name was taken (clients then use TCP).
    shm_listener: Option<UnixListener>,
    /// Slots of shared-memory connections, and how long to look at their
    /// rings before blocking in `poll` (`WEFT_SHM_POLL_US`).
    shm_slots: Vec<usize>,
    shm_poll: Duration,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    next_gen: u64,
    live: usize,
    max_connections: usize,
    /// Connections per user, and which idle one makes room.
    quota: ConnQuota,
    /// The earliest idle start of any connection, as of the last sweep:
    /// at the limit, no connection is looked for before it is old enough
    /// (a flood of new connections costs no scan of every slot each).
    oldest_idle: Option<Instant>,
    limits: Arc<ConnLimits>,
    budget: Arc<MemoryBudget>,
    /// Shared-memory rings, apart from `budget`: idle local clients' rings
    /// must not take the memory requests need (`WEFT_SHM_MEMORY`).
    shm_budget: Arc<MemoryBudget>,
    workers: Workers,
    /// Directory changes pushed by other metadata shards, on a thread of
    /// their own: a shard pushing its changes waits only for this, never
    /// for client requests (which may themselves wait on a push).
    replicas: Workers,
    /// Checks MUNGE proofs off the loop.
    verifier: Verifier,
    done: Receiver<Done>,
    turns: ReadTurns<Job>,
    events: Vec<Event>,
    /// A write's iovecs, kept empty between writes (no allocation per write).
    iovecs: Vec<std::io::IoSlice<'static>>,
    /// Most requests of one connection served at once.
    per_connection: usize,
    /// Since a shutdown began: new requests are answered `Stopping`.
    draining: bool,
    /// Connections by rail token, and parts on their way between them.
    rails: rails::Rails,
}

impl Reactor {
    pub fn new(server: Arc<Server>, listener: std::net::TcpListener) -> io::Result<Self> {
        listener.set_nonblocking(true)?;
        let mut listener = TcpListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
        let shm_listener = match shm_listen(listener.local_addr()?) {
            Ok(mut l) => {
                poll.registry().register(&mut l, SHM_LISTENER, Interest::READABLE)?;
                Some(l)
            }
            Err(e) => {
                tracing::warn!(target: "weft::server", error = %e, "no shared-memory transport (clients on this node use TCP)");
                None
            }
        };
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (replier, done) = Replier::new(waker);
        let config = server.config.clone();
        // Enough workers for several disks' worth of blocking I/O at once.
        let workers = Workers::start(config.threads, server.clone(), &replier);
        let replicas = Workers::start(1, server.clone(), &replier);
        let verifier = Verifier::start(server.clone(), &replier);
        let budget = server.budget.clone();
        let turns = ReadTurns::new(server.id, config.read_slots);
        let max_connections = max_connections(config.max_connections);
        server.connection_limit.store(max_connections as u64, std::sync::atomic::Ordering::Relaxed);
        let mut limits = config.conn_limits.clone();
        // One connection holds an eighth of the budget at most: a client
        // that asks and never reads its answers (held until the send
        // deadline cuts it) leaves the rest to others.
        limits.memory_share = limits.memory_share.min((budget.limit() / 8).max(2 * u64::from(weft_wire::limits::MAX_BODY_LEN)));
        let limits = Arc::new(limits);
        if limits.idle_timeout < 2 * weft_net::IDLE_REUSE + Duration::from_secs(20) {
            tracing::warn!(target: "weft::server", timeout = ?limits.idle_timeout, "an idle timeout under 2 minutes (WEFT_IDLE_TIMEOUT_MS) is for tests: clients reuse a connection idle for up to 50 s, and may post on one this server is closing");
        }
        Ok(Reactor {
            server,
            poll,
            listener,
            shm_listener,
            shm_slots: Vec::new(),
            shm_poll: config.shm_poll,
            slots: Vec::new(),
            free: Vec::new(),
            next_gen: 0,
            live: 0,
            max_connections,
            quota: ConnQuota::new(max_connections, config.max_connections_per_user, limits.idle_timeout),
            oldest_idle: None,
            limits,
            budget,
            shm_budget: MemoryBudget::new(config.shm_memory),
            workers,
            replicas,
            verifier,
            done,
            turns,
            events: Vec::new(),
            iovecs: Vec::new(),
            // A client multiplexes all its threads on one connection per
            // server: one request at a time would serialize them (and
            // keep creates from committing as one group).
            per_connection: config.conn_parallel,
            draining: false,
            rails: rails::Rails::default(),
        })
    }

    /// Serves until `shutdown` is triggered and the server drained (see
    /// [`super::shutdown`]).
    pub fn run(mut self, shutdown: &super::Shutdown) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        // The clock as of the last pass (one read per pass).
        let mut now = Instant::now();
        let mut next_sweep = now + SWEEP_EVERY;
        let mut drain_until: Option<Instant> = None;
        loop {
            if shutdown.is_triggered() {
                let until = *drain_until.get_or_insert_with(|| self.start_drain());
                if self.drained() || Instant::now() >= until {
                    tracing::info!(target: "weft::server", drained = self.drained(), "stopping");
                    self.say_goodbye();
                    return Ok(());
                }
            }
            // From the last pass's clock: the sweep is late by a pass at most.
            let timeout = next_sweep.saturating_duration_since(now);
            // Draining: look often whether the last answers went out.
            let timeout = if drain_until.is_some() { timeout.min(Duration::from_millis(10)) } else { timeout };
            let (spun, polled) = self.spin_for_input(self.shm_poll.min(timeout), &mut events);
            if !polled
                && let Err(e) = self.poll.poll(&mut events, Some(if spun.is_empty() { timeout } else { Duration::ZERO }))
                && e.kind() != io::ErrorKind::Interrupted
            {
                return Err(e);
            }
            // One clock read for the pass: deadlines start and requests
            // count their latency from when the poll returned.
            now = Instant::now();
            let mut woken = false;
            for ev in &events {
                match ev.token() {
                    LISTENER => self.accept(),
                    SHM_LISTENER => self.accept_shm(),
                    WAKER => woken = true,
                    Token(t) => {
                        let k = t - FIRST_SLOT;
                        if let Some(Some(slot)) = self.slots.get_mut(k) {
                            let closed = ev.is_read_closed() || ev.is_error();
                            slot.stream.on_event(ev.is_readable(), ev.is_writable(), closed);
                            slot.read_closed |= closed;
                        }
                        self.service_contained(k, now);
                    }
                }
            }
            // Rings found with input while spinning (no doorbell came).
            for k in spun {
                self.service_contained(k, now);
            }
            // Every result sent wakes the loop (`Replier::send`): none waits
            // unless the waker rang.
            if woken {
                self.completions();
            }
            if now >= next_sweep {
                self.sweep(now);
                next_sweep = now + SWEEP_EVERY;
            }
        }
    }

    /// Looks at the shared-memory connections' rings until one has input,
    /// another connection or the listener has an event (a poll without
    /// waiting, every few looks, so TCP clients are not held up by the
    /// spin), or `budget` passes (nothing when it is zero). Returns the
    /// slots with input, and whether `events` holds a poll's events.
    fn spin_for_input(&mut self, budget: Duration, events: &mut Events) -> (Vec<usize>, bool) {
        if budget.is_zero() || self.shm_slots.is_empty() {
            return (Vec::new(), false);
        }
        let until = Instant::now() + budget;
        for look in 0u32.. {
            let ready: Vec<usize> = self.shm_slots.iter().copied().filter(|&k| matches!(self.slots.get(k), Some(Some(s)) if s.stream.input_pending())).collect();
            if !ready.is_empty() || Instant::now() >= until {
                return (ready, false);
            }
            if look % 8 == 7 && self.poll.poll(events, Some(Duration::ZERO)).is_ok() && !events.is_empty() {
                return (Vec::new(), true);
            }
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        }
        (Vec::new(), false)
    }

    /// [`Reactor::service`], with a panic (a bug) costing only this
    /// connection: it is closed, and the loop goes on.
    fn service_contained(&mut self, k: usize, now: Instant) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.service(k, now)));
        if r.is_err() {
            self.close_after_panic(k);
        }
    }

    fn close_after_panic(&mut self, k: usize) {
        self.server.count_panic();
        tracing::error!(target: "weft::server", slot = k, "serving a connection panicked; closing it");
        // Parts it read for others go with it (not blamed on the next reader).
        self.rails.drop_in_transit();
        if let Some(Some(slot)) = self.slots.get_mut(k) {
            slot.conn.abort("the server failed while serving this connection");
        }
        self.close(k);
    }

    /// Reads what the connection may take, hands out its requests, sends
    /// what it has queued, and closes it if it is done.
    fn service(&mut self, k: usize, now: Instant) {
        // Edge-triggered readiness: a connection that paused with bytes
        // still in its socket gets no new event for them, so after its
        // requests are dispatched (inline ones answered at once) and its
        // answers sent, reading resumes here until the socket is empty.
        loop {
            let paused = self.read_some(k, now);
            self.route_parts(k, now);
            self.dispatch(k, now);
            self.flush(k, now);
            let resumable = matches!(self.slots.get(k), Some(Some(slot)) if slot.conn.may_read() && !slot.conn.is_stalled());
            if !(paused && resumable) {
                return;
            }
        }
    }

    /// Reads into the windows the connection offers (`ServerConn::rx_window`), until the socket
    /// is empty (`false`) or the connection pauses (`true`); queues the
    /// requests that completed.
    fn read_some(&mut self, k: usize, now: Instant) -> bool {
        let Some(Some(slot)) = self.slots.get_mut(k) else { return false };
        let mut events = std::mem::take(&mut self.events);
        let gate = &self.server.gate;
        let mut paused = true;
        // Bytes read ahead earlier come first (left when the connection paused).
        slot.conn.pump(now, gate, &mut events);
        let drains = slot.stream.short_read_drains() && !slot.read_closed;
        while let Some(window) = slot.conn.rx_window() {
            let asked = window.len();
            match slot.stream.read(window) {
                Ok(0) => {
                    if !slot.conn.is_idle() {
                        tracing::debug!(target: "weft::server", peer = %slot.peer, "peer closed mid-exchange");
                    }
                    slot.conn.abort("peer closed the connection");
                    paused = false;
                    break;
                }
                Ok(n) => {
                    slot.conn.received(n, now, gate, &mut events);
                    if n < asked && drains {
                        // Nothing more waits in the socket (what comes
                        // raises an event); bytes the connection left in
                        // its stage, paused, are handed on once it resumes.
                        paused = slot.conn.has_staged();
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    paused = false;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    slot.conn.abort(format!("read failed: {e}"));
                    paused = false;
                    break;
                }
            }
        }
        slot.stalled = slot.conn.is_stalled();
        let conn = ConnRef { slot: k, generation: slot.generation };
        for ev in events.drain(..) {
            match ev {
                // A ping goes first: clients ping a server that is slow to
                // answer to learn whether it is alive (`weft_net`'s
                // liveness watch), and the answer must not wait for the
                // work the connection has in service.
                Event::Request { id, req, payload } if matches!(*req, Request::Ping) => slot.ready.push_front(job(conn, slot.user, id, req, payload, now)),
                Event::Request { id, req, payload } => slot.ready.push_back(job(conn, slot.user, id, req, payload, now)),
                Event::Part { token, id, offset, payload } => self.rails.hold(token, id, offset, payload),
                Event::Refused => self.server.count_bad_request(),
                Event::Ready => admit_user(&mut self.quota, slot, &self.server, now),
                Event::Verify { hello, challenge, cred } => self.verifier.submit(VerifyJob { conn, hello, challenge, cred }),
            }
        }
        self.events = events;
        paused
    }

    /// Writes queued frames until the socket would block.
    fn flush(&mut self, k: usize, now: Instant) {
        let Some(Some(slot)) = self.slots.get_mut(k) else { return };
        while slot.conn.has_output() {
            let mut slices = relent(std::mem::take(&mut self.iovecs));
            slot.conn.tx_slices_into(MAX_IOVECS, &mut slices);
            let written = slot.stream.write_vectored(&slices);
            self.iovecs = relent(slices);
            match written {
                Ok(0) => {
                    slot.conn.abort("peer stopped taking data");
                    break;
                }
                Ok(n) => slot.conn.sent(n, now),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    slot.conn.abort(format!("write failed: {e}"));
                    break;
                }
            }
        }
        if slot.conn.wants_close() {
            self.close(k);
        }
    }

    fn close(&mut self, k: usize) {
        let Some(mut slot) = self.slots[k].take() else { return };
        self.rails.forget(slot.conn.rail_token());
        if let Some(why) = slot.conn.closing() {
            tracing::debug!(target: "weft::server", peer = %slot.peer, reason = %why.0, "connection closed");
            // Closes that are nobody's fault are not bad requests.
            if !why.0.starts_with("peer closed") && !why.0.starts_with(weft_net::link::server::IDLE_CLOSE) && !slot.over_quota {
                self.server.count_bad_request();
            }
        }
        let _ = self.poll.registry().deregister(slot.stream.source());
        self.quota.release(slot.user);
        self.shm_slots.retain(|&s| s != k);
        self.free.push(k);
        self.live -= 1;
        self.server.connections.store(self.live as u64, std::sync::atomic::Ordering::Relaxed);
        self.server.shm_connections.store(self.shm_slots.len() as u64, std::sync::atomic::Ordering::Relaxed);
        // Dropping the slot returns its buffers' memory; jobs already with
        // workers come back with an old generation and are dropped then.
    }

    fn slot_of(&mut self, c: ConnRef) -> Option<&mut Slot> {
        slot_in(&mut self.slots, c)
    }

    /// Takes the workers' results to their connections.
    fn completions(&mut self) {
        let mut touched = Vec::new();
        while let Ok(d) = self.done.try_recv() {
            let now = Instant::now();
            match d {
                Done::Job { conn, id, answer, turn, lent } => {
                    if let Some(file) = turn {
                        self.next_turn(file);
                    }
                    if let Some(slot) = self.slot_of(conn) {
                        slot.in_service = slot.in_service.saturating_sub(1);
                        if let Some((mut rsp, payload)) = answer {
                            // Before the answer: a client that has the
                            // answer finds the descriptor in its socket.
                            if let Some(f) = lent
                                && let Err(e) = slot.stream.lend(std::os::fd::AsFd::as_fd(&f))
                            {
                                rsp = Response::error(weft_wire::ErrorCode::Io, format!("cannot lend the object over this connection: {e}"));
                            }
                            slot.conn.respond(id, &rsp, payload, now);
                        }
                        touched.push(conn.slot);
                    }
                }
                Done::Late { conn, id, rsp, payload } => {
                    if let Some(slot) = self.slot_of(conn) {
                        slot.conn.respond(id, &rsp, payload, now);
                        touched.push(conn.slot);
                    }
                }
                Done::Verified { conn, outcome } => {
                    // (The slots alone are borrowed: the quota is too.)
                    if let Some(slot) = slot_in(&mut self.slots, conn) {
                        // Only `Ready` can come of it: nothing to queue.
                        let mut events = Vec::new();
                        slot.conn.verified(outcome, now, &mut events);
                        if events.iter().any(|e| matches!(e, Event::Ready)) {
                            admit_user(&mut self.quota, slot, &self.server, now);
                        }
                        touched.push(conn.slot);
                    }
                }
            }
        }
        if touched.is_empty() {
            return;
        }
        let now = Instant::now();
        for k in touched {
            self.service_contained(k, now);
        }
        // Memory came back: connections that waited for it try again.
        let stalled: Vec<usize> = self.slots.iter().enumerate().filter(|(_, s)| s.as_ref().is_some_and(|s| s.stalled)).map(|(k, _)| k).collect();
        for k in stalled {
            self.retry(k, now);
        }
    }
}

/// A request of connection `conn` (counted for `user`) as the loop queues it.
fn job(conn: ConnRef, user: Option<u32>, id: MsgId, req: Box<Request>, payload: Payload, now: Instant) -> Job {
    Job { conn, id, req, payload, out_charge: None, body_charge: None, turn: None, user, arrived: now }
}

/// The slot `c` names, if that connection still holds it.
fn slot_in(slots: &mut [Option<Slot>], c: ConnRef) -> Option<&mut Slot> {
    slots.get_mut(c.slot)?.as_mut().filter(|s| s.generation == c.generation)
}

/// A connection finished its handshake: counted for its user, or failed
/// with the reason if that user holds its share (the client reads it).
fn admit_user(quota: &mut ConnQuota, slot: &mut Slot, server: &Server, now: Instant) {
    match quota.admit(slot.conn.identity()) {
        Ok(Some((uid, account))) => {
            slot.user = Some(uid);
            slot.conn.use_account(account);
        }
        Ok(None) => {}
        Err(why) => {
            server.count_refused_connection();
            slot.over_quota = true;
            slot.conn.fail(ErrorCode::Busy, why, now);
        }
    }
}

/// Listens for clients on this node on the abstract socket named after
/// the server's TCP address (`weft_net::transport::shm`).
fn shm_listen(addr: SocketAddr) -> io::Result<UnixListener> {
    let l = std::os::unix::net::UnixListener::bind_addr(&socket_addr(addr)?)?;
    l.set_nonblocking(true)?;
    Ok(UnixListener::from_std(l))
}

