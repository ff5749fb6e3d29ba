//! Which waiting read a data server serves next (paper 000: for reads the
//! server decides the order). A read waits for a turn; `slots` reads are
//! served at once (1 is the paper's unit-transfer model); when a turn ends,
//! the next one goes to the waiting read the strategy prefers:
//!
//! | strategy | next read |
//! |---|---|
//! | first | lowest object offset (file order), then arrival |
//! | random | uniformly random |
//! | hash | at step j, the client of rank (s + j) mod group, s = this server's id; nearest rank after it if that client waits for nothing |
//! | colour | lowest slot (the block's colour), then arrival |
//!
//! Reads without a strategy (code 0) are served at once, outside this queue.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Mutex;
use weft_sched::Strategy;
use weft_wire::ReadOrder;

struct Waiting {
    ticket: u64,
    order: ReadOrder,
    offset: u64,
    /// Wakes exactly this waiter when it gets the turn (no thundering herd).
    wake: SyncSender<()>,
}

struct State {
    active: usize,
    waiting: Vec<Waiting>,
    next_ticket: u64,
    /// hash-IOS step counter.
    step: u64,
    rng: u64,
}

pub struct ReadTurns {
    state: Mutex<State>,
    slots: usize,
    server: u64,
}

/// A granted turn; dropping it passes the turn on.
pub struct Turn<'a> {
    turns: &'a ReadTurns,
}

impl ReadTurns {
    pub fn new(server: u32, slots: usize) -> Self {
        ReadTurns {
            state: Mutex::new(State { active: 0, waiting: Vec::new(), next_ticket: 0, step: 0, rng: 0x5EED ^ u64::from(server) }),
            slots: slots.max(1),
            server: server.into(),
        }
    }

    /// Waits for this read's turn.
    pub fn acquire(&self, order: ReadOrder, offset: u64) -> Turn<'_> {
        let rx: Receiver<()> = {
            let mut st = self.state.lock().expect("read turns lock");
            if st.active < self.slots && st.waiting.is_empty() {
                st.active += 1;
                return Turn { turns: self };
            }
            let ticket = st.next_ticket;
            st.next_ticket += 1;
            let (wake, rx) = sync_channel(1);
            st.waiting.push(Waiting { ticket, order, offset, wake });
            self.grant(&mut st);
            rx
        };
        // The sender lives in the queue until granted, so this returns.
        rx.recv().expect("a queued read is always granted");
        Turn { turns: self }
    }

    /// Hands free slots to waiting reads, best first.
    fn grant(&self, st: &mut State) {
        while st.active < self.slots && !st.waiting.is_empty() {
            let k = self.pick(st);
            let w = st.waiting.swap_remove(k);
            st.active += 1;
            // The buffer of one holds the wake-up even if the waiter has not
            // started waiting yet.
            let _ = w.wake.send(());
        }
    }

    fn pick(&self, st: &mut State) -> usize {
        let w = &st.waiting;
        let oldest = (0..w.len()).min_by_key(|&k| w[k].ticket).expect("non-empty");
        match Strategy::from_code(w[oldest].order.strategy) {
            Some(Strategy::First) | None => (0..w.len()).min_by_key(|&k| (w[k].offset, w[k].ticket)).expect("non-empty"),
            Some(Strategy::Colour) => (0..w.len()).min_by_key(|&k| (w[k].order.slot, w[k].ticket)).expect("non-empty"),
            Some(Strategy::Random) => {
                st.rng = st.rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                ((st.rng >> 33) % w.len() as u64) as usize
            }
            Some(Strategy::Hash) => {
                // Distance from the client this step wants, in rank order.
                let dist = |k: usize| {
                    let g = u64::from(w[k].order.group.max(1));
                    let want = (self.server + st.step) % g;
                    (u64::from(w[k].order.rank) + g - want) % g
                };
                let k = (0..w.len()).min_by_key(|&k| (dist(k), w[k].ticket)).expect("non-empty");
                st.step += dist(k) + 1;
                k
            }
        }
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.state.lock().unwrap().waiting.len()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut st = self.turns.state.lock().expect("read turns lock");
        st.active -= 1;
        self.turns.grant(&mut st);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// Holds the only slot, queues reads, releases, and records the order
    /// in which the queued reads are served.
    fn served_order(strategy: Strategy, reads: &[(u32, u32, u64, u32)]) -> Vec<usize> {
        let turns = Arc::new(ReadTurns::new(1, 1));
        let first = turns.acquire(ReadOrder::default(), 0);
        let log = Arc::new(Mutex::new(Vec::new()));
        let handles: Vec<_> = reads
            .iter()
            .enumerate()
            .map(|(i, &(rank, group, offset, slot))| {
                let (mine, log) = (turns.clone(), log.clone());
                // Queue in index order so arrival order is known.
                let h = std::thread::spawn(move || {
                    let _t = mine.acquire(ReadOrder { strategy: strategy.code(), rank, group, slot }, offset);
                    log.lock().unwrap().push(i);
                });
                while turns.waiting() < i + 1 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                h
            })
            .collect();
        drop(first);
        for h in handles {
            h.join().unwrap();
        }
        Arc::try_unwrap(log).unwrap().into_inner().unwrap()
    }

    #[test]
    fn first_serves_file_order() {
        let o = served_order(Strategy::First, &[(0, 4, 300, 0), (1, 4, 100, 0), (2, 4, 200, 0)]);
        assert_eq!(o, [1, 2, 0]);
    }

    #[test]
    fn hash_serves_rank_s_plus_j() {
        // Server id 1, group of 4: step 0 wants rank 1, then 2, 3, 0.
        let o = served_order(Strategy::Hash, &[(0, 4, 0, 0), (3, 4, 0, 0), (2, 4, 0, 0), (1, 4, 0, 0)]);
        assert_eq!(o, [3, 2, 1, 0]);
    }

    #[test]
    fn colour_serves_slot_order() {
        let o = served_order(Strategy::Colour, &[(0, 4, 0, 5), (1, 4, 0, 2), (2, 4, 0, 9)]);
        assert_eq!(o, [1, 0, 2]);
    }

    #[test]
    fn random_serves_everyone_once() {
        let mut o = served_order(Strategy::Random, &[(0, 4, 0, 0), (1, 4, 0, 0), (2, 4, 0, 0), (3, 4, 0, 0)]);
        o.sort_unstable();
        assert_eq!(o, [0, 1, 2, 3]);
    }
}
