//! One connection's protocol state on the server side, sans I/O: the event loop reads bytes
//! into the window this machine offers, tells it how many arrived, and
//! writes out what it has queued. No sockets, threads or clocks here (`now`
//! is passed in), so every rule below is unit-tested with plain buffers.
//!
//! | phase | accepts | on anything else |
//! |---|---|---|
//! | hello | one `Hello` of exactly 20 bytes, reserved fields zero; answered with a `Challenge` | error frame, close |
//! | proof | one `Proof` of exactly 32 bytes over both nonces, before the handshake deadline; answered with `Welcome` | error frame, close |
//! | ready | `Request` (payload <= eager limit), `Rts`, `Data` for a granted `Rts`, `Placed` for one granted a place in the shared area, `Part` (rails) | error frame, close |
//! | closing | nothing; queued frames drain, then the loop closes | |
//!
//! Limits, each bounding what one peer can make the server hold or wait for:
//!
//! * Absolute deadlines: the whole handshake, each whole frame once its
//!   first byte arrived, and each response once it reached the head of the
//!   send queue. A peer that trickles bytes, or reads its responses one byte
//!   at a time, is cut off at the deadline instead of holding anything.
//! * Memory: a frame's body and payload are drawn from the server's
//!   [`MemoryBudget`] (and the connection's share of it) before they are
//!   read; when there is none, the connection stops reading until memory is
//!   returned. Rendezvous grants (`Cts`) draw the payload's bytes up front.
//! * Counts: requests handed out and not yet answered, and announced
//!   rendezvous not yet sent, are capped; past the first cap the connection
//!   stops reading, past the second the peer broke the protocol.

mod admission;
mod handshake;
mod limits;
mod output;
mod parts;
mod payload;
mod rendezvous;
#[cfg(test)]
mod placed_tests;
#[cfg(test)]
mod tests;

pub use admission::{Admission, Identity, MungeOutcome};
pub use limits::{ConnLimits, IDLE_CLOSE, IDLE_TIMEOUT};
pub use payload::Payload;

use super::frames::{Filling, HeaderRx, Outbox, Stage};
use crate::budget::{Account, Charge, MemoryBudget};
use crate::transport::area::{Area, Slot};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use weft_wire::{Challenge, DecodeError, ErrorCode, FrameKind, Header, Hello, MsgId, PartHead, RailToken, Request, Response, RAIL_TOKEN_LEN};

/// Where the handshake stands (protocol in `weft_net::handshake`).
#[derive(Debug, Clone, Copy)]
enum Phase {
    AwaitHello,
    AwaitProof { hello: Hello, challenge: Challenge },
    /// A MUNGE proof is being checked off the loop ([`ServerConn::verified`]).
    Verifying,
    Ready,
}

/// What the connection hands its owner.
#[derive(Debug)]
pub enum Event {
    /// A request to serve; answer it with [`ServerConn::respond`]. Boxed:
    /// it moves through the owner's queues, and a request is large.
    Request { id: MsgId, req: Box<Request>, payload: Payload },
    /// A request was refused without reaching the server (counted as bad).
    Refused,
    /// The handshake succeeded.
    Ready,
    /// A MUNGE proof to check off the loop; the answer comes back through
    /// [`ServerConn::verified`].
    Verify { hello: Hello, challenge: Challenge, cred: Vec<u8> },
    /// Rails: a part of a payload granted on the connection whose rail
    /// token is `token`; the owner hands it to that connection's
    /// [`ServerConn::part`] if it has the same identity, and drops it if
    /// there is none (closed since: its calls failed with it).
    Part { token: RailToken, id: MsgId, offset: u64, payload: Payload },
}

/// Why the connection must close (after its queued frames, if any, drain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close(pub String);

enum Rx {
    Header(HeaderRx),
    /// Waiting for memory to read the body and payload of `head`.
    Stalled { head: Header },
    /// `payload.charge` holds the memory of body and payload.
    Body { head: Header, body: Filling, payload: Payload },
    Payload { head: Header, body: Vec<u8>, payload: Payload, filled: usize },
}

impl Rx {
    fn idle() -> Self {
        Rx::Header(HeaderRx::default())
    }
}

/// A payload arriving in parts, in any order (see [`ServerConn::part`]).
struct Assembly {
    bytes: Vec<u8>,
    /// (offset, length) of each part applied, at most [`MAX_PARTS`].
    parts: Vec<(u64, u64)>,
    received: u64,
}

/// How many assembled messages [`ServerConn`] remembers.
const ASSEMBLED_KEPT: usize = 256;

struct Pending {
    req: Box<Request>,
    /// The memory of the decoded request, held while it waits.
    body_charge: Charge,
    pay_len: u32,
    /// The payload's bytes, drawn when the `Cts` went out.
    grant: Option<Charge>,
    /// When the `Cts` went out: the data must start within the frame
    /// deadline of it, or the grant (and its memory) would be held forever.
    granted_at: Option<Instant>,
    /// Rails: the payload being put together from `Part` frames.
    assembly: Option<Assembly>,
    /// Where in the shared area the client puts the payload (granted so).
    slot: Option<Slot>,
}

/// One connection's state, server side.
pub struct ServerConn {
    limits: Arc<ConnLimits>,
    budget: Arc<MemoryBudget>,
    account: Arc<Account>,
    phase: Phase,
    /// This connection's fresh random nonce, sent in the `Challenge`.
    server_nonce: [u8; 16],
    closing: Option<Close>,
    rx: Rx,
    /// Absolute deadlines; `None` when nothing is under way.
    handshake_by: Option<Instant>,
    frame_by: Option<Instant>,
    out: Outbox<Payload>,
    /// Requests handed out and not answered.
    queued: usize,
    pending: HashMap<u64, Pending>,
    /// Rts ids in arrival order, not yet granted.
    waiting: VecDeque<u64>,
    granted: u64,
    /// Who the handshake proved (meaningful once ready).
    identity: Identity,
    /// When bytes last moved either way (idleness counts from it).
    last_active: Instant,
    /// Names this connection in its `Cts` frames, for `Part` frames on
    /// other connections; all zero: no rails (parts naming it refused).
    rail_token: RailToken,
    /// Messages lately put together from parts: a part for one of them
    /// comes late (the client sent again the parts of a rail it lost) and
    /// is dropped, not an error.
    assembled: VecDeque<u64>,
    /// Where answers are encoded, kept empty between them.
    encoded: Vec<u8>,
    /// Bytes read ahead at a frame boundary (once ready), and whether the
    /// last window [`ServerConn::rx_window`] gave was its.
    stage: Stage,
    staging: bool,
    /// Shared memory: the area where the client places rendezvous
    /// payloads the server only copies ([`crate::transport::area`]).
    area: Option<Arc<Area>>,
    /// A request's box given back once served ([`ServerConn::recycle`]),
    /// the next request's: a small request then costs no allocation.
    spare_req: Option<Box<Request>>,
}


/// Largest body of a request without payload that is not charged to the
/// memory budget (see `whole_request`): with `max_queued` such requests a
/// connection holds a few tens of KiB, less than its buffers (what a
/// request decodes to beyond its body is charged apart,
/// `charge_expansion`).
const UNCHARGED_BODY: usize = 256;

/// `req` in the spare box if there is one, else in a new one.
fn boxed(spare: &mut Option<Box<Request>>, req: Request) -> Box<Request> {
    match spare.take() {
        Some(mut b) => {
            *b = req;
            b
        }
        None => Box::new(req),
    }
}

/// Where the current part of a frame takes its next bytes (`None` while
/// waiting for memory); never empty (`settle` moves past empty parts).
fn part_window(rx: &mut Rx) -> Option<&mut [u8]> {
    let w = match rx {
        Rx::Header(h) => h.window(),
        Rx::Stalled { .. } => return None,
        Rx::Body { body, .. } => body.window(),
        Rx::Payload { payload, filled, .. } => &mut payload.bytes[*filled..],
    };
    debug_assert!(!w.is_empty(), "settle leaves no empty window");
    Some(w)
}

impl ServerConn {
    /// `server_nonce` must be fresh and random (it is what makes a
    /// recorded handshake useless on this connection).
    pub fn new(now: Instant, limits: Arc<ConnLimits>, budget: Arc<MemoryBudget>, server_nonce: [u8; 16]) -> Self {
        let handshake_by = Some(now + limits.handshake_deadline);
        let send_deadline = limits.send_deadline;
        ServerConn {
            limits,
            budget,
            account: Arc::default(),
            phase: Phase::AwaitHello,
            server_nonce,
            closing: None,
            rx: Rx::idle(),
            handshake_by,
            frame_by: None,
            out: Outbox::new(send_deadline),
            queued: 0,
            pending: HashMap::new(),
            waiting: VecDeque::new(),
            identity: Identity::Trusted,
            granted: 0,
            last_active: now,
            rail_token: RailToken([0; RAIL_TOKEN_LEN]),
            assembled: VecDeque::new(),
            area: None,
            encoded: Vec::new(),
            stage: Stage::default(),
            staging: false,
            spare_req: None,
        }
    }

    /// Gives back a served request's box (its contents are dropped when the
    /// next request takes it), for the next request to be decoded into.
    pub fn recycle(&mut self, req: Box<Request>) {
        self.spare_req.get_or_insert(req);
    }

    /// A shared-memory connection's area: opaque rendezvous payloads that
    /// fit are granted a place in it (`Cts` naming it, answered `Placed`).
    pub fn with_area(mut self, area: Option<Arc<Area>>) -> Self {
        self.area = area;
        self
    }

    /// The connection's shared area, if it has one.
    pub fn area(&self) -> Option<&Arc<Area>> {
        self.area.as_ref()
    }

    /// This connection takes parts of its payloads over other connections
    /// that name `token` (fresh and random per connection: it is what a
    /// peer must know to add bytes to this connection's messages).
    pub fn with_rail_token(mut self, token: [u8; RAIL_TOKEN_LEN]) -> Self {
        self.rail_token = RailToken(token);
        self
    }

    /// See [`ServerConn::with_rail_token`].
    pub fn rail_token(&self) -> RailToken {
        self.rail_token
    }

    fn takes_parts(&self) -> bool {
        self.rail_token.0 != [0; RAIL_TOKEN_LEN]
    }

    /// Draws `bytes` for this connection (a response it will be sent),
    /// within its share of the budget.
    pub fn charge(&self, bytes: u64) -> Option<Charge> {
        self.budget.try_charge_for(bytes, &self.account, self.limits.memory_share)
    }

    /// Bytes of the budget this connection holds.
    pub fn memory(&self) -> u64 {
        self.account.used()
    }

    pub fn is_ready(&self) -> bool {
        matches!(self.phase, Phase::Ready)
    }

    /// Nothing in progress: no partial frame, nothing queued or owed.
    pub fn is_idle(&self) -> bool {
        matches!(&self.rx, Rx::Header(h) if h.is_empty()) && self.stage.is_empty() && self.out.is_empty() && self.queued == 0 && self.pending.is_empty()
    }

    /// Since when a ready connection has had nothing under way; `None`
    /// while it is busy or not ready.
    pub fn idle_since(&self) -> Option<Instant> {
        (self.is_ready() && self.is_idle()).then_some(self.last_active)
    }

    /// From now on this connection draws memory from `account` (all of
    /// one user's connections share one, and its share): called when the
    /// handshake is done, before anything is charged to the old one.
    pub fn use_account(&mut self, account: Arc<Account>) {
        // Charges of the old one would return to the wrong account.
        if self.account.used() == 0 {
            self.account = account;
        }
    }

    /// Who the handshake proved (meaningful once ready).
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Set once the connection must close; it does when [`ServerConn::wants_close`].
    pub fn closing(&self) -> Option<&Close> {
        self.closing.as_ref()
    }

    /// Closing and nothing left to send.
    pub fn wants_close(&self) -> bool {
        self.closing.is_some() && self.out.is_empty()
    }

    /// Where the next received bytes go; `None` while the connection must
    /// not read (paused, waiting for memory, closing, or holding bytes read
    /// ahead: [`ServerConn::pump`] first). Once ready, a read at a frame
    /// boundary may take up to [`Stage::LEN`] bytes (several small frames,
    /// handled whole); otherwise the window is exactly what the current
    /// frame still needs, so a large payload is read straight into its
    /// buffer. During the handshake nothing is read ahead: a blocking peer
    /// hands the stream on after it ([`crate::handshake::server_handshake`]).
    pub fn rx_window(&mut self) -> Option<&mut [u8]> {
        if !self.may_read() || !self.stage.is_empty() {
            return None;
        }
        // From the second frame on (a connection that never sends a
        // request, of the thousands an HPC job opens, holds no stage).
        self.staging = self.stage.is_made() && matches!(&self.rx, Rx::Header(h) if h.is_empty());
        if self.staging {
            return Some(self.stage.window());
        }
        part_window(&mut self.rx)
    }

    /// Bytes read ahead and not yet taken (the connection paused).
    pub fn has_staged(&self) -> bool {
        !self.stage.is_empty()
    }

    /// Hands on the bytes read ahead: whole requests straight from them,
    /// the rest into the windows of the frame's parts, until none are left
    /// or the connection cannot take more now (paused, waiting for memory,
    /// closing). The owner calls it before reading (bytes left here come
    /// before the socket's) and after a pause ends.
    pub fn pump(&mut self, now: Instant, gate: &dyn Admission, events: &mut Vec<Event>) {
        while !self.stage.is_empty() && self.may_read() {
            if matches!(&self.rx, Rx::Header(h) if h.is_empty()) && self.whole_request(now, gate, events) {
                continue;
            }
            let Some(w) = part_window(&mut self.rx) else { return };
            let n = w.len().min(self.stage.len());
            w[..n].copy_from_slice(&self.stage.bytes()[..n]);
            self.stage.consume(n);
            self.received_part(n, now, gate, events);
        }
    }

    /// Handles a whole `Request` frame at the start of the stage from
    /// there, with no buffer or state of its own (what most small requests
    /// are). `false` when it is not whole there or needs anything the
    /// part-by-part path does (a refusal, waiting for memory): that path
    /// then takes its bytes as from a read.
    fn whole_request(&mut self, now: Instant, gate: &dyn Admission, events: &mut Vec<Event>) -> bool {
        let bytes = self.stage.bytes();
        let Some(Ok(head)) = bytes.get(..weft_wire::HEADER_LEN).map(Header::decode) else { return false };
        let (body_len, pay_len) = (head.body_len as usize, head.pay_len as usize);
        let pay_at = weft_wire::HEADER_LEN + body_len;
        let Some(end) = pay_at.checked_add(pay_len).filter(|&e| e <= bytes.len()) else { return false };
        if head.kind != FrameKind::Request || self.admit(&head).is_err() {
            return false;
        }
        // A small request without payload is bounded by count
        // (`max_queued` a connection), as error answers are: drawing and
        // returning its few bytes cost more than the rest of its way in.
        // Not while the budget is spent, though: then it waits for memory
        // like any other, so requests that decode to more than their body
        // (`charge_expansion`, drawn past the limits) stop coming in.
        let charge = if pay_len == 0 && body_len <= UNCHARGED_BODY && self.budget.used() < self.budget.limit() {
            None
        } else {
            let Some(c) = self.budget.try_charge_for((body_len + pay_len) as u64, &self.account, self.limits.memory_share) else { return false };
            Some(c)
        };
        let mut payload = Payload::new(crate::buffers::take(pay_len), charge);
        payload.bytes.copy_from_slice(&bytes[pay_at..end]);
        self.last_active = now;
        // Out of `self` while the frame is handled (which needs `self`).
        let stage = std::mem::take(&mut self.stage);
        self.frame_decoded(head, &stage.bytes()[weft_wire::HEADER_LEN..pay_at], payload, now, gate, events);
        self.stage = stage;
        self.stage.consume(end);
        if self.closing.is_some() {
            self.stage.clear();
        }
        true
    }

    /// Whether the connection takes more bytes now: not closing, fewer than
    /// `max_queued` requests unanswered, fewer than `max_queued` frames
    /// waiting to be sent (a peer that does not read its answers must not
    /// make the server queue them without bound: error answers to refused
    /// requests carry no budget charge, so they are bounded by count), and
    /// within its share of the budget (answers it has not taken count).
    pub fn may_read(&self) -> bool {
        self.closing.is_none() && self.queued < self.limits.max_queued && self.out.len() < self.limits.max_queued && self.account.used() <= self.limits.memory_share
    }

    /// Paused for memory: the owner calls [`ServerConn::retry`] when some is returned.
    pub fn is_stalled(&self) -> bool {
        matches!(self.rx, Rx::Stalled { .. }) || (!self.waiting.is_empty() && self.closing.is_none())
    }

    /// `n` bytes arrived in the window [`ServerConn::rx_window`] gave.
    pub fn received(&mut self, n: usize, now: Instant, gate: &dyn Admission, events: &mut Vec<Event>) {
        if n == 0 {
            return;
        }
        if std::mem::take(&mut self.staging) {
            self.stage.filled(n);
            self.pump(now, gate, events);
            return;
        }
        self.received_part(n, now, gate, events);
    }

    /// `n` bytes arrived in the window of the frame's current part.
    fn received_part(&mut self, n: usize, now: Instant, gate: &dyn Admission, events: &mut Vec<Event>) {
        self.last_active = now;
        let complete = match &mut self.rx {
            Rx::Header(h) => {
                if h.is_empty() {
                    self.frame_by = Some(now + self.limits.frame_deadline);
                }
                match h.received(n) {
                    None => return,
                    Some(Ok(head)) => {
                        if let Err(why) = self.admit(&head) {
                            self.fail(ErrorCode::BadRequest, why, now);
                            return;
                        }
                        self.rx = Rx::Stalled { head };
                        self.retry(now, gate, events);
                        return;
                    }
                    Some(Err(e)) => self.fail(ErrorCode::BadRequest, format!("bad frame header: {e}"), now),
                }
                false
            }
            Rx::Stalled { .. } => unreachable!("no window while stalled"),
            Rx::Body { body, .. } => body.received(n),
            Rx::Payload { payload, filled, .. } => {
                *filled += n;
                *filled == payload.bytes.len()
            }
        };
        if complete {
            self.settle(now, gate, events);
        }
    }

    /// Moves body -> payload -> done past every part with nothing left to
    /// read (empty bodies and payloads included); on done, handles the
    /// frame. After it the window is never empty.
    fn settle(&mut self, now: Instant, gate: &dyn Admission, events: &mut Vec<Event>) {
        loop {
            match std::mem::replace(&mut self.rx, Rx::idle()) {
                Rx::Body { head, body, payload } if body.is_full() => {
                    self.rx = Rx::Payload { head, body: body.buf, payload, filled: 0 };
                }
                Rx::Payload { head, body, payload, filled } if filled == payload.bytes.len() => {
                    self.frame_by = None;
                    self.frame(head, body, payload, now, gate, events);
                    return;
                }
                other => {
                    self.rx = other;
                    return;
                }
            }
        }
    }

    /// Tries to draw the memory a stalled frame needs, and to grant waiting
    /// rendezvous requests. Call when memory was returned.
    pub fn retry(&mut self, now: Instant, gate: &dyn Admission, events: &mut Vec<Event>) {
        if let Rx::Stalled { head } = self.rx {
            // A Data frame's payload was drawn with its grant; an Rts reads
            // a body only (its payload comes with the Data frame).
            let pay_need = match head.kind {
                FrameKind::Data | FrameKind::Rts | FrameKind::Placed => 0,
                _ => u64::from(head.pay_len),
            };
            if let Some(mut charge) = self.budget.try_charge_for(u64::from(head.body_len) + pay_need, &self.account, self.limits.memory_share) {
                if head.kind == FrameKind::Data {
                    // Admitted while granted and whole; parts cannot take
                    // it meanwhile (see `part`), but a bug must not panic.
                    let Some(grant) = self.pending.get_mut(&head.msg_id.0).and_then(|p| p.grant.take()) else {
                        self.fail(ErrorCode::BadRequest, format!("data for message {} lost its grant", head.msg_id.0), now);
                        return;
                    };
                    charge.merge(grant);
                }
                let pay_len = if head.kind == FrameKind::Rts { 0 } else { head.pay_len as usize };
                let payload = Payload::new(crate::buffers::take(pay_len), Some(charge));
                self.rx = Rx::Body { head, body: Filling::new(crate::buffers::take(head.body_len as usize)), payload };
                self.settle(now, gate, events);
            }
        }
        self.grant(now);
        // The frame's bytes may be waiting in the stage.
        self.pump(now, gate, events);
    }

    /// Charges what decoded `req` holds past its body of `body_len` bytes
    /// (a collective's expanded pieces) to `charge`. The memory is held
    /// already, so it is drawn past the limits: a connection over its
    /// share reads nothing more until answers return it (else 64 queued
    /// such requests held 64 MiB a connection, unseen by the budget).
    fn charge_expansion(&self, req: &Request, body_len: usize, charge: &mut Option<Charge>) {
        let extra = req.expanded_bytes().saturating_sub(body_len) as u64;
        if extra > 0 {
            let held = self.budget.charge_held(extra, &self.account);
            match charge {
                Some(c) => c.merge(held),
                None => *charge = Some(held),
            }
        }
    }

    /// Handles one whole frame.
    fn frame(&mut self, head: Header, body: Vec<u8>, payload: Payload, now: Instant, gate: &dyn Admission, events: &mut Vec<Event>) {
        if matches!(self.phase, Phase::Ready) {
            // The connection has traffic: later frames are read ahead.
            self.stage.make();
        }
        self.frame_decoded(head, &body, payload, now, gate, events);
        crate::buffers::give(body);
    }

    fn frame_decoded(&mut self, head: Header, body: &[u8], payload: Payload, now: Instant, gate: &dyn Admission, events: &mut Vec<Event>) {
        if !matches!(self.phase, Phase::Ready) {
            self.handshake_frame(body, now, gate, events);
            return;
        }
        let id = head.msg_id;
        match head.kind {
            FrameKind::Request => match Request::decode(body).map(|r| boxed(&mut self.spare_req, r)).map(|mut req| (gate.admit(&mut req, &self.identity), req)) {
                Ok((Err(why), _)) => self.deny(id, why, now, events),
                Ok((Ok(()), req)) => {
                    let mut payload = payload;
                    self.charge_expansion(&req, body.len(), &mut payload.charge);
                    self.queued += 1;
                    events.push(Event::Request { id, req, payload });
                }
                Err(e) => self.refuse(id, e, now, events),
            },
            FrameKind::Rts => match Request::decode(body).map(|r| boxed(&mut self.spare_req, r)).map(|mut req| (gate.admit(&mut req, &self.identity), req)) {
                // Before `Cts`: a refused write's data is never sent.
                Ok((Err(why), _)) => self.deny(id, why, now, events),
                Ok((Ok(()), req)) => {
                    let mut payload = payload;
                    self.charge_expansion(&req, body.len(), &mut payload.charge);
                    self.announced(id, req, head.pay_len, payload, now);
                }
                // Answered at once: the client treats a response before
                // `Cts` as a refusal and never sends the data.
                Err(e) => self.refuse(id, e, now, events),
            },
            FrameKind::Part => match PartHead::decode(body) {
                Ok(h) if h.token == self.rail_token => {
                    if let Err(why) = self.part(id, h.offset, payload, now, events) {
                        self.fail(ErrorCode::BadRequest, why, now);
                    }
                }
                Ok(h) => events.push(Event::Part { token: h.token, id, offset: h.offset, payload }),
                Err(e) => self.fail(ErrorCode::BadRequest, format!("bad part: {e}"), now),
            },
            FrameKind::Data => self.data_arrived(id, payload, now, events),
            FrameKind::Placed => self.placed(id, now, events),
            _ => unreachable!("admitted"),
        }
    }

    /// A request the gate refused (no valid capability): answered
    /// `Permission`, counted as a bad request; the connection stays.
    fn deny(&mut self, id: MsgId, why: String, now: Instant, events: &mut Vec<Event>) {
        self.push(FrameKind::Response, id, &Response::error(ErrorCode::Permission, why).encode(), Payload::default(), now);
        events.push(Event::Refused);
    }

    fn refuse(&mut self, id: MsgId, e: DecodeError, now: Instant, events: &mut Vec<Event>) {
        let rsp = Response::error(ErrorCode::BadRequest, format!("undecodable request: {e}"));
        self.push(FrameKind::Response, id, &rsp.encode(), Payload::default(), now);
        events.push(Event::Refused);
    }
}
