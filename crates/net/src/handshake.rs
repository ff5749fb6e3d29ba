//! The connection handshake, both sides, blocking with timeouts.
//!
//! 1. The client sends `Hello { nonce, mac }` in a frame of its protocol version.
//! 2. The server checks the header (magic, version) and the MAC. On success it
//!    answers `HelloAck { mac }`; on failure an error `Response` saying why,
//!    then it closes the connection.
//! 3. The client checks the ack's MAC, so it knows the server has the secret too.
//!
//! Failure story: a client with the wrong secret gets `Handshake { reason:
//! "permission denied: ..." }` and no request is ever read from it.

use crate::frame_io::{read_header, read_vec, write_frame, write_response, FrameReadError};
use crate::NetError;
use std::net::{SocketAddr, TcpStream};
use weft_wire::{DecodeError, ErrorCode, FrameKind, Hello, HelloAck, MsgId, Response, Secret};

/// Client side. The stream must have read/write timeouts set.
pub fn client_handshake(stream: &mut TcpStream, addr: SocketAddr, secret: &Secret, nonce: [u8; 16]) -> Result<(), NetError> {
    let hello = secret.hello(nonce);
    let io_err = |e: std::io::Error| NetError::Unreachable { addr, source: e };
    write_frame(stream, FrameKind::Hello, MsgId(0), &hello.encode(), &[]).map_err(io_err)?;
    let head = match read_header(stream) {
        Ok(h) => h,
        Err(FrameReadError::Closed) => {
            return Err(NetError::Handshake { addr, reason: "server closed the connection".into() });
        }
        Err(FrameReadError::Io(e)) => return Err(io_err(e)),
        Err(FrameReadError::Decode(e)) => return Err(NetError::Handshake { addr, reason: e.to_string() }),
    };
    let body = read_vec(stream, head.body_len as usize).map_err(io_err)?;
    match head.kind {
        FrameKind::HelloAck => {
            let ack = HelloAck::decode(&body).map_err(|source| NetError::Protocol { addr, source })?;
            if secret.verify_ack(&hello, &ack) {
                Ok(())
            } else {
                Err(NetError::Handshake { addr, reason: "server does not know the cluster secret".into() })
            }
        }
        FrameKind::Response => match Response::decode(&body) {
            Ok(Response::Error { code: weft_wire::ErrorCode::Busy, message }) => Err(NetError::Busy { addr, reason: message }),
            Ok(Response::Error { code, message }) => {
                Err(NetError::Handshake { addr, reason: format!("{}: {message}", code.name()) })
            }
            _ => Err(NetError::Violation { addr, what: "unexpected response to hello".into() }),
        },
        k => Err(NetError::Violation { addr, what: format!("unexpected {k:?} frame during handshake") }),
    }
}

/// Why a server refused a connection.
#[derive(Debug)]
pub enum Refusal {
    Io(std::io::Error),
    Closed,
    /// The reason was sent to the client before closing.
    Rejected(String),
}

/// Server side. On refusal it tells the client why (when it can) and the
/// caller closes the connection.
pub fn server_handshake(stream: &mut TcpStream, secret: &Secret) -> Result<(), Refusal> {
    let reject = |stream: &mut TcpStream, code: ErrorCode, why: String| {
        let _ = write_response(stream, MsgId(0), &Response::error(code, why.clone()), &[]);
        Refusal::Rejected(why)
    };
    let head = match read_header(stream) {
        Ok(h) => h,
        Err(FrameReadError::Closed) => return Err(Refusal::Closed),
        Err(FrameReadError::Io(e)) => return Err(Refusal::Io(e)),
        Err(FrameReadError::Decode(e @ DecodeError::BadVersion { .. })) => {
            return Err(reject(stream, ErrorCode::BadRequest, e.to_string()));
        }
        Err(FrameReadError::Decode(e)) => return Err(reject(stream, ErrorCode::BadRequest, e.to_string())),
    };
    if head.kind != FrameKind::Hello || head.pay_len != 0 {
        return Err(reject(stream, ErrorCode::BadRequest, format!("expected a hello frame, got {:?}", head.kind)));
    }
    let body = read_vec(stream, head.body_len as usize).map_err(Refusal::Io)?;
    let hello = match Hello::decode(&body) {
        Ok(h) => h,
        Err(e) => return Err(reject(stream, ErrorCode::BadRequest, format!("bad hello: {e}"))),
    };
    if !secret.verify_hello(&hello) {
        return Err(reject(stream, ErrorCode::Permission, "wrong cluster secret".into()));
    }
    write_frame(stream, FrameKind::HelloAck, MsgId(0), &secret.ack(&hello).encode(), &[]).map_err(Refusal::Io)
}
