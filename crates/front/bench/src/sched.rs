//! Paper 000's synthetic benchmark: P clients each write, then read, S
//! bytes to disjoint contiguous regions of one file striped over N servers,
//! for every scheduling strategy and schedule block b.
//!
//! Writes are timed up to the end of their fsync, and reads are cold (the
//! page cache is dropped before each read run when running as root; the
//! summary says whether it was), so the disk is in the figures as in the
//! paper's. The best setting is not the maximum of one-shot medians (on
//! this noisy machine that picks noise): the top candidates of the sweep
//! are run again alternately with the default setting, in pairs, and the
//! default's standing is the median of the paired ratios.

use crate::plot::{self, Panel, Series};
use crate::workers::{run_workers, timed};
use crate::{median, BenchCluster};
use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use weft_client::{Client, CreateOptions, Schedule, Strategy};
use weft_net::ClusterFile;

#[derive(Debug, Clone)]
pub struct Params {
    pub procs: u32,
    pub size: u64,
    pub stripe_size: u64,
    pub blocks: Vec<u64>,
    pub strategies: Vec<Strategy>,
    pub window: usize,
    pub repeats: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub op: String,
    pub strategy: String,
    pub block_bytes: u64,
    pub mb_s: f64,
}

/// What `weft bench sched` reports besides the rows.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Writes timed to the end of their fsync (always).
    pub writes_fsynced: bool,
    /// Reads ran with the page cache dropped before each run (needs root).
    pub reads_cold: bool,
    /// Paired re-runs: the candidate that beat the default by the most, per
    /// op, and the default's rate over it (median of pairs; > 1: the
    /// default won every pairing).
    pub write_paired_best: (String, u64),
    pub read_paired_best: (String, u64),
    pub default_strategy: String,
    pub default_block_bytes: u64,
    pub write_default_vs_best: f64,
    pub read_default_vs_best: f64,
    pub write_best: (String, u64, f64),
    pub write_worst: (String, u64, f64),
    pub read_best: (String, u64, f64),
    pub read_worst: (String, u64, f64),
}

/// The paper's figures 2 and 3 (MB/s), for the table.
pub const PAPER: &str = "paper 000: write best 573 MB/s (hash-IOS, b = 64 KiB), worst 308 (first-IOS, b = 4 MiB); \
read best 817 (hash-IOS, b = 32 KiB), worst 90 (first-IOS, b = 4 KiB); spread 86% write, 804% read";

/// Drops the page cache (clean pages only, after a sync), so reads come
/// from the disk. Needs root; returns whether it worked.
pub fn drop_caches() -> bool {
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// One run of every client with strategy `s` and block `b`; its time.
fn run_once(weft_bin: &Path, bc: &BenchCluster, path: &str, p: &Params, s: Strategy, b: u64, op: &str) -> Result<f64> {
    if op == "read" {
        drop_caches();
    }
    let args: Vec<Vec<String>> = (0..p.procs)
        .map(|r| {
            let v = [
                "sched-worker", "--path", path, "--rank", &r.to_string(), "--procs", &p.procs.to_string(), "--size", &p.size.to_string(),
                "--strategy", s.name(), "--block", &b.to_string(), "--window", &p.window.to_string(), "--op", op,
            ];
            v.map(String::from).to_vec()
        })
        .collect();
    run_workers(weft_bin, bc, &args, &[])
}

/// Pairs per candidate in the paired re-runs of the best settings.
const PAIRS: usize = 3;
/// Candidates re-run against the default, per op.
const CANDIDATES: usize = 3;

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params) -> Result<(Vec<Row>, Summary)> {
    if p.procs == 0 || p.size == 0 || p.blocks.is_empty() || p.strategies.is_empty() || p.repeats == 0 {
        bail!("procs, size, blocks, strategies and repeats must all be non-empty");
    }
    let client = crate::connect(&bc.cluster_file)?;
    let _ = client.mkdir("/bench", 0o777);
    let path = format!("/bench/sched-{}", std::process::id());
    let f = client.create(&path, CreateOptions { stripe_size: p.stripe_size, ..CreateOptions::default() })?;
    f.truncate(u64::from(p.procs) * p.size)?;
    let bar = ProgressBar::new((p.blocks.len() * p.strategies.len() * p.repeats) as u64);
    bar.set_style(ProgressStyle::with_template("{msg:>24} [{bar:30}] {pos}/{len}").expect("valid template"));
    let mut rows = Vec::new();
    for &b in &p.blocks {
        for &s in &p.strategies {
            bar.set_message(format!("{s} b={}", human(b)));
            let mut t = [Vec::new(), Vec::new()];
            for _ in 0..p.repeats {
                for (k, op) in ["write", "read"].iter().enumerate() {
                    t[k].push(run_once(weft_bin, bc, &path, p, s, b, op)?);
                }
                bar.inc(1);
            }
            let total = (u64::from(p.procs) * p.size) as f64;
            for (k, op) in ["write", "read"].iter().enumerate() {
                rows.push(Row { op: op.to_string(), strategy: s.name().into(), block_bytes: b, mb_s: total / median(t[k].clone()) / 1e6 });
            }
        }
    }
    bar.finish_and_clear();
    let reads_cold = drop_caches();
    let d = Schedule::default();
    // Paired re-runs: default and candidate alternately, which goes first
    // alternating too; the default's standing is the median ratio.
    let paired = |op: &str| -> Result<((String, u64), f64)> {
        let mut cands: Vec<&Row> = rows.iter().filter(|r| r.op == op && !(r.strategy == d.strategy.name() && r.block_bytes == d.block)).collect();
        cands.sort_by(|a, b| b.mb_s.total_cmp(&a.mb_s));
        let mut best = ((d.strategy.name().to_string(), d.block), 1.0f64);
        for c in cands.into_iter().take(CANDIDATES) {
            let s: Strategy = c.strategy.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut ratios = Vec::new();
            for k in 0..PAIRS {
                let order = if k % 2 == 0 { [true, false] } else { [false, true] };
                let mut t_default = 0.0;
                let mut t_cand = 0.0;
                for is_default in order {
                    let t = if is_default { run_once(weft_bin, bc, &path, p, d.strategy, d.block, op)? } else { run_once(weft_bin, bc, &path, p, s, c.block_bytes, op)? };
                    if is_default { t_default = t } else { t_cand = t }
                }
                // Rates are bytes over time: default/candidate rate = t_cand / t_default.
                ratios.push(t_cand / t_default);
            }
            let r = median(ratios);
            if r < best.1 {
                best = ((c.strategy.clone(), c.block_bytes), r);
            }
        }
        Ok(best)
    };
    let (write_paired_best, write_default_vs_best) = paired("write")?;
    let (read_paired_best, read_default_vs_best) = paired("read")?;
    client.unlink(&path)?;
    let pick = |op: &str, best: bool| -> (String, u64, f64) {
        let it = rows.iter().filter(|r| r.op == op);
        let r = if best { it.max_by(|a, b| a.mb_s.total_cmp(&b.mb_s)) } else { it.min_by(|a, b| a.mb_s.total_cmp(&b.mb_s)) };
        r.map(|r| (r.strategy.clone(), r.block_bytes, r.mb_s)).unwrap_or_default()
    };
    let summary = Summary {
        writes_fsynced: true,
        reads_cold,
        write_paired_best,
        read_paired_best,
        default_strategy: d.strategy.name().into(),
        default_block_bytes: d.block,
        write_default_vs_best,
        read_default_vs_best,
        write_best: pick("write", true),
        write_worst: pick("write", false),
        read_best: pick("read", true),
        read_worst: pick("read", false),
    };
    Ok((rows, summary))
}

pub fn human(b: u64) -> String {
    if b >= 1 << 20 { format!("{}M", b >> 20) } else if b >= 1 << 10 { format!("{}K", b >> 10) } else { b.to_string() }
}

/// Plots MB/s against b, one line per strategy, write and read side by side.
pub fn plot(base: &Path, rows: &[Row], strategies: &[Strategy]) -> Result<Vec<PathBuf>> {
    let panel = |op: &str| Panel {
        title: format!("{op} throughput (aggregate)"),
        x_label: "schedule block b (bytes)".into(),
        y_label: "MB/s".into(),
        series: strategies
            .iter()
            .map(|s| Series {
                name: format!("{s}-IOS"),
                points: rows.iter().filter(|r| r.op == op && r.strategy == s.name()).map(|r| (r.block_bytes as f64, r.mb_s)).collect(),
            })
            .collect(),
    };
    plot::write(base, &[panel("write"), panel("read")])
}

/// One client process of the benchmark.
pub struct Worker {
    pub path: String,
    pub rank: u32,
    pub procs: u32,
    pub size: u64,
    pub strategy: Strategy,
    pub block: u64,
    pub window: usize,
    pub op: String,
}

/// Runs one client: its region is `[rank * size, (rank + 1) * size)`.
pub fn worker(w: &Worker) -> Result<()> {
    let Worker { path, rank, procs, size, strategy, block, window, op } = w;
    let (rank, procs, size, strategy, block, window) = (*rank, *procs, *size, *strategy, *block, *window);
    let accesses: Arc<Vec<(u64, u64)>> = Arc::new((0..u64::from(procs)).map(|i| (i * size, size)).collect());
    let schedule = Schedule { strategy, block, window, rank, group: procs, group_accesses: Some(accesses) };
    let c = Client::with_options(ClusterFile::load(&crate::locate()?)?, crate::client_options()?)?;
    let f = c.open(path, op == "write")?;
    let mut buf: Vec<u8> = (0..size).map(|i| (i % 251) as u8 ^ rank as u8).collect();
    let off = u64::from(rank) * size;
    timed(|| {
        // Writes count until they are durable, as the paper's disks did.
        let n = if op == "write" {
            let n = f.write_at_with(off, &buf, &schedule)?;
            f.fsync()?;
            n
        } else {
            f.read_at_with(off, &mut buf, &schedule)?
        };
        if n as u64 != size {
            bail!("moved {n} of {size} bytes");
        }
        Ok(())
    })
}

/// Paper 000's scheduling sweep, as `weft bench sched` runs it.
pub struct Sched<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub params: Params,
    /// Servers of the cluster (for the title).
    pub servers: usize,
    /// What the run found beyond its rows (set by `run`).
    pub summary: Option<Summary>,
}

impl crate::experiment::Experiment for Sched<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "sched"
    }

    fn run(&mut self, _progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        let (rows, summary) = run(self.exe, self.cluster, &self.params)?;
        self.summary = Some(summary);
        Ok(rows)
    }

    fn summary(&self, _rows: &[Row]) -> Result<serde_json::Map<String, serde_json::Value>> {
        match serde_json::to_value(&self.summary)? {
            serde_json::Value::Object(m) => Ok(m),
            _ => Ok(Default::default()),
        }
    }

    fn plots(&self, stem: &Path, rows: &[Row]) -> Result<Option<Vec<PathBuf>>> {
        plot(stem, rows, &self.params.strategies).map(Some)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        use crate::experiment::{f1, human_bytes};
        let p = &self.params;
        let mut table = Vec::new();
        for &b in &p.blocks {
            for s in &p.strategies {
                let get = |op: &str| rows.iter().find(|r| r.op == op && r.strategy == s.name() && r.block_bytes == b).map_or(0.0, |r| r.mb_s);
                table.push(vec![human(b), s.name().to_string(), f1(get("write")), f1(get("read"))]);
            }
        }
        let mut report = crate::experiment::Report::table(
            format!("Scheduling (paper 000): {} clients x {}, {} servers, stripe {}, window {}", p.procs, human_bytes(p.size), self.servers, human_bytes(p.stripe_size), p.window),
            &["b", "strategy", "write MB/s", "read MB/s"],
            table,
        );
        if let Some(s) = &self.summary {
            let show = |name: &str, x: &(String, u64, f64)| format!("{name} {:.1} MB/s ({}, b = {})", x.2, x.0, human(x.1));
            report = report
                .note(format!("\n{}; {}; spread {:.0}%", show("write best", &s.write_best), show("worst", &s.write_worst), (s.write_best.2 / s.write_worst.2 - 1.0) * 100.0))
                .note(format!("{}; {}; spread {:.0}%", show("read best", &s.read_best), show("worst", &s.read_worst), (s.read_best.2 / s.read_worst.2 - 1.0) * 100.0))
                .note(format!(
                    "default ({}, b = {}) in paired re-runs against the top {} of the sweep: {:.2} of the best write ({} b = {}), {:.2} of the best read ({} b = {}); above 1: the default won",
                    s.default_strategy,
                    human(s.default_block_bytes),
                    3,
                    s.write_default_vs_best,
                    s.write_paired_best.0,
                    human(s.write_paired_best.1),
                    s.read_default_vs_best,
                    s.read_paired_best.0,
                    human(s.read_paired_best.1)
                ))
                .note(format!("writes timed through fsync; reads {}", if s.reads_cold { "cold (page cache dropped before each run)" } else { "WARM: dropping the page cache needs root, so reads may come from memory" }));
        }
        report.note(PAPER)
    }
}
