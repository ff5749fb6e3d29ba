//! Group commit of metadata mutations: concurrent creates, removes and
//! renames share one durable redb commit instead of paying one fsync each.
//!
//! A mutation joins a queue and waits for the commit turn. The thread that
//! gets the turn and finds its own request not yet served takes everything
//! queued, applies each in one write transaction (a mutation checks
//! everything before it writes, so one that fails leaves no trace for the
//! others), commits once, and hands every
//! request its result; the others, getting the turn after it, find theirs
//! served. Every answer is given after its commit (durable, or within the
//! metadata window: see `sync_window`), and requests see each other in
//! queue order, as they would one commit each.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Most requests one commit carries: bounds the time a turn takes.
pub const MAX_BATCH: usize = 256;

pub struct GroupCommit<R, T> {
    queue: Mutex<Vec<Arc<Slot<R, T>>>>,
    turn: Mutex<()>,
}

struct Slot<R, T> {
    request: R,
    result: Mutex<Option<T>>,
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<R, T> Default for GroupCommit<R, T> {
    fn default() -> Self {
        GroupCommit { queue: Mutex::new(Vec::new()), turn: Mutex::new(()) }
    }
}

impl<R, T> GroupCommit<R, T> {
    /// Runs `f` between batches, as a batch would run (the metadata
    /// flusher's durable commit).
    pub fn exclusive<X>(&self, f: impl FnOnce() -> X) -> X {
        let _turn = lock(&self.turn);
        f()
    }

    /// Runs `request` alone, on the calling thread and at once, if no
    /// batch runs and none waits (the event loop's way to serve a change
    /// without two thread wake-ups); gives it back otherwise, or when
    /// `run` declines it (`None`). A panic in `run` answers it
    /// `failed(request)`.
    pub fn try_now(&self, request: R, run: impl FnOnce(&R) -> Option<T>, failed: impl Fn(&R) -> T) -> Result<T, R> {
        let _turn = match self.turn.try_lock() {
            Ok(turn) => turn,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Err(request),
        };
        if !lock(&self.queue).is_empty() {
            return Err(request);
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&request))) {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(request),
            Err(_) => {
                tracing::error!(target: "weft::meta", "a commit panicked: its request fails, the service goes on");
                Ok(failed(&request))
            }
        }
    }

    /// Runs `request` in some batch; `run` gets a batch's requests and
    /// returns their results in the same order. If `run` panics (a bug),
    /// every request of that batch gets `failed(request)` and later
    /// batches run as usual: the others of the batch must not wait for a
    /// result that never comes.
    pub fn submit(&self, request: R, run: impl Fn(&[&R]) -> Vec<T>, failed: impl Fn(&R) -> T) -> T {
        let me = Arc::new(Slot { request, result: Mutex::new(None) });
        lock(&self.queue).push(me.clone());
        loop {
            let _turn = lock(&self.turn);
            if let Some(r) = lock(&me.result).take() {
                return r;
            }
            // Take the queue up to MAX_BATCH; ours is in it unless an earlier
            // turn left it for a later batch (then the next turn serves it).
            let batch: Vec<Arc<Slot<R, T>>> = {
                let mut q = lock(&self.queue);
                let n = q.len().min(MAX_BATCH);
                q.drain(..n).collect()
            };
            if batch.is_empty() {
                // Not served and not queued: cannot happen (every batch
                // answers all of its slots); never wait for it.
                return failed(&me.request);
            }
            let requests: Vec<&R> = batch.iter().map(|s| &s.request).collect();
            let results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&requests))).unwrap_or_else(|_| {
                tracing::error!(target: "weft::meta", requests = batch.len(), "a group commit panicked: its requests fail, the service goes on");
                Vec::new()
            });
            let mut results = results.into_iter();
            for s in &batch {
                let r = results.next().unwrap_or_else(|| failed(&s.request));
                *lock(&s.result) = Some(r);
            }
            // Ours was past MAX_BATCH: the loop takes another turn.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_submissions_are_batched_and_each_gets_its_own_result() {
        let g: Arc<GroupCommit<u32, u32>> = Arc::new(GroupCommit::default());
        let batches = Arc::new(Mutex::new(Vec::new()));
        let handles: Vec<_> = (0..16u32)
            .map(|i| {
                let (g, batches) = (g.clone(), batches.clone());
                std::thread::spawn(move || {
                    g.submit(
                        i,
                        |reqs| {
                            std::thread::sleep(std::time::Duration::from_millis(5)); // a "commit"
                            batches.lock().unwrap().push(reqs.len());
                            reqs.iter().map(|&&r| r * 10).collect()
                        },
                        |_| u32::MAX,
                    )
                })
            })
            .collect();
        let results: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(results, (0..16).map(|i| i * 10).collect::<Vec<_>>());
        let b = batches.lock().unwrap();
        assert_eq!(b.iter().sum::<usize>(), 16, "every request ran exactly once");
        assert!(b.len() < 16, "some commits carried several requests: {b:?}");
    }

    #[test]
    fn try_now_runs_alone_when_the_turn_is_free_and_gives_back_otherwise() {
        let g: Arc<GroupCommit<u32, u32>> = Arc::new(GroupCommit::default());
        let run = |r: &u32| Some(r + 1);
        // Free: run at once.
        assert_eq!(g.try_now(1, run, |_| u32::MAX).ok(), Some(2));
        // Declined by `run`: given back.
        assert_eq!(g.try_now(1, |_| None, |_| u32::MAX).err(), Some(1));
        // A batch (or the flusher) holds the turn: given back, not run. (A
        // try_now that waited for the turn would hang here, not fail: the
        // turn is released only after it returns.)
        let (held, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let holder = {
            let g = g.clone();
            std::thread::spawn(move || {
                g.exclusive(|| {
                    held.0.send(()).unwrap();
                    release.1.recv().unwrap();
                })
            })
        };
        held.1.recv().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let g = g.clone();
            std::thread::spawn(move || tx.send(g.try_now(5, run, |_| u32::MAX)).unwrap());
        }
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        release.0.send(()).unwrap();
        holder.join().unwrap();
        assert_eq!(got.expect("try_now returns at once while the turn is held").err(), Some(5));
        // A request queued for the turn goes first: given back too.
        lock(&g.queue).push(Arc::new(Slot { request: 7, result: Mutex::new(None) }));
        assert_eq!(g.try_now(9, run, |_| u32::MAX).err(), Some(9));
        lock(&g.queue).clear();
        assert_eq!(g.try_now(9, run, |_| u32::MAX).ok(), Some(10));
        // A panic answers with `failed`, and the next one runs; so does a
        // turn left poisoned by a panic elsewhere.
        assert_eq!(g.try_now(3, |_| -> Option<u32> { panic!("injected") }, |_| u32::MAX).ok(), Some(u32::MAX));
        let _ = std::thread::spawn({
            let g = g.clone();
            move || g.exclusive(|| panic!("poisons the turn"))
        })
        .join();
        assert_eq!(g.try_now(3, run, |_| u32::MAX).ok(), Some(4));
    }

    #[test]
    fn a_panicking_batch_fails_its_own_requests_only_and_nobody_waits_for_ever() {
        let g: Arc<GroupCommit<u32, Option<u32>>> = Arc::new(GroupCommit::default());
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..12u32 {
            let (g, tx) = (g.clone(), tx.clone());
            std::thread::spawn(move || {
                let r = g.submit(
                    i,
                    |reqs| {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        // A bug that strikes one request's batch.
                        assert!(!reqs.contains(&&3), "injected failure");
                        reqs.iter().map(|&&r| Some(r)).collect()
                    },
                    |_| None,
                );
                tx.send((i, r)).unwrap();
            });
        }
        drop(tx);
        let mut got = Vec::new();
        for _ in 0..12 {
            // Before the fix, the others of the panicked batch spun for ever.
            got.push(rx.recv_timeout(std::time::Duration::from_secs(10)).expect("every submitter gets an answer"));
        }
        got.sort();
        assert_eq!(got.iter().find(|(i, _)| *i == 3).unwrap().1, None, "the request whose batch panicked fails");
        assert!(got.iter().filter(|(_, r)| r.is_some()).all(|(i, r)| *r == Some(*i)), "the others get their own results");
        // And the next batch runs as usual.
        assert_eq!(g.submit(100, |reqs| reqs.iter().map(|&&r| Some(r + 1)).collect(), |_| None), Some(101));
    }
}
