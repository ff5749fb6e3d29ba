//! Paper 000's BTIO experiment (figures 4 and 5): q^2 processes write and
//! then read one file through nested-strided views (3240-byte pieces, two
//! levels deep), collectively, for each scheduling heuristic and schedule
//! block b, with two-phase collective I/O and with each rank's own list
//! I/O, and once with server-directed collective I/O (paper 001's
//! disk-directed I/O; the servers order the transfer themselves). Ranks are threads here, each with its own client (own connections,
//! as separate processes would have), and `ThreadComm` for the collective
//! steps. Writes are fsync'd; reads are cold where the page cache can be
//! dropped (as root).

use crate::{median, BenchCluster};
use anyhow::{bail, Result};
use serde::Serialize;
use std::time::Instant;
use weft_client::collective::{read_all, write_all, CbMode, CollMethod, CollectiveHints};
use weft_client::comm::{Communicator, ThreadComm};
use weft_client::{Client, CreateOptions, Datatype, Pattern, View};

/// The paper's numbers, printed beside Weft's.
pub const PAPER: &str = "paper 000 (BTIO class B, one I/O phase of 42.2 MB): write times spread 53% across heuristics and b \
(0.78 s first-IOS b = 4 KiB vs 0.51 s first-IOS b = 8 MiB), read times 173% (1.15 s random-IOS b = 4 KiB vs 0.42 s hash-IOS b = 8 MiB)";

#[derive(Debug, Clone)]
pub struct Params {
    /// q^2 processes.
    pub q: u64,
    /// Points per cell in the two scaled dimensions (pieces stay 81 points).
    pub cell_yz: u64,
    pub strategies: Vec<String>,
    pub blocks: Vec<u64>,
    pub repeats: usize,
    /// Aggregators of two-phase I/O.
    pub aggregators: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub workload: &'static str,
    pub procs: usize,
    pub op: &'static str,
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    pub strategy: String,
    pub block_bytes: u64,
    pub seconds: f64,
    pub mb_s: f64,
}

/// Two-phase and independent list I/O run under every heuristic and b;
/// server-directed I/O once (the servers order the transfer themselves).
const IMPLS: [(&str, CbMode, CollMethod); 3] =
    [("weft-two-phase", CbMode::Enable, CollMethod::Auto), ("weft-independent", CbMode::Disable, CollMethod::Auto), ("weft-server", CbMode::Automatic, CollMethod::Server)];

pub fn run(bc: &BenchCluster, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    if p.q == 0 || p.cell_yz == 0 || p.repeats == 0 || p.blocks.is_empty() || p.strategies.is_empty() {
        bail!("q, cells, repeats, blocks and strategies must be given");
    }
    let pattern = Pattern::btio(p.q, p.cell_yz);
    let procs = (p.q * p.q) as usize;
    let bytes = pattern.file_size() as f64;
    let clients: Vec<Client> = (0..procs).map(|_| crate::connect(&bc.cluster_file)).collect::<Result<_>>()?;
    let _ = clients[0].mkdir("/bench", 0o777);
    let path = format!("/bench/btio-{}", std::process::id());
    let views: Vec<View> = (0..procs as u64).map(|r| Ok(View::new(0, Datatype::byte(), pattern.filetype(procs as u64, r)?)?)).collect::<Result<_>>()?;
    let mut configs: Vec<(&'static str, CbMode, CollMethod, String, u64)> = Vec::new();
    for (name, mode, method) in IMPLS {
        if method == CollMethod::Server {
            configs.push((name, mode, method, "server".into(), 0));
            continue;
        }
        for s in &p.strategies {
            for &b in &p.blocks {
                configs.push((name, mode, method, s.clone(), b));
            }
        }
    }
    // Every configuration once per repeat, the order rotating each time.
    let mut samples: Vec<[Vec<f64>; 2]> = configs.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    for rep in 0..p.repeats {
        for k in 0..configs.len() {
            let c = (k + rep) % configs.len();
            let (name, mode, method, s, b) = &configs[c];
            progress(&format!("{name} {s} b={b} round {}/{}", rep + 1, p.repeats));
            clients[0].create(&path, CreateOptions::default())?;
            for (i, op) in ["write", "read"].into_iter().enumerate() {
                if op == "read" {
                    crate::sched::drop_caches();
                }
                let hints = CollectiveHints { cb_nodes: p.aggregators, cb_buffer_size: 16 << 20, mode: *mode, method: *method, ..Default::default() };
                let block = if *b == 0 { 1 << 20 } else { *b };
                let strategy = if *method == CollMethod::Server { "first" } else { s };
                samples[c][i].push(one_phase(&clients, &views, &path, strategy, block, op == "write", &hints)?);
            }
            clients[0].unlink(&path)?;
        }
    }
    let mut rows = Vec::new();
    for ((name, _, _, s, b), mut sample) in configs.into_iter().zip(samples) {
        for (i, op) in ["write", "read"].into_iter().enumerate() {
            let secs = median(std::mem::take(&mut sample[i]));
            rows.push(Row { workload: "btio", procs, op, implementation: name, strategy: s.clone(), block_bytes: b, seconds: secs, mb_s: bytes / secs / 1e6 });
        }
    }
    Ok(rows)
}

/// One collective write (fsync'd) or read by every rank; the slowest
/// rank's seconds, from a common start.
fn one_phase(clients: &[Client], views: &[View], path: &str, strategy: &str, block: u64, write: bool, hints: &CollectiveHints) -> Result<f64> {
    let comms = ThreadComm::group(clients.len());
    let times: Vec<Result<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .zip(clients)
            .zip(views)
            .map(|((comm, client), view)| {
                s.spawn(move || -> Result<f64> {
                    let mut f = client.open(path, write)?;
                    f.set_hint("weft_sched", strategy)?;
                    f.set_hint("weft_sched_block", &block.to_string())?;
                    let len = view.filetype().size() as usize;
                    let mut buf: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
                    let segs = f.view_segments(view, 0, len, &Datatype::byte(), len as u64)?;
                    comm.barrier()?;
                    let t0 = Instant::now();
                    if write {
                        write_all(&f, comm, &segs, &buf, hints)?;
                        f.fsync()?;
                    } else {
                        read_all(&f, comm, &segs, &mut buf, hints)?;
                    }
                    let t = t0.elapsed().as_secs_f64();
                    comm.barrier()?;
                    Ok(t)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a rank panicked")))).collect()
    });
    let mut slowest = 0f64;
    for t in times {
        slowest = slowest.max(t?);
    }
    Ok(slowest)
}

/// Spread of times across strategies and blocks, as the paper states it:
/// slowest over fastest, minus one.
pub fn spread(rows: &[Row], implementation: &str, op: &str) -> f64 {
    let t: Vec<f64> = rows.iter().filter(|r| r.implementation == implementation && r.op == op).map(|r| r.seconds).collect();
    let (lo, hi) = (t.iter().copied().fold(f64::MAX, f64::min), t.iter().copied().fold(0.0, f64::max));
    if lo > 0.0 && lo < f64::MAX { hi / lo - 1.0 } else { 0.0 }
}

/// Paper 000's BTIO experiment as `weft bench btio` runs it.
pub struct Btio<'a> {
    pub cluster: &'a BenchCluster,
    pub params: Params,
}

impl crate::experiment::Experiment for Btio<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "btio"
    }

    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.cluster, &self.params, progress)
    }

    /// Seconds by schedule block, a series per implementation and heuristic.
    fn plots(&self, stem: &std::path::Path, rows: &[Row]) -> Result<Option<Vec<std::path::PathBuf>>> {
        let blocks = &self.params.blocks;
        let panels: Vec<crate::plot::Panel> = ["write", "read"]
            .iter()
            .map(|op| {
                let mut keys: Vec<(&str, String)> = Vec::new();
                for r in rows {
                    let k = (r.implementation, r.strategy.clone());
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
                let series = keys
                    .into_iter()
                    .map(|(im, st)| crate::plot::Series {
                        name: format!("{} {st}", im.trim_start_matches("weft-")),
                        // Server-directed I/O has no b: a level line across them.
                        points: rows
                            .iter()
                            .filter(|r| r.op == *op && r.implementation == im && r.strategy == st)
                            .flat_map(|r| if r.block_bytes == 0 { blocks.iter().map(|&b| (b as f64, r.seconds)).collect() } else { vec![(r.block_bytes as f64, r.seconds)] })
                            .collect(),
                    })
                    .collect();
                crate::plot::Panel { title: format!("BTIO {op}, {} ranks: seconds by schedule block b", self.params.q * self.params.q), x_label: "schedule block b (bytes)".into(), y_label: "seconds".into(), series }
            })
            .collect();
        crate::plot::write(stem, &panels).map(Some)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        use crate::experiment::{f1, human_bytes};
        let p = &self.params;
        let table = rows.iter().map(|r| vec![r.op.to_string(), r.implementation.to_string(), r.strategy.clone(), human_bytes(r.block_bytes), format!("{:.3}", r.seconds), f1(r.mb_s)]).collect();
        let mut report = crate::experiment::Report::table(
            format!("BTIO (paper 000 figs. 4-5), {} ranks, {} per phase, median of {}; writes fsync'd", p.q * p.q, human_bytes(Pattern::btio(p.q, p.cell_yz).file_size()), p.repeats),
            &["op", "impl", "strategy", "b", "seconds", "MB/s"],
            table,
        );
        for im in ["weft-two-phase", "weft-independent"] {
            report = report.note(format!("{im}: spread {:.0}% write, {:.0}% read", spread(rows, im, "write") * 100.0, spread(rows, im, "read") * 100.0));
        }
        for op in ["write", "read"] {
            let best = |im: &str| rows.iter().filter(|r| r.op == op && r.implementation == im).map(|r| r.seconds).fold(f64::MAX, f64::min);
            let server = best("weft-server");
            report = report.note(format!(
                "{op}: server-directed {server:.3} s; best two-phase {:.3} s ({:.2}x), best independent {:.3} s ({:.2}x) (x > 1: server-directed faster)",
                best("weft-two-phase"),
                best("weft-two-phase") / server,
                best("weft-independent"),
                best("weft-independent") / server
            ));
        }
        report.note(PAPER)
    }
}
