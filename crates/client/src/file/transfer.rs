//! Moving one access's requests: each request's payload gathered from, or
//! scattered into, the caller's buffer with no staging copy (tiny pieces
//! excepted), and the answers checked.

use super::plan::{bytes_before, Chunk};
use super::File;
use crate::session::Session;
use crate::{Error, Result};
use weft_layout::{Segment, ViewError};
use weft_net::Call;
use weft_wire::{DataReq, Response};

impl File {
    /// Sends each chunk's bytes from `buf` with its request body, at most
    /// `window` in flight; every server must acknowledge all of its bytes.
    pub(crate) fn send_chunks(&self, chunks: &[&Chunk], bodies: Vec<Vec<u8>>, buf: &[u8], window: usize) -> Result<()> {
        let packs: Vec<Option<Vec<u8>>> = chunks
            .iter()
            .map(|c| {
                c.packed().then(|| {
                    let mut v = Vec::with_capacity(c.len as usize);
                    for &(o, l) in &c.mem {
                        v.extend_from_slice(&buf[o..o + l]);
                    }
                    v
                })
            })
            .collect();
        let mut calls: Vec<Call<'_>> = chunks
            .iter()
            .zip(&packs)
            .zip(bodies)
            .map(|((c, pack), body)| {
                let mut call = Call::new(self.servers[c.server], body);
                call.send = match pack {
                    Some(p) => vec![&p[..]],
                    None => c.mem.iter().map(|&(o, l)| &buf[o..o + l]).collect(),
                };
                call
            })
            .collect();
        self.session.run_window(&mut calls, window);
        for (call, chunk) in calls.into_iter().zip(chunks) {
            match Session::response(call)? {
                (Response::Written { bytes }, _) if bytes == chunk.len => {}
                (other, _) => {
                    return Err(Error::Protocol { addr: self.servers[chunk.server], what: format!("expected Written {{ bytes: {} }}, got {other:?}", chunk.len) });
                }
            }
        }
        Ok(())
    }

    /// Receives each chunk's bytes into `buf`, at most `window` requests in
    /// flight; returns the largest end of file the answering objects imply.
    /// `bodies` are plain reads (`DataReq::Read`) when `local`, which lets
    /// chunks of this node's servers be read here; other requests (a
    /// server-directed collective's rounds) must all reach their servers.
    pub(crate) fn fetch_chunks(&self, chunks: &[&Chunk], bodies: Vec<Vec<u8>>, buf: &mut [u8], window: usize, local: bool) -> Result<u64> {
        let mut calls: Vec<Call<'_>> = chunks.iter().zip(bodies).map(|(c, body)| Call::new(self.servers[c.server], body)).collect();
        // Many tiny memory pieces arrive in one buffer per request and are
        // scattered afterwards; the rest land in place.
        let mut packs: Vec<Option<Vec<u8>>> = chunks.iter().map(|c| c.packed().then(|| vec![0u8; c.len as usize])).collect();
        // Hand each call disjoint pieces of `buf`, walking it front to back,
        // and put them back in each call's payload order.
        let mut order: Vec<(usize, usize, usize, usize)> =
            chunks.iter().enumerate().flat_map(|(i, c)| c.mem.iter().enumerate().map(move |(k, &(o, l))| (o, l, i, k))).collect();
        order.sort_unstable();
        let mut slots: Vec<Vec<Option<&mut [u8]>>> = chunks.iter().map(|c| (0..c.mem.len()).map(|_| None).collect()).collect();
        let mut rest: &mut [u8] = buf;
        let mut at = 0;
        for (o, l, i, k) in order {
            if o < at {
                return Err(ViewError::MemoryOverlap(o as i64).into());
            }
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(o - at);
            let (piece, tail) = tail.split_at_mut(l);
            if packs[i].is_none() {
                slots[i][k] = Some(piece);
            }
            rest = tail;
            at = o + l;
        }
        for ((call, s), pack) in calls.iter_mut().zip(slots).zip(packs.iter_mut()) {
            call.recv = match pack {
                Some(p) => vec![&mut p[..]],
                None => s.into_iter().map(|p| p.expect("every range placed")).collect(),
            };
        }
        // The largest end of file any answering object implies.
        let mut known_end = 0;
        // Chunks of objects on this node's servers are read here
        // (`local_reads.rs`); a failure sends them through the server.
        let (mut calls, remote_chunks): (Vec<Call<'_>>, std::borrow::Cow<'_, [&Chunk]>) = match local.then(|| self.lent_objects(chunks)).flatten() {
            None => (calls, std::borrow::Cow::Borrowed(chunks)),
            Some(lent) => {
                let mut remote = Vec::with_capacity(calls.len());
                for ((mut call, &chunk), object) in calls.into_iter().zip(chunks).zip(lent) {
                    if let Some(object) = object {
                        match super::local_reads::read_chunk(&object, chunk, &mut call.recv) {
                            Ok(object_size) => {
                                known_end = known_end.max(self.striping.file_end(chunk.server, object_size));
                                continue;
                            }
                            Err(e) => {
                                tracing::debug!(target: "weft::client", file = self.attr.id.0, error = %e, "a local read failed: reading through the server");
                                self.stop_local_reads(chunk.server);
                            }
                        }
                    }
                    remote.push((call, chunk));
                }
                let (calls, remote_chunks): (Vec<Call<'_>>, Vec<&Chunk>) = remote.into_iter().unzip();
                (calls, std::borrow::Cow::Owned(remote_chunks))
            }
        };
        self.session.run_window(&mut calls, window);
        for (call, &chunk) in calls.into_iter().zip(remote_chunks.iter()) {
            match Session::response(call)? {
                (Response::Read { object_size }, n) if n as u64 == chunk.len => {
                    self.object_seen(chunk.server, object_size);
                    known_end = known_end.max(self.striping.file_end(chunk.server, object_size));
                }
                (other, n) => {
                    return Err(Error::Protocol { addr: self.servers[chunk.server], what: format!("expected {} bytes, got {n} with {other:?}", chunk.len) });
                }
            }
        }
        for (c, pack) in chunks.iter().zip(&packs) {
            if let Some(p) = pack {
                let mut at = 0;
                for &(o, l) in &c.mem {
                    buf[o..o + l].copy_from_slice(&p[at..at + l]);
                    at += l;
                }
            }
        }
        Ok(known_end)
    }

    /// Bytes of the access's stream that lie before the end of the file,
    /// given the end the answering objects implied: if some object ended
    /// inside the access, only the full size tells a hole (zeros, already
    /// in the buffer) from the end of the file.
    pub(crate) fn count_before_end(&self, segments: &[Segment], known_end: u64) -> Result<usize> {
        let total: u64 = segments.iter().map(|s| s.len).sum();
        let reach = segments.iter().map(|s| s.file + s.len).max().unwrap_or(0);
        if known_end >= reach {
            return Ok(total as usize);
        }
        Ok(bytes_before(segments, self.size()?) as usize)
    }

    /// Sends each body to the layout's server it names and drops the
    /// answers (best-effort notices).
    pub(crate) fn notify_servers(&self, bodies: Vec<(usize, Vec<u8>)>) {
        let mut calls: Vec<Call<'_>> = bodies.into_iter().map(|(s, b)| Call::new(self.servers[s], b)).collect();
        self.session.run(&mut calls);
    }

    /// Sends `op` to every server of the layout at once; returns the responses.
    pub(super) fn broadcast(&self, op: DataReq) -> Result<Vec<Response>> {
        let body = self.body(op)?;
        let mut calls: Vec<Call<'_>> = self.servers.iter().map(|&a| Call::new(a, body.clone())).collect();
        self.session.run(&mut calls);
        calls.into_iter().map(|c| Session::response(c).map(|(r, _)| r)).collect()
    }
}
