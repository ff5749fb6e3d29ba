//! An open file: striped reads and writes at offsets.

use crate::client::Client;
use crate::{Error, Result};
use std::net::SocketAddr;
use weft_layout::Striping;
use weft_net::Call;
use weft_wire::{DataReq, FileAttr, Piece, Request, Response};

/// An open Weft file. Reads and writes are positioned (`pread`/`pwrite`
/// style); the handle has no file pointer and no cache.
pub struct File {
    client: Client,
    path: String,
    attr: FileAttr,
    striping: Striping,
    /// Address of each server in the layout, in stripe order.
    servers: Vec<SocketAddr>,
    writable: bool,
}

/// One request's share of an access: an object range and the caller's
/// buffer pieces that map onto it, in order.
struct Chunk {
    server: usize,
    object_offset: u64,
    len: u64,
    segments: Vec<(usize, usize)>,
}

impl File {
    pub(crate) fn new(client: Client, path: &str, attr: FileAttr, writable: bool) -> Result<Self> {
        let meta = client.cluster().meta_server().addr;
        let layout = attr.layout.clone().ok_or_else(|| Error::IsDir(path.into()))?;
        let striping = Striping::new(layout.stripe_size, layout.servers.len()).map_err(|e| Error::Protocol { addr: meta, what: format!("bad layout: {e}") })?;
        let servers = layout.servers.iter().map(|&s| client.addr_of(s)).collect::<Result<_>>()?;
        Ok(File { client, path: path.into(), attr, striping, servers, writable })
    }

    pub fn attr(&self) -> &FileAttr {
        &self.attr
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn stripe_size(&self) -> u64 {
        self.striping.stripe_size()
    }

    pub fn stripe_count(&self) -> usize {
        self.striping.count()
    }

    /// Splits `[offset, offset + len)` into requests of at most `max_request` bytes.
    fn chunks(&self, offset: u64, len: usize) -> Result<Vec<Chunk>> {
        let max = self.client.inner.options.max_request as u64;
        let extents = self.striping.split(offset, len as u64).map_err(|e| Error::BadRequest(e.to_string()))?;
        let mut out = Vec::new();
        for ext in extents {
            let mut cur = Chunk { server: ext.server, object_offset: ext.object_offset, len: 0, segments: Vec::new() };
            for (mut buf_off, mut seg_len) in ext.segments {
                while seg_len > 0 {
                    let take = seg_len.min(max - cur.len);
                    cur.segments.push((buf_off as usize, take as usize));
                    cur.len += take;
                    buf_off += take;
                    seg_len -= take;
                    if cur.len == max {
                        let next = Chunk { server: ext.server, object_offset: cur.object_offset + cur.len, len: 0, segments: Vec::new() };
                        out.push(std::mem::replace(&mut cur, next));
                    }
                }
            }
            if cur.len > 0 {
                out.push(cur);
            }
        }
        Ok(out)
    }

    fn body(&self, op: fn(weft_wire::FileId, Vec<Piece>) -> DataReq, chunk: &Chunk) -> Vec<u8> {
        Request::Data(op(self.attr.id, vec![Piece { offset: chunk.object_offset, len: chunk.len }])).encode()
    }

    /// Writes all of `buf` at `offset`; returns `buf.len()` once every
    /// server has acknowledged its part.
    pub fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        if !self.writable {
            return Err(Error::BadRequest(format!("{} is open read-only", self.path)));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let chunks = self.chunks(offset, buf.len())?;
        let mut calls: Vec<Call<'_>> = chunks
            .iter()
            .map(|c| {
                let mut call = Call::new(self.servers[c.server], self.body(|file, pieces| DataReq::Write { file, pieces }, c));
                call.send = c.segments.iter().map(|&(o, l)| &buf[o..o + l]).collect();
                call
            })
            .collect();
        self.client.run(&mut calls);
        for (call, chunk) in calls.into_iter().zip(&chunks) {
            match Client::response(call)? {
                (Response::Written { bytes }, _) if bytes == chunk.len => {}
                (other, _) => {
                    return Err(Error::Protocol { addr: self.servers[chunk.server], what: format!("expected Written {{ bytes: {} }}, got {other:?}", chunk.len) });
                }
            }
        }
        Ok(buf.len())
    }

    /// Reads into `buf` from `offset`; returns the bytes read, fewer than
    /// `buf.len()` only at the end of the file. Holes read as zeros.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let len = buf.len();
        let chunks = self.chunks(offset, len)?;
        let mut calls: Vec<Call<'_>> =
            chunks.iter().map(|c| Call::new(self.servers[c.server], self.body(|file, pieces| DataReq::Read { file, pieces }, c))).collect();
        // Hand each call disjoint pieces of `buf`, walking it front to back.
        let mut order: Vec<(usize, usize, usize)> =
            chunks.iter().enumerate().flat_map(|(i, c)| c.segments.iter().map(move |&(o, l)| (o, l, i))).collect();
        order.sort_unstable();
        let mut rest: &mut [u8] = buf;
        let mut at = 0;
        for (o, l, i) in order {
            debug_assert_eq!(o, at, "segments tile the buffer");
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut(l);
            calls[i].recv.push(piece);
            rest = tail;
            at = o + l;
        }
        self.client.run(&mut calls);
        // The largest end of file any answering object implies.
        let mut known_end = 0;
        for (call, chunk) in calls.into_iter().zip(&chunks) {
            match Client::response(call)? {
                (Response::Read { object_size }, n) if n as u64 == chunk.len => {
                    known_end = known_end.max(self.striping.file_end(chunk.server, object_size));
                }
                (other, n) => {
                    return Err(Error::Protocol { addr: self.servers[chunk.server], what: format!("expected {} bytes, got {n} with {other:?}", chunk.len) });
                }
            }
        }
        let end = offset + len as u64;
        if known_end >= end {
            return Ok(len);
        }
        // Some object ended inside the range: only the full size tells a
        // hole (zeros, already in `buf`) from the end of the file.
        let size = self.size()?;
        Ok(size.saturating_sub(offset).min(len as u64) as usize)
    }

    /// Sends `op` to every server of the layout at once; returns the responses.
    fn broadcast(&self, op: DataReq) -> Result<Vec<Response>> {
        let body = Request::Data(op).encode();
        let mut calls: Vec<Call<'_>> = self.servers.iter().map(|&a| Call::new(a, body.clone())).collect();
        self.client.run(&mut calls);
        calls.into_iter().map(|c| Client::response(c).map(|(r, _)| r)).collect()
    }

    /// The file size: the largest object end over the data servers.
    pub fn size(&self) -> Result<u64> {
        let mut size = 0;
        for (server, r) in self.broadcast(DataReq::Size { file: self.attr.id })?.into_iter().enumerate() {
            match r {
                Response::Size { object_size } => size = size.max(self.striping.file_end(server, object_size)),
                other => return Err(Error::Protocol { addr: self.servers[server], what: format!("expected a size, got {other:?}") }),
            }
        }
        Ok(size)
    }

    /// Sets the file size; bytes past it are dropped, bytes up to it read as
    /// zeros where never written.
    pub fn truncate(&self, size: u64) -> Result<()> {
        if !self.writable {
            return Err(Error::BadRequest(format!("{} is open read-only", self.path)));
        }
        let body: Vec<Vec<u8>> = (0..self.servers.len())
            .map(|k| Request::Data(DataReq::Truncate { file: self.attr.id, size: self.striping.object_size_for(k, size) }).encode())
            .collect();
        let mut calls: Vec<Call<'_>> = self.servers.iter().zip(body).map(|(&a, b)| Call::new(a, b)).collect();
        self.client.run(&mut calls);
        calls.into_iter().try_for_each(|c| Client::response(c).map(|_| ()))
    }

    /// Returns once every data server has made this file's data durable.
    pub fn fsync(&self) -> Result<()> {
        self.broadcast(DataReq::Fsync { file: self.attr.id }).map(|_| ())
    }

    /// Closes the file. Nothing is buffered on the client, so this only
    /// releases the handle; use [`File::fsync`] for durability.
    pub fn close(self) -> Result<()> {
        Ok(())
    }
}
