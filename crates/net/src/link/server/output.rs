//! What a server connection sends: answers, errors and its last word,
//! the bytes the loop writes out, and the deadlines that close it.

use super::{Close, Payload, Rx, ServerConn, IDLE_CLOSE};
use std::io::IoSlice;
use std::time::Instant;
use weft_wire::{ErrorCode, FrameKind, MsgId, Response};

/// The largest answer buffer a connection keeps for the next (a large
/// listing's goes back to the allocator).
const KEPT_ENCODE_BYTES: usize = 1024;

impl ServerConn {
    /// Queues the answer to a request handed out earlier. It counts against
    /// the budget until sent (what was drawn for it at dispatch, else its
    /// body now): a peer that does not read its answers holds its share at
    /// most, and then is not read from (see [`ServerConn::may_read`]).
    pub fn respond(&mut self, id: MsgId, rsp: &Response, mut payload: Payload, now: Instant) {
        self.queued = self.queued.saturating_sub(1);
        // Encoded in a buffer kept for the next answer (the frame's head
        // takes a copy): no allocation per answer.
        let mut body = rsp.encode_onto(std::mem::take(&mut self.encoded));
        if body.len() > weft_wire::limits::MAX_BODY_LEN as usize {
            // A service bug (answers are sized to fit); the client gets a
            // clear error instead of a frame it would refuse.
            let why = format!("answer of {} bytes exceeds the body limit", body.len());
            body.clear();
            body = Response::error(ErrorCode::Internal, why).encode_onto(body);
        }
        // An answer that had memory drawn for it at dispatch (a payload, a
        // listing's page) is covered by that; the small others count now.
        if payload.charge.is_none() {
            payload.charge = Some(self.budget.charge_held(body.len() as u64, &self.account));
        }
        self.push(FrameKind::Response, id, &body, payload, now);
        if body.capacity() <= KEPT_ENCODE_BYTES {
            body.clear();
            self.encoded = body;
        }
    }

    pub(super) fn push(&mut self, kind: FrameKind, id: MsgId, body: &[u8], payload: Payload, now: Instant) {
        let pay_len = payload.bytes.len();
        self.out.push(kind, id, body, payload, pay_len, now);
    }

    /// Queues an error frame and closes once it is sent.
    pub fn fail(&mut self, code: ErrorCode, why: String, now: Instant) {
        if self.closing.is_some() {
            return;
        }
        self.push(FrameKind::Response, MsgId(0), &Response::error(code, why.clone()).encode(), Payload::default(), now);
        self.closing = Some(Close(why));
        // Nothing more will be read: drop the partial frame and its memory.
        self.rx = Rx::idle();
        self.stage.clear();
        self.pending.clear();
        self.waiting.clear();
    }

    /// Closes without a word (the peer is gone or misbehaving at the byte level).
    pub fn abort(&mut self, why: impl Into<String>) {
        self.out.clear();
        self.closing = Some(Close(why.into()));
        self.rx = Rx::idle();
        self.stage.clear();
        self.pending.clear();
        self.waiting.clear();
    }

    /// The bytes to send next, as slices (at most `max` of them).
    pub fn tx_slices(&self, max: usize) -> Vec<IoSlice<'_>> {
        self.out.slices(max, |p: &Payload| std::iter::once(&p.bytes[..]))
    }

    /// [`ServerConn::tx_slices`] appended to `v` (a vector the caller reuses).
    pub fn tx_slices_into<'a>(&'a self, max: usize, v: &mut Vec<IoSlice<'a>>) {
        self.out.slices_into(max, |p: &Payload| std::iter::once(&p.bytes[..]), v);
    }

    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// `n` bytes of [`ServerConn::tx_slices`] went out.
    pub fn sent(&mut self, n: usize, now: Instant) {
        // Sent frames drop here, returning their payloads' memory.
        self.out.sent(n, now);
        if n > 0 {
            self.last_active = now;
        }
    }

    /// The reason to close now, if a deadline passed.
    pub fn overdue(&self, now: Instant) -> Option<String> {
        let late = |d: Option<Instant>| d.is_some_and(|d| now >= d);
        if late(self.handshake_by) {
            return Some(format!("no complete handshake within {:?}", self.limits.handshake_deadline));
        }
        if late(self.frame_by) {
            return Some(format!("frame not complete within {:?} of its first byte", self.limits.frame_deadline));
        }
        if self.out.overdue(now) {
            return Some(format!("response not taken within {:?}", self.limits.send_deadline));
        }
        if self.pending.values().any(|p| late(p.granted_at.map(|t| t + self.limits.frame_deadline))) {
            return Some(format!("rendezvous data not sent within {:?} of its grant", self.limits.frame_deadline));
        }
        if late(self.idle_since().map(|t| t + self.limits.idle_timeout)) {
            return Some(format!("{IDLE_CLOSE}{:?}", self.limits.idle_timeout));
        }
        None
    }
}
