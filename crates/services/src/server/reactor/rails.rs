//! Rails on the server: a client may move one large payload over several
//! of its connections at once. The connection that granted the payload
//! (`Cts`) names itself by a random rail token; `Part` frames naming it
//! arrive on the client's other connections, and the loop hands each to
//! the granting connection, which puts the payload together by message id
//! (`ServerConn::part`) and starts the request once it is whole.
//!
//! Only a connection of the same proven identity may add to another's
//! message: a part from anyone else, or one that does not fit the message,
//! fails the connection that sent it. A part for a connection closed since
//! is dropped (the client's call failed with that connection).

use super::Reactor;
use crate::server::workers::ConnRef;
use std::collections::HashMap;
use std::time::Instant;
use weft_net::link::{Event, Payload};
use weft_wire::{ErrorCode, MsgId, RailToken};

/// Connections by rail token.
#[derive(Default)]
pub(super) struct Rails {
    by_token: HashMap<RailToken, ConnRef>,
    /// Parts read on one connection for others, to route once the reading
    /// connection's slot is no longer borrowed.
    in_transit: Vec<(RailToken, MsgId, u64, Payload)>,
}

impl Rails {
    /// A fresh random token for connection `conn`.
    pub(super) fn register(&mut self, conn: ConnRef) -> [u8; weft_wire::RAIL_TOKEN_LEN] {
        loop {
            let token: [u8; weft_wire::RAIL_TOKEN_LEN] = rand::random();
            // All zero means "takes no parts"; a repeat would be a broken
            // random source, never a chance: ask again either way.
            if token != [0; weft_wire::RAIL_TOKEN_LEN] && !self.by_token.contains_key(&RailToken(token)) {
                self.by_token.insert(RailToken(token), conn);
                return token;
            }
        }
    }

    pub(super) fn forget(&mut self, token: RailToken) {
        self.by_token.remove(&token);
    }

    pub(super) fn drop_in_transit(&mut self) {
        self.in_transit.clear();
    }

    /// Keeps a part read for another connection until [`Reactor::route_parts`].
    pub(super) fn hold(&mut self, token: RailToken, id: MsgId, offset: u64, payload: Payload) {
        self.in_transit.push((token, id, offset, payload));
    }
}

impl Reactor {
    /// Hands the parts connection `k` read to the connections they name,
    /// and starts the requests they complete.
    pub(super) fn route_parts(&mut self, k: usize, now: Instant) {
        if self.rails.in_transit.is_empty() {
            return;
        }
        let mut touched = Vec::new();
        for (token, id, offset, payload) in std::mem::take(&mut self.rails.in_transit) {
            let Some(&target) = self.rails.by_token.get(&token) else { continue };
            let Some(Some(sender)) = self.slots.get(k) else { return };
            let sender_identity = sender.conn.identity().clone();
            let Some(t) = self.slot_of(target) else { continue };
            if *t.conn.identity() != sender_identity {
                self.fail_slot(k, ErrorCode::Permission, "a part for another identity's message".into(), now);
                return;
            }
            let mut events = Vec::new();
            if let Err(why) = t.conn.part(id, offset, payload, now, &mut events) {
                self.fail_slot(k, ErrorCode::BadRequest, why, now);
                return;
            }
            for ev in events {
                if let Event::Request { id, req, payload } = ev {
                    t.ready.push_back(super::job(target, t.user, id, req, payload, now));
                }
            }
            if !touched.contains(&target.slot) {
                touched.push(target.slot);
            }
        }
        for t in touched {
            self.dispatch(t, now);
            self.flush(t, now);
        }
    }

    fn fail_slot(&mut self, k: usize, code: ErrorCode, why: String, now: Instant) {
        if let Some(Some(slot)) = self.slots.get_mut(k) {
            slot.conn.fail(code, why, now);
        }
    }
}
