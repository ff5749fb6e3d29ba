//! Opening a connection: TCP, or shared-memory rings when the server is
//! on this node and the configuration allows; then the handshake. Done by
//! the thread that needs it with the engine unlocked, so a slow connect
//! stalls no one else.

use super::engine::{self, Engine, Slot};
use super::{Endpoint, TransportChoice};
use crate::handshake::{client_handshake, ClientAuth};
use crate::transport::shm::ShmTransport;
use crate::transport::Transport;
use crate::NetError;
use mio::net::TcpStream as MioStream;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::MutexGuard;
use std::time::Instant;

impl Endpoint {
    /// Opens a connection to `peer` for batch `id`, with the engine
    /// unlocked while it connects and handshakes.
    pub(super) fn open<'g>(&'g self, mut eng: MutexGuard<'g, Engine>, id: u64, key: engine::ConnKey) -> MutexGuard<'g, Engine> {
        if let Some(b) = eng.batches.get_mut(id) {
            b.connect = None;
        }
        if eng.conns.contains_key(&key) {
            // Another thread opened it (or is opening it) meanwhile.
            return eng;
        }
        eng.conns.insert(key, Slot::Connecting);
        drop(eng);
        // If connecting panics, the slot must not stay `Connecting` forever.
        let unmark = Unmark { ep: self, key };
        let peer = key.peer;
        let opened = self.connect(peer);
        std::mem::forget(unmark);
        let mut eng = self.lock();
        eng.conns.remove(&key);
        let installed = opened.and_then(|s| {
            eng.install(key, s, &self.registry).map_err(|source| NetError::Unreachable { addr: peer, source })
        });
        if let Err(e) = installed {
            tracing::debug!(target: "weft::net", %peer, rail = key.rail, error = %e, "connect failed");
            eng.connect_failed(key, e);
        }
        // Threads waiting for this connection go on, with it or without;
        // a driver asleep in poll must post on it too.
        if eng.sleepers > 0 {
            self.turn.notify_all();
        }
        if eng.driving {
            let _ = self.waker.wake();
        }
        eng
    }

    /// A new handshaken, non-blocking connection: over shared memory
    /// when the server is on this node (and the choice allows), else TCP.
    fn connect(&self, addr: SocketAddr) -> Result<Box<dyn Transport>, NetError> {
        match self.config.transport {
            TransportChoice::Tcp => self.connect_tcp(addr),
            TransportChoice::Shm => self.connect_shm(addr),
            TransportChoice::Auto => match self.connect_shm(addr) {
                Ok(t) => Ok(t),
                // No server of that address on this node: the usual case
                // for a remote one.
                Err(NetError::Unreachable { source, .. }) if matches!(source.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused) => self.connect_tcp(addr),
                Err(e) => {
                    // A server here that offers no usable rings (its budget,
                    // or a squatter on its name): TCP still gets the truth.
                    tracing::debug!(target: "weft::net", peer = %addr, error = %e, "shared memory refused; using TCP");
                    self.connect_tcp(addr)
                }
            },
        }
    }

    fn connect_tcp(&self, addr: SocketAddr) -> Result<Box<dyn Transport>, NetError> {
        let unreachable = |source| NetError::Unreachable { addr, source };
        let s = TcpStream::connect_timeout(&addr, self.config.connect_timeout).map_err(unreachable)?;
        // A connect to a port nobody listens on, from the same host, can be
        // given that very port as its own and connect to itself (TCP's
        // simultaneous open): it would hold the port a restarting server
        // needs. Dropped at once, it is the refusal it stands for.
        if s.local_addr().ok().is_some_and(|l| s.peer_addr().is_ok_and(|p| p == l)) {
            drop(s);
            return Err(unreachable(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused (the connect reached itself)")));
        }
        s.set_nodelay(true).map_err(unreachable)?;
        s.set_read_timeout(Some(self.config.connect_timeout)).map_err(unreachable)?;
        s.set_write_timeout(Some(self.config.connect_timeout)).map_err(unreachable)?;
        // (Its writes never raise SIGPIPE in a host program.)
        client_handshake(&mut crate::transport::Quiet(&s), addr, &self.auth, rand::random())?;
        s.set_read_timeout(None).map_err(unreachable)?;
        s.set_write_timeout(None).map_err(unreachable)?;
        s.set_nonblocking(true).map_err(unreachable)?;
        Ok(Box::new(MioStream::from_std(s)))
    }

    /// Asks `addr` for the first frame of a handshake on a fresh TCP
    /// connection, on a thread of its own (the liveness watch's probe: a
    /// server that answers is alive, whatever its other connections hold),
    /// within the watch's time; says how it went in `outcome`. A probe
    /// that cannot start a thread says nothing about the server: it counts
    /// as answered (the calls keep their deadline).
    pub(super) fn probe(&self, addr: SocketAddr, outcome: std::sync::Arc<std::sync::atomic::AtomicU8>) {
        use super::liveness::{PROBE_ANSWERED, PROBE_FAILED};
        use std::sync::atomic::Ordering;
        let within = self.config.ping_after;
        let told = outcome.clone();
        let spawned = std::thread::Builder::new().name("weft-probe".into()).spawn(move || {
            let answered = (|| -> Result<(), NetError> {
                let unreachable = |source| NetError::Unreachable { addr, source };
                let s = TcpStream::connect_timeout(&addr, within).map_err(unreachable)?;
                // Connected to itself (nobody listens): as refused.
                if s.local_addr().ok().is_some_and(|l| s.peer_addr().is_ok_and(|p| p == l)) {
                    return Err(unreachable(io::Error::new(io::ErrorKind::ConnectionRefused, "the connect reached itself")));
                }
                s.set_read_timeout(Some(within)).map_err(unreachable)?;
                s.set_write_timeout(Some(within)).map_err(unreachable)?;
                // (Its writes never raise SIGPIPE in a host program.)
                crate::handshake::hello_answered(&mut crate::transport::Quiet(&s), addr, rand::random())
            })();
            if let Err(e) = &answered {
                tracing::debug!(target: "weft::net", peer = %addr, error = %e, "liveness probe: not answered");
            }
            told.store(if answered.is_ok() { PROBE_ANSWERED } else { PROBE_FAILED }, Ordering::Release);
        });
        if let Err(e) = spawned {
            tracing::warn!(target: "weft::net", peer = %addr, error = %e, "cannot start a liveness probe; the calls keep their deadline");
            outcome.store(PROBE_ANSWERED, Ordering::Release);
        }
    }

    fn connect_shm(&self, addr: SocketAddr) -> Result<Box<dyn Transport>, NetError> {
        // Who may offer the rings: the servers' uid in MUNGE mode; in secret
        // mode root or this process's own uid (servers started by the user
        // or the system). Anyone else could relay the handshake.
        let trusted = match &self.auth {
            ClientAuth::Munge { server_uid, .. } => vec![*server_uid],
            ClientAuth::Secret(_) => vec![0, nix::unistd::geteuid().as_raw()],
        };
        let mut t = ShmTransport::connect(addr, self.config.connect_timeout, &trusted).map_err(|source| NetError::Unreachable { addr, source })?;
        client_handshake(&mut t.blocking(Instant::now() + self.config.connect_timeout), addr, &self.auth, rand::random())?;
        Ok(Box::new(t))
    }
}

/// Removes a `Connecting` mark whose connect unwound.
struct Unmark<'a> {
    ep: &'a Endpoint,
    key: engine::ConnKey,
}

impl Drop for Unmark<'_> {
    fn drop(&mut self) {
        let mut eng = self.ep.lock();
        if matches!(eng.conns.get(&self.key), Some(Slot::Connecting)) {
            eng.conns.remove(&self.key);
        }
        self.ep.wake_sleepers(eng);
    }
}
