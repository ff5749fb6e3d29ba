//! TCP as a [`Transport`]: a non-blocking socket (mio's), whose reads and
//! writes go straight to the kernel (`sys.rs`: a write never raises
//! SIGPIPE, a server that closed the connection is an error on its
//! calls); the handshake's and the liveness probe's blocking writes too
//! ([`Quiet`]).

use super::{sys, Transport};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::AsRawFd;

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
        sys::send_vectored(self.0.as_raw_fd(), &[IoSlice::new(buf)], 0)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        sys::send_vectored(self.0.as_raw_fd(), bufs, 0)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Transport for mio::net::TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        sys::read(self.as_raw_fd(), buf)
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        sys::read_vectored(self.as_raw_fd(), bufs)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        sys::send_vectored(self.as_raw_fd(), bufs, 0)
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
