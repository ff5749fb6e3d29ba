//! Starts and stops local Weft clusters: real `weft serve` processes on
//! 127.0.0.1, each with its own directory (floor 8, front end).
//!
//! Used by `weft up`/`weft down`, by benchmarks that need a temporary
//! cluster, and by the integration tests, so there is one way to run a
//! cluster on one machine. The layout of a cluster directory:
//!
//! ```text
//! DIR/cluster.toml     services, addresses, shared secret (mode 0600; in
//!                      MUNGE mode no secret, mode 0644)
//! DIR/servers.key      MUNGE mode: the servers' secret (mode 0600)
//! DIR/munge/           MUNGE mode: the cluster's own munged, if it runs one
//! DIR/srvK/            server K's database and objects (mode 0700)
//! DIR/logs/srvK.log    server K's stdout and stderr
//! DIR/pids             server pids, when started with --detach
//! ```
#![deny(unsafe_code)]

pub mod emulate;
pub mod job;
pub mod munged;
mod stop;

pub use stop::{record_foreground, stop_detached, ForegroundRecord};
use stop::signal;

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use weft_net::cluster::AuthMode;
use weft_net::{ClusterFile, ServerEntry, Service};

/// How long a server may take to start listening.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long servers get to exit after SIGTERM before SIGKILL.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct LaunchError(pub String);

impl std::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for LaunchError {}

pub(crate) fn fail(msg: impl Into<String>) -> LaunchError {
    LaunchError(msg.into())
}

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Number of data servers; server 0 (meta and lock) comes on top.
    pub data_servers: usize,
    pub default_stripe_size: u64,
    /// Children die with the launching process (Linux `PR_SET_PDEATHSIG`).
    pub die_with_parent: bool,
    /// Lock sessions' time to live (`lock_ttl_ms` in the cluster file).
    pub lock_ttl_ms: u64,
    /// Extra environment of the server processes (tests shorten deadlines with it).
    pub server_env: Vec<(String, String)>,
    /// Serve uid 0 as nobody (`root_squash` in the cluster file).
    pub root_squash: bool,
    /// `meta_sync_window_ms` of the cluster file (0: each metadata change
    /// durable before its answer).
    pub meta_sync_window_ms: u64,
    /// Run each server in a network namespace of its own behind a
    /// rate-capped link (see [`emulate`]); needs root.
    pub emulate: Option<EmulateSpec>,
    /// How clients prove themselves.
    pub auth: AuthSpec,
    /// Metadata shards (K): server 0 and servers 1..K hold the metadata
    /// (fixed for the cluster's life; see `weft_wire::shard`).
    pub meta_shards: usize,
}

/// A new cluster's authentication (an existing one keeps its own).
#[derive(Debug, Clone, Default)]
pub enum AuthSpec {
    /// One shared secret in the cluster file (one trust domain).
    #[default]
    Secret,
    /// Clients prove uid and gid with MUNGE, through the `munged` at
    /// `socket`, or one the cluster starts for itself (`None`).
    Munge { socket: Option<PathBuf> },
}

/// What an emulated cluster's nodes get.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmulateSpec {
    /// Each node's link rate in bits per second, both directions (`None`: uncapped).
    pub link_bps: Option<u64>,
    /// Each server's disk rate in bytes per second, reads and writes
    /// each (`None`: uncapped).
    pub disk_bps: Option<u64>,
    /// Client nodes: namespaces of their own behind links like the
    /// servers', for client processes (see [`LocalCluster::client_node`]).
    pub client_nodes: usize,
}

/// Port every server of an emulated cluster listens on (each has its own address).
const EMULATED_PORT: u16 = 7100;

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec { data_servers: 4, default_stripe_size: 64 * 1024, die_with_parent: true, lock_ttl_ms: 10_000, server_env: Vec::new(), root_squash: false, meta_sync_window_ms: weft_net::cluster::DEFAULT_META_SYNC_WINDOW_MS, emulate: None, auth: AuthSpec::Secret, meta_shards: 1 }
    }
}

/// A running local cluster. Dropping it stops every server it started.
pub struct LocalCluster {
    dir: PathBuf,
    weft_bin: PathBuf,
    cluster: ClusterFile,
    children: Vec<Option<Child>>,
    die_with_parent: bool,
    server_env: Vec<(String, String)>,
    /// The emulated network the servers run in, removed with the cluster.
    emulation: Option<emulate::Emulation>,
    /// The cluster's own `munged` (MUNGE mode without --munge-socket),
    /// stopped after the servers.
    munged: Option<munged::Munged>,
}

fn free_ports(n: usize) -> Result<Vec<u16>, LaunchError> {
    // Hold every listener until all are chosen so no port repeats.
    let ls = (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<Vec<_>, _>>().map_err(|e| fail(format!("cannot find a free port: {e}")))?;
    ls.iter().map(|l| l.local_addr().map(|a| a.port()).map_err(|e| fail(e.to_string()))).collect()
}

/// Does a server of the cluster with `secret` answer at `addr`? A handshake,
/// not a bare connect: another cluster may have been given the port since.
pub(crate) fn answers(addr: SocketAddr, secret: &weft_wire::Secret) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else { return false };
    // A connect that reached itself (no listener yet, and the kernel gave
    // it that very port) would hold the port the server is about to bind.
    if s.local_addr().ok().is_some_and(|l| s.peer_addr().is_ok_and(|p| p == l)) {
        return false;
    }
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    weft_net::handshake::client_handshake(&mut s, addr, secret, rand::random()).is_ok()
}

/// Which of `addrs` answer a handshake, asked 32 at a time (one silent
/// server costs up to 2.2 s, not one per server in turn).
pub(crate) fn answering(addrs: &[SocketAddr], secret: &weft_wire::Secret) -> Vec<bool> {
    let mut up = vec![false; addrs.len()];
    for (chunk, out) in addrs.chunks(32).zip(up.chunks_mut(32)) {
        std::thread::scope(|s| {
            let handles: Vec<_> = chunk.iter().map(|&a| s.spawn(move || answers(a, secret))).collect();
            for (h, o) in handles.into_iter().zip(out.iter_mut()) {
                *o = h.join().unwrap_or(false);
            }
        });
    }
    up
}

/// The cluster file path inside a cluster directory.
pub fn cluster_path(dir: &Path) -> PathBuf {
    dir.join("cluster.toml")
}

impl LocalCluster {
    /// Starts a cluster in `dir`. An existing `dir/cluster.toml` is reused
    /// (same secret, servers and data) so a stopped cluster can be restarted.
    pub fn start(weft_bin: &Path, dir: &Path, spec: &ClusterSpec) -> Result<Self, LaunchError> {
        std::fs::create_dir_all(dir.join("logs")).map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
        let dir = dir.canonicalize().map_err(|e| fail(format!("{}: {e}", dir.display())))?;
        let path = cluster_path(&dir);
        let previous = std::fs::read(&path).ok();
        let cluster = if previous.is_some() {
            let c = ClusterFile::load(&path).map_err(|e| fail(e.to_string()))?;
            // A cluster still running here must not have its file rewritten
            // under it (issue 8: its clients lost it).
            if let Some(s) = c.servers.iter().find(|s| answers(s.addr, &c.secret())) {
                return Err(fail(format!(
                    "a cluster is already running in {} (server {} answers at {}); stop it first with: weft down --dir {}",
                    dir.display(),
                    s.id,
                    s.addr,
                    dir.display()
                )));
            }
            c
        } else {
            let shards = spec.meta_shards.max(1);
            let services = |i: usize| match i {
                0 => vec![Service::Meta, Service::Lock],
                // Each shard keeps the locks of the files it made too.
                i if i < shards => vec![Service::Meta, Service::Lock],
                _ => vec![Service::Data],
            };
            let servers = (0..shards + spec.data_servers)
                .map(|i| ServerEntry { id: i as u32, addr: SocketAddr::from(([127, 0, 0, 1], 0)), services: services(i), dir: dir.join(format!("srv{i}")), metrics: None })
                .collect();
            let mut c = ClusterFile {
                auth: AuthMode::Secret,
                secret: ClusterFile::random_secret(),
                key_file: None,
                munge_socket: None,
                server_uid: 0,
                default_stripe_size: spec.default_stripe_size,
                lock_ttl_ms: spec.lock_ttl_ms,
                root_squash: spec.root_squash,
                meta_sync_window_ms: spec.meta_sync_window_ms,
                servers,
            };
            if let AuthSpec::Munge { socket } = &spec.auth {
                let key = dir.join("servers.key");
                write_private(&key, &c.secret)?;
                c.auth = AuthMode::Munge;
                c.secret = String::new();
                c.key_file = Some(key);
                c.munge_socket = Some(socket.clone().unwrap_or_else(|| munged::socket_path(&dir)));
                c.server_uid = current_uid();
            }
            c
        };
        let munged = if cluster.auth == AuthMode::Munge && cluster.munge_socket.as_deref() == Some(munged::socket_path(&dir).as_path()) {
            Some(munged::Munged::start(&dir, spec.die_with_parent)?)
        } else {
            None
        };
        if cluster.auth == AuthMode::Munge {
            open_to_all_but_data(&dir, &cluster)?;
        } else {
            // The servers' data is theirs alone in secret mode too.
            private_dirs(&cluster)?;
        }
        // A port chosen free may be taken before its server binds it (by
        // another cluster starting at the same time, or as a connection's
        // local port): then the whole cluster starts again on new ports.
        let mut emulation = match spec.emulate {
            Some(e) => {
                let disk = match e.disk_bps {
                    Some(bps) => Some((emulate::disk_of(&dir)?, bps)),
                    None => None,
                };
                Some(emulate::Emulation::create(cluster.servers.len() + e.client_nodes, e.link_bps, disk)?)
            }
            None => None,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            // Addresses are (re-)picked; data stays.
            let mut cluster = cluster.clone();
            match &emulation {
                Some(emu) => {
                    for (k, s) in cluster.servers.iter_mut().enumerate() {
                        s.addr = SocketAddr::from((emu.addr(k), EMULATED_PORT));
                        s.metrics = Some(SocketAddr::from((emu.addr(k), EMULATED_PORT + 1)));
                    }
                }
                None => {
                    // Each server's port and its metrics port.
                    let ports = free_ports(2 * cluster.servers.len())?;
                    for (s, p) in cluster.servers.iter_mut().zip(ports.chunks(2)) {
                        s.addr = SocketAddr::from(([127, 0, 0, 1], p[0]));
                        s.metrics = Some(SocketAddr::from(([127, 0, 0, 1], p[1])));
                    }
                }
            }
            cluster.save(&path).map_err(|e| fail(e.to_string()))?;
            let mut lc = LocalCluster {
                dir: dir.clone(),
                weft_bin: weft_bin.to_path_buf(),
                children: (0..cluster.servers.len()).map(|_| None).collect(),
                cluster,
                die_with_parent: spec.die_with_parent,
                server_env: spec.server_env.clone(),
                emulation: emulation.take(),
                munged: None,
            };
            let started = (0..lc.cluster.servers.len()).try_for_each(|id| lc.spawn(id)).and_then(|()| (0..lc.cluster.servers.len()).try_for_each(|id| lc.wait_ready(id)));
            let Err(e) = started else {
                lc.munged = munged;
                return Ok(lc);
            };
            lc.stop();
            emulation = lc.emulation.take();
            if attempt < 5 && e.0.contains("in use") {
                continue;
            }
            // Leave the directory as it was: the old file, or none.
            match previous {
                Some(old) => {
                    let _ = std::fs::write(&path, old);
                }
                None => {
                    let _ = std::fs::remove_file(&path);
                }
            }
            return Err(e);
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn cluster_file(&self) -> PathBuf {
        cluster_path(&self.dir)
    }

    pub fn cluster(&self) -> &ClusterFile {
        &self.cluster
    }

    pub fn log_path(&self, id: usize) -> PathBuf {
        self.dir.join("logs").join(format!("srv{id}.log"))
    }

    fn spawn(&mut self, id: usize) -> Result<(), LaunchError> {
        let log = File::options().create(true).append(true).open(self.log_path(id)).map_err(|e| fail(e.to_string()))?;
        let log2 = log.try_clone().map_err(|e| fail(e.to_string()))?;
        let mut cmd = match &self.emulation {
            Some(emu) => {
                let prefix = emu.exec_in(id);
                let mut c = Command::new(&prefix[0]);
                c.args(&prefix[1..]).arg(&self.weft_bin);
                c
            }
            None => Command::new(&self.weft_bin),
        };
        cmd.arg("serve").arg("--cluster").arg(self.cluster_file()).arg("--id").arg(id.to_string());
        cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
        cmd.envs(self.server_env.iter().map(|(k, v)| (k, v)));
        // Own process group: a Ctrl-C at the terminal reaches `weft up`, which
        // then stops the servers itself, in order.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        if self.die_with_parent {
            set_parent_death_signal(&mut cmd);
        }
        let mut child = cmd.spawn().map_err(|e| fail(format!("cannot run {}: {e}", self.weft_bin.display())))?;
        if let Some(emu) = &self.emulation
            && let Err(e) = emu.confine(id, child.id())
        {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        self.children[id] = Some(child);
        Ok(())
    }

    fn wait_ready(&mut self, id: usize) -> Result<(), LaunchError> {
        let addr = self.cluster.servers[id].addr;
        let start = Instant::now();
        loop {
            // A handshake with this cluster's secret: a bare connect may
            // reach another cluster's server that took the port.
            if answers(addr, &self.cluster.secret()) {
                return Ok(());
            }
            if let Some(child) = self.children[id].as_mut()
                && let Ok(Some(status)) = child.try_wait() {
                    let log = std::fs::read_to_string(self.log_path(id)).unwrap_or_default();
                    return Err(fail(format!("server {id} exited ({status}) before it was ready:\n{log}")));
                }
            if start.elapsed() > READY_TIMEOUT {
                return Err(fail(format!("server {id} at {addr} not ready after {READY_TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills server `id` with SIGKILL, as a crash would.
    pub fn kill(&mut self, id: usize) {
        if let Some(mut c) = self.children[id].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops server `id` with SIGTERM, as an operator or a batch system
    /// does, and waits (up to 30 s) for it to exit: its exit status and how
    /// long it took, `None` if it did not exit (it is then killed).
    pub fn terminate(&mut self, id: usize) -> Option<(std::process::ExitStatus, Duration)> {
        let mut c = self.children[id].take()?;
        let t = Instant::now();
        let _ = signal(c.id(), libc::SIGTERM);
        while t.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(st)) = c.try_wait() {
                return Some((st, t.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        let _ = c.wait();
        None
    }

    /// Stops server `id` with SIGSTOP (it hangs) or resumes it with SIGCONT.
    /// Returns once the process is stopped (or running again): a thread busy
    /// in the kernel stops only when its call ends, and until then the
    /// server may still answer.
    pub fn pause(&mut self, id: usize, paused: bool) {
        let Some(c) = &self.children[id] else { return };
        let _ = signal(c.id(), if paused { libc::SIGSTOP } else { libc::SIGCONT });
        let stopped = |pid: u32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('T')))
        };
        let start = Instant::now();
        while stopped(c.id()) != paused && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Starts server `id` again on the same address and directory. A port
    /// still held a moment (a client's connect that reached itself, being
    /// dropped) is tried again, up to three times.
    pub fn restart(&mut self, id: usize) -> Result<(), LaunchError> {
        self.kill(id);
        let mut tries = 0;
        loop {
            self.spawn(id)?;
            match self.wait_ready(id) {
                Err(e) if tries < 3 && e.0.contains("Address already in use") => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(200));
                }
                r => return r,
            }
        }
    }

    /// The emulated network the servers run in, if any.
    pub fn emulation(&self) -> Option<&emulate::Emulation> {
        self.emulation.as_ref()
    }

    /// Client nodes of the emulated network (`EmulateSpec::client_nodes`).
    pub fn client_nodes(&self) -> usize {
        self.emulation.as_ref().map_or(0, |e| e.nodes().saturating_sub(self.cluster.servers.len()))
    }

    /// The command prefix that runs a program on client node `k` (taken
    /// modulo the client nodes), e.g. `ip netns exec <node>`; empty when
    /// the cluster has no client nodes (clients then run here, reaching
    /// the servers over the bridge uncapped on their side).
    pub fn client_node(&self, k: usize) -> Vec<String> {
        match (&self.emulation, self.client_nodes()) {
            (Some(e), n) if n > 0 => e.exec_in(self.cluster.servers.len() + k % n),
            _ => Vec::new(),
        }
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().flatten().map(Child::id).collect()
    }

    /// Leaves the servers running and records their pids in `DIR/pids` for
    /// [`stop_detached`].
    pub fn detach(mut self) -> Result<PathBuf, LaunchError> {
        if self.emulation.is_some() {
            return Err(fail("an emulated cluster runs in the foreground (its network goes with it): leave out --detach"));
        }
        let mut pids = self.pids();
        pids.extend(self.munged.as_ref().and_then(munged::Munged::pid));
        let pids: String = pids.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(self.dir.join("pids"), pids).map_err(|e| fail(e.to_string()))?;
        for c in &mut self.children {
            c.take();
        }
        if let Some(m) = self.munged.take() {
            m.forget();
        }
        Ok(self.cluster_file())
    }

    /// Stops every server: SIGTERM, then SIGKILL after a grace period.
    pub fn stop(&mut self) {
        for c in self.children.iter().flatten() {
            let _ = signal(c.id(), libc::SIGTERM);
        }
        let start = Instant::now();
        for slot in &mut self.children {
            if let Some(mut c) = slot.take() {
                loop {
                    match c.try_wait() {
                        Ok(Some(_)) | Err(_) => break,
                        Ok(None) if start.elapsed() > STOP_GRACE => {
                            let _ = c.kill();
                            let _ = c.wait();
                            break;
                        }
                        Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            }
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
        // After the servers: their namespaces go with the emulation, and
        // their munged.
        self.emulation.take();
        self.munged.take();
    }
}

/// Writes `text` to a new file only its owner may read.
fn write_private(path: &Path, text: &str) -> Result<(), LaunchError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
    f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).map_err(|e| fail(format!("cannot write {}: {e}", path.display())))
}

/// MUNGE mode: every user may read the cluster directory (to find the
/// cluster file); the servers' data and logs stay the servers' user's.
fn open_to_all_but_data(dir: &Path, cluster: &ClusterFile) -> Result<(), LaunchError> {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path, mode: u32| {
        std::fs::create_dir_all(p).and_then(|()| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))).map_err(|e| fail(format!("cannot set the permissions of {}: {e}", p.display())))
    };
    set(dir, 0o755)?;
    set(&dir.join("logs"), 0o700)?;
    cluster.servers.iter().try_for_each(|s| set(&s.dir, 0o700))
}

/// Each server's directory: 0700. A path that cannot be a directory is
/// left for its server to refuse, naming itself.
fn private_dirs(cluster: &ClusterFile) -> Result<(), LaunchError> {
    use std::os::unix::fs::PermissionsExt;
    cluster.servers.iter().filter(|s| std::fs::create_dir_all(&s.dir).is_ok()).try_for_each(|s| {
        std::fs::set_permissions(&s.dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| fail(format!("server {}: cannot set the permissions of {}: {e}", s.id, s.dir.display())))
    })
}

#[allow(unsafe_code)]
pub(crate) fn current_uid() -> u32 {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

#[allow(unsafe_code)]
fn set_parent_death_signal(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
}
