//! Atomic mode (MPI_File_set_atomicity): every access of a file in atomic
//! mode takes locks covering the bytes it touches, exclusive for writes and
//! shared for reads, does its I/O, and releases them. Locks come from the
//! cluster's lock service in one session per client, renewed by a
//! background thread; if the client dies its locks expire after the
//! cluster's `lock_ttl_ms`. The session's requests share the client's
//! endpoint (one connection to the lock server, with the namespace's); the
//! server answers an acquire that waits later, so renewals and releases
//! never queue behind it.
//!
//! | granularity | locks taken | hint `weft_lock_granularity` / `WEFT_LOCK_GRANULARITY` |
//! |---|---|---|
//! | whole file | one range `[0, 2^63)` | `file` |
//! | byte range | one range from the first to the last byte touched | `range` |
//! | list (default) | exactly the bytes touched: regions coalesced, equal strided blocks sent as one item | `list` |

use crate::{Error, Result};
use std::str::FromStr;
use weft_lock::Extent;
use weft_wire::limits::MAX_LOCK_EXTENTS;
use weft_wire::WireExtent;

/// How much of the file an atomic access locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockGranularity {
    WholeFile,
    ByteRange,
    List,
}

impl FromStr for LockGranularity {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "file" | "whole-file" => Ok(LockGranularity::WholeFile),
            "range" | "byte-range" => Ok(LockGranularity::ByteRange),
            "list" => Ok(LockGranularity::List),
            o => Err(Error::BadRequest(format!("lock granularity {o:?}: use file, range or list"))),
        }
    }
}

impl LockGranularity {
    pub fn name(self) -> &'static str {
        match self {
            LockGranularity::WholeFile => "file",
            LockGranularity::ByteRange => "range",
            LockGranularity::List => "list",
        }
    }

    /// The extents that lock `regions` ((offset, length), any order).
    pub fn extents(self, regions: &[(u64, u64)]) -> Result<Vec<Extent>> {
        let lo = regions.iter().filter(|r| r.1 > 0).map(|r| r.0).min();
        let hi = regions.iter().filter(|r| r.1 > 0).map(|r| r.0 + r.1).max();
        let (Some(lo), Some(hi)) = (lo, hi) else { return Ok(Vec::new()) };
        let bad = |e: weft_lock::ExtentError| Error::BadRequest(format!("cannot lock this access: {e}"));
        Ok(match self {
            LockGranularity::WholeFile => vec![Extent::range(0, weft_lock::extent::MAX_END).map_err(bad)?],
            LockGranularity::ByteRange => vec![Extent::range(lo, hi).map_err(bad)?],
            LockGranularity::List => {
                let list = if regions.windows(2).all(|w| w[0] <= w[1]) {
                    weft_lock::coalesce(regions)
                } else {
                    let mut sorted = regions.to_vec();
                    sorted.sort_unstable();
                    weft_lock::coalesce(&sorted)
                }
                .map_err(bad)?;
                // A list longer than one request may carry falls back to its
                // bounding range: more bytes locked, never fewer.
                if list.len() > MAX_LOCK_EXTENTS { vec![Extent::range(lo, hi).map_err(bad)?] } else { list }
            }
        })
    }
}

/// An extent as it travels.
pub(crate) fn wire(e: &Extent) -> WireExtent {
    match *e {
        Extent::Range { start, end } => WireExtent::Range { start, end },
        Extent::Strided { offset, len, stride, count } => WireExtent::Strided { offset, len, stride, count },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn granularities_cover_what_they_say() {
        let regions = [(100, 10), (120, 10), (140, 10), (200, 5)];
        assert_eq!(LockGranularity::ByteRange.extents(&regions).unwrap(), [Extent::range(100, 205).unwrap()]);
        assert_eq!(LockGranularity::WholeFile.extents(&regions).unwrap()[0].bounds().0, 0);
        let list = LockGranularity::List.extents(&regions).unwrap();
        assert_eq!(list, [Extent::strided(100, 10, 20, 3).unwrap(), Extent::range(200, 205).unwrap()]);
        assert!(LockGranularity::List.extents(&[]).unwrap().is_empty());
        assert!("sometimes".parse::<LockGranularity>().is_err());
    }
}
