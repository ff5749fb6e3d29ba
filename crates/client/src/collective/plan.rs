//! Two-phase I/O's plan (paper 000; ROMIO's, with Lustre-style domains),
//! pure: which aggregator handles which bytes of a collective access, and
//! in which round.
//!
//! The accessed range is cut at stripe boundaries. Stripe `k` belongs to
//! aggregator `k mod A`: with A equal to the stripe count, each aggregator
//! talks to exactly one data server, and a round of each aggregator is a
//! run of its own stripes. A round of one aggregator holds at most
//! `per_round` stripes (`cb_buffer_size / stripe_size`, at least one), so
//! its buffer stays within `cb_buffer_size` unless a single stripe is
//! larger. Every rank computes the same plan from the same allgathered
//! numbers; nothing else is exchanged to agree on it.

use weft_layout::Segment;

/// Who handles which stripes, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Domains {
    /// First and one-past-last stripe index the access touches.
    first: u64,
    end: u64,
    stripe: u64,
    aggregators: u64,
    per_round: u64,
}

impl Domains {
    /// `[lo, hi)` is the union of every rank's access; `aggregators` >= 1.
    pub fn new(lo: u64, hi: u64, stripe: u64, aggregators: usize, cb_buffer_size: u64) -> Self {
        let stripe = stripe.max(1);
        let first = lo / stripe;
        let end = if hi > lo { hi.div_ceil(stripe) } else { first };
        Domains { first, end, stripe, aggregators: aggregators.max(1) as u64, per_round: (cb_buffer_size / stripe).max(1) }
    }

    pub fn aggregators(&self) -> usize {
        self.aggregators as usize
    }

    /// Most file bytes one aggregator's round spans.
    pub fn round_bytes(&self) -> u64 {
        self.per_round.saturating_mul(self.stripe)
    }

    /// How many of the aggregator's stripes precede stripe `k` among its own.
    fn local_index(&self, k: u64) -> u64 {
        (k - self.first_of(k % self.aggregators)) / self.aggregators
    }

    /// The aggregator and round of the byte at `offset` (inside the access).
    pub fn owner(&self, offset: u64) -> (usize, u64) {
        let k = offset / self.stripe;
        ((k % self.aggregators) as usize, self.local_index(k) / self.per_round)
    }

    /// The aggregator's first stripe at or after `first`.
    fn first_of(&self, a: u64) -> u64 {
        self.first + (a + self.aggregators - self.first % self.aggregators) % self.aggregators
    }

    /// Rounds needed: the most any aggregator has.
    pub fn rounds(&self) -> u64 {
        (0..self.aggregators)
            .map(|a| {
                let start = self.first_of(a);
                if start >= self.end { 0 } else { ((self.end - 1 - start) / self.aggregators + 1).div_ceil(self.per_round) }
            })
            .max()
            .unwrap_or(0)
    }

    /// Cuts a rank's segments at stripe boundaries and sorts the pieces into
    /// `[round][aggregator]`, keeping each list in the rank's own order.
    pub fn split(&self, segments: &[Segment]) -> Vec<Vec<Vec<Segment>>> {
        let rounds = self.rounds() as usize;
        let mut out = vec![vec![Vec::new(); self.aggregators()]; rounds];
        for s in segments {
            let (mut file, mut mem, mut left) = (s.file, s.mem, s.len);
            while left > 0 {
                let stripe_end = (file / self.stripe + 1) * self.stripe;
                let len = left.min(stripe_end - file);
                let (agg, round) = self.owner(file);
                out[round as usize][agg].push(Segment { file, mem, len });
                file += len;
                mem += len as usize;
                left -= len;
            }
        }
        out
    }
}

/// True when some rank's range `[lo, hi)` overlaps another's: the accesses
/// interleave, and gathering them at aggregators can turn many small
/// requests into few large ones. Ranks with nothing to access are ignored.
pub fn interleaved(ranges: &[(u64, u64)]) -> bool {
    let mut r: Vec<(u64, u64)> = ranges.iter().copied().filter(|(lo, hi)| hi > lo).collect();
    r.sort_unstable();
    r.windows(2).any(|w| w[1].0 < w[0].1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn stripes_go_round_robin_and_rounds_fill_the_buffer() {
        // 64 KiB stripes, 4 aggregators, 128 KiB buffers: 2 stripes a round.
        let d = Domains::new(0, 16 * 65536, 65536, 4, 131072);
        assert_eq!(d.owner(0), (0, 0));
        assert_eq!(d.owner(65536), (1, 0));
        assert_eq!(d.owner(4 * 65536), (0, 0));
        assert_eq!(d.owner(8 * 65536), (0, 1));
        assert_eq!(d.rounds(), 2);
        assert_eq!(Domains::new(5, 5, 65536, 4, 1 << 20).rounds(), 0);
        // An access starting mid-file: stripe 3 is aggregator 3's first.
        let d = Domains::new(3 * 65536 + 10, 4 * 65536, 65536, 4, 65536);
        assert_eq!(d.owner(3 * 65536 + 10), (3, 0));
        assert_eq!(d.rounds(), 1);
    }

    #[test]
    fn interleaving_is_overlap_of_ranges() {
        assert!(!interleaved(&[(0, 10), (10, 20), (30, 40)]));
        assert!(interleaved(&[(0, 10), (5, 20)]));
        assert!(!interleaved(&[(0, 10), (3, 3), (10, 20)]));
    }

    proptest! {
        /// Every byte of every rank lands in exactly one (round, aggregator)
        /// cell, that cell is the byte's owner, no piece crosses a stripe,
        /// and no aggregator's round holds more stripes than it may.
        #[test]
        fn split_covers_each_byte_once_in_its_owners_cell(
            segs in proptest::collection::vec((0u64..5000, 1u64..700), 1..12),
            stripe in 1u64..900, aggs in 1usize..6, buffer in 1u64..3000,
        ) {
            let mut mem = 0usize;
            let segments: Vec<Segment> = segs.iter().map(|&(file, len)| { let s = Segment { file, mem, len }; mem += len as usize; s }).collect();
            let lo = segments.iter().map(|s| s.file).min().unwrap();
            let hi = segments.iter().map(|s| s.file + s.len).max().unwrap();
            let d = Domains::new(lo, hi, stripe, aggs, buffer);
            let cells = d.split(&segments);
            prop_assert_eq!(cells.len() as u64, d.rounds());
            let mut bytes: Vec<(usize, u64)> = Vec::new();
            let per_round = (buffer / stripe).max(1);
            for (r, row) in cells.iter().enumerate() {
                for (a, pieces) in row.iter().enumerate() {
                    let mut stripes: Vec<u64> = pieces.iter().map(|p| p.file / stripe).collect();
                    stripes.sort_unstable();
                    stripes.dedup();
                    prop_assert!(stripes.len() as u64 <= per_round);
                    for p in pieces {
                        prop_assert_eq!(p.file / stripe, (p.file + p.len - 1) / stripe);
                        prop_assert_eq!(d.owner(p.file), (a, r as u64));
                        bytes.extend((0..p.len).map(|i| (p.mem + i as usize, p.file + i)));
                    }
                }
            }
            bytes.sort_unstable();
            let want: Vec<(usize, u64)> = segments.iter().flat_map(|s| (0..s.len).map(move |i| (s.mem + i as usize, s.file + i))).collect();
            prop_assert_eq!(bytes, want);
        }
    }
}
