//! MPI datatypes, decoded by the shim with `MPI_Type_get_envelope` and
//! `MPI_Type_get_contents` into a flat *type program* of `i64` words, then
//! built here into a `weft-layout` [`Datatype`].
//!
//! Program grammar (prefix order, a node's children after its fields):
//!
//! | op | fields | meaning |
//! |---|---|---|
//! | 0 `BASIC` | size | a named type of `size` contiguous bytes |
//! | 1 `HVECTOR` | count, blocklen, stride bytes, child | vector, hvector, contiguous |
//! | 2 `HINDEXED` | n, (blocklen, displacement bytes) * n, child | (h)indexed(_block) |
//! | 3 `STRUCT` | n, (blocklen, displacement bytes) * n, child * n | struct |
//! | 4 `RESIZED` | lb, extent, child | resized, and named types with padding |
//! | 5 `SUBARRAY` | ndims, order, sizes, subsizes, starts, child | subarray |
//! | 6 `DARRAY` | size, rank, ndims, order, gsizes, distribs, dargs, psizes, child | darray |
//!
//! `order` is 0 for C, 1 for Fortran; a distrib is 0 none, 1 block, 2
//! cyclic; a darg of -1 is MPI's default. Programs come from the shim,
//! but are checked like any input: counts against what is left, nesting
//! depth, and every constructor's own arithmetic checks.

use crate::errors::{Class, Fail, Result};
use weft_client::{Datatype, Distrib, Order};

/// Deepest nesting accepted (MPI programs rarely pass 5).
pub const MAX_DEPTH: usize = 64;

struct Reader<'a> {
    words: &'a [i64],
    at: usize,
}

fn bad(msg: impl Into<String>) -> Fail {
    Fail::new(Class::Type, msg)
}

impl Reader<'_> {
    fn word(&mut self) -> Result<i64> {
        let w = *self.words.get(self.at).ok_or_else(|| bad("datatype program ends early"))?;
        self.at += 1;
        Ok(w)
    }

    /// A count of items, each `per` words long, that must fit in what is left.
    fn count(&mut self, per: usize) -> Result<usize> {
        let n = self.word()?;
        let left = self.words.len() - self.at;
        match usize::try_from(n) {
            Ok(n) if n.checked_mul(per).is_some_and(|w| w <= left) => Ok(n),
            _ => Err(bad(format!("datatype program count {n} exceeds its length"))),
        }
    }

    fn words(&mut self, n: usize) -> Result<Vec<i64>> {
        (0..n).map(|_| self.word()).collect()
    }

    fn order(&mut self) -> Result<Order> {
        match self.word()? {
            0 => Ok(Order::C),
            1 => Ok(Order::Fortran),
            o => Err(bad(format!("array order {o}"))),
        }
    }

    fn node(&mut self, depth: usize) -> Result<Datatype> {
        if depth > MAX_DEPTH {
            return Err(bad(format!("datatype nested deeper than {MAX_DEPTH}")));
        }
        let built = match self.word()? {
            0 => {
                let size = self.word()?;
                Ok(Datatype::basic(u64::try_from(size).map_err(|_| bad(format!("basic type of {size} bytes")))?))
            }
            1 => {
                let (count, blocklen, stride) = (self.word()?, self.word()?, self.word()?);
                let child = self.node(depth + 1)?;
                Datatype::hvector(count, blocklen, stride, &child)
            }
            2 => {
                let n = self.count(2)?;
                let pairs = self.words(2 * n)?;
                let child = self.node(depth + 1)?;
                let (bl, d): (Vec<i64>, Vec<i64>) = pairs.chunks_exact(2).map(|p| (p[0], p[1])).unzip();
                Datatype::hindexed(&bl, &d, &child)
            }
            3 => {
                let n = self.count(3)?;
                let pairs = self.words(2 * n)?;
                let children = (0..n).map(|_| self.node(depth + 1)).collect::<Result<Vec<_>>>()?;
                let (bl, d): (Vec<i64>, Vec<i64>) = pairs.chunks_exact(2).map(|p| (p[0], p[1])).unzip();
                Datatype::structure(&bl, &d, &children)
            }
            4 => {
                let (lb, extent) = (self.word()?, self.word()?);
                let child = self.node(depth + 1)?;
                Datatype::resized(&child, lb, extent)
            }
            5 => {
                let n = self.count(3)?;
                let order = self.order()?;
                let (sizes, subsizes, starts) = (self.words(n)?, self.words(n)?, self.words(n)?);
                let child = self.node(depth + 1)?;
                Datatype::subarray(&sizes, &subsizes, &starts, order, &child)
            }
            6 => {
                let (size, rank) = (self.word()?, self.word()?);
                let n = self.count(4)?;
                let order = self.order()?;
                let gsizes = self.words(n)?;
                let distribs = self.words(n)?;
                let dargs = self.words(n)?;
                let psizes = self.words(n)?;
                let child = self.node(depth + 1)?;
                let d = distribs
                    .iter()
                    .zip(&dargs)
                    .map(|(&kind, &arg)| match (kind, arg) {
                        (0, _) => Ok(Distrib::None),
                        (1, -1) => Ok(Distrib::Block(None)),
                        (1, a) if a > 0 => Ok(Distrib::Block(Some(a as u64))),
                        (2, -1) => Ok(Distrib::Cyclic(1)),
                        (2, a) if a > 0 => Ok(Distrib::Cyclic(a as u64)),
                        (k, a) => Err(bad(format!("distribution {k} with argument {a}"))),
                    })
                    .collect::<Result<Vec<_>>>()?;
                Datatype::darray(size, rank, &gsizes, &d, &psizes, order, &child)
            }
            op => return Err(bad(format!("datatype program op {op}"))),
        };
        built.map_err(|e| bad(format!("datatype: {e}")))
    }
}

/// Builds the datatype a program describes; the program must be exactly one node.
pub fn build(words: &[i64]) -> Result<Datatype> {
    let mut r = Reader { words, at: 0 };
    let t = r.node(0)?;
    if r.at != words.len() {
        return Err(bad(format!("datatype program has {} words after its end", words.len() - r.at)));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_build_the_types_mpi_would() {
        let int = Datatype::int();
        // MPI_Type_vector(3, 2, 4, MPI_INT): stride in bytes 16.
        let v = build(&[1, 3, 2, 16, 0, 4]).unwrap();
        assert_eq!(v, Datatype::vector(3, 2, 4, &int).unwrap());
        // struct { 1 int at 0, 2 doubles at 8 }.
        let s = build(&[3, 2, 1, 0, 2, 8, 0, 4, 0, 8]).unwrap();
        assert_eq!(s.size(), 20);
        assert_eq!(s.extent(), 24);
        // Resized vector, then a 2x2 subarray of a 4x4 int array in C order.
        let r = build(&[4, 0, 64, 1, 3, 2, 16, 0, 4]).unwrap();
        assert_eq!(r.extent(), 64);
        let sub = build(&[5, 2, 0, 4, 4, 2, 2, 1, 1, 0, 4]).unwrap();
        assert_eq!(sub, Datatype::subarray(&[4, 4], &[2, 2], &[1, 1], Order::C, &int).unwrap());
    }

    #[test]
    fn hostile_programs_are_refused_not_trusted() {
        for p in [
            &[][..],
            &[9],
            &[2, i64::MAX, 0],
            &[2, -1, 0, 4],
            &[3, 1 << 40],
            &[0, -4],
            &[0, 4, 0, 4],
            &[5, 2, 7, 4, 4, 2, 2, 1, 1, 0, 4],
            &[6, 4, 0, 1, 0, 8, 3, 0, 2, 0, 4],
            &[1, i64::MAX, i64::MAX, 1, 0, 8],
        ] {
            assert_eq!(build(p).unwrap_err().class, Class::Type, "{p:?}");
        }
        // A resize of a resize of ... of one byte, one level too deep.
        let mut deep = [4, 0, 1].repeat(MAX_DEPTH + 1);
        deep.extend([0, 1]);
        assert_eq!(build(&deep).unwrap_err().class, Class::Type);
    }
}
