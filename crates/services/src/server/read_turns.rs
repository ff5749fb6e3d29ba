//! Which waiting read of an object a data server serves next (paper 000:
//! for reads the server decides the order). Each object has its own queue;
//! `slots` reads of one object are served at once (1 is the paper's
//! unit-transfer model); when one finishes, the next goes to the waiting
//! read the strategy prefers:
//!
//! | strategy | next read |
//! |---|---|
//! | first | lowest object offset (file order), then arrival |
//! | random | uniformly random |
//! | hash | at step j, the client of rank (s + j) mod group, s = this server's id; nearest rank after it if that client waits for nothing |
//! | colour | lowest slot (the block's colour), then arrival |
//!
//! Reads without a strategy (code 0) never enter a queue. A turn covers
//! reading the object into the response buffer, never sending it: a client
//! that is slow to take its bytes holds no turn (issue 8).
//!
//! This is a plain queue owned by the event loop: admitting a read either
//! hands it back to run now or keeps it; finishing one hands back the next.
//! Nothing here blocks a thread.

use std::collections::HashMap;
use weft_sched::Strategy;
use weft_wire::{FileId, ReadOrder};

struct Waiting<T> {
    ticket: u64,
    order: ReadOrder,
    offset: u64,
    job: T,
}

#[derive(Default)]
struct Queue<T> {
    active: usize,
    waiting: Vec<Waiting<T>>,
    /// hash-IOS step counter.
    step: u64,
}

/// Per-object read queues holding jobs of type `T`.
pub struct ReadTurns<T> {
    objects: HashMap<FileId, Queue<T>>,
    slots: usize,
    server: u64,
    next_ticket: u64,
    rng: u64,
}

impl<T> ReadTurns<T> {
    pub fn new(server: u32, slots: usize) -> Self {
        ReadTurns { objects: HashMap::new(), slots: slots.max(1), server: server.into(), next_ticket: 0, rng: 0x5EED ^ u64::from(server) }
    }

    /// Reads waiting, over all objects.
    pub fn waiting(&self) -> usize {
        self.objects.values().map(|q| q.waiting.len()).sum()
    }

    /// A read of `file` at `offset` arrives: `Some(job)` to run it now, or
    /// `None` if it waits for [`ReadTurns::finish`].
    pub fn admit(&mut self, file: FileId, order: ReadOrder, offset: u64, job: T) -> Option<T> {
        let q = self.objects.entry(file).or_insert_with(|| Queue { active: 0, waiting: Vec::new(), step: 0 });
        if q.active < self.slots && q.waiting.is_empty() {
            q.active += 1;
            return Some(job);
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        q.waiting.push(Waiting { ticket, order, offset, job });
        None
    }

    /// A read of `file` finished: the next job to run, if one waits.
    pub fn finish(&mut self, file: FileId) -> Option<T> {
        let q = self.objects.get_mut(&file)?;
        q.active = q.active.saturating_sub(1);
        if q.waiting.is_empty() {
            if q.active == 0 {
                self.objects.remove(&file);
            }
            return None;
        }
        let k = pick(q, self.server, &mut self.rng);
        q.active += 1;
        Some(q.waiting.swap_remove(k).job)
    }
}

fn pick<T>(q: &mut Queue<T>, server: u64, rng: &mut u64) -> usize {
    let w = &q.waiting;
    let oldest = (0..w.len()).min_by_key(|&k| w[k].ticket).expect("non-empty");
    match Strategy::from_code(w[oldest].order.strategy) {
        Some(Strategy::First) | None => (0..w.len()).min_by_key(|&k| (w[k].offset, w[k].ticket)).expect("non-empty"),
        Some(Strategy::Colour) => (0..w.len()).min_by_key(|&k| (w[k].order.slot, w[k].ticket)).expect("non-empty"),
        Some(Strategy::Random) => {
            *rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((*rng >> 33) % w.len() as u64) as usize
        }
        Some(Strategy::Hash) => {
            // Distance from the client this step wants, in rank order.
            let dist = |k: usize| {
                let g = u64::from(w[k].order.group.max(1));
                let want = (server + q.step) % g;
                (u64::from(w[k].order.rank) + g - want) % g
            };
            let k = (0..w.len()).min_by_key(|&k| (dist(k), w[k].ticket)).expect("non-empty");
            q.step += dist(k) + 1;
            k
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holds the only slot, queues reads in index order, then finishes one
    /// at a time and records the order in which the queued reads run.
    fn served_order(strategy: Strategy, reads: &[(u32, u32, u64, u32)]) -> Vec<usize> {
        let mut turns = ReadTurns::new(1, 1);
        let f = FileId(9);
        assert_eq!(turns.admit(f, ReadOrder::default(), 0, usize::MAX), Some(usize::MAX));
        for (i, &(rank, group, offset, slot)) in reads.iter().enumerate() {
            assert_eq!(turns.admit(f, ReadOrder { strategy: strategy.code(), rank, group, slot }, offset, i), None);
        }
        let mut order = Vec::new();
        while let Some(i) = turns.finish(f) {
            order.push(i);
        }
        assert_eq!(turns.waiting(), 0);
        order
    }

    #[test]
    fn first_serves_file_order() {
        assert_eq!(served_order(Strategy::First, &[(0, 4, 300, 0), (1, 4, 100, 0), (2, 4, 200, 0)]), [1, 2, 0]);
    }

    #[test]
    fn hash_serves_rank_s_plus_j() {
        // Server id 1, group of 4: step 0 wants rank 1, then 2, 3, 0.
        assert_eq!(served_order(Strategy::Hash, &[(0, 4, 0, 0), (3, 4, 0, 0), (2, 4, 0, 0), (1, 4, 0, 0)]), [3, 2, 1, 0]);
    }

    #[test]
    fn colour_serves_slot_order() {
        assert_eq!(served_order(Strategy::Colour, &[(0, 4, 0, 5), (1, 4, 0, 2), (2, 4, 0, 9)]), [1, 0, 2]);
    }

    #[test]
    fn random_serves_everyone_once() {
        let mut o = served_order(Strategy::Random, &[(0, 4, 0, 0), (1, 4, 0, 0), (2, 4, 0, 0), (3, 4, 0, 0)]);
        o.sort_unstable();
        assert_eq!(o, [0, 1, 2, 3]);
    }

    #[test]
    fn objects_queue_apart_and_slots_run_at_once() {
        let mut turns = ReadTurns::new(0, 2);
        let o = ReadOrder { strategy: Strategy::First.code(), rank: 0, group: 1, slot: 0 };
        assert_eq!(turns.admit(FileId(1), o, 0, 1), Some(1));
        assert_eq!(turns.admit(FileId(1), o, 0, 2), Some(2));
        assert_eq!(turns.admit(FileId(1), o, 0, 3), None);
        assert_eq!(turns.admit(FileId(2), o, 0, 4), Some(4), "another object does not wait");
        assert_eq!(turns.finish(FileId(1)), Some(3));
        assert_eq!(turns.finish(FileId(1)), None);
        assert_eq!(turns.finish(FileId(1)), None);
        assert_eq!(turns.finish(FileId(2)), None);
        assert!(turns.objects.is_empty(), "finished queues are forgotten");
    }
}
