//! The files of a job directory (the job's shared working directory):
//!
//! ```text
//! DIR/job.toml                      what `weft job start` asked for: the start's
//!                                   id, server count, secret, data path (0600)
//! DIR/launcher.toml                 the launcher processes (pids on the start node)
//! DIR/rendezvous/<start>/rank-K     one per server: its host, address, pid
//! DIR/rendezvous/<start>/stop       written by `weft job stop`; servers poll it
//! DIR/cluster.toml                  derived from the rank files by rank 0 (0600)
//! DIR/rendezvous/<start>/unmount   written by `weft job stop` before `stop`; mounts poll it
//! DIR/mounts/<start>/<host>.<pid>   one per `weft mount` of the job's cluster
//! DIR/stage/<id>/                  a spread stage's plan and progress (`stage_plan`)
//! DIR/logs/launcher.log             the launcher's output, one line per rank line
//! ```
//!
//! Every file is written whole and renamed into place, so a reader on
//! another node sees an old file or a new one, never half of one, and no
//! two writers share a file (appends to a shared file on a network file
//! system are where other ad hoc file systems' bootstraps break).

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::{fail, LaunchError};

/// What a job's servers are asked to be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFile {
    /// This start's id: rank files of an earlier start never count.
    pub start: String,
    /// How many servers (one per node).
    pub servers: u32,
    pub meta_shards: u32,
    pub stripe_size: u64,
    /// The cluster's shared secret (hex).
    pub secret: String,
    /// Where each server keeps its data on its node (`<data>/rank<K>`).
    pub data: PathBuf,
    /// The interface whose address servers bind (`None`: see `iface`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iface: Option<String>,
    /// The port servers serve metrics on (0: any free one; `None`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_port: Option<u16>,
    /// The port servers listen on (0: any free one).
    #[serde(default)]
    pub port: u16,
    /// How long a server waits for every peer's rank file.
    pub bootstrap_timeout_ms: u64,
    /// The launcher that starts the servers (`srun`, `mpiexec`, `ssh`):
    /// servers read only its rank variables. `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<String>,
    /// `data` is the default one Weft made (`/tmp/weft-<uid>/...`), so its
    /// last server removes it too; a directory the user named stays.
    #[serde(default)]
    pub data_default: bool,
}

impl JobFile {
    /// Reads and checks `DIR/job.toml`; `Ok(None)` if there is none.
    pub fn load(dir: &Path) -> Result<Option<JobFile>, LaunchError> {
        let path = job_path(dir);
        let Some(job) = read::<JobFile>(&path)? else { return Ok(None) };
        job.validate().map_err(|why| fail(format!("{}: {why}", path.display())))?;
        Ok(Some(job))
    }

    /// What a job file must hold before any of it names a path or a count.
    pub fn validate(&self) -> Result<(), String> {
        if self.start.len() != 16 || !self.start.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("start = {:?} is not 16 hex digits", self.start));
        }
        if self.servers == 0 || self.servers > super::rank::MAX_SERVERS {
            return Err(format!("servers = {}: from 1 to {}", self.servers, super::rank::MAX_SERVERS));
        }
        if self.meta_shards == 0 || self.meta_shards > self.servers || self.meta_shards as usize > weft_net::cluster::MAX_META_SHARDS {
            return Err(format!("meta_shards = {}: from 1 to the server count, {} (at most {})", self.meta_shards, self.servers, weft_net::cluster::MAX_META_SHARDS));
        }
        if self.bootstrap_timeout_ms == 0 || self.bootstrap_timeout_ms > 86_400_000 {
            return Err(format!("bootstrap_timeout_ms = {}: from 1 to 86400000", self.bootstrap_timeout_ms));
        }
        if !self.data.is_absolute() {
            return Err(format!("data = {:?} is not an absolute path", self.data));
        }
        Ok(())
    }

    /// The cluster's secret, decoded.
    pub fn secret(&self) -> Result<weft_wire::Secret, LaunchError> {
        weft_net::ClusterFile::secret_from_hex(&self.secret).ok_or_else(|| fail("the job file's secret is not hex"))
    }
}

/// One server's rank file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankRecord {
    pub rank: u32,
    pub size: u32,
    /// The node's host name.
    pub host: String,
    /// Where it listens (absent when it failed first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<std::net::SocketAddr>,
    /// Where it serves metrics (absent without them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<std::net::SocketAddr>,
    pub pid: u32,
    /// Its data directory on its node.
    pub dir: PathBuf,
    /// When it bound its address (ms since the Unix epoch): how long the
    /// rest of the start took is measured from the last server's.
    #[serde(default)]
    pub bound_ms: u64,
    /// Whether its data directory was made by this start (a failed start
    /// removes only such).
    #[serde(default)]
    pub fresh: bool,
    /// Why it could not start, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `weft job stop`'s word to the servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopMarker {
    /// Leave the servers' data on their nodes.
    pub keep: bool,
    /// The start failed: servers remove only data directories it made.
    #[serde(default)]
    pub failed_start: bool,
}

impl StopMarker {
    /// Whether a server whose data directory is `fresh` removes it.
    pub fn removes(self, fresh: bool) -> bool {
        if self.failed_start { fresh } else { !self.keep }
    }
}

/// The launcher processes of a job, on the node that started it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LauncherRecord {
    pub start: String,
    /// `srun`, `mpiexec` or `ssh`.
    pub kind: String,
    /// The node the launcher processes run on.
    pub host: String,
    /// Each launcher process: pid and start time (clock ticks since boot),
    /// so a reused pid is never signalled.
    pub pids: Vec<(u32, u64)>,
    /// The node of each rank, where the launcher knows it.
    pub nodes: Vec<String>,
    /// How the servers were launched, so later steps (a spread stage-in
    /// or stage-out) reach the same nodes the same way. Absent in the
    /// files of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub how: Option<LaunchedWith>,
}

/// The launcher command of a job, as started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchedWith {
    pub launcher: super::launcher::Launcher,
    /// The options given to the launcher (`--launcher-args`).
    pub args: Vec<String>,
    /// The weft binary, at the same path on every node.
    pub weft_bin: PathBuf,
    pub as_root: bool,
}

pub fn job_path(dir: &Path) -> PathBuf {
    dir.join("job.toml")
}

pub fn launcher_path(dir: &Path) -> PathBuf {
    dir.join("launcher.toml")
}

pub fn rendezvous_dir(dir: &Path, start: &str) -> PathBuf {
    dir.join("rendezvous").join(start)
}

pub fn rank_path(dir: &Path, start: &str, rank: u32) -> PathBuf {
    rendezvous_dir(dir, start).join(format!("rank-{rank}"))
}

pub fn stop_path(dir: &Path, start: &str) -> PathBuf {
    rendezvous_dir(dir, start).join("stop")
}

/// Written by rank `rank` once it ended (its data removed or kept, as
/// the stop marker said): `weft job stop` waits for these before it
/// removes the job's files.
pub fn done_path(dir: &Path, start: &str, rank: u32) -> PathBuf {
    rendezvous_dir(dir, start).join(format!("done-{rank}"))
}

/// The largest job-directory file read (a rank file is a few hundred bytes).
const MAX_FILE: u64 = 1 << 20;

/// Reads a TOML file of the job directory. `Ok(None)` if it does not exist.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, LaunchError> {
    use std::io::Read;
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fail(format!("cannot read {}: {e}", path.display()))),
    };
    let mut text = String::new();
    f.take(MAX_FILE).read_to_string(&mut text).map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
    toml::from_str(&text).map(Some).map_err(|e| fail(format!("{} is not a valid file: {e}", path.display())))
}

/// Writes a file whole, then renames it into place; `private`: mode 0600.
pub fn write<T: Serialize>(path: &Path, value: &T, private: bool) -> Result<(), LaunchError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |e: std::io::Error| fail(format!("cannot write {}: {e}", path.display()));
    let text = toml::to_string(value).map_err(|e| fail(format!("cannot encode {}: {e}", path.display())))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    // Unique per process: writers on other nodes never share a temporary.
    let tmp = path.with_file_name(format!(".{name}.{}.{}", std::process::id(), rand::random::<u32>()));
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(if private { 0o600 } else { 0o644 }).open(&tmp).map_err(err)?;
    let written = f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(err)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Creates (truncating) a file of the job directory without following a
/// symlink planted in its place.
pub fn create_nofollow(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create(true).truncate(true).custom_flags(libc::O_NOFOLLOW).mode(0o600).open(path)
}

/// This node's host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_else(|_| "localhost".into())
}
