//! `weft job start`: start one server per node through a launcher, wait
//! until every server answers, and on failure name the nodes that did not
//! come up and stop what was started.

use super::file::{self, JobFile, LauncherRecord, RankRecord, StopMarker};
use super::launcher::{self, Launcher};
use super::rendezvous;
use crate::{answers, cluster_path, fail, LaunchError};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use weft_net::ClusterFile;

/// What to start.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The job directory (shared by every node).
    pub dir: PathBuf,
    /// The weft binary, at the same path on every node.
    pub weft_bin: PathBuf,
    pub launcher: Launcher,
    /// One server per node, rank k on node k.
    pub nodes: Vec<String>,
    /// More options for the launcher.
    pub launcher_args: Vec<String>,
    pub meta_shards: u32,
    pub stripe_size: u64,
    /// Each server's data directory on its node: `<data>/rank<K>`.
    pub data: PathBuf,
    /// `data` is Weft's default (its last server removes it), not one the
    /// user named.
    pub data_default: bool,
    pub iface: Option<String>,
    pub port: u16,
    /// The port servers serve metrics on (0: any free one; `None`: none).
    pub metrics_port: Option<u16>,
    /// How long the start may take (`None`: grows with the node count).
    pub timeout: Option<Duration>,
    /// Running as root (Open MPI needs to be told it may).
    pub as_root: bool,
}

/// A job that started.
#[derive(Debug)]
pub struct Started {
    pub cluster_file: PathBuf,
    pub cluster: ClusterFile,
    pub records: Vec<RankRecord>,
    /// From the launch to every server answering.
    pub elapsed: Duration,
    /// From the last server binding its address to every server answering.
    pub after_last_bind: Duration,
}

/// The start's deadline for `n` nodes: 30 s, plus 100 ms a node (a
/// thousand nodes: 130 s), since launchers and shared directories slow
/// down with the node count.
pub fn default_timeout(n: usize) -> Duration {
    Duration::from_secs(30) + Duration::from_millis(100) * n as u32
}

/// Whether the job recorded in `dir` still runs: a launcher process alive
/// on this node, or a server of its cluster file answering.
pub fn running(dir: &Path) -> Option<String> {
    if let Ok(Some(rec)) = file::read::<LauncherRecord>(&file::launcher_path(dir))
        && rec.host == file::hostname()
        && let Some((pid, _)) = rec.pids.iter().find(|&&(p, t)| alive(p, t))
    {
        return Some(format!("its launcher ({}, pid {pid}) still runs", rec.kind));
    }
    let cf = ClusterFile::load(&cluster_path(dir)).ok()?;
    cf.servers.iter().find(|s| answers(s.addr, &cf.secret())).map(|s| format!("server {} answers at {}", s.id, s.addr))
}

/// Whether the launcher recorded as (`pid`, start time) still runs: the
/// same process (a reused pid has another start time), not a zombie, and
/// still leading its own process group (as each launcher was started), so
/// signalling the group reaches only what the start made.
pub(crate) fn alive(pid: u32, started: u64) -> bool {
    crate::stop::process_start(pid as i32) == Some(started) && !crate::stop::is_zombie(pid as i32) && crate::stop::process_group(pid as i32) == Some(pid as i32)
}

/// Makes the job directory (0700) or checks an existing one: a directory
/// of this user's that no one else may write, since its files say which
/// processes `weft job stop` signals and hold the cluster's secret.
fn own_job_dir(dir: &Path) -> Result<PathBuf, LaunchError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| fail(format!("cannot create the job directory {}: {e}", dir.display())))?;
    let dir = dir.canonicalize().map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    let md = std::fs::metadata(&dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    if md.uid() != crate::current_uid() || md.permissions().mode() & 0o022 != 0 {
        return Err(fail(format!("the job directory {} must belong to this user and be writable by no one else (chmod go-w)", dir.display())));
    }
    std::fs::DirBuilder::new().mode(0o700).create(dir.join("logs")).or_else(|e| if e.kind() == std::io::ErrorKind::AlreadyExists { Ok(()) } else { Err(e) }).map_err(|e| fail(format!("cannot create {}: {e}", dir.join("logs").display())))?;
    Ok(dir)
}

/// Starts the job (see the module's documentation). Setting `cancel`
/// (from a signal handler) stops what was started and fails the start.
pub fn start(spec: &JobSpec, cancel: &AtomicBool) -> Result<Started, LaunchError> {
    if spec.nodes.is_empty() {
        return Err(fail("no nodes to start servers on"));
    }
    match spec.meta_shards {
        0 => return Err(fail("--meta-shards must be at least 1")),
        k if k as usize > spec.nodes.len() => return Err(fail(format!("--meta-shards {k}: at most one shard per node, and the job has {} node(s)", spec.nodes.len()))),
        k if k as usize > weft_net::cluster::MAX_META_SHARDS => return Err(fail(format!("--meta-shards {k}: at most {}", weft_net::cluster::MAX_META_SHARDS))),
        _ => {}
    }
    if spec.nodes.len() > super::rank::MAX_SERVERS as usize {
        return Err(fail(format!("{} nodes: at most {}", spec.nodes.len(), super::rank::MAX_SERVERS)));
    }
    let dir = own_job_dir(&spec.dir)?;
    // One start at a time in a directory; the lock goes with this process.
    let lock = file::create_nofollow(&dir.join(".start.lock")).map_err(|e| fail(format!("the job directory {} is not writable: {e}", dir.display())))?;
    if lock.try_lock().is_err() {
        return Err(fail(format!("another `weft job start` is running in {}", dir.display())));
    }
    if let Some(why) = running(&dir) {
        return Err(fail(format!("a job is already running in {} ({why}): stop it first with: weft job stop --dir {}", dir.display(), dir.display())));
    }
    clear_previous(&dir);
    let timeout = spec.timeout.unwrap_or_else(|| default_timeout(spec.nodes.len()));
    let job = JobFile {
        start: format!("{:016x}", rand::random::<u64>()),
        servers: spec.nodes.len() as u32,
        meta_shards: spec.meta_shards,
        stripe_size: spec.stripe_size,
        secret: ClusterFile::random_secret(),
        data: spec.data.clone(),
        iface: spec.iface.clone(),
        port: spec.port,
        metrics_port: spec.metrics_port,
        // Servers give up a little before the start does, so the start
        // reports their word rather than its own timeout.
        bootstrap_timeout_ms: timeout.saturating_sub(Duration::from_secs(2)).max(timeout / 2).as_millis() as u64,
        launcher: Some(spec.launcher.name().into()),
        data_default: spec.data_default,
    };
    file::write(&file::job_path(&dir), &job, true)?;
    let began = Instant::now();
    let mut children = Vec::new();
    let ready = launch(spec, &dir, &job, &mut children).and_then(|()| wait_ready(spec, &dir, &job, &mut children, timeout, cancel));
    match ready {
        Ok((cluster, records)) => {
            let elapsed = began.elapsed();
            let last_bind = records.iter().map(|r| r.bound_ms).max().unwrap_or(0);
            let after_last_bind = Duration::from_millis(file::now_ms().saturating_sub(last_bind));
            // The launcher keeps running (it holds the servers); reap it
            // never: `weft job stop` ends it.
            for c in children {
                std::mem::forget(c);
            }
            Ok(Started { cluster_file: cluster_path(&dir), cluster, records, elapsed, after_last_bind })
        }
        Err(e) => {
            abandon(&dir, &job, &mut children);
            Err(e)
        }
    }
}

/// Removes what an earlier, stopped start left, but not its logs.
fn clear_previous(dir: &Path) {
    let _ = std::fs::remove_file(file::job_path(dir));
    let _ = std::fs::remove_file(file::launcher_path(dir));
    let _ = std::fs::remove_file(cluster_path(dir));
    let _ = std::fs::remove_dir_all(dir.join("rendezvous"));
    let _ = std::fs::remove_dir_all(dir.join("mounts"));
}

/// Starts the launcher processes into `children`, their output in
/// `logs/launcher.log`. On failure the caller stops those started.
fn launch(spec: &JobSpec, dir: &Path, job: &JobFile, children: &mut Vec<Child>) -> Result<(), LaunchError> {
    let serve = launcher::serve_args(&spec.weft_bin, dir);
    let log_path = dir.join("logs").join("launcher.log");
    let log = file::create_nofollow(&log_path).map_err(|e| fail(format!("cannot write {}: {e}", log_path.display())))?;
    for argv in launcher::commands(&spec.launcher, &spec.nodes, &serve, &spec.launcher_args, spec.as_root) {
        let out = log.try_clone().map_err(|e| fail(e.to_string()))?;
        let err = log.try_clone().map_err(|e| fail(e.to_string()))?;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).stdin(Stdio::null()).stdout(out).stderr(err);
        // Its own process group: a Ctrl-C at the job script's terminal
        // goes to the script, and `weft job stop` ends the group.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        children.push(cmd.spawn().map_err(|e| fail(format!("cannot run the launcher {}: {e}", argv[0])))?);
    }
    let pids = children.iter().map(|c| (c.id(), crate::stop::process_start(c.id() as i32).unwrap_or(0))).collect();
    let how = file::LaunchedWith { launcher: spec.launcher.clone(), args: spec.launcher_args.clone(), weft_bin: spec.weft_bin.clone(), as_root: spec.as_root };
    let rec = LauncherRecord { start: job.start.clone(), kind: spec.launcher.name().into(), host: file::hostname(), pids, nodes: spec.nodes.clone(), how: Some(how) };
    file::write(&file::launcher_path(dir), &rec, true)
}

/// Names rank `k` with its node, where known.
fn node_of(spec: &JobSpec, k: u32) -> String {
    spec.nodes.get(k as usize).map_or_else(|| format!("rank {k}"), |n| format!("rank {k} ({n})"))
}

/// At most the first 8 names, and how many more: an error line stays readable at 1,000 nodes.
pub(crate) fn named_list(names: Vec<String>) -> String {
    match names.len() {
        0 => "none".into(),
        n if n <= 8 => names.join(", "),
        n => format!("{} and {} more", names[..8].join(", "), n - 8),
    }
}

/// The last lines of the launcher's log, for an error message.
fn log_tail(dir: &Path) -> String {
    tail_of(&dir.join("logs").join("launcher.log"))
}

/// The last lines of a log, for an error message.
pub(crate) fn tail_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(15)..].join("\n  ");
    if tail.is_empty() { format!("(its log {} is empty)", path.display()) } else { format!("its log {} ends:\n  {tail}", path.display()) }
}

fn wait_ready(spec: &JobSpec, dir: &Path, job: &JobFile, children: &mut [Child], timeout: Duration, cancel: &AtomicBool) -> Result<(ClusterFile, Vec<RankRecord>), LaunchError> {
    let began = Instant::now();
    let launcher = spec.launcher.name();
    let mut progress = rendezvous::Progress::default();
    let mut last_full = Instant::now();
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(fail("interrupted: the servers started so far were stopped"));
        }
        // Files not seen yet at every poll; all of them once a second, for
        // a server that reports a failure after its first record.
        if last_full.elapsed() >= Duration::from_secs(1) {
            progress = rendezvous::read(dir, job);
            last_full = Instant::now();
        } else {
            rendezvous::read_missing(dir, job, &mut progress);
        }
        if let Some(bad) = progress.failed() {
            return Err(fail(format!("server {} on {} could not start: {}", node_of(spec, bad.rank), bad.host, bad.error.as_deref().unwrap_or("?"))));
        }
        let missing = named_list(progress.missing().into_iter().map(|k| node_of(spec, k)).collect());
        if let Some(records) = progress.complete()
            && let Ok(cf) = ClusterFile::load(&cluster_path(dir))
        {
            let up = crate::answering(&cf.servers.iter().map(|s| s.addr).collect::<Vec<_>>(), &cf.secret());
            let silent: Vec<String> = cf.servers.iter().zip(&up).filter(|(_, up)| !**up).map(|(s, _)| format!("{} at {}", node_of(spec, s.id), s.addr)).collect();
            if silent.is_empty() {
                return Ok((cf, records));
            }
            if began.elapsed() > timeout {
                return Err(fail(format!("servers did not answer within {timeout:?}: {}; {}", named_list(silent), log_tail(dir))));
            }
        }
        for c in children.iter_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                return Err(fail(format!("{launcher} exited ({status}) before every server was up; not started: {missing}; {}", log_tail(dir))));
            }
        }
        if began.elapsed() > timeout {
            return Err(fail(format!("not every server was up within {timeout:?}; no rank file from: {missing}; {}", log_tail(dir))));
        }
        std::thread::sleep(Duration::from_millis(if began.elapsed() < Duration::from_secs(2) { 10 } else { 100 }));
    }
}

/// Stops a failed start: the marker tells servers to go (removing only
/// data directories this start made), then the launcher is ended.
fn abandon(dir: &Path, job: &JobFile, children: &mut [Child]) {
    let _ = std::fs::create_dir_all(file::rendezvous_dir(dir, &job.start));
    let _ = file::write(&file::stop_path(dir, &job.start), &StopMarker { keep: true, failed_start: true }, false);
    let deadline = Instant::now() + super::serve::STOP_POLL * 3;
    while Instant::now() < deadline && children.iter_mut().any(|c| matches!(c.try_wait(), Ok(None))) {
        std::thread::sleep(Duration::from_millis(20));
    }
    super::stop::end_groups(children.iter_mut().filter_map(|c| matches!(c.try_wait(), Ok(None)).then_some(c.id())).collect());
    for c in children.iter_mut() {
        let _ = c.wait();
    }
    let _ = std::fs::remove_file(file::job_path(dir));
    let _ = std::fs::remove_file(file::launcher_path(dir));
    let _ = std::fs::remove_file(cluster_path(dir));
}
