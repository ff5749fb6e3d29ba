//! Blocking frame I/O on any stream, for the blocking handshakes, tools and
//! tests that speak raw frames (headers received by the same
//! [`HeaderRx`] the machines use).

use std::io::{self, IoSlice, Read, Write};
use crate::link::frames::HeaderRx;
use weft_wire::{DecodeError, FrameKind, Header, MsgId, Response};

/// Why reading a frame failed.
#[derive(Debug)]
pub enum FrameReadError {
    /// The stream ended cleanly between frames.
    Closed,
    Io(io::Error),
    Decode(DecodeError),
}

impl From<io::Error> for FrameReadError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::UnexpectedEof { FrameReadError::Closed } else { FrameReadError::Io(e) }
    }
}

/// Reads and checks one header. A clean end of stream before the first byte
/// is `Closed`.
pub fn read_header(r: &mut impl Read) -> Result<Header, FrameReadError> {
    let mut rx = HeaderRx::default();
    loop {
        let first = rx.is_empty();
        match r.read(rx.window()) {
            Ok(0) if first => return Err(FrameReadError::Closed),
            Ok(0) => return Err(FrameReadError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => {
                if let Some(h) = rx.received(n) {
                    return h.map_err(FrameReadError::Decode);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameReadError::Io(e)),
        }
    }
}

/// Reads exactly `len` bytes into a new buffer; `len` was checked by
/// [`Header::decode`] against the wire limits.
pub fn read_vec(r: &mut impl Read, len: usize) -> io::Result<Vec<u8>> {
    let mut v = vec![0u8; len];
    r.read_exact(&mut v)?;
    Ok(v)
}

/// Writes all of `bufs` with vectored writes.
pub fn write_all_vectored(w: &mut impl Write, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes one frame: header, body, then the payload pieces, in one vectored write.
pub fn write_frame(w: &mut impl Write, kind: FrameKind, id: MsgId, body: &[u8], payload: &[&[u8]]) -> io::Result<()> {
    let pay_len: usize = payload.iter().map(|p| p.len()).sum();
    let head = Header::new(kind, id, body.len(), pay_len).encode();
    let mut slices = Vec::with_capacity(2 + payload.len());
    slices.push(IoSlice::new(&head));
    slices.push(IoSlice::new(body));
    slices.extend(payload.iter().map(|p| IoSlice::new(p)));
    write_all_vectored(w, &mut slices)
}

/// Writes a `Response` frame carrying `rsp` and `payload`.
pub fn write_response(w: &mut impl Write, id: MsgId, rsp: &Response, payload: &[&[u8]]) -> io::Result<()> {
    write_frame(w, FrameKind::Response, id, &rsp.encode(), payload)
}
