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

    /// Do two extents share a byte? Strided against strided walks the run
    /// with fewer blocks inside the other's bounds: only there is it expanded.
    pub fn overlaps(&self, other: &Extent) -> bool {
        let (a0, a1) = self.bounds();
        let (b0, b1) = other.bounds();
        if a1 <= b0 || b1 <= a0 {
            return false;
        }
        match (*self, *other) {
            (Extent::Range { start, end }, o) | (o, Extent::Range { start, end }) => o.hits_range(start, end),
            (s @ Extent::Strided { count: c1, .. }, t @ Extent::Strided { count: c2, .. }) => {
                let (walk, other) = if c1 <= c2 { (s, t) } else { (t, s) };
                let Extent::Strided { offset, len, stride, count } = walk else { unreachable!() };
                let (lo, hi) = other.bounds();
                let first = if lo < offset + len { 0 } else { (lo - offset - len) / stride + 1 };
                (first..count).map(|k| offset + k * stride).take_while(|&s| s < hi).any(|s| other.hits_range(s, s + len))
            }
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

    proptest! {
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
