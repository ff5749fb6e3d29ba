//! The cost of the MPI-IO front end: the same contiguous pattern (each of
//! P processes writes its own file with `write_at` of one transfer size,
//! fsync'd, then reads it back with `read_at`) through Weft's MPI-IO
//! library and through the Rust API, in the same run, alternating which
//! goes first. Reads follow their writes, so both read from the servers'
//! page cache: warm against warm.
//!
//! With `--overlap` ([`overlap`]): how much of a nonblocking access hides
//! behind computation. Each rank posts all its transfers, computes for as
//! long as the I/O alone takes, then waits; 1.0 means the I/O was free,
//! 2.0 that nothing overlapped.

use crate::mpi::{number, MpiJob};
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

/// Checks the parameters; builds the MPI program and connects.
fn prepare(weft_bin: &Path, bc: &BenchCluster, p: &Params) -> Result<(MpiJob, weft_client::Client)> {
    if p.transfer == 0 || p.size == 0 || p.repeats == 0 || p.procs.is_empty() || p.procs.contains(&0) {
        bail!("size, transfer, repeats and every process count must be at least 1");
    }
    let job = MpiJob::prepare(&p.mpi, weft_bin, &bc.scratch.join("mpi"))?;
    let client = crate::connect(&bc.cluster_file)?;
    let _ = client.mkdir("/bench", 0o777);
    Ok((job, client))
}

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    let (job, client) = prepare(weft_bin, bc, p)?;
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

#[derive(Debug, Clone, Serialize)]
pub struct OverlapRow {
    pub mpi: String,
    pub procs: usize,
    pub op: &'static str,
    /// The I/O alone (posted, then waited for at once), seconds.
    pub io_s: f64,
    /// The computation alone, seconds.
    pub compute_s: f64,
    /// Posted, then the computation, then the wait, seconds.
    pub both_s: f64,
    /// `both_s` over the longer of the two (median of each round's): 1.0
    /// when the I/O is hidden completely.
    pub ratio: f64,
    /// What `ratio` is with no overlap at all: the sum over the longer.
    pub no_overlap: f64,
    /// The share of the shorter of the two that was hidden: 1.0 all, 0.0
    /// nothing.
    pub hidden: f64,
    /// The least `ratio` the CPUs allow: the CPU seconds of the I/O alone
    /// (the ranks' processes and the data servers) and of the compute,
    /// spread over every CPU this process may use, over the longer of the
    /// two. Where servers share the CPUs with the ranks (one machine) it
    /// bounds the overlap; on a cluster the servers' part is elsewhere.
    pub cpu_floor: f64,
}

/// Each process writes (then reads) its own file with one nonblocking call
/// per transfer through Weft's MPI-IO, alone and behind a computation of
/// the same length (`iorate ow|or`); writes fsync'd if `fsync`.
pub fn overlap(weft_bin: &Path, bc: &BenchCluster, p: &Params, fsync: bool, progress: &dyn Fn(&str)) -> Result<Vec<OverlapRow>> {
    let (job, client) = prepare(weft_bin, bc, p)?;
    let mut rows = Vec::new();
    for &procs in &p.procs {
        // Per op (write, read): [io, compute, both, ratio, no overlap,
        // hidden, floor] samples.
        let mut samples = [[(); 7].map(|_| Vec::new()), [(); 7].map(|_| Vec::new())];
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        for rep in 0..p.repeats {
            progress(&format!("overlap P={procs} round {}/{}", rep + 1, p.repeats));
            let prefix = format!("/bench/overlap-{}-", std::process::id());
            for (k, op) in ["ow", "or"].into_iter().enumerate() {
                let args = [op.to_string(), format!("weft:{prefix}"), p.size.to_string(), p.transfer.to_string(), u8::from(fsync).to_string()];
                let servers_before = crate::data_server_cpu_s(&client);
                let text = job.output(procs, &bc.cluster_file, true, &[], &args)?;
                if number(&text, "wrong_bytes")? != 0.0 {
                    bail!("the overlapped {op} pass left wrong bytes: {text}");
                }
                // The servers served four passes: a warm-up, I/O alone twice,
                // and behind the compute.
                let servers = (crate::data_server_cpu_s(&client) - servers_before) / 4.0;
                let [io, compute, both, io_cpu, compute_cpu] = ["io_ns", "compute_ns", "both_ns", "io_cpu_ns", "compute_cpu_ns"].map(|n| number(&text, n).map(|v| v / 1e9));
                let (io, compute, both) = (io?, compute?, both?);
                let longer = io.max(compute);
                let floor = ((io_cpu? + servers + compute_cpu?) / cpus / longer).max(1.0);
                let shorter = io.min(compute);
                let hidden = ((io + compute - both) / shorter).clamp(0.0, 1.0);
                for (v, s) in [io, compute, both, both / longer, (io + compute) / longer, hidden, floor].into_iter().zip(&mut samples[k]) {
                    s.push(v);
                }
            }
            for r in 0..procs {
                client.unlink(&format!("{prefix}{r}"))?;
            }
        }
        for (k, op) in ["write", "read"].into_iter().enumerate() {
            let [io, compute, both, ratio, no_overlap, hidden, cpu_floor] = std::mem::take(&mut samples[k]).map(median);
            rows.push(OverlapRow { mpi: p.mpi.clone(), procs, op, io_s: io, compute_s: compute, both_s: both, ratio, no_overlap, hidden, cpu_floor });
        }
    }
    Ok(rows)
}

/// The MPI-IO front end against the Rust API, as `weft bench mpiio-cost`
/// runs it.
pub struct MpiioCost<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub params: Params,
}

impl crate::experiment::Experiment for MpiioCost<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "mpiio-cost"
    }

    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.exe, self.cluster, &self.params, progress)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        use crate::experiment::{f1, human_bytes};
        let p = &self.params;
        let table = rows.iter().map(|r| vec![r.procs.to_string(), r.op.to_string(), f1(r.mpiio_mb_s), f1(r.rust_mb_s), format!("{:.2}", r.ratio)]).collect();
        crate::experiment::Report::table(
            format!("MPI-IO front end ({}) vs Rust API, file per process, {} each in {} calls, fsync'd writes, warm reads, median of {}", p.mpi, human_bytes(p.size), human_bytes(p.transfer), p.repeats),
            &["procs", "op", "MPI-IO MB/s", "Rust API MB/s", "MPI-IO/Rust"],
            table,
        )
    }
}

/// Nonblocking MPI-IO behind computation, as `weft bench mpiio-cost
/// --overlap` runs it.
pub struct MpiioOverlap<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub params: Params,
}

impl crate::experiment::Experiment for MpiioOverlap<'_> {
    type Row = OverlapRow;

    fn name(&self) -> &'static str {
        "mpiio-overlap"
    }

    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<OverlapRow>> {
        overlap(self.exe, self.cluster, &self.params, false, progress)
    }

    fn report(&self, rows: &[OverlapRow]) -> crate::experiment::Report {
        use crate::experiment::human_bytes;
        let p = &self.params;
        let table = rows
            .iter()
            .map(|r| vec![r.procs.to_string(), r.op.to_string(), format!("{:.3}", r.io_s), format!("{:.3}", r.compute_s), format!("{:.3}", r.both_s), format!("{:.2}", r.ratio), format!("{:.2}", r.no_overlap), format!("{:.0}%", r.hidden * 100.0), format!("{:.2}", r.cpu_floor)])
            .collect();
        crate::experiment::Report::table(
            format!("Nonblocking MPI-IO ({}) behind computation, file per process, {} each in {} calls posted at once, writes not fsync'd, reads warm, median of {}", p.mpi, human_bytes(p.size), human_bytes(p.transfer), p.repeats),
            &["procs", "op", "I/O s", "compute s", "both s", "both/longer", "no overlap", "hidden", "CPU floor"],
            table,
        )
    }
}
