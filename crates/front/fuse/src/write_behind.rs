//! Write-behind: a write through the mount is answered once it is queued,
//! and goes to the data servers from a small pool of threads, so one
//! process's stream has several writes in flight instead of one.
//!
//! What keeps POSIX's promises:
//! * writes of one file whose ranges overlap never run at once: a write
//!   waits for the ones it overlaps, so the last one wins, as it would have;
//! * everything that must see the file's bytes or size first waits until
//!   the file's queued writes are done: read, getattr, truncate, append,
//!   fsync, flush (so close-to-open holds) and unlocking a record lock;
//! * a write that failed is reported, as EIO or its own errno, by the next
//!   write, fsync or close of that file (as the kernel's page cache does);
//! * queued bytes are bounded (a writer waits for room), and handles opened
//!   with O_SYNC or O_DSYNC write through.

use crate::errno;
use fuser::Errno;
use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use crate::fs::Handle;

/// Bytes queued and not yet written, all files together.
const BUDGET: usize = 32 << 20;

/// Threads writing queued data.
const THREADS: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct FileWrites {
    /// Ranges being written: (start, end).
    busy: Vec<(u64, u64)>,
    /// The first failure not yet reported.
    error: Option<Errno>,
}

#[derive(Default)]
struct State {
    files: HashMap<u64, FileWrites>,
    bytes: usize,
}

pub(crate) struct WriteBehind {
    state: Arc<(Mutex<State>, Condvar)>,
    jobs: Mutex<Sender<Job>>,
}

fn guard(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                }
            });
            if let Err(e) = spawned {
                tracing::error!(target: "weft::fuse", error = %e, "cannot start a write-behind thread");
            }
        }
        WriteBehind { state: Arc::new((Mutex::new(State::default()), Condvar::new())), jobs: Mutex::new(tx) }
    }

    /// Queues `data` for `offset` of `h`'s file (inode `ino`) and returns once
    /// it is queued; reports an earlier write's failure instead.
    pub(crate) fn write(&self, h: Arc<Handle>, ino: u64, offset: u64, data: Vec<u8>) -> Result<usize, Errno> {
        let len = data.len();
        let end = offset.checked_add(len as u64).ok_or(Errno::EFBIG)?;
        let (m, cond) = &*self.state;
        let mut st = guard(m);
        loop {
            let f = st.files.entry(ino).or_default();
            if let Some(e) = f.error.take() {
                return Err(e);
            }
            let overlaps = f.busy.iter().any(|&(s, e)| s < end && offset < e);
            if !overlaps && (st.bytes + len <= BUDGET || st.bytes == 0) {
                break;
            }
            st = cond.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.files.entry(ino).or_default().busy.push((offset, end));
        st.bytes += len;
        drop(st);
        let state = self.state.clone();
        let job: Job = Box::new(move || {
            let r = h.file.write_at(offset, &data);
            let (m, cond) = &*state;
            let mut st = guard(m);
            st.bytes -= len;
            if let Some(f) = st.files.get_mut(&ino) {
                if let Some(i) = f.busy.iter().position(|&r| r == (offset, end)) {
                    f.busy.swap_remove(i);
                }
                if let Err(e) = r {
                    tracing::warn!(target: "weft::fuse", ino, offset, error = %e, "a queued write failed; reported at the next write, fsync or close");
                    f.error.get_or_insert(errno::of(&e));
                }
            }
            drop(st);
            cond.notify_all();
        });
        if self.jobs.lock().unwrap_or_else(PoisonError::into_inner).send(job).is_err() {
            return Err(Errno::EIO);
        }
        Ok(len)
    }

    /// Waits until every queued write of inode `ino` is done; a failure
    /// stays to be reported by [`WriteBehind::settle`].
    pub(crate) fn wait(&self, ino: u64) {
        drop(self.wait_locked(ino));
    }

    fn wait_locked(&self, ino: u64) -> MutexGuard<'_, State> {
        let (m, cond) = &*self.state;
        let mut st = guard(m);
        while st.files.get(&ino).is_some_and(|f| !f.busy.is_empty()) {
            st = cond.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st
    }

    /// Does inode `ino` have writes queued or in flight?
    pub(crate) fn pending(&self, ino: u64) -> bool {
        guard(&self.state.0).files.get(&ino).is_some_and(|f| !f.busy.is_empty())
    }

    /// Waits until every queued write of inode `ino` is done; then reports
    /// (and forgets) a failure among them.
    pub(crate) fn settle(&self, ino: u64) -> Result<(), Errno> {
        let mut st = self.wait_locked(ino);
        match st.files.remove(&ino) {
            Some(FileWrites { error: Some(e), .. }) => Err(e),
            _ => Ok(()),
        }
    }
}
