//! File views (MPI_File_set_view): a displacement, an elementary type and
//! a filetype tiled from the displacement; the file bytes a process sees,
//! in order, form its *data stream*. And the pairing of a data stream's
//! file regions with a memory datatype's regions, so that a non-contiguous
//! buffer maps onto non-contiguous file regions without packing.

use crate::datatype::Datatype;
use thiserror::Error;

/// Why a view is refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ViewError {
    #[error("view displacement {0} is negative")]
    NegativeDisplacement(i64),
    #[error("etype has no data")]
    EmptyEtype,
    #[error("etype of {etype} bytes does not divide the filetype's {filetype} bytes")]
    EtypeDoesNotDivide { etype: u64, filetype: u64 },
    #[error("filetype with data has extent {0}: tiling it would not advance")]
    BadExtent(i64),
    #[error("filetype region at {offset} comes before the previous one at {previous}: displacements must be non-decreasing")]
    NotMonotonic { offset: i64, previous: i64 },
    #[error("filetype region at {0} is below the view's start")]
    NegativeRegion(i64),
    #[error("filetype regions overlap at byte {0}: such a view can be read but not written")]
    Overlapping(i64),
    #[error("access of {len} bytes is not a whole number of {etype}-byte etypes")]
    PartialEtype { len: u64, etype: u64 },
    #[error("memory region at {offset} (+{len}) lies outside the {buf}-byte buffer")]
    OutsideBuffer { offset: i64, len: u64, buf: usize },
    #[error("memory regions overlap at byte {0}: a buffer cannot receive data twice")]
    MemoryOverlap(i64),
}

impl ViewError {
    /// What the error is about: the file view, the memory datatype (with
    /// the buffer), or the access's size, so a message names the argument
    /// to fix.
    pub fn subject(&self) -> &'static str {
        match self {
            ViewError::OutsideBuffer { .. } | ViewError::MemoryOverlap(_) => "bad memory datatype",
            ViewError::PartialEtype { .. } => "bad access",
            _ => "bad view",
        }
    }
}

/// A validated file view.
#[derive(Debug, Clone)]
pub struct View {
    disp: u64,
    etype: Datatype,
    filetype: Datatype,
    /// Regions of one filetype copy overlap (or run into the next copy):
    /// fine for reading, refused for writing.
    overlapping: Option<i64>,
}

impl View {
    /// The default view: displacement 0, bytes, a byte filetype.
    pub fn bytes() -> Self {
        View { disp: 0, etype: Datatype::byte(), filetype: Datatype::byte(), overlapping: None }
    }

    pub fn new(disp: i64, etype: Datatype, filetype: Datatype) -> Result<Self, ViewError> {
        let d = u64::try_from(disp).map_err(|_| ViewError::NegativeDisplacement(disp))?;
        if etype.size() == 0 {
            return Err(ViewError::EmptyEtype);
        }
        if !filetype.size().is_multiple_of(etype.size()) {
            return Err(ViewError::EtypeDoesNotDivide { etype: etype.size(), filetype: filetype.size() });
        }
        if filetype.size() > 0 && filetype.extent() <= 0 {
            return Err(ViewError::BadExtent(filetype.extent()));
        }
        let mut overlapping = None;
        let mut prev: Option<(i64, i64)> = None;
        let mut first = None;
        for (o, l) in filetype.regions(0) {
            if o < 0 {
                return Err(ViewError::NegativeRegion(o));
            }
            first.get_or_insert(o);
            if let Some((ps, pe)) = prev {
                if o < ps {
                    return Err(ViewError::NotMonotonic { offset: o, previous: ps });
                }
                if o < pe && overlapping.is_none() {
                    overlapping = Some(o);
                }
            }
            let end = o + l as i64;
            prev = Some((o, prev.map_or(end, |p| p.1.max(end))));
        }
        // The next copy starts `extent` later: it must not reach back into this one.
        if let (Some(f), Some((_, end))) = (first, prev)
            && end > f + filetype.extent() && overlapping.is_none() {
                overlapping = Some(f + filetype.extent());
            }
        Ok(View { disp: d, etype, filetype, overlapping })
    }

    pub fn etype(&self) -> &Datatype {
        &self.etype
    }
    pub fn filetype(&self) -> &Datatype {
        &self.filetype
    }
    pub fn disp(&self) -> u64 {
        self.disp
    }

    /// Errors if the view may not be written through.
    pub fn check_writable(&self) -> Result<(), ViewError> {
        match self.overlapping {
            Some(at) => Err(ViewError::Overlapping(at)),
            None => Ok(()),
        }
    }

    /// The file regions of data-stream bytes `[start, start + len)`, in order.
    pub fn file_regions(&self, start: u64, len: u64) -> ViewRegions<'_> {
        let ft = self.filetype.size();
        // A filetype whose copies join (bytes, ints, any dense type with no
        // gap to its extent) makes the stream one run: one region, however
        // long, instead of one per copy.
        if ft > 0 && len > 0 && self.filetype.tiles_densely() {
            let at = self.disp + self.filetype.true_lb() as u64 + start;
            return ViewRegions { view: self, tile: 0, inner: None, skip: 0, left: 0, whole: Some((at, len)) };
        }
        let (tile, skip) = start.checked_div(ft).map_or((0, 0), |t| (t, start % ft));
        ViewRegions { view: self, tile, inner: None, skip, left: if ft == 0 { 0 } else { len }, whole: None }
    }
}

/// Lazy file regions of part of a view's data stream.
pub struct ViewRegions<'a> {
    view: &'a View,
    tile: u64,
    inner: Option<crate::flatten::Regions<'a>>,
    /// Stream bytes still to skip before the first region returned.
    skip: u64,
    left: u64,
    /// The one region of a contiguous view, not yet returned.
    whole: Option<(u64, u64)>,
}

impl Iterator for ViewRegions<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        if let Some(w) = self.whole.take() {
            return Some(w);
        }
        while self.left > 0 {
            let inner = match &mut self.inner {
                Some(r) => r,
                None => {
                    let base = self.view.disp as i64 + self.tile as i64 * self.view.filetype.extent();
                    self.inner.insert(self.view.filetype.regions(base))
                }
            };
            match inner.next() {
                None => {
                    self.inner = None;
                    self.tile += 1;
                }
                Some((_, l)) if l <= self.skip => self.skip -= l,
                Some((o, l)) => {
                    let (o, l) = (o as u64 + self.skip, l - self.skip);
                    self.skip = 0;
                    let take = l.min(self.left);
                    self.left -= take;
                    return Some((o, take));
                }
            }
        }
        None
    }
}

/// One piece of a transfer: `len` bytes at file offset `file` and buffer
/// offset `mem`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub file: u64,
    pub mem: usize,
    pub len: u64,
}

/// Pairs file regions with memory regions (both in stream order), cutting
/// at every boundary of either. Memory regions are checked against the
/// buffer's length; the first error ends the iteration. Stops at the
/// shorter side.
pub fn pair<F, M>(file: F, mem: M, buf_len: usize) -> impl Iterator<Item = Result<Segment, ViewError>>
where
    F: Iterator<Item = (u64, u64)>,
    M: Iterator<Item = (i64, u64)>,
{
    let mut file = file.peekable();
    let mut mem = mem.peekable();
    let (mut f_used, mut m_used) = (0u64, 0u64);
    let mut failed = false;
    std::iter::from_fn(move || loop {
        if failed {
            return None;
        }
        let &(fo, fl) = file.peek()?;
        let &(mo, ml) = mem.peek()?;
        if mo < 0 || (mo as u64).saturating_add(ml) > buf_len as u64 {
            failed = true;
            return Some(Err(ViewError::OutsideBuffer { offset: mo, len: ml, buf: buf_len }));
        }
        let take = (fl - f_used).min(ml - m_used);
        if take == 0 {
            // Zero-length regions carry nothing; step past them.
            if fl == f_used {
                file.next();
                f_used = 0;
            }
            if ml == m_used {
                mem.next();
                m_used = 0;
            }
            continue;
        }
        let seg = Segment { file: fo + f_used, mem: (mo as u64 + m_used) as usize, len: take };
        f_used += take;
        m_used += take;
        if f_used == fl {
            file.next();
            f_used = 0;
        }
        if m_used == ml {
            mem.next();
            m_used = 0;
        }
        return Some(Ok(seg));
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bad_views_are_refused_with_the_reason() {
        let int = Datatype::int();
        let v = Datatype::vector(3, 1, 2, &int).unwrap();
        assert_eq!(View::new(-1, int.clone(), v.clone()).unwrap_err(), ViewError::NegativeDisplacement(-1));
        let odd = Datatype::contiguous(3, &Datatype::byte()).unwrap();
        assert!(matches!(View::new(0, int.clone(), odd), Err(ViewError::EtypeDoesNotDivide { etype: 4, filetype: 3 })));
        let back = Datatype::hindexed(&[1, 1], &[8, 0], &int).unwrap();
        assert!(matches!(View::new(0, int.clone(), back), Err(ViewError::NotMonotonic { offset: 0, previous: 8 })));
        let dup = Datatype::hindexed(&[2, 1], &[0, 4], &int).unwrap();
        let view = View::new(0, int.clone(), dup).unwrap();
        assert_eq!(view.check_writable(), Err(ViewError::Overlapping(4)));
        // Copies reaching into each other: extent smaller than the data.
        let squeezed = Datatype::resized(&Datatype::contiguous(2, &int).unwrap(), 0, 4).unwrap();
        assert!(View::new(0, int.clone(), squeezed).unwrap().check_writable().is_err());
        assert!(View::new(0, int.clone(), v).unwrap().check_writable().is_ok());
    }

    /// Reference: expand the view byte by byte.
    fn naive_stream(view: &View, start: u64, len: u64) -> Vec<u64> {
        let per_tile: Vec<u64> = view.filetype().regions(0).flat_map(|(o, l)| (0..l).map(move |i| o as u64 + i)).collect();
        (start..start + len)
            .map(|s| view.disp() + (s / per_tile.len() as u64) * view.filetype().extent() as u64 + per_tile[(s % per_tile.len() as u64) as usize])
            .collect()
    }

    proptest! {
        #[test]
        fn view_regions_match_byte_by_byte_expansion(
            disp in 0i64..50, count in 1i64..4, bl in 1i64..4, stride in 4i64..9, start in 0u64..200, len in 0u64..300,
        ) {
            let int = Datatype::int();
            let ft = Datatype::vector(count, bl, stride, &int).unwrap();
            let view = View::new(disp, int, ft).unwrap();
            let got: Vec<u64> = view.file_regions(start, len).flat_map(|(o, l)| (0..l).map(move |i| o + i)).collect();
            prop_assert_eq!(got, naive_stream(&view, start, len));
        }

        #[test]
        fn contiguous_views_are_one_region_matching_expansion(
            disp in 0i64..50, count in 1i64..5, lb in 0i64..3, start in 0u64..200, len in 1u64..300,
        ) {
            // Dense filetypes, also with a lower bound that is not zero.
            let ft = Datatype::contiguous(count, &Datatype::int()).unwrap();
            let ft = if lb == 0 { ft } else { Datatype::hindexed(&[1], &[lb], &ft).unwrap() };
            let view = View::new(disp, Datatype::byte(), ft).unwrap();
            let regions: Vec<(u64, u64)> = view.file_regions(start, len).collect();
            prop_assert_eq!(regions.len(), 1);
            let got: Vec<u64> = regions.iter().flat_map(|&(o, l)| (0..l).map(move |i| o + i)).collect();
            prop_assert_eq!(got, naive_stream(&view, start, len));
        }

        #[test]
        fn pairing_cuts_at_both_sides_boundaries(
            file in proptest::collection::vec((0u64..1000, 1u64..20), 1..10),
            mem_cut in proptest::collection::vec(1u64..15, 1..20),
        ) {
            let total: u64 = file.iter().map(|f| f.1).sum();
            // Memory: consecutive regions with one-byte gaps, covering `total`.
            let mut mem = Vec::new();
            let (mut at, mut left) = (0i64, total);
            for c in mem_cut.iter().cycle() {
                if left == 0 { break; }
                let l = (*c).min(left);
                mem.push((at, l));
                at += l as i64 + 1;
                left -= l;
            }
            let segs: Vec<Segment> = pair(file.iter().copied(), mem.iter().copied(), at as usize).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(segs.iter().map(|s| s.len).sum::<u64>(), total);
            let fb: Vec<u64> = file.iter().flat_map(|&(o, l)| (0..l).map(move |i| o + i)).collect();
            let mb: Vec<usize> = mem.iter().flat_map(|&(o, l)| (0..l).map(move |i| o as usize + i as usize)).collect();
            let pairs: Vec<(u64, usize)> = segs.iter().flat_map(|s| (0..s.len).map(move |i| (s.file + i, s.mem + i as usize))).collect();
            prop_assert_eq!(pairs, fb.into_iter().zip(mb).collect::<Vec<_>>());
        }
    }

    #[test]
    fn memory_outside_the_buffer_is_an_error() {
        let r: Vec<_> = pair([(0u64, 8u64)].into_iter(), [(4i64, 8u64)].into_iter(), 10).collect();
        assert_eq!(r, [Err(ViewError::OutsideBuffer { offset: 4, len: 8, buf: 10 })]);
    }
}
