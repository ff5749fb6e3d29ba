//! Rendezvous on the server side: a payload past the eager limit is
//! announced (`Rts`), granted (`Cts`) in arrival order while the window
//! and the memory budget allow, then arrives whole (`Data`), in parts over
//! rails (`parts.rs`), or placed in the shared area (`Placed`).

use super::{Event, Payload, Pending, ServerConn};
use crate::transport::area::Slot;
use std::time::Instant;
use weft_wire::{FrameKind, Grant, MsgId, Request};

impl ServerConn {
    /// An admitted `Rts`: its request waits for a grant (its body's memory
    /// held in `payload`'s charge).
    pub(super) fn announced(&mut self, id: MsgId, req: Box<Request>, pay_len: u32, mut payload: Payload, now: Instant) {
        let body_charge = payload.charge.take().expect("drawn in retry");
        self.pending.insert(id.0, Pending { req, body_charge, pay_len, grant: None, granted_at: None, assembly: None, slot: None });
        self.waiting.push_back(id.0);
        self.grant(now);
    }

    /// A granted request's payload, whole (`Data`).
    pub(super) fn data_arrived(&mut self, id: MsgId, mut payload: Payload, now: Instant, events: &mut Vec<Event>) {
        let p = self.pending.remove(&id.0).expect("admitted");
        self.granted -= u64::from(p.pay_len);
        self.queued += 1;
        if let Some(c) = payload.charge.as_mut() {
            c.merge(p.body_charge);
        }
        events.push(Event::Request { id, req: p.req, payload });
        self.grant(now);
    }

    /// A granted request's payload, placed by the client where its grant
    /// said (`Placed`).
    pub(super) fn placed(&mut self, id: MsgId, now: Instant, events: &mut Vec<Event>) {
        let mut p = self.pending.remove(&id.0).expect("admitted");
        self.granted -= u64::from(p.pay_len);
        self.queued += 1;
        let mut charge = p.grant.take().expect("a place is granted with its memory");
        charge.merge(p.body_charge);
        events.push(Event::Request { id, req: p.req, payload: Payload { bytes: Vec::new(), charge: Some(charge), placed: p.slot.take().map(Box::new) } });
        self.grant(now);
    }

    /// Sends `Cts` to waiting rendezvous requests, in arrival order, while
    /// the window and the memory budget allow.
    pub(super) fn grant(&mut self, now: Instant) {
        while let Some(&id) = self.waiting.front() {
            if self.closing.is_some() {
                return;
            }
            let len = u64::from(self.pending[&id].pay_len);
            if self.granted > 0 && self.granted + len > self.limits.rendezvous_window {
                return;
            }
            let Some(charge) = self.budget.try_charge_for(len, &self.account, self.limits.memory_share) else { return };
            self.waiting.pop_front();
            self.granted += len;
            let p = self.pending.get_mut(&id).expect("waiting ids are pending");
            p.grant = Some(charge);
            p.granted_at = Some(now);
            // A payload the server only copies, with room in the area, is
            // placed there by the client; any other comes through the ring.
            p.slot = self.area.as_ref().filter(|_| p.req.payload_is_opaque()).and_then(|a| a.place(len as usize));
            let grant = Grant { token: self.rail_token, area_at: p.slot.as_ref().map(Slot::at) };
            self.push(FrameKind::Cts, MsgId(id), &grant.encode(), Payload::default(), now);
        }
    }
}
