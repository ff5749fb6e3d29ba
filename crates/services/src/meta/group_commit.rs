//! Group commit of metadata mutations: concurrent creates, removes and
//! renames share one durable redb commit instead of paying one fsync each.
//!
//! A mutation joins a queue and waits for the commit turn. The thread that
//! gets the turn and finds its own request not yet served takes everything
//! queued, applies each in one write transaction (a mutation checks
//! everything before it writes, so one that fails leaves no trace for the
//! others), commits once, and hands every
//! request its result; the others, getting the turn after it, find theirs
//! served. Every answer is given after the commit that makes it durable,
//! so nothing acknowledged is lost, and requests see each other in queue
//! order, as they would one commit each.

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

    /// Runs `request` in some batch; `run` gets a batch's requests and
    /// returns their results in the same order.
    pub fn submit(&self, request: R, run: impl Fn(&[&R]) -> Vec<T>) -> T {
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
                continue;
            }
            let requests: Vec<&R> = batch.iter().map(|s| &s.request).collect();
            let results = run(&requests);
            debug_assert_eq!(results.len(), batch.len());
            for (s, r) in batch.iter().zip(results) {
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
                    g.submit(i, |reqs| {
                        std::thread::sleep(std::time::Duration::from_millis(5)); // a "commit"
                        batches.lock().unwrap().push(reqs.len());
                        reqs.iter().map(|&&r| r * 10).collect()
                    })
                })
            })
            .collect();
        let results: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(results, (0..16).map(|i| i * 10).collect::<Vec<_>>());
        let b = batches.lock().unwrap();
        assert_eq!(b.iter().sum::<usize>(), 16, "every request ran exactly once");
        assert!(b.len() < 16, "some commits carried several requests: {b:?}");
    }
}
