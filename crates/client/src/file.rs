//! An open file: striped reads and writes at offsets.

mod transfer;

pub(crate) use transfer::bytes_before;

use crate::client::Client;
use crate::{Error, Result};
use std::net::SocketAddr;
use weft_layout::{pair, Datatype, Segment, Striping, View, ViewError};
use weft_net::Call;
use weft_wire::limits::MAX_PIECES;
use weft_wire::{Capability, DataReq, FileAttr, Piece, ReadOrder, Request, Response};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use crate::atomic::{LockGranularity, LockGuard};
use crate::Schedule;
use weft_sched::{edge_colouring, order, Strategy};

/// An open Weft file. Reads and writes are positioned (`pread`/`pwrite`
/// style); the handle has no file pointer and no cache.
/// [`File`]'s `exact_size` when the handle does not know the size.
const UNKNOWN_SIZE: u64 = u64::MAX;

pub struct File {
    client: Client,
    path: String,
    attr: FileAttr,
    striping: Striping,
    /// Address of each server in the layout, in stripe order.
    servers: Vec<SocketAddr>,
    writable: bool,
    /// Request size, order and pacing for this file's accesses.
    schedule: Schedule,
    /// MPI atomic mode: every access locks the bytes it touches.
    atomic: bool,
    granularity: LockGranularity,
    /// This handle's write open counts as a writer at the metadata
    /// service (`create`, `open(.., true)`; not `adopt`): its
    /// [`File::close`] reports the size, and until then stat asks the data
    /// servers.
    writer: bool,
    /// Bytes written or truncated through this handle.
    wrote: std::sync::atomic::AtomicBool,
    /// The file's size, when this handle knows it exactly: it made the file
    /// (an exclusive create) and every change since went through it and
    /// succeeded (writes only; a truncate, a failed write or a collective
    /// forgets it: [`UNKNOWN_SIZE`]). Its close reports it instead of asking
    /// the data servers when the metadata service says it was the file's
    /// sole writer.
    exact_size: std::sync::atomic::AtomicU64,
    /// The capability every data request carries, and when to renew it.
    cap: Mutex<Granted>,
    /// The file's name now, when it was renamed since the open (a mount
    /// knows): renewals walk it (see [`File::renamed`]).
    renamed: Mutex<Option<String>>,
}

/// A capability and the instant (this process's clock) past which it is
/// renewed before use: half its lifetime as received, so neither clock
/// skew nor a slow transfer lets it expire in flight.
struct Granted {
    cap: Capability,
    renew_at: Option<Instant>,
}

impl Granted {
    fn new(cap: Capability) -> Self {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let renew_at = (cap.expires != u64::MAX).then(|| Instant::now() + std::time::Duration::from_secs(cap.expires.saturating_sub(now) / 2));
        Granted { cap, renew_at }
    }
}

/// One request: a server, the object pieces it covers (in the order the
/// payload carries them), and the caller's buffer ranges that fill them.
pub(crate) struct Chunk {
    pub(crate) server: usize,
    /// File offset of the chunk's first byte: its place in file order.
    first: u64,
    pub(crate) pieces: Vec<Piece>,
    mem: Vec<(usize, usize)>,
    pub(crate) len: u64,
}

/// Memory pieces this small on average are copied through one buffer per
/// request: a copy of a few bytes is cheaper than an iovec for it.
const PACK_BELOW: u64 = 256;

impl Chunk {
    fn packed(&self) -> bool {
        self.mem.len() > 16 && self.len < PACK_BELOW * self.mem.len() as u64
    }
}

impl File {
    pub(crate) fn new(client: Client, path: &str, attr: FileAttr, cap: Capability, writable: bool) -> Result<Self> {
        let meta = client.cluster().meta_server().addr;
        let layout = attr.layout.clone().ok_or_else(|| Error::IsDir(path.into()))?;
        let striping = Striping::new(layout.stripe_size, layout.servers.len()).map_err(|e| Error::Protocol { addr: meta, what: format!("bad layout: {e}") })?;
        let servers = layout.servers.iter().map(|&s| client.addr_of(s)).collect::<Result<_>>()?;
        let schedule = client.inner.options.schedule.clone();
        let granularity = client.inner.options.lock_granularity;
        Ok(File {
            client,
            path: path.into(),
            attr,
            striping,
            servers,
            writable,
            schedule,
            atomic: false,
            granularity,
            writer: false,
            wrote: std::sync::atomic::AtomicBool::new(false),
            exact_size: std::sync::atomic::AtomicU64::new(UNKNOWN_SIZE),
            cap: Mutex::new(Granted::new(cap)),
            renamed: Mutex::new(None),
        })
    }

    /// The capability for this file's data requests, renewed from the
    /// metadata service (in exchange for the old one; rights the file's
    /// mode no longer gives are dropped) when half its lifetime has passed.
    pub fn capability(&self) -> Result<Capability> {
        let mut g = self.cap.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.renew_at.is_some_and(|t| Instant::now() >= t) {
            let meta = self.client.cluster().meta_server().addr;
            // Renewals walk the file's name: a mount may rename it while
            // one is under way, and then it is asked once more by the new one.
            let mut name = self.name();
            let mut answer = self.client.meta(weft_wire::MetaReq::Renew { old: g.cap, path: name.clone() });
            if matches!(answer, Err(Error::Permission(_))) && self.name() != name {
                name = self.name();
                answer = self.client.meta(weft_wire::MetaReq::Renew { old: g.cap, path: name });
            }
            match answer? {
                Response::Cap(cap) => *g = Granted::new(cap),
                other => return Err(Error::Protocol { addr: meta, what: format!("expected a capability, got {other:?}") }),
            }
        }
        Ok(g.cap)
    }

    /// The encoded body of data request `op` on this file, with its capability.
    pub(crate) fn body(&self, op: DataReq) -> Result<Vec<u8>> {
        Ok(Request::data(self.capability()?, op).encode())
    }

    /// Marks a write open the metadata service counted (see `writer`).
    pub(crate) fn registered(mut self) -> Self {
        self.writer = self.writable;
        self
    }

    /// A handle whose exclusive create made the file: empty, and known so.
    pub(crate) fn made_empty(self) -> Self {
        self.exact_size.store(0, std::sync::atomic::Ordering::Relaxed);
        self
    }

    pub fn attr(&self) -> &FileAttr {
        &self.attr
    }

    /// The name the file was opened by.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The file's name now: the one it was opened by, or the last one
    /// [`File::renamed`] gave.
    pub fn name(&self) -> String {
        self.renamed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone().unwrap_or_else(|| self.path.clone())
    }

    /// The file has name `path` now (renamed since the open). Renewing a
    /// capability walks the file's name again and must find the file
    /// there: a mount that renamed a file, or a directory above it, or set
    /// it aside (removed while open) tells its open handles.
    pub fn renamed(&self, path: &str) {
        *self.renamed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(path.to_string());
    }

    pub fn stripe_size(&self) -> u64 {
        self.striping.stripe_size()
    }

    /// The file's id.
    pub fn id(&self) -> weft_wire::FileId {
        self.attr.id
    }

    pub fn stripe_count(&self) -> usize {
        self.striping.count()
    }

    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    pub fn set_schedule(&mut self, schedule: Schedule) {
        self.schedule = schedule;
    }

    /// Applies an MPI-style hint (`weft_sched`, `weft_sched_block`,
    /// `weft_sched_window`, `weft_lock_granularity`); `Ok(false)` for keys
    /// that are not Weft's.
    pub fn set_hint(&mut self, key: &str, value: &str) -> Result<bool> {
        if key == "weft_lock_granularity" {
            self.granularity = value.parse()?;
            return Ok(true);
        }
        self.schedule.set_hint(key, value)
    }

    /// MPI_File_set_atomicity: in atomic mode every access locks exactly
    /// the bytes it touches (or more, per the granularity) for its duration.
    /// Turning it on starts this client's lock session now (connections,
    /// handshakes, first lease), so the first access does not pay for it.
    pub fn set_atomicity(&mut self, on: bool) -> Result<()> {
        if on {
            self.client.lock_session(self.attr.id)?;
        }
        self.atomic = on;
        Ok(())
    }

    pub fn atomicity(&self) -> bool {
        self.atomic
    }

    pub fn set_lock_granularity(&mut self, g: LockGranularity) {
        self.granularity = g;
    }

    pub fn lock_granularity(&self) -> LockGranularity {
        self.granularity
    }

    /// The extents an atomic access of `segments` locks.
    pub fn lock_extents(&self, segments: &[Segment]) -> Result<Vec<weft_lock::Extent>> {
        // Segments are cut at memory boundaries too; join what touches in the
        // file first, so a million 8-byte memory pieces become a few regions.
        let mut regions: Vec<(u64, u64)> = Vec::new();
        for s in segments {
            match regions.last_mut() {
                Some((o, l)) if *o + *l == s.file => *l += s.len,
                _ => regions.push((s.file, s.len)),
            }
        }
        self.granularity.extents(&regions)
    }

    /// In atomic mode, locks the access's bytes; the guard releases them.
    fn lock_access(&self, segments: &[Segment], exclusive: bool) -> Result<Option<LockGuard>> {
        if !self.atomic {
            return Ok(None);
        }
        let extents = self.lock_extents(segments)?;
        if extents.is_empty() {
            return Ok(None);
        }
        self.client.lock(self, exclusive, &extents).map(Some)
    }

    /// Groups an access's segments into requests: per server, pieces are
    /// appended in stream order and joined when they touch (list I/O); a
    /// request is closed at the schedule block `b` or `MAX_PIECES` pieces.
    /// With list I/O off, every stripe piece is a request of its own.
    /// Chunks come out in file order (of their first byte).
    pub(crate) fn plan(&self, segments: &[Segment], block: u64) -> Result<Vec<Chunk>> {
        self.plan_capped(segments, block, MAX_PIECES)
    }

    /// [`File::plan`] with at most `most_pieces` pieces per request.
    pub(crate) fn plan_capped(&self, segments: &[Segment], block: u64, most_pieces: usize) -> Result<Vec<Chunk>> {
        let opts = &self.client.inner.options;
        let max = block;
        let max_pieces = if opts.list_io { most_pieces } else { 1 };
        let mut open: Vec<Option<Chunk>> = (0..self.servers.len()).map(|_| None).collect();
        let mut out = Vec::new();
        for seg in segments {
            seg.file.checked_add(seg.len).ok_or_else(|| Error::BadRequest(format!("access at {} + {} overflows", seg.file, seg.len)))?;
            let mut mem = seg.mem;
            let mut file = seg.file;
            for (server, mut obj, mut len) in self.striping.walk(seg.file, seg.len) {
                while len > 0 {
                    let c = open[server].get_or_insert_with(|| Chunk { server, first: file, pieces: Vec::new(), mem: Vec::new(), len: 0 });
                    let take = len.min(max - c.len);
                    match c.pieces.last_mut() {
                        Some(p) if opts.list_io && p.offset + p.len == obj => p.len += take,
                        _ => c.pieces.push(Piece { offset: obj, len: take }),
                    }
                    match c.mem.last_mut() {
                        Some(m) if m.0 + m.1 == mem => m.1 += take as usize,
                        _ => c.mem.push((mem, take as usize)),
                    }
                    c.len += take;
                    if c.len == max || c.pieces.len() == max_pieces {
                        out.push(open[server].take().expect("open chunk"));
                    }
                    obj += take;
                    mem += take as usize;
                    file += take;
                    len -= take;
                }
            }
        }
        out.extend(open.into_iter().flatten());
        out.sort_by_key(|c| c.first);
        Ok(out)
    }

    /// The sending order of `chunks` (in file order) under `sched`, with
    /// each chunk's slot (its colour, or its position in the order).
    fn order(&self, chunks: &[Chunk], sched: &Schedule) -> Result<Vec<(usize, u32)>> {
        let servers: Vec<usize> = chunks.iter().map(|c| c.server).collect();
        if sched.strategy == Strategy::Colour
            && let Some(colours) = self.colours(&servers, sched)?
        {
            let mut o: Vec<(usize, u32)> = colours.into_iter().enumerate().map(|(k, c)| (k, c as u32)).collect();
            o.sort_by_key(|&(k, c)| (c, k));
            return Ok(o);
        }
        let seed = u64::from(sched.rank) ^ self.attr.id.0.rotate_left(17);
        let o = order(sched.strategy, sched.rank as usize, self.servers.len(), &servers, seed);
        Ok(o.into_iter().enumerate().map(|(pos, k)| (k, pos as u32)).collect())
    }

    /// Colours of this client's chunks in an edge colouring of the whole
    /// group's transfer graph, which every member computes alike from the
    /// same `group_accesses`. `None` (order like hash) if the accesses are
    /// not given or this access is not the one listed for this rank.
    fn colours(&self, mine: &[usize], sched: &Schedule) -> Result<Option<Vec<usize>>> {
        let Some(acc) = &sched.group_accesses else { return Ok(None) };
        let mut edges = Vec::new();
        let mut own = Vec::new();
        for (member, &(off, len)) in acc.iter().enumerate() {
            let chunks = self.plan(&[Segment { file: off, mem: 0, len }], sched.block)?;
            for c in chunks {
                if member == sched.rank as usize {
                    own.push(c.server);
                }
                edges.push((member, c.server));
            }
        }
        if own != mine {
            return Ok(None);
        }
        let colours = edge_colouring(acc.len(), self.servers.len(), &edges);
        let start = edges.iter().position(|e| e.0 == sched.rank as usize).unwrap_or(0);
        Ok(Some(colours[start..start + own.len()].to_vec()))
    }


    /// Writes all of `buf` at `offset`; returns `buf.len()` once every
    /// server has acknowledged its part.
    pub fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        self.write_at_with(offset, buf, &self.schedule)
    }

    /// The requests a write of `[offset, offset + len)` under `sched` would
    /// send, in sending order: (server index in the layout, file offset of
    /// the first byte, bytes, slot). The slot is the block's colour for the
    /// colour strategy, else its position. For tests and for seeing what a
    /// hint does.
    pub fn send_order(&self, offset: u64, len: u64, sched: &Schedule) -> Result<Vec<(usize, u64, u64, u32)>> {
        let plan = self.plan(&[Segment { file: offset, mem: 0, len }], sched.block)?;
        Ok(self.order(&plan, sched)?.into_iter().map(|(k, slot)| (plan[k].server, plan[k].first, plan[k].len, slot)).collect())
    }

    /// [`File::write_at`] with this operation's own schedule.
    pub fn write_at_with(&self, offset: u64, buf: &[u8], sched: &Schedule) -> Result<usize> {
        self.write_segments(&[Segment { file: offset, mem: 0, len: buf.len() as u64 }], buf, sched)
    }

    /// Reads into `buf` from `offset`; returns the bytes read, fewer than
    /// `buf.len()` only at the end of the file. Holes read as zeros.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_at_with(offset, buf, &self.schedule)
    }

    /// [`File::read_at`] with this operation's own schedule.
    pub fn read_at_with(&self, offset: u64, buf: &mut [u8], sched: &Schedule) -> Result<usize> {
        let len = buf.len() as u64;
        self.read_segments(vec![Segment { file: offset, mem: 0, len }], buf, sched)
    }

    /// Writes `count` copies of `memtype` taken from `buf` through `view`,
    /// starting `offset` etypes into the view's data stream. Returns the
    /// bytes written. Memory regions may be anywhere in `buf`, in any order.
    pub fn write_view(&self, view: &View, offset: u64, buf: &[u8], memtype: &Datatype, count: u64) -> Result<usize> {
        view.check_writable()?;
        let segments = self.view_segments(view, offset, buf.len(), memtype, count)?;
        self.write_segments(&segments, buf, &self.schedule)
    }

    /// Reads `count` copies of `memtype` into `buf` through `view` from
    /// `offset` etypes into its data stream. Returns the bytes read: fewer
    /// only when the file ends inside the access.
    pub fn read_view(&self, view: &View, offset: u64, buf: &mut [u8], memtype: &Datatype, count: u64) -> Result<usize> {
        let segments = self.view_segments(view, offset, buf.len(), memtype, count)?;
        self.read_segments(segments, buf, &self.schedule)
    }

    /// The pieces an access through `view` moves: (file offset, buffer
    /// offset, length) in data-stream order; what collective I/O plans with.
    pub fn view_segments(&self, view: &View, offset: u64, buf_len: usize, memtype: &Datatype, count: u64) -> Result<Vec<Segment>> {
        let total = memtype.size().checked_mul(count).ok_or_else(|| Error::BadRequest("access size overflows".into()))?;
        let esize = view.etype().size();
        if total % esize != 0 {
            return Err(ViewError::PartialEtype { len: total, etype: esize }.into());
        }
        let start = offset.checked_mul(esize).ok_or_else(|| Error::BadRequest("view offset overflows".into()))?;
        let mem_type = Datatype::contiguous(count as i64, memtype).map_err(|e| Error::BadRequest(e.to_string()))?;
        let segments: Vec<Segment> = pair(view.file_regions(start, total), mem_type.regions(0), buf_len).collect::<std::result::Result<_, _>>()?;
        let moved: u64 = segments.iter().map(|s| s.len).sum();
        if moved != total {
            return Err(Error::BadRequest(format!("the view yields {moved} of the {total} bytes asked for")));
        }
        Ok(segments)
    }

    /// List I/O: writes each segment's `len` bytes from `buf[mem..]` at file
    /// offset `file`, all servers at once (what a collective aggregator does).
    pub fn write_pieces(&self, segments: &[Segment], buf: &[u8]) -> Result<usize> {
        self.write_segments(segments, buf, &self.schedule)
    }

    /// [`File::write_pieces`] without atomic mode's lock, ordered by
    /// `sched`: for collective I/O, whose one lock covers the union of
    /// every rank's regions, and whose senders' ranks the collective knows.
    pub(crate) fn write_pieces_unlocked(&self, segments: &[Segment], buf: &[u8], sched: &Schedule) -> Result<usize> {
        self.write_segments_locked(segments, buf, sched, false)
    }

    /// [`File::read_pieces`] without atomic mode's lock (see above).
    pub(crate) fn read_pieces_unlocked(&self, segments: Vec<Segment>, buf: &mut [u8], sched: &Schedule) -> Result<usize> {
        self.read_segments_locked(segments, buf, sched, false)
    }

    /// Locks `regions` (file offset, length) as this file's granularity
    /// says: one acquire for all of them.
    pub(crate) fn lock_regions(&self, exclusive: bool, regions: &[(u64, u64)]) -> Result<Option<LockGuard>> {
        let extents = self.granularity.extents(regions)?;
        if extents.is_empty() {
            return Ok(None);
        }
        self.client.lock(self, exclusive, &extents).map(Some)
    }

    /// List I/O: reads each segment into `buf[mem..]`. Returns the bytes of
    /// the segments' stream before the end of the file; holes read as zeros.
    pub fn read_pieces(&self, segments: Vec<Segment>, buf: &mut [u8]) -> Result<usize> {
        self.read_segments(segments, buf, &self.schedule)
    }

    fn write_segments(&self, segments: &[Segment], buf: &[u8], sched: &Schedule) -> Result<usize> {
        self.write_segments_locked(segments, buf, sched, true)
    }

    fn write_segments_locked(&self, segments: &[Segment], buf: &[u8], sched: &Schedule, lock: bool) -> Result<usize> {
        if !self.writable {
            return Err(Error::BadRequest(format!("{} is open read-only", self.path)));
        }
        let plan = self.plan(segments, sched.block)?;
        let order = self.order(&plan, sched)?;
        let guard = if lock { self.lock_access(segments, true)? } else { None };
        let chunks: Vec<&Chunk> = order.iter().map(|&(k, _)| &plan[k]).collect();
        self.wrote.store(true, std::sync::atomic::Ordering::Relaxed);
        let written = self.send_segments(&chunks, buf, sched, guard.as_ref());
        // The size stays known only through writes that all landed.
        let end = segments.iter().filter(|s| s.len > 0).try_fold(0u64, |end, s| s.file.checked_add(s.len).map(|e| end.max(e)));
        match (&written, end) {
            (Ok(()), Some(end)) => {
                let _ = self.exact_size.fetch_update(std::sync::atomic::Ordering::Relaxed, std::sync::atomic::Ordering::Relaxed, |now| (now != UNKNOWN_SIZE).then(|| now.max(end)));
            }
            _ => self.forget_size(),
        }
        written?;
        if let Some(g) = guard {
            g.release_soon()?;
        }
        Ok(segments.iter().map(|s| s.len as usize).sum())
    }

    /// Sends a write's chunks, under atomic mode's lock `guard` if any.
    fn send_segments(&self, chunks: &[&Chunk], buf: &[u8], sched: &Schedule, guard: Option<&crate::atomic::LockGuard>) -> Result<()> {
        let cap = self.capability()?;
        match guard {
            None => {
                let bodies = chunks.iter().map(|c| Request::data(cap, DataReq::Write { file: self.attr.id, pieces: c.pieces.clone() }).encode()).collect();
                self.send_chunks(chunks, bodies, buf, sched.window)?;
            }
            // Under atomic mode's lock the writes carry its lease: a data
            // server refuses them once it ran out (this client may have been
            // paused while the bytes were granted to another). The lease is
            // taken afresh for each window's worth of requests, so a long
            // write goes on with the renewals made meanwhile.
            Some(g) => {
                for group in chunks.chunks(sched.window.max(8)) {
                    let op = |pieces: Vec<weft_wire::Piece>| match g.lease() {
                        Some(lease) => DataReq::LeasedWrite { file: self.attr.id, pieces, lease },
                        None => DataReq::Write { file: self.attr.id, pieces },
                    };
                    let bodies = group.iter().map(|c| Request::data(cap, op(c.pieces.clone())).encode()).collect();
                    self.send_chunks(group, bodies, buf, sched.window)?;
                }
            }
        }
        Ok(())
    }

    /// Remembers that this handle changed the file (its close reports the
    /// size) in a way it cannot follow (others' bytes, a truncate): the
    /// size must be measured.
    pub(crate) fn note_write(&self) {
        self.wrote.store(true, std::sync::atomic::Ordering::Relaxed);
        self.forget_size();
    }

    fn forget_size(&self) {
        self.exact_size.store(UNKNOWN_SIZE, std::sync::atomic::Ordering::Relaxed);
    }

    fn read_segments(&self, segments: Vec<Segment>, buf: &mut [u8], sched: &Schedule) -> Result<usize> {
        self.read_segments_locked(segments, buf, sched, true)
    }

    fn read_segments_locked(&self, segments: Vec<Segment>, buf: &mut [u8], sched: &Schedule, lock: bool) -> Result<usize> {
        let plan = self.plan(&segments, sched.block)?;
        let order = self.order(&plan, sched)?;
        let guard = if lock { self.lock_access(&segments, false)? } else { None };
        let chunks: Vec<&Chunk> = order.iter().map(|&(k, _)| &plan[k]).collect();
        let cap = self.capability()?;
        let bodies = order
            .iter()
            .map(|&(k, slot)| {
                let order = ReadOrder { strategy: sched.strategy.code(), rank: sched.rank, group: sched.group, slot };
                Request::data(cap, DataReq::Read { file: self.attr.id, pieces: plan[k].pieces.clone(), order }).encode()
            })
            .collect();
        let known_end = self.fetch_chunks(&chunks, bodies, buf, sched.window)?;
        if let Some(g) = guard {
            g.release_soon()?;
        }
        self.count_before_end(&segments, known_end)
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
        self.note_write();
        let cap = self.capability()?;
        let body: Vec<Vec<u8>> = (0..self.servers.len())
            .map(|k| Request::data(cap, DataReq::Truncate { file: self.attr.id, size: self.striping.object_size_for(k, size) }).encode())
            .collect();
        let mut calls: Vec<Call<'_>> = self.servers.iter().zip(body).map(|(&a, b)| Call::new(a, b)).collect();
        self.client.run(&mut calls);
        calls.into_iter().try_for_each(|c| Client::response(c).map(|_| ()))
    }

    /// Returns once every data server has made this file's data durable.
    pub fn fsync(&self) -> Result<()> {
        self.broadcast(DataReq::Fsync { file: self.attr.id })?;
        // The file's name and attributes too, as fsync(2) does.
        self.client.sync_meta()
    }

    /// Closes the file. Nothing is buffered on the client; use
    /// [`File::fsync`] for durability. A handle opened for writing tells
    /// the metadata service it is closed, with the file's size (asked of
    /// the data servers) if it wrote, so that stat can answer without
    /// asking them. A handle dropped without `close` leaves the service
    /// counting a writer: stat then always asks the data servers (correct,
    /// slower).
    pub fn close(self) -> Result<()> {
        use weft_wire::{MetaReq, Response};
        if !self.writer {
            return Ok(());
        }
        let file = self.attr.id;
        let wrote = self.wrote.load(std::sync::atomic::Ordering::Relaxed);
        let r = match self.client.meta(MetaReq::Close { file, wrote }) {
            // The last writer is gone: every write is done, so the size
            // measured now is the file's.
            // Alone since the file last had no writer, and knowing every
            // change: the size is this handle's own.
            Ok(Response::Measure { epoch, sole }) => {
                let exact = self.exact_size.load(std::sync::atomic::Ordering::Relaxed);
                let size = if sole && exact != UNKNOWN_SIZE { Ok(exact) } else { self.size() };
                size.and_then(|size| self.client.meta(MetaReq::SetSize { file, epoch, size })).map(|_| ())
            }
            other => other.map(|_| ()),
        };
        match r {
            // Removed meanwhile, or no longer ours to write: the data is
            // unaffected; the file's stats just keep asking the data servers.
            Err(Error::NotFound(_) | Error::Permission(_)) => Ok(()),
            // The metadata server went away with the close unanswered (it
            // is not sent again: a second one could leave another writer
            // uncounted). Nothing is lost: the data is on the data servers,
            // and a writer left counted only makes stats ask them.
            Err(e @ Error::Net(weft_net::NetError::Unreachable { .. } | weft_net::NetError::Closed { .. } | weft_net::NetError::Stopping { .. })) => {
                tracing::warn!(target: "weft::client", file = file.0, error = %e, "a write close went unanswered; stats of the file ask the data servers from now on (until the metadata service restarts)");
                Ok(())
            }
            other => other,
        }
    }

    /// [`File::close`] for a handle whose writes other processes made (MPI-IO's
    /// rank 0 closes for the job after a barrier): reports the size as if
    /// this handle had written.
    pub fn close_after_writes_elsewhere(self) -> Result<()> {
        self.note_write();
        self.close()
    }
}
