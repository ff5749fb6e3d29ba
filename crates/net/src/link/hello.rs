//! The client side of the handshake, sans I/O (the server side is part of
//! [`super::server`]). Protocol in [`crate::handshake`].
//!
//! [`ClientHello::new`] gives the first frame to send; each frame from the
//! server goes to [`ClientHello::frame`], which answers with the next frame
//! to send or says the connection is ready. Making or checking a MUNGE
//! credential asks the local `munged` (a blocking call).

use crate::handshake::ClientAuth;
use crate::munge::MAX_CRED_LEN;
use crate::NetError;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use weft_wire::{Challenge, ErrorCode, FrameKind, Header, Hello, Proof, Response};

/// What to do after a server frame.
#[derive(Debug, PartialEq, Eq)]
pub enum HelloStep {
    /// Send this frame (kind and body, message id 0) and wait for the next.
    Send(FrameKind, Vec<u8>),
    /// The server proved itself: the connection is ready.
    Done,
}

enum State {
    AwaitChallenge,
    AwaitWelcome(Challenge),
    Done,
}

/// One connection's client handshake.
pub struct ClientHello {
    auth: ClientAuth,
    addr: SocketAddr,
    hello: Hello,
    state: State,
}

impl ClientHello {
    /// A handshake with `addr` (named in MUNGE credentials) under a fresh
    /// random `nonce`; returns it and the `Hello` frame's body to send.
    pub fn new(auth: &ClientAuth, addr: SocketAddr, nonce: [u8; 16]) -> (Self, Vec<u8>) {
        let flags = if matches!(auth, ClientAuth::Munge { .. }) { Hello::MUNGE } else { 0 };
        let hello = Hello { nonce, flags };
        (ClientHello { auth: auth.clone(), addr, hello, state: State::AwaitChallenge }, hello.encode().to_vec())
    }

    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// The server's next frame.
    pub fn frame(&mut self, head: &Header, body: &[u8]) -> Result<HelloStep, NetError> {
        let addr = self.addr;
        let refused = |reason: String| NetError::Handshake { addr, reason };
        match std::mem::replace(&mut self.state, State::Done) {
            State::AwaitChallenge => {
                expect(addr, head, body, FrameKind::Challenge, Challenge::LEN..=Challenge::LEN)?;
                let challenge = Challenge::decode(body).map_err(|source| NetError::Protocol { addr, source })?;
                let proof = match &self.auth {
                    ClientAuth::Secret(s) => s.client_proof(&self.hello, &challenge).encode().to_vec(),
                    ClientAuth::Munge { munge, .. } => {
                        munge.encode(&self.hello.munge_payload(&challenge, false, &addr.to_string())).map_err(|e| refused(e.to_string()))?.into_bytes()
                    }
                };
                self.state = State::AwaitWelcome(challenge);
                Ok(HelloStep::Send(FrameKind::Proof, proof))
            }
            State::AwaitWelcome(challenge) => {
                match &self.auth {
                    ClientAuth::Secret(s) => {
                        expect(addr, head, body, FrameKind::Welcome, Proof::LEN..=Proof::LEN)?;
                        let proof = Proof::decode(body).map_err(|source| NetError::Protocol { addr, source })?;
                        if !s.verify_server_proof(&self.hello, &challenge, &proof) {
                            return Err(refused("server does not know the cluster secret".into()));
                        }
                    }
                    // The server's credential must come from the servers'
                    // uid (no other user poses as a server) and be for
                    // this connection.
                    ClientAuth::Munge { munge, server_uid } => {
                        expect(addr, head, body, FrameKind::Welcome, 1..=MAX_CRED_LEN)?;
                        let theirs = munge.decode(body).map_err(|e| refused(format!("the server's credential: {e}")))?;
                        if theirs.uid != *server_uid {
                            return Err(refused(format!("the server proved uid {}, not the cluster's server uid {server_uid}", theirs.uid)));
                        }
                        if theirs.payload != self.hello.munge_payload(&challenge, true, &addr.to_string()) {
                            return Err(refused("the server's credential is for another connection".into()));
                        }
                    }
                }
                Ok(HelloStep::Done)
            }
            State::Done => Err(NetError::Violation { addr, what: format!("a {:?} frame after the handshake finished", head.kind) }),
        }
    }
}

/// `Ok` if the frame is the `want` frame of an allowed size; the server's
/// reason if it is an error answer.
fn expect(addr: SocketAddr, head: &Header, body: &[u8], want: FrameKind, len: RangeInclusive<usize>) -> Result<(), NetError> {
    match head.kind {
        k if k == want && len.contains(&body.len()) && head.pay_len == 0 => Ok(()),
        FrameKind::Response => match Response::decode(body) {
            Ok(Response::Error { code: ErrorCode::Busy, message }) => Err(NetError::Busy { addr, reason: message }),
            Ok(Response::Error { code, message }) => Err(NetError::Handshake { addr, reason: format!("{}: {message}", code.name()) }),
            _ => Err(NetError::Violation { addr, what: "unexpected response during the handshake".into() }),
        },
        k => Err(NetError::Violation { addr, what: format!("expected {want:?} of {len:?} bytes during the handshake, got {k:?} of {}", body.len()) }),
    }
}
