//! FUSE mounts of a job's cluster, so that `weft job stop` leaves none
//! behind. A `weft mount` whose cluster file is a job directory's
//! registers itself in `DIR/mounts/<start>/` and watches for the job's
//! unmount marker; stop writes that marker first, waits for the mounts to
//! go (they flush while the servers still answer), and only then stops the
//! servers. Like the stop marker, it reaches every node through the job
//! directory alone.

use super::file::{self, JobFile};
use crate::{fail, LaunchError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One mount of the job's cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountRecord {
    pub host: String,
    pub pid: u32,
    pub mountpoint: PathBuf,
}

/// `weft job stop`'s word to the mounts.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct UnmountMarker {
    at_ms: u64,
}

/// How long stop waits for every mount to unmount (each one sees the
/// marker within [`POLL`], then flushes and unmounts).
pub const UNMOUNT_GRACE: Duration = Duration::from_secs(10);

/// How often a mount looks for the marker.
pub const POLL: Duration = Duration::from_millis(500);

pub fn mounts_dir(dir: &Path, start: &str) -> PathBuf {
    dir.join("mounts").join(start)
}

pub fn unmount_marker(dir: &Path, start: &str) -> PathBuf {
    file::rendezvous_dir(dir, start).join("unmount")
}

/// A mount's registration; dropping it removes the record.
#[derive(Debug)]
pub struct JobMount {
    dir: PathBuf,
    start: String,
    record: PathBuf,
    last_look: Instant,
}

impl JobMount {
    /// Registers a mount of the cluster in `cluster_file`, when that file
    /// is a running job's (`DIR/cluster.toml` beside `DIR/job.toml`);
    /// `Ok(None)` for any other cluster.
    pub fn register(cluster_file: &Path, mountpoint: &Path) -> Result<Option<JobMount>, LaunchError> {
        if cluster_file.file_name().is_none_or(|n| n != "cluster.toml") {
            return Ok(None);
        }
        let Some(dir) = cluster_file.parent() else { return Ok(None) };
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        let Some(job) = JobFile::load(dir)? else { return Ok(None) };
        let mounts = mounts_dir(dir, &job.start);
        std::fs::create_dir_all(&mounts).map_err(|e| fail(format!("cannot register the mount in {}: {e}", mounts.display())))?;
        let host = file::hostname();
        let pid = std::process::id();
        let record = mounts.join(format!("{host}.{pid}"));
        file::write(&record, &MountRecord { host, pid, mountpoint: mountpoint.to_path_buf() }, false)?;
        Ok(Some(JobMount { dir: dir.to_path_buf(), start: job.start, record, last_look: Instant::now() }))
    }

    /// The job directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the job asks its mounts to go: its unmount or stop marker
    /// is there, or the job is gone (its job file removed or replaced).
    /// Looks at most every [`POLL`].
    pub fn asked_to_unmount(&mut self) -> bool {
        if self.last_look.elapsed() < POLL {
            return false;
        }
        self.last_look = Instant::now();
        // Gone means gone: a file that cannot be read now (a shared file
        // system's hiccup) is not taken for the job's end.
        unmount_marker(&self.dir, &self.start).exists()
            || file::stop_path(&self.dir, &self.start).exists()
            || match JobFile::load(&self.dir) {
                Ok(None) => true,
                Ok(Some(j)) => j.start != self.start,
                Err(_) => false,
            }
    }
}

impl Drop for JobMount {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.record);
    }
}

/// The job's registered mounts. Records of mounts on this node whose
/// process is gone are removed (a mount killed before it could).
pub fn list(dir: &Path, job: &JobFile) -> Vec<MountRecord> {
    let mounts = mounts_dir(dir, &job.start);
    let Ok(entries) = std::fs::read_dir(&mounts) else { return Vec::new() };
    let here = file::hostname();
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let Ok(Some(rec)) = file::read::<MountRecord>(&path) else { continue };
        if rec.host == here && !Path::new(&format!("/proc/{}", rec.pid)).exists() {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        out.push(rec);
    }
    out.sort_by(|a, b| (&a.host, a.pid).cmp(&(&b.host, b.pid)));
    out
}

/// Asks every mount of the job to unmount and waits up to `grace` for
/// them to go. Returns how many went and the ones still there.
pub fn unmount_all(dir: &Path, job: &JobFile, grace: Duration) -> Result<(usize, Vec<MountRecord>), LaunchError> {
    let before = list(dir, job);
    if before.is_empty() {
        return Ok((0, Vec::new()));
    }
    std::fs::create_dir_all(file::rendezvous_dir(dir, &job.start)).map_err(|e| fail(format!("cannot write in {}: {e}", dir.display())))?;
    file::write(&unmount_marker(dir, &job.start), &UnmountMarker { at_ms: file::now_ms() }, false)?;
    let t = Instant::now();
    let mut left = before.clone();
    while !left.is_empty() && t.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(50));
        left = list(dir, job);
    }
    Ok((before.len().saturating_sub(left.len()), left))
}
