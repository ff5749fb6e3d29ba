//! The cost of the MPI-IO front end: the same contiguous pattern (each of
//! P processes writes its own file with `write_at` of one transfer size,
//! fsync'd, then reads it back with `read_at`) through Weft's MPI-IO
//! library and through the Rust API, in the same run, alternating which
//! goes first. Reads follow their writes, so both read from the servers'
//! page cache: warm against warm.

use crate::mpi::MpiJob;
use crate::workers::run_workers;
use crate::{median, BenchCluster};
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct Params {
    pub mpi: String,
    pub procs: Vec<usize>,
    pub size: u64,
    pub transfer: u64,
    pub repeats: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub mpi: String,
    pub procs: usize,
    pub op: &'static str,
    pub mpiio_mb_s: f64,
    pub rust_mb_s: f64,
    /// MPI-IO over the Rust API: 1.0 means the front end costs nothing.
    pub ratio: f64,
}

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    if p.transfer == 0 || p.size == 0 || p.repeats == 0 || p.procs.is_empty() || p.procs.contains(&0) {
        bail!("size, transfer, repeats and every process count must be at least 1");
    }
    let job = MpiJob::prepare(&p.mpi, weft_bin, &bc.scratch.join("mpi"))?;
    let client = crate::connect(&bc.cluster_file)?;
    let _ = client.mkdir("/bench", 0o777);
    let mut rows = Vec::new();
    for &procs in &p.procs {
        // [write, read] samples of each front end.
        let (mut mpiio, mut rust) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
        for rep in 0..p.repeats {
            progress(&format!("P={procs} round {}/{}", rep + 1, p.repeats));
            let mpi_first = rep % 2 == 0;
            for side in if mpi_first { [true, false] } else { [false, true] } {
                let prefix = format!("/bench/cost-{}-{}-", std::process::id(), if side { "mpi" } else { "rust" });
                let bytes = (procs as u64 * p.size) as f64;
                for (k, op) in ["w", "r"].into_iter().enumerate() {
                    let secs = if side {
                        let args = [op.to_string(), format!("weft:{prefix}"), p.size.to_string(), p.transfer.to_string(), "1".into()];
                        job.run(procs, &bc.cluster_file, true, &args)?
                    } else {
                        let per_rank: Vec<Vec<String>> = (0..procs)
                            .map(|r| {
                                let mut a: Vec<String> = ["cw-worker", "--target", "weft", "--path"].map(String::from).to_vec();
                                a.extend([format!("{prefix}{r}"), "--size".into(), p.size.to_string(), "--transfer".into(), p.transfer.to_string(), "--fsync".into()]);
                                if op == "r" {
                                    a.push("--read".into());
                                }
                                a
                            })
                            .collect();
                        run_workers(weft_bin, bc, &per_rank, &[])?
                    };
                    let rate = bytes / secs / 1e6;
                    if side { mpiio[k].push(rate) } else { rust[k].push(rate) }
                }
                for r in 0..procs {
                    client.unlink(&format!("{prefix}{r}"))?;
                }
            }
        }
        for (k, op) in ["write", "read"].into_iter().enumerate() {
            let (m, r) = (median(std::mem::take(&mut mpiio[k])), median(std::mem::take(&mut rust[k])));
            rows.push(Row { mpi: p.mpi.clone(), procs, op, mpiio_mb_s: m, rust_mb_s: r, ratio: m / r });
        }
    }
    Ok(rows)
}
