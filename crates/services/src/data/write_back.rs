//! Which ranges of a write to hand to the disk at once (the data servers'
//! write-behind, `WEFT_WRITE_BEHIND`): a write of at least
//! [`WRITE_BEHIND_MIN`] bytes, in all its pieces, starts the write-back of
//! its runs, so the disk works while the client sends more and its fsync
//! finds little left (ior-hard's 47,008-byte records, 4 MiB of them a
//! request: 83 ms -> 63 ms for 64 MiB written and fsync'd, 4 ranks).
//!
//! The kernel is asked with `POSIX_FADV_DONTNEED`, which starts write-back
//! of the dirty pages of a range and then drops its clean pages. So a run
//! joins pieces only across gaps shorter than a page: every page of a run
//! then holds bytes just written (dirty, so kept), and pages of the object
//! that other writes left in the cache are not dropped. Runs shorter than
//! [`MIN_RUN`] are left to the page cache (a system call per tiny record
//! would cost more than it saves).

use weft_wire::Piece;

/// Writes of at least this many bytes (all pieces together) start their
/// write-back at once; smaller ones are left to the page cache.
pub(super) const WRITE_BEHIND_MIN: u64 = 256 * 1024;

/// Shortest run whose write-back is started.
pub(super) const MIN_RUN: u64 = 32 * 1024;

/// A page: pieces closer than this join one run.
const PAGE: u64 = 4096;

/// The runs `[start, end)` whose write-back a write of `pieces` starts, in
/// offset order.
pub(super) fn runs(pieces: &[Piece]) -> Vec<(u64, u64)> {
    let total = pieces.iter().fold(0u64, |t, p| t.saturating_add(p.len));
    if total < WRITE_BEHIND_MIN {
        return Vec::new();
    }
    let mut spans: Vec<(u64, u64)> = pieces.iter().filter(|p| p.len > 0).map(|p| (p.offset, p.offset.saturating_add(p.len))).collect();
    spans.sort_unstable();
    let mut out = Vec::new();
    let mut current: Option<(u64, u64)> = None;
    for (start, end) in spans {
        current = match current {
            Some((s, e)) if start < e.saturating_add(PAGE) => Some((s, e.max(end))),
            Some(run) => {
                out.push(run);
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    out.extend(current);
    out.retain(|&(s, e)| e - s >= MIN_RUN);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn piece(offset: u64, len: u64) -> Piece {
        Piece { offset, len }
    }

    #[test]
    fn small_writes_and_tiny_records_start_nothing() {
        assert!(runs(&[piece(0, WRITE_BEHIND_MIN - 1)]).is_empty());
        // 8-byte records a page apart: runs of 8 bytes.
        let tiny: Vec<Piece> = (0..100_000).map(|i| piece(i * 8192, 8)).collect();
        assert!(runs(&tiny).is_empty());
        assert_eq!(runs(&[piece(0, WRITE_BEHIND_MIN)]), [(0, WRITE_BEHIND_MIN)]);
    }

    #[test]
    fn strided_records_are_runs_of_their_own() {
        // ior-hard: one rank's 47,008-byte records, three others' between.
        let mine: Vec<Piece> = (0..8).map(|i| piece(i * 4 * 47_008, 47_008)).collect();
        let got = runs(&mine);
        assert_eq!(got.len(), 8);
        assert!(got.iter().zip(&mine).all(|(&(s, e), p)| s == p.offset && e == p.offset + p.len));
    }

    proptest! {
        /// Runs are sorted, apart, long enough, cover only pages a piece
        /// touches, cut no piece, and leave out no piece of `MIN_RUN` bytes
        /// of a write that is large enough.
        #[test]
        fn runs_hold_only_pages_just_written(raw in proptest::collection::vec((0u64..1 << 22, 0u64..100_000), 0..64)) {
            let pieces: Vec<Piece> = raw.iter().map(|&(o, l)| piece(o, l)).collect();
            let got = runs(&pieces);
            let written = |page: u64| pieces.iter().any(|p| p.len > 0 && p.offset < (page + 1) * PAGE && p.offset + p.len > page * PAGE);
            for w in got.windows(2) {
                prop_assert!(w[0].1 < w[1].0);
            }
            for &(s, e) in &got {
                prop_assert!(e - s >= MIN_RUN);
                for page in s / PAGE..e.div_ceil(PAGE) {
                    prop_assert!(written(page), "page {page} of run {s}..{e} holds no written byte");
                }
                for p in pieces.iter().filter(|p| p.len > 0 && p.offset < e && p.offset + p.len > s) {
                    prop_assert!(p.offset >= s && p.offset + p.len <= e, "piece {p:?} cut by run {s}..{e}");
                }
            }
            if pieces.iter().map(|p| p.len).sum::<u64>() < WRITE_BEHIND_MIN {
                prop_assert!(got.is_empty());
            } else {
                // Nothing long enough is left out.
                for p in pieces.iter().filter(|p| p.len >= MIN_RUN) {
                    prop_assert!(got.iter().any(|&(s, e)| s <= p.offset && p.offset + p.len <= e), "piece {p:?} in no run");
                }
            }
        }
    }
}
