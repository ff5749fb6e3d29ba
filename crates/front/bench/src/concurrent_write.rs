//! Paper 002's concurrent-write benchmark: P processes each create and write
//! their own file of S bytes in transfers of t; the aggregate rate is the
//! total bytes over the slowest process's time (the paper's MPI_Reduce max).
//! The same pattern is written to the local file system on the same disk in
//! the same run, and the two are compared.
//!
//! With an MPI (`--mpi`), as the paper ran it: an MPI program writes
//! through MPI-IO (`MPI_COMM_SELF` per file, `MPI_Reduce(MAX)` of the
//! times), once on `weft:` files with Weft's MPI-IO library and once on
//! local files through the MPI's own MPI-IO.

use crate::mpi::MpiJob;
use crate::workers::{run_workers, timed};
use crate::{median, BenchCluster};
use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Params {
    pub procs: Vec<usize>,
    pub size: u64,
    pub transfer: u64,
    /// Which variants to run: without and/or with fsync before close.
    pub fsync: Vec<bool>,
    /// Runs per point; the median is reported.
    pub repeats: usize,
    /// Through MPI-IO with this MPI (`openmpi`, `mpich`) instead of the Rust API.
    pub mpi: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub procs: usize,
    pub size_bytes: u64,
    pub fsync: bool,
    pub weft_mb_s: f64,
    pub local_mb_s: f64,
    pub ratio: f64,
    /// The MPI whose MPI-IO both sides went through; None for the Rust API.
    pub mpi: Option<String>,
}

/// Where a worker writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Weft,
    Local,
}

/// Runs the whole sweep.
pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params) -> Result<Vec<Row>> {
    if p.transfer == 0 || p.size == 0 || p.repeats == 0 || p.procs.is_empty() || p.procs.contains(&0) {
        bail!("size, transfer, repeats and every process count must be at least 1");
    }
    let steps = (p.fsync.len() * p.procs.len() * p.repeats * 2) as u64;
    let bar = ProgressBar::new(steps);
    bar.set_style(ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len}").expect("valid template"));
    let client = crate::connect(&bc.cluster_file)?;
    let _ = client.mkdir("/bench", 0o777);
    let job = p.mpi.as_deref().map(|m| MpiJob::prepare(m, weft_bin, &bc.scratch.join("mpi"))).transpose()?;
    let mut rows = Vec::new();
    for &fsync in &p.fsync {
        for &procs in &p.procs {
            let (mut weft, mut local) = (Vec::new(), Vec::new());
            for rep in 0..p.repeats {
                // Alternate which side goes first so drift hits both alike.
                let order = if rep % 2 == 0 { [Target::Weft, Target::Local] } else { [Target::Local, Target::Weft] };
                for t in order {
                    bar.set_message(format!("P={procs} fsync={fsync} {t:?}"));
                    let secs = match &job {
                        Some(j) => run_mpi(j, bc, &client, t, procs, p, fsync)?,
                        None => run_once(weft_bin, bc, &client, t, procs, p, fsync)?,
                    };
                    let rate = (procs as u64 * p.size) as f64 / secs / 1e6;
                    if t == Target::Weft { weft.push(rate) } else { local.push(rate) }
                    bar.inc(1);
                }
            }
            let (w, l) = (median(weft), median(local));
            rows.push(Row { procs, size_bytes: p.size, fsync, weft_mb_s: w, local_mb_s: l, ratio: w / l, mpi: p.mpi.clone() });
        }
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// One point: P workers writing their own files; the slowest time.
fn run_once(weft_bin: &Path, bc: &BenchCluster, client: &weft_client::Client, t: Target, procs: usize, p: &Params, fsync: bool) -> Result<f64> {
    let path_of = |rank: usize| -> String {
        match t {
            Target::Weft => format!("/bench/cw-{}-{rank}", std::process::id()),
            Target::Local => bc.scratch.join(format!("cw-{rank}")).display().to_string(),
        }
    };
    let args: Vec<Vec<String>> = (0..procs)
        .map(|rank| {
            let mut a: Vec<String> = ["cw-worker", "--target", if t == Target::Weft { "weft" } else { "local" }].map(String::from).to_vec();
            a.extend(["--path".into(), path_of(rank), "--size".into(), p.size.to_string(), "--transfer".into(), p.transfer.to_string()]);
            if fsync {
                a.push("--fsync".into());
            }
            a
        })
        .collect();
    let slowest = run_workers(weft_bin, bc, &args, &[])?;
    for rank in 0..procs {
        match t {
            Target::Weft => client.unlink(&path_of(rank))?,
            Target::Local => std::fs::remove_file(path_of(rank))?,
        }
    }
    Ok(slowest)
}

/// One point through MPI-IO: one MPI job of `procs` ranks.
fn run_mpi(job: &MpiJob, bc: &BenchCluster, client: &weft_client::Client, t: Target, procs: usize, p: &Params, fsync: bool) -> Result<f64> {
    let prefix = match t {
        Target::Weft => format!("weft:/bench/cw-mpi-{}-", std::process::id()),
        Target::Local => bc.scratch.join("cw-mpi-").display().to_string(),
    };
    let args = ["w".to_string(), prefix.clone(), p.size.to_string(), p.transfer.to_string(), u8::from(fsync).to_string()];
    let secs = job.run(procs, &bc.cluster_file, t == Target::Weft, &args)?;
    for rank in 0..procs {
        match t {
            Target::Weft => client.unlink(&format!("{}{rank}", prefix.trim_start_matches("weft:")))?,
            Target::Local => std::fs::remove_file(format!("{prefix}{rank}"))?,
        }
    }
    Ok(secs)
}

/// The worker process: waits for "go" on stdin, then creates its file,
/// writes it, optionally fsyncs, closes, and prints the elapsed time. With
/// `read`, it opens the file (written before) and reads it instead.
pub fn worker(t: Target, path: &str, size: u64, transfer: u64, fsync: bool, read: bool) -> Result<()> {
    let mut buf: Vec<u8> = (0..transfer).map(|i| (i % 251) as u8 + 1).collect();
    let client = match t {
        Target::Weft => Some(crate::connect(&crate::locate()?)?),
        Target::Local => None,
    };
    timed(|| {
        match &client {
            Some(c) if read => {
                let f = c.open(path, false)?;
                let mut off = 0;
                while off < size {
                    let n = transfer.min(size - off) as usize;
                    f.read_at(off, &mut buf[..n])?;
                    off += n as u64;
                }
                f.close()?;
            }
            Some(c) => {
                let f = c.create(path, weft_client::CreateOptions::default())?;
                let mut off = 0;
                while off < size {
                    let n = transfer.min(size - off) as usize;
                    f.write_at(off, &buf[..n])?;
                    off += n as u64;
                }
                if fsync {
                    f.fsync()?;
                }
                f.close()?;
            }
            None if read => bail!("the local worker only writes"),
            None => {
                use std::os::unix::fs::FileExt;
                let f = std::fs::File::create(path)?;
                let mut off = 0;
                while off < size {
                    let n = transfer.min(size - off) as usize;
                    f.write_all_at(&buf[..n], off)?;
                    off += n as u64;
                }
                if fsync {
                    f.sync_all()?;
                    // A new file is durable once its directory entry is, as on Weft's servers.
                    std::fs::File::open(PathBuf::from(path).parent().unwrap_or(Path::new(".")))?.sync_all()?;
                }
            }
        }
        Ok(())
    })
}

/// Paper 002's experiment as `weft bench concurrent-write` runs it.
pub struct ConcurrentWrite<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub params: Params,
}

impl crate::experiment::Experiment for ConcurrentWrite<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "concurrent-write"
    }

    fn run(&mut self, _progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.exe, self.cluster, &self.params)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        use crate::experiment::{f1, human_bytes};
        let p = &self.params;
        let through = p.mpi.as_ref().map_or(String::new(), |m| format!(" through {m}'s MPI-IO"));
        let table = rows.iter().map(|r| vec![r.procs.to_string(), human_bytes(r.size_bytes), r.fsync.to_string(), f1(r.weft_mb_s), f1(r.local_mb_s), format!("{:.2}", r.ratio)]).collect();
        crate::experiment::Report::table(
            format!("Concurrent write, file per process (paper 002){through}, transfers of {}, median of {}", human_bytes(p.transfer), p.repeats),
            &["procs", "size/proc", "fsync", "weft MB/s", "local MB/s", "weft/local"],
            table,
        )
        .note("(paper 002 saw 416-980 MB/s on NAS and Panasas and ~4 GB/s on Lustre at 32-768 procs)")
    }
}
