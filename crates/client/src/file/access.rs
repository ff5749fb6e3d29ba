//! Reads and writes: at offsets, through views, by lists of pieces; each
//! planned, ordered, locked in atomic mode and handed to `transfer.rs`.

use super::plan::Chunk;
use super::{File, UNKNOWN_SIZE};
use crate::lock_session::LockGuard;
use crate::{Error, Result, Schedule};
use weft_layout::{pair, Datatype, Segment, View, ViewError};
use weft_wire::{DataReq, ReadOrder, Request};

impl File {
    /// Writes all of `buf` at `offset`; returns `buf.len()` once every
    /// server has acknowledged its part.
    pub fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        self.write_at_with(offset, buf, &self.schedule)
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

    /// [`File::write_pieces_unlocked`] of this rank's own bytes in a
    /// collective that each rank does alone, held to be sent together
    /// unless `atomic` (see `write_behind.rs`); an aggregator's writes of
    /// other ranks' bytes are never held (a rank's later writes of the
    /// same bytes, held elsewhere, would land before them).
    pub(crate) fn write_own_pieces_unlocked(&self, segments: &[Segment], buf: &[u8], sched: &Schedule, atomic: bool) -> Result<usize> {
        self.drop_read_ahead();
        if !atomic && self.write_behind(segments, buf)? {
            return Ok(segments.iter().map(|s| s.len as usize).sum());
        }
        self.write_segments_locked(segments, buf, sched, false)
    }

    /// [`File::read_pieces`] without atomic mode's lock (see above).
    pub(crate) fn read_pieces_unlocked(&self, segments: Vec<Segment>, buf: &mut [u8], sched: &Schedule) -> Result<usize> {
        self.read_segments_locked(segments, buf, sched, false)
    }

    /// [`File::read_pieces_unlocked`] of this rank's own bytes in a
    /// collective that each rank does alone: served from, or fetched by,
    /// the read-ahead unless `atomic` (`read_ahead.rs`).
    pub(crate) fn read_own_pieces_unlocked(&self, segments: Vec<Segment>, buf: &mut [u8], sched: &Schedule, atomic: bool) -> Result<usize> {
        if !atomic && let Some(r) = self.read_ahead(&segments, buf, sched) {
            return r;
        }
        self.read_segments_locked(segments, buf, sched, false)
    }

    /// Locks `regions` (file offset, length) as this file's granularity
    /// says: one acquire for all of them.
    pub(crate) fn lock_regions(&self, exclusive: bool, regions: &[(u64, u64)]) -> Result<Option<LockGuard>> {
        let extents = self.granularity.extents(regions)?;
        if extents.is_empty() {
            return Ok(None);
        }
        self.session.acquire_lock(self.attr.id, &|| self.capability(), exclusive, &extents, None).map(Some)
    }

    /// List I/O: reads each segment into `buf[mem..]`. Returns the bytes of
    /// the segments' stream before the end of the file; holes read as zeros.
    pub fn read_pieces(&self, segments: Vec<Segment>, buf: &mut [u8]) -> Result<usize> {
        self.read_segments(segments, buf, &self.schedule)
    }

    fn write_segments(&self, segments: &[Segment], buf: &[u8], sched: &Schedule) -> Result<usize> {
        self.drop_read_ahead();
        if self.write_behind(segments, buf)? {
            return Ok(segments.iter().map(|s| s.len as usize).sum());
        }
        self.write_segments_locked(segments, buf, sched, true)
    }

    /// Sends held writes (`write_behind.rs`): at once, unlocked (atomic
    /// mode never holds), in the file's own schedule.
    pub(super) fn write_now(&self, segments: &[Segment], buf: &[u8]) -> Result<usize> {
        self.write_segments_locked(segments, buf, &self.schedule, false)
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
        let mut written = self.send_segments(&chunks, buf, sched, guard.as_ref());
        // The lock service restarted while this access held its lock, and
        // the data servers refused pieces under the old lease once it ran
        // out. A renewal takes the lock back (or fails: lost); the write is
        // then sent again whole under the new lease: the same bytes, still
        // under the lock, so pieces that landed before are rewritten as
        // they were.
        if let (Err(Error::LeaseExpired(_)), Some(g)) = (&written, guard.as_ref())
            && g.renew().is_ok()
        {
            written = self.send_segments(&chunks, buf, sched, guard.as_ref());
        }
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
    fn send_segments(&self, chunks: &[&Chunk], buf: &[u8], sched: &Schedule, guard: Option<&LockGuard>) -> Result<()> {
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
                    let lease = g.fence()?;
                    let op = |pieces: Vec<weft_wire::Piece>| DataReq::LeasedWrite { file: self.attr.id, pieces, lease };
                    let bodies = group.iter().map(|c| Request::data(cap, op(c.pieces.clone())).encode()).collect();
                    self.send_chunks(group, bodies, buf, sched.window)?;
                }
            }
        }
        Ok(())
    }

    fn read_segments(&self, segments: Vec<Segment>, buf: &mut [u8], sched: &Schedule) -> Result<usize> {
        if let Some(r) = self.read_ahead(&segments, buf, sched) {
            return r;
        }
        self.read_segments_locked(segments, buf, sched, true)
    }

    pub(super) fn read_segments_locked(&self, segments: Vec<Segment>, buf: &mut [u8], sched: &Schedule, lock: bool) -> Result<usize> {
        self.flush_writes()?;
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
        let known_end = self.fetch_chunks(&chunks, bodies, buf, sched.window, true)?;
        if let Some(g) = guard {
            g.release_soon()?;
        }
        self.count_before_end(&segments, known_end)
    }
}
