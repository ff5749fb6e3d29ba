//! Reads ahead of small sequential or strided reads (issue 27: ior-hard's
//! 47,008-byte reads paid a round trip each). A handle with a read-ahead
//! budget watches its small reads; when one follows the last at the same
//! length and a steady step (the step of the two before, or the length
//! itself: sequential), it fetches the next records of that pattern,
//! budget's worth, as one list read (a request per server, all at once)
//! and serves the reads that follow from them.
//!
//! A handle whose every server lends its object (local reads) reads
//! nothing ahead: each read is then one copy from the page cache.
//!
//! MPI's consistency rules allow it: another process's writes are only
//! promised to a reader after the writer's sync and the reader's (MPI-3.1
//! §13.6.1), and a reader's `File::fsync` drops what was fetched. So does
//! any write, truncate or atomic mode through the handle. A record is
//! served only if all of it lay before the end of the file when fetched;
//! anything else is read from the servers, so the end of file and holes
//! read as a plain read would.

use super::File;
use crate::{Result, Schedule};
use weft_layout::Segment;

/// Most bytes a handle may be asked to fetch at once (a hint is a user's
/// value; a fetch allocates its budget).
pub const MOST_READ_AHEAD: u64 = 256 << 20;

/// Most records one fetch asks for.
const MOST_RECORDS: u64 = 4096;

/// A fetched run of records: record `i` (from 0) starts at file offset
/// `first + i * step`, is `len` bytes long, and lies at `i * len` in `data`.
struct Fetched {
    first: u64,
    step: u64,
    len: u64,
    /// Bytes of `data` before the end of the file when fetched.
    valid: u64,
    data: Vec<u8>,
}

impl Fetched {
    /// The bytes of `[offset, offset + len)` if one fetched record holds
    /// them all, before the end of the file.
    fn get(&self, offset: u64, len: u64) -> Option<&[u8]> {
        let from = offset.checked_sub(self.first)?;
        let (i, within) = (from / self.step, from % self.step);
        let at = i.checked_mul(self.len)?.checked_add(within)?;
        let end = at.checked_add(len)?;
        (within.checked_add(len)? <= self.len && end <= self.valid).then(|| &self.data[at as usize..end as usize])
    }
}

/// What a handle knows of its reads.
#[derive(Default)]
pub(crate) struct ReadAhead {
    /// Bytes fetched at most (0: off).
    budget: u64,
    /// The last small read (offset, length), and the step before it.
    last: Option<(u64, u64)>,
    step: Option<u64>,
    fetched: Option<Fetched>,
}

impl ReadAhead {
    /// The records to fetch for a read of `len` at `offset`, if it follows
    /// a steady pattern: (step, count). Notes the read either way.
    fn pattern(&mut self, offset: u64, len: u64) -> Option<(u64, u64)> {
        let last = self.last.replace((offset, len));
        let step = last.filter(|&(o, l)| l == len && offset > o).map(|(o, _)| offset - o);
        let before = std::mem::replace(&mut self.step, step);
        let step = step.filter(|&s| s == len || Some(s) == before)?;
        let count = (self.budget / len).clamp(1, MOST_RECORDS);
        // Room for them all in the file's offsets.
        let reach = step.checked_mul(count)?.checked_add(offset)?;
        (count > 1 && reach < i64::MAX as u64).then_some((step, count))
    }
}

impl File {
    /// Reads ahead of small sequential or strided reads, at most `budget`
    /// bytes at a time (at most [`MOST_READ_AHEAD`]; see the module's
    /// notes); 0 turns it off (the default).
    pub fn set_read_ahead(&self, budget: u64) {
        let mut ra = self.ahead();
        *ra = ReadAhead { budget: budget.min(MOST_READ_AHEAD), ..Default::default() };
    }

    fn ahead(&self) -> std::sync::MutexGuard<'_, ReadAhead> {
        self.read_ahead.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops what was read ahead: the file changed through this handle, or
    /// the caller asks to see others' writes (fsync; MPI-IO also at
    /// MPI_Barrier).
    pub fn drop_read_ahead(&self) {
        let mut ra = self.ahead();
        ra.fetched = None;
        ra.last = None;
        ra.step = None;
    }

    /// Serves a read of `segments` into `buf` from what was read ahead, or
    /// reads ahead for it; `None` when the read is not one it serves (the
    /// caller reads it).
    pub(super) fn read_ahead(&self, segments: &[Segment], buf: &mut [u8], sched: &Schedule) -> Option<Result<usize>> {
        let mut ra = self.ahead();
        let [s] = segments else { return None };
        if ra.budget == 0 || self.atomic || s.len == 0 || s.len > ra.budget / 8 {
            return None;
        }
        let out = buf.get_mut(s.mem..s.mem.checked_add(usize::try_from(s.len).ok()?)?)?;
        if let Some(bytes) = ra.fetched.as_ref().and_then(|f| f.get(s.file, s.len)) {
            out.copy_from_slice(bytes);
            ra.last = Some((s.file, s.len));
            return Some(Ok(s.len as usize));
        }
        let (step, count) = ra.pattern(s.file, s.len)?;
        // Read ahead saves round trips. With every object lent there are
        // none to save, and its buffer would add a second copy (ior-hard's
        // warm reads, 16 MiB a rank: 30 ms with it, 22 ms without).
        if self.lent_everywhere() {
            ra.fetched = None;
            return None;
        }
        // The last fetch's buffer again: a fresh one of megabytes costs a
        // page fault and a page's zeroing per 4 KiB, more than the copy.
        // Its old bytes are never served: the read overwrites every record
        // (holes and the end of the file come back as zeros).
        let mut data = ra.fetched.take().map(|f| f.data).unwrap_or_default();
        data.resize((count * s.len) as usize, 0);
        let wanted: Vec<Segment> = if step == s.len {
            vec![Segment { file: s.file, mem: 0, len: count * s.len }]
        } else {
            (0..count).map(|i| Segment { file: s.file + i * step, mem: (i * s.len) as usize, len: s.len }).collect()
        };
        let valid = match self.read_segments_locked(wanted, &mut data, sched, false) {
            Ok(n) => n as u64,
            Err(e) => return Some(Err(e)),
        };
        let fetched = Fetched { first: s.file, step, len: s.len, valid, data };
        // The read itself: what a plain read would return (the bytes before
        // the end of the file; holes are zeros in both).
        let n = s.len.min(valid) as usize;
        out[..n].copy_from_slice(&fetched.data[..n]);
        ra.fetched = Some(fetched);
        Some(Ok(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn with(budget: u64) -> ReadAhead {
        ReadAhead { budget, ..Default::default() }
    }

    #[test]
    fn sequential_reads_fetch_at_the_second_and_strided_at_the_third() {
        let mut ra = with(1000);
        assert_eq!(ra.pattern(0, 100), None);
        assert_eq!(ra.pattern(100, 100), Some((100, 10)));
        let mut ra = with(1000);
        assert_eq!(ra.pattern(0, 100), None);
        assert_eq!(ra.pattern(400, 100), None, "one step is no pattern yet");
        assert_eq!(ra.pattern(800, 100), Some((400, 10)));
        // A change of length or a step back starts over.
        assert_eq!(ra.pattern(1200, 50), None);
        assert_eq!(ra.pattern(1000, 50), None);
        // No room for more than the one record: nothing to fetch.
        let mut ra = with(150);
        ra.pattern(0, 100);
        assert_eq!(ra.pattern(100, 100), None);
    }

    proptest! {
        /// A fetched record serves exactly the ranges inside it that lay
        /// before the end of the file, with the bytes of the file there.
        #[test]
        fn fetched_records_serve_only_their_own_bytes(
            first in 0u64..1000, len in 1u64..50, extra in 0u64..50, count in 1u64..20,
            valid_cut in 0u64..1000, offset in 0u64..3000, want in 1u64..60,
        ) {
            let step = len + extra;
            let file: Vec<u8> = (0..5000u64).map(|i| (i * 7 % 251) as u8).collect();
            let mut data = Vec::new();
            for i in 0..count {
                let at = (first + i * step) as usize;
                data.extend_from_slice(&file[at..at + len as usize]);
            }
            let valid = valid_cut.min(count * len);
            let f = Fetched { first, step, len, valid, data };
            match f.get(offset, want) {
                Some(bytes) => {
                    prop_assert_eq!(bytes, &file[offset as usize..(offset + want) as usize]);
                    let i = (offset - first) / step;
                    prop_assert!(offset + want <= first + i * step + len);
                    prop_assert!(i * len + (offset - first - i * step) + want <= valid);
                }
                None => {
                    // Not inside one record, or not all before the cut.
                    let inside = offset >= first && {
                        let i = (offset - first) / step;
                        i < count && offset + want <= first + i * step + len && i * len + (offset - first - i * step) + want <= valid
                    };
                    prop_assert!(!inside);
                }
            }
        }
    }
}
