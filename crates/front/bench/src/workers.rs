//! Benchmark worker processes: the parent starts one `weft bench ...-worker`
//! process per rank, waits until all say `ready`, releases them together with
//! `go`, and takes the slowest one's `elapsed_ns` (the papers' reduction by
//! maximum). Separate processes, as MPI ranks would be.

use anyhow::{anyhow, bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use crate::BenchCluster;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Runs one worker per argument list (each after `weft bench`), all at once,
/// rank k on the cluster's client node k (an emulated cluster's, in turn;
/// else here); returns the slowest worker's time in seconds.
pub fn run_workers(weft_bin: &Path, bc: &BenchCluster, per_rank: &[Vec<String>], env: &[(&str, &str)]) -> Result<f64> {
    let mut children = Vec::new();
    for (rank, args) in per_rank.iter().enumerate() {
        let node = bc.client_node(rank);
        let mut cmd = match node.split_first() {
            Some((prog, rest)) => {
                let mut c = Command::new(prog);
                c.args(rest).arg(weft_bin);
                c
            }
            None => Command::new(weft_bin),
        };
        cmd.arg("bench").args(args).env("WEFT_CLUSTER", &bc.cluster_file);
        cmd.envs(env.iter().copied());
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        children.push(cmd.spawn().context("cannot start a benchmark worker")?);
    }
    let mut readers: Vec<_> = children.iter_mut().map(|c| BufReader::new(c.stdout.take().expect("piped"))).collect();
    for r in &mut readers {
        let mut line = String::new();
        r.read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("worker said {line:?} instead of ready");
        }
    }
    for c in &mut children {
        c.stdin.as_mut().expect("piped").write_all(b"go\n")?;
    }
    let mut slowest = 0f64;
    for r in &mut readers {
        let mut line = String::new();
        r.read_line(&mut line)?;
        let ns: u64 = line.trim().strip_prefix("elapsed_ns ").and_then(|v| v.parse().ok()).ok_or_else(|| anyhow!("worker failed: {line:?}"))?;
        slowest = slowest.max(ns as f64 / 1e9);
    }
    for mut c in children {
        let st = c.wait()?;
        if !st.success() {
            bail!("worker exited with {st}");
        }
    }
    Ok(slowest)
}

/// Worker side: say `ready`, wait for `go`, run `work`, report its time.
pub fn timed(work: impl FnOnce() -> Result<()>) -> Result<()> {
    println!("ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    let start = Instant::now();
    work()?;
    println!("elapsed_ns {}", start.elapsed().as_nanos());
    Ok(())
}
