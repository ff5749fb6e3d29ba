//! MPI-style datatypes: a typemap (a sequence of (displacement, length)
//! pieces of data) plus a lower bound and an extent, built by MPI's
//! constructors and nested to any depth.
//!
//! Bounds follow MPI: `lb`/`ub` come from the children's `lb`/`ub` (so a
//! resized child moves them), `true_lb`/`true_ub` from where data really
//! is. Unlike MPI implementations, struct types get no alignment padding
//! (epsilon = 0): resize explicitly where padding is wanted.
//!
//! Every constructor is a smart node; a type is shared (`Arc`) and its
//! description, not its element count, decides its memory.

use std::sync::Arc;
use thiserror::Error;

/// Why a datatype cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TypeError {
    #[error("{what} is negative ({value})")]
    Negative { what: &'static str, value: i64 },
    #[error("{what} overflows 64-bit byte arithmetic")]
    Overflow { what: &'static str },
    #[error("{0} lists have different lengths")]
    LengthMismatch(&'static str),
    #[error("extent must be positive, got {0}")]
    BadExtent(i64),
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, TypeError>;

/// A datatype: cheap to clone, immutable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datatype(pub(crate) Arc<Node>);

#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Node {
    pub(crate) kind: Kind,
    pub(crate) size: u64,
    pub(crate) lb: i64,
    pub(crate) ub: i64,
    pub(crate) true_lb: i64,
    pub(crate) true_ub: i64,
    /// The data is one run `[true_lb, true_ub)` in typemap order.
    pub(crate) dense: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A basic type of this many bytes (MPI_BYTE is 1, MPI_DOUBLE 8).
    Basic(u64),
    /// `count` blocks of `blocklen` children; block j at `j * stride` bytes.
    /// Contiguous and vector are special cases.
    Hvector { count: u64, blocklen: u64, stride: i64, child: Datatype },
    /// Blocks of children at byte displacements, possibly of different types.
    Struct { blocks: Vec<(u64, i64, Datatype)> },
    Resized { child: Datatype },
}

fn neg(what: &'static str, v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| TypeError::Negative { what, value: v })
}

fn ovf(what: &'static str) -> TypeError {
    TypeError::Overflow { what }
}

fn mul(a: i64, b: i64, what: &'static str) -> Result<i64> {
    a.checked_mul(b).ok_or(ovf(what))
}

fn add(a: i64, b: i64, what: &'static str) -> Result<i64> {
    a.checked_add(b).ok_or(ovf(what))
}

/// Lowest and highest of `d0 + {0, (n1-1)*s1} + {0, (n2-1)*s2}`: where the
/// extreme child instances of a two-level regular placement lie.
fn corner_range(n1: u64, s1: i64, n2: u64, s2: i64) -> Result<(i64, i64)> {
    let a = mul(i64::try_from(n1.saturating_sub(1)).map_err(|_| ovf("count"))?, s1, "stride")?;
    let b = mul(i64::try_from(n2.saturating_sub(1)).map_err(|_| ovf("count"))?, s2, "stride")?;
    let lo = a.min(0).checked_add(b.min(0)).ok_or(ovf("displacement"))?;
    let hi = a.max(0).checked_add(b.max(0)).ok_or(ovf("displacement"))?;
    Ok((lo, hi))
}

impl Datatype {
    /// A basic type of `size` bytes (size = extent, lb = 0).
    pub fn basic(size: u64) -> Self {
        let s = size as i64;
        Datatype(Arc::new(Node { kind: Kind::Basic(size), size, lb: 0, ub: s, true_lb: 0, true_ub: s, dense: true }))
    }
    pub fn byte() -> Self {
        Self::basic(1)
    }
    pub fn int() -> Self {
        Self::basic(4)
    }
    pub fn double() -> Self {
        Self::basic(8)
    }

    pub fn size(&self) -> u64 {
        self.0.size
    }
    pub fn lb(&self) -> i64 {
        self.0.lb
    }
    pub fn ub(&self) -> i64 {
        self.0.ub
    }
    pub fn extent(&self) -> i64 {
        self.0.ub - self.0.lb
    }
    pub fn true_lb(&self) -> i64 {
        self.0.true_lb
    }
    pub fn true_extent(&self) -> i64 {
        self.0.true_ub - self.0.true_lb
    }
    /// True when the data is one contiguous run in typemap order.
    pub fn is_dense(&self) -> bool {
        self.0.dense
    }
    /// Dense and starting at its lower bound with no gap to its upper bound,
    /// so consecutive copies join into one run.
    pub(crate) fn tiles_densely(&self) -> bool {
        self.0.dense && self.0.true_lb == self.0.lb && self.0.true_ub == self.0.ub
    }

    /// `count` blocks of `blocklen` copies of `child`, block j starting at
    /// `j * stride` bytes; copies within a block are one extent apart.
    pub fn hvector(count: i64, blocklen: i64, stride: i64, child: &Datatype) -> Result<Self> {
        let count = neg("count", count)?;
        let blocklen = neg("blocklength", blocklen)?;
        let n = count.checked_mul(blocklen).ok_or(ovf("count * blocklength"))?;
        let size = n.checked_mul(child.size()).ok_or(ovf("size"))?;
        if n == 0 || child.size() == 0 && child.extent() == 0 {
            return Ok(Self::empty());
        }
        let ext = child.extent();
        let (lo, hi) = corner_range(count, stride, blocklen, ext)?;
        let (true_lb, true_ub) = if size == 0 {
            (0, 0)
        } else {
            (add(lo, child.true_lb(), "lower bound")?, add(hi, child.0.true_ub, "upper bound")?)
        };
        let node = Node {
            lb: add(lo, child.lb(), "lower bound")?,
            ub: add(hi, child.ub(), "upper bound")?,
            true_lb,
            true_ub,
            size,
            dense: child.tiles_densely() && (count == 1 || stride == mul(blocklen as i64, ext, "stride")?) && ext >= 0,
            kind: Kind::Hvector { count, blocklen, stride, child: child.clone() },
        };
        Ok(Datatype(Arc::new(node)))
    }

    /// The type with no data: size 0, bounds 0.
    pub fn empty() -> Self {
        Datatype(Arc::new(Node { kind: Kind::Struct { blocks: Vec::new() }, size: 0, lb: 0, ub: 0, true_lb: 0, true_ub: 0, dense: true }))
    }

    pub fn contiguous(count: i64, child: &Datatype) -> Result<Self> {
        Self::hvector(count, 1, child.extent(), child)
    }

    /// `count` blocks of `blocklen` children, `stride` child extents apart.
    pub fn vector(count: i64, blocklen: i64, stride: i64, child: &Datatype) -> Result<Self> {
        Self::hvector(count, blocklen, mul(stride, child.extent(), "stride")?, child)
    }

    /// Blocks of children at byte displacements, each with its own type.
    pub fn structure(blocklens: &[i64], displs: &[i64], types: &[Datatype]) -> Result<Self> {
        if blocklens.len() != displs.len() || displs.len() != types.len() {
            return Err(TypeError::LengthMismatch("struct"));
        }
        let mut blocks = Vec::with_capacity(blocklens.len());
        let (mut size, mut lb, mut ub, mut tlb, mut tub) = (0u64, i64::MAX, i64::MIN, i64::MAX, i64::MIN);
        for ((&bl, &d), t) in blocklens.iter().zip(displs).zip(types) {
            let bl = neg("blocklength", bl)?;
            if bl == 0 || t.size() == 0 && t.extent() == 0 {
                continue;
            }
            size = bl.checked_mul(t.size()).and_then(|s| s.checked_add(size)).ok_or(ovf("size"))?;
            let (lo, hi) = corner_range(bl, t.extent(), 1, 0)?;
            let (lo, hi) = (add(lo, d, "displacement")?, add(hi, d, "displacement")?);
            lb = lb.min(add(lo, t.lb(), "lower bound")?);
            ub = ub.max(add(hi, t.ub(), "upper bound")?);
            if t.size() > 0 {
                tlb = tlb.min(add(lo, t.true_lb(), "lower bound")?);
                tub = tub.max(add(hi, t.0.true_ub, "upper bound")?);
            }
            blocks.push((bl, d, t.clone()));
        }
        if blocks.is_empty() {
            return Ok(Self::empty());
        }
        if size == 0 {
            (tlb, tub) = (0, 0);
        }
        // Dense when every block is dense and each starts where the last ended.
        let mut dense = true;
        let mut at: Option<i64> = None;
        for (bl, d, t) in &blocks {
            if t.size() == 0 {
                continue;
            }
            let joined = *bl == 1 && t.is_dense() || t.tiles_densely();
            let start = d + t.true_lb();
            if !joined || at.is_some_and(|a| a != start) {
                dense = false;
                break;
            }
            at = Some(start + (*bl as i64 - 1) * t.extent() + t.true_extent());
        }
        Ok(Datatype(Arc::new(Node { kind: Kind::Struct { blocks }, size, lb, ub, true_lb: tlb, true_ub: tub, dense })))
    }

    /// Blocks of `child` at byte displacements.
    pub fn hindexed(blocklens: &[i64], displs: &[i64], child: &Datatype) -> Result<Self> {
        if blocklens.len() != displs.len() {
            return Err(TypeError::LengthMismatch("hindexed"));
        }
        Self::structure(blocklens, displs, &vec![child.clone(); blocklens.len()])
    }

    /// Blocks of `child` at displacements counted in child extents.
    pub fn indexed(blocklens: &[i64], displs: &[i64], child: &Datatype) -> Result<Self> {
        let d = displs.iter().map(|&x| mul(x, child.extent(), "displacement")).collect::<Result<Vec<_>>>()?;
        Self::hindexed(blocklens, &d, child)
    }

    /// Equal blocks of `blocklen` children at displacements in child extents.
    pub fn indexed_block(blocklen: i64, displs: &[i64], child: &Datatype) -> Result<Self> {
        Self::indexed(&vec![blocklen; displs.len()], displs, child)
    }

    /// The same data with lower bound `lb` and extent `extent`.
    pub fn resized(child: &Datatype, lb: i64, extent: i64) -> Result<Self> {
        if extent < 0 {
            return Err(TypeError::BadExtent(extent));
        }
        let ub = add(lb, extent, "upper bound")?;
        let c = &child.0;
        Ok(Datatype(Arc::new(Node {
            kind: Kind::Resized { child: child.clone() },
            size: c.size,
            lb,
            ub,
            true_lb: c.true_lb,
            true_ub: c.true_ub,
            dense: c.dense,
        })))
    }
}
