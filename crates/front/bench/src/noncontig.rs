//! Non-contiguous access (papers 000, 001): a pattern's processes write and
//! then read their parts of one file through file views, three ways in the
//! same run: Weft with list I/O (one request per server carrying all
//! pieces), Weft with one request per piece, and a local file with one
//! positioned read or write per piece.

use crate::workers::{run_workers, timed};
use crate::{median, BenchCluster};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::os::unix::fs::FileExt;
use std::path::Path;
use weft_client::{Client, ClientOptions, CreateOptions, Datatype, Distrib, Pattern, View};
use weft_net::ClusterFile;

/// Processes per pattern, as the issue fixes it.
pub const PROCS: u64 = 4;

/// Requests in flight per worker, in both Weft modes: generous, so the
/// per-piece baseline is not held back by pacing.
const WINDOW: &str = "4096";

#[derive(Debug, Clone)]
pub struct Params {
    pub patterns: Vec<String>,
    /// Rows and columns of the 2-D record matrix.
    pub matrix: u64,
    /// BTIO cell size in the two scaled dimensions.
    pub btio_cells: u64,
    pub repeats: usize,
    pub stripe_size: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub pattern: String,
    pub op: String,
    pub bytes: u64,
    pub pieces_per_proc: u64,
    pub listio_mb_s: f64,
    pub perpiece_mb_s: f64,
    pub local_mb_s: f64,
    pub listio_vs_perpiece: f64,
    pub listio_vs_local: f64,
}

/// The named patterns of the benchmark.
pub fn pattern(name: &str, p: &Params) -> Result<Pattern> {
    Ok(match name {
        // Paper 001's hard case: 2-D BLOCK-CYCLIC of 8-byte records.
        "hpf2d-8" => Pattern::Hpf2d { rows: p.matrix, cols: p.matrix, record: 8, dist: [Distrib::Block(None), Distrib::Cyclic(1)], grid: [2, 2] },
        // Paper 001's easy case: 1-D CYCLIC of 8 KiB records.
        "hpf1d-8k" => Pattern::Hpf1d { records: p.matrix, record: 8192, dist: Distrib::Cyclic(1) },
        // Paper 000's BTIO, 3240-byte pieces, 4 processes (q = 2).
        "btio" => Pattern::btio(2, p.btio_cells),
        o => bail!("unknown pattern {o:?}: use hpf2d-8, hpf1d-8k, btio"),
    })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    ListIo,
    PerPiece,
    Local,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::ListIo => "listio",
            Mode::PerPiece => "perpiece",
            Mode::Local => "local",
        }
    }
}

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params) -> Result<Vec<Row>> {
    let steps = (p.patterns.len() * p.repeats * 3) as u64;
    let bar = ProgressBar::new(steps);
    bar.set_style(ProgressStyle::with_template("{msg:>24} [{bar:30}] {pos}/{len}").expect("valid template"));
    let client = Client::connect(&bc.cluster_file)?;
    let _ = client.mkdir("/bench", 0o777);
    let mut rows = Vec::new();
    for name in &p.patterns {
        let pat = pattern(name, p)?;
        let pieces = pat.filetype(PROCS, 0)?.regions(0).count() as u64;
        let weft_path = format!("/bench/nc-{}-{name}", std::process::id());
        let local_path = bc.scratch.join(format!("nc-{name}"));
        // Files exist at full size before any timing, so reads have data.
        let f = client.create(&weft_path, CreateOptions { stripe_size: p.stripe_size, ..CreateOptions::default() })?;
        f.truncate(pat.file_size())?;
        std::fs::File::create(&local_path)?.set_len(pat.file_size())?;
        let mut times: Vec<[Vec<f64>; 3]> = vec![Default::default(), Default::default()];
        for rep in 0..p.repeats {
            let mut modes = [Mode::ListIo, Mode::PerPiece, Mode::Local];
            modes.rotate_left(rep % 3);
            for mode in modes {
                bar.set_message(format!("{name} {}", mode.name()));
                for (k, op) in ["write", "read"].iter().enumerate() {
                    let target = if mode == Mode::Local { local_path.display().to_string() } else { weft_path.clone() };
                    let args: Vec<Vec<String>> = (0..PROCS)
                        .map(|rank| {
                            [
                                "noncontig-worker", "--pattern", name, "--matrix", &p.matrix.to_string(), "--btio-cells", &p.btio_cells.to_string(),
                                "--rank", &rank.to_string(), "--mode", mode.name(), "--op", op, "--path", &target,
                            ]
                            .map(String::from)
                            .to_vec()
                        })
                        .collect();
                    // Both Weft modes get the same generous window, so the
                    // comparison is of one request per piece against lists.
                    let secs = run_workers(weft_bin, &bc.cluster_file, &args, &[("WEFT_SCHED_WINDOW", WINDOW)])?;
                    times[k][mode as usize].push(secs);
                }
                bar.inc(1);
            }
        }
        client.unlink(&weft_path)?;
        std::fs::remove_file(&local_path)?;
        let bytes = pat.file_size();
        for (k, op) in ["write", "read"].iter().enumerate() {
            let rate = |m: Mode| bytes as f64 / median(times[k][m as usize].clone()) / 1e6;
            let (l, pp, lo) = (rate(Mode::ListIo), rate(Mode::PerPiece), rate(Mode::Local));
            rows.push(Row {
                pattern: name.clone(),
                op: op.to_string(),
                bytes,
                pieces_per_proc: pieces,
                listio_mb_s: l,
                perpiece_mb_s: pp,
                local_mb_s: lo,
                listio_vs_perpiece: l / pp,
                listio_vs_local: l / lo,
            });
        }
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// One worker: rank `rank` of the pattern, writing or reading its part.
pub fn worker(name: &str, p: &Params, rank: u64, mode: &str, op: &str, path: &str) -> Result<()> {
    let pat = pattern(name, p)?;
    let view = View::new(0, Datatype::byte(), pat.filetype(PROCS, rank)?)?;
    let len = view.filetype().size();
    let mut buf: Vec<u8> = (0..len).map(|i| (i % 253) as u8 ^ rank as u8).collect();
    let write = op == "write";
    match mode {
        "local" => {
            let f = std::fs::File::options().read(true).write(true).open(path).with_context(|| format!("open {path}"))?;
            let regions: Vec<(u64, u64)> = view.file_regions(0, len).collect();
            timed(|| {
                let mut at = 0usize;
                for (o, l) in regions {
                    let b = &mut buf[at..at + l as usize];
                    if write { f.write_all_at(b, o)? } else { f.read_exact_at(b, o)? }
                    at += l as usize;
                }
                Ok(())
            })
        }
        "listio" | "perpiece" => {
            let o = ClientOptions { list_io: mode == "listio", ..ClientOptions::default() };
            let c = Client::with_options(ClusterFile::load(&ClusterFile::locate(None)?)?, o)?;
            let f = c.open(path, write)?;
            timed(|| {
                let n = if write { f.write_view(&view, 0, &buf, &Datatype::byte(), len)? } else { f.read_view(&view, 0, &mut buf, &Datatype::byte(), len)? };
                if n as u64 != len {
                    bail!("moved {n} of {len} bytes");
                }
                Ok(())
            })
        }
        m => bail!("unknown mode {m:?}"),
    }
}
