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

/// Writes in a host program that did not ignore SIGPIPE (a C program
/// using the MPI-IO library: Rust's runtime ignores it for its own
/// programs, so each check runs in a child process, this test binary run
/// again, that restores the default).
#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::process::Command;

    const CHILD: &str = "WEFT_TCP_TEST_CHILD";

    /// A connection whose server read a byte and closed, so that its end
    /// reset it: a write after the reset raises SIGPIPE unless told not to.
    fn reset_connection() -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        (&client).write_all(b"request").unwrap();
        let mut b = [0u8; 1];
        server.read_exact(&mut b).unwrap();
        drop(server);
        client
    }

    /// Writes with `write` until one fails with EPIPE (the first after the
    /// reset may fail with ECONNRESET), with SIGPIPE's default restored.
    fn write_until_broken(mut write: impl FnMut() -> io::Result<usize>) {
        // SAFETY: restores a signal's default disposition; no handler runs.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        for _ in 0..1000 {
            match write() {
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                    println!("write failed: {e}");
                    return;
                }
                Ok(_) | Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        panic!("writes to a closed peer never failed with EPIPE");
    }

    /// Runs test `name` again in a child with [`CHILD`] set; it must end
    /// normally, having seen its write fail.
    fn in_a_child(name: &str) {
        let out = Command::new(std::env::current_exe().unwrap()).args(["--exact", name, "--nocapture", "--test-threads", "1"]).env(CHILD, "1").output().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), None, "the child was killed by a signal: {}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("write failed"), "{}", String::from_utf8_lossy(&out.stdout));
    }

    #[test]
    fn a_write_to_a_closed_peer_fails_without_killing_a_host_program() {
        if std::env::var_os(CHILD).is_none() {
            return in_a_child("transport::tcp::tests::a_write_to_a_closed_peer_fails_without_killing_a_host_program");
        }
        let client = reset_connection();
        client.set_nonblocking(true).unwrap();
        let mut t = mio::net::TcpStream::from_std(client);
        write_until_broken(|| Transport::write_vectored(&mut t, &[IoSlice::new(&[7u8; 4096])]));
    }

    /// The handshake's and the liveness probe's blocking writes (frames
    /// go out vectored: std's `write_vectored` is a `writev`, which
    /// raises it), the same.
    #[test]
    fn a_blocking_write_to_a_closed_peer_fails_without_killing_a_host_program() {
        if std::env::var_os(CHILD).is_none() {
            return in_a_child("transport::tcp::tests::a_blocking_write_to_a_closed_peer_fails_without_killing_a_host_program");
        }
        let client = reset_connection();
        write_until_broken(|| Quiet(&client).write_vectored(&[IoSlice::new(&[7u8; 4096])]));
    }
}
