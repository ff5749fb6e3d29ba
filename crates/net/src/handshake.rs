//! The connection handshake, both sides, blocking with timeouts: thin
//! wrappers over the machines of [`crate::link`] that the endpoint and the
//! servers' event loop run.
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

use crate::budget::MemoryBudget;
use crate::frame_io::{read_header, read_vec, write_frame, FrameReadError};
use crate::link::hello::{ClientHello, HelloStep};
use crate::link::server::{Close, ConnLimits, Event, ServerConn};
use crate::munge::Munge;
use crate::NetError;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Instant;
use weft_wire::{ErrorCode, FrameKind, MsgId, Secret};

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

/// Client side, blocking: drives the handshake machine
/// ([`crate::link::hello`]) over `stream` (TCP or shared memory), which
/// must time out its reads and writes.
pub fn client_handshake(stream: &mut (impl Read + Write), addr: SocketAddr, auth: impl Into<ClientAuth>, nonce: [u8; 16]) -> Result<(), NetError> {
    let io_err = |e: std::io::Error| NetError::Unreachable { addr, source: e };
    let (mut machine, hello) = ClientHello::new(&auth.into(), addr, nonce);
    write_frame(stream, FrameKind::Hello, MsgId(0), &hello, &[]).map_err(io_err)?;
    loop {
        let head = match read_header(stream) {
            Ok(h) => h,
            // Closed without a word (a refusal sends one): the server went
            // away, say killed while starting; nothing was sent yet, so a
            // call may be sent again as after a refused connect.
            Err(FrameReadError::Closed) => return Err(io_err(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "the server closed the connection during the handshake"))),
            Err(FrameReadError::Io(e)) => return Err(io_err(e)),
            Err(FrameReadError::Decode(e)) => return Err(NetError::Handshake { addr, reason: e.to_string() }),
        };
        let body = read_vec(stream, head.body_len as usize).map_err(io_err)?;
        match machine.frame(&head, &body)? {
            HelloStep::Send(kind, body) => write_frame(stream, kind, MsgId(0), &body, &[]).map_err(io_err)?,
            HelloStep::Done => return Ok(()),
        }
    }
}

/// The liveness watch's probe: sends a `Hello` and waits for the server's
/// first frame (its `Challenge`, or a refusal in words). Any frame proves
/// the server's event loop runs; no credential is made or checked, so a
/// slow `munged` on either side does not make a live server look dead.
pub fn hello_answered(stream: &mut (impl Read + Write), addr: SocketAddr, nonce: [u8; 16]) -> Result<(), NetError> {
    let io_err = |e: std::io::Error| NetError::Unreachable { addr, source: e };
    let hello = weft_wire::Hello { nonce, flags: 0 }.encode();
    write_frame(stream, FrameKind::Hello, MsgId(0), &hello, &[]).map_err(io_err)?;
    match read_header(stream) {
        Ok(_) => Ok(()),
        Err(FrameReadError::Closed) => Err(io_err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "closed without a word"))),
        Err(FrameReadError::Io(e)) => Err(io_err(e)),
        // Bytes came: the loop runs, whatever they say.
        Err(FrameReadError::Decode(_)) => Ok(()),
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

/// Server side, blocking (for test peers and tools; `weft serve` runs the
/// same machine, [`ServerConn`], in its event loop). `server_nonce` must be
/// fresh and random. On refusal it tells the client why (when it can) and
/// the caller closes the connection. Reads only the handshake's bytes.
pub fn server_handshake(stream: &mut TcpStream, secret: &Secret, server_nonce: [u8; 16]) -> Result<(), Refusal> {
    let limits = Arc::new(ConnLimits { memory_share: 1 << 20, ..ConnLimits::default() });
    let mut conn = ServerConn::new(Instant::now(), limits, MemoryBudget::new(1 << 20), server_nonce);
    let mut events = Vec::new();
    loop {
        while conn.has_output() {
            let slices = conn.tx_slices(16);
            let n = stream.write_vectored(&slices).map_err(Refusal::Io)?;
            if n == 0 {
                return Err(Refusal::Io(std::io::ErrorKind::WriteZero.into()));
            }
            conn.sent(n, Instant::now());
        }
        if let Some(Close(why)) = conn.closing() {
            return Err(Refusal::Rejected(why.clone()));
        }
        if events.iter().any(|e| matches!(e, Event::Ready)) {
            return Ok(());
        }
        if let Some(Event::Verify { .. }) = events.first() {
            conn.verified(Err((ErrorCode::Permission, "this peer takes the secret, not MUNGE credentials".into())), Instant::now(), &mut events);
            continue;
        }
        let Some(window) = conn.rx_window() else { return Err(Refusal::Closed) };
        match stream.read(window) {
            Ok(0) => return Err(Refusal::Closed),
            Ok(n) => conn.received(n, Instant::now(), secret, &mut events),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Refusal::Io(e)),
        }
    }
}
