//! Message-layer errors; each names the peer it happened with.

use std::net::SocketAddr;
use std::time::Duration;
use thiserror::Error;
use weft_wire::DecodeError;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum NetError {
    /// Connecting failed, or the connection broke (reset, closed) mid-operation.
    #[error("server {addr} unreachable: {source}")]
    Unreachable { addr: SocketAddr, source: std::io::Error },
    #[error("server {addr} did not answer within {after:?}")]
    Timeout { addr: SocketAddr, after: Duration },
    /// Not asked: the server let a call run out its deadline `ago`, and
    /// calls to it fail at once for a while (see `endpoint::unanswered`).
    #[error("server {addr} not asked: it did not answer a call {ago:?} ago")]
    Unanswered { addr: SocketAddr, ago: Duration },
    /// The server is at its connection limit and refused this connection.
    #[error("server {addr} busy: {reason}")]
    Busy { addr: SocketAddr, reason: String },
    /// The handshake failed: wrong shared secret or protocol version.
    #[error("handshake with {addr} failed: {reason}")]
    Handshake { addr: SocketAddr, reason: String },
    /// The peer sent bytes that are not valid Weft frames.
    #[error("protocol error from {addr}: {source}")]
    Protocol { addr: SocketAddr, source: DecodeError },
    /// The peer broke the exchange rules (unexpected frame, oversized payload).
    #[error("protocol violation by {addr}: {what}")]
    Violation { addr: SocketAddr, what: String },
    /// The server closed the connection and said why (a frame of message
    /// id 0: its user holds its share of connections, a bad frame, ...).
    #[error("server {addr} closed the connection: {reason}")]
    Closed { addr: SocketAddr, reason: String },
    /// The server is stopping (SIGTERM) and closed the connection after
    /// answering what it had started: a call it did not answer was not
    /// applied, and may be sent again once the server is back.
    #[error("server {addr} is stopping: {reason}")]
    Stopping { addr: SocketAddr, reason: String },
}

impl NetError {
    pub fn addr(&self) -> SocketAddr {
        match self {
            NetError::Unreachable { addr, .. }
            | NetError::Timeout { addr, .. }
            | NetError::Unanswered { addr, .. }
            | NetError::Handshake { addr, .. }
            | NetError::Busy { addr, .. }
            | NetError::Protocol { addr, .. }
            | NetError::Violation { addr, .. }
            | NetError::Closed { addr, .. }
            | NetError::Stopping { addr, .. } => *addr,
        }
    }

    /// Maps an I/O error on an established connection to `Timeout` or `Unreachable`.
    pub fn from_io(addr: SocketAddr, e: std::io::Error, timeout: Duration) -> Self {
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => NetError::Timeout { addr, after: timeout },
            _ => NetError::Unreachable { addr, source: e },
        }
    }
}
