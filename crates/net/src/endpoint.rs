//! The client side of the message layer: a post/advance engine.
//!
//! The caller builds a batch of [`Call`]s (request body, payload to send as
//! borrowed slices, buffers to receive the response payload into) and hands
//! them to [`Endpoint::run`], which posts them all and advances every
//! connection until each call has a result or the deadline passes. There is
//! no background thread: the caller's thread does the I/O, so payloads move
//! between the socket and the caller's own buffers with no staging copy.
//!
//! Per call:
//!
//! | payload size            | frames                                            |
//! |-------------------------|---------------------------------------------------|
//! | `<= eager_limit`        | `Request(body, payload)` -> `Response`            |
//! | `>  eager_limit`        | `Rts(body)` -> `Cts` -> `Data(payload)` -> `Response` |
//!
//! Connections are opened lazily on first use and kept; a connection that
//! breaks fails only the calls on it, and is dropped so the next batch
//! reconnects. A batch that ends with a connection mid-frame (timeout) drops
//! that connection too, so no stale bytes or borrowed buffers outlive `run`.

use crate::handshake::client_handshake;
use crate::NetError;
use mio::net::TcpStream as MioStream;
use mio::{Events, Interest, Poll, Token};
use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use weft_wire::{FrameKind, Header, MsgId, Secret, HEADER_LEN};

/// Most iovecs handed to one `writev`/`readv`: Linux's `IOV_MAX`, so a
/// list-I/O payload of many small pieces goes out in few calls.
const MAX_IOVECS: usize = 1024;

/// Tunables of an endpoint.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// Payloads up to this size travel in the request frame; larger ones use
    /// a rendezvous. 64 KiB: below it the extra round trip costs more than
    /// the receiver's buffering; above it the receiver should choose.
    pub eager_limit: usize,
    pub connect_timeout: Duration,
    /// Deadline for one batch of calls (`WEFT_TIMEOUT_MS`).
    pub op_timeout: Duration,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        let op_ms = std::env::var("WEFT_TIMEOUT_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(30_000);
        EndpointConfig {
            eager_limit: 64 * 1024,
            connect_timeout: Duration::from_secs(3),
            op_timeout: Duration::from_millis(op_ms),
        }
    }
}

/// One request and where its answer goes.
#[derive(Debug)]
pub struct Call<'a> {
    pub peer: SocketAddr,
    /// The encoded request body.
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

/// A response: its body and how many payload bytes landed in `recv`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub body: Vec<u8>,
    pub payload_len: usize,
}

/// Counters, as HG counts its extra-buffer RPCs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    pub connects: u64,
    pub eager: u64,
    pub rendezvous: u64,
    pub dropped_connections: u64,
}

struct Conn {
    stream: MioStream,
}

/// A client endpoint: its connections and its poller.
pub struct Endpoint {
    secret: Secret,
    config: EndpointConfig,
    conns: HashMap<SocketAddr, Conn>,
    poll: Poll,
    events: Events,
    next_token: usize,
    next_msg: u64,
    stats: EndpointStats,
}

/// A frame waiting to go out: header and body, then payload slices.
struct Out<'s> {
    head: Vec<u8>,
    payload: &'s [&'s [u8]],
    /// Bytes of this frame already written.
    pos: usize,
}

impl Out<'_> {
    fn total(&self) -> usize {
        self.head.len() + self.payload.iter().map(|p| p.len()).sum::<usize>()
    }
}

enum Rx {
    Header { buf: [u8; HEADER_LEN], filled: usize },
    Body { head: Header, buf: Vec<u8>, filled: usize },
    Payload { call: usize, id: u64, body: Vec<u8>, total: usize, done: usize },
}

impl Rx {
    fn idle() -> Self {
        Rx::Header { buf: [0; HEADER_LEN], filled: 0 }
    }
    fn is_idle(&self) -> bool {
        matches!(self, Rx::Header { filled: 0, .. })
    }
}

/// Per-batch state of one connection.
struct Lane<'s> {
    addr: SocketAddr,
    out: VecDeque<Out<'s>>,
    rx: Rx,
    /// msg id -> call index, for calls posted on this lane and not answered.
    pending: HashMap<u64, usize>,
    /// msg id -> call index, for rendezvous calls whose `Cts` has not come.
    awaiting_cts: HashMap<u64, usize>,
    failed: bool,
}

impl Endpoint {
    pub fn new(secret: Secret, config: EndpointConfig) -> io::Result<Self> {
        Ok(Endpoint {
            secret,
            config,
            conns: HashMap::new(),
            poll: Poll::new()?,
            events: Events::with_capacity(64),
            next_token: 0,
            next_msg: 1,
            stats: EndpointStats::default(),
        })
    }

    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    pub fn stats(&self) -> EndpointStats {
        self.stats
    }

    /// Runs one call alone; a shorthand for request/response exchanges.
    pub fn call(&mut self, peer: SocketAddr, body: Vec<u8>) -> Result<Reply, NetError> {
        let mut calls = [Call::new(peer, body)];
        self.run(&mut calls);
        let [c] = calls;
        c.result.expect("run fills every result")
    }

    /// Makes sure a live, handshaken connection to `addr` exists.
    fn ensure_conn(&mut self, addr: SocketAddr) -> Result<(), NetError> {
        if let Some(c) = self.conns.get(&addr) {
            // An idle connection must have nothing to read; EOF or stray bytes
            // mean the server restarted or misbehaved: reconnect.
            let mut b = [0u8; 1];
            match c.stream.peek(&mut b) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                _ => self.drop_conn(addr),
            }
        }
        let unreachable = |source| NetError::Unreachable { addr, source };
        let mut s = TcpStream::connect_timeout(&addr, self.config.connect_timeout).map_err(unreachable)?;
        s.set_nodelay(true).map_err(unreachable)?;
        s.set_read_timeout(Some(self.config.connect_timeout)).map_err(unreachable)?;
        s.set_write_timeout(Some(self.config.connect_timeout)).map_err(unreachable)?;
        client_handshake(&mut s, addr, &self.secret, rand::random())?;
        s.set_read_timeout(None).map_err(unreachable)?;
        s.set_write_timeout(None).map_err(unreachable)?;
        s.set_nonblocking(true).map_err(unreachable)?;
        let mut stream = MioStream::from_std(s);
        let token = Token(self.next_token);
        self.next_token += 1;
        self.poll.registry().register(&mut stream, token, Interest::READABLE | Interest::WRITABLE).map_err(unreachable)?;
        self.conns.insert(addr, Conn { stream });
        self.stats.connects += 1;
        Ok(())
    }

    fn drop_conn(&mut self, addr: SocketAddr) {
        if let Some(mut c) = self.conns.remove(&addr) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            self.stats.dropped_connections += 1;
        }
    }

    /// Posts every call and advances until each has a result (success, its
    /// own error, or a timeout after `op_timeout`).
    pub fn run(&mut self, calls: &mut [Call<'_>]) {
        self.run_window(calls, usize::MAX);
    }

    /// Like [`Endpoint::run`], with at most `window` calls in flight: calls
    /// are posted in slice order, the next one as soon as one completes.
    /// This is how a scheduling strategy's order becomes the order on the
    /// wire (window 1 is the paper's one transfer per client at a time).
    pub fn run_window(&mut self, calls: &mut [Call<'_>], window: usize) {
        let window = window.max(1);
        let deadline = Instant::now() + self.config.op_timeout;
        // Split the calls into what the writer reads and what the reader fills.
        let mut sends: Vec<&[&[u8]]> = Vec::with_capacity(calls.len());
        let mut recvs: Vec<&mut Vec<&mut [u8]>> = Vec::with_capacity(calls.len());
        let mut results: Vec<&mut Option<Result<Reply, NetError>>> = Vec::with_capacity(calls.len());
        let mut posts: Vec<(SocketAddr, Vec<u8>)> = Vec::with_capacity(calls.len());
        for c in calls.iter_mut() {
            let Call { peer, body, send, recv, result } = c;
            *result = None;
            posts.push((*peer, std::mem::take(body)));
            sends.push(&send[..]);
            recvs.push(recv);
            results.push(result);
        }
        let n = posts.len();
        let mut lanes: Vec<Lane<'_>> = Vec::new();
        let mut lane_of: HashMap<SocketAddr, usize> = HashMap::new();
        let (mut posted, mut done) = (0usize, 0usize);
        loop {
            while posted < n && posted - done < window {
                let i = posted;
                posted += 1;
                let peer = posts[i].0;
                let lane = match lane_of.get(&peer) {
                    Some(&l) => l,
                    None => {
                        if let Err(e) = self.ensure_conn(peer) {
                            tracing::debug!(target: "weft::net", %peer, error = %e, "connect failed");
                            *results[i] = Some(Err(e));
                            done += 1;
                            continue;
                        }
                        lanes.push(Lane {
                            addr: peer,
                            out: VecDeque::new(),
                            rx: Rx::idle(),
                            pending: HashMap::new(),
                            awaiting_cts: HashMap::new(),
                            failed: false,
                        });
                        lane_of.insert(peer, lanes.len() - 1);
                        lanes.len() - 1
                    }
                };
                let body = std::mem::take(&mut posts[i].1);
                self.post(&mut lanes[lane], i, &body, sends[i]);
            }
            for lane in lanes.iter_mut().filter(|l| !l.failed) {
                let conn = self.conns.get_mut(&lane.addr).expect("lane has a connection");
                let outcome = advance_read(conn, lane, &sends, &mut recvs, &mut results, &mut done)
                    .and_then(|()| advance_write(conn, lane));
                if let Err(e) = outcome {
                    done += fail_lane(lane, e, &mut results);
                }
            }
            for lane in lanes.iter().filter(|l| l.failed) {
                if lane_of.get(&lane.addr).is_some_and(|&l| std::ptr::eq(&lanes[l], lane)) {
                    // Later calls to this peer get a fresh connection attempt.
                    lane_of.remove(&lane.addr);
                    self.drop_conn(lane.addr);
                }
            }
            if done == n {
                break;
            }
            if posted < n && posted - done < window {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                for lane in lanes.iter_mut().filter(|l| !l.failed) {
                    let e = NetError::Timeout { addr: lane.addr, after: self.config.op_timeout };
                    fail_lane(lane, e, &mut results);
                }
                for (i, r) in results.iter_mut().enumerate().skip(posted) {
                    **r = Some(Err(NetError::Timeout { addr: posts[i].0, after: self.config.op_timeout }));
                }
                break;
            }
            if let Err(e) = self.poll.poll(&mut self.events, Some(deadline - now))
                && e.kind() != io::ErrorKind::Interrupted
            {
                for lane in lanes.iter_mut().filter(|l| !l.failed) {
                    let err = NetError::Unreachable { addr: lane.addr, source: io::Error::new(e.kind(), e.to_string()) };
                    done += fail_lane(lane, err, &mut results);
                }
            }
        }
        // A connection left mid-frame cannot be reused: its next bytes belong
        // to a batch that is gone.
        for lane in &lanes {
            let idle = lane.out.is_empty() && lane.pending.is_empty() && lane.rx.is_idle();
            if (lane.failed || !idle) && self.conns.contains_key(&lane.addr) {
                self.drop_conn(lane.addr);
            }
        }
        debug_assert!(results.iter().all(|r| r.is_some()));
    }

    /// Queues call `i` on `lane`: eagerly, or as a rendezvous request.
    fn post<'s>(&mut self, lane: &mut Lane<'s>, i: usize, body: &[u8], payload: &'s [&'s [u8]]) {
        let id = self.next_msg;
        self.next_msg += 1;
        let pay_len: usize = payload.iter().map(|p| p.len()).sum();
        let (kind, frame_payload): (FrameKind, &[&[u8]]) = if pay_len <= self.config.eager_limit {
            self.stats.eager += 1;
            (FrameKind::Request, payload)
        } else {
            self.stats.rendezvous += 1;
            lane.awaiting_cts.insert(id, i);
            (FrameKind::Rts, &[])
        };
        let mut head = Header::new(kind, MsgId(id), body.len(), pay_len).encode().to_vec();
        head.extend_from_slice(body);
        lane.out.push_back(Out { head, payload: frame_payload, pos: 0 });
        lane.pending.insert(id, i);
    }
}

/// Fails every call pending on `lane`; returns how many.
fn fail_lane(lane: &mut Lane<'_>, e: NetError, results: &mut [&mut Option<Result<Reply, NetError>>]) -> usize {
    tracing::debug!(target: "weft::net", peer = %lane.addr, error = %e, "connection failed");
    lane.failed = true;
    for (_, &i) in lane.pending.iter() {
        *results[i] = Some(Err(sibling(&e)));
    }
    let n = lane.pending.len();
    lane.pending.clear();
    lane.awaiting_cts.clear();
    lane.out.clear();
    n
}

/// `NetError` holds an `io::Error`, which is not `Clone`: calls that fail
/// together each get an equivalent error naming the same peer.
fn sibling(e: &NetError) -> NetError {
    match e {
        NetError::Timeout { addr, after } => NetError::Timeout { addr: *addr, after: *after },
        NetError::Unreachable { addr, source } => {
            NetError::Unreachable { addr: *addr, source: io::Error::new(source.kind(), source.to_string()) }
        }
        NetError::Handshake { addr, reason } => NetError::Handshake { addr: *addr, reason: reason.clone() },
        NetError::Busy { addr, reason } => NetError::Busy { addr: *addr, reason: reason.clone() },
        NetError::Protocol { addr, source } => NetError::Protocol { addr: *addr, source: source.clone() },
        NetError::Violation { addr, what } => NetError::Violation { addr: *addr, what: what.clone() },
    }
}

fn violation(addr: SocketAddr, what: impl Into<String>) -> NetError {
    NetError::Violation { addr, what: what.into() }
}

fn io_fail(addr: SocketAddr, e: io::Error) -> NetError {
    NetError::Unreachable { addr, source: e }
}

fn closed(addr: SocketAddr) -> NetError {
    io_fail(addr, io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by server"))
}

/// Writes queued frames until the queue is empty or the socket would block.
fn advance_write(conn: &mut Conn, lane: &mut Lane<'_>) -> Result<(), NetError> {
    while !lane.out.is_empty() {
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(MAX_IOVECS);
        'gather: for out in lane.out.iter() {
            let mut skip = out.pos;
            for part in std::iter::once(&out.head[..]).chain(out.payload.iter().copied()) {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                slices.push(IoSlice::new(&part[skip..]));
                skip = 0;
                if slices.len() == MAX_IOVECS {
                    break 'gather;
                }
            }
        }
        let mut n = match conn.stream.write_vectored(&slices) {
            Ok(0) => return Err(closed(lane.addr)),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_fail(lane.addr, e)),
        };
        while n > 0 {
            let front = lane.out.front_mut().expect("bytes written belong to queued frames");
            let left = front.total() - front.pos;
            if n >= left {
                n -= left;
                lane.out.pop_front();
            } else {
                front.pos += n;
                n = 0;
            }
        }
    }
    Ok(())
}

/// Reads frames until the socket would block, completing calls as their
/// responses arrive and queueing rendezvous data on `Cts`.
fn advance_read<'s>(
    conn: &mut Conn,
    lane: &mut Lane<'s>,
    sends: &[&'s [&'s [u8]]],
    recvs: &mut [&mut Vec<&mut [u8]>],
    results: &mut [&mut Option<Result<Reply, NetError>>],
    completed: &mut usize,
) -> Result<(), NetError> {
    let addr = lane.addr;
    loop {
        let n = match &mut lane.rx {
            Rx::Header { buf, filled } => conn.stream.read(&mut buf[*filled..]),
            Rx::Body { buf, filled, .. } => conn.stream.read(&mut buf[*filled..]),
            Rx::Payload { call, done, total, .. } => {
                // Exactly the rest of this frame's payload: the caller's
                // buffers may be longer, and the bytes after this frame
                // belong to the next one.
                let mut skip = *done;
                let mut want = *total - *done;
                let mut iov: Vec<IoSliceMut<'_>> = Vec::with_capacity(MAX_IOVECS);
                for dst in recvs[*call].iter_mut() {
                    if skip >= dst.len() {
                        skip -= dst.len();
                        continue;
                    }
                    let take = (dst.len() - skip).min(want);
                    iov.push(IoSliceMut::new(&mut dst[skip..skip + take]));
                    skip = 0;
                    want -= take;
                    if want == 0 || iov.len() == MAX_IOVECS {
                        break;
                    }
                }
                conn.stream.read_vectored(&mut iov)
            }
        };
        let n = match n {
            Ok(0) => {
                // End of stream: fine between batches only if nothing is owed.
                if lane.rx.is_idle() && lane.pending.is_empty() {
                    return Ok(());
                }
                return Err(closed(addr));
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_fail(addr, e)),
        };
        // Advance the receive state machine by `n` bytes.
        let next = match &mut lane.rx {
            Rx::Header { buf, filled } => {
                *filled += n;
                if *filled < HEADER_LEN {
                    continue;
                }
                let head = Header::decode(buf).map_err(|source| NetError::Protocol { addr, source })?;
                Some(Rx::Body { head, buf: vec![0; head.body_len as usize], filled: 0 })
            }
            Rx::Body { filled, .. } => {
                *filled += n;
                None
            }
            Rx::Payload { done, .. } => {
                *done += n;
                None
            }
        };
        if let Some(rx) = next {
            lane.rx = rx;
        }
        // Frames may complete without further reads (empty body or payload).
        loop {
            match std::mem::replace(&mut lane.rx, Rx::idle()) {
                Rx::Body { head, buf, filled } if filled == buf.len() => {
                    let id = head.msg_id.0;
                    match head.kind {
                        FrameKind::Cts => {
                            let call = lane.awaiting_cts.remove(&id).ok_or_else(|| violation(addr, format!("Cts for unknown message {id}")))?;
                            let payload = sends[call];
                            let pay_len: usize = payload.iter().map(|p| p.len()).sum();
                            let head = Header::new(FrameKind::Data, MsgId(id), 0, pay_len).encode().to_vec();
                            lane.out.push_back(Out { head, payload, pos: 0 });
                        }
                        FrameKind::Response => {
                            let call = *lane.pending.get(&id).ok_or_else(|| violation(addr, format!("response to unknown message {id}")))?;
                            let room: usize = recvs[call].iter().map(|r| r.len()).sum();
                            let total = head.pay_len as usize;
                            if total > room {
                                return Err(violation(addr, format!("response payload {total} bytes exceeds the {room} bytes asked for")));
                            }
                            lane.rx = Rx::Payload { call, id, body: buf, total, done: 0 };
                            continue;
                        }
                        k => return Err(violation(addr, format!("unexpected {k:?} frame"))),
                    }
                }
                Rx::Payload { call, id, body, total, done } if done == total => {
                    lane.pending.remove(&id);
                    // A response before Cts means the server refused the payload.
                    lane.awaiting_cts.remove(&id);
                    *results[call] = Some(Ok(Reply { body, payload_len: total }));
                    *completed += 1;
                }
                other => lane.rx = other,
            }
            break;
        }
    }
}
