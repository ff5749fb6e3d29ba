//! `weft fuzz`: structure-aware fuzzing of the decoders and of live servers
//! (see `weft_bench::fuzz`). Fails (exit 1) on the first finding.

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Duration;
use weft_bench::fuzz::{self, FuzzConfig};
use weft_bench::BenchCluster;
use weft_net::ClusterFile;

#[derive(Args)]
pub struct FuzzArgs {
    /// Inputs to generate and send.
    #[arg(long, default_value_t = 1_000_000)]
    inputs: u64,
    /// Seed of the generator: the same seed gives the same inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Connections kept open per server.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// A well-behaved client is served every this many inputs.
    #[arg(long, default_value_t = 10_000)]
    check_every: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Directory for a temporary cluster (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

pub fn fuzz(cluster: Option<&Path>, a: FuzzArgs) -> Result<()> {
    if a.inputs == 0 || a.check_every == 0 || a.connections == 0 {
        bail!("--inputs, --check-every and --connections must be at least 1");
    }
    let exe = std::env::current_exe().context("cannot find the weft binary")?;
    let bc = BenchCluster::get(&exe, cluster, 2, a.dir.as_deref())?;
    let cf = ClusterFile::load(&bc.cluster_file)?;
    let cfg = FuzzConfig { inputs: a.inputs, seed: a.seed, connections: a.connections, check_every: a.check_every, answer_timeout: Duration::from_secs(10) };
    let bar = if a.json { ProgressBar::hidden() } else { ProgressBar::new(a.inputs) };
    bar.set_style(ProgressStyle::with_template("{pos}/{len} inputs [{wide_bar}] {per_sec} eta {eta}").expect("valid template"));
    let r = fuzz::run(&cf, &cfg, &|n| bar.set_position(n));
    bar.finish_and_clear();
    let r = r.with_context(|| format!("finding (reproduce with --seed {} --inputs {})", a.seed, a.inputs))?;
    if r.server_panics > 0 {
        bail!("{} requests panicked inside the servers (answered with errors, but each is a bug): see the servers' logs", r.server_panics);
    }
    if a.json {
        out!("{}", serde_json::to_string(&r)?)?;
    } else {
        out!(
            "{} inputs in {:.1} s ({:.0}/s): {} decoded, {} refused by the decoder; {} answered ({} with errors), {} connections closed by a server, {} reconnects; {} checks passed; no server died, no request panicked",
            r.inputs,
            r.seconds,
            r.inputs as f64 / r.seconds,
            r.decoded_ok,
            r.decode_errors,
            r.answered,
            r.error_answers,
            r.closed_by_server,
            r.reconnects,
            r.checks_passed
        )?;
    }
    Ok(())
}
