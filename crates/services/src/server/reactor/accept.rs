//! New connections: over TCP from the listener, or shared-memory rings
//! for a client on this node; each takes a slot of the loop (within the
//! connection limit) with its protocol machine and rail token.

use super::{Reactor, Slot, FIRST_SLOT};
use crate::server::workers::ConnRef;
use mio::{Interest, Token};
use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::time::Instant;
use weft_net::budget::Charge;
use weft_net::link::ServerConn as Conn;
use weft_net::transport::shm::{mapping_len, ShmTransport, AREA_LEN, RING_CAP};
use weft_net::transport::Transport;
use weft_wire::{ErrorCode, FrameKind, Header, MsgId, Response};

/// A server's connection limit: `configured` (`WEFT_MAX_CONNECTIONS`),
/// at most as many as the descriptor limit allows (raised to its hard
/// maximum at start), less a reserve for object files and the database.
pub(super) fn max_connections(configured: Option<usize>) -> usize {
    let fd_limit = raise_fd_limit();
    let reserve = 640;
    let by_fds = fd_limit.saturating_sub(reserve).max(16) as usize;
    configured.map_or(by_fds, |n| n.min(by_fds))
}

/// Raises the soft descriptor limit to the hard one; returns the result.
fn raise_fd_limit() -> u64 {
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if soft < hard && nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                hard
            } else {
                soft
            }
        }
        Err(_) => 1024,
    }
}

impl Reactor {
    pub(super) fn accept(&mut self) {
        if self.draining {
            return;
        }
        loop {
            let (mut stream, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors or similar: the connection waits in
                    // the backlog; the next readiness or sweep tries again.
                    tracing::warn!(target: "weft::server", error = %e, "accept failed");
                    return;
                }
            };
            if self.live >= self.max_connections && !self.take_back_idle() {
                // Tell the client why before closing (best effort: the
                // frame is small and the socket buffer empty).
                let rsp = Response::error(ErrorCode::Busy, format!("server at its connection limit ({})", self.max_connections));
                let body = rsp.encode();
                let mut frame = Header::new(FrameKind::Response, MsgId(0), body.len(), 0).encode().to_vec();
                frame.extend_from_slice(&body);
                let _ = stream.write(&frame);
                self.server.count_refused_connection();
                continue;
            }
            let _ = stream.set_nodelay(true);
            self.install(Box::new(stream), None, None, peer);
        }
    }

    /// A client on this node asks for shared-memory rings: they are made,
    /// drawn from the rings' budget, and offered; past the connection limit
    /// or that budget, the socket closes and the client uses TCP.
    pub(super) fn accept_shm(&mut self) {
        if self.draining {
            return;
        }
        loop {
            let Some(l) = &self.shm_listener else { return };
            let bell = match l.accept() {
                Ok((bell, _)) => bell,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(target: "weft::server", error = %e, "shared-memory accept failed");
                    return;
                }
            };
            let charge = self.shm_budget.try_charge(mapping_len(RING_CAP) as u64);
            if charge.is_none() || (self.live >= self.max_connections && !self.take_back_idle()) {
                self.server.count_refused_connection();
                continue;
            }
            // mio's stream is a std one underneath; the offer never blocks.
            let bell = std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(bell));
            // The area's pages are drawn from the same budget as they are
            // first used (`weft_net::transport::area`).
            match ShmTransport::offer(bell, RING_CAP, Some((AREA_LEN, self.shm_budget.clone()))) {
                Ok(t) => {
                    let area = t.area();
                    self.install(Box::new(t), charge, area, SocketAddr::from(([127, 0, 0, 1], 0)));
                }
                Err(e) => tracing::debug!(target: "weft::server", error = %e, "shared-memory offer failed"),
            }
        }
    }

    /// Takes a new connection into a slot of the loop.
    fn install(&mut self, mut stream: Box<dyn Transport>, rings: Option<Charge>, area: Option<std::sync::Arc<weft_net::transport::area::Area>>, peer: SocketAddr) {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        // Writable too for shared memory: the wake-up when the client
        // drains a doorbell comes just before its next request (readable
        // alone on both sides made round trips 40% longer; see the
        // client's registration in `weft_net`'s `endpoint/engine.rs`).
        if let Err(e) = self.poll.registry().register(stream.source(), Token(slot + FIRST_SLOT), Interest::READABLE | Interest::WRITABLE) {
            tracing::warn!(target: "weft::server", error = %e, "cannot register a connection");
            self.free.push(slot);
            return;
        }
        self.next_gen += 1;
        if stream.kind() == "shm" {
            self.shm_slots.push(slot);
        }
        let token = self.rails.register(ConnRef { slot, generation: self.next_gen });
        let conn = Conn::new(Instant::now(), self.limits.clone(), self.budget.clone(), rand::random()).with_rail_token(token).with_area(area);
        self.slots[slot] = Some(Slot { conn, stream, _rings: rings, peer, generation: self.next_gen, ready: VecDeque::new(), in_service: 0, stalled: false, user: None, over_quota: false, read_closed: false });
        self.live += 1;
        self.server.connections.store(self.live as u64, std::sync::atomic::Ordering::Relaxed);
        self.server.shm_connections.store(self.shm_slots.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }
}
