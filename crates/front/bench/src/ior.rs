//! IOR's shapes through MPI-IO (issue 27's `weft bench ior`): Weft's
//! MPI-IO library on `weft:` files beside the MPI's own MPI-IO on a local
//! directory of the same disk (Open MPI: OMPIO and its ROMIO component;
//! MPICH: ROMIO), in the same run, under each MPI asked for.
//!
//! The MPI program is `ior.c` (IOR's MPIIO back end's calls: explicit
//! offsets, independent or `_all`). Writes end with `MPI_File_sync` (IOR's
//! `-e`); a read follows its write at once (warm: the servers' and the
//! local file's pages are in memory) and again after the page cache is
//! dropped (cold, as root). Every read checks its bytes. Implementations
//! take turns going first, round by round; medians are reported.

use crate::mpi::{MpiJob, Program};
use crate::{median, BenchCluster};
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::Path;

/// IOR's program.
pub const IOR: Program = Program { name: "ior", source: include_str!("../../mpiio/bench/ior.c") };

/// IO500's ior-hard transfer.
pub const HARD_TRANSFER: u64 = 47_008;

/// One IOR shape: how ranks lay out their transfers, how large, whether
/// collective.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub name: &'static str,
    /// `fpp`, `shared` or `strided` (ior.c's SHAPE).
    layout: &'static str,
    transfer: u64,
    collective: bool,
}

/// Every shape, IOR's common runs: ior-easy (file per process), a shared
/// file in blocks and strided, ior-hard, independent and collective.
pub const SHAPES: [Shape; 6] = [
    Shape { name: "fpp-1m", layout: "fpp", transfer: 1 << 20, collective: false },
    Shape { name: "shared-1m", layout: "shared", transfer: 1 << 20, collective: false },
    Shape { name: "strided-1m", layout: "strided", transfer: 1 << 20, collective: false },
    Shape { name: "strided-1m-coll", layout: "strided", transfer: 1 << 20, collective: true },
    Shape { name: "hard", layout: "strided", transfer: HARD_TRANSFER, collective: false },
    Shape { name: "hard-coll", layout: "strided", transfer: HARD_TRANSFER, collective: true },
];

/// The shapes named in `list` (comma-separated; `all` for every one).
pub fn shapes(list: &str) -> Result<Vec<Shape>> {
    if list == "all" {
        return Ok(SHAPES.to_vec());
    }
    list.split(',')
        .map(|n| SHAPES.iter().copied().find(|s| s.name == n).ok_or_else(|| anyhow::anyhow!("unknown shape {n:?}: use {} or all", SHAPES.map(|s| s.name).join(", "))))
        .collect()
}

#[derive(Debug, Clone)]
pub struct Params {
    /// `openmpi`, `mpich` or both.
    pub mpis: Vec<String>,
    /// Ranks (MPICH: capped at the cores, it busy-polls).
    pub procs: usize,
    /// Bytes per rank (rounded down to whole transfers).
    pub block: u64,
    pub shapes: Vec<Shape>,
    pub repeats: usize,
    /// Collective shapes also with `weft_coll=server` and `two_phase`.
    pub forced: bool,
}

/// One shape and op under one MPI: MB/s of each implementation.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub shape: &'static str,
    /// `write` (fsync'd), `read-warm` or `read-cold`.
    pub op: &'static str,
    pub mpi: String,
    pub procs: usize,
    pub transfer: u64,
    pub weft_mb_s: f64,
    pub ompio_mb_s: Option<f64>,
    pub romio_mb_s: f64,
    /// Weft with `weft_coll=server` / `two_phase` forced (collective
    /// shapes, with `--forced`).
    pub weft_server_mb_s: Option<f64>,
    pub weft_two_phase_mb_s: Option<f64>,
    /// Weft over the faster of OMPIO and ROMIO.
    pub ratio: f64,
    /// `read-cold` only: whether the page cache could be dropped (root).
    pub cold: bool,
}

/// One implementation: its name, whether it is Weft's, the hint it sets
/// and extra `mpiexec` arguments.
struct Impl {
    name: &'static str,
    weft: bool,
    hint: &'static str,
    mpiexec: &'static [&'static str],
}

fn impls(mpi: &str, shape: &Shape, forced: bool) -> Vec<Impl> {
    let mut v = vec![Impl { name: "weft", weft: true, hint: "-", mpiexec: &[] }];
    if forced && shape.collective {
        v.push(Impl { name: "weft-server", weft: true, hint: "weft_coll=server", mpiexec: &[] });
        v.push(Impl { name: "weft-two-phase", weft: true, hint: "weft_coll=two_phase", mpiexec: &[] });
    }
    if mpi == "openmpi" {
        v.push(Impl { name: "ompio", weft: false, hint: "-", mpiexec: &["--mca", "io", "ompio"] });
        v.push(Impl { name: "romio", weft: false, hint: "-", mpiexec: &["--mca", "io", "romio321"] });
    } else {
        v.push(Impl { name: "romio", weft: false, hint: "-", mpiexec: &[] });
    }
    v
}

const OPS: [&str; 3] = ["write", "read-warm", "read-cold"];

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    if p.procs == 0 || p.repeats == 0 || p.shapes.is_empty() || p.mpis.is_empty() {
        bail!("procs, repeats, shapes and MPIs must be at least 1");
    }
    let client = crate::connect(&bc.cluster_file)?;
    let _ = client.mkdir("/bench", 0o777);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut rows = Vec::new();
    for mpi in &p.mpis {
        let mut job = MpiJob::prepare_program(mpi, weft_bin, &bc.scratch.join("mpi"), &IOR)?;
        // IOR measures MPI-IO as a user on this node gets it, beside the
        // local file system: with the library's default, local reads.
        job.local_reads = true;
        let procs = if mpi == "mpich" { p.procs.min(cores) } else { p.procs };
        for shape in &p.shapes {
            let block = p.block / shape.transfer * shape.transfer;
            if block == 0 {
                bail!("--block {} is less than one {}-byte transfer of {}", p.block, shape.transfer, shape.name);
            }
            let bytes = (block * procs as u64) as f64;
            let impls = impls(mpi, shape, p.forced);
            // samples[impl][op]
            let mut samples = vec![[Vec::new(), Vec::new(), Vec::new()]; impls.len()];
            let mut cold = true;
            for rep in 0..p.repeats {
                for k in 0..impls.len() {
                    let i = (k + rep) % impls.len();
                    let im = &impls[i];
                    progress(&format!("{mpi} {} round {}/{} {}", shape.name, rep + 1, p.repeats, im.name));
                    let name = format!("ior-{}-{}", std::process::id(), im.name);
                    let path = if im.weft { format!("weft:/bench/{name}") } else { bc.scratch.join(&name).display().to_string() };
                    let args = |op: &str| [op, shape.layout, &path, &block.to_string(), &shape.transfer.to_string(), if shape.collective { "1" } else { "0" }, im.hint].map(String::from);
                    let w = job.run_with(procs, &bc.cluster_file, im.weft, im.mpiexec, &args("w"))?;
                    let warm = job.run_with(procs, &bc.cluster_file, im.weft, im.mpiexec, &args("r"))?;
                    cold &= crate::sched::drop_caches();
                    let c = job.run_with(procs, &bc.cluster_file, im.weft, im.mpiexec, &args("r"))?;
                    for (s, t) in samples[i].iter_mut().zip([w, warm, c]) {
                        s.push(bytes / t / 1e6);
                    }
                    remove(&client, shape, procs, &path)?;
                }
            }
            let of = |name: &str, op: usize| impls.iter().position(|im| im.name == name).map(|i| median(samples[i][op].clone()));
            for (k, op) in OPS.into_iter().enumerate() {
                let weft = of("weft", k).expect("weft always runs");
                let ompio = of("ompio", k);
                let romio = of("romio", k).expect("romio always runs");
                let best = ompio.map_or(romio, |o| o.max(romio));
                rows.push(Row {
                    shape: shape.name,
                    op,
                    mpi: mpi.clone(),
                    procs,
                    transfer: shape.transfer,
                    weft_mb_s: weft,
                    ompio_mb_s: ompio,
                    romio_mb_s: romio,
                    weft_server_mb_s: of("weft-server", k),
                    weft_two_phase_mb_s: of("weft-two-phase", k),
                    ratio: weft / best,
                    cold: op == "read-cold" && cold,
                });
            }
        }
    }
    Ok(rows)
}

/// Removes a run's file (or, file per process, every rank's).
fn remove(client: &weft_client::Client, shape: &Shape, procs: usize, path: &str) -> Result<()> {
    let names: Vec<String> = if shape.layout == "fpp" { (0..procs).map(|r| format!("{path}.{r}")).collect() } else { vec![path.to_string()] };
    for n in names {
        match n.strip_prefix("weft:") {
            Some(p) => client.unlink(p)?,
            None => std::fs::remove_file(&n)?,
        }
    }
    Ok(())
}

/// IOR's shapes as `weft bench ior` runs them.
pub struct Ior<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub params: Params,
}

/// What Weft aims at for `op` (issue 27): writes and cold reads at least
/// even with the faster MPI-IO, warm reads half (the local page cache is
/// the limit).
fn goal(op: &str) -> f64 {
    if op == "read-warm" { 0.5 } else { 1.0 }
}

impl crate::experiment::Experiment for Ior<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "ior"
    }

    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.exe, self.cluster, &self.params, progress)
    }

    /// Weft over the faster of the MPI's own, a bar per shape, op and MPI.
    fn plots(&self, stem: &Path, rows: &[Row]) -> Result<Option<Vec<std::path::PathBuf>>> {
        let bars: Vec<crate::plot::Bar> = rows.iter().map(|r| crate::plot::Bar { name: format!("{} {} {}", r.shape, r.op, r.mpi), value: r.ratio, goal: Some(goal(r.op)) }).collect();
        crate::plot::write_bars(stem, "IOR shapes: Weft's MPI-IO / the faster of OMPIO and ROMIO on a local directory", "ratio (MB/s)", &bars, 1.0).map(Some)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        let p = &self.params;
        let f = |x: Option<f64>| x.map_or("-".to_string(), crate::experiment::f1);
        let table = rows
            .iter()
            .map(|r| {
                let op = if r.op == "read-cold" && !r.cold { "read (not cold: no root)".to_string() } else { r.op.to_string() };
                vec![r.shape.to_string(), op, r.mpi.clone(), r.procs.to_string(), crate::experiment::f1(r.weft_mb_s), f(r.ompio_mb_s), crate::experiment::f1(r.romio_mb_s), format!("{:.2}x", r.ratio), format!("{:.1}x", goal(r.op)), f(r.weft_server_mb_s), f(r.weft_two_phase_mb_s)]
            })
            .collect();
        crate::experiment::Report::table(
            format!("IOR shapes through MPI-IO, {} bytes per rank, MB/s, median of {}", p.block, p.repeats),
            &["shape", "op", "mpi", "procs", "weft", "ompio", "romio", "ratio", "goal", "weft server", "weft two-phase"],
            table,
        )
        .note("ratio: Weft over the faster of OMPIO and ROMIO (both on a local directory of the same disk); writes end with MPI_File_sync")
        .note("read-warm follows its write at once; read-cold after the page cache is dropped (Weft's servers' files too)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_found_by_name_and_unknown_ones_refused() {
        assert_eq!(shapes("all").unwrap().len(), SHAPES.len());
        let two = shapes("hard,fpp-1m").unwrap();
        assert_eq!(two.iter().map(|s| s.name).collect::<Vec<_>>(), ["hard", "fpp-1m"]);
        assert!(shapes("hard,nope").is_err());
        // ior.c requires transfers of whole 8-byte words.
        assert!(SHAPES.iter().all(|s| s.transfer % 8 == 0));
    }
}
