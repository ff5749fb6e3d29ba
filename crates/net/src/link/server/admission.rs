//! Who a connection proved to be, and what the server lets it do: the
//! gate its requests pass ([`Admission`]) and the checks of each frame
//! header before any memory is drawn for it (`ServerConn::admit`).

use super::{Phase, ServerConn};
use weft_wire::{ErrorCode, FrameKind, Header, Hello, MsgId, PartHead, Proof, Request, Secret};

/// Who a connection proved to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// It proved the servers' secret: a server, or a tool of the servers'
    /// owner, or (secret mode) any client. Its requests' credentials are
    /// believed.
    Trusted,
    /// It proved this uid and gid with MUNGE; the groups are the uid's
    /// supplementary groups as this server's system knows them.
    Verified { uid: u32, gid: u32, groups: Vec<u32> },
}

/// A MUNGE proof's result: who, and the server's credential; or the
/// error to send before closing.
pub type MungeOutcome = Result<(Identity, Vec<u8>), (ErrorCode, String)>;

/// What the server lets in, as the connection sees it: the secret a
/// handshake must prove, and whether a decoded request may be served by
/// the identity the connection proved (the services' `Gate`).
pub trait Admission {
    fn secret(&self) -> &Secret;
    /// `Err(why)` refuses the request (answered `Permission`); the
    /// request may be rewritten (a verified user's groups).
    fn admit(&self, req: &mut Request, who: &Identity) -> Result<(), String>;
}

/// Admits every request of a connection that proved `Secret` (test peers
/// and tools that run the server side of a handshake).
impl Admission for Secret {
    fn secret(&self) -> &Secret {
        self
    }
    fn admit(&self, _: &mut Request, _: &Identity) -> Result<(), String> {
        Ok(())
    }
}

impl ServerConn {
    /// Checks a header against the phase and the limits before any memory
    /// is drawn for it.
    pub(super) fn admit(&self, head: &Header) -> Result<(), String> {
        if head.flags != 0 {
            return Err(format!("reserved header flags {:#x} must be zero", head.flags));
        }
        let handshake = match self.phase {
            Phase::AwaitHello => Some((FrameKind::Hello, Hello::LEN..=Hello::LEN)),
            // A MUNGE credential has no fixed size.
            Phase::AwaitProof { hello, .. } if hello.munge() => Some((FrameKind::Proof, 1..=crate::munge::MAX_CRED_LEN)),
            Phase::AwaitProof { .. } => Some((FrameKind::Proof, Proof::LEN..=Proof::LEN)),
            // The client waits for the `Welcome`: nothing may come now.
            Phase::Verifying => return Err(format!("a {:?} frame before the handshake finished", head.kind)),
            Phase::Ready => None,
        };
        if let Some((kind, len)) = handshake {
            if head.kind != kind || !len.contains(&(head.body_len as usize)) || head.pay_len != 0 || head.msg_id != MsgId(0) {
                return Err(format!("expected a {kind:?} frame of {len:?} bytes, got {:?} with {} + {} bytes", head.kind, head.body_len, head.pay_len));
            }
            return Ok(());
        }
        match head.kind {
            FrameKind::Request if head.pay_len > self.limits.eager_limit => {
                Err(format!("eager payload of {} bytes exceeds the eager limit {}; use a rendezvous", head.pay_len, self.limits.eager_limit))
            }
            FrameKind::Request => Ok(()),
            FrameKind::Rts if self.pending.len() >= self.limits.max_pending_rts => {
                Err(format!("more than {} rendezvous requests announced and not sent", self.limits.max_pending_rts))
            }
            FrameKind::Rts if self.pending.contains_key(&head.msg_id.0) => Err(format!("duplicate rendezvous message id {}", head.msg_id.0)),
            FrameKind::Rts => Ok(()),
            FrameKind::Data => match self.pending.get(&head.msg_id.0) {
                Some(p) if p.grant.is_some() && p.assembly.is_none() && p.slot.is_none() && p.pay_len == head.pay_len && head.body_len == 0 => Ok(()),
                _ => Err(format!("data for message {} does not match a grant", head.msg_id.0)),
            },
            FrameKind::Placed => match self.pending.get(&head.msg_id.0) {
                Some(p) if p.slot.is_some() && head.pay_len == 0 && head.body_len == 0 => Ok(()),
                _ => Err(format!("a placed payload for message {} that was not granted a place", head.msg_id.0)),
            },
            // Its payload is drawn like a request's; where it goes is
            // checked once it is whole (it may name another connection).
            FrameKind::Part if head.body_len as usize == PartHead::LEN && head.pay_len > 0 => Ok(()),
            FrameKind::Part => Err(format!("a part of {} + {} bytes (its head is {} bytes, its payload not empty)", head.body_len, head.pay_len, PartHead::LEN)),
            k => Err(format!("unexpected {k:?} frame from a client")),
        }
    }
}
