//! Local reads: the stripe objects a file has on this node's servers are
//! read straight from the objects, through read-only descriptors the
//! servers lend (`weft_net::transport::lend`), so a byte is copied once
//! (page cache or disk to the caller's buffer), as a local file's is,
//! instead of by the server, through a transport and out again.
//!
//! What a read sees is what the server's own read would: the object is the
//! one the server writes, and this client's held writes are sent before
//! any read. A server asked for its descriptor once per open file: one
//! that refuses (another node, caching mode, no read right, an older
//! server) is read through as always; one whose object does not exist
//! yet is asked again once a read through it finds the object.
//! `WEFT_LOCAL_READS=0` turns local reads off.

use super::plan::Chunk;
use super::File;
use crate::session::Session;
use std::fs;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weft_net::transport::lend::Mailbox;
use weft_net::Call;
use weft_wire::{DataReq, Request, Response};

/// How long a lent descriptor may take to arrive once the server answered
/// (it is sent before the answer: only a very busy node waits at all).
const ARRIVAL_BUDGET: Duration = Duration::from_millis(200);

/// How long servers may take to answer a lend.
const LEND_TIMEOUT: Duration = Duration::from_secs(2);

/// What this handle knows of one layout server's object.
#[derive(Clone, Default)]
pub(crate) enum Lent {
    /// Not asked yet (or the object was found since it was absent).
    #[default]
    Untried,
    Object(Arc<fs::File>),
    /// The server had no object for the file when asked.
    Absent,
    /// Read through the server: not on this node, or refused.
    Off,
}

/// The process's mailbox, made on first use (and again in a child after
/// `fork`, which must not share its parent's), with its owner's pid.
static MAILBOX: Mutex<Option<(u32, Mailbox)>> = Mutex::new(None);

impl File {
    /// For each chunk, the object descriptor its server lent, asking the
    /// servers not asked yet (all at once).
    pub(super) fn lent_objects(&self, chunks: &[&Chunk]) -> Vec<Option<Arc<fs::File>>> {
        if !self.session.options.local_reads {
            return vec![None; chunks.len()];
        }
        let mut lent = self.lent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if lent.is_empty() {
            *lent = self.servers.iter().map(|&a| if weft_net::transport::shm::is_local(a) { Lent::Untried } else { Lent::Off }).collect();
        }
        let mut ask: Vec<usize> = chunks.iter().map(|c| c.server).filter(|&s| matches!(lent[s], Lent::Untried)).collect();
        ask.sort_unstable();
        ask.dedup();
        if !ask.is_empty() {
            for (s, got) in ask.iter().zip(self.borrow(&ask)) {
                lent[*s] = got;
            }
        }
        chunks.iter().map(|c| if let Lent::Object(f) = &lent[c.server] { Some(f.clone()) } else { None }).collect()
    }

    /// Asks `servers` (layout indices) for their objects' descriptors.
    fn borrow(&self, servers: &[usize]) -> Vec<Lent> {
        let off = || vec![Lent::Off; servers.len()];
        let Ok(cap) = self.capability() else { return off() };
        let mut mailbox = MAILBOX.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let pid = std::process::id();
        if mailbox.as_ref().is_none_or(|(owner, _)| *owner != pid) {
            match Mailbox::bind() {
                Ok(m) => *mailbox = Some((pid, m)),
                Err(e) => {
                    tracing::debug!(target: "weft::client", error = %e, "no mailbox for lent objects: reading through the servers");
                    return off();
                }
            }
        }
        let (_, mailbox) = mailbox.as_ref().expect("made above");
        // Never 0: a malformed datagram reads as nonce 0.
        let nonces: Vec<u64> = servers.iter().map(|_| rand::random::<u64>() | 1).collect();
        let mut calls: Vec<Call<'_>> = servers
            .iter()
            .zip(&nonces)
            .map(|(&s, &nonce)| Call::new(self.servers[s], Request::data(cap, DataReq::Lend { file: self.attr.id, to: *mailbox.id(), nonce }).encode()))
            .collect();
        // Not ridden through a restart (as `Session::run` would, for up to
        // a minute, with every lend of the process waiting on the mailbox):
        // a server that does not answer soon is read through.
        self.session.endpoint.run_within(&mut calls, usize::MAX, LEND_TIMEOUT);
        // Only the nonces of answered lends are waited for: the others'
        // descriptors never come.
        let answers: Vec<Result<(Response, usize), crate::Error>> = calls.into_iter().map(Session::response).collect();
        let lent: Vec<u64> = answers.iter().zip(&nonces).filter(|(a, _)| matches!(a, Ok((Response::Ok, _)))).map(|(_, &n)| n).collect();
        let mut fds = match mailbox.take(&lent, &self.session.endpoint.server_uids(), ARRIVAL_BUDGET) {
            Ok(fds) => fds.into_iter(),
            Err(e) => {
                tracing::debug!(target: "weft::client", error = %e, "the mailbox for lent objects failed: reading through the servers");
                return off();
            }
        };
        answers
            .into_iter()
            .map(|a| match a {
                Ok((Response::Ok, _)) => match fds.next().flatten() {
                    Some(fd) => Lent::Object(Arc::new(fs::File::from(fd))),
                    None => {
                        tracing::debug!(target: "weft::client", file = self.attr.id.0, "a lent object did not arrive: reading through the server");
                        Lent::Off
                    }
                },
                Err(crate::Error::NotFound(_)) => Lent::Absent,
                _ => Lent::Off,
            })
            .collect()
    }

    /// A server's read found its object (`object_size` > 0): if it had
    /// none when asked, ask again at the next read.
    pub(super) fn object_seen(&self, server: usize, object_size: u64) {
        if object_size == 0 {
            return;
        }
        let mut lent = self.lent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(l @ Lent::Absent) = lent.get_mut(server) {
            *l = Lent::Untried;
        }
    }

    /// Reading `server`'s lent object failed: read through the server
    /// from now on.
    pub(super) fn stop_local_reads(&self, server: usize) {
        if let Some(l) = self.lent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_mut(server) {
            *l = Lent::Off;
        }
    }
}

/// Reads the stream of `chunk`'s pieces from `object` into `into` (the
/// chunk's buffer ranges in the same order), as the server would: bytes
/// past the object's end read as zeros. One `preadv` a piece (a piece of
/// an object is often several stripes, so several buffer ranges). Returns
/// the object's size.
pub(super) fn read_chunk(object: &fs::File, chunk: &Chunk, into: &mut [&mut [u8]]) -> std::io::Result<u64> {
    let mut slots = into.iter_mut().map(|s| &mut **s);
    let mut slot: &mut [u8] = &mut [];
    for p in &chunk.pieces {
        // The buffer ranges that take this piece's bytes.
        let mut parts: Vec<&mut [u8]> = Vec::new();
        let mut left = p.len;
        while left > 0 {
            while slot.is_empty() {
                slot = slots.next().ok_or_else(|| std::io::Error::other("the buffer is shorter than the pieces"))?;
            }
            let n = slot.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let (part, rest) = std::mem::take(&mut slot).split_at_mut(n);
            parts.push(part);
            slot = rest;
            left -= n as u64;
        }
        fill(object, &mut parts, p.offset)?;
    }
    Ok(object.metadata()?.len())
}

/// Fills `parts` (in order) from `object` at `offset`, zeros past its end.
fn fill(object: &fs::File, parts: &mut [&mut [u8]], offset: u64) -> std::io::Result<()> {
    let mut iov: Vec<std::io::IoSliceMut<'_>> = parts.iter_mut().map(|p| std::io::IoSliceMut::new(p)).collect();
    let mut slices: &mut [std::io::IoSliceMut<'_>] = &mut iov;
    let mut at = i64::try_from(offset).map_err(|_| std::io::Error::other("an object offset past 2^63"))?;
    while !slices.is_empty() {
        match nix::sys::uio::preadv(object, slices, at) {
            Ok(0) => {
                for s in slices.iter_mut() {
                    s.fill(0);
                }
                break;
            }
            Ok(n) => {
                at += n as i64;
                std::io::IoSliceMut::advance_slices(&mut slices, n);
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
