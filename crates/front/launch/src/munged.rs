//! A `munged` of the cluster's own, for `weft up --auth munge` on a
//! machine without one running: its key, socket, pid, log and seed files
//! live in `DIR/munge/` (the key readable by its owner only, the directory
//! searchable by all so every local user reaches the socket).

use super::{fail, set_parent_death_signal, signal, LaunchError, STOP_GRACE};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long `munged` may take to create its socket.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `munged`, stopped when dropped (unless forgotten by a detach).
pub struct Munged {
    child: Option<Child>,
    dir: PathBuf,
}

/// The directory of a cluster's own `munged`.
pub fn munge_dir(cluster_dir: &Path) -> PathBuf {
    cluster_dir.join("munge")
}

/// Its socket.
pub fn socket_path(cluster_dir: &Path) -> PathBuf {
    munge_dir(cluster_dir).join("munge.socket")
}

impl Munged {
    /// Starts `munged` in `cluster_dir/munge`, with a fresh key the first
    /// time (kept for restarts); returns once its socket answers.
    pub fn start(cluster_dir: &Path, die_with_parent: bool) -> Result<Self, LaunchError> {
        let dir = munge_dir(cluster_dir);
        let io = |what: &str, e: std::io::Error| fail(format!("munged: cannot {what} in {}: {e}", dir.display()));
        std::fs::create_dir_all(&dir).map_err(|e| io("create the directory", e))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).map_err(|e| io("set permissions", e))?;
        let key = dir.join("munge.key");
        if !key.exists() {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let bytes: Vec<u8> = (0..1024).map(|_| rand::random::<u8>()).collect();
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&key).map_err(|e| io("write the key", e))?;
            f.write_all(&bytes).and_then(|()| f.sync_all()).map_err(|e| io("write the key", e))?;
        }
        let socket = socket_path(cluster_dir);
        let _ = std::fs::remove_file(&socket);
        let log = std::fs::File::create(dir.join("munged.out")).map_err(|e| io("create the log", e))?;
        let mut cmd = Command::new("munged");
        cmd.arg("--foreground")
            .arg("--force")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--pid-file={}", dir.join("munged.pid").display()))
            .arg(format!("--log-file={}", dir.join("munged.log").display()))
            .arg(format!("--seed-file={}", dir.join("munged.seed").display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| io("open the log", e))?)
            .stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        if die_with_parent {
            set_parent_death_signal(&mut cmd);
        }
        let child = cmd.spawn().map_err(|e| fail(format!("cannot run munged ({e}): install the `munge` package, or pass --munge-socket with a running munged's socket")))?;
        let mut m = Munged { child: Some(child), dir };
        let start = Instant::now();
        while !socket.exists() || weft_net::munge::Munge::new(Some(&socket)).and_then(|c| c.encode(b"ready")).is_err() {
            if let Some(c) = m.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                let out = std::fs::read_to_string(m.dir.join("munged.out")).unwrap_or_default();
                return Err(fail(format!("munged exited ({status}) before it was ready:\n{out}")));
            }
            if start.elapsed() > READY_TIMEOUT {
                return Err(fail(format!("munged not ready at {} after {READY_TIMEOUT:?}", socket.display())));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(m)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Leaves it running (a detached cluster; `weft down` stops it).
    pub fn forget(mut self) {
        self.child.take();
    }
}

impl Drop for Munged {
    fn drop(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        let _ = signal(c.id(), libc::SIGTERM);
        let start = Instant::now();
        while matches!(c.try_wait(), Ok(None)) && start.elapsed() < STOP_GRACE {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}
