//! One server's side of a job start (`weft serve --bootstrap job`): find
//! its rank, make its data directory, bind the job network's address,
//! publish its rank file, wait for its peers, derive the cluster file.
//! Then, while it serves, watch for `weft job stop`'s marker.

use super::file::{self, JobFile, RankRecord, StopMarker};
use super::{iface, rank, rendezvous};
use crate::{fail, LaunchError};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;
use weft_net::ClusterFile;

/// What the command line may override of the job file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub data: Option<PathBuf>,
    pub iface: Option<String>,
    pub port: Option<u16>,
}

/// A server that found its peers and may serve.
pub struct Bootstrapped {
    pub job: JobFile,
    pub dir: PathBuf,
    pub rank: u32,
    pub cluster: ClusterFile,
    pub listener: TcpListener,
    /// Its metrics port, bound (the job's `metrics_port`).
    pub metrics: Option<TcpListener>,
    /// Its data directory and whether this start made it.
    pub data: PathBuf,
    /// The default data directory's parent (removed with the last rank).
    parent: Option<PathBuf>,
    pub fresh: bool,
    record: RankRecord,
    /// Held while the server runs: a second server on the same data
    /// directory is refused.
    _lock: std::fs::File,
}

/// How often a server looks for the stop marker.
pub const STOP_POLL: Duration = Duration::from_millis(500);

/// Marks a data directory as Weft's: only a directory holding it is ever
/// removed (a `--data` the user named may hold their own files).
const DATA_MARK: &str = ".weft-data";

/// Runs the start (see the module's documentation). `env` is the process
/// environment (a function, so tests can give any).
pub fn bootstrap(dir: &Path, over: &Overrides, env: impl Fn(&str) -> Option<String>) -> Result<Bootstrapped, LaunchError> {
    let job = JobFile::load(dir)?.ok_or_else(|| fail(format!("no job in {}: `weft job start --dir {}` writes {} first", dir.display(), dir.display(), file::job_path(dir).display())))?;
    let me = rank::detect(&env, Some(job.servers), job.launcher.as_deref()).map_err(|e| fail(e.to_string()))?;
    if me.size != job.servers {
        return Err(fail(format!("{} started {} servers but the job in {} expects {}", me.source, me.size, dir.display(), job.servers)));
    }
    // Slurm's node name tells the nodes of one host apart (and is what users know).
    let host = env("SLURMD_NODENAME").filter(|h| !h.is_empty()).unwrap_or_else(file::hostname);
    let parent = over.data.clone().unwrap_or_else(|| job.data.clone());
    let data = parent.join(format!("rank{}", me.rank));
    let mut record = RankRecord { rank: me.rank, size: me.size, host, addr: None, metrics: None, pid: std::process::id(), dir: data.clone(), bound_ms: 0, fresh: false, error: None };
    let mut made = Made { data: data.clone(), parent: (job.data_default && over.data.is_none()).then(|| parent.clone()), fresh: false, armed: true };
    let (lock, listener, metrics) = match prepare(&job, &mut made, over) {
        Ok(p) => p,
        Err(e) => {
            // Tell the peers and `weft job start` at once, not after their deadline.
            record.error = Some(e.0.clone());
            let _ = rendezvous::publish(dir, &job, &record, false);
            return Err(fail(format!("server {} on {}: {e}", me.rank, record.host)));
        }
    };
    record.addr = Some(listener.local_addr().map_err(|e| fail(e.to_string()))?);
    record.metrics = metrics.as_ref().map(TcpListener::local_addr).transpose().map_err(|e| fail(e.to_string()))?;
    record.bound_ms = file::now_ms();
    record.fresh = made.fresh;
    rendezvous::publish(dir, &job, &record, false)?;
    let records = rendezvous::wait_all(dir, &job, Duration::from_millis(job.bootstrap_timeout_ms))?;
    if records[me.rank as usize].pid != record.pid || records[me.rank as usize].host != record.host {
        return Err(fail(format!("rank {}'s file names another server (pid {} on {})", me.rank, records[me.rank as usize].pid, records[me.rank as usize].host)));
    }
    let cluster = rendezvous::derive(&job, &records)?;
    if me.rank == 0 {
        cluster.save(&crate::cluster_path(dir)).map_err(|e| fail(e.to_string()))?;
    }
    made.armed = false;
    let fresh = made.fresh;
    Ok(Bootstrapped { job, dir: dir.to_path_buf(), rank: me.rank, cluster, listener, metrics, data, parent: made.parent.take(), fresh, record, _lock: lock })
}

/// Attempts at removing a data directory a server thread still adds to.
const REMOVE_TRIES: u32 = 10;

/// What a start made, removed again if the start fails (only what it made).
struct Made {
    data: PathBuf,
    /// The default data directory's parent, which the last server removes.
    parent: Option<PathBuf>,
    fresh: bool,
    armed: bool,
}

impl Drop for Made {
    fn drop(&mut self) {
        if self.armed && self.fresh {
            remove_data(&self.data, self.parent.as_deref());
        }
    }
}

/// Removes a data directory Weft marked as its own, and the default
/// parent once empty. Whether `data` is gone.
fn remove_data(data: &Path, parent: Option<&Path>) -> bool {
    if data.join(DATA_MARK).exists() {
        // The server's threads still run: one may add a file while the
        // folder is being emptied (the data service keeps empty objects
        // made ahead of need), and the removal then fails "not empty".
        // Tried again a few times; once the folder is gone nothing makes
        // it again.
        for _ in 0..REMOVE_TRIES {
            match std::fs::remove_dir_all(data) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => std::thread::sleep(Duration::from_millis(20)),
                _ => break,
            }
        }
    }
    if let Some(p) = parent {
        let _ = std::fs::remove_dir(p);
    }
    !data.exists()
}

/// The data directory's lock, the server's listener and its metrics listener.
type Prepared = (std::fs::File, TcpListener, Option<TcpListener>);

/// Makes and locks the data directory, binds the address.
fn prepare(job: &JobFile, made: &mut Made, over: &Overrides) -> Result<Prepared, LaunchError> {
    use std::os::unix::fs::PermissionsExt;
    let data = made.data.clone();
    if let Some(parent) = &made.parent {
        private_default_root(parent)?;
    }
    made.fresh = !data.exists();
    if !made.fresh && !data.join(DATA_MARK).exists() {
        return Err(fail(format!("{} exists and is not a Weft data directory (no {DATA_MARK} in it): pass another --data", data.display())));
    }
    std::fs::create_dir_all(&data).map_err(|e| fail(format!("cannot create the data directory {}: {e}", data.display())))?;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).map_err(|e| fail(format!("cannot set the permissions of {}: {e}", data.display())))?;
    let lock = file::create_nofollow(&data.join(DATA_MARK)).map_err(|e| fail(format!("cannot write in the data directory {}: {e}", data.display())))?;
    if lock.try_lock().is_err() {
        // Not ours to remove: another server uses it.
        made.fresh = false;
        return Err(fail(format!("the data directory {} is in use by another server", data.display())));
    }
    let addrs = iface::addresses().map_err(|e| fail(format!("cannot list this node's addresses: {e}")))?;
    let ip = iface::choose(&addrs, over.iface.as_deref().or(job.iface.as_deref())).map_err(fail)?;
    let addr = SocketAddr::from((ip, over.port.unwrap_or(job.port)));
    let listener = TcpListener::bind(addr).map_err(|e| fail(format!("cannot listen on {addr}: {e}")))?;
    // Metrics are for operators: a port taken costs them (said, and the
    // cluster file names no port for this server), not the file service.
    let metrics = job.metrics_port.and_then(|port| {
        let at = SocketAddr::from((ip, port));
        TcpListener::bind(at).map_err(|e| eprintln!("weft serve: no metrics: cannot listen on {at}: {e}")).ok()
    });
    Ok((lock, listener, metrics))
}

/// The default data directory lives under `/tmp/weft-<uid>`: made 0700,
/// and refused when it is a symlink or another user's (someone could have
/// made it first in the shared /tmp).
fn private_default_root(parent: &Path) -> Result<(), LaunchError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let Some(root) = parent.parent() else { return Ok(()) };
    let _ = std::fs::DirBuilder::new().mode(0o700).create(root);
    let md = std::fs::symlink_metadata(root).map_err(|e| fail(format!("cannot make {}: {e}", root.display())))?;
    // SAFETY: geteuid(2) has no side effects.
    #[allow(unsafe_code)]
    let me = unsafe { libc::geteuid() };
    if !md.is_dir() || md.uid() != me || md.permissions().mode() & 0o022 != 0 {
        return Err(fail(format!("{} is not a directory of this user's that only it may write: pass --data DIR", root.display())));
    }
    Ok(())
}

impl Bootstrapped {
    /// The stop marker, once `weft job stop` (or a failed start) wrote it.
    pub fn stop_marker(&self) -> Option<StopMarker> {
        file::read(&file::stop_path(&self.dir, &self.job.start)).ok().flatten()
    }

    /// Tells `weft job start` this server cannot serve after all (its
    /// services did not open), so it fails at once naming it.
    pub fn report_failure(&self, why: &str) {
        let _ = rendezvous::publish(&self.dir, &self.job, &RankRecord { error: Some(why.to_string()), ..self.record.clone() }, true);
    }

    /// Ends the server as the marker says: its data directory goes unless
    /// kept. Called just before the process exits.
    /// Whether the data is gone (`false`: kept, or its removal failed).
    /// Tells `weft job stop` this rank is done either way.
    pub fn finish(&self, marker: Option<StopMarker>) -> bool {
        let removed = marker.is_some_and(|m| m.removes(self.fresh)) && remove_data(&self.data, self.parent.as_deref());
        let _ = std::fs::write(file::done_path(&self.dir, &self.job.start, self.rank), if removed { "removed" } else { "kept" });
        removed
    }
}
