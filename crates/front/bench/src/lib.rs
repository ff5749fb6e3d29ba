//! The benchmarks behind `weft bench` (floor 8, front end): each re-runs a
//! paper's experiment against Weft, beside a baseline measured in the same
//! run, and reports a table, JSON and CSV.
//!
//! A benchmark uses the cluster it is given, or starts a temporary local
//! one and stops it afterwards. Timings are reported, never asserted.
//! See `docs/benchmarks.md`.

pub mod atomic;
pub mod btio;
pub mod coll;
pub mod concurrent_write;
pub mod conns;
pub mod everyday;
pub mod experiment;
pub mod fuse;
pub mod fuzz;
pub mod io500;
pub mod ior;
pub mod jobstart;
pub mod ionode;
pub mod md;
pub mod mpi;
pub mod mpiio_cost;
pub mod net;
pub mod net_icount;
pub mod noncontig;
pub mod plot;
pub mod report;
pub mod sched;
pub mod workers;

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use weft_net::settings::Vars;

/// A client of the cluster file at `path`, with the client variables of
/// this process (the bench is a front end: it reads them, once per client).
pub fn connect(path: &Path) -> Result<weft_client::Client> {
    Ok(weft_client::Client::with_options(weft_net::ClusterFile::load(path)?, client_options()?)?)
}

/// The client options this process's variables give, with reads through
/// the servers unless `WEFT_LOCAL_READS` is set: the papers' clients are
/// on other nodes than their servers, and here every server is on this
/// node (docs/benchmarks.md says which benchmarks read locally).
pub fn client_options() -> Result<weft_client::ClientOptions> {
    let vars = Vars::env();
    let mut o = weft_client::ClientOptions::from_vars(&vars)?;
    o.local_reads &= vars.text("WEFT_LOCAL_READS").is_some();
    Ok(o)
}

/// Whether the caller chose local reads on or off (`WEFT_LOCAL_READS`).
pub fn local_reads_chosen() -> bool {
    Vars::env().text("WEFT_LOCAL_READS").is_some()
}

/// The cluster file `WEFT_CLUSTER` names.
pub fn locate() -> Result<PathBuf> {
    Ok(weft_net::ClusterFile::locate(None, &Vars::env())?)
}
use weft_launch::{ClusterSpec, LocalCluster};

/// A cluster to benchmark against: the caller's, or a temporary one.
pub struct BenchCluster {
    pub cluster_file: PathBuf,
    /// A directory on the same disk as the servers' data, for local baselines.
    pub scratch: PathBuf,
    temp: Option<(LocalCluster, PathBuf)>,
}

impl BenchCluster {
    /// Uses `given` if any, else starts `data_servers` servers in a fresh
    /// directory under `base` (the system temp dir by default).
    pub fn get(weft_bin: &Path, given: Option<&Path>, data_servers: usize, base: Option<&Path>) -> Result<Self> {
        Self::get_emulated(weft_bin, given, data_servers, base, None, Vec::new())
    }

    /// [`BenchCluster::get`]; a temporary cluster is emulated (each server
    /// in a network namespace behind a capped link, see
    /// `weft_launch::emulate`) when `emulate` is given; its servers get
    /// `server_env` on top of this process's environment.
    pub fn get_emulated(weft_bin: &Path, given: Option<&Path>, data_servers: usize, base: Option<&Path>, emulate: Option<weft_launch::EmulateSpec>, server_env: Vec<(String, String)>) -> Result<Self> {
        Self::get_spec(weft_bin, given, base, ClusterSpec { data_servers, emulate, server_env, ..ClusterSpec::default() })
    }

    /// [`BenchCluster::get`], a temporary cluster as `spec` says.
    pub fn get_spec(weft_bin: &Path, given: Option<&Path>, base: Option<&Path>, spec: ClusterSpec) -> Result<Self> {
        let emulate = spec.emulate;
        let base = base.map(Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
        if let Some(cf) = given {
            let loaded = weft_net::ClusterFile::load(cf)?;
            let scratch = loaded.servers[0].dir.parent().map(Path::to_path_buf).unwrap_or(base).join(format!("bench-local-{}", std::process::id()));
            std::fs::create_dir_all(&scratch)?;
            return Ok(BenchCluster { cluster_file: cf.to_path_buf(), scratch, temp: None });
        }
        let dir = base.join(format!("weft-bench-{}", std::process::id()));
        if emulate.is_some() && given.is_some() {
            anyhow::bail!("--emulate starts a temporary cluster: leave out --cluster");
        }
        let lc = LocalCluster::start(weft_bin, &dir, &spec).context("cannot start a temporary cluster")?;
        let scratch = lc.dir().join("local");
        std::fs::create_dir_all(&scratch)?;
        Ok(BenchCluster { cluster_file: lc.cluster_file(), scratch, temp: Some((lc, dir)) })
    }
}

impl BenchCluster {
    /// Process ids of the servers of a temporary cluster (none for a given one).
    pub fn server_pids(&self) -> Vec<u32> {
        self.temp.as_ref().map(|(lc, _)| lc.pids()).unwrap_or_default()
    }

    /// The prefix that runs a worker of rank `rank` on its client node
    /// (`LocalCluster::client_node`); empty: here.
    pub fn client_node(&self, rank: usize) -> Vec<String> {
        self.temp.as_ref().map(|(lc, _)| lc.client_node(rank)).unwrap_or_default()
    }
}

impl Drop for BenchCluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
        if let Some((mut lc, dir)) = self.temp.take() {
            lc.stop();
            drop(lc);
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Median of a non-empty sample.
/// The data servers' CPU seconds so far (thread CPU clocks, all kinds).
pub fn data_server_cpu_s(client: &weft_client::Client) -> f64 {
    client.status().into_iter().filter_map(|s| s.stats.ok()).filter(|s| s.services & 2 != 0).map(|s| (s.cpu_ns.iter().sum::<u64>() + s.cpu_loop_ns) as f64 / 1e9).sum()
}

pub fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "median of no samples");
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_odd_and_even_samples() {
        assert_eq!(super::median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
