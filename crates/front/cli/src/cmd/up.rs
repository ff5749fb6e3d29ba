//! `weft up` and `weft down`: a local cluster in one command.

use anyhow::{anyhow, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;
use weft_launch::{ClusterSpec, LocalCluster};

#[derive(Args)]
pub struct UpArgs {
    /// Number of data servers (server 0 hosts meta and lock on top of these).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    servers: u32,
    /// Cluster directory: cluster file, server data, logs.
    #[arg(long, env = "WEFT_DIR", default_value = "weft-cluster")]
    dir: PathBuf,
    /// Default stripe size of new files (striping_unit), e.g. 64k or 1m.
    #[arg(long = "stripe-size", default_value = "64k", value_parser = super::parse_size)]
    stripe_size: u64,
    /// Start the servers in the background and return.
    #[arg(long)]
    detach: bool,
    /// Emulate a cluster: each server in its own network namespace behind
    /// a link of its own (root; addresses from 198.18.0.0/15). Ctrl-C
    /// stops the servers and removes the network.
    #[arg(long)]
    emulate: bool,
    /// With --emulate: each node's link rate, both directions (e.g. 1gbit, 100mbit).
    #[arg(long, value_parser = weft_launch::emulate::parse_link_arg, requires = "emulate")]
    link: Option<u64>,
    /// With --emulate: each server's disk rate in bytes per second, reads
    /// and writes each (e.g. 100m; cgroup v1 blkio: direct, fsync'd and
    /// cold-read I/O).
    #[arg(long, value_parser = super::parse_size, requires = "emulate")]
    disk: Option<u64>,
    /// With --emulate: client nodes to run clients on (`ip netns exec
    /// <node> ...`, printed at start), each behind a link like a server's.
    #[arg(long, default_value_t = 0, requires = "emulate")]
    nodes: usize,
    /// How clients prove who they are: `secret` (one trust domain: whoever
    /// reads the cluster file may act as anyone) or `munge` (each client's
    /// uid and gid proven by MUNGE; the cluster file holds no key and every
    /// local user may use the cluster). See docs/security.md.
    #[arg(long, value_enum, default_value = "secret")]
    auth: Auth,
    /// With --auth munge: the socket of a running munged (default: the
    /// cluster starts its own, with its own key, in DIR/munge).
    #[arg(long, requires = "auth")]
    munge_socket: Option<PathBuf>,
    /// Serve requests as uid 0 as `nobody` (NFS's root_squash).
    #[arg(long)]
    root_squash: bool,
    /// When metadata changes reach the disk: `window` (within 10 ms, or at
    /// a client's fsync, as a local file system's journal) or `op` (each
    /// before its answer). See docs/semantics.md.
    #[arg(long, value_enum, default_value = "window")]
    meta_sync: MetaSync,
    /// Metadata shards: servers holding the namespace, entries spread over
    /// them by hash (fixed for the cluster's life; see docs/architecture.md).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    meta_shards: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MetaSync {
    Op,
    Window,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Auth {
    Secret,
    Munge,
}


#[derive(Args)]
pub struct DownArgs {
    /// The directory given to `weft up --detach`.
    #[arg(long, env = "WEFT_DIR", default_value = "weft-cluster")]
    dir: PathBuf,
}

pub fn up(a: UpArgs) -> Result<()> {
    if a.stripe_size == 0 {
        return Err(anyhow!("--stripe-size must be at least 1 byte"));
    }
    if a.emulate && a.detach {
        return Err(anyhow!("an emulated cluster runs in the foreground (Ctrl-C removes its network): leave out --detach"));
    }
    let exe = std::env::current_exe().context("cannot find the weft binary")?;
    let emulate = a.emulate.then_some(weft_launch::EmulateSpec { link_bps: a.link, disk_bps: a.disk, client_nodes: a.nodes });
    if a.munge_socket.is_some() && a.auth != Auth::Munge {
        return Err(anyhow!("--munge-socket goes with --auth munge"));
    }
    let auth = match a.auth {
        Auth::Secret => weft_launch::AuthSpec::Secret,
        Auth::Munge => weft_launch::AuthSpec::Munge { socket: a.munge_socket.clone() },
    };
    let spec = ClusterSpec { data_servers: a.servers as usize, default_stripe_size: a.stripe_size, die_with_parent: !a.detach, emulate, auth,
        root_squash: a.root_squash,
        meta_shards: a.meta_shards as usize,
        meta_sync_window_ms: if a.meta_sync == MetaSync::Op { 0 } else { weft_net::cluster::DEFAULT_META_SYNC_WINDOW_MS },
        ..ClusterSpec::default()
    };
    let cluster = LocalCluster::start(&exe, &a.dir, &spec)?;
    let _ = out!("Weft cluster up in {}", cluster.dir().display());
    for s in &cluster.cluster().servers {
        let _ = out!("  server {:>2}  {:<21}  {:?}", s.id, s.addr, s.services);
    }
    let cf = cluster.cluster();
    if cf.auth == weft_net::cluster::AuthMode::Munge {
        let socket = cf.munge_socket.as_ref().map_or_else(|| "the system's munged".into(), |p| p.display().to_string());
        let _ = out!("  auth: MUNGE ({socket}); any local user may use the cluster as themselves");
    }
    for k in 0..cluster.client_nodes() {
        let _ = out!("  client node {k}: {} weft ...", cluster.client_node(k).join(" "));
    }
    let _ = out!("\n  export WEFT_CLUSTER={}", cluster.cluster_file().display());
    if a.detach {
        let dir = cluster.dir().to_path_buf();
        cluster.detach()?;
        let _ = out!("  stop it with: weft down --dir {}", dir.display());
        return Ok(());
    }
    let (tx, rx) = mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("cannot install the Ctrl-C handler")?;
    // `weft down --dir DIR` stops this process as Ctrl-C does (SIGTERM).
    let _record = weft_launch::record_foreground(cluster.dir())?;
    let _ = out!("\nPress Ctrl-C (or run weft down --dir {}) to stop.", cluster.dir().display());
    let mut cluster = cluster;
    loop {
        if rx.recv_timeout(Duration::from_millis(500)).is_ok() {
            break;
        }
    }
    let _ = out!("\nstopping {} servers", cluster.pids().len());
    cluster.stop();
    Ok(())
}

pub fn down(a: DownArgs) -> Result<()> {
    let n = weft_launch::stop_detached(&a.dir)?;
    let _ = out!("stopped {n} processes of {}", a.dir.display());
    Ok(())
}
