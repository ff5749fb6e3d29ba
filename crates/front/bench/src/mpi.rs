//! MPI jobs for the benchmarks: the MPI-IO program (`iorate.c`, compiled
//! here with the MPI's `mpicc`), run under `mpiexec` on `weft:` files with
//! Weft's MPI-IO library preloaded, or on local files through the MPI's
//! own MPI-IO (without the library), in the same run.

use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// An MPI benchmark program: its name and C source.
pub struct Program {
    pub name: &'static str,
    pub source: &'static str,
}

/// File per process, `write_at`/`read_at` (paper 002).
pub const IORATE: Program = Program { name: "iorate", source: include_str!("../../mpiio/bench/iorate.c") };
/// A 3-D block darray, `write_all`/`read_all` (ROMIO's coll_perf).
pub const COLL_PERF: Program = Program { name: "coll_perf", source: include_str!("../../mpiio/bench/coll_perf.c") };

/// One installed MPI with the benchmark program built for it.
pub struct MpiJob {
    pub mpi: String,
    exe: PathBuf,
    lib: PathBuf,
    /// Ranks on a server's node read its objects themselves (the library's
    /// default); false, unless `WEFT_LOCAL_READS` is set, sends reads
    /// through the servers, as from the papers' compute nodes.
    pub local_reads: bool,
}

impl MpiJob {
    /// Finds Weft's MPI-IO library for `mpi` beside `weft_bin` and compiles
    /// the benchmark program into `scratch`.
    pub fn prepare(mpi: &str, weft_bin: &Path, scratch: &Path) -> Result<Self> {
        Self::prepare_program(mpi, weft_bin, scratch, &IORATE)
    }

    pub fn prepare_program(mpi: &str, weft_bin: &Path, scratch: &Path, program: &Program) -> Result<Self> {
        if mpi != "openmpi" && mpi != "mpich" {
            bail!("unknown MPI {mpi:?}: use openmpi or mpich");
        }
        let dir = weft_bin.parent().context("weft binary has no directory")?;
        let lib = dir.join(format!("libweft-mpiio-{mpi}.so"));
        if !lib.is_file() {
            bail!("{} is not built: run scripts/build-mpiio.sh{}", lib.display(), if dir.ends_with("release") { " --release" } else { "" });
        }
        std::fs::create_dir_all(scratch)?;
        let src = scratch.join(format!("{}.c", program.name));
        std::fs::write(&src, program.source)?;
        let exe = scratch.join(format!("{}-{mpi}", program.name));
        let cc = format!("mpicc.{mpi}");
        let out = Command::new(&cc).args(["-O2", "-o"]).arg(&exe).arg(&src).output().with_context(|| format!("cannot run {cc} (install the MPI's development package)"))?;
        if !out.status.success() {
            bail!("{cc} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(MpiJob { mpi: mpi.into(), exe, lib, local_reads: false })
    }

    /// Runs the program as `procs` ranks (`args` after the program name);
    /// with `weft`, the library is preloaded. Returns the slowest rank's
    /// seconds.
    pub fn run(&self, procs: usize, cluster_file: &Path, weft: bool, args: &[String]) -> Result<f64> {
        self.run_with(procs, cluster_file, weft, &[], args)
    }

    /// [`MpiJob::run`] with extra `mpiexec` arguments (`--mca io romio321`).
    pub fn run_with(&self, procs: usize, cluster_file: &Path, weft: bool, mpiexec_args: &[&str], args: &[String]) -> Result<f64> {
        let text = self.output(procs, cluster_file, weft, mpiexec_args, args)?;
        Ok(number(&text, "elapsed_ns")? / 1e9)
    }

    /// Runs the program like [`MpiJob::run_with`]; returns what it printed.
    pub fn output(&self, procs: usize, cluster_file: &Path, weft: bool, mpiexec_args: &[&str], args: &[String]) -> Result<String> {
        let mut c = Command::new(format!("mpiexec.{}", self.mpi));
        c.args(mpiexec_args);
        c.args(["-n", &procs.to_string()]);
        if self.mpi == "openmpi" {
            c.args(["--oversubscribe", "--bind-to", "none"]);
            // Its session directory under this job's own scratch: Open MPI 4
            // removes the shared `/tmp/ompi.<host>.<uid>` when a job ends,
            // under another job starting at once ("unable to create the
            // desired directory").
            if let Some(dir) = self.exe.parent() {
                c.env("OMPI_MCA_orte_tmpdir_base", dir);
            }
            if nix::unistd::geteuid().is_root() {
                c.arg("--allow-run-as-root");
            }
            if weft {
                c.arg("-x").arg(format!("LD_PRELOAD={}", self.lib.display())).args(["-x", "WEFT_CLUSTER"]);
            }
        } else if weft {
            c.arg("-genv").arg("LD_PRELOAD").arg(&self.lib);
        }
        if weft && !self.local_reads && !crate::local_reads_chosen() {
            // Local ranks inherit mpiexec's environment.
            c.env("WEFT_LOCAL_READS", "0");
        }
        c.arg(&self.exe).args(args).env("WEFT_CLUSTER", cluster_file);
        let out = c.output().with_context(|| format!("cannot run mpiexec.{}", self.mpi))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!("MPI job failed ({}): {}{}", out.status, text, String::from_utf8_lossy(&out.stderr));
        }
        Ok(text.into_owned())
    }
}

/// The number on the line `name N` of a program's output.
pub fn number(text: &str, name: &str) -> Result<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow!("MPI job printed no {name}: {text}"))
}
