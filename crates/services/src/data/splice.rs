//! Moving a request's payload from the socket into an object file through a
//! pipe (`splice(2)`), so the bytes are copied once, from the socket's
//! buffers into the page cache, instead of twice (socket -> user buffer ->
//! page cache). On two cores the data path is bound by copies, so this is
//! the difference between roughly a third and a half of memory speed.

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use weft_wire::Piece;

/// Pipe capacity asked for: 1 MiB, one default request, so one splice pair
/// moves a whole request when the kernel allows it (default is 64 KiB).
const PIPE_SIZE: i32 = 1 << 20;

/// Why a streamed write failed: the connection (fatal for it) or the file
/// (answered with an error; the payload was consumed, framing is intact).
#[derive(Debug)]
pub enum StreamError {
    Stream(io::Error),
    File(io::Error),
}

/// A pipe kept per connection for splicing.
pub struct Splicer {
    read_end: OwnedFd,
    write_end: OwnedFd,
    capacity: usize,
}

fn nix_err(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl Splicer {
    pub fn new() -> io::Result<Self> {
        let (read_end, write_end) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(nix_err)?;
        // The kernel may refuse a larger pipe (pipe-max-size); keep what we get.
        let capacity = fcntl(&write_end, FcntlArg::F_SETPIPE_SZ(PIPE_SIZE))
            .or_else(|_| fcntl(&write_end, FcntlArg::F_GETPIPE_SZ))
            .map_err(nix_err)? as usize;
        Ok(Splicer { read_end, write_end, capacity })
    }

    /// Writes the next `total` payload bytes of `src` to `pieces` of `dst`,
    /// in order. Bytes already in `src`'s buffer are written from there; the
    /// rest go socket -> pipe -> file.
    pub fn write_pieces(&mut self, src: &mut BufReader<TcpStream>, dst: &File, pieces: &[Piece]) -> Result<u64, StreamError> {
        let mut done = 0u64;
        for (i, p) in pieces.iter().enumerate() {
            if let Err(e) = self.write_piece(src, dst, p.offset, p.len as usize) {
                if let StreamError::File(_) = e {
                    // Keep the framing: swallow what is left of this payload.
                    let rest: u64 = pieces[i + 1..].iter().map(|q| q.len).sum();
                    self.drain_pipe().map_err(StreamError::Stream)?;
                    skip(src, rest).map_err(StreamError::Stream)?;
                }
                return Err(e);
            }
            done += p.len;
        }
        Ok(done)
    }

    fn write_piece(&mut self, src: &mut BufReader<TcpStream>, dst: &File, mut offset: u64, mut len: usize) -> Result<(), StreamError> {
        let buffered = src.buffer().len().min(len);
        if buffered > 0 {
            let r = dst.write_all_at(&src.buffer()[..buffered], offset);
            src.consume(buffered);
            if let Err(e) = r {
                skip(src, (len - buffered) as u64).map_err(StreamError::Stream)?;
                return Err(StreamError::File(e));
            }
            offset += buffered as u64;
            len -= buffered;
        }
        while len > 0 {
            let moved = splice(src.get_ref(), None, &self.write_end, None, len.min(self.capacity), SpliceFFlags::SPLICE_F_MOVE)
                .map_err(|e| StreamError::Stream(nix_err(e)))?;
            if moved == 0 {
                return Err(StreamError::Stream(io::ErrorKind::UnexpectedEof.into()));
            }
            let mut in_pipe = moved;
            while in_pipe > 0 {
                let mut off = offset as i64;
                match splice(&self.read_end, None, dst, Some(&mut off), in_pipe, SpliceFFlags::SPLICE_F_MOVE) {
                    Ok(0) => return Err(self.fail_file(src, io::ErrorKind::WriteZero.into(), len - moved)),
                    Ok(n) => {
                        in_pipe -= n;
                        offset += n as u64;
                    }
                    Err(nix::Error::EINTR) => {}
                    Err(e) => return Err(self.fail_file(src, nix_err(e), len - moved)),
                }
            }
            len -= moved;
        }
        Ok(())
    }

    /// After a file error mid-piece: empty the pipe and skip the piece's rest.
    fn fail_file(&mut self, src: &mut BufReader<TcpStream>, e: io::Error, rest: usize) -> StreamError {
        if let Err(s) = self.drain_pipe().and_then(|()| skip(src, rest as u64)) {
            return StreamError::Stream(s);
        }
        StreamError::File(e)
    }

    fn drain_pipe(&mut self) -> io::Result<()> {
        // Non-blocking so an empty pipe ends the loop instead of blocking.
        let fl = OFlag::from_bits_truncate(fcntl(&self.read_end, FcntlArg::F_GETFL).map_err(nix_err)?);
        fcntl(&self.read_end, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK)).map_err(nix_err)?;
        let mut scratch = [0u8; 64 * 1024];
        let mut pipe = File::from(self.read_end.try_clone()?);
        let r = loop {
            match pipe.read(&mut scratch) {
                Ok(0) => break Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        fcntl(&self.read_end, FcntlArg::F_SETFL(fl)).map_err(nix_err)?;
        r
    }
}

/// Reads and drops `n` bytes of `src`.
pub fn skip(src: &mut impl Read, n: u64) -> io::Result<()> {
    let copied = io::copy(&mut src.take(n), &mut io::sink())?;
    if copied < n {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}
