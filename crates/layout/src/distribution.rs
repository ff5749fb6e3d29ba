//! Array-shaped datatypes: MPI's subarray and darray (HPF-style NONE /
//! BLOCK / CYCLIC(k) distributions over a process grid), in C or Fortran
//! order, built from the general constructors.

use crate::datatype::{Datatype, Result, TypeError};

/// Memory order of a multidimensional array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Row-major: the last dimension varies fastest.
    C,
    /// Column-major: the first dimension varies fastest.
    Fortran,
}

/// How one dimension is spread over the processes along it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distrib {
    /// Not distributed: every process along this dimension has all of it.
    None,
    /// Contiguous blocks of the given size (default: ceil(n / p)).
    Block(Option<u64>),
    /// Blocks of k dealt round-robin.
    Cyclic(u64),
}

fn invalid(msg: String) -> TypeError {
    TypeError::Invalid(msg)
}

/// Byte stride of each dimension for an array of `sizes` elements of
/// `ext` bytes in `order`.
fn strides(sizes: &[u64], ext: i64, order: Order) -> Result<Vec<i64>> {
    let n = sizes.len();
    let mut st = vec![0i64; n];
    let mut acc = ext;
    let dims: Vec<usize> = match order {
        Order::C => (0..n).rev().collect(),
        Order::Fortran => (0..n).collect(),
    };
    for d in dims {
        st[d] = acc;
        acc = acc.checked_mul(sizes[d] as i64).ok_or(TypeError::Overflow { what: "array size" })?;
    }
    Ok(st)
}

fn positive(what: &str, v: &[i64]) -> Result<Vec<u64>> {
    v.iter().map(|&x| if x > 0 { Ok(x as u64) } else { Err(invalid(format!("{what} must be positive, got {x}"))) }).collect()
}

/// Builds the type of the elements `blocks[d]` (runs of indices) selects in
/// each dimension, in memory order, resized to the whole array.
fn select(sizes: &[u64], blocks: &[Vec<(u64, u64)>], order: Order, old: &Datatype) -> Result<Datatype> {
    let ext = old.extent();
    let st = strides(sizes, ext, order)?;
    let dims: Vec<usize> = match order {
        Order::C => (0..sizes.len()).rev().collect(),
        Order::Fortran => (0..sizes.len()).collect(),
    };
    let mut t = old.clone();
    let mut unit = ext;
    for d in dims {
        // Each index step of dimension d is st[d] bytes; the inner type
        // covers one step, so resize it to that extent before repeating it.
        if t.extent() != unit || t.lb() != 0 {
            t = Datatype::resized(&t, 0, unit)?;
        }
        let lens: Vec<i64> = blocks[d].iter().map(|b| b.1 as i64).collect();
        let displs: Vec<i64> = blocks[d].iter().map(|b| b.0 as i64 * st[d]).collect::<Vec<_>>();
        t = Datatype::hindexed(&lens, &displs, &t)?;
        unit = st[d].checked_mul(sizes[d] as i64).ok_or(TypeError::Overflow { what: "array size" })?;
    }
    Datatype::resized(&t, 0, unit)
}

impl Datatype {
    /// MPI_Type_create_subarray: the `subsizes` block at `starts` of an
    /// array of `sizes` elements of `old`; extent is the whole array.
    pub fn subarray(sizes: &[i64], subsizes: &[i64], starts: &[i64], order: Order, old: &Datatype) -> Result<Self> {
        let n = sizes.len();
        if n == 0 || subsizes.len() != n || starts.len() != n {
            return Err(TypeError::LengthMismatch("subarray"));
        }
        let sizes = positive("array size", sizes)?;
        let subsizes = positive("subarray size", subsizes)?;
        let mut blocks = Vec::with_capacity(n);
        for d in 0..n {
            let s = starts[d];
            if s < 0 || s as u64 + subsizes[d] > sizes[d] {
                return Err(invalid(format!("dimension {d}: start {s} + subsize {} exceeds size {}", subsizes[d], sizes[d])));
            }
            blocks.push(vec![(s as u64, subsizes[d])]);
        }
        select(&sizes, &blocks, order, old)
    }

    /// MPI_Type_create_darray: process `rank`'s share of an array of
    /// `gsizes` elements distributed over a `psizes` process grid (row-major
    /// rank order, as MPI defines it); extent is the whole array.
    pub fn darray(size: i64, rank: i64, gsizes: &[i64], distribs: &[Distrib], psizes: &[i64], order: Order, old: &Datatype) -> Result<Self> {
        let n = gsizes.len();
        if n == 0 || distribs.len() != n || psizes.len() != n {
            return Err(TypeError::LengthMismatch("darray"));
        }
        let gsizes = positive("global size", gsizes)?;
        let psizes = positive("process grid size", psizes)?;
        if psizes.iter().product::<u64>() != size as u64 || size <= 0 {
            return Err(invalid(format!("process grid {psizes:?} does not have {size} processes")));
        }
        if rank < 0 || rank >= size {
            return Err(invalid(format!("rank {rank} outside 0..{size}")));
        }
        let mut coords = vec![0u64; n];
        let mut r = rank as u64;
        for d in (0..n).rev() {
            coords[d] = r % psizes[d];
            r /= psizes[d];
        }
        let mut blocks = Vec::with_capacity(n);
        for d in 0..n {
            let (g, p, c) = (gsizes[d], psizes[d], coords[d]);
            blocks.push(match distribs[d] {
                Distrib::None => {
                    if p != 1 {
                        return Err(invalid(format!("dimension {d} is not distributed but has {p} processes")));
                    }
                    vec![(0, g)]
                }
                Distrib::Block(b) => {
                    let b = b.unwrap_or(g.div_ceil(p));
                    if b == 0 || b * p < g {
                        return Err(invalid(format!("dimension {d}: blocks of {b} over {p} processes do not cover {g}")));
                    }
                    let start = c * b;
                    if start < g { vec![(start, b.min(g - start))] } else { Vec::new() }
                }
                Distrib::Cyclic(k) => {
                    if k == 0 {
                        return Err(invalid(format!("dimension {d}: cyclic block size 0")));
                    }
                    (0..).map(|i| (c + i * p) * k).take_while(|&s| s < g).map(|s| (s, k.min(g - s))).collect()
                }
            });
        }
        select(&gsizes, &blocks, order, old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reference: walk every element of the global array in memory order
    /// and keep the ones this rank owns.
    fn reference(gsizes: &[u64], owner: &dyn Fn(usize, u64) -> bool, order: Order, esize: u64) -> Vec<(i64, u64)> {
        let n = gsizes.len();
        let total: u64 = gsizes.iter().product();
        let st = strides(gsizes, esize as i64, order).unwrap();
        let mut out: Vec<(i64, u64)> = Vec::new();
        for lin in 0..total {
            // Decompose `lin` with the fastest dimension first.
            let mut idx = vec![0u64; n];
            let mut r = lin;
            let dims: Vec<usize> = match order {
                Order::C => (0..n).rev().collect(),
                Order::Fortran => (0..n).collect(),
            };
            for d in dims {
                idx[d] = r % gsizes[d];
                r /= gsizes[d];
            }
            if (0..n).all(|d| owner(d, idx[d])) {
                let off: i64 = (0..n).map(|d| idx[d] as i64 * st[d]).sum();
                match out.last_mut() {
                    Some((o, l)) if *o + *l as i64 == off => *l += esize,
                    _ => out.push((off, esize)),
                }
            }
        }
        out
    }

    fn distrib() -> impl Strategy<Value = Distrib> {
        prop_oneof![Just(Distrib::None), Just(Distrib::Block(None)), (1u64..4).prop_map(Distrib::Cyclic)]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        #[test]
        fn darray_matches_element_ownership(
            dims in proptest::collection::vec((1u64..9, distrib(), 1u64..4), 1..4),
            fortran in any::<bool>(),
            rank_pick in any::<prop::sample::Index>(),
        ) {
            let order = if fortran { Order::Fortran } else { Order::C };
            let gsizes: Vec<i64> = dims.iter().map(|d| d.0 as i64).collect();
            let distribs: Vec<Distrib> = dims.iter().map(|d| d.1).collect();
            let psizes: Vec<i64> = dims.iter().map(|d| if d.1 == Distrib::None { 1 } else { d.2 as i64 }).collect();
            let size: i64 = psizes.iter().product();
            let rank = rank_pick.index(size as usize) as i64;
            let t = Datatype::darray(size, rank, &gsizes, &distribs, &psizes, order, &Datatype::int()).unwrap();
            let mut coords = vec![0u64; dims.len()];
            let mut r = rank as u64;
            for d in (0..dims.len()).rev() { coords[d] = r % psizes[d] as u64; r /= psizes[d] as u64; }
            let owner = |d: usize, i: u64| -> bool {
                let p = psizes[d] as u64;
                match distribs[d] {
                    Distrib::None => true,
                    Distrib::Block(_) => i / (gsizes[d] as u64).div_ceil(p) == coords[d],
                    Distrib::Cyclic(k) => (i / k) % p == coords[d],
                }
            };
            let gs: Vec<u64> = gsizes.iter().map(|&g| g as u64).collect();
            let want = reference(&gs, &owner, order, 4);
            prop_assert_eq!(t.regions(0).collect::<Vec<_>>(), want);
            prop_assert_eq!((t.lb(), t.extent()), (0, 4 * gs.iter().product::<u64>() as i64));
        }

        #[test]
        fn subarray_matches_element_selection(
            dims in proptest::collection::vec((1u64..7, any::<prop::sample::Index>(), any::<prop::sample::Index>()), 1..4),
            fortran in any::<bool>(),
        ) {
            let order = if fortran { Order::Fortran } else { Order::C };
            let sizes: Vec<u64> = dims.iter().map(|d| d.0).collect();
            let subs: Vec<u64> = dims.iter().map(|d| 1 + d.1.index(d.0 as usize) as u64).collect();
            let starts: Vec<u64> = dims.iter().zip(&subs).map(|(d, &s)| d.2.index((d.0 - s + 1) as usize) as u64).collect();
            let as_i = |v: &[u64]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
            let t = Datatype::subarray(&as_i(&sizes), &as_i(&subs), &as_i(&starts), order, &Datatype::double()).unwrap();
            let owner = |d: usize, i: u64| i >= starts[d] && i < starts[d] + subs[d];
            prop_assert_eq!(t.regions(0).collect::<Vec<_>>(), reference(&sizes, &owner, order, 8));
            prop_assert_eq!(t.extent(), 8 * sizes.iter().product::<u64>() as i64);
        }
    }

    #[test]
    fn bad_arrays_are_refused() {
        let i = Datatype::int();
        assert!(Datatype::subarray(&[4], &[5], &[0], Order::C, &i).is_err());
        assert!(Datatype::subarray(&[4], &[2], &[3], Order::C, &i).is_err());
        assert!(Datatype::subarray(&[4, 4], &[2], &[0], Order::C, &i).is_err());
        assert!(Datatype::darray(4, 0, &[8], &[Distrib::Block(None)], &[3], Order::C, &i).is_err());
        assert!(Datatype::darray(2, 2, &[8], &[Distrib::Block(None)], &[2], Order::C, &i).is_err());
        assert!(Datatype::darray(2, 0, &[8], &[Distrib::None], &[2], Order::C, &i).is_err());
        assert!(Datatype::darray(2, 0, &[8], &[Distrib::Block(Some(3))], &[2], Order::C, &i).is_err());
    }
}
