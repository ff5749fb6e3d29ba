//! The papers' access patterns as per-process filetypes, shared by tests
//! and benchmarks. Each pattern describes one file that `procs` processes
//! access together, process `rank` through `filetype(procs, rank)` (a view
//! with displacement 0 and byte etype).
//!
//! * HPF distributions of records (paper 001): 1-D `BLOCK`/`CYCLIC(k)` and
//!   2-D combinations over a process grid, with 8-byte or 8 KiB records.
//! * BTIO's nested-strided pattern (paper 000): a 3-D array of 40-byte
//!   points split into q^3 cells, each of q^2 processes owning q cells on a
//!   diagonal (multi-partition); a contiguous piece is one cell row, 81
//!   points = 3240 bytes, nested two deep (rows within planes).
//! * The 3-D block distribution of a 100^3 array of 4-byte ints over a cube
//!   of processes (paper 004, ROMIO's coll_perf).
//! * A FLASH-I/O-like checkpoint (paper 004): 24 variables of 80 blocks per
//!   process, each block's 8^3 interior doubles (guard cells stripped from a
//!   16^3 block in memory), the file ordered by variable, then block.
//! * The tile reader (paper 004): a frame of 3x2 tiles of 1024x768 24-bit
//!   pixels overlapping by 270 pixels across and 128 down; each process
//!   reads its tile, so neighbours' views overlap.

use crate::datatype::{Datatype, Result, TypeError};
use crate::distribution::{Distrib, Order};

/// One of the papers' access patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// `records` records of `record` bytes, distributed over all processes.
    Hpf1d { records: u64, record: u64, dist: Distrib },
    /// A `rows` x `cols` matrix of records over a `grid` of processes.
    Hpf2d { rows: u64, cols: u64, record: u64, dist: [Distrib; 2], grid: [u64; 2] },
    /// q^2 processes, cells of `cell_x` x `cell_yz` x `cell_yz` points of 40 bytes.
    Btio { q: u64, cell_x: u64, cell_yz: u64 },
    /// An `n`^3 array of `elem`-byte values in BLOCK^3 over a cube of processes.
    Block3d { n: u64, elem: u64 },
    /// `grid` = [rows, cols] of `tile` = [height, width] pixel tiles with
    /// `overlap` = [down, across] pixels shared by neighbours.
    Tiles { tile: [u64; 2], grid: [u64; 2], overlap: [u64; 2], pixel: u64 },
    /// FLASH checkpoint: `vars` variables x `blocks` blocks per process of
    /// `nxb`^3 doubles; memory blocks carry `guard` cells on every side.
    Flash { vars: u64, blocks: u64, nxb: u64, guard: u64 },
}

/// Bytes of one BTIO point: five doubles.
pub const BTIO_POINT: u64 = 40;

fn invalid(msg: String) -> TypeError {
    TypeError::Invalid(msg)
}

fn i(v: u64) -> i64 {
    v as i64
}

fn cube_root(p: u64) -> Option<u64> {
    (1..=p).take_while(|c| c * c * c <= p).find(|c| c * c * c == p)
}

impl Pattern {
    /// Paper 000's BTIO granularity: 81-point (3240-byte) pieces, scaled
    /// down in the other two dimensions to `cell_yz` points per cell.
    pub fn btio(q: u64, cell_yz: u64) -> Self {
        Pattern::Btio { q, cell_x: 81, cell_yz }
    }

    /// One of paper 001's HPF distributions over 4 processes (its figure
    /// 1), named by a letter per dimension, rows first: `n` NONE, `b`
    /// BLOCK, `c` CYCLIC. One dimension: `edge` records (NONE: process 0
    /// holds them all); two: an `edge` x `edge` matrix over a process grid
    /// of 2 x 2, or 1 x 4 / 4 x 1 when a dimension is NONE (not
    /// distributed). `nn` is `n`.
    pub fn hpf(dims: &str, record: u64, edge: u64) -> Result<Self> {
        let dist = |c: u8| match c {
            b'n' => Some(Distrib::None),
            b'b' => Some(Distrib::Block(None)),
            b'c' => Some(Distrib::Cyclic(1)),
            _ => None,
        };
        let bad = || invalid(format!("{dims:?} is not an HPF distribution: one or two of n (NONE), b (BLOCK), c (CYCLIC), e.g. c, bc, nb"));
        if record == 0 || edge == 0 {
            return Err(invalid("an HPF pattern needs records and a matrix edge of at least 1".into()));
        }
        // The whole file's bytes must be a file offset (and every count an
        // MPI-style signed one).
        let cells = if dims.len() == 2 { edge.checked_mul(edge) } else { Some(edge) };
        if cells.and_then(|c| c.checked_mul(record)).is_none_or(|b| b > i64::MAX as u64) {
            return Err(invalid(format!("an HPF pattern of edge {edge} and {record}-byte records is too large")));
        }
        match dims.as_bytes() {
            [b'n'] | [b'n', b'n'] => Ok(Pattern::Hpf1d { records: edge, record, dist: Distrib::Block(Some(edge)) }),
            &[d] => Ok(Pattern::Hpf1d { records: edge, record, dist: dist(d).ok_or_else(bad)? }),
            &[r, c] => {
                let (dr, dc) = (dist(r).ok_or_else(bad)?, dist(c).ok_or_else(bad)?);
                let grid = match (dr, dc) {
                    (Distrib::None, _) => [1, 4],
                    (_, Distrib::None) => [4, 1],
                    _ => [2, 2],
                };
                Ok(Pattern::Hpf2d { rows: edge, cols: edge, record, dist: [dr, dc], grid })
            }
            _ => Err(bad()),
        }
    }

    /// Paper 001's name of an HPF distribution (`bc`: `BLOCK/CYCLIC`).
    pub fn hpf_name(dims: &str) -> String {
        dims.chars()
            .map(|c| match c {
                'n' => "NONE",
                'b' => "BLOCK",
                'c' => "CYCLIC",
                _ => "?",
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    /// Every distinct HPF distribution of [`Pattern::hpf`]: NONE, BLOCK and
    /// CYCLIC in one dimension, their eight other pairs in two.
    pub const HPF_ALL: [&'static str; 11] = ["n", "b", "c", "nb", "nc", "bn", "bb", "bc", "cn", "cb", "cc"];

    /// Paper 004's FLASH I/O checkpoint: 24 variables, 80 blocks of 8^3 per
    /// process, 4 guard cells.
    pub fn flash() -> Self {
        Pattern::Flash { vars: 24, blocks: 80, nxb: 8, guard: 4 }
    }

    /// The memory type of one process's FLASH buffer: `unk(vars, n, n, n,
    /// blocks)` in Fortran order (n = nxb + 2 guard), read variable by
    /// variable, block by block, interior cells only: the file's order.
    /// Other patterns use a contiguous buffer.
    pub fn memtype(&self) -> Result<Option<Datatype>> {
        let Pattern::Flash { vars, blocks, nxb, guard } = *self else { return Ok(None) };
        let n = nxb + 2 * guard;
        // C-order dims of the Fortran array: [blocks][z][y][x][vars].
        let sizes = [i(blocks), i(n), i(n), i(n), i(vars)];
        let sub = [i(blocks), i(nxb), i(nxb), i(nxb), 1];
        let per_var = (0..vars)
            .map(|v| Datatype::subarray(&sizes, &sub, &[0, i(guard), i(guard), i(guard), i(v)], Order::C, &Datatype::double()))
            .collect::<Result<Vec<_>>>()?;
        let k = per_var.len();
        Ok(Some(Datatype::structure(&vec![1; k], &vec![0; k], &per_var)?))
    }

    /// Bytes of one process's memory buffer for [`Pattern::memtype`].
    pub fn memory_bytes(&self, procs: u64, rank: u64) -> Result<u64> {
        Ok(match *self {
            Pattern::Flash { vars, blocks, nxb, guard } => vars * blocks * (nxb + 2 * guard).pow(3) * 8,
            _ => self.filetype(procs, rank)?.size(),
        })
    }

    /// Paper 004's tile reader: 3x2 tiles of 1024x768 24-bit pixels.
    pub fn tile_reader() -> Self {
        Pattern::Tiles { tile: [768, 1024], grid: [2, 3], overlap: [128, 270], pixel: 3 }
    }

    /// The number of processes the pattern needs, if it fixes one.
    pub fn fixed_procs(&self) -> Option<u64> {
        match self {
            Pattern::Hpf2d { grid, .. } => Some(grid[0] * grid[1]),
            Pattern::Btio { q, .. } => Some(q * q),
            Pattern::Tiles { grid, .. } => Some(grid[0] * grid[1]),
            Pattern::Hpf1d { .. } | Pattern::Block3d { .. } | Pattern::Flash { .. } => None,
        }
    }

    /// Bytes of the whole file when `procs` processes share it.
    pub fn file_size_for(&self, procs: u64) -> u64 {
        match *self {
            Pattern::Flash { vars, blocks, nxb, .. } => vars * blocks * nxb * nxb * nxb * 8 * procs,
            _ => self.file_size(),
        }
    }

    /// Bytes of the whole file (for FLASH, see [`Pattern::file_size_for`]).
    pub fn file_size(&self) -> u64 {
        match self {
            Pattern::Hpf1d { records, record, .. } => records * record,
            Pattern::Hpf2d { rows, cols, record, .. } => rows * cols * record,
            Pattern::Btio { q, cell_x, cell_yz } => (q * cell_x) * (q * cell_yz) * (q * cell_yz) * BTIO_POINT,
            Pattern::Block3d { n, elem } => n * n * n * elem,
            Pattern::Flash { .. } => 0,
            Pattern::Tiles { .. } => {
                let [h, w] = self.frame();
                h * w * self.pixel()
            }
        }
    }

    /// Views of different processes overlap (the tile reader): read-only.
    pub fn overlapping(&self) -> bool {
        matches!(self, Pattern::Tiles { overlap, .. } if overlap[0] > 0 || overlap[1] > 0)
    }

    fn pixel(&self) -> u64 {
        match self {
            Pattern::Tiles { pixel, .. } => *pixel,
            _ => 1,
        }
    }

    /// Frame size in pixels, [height, width].
    fn frame(&self) -> [u64; 2] {
        match self {
            Pattern::Tiles { tile, grid, overlap, .. } => {
                [grid[0] * tile[0] - (grid[0] - 1) * overlap[0], grid[1] * tile[1] - (grid[1] - 1) * overlap[1]]
            }
            _ => [0, 0],
        }
    }

    /// Process `rank`'s filetype (displacement 0, byte etype).
    pub fn filetype(&self, procs: u64, rank: u64) -> Result<Datatype> {
        if let Some(p) = self.fixed_procs()
            && p != procs {
                return Err(invalid(format!("this pattern needs {p} processes, not {procs}")));
            }
        if rank >= procs {
            return Err(invalid(format!("rank {rank} outside 0..{procs}")));
        }
        let bytes = |n: u64| Datatype::contiguous(i(n), &Datatype::byte());
        match self {
            Pattern::Hpf1d { records, record, dist } => {
                Datatype::darray(i(procs), i(rank), &[i(*records)], &[*dist], &[i(procs)], Order::C, &bytes(*record)?)
            }
            Pattern::Hpf2d { rows, cols, record, dist, grid } => {
                Datatype::darray(i(procs), i(rank), &[i(*rows), i(*cols)], dist, &[i(grid[0]), i(grid[1])], Order::C, &bytes(*record)?)
            }
            Pattern::Btio { q, cell_x, cell_yz } => {
                let (a, b) = (rank / q, rank % q);
                let point = bytes(BTIO_POINT)?;
                let sizes = [i(q * cell_yz), i(q * cell_yz), i(q * cell_x)];
                let sub = [i(*cell_yz), i(*cell_yz), i(*cell_x)];
                // One cell per z slab k, on the diagonal: cells in slab order
                // keep the filetype's displacements non-decreasing.
                let cells = (0..*q)
                    .map(|k| {
                        let (ci, cj) = ((a + k) % q, (b + k) % q);
                        Datatype::subarray(&sizes, &sub, &[i(k * cell_yz), i(cj * cell_yz), i(ci * cell_x)], Order::C, &point)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let n = cells.len();
                let t = Datatype::structure(&vec![1; n], &vec![0; n], &cells)?;
                Datatype::resized(&t, 0, i(self.file_size()))
            }
            Pattern::Block3d { n, elem } => {
                let c = cube_root(procs).ok_or_else(|| invalid(format!("{procs} processes are not a cube")))?;
                let d = Distrib::Block(None);
                Datatype::darray(i(procs), i(rank), &[i(*n); 3], &[d; 3], &[i(c); 3], Order::C, &bytes(*elem)?)
            }
            Pattern::Flash { vars, blocks, nxb, .. } => {
                // Variable v's data: all processes' blocks in rank order.
                let chunk = i(blocks * nxb * nxb * nxb * 8);
                let t = Datatype::hvector(i(*vars), chunk, chunk * i(procs), &Datatype::byte())?;
                let t = Datatype::hindexed(&[1], &[chunk * i(rank)], &t)?;
                Datatype::resized(&t, 0, chunk * i(procs) * i(*vars))
            }
            Pattern::Tiles { tile, grid, overlap, pixel } => {
                let (r, c) = (rank / grid[1], rank % grid[1]);
                let [h, w] = self.frame();
                let starts = [i(r * (tile[0] - overlap[0])), i(c * (tile[1] - overlap[1]))];
                Datatype::subarray(&[i(h), i(w)], &[i(tile[0]), i(tile[1])], &starts, Order::C, &bytes(*pixel)?)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flatten::sort_and_coalesce;

    /// Every byte of the file is covered by exactly one process (or, for
    /// tiles, by at least one), and each process's regions are sorted.
    fn check_partition(p: &Pattern, procs: u64) {
        let mut all = Vec::new();
        let mut total = 0;
        for rank in 0..procs {
            let t = p.filetype(procs, rank).unwrap();
            let regions: Vec<(i64, u64)> = t.regions(0).collect();
            assert!(regions.windows(2).all(|w| w[0].0 + w[0].1 as i64 <= w[1].0), "{p:?} rank {rank}: regions sorted, disjoint");
            total += t.size();
            assert_eq!(t.extent() as u64, p.file_size_for(procs));
            all.extend(regions);
        }
        let covered = sort_and_coalesce(all);
        assert_eq!(covered, vec![(0, p.file_size_for(procs))], "{p:?}: the processes cover the file");
        if !p.overlapping() {
            assert_eq!(total, p.file_size_for(procs), "{p:?}: no byte is covered twice");
        }
    }

    #[test]
    fn patterns_partition_their_files() {
        check_partition(&Pattern::Hpf1d { records: 1000, record: 8, dist: Distrib::Cyclic(3) }, 4);
        check_partition(&Pattern::Hpf1d { records: 10, record: 8192, dist: Distrib::Block(None) }, 3);
        let d = [Distrib::Block(None), Distrib::Cyclic(1)];
        check_partition(&Pattern::Hpf2d { rows: 16, cols: 20, record: 8, dist: d, grid: [2, 2] }, 4);
        check_partition(&Pattern::btio(3, 4), 9);
        check_partition(&Pattern::Block3d { n: 10, elem: 4 }, 8);
        check_partition(&Pattern::tile_reader(), 6);
        check_partition(&Pattern::Flash { vars: 3, blocks: 2, nxb: 2, guard: 1 }, 3);
        for dims in Pattern::HPF_ALL {
            for (record, edge) in [(8, 10), (8192, 6), (8, 1)] {
                check_partition(&Pattern::hpf(dims, record, edge).unwrap(), 4);
            }
        }
    }

    #[test]
    fn hpf_patterns_follow_paper_001s_figure_1() {
        // Rank r's records of a 1x8 vector (1-D) or an 8x8 matrix (2-D), in
        // row-major element numbers.
        let owned = |dims: &str, rank: u64| -> Vec<i64> { Pattern::hpf(dims, 1, 8).unwrap().filetype(4, rank).unwrap().regions(0).flat_map(|(o, l)| o..o + l as i64).collect() };
        assert_eq!(owned("n", 0), (0..8).collect::<Vec<_>>(), "NONE: one process has it all");
        assert!(owned("n", 3).is_empty());
        assert_eq!(owned("b", 1), vec![2, 3]);
        assert_eq!(owned("c", 1), vec![1, 5]);
        // NONE/BLOCK: column blocks of 2, every row.
        assert_eq!(owned("nb", 2), (0..8).flat_map(|r| [r * 8 + 4, r * 8 + 5]).collect::<Vec<_>>());
        // BLOCK/NONE: row blocks of 2.
        assert_eq!(owned("bn", 3), (48..64).collect::<Vec<_>>());
        // CYCLIC/CYCLIC on a 2x2 grid: rank 1 = grid row 0, column 1.
        assert_eq!(owned("cc", 1), (0..8).step_by(2).flat_map(|r| (1..8).step_by(2).map(move |c| r * 8 + c)).collect::<Vec<_>>());
        // BLOCK/CYCLIC: rank 2 = grid row 1 (rows 4-7), even columns.
        assert_eq!(owned("bc", 2), (4..8).flat_map(|r| (0..8).step_by(2).map(move |c| r * 8 + c)).collect::<Vec<_>>());
        assert!(Pattern::hpf("x", 8, 8).is_err() && Pattern::hpf("bcb", 8, 8).is_err() && Pattern::hpf("b", 0, 8).is_err());
        assert!(Pattern::hpf("bc", 8, 1 << 32).is_err() && Pattern::hpf("c", 8192, u64::MAX / 2).is_err(), "sizes past a file offset");
        assert_eq!(Pattern::hpf_name("bc"), "BLOCK/CYCLIC");
    }

    #[test]
    fn flash_moves_interior_cells_in_file_order() {
        let p = Pattern::Flash { vars: 3, blocks: 2, nxb: 2, guard: 1 };
        let m = p.memtype().unwrap().unwrap();
        assert_eq!(m.size(), 3 * 2 * 8 * 8);
        // The first element: variable 0, block 0, interior cell (1,1,1) of a 4^3 block.
        let first = m.regions(0).next().unwrap();
        assert_eq!(first, (((4 + 1) * 4 + 1) * 3 * 8, 8));
        let f = p.filetype(4, 1).unwrap();
        assert_eq!(f.size(), m.size());
        assert_eq!(f.extent() as u64, p.file_size_for(4));
        // Variable-major: rank 1's first variable chunk follows rank 0's.
        assert_eq!(f.regions(0).next().unwrap(), (2 * 64, 2 * 64));
    }

    #[test]
    fn the_papers_figures() {
        // BTIO pieces are 3240 bytes, nested two deep (a cell ending a row
        // may touch the next slab's cell starting the next row: they join).
        let t = Pattern::btio(3, 2).filetype(9, 4).unwrap();
        let r: Vec<(i64, u64)> = t.regions(0).collect();
        assert!(r.iter().all(|r| r.1 % 3240 == 0));
        assert!(r.iter().filter(|r| r.1 == 3240).count() * 10 >= r.len() * 8);
        // The tile reader's frame is about 10.2 MiB.
        let f = Pattern::tile_reader().file_size();
        assert_eq!(f, 2532 * 1408 * 3);
        assert!((f as f64 / (1 << 20) as f64 - 10.2).abs() < 0.05);
        // 100^3 ints over 8 processes: 50^3 each.
        let b = Pattern::Block3d { n: 100, elem: 4 }.filetype(8, 5).unwrap();
        assert_eq!(b.size(), 50 * 50 * 50 * 4);
        assert!(Pattern::Block3d { n: 100, elem: 4 }.filetype(9, 0).is_err());
        assert!(Pattern::tile_reader().filetype(5, 0).is_err());
    }
}
