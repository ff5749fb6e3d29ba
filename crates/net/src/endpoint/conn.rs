//! One connection of the endpoint: the client-side protocol machine
//! ([`ClientConn`]) and the transport its bytes move over. Calls of several
//! batches (several threads) share it; the machine names each call by its
//! [`CallRef`], and this file moves payloads between the transport and the
//! callers' buffers the batches hold.

use super::batch::{BatchCall, CallRef};
use super::engine::Batches;
use crate::link::client::{ClientConn, ClientRx, Completion, Hold};
use crate::link::frames::{relent, Stage};
use crate::transport::Transport;
use crate::NetError;
use mio::Token;
use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;

/// Most iovecs handed to one `writev`/`readv`: Linux's `IOV_MAX`, so a
/// list-I/O payload of many small pieces goes out in few calls.
const MAX_IOVECS: usize = 1024;

/// How long a connection counts as just opened (see [`Conn::reusable`]).
const JUST_OPENED: std::time::Duration = std::time::Duration::from_secs(1);

/// A connection posted on less than this ago is posted on again without
/// looking whether the server closed it (see [`Conn::reusable`]).
const RECENT_USE: std::time::Duration = std::time::Duration::from_millis(1);

/// Where the bytes of responses to abandoned calls go.
const SCRATCH_LEN: usize = 64 * 1024;

/// What a poll event said of a connection.
#[derive(Debug, Clone, Copy)]
pub(super) struct Readiness {
    readable: bool,
    writable: bool,
    /// The peer closed, or an error: reading finds which.
    closed: bool,
}

impl Readiness {
    pub(super) fn of(ev: &mio::event::Event) -> Self {
        let closed = ev.is_read_closed() || ev.is_error();
        Readiness { readable: ev.is_readable() || closed, writable: ev.is_writable() || ev.is_error(), closed }
    }
}

pub(super) struct Conn {
    pub(super) link: ClientConn<CallRef>,
    pub(super) transport: Box<dyn Transport>,
    pub(super) token: Token,
    /// Edge-triggered readiness: set by poll events, cleared on `WouldBlock`
    /// (or a short read of a socket, see `Transport::short_read_drains`).
    pub(super) readable: bool,
    pub(super) writable: bool,
    /// A poll event saw the server close (or an error): reads go on to the
    /// end of stream, never stopping at a short read.
    pub(super) read_closed: bool,
    /// Bytes read ahead at a frame boundary: whole answers are taken from
    /// here, several per read; the rest goes where the frame's parts go.
    stage: Stage,
    scratch: Vec<u8>,
    /// Kept between passes so that a pass allocates nothing: the calls a
    /// read answered, and the iovecs of a write (empty between uses).
    answered: Vec<Completion<CallRef>>,
    iovecs: Vec<IoSlice<'static>>,
    /// When it was opened, or a call was last posted on it after it was
    /// idle ([`Conn::posted_at`]), and until when it counts as used a
    /// moment ago (within `RECENT_USE` of some post; [`Conn::reusable`]
    /// looks at `last_used` itself after it).
    last_used: std::time::Instant,
    recent_until: std::time::Instant,
    /// A call was posted on it.
    pub(super) used: bool,
    /// Bytes read and written so far (a server that takes what is sent
    /// is alive too), and what the liveness watch knows.
    pub(super) read_bytes: u64,
    pub(super) written_bytes: u64,
    pub(super) watch: super::liveness::Watch,
    /// Payloads placed in the shared area (`EndpointStats::placed`).
    pub(super) placed: u64,
}

impl Conn {
    pub(super) fn new(transport: Box<dyn Transport>, token: Token) -> Self {
        let now = std::time::Instant::now();
        Conn { link: ClientConn::default(), transport, token, readable: true, writable: true, read_closed: false, stage: Stage::default(), scratch: Vec::new(), answered: Vec::new(), iovecs: Vec::new(), last_used: now, recent_until: now, used: false, read_bytes: 0, written_bytes: 0, watch: Default::default(), placed: 0 }
    }

    /// Records readiness a poll event reported.
    pub(super) fn on_event(&mut self, ev: &mio::event::Event) {
        self.on_readiness(Readiness::of(ev));
    }

    /// Records readiness a poll event reported (read off it earlier).
    pub(super) fn on_readiness(&mut self, r: Readiness) {
        self.read_closed |= r.closed;
        let (readable, writable) = self.transport.on_event(r.readable, r.writable, r.closed);
        self.readable |= readable;
        self.writable |= writable;
    }

    pub(super) fn is_idle(&self) -> bool {
        self.link.is_idle() && self.stage.is_empty()
    }

    /// Whether this idle connection may be posted on at `now`: not if the
    /// server closed it, or it was idle so long (past `idle_reuse`) that the
    /// server may be closing it; it is then opened afresh. A connection
    /// just opened and not used yet is posted on even if the server
    /// already closed it: the call then fails with the server's word (a
    /// user past its share of connections) instead of reconnecting for
    /// ever.
    pub(super) fn reusable(&self, now: std::time::Instant, idle_reuse: std::time::Duration) -> bool {
        // Used a moment ago (below): the common case, with no clock
        // arithmetic (a thread calling back to back).
        if self.used && now < self.recent_until && RECENT_USE <= idle_reuse {
            return true;
        }
        let idle_for = now.saturating_duration_since(self.last_used);
        let fresh = !self.used && idle_for < JUST_OPENED;
        // Used a moment ago: a close that recent is no likelier before
        // this post than just after it (a system call saved per call of a
        // thread that calls back to back).
        let recent = self.used && idle_for < RECENT_USE;
        idle_for <= idle_reuse && (fresh || recent || self.idle_is_healthy())
    }

    /// A call is posted on this idle connection at `now`.
    pub(super) fn posted_at(&mut self, now: std::time::Instant) {
        self.last_used = now;
        // Moved on once it has passed: a call a millisecond serves the
        // comparison, the others are not slowed by an addition each.
        if now >= self.recent_until {
            self.recent_until = now.checked_add(RECENT_USE).unwrap_or(now);
        }
    }

    /// When a call was last posted on it after it was idle.
    pub(super) fn last_used(&self) -> std::time::Instant {
        self.last_used
    }

    /// An idle connection must have nothing to read: EOF or stray bytes mean
    /// the server restarted or misbehaved.
    pub(super) fn idle_is_healthy(&self) -> bool {
        self.transport.idle_is_healthy()
    }

    /// How much of batch `b` this connection holds.
    pub(super) fn hold(&self, b: u64) -> Hold {
        self.link.hold(|c| c.batch == b)
    }

    pub(super) fn withdraw(&mut self, b: u64) {
        self.link.withdraw(|c| c.batch == b);
    }

    /// Posts call `at` (`call`, as message `msg`) and, when nothing is
    /// queued before it and the transport takes bytes, writes its frame
    /// at once from the call's own buffers: no copy into the queue, and
    /// none of the queue's bookkeeping (a call alone, `solo.rs`). What
    /// does not go out is queued. An error comes after the call is
    /// posted, so dropping the connection fails it.
    pub(super) fn post_now(&mut self, addr: SocketAddr, msg: u64, at: CallRef, call: &BatchCall, pay_len: usize, eager: bool) -> Result<(), NetError> {
        let head = if self.writable { self.link.direct_head(msg, call.body.len(), pay_len, eager) } else { None };
        let Some(head) = head else {
            self.link.post(msg, at, &call.body, pay_len, eager);
            return Ok(());
        };
        let mut slices = relent(std::mem::take(&mut self.iovecs));
        slices.push(IoSlice::new(&head));
        slices.push(IoSlice::new(&call.body));
        if eager {
            slices.extend(call.send.iter().take(MAX_IOVECS - 2).map(|v| IoSlice::new(v.bytes())));
        }
        let written = loop {
            match self.transport.write_vectored(&slices) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        self.iovecs = relent(slices);
        let n = match written {
            Ok(0) => Err(closed(addr)),
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.writable = false;
                Ok(0)
            }
            Err(e) => Err(io_fail(addr, e)),
        };
        let sent = *n.as_ref().unwrap_or(&0);
        self.written_bytes += sent as u64;
        self.link.post_written(msg, at, &call.body, pay_len, eager, sent);
        n.map(|_| ())
    }

    /// Writes queued frames until the queue is empty or the transport would block.
    pub(super) fn advance_write(&mut self, addr: SocketAddr, batches: &Batches) -> Result<(), NetError> {
        while self.link.has_output() {
            let parts = |c: CallRef, range| narrow(batches.get(c.batch).into_iter().flat_map(move |b| b.calls[c.index].send.iter().map(|v| v.bytes())), range);
            let mut slices = relent(std::mem::take(&mut self.iovecs));
            self.link.tx_slices_into(MAX_IOVECS, parts, &mut slices);
            let written = self.transport.write_vectored(&slices);
            self.iovecs = relent(slices);
            let n = match written {
                Ok(0) => return Err(closed(addr)),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_fail(addr, e)),
            };
            self.written_bytes += n as u64;
            self.link.sent(n);
        }
        Ok(())
    }

    /// Reads frames until the transport would block, completing calls as
    /// their responses arrive (rendezvous data is queued on `Cts`). Returns
    /// how many calls completed, also when the connection then failed.
    pub(super) fn advance_read(&mut self, addr: SocketAddr, batches: &mut Batches) -> (usize, Result<(), NetError>) {
        let mut completed = 0;
        // A read ahead of a socket came back short: nothing more waits.
        let mut drained = false;
        loop {
            if self.stage.is_empty() && drained {
                self.readable = false;
                return (completed, Ok(()));
            }
            if !self.stage.is_empty()
                && let Some((k, (c, reply))) = self.link.whole_response(self.stage.bytes())
            {
                self.stage.consume(k);
                if let Some(b) = batches.get_mut(c.batch) {
                    completed += b.complete(c.index, Ok(reply));
                }
                continue;
            }
            // At a frame boundary, read ahead into the stage.
            let ahead = self.stage.is_empty() && self.link.at_frame_boundary();
            // Bytes handed on from the stage were counted when read.
            let from_transport = self.stage.is_empty();
            // Anything else goes part by part: from the stage first, then
            // straight from the transport into where the part goes.
            let (stage, transport) = (&mut self.stage, &mut self.transport);
            let n = if ahead {
                transport.read(stage.window())
            } else {
                match self.link.rx() {
                    ClientRx::Header(h) => read_from(stage, transport, &mut [IoSliceMut::new(h.window())]),
                    ClientRx::Body { body, .. } => read_from(stage, transport, &mut [IoSliceMut::new(body.window())]),
                    ClientRx::Payload { to: None, done, total, .. } => {
                        let want = (*total - *done).min(SCRATCH_LEN);
                        self.scratch.resize(want, 0);
                        read_from(stage, transport, &mut [IoSliceMut::new(&mut self.scratch[..want])])
                    }
                    ClientRx::Payload { to: Some(c), done, total, .. } => {
                        // Exactly the rest of this frame's payload: the caller's
                        // buffers may be longer, and the bytes after this frame
                        // belong to the next one.
                        let recv = &mut batches.get_mut(c.batch).expect("a call being received has its batch").calls[c.index].recv;
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
                        read_from(stage, transport, &mut iov)
                    }
                }
            };
            let n = match n {
                // End of stream: the server closed (idle timeout, restart).
                // Calls still owed an answer fail; an idle connection just goes.
                Ok(0) => return (completed, Err(closed(addr))),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.readable = false;
                    return (completed, Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return (completed, Err(io_fail(addr, e))),
            };
            if from_transport {
                self.read_bytes += n as u64;
            }
            if ahead {
                self.stage.filled(n);
                drained = n < Stage::LEN && self.transport.short_read_drains() && !self.read_closed;
                continue;
            }
            let room = |c: CallRef| batches.get(c.batch).map_or(0, |b| b.calls[c.index].recv.iter().map(|r| r.len()).sum());
            let read = self.link.received_into(n, room, &mut self.answered);
            // Calls answered before a bad frame in the same read keep
            // their answers: the connection is dropped, they are done.
            for (c, reply) in self.answered.drain(..) {
                if let Some(b) = batches.get_mut(c.batch) {
                    completed += b.complete(c.index, Ok(reply));
                }
            }
            if let Err(what) = read {
                return (completed, Err(violation(addr, what)));
            }
            if self.link.has_placements()
                && let Err(e) = self.place(addr, batches)
            {
                return (completed, Err(e));
            }
        }
    }

    /// Copies the payloads the server granted places in the shared area
    /// there, and tells it so (`Placed`): the bytes cross once.
    fn place(&mut self, addr: SocketAddr, batches: &Batches) -> Result<(), NetError> {
        let placements: Vec<_> = self.link.take_placements().collect();
        for p in placements {
            let c = p.call;
            // A call waiting for its grant cannot be withdrawn (`hold`), so
            // its batch is there; if not, the server would wait forever.
            let b = batches.get(c.batch).ok_or_else(|| violation(addr, format!("a place granted for message {} of a call gone", p.id)))?;
            let mut parts = b.calls[c.index].send.iter().map(|v| v.bytes());
            self.transport.place(p.at, p.pay_len, &mut parts).map_err(|e| violation(addr, e.to_string()))?;
            self.link.push_placed(p);
            self.placed += 1;
        }
        Ok(())
    }
}

/// Reads into `bufs` from the bytes read ahead while there are any, else
/// from the transport.
fn read_from(stage: &mut Stage, transport: &mut Box<dyn Transport>, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
    if stage.is_empty() {
        return transport.read_vectored(bufs);
    }
    let mut n = 0;
    for b in bufs.iter_mut() {
        let k = b.len().min(stage.len());
        b[..k].copy_from_slice(&stage.bytes()[..k]);
        stage.consume(k);
        n += k;
        if stage.is_empty() {
            break;
        }
    }
    Ok(n)
}

/// The bytes of `slices` (a payload in pieces) in `range` (offset,
/// length), or all of them.
fn narrow<'a>(slices: impl Iterator<Item = &'a [u8]>, range: Option<(u64, usize)>) -> impl Iterator<Item = &'a [u8]> {
    let (mut skip, mut left) = range.map_or((0, usize::MAX), |(o, l)| (usize::try_from(o).unwrap_or(usize::MAX), l));
    slices.filter_map(move |s| {
        if left == 0 {
            return None;
        }
        if skip >= s.len() {
            skip -= s.len();
            return None;
        }
        let s = &s[skip..];
        skip = 0;
        let take = s.len().min(left);
        left -= take;
        Some(&s[..take])
    })
}

pub(super) fn violation(addr: SocketAddr, what: impl Into<String>) -> NetError {
    let what = what.into();
    let Some(word) = what.strip_prefix(crate::link::client::CLOSED_BY_SERVER) else { return NetError::Violation { addr, what } };
    let (code, reason) = word.split_once(' ').unwrap_or(("0", word));
    match code.parse::<u16>() {
        // Busy: what a server at its connection limit says too.
        Ok(c) if c == weft_wire::ErrorCode::Busy as u16 => NetError::Busy { addr, reason: reason.to_owned() },
        Ok(c) if c == weft_wire::ErrorCode::Stopping as u16 => NetError::Stopping { addr, reason: reason.to_owned() },
        _ => NetError::Closed { addr, reason: reason.to_owned() },
    }
}

fn io_fail(addr: SocketAddr, e: io::Error) -> NetError {
    NetError::Unreachable { addr, source: e }
}

fn closed(addr: SocketAddr) -> NetError {
    io_fail(addr, io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by server"))
}
