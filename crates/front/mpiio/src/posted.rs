//! Nonblocking accesses (`MPI_File_iwrite_at`, `iread`, `iwrite_shared`,
//! and, when the program has `MPI_THREAD_MULTIPLE`, the collective
//! `iwrite_at_all`, `iread_all`, ...) run while the program computes: each
//! file gets one worker thread, started at its first such access, that
//! runs them in the order posted (so a rank's own accesses keep their
//! order, and every rank's collectives on the file come in the same order,
//! as MPI asks of the program) and ends at the file's close, or before any
//! call that must come after them (`ffi::settled`).
//!
//! For independent accesses the worker never calls MPI (a collective's
//! steps do, which is why those are posted only under
//! `MPI_THREAD_MULTIPLE`); only the shim completes the MPI request, in a
//! thread of the program (in MPI_Wait, MPI_Test and their kin). The
//! worker marks a [`Ticket`] done and counts the completion
//! ([`wait_finished`] lets a wait for any of several requests sleep until
//! one is).

use crate::access::{perform, Placed};
use crate::errors::{Class, Fail, Result};
use crate::file::Position;
use crate::registry;
use std::collections::HashMap;
use std::sync::mpsc::{channel, Sender};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// One posted access: its result once the worker has run it.
#[derive(Default)]
pub struct Ticket {
    result: Mutex<Option<Result<u64>>>,
    done: Condvar,
}

impl Ticket {
    /// Waits until the access is done, at most `timeout` (None: for as
    /// long as it takes); true if it is.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        let g = self.result.lock().unwrap_or_else(PoisonError::into_inner);
        let g = match timeout {
            None => self.done.wait_while(g, |r| r.is_none()).unwrap_or_else(PoisonError::into_inner),
            Some(t) => self.done.wait_timeout_while(g, t, |r| r.is_none()).unwrap_or_else(PoisonError::into_inner).0,
        };
        g.is_some()
    }

    /// The bytes moved, or the error; None while the access runs.
    pub fn result(&self) -> Option<Result<u64>> {
        self.result.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn finish(&self, r: Result<u64>) {
        *self.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
        self.done.notify_all();
        let (count, changed) = &FINISHED;
        *count.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        changed.notify_all();
    }
}

pub struct Job {
    file: registry::Shared,
    pos: Position,
    write: bool,
    collective: bool,
    /// An error: a collective this rank takes part in with nothing.
    placed: Result<Placed>,
    ticket: Arc<Ticket>,
}

struct Worker {
    jobs: Sender<Job>,
    thread: JoinHandle<()>,
    /// Collectives posted and not yet done.
    collectives: Arc<AtomicUsize>,
}

/// The workers, by file key.
static WORKERS: Mutex<Option<HashMap<usize, Worker>>> = Mutex::new(None);

/// How many posted accesses have finished, ever; and its change.
static FINISHED: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());

/// Where the file under `key` posts its accesses: its worker, started now
/// if it has none.
pub fn worker(key: usize) -> Result<Poster> {
    let mut g = WORKERS.lock().unwrap_or_else(PoisonError::into_inner);
    let workers = g.get_or_insert_with(HashMap::new);
    if let Some(w) = workers.get(&key) {
        return Ok(Poster { jobs: w.jobs.clone(), collectives: w.collectives.clone() });
    }
    let collectives = Arc::new(AtomicUsize::new(0));
    let running = collectives.clone();
    let (jobs, queue) = channel::<Job>();
    let thread = std::thread::Builder::new()
        .name("weft-mpiio-nb".into())
        .spawn(move || {
            for job in queue {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    // Shared: the program posts more while this one runs.
                    let f = registry::read(&job.file);
                    // SAFETY: the memory stays the access's until the
                    // ticket is done (post's contract, carried by Job).
                    unsafe { perform(&f, job.pos, job.collective, job.write, &job.placed) }
                }));
                if job.collective {
                    running.fetch_sub(1, Ordering::AcqRel);
                }
                job.ticket.finish(r.unwrap_or_else(|_| Err(Fail::new(Class::Intern, "weft: internal error (a panic in a nonblocking access)"))));
            }
        })
        .map_err(|e| Fail::new(Class::Intern, format!("weft: cannot start a thread for nonblocking I/O: {e}")))?;
    workers.insert(key, Worker { jobs: jobs.clone(), thread, collectives: collectives.clone() });
    Ok(Poster { jobs, collectives })
}

/// A file's worker, to post to.
pub struct Poster {
    jobs: Sender<Job>,
    collectives: Arc<AtomicUsize>,
}

/// Whether collectives posted on the file under `key` are still to run
/// (then a call taking collective steps of its own waits for them).
pub fn collectives_pending(key: usize) -> bool {
    let g = WORKERS.lock().unwrap_or_else(PoisonError::into_inner);
    g.as_ref().and_then(|m| m.get(&key)).is_some_and(|w| w.collectives.load(Ordering::Acquire) > 0)
}

/// Posts an access of `file` at `pos` (already claimed:
/// [`crate::file::OpenFile::claim`]) to its `worker`; `collective` for the
/// `_all` forms, whose `placed` may be an error (the rank takes part with
/// nothing).
///
/// # Safety
/// The memory `placed` describes stays the access's (readable, and for a
/// read writable, untouched by anyone else) until the ticket is done.
pub unsafe fn post(worker: &Poster, file: registry::Shared, pos: Position, write: bool, collective: bool, placed: Result<Placed>) -> Arc<Ticket> {
    let ticket = Arc::new(Ticket::default());
    let job = Job { file, pos, write, collective, placed, ticket: ticket.clone() };
    if collective {
        worker.collectives.fetch_add(1, Ordering::AcqRel);
    }
    if let Err(back) = worker.jobs.send(job) {
        // Its thread is gone (only a panic outside a job could do it).
        back.0.ticket.finish(Err(Fail::new(Class::Intern, "weft: the file's nonblocking worker stopped")));
    }
    ticket
}

/// Runs every access still posted on the file under `key` and ends its
/// worker (at close: MPI asks the program to complete them first, but a
/// program that did not still gets its data written).
pub fn drain(key: usize) {
    let w = WORKERS.lock().unwrap_or_else(PoisonError::into_inner).as_mut().and_then(|m| m.remove(&key));
    if let Some(Worker { jobs, thread, .. }) = w {
        drop(jobs);
        let _ = thread.join();
    }
}

/// How many posted accesses have finished so far.
pub fn finished() -> u64 {
    *FINISHED.0.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits until more than `seen` accesses have finished, at most `timeout`.
pub fn wait_finished(seen: u64, timeout: Duration) {
    let (count, changed) = &FINISHED;
    let g = count.lock().unwrap_or_else(PoisonError::into_inner);
    let _ = changed.wait_timeout_while(g, timeout, |n| *n <= seen);
}
