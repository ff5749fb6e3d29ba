//! Flattening: the (offset, length) regions a datatype touches, in typemap
//! order, produced lazily.
//!
//! [`Runs`] walks the type tree with an explicit stack (memory: the tree's
//! depth) and yields strided runs: a vector of dense blocks comes out as one
//! [`Run`], however many blocks it has. [`Regions`] expands runs into single
//! regions and joins neighbours that touch, so a billion-element vector of
//! contiguous doubles costs a few words, and comes out as one region if its
//! blocks adjoin.

use crate::datatype::{Datatype, Kind};

/// `count` pieces of `len` bytes, piece i at `offset + i * stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub offset: i64,
    pub len: u64,
    pub stride: i64,
    pub count: u64,
}

enum Frame<'a> {
    Vector { child: &'a Datatype, base: i64, count: u64, blocklen: u64, stride: i64, j: u64, k: u64 },
    Struct { blocks: &'a [(u64, i64, Datatype)], base: i64, b: usize, k: u64 },
}

/// Lazy strided runs of `count` copies of a type, in typemap order.
pub struct Runs<'a> {
    stack: Vec<Frame<'a>>,
    /// Keeps the outer `count` copies' type alive for the frames' borrows.
    _root: Option<Box<Datatype>>,
}

impl<'a> Runs<'a> {
    fn start(t: &'a Datatype, disp: i64) -> Self {
        let mut r = Runs { stack: Vec::new(), _root: None };
        if let Some(run) = r.enter(t, disp) {
            // A dense type: one run, held by a one-block vector frame.
            r.stack.push(Frame::Vector { child: t, base: run.offset - t.true_lb(), count: 1, blocklen: 1, stride: 0, j: 0, k: 0 });
        }
        r
    }

    /// Pushes the frame for `t` at `disp`, or returns it as one run if dense.
    fn enter(&mut self, t: &'a Datatype, disp: i64) -> Option<Run> {
        if t.size() == 0 {
            return None;
        }
        if t.is_dense() {
            return Some(Run { offset: disp + t.true_lb(), len: t.size(), stride: 0, count: 1 });
        }
        match &t.0.kind {
            Kind::Basic(_) => unreachable!("basic types are dense"),
            Kind::Hvector { count, blocklen, stride, child } => {
                self.stack.push(Frame::Vector { child, base: disp, count: *count, blocklen: *blocklen, stride: *stride, j: 0, k: 0 });
            }
            Kind::Struct { blocks } => self.stack.push(Frame::Struct { blocks, base: disp, b: 0, k: 0 }),
            Kind::Resized { child } => return self.enter(child, disp),
        }
        None
    }
}

impl Iterator for Runs<'_> {
    type Item = Run;

    fn next(&mut self) -> Option<Run> {
        loop {
            let (t, disp) = match self.stack.last_mut()? {
                Frame::Vector { child, base, count, blocklen, stride, j, k } => {
                    if *j == *count {
                        self.stack.pop();
                        continue;
                    }
                    if child.tiles_densely() {
                        // Each block is one run of blocklen copies: the rest of
                        // the vector is one strided run.
                        let run = Run {
                            offset: *base + *j as i64 * *stride + child.true_lb(),
                            len: *blocklen * child.size(),
                            stride: *stride,
                            count: *count - *j,
                        };
                        self.stack.pop();
                        return Some(run);
                    }
                    let disp = *base + *j as i64 * *stride + *k as i64 * child.extent();
                    *k += 1;
                    if *k == *blocklen {
                        *k = 0;
                        *j += 1;
                    }
                    (*child, disp)
                }
                Frame::Struct { blocks, base, b, k } => {
                    if *b == blocks.len() {
                        self.stack.pop();
                        continue;
                    }
                    let (bl, d, t) = &blocks[*b];
                    let disp = *base + d + *k as i64 * t.extent();
                    *k += 1;
                    if *k == *bl {
                        *k = 0;
                        *b += 1;
                    }
                    (t, disp)
                }
            };
            if let Some(run) = self.enter(t, disp) {
                return Some(run);
            }
        }
    }
}

/// Lazy regions `(offset, len)` in typemap order, touching neighbours joined.
pub struct Regions<'a> {
    runs: Runs<'a>,
    cur: Option<Run>,
    done_in_cur: u64,
    pending: Option<(i64, u64)>,
}

impl Iterator for Regions<'_> {
    type Item = (i64, u64);

    fn next(&mut self) -> Option<(i64, u64)> {
        loop {
            let piece = match self.cur {
                Some(run) if self.done_in_cur < run.count => {
                    let p = (run.offset + self.done_in_cur as i64 * run.stride, run.len);
                    self.done_in_cur += 1;
                    Some(p)
                }
                _ => match self.runs.next() {
                    Some(run) => {
                        self.cur = Some(run);
                        self.done_in_cur = 0;
                        continue;
                    }
                    None => None,
                },
            };
            match (piece, self.pending) {
                (None, p) => {
                    self.pending = None;
                    return p;
                }
                (Some(p), None) => self.pending = Some(p),
                (Some((o, l)), Some((po, pl))) if po + pl as i64 == o => self.pending = Some((po, pl + l)),
                (Some(p), Some(prev)) => {
                    self.pending = Some(p);
                    return Some(prev);
                }
            }
        }
    }
}

impl Datatype {
    /// Strided runs of one copy of this type placed at `disp`.
    pub fn runs(&self, disp: i64) -> Runs<'_> {
        Runs::start(self, disp)
    }

    /// Regions of one copy of this type placed at `disp`, in typemap order.
    pub fn regions(&self, disp: i64) -> Regions<'_> {
        Regions { runs: self.runs(disp), cur: None, done_in_cur: 0, pending: None }
    }

    /// Regions of `count` consecutive copies (one extent apart) at `disp`,
    /// collected: the typemap of `(datatype, count, displacement)`.
    pub fn flatten(&self, count: u64, disp: i64) -> Vec<(i64, u64)> {
        match Datatype::contiguous(count as i64, self) {
            Ok(t) => t.regions(disp).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// Sorts regions by offset and joins overlapping or touching ones: the set
/// of bytes touched, whatever the typemap order.
pub fn sort_and_coalesce(mut v: Vec<(i64, u64)>) -> Vec<(i64, u64)> {
    v.retain(|r| r.1 > 0);
    v.sort_unstable();
    let mut out: Vec<(i64, u64)> = Vec::with_capacity(v.len());
    for (o, l) in v {
        match out.last_mut() {
            Some((po, pl)) if *po + *pl as i64 >= o => {
                let end = (*po + *pl as i64).max(o + l as i64);
                *pl = (end - *po) as u64;
            }
            _ => out.push((o, l)),
        }
    }
    out
}
