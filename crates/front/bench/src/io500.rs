//! IO500-like shapes on the FUSE mount (issue 12), beside a local
//! directory of the same disk in the same run, scored the way IO500 scores
//! (geometric means). Four shapes, as IO500 defines its phases:
//!
//! * ior-easy: a file per process, 1 MiB transfers, fsync'd at the end;
//!   then read back cold.
//! * ior-hard: one shared file, 47,008-byte transfers interleaved among the
//!   processes (segment i of rank r at `(i * P + r) * 47008`); then read.
//! * mdtest-easy: empty files in a directory per process: create, stat,
//!   delete.
//! * mdtest-hard: 3,901-byte files in one shared directory: create (with
//!   their bytes), stat, read, delete.
//!
//! The workers are plain POSIX programs (`weft bench io500-worker`), one
//! process per rank, so they run unchanged on the mount and on the local
//! directory; each read checks the bytes it gets. Reads are cold (the page
//! cache is dropped before each read phase: needs root, as the mount does).
//! Scores: bandwidth = geometric mean of the four ior phases in GiB/s;
//! metadata = geometric mean of the seven mdtest phases in kIOPS; total =
//! the geometric mean of the two (IO500's formula).

use crate::workers::{run_workers, timed};
use crate::{median, BenchCluster};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// ior-hard's transfer size, IO500's.
pub const HARD_TRANSFER: u64 = 47_008;
/// mdtest-hard's file size, IO500's.
pub const HARD_FILE: usize = 3_901;

#[derive(Debug, Clone)]
pub struct Params {
    pub procs: usize,
    /// ior-easy bytes per process.
    pub easy_bytes: u64,
    /// ior-hard segments per process.
    pub hard_segments: u64,
    /// mdtest files per process (easy and hard each).
    pub files: u64,
    pub repeats: usize,
}

/// One phase: its rate on the mount and locally (GiB/s or kIOPS).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub phase: &'static str,
    pub unit: &'static str,
    pub mount: f64,
    pub local: f64,
    pub ratio: f64,
}

/// Every phase in IO500's order, with what one process does in it and how
/// much that is (bytes for ior, operations for mdtest).
const PHASES: [&str; 11] = [
    "ior-easy-write",
    "mdtest-easy-write",
    "ior-hard-write",
    "mdtest-hard-write",
    "ior-easy-read",
    "mdtest-easy-stat",
    "ior-hard-read",
    "mdtest-hard-stat",
    "mdtest-easy-delete",
    "mdtest-hard-read",
    "mdtest-hard-delete",
];

fn is_ior(phase: &str) -> bool {
    phase.starts_with("ior")
}

/// Deterministic bytes of rank `r` at file offset `at`.
fn byte(r: usize, at: u64) -> u8 {
    (at.wrapping_mul(31).wrapping_add(r as u64 * 7) % 251) as u8
}

fn fill(r: usize, at: u64, buf: &mut [u8]) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = byte(r, at + k as u64);
    }
}

fn check(r: usize, at: u64, buf: &[u8], what: &str) -> Result<()> {
    if let Some(k) = buf.iter().enumerate().position(|(k, &b)| b != byte(r, at + k as u64)) {
        bail!("{what}: byte {} differs from what rank {r} wrote", at + k as u64);
    }
    Ok(())
}

/// The phases' rows, then IO500's three scores as rows (`score-bandwidth`,
/// `score-metadata`, `score`) of each side.
pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    if p.procs == 0 || p.repeats == 0 || p.files == 0 || p.hard_segments == 0 || p.easy_bytes < (1 << 20) {
        bail!("processes, repeats, files and segments must be at least 1, and ior-easy's size at least 1 MiB");
    }
    // The shared file's end, and every offset a worker computes, below it.
    let hard_end = p.hard_segments.checked_mul(p.procs as u64).and_then(|n| n.checked_mul(HARD_TRANSFER));
    if hard_end.is_none_or(|e| e > 1 << 50) || p.easy_bytes.checked_mul(p.procs as u64).is_none_or(|e| e > 1 << 50) || p.procs > 4096 || p.files > 1 << 24 {
        bail!("sizes too large: the shared file and the easy files must stay under 1 PiB, at most 4096 processes and 2^24 files each");
    }
    let mount = crate::fuse::Mounted::new(weft_bin, bc)?;
    let mut rates: Vec<[Vec<f64>; 2]> = PHASES.iter().map(|_| Default::default()).collect();
    for rep in 0..p.repeats {
        for k in 0..2 {
            // Mount first in even rounds, local first in odd ones.
            let side = (k + rep) % 2;
            let root = if side == 0 { mount.0.join("io500") } else { bc.scratch.join("io500-local") };
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join("easy"))?;
            std::fs::create_dir_all(root.join("mdhard"))?;
            for r in 0..p.procs {
                std::fs::create_dir_all(root.join(format!("mdeasy/{r}")))?;
            }
            for (i, phase) in PHASES.iter().enumerate() {
                progress(&format!("round {}/{} {} {phase}", rep + 1, p.repeats, ["mount", "local"][side]));
                if phase.contains("read") || phase.contains("stat") {
                    crate::sched::drop_caches();
                }
                let args: Vec<Vec<String>> = (0..p.procs)
                    .map(|r| {
                        let v = [
                            "io500-worker".to_string(),
                            "--dir".into(),
                            root.display().to_string(),
                            "--phase".into(),
                            (*phase).into(),
                            "--rank".into(),
                            r.to_string(),
                            "--procs".into(),
                            p.procs.to_string(),
                            "--easy-bytes".into(),
                            p.easy_bytes.to_string(),
                            "--hard-segments".into(),
                            p.hard_segments.to_string(),
                            "--files".into(),
                            p.files.to_string(),
                        ];
                        v.to_vec()
                    })
                    .collect();
                let secs = run_workers(weft_bin, bc, &args, &[]).with_context(|| format!("{phase} on the {}", ["mount", "local directory"][side]))?;
                let amount = match *phase {
                    "ior-easy-write" | "ior-easy-read" => p.easy_bytes as f64,
                    "ior-hard-write" | "ior-hard-read" => (p.hard_segments * HARD_TRANSFER) as f64,
                    _ => p.files as f64,
                } * p.procs as f64;
                // GiB/s for ior, kIOPS for mdtest, as IO500 reports them.
                rates[i][side].push(if is_ior(phase) { amount / secs / (1u64 << 30) as f64 } else { amount / secs / 1e3 });
            }
            std::fs::remove_dir_all(&root)?;
        }
    }
    let mut rows: Vec<Row> = PHASES
        .iter()
        .zip(rates)
        .map(|(phase, [m, l])| {
            let (mount, local) = (median(m), median(l));
            Row { phase, unit: if is_ior(phase) { "GiB/s" } else { "kIOPS" }, mount, local, ratio: mount / local }
        })
        .collect();
    let geo = |ior: bool, side: fn(&Row) -> f64| {
        let v: Vec<f64> = rows.iter().filter(|r| is_ior(r.phase) == ior).map(side).collect();
        (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
    };
    let (bw, md) = ([geo(true, |r| r.mount), geo(true, |r| r.local)], [geo(false, |r| r.mount), geo(false, |r| r.local)]);
    let total = [(bw[0] * md[0]).sqrt(), (bw[1] * md[1]).sqrt()];
    for (phase, unit, v) in [("score-bandwidth", "GiB/s", bw), ("score-metadata", "kIOPS", md), ("score", "-", total)] {
        rows.push(Row { phase, unit, mount: v[0], local: v[1], ratio: v[0] / v[1] });
    }
    Ok(rows)
}

/// One rank of one phase, timed by [`timed`].
#[allow(clippy::too_many_arguments)]
pub fn worker(dir: &Path, phase: &str, rank: usize, procs: usize, easy_bytes: u64, hard_segments: u64, files: u64) -> Result<()> {
    if !PHASES.contains(&phase) || rank >= procs {
        bail!("unknown phase {phase} or rank {rank} of {procs}");
    }
    if hard_segments.checked_mul(procs as u64).and_then(|n| n.checked_mul(HARD_TRANSFER)).is_none_or(|e| e > 1 << 50) {
        bail!("{hard_segments} ior-hard segments of {procs} processes pass 1 PiB");
    }
    let easy = dir.join(format!("easy/{rank}"));
    let hard = dir.join("ior-hard");
    let md_easy = |i: u64| dir.join(format!("mdeasy/{rank}/f{i}"));
    let md_hard = |i: u64| dir.join(format!("mdhard/r{rank}-f{i}"));
    let mut buf = vec![0u8; 1 << 20];
    timed(|| {
        match phase {
            "ior-easy-write" => {
                let mut f = std::fs::File::create(&easy)?;
                let mut at = 0;
                while at < easy_bytes {
                    let n = (easy_bytes - at).min(buf.len() as u64) as usize;
                    fill(rank, at, &mut buf[..n]);
                    f.write_all(&buf[..n])?;
                    at += n as u64;
                }
                f.sync_all()?;
            }
            "ior-easy-read" => {
                let mut f = std::fs::File::open(&easy)?;
                let mut at = 0;
                while at < easy_bytes {
                    let n = (easy_bytes - at).min(buf.len() as u64) as usize;
                    f.read_exact(&mut buf[..n])?;
                    check(rank, at, &buf[..n], "ior-easy")?;
                    at += n as u64;
                }
            }
            "ior-hard-write" | "ior-hard-read" => {
                let write = phase == "ior-hard-write";
                let f = std::fs::OpenOptions::new().read(true).write(write).create(write).truncate(false).open(&hard)?;
                let seg = &mut buf[..HARD_TRANSFER as usize];
                for i in 0..hard_segments {
                    let at = (i * procs as u64 + rank as u64) * HARD_TRANSFER;
                    if write {
                        fill(rank, at, seg);
                        f.write_all_at(seg, at)?;
                    } else {
                        f.read_exact_at(seg, at)?;
                        check(rank, at, seg, "ior-hard")?;
                    }
                }
                if write {
                    f.sync_all()?;
                }
            }
            "mdtest-easy-write" => (0..files).try_for_each(|i| std::fs::File::create(md_easy(i)).map(drop))?,
            "mdtest-easy-stat" => (0..files).try_for_each(|i| std::fs::metadata(md_easy(i)).map(drop))?,
            "mdtest-easy-delete" => (0..files).try_for_each(|i| std::fs::remove_file(md_easy(i)))?,
            "mdtest-hard-write" => {
                for i in 0..files {
                    fill(rank, i, &mut buf[..HARD_FILE]);
                    std::fs::File::create(md_hard(i))?.write_all(&buf[..HARD_FILE])?;
                }
            }
            "mdtest-hard-stat" => (0..files).try_for_each(|i| std::fs::metadata(md_hard(i)).map(drop))?,
            "mdtest-hard-read" => {
                for i in 0..files {
                    let mut f = std::fs::File::open(md_hard(i))?;
                    f.read_exact(&mut buf[..HARD_FILE])?;
                    check(rank, i, &buf[..HARD_FILE], "mdtest-hard")?;
                    // Exactly its size: nothing past it.
                    if f.seek(SeekFrom::End(0))? != HARD_FILE as u64 {
                        bail!("mdtest-hard file {i} of rank {rank} is not {HARD_FILE} bytes");
                    }
                }
            }
            _ => (0..files).try_for_each(|i| std::fs::remove_file(md_hard(i)))?,
        }
        Ok(())
    })
}

/// The IO500-like shapes as `weft bench io500` runs them.
pub struct Io500<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub params: Params,
}

impl crate::experiment::Experiment for Io500<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "io500"
    }

    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.exe, self.cluster, &self.params, progress)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        let table = rows.iter().map(|r| vec![r.phase.to_string(), r.unit.to_string(), format!("{:.3}", r.mount), format!("{:.3}", r.local), format!("{:.2}", r.ratio)]).collect();
        crate::experiment::Report::table(
            format!("IO500-like shapes, {} processes, median of {} (mount vs a local directory of the same disk; ior writes fsync'd, reads cold)", self.params.procs, self.params.repeats),
            &["phase", "unit", "mount", "local", "mount/local"],
            table,
        )
        .note("(IO500's formula: geometric means of the ior phases (GiB/s) and of the mdtest phases (kIOPS), total = sqrt(bw * md))")
    }
}
