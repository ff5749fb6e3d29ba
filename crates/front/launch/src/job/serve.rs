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
    /// Its data directory and whether this start made it.
    pub data: PathBuf,
    pub fresh: bool,
    record: RankRecord,
    /// Held while the server runs: a second server on the same data
    /// directory is refused.
    _lock: std::fs::File,
}

/// How often a server looks for the stop marker.
pub const STOP_POLL: Duration = Duration::from_millis(500);

/// Runs the start (see the module's documentation). `env` is the process
/// environment (a function, so tests can give any).
pub fn bootstrap(dir: &Path, over: &Overrides, env: impl Fn(&str) -> Option<String>) -> Result<Bootstrapped, LaunchError> {
    let job: JobFile = file::read(&file::job_path(dir))?.ok_or_else(|| fail(format!("no job in {}: `weft job start --dir {}` writes {} first", dir.display(), dir.display(), file::job_path(dir).display())))?;
    let me = rank::detect(&env, Some(job.servers)).map_err(|e| fail(e.to_string()))?;
    if me.size != job.servers {
        return Err(fail(format!("{} started {} servers but the job in {} expects {}", me.source, me.size, dir.display(), job.servers)));
    }
    // Slurm's node name tells the nodes of one host apart (and is what users know).
    let host = env("SLURMD_NODENAME").filter(|h| !h.is_empty()).unwrap_or_else(file::hostname);
    let data = over.data.clone().unwrap_or_else(|| job.data.clone()).join(format!("rank{}", me.rank));
    let mut record = RankRecord { rank: me.rank, size: me.size, host, addr: None, pid: std::process::id(), dir: data.clone(), bound_ms: 0, fresh: false, error: None };
    let prepared = prepare(&job, &data, over);
    let (lock, listener, fresh) = match prepared {
        Ok(p) => p,
        Err(e) => {
            // Tell the peers and `weft job start` at once, not after their deadline.
            record.error = Some(e.0.clone());
            let _ = rendezvous::publish(dir, &job, &record);
            return Err(fail(format!("server {} on {}: {e}", me.rank, record.host)));
        }
    };
    record.addr = Some(listener.local_addr().map_err(|e| fail(e.to_string()))?);
    record.bound_ms = file::now_ms();
    record.fresh = fresh;
    rendezvous::publish(dir, &job, &record)?;
    let records = rendezvous::wait_all(dir, &job, Duration::from_millis(job.bootstrap_timeout_ms))?;
    let cluster = rendezvous::derive(&job, &records)?;
    if me.rank == 0 {
        cluster.save(&crate::cluster_path(dir)).map_err(|e| fail(e.to_string()))?;
    }
    Ok(Bootstrapped { job, dir: dir.to_path_buf(), rank: me.rank, cluster, listener, data, fresh, record, _lock: lock })
}

/// Makes and locks the data directory, binds the address.
fn prepare(job: &JobFile, data: &Path, over: &Overrides) -> Result<(std::fs::File, TcpListener, bool), LaunchError> {
    use std::os::unix::fs::PermissionsExt;
    let fresh = !data.exists();
    std::fs::create_dir_all(data).map_err(|e| fail(format!("cannot create the data directory {}: {e}", data.display())))?;
    std::fs::set_permissions(data, std::fs::Permissions::from_mode(0o700)).map_err(|e| fail(format!("cannot set the permissions of {}: {e}", data.display())))?;
    let lock_path = data.join(".lock");
    let lock = std::fs::File::create(&lock_path).map_err(|e| fail(format!("cannot write in the data directory {}: {e}", data.display())))?;
    if lock.try_lock().is_err() {
        return Err(fail(format!("the data directory {} is in use by another server", data.display())));
    }
    let addrs = iface::addresses().map_err(|e| fail(format!("cannot list this node's addresses: {e}")))?;
    let ip = iface::choose(&addrs, over.iface.as_deref().or(job.iface.as_deref())).map_err(fail)?;
    let addr = SocketAddr::from((ip, over.port.unwrap_or(job.port)));
    let listener = TcpListener::bind(addr).map_err(|e| fail(format!("cannot listen on {addr}: {e}")))?;
    Ok((lock, listener, fresh))
}

impl Bootstrapped {
    /// The stop marker, once `weft job stop` (or a failed start) wrote it.
    pub fn stop_marker(&self) -> Option<StopMarker> {
        file::read(&file::stop_path(&self.dir, &self.job.start)).ok().flatten()
    }

    /// Tells `weft job start` this server cannot serve after all (its
    /// services did not open), so it fails at once naming it.
    pub fn report_failure(&self, why: &str) {
        let _ = rendezvous::publish(&self.dir, &self.job, &RankRecord { error: Some(why.to_string()), ..self.record.clone() });
    }

    /// Ends the server as the marker says: its data directory goes unless
    /// kept. Called just before the process exits.
    pub fn finish(&self, marker: Option<StopMarker>) {
        if marker.is_some_and(|m| m.removes(self.fresh)) {
            let _ = std::fs::remove_dir_all(&self.data);
            // The parent too, once the last rank on this node is gone.
            if let Some(parent) = self.data.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}
