//! A few threads running queued jobs in order of arrival: the mount's
//! write-behind sends.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, PoisonError};

pub(crate) type Job = Box<dyn FnOnce() + Send>;

pub(crate) struct Pool {
    jobs: Mutex<Sender<Job>>,
}

impl Pool {
    /// `threads` threads named `name-K`.
    pub(crate) fn new(name: &str, threads: usize) -> Self {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for k in 0..threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new().name(format!("{name}-{k}")).spawn(move || {
                loop {
                    let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok(job) = job else { return };
                    // A panicking job must not take the thread with it.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            });
            if let Err(e) = spawned {
                tracing::error!(target: "weft::fuse", error = %e, name, "cannot start a pool thread");
            }
        }
        Pool { jobs: Mutex::new(tx) }
    }

    /// Queues `job`; gives it back if no thread is left to run it.
    pub(crate) fn run(&self, job: Job) -> Result<(), Job> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner).send(job).map_err(|e| e.0)
    }
}
