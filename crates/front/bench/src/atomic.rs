//! Paper 004's experiments: MPI atomic mode with no locking, whole-file,
//! byte-range and list locking on three workloads (3-D block writes, a
//! FLASH-like checkpoint, the tile reader), and the lock service's own
//! throughput and latency.

use crate::workers::{run_workers, timed};
use crate::{median, BenchCluster};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;
use weft_client::{CreateOptions, Datatype, Extent, LockGranularity, Pattern, View};

/// Locking modes, in table order.
pub const MODES: [&str; 4] = ["none", "file", "range", "list"];

/// Paper 004: list locking's share of no locking on the 3-D block test.
pub const PAPER: &str = "paper 004: list locking at 93%, 62%, 75% of no locking at 8, 27, 64 processes (3-D block)";

#[derive(Debug, Clone)]
pub struct Params {
    pub workloads: Vec<String>,
    pub block3d_procs: Vec<u64>,
    pub block3d_n: u64,
    pub flash_procs: Vec<u64>,
    pub flash_blocks: u64,
    pub frames: u64,
    pub repeats: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub workload: String,
    pub procs: u64,
    pub mode: String,
    pub mb_s: f64,
    pub ratio_to_none: f64,
    pub locks_per_client: u64,
    pub max_concurrency: u64,
}

fn pattern(workload: &str, p: &Params) -> Result<Pattern> {
    Ok(match workload {
        "block3d" => Pattern::Block3d { n: p.block3d_n, elem: 4 },
        "flash" => Pattern::Flash { vars: 24, blocks: p.flash_blocks, nxb: 8, guard: 4 },
        "tile" => Pattern::tile_reader(),
        o => bail!("unknown workload {o:?}: use block3d, flash, tile"),
    })
}

fn granularity(mode: &str) -> Option<LockGranularity> {
    match mode {
        "file" => Some(LockGranularity::WholeFile),
        "range" => Some(LockGranularity::ByteRange),
        "list" => Some(LockGranularity::List),
        _ => None,
    }
}

/// Lock items per client and the largest set of clients whose locks do not
/// conflict (greedy, in rank order), as in the paper's tables 1 to 3.
fn lock_shape(pat: &Pattern, procs: u64, g: LockGranularity, exclusive: bool) -> Result<(u64, u64)> {
    let mut sets = Vec::new();
    for r in 0..procs {
        let ft = pat.filetype(procs, r)?;
        let regions: Vec<(u64, u64)> = ft.regions(0).map(|(o, l)| (o as u64, l)).collect();
        sets.push(g.extents(&regions)?);
    }
    let per_client = sets.iter().map(Vec::len).max().unwrap_or(0) as u64;
    if !exclusive {
        return Ok((per_client, procs));
    }
    let conflict = |a: &[Extent], b: &[Extent]| a.iter().any(|x| b.iter().any(|y| x.overlaps(y)));
    let mut chosen: Vec<usize> = Vec::new();
    for r in 0..sets.len() {
        if chosen.iter().all(|&c| !conflict(&sets[c], &sets[r])) {
            chosen.push(r);
        }
    }
    Ok((per_client, chosen.len() as u64))
}

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params) -> Result<Vec<Row>> {
    let mut points: Vec<(String, u64)> = Vec::new();
    for w in &p.workloads {
        let procs: Vec<u64> = match w.as_str() {
            "block3d" => p.block3d_procs.clone(),
            "flash" => p.flash_procs.clone(),
            _ => vec![6],
        };
        points.extend(procs.into_iter().map(|n| (w.clone(), n)));
    }
    let bar = ProgressBar::new((points.len() * MODES.len() * p.repeats) as u64);
    bar.set_style(ProgressStyle::with_template("{msg:>24} [{bar:30}] {pos}/{len}").expect("valid template"));
    let client = crate::connect(&bc.cluster_file)?;
    let _ = client.mkdir("/bench", 0o777);
    let mut rows = Vec::new();
    for (w, procs) in points {
        let pat = pattern(&w, p)?;
        let frames = if w == "tile" { p.frames } else { 1 };
        let path = format!("/bench/atomic-{}-{w}-{procs}", std::process::id());
        let f = client.create(&path, CreateOptions::default())?;
        let size = pat.file_size_for(procs) * frames;
        f.truncate(size)?;
        if w == "tile" {
            // The reader needs frames to read.
            let chunk = vec![7u8; 8 << 20];
            let mut off = 0;
            while off < size {
                let n = chunk.len().min((size - off) as usize);
                f.write_at(off, &chunk[..n])?;
                off += n as u64;
            }
        }
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
        for rep in 0..p.repeats {
            for k in 0..MODES.len() {
                let mode = MODES[(k + rep) % MODES.len()];
                bar.set_message(format!("{w} P={procs} {mode}"));
                let args: Vec<Vec<String>> = (0..procs)
                    .map(|r| {
                        let v = [
                            "atomic-worker", "--workload", &w, "--procs", &procs.to_string(), "--rank", &r.to_string(), "--mode", mode, "--path", &path,
                            "--frames", &frames.to_string(), "--block3d-n", &p.block3d_n.to_string(), "--flash-blocks", &p.flash_blocks.to_string(),
                        ];
                        v.map(String::from).to_vec()
                    })
                    .collect();
                let secs = run_workers(weft_bin, bc, &args, &[])?;
                let moved = if w == "tile" { (0..procs).map(|r| pat.filetype(procs, r).map(|t| t.size())).sum::<Result<u64, _>>()? * frames } else { size };
                rates[(k + rep) % MODES.len()].push(moved as f64 / secs / 1e6);
                bar.inc(1);
            }
        }
        client.unlink(&path)?;
        let none = median(rates[0].clone());
        for (k, mode) in MODES.iter().enumerate() {
            let mb_s = median(rates[k].clone());
            let (locks, conc) = match granularity(mode) {
                Some(g) => lock_shape(&pat, procs, g, w != "tile")?,
                None => (0, procs),
            };
            rows.push(Row { workload: w.clone(), procs, mode: mode.to_string(), mb_s, ratio_to_none: mb_s / none, locks_per_client: locks, max_concurrency: conc });
        }
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// One atomic-mode worker.
pub struct Worker {
    pub workload: String,
    pub procs: u64,
    pub rank: u64,
    pub mode: String,
    pub path: String,
    pub frames: u64,
    pub params: Params,
}

pub fn worker(w: &Worker) -> Result<()> {
    let pat = pattern(&w.workload, &w.params)?;
    let ft = pat.filetype(w.procs, w.rank)?;
    let memtype = pat.memtype()?.unwrap_or_else(Datatype::byte);
    let count = if pat.memtype()?.is_some() { 1 } else { ft.size() };
    let mut buf = vec![(w.rank % 251) as u8 + 1; pat.memory_bytes(w.procs, w.rank)? as usize];
    let c = crate::connect(&crate::locate()?)?;
    let reading = w.workload == "tile";
    let mut f = c.open(&w.path, !reading).with_context(|| format!("open {}", w.path))?;
    if let Some(g) = granularity(&w.mode) {
        f.set_atomicity(true)?;
        f.set_lock_granularity(g);
    }
    let frame = pat.file_size_for(w.procs);
    timed(|| {
        for k in 0..w.frames {
            let view = View::new((k * frame) as i64, Datatype::byte(), ft.clone())?;
            let n = if reading { f.read_view(&view, 0, &mut buf, &memtype, count)? } else { f.write_view(&view, 0, &buf, &memtype, count)? };
            if n as u64 != ft.size() {
                bail!("moved {n} of {} bytes", ft.size());
            }
        }
        Ok(())
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct LockRow {
    pub clients: u64,
    pub ranges: u64,
    pub pairs_per_s: f64,
    pub median_us: f64,
    pub p99_us: f64,
}

/// `weft bench lock`: acquire+release pairs of exclusive locks on
/// disjoint bytes from several clients, 1-range and 64-range requests.
pub fn run_lock(weft_bin: &Path, bc: &BenchCluster, clients: &[u64], ranges: &[u64], ops: u64) -> Result<Vec<LockRow>> {
    let client = crate::connect(&bc.cluster_file)?;
    let _ = client.mkdir("/bench", 0o777);
    let path = format!("/bench/lock-{}", std::process::id());
    client.create(&path, CreateOptions::default())?;
    let mut rows = Vec::new();
    for &r in ranges {
        for &n in clients {
            let args: Vec<Vec<String>> =
                (0..n).map(|k| ["lock-worker", "--path", &path, "--rank", &k.to_string(), "--ranges", &r.to_string(), "--ops", &ops.to_string()].map(String::from).to_vec()).collect();
            let dir = bc.scratch.join("lock-latencies");
            std::fs::create_dir_all(&dir)?;
            let secs = run_workers(weft_bin, bc, &args, &[("WEFT_LATENCY_DIR", dir.to_str().unwrap_or("."))])?;
            let mut lat: Vec<f64> = Vec::new();
            for k in 0..n {
                let text = std::fs::read_to_string(dir.join(format!("{k}.txt")))?;
                lat.extend(text.split_whitespace().filter_map(|v| v.parse::<f64>().ok()));
            }
            lat.sort_by(f64::total_cmp);
            let p99 = lat.get(((lat.len() as f64) * 0.99) as usize).copied().unwrap_or(f64::NAN);
            rows.push(LockRow { clients: n, ranges: r, pairs_per_s: (n * ops) as f64 / secs, median_us: median(lat.clone()), p99_us: p99 });
        }
    }
    client.unlink(&path)?;
    Ok(rows)
}

/// One lock-benchmark client: `ops` pairs on its own 1 MiB area; latencies
/// (us, one per pair) go to `$WEFT_LATENCY_DIR/<rank>.txt`.
pub fn lock_worker(path: &str, rank: u64, ranges: u64, ops: u64) -> Result<()> {
    let c = crate::connect(&crate::locate()?)?;
    let f = c.open(path, true)?;
    let base = rank << 20;
    // Irregular lengths, so the 64 ranges stay 64 items.
    let extents: Vec<Extent> = (0..ranges).map(|k| Extent::range(base + k * 4096, base + k * 4096 + 100 + k).map_err(anyhow::Error::from)).collect::<Result<_>>()?;
    // Warm up the session outside the timing.
    c.lock(&f, true, &extents)?.release()?;
    let mut lat = Vec::with_capacity(ops as usize);
    timed(|| {
        for _ in 0..ops {
            let t = Instant::now();
            c.lock(&f, true, &extents)?.release()?;
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(())
    })?;
    let dir = std::env::var("WEFT_LATENCY_DIR").unwrap_or_else(|_| ".".into());
    let text: String = lat.iter().map(|v| format!("{v:.2} ")).collect();
    std::fs::write(Path::new(&dir).join(format!("{rank}.txt")), text)?;
    Ok(())
}

/// Paper 004's atomic-mode experiment, as `weft bench atomic` runs it.
pub struct Atomic<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub params: Params,
}

impl crate::experiment::Experiment for Atomic<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "atomic"
    }

    fn run(&mut self, _progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.exe, self.cluster, &self.params)
    }

    /// MB/s by processes, a series per locking mode, a panel per workload.
    fn plots(&self, stem: &Path, rows: &[Row]) -> Result<Option<Vec<std::path::PathBuf>>> {
        let panels: Vec<crate::plot::Panel> = ["block3d", "flash"]
            .iter()
            .filter(|w| rows.iter().any(|r| r.workload == **w))
            .map(|w| crate::plot::Panel {
                title: format!("{w}: MB/s by locking mode"),
                x_label: "processes".into(),
                y_label: "MB/s".into(),
                series: MODES.iter().map(|m| crate::plot::Series { name: m.to_string(), points: rows.iter().filter(|r| r.workload == *w && r.mode == *m).map(|r| (r.procs as f64, r.mb_s)).collect() }).collect(),
            })
            .collect();
        crate::plot::write(stem, &panels).map(Some)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        let table = rows
            .iter()
            .map(|r| vec![r.workload.clone(), r.procs.to_string(), r.mode.clone(), crate::experiment::f1(r.mb_s), format!("{:.0}%", r.ratio_to_none * 100.0), r.locks_per_client.to_string(), r.max_concurrency.to_string()])
            .collect();
        crate::experiment::Report::table(format!("Atomic mode (paper 004), median of {}", self.params.repeats), &["workload", "procs", "locking", "MB/s", "of none", "locks/client", "max concurrency"], table).note(PAPER)
    }
}

/// The lock service's rate, as `weft bench lock` measures it.
pub struct LockRate<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub clients: Vec<u64>,
    pub ranges: Vec<u64>,
    pub ops: u64,
}

impl crate::experiment::Experiment for LockRate<'_> {
    type Row = LockRow;

    fn name(&self) -> &'static str {
        "lock"
    }

    fn run(&mut self, _progress: &dyn Fn(&str)) -> Result<Vec<LockRow>> {
        run_lock(self.exe, self.cluster, &self.clients, &self.ranges, self.ops)
    }

    fn report(&self, rows: &[LockRow]) -> crate::experiment::Report {
        let table = rows.iter().map(|r| vec![r.ranges.to_string(), r.clients.to_string(), format!("{:.0}", r.pairs_per_s), format!("{:.1}", r.median_us), format!("{:.1}", r.p99_us)]).collect();
        crate::experiment::Report::table(format!("Lock service: exclusive acquire+release pairs, {} per client", self.ops), &["ranges", "clients", "pairs/s", "median us", "p99 us"], table)
    }
}
