//! `weft status`: every server's state and counters.

use super::{connect, human_bytes};
use anyhow::Result;
use std::path::Path;

#[derive(clap::Args)]
pub struct StatusArgs {
    /// Show rates (requests, bytes, latency by kind, queue, connections,
    /// quota refusals, CPU) refreshed every --interval, as the metrics
    /// port serves them.
    #[arg(long)]
    watch: bool,
    /// Seconds between reports with --watch.
    #[arg(long, default_value_t = 2.0, requires = "watch")]
    interval: f64,
    /// Reports to print with --watch before exiting (default: until Ctrl-C).
    #[arg(long, requires = "watch")]
    count: Option<u64>,
}

pub fn run(cluster: Option<&Path>, a: StatusArgs) -> Result<()> {
    if !a.watch {
        return status(cluster);
    }
    if !(a.interval.is_finite() && a.interval > 0.0 && a.interval <= 86_400.0) {
        anyhow::bail!("--interval must be a number of seconds between 0 and 86400, not {}", a.interval);
    }
    super::watch::watch(cluster, std::time::Duration::from_secs_f64(a.interval), a.count)
}

pub fn status(cluster: Option<&Path>) -> Result<()> {
    let c = connect(cluster)?;
    out!(
        "{:>3}  {:<21} {:<12} {:<5} {:<4} {:>10} {:>11} {:>8} {:>9} {:>13} {:>19}",
        "id", "address", "services", "state", "via", "requests", "stored", "objects", "uptime", "connections", "buffered / budget"
    )?;
    let mut down = 0;
    for s in c.status() {
        let services: Vec<String> = s.server.services.iter().map(|x| format!("{x:?}").to_lowercase()).collect();
        match s.stats {
            Ok(st) => out!(
                "{:>3}  {:<21} {:<12} {:<5} {:<4} {:>10} {:>11} {:>8} {:>8}s {:>13} {:>19}",
                s.server.id,
                s.server.addr,
                services.join(","),
                "up",
                // This command's own connection: shared memory on the server's node.
                c.transport_of(s.server.addr).unwrap_or("-"),
                st.requests,
                human_bytes(st.bytes_stored),
                st.objects,
                st.uptime_ms / 1000,
                format!("{}/{}", st.connections, st.connection_limit),
                format!("{} / {}", human_bytes(st.memory_used), human_bytes(st.memory_limit))
            )?,
            Err(e) => {
                down += 1;
                out!("{:>3}  {:<21} {:<12} {:<5} {e}", s.server.id, s.server.addr, services.join(","), "DOWN")?;
            }
        }
    }
    let all = c.status();
    for s in &all {
        if let Ok(st) = &s.stats
            && st.panics > 0
        {
            out!("\nserver {}: {} requests failed inside the server (each is a bug; see its log)", s.server.id, st.panics)?;
        }
    }
    // Where each server's CPU went (thread CPU clocks), and its disk.
    out!("\nCPU by kind of request (and the event loop's own), disk free:")?;
    for s in &all {
        if let Ok(st) = &s.stats {
            let secs = |ns: u64| ns as f64 / 1e9;
            let mut parts = vec![format!("loop {:.3}s", secs(st.cpu_loop_ns))];
            for k in weft_wire::CpuKind::ALL {
                let ns = st.cpu_ns[k as usize];
                if ns == 0 {
                    continue;
                }
                let moved = match k {
                    weft_wire::CpuKind::DataWrite => st.bytes_written,
                    weft_wire::CpuKind::DataRead => st.bytes_read,
                    _ => 0,
                };
                let per_mb = if moved > 0 { format!(" ({:.2} ms/MB)", ns as f64 / 1e6 / (moved as f64 / 1e6)) } else { String::new() };
                parts.push(format!("{} {:.3}s{per_mb}", k.name(), secs(ns)));
            }
            if st.coll_rounds + st.coll_failed > 0 {
                parts.push(format!("server-directed collective rounds {} (failed collectives {})", st.coll_rounds, st.coll_failed));
            }
            out!("  server {}: {}; disk {} free of {}", s.server.id, parts.join(", "), human_bytes(st.disk_free), human_bytes(st.disk_total))?;
        }
    }
    for s in all {
        if let (Ok(st), true) = (&s.stats, s.server.services.contains(&weft_net::Service::Lock)) {
            let avg = if st.locks_granted > 0 { st.lock_wait_us as f64 / st.locks_granted as f64 } else { 0.0 };
            let per_s = st.locks_granted as f64 / (st.uptime_ms.max(1) as f64 / 1000.0);
            out!(
                "\nlocks (server {}): {} held, {} waiting, {} granted ({per_s:.1}/s since start), average wait {avg:.0} us",
                s.server.id, st.locks_held, st.locks_waiting, st.locks_granted
            )?;
        }
    }
    if down > 0 {
        anyhow::bail!("{down} server(s) down");
    }
    Ok(())
}
