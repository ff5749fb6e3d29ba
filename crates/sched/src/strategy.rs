//! The strategies: in which order a sender (a client writing, a server
//! serving reads) sends its blocks.
//!
//! A sender has blocks in file-offset order, each bound for one receiver.
//! [`order`] returns the indices of those blocks in sending order.

use std::fmt;
use std::str::FromStr;

/// A scheduling strategy (hint `weft_sched`, variable `WEFT_SCHED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// first-IOS: blocks in file-offset order.
    First,
    /// random-IOS: a random receiver among those with blocks left, each time.
    Random,
    /// hash-IOS: at step j, sender i sends to receiver (i + j) mod n.
    Hash,
    /// Weft's own: every sender follows the same edge colouring of the whole
    /// transfer graph, block of colour c at slot c (needs the group's
    /// accesses; without them it orders like hash).
    Colour,
}

impl Strategy {
    pub const ALL: [Strategy; 4] = [Strategy::First, Strategy::Random, Strategy::Hash, Strategy::Colour];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::First => "first",
            Strategy::Random => "random",
            Strategy::Hash => "hash",
            Strategy::Colour => "colour",
        }
    }

    /// Stable code on the wire.
    pub fn code(self) -> u8 {
        match self {
            Strategy::First => 1,
            Strategy::Random => 2,
            Strategy::Hash => 3,
            Strategy::Colour => 4,
        }
    }

    pub fn from_code(c: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.code() == c)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scheduling strategy {0:?}: use first, random, hash or colour")]
pub struct ParseStrategyError(pub String);

impl FromStr for Strategy {
    type Err = ParseStrategyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "first" | "first-ios" => Ok(Strategy::First),
            "random" | "random-ios" => Ok(Strategy::Random),
            "hash" | "hash-ios" => Ok(Strategy::Hash),
            "colour" | "color" => Ok(Strategy::Colour),
            _ => Err(ParseStrategyError(s.into())),
        }
    }
}

/// A small deterministic generator (splitmix64): the pure floors take a
/// seed instead of reading entropy.
pub(crate) struct SplitMix(u64);

impl SplitMix {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix(seed)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % n as u64) as usize
    }
}

/// Per-receiver queues of block indices, each in file order.
fn queues(receivers: usize, blocks: &[usize]) -> Vec<std::collections::VecDeque<usize>> {
    let mut q = vec![std::collections::VecDeque::new(); receivers];
    for (i, &r) in blocks.iter().enumerate() {
        q[r].push_back(i);
    }
    q
}

/// The sending order of `blocks` (block k goes to receiver `blocks[k]`,
/// blocks listed in file-offset order) for sender `sender` among
/// `receivers` receivers. `Colour` needs the whole graph (see
/// [`crate::colour`]); here it falls back to hash order.
pub fn order(strategy: Strategy, sender: usize, receivers: usize, blocks: &[usize], seed: u64) -> Vec<usize> {
    assert!(blocks.iter().all(|&r| r < receivers), "block bound for a receiver outside 0..{receivers}");
    match strategy {
        Strategy::First => (0..blocks.len()).collect(),
        Strategy::Random => {
            let mut q = queues(receivers, blocks);
            let mut live: Vec<usize> = (0..receivers).filter(|&r| !q[r].is_empty()).collect();
            let mut rng = SplitMix::new(seed ^ (sender as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
            let mut out = Vec::with_capacity(blocks.len());
            while !live.is_empty() {
                let k = rng.below(live.len());
                let r = live[k];
                out.push(q[r].pop_front().expect("live queues are non-empty"));
                if q[r].is_empty() {
                    live.swap_remove(k);
                }
            }
            out
        }
        Strategy::Hash | Strategy::Colour => {
            let mut q = queues(receivers, blocks);
            let mut out = Vec::with_capacity(blocks.len());
            let mut j = 0usize;
            while out.len() < blocks.len() {
                // Step j: receiver (i + j) mod n; one with nothing left costs no step.
                if let Some(b) = q[(sender + j) % receivers].pop_front() {
                    out.push(b);
                }
                j += 1;
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::Strategy;
    use proptest::prelude::*;

    #[test]
    fn names_parse_back() {
        for s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>().unwrap(), s);
            assert_eq!(Strategy::from_code(s.code()), Some(s));
        }
        assert_eq!("hash-IOS".parse::<Strategy>().unwrap(), Strategy::Hash);
        assert!("fastest".parse::<Strategy>().is_err());
    }

    #[test]
    fn hash_step_j_goes_to_i_plus_j_mod_n() {
        // Sender 2 of 4 receivers, two blocks for each, in file order.
        let blocks = [0, 1, 2, 3, 0, 1, 2, 3];
        let o = order(Strategy::Hash, 2, 4, &blocks, 0);
        let receivers: Vec<usize> = o.iter().map(|&b| blocks[b]).collect();
        assert_eq!(receivers, [2, 3, 0, 1, 2, 3, 0, 1]);
        // Within one receiver, blocks keep file order.
        assert_eq!(o, [2, 3, 0, 1, 6, 7, 4, 5]);
    }

    proptest! {
        #[test]
        fn every_strategy_sends_every_block_once(
            blocks in proptest::collection::vec(0usize..6, 0..60), sender in 0usize..10, seed: u64,
        ) {
            for s in Strategy::ALL {
                let mut o = order(s, sender, 6, &blocks, seed);
                // Per receiver, file order is kept.
                for r in 0..6 {
                    let mine: Vec<usize> = o.iter().copied().filter(|&b| blocks[b] == r).collect();
                    prop_assert!(mine.windows(2).all(|w| w[0] < w[1]));
                }
                o.sort_unstable();
                prop_assert_eq!(o, (0..blocks.len()).collect::<Vec<_>>(), "{} sends each block once", s);
            }
            prop_assert_eq!(order(Strategy::First, sender, 6, &blocks, seed), (0..blocks.len()).collect::<Vec<_>>());
        }

        #[test]
        fn hash_visits_receivers_cyclically(blocks in proptest::collection::vec(0usize..5, 0..40), sender in 0usize..7) {
            let o = order(Strategy::Hash, sender, 5, &blocks, 0);
            // Consecutive sends advance the receiver index by 1..=5 steps (mod 5), never backwards past a live one.
            let mut left = [0usize; 5];
            for &b in &blocks { left[b] += 1; }
            let mut j = 0usize;
            for &b in &o {
                while left[(sender + j) % 5] == 0 { j += 1; }
                prop_assert_eq!(blocks[b], (sender + j) % 5);
                left[blocks[b]] -= 1;
                j += 1;
            }
        }
    }
}
