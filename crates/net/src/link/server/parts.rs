//! Rails on the server's side of a connection: a payload granted here
//! put together from `Part` frames (read here or on another connection
//! of the same identity and handed over by the owner), by message id.

use super::{Assembly, Event, Payload, Rx, ServerConn, ASSEMBLED_KEPT};
use std::time::Instant;
use weft_wire::{FrameKind, MsgId, MAX_PARTS};

impl ServerConn {
    /// Rails: the bytes of a `Part` frame for message `id`, granted here
    /// (the frame came on this connection or on another of the same
    /// identity). Parts may come in any order and the same part again
    /// (a client resends the parts of a connection it lost), also after
    /// the message was put together, or while this connection closes:
    /// dropped. The request is handed out once the payload is whole. An
    /// error is the sender's fault (a part out of bounds, overlapping
    /// another, one too many, for a message not granted or arriving whole
    /// in a `Data` frame): its connection should be failed with it.
    pub fn part(&mut self, id: MsgId, offset: u64, part: Payload, now: Instant, events: &mut Vec<Event>) -> Result<(), String> {
        if !self.takes_parts() {
            return Err(format!("a part for message {} of a connection that takes none", id.0));
        }
        // Closing (its calls fail with it), or put together already: the
        // part comes too late to matter.
        if self.closing.is_some() || self.assembled.contains(&id.0) {
            return Ok(());
        }
        // Its payload is arriving whole in a `Data` frame: one or the other.
        if let Rx::Stalled { head } | Rx::Body { head, .. } | Rx::Payload { head, .. } = &self.rx
            && head.kind == FrameKind::Data
            && head.msg_id == id
        {
            return Err(format!("a part for message {}, whose data is arriving whole", id.0));
        }
        let Some(p) = self.pending.get_mut(&id.0).filter(|p| p.grant.is_some() && p.slot.is_none()) else {
            return Err(format!("a part for message {}, which is not granted (or placed in the shared area)", id.0));
        };
        let len = part.bytes.len() as u64;
        let end = offset.checked_add(len).filter(|&e| e <= u64::from(p.pay_len)).ok_or_else(|| format!("a part at {offset} + {len} past the payload's {} bytes", p.pay_len))?;
        let a = p.assembly.get_or_insert_with(|| Assembly { bytes: crate::buffers::take(p.pay_len as usize), parts: Vec::new(), received: 0 });
        if a.parts.contains(&(offset, len)) {
            return Ok(());
        }
        if a.parts.iter().any(|&(o, l)| offset < o + l && o < end) {
            return Err(format!("a part at {offset} + {len} overlaps another of message {}", id.0));
        }
        if a.parts.len() >= MAX_PARTS {
            return Err(format!("more than {MAX_PARTS} parts for message {}", id.0));
        }
        a.bytes[offset as usize..end as usize].copy_from_slice(&part.bytes);
        a.parts.push((offset, len));
        a.received += len;
        if a.received < u64::from(p.pay_len) {
            return Ok(());
        }
        let mut p = self.pending.remove(&id.0).expect("found above");
        let a = p.assembly.take().expect("put together above");
        self.granted -= u64::from(p.pay_len);
        self.queued += 1;
        let mut charge = p.grant.take().expect("granted");
        charge.merge(p.body_charge);
        if self.assembled.len() == ASSEMBLED_KEPT {
            self.assembled.pop_front();
        }
        self.assembled.push_back(id.0);
        events.push(Event::Request { id, req: p.req, payload: Payload::new(a.bytes, Some(charge)) });
        self.grant(now);
        Ok(())
    }
}
