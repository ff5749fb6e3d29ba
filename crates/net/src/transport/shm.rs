//! The shared-memory transport, for a client on the same node as a server
//! (the MPI-IO library, the mount, the CLI): two byte rings ([`super::ring`])
//! in one sealed memfd, and a Unix socket that carries nothing but
//! doorbells and end of stream.
//!
//! Set-up: the server listens on the abstract Unix socket
//! `weft-<ip>:<port>` of its TCP address (abstract names live in the
//! network namespace, so only a client on the same node, in the same
//! namespace, finds it). On a connection it makes a memfd of two rings,
//! seals its size (no one can shrink it under the other's feet, which
//! would kill the reader with SIGBUS), maps it and sends it with an
//! 12-byte offer (`WEFTSHM1`, ring capacity u32 LE). The client checks the
//! offer, the size and the seals, maps it, and both run the ordinary Weft
//! handshake and protocol over the rings: whoever listens on the name must
//! still prove the cluster's secret (or MUNGE identity).
//!
//! Bytes are copied once into the ring and once out of it; a ring is
//! 1 MiB each way, drawn from the server's memory budget.
// Mapping shared memory and taking a descriptor from a control message.
#![allow(unsafe_code)]

use super::ring::{Corrupt, RingEnd, HEADER};
use super::Transport;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixSocketAddr, UnixStream as StdUnixStream};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

/// Bytes of each ring.
pub const RING_CAP: usize = 1 << 20;
/// Rings offered outside these bounds are refused.
const MIN_CAP: usize = 4096;
const MAX_CAP: usize = 64 << 20;
const MAGIC: &[u8; 8] = b"WEFTSHM1";
const OFFER_LEN: usize = 12;

/// The abstract socket name a server on `addr` listens on.
pub fn socket_name(addr: SocketAddr) -> String {
    format!("weft-{addr}")
}

/// The abstract address of `addr`'s shared-memory socket.
pub fn socket_addr(addr: SocketAddr) -> io::Result<UnixSocketAddr> {
    UnixSocketAddr::from_abstract_name(socket_name(addr).as_bytes())
}

/// Bytes a connection's rings take (what the server draws from its budget).
pub fn mapping_len(cap: usize) -> usize {
    2 * (HEADER + cap)
}

/// A shared mapping, unmapped when dropped.
struct Mapping {
    ptr: NonNull<std::ffi::c_void>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; the rings synchronise access.
unsafe impl Send for Mapping {}

impl Mapping {
    fn new(fd: &OwnedFd, len: usize) -> io::Result<Self> {
        use nix::sys::mman::{mmap, MapFlags, ProtFlags};
        let n = NonZeroUsize::new(len).ok_or(io::ErrorKind::InvalidInput)?;
        // SAFETY: a fresh shared mapping of a sealed memfd of at least `len`
        // bytes; nothing else in this process aliases it.
        let ptr = unsafe { mmap(None, n, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED, fd, 0) }.map_err(io::Error::from)?;
        Ok(Mapping { ptr, len })
    }

    fn base(&self) -> *mut u8 {
        self.ptr.as_ptr() as *mut u8
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`, unmapped once; the ring ends die with it.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr, self.len) };
    }
}

/// One connection over shared memory (either side).
pub struct ShmTransport {
    rx: RingEnd,
    tx: RingEnd,
    bell: mio::net::UnixStream,
    /// The peer closed its socket: nothing more will come.
    peer_closed: bool,
    // Last: the ring ends point into it.
    _map: Mapping,
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

fn corrupt(_: Corrupt) -> io::Error {
    bad("the peer broke the shared-memory ring's rules")
}

impl ShmTransport {
    /// Server side: makes the rings for the client on `bell` and offers them.
    pub fn offer(bell: StdUnixStream, cap: usize) -> io::Result<Self> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::memfd::{memfd_create, MFdFlags};
        let len = mapping_len(cap);
        let fd = memfd_create("weft-shm", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).map_err(io::Error::from)?;
        nix::unistd::ftruncate(&fd, len as i64).map_err(io::Error::from)?;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL)).map_err(io::Error::from)?;
        let map = Mapping::new(&fd, len)?;
        let mut offer = [0u8; OFFER_LEN];
        offer[..8].copy_from_slice(MAGIC);
        offer[8..].copy_from_slice(&(cap as u32).to_le_bytes());
        let fds = [fd.as_raw_fd()];
        // A fresh socket's buffer takes 12 bytes and a descriptor at once.
        sendmsg::<UnixAddr>(bell.as_raw_fd(), &[IoSlice::new(&offer)], &[ControlMessage::ScmRights(&fds)], MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL, None)
            .map_err(io::Error::from)?;
        bell.set_nonblocking(true)?;
        // SAFETY: both rings lie within the mapping, which the transport owns.
        let (rx, tx) = unsafe { (RingEnd::new(map.base(), cap), RingEnd::new(map.base().add(HEADER + cap), cap)) };
        Ok(ShmTransport { rx, tx, bell: mio::net::UnixStream::from_std(bell), peer_closed: false, _map: map })
    }

    /// Client side: the rings of the server on `addr`, if one listens on
    /// this node (`NotFound` or `ConnectionRefused` if none does).
    pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Self> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        let bell = StdUnixStream::connect_addr(&socket_addr(addr)?)?;
        bell.set_read_timeout(Some(timeout))?;
        let mut offer = [0u8; OFFER_LEN];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        let (got, fd) = {
            let mut iov = [IoSliceMut::new(&mut offer)];
            let msg = recvmsg::<UnixAddr>(bell.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC).map_err(io::Error::from)?;
            let mut fd = None;
            for c in msg.cmsgs().map_err(io::Error::from)? {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    for raw in fds {
                        // SAFETY: the kernel just gave us this descriptor.
                        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                        fd.get_or_insert(owned);
                    }
                }
            }
            (msg.bytes, fd)
        };
        if got != OFFER_LEN || &offer[..8] != MAGIC {
            return Err(bad("not a Weft shared-memory offer"));
        }
        let fd = fd.ok_or_else(|| bad("the shared-memory offer carried no memory"))?;
        let cap = u32::from_le_bytes(offer[8..].try_into().expect("4 bytes")) as usize;
        if !(MIN_CAP..=MAX_CAP).contains(&cap) {
            return Err(bad(format!("shared-memory rings of {cap} bytes")));
        }
        let len = mapping_len(cap);
        let size = nix::sys::stat::fstat(fd.as_fd()).map_err(io::Error::from)?.st_size;
        let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).map_err(io::Error::from)?;
        let sealed = SealFlag::from_bits_truncate(seals).contains(SealFlag::F_SEAL_SHRINK);
        if size != len as i64 || !sealed {
            return Err(bad("the shared memory offered is not sealed at its size"));
        }
        let map = Mapping::new(&fd, len)?;
        bell.set_read_timeout(None)?;
        bell.set_nonblocking(true)?;
        // SAFETY: as in `offer`, the other way round.
        let (tx, rx) = unsafe { (RingEnd::new(map.base(), cap), RingEnd::new(map.base().add(HEADER + cap), cap)) };
        Ok(ShmTransport { rx, tx, bell: mio::net::UnixStream::from_std(bell), peer_closed: false, _map: map })
    }

    /// Wakes the peer (best effort: a full socket already holds wake-ups).
    fn ring(&mut self) {
        let _ = (&self.bell).write(&[1]);
    }

    /// Takes the doorbells rung so far; notes an end of stream.
    fn drain_bell(&mut self) {
        let mut b = [0u8; 64];
        loop {
            match (&self.bell).read(&mut b) {
                Ok(0) => {
                    self.peer_closed = true;
                    return;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // WouldBlock, or the peer is gone (reset): either way done.
                Err(e) => {
                    if e.kind() != io::ErrorKind::WouldBlock {
                        self.peer_closed = true;
                    }
                    return;
                }
            }
        }
    }

    /// A blocking view, for the handshake: reads and writes wait for the
    /// peer until `deadline`.
    pub fn blocking(&mut self, deadline: Instant) -> Blocking<'_> {
        Blocking { t: self, deadline }
    }

    /// Waits until the doorbell rings or `deadline` passes.
    fn wait_bell(&mut self, deadline: Instant) -> io::Result<()> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let ms = PollTimeout::try_from(left.as_millis().max(1) as u64).unwrap_or(PollTimeout::MAX);
        let fd = self.bell.as_fd();
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        self.drain_bell();
        Ok(())
    }
}

impl Transport for ShmTransport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_vectored(&mut [IoSliceMut::new(buf)])
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        loop {
            let n = self.rx.read_vectored(bufs).map_err(corrupt)?;
            if n > 0 || bufs.iter().all(|b| b.is_empty()) {
                if self.rx.take_writer_waiting() {
                    self.ring();
                }
                return Ok(n);
            }
            if self.peer_closed {
                return Ok(0);
            }
            self.rx.set_reader_waiting();
            if self.rx.available().map_err(corrupt)? == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.rx.clear_reader_waiting();
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.peer_closed {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        loop {
            let n = self.tx.write_vectored(bufs).map_err(corrupt)?;
            if n > 0 || bufs.iter().all(|b| b.is_empty()) {
                if self.tx.take_reader_waiting() {
                    self.ring();
                }
                return Ok(n);
            }
            self.tx.set_writer_waiting();
            if self.tx.room().map_err(corrupt)? == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.tx.clear_writer_waiting();
        }
    }

    fn idle_is_healthy(&self) -> bool {
        let mut b = [0u8; 1];
        // Doorbells may be pending; only the end of stream is a sign.
        let peeked = nix::sys::socket::recv(self.bell.as_raw_fd(), &mut b, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT);
        let open = !matches!(peeked, Ok(0));
        open && !self.peer_closed && self.rx.available() == Ok(0)
    }

    fn on_event(&mut self, _readable: bool, _writable: bool) -> (bool, bool) {
        // A doorbell means bytes or room, whichever the peer made.
        self.drain_bell();
        (true, true)
    }

    fn source(&mut self) -> &mut dyn mio::event::Source {
        &mut self.bell
    }

    fn kind(&self) -> &'static str {
        "shm"
    }
}

/// [`ShmTransport::blocking`].
pub struct Blocking<'a> {
    t: &'a mut ShmTransport,
    deadline: Instant,
}

impl Read for Blocking<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match Transport::read(self.t, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.t.wait_bell(self.deadline)?,
                r => return r,
            }
        }
    }
}

impl Write for Blocking<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        loop {
            match Transport::write_vectored(self.t, bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.t.wait_bell(self.deadline)?,
                r => return r,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
