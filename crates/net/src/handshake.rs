//! The connection handshake, both sides, blocking with timeouts (the
//! servers' event loop runs the same exchange in `services::server::conn`).
//!
//! 1. The client sends `Hello { client_nonce, flags = 0 }` in a frame of its
//!    protocol version.
//! 2. The server checks the header (magic, version, reserved fields) and the
//!    hello's exact size, and answers `Challenge { server_nonce }`, fresh and
//!    random for this connection.
//! 3. The client answers `Proof`, a MAC of both nonces, the version and the
//!    flags under the secret's key.
//! 4. The server checks the proof and answers `Welcome`, its own MAC of both
//!    nonces; on any failure it sends an error `Response` saying why and
//!    closes.
//! 5. The client checks the server's proof, so it knows the server holds
//!    the secret too (mutual authentication).
//!
//! Failure stories: a client with the wrong secret gets `Handshake {
//! reason: "permission denied: ..." }` and no request of it is read; a
//! recorded hello and proof replayed on a new connection fail at step 4
//! (the server's nonce differs); a server that does not know the secret
//! fails at step 5 and the client sends it nothing.

use crate::frame_io::{read_header, read_vec, write_frame, write_response, FrameReadError};
use crate::munge::{Munge, MAX_CRED_LEN};
use crate::NetError;
use std::net::{SocketAddr, TcpStream};
use std::ops::RangeInclusive;
use weft_wire::{Challenge, ErrorCode, FrameKind, Hello, MsgId, Proof, Response, Secret};

/// How a client proves itself to the servers.
#[derive(Debug, Clone)]
pub enum ClientAuth {
    /// It holds the cluster's secret (`auth = "secret"`; servers and
    /// operators' tools in either mode).
    Secret(Secret),
    /// Its uid and gid are proven by a MUNGE credential (`auth =
    /// "munge"`); the servers prove themselves with credentials of
    /// `server_uid`.
    Munge { munge: Munge, server_uid: u32 },
}

impl From<Secret> for ClientAuth {
    fn from(s: Secret) -> Self {
        ClientAuth::Secret(s)
    }
}

impl From<&Secret> for ClientAuth {
    fn from(s: &Secret) -> Self {
        ClientAuth::Secret(s.clone())
    }
}

impl From<&ClientAuth> for ClientAuth {
    fn from(a: &ClientAuth) -> Self {
        a.clone()
    }
}

/// Reads the server's next handshake frame: `Ok(body)` if it is `want`.
fn expect_frame(stream: &mut TcpStream, addr: SocketAddr, want: FrameKind, len: RangeInclusive<usize>) -> Result<Vec<u8>, NetError> {
    let io_err = |e: std::io::Error| NetError::Unreachable { addr, source: e };
    let head = match read_header(stream) {
        Ok(h) => h,
        Err(FrameReadError::Closed) => return Err(NetError::Handshake { addr, reason: "server closed the connection".into() }),
        Err(FrameReadError::Io(e)) => return Err(io_err(e)),
        Err(FrameReadError::Decode(e)) => return Err(NetError::Handshake { addr, reason: e.to_string() }),
    };
    let body = read_vec(stream, head.body_len as usize).map_err(io_err)?;
    match head.kind {
        k if k == want && len.contains(&body.len()) && head.pay_len == 0 => Ok(body),
        FrameKind::Response => match Response::decode(&body) {
            Ok(Response::Error { code: ErrorCode::Busy, message }) => Err(NetError::Busy { addr, reason: message }),
            Ok(Response::Error { code, message }) => Err(NetError::Handshake { addr, reason: format!("{}: {message}", code.name()) }),
            _ => Err(NetError::Violation { addr, what: "unexpected response during the handshake".into() }),
        },
        k => Err(NetError::Violation { addr, what: format!("expected {want:?} of {len:?} bytes during the handshake, got {k:?} of {}", body.len()) }),
    }
}

/// Client side. The stream must have read/write timeouts set.
pub fn client_handshake(stream: &mut TcpStream, addr: SocketAddr, auth: impl Into<ClientAuth>, nonce: [u8; 16]) -> Result<(), NetError> {
    let secret = match auth.into() {
        ClientAuth::Secret(s) => s,
        ClientAuth::Munge { munge, server_uid } => return munge_handshake(stream, addr, &munge, server_uid, nonce),
    };
    let io_err = |e: std::io::Error| NetError::Unreachable { addr, source: e };
    let hello = Hello { nonce, flags: 0 };
    write_frame(stream, FrameKind::Hello, MsgId(0), &hello.encode(), &[]).map_err(io_err)?;
    let body = expect_frame(stream, addr, FrameKind::Challenge, Challenge::LEN..=Challenge::LEN)?;
    let challenge = Challenge::decode(&body).map_err(|source| NetError::Protocol { addr, source })?;
    write_frame(stream, FrameKind::Proof, MsgId(0), &secret.client_proof(&hello, &challenge).encode(), &[]).map_err(io_err)?;
    let body = expect_frame(stream, addr, FrameKind::Welcome, Proof::LEN..=Proof::LEN)?;
    let proof = Proof::decode(&body).map_err(|source| NetError::Protocol { addr, source })?;
    if secret.verify_server_proof(&hello, &challenge, &proof) {
        Ok(())
    } else {
        Err(NetError::Handshake { addr, reason: "server does not know the cluster secret".into() })
    }
}

/// The MUNGE variant: the proof is a credential of this process's uid
/// and gid over both nonces and the address dialled; the server answers
/// with one of its own, which must come from `server_uid` (so a process of
/// another user cannot pose as a server), and takes the client's only if
/// the address is its own (so a process posing as a server cannot relay
/// it to a real one).
fn munge_handshake(stream: &mut TcpStream, addr: SocketAddr, munge: &Munge, server_uid: u32, nonce: [u8; 16]) -> Result<(), NetError> {
    let io_err = |e: std::io::Error| NetError::Unreachable { addr, source: e };
    let refused = |reason: String| NetError::Handshake { addr, reason };
    let hello = Hello { nonce, flags: Hello::MUNGE };
    write_frame(stream, FrameKind::Hello, MsgId(0), &hello.encode(), &[]).map_err(io_err)?;
    let body = expect_frame(stream, addr, FrameKind::Challenge, Challenge::LEN..=Challenge::LEN)?;
    let challenge = Challenge::decode(&body).map_err(|source| NetError::Protocol { addr, source })?;
    let server = addr.to_string();
    let cred = munge.encode(&hello.munge_payload(&challenge, false, &server)).map_err(|e| refused(e.to_string()))?;
    write_frame(stream, FrameKind::Proof, MsgId(0), cred.as_bytes(), &[]).map_err(io_err)?;
    let body = expect_frame(stream, addr, FrameKind::Welcome, 1..=MAX_CRED_LEN)?;
    let theirs = munge.decode(&body).map_err(|e| refused(format!("the server's credential: {e}")))?;
    if theirs.uid != server_uid {
        return Err(refused(format!("the server proved uid {}, not the cluster's server uid {server_uid}", theirs.uid)));
    }
    if theirs.payload != hello.munge_payload(&challenge, true, &server) {
        return Err(refused("the server's credential is for another connection".into()));
    }
    Ok(())
}

/// Why a server refused a connection.
#[derive(Debug)]
pub enum Refusal {
    Io(std::io::Error),
    Closed,
    /// The reason was sent to the client before closing.
    Rejected(String),
}

/// Server side, blocking (for test peers and tools; `weft serve` runs the
/// same exchange in its event loop). `server_nonce` must be fresh and
/// random. On refusal it tells the client why (when it can) and the caller
/// closes the connection.
pub fn server_handshake(stream: &mut TcpStream, secret: &Secret, server_nonce: [u8; 16]) -> Result<(), Refusal> {
    let reject = |stream: &mut TcpStream, code: ErrorCode, why: String| {
        let _ = write_response(stream, MsgId(0), &Response::error(code, why.clone()), &[]);
        Refusal::Rejected(why)
    };
    let read = |stream: &mut TcpStream, want: FrameKind, len: usize| -> Result<Vec<u8>, Refusal> {
        let head = match read_header(stream) {
            Ok(h) => h,
            Err(FrameReadError::Closed) => return Err(Refusal::Closed),
            Err(FrameReadError::Io(e)) => return Err(Refusal::Io(e)),
            Err(FrameReadError::Decode(e)) => return Err(reject(stream, ErrorCode::BadRequest, e.to_string())),
        };
        if head.kind != want || head.body_len as usize != len || head.pay_len != 0 || head.flags != 0 || head.msg_id != MsgId(0) {
            return Err(reject(stream, ErrorCode::BadRequest, format!("expected {want:?} of {len} bytes, got {:?} of {} + {}", head.kind, head.body_len, head.pay_len)));
        }
        read_vec(stream, len).map_err(Refusal::Io)
    };
    let body = read(stream, FrameKind::Hello, Hello::LEN)?;
    let hello = match Hello::decode(&body) {
        Ok(h) => h,
        Err(e) => return Err(reject(stream, ErrorCode::BadRequest, format!("bad hello: {e}"))),
    };
    if hello.munge() {
        return Err(reject(stream, ErrorCode::Permission, "this peer takes the secret, not MUNGE credentials".into()));
    }
    let challenge = Challenge { nonce: server_nonce };
    write_frame(stream, FrameKind::Challenge, MsgId(0), &challenge.encode(), &[]).map_err(Refusal::Io)?;
    let body = read(stream, FrameKind::Proof, Proof::LEN)?;
    let proof = Proof::decode(&body).map_err(|e| reject(stream, ErrorCode::BadRequest, format!("bad proof: {e}")))?;
    if !secret.verify_client_proof(&hello, &challenge, &proof) {
        return Err(reject(stream, ErrorCode::Permission, "wrong cluster secret".into()));
    }
    write_frame(stream, FrameKind::Welcome, MsgId(0), &secret.server_proof(&hello, &challenge).encode(), &[]).map_err(Refusal::Io)
}
