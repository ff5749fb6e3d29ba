//! `weft job stop` and `weft job status`.
//!
//! Stop works without reaching into other nodes: it writes the stop
//! marker, every server sees it within [`STOP_POLL`](super::serve::STOP_POLL),
//! removes its data unless kept and exits, and the launcher ends with its
//! last task. A launcher still running after the grace period is ended
//! (SIGTERM to its process group, then SIGKILL); srun and mpiexec pass the
//! signal to the servers. Before the servers, the job's FUSE mounts are
//! asked to unmount (see [`mounts`](super::mounts)).

use super::file::{self, JobFile, LauncherRecord, RankRecord, StopMarker};
use super::rendezvous;
use super::start::alive;
use crate::{cluster_path, fail, LaunchError, STOP_GRACE};
use std::path::Path;
use std::time::{Duration, Instant};

/// One server as `weft job status` shows it.
#[derive(Debug, Clone)]
pub struct ServerState {
    pub record: Option<RankRecord>,
    pub answers: bool,
}

/// A job directory's job.
#[derive(Debug)]
pub struct JobState {
    pub job: JobFile,
    pub launcher: Option<LauncherRecord>,
    /// Whether a launcher process is alive (`None`: it runs on another node).
    pub launcher_alive: Option<bool>,
    /// By rank.
    pub servers: Vec<ServerState>,
}

/// What stop did.
#[derive(Debug)]
pub struct Stopped {
    /// Ranks that were serving and stopped.
    pub stopped: Vec<u32>,
    /// Servers that were not running when stop began (their data, if any, stays).
    pub dead: Vec<RankRecord>,
    /// Launcher processes that had to be signalled (the servers did not
    /// all end on the marker within the grace period).
    pub signalled: usize,
    /// Mounts of the job that unmounted, and those that did not within
    /// [`UNMOUNT_GRACE`](super::mounts::UNMOUNT_GRACE).
    pub unmounted: usize,
    pub mounts_left: Vec<super::mounts::MountRecord>,
    pub elapsed: Duration,
}

/// How long stop waits for servers that stopped serving to remove their
/// data and exit (a large data directory takes a while to remove).
const REMOVAL_GRACE: Duration = Duration::from_secs(120);

fn load_job(dir: &Path) -> Result<JobFile, LaunchError> {
    JobFile::load(dir)?.ok_or_else(|| fail(format!("no job in {} (no {}): nothing to stop or show", dir.display(), file::job_path(dir).display())))
}

/// Reads the job's files and asks every server.
pub fn status(dir: &Path) -> Result<JobState, LaunchError> {
    let job = load_job(dir)?;
    let launcher = file::read::<LauncherRecord>(&file::launcher_path(dir))?.filter(|l| l.start == job.start);
    let launcher_alive = launcher.as_ref().filter(|l| l.host == file::hostname()).map(|l| l.pids.iter().any(|&(p, t)| alive(p, t)));
    let secret = job.secret()?;
    let records = rendezvous::read(dir, &job).ranks;
    // Ranks without an address are asked at an address nothing listens on.
    let addrs: Vec<std::net::SocketAddr> = records.iter().map(|r| r.as_ref().and_then(|r| r.addr).unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 0)))).collect();
    let up = crate::answering(&addrs, &secret);
    let servers = records.into_iter().zip(up).map(|(record, answers)| ServerState { answers: answers && record.as_ref().is_some_and(|r| r.addr.is_some()), record }).collect();
    Ok(JobState { job, launcher, launcher_alive, servers })
}

/// Asks the job's mounts to unmount and waits for them (what stop does
/// first; `weft job stop` does it before a stage-out, so the files a
/// mount still writes are whole when copied out).
pub fn unmount_mounts(dir: &Path) -> Result<(usize, Vec<super::mounts::MountRecord>), LaunchError> {
    let job = load_job(dir)?;
    super::mounts::unmount_all(dir, &job, super::mounts::UNMOUNT_GRACE)
}

/// Stops the job in `dir` (see the module's documentation).
pub fn stop(dir: &Path, keep: bool) -> Result<Stopped, LaunchError> {
    let began = Instant::now();
    let state = status(dir)?;
    let job = &state.job;
    // Mounts first, while the servers still answer their last flushes.
    let (unmounted, mounts_left) = super::mounts::unmount_all(dir, job, super::mounts::UNMOUNT_GRACE)?;
    std::fs::create_dir_all(file::rendezvous_dir(dir, &job.start)).map_err(|e| fail(format!("cannot write in {}: {e}", dir.display())))?;
    file::write(&file::stop_path(dir, &job.start), &StopMarker { keep, failed_start: false }, false)?;
    let serving: Vec<&RankRecord> = state.servers.iter().filter(|s| s.answers).filter_map(|s| s.record.as_ref()).collect();
    let dead: Vec<RankRecord> = state.servers.iter().filter(|s| !s.answers).filter_map(|s| s.record.clone()).collect();
    let secret = job.secret()?;
    let local_launchers: Vec<(u32, u64)> = state.launcher.as_ref().filter(|l| l.host == file::hostname()).map(|l| l.pids.clone()).unwrap_or_default();
    let still = |t: &[&RankRecord]| -> Vec<u32> {
        let addrs: Vec<std::net::SocketAddr> = t.iter().filter_map(|r| r.addr).collect();
        t.iter().zip(crate::answering(&addrs, &secret)).filter(|(_, up)| *up).map(|(r, _)| r.rank).collect()
    };
    let launcher_left = || local_launchers.iter().filter(|&&(p, t)| alive(p, t)).map(|&(p, _)| p).collect::<Vec<u32>>();
    // Servers see the marker within STOP_POLL and stop listening; then
    // they remove their data and exit, and the launcher ends by itself.
    while began.elapsed() < STOP_GRACE && !still(&serving).is_empty() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let removal_deadline = if still(&serving).is_empty() { REMOVAL_GRACE } else { STOP_GRACE };
    // A server stops answering when its drain begins; it is done once it
    // wrote its record (data removed or kept). Its launcher ends after.
    let undone = || serving.iter().filter(|r| !file::done_path(dir, &job.start, r.rank).exists()).count();
    while began.elapsed() < removal_deadline && (undone() > 0 || !launcher_left().is_empty()) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let lingering = launcher_left();
    let signalled = lingering.len();
    end_groups(lingering);
    let left = still(&serving);
    if !left.is_empty() {
        let named: Vec<String> = serving.iter().filter(|r| left.contains(&r.rank)).map(|r| format!("server {} on {} (pid {}, {})", r.rank, r.host, r.pid, r.addr.map(|a| a.to_string()).unwrap_or_default())).collect();
        return Err(fail(format!("still running after {STOP_GRACE:?}: {}; stop them on their nodes", named.join(", "))));
    }
    let _ = std::fs::remove_file(file::job_path(dir));
    let _ = std::fs::remove_file(file::launcher_path(dir));
    let _ = std::fs::remove_file(cluster_path(dir));
    let _ = std::fs::remove_dir_all(dir.join("rendezvous"));
    let _ = std::fs::remove_dir_all(dir.join("mounts"));
    Ok(Stopped { stopped: serving.iter().map(|r| r.rank).collect(), dead, signalled, unmounted, mounts_left, elapsed: began.elapsed() })
}

/// Ends the process groups led by `pids` (launchers this node started):
/// SIGTERM, then SIGKILL two seconds later.
pub(crate) fn end_groups(pids: Vec<u32>) {
    if pids.is_empty() {
        return;
    }
    for &p in &pids {
        let _ = crate::stop::signal_group(p, libc::SIGTERM);
    }
    let t = Instant::now();
    // Long enough for a server's drain on SIGTERM (4 s) and its flush.
    while t.elapsed() < Duration::from_secs(7) && pids.iter().any(|&p| !crate::stop::is_zombie(p as i32) && std::path::Path::new(&format!("/proc/{p}")).exists()) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &p in &pids {
        let _ = crate::stop::signal_group(p, libc::SIGKILL);
    }
}
