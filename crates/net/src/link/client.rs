//! The client side of a ready connection, sans I/O: requests posted under
//! message ids, rendezvous data sent when the server grants it (`Cts`),
//! responses matched to the calls that are owed them.
//!
//! | payload size | frames |
//! |---|---|
//! | `<= eager limit` | `Request(body, payload)` -> `Response` |
//! | `>  eager limit` | `Rts(body)` -> `Cts` -> `Data(payload)` -> `Response` |
//!
//! A call is named by the owner's tag `T`; the machine never holds the
//! callers' buffers. It asks for a payload's bytes by tag when sending
//! ([`ClientConn::tx_slices`]) and says which call a response payload
//! belongs to when receiving ([`ClientRx::Payload`]), so payloads move
//! between the transport and the callers' own buffers with no copy.
//!
//! Rails: a connection told to split payloads of at least `split_min`
//! bytes does not answer a `Cts` naming a rail token with `Data`; it hands
//! the grant to its owner ([`ClientConn::take_splits`]), which queues the
//! payload's parts as `Part` frames on this and its other connections to
//! the server ([`ClientConn::push_part`]), or whole ([`ClientConn::push_data`]).
//!
//! Shared memory: a `Cts` that names a place in the connection's shared
//! area asks the owner to copy the payload there
//! ([`ClientConn::take_placements`], [`ClientConn::push_placed`]); the
//! server is then sent a `Placed` frame instead of `Data`.
//!
//! A response before its `Cts` is the server refusing the payload: the
//! data is never sent. A response to an id never posted, a `Cts` for an id
//! not waiting for one, or a response payload longer than its call asked
//! for is a protocol violation: the owner drops the connection.

use super::body::Body;
use super::frames::{Filling, HeaderRx, Outbox};
use super::id_queue::IdQueue;
// Keys are ids this process chose: a fast hash, no flooding to fear.
use rustc_hash::FxHashSet as HashSet;
use std::io::IoSlice;
use std::time::Instant;
use weft_wire::{FrameKind, Grant, Header, MsgId, PartHead, RailToken, Response, RAIL_TOKEN_LEN};

/// A response: its body and how many payload bytes landed in the call's
/// buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub body: Body,
    pub payload_len: usize,
}

/// A call answered: its tag and the reply.
pub type Completion<T> = (T, Reply);

/// What a frame in the queue carries: a call's payload (all of it, or
/// the (offset, length) of a part), or nothing.
#[derive(Debug, Clone, Copy)]
pub struct OutTag<T> {
    pub call: T,
    pub range: Option<(u64, usize)>,
}

/// A payload the server granted that the owner puts on the wire in parts
/// (or whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitGrant<T> {
    pub id: u64,
    pub call: T,
    /// What `Part` frames name (the granting connection).
    pub token: RailToken,
    pub pay_len: usize,
}

/// A payload the server granted a place in the shared area: the owner
/// copies it to `at` and then queues [`ClientConn::push_placed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement<T> {
    pub id: u64,
    pub call: T,
    pub at: u64,
    pub pay_len: usize,
}

struct Owed<T> {
    call: T,
    pay_len: usize,
}

/// Where the next received bytes go.
#[derive(Debug)]
pub enum ClientRx<T> {
    Header(HeaderRx),
    Body { head: Header, body: Filling },
    /// A response's payload: into call `to`'s buffers from offset `done`
    /// (`None`: the call was abandoned and the bytes are dropped).
    Payload { to: Option<T>, id: u64, body: Vec<u8>, total: usize, done: usize },
}

impl<T> ClientRx<T> {
    fn idle() -> Self {
        ClientRx::Header(HeaderRx::default())
    }
}

/// How much of some calls a connection holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    Nothing,
    /// Only whole frames not yet started and answers not yet begun: they
    /// can be withdrawn without disturbing the stream.
    Withdrawable,
    /// A frame half written or half read, or a rendezvous the server is
    /// waiting on: the connection must be dropped.
    MidFrame,
}

/// One ready connection's client-side state.
pub struct ClientConn<T> {
    out: Outbox<OutTag<T>>,
    rx: ClientRx<T>,
    /// msg id -> call, for requests posted here and not answered.
    pending: IdQueue<Owed<T>>,
    /// Ids of rendezvous requests whose `Cts` has not come.
    awaiting_cts: HashSet<u64>,
    /// Ids of abandoned calls whose answers are still to come.
    discard: HashSet<u64>,
    /// Rails: granted payloads at least this large go to the owner to
    /// split (0: never).
    split_min: usize,
    /// Grants waiting for the owner, and their ids until the owner queued
    /// their parts (the server waits for them: a call withdrawn meanwhile
    /// holds the connection, as a `Data` frame queued does).
    splits: Vec<SplitGrant<T>>,
    splitting: HashSet<u64>,
    /// Grants placed in the shared area, waiting for the owner's copy.
    placements: Vec<Placement<T>>,
    /// The outbox's clock, never read: the client sets no send deadline
    /// (its calls have theirs), so it need not ask the time per frame.
    epoch: Instant,
}

impl<T> Default for ClientConn<T> {
    fn default() -> Self {
        ClientConn {
            out: Outbox::default(),
            rx: ClientRx::idle(),
            pending: IdQueue::default(),
            awaiting_cts: HashSet::default(),
            discard: HashSet::default(),
            split_min: 0,
            splits: Vec::new(),
            splitting: HashSet::default(),
            placements: Vec::new(),
            epoch: Instant::now(),
        }
    }
}

impl<T: Copy> ClientConn<T> {
    /// Nothing queued, owed or half received.
    pub fn is_idle(&self) -> bool {
        self.out.is_empty() && self.pending.is_empty() && self.discard.is_empty() && matches!(&self.rx, ClientRx::Header(h) if h.is_empty())
    }

    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Calls posted and not answered.
    pub fn owed(&self) -> impl Iterator<Item = T> + '_ {
        self.pending.values().map(|o| o.call)
    }

    /// Forgets every call (the connection is being dropped); returns those
    /// still owed an answer.
    pub fn take_owed(&mut self) -> Vec<T> {
        self.awaiting_cts.clear();
        self.splitting.clear();
        self.splits.clear();
        self.placements.clear();
        self.pending.drain().map(|o| o.call).collect()
    }

    /// Queues one call's request: eager (`Request` with its payload), or
    /// an `Rts` announcing it.
    pub fn post(&mut self, id: u64, call: T, body: &[u8], pay_len: usize, eager: bool) {
        let now = self.epoch;
        if eager {
            self.out.push(FrameKind::Request, MsgId(id), body, OutTag { call, range: None }, pay_len, now);
        } else {
            self.out.push_announce(FrameKind::Rts, MsgId(id), body, pay_len, OutTag { call, range: None }, now);
            self.awaiting_cts.insert(id);
        }
        self.pending.insert(id, Owed { call, pay_len });
    }

    /// The header of a call's request frame, for the owner to write at
    /// once with the body (and an eager payload) from the caller's own
    /// buffers instead of queuing a copy: only while nothing is queued,
    /// so bytes keep their order. The owner then posts the call with
    /// [`ClientConn::post_written`].
    pub fn direct_head(&self, id: u64, body_len: usize, pay_len: usize, eager: bool) -> Option<[u8; weft_wire::HEADER_LEN]> {
        let kind = if eager { FrameKind::Request } else { FrameKind::Rts };
        self.out.is_empty().then(|| Header::new(kind, MsgId(id), body_len, pay_len).encode())
    }

    /// Posts a call whose frame's first `written` bytes (of the header
    /// [`ClientConn::direct_head`] gave, the body, and an eager payload)
    /// went out already; the rest is queued.
    pub fn post_written(&mut self, id: u64, call: T, body: &[u8], pay_len: usize, eager: bool, written: usize) {
        let whole = weft_wire::HEADER_LEN + body.len() + if eager { pay_len } else { 0 };
        if written < whole {
            debug_assert!(self.out.is_empty(), "a frame written directly was queued behind another");
            self.post(id, call, body, pay_len, eager);
            self.out.sent(written, self.epoch);
            return;
        }
        if !eager {
            self.awaiting_cts.insert(id);
        }
        self.pending.insert(id, Owed { call, pay_len });
    }

    /// Rails: grants of payloads of at least `bytes` go to the owner to
    /// split (0: never).
    pub fn set_split_min(&mut self, bytes: usize) {
        self.split_min = bytes;
    }

    /// Grants the owner is to put on the wire in parts (or whole).
    pub fn take_splits(&mut self) -> std::vec::Drain<'_, SplitGrant<T>> {
        self.splits.drain(..)
    }

    /// The owner queued the parts of grant `id` (on this connection and
    /// others).
    pub fn distributed(&mut self, id: u64) {
        self.splitting.remove(&id);
    }

    /// Whether [`ClientConn::take_splits`] has any.
    pub fn has_splits(&self) -> bool {
        !self.splits.is_empty()
    }

    /// Sends a granted payload whole after all (no other connection to
    /// split it over).
    pub fn push_data(&mut self, g: SplitGrant<T>) {
        self.splitting.remove(&g.id);
        self.out.push(FrameKind::Data, MsgId(g.id), &[], OutTag { call: g.call, range: None }, g.pay_len, self.epoch);
    }

    /// Grants the owner is to copy into the shared area.
    pub fn take_placements(&mut self) -> std::vec::Drain<'_, Placement<T>> {
        self.placements.drain(..)
    }

    pub fn has_placements(&self) -> bool {
        !self.placements.is_empty()
    }

    /// The owner copied a placement's payload into the area: the server
    /// is told so.
    pub fn push_placed(&mut self, p: Placement<T>) {
        self.out.push(FrameKind::Placed, MsgId(p.id), &[], OutTag { call: p.call, range: None }, 0, self.epoch);
    }

    /// Queues `len` bytes of call `call`'s payload from `offset` as a part
    /// of message `id`, granted on the connection `token` names (this one
    /// or another to the same server). Nothing is owed here: the answer
    /// comes on the granting connection.
    pub fn push_part(&mut self, id: u64, call: T, token: RailToken, offset: u64, len: usize) {
        let head = PartHead { token, offset }.encode();
        self.out.push(FrameKind::Part, MsgId(id), &head, OutTag { call, range: Some((offset, len)) }, len, self.epoch);
    }

    /// How much of the calls `mine` picks this connection holds.
    pub fn hold(&self, mine: impl Fn(&T) -> bool) -> Hold {
        if matches!(&self.rx, ClientRx::Payload { to: Some(c), .. } if mine(c)) {
            return Hold::MidFrame;
        }
        // A payload granted whose parts are not queued yet: the server
        // waits for them.
        if self.splitting.iter().any(|id| self.pending.get(*id).is_some_and(|o| mine(&o.call))) || self.placements.iter().any(|p| mine(&p.call)) {
            return Hold::MidFrame;
        }
        // Granted payload bytes not all sent: the server waits for them.
        if self.out.frames().any(|f| mine(&f.payload.call) && (f.pos > 0 || matches!(f.kind, FrameKind::Data | FrameKind::Part | FrameKind::Placed))) {
            return Hold::MidFrame;
        }
        // An `Rts` already sent and not yet answered by `Cts`: the server
        // would wait for data that never comes.
        let rts_sent = |id: &u64| !self.out.frames().any(|f| f.id == *id);
        if self.awaiting_cts.iter().any(|id| self.pending.get(*id).is_some_and(|o| mine(&o.call)) && rts_sent(id)) {
            return Hold::MidFrame;
        }
        if self.pending.values().any(|o| mine(&o.call)) || self.out.frames().any(|f| mine(&f.payload.call)) {
            Hold::Withdrawable
        } else {
            Hold::Nothing
        }
    }

    /// Withdraws the calls `mine` picks (which must be `Withdrawable`):
    /// unsent frames go, answers to sent requests will be read and dropped.
    pub fn withdraw(&mut self, mine: impl Fn(&T) -> bool) {
        let unsent: HashSet<u64> = self.out.frames().filter(|f| mine(&f.payload.call)).map(|f| f.id).collect();
        self.out.retain(|f| !mine(&f.payload.call));
        let gone: Vec<u64> = self.pending.iter().filter(|(_, o)| mine(&o.call)).map(|(id, _)| id).collect();
        for id in gone {
            self.pending.remove(id);
            self.awaiting_cts.remove(&id);
            self.splitting.remove(&id);
            if !unsent.contains(&id) {
                self.discard.insert(id);
            }
        }
    }

    /// The bytes to send next, as at most `max` slices; `parts` gives a
    /// call's payload as slices in order.
    pub fn tx_slices<'a, I>(&'a self, max: usize, parts: impl Fn(T, Option<(u64, usize)>) -> I) -> Vec<IoSlice<'a>>
    where
        I: Iterator<Item = &'a [u8]>,
    {
        self.out.slices(max, |t: &'a OutTag<T>| parts(t.call, t.range))
    }

    /// [`ClientConn::tx_slices`] appended to `v` (a vector the caller reuses).
    pub fn tx_slices_into<'a, I>(&'a self, max: usize, parts: impl Fn(T, Option<(u64, usize)>) -> I, v: &mut Vec<IoSlice<'a>>)
    where
        I: Iterator<Item = &'a [u8]>,
    {
        self.out.slices_into(max, |t: &'a OutTag<T>| parts(t.call, t.range), v);
    }

    /// `n` bytes of [`ClientConn::tx_slices`] went out.
    pub fn sent(&mut self, n: usize) {
        self.out.sent(n, self.epoch);
    }

    /// The kind and id of every frame queued, in order.
    pub fn queued(&self) -> impl Iterator<Item = (FrameKind, u64)> + '_ {
        self.out.frames().map(|f| (f.kind, f.id))
    }

    /// No byte of the next frame has arrived (an owner may read ahead).
    pub fn at_frame_boundary(&self) -> bool {
        matches!(&self.rx, ClientRx::Header(h) if h.is_empty())
    }

    /// Takes a whole answer without payload to a call owed one from the
    /// start of `bytes` (read ahead by the owner): what most answers are,
    /// with no state of their own. Returns the bytes it took and the call
    /// answered; `None` when the frame is not whole there or is anything
    /// else (the owner then hands its bytes on through [`ClientConn::rx`],
    /// which checks everything).
    pub fn whole_response(&mut self, bytes: &[u8]) -> Option<(usize, Completion<T>)> {
        if !self.at_frame_boundary() {
            return None;
        }
        let head = Header::decode(bytes.get(..weft_wire::HEADER_LEN)?).ok()?;
        let end = weft_wire::HEADER_LEN.checked_add(head.body_len as usize).filter(|&e| e <= bytes.len())?;
        if head.kind != FrameKind::Response || head.pay_len != 0 || head.flags != 0 || head.msg_id.0 == 0 {
            return None;
        }
        let id = head.msg_id.0;
        let call = self.pending.remove(id)?.call;
        // A response before `Cts` means the server refused the payload.
        if !self.awaiting_cts.is_empty() {
            self.awaiting_cts.remove(&id);
        }
        if !self.splitting.is_empty() {
            self.splitting.remove(&id);
        }
        Some((end, (call, Reply { body: Body::copy_of(&bytes[weft_wire::HEADER_LEN..end]), payload_len: 0 })))
    }

    /// Where the next received bytes go (exactly what the current frame
    /// still needs).
    pub fn rx(&mut self) -> &mut ClientRx<T> {
        &mut self.rx
    }

    /// `n` bytes arrived where [`ClientConn::rx`] said. Returns the calls
    /// now answered, or the violation that must drop the connection;
    /// `room(call)` is how many payload bytes a call's buffers take.
    pub fn received(&mut self, n: usize, room: impl Fn(T) -> usize) -> Result<Vec<Completion<T>>, String> {
        let mut done = Vec::new();
        self.received_into(n, room, &mut done).map(|()| done)
    }

    /// [`ClientConn::received`], the calls answered appended to `done` (a
    /// vector the caller reuses).
    pub fn received_into(&mut self, n: usize, room: impl Fn(T) -> usize, done: &mut Vec<Completion<T>>) -> Result<(), String> {
        match &mut self.rx {
            ClientRx::Header(h) => match h.received(n) {
                None => return Ok(()),
                Some(Ok(head)) => self.rx = ClientRx::Body { head, body: Filling::new(vec![0; head.body_len as usize]) },
                Some(Err(e)) => return Err(format!("bad frame header: {e}")),
            },
            ClientRx::Body { body, .. } => {
                body.received(n);
            }
            ClientRx::Payload { done, .. } => *done += n,
        }
        self.settle(room, done)
    }

    /// Acts on every part now complete (empty bodies and payloads complete
    /// without further bytes).
    fn settle(&mut self, room: impl Fn(T) -> usize, done: &mut Vec<Completion<T>>) -> Result<(), String> {
        loop {
            match std::mem::replace(&mut self.rx, ClientRx::idle()) {
                ClientRx::Body { head, body } if body.is_full() => self.frame(head, body.buf, &room)?,
                ClientRx::Payload { to, id, body, total, done: got } if got == total => {
                    match to {
                        Some(call) => {
                            self.pending.remove(id);
                            // A response before `Cts` means the server refused the payload.
                            self.awaiting_cts.remove(&id);
                            if !self.splitting.is_empty() {
                                self.splitting.remove(&id);
                            }
                            done.push((call, Reply { body: body.into(), payload_len: total }));
                        }
                        None => {
                            self.discard.remove(&id);
                        }
                    }
                }
                other => {
                    self.rx = other;
                    return Ok(());
                }
            }
        }
    }

    /// A whole frame from the server (its payload, if any, still to come).
    fn frame(&mut self, head: Header, body: Vec<u8>, room: &impl Fn(T) -> usize) -> Result<(), String> {
        let id = head.msg_id.0;
        match head.kind {
            FrameKind::Cts => {
                if head.pay_len != 0 || !self.awaiting_cts.remove(&id) {
                    return Err(format!("Cts for unknown message {id}"));
                }
                let owed = self.pending.get(id).ok_or_else(|| format!("Cts for unknown message {id}"))?;
                let (call, pay_len) = (owed.call, owed.pay_len);
                let grant = Grant::decode(&body).map_err(|e| format!("bad Cts for message {id}: {e}"))?;
                if let Some(at) = grant.area_at {
                    self.placements.push(Placement { id, call, at, pay_len });
                    return Ok(());
                }
                // A server that takes parts names this connection.
                let token = Some(grant.token).filter(|t| t.0 != [0; RAIL_TOKEN_LEN]);
                match token {
                    Some(token) if self.split_min > 0 && pay_len >= self.split_min => {
                        self.splitting.insert(id);
                        self.splits.push(SplitGrant { id, call, token, pay_len });
                    }
                    _ => self.out.push(FrameKind::Data, MsgId(id), &[], OutTag { call, range: None }, pay_len, self.epoch),
                }
                Ok(())
            }
            // Message id 0 is the server's word on the whole connection,
            // sent just before it closes it.
            FrameKind::Response if id == 0 => {
                let (code, why) = match Response::decode(&body) {
                    Ok(Response::Error { code, message }) => (code as u16, message),
                    _ => (0, "(no reason given)".into()),
                };
                Err(format!("{CLOSED_BY_SERVER}{code} {why}"))
            }
            FrameKind::Response => {
                let total = head.pay_len as usize;
                let to = match self.pending.get(id) {
                    Some(o) => {
                        let room = room(o.call);
                        if total > room {
                            return Err(format!("response payload {total} bytes exceeds the {room} bytes asked for"));
                        }
                        Some(o.call)
                    }
                    None if self.discard.contains(&id) => None,
                    None => return Err(format!("response to unknown message {id}")),
                };
                self.rx = ClientRx::Payload { to, id, body, total, done: 0 };
                Ok(())
            }
            k => Err(format!("unexpected {k:?} frame")),
        }
    }
}

/// How [`ClientConn`] reports the server's closing word (a frame of
/// message id 0), followed by its error code and message: the endpoint
/// makes it a `NetError::Busy` (code `Busy`) or `NetError::Closed`.
pub const CLOSED_BY_SERVER: &str = "closed by the server: ";

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
