//! One connection of the endpoint: the frames queued to go out, the frame
//! being received, and which call each message id answers. Calls of
//! several batches (several threads) share it; every frame names its call.

use super::batch::{Batch, CallRef};
use crate::NetError;
use mio::net::TcpStream as MioStream;
use mio::Token;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::SocketAddr;
use weft_wire::{FrameKind, Header, MsgId, HEADER_LEN};

/// Most iovecs handed to one `writev`/`readv`: Linux's `IOV_MAX`, so a
/// list-I/O payload of many small pieces goes out in few calls.
const MAX_IOVECS: usize = 1024;

/// Where the bytes of responses to abandoned calls go.
const SCRATCH_LEN: usize = 64 * 1024;

/// A frame waiting to go out: header and body, then (for `Request` and
/// `Data`) its call's payload.
pub(super) struct Out {
    pub(super) head: Vec<u8>,
    pub(super) kind: FrameKind,
    pub(super) id: u64,
    pub(super) call: CallRef,
    pub(super) with_payload: bool,
    /// Bytes of this frame already written.
    pub(super) pos: usize,
}

/// The frame being received.
pub(super) enum Rx {
    Header { buf: [u8; HEADER_LEN], filled: usize },
    Body { head: Header, buf: Vec<u8>, filled: usize },
    /// A response's payload, into its call's buffers (`None`: the call was
    /// abandoned, the bytes are read and dropped).
    Payload { to: Option<CallRef>, id: u64, body: Vec<u8>, total: usize, done: usize },
}

impl Rx {
    fn idle() -> Self {
        Rx::Header { buf: [0; HEADER_LEN], filled: 0 }
    }
    pub(super) fn is_idle(&self) -> bool {
        matches!(self, Rx::Header { filled: 0, .. })
    }
}

pub(super) struct Conn {
    pub(super) stream: MioStream,
    pub(super) token: Token,
    pub(super) out: VecDeque<Out>,
    pub(super) rx: Rx,
    /// msg id -> call, for requests posted here and not answered.
    pub(super) pending: HashMap<u64, CallRef>,
    /// msg ids of rendezvous requests whose `Cts` has not come.
    pub(super) awaiting_cts: HashSet<u64>,
    /// msg ids of abandoned calls whose answers are still to come.
    pub(super) discard: HashSet<u64>,
    /// Edge-triggered readiness: set by poll events, cleared on `WouldBlock`.
    pub(super) readable: bool,
    pub(super) writable: bool,
    scratch: Vec<u8>,
}

/// What a connection still holds of one batch.
pub(super) enum Hold {
    Nothing,
    /// Only whole frames not yet started and answers not yet begun: they
    /// can be withdrawn without disturbing the stream.
    Withdrawable,
    /// A frame half written or half read, or a rendezvous the server is
    /// waiting on: the connection must be dropped.
    MidFrame,
}

impl Conn {
    pub(super) fn new(stream: MioStream, token: Token) -> Self {
        Conn {
            stream,
            token,
            out: VecDeque::new(),
            rx: Rx::idle(),
            pending: HashMap::new(),
            awaiting_cts: HashSet::new(),
            discard: HashSet::new(),
            readable: true,
            writable: true,
            scratch: Vec::new(),
        }
    }

    pub(super) fn is_idle(&self) -> bool {
        self.out.is_empty() && self.pending.is_empty() && self.discard.is_empty() && self.rx.is_idle()
    }

    /// An idle connection must have nothing to read: EOF or stray bytes mean
    /// the server restarted or misbehaved.
    pub(super) fn idle_is_healthy(&self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.stream.peek(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Queues one call's request: eager, or an `Rts` for a rendezvous.
    pub(super) fn post(&mut self, id: u64, call: CallRef, body: &[u8], pay_len: usize, eager: bool) {
        let kind = if eager { FrameKind::Request } else { FrameKind::Rts };
        let mut head = Header::new(kind, MsgId(id), body.len(), pay_len).encode().to_vec();
        head.extend_from_slice(body);
        self.out.push_back(Out { head, kind, id, call, with_payload: eager, pos: 0 });
        if !eager {
            self.awaiting_cts.insert(id);
        }
        self.pending.insert(id, call);
    }

    /// How much of batch `b` this connection holds.
    pub(super) fn hold(&self, b: u64) -> Hold {
        let mine = |c: &CallRef| c.batch == b;
        if matches!(&self.rx, Rx::Payload { to: Some(c), .. } if mine(c)) {
            return Hold::MidFrame;
        }
        if self.out.iter().any(|o| mine(&o.call) && (o.pos > 0 || o.kind == FrameKind::Data)) {
            return Hold::MidFrame;
        }
        // An `Rts` already sent and not yet answered by `Cts`: the server
        // will wait for data that would never come.
        let rts_sent = |id: &u64| !self.out.iter().any(|o| o.id == *id);
        if self.awaiting_cts.iter().any(|id| self.pending.get(id).is_some_and(mine) && rts_sent(id)) {
            return Hold::MidFrame;
        }
        if self.pending.values().any(mine) || self.out.iter().any(|o| mine(&o.call)) { Hold::Withdrawable } else { Hold::Nothing }
    }

    /// Withdraws batch `b` (which must be `Withdrawable`): unsent frames go,
    /// answers to sent requests will be read and dropped.
    pub(super) fn withdraw(&mut self, b: u64) {
        let unsent: HashSet<u64> = self.out.iter().filter(|o| o.call.batch == b).map(|o| o.id).collect();
        self.out.retain(|o| o.call.batch != b);
        let mine: Vec<u64> = self.pending.iter().filter(|(_, c)| c.batch == b).map(|(&id, _)| id).collect();
        for id in mine {
            self.pending.remove(&id);
            self.awaiting_cts.remove(&id);
            if !unsent.contains(&id) {
                self.discard.insert(id);
            }
        }
    }

    /// Writes queued frames until the queue is empty or the socket would block.
    pub(super) fn advance_write(&mut self, addr: SocketAddr, batches: &HashMap<u64, Batch>) -> Result<(), NetError> {
        while !self.out.is_empty() {
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(MAX_IOVECS.min(64));
            'gather: for out in self.out.iter() {
                let payload = if out.with_payload { batches.get(&out.call.batch).map(|b| &b.calls[out.call.index].send[..]) } else { None };
                let mut skip = out.pos;
                let parts = std::iter::once(&out.head[..]).chain(payload.into_iter().flatten().map(|v| v.bytes()));
                for part in parts {
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
            let mut n = match self.stream.write_vectored(&slices) {
                Ok(0) => return Err(closed(addr)),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_fail(addr, e)),
            };
            while n > 0 {
                let front = self.out.front_mut().expect("bytes written belong to queued frames");
                let total = front.head.len() + if front.with_payload { payload_len(batches, front.call) } else { 0 };
                let left = total - front.pos;
                if n >= left {
                    n -= left;
                    self.out.pop_front();
                } else {
                    front.pos += n;
                    n = 0;
                }
            }
        }
        Ok(())
    }

    /// Reads frames until the socket would block, completing calls as their
    /// responses arrive and queueing rendezvous data on `Cts`. Returns how
    /// many calls completed.
    pub(super) fn advance_read(&mut self, addr: SocketAddr, batches: &mut HashMap<u64, Batch>) -> Result<usize, NetError> {
        let mut completed = 0;
        loop {
            let n = match &mut self.rx {
                Rx::Header { buf, filled } => self.stream.read(&mut buf[*filled..]),
                Rx::Body { buf, filled, .. } => self.stream.read(&mut buf[*filled..]),
                Rx::Payload { to: None, done, total, .. } => {
                    let want = (*total - *done).min(SCRATCH_LEN);
                    self.scratch.resize(want, 0);
                    self.stream.read(&mut self.scratch[..want])
                }
                Rx::Payload { to: Some(c), done, total, .. } => {
                    // Exactly the rest of this frame's payload: the caller's
                    // buffers may be longer, and the bytes after this frame
                    // belong to the next one.
                    let recv = &mut batches.get_mut(&c.batch).expect("a call being received has its batch").calls[c.index].recv;
                    let mut skip = *done;
                    let mut want = *total - *done;
                    let mut iov: Vec<IoSliceMut<'_>> = Vec::with_capacity(recv.len().min(MAX_IOVECS));
                    for dst in recv.iter_mut() {
                        let len = dst.len();
                        if skip >= len {
                            skip -= len;
                            continue;
                        }
                        let take = (len - skip).min(want);
                        iov.push(IoSliceMut::new(&mut dst.bytes_mut()[skip..skip + take]));
                        skip = 0;
                        want -= take;
                        if want == 0 || iov.len() == MAX_IOVECS {
                            break;
                        }
                    }
                    self.stream.read_vectored(&mut iov)
                }
            };
            let n = match n {
                // End of stream: the server closed (idle timeout, restart).
                // Calls still owed an answer fail; an idle connection just goes.
                Ok(0) => return Err(closed(addr)),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.readable = false;
                    return Ok(completed);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_fail(addr, e)),
            };
            match &mut self.rx {
                Rx::Header { buf, filled } => {
                    *filled += n;
                    if *filled == HEADER_LEN {
                        let head = Header::decode(buf).map_err(|source| NetError::Protocol { addr, source })?;
                        self.rx = Rx::Body { head, buf: vec![0; head.body_len as usize], filled: 0 };
                    }
                }
                Rx::Body { filled, .. } => *filled += n,
                Rx::Payload { done, .. } => *done += n,
            }
            completed += self.complete_frames(addr, batches)?;
        }
    }

    /// Acts on every frame now complete (empty bodies and payloads complete
    /// without further reads).
    fn complete_frames(&mut self, addr: SocketAddr, batches: &mut HashMap<u64, Batch>) -> Result<usize, NetError> {
        let mut completed = 0;
        loop {
            match std::mem::replace(&mut self.rx, Rx::idle()) {
                Rx::Body { head, buf, filled } if filled == buf.len() => {
                    let id = head.msg_id.0;
                    match head.kind {
                        FrameKind::Cts => {
                            if !self.awaiting_cts.remove(&id) {
                                return Err(violation(addr, format!("Cts for unknown message {id}")));
                            }
                            let call = *self.pending.get(&id).ok_or_else(|| violation(addr, format!("Cts for unknown message {id}")))?;
                            let pay_len = payload_len(batches, call);
                            let head = Header::new(FrameKind::Data, MsgId(id), 0, pay_len).encode().to_vec();
                            self.out.push_back(Out { head, kind: FrameKind::Data, id, call, with_payload: true, pos: 0 });
                            return Ok(completed);
                        }
                        FrameKind::Response => {
                            let total = head.pay_len as usize;
                            let to = match self.pending.get(&id) {
                                Some(&c) => {
                                    let room: usize = batches.get(&c.batch).map_or(0, |b| b.calls[c.index].recv.iter().map(|r| r.len()).sum());
                                    if total > room {
                                        return Err(violation(addr, format!("response payload {total} bytes exceeds the {room} bytes asked for")));
                                    }
                                    Some(c)
                                }
                                None if self.discard.contains(&id) => None,
                                None => return Err(violation(addr, format!("response to unknown message {id}"))),
                            };
                            self.rx = Rx::Payload { to, id, body: buf, total, done: 0 };
                        }
                        k => return Err(violation(addr, format!("unexpected {k:?} frame"))),
                    }
                }
                Rx::Payload { to, id, body, total, done } if done == total => {
                    match to {
                        Some(c) => {
                            self.pending.remove(&id);
                            // A response before Cts means the server refused the payload.
                            self.awaiting_cts.remove(&id);
                            if let Some(b) = batches.get_mut(&c.batch) {
                                completed += b.complete(c.index, Ok(super::Reply { body, payload_len: total }));
                            }
                        }
                        None => {
                            self.discard.remove(&id);
                        }
                    }
                    return Ok(completed);
                }
                other => {
                    self.rx = other;
                    return Ok(completed);
                }
            }
        }
    }
}

fn payload_len(batches: &HashMap<u64, Batch>, c: CallRef) -> usize {
    batches.get(&c.batch).map_or(0, |b| b.calls[c.index].send.iter().map(|v| v.len()).sum())
}

pub(super) fn violation(addr: SocketAddr, what: impl Into<String>) -> NetError {
    NetError::Violation { addr, what: what.into() }
}

fn io_fail(addr: SocketAddr, e: io::Error) -> NetError {
    NetError::Unreachable { addr, source: e }
}

fn closed(addr: SocketAddr) -> NetError {
    io_fail(addr, io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by server"))
}
