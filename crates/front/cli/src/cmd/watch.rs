//! `weft status --watch`: the servers' counters as rates, refreshed every
//! interval (the same numbers the metrics port serves to Prometheus).

use super::{connect, human_bytes};
use anyhow::Result;
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};
use weft_wire::{CpuKind, ServerStats};

/// Shortest refresh: a status request is cheap, but not free for servers.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Prints a report every `interval`, `count` times (for ever if `None`).
pub fn watch(cluster: Option<&Path>, interval: Duration, count: Option<u64>) -> Result<()> {
    let c = connect(cluster)?;
    let interval = interval.max(MIN_INTERVAL);
    let clear = std::io::stdout().is_terminal();
    let mut before: Vec<Option<ServerStats>> = c.status().into_iter().map(|s| s.stats.ok()).collect();
    let mut taken = Instant::now();
    let mut shown = 0u64;
    while count.is_none_or(|n| shown < n) {
        std::thread::sleep(interval.saturating_sub(taken.elapsed()));
        let now = c.status();
        let secs = taken.elapsed().as_secs_f64().max(1e-3);
        taken = Instant::now();
        if clear {
            // Home and clear, as top(1) and watch(1) do.
            print!("\x1b[H\x1b[2J");
        }
        out!("Weft servers: rates over the last {secs:.1} s (Ctrl-C to stop)")?;
        out!("{:>3}  {:<5} {:>9} {:>10} {:>10} {:>6} {:>9} {:>21} {:>7} {:>6}", "id", "state", "req/s", "in MB/s", "out MB/s", "queue", "tcp/shm", "memory used / limit", "quota", "cpu %")?;
        for (k, s) in now.iter().enumerate() {
            let prev = before.get(k).copied().flatten();
            match (&s.stats, prev) {
                (Ok(st), Some(p)) => {
                    let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
                    let cpu = (st.cpu_ns.iter().sum::<u64>() + st.cpu_loop_ns).saturating_sub(p.cpu_ns.iter().sum::<u64>() + p.cpu_loop_ns);
                    out!(
                        "{:>3}  {:<5} {:>9.0} {:>10.1} {:>10.1} {:>6} {:>9} {:>21} {:>7} {:>6.1}",
                        s.server.id,
                        "up",
                        d(st.requests, p.requests),
                        d(st.bytes_written, p.bytes_written) / 1e6,
                        d(st.bytes_read, p.bytes_read) / 1e6,
                        st.queue_depth,
                        format!("{}/{}", st.connections.saturating_sub(st.shm_connections), st.shm_connections),
                        format!("{} / {}", human_bytes(st.memory_used), human_bytes(st.memory_limit)),
                        st.quota_refusals.saturating_sub(p.quota_refusals),
                        cpu as f64 / 1e9 / secs * 100.0
                    )?;
                    let kinds = kind_rates(st, &p, secs);
                    if !kinds.is_empty() {
                        out!("       {}", kinds.join(", "))?;
                    }
                }
                (Ok(_), None) => out!("{:>3}  {:<5} (back: rates at the next report)", s.server.id, "up")?,
                (Err(e), _) => out!("{:>3}  {:<5} {e}", s.server.id, "DOWN")?,
            }
        }
        before = now.into_iter().map(|s| s.stats.ok()).collect();
        shown += 1;
    }
    Ok(())
}

/// Each kind of request served in the interval: rate and mean latency.
fn kind_rates(now: &ServerStats, before: &ServerStats, secs: f64) -> Vec<String> {
    CpuKind::ALL
        .iter()
        .filter_map(|&k| {
            let n = now.requests_by_kind[k as usize].saturating_sub(before.requests_by_kind[k as usize]);
            let us = now.latency_us_by_kind[k as usize].saturating_sub(before.latency_us_by_kind[k as usize]);
            (n > 0).then(|| format!("{} {:.0}/s {:.3} ms", k.name(), n as f64 / secs, us as f64 / n as f64 / 1e3))
        })
        .collect()
}
