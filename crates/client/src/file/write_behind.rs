//! Small writes gathered per file and sent together (issue 27: ior-hard's
//! 47,008-byte records paid a round trip each). A handle with a
//! write-behind budget keeps writes smaller than an eighth of it in one
//! buffer, in order, and sends them as list I/O (one request per server
//! for many records, several in flight) when the buffer fills, and before
//! anything that must see them: a read, the size, a truncate, an fsync,
//! a close, atomic mode, a collective call ([`File::flush_writes`]).
//!
//! MPI's consistency rules allow it: another process is only promised a
//! write's bytes after the writer's sync or close (MPI-3.1 §13.6.1), and
//! this process's own accesses flush first. Writes that overlap one held
//! flush the buffer first, so the order of overlapping bytes is the
//! program's. Atomic mode never gathers. A failed send is the error of the
//! call that sent it and, unless that was an fsync or close, of the next
//! fsync or close, so a program that checks only MPI_File_sync or
//! MPI_File_close learns of it.

use super::File;
use crate::{Error, Result};
use std::collections::BTreeMap;
use weft_layout::Segment;

/// Most separate pieces one buffer holds: the list requests of a send stay
/// few even when the records are tiny.
const MOST_PIECES: usize = 16_384;

/// Most bytes a handle may be asked to hold (a hint is a user's value).
pub const MOST_WRITE_BEHIND: u64 = 256 << 20;

/// Writes ending past this offset (1 TiB) are never held: a server's disk
/// may refuse them (EFBIG), and that is the write's own error.
const MOST_HELD_OFFSET: u64 = 1 << 40;

/// The writes a handle holds.
#[derive(Default)]
pub(crate) struct WriteBehind {
    /// Bytes held at most (0: off).
    budget: u64,
    /// The held bytes, back to back.
    data: Vec<u8>,
    /// Where each run of `data` goes: file offset -> (length, offset in
    /// `data`). Runs never overlap (an overlapping write flushes first);
    /// adjacent ones are joined.
    runs: BTreeMap<u64, (u64, usize)>,
    /// The first send of held writes that failed since the last fsync or
    /// close reported it (as `Io`, or `NoSpace` when the disk was full).
    lost: Option<Error>,
}

impl WriteBehind {
    fn overlaps(&self, file: u64, len: u64) -> bool {
        let end = file + len;
        // The run starting last before `end` is the only one that can reach
        // into [file, end) (runs do not overlap each other).
        self.runs.range(..end).next_back().is_some_and(|(&at, &(l, _))| at + l > file)
    }

    /// Adds a write's pieces (already checked not to overlap held runs).
    fn hold(&mut self, segments: &[Segment], buf: &[u8]) {
        for s in segments.iter().filter(|s| s.len > 0) {
            let at = self.data.len();
            self.data.extend_from_slice(&buf[s.mem..s.mem + s.len as usize]);
            // Joined to the run that ends where this starts, when that run's
            // bytes are also the last ones held.
            if let Some((&start, run)) = self.runs.range_mut(..s.file).next_back()
                && start + run.0 == s.file
                && run.1 + run.0 as usize == at
            {
                run.0 += s.len;
                continue;
            }
            self.runs.insert(s.file, (s.len, at));
        }
    }
}

impl File {
    /// Gathers writes smaller than an eighth of `budget` bytes (at most
    /// [`MOST_WRITE_BEHIND`]) and sends them together (see the module's
    /// notes); 0 turns it off (the default). What was held is sent first;
    /// the budget is set even if that fails (the error is returned, and
    /// reported again by the next fsync or close).
    pub fn set_write_behind(&self, budget: u64) -> Result<()> {
        let sent = self.flush_writes();
        self.behind().budget = budget.min(MOST_WRITE_BEHIND);
        sent
    }

    fn behind(&self) -> std::sync::MutexGuard<'_, WriteBehind> {
        self.write_behind.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds a write of `segments` from `buf` if it is small enough, the
    /// file is not in atomic mode and nothing held overlaps it (`true`);
    /// otherwise sends what is held first and returns `false` (the caller
    /// writes it now). Holding may fill the buffer and send it.
    pub(super) fn write_behind(&self, segments: &[Segment], buf: &[u8]) -> Result<bool> {
        let mut wb = self.behind();
        if wb.budget == 0 {
            return Ok(false);
        }
        let bytes: u64 = segments.iter().map(|s| s.len).sum();
        // What a server could refuse for the write itself (a read-only
        // handle, an offset past what its disk holds) goes at once, so the
        // refusal is the call's own.
        let plain = self.writable && segments.iter().all(|s| s.file.checked_add(s.len).is_some_and(|end| end <= MOST_HELD_OFFSET));
        let small = plain && !self.atomic && bytes <= wb.budget / 8 && segments.len() <= MOST_PIECES;
        let clash = small && (wb.runs.len() + segments.len() > MOST_PIECES || segments.iter().any(|s| s.len > 0 && wb.overlaps(s.file, s.len)));
        if !small || clash {
            // Kept when holding goes on (a clash), freed otherwise.
            self.send_held(&mut wb, small)?;
            if !small {
                return Ok(false);
            }
        }
        // Pieces of one write must not overlap each other either (a write
        // through a view cannot; a list write could).
        if segments.len() > 1 {
            let mut sorted: Vec<(u64, u64)> = segments.iter().filter(|s| s.len > 0).map(|s| (s.file, s.len)).collect();
            sorted.sort_unstable();
            if sorted.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
                return Ok(false);
            }
        }
        wb.hold(segments, buf);
        self.note_held();
        if wb.data.len() as u64 >= wb.budget {
            // Kept for the next writes: a fresh buffer of megabytes costs a
            // page fault and a page's zeroing per 4 KiB.
            self.send_held(&mut wb, true)?;
        }
        Ok(true)
    }

    /// Sends every held write; returns once all landed. A failed send drops
    /// them and is also reported by the next fsync or close.
    pub fn flush_writes(&self) -> Result<()> {
        let mut wb = self.behind();
        self.send_held(&mut wb, false)
    }

    /// Sends every held write, and reports a send that failed since the
    /// last report (a barrier's, say) once: for fsync and close (MPI-IO's
    /// close of a rank's handle too). A send failing now is reported as
    /// itself and not again later.
    pub fn send_and_report_writes(&self) -> Result<()> {
        let sent = self.flush_writes();
        let lost = self.behind().lost.take().map_or(Ok(()), Err);
        // The first failure is the one told.
        lost.and(sent)
    }

    /// Sends what `wb` holds, under its lock (a read that flushes waits for
    /// a send another thread started); `keep`: the buffer stays allocated
    /// for the writes that follow (a flush, which ends a phase, frees it).
    fn send_held(&self, wb: &mut WriteBehind, keep: bool) -> Result<()> {
        if wb.runs.is_empty() {
            if !keep {
                wb.data = Vec::new();
            }
            return Ok(());
        }
        let runs = std::mem::take(&mut wb.runs);
        let mut data = std::mem::take(&mut wb.data);
        let segments: Vec<Segment> = runs.into_iter().map(|(file, (len, mem))| Segment { file, mem, len }).collect();
        let sent = self.write_now(&segments, &data);
        if keep {
            data.clear();
            wb.data = data;
        }
        // Kept for the next fsync or close unless one is already kept
        // (the first failure is the one to tell).
        if let Err(e) = &sent
            && wb.lost.is_none()
        {
            let message = format!("writes held to be sent together were lost: {e}");
            wb.lost = Some(match e {
                Error::NoSpace { addr, .. } => Error::NoSpace { addr: *addr, message },
                Error::Io { addr, .. } => Error::Io { addr: *addr, message },
                _ => Error::Io { addr: self.servers[0], message },
            });
        }
        sent.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seg(file: u64, mem: usize, len: u64) -> Segment {
        Segment { file, mem, len }
    }

    #[test]
    fn adjacent_writes_join_and_overlaps_are_seen() {
        let mut wb = WriteBehind { budget: 1 << 20, ..Default::default() };
        wb.hold(&[seg(100, 0, 10)], &[1; 10]);
        wb.hold(&[seg(110, 0, 5)], &[2; 5]);
        assert_eq!(wb.runs.len(), 1);
        assert_eq!(wb.runs[&100], (15, 0));
        // A run elsewhere, then one that would join the first but whose
        // bytes are not next to its bytes in the buffer: kept apart.
        wb.hold(&[seg(200, 0, 4)], &[3; 4]);
        wb.hold(&[seg(115, 0, 1)], &[4; 1]);
        assert_eq!(wb.runs.len(), 3);
        assert!(wb.overlaps(114, 1) && wb.overlaps(90, 11) && wb.overlaps(203, 100));
        assert!(!wb.overlaps(90, 10) && !wb.overlaps(116, 84) && !wb.overlaps(204, 1));
    }

    proptest! {
        /// Holding writes in order (flushing, i.e. applying what is held,
        /// before an overlapping one) leaves the same bytes as writing each
        /// at once.
        #[test]
        fn held_runs_replay_to_the_bytes_written(writes in proptest::collection::vec((0u64..400, 1u64..40, any::<u8>()), 1..40)) {
            let mut direct = vec![0u8; 512];
            let mut file = vec![0u8; 512];
            let mut wb = WriteBehind { budget: 1 << 20, ..Default::default() };
            let apply = |wb: &mut WriteBehind, file: &mut Vec<u8>| {
                for (&at, &(len, mem)) in &wb.runs {
                    file[at as usize..(at + len) as usize].copy_from_slice(&wb.data[mem..mem + len as usize]);
                }
                wb.runs.clear();
                wb.data.clear();
            };
            for &(at, len, byte) in &writes {
                direct[at as usize..(at + len) as usize].fill(byte);
                if wb.overlaps(at, len) {
                    apply(&mut wb, &mut file);
                }
                wb.hold(&[seg(at, 0, len)], &vec![byte; len as usize]);
                // Runs never overlap one another.
                let mut end = 0;
                for (&a, &(l, _)) in &wb.runs {
                    prop_assert!(a >= end);
                    end = a + l;
                }
            }
            apply(&mut wb, &mut file);
            prop_assert_eq!(direct, file);
        }
    }
}
