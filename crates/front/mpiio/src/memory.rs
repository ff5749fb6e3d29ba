//! The caller's memory of one access: where it lies, and how it is moved.
//!
//! A memory type whose bytes fill its span (a contiguous buffer, or one
//! read as a dense run) is handed on as one slice. A type with gaps is
//! gathered into (or scattered from) a buffer of its data alone, piece by
//! piece: a slice over the span would cover memory between the pieces
//! that is not the caller's to lend, as with `MPI_BOTTOM` and a struct of
//! absolute addresses whose pieces lie in different allocations (the
//! stack and the heap, terabytes apart).

use crate::errors::{Class, Fail, Result};
use weft_client::Datatype;

/// Where `count` copies of `memtype` starting at a buffer lie, relative to
/// the buffer's address: (first byte, bytes spanned), and the type of all
/// of them shifted so that its first byte is at 0.
pub fn memory_span(memtype: &Datatype, count: i64) -> Result<(i64, u64, Datatype)> {
    let all = Datatype::contiguous(count, memtype).map_err(|e| Fail::new(Class::Count, format!("weft: {e}")))?;
    if all.size() == 0 {
        return Ok((0, 0, all));
    }
    let lb = all.true_lb();
    let shifted = Datatype::structure(&[1], &[lb.checked_neg().ok_or_else(|| Fail::new(Class::Type, "weft: lower bound overflows"))?], std::slice::from_ref(&all))
        .map_err(|e| Fail::new(Class::Type, format!("weft: {e}")))?;
    Ok((lb, all.true_extent() as u64, shifted))
}

/// How the pieces of a shifted memory type (from [`memory_span`]) lie in
/// its span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Every byte of the span is the type's (pieces may repeat bytes): the
    /// span may be lent as one slice.
    Whole,
    /// Some bytes of the span are not the type's: its pieces are gathered
    /// or scattered one by one.
    Gaps {
        /// Some piece repeats another's bytes (a read's may not: MPI).
        overlaps: bool,
    },
}

/// Regions collected at most to judge a type whose pieces are out of
/// order (past it, the type is taken to have gaps).
const MAX_SORTED_REGIONS: usize = 1 << 20;

/// Which [`Layout`] `shifted` has in its `span`. One lazy pass over its
/// regions when they come in order (most types); otherwise they are
/// sorted, up to [`MAX_SORTED_REGIONS`].
pub fn layout(shifted: &Datatype, span: usize) -> Layout {
    let (mut end, mut covered, mut ordered) = (0u64, 0u64, true);
    for (off, len) in shifted.regions(0) {
        let off = off as u64;
        if off < end {
            ordered = false;
            break;
        }
        covered += len;
        end = off + len;
    }
    if ordered {
        return if covered == span as u64 { Layout::Whole } else { Layout::Gaps { overlaps: false } };
    }
    let regions: Vec<(i64, u64)> = shifted.regions(0).take(MAX_SORTED_REGIONS + 1).collect();
    if regions.len() > MAX_SORTED_REGIONS {
        // Moved piece by piece; a read's overlap (erroneous in MPI) is
        // then not refused, only written twice, in typemap order.
        return Layout::Gaps { overlaps: false };
    }
    let union: u64 = weft_client::sort_and_coalesce(regions).iter().map(|r| r.1).sum();
    match (union == span as u64, union != shifted.size()) {
        (true, _) => Layout::Whole,
        (false, overlaps) => Layout::Gaps { overlaps },
    }
}

/// A buffer of `len` zero bytes, or an error (not an abort) when memory
/// runs out.
pub fn buffer(len: u64) -> Result<Vec<u8>> {
    let len = usize::try_from(len).map_err(|_| Fail::new(Class::Count, "weft: access larger than memory"))?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Fail::new(Class::Count, format!("weft: cannot hold {len} bytes to gather or scatter a non-contiguous memory type")))?;
    v.resize(len, 0);
    Ok(v)
}

/// The bytes `shifted` selects from the memory at `at`, in typemap order.
///
/// # Safety
/// Every piece of `shifted` placed at `at` is readable memory of the caller.
pub unsafe fn gather(at: usize, shifted: &Datatype) -> Result<Vec<u8>> {
    let mut out = buffer(shifted.size())?;
    let mut k = 0usize;
    for (off, len) in shifted.regions(0) {
        let len = len as usize;
        // SAFETY: a piece of the caller's memory (contract), and `out` holds
        // the type's size, the sum of its pieces.
        unsafe { std::ptr::copy_nonoverlapping((at + off as usize) as *const u8, out.as_mut_ptr().add(k), len) };
        k += len;
    }
    Ok(out)
}

/// Puts `data` into the pieces `shifted` selects from the memory at `at`,
/// in typemap order; pieces past the end of `data` are left as they are (a
/// short read).
///
/// # Safety
/// Every piece of `shifted` placed at `at` is writable memory of the caller
/// (pieces do not overlap, as MPI requires of a read's memory type).
pub unsafe fn scatter(at: usize, shifted: &Datatype, data: &[u8]) {
    let mut k = 0usize;
    for (off, len) in shifted.regions(0) {
        if k == data.len() {
            break;
        }
        let n = (len as usize).min(data.len() - k);
        // SAFETY: a piece of the caller's memory (contract), `n` bytes of
        // it, from `data`'s next `n`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().add(k), (at + off as usize) as *mut u8, n) };
        k += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two pieces in two separate allocations, placed as a struct of
    /// absolute addresses would place them (`MPI_BOTTOM`).
    fn two_pieces(a: usize, b: usize) -> (i64, u64, Datatype) {
        let (lo, hi) = (a.min(b) as i64, a.max(b) as i64);
        let t = Datatype::structure(&[3, 2], &[a as i64 - lo, b as i64 - lo], &[Datatype::basic(4), Datatype::basic(8)]).unwrap();
        let (lb, span, shifted) = memory_span(&t, 1).unwrap();
        assert_eq!(lb, 0);
        assert!(span >= (hi - lo) as u64);
        (lo, span, shifted)
    }

    #[test]
    fn pieces_in_separate_allocations_are_gathered_and_scattered_in_typemap_order() {
        let ints: Vec<u8> = (1..=12).collect();
        let longs: Vec<u8> = (101..=116).collect();
        let (lo, span, shifted) = two_pieces(ints.as_ptr() as usize, longs.as_ptr() as usize);
        assert!(matches!(layout(&shifted, span as usize), Layout::Gaps { overlaps: false }) || span == 28);
        // SAFETY: both pieces are these vectors' bytes.
        let got = unsafe { gather(lo as usize, &shifted) }.unwrap();
        let want: Vec<u8> = ints.iter().chain(&longs).copied().collect();
        assert_eq!(got, want, "the ints first (the struct's first block), then the longs");
        let mut ints_back = vec![0u8; 12];
        let mut longs_back = vec![0u8; 16];
        let (lo, _, shifted) = two_pieces(ints_back.as_mut_ptr() as usize, longs_back.as_mut_ptr() as usize);
        // A short read: 12 + 5 bytes arrived.
        // SAFETY: both pieces are these vectors' bytes, writable.
        unsafe { scatter(lo as usize, &shifted, &want[..17]) };
        assert_eq!(ints_back, ints);
        assert_eq!(&longs_back[..5], &longs[..5]);
        assert_eq!(&longs_back[5..], &[0; 11], "pieces past the data are left alone");
        // SAFETY: as above.
        unsafe { scatter(lo as usize, &shifted, &want) };
        assert_eq!((ints_back, longs_back), (ints, longs));
    }

    #[test]
    fn layouts_tell_whole_spans_from_gaps_and_overlaps() {
        let (_, span, shifted) = memory_span(&Datatype::basic(8), 10).unwrap();
        assert_eq!(layout(&shifted, span as usize), Layout::Whole);
        let v = Datatype::vector(4, 1, 2, &Datatype::basic(4)).unwrap();
        let (_, span, shifted) = memory_span(&v, 1).unwrap();
        assert_eq!((span, shifted.size()), (28, 16));
        assert_eq!(layout(&shifted, span as usize), Layout::Gaps { overlaps: false });
        // [0, 4) twice and [8, 12): as many bytes as the span, with a gap.
        let b = Datatype::basic(4);
        let t = Datatype::structure(&[1, 1, 1], &[0, 0, 8], &[b.clone(), b.clone(), b.clone()]).unwrap();
        let (_, span, shifted) = memory_span(&t, 1).unwrap();
        assert_eq!((span, shifted.size()), (12, 12));
        assert_eq!(layout(&shifted, span as usize), Layout::Gaps { overlaps: true });
        // Out of order, no gap: whole.
        let t = Datatype::structure(&[1, 1], &[4, 0], &[b.clone(), b.clone()]).unwrap();
        let (_, span, shifted) = memory_span(&t, 1).unwrap();
        assert_eq!(layout(&shifted, span as usize), Layout::Whole);
    }

    #[test]
    fn a_buffer_too_large_for_memory_is_an_error() {
        assert!(buffer(u64::MAX / 2).is_err());
    }
}
