//! `weft bench conns`: what a server pays for many connections. An HPC job
//! connects every rank to every server, so a server must hold thousands of
//! mostly idle connections cheaply while serving the busy ones at full rate.
//!
//! For each N, on a fresh server (so freed memory of an earlier step cannot
//! hide this step's): N handshaken connections held idle against one data
//! server, while a few busy clients send round trips (`Ping`, so the disk is
//! out of it) as fast as they can. Measured per N, in one run: the busy
//! clients' requests/s (median of timed rounds), the server's resident
//! memory, its growth per idle connection over the same server before they
//! connected, and the wall time to open and handshake all N. The sweep goes
//! up and then measures the smallest N again, so drift shows.

use crate::BenchCluster;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_net::handshake::client_handshake;
use weft_net::{ClusterFile, Endpoint, EndpointConfig};
use weft_wire::Request;

#[derive(Debug, Clone)]
pub struct Params {
    pub counts: Vec<usize>,
    /// Clients sending requests back to back.
    pub busy: usize,
    /// Timed rounds per N (the median is reported).
    pub rounds: usize,
    pub round_time: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub connections: usize,
    pub bytes_per_connection: f64,
    pub busy_requests_per_s: f64,
    pub server_rss_bytes: u64,
    pub connect_all_s: f64,
    /// Busy rate relative to the first (smallest) N of the sweep.
    pub rate_vs_smallest: f64,
}

/// Resident memory of `pid`, in bytes.
pub fn rss(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("no process {pid}"))?;
    let kb: u64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).context("no VmRSS")?;
    Ok(kb * 1024)
}

/// Raises this process's descriptor limit to its hard maximum; returns it.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() => hard,
        Ok((soft, _)) => soft,
        Err(_) => 1024,
    }
}

/// Opens `n` handshaken connections with `threads` threads.
fn connect_all(addr: SocketAddr, cf: &ClusterFile, n: usize, threads: usize) -> Result<Vec<TcpStream>> {
    let per = n.div_ceil(threads.max(1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let secret = cf.secret();
            let count = per.min(n.saturating_sub(t * per));
            std::thread::spawn(move || -> Result<Vec<TcpStream>> {
                (0..count)
                    .map(|_| {
                        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
                        s.set_read_timeout(Some(Duration::from_secs(10)))?;
                        s.set_write_timeout(Some(Duration::from_secs(10)))?;
                        client_handshake(&mut s, addr, &secret, rand_nonce())?;
                        Ok(s)
                    })
                    .collect()
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    for h in handles {
        all.extend(h.join().map_err(|_| anyhow::anyhow!("a connecting thread panicked"))??);
    }
    Ok(all)
}

fn rand_nonce() -> [u8; 16] {
    rand::random()
}

/// Busy clients' requests per second over `time`.
fn busy_rate(addr: SocketAddr, cf: &ClusterFile, busy: usize, time: Duration) -> Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..busy)
        .map(|_| {
            let (stop, done, secret) = (stop.clone(), done.clone(), cf.secret());
            std::thread::spawn(move || -> Result<()> {
                let ep = Endpoint::new(secret, EndpointConfig::from_vars(&weft_net::settings::Vars::env())?)?;
                let ping = Request::Ping.encode();
                ep.call(addr, ping.clone())?;
                while !stop.load(Ordering::Relaxed) {
                    ep.call(addr, ping.clone())?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let (t0, n0) = (Instant::now(), done.load(Ordering::Relaxed));
    std::thread::sleep(time);
    let (t1, n1) = (Instant::now(), done.load(Ordering::Relaxed));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().map_err(|_| anyhow::anyhow!("a busy client panicked"))??;
    }
    Ok((n1 - n0) as f64 / (t1 - t0).as_secs_f64())
}

/// Runs the sweep, each N on a fresh temporary cluster of `weft_bin` under
/// `base` (its data server's memory is read from /proc, so no `--cluster`).
pub fn run(weft_bin: &Path, base: Option<&Path>, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    let limit = raise_fd_limit();
    let need = p.counts.iter().max().copied().unwrap_or(0) as u64 + 64;
    if need > limit {
        bail!("{} connections need {need} descriptors; this process may open {limit} (raise the hard limit: ulimit -Hn)", need - 64);
    }
    let mut counts = p.counts.clone();
    if let Some(&first) = counts.first() {
        counts.push(first);
    }
    let mut rows: Vec<Row> = Vec::new();
    for n in counts {
        progress(&format!("{n} connections"));
        let bc = BenchCluster::get(weft_bin, None, 1, base)?;
        let pid = *bc.server_pids().get(1).context("the temporary cluster has no data server")?;
        let cf = ClusterFile::load(&bc.cluster_file)?;
        let addr = cf.servers[1].addr;
        // Baseline: the same server with the busy clients alone.
        busy_rate(addr, &cf, p.busy, Duration::from_millis(300))?;
        let base_rss = rss(pid)?;
        let t = Instant::now();
        let idle = connect_all(addr, &cf, n, 8)?;
        let connect_all_s = t.elapsed().as_secs_f64();
        let mut rates: Vec<f64> = (0..p.rounds.max(1)).map(|_| busy_rate(addr, &cf, p.busy, p.round_time)).collect::<Result<_>>()?;
        let rate = crate::median(std::mem::take(&mut rates));
        let server_rss_bytes = rss(pid)?;
        let bytes_per_connection = server_rss_bytes.saturating_sub(base_rss) as f64 / n.max(1) as f64;
        let first_rate = rows.first().map_or(rate, |r: &Row| r.busy_requests_per_s);
        rows.push(Row { connections: n, bytes_per_connection, busy_requests_per_s: rate, server_rss_bytes, connect_all_s, rate_vs_smallest: rate / first_rate });
        drop(idle);
        drop(bc);
    }
    Ok(rows)
}

/// Connections held by one server, as `weft bench conns` measures them
/// (on servers of its own, whose memory it reads).
pub struct Conns<'a> {
    pub exe: &'a Path,
    /// Where its servers' directories go (the system temp dir if none).
    pub base: Option<&'a Path>,
    pub params: Params,
}

impl crate::experiment::Experiment for Conns<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "conns"
    }

    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.exe, self.base, &self.params, progress)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        use crate::experiment::{f1, human_bytes};
        let p = &self.params;
        let table = rows
            .iter()
            .map(|r| vec![r.connections.to_string(), f1(r.connect_all_s), human_bytes(r.server_rss_bytes), format!("{:.0}", r.bytes_per_connection), format!("{:.0}", r.busy_requests_per_s), format!("{:.2}", r.rate_vs_smallest)])
            .collect();
        crate::experiment::Report::table(
            format!("Connections held by one server, {} busy clients (ping round trips), median of {} rounds; each count on a fresh server", p.busy, p.rounds),
            &["connections", "connect s", "server RSS", "bytes/conn", "busy req/s", "vs first"],
            table,
        )
        .note("targets: <= 65536 bytes per connection at 10,000; busy rate at 10,000 within 10% of the first count")
    }
}
