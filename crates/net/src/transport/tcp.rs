//! TCP as a [`Transport`]: a non-blocking socket (mio's), whose reads and
//! writes go straight to the kernel.
//!
//! Two reasons not to go through `std::io` (and mio's wrapper of it):
//! * a write is `sendmsg` with `MSG_NOSIGNAL`, so a server that closed
//!   the connection never raises SIGPIPE in a host program that did not
//!   ignore it (the MPI-IO library lives in C programs, which do not,
//!   unlike Rust's own); the handshake's blocking writes too ([`Quiet`]);
//! * the two wrappers cost about as much as the rest of a small request's
//!   read or write (paper 003's count, `weft bench net --icount`).
#![allow(unsafe_code)]

use super::Transport;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, RawFd};

/// Most iovecs one call takes (Linux's `IOV_MAX`): callers pass at most
/// this many; more would be refused (EINVAL), so they are cut here.
const IOV_MAX: usize = 1024;

/// A system call's byte count, or the error it left in `errno`.
fn bytes(n: isize) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Writes `bufs` to socket `fd` without raising SIGPIPE.
fn send_vectored(fd: RawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: a zeroed `msghdr` is a valid one (no name, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is ABI-compatible with `iovec`; sendmsg only reads them.
    msg.msg_iov = bufs.as_ptr().cast_mut().cast();
    msg.msg_iovlen = bufs.len().min(IOV_MAX) as _;
    // SAFETY: `msg` names `bufs`, valid for reads for this call.
    bytes(unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) })
}

/// A blocking socket (the handshake's, with its timeouts) whose writes
/// never raise SIGPIPE.
pub(crate) struct Quiet<'a>(pub(crate) &'a std::net::TcpStream);

impl Read for Quiet<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&mut &*self.0).read(buf)
    }
}

impl Write for Quiet<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        send_vectored(self.0.as_raw_fd(), &[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        send_vectored(self.0.as_raw_fd(), bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Transport for mio::net::TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its whole length.
        bytes(unsafe { libc::read(self.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        // SAFETY: `IoSliceMut` is ABI-compatible with `iovec` (std's
        // promise on Unix), and each names memory valid for writes.
        bytes(unsafe { libc::readv(self.as_raw_fd(), bufs.as_ptr().cast(), bufs.len().min(IOV_MAX) as libc::c_int) })
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        send_vectored(self.as_raw_fd(), bufs)
    }

    fn idle_is_healthy(&self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.peek(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    fn short_read_drains(&self) -> bool {
        true
    }

    fn source(&mut self) -> &mut dyn mio::event::Source {
        self
    }

    fn kind(&self) -> &'static str {
        "tcp"
    }
}
