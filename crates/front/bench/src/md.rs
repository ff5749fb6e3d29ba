//! Metadata rates (issue 12, mdtest-like): P processes each create N empty
//! files in a directory of their own, then stat them, then remove them;
//! through the Rust API on Weft and, in the same run, on a local directory
//! of the same disk. Creates on Weft are durable when answered (one
//! fsync'd metadata commit each); local creates are not fsync'd, as mdtest
//! does not (say so when comparing).

use crate::workers::{run_workers, timed};
use crate::{median, BenchCluster};
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct Params {
    pub procs: Vec<usize>,
    pub files: u64,
    pub repeats: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub procs: usize,
    pub op: &'static str,
    pub weft_ops_s: f64,
    pub local_ops_s: f64,
    pub ratio: f64,
}

const PHASES: [&str; 3] = ["create", "stat", "unlink"];

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    if p.files == 0 || p.repeats == 0 || p.procs.is_empty() || p.procs.contains(&0) {
        bail!("files, repeats and every process count must be at least 1");
    }
    let client = weft_client::Client::connect(&bc.cluster_file)?;
    let _ = client.mkdir("/bench", 0o777);
    let mut rows = Vec::new();
    for &procs in &p.procs {
        let mut rates = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
        for rep in 0..p.repeats {
            for side in if rep % 2 == 0 { ["weft", "local"] } else { ["local", "weft"] } {
                progress(&format!("P={procs} round {}/{} {side}", rep + 1, p.repeats));
                let dir_of = |r: usize| match side {
                    "weft" => format!("/bench/md-{}-{r}", std::process::id()),
                    _ => bc.scratch.join(format!("md-{r}")).display().to_string(),
                };
                for r in 0..procs {
                    match side {
                        "weft" => drop(client.mkdir(&dir_of(r), 0o755)?),
                        _ => std::fs::create_dir_all(dir_of(r))?,
                    }
                }
                for (k, phase) in PHASES.iter().enumerate() {
                    let args: Vec<Vec<String>> = (0..procs)
                        .map(|r| ["md-worker", "--target", side, "--dir", &dir_of(r), "--files", &p.files.to_string(), "--phase", phase].map(String::from).to_vec())
                        .collect();
                    let secs = run_workers(weft_bin, &bc.cluster_file, &args, &[])?;
                    rates[k][usize::from(side == "local")].push((procs as u64 * p.files) as f64 / secs);
                }
                for r in 0..procs {
                    match side {
                        "weft" => client.rmdir(&dir_of(r))?,
                        _ => std::fs::remove_dir(dir_of(r))?,
                    }
                }
            }
        }
        for (k, op) in PHASES.into_iter().enumerate() {
            let (w, l) = (median(std::mem::take(&mut rates[k][0])), median(std::mem::take(&mut rates[k][1])));
            rows.push(Row { procs, op, weft_ops_s: w, local_ops_s: l, ratio: w / l });
        }
    }
    Ok(rows)
}

/// The worker: one phase over its N files.
pub fn worker(target: &str, dir: &str, files: u64, phase: &str) -> Result<()> {
    let client = if target == "weft" { Some(weft_client::Client::connect(&weft_net::ClusterFile::locate(None)?)?) } else { None };
    let name = |i: u64| format!("{dir}/f{i}");
    timed(|| {
        for i in 0..files {
            match (&client, phase) {
                (Some(c), "create") => drop(c.create(&name(i), weft_client::CreateOptions { exclusive: true, ..Default::default() })?),
                (Some(c), "stat") => {
                    c.stat(&name(i))?;
                }
                (Some(c), "unlink") => c.unlink(&name(i))?,
                (None, "create") => drop(std::fs::OpenOptions::new().write(true).create_new(true).open(name(i))?),
                (None, "stat") => {
                    std::fs::metadata(name(i))?;
                }
                (None, "unlink") => std::fs::remove_file(name(i))?,
                (_, p) => bail!("unknown phase {p}"),
            }
        }
        Ok(())
    })
}
