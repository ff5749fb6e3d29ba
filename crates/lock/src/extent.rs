//! What one lock item covers: a byte range, or a strided run checked as one
//! item (paper 004's future work: compact requests).

use thiserror::Error;

/// Bytes `[start, end)`, or `count` blocks of `len` bytes, `stride` apart,
/// from `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Extent {
    Range { start: u64, end: u64 },
    Strided { offset: u64, len: u64, stride: u64, count: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExtentError {
    #[error("range [{start}, {end}) is empty or inverted")]
    Inverted { start: u64, end: u64 },
    #[error("strided run needs len >= 1, count >= 1 and stride >= len (got len {len}, stride {stride}, count {count})")]
    BadStride { len: u64, stride: u64, count: u64 },
    #[error("extent ends past 2^63 bytes")]
    Overflow,
}

/// Largest end of any extent: keeps `end` arithmetic far from overflow.
pub const MAX_END: u64 = 1 << 63;

impl Extent {
    pub fn range(start: u64, end: u64) -> Result<Self, ExtentError> {
        Extent::Range { start, end }.checked()
    }

    pub fn strided(offset: u64, len: u64, stride: u64, count: u64) -> Result<Self, ExtentError> {
        Extent::Strided { offset, len, stride, count }.checked()
    }

    /// Validates an extent that came from the wire.
    pub fn checked(self) -> Result<Self, ExtentError> {
        match self {
            Extent::Range { start, end } => {
                if start >= end {
                    return Err(ExtentError::Inverted { start, end });
                }
                if end > MAX_END {
                    return Err(ExtentError::Overflow);
                }
            }
            Extent::Strided { offset, len, stride, count } => {
                if len == 0 || count == 0 || stride < len {
                    return Err(ExtentError::BadStride { len, stride, count });
                }
                let end = (count - 1).checked_mul(stride).and_then(|x| x.checked_add(offset)).and_then(|x| x.checked_add(len));
                if end.is_none_or(|e| e > MAX_END) {
                    return Err(ExtentError::Overflow);
                }
                // One block: its stride means nothing, and an unbounded one
                // would reach the overlap arithmetic; store it as a range.
                if count == 1 {
                    return Ok(Extent::Range { start: offset, end: offset + len });
                }
            }
        }
        Ok(self)
    }

    /// The smallest range covering the extent: `[start, end)`.
    pub fn bounds(&self) -> (u64, u64) {
        match *self {
            Extent::Range { start, end } => (start, end),
            Extent::Strided { offset, len, stride, count } => (offset, offset + (count - 1) * stride + len),
        }
    }

    /// Bytes covered.
    pub fn bytes(&self) -> u64 {
        match *self {
            Extent::Range { start, end } => end - start,
            Extent::Strided { len, count, .. } => len * count,
        }
    }

    /// Does the extent cover any byte of `[a, b)`?
    pub fn hits_range(&self, a: u64, b: u64) -> bool {
        match *self {
            Extent::Range { start, end } => start < b && a < end,
            Extent::Strided { offset, len, stride, count } => {
                if b <= offset {
                    return false;
                }
                // The first block that ends after a.
                let k = if a < offset + len { 0 } else { (a - offset - len) / stride + 1 };
                k < count && offset + k * stride < b
            }
        }
    }

    /// Do two extents share a byte? O(log) for any counts: two strided
    /// runs are compared in closed form (see [`strided_overlap`]), never by
    /// walking blocks (issue 8: 2^32-block runs stalled the service 37 s).
    pub fn overlaps(&self, other: &Extent) -> bool {
        let (a0, a1) = self.bounds();
        let (b0, b1) = other.bounds();
        if a1 <= b0 || b1 <= a0 {
            return false;
        }
        match (*self, *other) {
            (Extent::Range { start, end }, o) | (o, Extent::Range { start, end }) => o.hits_range(start, end),
            (s @ Extent::Strided { .. }, t @ Extent::Strided { .. }) => strided_overlap(s, t),
        }
    }

    /// Every byte range, expanded (for tests and small extents).
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        match *self {
            Extent::Range { start, end } => vec![(start, end)],
            Extent::Strided { offset, len, stride, count } => (0..count).map(|k| (offset + k * stride, offset + k * stride + len)).collect(),
        }
    }
}

/// Does strided run `a` share a byte with strided run `b`?
///
/// Blocks of `a` that cross one of `b`'s two bounds (at most one each, as
/// `stride >= len`) are checked directly. Every other block of `a` that
/// meets `b`'s bounds lies inside them, where `b` is exactly its periodic
/// pattern: block `[p, p + la)` misses every block of `b` iff
/// `(p - b0 + la - 1) mod sb >= la + lb - 1`. Over the inside blocks
/// `p = p0 + k*sa` that residue is `(c + k*sa) mod sb`, and how many of them
/// are `>= w` is a difference of two floor sums, computed in O(log sb).
fn strided_overlap(a: Extent, b: Extent) -> bool {
    let Extent::Strided { offset: ao, len: la, stride: sa, count: ca } = a else { return a.overlaps(&b) };
    let Extent::Strided { offset: bo, len: lb, stride: sb, .. } = b else { return a.overlaps(&b) };
    let (b0, b1) = b.bounds();
    let block = |i: u64| ao + i * sa;
    // Blocks of `a` crossing b0 or b1 (start before the bound, end after it).
    for bound in [b0, b1] {
        if bound > ao {
            let i = (bound - ao) / sa;
            if i < ca && block(i) < bound && block(i) + la > bound && b.hits_range(block(i), block(i) + la) {
                return true;
            }
        }
    }
    // Blocks of `a` inside [b0, b1): i in [lo, hi).
    let lo = if ao >= b0 { 0 } else { (b0 - ao).div_ceil(sa) };
    let hi = if ao + la > b1 { 0 } else { ((b1 - la - ao) / sa + 1).min(ca) };
    if lo >= hi {
        return false;
    }
    // All lengths and strides are at most 2^63 (ends are), so these sums fit.
    let w = la + lb - 1;
    if w >= sb {
        return true;
    }
    let n = hi - lo;
    let c = (block(lo) - bo + la - 1) % sb;
    let step = sa % sb;
    // Count of k in [0, n) with (c + k*step) mod sb >= w.
    let missing = floor_sum(n, sb, step, c + (sb - w)) - floor_sum(n, sb, step, c);
    missing < u128::from(n)
}

/// `sum_{k=0}^{n-1} floor((a*k + b) / m)`, by the Euclid-like reduction
/// (as in the AtCoder library), in O(log m) steps. Wide arithmetic: the
/// inputs are below 2^64 and the sum below 2^128 for the callers here.
fn floor_sum(n: u64, m: u64, a: u64, b: u64) -> u128 {
    let (mut n, mut m, mut a, mut b) = (u128::from(n), u128::from(m), u128::from(a), u128::from(b));
    let mut sum = 0u128;
    loop {
        if a >= m {
            sum += n * n.saturating_sub(1) / 2 * (a / m);
            a %= m;
        }
        if b >= m {
            sum += n * (b / m);
            b %= m;
        }
        let y_max = a * n + b;
        if y_max < m {
            return sum;
        }
        n = y_max / m;
        b = y_max % m;
        std::mem::swap(&mut m, &mut a);
    }
}

/// Coalesces `(offset, len)` regions (sorted by offset, as a flattened view
/// gives them) into few extents: touching or overlapping regions join, and
/// runs of equal blocks at an equal stride become one strided extent.
/// Empty regions are dropped.
pub fn coalesce(regions: &[(u64, u64)]) -> Result<Vec<Extent>, ExtentError> {
    let mut joined: Vec<(u64, u64)> = Vec::with_capacity(regions.len());
    for &(o, l) in regions.iter().filter(|r| r.1 > 0) {
        let end = o.checked_add(l).ok_or(ExtentError::Overflow)?;
        match joined.last_mut() {
            Some((s, e)) if o <= *e && o >= *s => *e = (*e).max(end),
            _ => joined.push((o, end)),
        }
    }
    let mut out: Vec<Extent> = Vec::new();
    let mut i = 0;
    while i < joined.len() {
        let (s, e) = joined[i];
        let len = e - s;
        // Extend a strided run while blocks keep the same length and stride.
        let mut j = i + 1;
        if j < joined.len() {
            let stride = joined[j].0 - s;
            while j < joined.len() && joined[j].1 - joined[j].0 == len && joined[j].0 - joined[j - 1].0 == stride && stride >= len {
                j += 1;
            }
            if j - i >= 3 {
                out.push(Extent::strided(s, len, stride, (j - i) as u64)?);
                i = j;
                continue;
            }
        }
        out.push(Extent::range(s, e)?);
        i += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(e: &Extent) -> std::collections::BTreeSet<u64> {
        e.ranges().into_iter().flat_map(|(a, b)| a..b).collect()
    }

    fn extent() -> impl Strategy<Value = Extent> {
        prop_oneof![
            (0u64..200, 1u64..50).prop_map(|(s, l)| Extent::range(s, s + l).unwrap()),
            (0u64..100, 1u64..8, 0u64..8, 1u64..8).prop_map(|(o, l, extra, c)| Extent::strided(o, l, l + extra, c).unwrap()),
        ]
    }

    /// Block-by-block reference for two strided runs.
    fn walk_overlap(a: &Extent, b: &Extent) -> bool {
        a.ranges().iter().any(|&(s, e)| b.hits_range(s, e))
    }

    proptest! {
        #[test]
        fn strided_overlap_matches_a_block_walk(
            ao in 0u64..5_000, la in 1u64..40, ga in 0u64..300, ca in 1u64..200,
            bo in 0u64..5_000, lb in 1u64..40, gb in 0u64..300, cb in 1u64..200,
        ) {
            let a = Extent::strided(ao, la, la + ga, ca).unwrap();
            let b = Extent::strided(bo, lb, lb + gb, cb).unwrap();
            let want = walk_overlap(&a, &b);
            prop_assert_eq!(a.overlaps(&b), want);
            prop_assert_eq!(b.overlaps(&a), want);
        }

        #[test]
        fn overlap_matches_byte_sets(a in extent(), b in extent()) {
            let expect = !bytes(&a).is_disjoint(&bytes(&b));
            prop_assert_eq!(a.overlaps(&b), expect);
            prop_assert_eq!(b.overlaps(&a), expect);
        }

        #[test]
        fn coalesced_extents_cover_exactly_the_regions(
            raw in proptest::collection::vec((0u64..20, 0u64..6), 0..30),
        ) {
            // Sorted regions, as a flattened view gives them.
            let mut at = 0u64;
            let regions: Vec<(u64, u64)> = raw.iter().map(|&(gap, len)| { at += gap; let r = (at, len); at += len; r }).collect();
            let ex = coalesce(&regions).unwrap();
            let want: std::collections::BTreeSet<u64> = regions.iter().flat_map(|&(o, l)| o..o + l).collect();
            let got: std::collections::BTreeSet<u64> = ex.iter().flat_map(bytes).collect();
            prop_assert_eq!(got, want);
            prop_assert!(ex.len() <= regions.len().max(1));
        }
    }

    #[test]
    fn bad_extents_are_refused() {
        assert!(matches!(Extent::range(5, 5), Err(ExtentError::Inverted { .. })));
        assert!(matches!(Extent::range(9, 3), Err(ExtentError::Inverted { .. })));
        assert!(matches!(Extent::range(0, u64::MAX), Err(ExtentError::Overflow)));
        assert!(matches!(Extent::strided(0, 4, 2, 3), Err(ExtentError::BadStride { .. })));
        assert!(matches!(Extent::strided(0, 0, 2, 3), Err(ExtentError::BadStride { .. })));
        assert!(matches!(Extent::strided(0, 1, u64::MAX / 2, 5), Err(ExtentError::Overflow)));
        // One block: any stride passes, and it is kept as a range (an
        // unbounded stride would overflow the overlap arithmetic).
        assert_eq!(Extent::strided(0, 100, u64::MAX, 1), Ok(Extent::Range { start: 0, end: 100 }));
    }

    /// Issue 8: two runs of 2^32 blocks each took ~37 s block by block.
    #[test]
    fn huge_strided_runs_compare_at_once() {
        let n = 1u64 << 40;
        let a = Extent::strided(0, 8, 16, n).unwrap();
        let b = Extent::strided(8, 8, 16, n).unwrap();
        assert!(!a.overlaps(&b), "interleaved halves never meet");
        let c = Extent::strided(8 * 3, 8, 48, n / 3).unwrap();
        assert!(b.overlaps(&c) && !a.overlaps(&c), "c's blocks all start at 8 mod 16");
        // Co-prime strides meet eventually, far down the runs.
        let d = Extent::strided(0, 1, 1_000_003, n >> 20).unwrap();
        let e = Extent::strided(500_000, 1, 999_983, n >> 20).unwrap();
        assert!(d.overlaps(&e));
        // A walk of any of these pairs would not finish within the test run.
        let hits = (0..1_000u64).filter(|&k| a.overlaps(&Extent::strided(k, 8, 16 + k, n / 2).unwrap())).count();
        assert_eq!(hits, 1_000, "every stride other than 16 drifts into a's blocks");
    }

    #[test]
    fn floor_sum_matches_a_loop() {
        for (n, m, a, b) in [(0, 1, 0, 0), (5, 3, 2, 1), (100, 7, 13, 40), (1000, 997, 1_000_000, 5), (17, 1 << 40, (1 << 40) - 1, 3)] {
            let want: u128 = (0..n).map(|k| (u128::from(a) * u128::from(k) + u128::from(b)) / u128::from(m)).sum();
            assert_eq!(floor_sum(n, m, a, b), want, "n {n} m {m} a {a} b {b}");
        }
    }

    #[test]
    fn a_strided_pattern_becomes_one_item() {
        // Paper 004's example: 10 bytes written, 10 skipped, n times.
        let regions: Vec<(u64, u64)> = (0..1000).map(|k| (k * 20, 10)).collect();
        assert_eq!(coalesce(&regions).unwrap(), [Extent::strided(0, 10, 20, 1000).unwrap()]);
        let other = Extent::strided(10, 10, 20, 1000).unwrap();
        assert!(!coalesce(&regions).unwrap()[0].overlaps(&other), "interleaved writers do not conflict");
    }
}
