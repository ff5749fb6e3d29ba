//! Non-contiguous access (papers 000, 001): a pattern's processes write and
//! then read their parts of one file through file views, four ways in the
//! same run: Weft with list I/O (one request per server carrying all
//! pieces), Weft with one request per piece, and a local file accessed two
//! ways: one positioned read or write per piece, and data sieving as an
//! MPI-IO library does it on a local file (ROMIO's defaults: read the
//! covering extent in 4 MiB buffers and copy the pieces out; for writes,
//! lock a 512 KiB window, read it, copy the pieces in, write it back).

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
    /// The local file with data sieving, as an MPI-IO library would do it.
    pub local_sieve_mb_s: f64,
    pub listio_vs_perpiece: f64,
    pub listio_vs_local: f64,
    pub listio_vs_local_sieve: f64,
}

/// ROMIO's default data-sieving buffers: `ind_rd_buffer_size` (4 MiB) and
/// `ind_wr_buffer_size` (512 KiB).
const SIEVE_READ_BUFFER: u64 = 4 << 20;
const SIEVE_WRITE_BUFFER: u64 = 512 << 10;

/// The named patterns of the benchmark.
pub fn pattern(name: &str, p: &Params) -> Result<Pattern> {
    Ok(match name {
        // Paper 001's hard case: 2-D BLOCK-CYCLIC of 8-byte records.
        "hpf2d-8" => Pattern::Hpf2d { rows: p.matrix, cols: p.matrix, record: 8, dist: [Distrib::Block(None), Distrib::Cyclic(1)], grid: [2, 2] },
        // Paper 001's easy case: 1-D CYCLIC of 8 KiB records.
        "hpf1d-8k" => Pattern::Hpf1d { records: p.matrix, record: 8192, dist: Distrib::Cyclic(1) },
        // Paper 000's BTIO, 3240-byte pieces, 4 processes (q = 2).
        "btio" => Pattern::btio(2, p.btio_cells),
        // Any of paper 001's HPF distributions: `hpf-<dims>-<8|8k>`, e.g.
        // hpf-bc-8 (= hpf2d-8), hpf-c-8k (= hpf1d-8k); `matrix` is the
        // 1-D record count or the 2-D edge.
        o => match o.strip_prefix("hpf-").and_then(|r| r.split_once('-')) {
            Some((dims, rec @ ("8" | "8k"))) => Pattern::hpf(dims, if rec == "8" { 8 } else { 8192 }, p.matrix)?,
            _ => bail!("unknown pattern {o:?}: use hpf2d-8, hpf1d-8k, btio, or hpf-<dims>-<8|8k> (dims: n, b, c, nb, ..., cc)"),
        },
    })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    ListIo,
    PerPiece,
    Local,
    LocalSieve,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::ListIo => "listio",
            Mode::PerPiece => "perpiece",
            Mode::Local => "local",
            Mode::LocalSieve => "sieve",
        }
    }
}

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params) -> Result<Vec<Row>> {
    let steps = (p.patterns.len() * p.repeats * 4) as u64;
    let bar = ProgressBar::new(steps);
    bar.set_style(ProgressStyle::with_template("{msg:>24} [{bar:30}] {pos}/{len}").expect("valid template"));
    let client = crate::connect(&bc.cluster_file)?;
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
        let mut times: Vec<[Vec<f64>; 4]> = vec![Default::default(), Default::default()];
        for rep in 0..p.repeats {
            let mut modes = [Mode::ListIo, Mode::PerPiece, Mode::Local, Mode::LocalSieve];
            modes.rotate_left(rep % 4);
            for mode in modes {
                bar.set_message(format!("{name} {}", mode.name()));
                for (k, op) in ["write", "read"].iter().enumerate() {
                    let target = if matches!(mode, Mode::Local | Mode::LocalSieve) { local_path.display().to_string() } else { weft_path.clone() };
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
                    let secs = run_workers(weft_bin, bc, &args, &[("WEFT_SCHED_WINDOW", WINDOW)])?;
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
            let (l, pp, lo, ls) = (rate(Mode::ListIo), rate(Mode::PerPiece), rate(Mode::Local), rate(Mode::LocalSieve));
            rows.push(Row {
                pattern: name.clone(),
                op: op.to_string(),
                bytes,
                pieces_per_proc: pieces,
                listio_mb_s: l,
                perpiece_mb_s: pp,
                local_mb_s: lo,
                local_sieve_mb_s: ls,
                listio_vs_perpiece: l / pp,
                listio_vs_local: l / lo,
                listio_vs_local_sieve: l / ls,
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
        "sieve" => {
            let f = std::fs::File::options().read(true).write(true).open(path).with_context(|| format!("open {path}"))?;
            let regions: Vec<(u64, u64)> = view.file_regions(0, len).collect();
            timed(|| sieve(&f, &regions, &mut buf, write))
        }
        "listio" | "perpiece" => {
            let o = ClientOptions { list_io: mode == "listio", ..crate::client_options()? };
            let c = Client::with_options(ClusterFile::load(&crate::locate()?)?, o)?;
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

/// Data sieving on a local file, as ROMIO does it for independent access:
/// the pieces (sorted by offset, as a view gives them) are grouped into
/// windows of at most the sieving buffer; each window is read whole, and
/// for writes the pieces are copied in and the window written back under an
/// exclusive `fcntl` lock of its bytes (other processes sieve overlapping
/// windows). A piece larger than the buffer is accessed directly.
fn sieve(f: &std::fs::File, regions: &[(u64, u64)], buf: &mut [u8], write: bool) -> Result<()> {
    use nix::fcntl::{fcntl, FcntlArg};
    let cap = if write { SIEVE_WRITE_BUFFER } else { SIEVE_READ_BUFFER };
    let mut window = vec![0u8; cap as usize];
    let (mut i, mut at) = (0usize, 0usize);
    while i < regions.len() {
        let start = regions[i].0;
        let mut j = i;
        let mut end = start;
        while j < regions.len() && regions[j].0 + regions[j].1 - start <= cap {
            end = end.max(regions[j].0 + regions[j].1);
            j += 1;
        }
        if j == i {
            let (o, l) = regions[i];
            let b = &mut buf[at..at + l as usize];
            if write { f.write_all_at(b, o)? } else { f.read_exact_at(b, o)? }
            at += l as usize;
            i += 1;
            continue;
        }
        let w = &mut window[..(end - start) as usize];
        let lock = |kind: i16| {
            let fl = libc::flock { l_type: kind, l_whence: libc::SEEK_SET as i16, l_start: start as i64, l_len: (end - start) as i64, l_pid: 0 };
            fcntl(f, FcntlArg::F_SETLKW(&fl)).map(drop).map_err(|e| anyhow::anyhow!("fcntl lock: {e}"))
        };
        if write {
            lock(libc::F_WRLCK as i16)?;
        }
        f.read_exact_at(w, start)?;
        for &(o, l) in &regions[i..j] {
            let into = (o - start) as usize..(o - start + l) as usize;
            if write { w[into].copy_from_slice(&buf[at..at + l as usize]) } else { buf[at..at + l as usize].copy_from_slice(&w[into]) }
            at += l as usize;
        }
        if write {
            f.write_all_at(w, start)?;
            lock(libc::F_UNLCK as i16)?;
        }
        i = j;
    }
    Ok(())
}

/// Non-contiguous access through views, as `weft bench noncontig` runs it.
pub struct Noncontig<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub params: Params,
}

impl crate::experiment::Experiment for Noncontig<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "noncontig"
    }

    fn run(&mut self, _progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.exe, self.cluster, &self.params)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        use crate::experiment::{f1, human_bytes};
        let table = rows
            .iter()
            .map(|r| {
                vec![
                    r.pattern.clone(),
                    r.op.clone(),
                    human_bytes(r.bytes),
                    r.pieces_per_proc.to_string(),
                    f1(r.listio_mb_s),
                    f1(r.perpiece_mb_s),
                    f1(r.local_mb_s),
                    f1(r.local_sieve_mb_s),
                    format!("{:.1}", r.listio_vs_perpiece),
                    format!("{:.2}", r.listio_vs_local),
                    format!("{:.2}", r.listio_vs_local_sieve),
                ]
            })
            .collect();
        crate::experiment::Report::table(
            format!("Non-contiguous access through views, {PROCS} processes, median of {}", self.params.repeats),
            &["pattern", "op", "file", "pieces/proc", "list I/O MB/s", "per-piece MB/s", "local MB/s", "local sieve MB/s", "list/piece", "list/local", "list/sieve"],
            table,
        )
        .note("local: one pread/pwrite per piece; local sieve: what an MPI-IO library does on a local file (4 MiB read / 512 KiB locked write windows); no fsync, reads after writes (page cache) on every side")
    }
}
