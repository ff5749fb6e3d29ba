//! `weft bench ionode`: paper 001's question, asked of Weft: how much of an
//! I/O node's CPU is left for computation while it serves I/O? (issue 13)
//!
//! The machine is split as a cluster would be: the data servers (the I/O
//! nodes) are pinned to the upper half of the CPUs, everything else (the
//! metadata server, the writers, this process) to the lower half. One probe
//! process per I/O CPU, pinned to it (the compute probe), does a fixed
//! amount of arithmetic per unit and counts units, for a fixed time: first
//! with no I/O (the idle rate), then while four clients write or read
//! paper 001's representative cases (`noncontig`'s `hpf1d-8k`, easy:
//! 1-D CYCLIC of 8 KiB records; `hpf2d-8`, hard: 2-D BLOCK-CYCLIC of 8-byte
//! records), or every HPF distribution of its figure 1 (`--patterns all`).
//! The share of CPU available is the probe's rate under I/O over its idle
//! rate. Each mode gets a cluster of its own, one after the other in the
//! same run: `listio` (Weft's list I/O), `caching` (paper 001's traditional
//! caching file system: the servers' block cache, `WEFT_DATA_CACHE`, and
//! one request per piece) and `server` (its disk-directed I/O: Weft's
//! server-directed collective calls). In the `5ms` variant the
//! probes meet at a barrier after each 5 ms of (idle-calibrated) work, as
//! paper 001's second application does, so an interruption of any one
//! delays all. The data servers' own CPU time per MB moved (thread CPU
//! clocks, `weft status`) is reported beside it.

mod paper;
mod report;

pub use paper::{beside_paper, Beside, PAPER};
pub use report::IoNode;
use crate::workers::run_workers;
use crate::{median, BenchCluster};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How the I/O nodes serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Weft's list I/O: a client's pieces for a server in one request.
    ListIo,
    /// Paper 001's traditional caching file system.
    Caching,
    /// Paper 001's disk-directed I/O: Weft's server-directed collective
    /// calls (the four clients as threads of one process, `weft_coll=server`).
    Server,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::ListIo => "listio",
            Mode::Caching => "caching",
            Mode::Server => "server",
        }
    }

    /// The data servers' environment for this mode.
    pub fn server_env(self) -> Vec<(String, String)> {
        match self {
            Mode::ListIo | Mode::Server => Vec::new(),
            Mode::Caching => vec![("WEFT_DATA_CACHE".into(), "64m".into()), ("WEFT_CACHE_BLOCK".into(), "8k".into())],
        }
    }
}

#[derive(Debug, Clone)]
pub struct Params {
    /// How long each probe run lasts.
    pub seconds: f64,
    /// Matrix edge of the easy pattern (hpf1d-8k: that many 8 KiB records).
    pub easy_matrix: u64,
    /// Matrix edge of the hard pattern (hpf2d-8: edge^2 8-byte records).
    pub hard_matrix: u64,
    pub modes: Vec<Mode>,
    /// Paper 001's full set of HPF patterns (figures 2 and 3) instead of
    /// its four representative cases (tables 2 and 3).
    pub all_patterns: bool,
    /// `write` and/or `read`.
    pub ops: Vec<String>,
    pub repeats: usize,
}

/// One pattern the clients move: its row name, its `noncontig` name and
/// matrix (record count or edge), record size and operation.
#[derive(Debug, Clone)]
struct Case {
    name: String,
    pattern: String,
    matrix: u64,
    record: u64,
    op: String,
}

/// The cases of a run: paper 001's four representative ones (`easy-write`:
/// 1-D CYCLIC of 8 KiB records; `hard-write`: 2-D BLOCK/CYCLIC of 8-byte
/// records), or every HPF distribution (`Pattern::HPF_ALL`) with 8-byte
/// and 8 KiB records, named as the paper does (`BLOCK/CYCLIC`). 8-byte
/// patterns have `hard_matrix`^2 records, 8 KiB ones `easy_matrix`
/// (2-D: the nearest square).
fn cases(p: &Params) -> Vec<Case> {
    let mut out = Vec::new();
    for op in &p.ops {
        if p.all_patterns {
            for dims in weft_client::Pattern::HPF_ALL {
                for (record, tag) in [(8u64, "8"), (8192, "8k")] {
                    let two_d = dims.len() == 2;
                    let matrix = match (record, two_d) {
                        (8, false) => p.hard_matrix.saturating_mul(p.hard_matrix),
                        (8, true) => p.hard_matrix,
                        (_, false) => p.easy_matrix,
                        (_, true) => ((p.easy_matrix as f64).sqrt().round() as u64).max(2),
                    };
                    out.push(Case { name: weft_client::Pattern::hpf_name(dims), pattern: format!("hpf-{dims}-{tag}"), matrix, record, op: op.clone() });
                }
            }
        } else {
            out.push(Case { name: format!("easy-{op}"), pattern: "hpf1d-8k".into(), matrix: p.easy_matrix, record: 8192, op: op.clone() });
            out.push(Case { name: format!("hard-{op}"), pattern: "hpf2d-8".into(), matrix: p.hard_matrix, record: 8, op: op.clone() });
        }
    }
    out
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `easy-write`, `hard-read`, ... or the HPF name (`BLOCK/CYCLIC`).
    pub pattern: String,
    pub record_bytes: u64,
    pub op: String,
    /// `listio`, `caching` or `server`.
    pub mode: &'static str,
    /// With a barrier among the probes every 5 ms of work.
    pub barrier: bool,
    /// Share of the I/O CPUs left to the probes, in percent (io / idle).
    pub cpu_available_pct: f64,
    /// What the clients moved meanwhile.
    pub mb_s: f64,
    pub idle_units_s: f64,
    pub io_units_s: f64,
    /// Data servers' CPU seconds per MB moved.
    pub server_cpu_s_per_mb: f64,
}

/// One unit of the probe's arithmetic (a few microseconds).
fn unit(x: &mut u64) {
    for _ in 0..2000 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
    }
}

/// Pins every thread of process `pid` (0: this one) to `cpus`.
pub fn pin(pid: u32, cpus: &[usize]) -> Result<()> {
    use nix::sched::{sched_setaffinity, CpuSet};
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c)?;
    }
    let pid = if pid == 0 { std::process::id() } else { pid };
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("threads of process {pid}"))?;
    for t in tasks.flatten() {
        if let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
            sched_setaffinity(nix::unistd::Pid::from_raw(tid), &set).with_context(|| format!("pin thread {tid} to CPUs {cpus:?}"))?;
        }
    }
    Ok(())
}

/// The probe process: pinned to `cpu`, works for `seconds`, meeting the
/// others at `barrier` (a socket) after every `units_per_sync` units (0:
/// never); prints `units N elapsed_ns T`.
pub fn worker(cpu: usize, seconds: f64, units_per_sync: u64, barrier: Option<&Path>) -> Result<()> {
    pin(0, &[cpu])?;
    let mut sock = barrier.map(UnixStream::connect).transpose().context("the probes' barrier")?;
    if let Some(s) = &sock {
        // A barrier that never opens (another probe died) ends the
        // synchronization, not the run.
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ cpu as u64;
    let (start, until) = (Instant::now(), Duration::from_secs_f64(seconds));
    let mut units = 0u64;
    while start.elapsed() < until {
        for _ in 0..units_per_sync.max(16) {
            unit(&mut x);
            units += 1;
        }
        if let Some(s) = sock.as_mut().filter(|_| units_per_sync > 0) {
            // Arrive, then wait until every probe has. The barrier ends
            // when the coordinator goes: then the work goes on alone.
            let mut go = [0u8; 1];
            if s.write_all(&[1]).and_then(|()| s.read_exact(&mut go)).is_err() {
                sock = None;
            }
        }
    }
    println!("units {units} elapsed_ns {} check {}", start.elapsed().as_nanos(), x & 1);
    Ok(())
}

/// Runs the barrier for `n` probes: each round waits for every probe
/// still there, then lets them all go; a probe that is done (hung up)
/// leaves it. Detached: a probe that never comes leaves the thread
/// waiting, not the benchmark.
fn barrier(listener: UnixListener, n: usize) {
    std::thread::spawn(move || {
        // Those that come within 10 s (a probe that died never does).
        let _ = listener.set_nonblocking(true);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut peers: Vec<UnixStream> = Vec::new();
        while peers.len() < n && Instant::now() < deadline {
            match listener.accept() {
                Ok((s, _)) => {
                    let _ = s.set_nonblocking(false);
                    peers.push(s);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        let mut b = [0u8; 1];
        while !peers.is_empty() {
            peers.retain_mut(|p| p.read_exact(&mut b).is_ok());
            peers.retain_mut(|p| p.write_all(&[1]).is_ok());
        }
    });
}

/// Runs one probe per I/O CPU for `seconds`, with `load` running rounds of
/// I/O meanwhile (if any); returns the probes' mean rate (units/s), the
/// bytes the load moved, and over how many seconds.
fn probes(weft_bin: &Path, scratch: &Path, io_cpus: &[usize], seconds: f64, units_per_sync: u64, load: Option<&dyn Fn() -> Result<u64>>) -> Result<(f64, u64, f64)> {
    let sock = scratch.join("probe-barrier.sock");
    let _ = std::fs::remove_file(&sock);
    if units_per_sync > 0 {
        barrier(UnixListener::bind(&sock)?, io_cpus.len());
    }
    let mut kids = Vec::new();
    for &cpu in io_cpus {
        let mut cmd = Command::new(weft_bin);
        cmd.args(["bench", "ionode-probe", "--cpu", &cpu.to_string(), "--seconds", &seconds.to_string(), "--units-per-sync", &units_per_sync.to_string()]);
        if units_per_sync > 0 {
            cmd.arg("--barrier").arg(&sock);
        }
        kids.push(cmd.stdout(Stdio::piped()).spawn().context("cannot start a probe")?);
    }
    let start = Instant::now();
    let mut moved = 0u64;
    if let Some(load) = load {
        while kids.iter_mut().any(|k| matches!(k.try_wait(), Ok(None))) {
            match load() {
                Ok(n) => moved += n,
                Err(e) => {
                    for k in &mut kids {
                        let _ = k.kill();
                        let _ = k.wait();
                    }
                    return Err(e);
                }
            }
        }
    }
    let load_s = start.elapsed().as_secs_f64();
    let mut rates = Vec::new();
    for mut k in kids {
        let mut line = String::new();
        BufReader::new(k.stdout.take().expect("piped")).read_line(&mut line)?;
        if !k.wait()?.success() {
            bail!("a probe failed: {line:?}");
        }
        let field = |name: &str| line.split_whitespace().skip_while(|w| *w != name).nth(1).and_then(|v| v.parse::<f64>().ok());
        let (units, ns) = (field("units").context("probe output")?, field("elapsed_ns").context("probe output")?);
        rates.push(units / (ns / 1e9));
    }
    let _ = std::fs::remove_file(&sock);
    Ok((rates.iter().sum::<f64>() / rates.len() as f64, moved, load_s))
}

/// Every mode, each on the cluster `cluster(mode)` makes (a temporary one:
/// its servers are pinned).
pub fn run(weft_bin: &Path, cluster: &dyn Fn(Mode) -> Result<BenchCluster>, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    if p.seconds <= 0.0 || p.repeats == 0 || p.easy_matrix == 0 || p.hard_matrix == 0 || p.modes.is_empty() || p.ops.is_empty() {
        bail!("seconds, repeats and matrix edges must be positive, and some mode and op given");
    }
    if let Some(o) = p.ops.iter().find(|o| *o != "write" && *o != "read") {
        bail!("unknown op {o:?}: write or read");
    }
    if p.hard_matrix.checked_mul(p.hard_matrix).and_then(|n| n.checked_mul(8)).is_none() || p.easy_matrix.checked_mul(8192).is_none() {
        bail!("matrix edges of {} and {} make files larger than a file offset", p.hard_matrix, p.easy_matrix);
    }
    // The CPUs this process may use (a cpuset or taskset may allow fewer
    // than the machine has, and not from 0).
    let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))?;
    let cpus: Vec<usize> = (0..nix::sched::CpuSet::count()).filter(|&c| allowed.is_set(c).unwrap_or(false)).collect();
    if cpus.len() < 2 {
        bail!("the I/O-node experiment splits the CPUs into I/O nodes and compute nodes: it needs at least 2 (this process may use {cpus:?})");
    }
    let mut rows = Vec::new();
    for &mode in &p.modes {
        let bc = cluster(mode)?;
        rows.extend(run_mode(weft_bin, &bc, mode, &cpus, p, progress)?);
    }
    Ok(rows)
}

fn run_mode(weft_bin: &Path, bc: &BenchCluster, mode: Mode, cpus: &[usize], p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    let (compute, io) = (cpus[..cpus.len() / 2].to_vec(), cpus[cpus.len() / 2..].to_vec());
    let pids = bc.server_pids();
    if pids.is_empty() {
        bail!("the probe pins the servers to CPUs: it needs a temporary cluster (leave out --cluster)");
    }
    let cf = weft_net::ClusterFile::load(&bc.cluster_file)?;
    for (k, s) in cf.servers.iter().enumerate() {
        let pid = *pids.get(k).context("a server is not running")?;
        if s.services.contains(&weft_net::Service::Data) {
            pin(pid, &[io[k % io.len()]])?;
        } else {
            pin(pid, &compute)?;
        }
    }
    // This process and the clients it starts: the compute nodes.
    pin(0, &compute)?;
    let client = crate::connect(&bc.cluster_file)?;
    let _ = client.mkdir("/ionode", 0o777);
    let cases = cases(p);
    // Traditional clients send one request per piece.
    let worker_mode = if mode == Mode::Caching { "perpiece" } else { "listio" };
    let mut samples: Vec<Vec<(f64, f64, f64, f64)>> = vec![Vec::new(); cases.len() * 2];
    for rep in 0..p.repeats {
        for (bi, barrier) in [false, true].into_iter().enumerate() {
            progress(&format!("{} round {}/{} barrier {barrier}: idle", mode.name(), rep + 1, p.repeats));
            // Units in 5 ms of idle work, from an unsynchronized idle run.
            let (free_rate, ..) = probes(weft_bin, &bc.scratch, &io, p.seconds.min(1.0), 0, None)?;
            let per_sync = if barrier { ((free_rate * 0.005) as u64).max(1) } else { 0 };
            let (idle, ..) = probes(weft_bin, &bc.scratch, &io, p.seconds, per_sync, None)?;
            for (ci, Case { name, pattern, matrix, record, op }) in cases.iter().enumerate() {
                progress(&format!("{} round {}/{} barrier {barrier}: {name} {record} B {op} ({}/{})", mode.name(), rep + 1, p.repeats, ci + 1, cases.len()));
                let path = format!("/ionode/case-{ci}");
                client.create(&path, weft_client::CreateOptions::default())?.close()?;
                let params = crate::noncontig::Params { patterns: vec![], matrix: *matrix, btio_cells: 1, repeats: 1, stripe_size: 0 };
                let bytes = crate::noncontig::pattern(pattern, &params)?.file_size();
                let args = |op: &str| -> Vec<Vec<String>> {
                    (0..crate::noncontig::PROCS)
                        .map(|r| {
                            ["noncontig-worker", "--pattern", pattern, "--matrix", &matrix.to_string(), "--btio-cells", "1", "--rank", &r.to_string(), "--mode", worker_mode, "--op", op, "--path", &path]
                                .map(String::from)
                                .to_vec()
                        })
                        .collect()
                };
                // Server-directed: one process whose threads are the ranks
                // of one collective call.
                let coll = |op: &str| -> Vec<Vec<String>> {
                    vec![["ionode-coll", "--pattern", pattern, "--matrix", &matrix.to_string(), "--op", op, "--path", &path].map(String::from).to_vec()]
                };
                let job_for = |op: &str| if mode == Mode::Server { coll(op) } else { args(op) };
                if op == "read" {
                    // Something to read (not measured).
                    run_workers(weft_bin, bc, &job_for("write"), &[])?;
                }
                let job = job_for(op);
                let load = || run_workers(weft_bin, bc, &job, &[]).map(|_| bytes);
                let cpu0 = crate::data_server_cpu_s(&client);
                let (io_rate, moved, load_s) = probes(weft_bin, &bc.scratch, &io, p.seconds, per_sync, Some(&load))?;
                // The servers' CPU over the whole load (its last round may
                // outlast the probes), per MB it moved.
                let cpu = crate::data_server_cpu_s(&client) - cpu0;
                let mb = moved as f64 / 1e6;
                samples[bi * cases.len() + ci].push((idle, io_rate, mb / load_s, if mb > 0.0 { cpu / mb } else { 0.0 }));
                client.unlink(&path)?;
            }
        }
    }
    let mut rows = Vec::new();
    for (bi, barrier) in [false, true].into_iter().enumerate() {
        for (ci, Case { name, record, op, .. }) in cases.iter().enumerate() {
            let s = &samples[bi * cases.len() + ci];
            let col = |f: fn(&(f64, f64, f64, f64)) -> f64| median(s.iter().map(f).collect());
            let (idle, io_rate) = (col(|x| x.0), col(|x| x.1));
            rows.push(Row {
                pattern: name.clone(),
                record_bytes: *record,
                op: op.clone(),
                mode: mode.name(),
                barrier,
                cpu_available_pct: 100.0 * io_rate / idle,
                mb_s: col(|x| x.2),
                idle_units_s: idle,
                io_units_s: io_rate,
                server_cpu_s_per_mb: col(|x| x.3),
            });
        }
    }
    Ok(rows)
}

/// One server-directed collective write or read of `pattern` by
/// [`crate::noncontig::PROCS`] ranks (threads sharing a `ThreadComm`),
/// timed as one worker; each rank checks it moved all its bytes.
pub fn coll_worker(pattern: &str, matrix: u64, op: &str, path: &str) -> Result<()> {
    use weft_client::collective::{read_all, write_all, CollMethod, CollectiveHints};
    use weft_client::comm::ThreadComm;
    use weft_client::{Datatype, View};
    let params = crate::noncontig::Params { patterns: vec![], matrix, btio_cells: 1, repeats: 1, stripe_size: 0 };
    let pat = crate::noncontig::pattern(pattern, &params)?;
    let procs = crate::noncontig::PROCS;
    let client = crate::connect(&crate::locate()?)?;
    let write = op == "write";
    let files = (0..procs).map(|_| client.open(path, write)).collect::<Result<Vec<_>, _>>()?;
    let views = (0..procs).map(|r| Ok(View::new(0, Datatype::byte(), pat.filetype(procs, r)?)?)).collect::<Result<Vec<View>>>()?;
    let hints = CollectiveHints { method: CollMethod::Server, ..Default::default() };
    crate::workers::timed(|| {
        let comms = ThreadComm::group(procs as usize);
        std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .iter()
                .zip(&files)
                .zip(&views)
                .enumerate()
                .map(|(r, ((comm, f), view))| {
                    let hints = &hints;
                    s.spawn(move || -> Result<()> {
                        let len = view.filetype().size() as usize;
                        let mut buf: Vec<u8> = (0..len).map(|i| (i % 253) as u8 ^ r as u8).collect();
                        let segs = f.view_segments(view, 0, len, &Datatype::byte(), len as u64)?;
                        let n = if write { write_all(f, comm, &segs, &buf, hints)? } else { read_all(f, comm, &segs, &mut buf, hints)? };
                        if n != len as u64 {
                            bail!("rank {r} moved {n} of {len} bytes");
                        }
                        Ok(())
                    })
                })
                .collect();
            hs.into_iter().try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("a rank panicked"))?)
        })
    })
}
