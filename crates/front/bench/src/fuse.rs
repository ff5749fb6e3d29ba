//! Streaming through the FUSE mount (issue 12): fio writes blocks (1 MiB,
//! or `--bs`) sequentially, fsync'd at the end, then reads them back cold
//! (page cache dropped), with 1 and more jobs; the same on a local
//! directory of the same disk and, asked, through a second mount with the
//! kernel's writeback cache (`--writeback-cache`), in turn, in the same
//! run. Needs root (the mounts, the cache drop) and fio.

use crate::{median, BenchCluster};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, Clone)]
pub struct Params {
    pub jobs: Vec<usize>,
    /// Bytes written (and read) per run, split among the jobs.
    pub size: u64,
    /// Bytes per write(2) and read(2).
    pub block: u64,
    /// Also through a mount with `--writeback-cache`.
    pub writeback_cache: bool,
    pub repeats: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub jobs: usize,
    /// `write-fsync` or `read-cold`.
    pub op: &'static str,
    pub block: u64,
    pub mount_mb_s: f64,
    pub local_mb_s: f64,
    pub ratio: f64,
    /// Through the mount with `--writeback-cache`, when asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wbc_mb_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wbc_ratio: Option<f64>,
}

/// A `weft mount --daemon` of the bench cluster, unmounted when dropped.
pub(crate) struct Mounted(pub(crate) PathBuf);

impl Mounted {
    pub(crate) fn new(weft_bin: &Path, bc: &BenchCluster) -> Result<Self> {
        Self::with_args(weft_bin, bc, "mnt", &[])
    }

    /// A mount at `name` in the scratch directory, with extra options.
    pub(crate) fn with_args(weft_bin: &Path, bc: &BenchCluster, name: &str, args: &[&str]) -> Result<Self> {
        let point = bc.scratch.join(name);
        std::fs::create_dir_all(&point)?;
        let out = Command::new(weft_bin).arg("--cluster").arg(&bc.cluster_file).args(["mount", "--daemon"]).args(args).arg(&point).output().context("cannot run weft mount")?;
        if !out.status.success() {
            bail!("weft mount failed (the FUSE benchmark needs root and /dev/fuse): {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(Mounted(point))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// One fio run in `dir`; its aggregate bandwidth in MB/s.
fn fio(dir: &Path, rw: &str, jobs: usize, size_per_job: u64, block: u64) -> Result<f64> {
    let mut cmd = Command::new("fio");
    cmd.args(["--name=stream", "--ioengine=psync", "--group_reporting", "--output-format=json", "--allow_file_create=1"])
        .arg(format!("--bs={block}"))
        .arg(format!("--directory={}", dir.display()))
        .arg(format!("--rw={rw}"))
        .arg(format!("--numjobs={jobs}"))
        .arg(format!("--size={size_per_job}"));
    if rw == "write" {
        cmd.arg("--end_fsync=1");
    }
    let out = cmd.output().context("cannot run fio (install it: scripts/install-deps.sh)")?;
    if !out.status.success() {
        bail!("fio --rw={rw} in {} failed: {}", dir.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("fio's JSON output")?;
    let side = if rw == "write" { "write" } else { "read" };
    let bw = v["jobs"][0][side]["bw_bytes"].as_f64().context("no bandwidth in fio's output")?;
    Ok(bw / 1e6)
}

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    if p.repeats == 0 || p.jobs.is_empty() || p.jobs.contains(&0) || p.size < (1 << 20) {
        bail!("repeats and job counts must be at least 1, and the size at least 1 MiB");
    }
    if !(512..=16 << 20).contains(&p.block) || !p.block.is_multiple_of(512) {
        bail!("--bs: from 512 bytes to 16 MiB, a multiple of 512");
    }
    if let Some(&jobs) = p.jobs.iter().find(|&&j| (p.size / j as u64).max(1 << 20) < p.block) {
        bail!("--bs {} is more than a job's share of --size at {jobs} jobs", p.block);
    }
    let mount = Mounted::new(weft_bin, bc)?;
    let wbc = if p.writeback_cache { Some(Mounted::with_args(weft_bin, bc, "mnt-wbc", &["--writeback-cache"])?) } else { None };
    let local = bc.scratch.join("fuse-local");
    // The places written, in turn: the mount, the local directory, and
    // the mount with the writeback cache when asked.
    let mut places = vec![("mount", mount.0.join("fuse-bench")), ("local", local)];
    if let Some(w) = &wbc {
        places.push(("mount --writeback-cache", w.0.join("fuse-bench")));
    }
    let mut rows = Vec::new();
    for &jobs in &p.jobs {
        let per_job = (p.size / jobs as u64).max(1 << 20);
        // rates[op][place]
        let mut rates = vec![vec![Vec::new(); places.len()]; 2];
        for rep in 0..p.repeats {
            // Each round starts at the next place, so none always goes first.
            for k in 0..places.len() {
                let side = (rep + k) % places.len();
                let (what, dir) = &places[side];
                progress(&format!("jobs={jobs} round {}/{} {what}", rep + 1, p.repeats));
                std::fs::create_dir_all(dir)?;
                rates[0][side].push(fio(dir, "write", jobs, per_job, p.block)?);
                if !crate::sched::drop_caches() {
                    bail!("cold reads need root (to drop the page cache)");
                }
                rates[1][side].push(fio(dir, "read", jobs, per_job, p.block)?);
                std::fs::remove_dir_all(dir)?;
            }
        }
        for (k, op) in ["write-fsync", "read-cold"].into_iter().enumerate() {
            let mut at = rates[k].iter_mut().map(|r| median(std::mem::take(r)));
            let (m, l) = (at.next().unwrap_or(0.0), at.next().unwrap_or(0.0));
            let w = at.next();
            rows.push(Row { jobs, op, block: p.block, mount_mb_s: m, local_mb_s: l, ratio: m / l, wbc_mb_s: w, wbc_ratio: w.map(|w| w / l) });
        }
    }
    Ok(rows)
}

/// Streaming through the mount as `weft bench fuse` runs it.
pub struct FuseStreaming<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub params: Params,
}

impl crate::experiment::Experiment for FuseStreaming<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "fuse"
    }

    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.exe, self.cluster, &self.params, progress)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        use crate::experiment::{f1, human_bytes};
        let wbc = self.params.writeback_cache;
        let table = rows
            .iter()
            .map(|r| {
                let mut row = vec![r.jobs.to_string(), r.op.to_string(), f1(r.mount_mb_s), f1(r.local_mb_s), format!("{:.2}", r.ratio)];
                if let (Some(w), Some(ratio)) = (r.wbc_mb_s, r.wbc_ratio) {
                    row.extend([f1(w), format!("{ratio:.2}")]);
                }
                row
            })
            .collect();
        let mut head = vec!["jobs", "op", "mount MB/s", "local MB/s", "mount/local"];
        if wbc {
            head.extend(["--writeback-cache MB/s", "wbc/local"]);
        }
        crate::experiment::Report::table(
            format!("Streaming through the mount: fio, {} blocks, {} per run, median of {} (writes fsync'd at the end, reads cold)", human_bytes(self.params.block), human_bytes(self.params.size), self.params.repeats),
            &head,
            table,
        )
        .note("(issue 12's targets: writes >= 0.8x local, cold reads >= 0.7x; a libfuse passthrough file system reached 0.44x here; issue 21's: 1 KiB writes >= 0.5x)")
    }
}
