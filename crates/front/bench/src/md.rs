//! Metadata rates (issue 12, mdtest-like): P processes each create N empty
//! files in a directory of their own, then stat them, then remove them;
//! through the Rust API on Weft and, in the same run, on a local directory
//! of the same disk. Creates on Weft are durable when answered (one
//! fsync'd metadata commit each); local creates are not fsync'd, as mdtest
//! does not (say so when comparing). With `threads` > 1 each process runs
//! that many threads on its one client (its files split among them), as a
//! FUSE mount's request threads share the mount's client.
//!
//! Two shapes, as mdtest's: `easy`, a directory per process, and `hard`,
//! every process's files in one shared directory (where a system that
//! keeps a directory on one server has one server doing all the work).

use crate::workers::{run_workers, timed};
use crate::{median, BenchCluster};
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct Params {
    pub procs: Vec<usize>,
    pub threads: Vec<usize>,
    /// Also through a FUSE mount of the cluster (needs root).
    pub mount: bool,
    pub files: u64,
    pub repeats: usize,
    pub shapes: Vec<Shape>,
}

/// Where the processes' files go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A directory per process.
    Easy,
    /// One directory for all.
    Hard,
}

impl Shape {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "easy" => Ok(Shape::Easy),
            "hard" => Ok(Shape::Hard),
            _ => bail!("unknown shape {s:?} (easy or hard)"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Shape::Easy => "easy",
            Shape::Hard => "hard",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The cluster's metadata shards.
    pub meta_shards: u32,
    pub shape: &'static str,
    pub procs: usize,
    pub threads: usize,
    pub op: &'static str,
    pub weft_ops_s: f64,
    pub local_ops_s: f64,
    pub ratio: f64,
    /// Through the mount (with `--mount`), and over the Rust API's rate.
    pub mount_ops_s: Option<f64>,
    pub mount_over_api: Option<f64>,
}

/// `list`: each process lists its directory once (the hard shape's holds
/// every process's files); its rate is entries listed per second.
const PHASES: [&str; 4] = ["create", "stat", "list", "unlink"];

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    if p.files == 0 || p.repeats == 0 || p.procs.is_empty() || p.procs.contains(&0) || p.threads.is_empty() || p.threads.contains(&0) {
        bail!("files, repeats and every process and thread count must be at least 1");
    }
    if p.shapes.is_empty() {
        bail!("name at least one shape");
    }
    let client = crate::connect(&bc.cluster_file)?;
    let meta_shards = client.cluster().meta_shard_count();
    let _ = client.mkdir("/bench", 0o777);
    let mount = if p.mount { Some(crate::fuse::Mounted::new(weft_bin, bc)?) } else { None };
    let sides: &[&str] = if p.mount { &["weft", "local", "mount"] } else { &["weft", "local"] };
    let mut rows = Vec::new();
    let runs: Vec<(Shape, usize, usize)> = p.shapes.iter().flat_map(|&shape| p.procs.iter().flat_map(move |&procs| p.threads.iter().map(move |&t| (shape, procs, t)))).collect();
    for (shape, procs, threads) in runs {
        // The hard shape: every process in directory 0, names told apart.
        let dirs = if shape == Shape::Hard { 1 } else { procs };
        let dir_index = |r: usize| if shape == Shape::Hard { 0 } else { r };
        let mut rates: [[Vec<f64>; 3]; 4] = Default::default();
        for rep in 0..p.repeats {
            // Each side first, middle and last in turn.
            for k in 0..sides.len() {
                let side = sides[(k + rep) % sides.len()];
                progress(&format!("K={meta_shards} {} P={procs} T={threads} round {}/{} {side}", shape.name(), rep + 1, p.repeats));
                let dir_of = |r: usize| match (side, &mount) {
                    ("weft", _) => format!("/bench/md-{}-{r}", std::process::id()),
                    ("mount", Some(m)) => m.0.join(format!("bench/md-m-{r}")).display().to_string(),
                    _ => bc.scratch.join(format!("md-{r}")).display().to_string(),
                };
                for r in 0..dirs {
                    match side {
                        "weft" => drop(client.mkdir(&dir_of(r), 0o755)?),
                        _ => std::fs::create_dir_all(dir_of(r))?,
                    }
                }
                for (k, phase) in PHASES.iter().enumerate() {
                    let args: Vec<Vec<String>> = (0..procs)
                        .map(|r| {
                            let (files, threads) = (p.files.to_string(), threads.to_string());
                            // Through the mount, workers are plain POSIX programs.
                            let target = if side == "mount" { "local" } else { side };
                            let prefix = format!("p{r}-");
                            ["md-worker", "--target", target, "--dir", &dir_of(dir_index(r)), "--files", &files, "--phase", phase, "--threads", &threads, "--prefix", &prefix].map(String::from).to_vec()
                        })
                        .collect();
                    let secs = run_workers(weft_bin, bc, &args, &[])?;
                    let column = sides.iter().position(|s| *s == side).expect("a side");
                    let per_process = if *phase == "list" { p.files * (procs / dirs) as u64 } else { p.files };
                    rates[k][column].push((procs as u64 * per_process) as f64 / secs);
                }
                for r in 0..dirs {
                    match side {
                        "weft" => client.rmdir(&dir_of(r))?,
                        _ => std::fs::remove_dir(dir_of(r))?,
                    }
                }
            }
        }
        for (k, op) in PHASES.into_iter().enumerate() {
            let (w, l) = (median(std::mem::take(&mut rates[k][0])), median(std::mem::take(&mut rates[k][1])));
            let m = p.mount.then(|| median(std::mem::take(&mut rates[k][2])));
            rows.push(Row { meta_shards, shape: shape.name(), procs, threads, op, weft_ops_s: w, local_ops_s: l, ratio: w / l, mount_ops_s: m, mount_over_api: m.map(|m| m / w) });
        }
    }
    Ok(rows)
}

/// The worker: one phase over its N files, split among `threads` threads
/// that share one client.
pub fn worker(target: &str, dir: &str, prefix: &str, files: u64, phase: &str, threads: usize) -> Result<()> {
    if !PHASES.contains(&phase) {
        bail!("unknown phase {phase}");
    }
    let client = if target == "weft" { Some(crate::connect(&crate::locate()?)?) } else { None };
    if phase == "list" {
        return timed(|| {
            let n = match &client {
                Some(c) => c.readdir(dir)?.len() as u64,
                None => std::fs::read_dir(dir)?.count() as u64,
            };
            if n < files {
                bail!("{dir} lists {n} entries, fewer than the {files} made");
            }
            Ok(())
        });
    }
    let threads = threads.max(1) as u64;
    let one = |i: u64| -> Result<()> {
        let name = format!("{dir}/{prefix}f{i}");
        match (&client, phase) {
            // As mdtest: open(O_CREAT) then close.
            (Some(c), "create") => c.create(&name, weft_client::CreateOptions { exclusive: true, ..Default::default() })?.close()?,
            (Some(c), "stat") => drop(c.stat(&name)?),
            (Some(c), _) => c.unlink(&name)?,
            (None, "create") => drop(std::fs::OpenOptions::new().write(true).create_new(true).open(&name)?),
            (None, "stat") => {
                std::fs::metadata(&name)?;
            }
            (None, _) => std::fs::remove_file(&name)?,
        }
        Ok(())
    };
    timed(|| {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads).map(|t| s.spawn(move || (t..files).step_by(threads as usize).try_for_each(one))).collect();
            hs.into_iter().try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("a worker thread panicked"))?)
        })
    })
}

/// The metadata experiment as `weft bench md` runs it: each shard count on
/// the cluster `cluster` gives for it.
pub struct MdRates<'a> {
    pub exe: &'a Path,
    pub cluster: &'a dyn Fn(u32) -> Result<BenchCluster>,
    pub shard_counts: Vec<u32>,
    pub params: Params,
    /// The metadata sync window of the clusters run (ms; 0: each change
    /// durable when answered).
    pub sync_window_ms: u64,
}

impl crate::experiment::Experiment for MdRates<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "md"
    }

    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        let mut rows = Vec::new();
        for &k in &self.shard_counts {
            let bc = (self.cluster)(k)?;
            rows.extend(run(self.exe, &bc, &self.params, progress)?);
        }
        Ok(rows)
    }

    /// Rate against processes, a series per shard count and shape.
    fn plots(&self, stem: &Path, rows: &[Row]) -> Result<Option<Vec<std::path::PathBuf>>> {
        let first_threads = self.params.threads.first().copied().unwrap_or(1);
        let panels: Vec<crate::plot::Panel> = PHASES
            .iter()
            .map(|op| {
                let mut series: Vec<crate::plot::Series> = Vec::new();
                for r in rows.iter().filter(|r| r.op == *op && r.threads == first_threads) {
                    let name = format!("K={} {}", r.meta_shards, r.shape);
                    match series.iter_mut().find(|s| s.name == name) {
                        Some(s) => s.points.push((r.procs as f64, r.weft_ops_s)),
                        None => series.push(crate::plot::Series { name, points: vec![(r.procs as f64, r.weft_ops_s)] }),
                    }
                }
                crate::plot::Panel { title: format!("{op}s per second through the API"), x_label: "processes".into(), y_label: "ops/s".into(), series }
            })
            .collect();
        crate::plot::write(stem, &panels).map(Some)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        use crate::experiment::f1;
        let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or_else(|| "-".to_string(), f);
        let table = rows
            .iter()
            .map(|r| {
                vec![
                    r.meta_shards.to_string(),
                    r.shape.to_string(),
                    r.procs.to_string(),
                    r.threads.to_string(),
                    r.op.to_string(),
                    f1(r.weft_ops_s),
                    f1(r.local_ops_s),
                    format!("{:.2}", r.ratio),
                    opt(r.mount_ops_s, &f1),
                    opt(r.mount_over_api, &|x| format!("{x:.2}")),
                ]
            })
            .collect();
        let window = self.sync_window_ms;
        let durability = if window == 0 { "Weft's creates durable when answered".to_string() } else { format!("Weft's creates durable within {window} ms, as a journal's") };
        crate::experiment::Report::table(
            format!("Metadata rates, {} files per process, median of {} ({durability}; local ones not fsync'd)", self.params.files, self.params.repeats),
            &["K", "shape", "procs", "threads", "op", "api ops/s", "local ops/s", "api/local", "mount ops/s", "mount/api"],
            table,
        )
        .note("(GekkoFS reports ~73k creates/s per node; issue 12 measured 1.6k/s at 1 process, ~4.8k/s at 4)")
    }
}
