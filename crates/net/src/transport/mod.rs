//! What moves a connection's bytes. The protocol machines ([`crate::link`])
//! never touch one; the endpoint and the servers' event loop move bytes
//! between a machine and its transport: TCP (`tcp.rs`), or shared memory
//! ([`shm`]) for a client on the server's node.

pub mod area;
mod mapping;
pub mod ring;
pub mod shm;
mod sys;
mod tcp;

pub(crate) use tcp::Quiet;

use std::io::{self, IoSlice, IoSliceMut};

/// A non-blocking, pollable byte stream to one peer.
pub trait Transport: Send {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    /// May leave `bufs` advanced past what it read (shared memory does):
    /// callers make them afresh for each read.
    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize>;
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
    /// Whether a connection with nothing in flight is still usable: no byte
    /// to read and no end of stream (the peer restarted or misbehaved).
    fn idle_is_healthy(&self) -> bool;
    /// A poll event for this transport arrived (`closed`: it saw the peer
    /// close, or an error): takes what must be taken (a doorbell) and says
    /// whether to try reading and writing.
    fn on_event(&mut self, readable: bool, writable: bool, _closed: bool) -> (bool, bool) {
        (readable, writable)
    }
    /// Whether bytes (or an end of stream) wait to be read, without a
    /// system call: a poller that spins before it blocks asks this
    /// (shared memory; a socket answers `false` and is left to the poller).
    fn input_pending(&self) -> bool {
        false
    }
    /// Server side: sends the peer a descriptor (an object lent for local
    /// reads, `DataReq::Lend`), ahead of whatever is written next. Only a
    /// transport with a Unix socket under it can.
    fn lend(&mut self, _fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "objects are lent only over shared memory (a client on the server's node)"))
    }
    /// Client side: whether the server offered a shared area (its large
    /// writes are placed there, not split over rails).
    fn has_area(&self) -> bool {
        false
    }
    /// Client side: copies a rendezvous payload (`len` bytes, the
    /// concatenation of `parts`) into the shared area at `at`, where the
    /// server's grant placed it. Only shared memory has an area; a place
    /// outside it is the server breaking the rules.
    fn place(&mut self, _at: u64, _len: usize, _parts: &mut dyn Iterator<Item = &[u8]>) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::InvalidData, "a payload placed in a shared area over a connection without one"))
    }
    /// Client side: the descriptors the peer lent so far, oldest first
    /// (including those still waiting in the socket).
    fn take_lent(&mut self) -> Vec<std::os::fd::OwnedFd> {
        Vec::new()
    }
    /// Whether a read that returns fewer bytes than it asked for says that
    /// nothing more waits now, and that bytes coming later raise a readiness
    /// event of their own (an edge-triggered socket; shared memory, whose
    /// short read has asked for a doorbell): the reader need not read
    /// again to hear `WouldBlock`. The reader still reads on after a poll
    /// event that saw the peer close, since the end of stream may have
    /// come with the bytes.
    fn short_read_drains(&self) -> bool {
        false
    }
    /// Its readiness source, to register with a poller.
    fn source(&mut self) -> &mut dyn mio::event::Source;
    /// A short name for status output.
    fn kind(&self) -> &'static str;
}
