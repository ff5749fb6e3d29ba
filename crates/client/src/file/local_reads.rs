//! Local reads: the stripe objects a file has on this node's servers are
//! read straight from the objects, through read-only descriptors the
//! servers lend (`DataReq::Lend`, sent over the shared-memory connection's
//! Unix socket, so only to a client on the server's node; the answer names
//! the object by device and inode, so a descriptor an earlier lend left
//! behind is never taken for it; docs/protocol.md), so a byte is
//! copied once (page cache or disk to the caller's buffer), as a local
//! file's is, instead of by the server, through a transport and out again.
//!
//! What a read sees is what the server's own read would: the object is the
//! one the server writes, and this client's held writes are sent before
//! any read. A server is asked for its descriptor once per open file: one
//! that refuses (another node, a TCP connection, caching mode, no read
//! right) is read through as always; one whose object does not exist yet
//! is asked again once a read through it finds the object. An object
//! removed since (its last name unlinked) is read through the server
//! again, which answers as it does for a removed file. A process keeps at
//! most [`MAX_LENT`] lent descriptors (a quarter of its descriptor limit
//! at most): past that, files are read through the servers.
//! On by default: `WEFT_LOCAL_READS=0` sends every read through the servers.

use super::plan::Chunk;
use super::File;
use crate::session::Session;
use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weft_net::Call;
use weft_wire::{DataReq, Request, Response};

/// How long servers may take to answer a lend (a local server answers in
/// well under a millisecond): not ridden through a restart, and never the
/// whole operation deadline, so a server that is hung is read through and
/// found out by the read's own deadline, not by the lend's.
const LEND_TIMEOUT: Duration = Duration::from_millis(500);

/// The most lent descriptors a process holds at once.
const MAX_LENT: usize = 4096;

/// Most iovecs in one `preadv` (the kernel's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Lent descriptors held by this process now.
static LENT_HELD: AtomicUsize = AtomicUsize::new(0);

/// Lends are made one batch at a time in a process, so the descriptors
/// waiting on a connection are the batch's own.
static LENDING: Mutex<()> = Mutex::new(());

/// A lent object's descriptor, counted while held.
pub(crate) struct LentObject(fs::File);

impl Drop for LentObject {
    fn drop(&mut self) {
        LENT_HELD.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What this handle knows of one layout server's object.
#[derive(Clone, Default)]
pub(crate) enum Lent {
    /// Not asked yet (or the object was found since it was absent).
    #[default]
    Untried,
    Object(Arc<LentObject>),
    /// The server had no object for the file when asked.
    Absent,
    /// Read through the server: not on this node, or refused.
    Off,
}

/// Whether `fd` is the object with device `dev` and inode `ino`.
fn is_object(fd: &std::os::fd::OwnedFd, dev: u64, ino: u64) -> bool {
    nix::sys::stat::fstat(fd).is_ok_and(|st| st.st_dev == dev && st.st_ino == ino)
}

/// How many lent descriptors this process may hold: [`MAX_LENT`], and no
/// more than a quarter of its descriptor limit.
fn most_held() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft);
    MAX_LENT.min(usize::try_from(soft / 4).unwrap_or(MAX_LENT))
}

impl File {
    /// For each chunk, the object descriptor its server lent, asking the
    /// servers not asked yet (all at once); `None` when local reads are
    /// off (nothing is allocated on that path).
    pub(super) fn lent_objects(&self, chunks: &[&Chunk]) -> Option<Vec<Option<Arc<LentObject>>>> {
        // Only shared memory can carry a lent descriptor.
        if !self.session.options.local_reads || self.session.endpoint.config().transport == weft_net::TransportChoice::Tcp {
            return None;
        }
        let ask: Vec<usize> = {
            let mut lent = self.lent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if lent.is_empty() {
                *lent = self.servers.iter().map(|&a| if weft_net::transport::shm::is_local(a) { Lent::Untried } else { Lent::Off }).collect();
            }
            let mut ask: Vec<usize> = chunks.iter().map(|c| c.server).filter(|&s| matches!(lent[s], Lent::Untried)).collect();
            ask.sort_unstable();
            ask.dedup();
            ask
        };
        // Asked without the handle's lock held: a lend may renew the
        // capability (a metadata call) and wait for its servers.
        let got = if ask.is_empty() { Vec::new() } else { self.borrow(&ask) };
        let mut lent = self.lent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (&s, g) in ask.iter().zip(got) {
            lent[s] = g;
        }
        Some(chunks.iter().map(|c| if let Lent::Object(f) = &lent[c.server] { Some(f.clone()) } else { None }).collect())
    }

    /// Whether every server of the layout has lent its object (none is
    /// asked here: reads lend what they touch), so that a read is one copy
    /// from the page cache or the disk, with no round trip to save.
    pub(super) fn lent_everywhere(&self) -> bool {
        let lent = self.lent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        !lent.is_empty() && lent.iter().all(|l| matches!(l, Lent::Object(_)))
    }

    /// Asks `servers` (layout indices) for their objects' descriptors.
    fn borrow(&self, servers: &[usize]) -> Vec<Lent> {
        let off = || vec![Lent::Off; servers.len()];
        // Past the cap, later reads may find room again.
        if LENT_HELD.load(Ordering::Relaxed) + servers.len() > most_held() {
            return vec![Lent::Untried; servers.len()];
        }
        let Ok(cap) = self.capability() else { return off() };
        let _one_batch = LENDING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let ep = &self.session.endpoint;
        // What an earlier batch left behind (its answer timed out) goes.
        for &s in servers {
            drop(ep.take_lent(self.servers[s]));
        }
        let mut calls: Vec<Call<'_>> =
            servers.iter().map(|&s| Call::new(self.servers[s], Request::data(cap, DataReq::Lend { file: self.attr.id }).encode())).collect();
        // Shorter than the endpoint's deadline: a lend that runs out does
        // not mark its server unanswered (the read after it would fail at
        // once, not wait out its own deadline).
        ep.run_within(&mut calls, usize::MAX, LEND_TIMEOUT.min(ep.config().op_timeout / 2));
        calls
            .into_iter()
            .zip(servers)
            .map(|(call, &s)| match Session::response(call) {
                // The server sent it before its answer, so it is there,
                // perhaps behind another (an earlier lend that ran out of
                // time): the one of the object named is taken.
                Ok((Response::Lent { dev, ino }, _)) => match ep.take_lent(self.servers[s]).into_iter().find(|fd| is_object(fd, dev, ino)) {
                    Some(fd) => {
                        LENT_HELD.fetch_add(1, Ordering::Relaxed);
                        Lent::Object(Arc::new(LentObject(fs::File::from(fd))))
                    }
                    None => {
                        tracing::debug!(target: "weft::client", file = self.attr.id.0, "a lent object did not come: reading through the server");
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
/// past the object's end read as zeros. A `preadv` per piece (a piece of
/// an object is often several stripes, so several buffer ranges). Returns
/// the object's size; an error if the object was removed meanwhile (the
/// server then answers for it).
pub(super) fn read_chunk(object: &LentObject, chunk: &Chunk, into: &mut [&mut [u8]]) -> std::io::Result<u64> {
    let object = &object.0;
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
        let mut at = p.offset;
        for batch in parts.chunks_mut(IOV_MAX) {
            fill(object, batch, at)?;
            at += batch.iter().map(|b| b.len() as u64).sum::<u64>();
        }
    }
    let meta = object.metadata()?;
    if std::os::unix::fs::MetadataExt::nlink(&meta) == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, "the object was removed"));
    }
    Ok(meta.len())
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
