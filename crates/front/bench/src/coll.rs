//! Collective I/O against the MPI libraries' own (issue 10's `weft bench
//! coll`, ROMIO's coll_perf pattern): an N^3 int array in a 3-D block
//! distribution written with `write_all` + sync and read with `read_all`,
//! through Weft's MPI-IO library (two-phase, and independent list I/O)
//! and, in the same run, on a local file through the MPI's own MPI-IO
//! (Open MPI: OMPIO and its ROMIO component; MPICH: ROMIO). Reads are cold
//! where the page cache can be dropped (as root): every implementation's
//! file, Weft's servers' objects included, is read from the disk.

use crate::mpi::{MpiJob, COLL_PERF};
use crate::{median, BenchCluster};
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct Params {
    pub mpi: String,
    pub procs: usize,
    /// Array edges N (N^3 ints).
    pub sizes: Vec<usize>,
    pub repeats: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub workload: String,
    pub procs: usize,
    pub op: &'static str,
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    pub mb_s: f64,
    /// Reads from the disk (the page cache was dropped before each).
    pub cold: bool,
}

/// One implementation: its name, whether it is Weft's, the
/// `romio_cb_*` hint (`server`: `weft_coll=server` instead), and extra
/// `mpiexec` arguments.
struct Impl {
    name: &'static str,
    weft: bool,
    cb: &'static str,
    mpiexec: &'static [&'static str],
}

fn impls(mpi: &str) -> Vec<Impl> {
    let mut v = vec![
        Impl { name: "weft-two-phase", weft: true, cb: "enable", mpiexec: &[] },
        Impl { name: "weft-independent", weft: true, cb: "disable", mpiexec: &[] },
        Impl { name: "weft-server", weft: true, cb: "server", mpiexec: &[] },
    ];
    if mpi == "openmpi" {
        v.push(Impl { name: "ompio", weft: false, cb: "-", mpiexec: &["--mca", "io", "ompio"] });
        v.push(Impl { name: "romio", weft: false, cb: "-", mpiexec: &["--mca", "io", "romio321"] });
    } else {
        v.push(Impl { name: "mpich-romio", weft: false, cb: "-", mpiexec: &[] });
    }
    v
}

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    if p.procs == 0 || p.sizes.is_empty() || p.sizes.contains(&0) || p.repeats == 0 {
        bail!("procs, sizes and repeats must be at least 1");
    }
    let job = MpiJob::prepare_program(&p.mpi, weft_bin, &bc.scratch.join("mpi"), &COLL_PERF)?;
    let client = crate::connect(&bc.cluster_file)?;
    let _ = client.mkdir("/bench", 0o777);
    let impls = impls(&p.mpi);
    let mut rows = Vec::new();
    for &n in &p.sizes {
        let bytes = (n as f64).powi(3) * 4.0;
        let mut samples = vec![[Vec::new(), Vec::new()]; impls.len()];
        let mut cold = true;
        for rep in 0..p.repeats {
            // Rotate which implementation goes first.
            for k in 0..impls.len() {
                let i = (k + rep) % impls.len();
                let im = &impls[i];
                progress(&format!("N={n} round {}/{} {}", rep + 1, p.repeats, im.name));
                let path = if im.weft { format!("weft:/bench/coll-{}-{}", std::process::id(), im.name) } else { bc.scratch.join(format!("coll-{}", im.name)).display().to_string() };
                let args = |op: &str| [op.to_string(), path.clone(), n.to_string(), im.cb.to_string()];
                let w = job.run_with(p.procs, &bc.cluster_file, im.weft, im.mpiexec, &args("w"))?;
                cold &= crate::sched::drop_caches();
                let r = job.run_with(p.procs, &bc.cluster_file, im.weft, im.mpiexec, &args("r"))?;
                samples[i][0].push(bytes / w / 1e6);
                samples[i][1].push(bytes / r / 1e6);
                if im.weft {
                    client.unlink(path.trim_start_matches("weft:"))?;
                } else {
                    std::fs::remove_file(&path)?;
                }
            }
        }
        for (im, s) in impls.iter().zip(samples) {
            for (k, op) in ["write", "read"].into_iter().enumerate() {
                rows.push(Row { workload: format!("coll_perf-{n}"), procs: p.procs, op, implementation: im.name, mb_s: median(s[k].clone()), cold: op == "read" && cold });
            }
        }
    }
    Ok(rows)
}

/// Collective I/O (coll_perf) as `weft bench coll` runs it.
pub struct Coll<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub params: Params,
}

impl crate::experiment::Experiment for Coll<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "coll"
    }

    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.exe, self.cluster, &self.params, progress)
    }

    /// MB/s by array edge, a series per implementation.
    fn plots(&self, stem: &Path, rows: &[Row]) -> Result<Option<Vec<std::path::PathBuf>>> {
        let p = &self.params;
        let panels: Vec<crate::plot::Panel> = ["write", "read"]
            .iter()
            .map(|op| {
                let mut names: Vec<&str> = Vec::new();
                for r in rows {
                    if !names.contains(&r.implementation) {
                        names.push(r.implementation);
                    }
                }
                let series = names
                    .into_iter()
                    .map(|im| crate::plot::Series {
                        name: im.to_string(),
                        points: rows.iter().filter(|r| r.op == *op && r.implementation == im).map(|r| (r.workload.trim_start_matches("coll_perf-").parse::<f64>().unwrap_or(0.0), r.mb_s)).collect(),
                    })
                    .collect();
                crate::plot::Panel { title: format!("coll_perf {op} ({} ranks, {})", p.procs, p.mpi), x_label: "array edge N (N^3 ints)".into(), y_label: "MB/s".into(), series }
            })
            .collect();
        crate::plot::write(stem, &panels).map(Some)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        let p = &self.params;
        let kind = |r: &Row| if r.op != "read" { "fsync'd" } else if r.cold { "cold" } else { "warm" };
        let table = rows.iter().map(|r| vec![r.workload.clone(), r.procs.to_string(), r.op.to_string(), r.implementation.to_string(), crate::experiment::f1(r.mb_s), kind(r).to_string()]).collect();
        crate::experiment::Report::table(
            format!("Collective I/O, 3-D block darray (coll_perf), {} ranks of {}, median of {}", p.procs, p.mpi, p.repeats),
            &["workload", "procs", "op", "impl", "MB/s", "kind"],
            table,
        )
    }
}
