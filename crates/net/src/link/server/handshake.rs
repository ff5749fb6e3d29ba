//! The server side of the handshake (docs/protocol.md): `Hello`, then the
//! client's proof of the cluster secret (checked here) or its MUNGE
//! credential (checked off the loop, [`Event::Verify`], and reported back
//! through [`ServerConn::verified`]).

use super::{Event, MungeOutcome, Payload, Phase, ServerConn};
use super::admission::Admission;
use std::time::Instant;
use weft_wire::{Challenge, ErrorCode, FrameKind, Hello, MsgId, Proof};

impl ServerConn {
    /// A frame of a connection not yet ready, whole in `body`.
    pub(super) fn handshake_frame(&mut self, body: &[u8], now: Instant, gate: &dyn Admission, events: &mut Vec<Event>) {
        match self.phase {
            Phase::AwaitHello => match Hello::decode(body) {
                Ok(hello) => {
                    let challenge = Challenge { nonce: self.server_nonce };
                    self.phase = Phase::AwaitProof { hello, challenge };
                    self.push(FrameKind::Challenge, MsgId(0), &challenge.encode(), Payload::default(), now);
                }
                Err(e) => self.fail(ErrorCode::BadRequest, format!("bad hello: {e}"), now),
            },
            Phase::AwaitProof { hello, challenge } if hello.munge() => {
                self.phase = Phase::Verifying;
                events.push(Event::Verify { hello, challenge, cred: body.to_vec() });
            }
            Phase::Verifying => unreachable!("admit lets no frame in while verifying"),
            Phase::AwaitProof { hello, challenge } => match Proof::decode(body) {
                Ok(p) if gate.secret().verify_client_proof(&hello, &challenge, &p) => {
                    self.phase = Phase::Ready;
                    self.handshake_by = None;
                    self.push(FrameKind::Welcome, MsgId(0), &gate.secret().server_proof(&hello, &challenge).encode(), Payload::default(), now);
                    events.push(Event::Ready);
                }
                Ok(_) => self.fail(ErrorCode::Permission, "wrong cluster secret".into(), now),
                Err(e) => self.fail(ErrorCode::BadRequest, format!("bad proof: {e}"), now),
            },
            Phase::Ready => unreachable!("a ready connection's frames are requests"),
        }
    }

    /// The outcome of a MUNGE proof handed out with [`Event::Verify`]: the
    /// connection opens as the proven user, or is refused and closes.
    pub fn verified(&mut self, outcome: MungeOutcome, now: Instant, events: &mut Vec<Event>) {
        if !matches!(self.phase, Phase::Verifying) || self.closing.is_some() {
            return;
        }
        match outcome {
            Ok((who, ours)) => {
                self.phase = Phase::Ready;
                self.handshake_by = None;
                self.identity = who;
                self.push(FrameKind::Welcome, MsgId(0), &ours, Payload::default(), now);
                events.push(Event::Ready);
            }
            Err((code, why)) => self.fail(code, why, now),
        }
    }
}
