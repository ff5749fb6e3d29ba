//! Write-behind: a write through the mount is answered once it is queued,
//! and goes to the data servers from a small pool of threads, so one
//! process's stream has several writes in flight instead of one.
//!
//! What keeps POSIX's promises:
//! * writes of one file whose ranges overlap never run at once: a write
//!   waits for the ones it overlaps, so the last one wins, as it would have;
//! * everything that must see the file's bytes or size first waits until
//!   the file's queued writes are done: read, getattr, truncate, append,
//!   fsync, flush (so close-to-open holds) and giving up a write lock;
//! * a write that failed is reported, as EIO or its own errno, by the next
//!   write, fsync or close *of the handle that wrote it* (as the kernel's
//!   page cache does), never to another process;
//! * queued bytes are bounded (a writer waits for room), and handles opened
//!   with O_SYNC or O_DSYNC write through.

use crate::errno;
use crate::handle::Handle;
use fuser::Errno;
use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// Bytes queued and not yet written, all files together.
const BUDGET: usize = 32 << 20;

/// Threads writing queued data.
const THREADS: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    /// Per inode, the ranges being written: (start, end).
    busy: HashMap<u64, Vec<(u64, u64)>>,
    bytes: usize,
}

pub(crate) struct WriteBehind {
    state: Arc<(Mutex<State>, Condvar)>,
    jobs: Mutex<Sender<Job>>,
}

fn guard(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Takes a finished (or failed, or unwound) write's range off the books.
struct Done {
    state: Arc<(Mutex<State>, Condvar)>,
    ino: u64,
    range: (u64, u64),
}

impl Drop for Done {
    fn drop(&mut self) {
        let (m, cond) = &*self.state;
        let mut st = guard(m);
        st.bytes -= (self.range.1 - self.range.0) as usize;
        if let Some(v) = st.busy.get_mut(&self.ino) {
            if let Some(i) = v.iter().position(|&r| r == self.range) {
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
    pub(crate) fn new() -> Self {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for k in 0..THREADS {
            let rx: Arc<Mutex<Receiver<Job>>> = rx.clone();
            let spawned = std::thread::Builder::new().name(format!("weft-wb-{k}")).spawn(move || {
                loop {
                    let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok(job) = job else { return };
                    // A panicking write must not take the thread with it
                    // (its `Done` has already freed its range).
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            });
            if let Err(e) = spawned {
                tracing::error!(target: "weft::fuse", error = %e, "cannot start a write-behind thread");
            }
        }
        WriteBehind { state: Arc::new((Mutex::new(State::default()), Condvar::new())), jobs: Mutex::new(tx) }
    }

    /// Queues `data` for `offset` of `h`'s file (inode `ino`) and returns
    /// once it is queued; reports an earlier failed write of `h` instead.
    pub(crate) fn write(&self, h: Arc<Handle>, ino: u64, offset: u64, data: Vec<u8>) -> Result<usize, Errno> {
        h.take_error()?;
        let len = data.len();
        let end = offset.checked_add(len as u64).ok_or(Errno::EFBIG)?;
        let (m, cond) = &*self.state;
        let mut st = guard(m);
        loop {
            let overlaps = st.busy.get(&ino).is_some_and(|v| v.iter().any(|&(s, e)| s < end && offset < e));
            if !overlaps && (st.bytes + len <= BUDGET || st.bytes == 0) {
                break;
            }
            st = cond.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.busy.entry(ino).or_default().push((offset, end));
        st.bytes += len;
        drop(st);
        let done = Done { state: self.state.clone(), ino, range: (offset, end) };
        let writer = h.clone();
        let job: Job = Box::new(move || {
            let _done = done;
            // Dropped before `_done` (declared after it): once the write is
            // seen done, the handle is no longer held, so a release can
            // close it at the metadata service.
            let writer = writer;
            if let Err(e) = writer.file.write_at(offset, &data) {
                tracing::warn!(target: "weft::fuse", ino, offset, error = %e, "a queued write failed; reported at the handle's next write, fsync or close");
                writer.fail(errno::of(&e));
            }
        });
        // A job that cannot be sent is dropped here, and its `Done` with it.
        if self.jobs.lock().unwrap_or_else(PoisonError::into_inner).send(job).is_err() {
            return Err(Errno::EIO);
        }
        Ok(len)
    }

    /// Waits until every write of inode `ino` queued so far is done.
    pub(crate) fn wait(&self, ino: u64) {
        let (m, cond) = &*self.state;
        let mut st = guard(m);
        while st.busy.contains_key(&ino) {
            st = cond.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Does inode `ino` have writes queued or in flight?
    pub(crate) fn pending(&self, ino: u64) -> bool {
        guard(&self.state.0).busy.contains_key(&ino)
    }

    /// [`WriteBehind::wait`], then reports (and forgets) a failed write of
    /// handle `h`.
    pub(crate) fn settle(&self, h: &Handle) -> Result<(), Errno> {
        self.wait(h.file.attr().id.0);
        h.take_error()
    }
}
