//! Nonblocking independent accesses (`MPI_File_iwrite_at`, `iread`,
//! `iwrite_shared`, ...) run while the program computes: each file gets
//! one worker thread, started at its first such access, that runs them in
//! the order posted (so a rank's own accesses keep their order, as its
//! blocking ones do) and ends at the file's close.
//!
//! The worker never calls MPI: only the shim completes the MPI request,
//! in a thread of the program (in MPI_Wait, MPI_Test and their kin), since
//! a program that initialised MPI below `MPI_THREAD_MULTIPLE` may not have
//! MPI called from another thread. The worker marks a [`Ticket`] done and
//! counts the completion ([`wait_finished`] lets a wait for any of several
//! requests sleep until one is).

use crate::access::{perform, Placed};
use crate::errors::{Class, Fail, Result};
use crate::file::Position;
use crate::registry;
use std::collections::HashMap;
use std::sync::mpsc::{channel, Sender};
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
    placed: Placed,
    ticket: Arc<Ticket>,
}

struct Worker {
    jobs: Sender<Job>,
    thread: JoinHandle<()>,
}

/// The workers, by file key.
static WORKERS: Mutex<Option<HashMap<usize, Worker>>> = Mutex::new(None);

/// How many posted accesses have finished, ever; and its change.
static FINISHED: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());

/// Where the file under `key` posts its accesses: its worker, started now
/// if it has none.
pub fn worker(key: usize) -> Result<Sender<Job>> {
    let mut g = WORKERS.lock().unwrap_or_else(PoisonError::into_inner);
    let workers = g.get_or_insert_with(HashMap::new);
    if let Some(w) = workers.get(&key) {
        return Ok(w.jobs.clone());
    }
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
                    unsafe { perform(&f, job.pos, false, job.write, &Ok(job.placed.clone())) }
                }));
                job.ticket.finish(r.unwrap_or_else(|_| Err(Fail::new(Class::Intern, "weft: internal error (a panic in a nonblocking access)"))));
            }
        })
        .map_err(|e| Fail::new(Class::Intern, format!("weft: cannot start a thread for nonblocking I/O: {e}")))?;
    workers.insert(key, Worker { jobs: jobs.clone(), thread });
    Ok(jobs)
}

/// Posts an access of `file` at `pos` (already claimed:
/// [`crate::file::OpenFile::claim`]) to its `worker`.
///
/// # Safety
/// The memory `placed` describes stays the access's (readable, and for a
/// read writable, untouched by anyone else) until the ticket is done.
pub unsafe fn post(worker: &Sender<Job>, file: registry::Shared, pos: Position, write: bool, placed: Placed) -> Arc<Ticket> {
    let ticket = Arc::new(Ticket::default());
    let job = Job { file, pos, write, placed, ticket: ticket.clone() };
    if let Err(back) = worker.send(job) {
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
    if let Some(Worker { jobs, thread }) = w {
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
