//! Write-behind: a write through the mount is answered once it is queued,
//! and goes to the data servers from a small pool of threads, so one
//! process's stream has several writes in flight instead of one.
//!
//! What keeps POSIX's promises:
//! * writes of one file whose ranges overlap never run at once: a write
//!   waits for the ones it overlaps, so the last one wins, as it would have;
//! * everything that must see the file's bytes or size first waits until
//!   the file's writes queued *before it* are done: read, getattr, lookup,
//!   truncate, append, fsync, flush (so close-to-open holds) and giving up
//!   a write lock. Writes queued later (a stream that goes on) do not hold
//!   it up, so one process streaming never starves another's stat or read;
//! * a size asked of the servers while one of those writes was still in
//!   flight is asked again once it is done (see [`Mark`]): the kernel takes
//!   a size answered after a write's reply as newer than the write;
//! * a write that failed is reported, as EIO or its own errno, by the next
//!   write, fsync or close *of the handle that wrote it* (as the kernel's
//!   page cache does), never to another process; under the kernel's
//!   writeback cache, which writes pages back through any handle of the
//!   file, by the next fsync or close of *every handle of the file open
//!   then* ([`Failures::PerFile`], as the kernel reports a file's
//!   writeback errors to each open file), and never by a write (one
//!   refused would lose the page it writes back);
//! * queued bytes are bounded (a writer waits for room), and handles opened
//!   with O_SYNC or O_DSYNC write through (under the writeback cache only
//!   direct I/O ones: the kernel makes the others durable by an fsync).

use crate::errno;
use crate::handle::{Handle, Handles};
use crate::local_sizes::LocalSizes;
use fuser::Errno;
use std::collections::{HashMap, VecDeque};
use crate::pool::{Job, Pool};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// Bytes queued and not yet written, all files together.
const BUDGET: usize = 32 << 20;

/// Threads writing queued data.
const THREADS: usize = 4;


/// A write queued or in flight: its range and its place in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    start: u64,
    end: u64,
    seq: u64,
}

#[derive(Default)]
struct State {
    /// Per inode, the writes queued or in flight.
    busy: HashMap<u64, Vec<Pending>>,
    bytes: usize,
    /// The sequence number of the last write queued.
    queued: u64,
    /// How many writes have finished (any file).
    finished: u64,
    /// The inodes of the last [`RECENT`] writes to finish, newest last.
    recent: VecDeque<u64>,
}

/// How many finished writes [`State::recent`] remembers.
const RECENT: usize = 64;

/// Where the queue stood when a request began: the writes it must see
/// are those queued up to `queued`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    queued: u64,
    finished: u64,
}

pub(crate) struct WriteBehind {
    state: Arc<(Mutex<State>, Condvar)>,
    jobs: Pool,
    /// Grown by each write once queued; told of each that failed.
    sizes: Arc<LocalSizes>,
    failures: Failures,
}

/// Who is told of a queued write that failed.
#[derive(Clone)]
pub(crate) enum Failures {
    /// The handle that wrote it (each process writes through its own).
    PerHandle,
    /// Every handle of the file open when it failed (the kernel's
    /// writeback cache writes any process's pages through any handle).
    PerFile(Handles),
}

impl Failures {
    fn record(&self, writer: &Handle, ino: u64, e: Errno) {
        match self {
            Failures::PerHandle => writer.fail(e),
            Failures::PerFile(handles) => {
                for h in crate::handle::lock(handles).values().filter(|h| h.file.attr().id.0 == ino) {
                    h.fail(e);
                }
            }
        }
    }
}

fn guard(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Does inode `ino` have a write queued up to `mark` still pending?
fn before(st: &State, ino: u64, mark: Mark) -> bool {
    st.busy.get(&ino).is_some_and(|v| v.iter().any(|w| w.seq <= mark.queued))
}

/// Takes a finished (or failed, or unwound) write's range off the books.
struct Done {
    state: Arc<(Mutex<State>, Condvar)>,
    ino: u64,
    write: Pending,
}

impl Drop for Done {
    fn drop(&mut self) {
        let (m, cond) = &*self.state;
        let mut st = guard(m);
        st.bytes -= (self.write.end - self.write.start) as usize;
        st.finished += 1;
        if st.recent.len() == RECENT {
            st.recent.pop_front();
        }
        st.recent.push_back(self.ino);
        if let Some(v) = st.busy.get_mut(&self.ino) {
            if let Some(i) = v.iter().position(|&w| w == self.write) {
                v.swap_remove(i);
            }
            if v.is_empty() {
                st.busy.remove(&self.ino);
            }
        }
        drop(st);
        cond.notify_all();
    }
}

impl WriteBehind {
    pub(crate) fn new(sizes: Arc<LocalSizes>, failures: Failures) -> Self {
        WriteBehind { state: Arc::new((Mutex::new(State::default()), Condvar::new())), jobs: Pool::new("weft-wb", THREADS), sizes, failures }
    }

    /// Queues `data` for `offset` of `h`'s file (inode `ino`) and returns
    /// once it is queued; reports an earlier failed write of `h` instead.
    pub(crate) fn write(&self, h: Arc<Handle>, ino: u64, offset: u64, data: Vec<u8>) -> Result<usize, Errno> {
        // Under the writeback cache a write is the kernel writing back any
        // process's pages: refused, that page would be marked clean and
        // lost. The failure waits for an fsync or close.
        if matches!(self.failures, Failures::PerHandle) {
            h.take_error()?;
        }
        let len = data.len();
        let end = offset.checked_add(len as u64).ok_or(Errno::EFBIG)?;
        let (m, cond) = &*self.state;
        let mut st = guard(m);
        loop {
            let overlaps = st.busy.get(&ino).is_some_and(|v| v.iter().any(|w| w.start < end && offset < w.end));
            if !overlaps && (st.bytes + len <= BUDGET || st.bytes == 0) {
                break;
            }
            st = cond.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.queued += 1;
        let write = Pending { start: offset, end, seq: st.queued };
        st.busy.entry(ino).or_default().push(write);
        st.bytes += len;
        drop(st);
        let done = Done { state: self.state.clone(), ino, write };
        let writer = h.clone();
        let sizes = self.sizes.clone();
        let failures = self.failures.clone();
        let job: Job = Box::new(move || {
            let _done = done;
            // Dropped before `_done` (declared after it): once the write is
            // seen done, the handle is no longer held, so a release can
            // close it at the metadata service.
            let writer = writer;
            if let Err(e) = writer.file.write_at(offset, &data) {
                tracing::warn!(target: "weft::fuse", ino, offset, error = %e, "a queued write failed; reported at the next fsync or close (and, without the writeback cache, write) of the handles told");
                failures.record(&writer, ino, errno::of(&e));
                sizes.unknown(ino);
            }
        });
        // Answered: the file is this long now, for this mount's stats
        // (before the job runs: its failure then makes the size unknown).
        self.sizes.wrote(ino, end);
        // A job that cannot be sent is dropped here, and its `Done` with it.
        if self.jobs.run(job).is_err() {
            self.sizes.unknown(ino);
            return Err(Errno::EIO);
        }
        Ok(len)
    }

    /// Where the queue stands now.
    pub(crate) fn mark(&self) -> Mark {
        let st = guard(&self.state.0);
        Mark { queued: st.queued, finished: st.finished }
    }

    /// Waits until every write of inode `ino` queued so far is done (not
    /// those queued while it waits).
    pub(crate) fn wait(&self, ino: u64) {
        let mark = self.mark();
        self.wait_for(ino, mark);
    }

    /// Waits until every write of inode `ino` queued up to `mark` is done.
    pub(crate) fn wait_for(&self, ino: u64, mark: Mark) {
        let (m, cond) = &*self.state;
        let mut st = guard(m);
        while before(&st, ino, mark) {
            st = cond.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// May what the servers said of inode `ino` since `mark` miss a write
    /// queued up to `mark`? True while one is in flight, and when a write
    /// of `ino` finished since (it may have finished after the servers
    /// answered); also when too many writes finished to tell.
    pub(crate) fn unsettled_since(&self, ino: u64, mark: Mark) -> bool {
        let st = guard(&self.state.0);
        let since = usize::try_from(st.finished - mark.finished).unwrap_or(usize::MAX);
        since > st.recent.len() || st.recent.iter().rev().take(since).any(|&i| i == ino) || before(&st, ino, mark)
    }

    /// [`WriteBehind::wait`], then reports (and forgets) a failed write of
    /// handle `h`.
    pub(crate) fn settle(&self, h: &Handle) -> Result<(), Errno> {
        self.wait(h.file.attr().id.0);
        h.take_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write of `ino` queued now (as `write` books it).
    fn queue(st: &mut State, ino: u64) -> Pending {
        st.queued += 1;
        let w = Pending { start: st.queued * 10, end: st.queued * 10 + 1, seq: st.queued };
        st.busy.entry(ino).or_default().push(w);
        w
    }

    /// A write done (as `Done` books it).
    fn finish(st: &mut State, ino: u64, w: Pending) {
        st.finished += 1;
        st.recent.push_back(ino);
        st.busy.get_mut(&ino).unwrap().retain(|x| *x != w);
    }

    #[test]
    fn a_wait_covers_the_writes_queued_before_it_and_no_later_ones() {
        let wb = Arc::new(WriteBehind::new(Arc::new(LocalSizes::new(std::time::Duration::ZERO)), Failures::PerHandle));
        let (m, _) = &*wb.state;
        let first = queue(&mut guard(m), 7);
        let mark = wb.mark();
        // A stream goes on queueing writes of the same file.
        let later: Vec<Pending> = (0..5).map(|_| queue(&mut guard(m), 7)).collect();
        assert!(before(&guard(m), 7, mark), "the write queued before the mark is pending");
        assert!(wb.unsettled_since(7, mark));
        finish(&mut guard(m), 7, first);
        assert!(!before(&guard(m), 7, mark), "done with what came before, though later writes are queued");
        // The wait itself returns (on a thread of its own: a wait for the
        // later writes too would never end).
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = wb.clone();
        std::thread::spawn(move || {
            waiter.wait_for(7, mark);
            let _ = tx.send(());
        });
        assert!(rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok(), "the wait did not return while later writes were queued");
        // A size asked meanwhile may have missed `first`: ask again.
        assert!(wb.unsettled_since(7, mark), "a write of the file finished since the mark");
        let mark2 = wb.mark();
        assert!(!wb.unsettled_since(8, mark2), "another file: nothing pending, nothing finished");
        finish(&mut guard(m), 7, later[0]);
        assert!(!wb.unsettled_since(8, mark2), "writes of other files do not count");
        assert!(wb.unsettled_since(7, mark2));
        // Past what `recent` remembers, any file is unsettled.
        let mark3 = wb.mark();
        for _ in 0..=RECENT {
            guard(m).finished += 1;
        }
        assert!(wb.unsettled_since(8, mark3));
    }
}
