//! `weft job start|status|stop`: Weft on the nodes of a batch job (see
//! docs/job.md). The work is in `weft_launch::job`; this module reads the
//! command line and the launcher's environment, and prints.

use super::{parse_size, stage};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Duration;
use weft_launch::job::hosts;
use weft_launch::job::launcher::{Launcher, MpiFlavor};
use weft_launch::job::start::JobSpec;

#[derive(Args)]
pub struct JobArgs {
    #[command(subcommand)]
    cmd: JobCmd,
}

#[derive(Subcommand)]
enum JobCmd {
    /// Start one server per node of the job; returns when every server answers.
    Start(StartArgs),
    /// Each server of the job: node, address, answering or not.
    Status(DirArg),
    /// Stop every server of the job and remove their data (unless --keep).
    Stop(StopArgs),
    /// One node's part of a spread stage-in or stage-out (started by
    /// `weft job start` and `stop` through the job's launcher).
    #[command(hide = true)]
    StageWorker(WorkerArgs),
}

#[derive(Args)]
struct WorkerArgs {
    #[command(flatten)]
    dir: DirArg,
    /// The plan's id (DIR/stage/ID/plan.json).
    #[arg(long)]
    plan: String,
}

/// How a stage copies.
#[derive(Args)]
struct StageOpts {
    /// Copy from this node only (sources or destinations not visible on
    /// the other nodes); by default every node of the job copies a part.
    #[arg(long = "stage-here")]
    stage_here: bool,
    /// Files larger than this are copied in pieces of this size, by
    /// several nodes at once.
    #[arg(long = "stage-chunk", default_value = "64m", value_parser = parse_size)]
    stage_chunk: u64,
}

#[derive(Args)]
struct DirArg {
    /// The job directory: shared by every node (the job's working directory).
    #[arg(long, env = "WEFT_JOB_DIR")]
    dir: PathBuf,
}

#[derive(Args)]
struct StartArgs {
    #[command(flatten)]
    dir: DirArg,
    /// Hosts to start servers on, one per line (`host`, `host slots=N` or
    /// `host:N`); without it, the nodes of the Slurm allocation.
    #[arg(long)]
    hostfile: Option<PathBuf>,
    /// How to reach the nodes: srun inside a Slurm allocation, else
    /// mpiexec with a host file, else ssh.
    #[arg(long, value_enum, default_value = "auto")]
    launcher: LauncherArg,
    /// The mpiexec to use (Open MPI's or MPICH's).
    #[arg(long, env = "WEFT_MPIEXEC", default_value = "mpiexec")]
    mpiexec: String,
    /// The ssh command and its options.
    #[arg(long, env = "WEFT_SSH", default_value = "ssh -o BatchMode=yes")]
    ssh: String,
    /// More options for the launcher, e.g. "--mca plm_rsh_agent /path/agent".
    #[arg(long, env = "WEFT_LAUNCHER_ARGS", allow_hyphen_values = true)]
    launcher_args: Option<String>,
    /// Metadata shards: ranks 0 to K-1 keep the namespace (see docs/architecture.md).
    #[arg(long, default_value_t = 1)]
    meta_shards: u32,
    /// Each node's data directory (node-local disk); servers keep data in
    /// DATA/rank<K>. Default: /tmp/weft-<uid>/<a hash of the job directory>.
    #[arg(long)]
    data: Option<PathBuf>,
    /// The network interface servers bind (default: the first one up that
    /// is not loopback).
    #[arg(long)]
    iface: Option<String>,
    /// The port servers listen on (default: any free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// The port each server serves Prometheus metrics on, on the same
    /// address (default: any free one, named in the cluster file;
    /// docs/operations.md).
    #[arg(long, default_value_t = 0)]
    metrics_port: u16,
    /// Serve no metrics.
    #[arg(long, conflicts_with = "metrics_port")]
    no_metrics: bool,
    /// Default stripe size of new files (striping_unit).
    #[arg(long = "stripe-size", default_value = "64k", value_parser = parse_size)]
    stripe_size: u64,
    /// Seconds the start may take (default: 30 + 0.1 per node).
    #[arg(long)]
    timeout: Option<f64>,
    /// Copy LOCAL into Weft once the servers answer: LOCAL:weft:/DEST (repeatable).
    #[arg(long = "stage-in")]
    stage_in: Vec<String>,
    #[command(flatten)]
    stage: StageOpts,
}

#[derive(Args)]
struct StopArgs {
    #[command(flatten)]
    dir: DirArg,
    /// Leave the servers' data on their nodes (a later start with the same
    /// --data maps it again).
    #[arg(long)]
    keep: bool,
    /// Copy out of Weft before stopping: weft:/SOURCE:LOCAL (repeatable).
    #[arg(long = "stage-out")]
    stage_out: Vec<String>,
    #[command(flatten)]
    stage: StageOpts,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LauncherArg {
    Auto,
    Srun,
    Mpiexec,
    Ssh,
}

pub fn job(a: JobArgs) -> Result<()> {
    match a.cmd {
        JobCmd::Start(s) => start(s),
        JobCmd::Status(d) => status(&d.dir),
        JobCmd::Stop(s) => stop(s),
        JobCmd::StageWorker(w) => stage::spread::worker(&w.dir.dir, &w.plan),
    }
}

/// Whether `prog` runs from PATH (or as given).
fn found(prog: &str) -> bool {
    let p = Path::new(prog);
    if p.components().count() > 1 {
        return p.is_file();
    }
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(prog).is_file()))
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// The launcher and the nodes, from the arguments and the environment.
fn launcher_and_nodes(a: &StartArgs) -> Result<(Launcher, Vec<String>)> {
    let in_slurm = std::env::var_os("SLURM_JOB_ID").is_some();
    let choice = match a.launcher {
        LauncherArg::Auto if a.hostfile.is_some() => {
            if found(&a.mpiexec) { LauncherArg::Mpiexec } else { LauncherArg::Ssh }
        }
        LauncherArg::Auto if in_slurm => LauncherArg::Srun,
        LauncherArg::Auto => bail!("not inside a Slurm allocation (no SLURM_JOB_ID) and no --hostfile: run it in sbatch/salloc, or name the nodes with --hostfile FILE"),
        other => other,
    };
    if choice == LauncherArg::Srun {
        if a.hostfile.is_some() {
            bail!("--hostfile goes with --launcher mpiexec or ssh; srun uses the Slurm allocation's nodes");
        }
        if !in_slurm {
            bail!("--launcher srun needs a Slurm allocation (no SLURM_JOB_ID here): run it inside sbatch or salloc");
        }
        if !found("srun") {
            bail!("srun is not in PATH");
        }
        let list = std::env::var("SLURM_JOB_NODELIST").or_else(|_| std::env::var("SLURM_NODELIST")).map_err(|_| anyhow!("SLURM_JOB_NODELIST is not set: is this a Slurm allocation?"))?;
        let nodes = hosts::expand_nodelist(&list).map_err(|e| anyhow!("SLURM_JOB_NODELIST: {e}"))?;
        return Ok((Launcher::Srun { srun: "srun".into() }, nodes));
    }
    let path = a.hostfile.as_deref().context("--launcher mpiexec and ssh need --hostfile FILE")?;
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the host file {}", path.display()))?;
    let nodes = hosts::parse_hostfile(&text).map_err(|e| anyhow!("host file {}: {e}", path.display()))?;
    match choice {
        LauncherArg::Mpiexec => {
            if !found(&a.mpiexec) {
                bail!("{} is not in PATH: install an MPI, point --mpiexec (WEFT_MPIEXEC) at one, or use --launcher ssh", a.mpiexec);
            }
            let out = std::process::Command::new(&a.mpiexec).arg("--version").output().with_context(|| format!("cannot run {} --version", a.mpiexec))?;
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            let flavor = MpiFlavor::from_version(&text).with_context(|| format!("{} is neither Open MPI's nor MPICH's (Hydra) mpiexec", a.mpiexec))?;
            Ok((Launcher::Mpiexec { mpiexec: a.mpiexec.clone(), flavor }, nodes))
        }
        _ => {
            let ssh = words(&a.ssh);
            if ssh.is_empty() || !found(&ssh[0]) {
                bail!("{:?} is not in PATH: install an ssh client or set --ssh (WEFT_SSH)", a.ssh);
            }
            Ok((Launcher::Ssh { ssh }, nodes))
        }
    }
}

/// The default data directory: node-local, per user and job directory
/// (the same again for a restart from the same directory).
fn default_data(dir: &Path) -> PathBuf {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    // FNV-1a: stable across builds and nodes.
    let h = abs.as_os_str().as_encoded_bytes().iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    PathBuf::from(format!("/tmp/weft-{}/{:08x}", current_uid(), h as u32))
}

#[allow(unsafe_code)]
fn current_uid() -> u32 {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

fn start(a: StartArgs) -> Result<()> {
    let stage_in = a.stage_in.iter().map(|s| stage::split_pair(s, true)).collect::<Result<Vec<_>>>()?;
    let timeout = match a.timeout {
        Some(t) if !(t.is_finite() && t > 0.0 && t <= 86_400.0) => bail!("--timeout {t}: give seconds between 0 and 86400"),
        t => t.map(Duration::from_secs_f64),
    };
    if a.stripe_size == 0 {
        bail!("--stripe-size must be at least 1 byte");
    }
    let (launcher, nodes) = launcher_and_nodes(&a)?;
    let spec = JobSpec {
        data: a.data.clone().unwrap_or_else(|| default_data(&a.dir.dir)),
        data_default: a.data.is_none(),
        dir: a.dir.dir.clone(),
        weft_bin: std::env::current_exe().context("cannot find the weft binary")?,
        launcher,
        nodes,
        launcher_args: a.launcher_args.as_deref().map(words).unwrap_or_default(),
        meta_shards: a.meta_shards,
        stripe_size: a.stripe_size,
        iface: a.iface.clone(),
        port: a.port,
        metrics_port: (!a.no_metrics).then_some(a.metrics_port),
        timeout,
        as_root: current_uid() == 0,
    };
    let _ = out!("starting {} servers with {} ...", spec.nodes.len(), spec.launcher.name());
    // Ctrl-C (or the batch system's SIGTERM) during the start stops what
    // it started instead of leaving it running.
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&cancel);
    ctrlc::set_handler(move || flag.store(true, std::sync::atomic::Ordering::Relaxed)).context("cannot install the signal handler")?;
    let started = weft_launch::job::start::start(&spec, &cancel)?;
    let _ = out!("Weft job up: {} servers, ready {:.2} s after launch ({:.2} s after the last server bound its address)", started.records.len(), started.elapsed.as_secs_f64(), started.after_last_bind.as_secs_f64());
    for (s, r) in started.cluster.servers.iter().zip(&started.records) {
        let _ = out!("  server {:>3}  {:<16} {:<21}  {:?}", s.id, r.host, s.addr, s.services);
    }
    let _ = out!("\n  export WEFT_CLUSTER={}", started.cluster_file.display());
    if !stage_in.is_empty() {
        let c = super::client_of(&started.cluster_file)?;
        let st = run_stage(&c, &a.dir.dir, &stage_in, true, &a.stage, &cancel).with_context(|| format!("stage-in (the servers keep running; stop them with weft job stop --dir {})", a.dir.dir.display()))?;
        let _ = out!("  staged in {}", summary(&st));
    }
    let _ = out!("  stop it with: weft job stop --dir {}", a.dir.dir.display());
    Ok(())
}

fn status(dir: &Path) -> Result<()> {
    let st = weft_launch::job::stop::status(dir)?;
    let launcher = match (&st.launcher, st.launcher_alive) {
        (Some(l), Some(true)) => format!("{} running on {}", l.kind, l.host),
        (Some(l), Some(false)) => format!("{} on {} has exited", l.kind, l.host),
        (Some(l), None) => format!("{} on {} (another node)", l.kind, l.host),
        (None, _) => "not recorded".into(),
    };
    out!("job in {}: {} servers, launcher {launcher}", dir.display(), st.job.servers)?;
    out!("{:>4}  {:<16} {:<21} {:>8}  state", "rank", "node", "address", "pid")?;
    let mut down = 0;
    for (k, s) in st.servers.iter().enumerate() {
        let (host, addr, pid) = s.record.as_ref().map_or(("-".into(), "-".into(), "-".into()), |r| (r.host.clone(), r.addr.map_or("-".into(), |a| a.to_string()), r.pid.to_string()));
        let state = match (&s.record, s.answers) {
            (_, true) => "up".to_string(),
            (Some(r), false) if r.error.is_some() => format!("FAILED: {}", r.error.as_deref().unwrap_or("")),
            (Some(_), false) => "DOWN".into(),
            (None, false) => "never started".into(),
        };
        down += usize::from(!s.answers);
        out!("{k:>4}  {host:<16} {addr:<21} {pid:>8}  {state}")?;
    }
    if down > 0 {
        bail!("{down} of {} servers do not answer", st.servers.len());
    }
    Ok(())
}

fn stop(a: StopArgs) -> Result<()> {
    let dir = &a.dir.dir;
    let outs = a.stage_out.iter().map(|s| stage::split_pair(s, false)).collect::<Result<Vec<_>>>()?;
    let mut unmounted = 0;
    if !outs.is_empty() {
        // Mounts first: what they still write is in the copy.
        let (n, left) = weft_launch::job::stop::unmount_mounts(dir)?;
        unmounted = n;
        if let Some(m) = left.first() {
            bail!("the mount on {} at {} (pid {}) did not unmount within {:?}; nothing was copied out or stopped: close what uses it and run stop again", m.host, m.mountpoint.display(), m.pid, weft_launch::job::mounts::UNMOUNT_GRACE);
        }
        let c = super::client_of(&weft_launch::cluster_path(dir)).with_context(|| format!("no running job in {} to stage out of", dir.display()))?;
        // A failed stage-out stops nothing: the data is still in Weft.
        // Ctrl-C ends the workers and leaves the job running.
        let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&cancel);
        ctrlc::set_handler(move || flag.store(true, std::sync::atomic::Ordering::Relaxed)).context("cannot install the signal handler")?;
        let st = run_stage(&c, dir, &outs, false, &a.stage, &cancel).context("stage-out failed; the job still runs")?;
        let _ = out!("staged out {}", summary(&st));
    }
    let st = weft_launch::job::stop::stop(dir, a.keep)?;
    let _ = out!("stopped {} servers in {:.2} s{}", st.stopped.len(), st.elapsed.as_secs_f64(), if a.keep { " (data kept)" } else { "" });
    if unmounted + st.unmounted > 0 {
        let _ = out!("  unmounted {} mount(s) of the job", unmounted + st.unmounted);
    }
    for m in &st.mounts_left {
        let _ = out!("  the mount on {} at {} (pid {}) did not unmount within {:?}; it unmounts itself once it sees the job gone", m.host, m.mountpoint.display(), m.pid, weft_launch::job::mounts::UNMOUNT_GRACE);
    }
    if st.signalled > 0 {
        let _ = out!("  {} launcher processes were still running after the grace period and were ended by signal", st.signalled);
    }
    for r in &st.dead {
        let _ = out!("  server {} on {} was not running{}", r.rank, r.host, if a.keep { String::new() } else { format!("; its data in {} on {} stays", r.dir.display(), r.host) });
    }
    Ok(())
}

/// Stages `pairs` over the job's nodes, or from here (`--stage-here`, or
/// a job of one node).
fn run_stage(c: &weft_client::Client, dir: &Path, pairs: &[(String, String)], into_weft: bool, o: &StageOpts, cancel: &std::sync::atomic::AtomicBool) -> Result<stage::Staged> {
    if o.stage_chunk == 0 {
        bail!("--stage-chunk must be at least 1 byte");
    }
    let servers = weft_launch::job::file::JobFile::load(dir)?.map_or(1, |j| j.servers);
    if o.stage_here || servers == 1 {
        stage::stage_here(c, pairs, into_weft, o.stage_chunk)
    } else {
        stage::spread::stage(c, dir, pairs, into_weft, o.stage_chunk, cancel)
    }
}

/// `5 files, 3.0 MiB over 3 nodes (n0 1.0 MiB, ...)`: each node's share
/// when there are few enough to read.
fn summary(st: &stage::Staged) -> String {
    let mut s = format!("{} files, {}", st.files, super::human_bytes(st.bytes));
    match st.by_node.len() {
        0 => s.push_str(" from this node"),
        n if n <= 8 => s.push_str(&format!(" over {n} nodes ({})", st.by_node.iter().map(|(h, b)| format!("{h} {}", super::human_bytes(*b))).collect::<Vec<_>>().join(", "))),
        n => {
            let (lo, hi) = (st.by_node.iter().map(|x| x.1).min().unwrap_or(0), st.by_node.iter().map(|x| x.1).max().unwrap_or(0));
            s.push_str(&format!(" over {n} nodes ({} to {} each)", super::human_bytes(lo), super::human_bytes(hi)));
        }
    }
    s
}
