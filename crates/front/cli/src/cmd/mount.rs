//! `weft mount` and `weft umount`: Weft as a POSIX file system (FUSE).

use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Duration;
use weft_fuse::{MountOptions, WeftFs};

#[derive(Args)]
pub struct MountArgs {
    /// An empty directory to mount Weft on.
    mountpoint: PathBuf,
    /// Seconds the kernel may cache a file's attributes.
    #[arg(long = "attr-timeout", default_value_t = 1.0)]
    attr_timeout: f64,
    /// Seconds the kernel may cache a name's lookup.
    #[arg(long = "entry-timeout", default_value_t = 1.0)]
    entry_timeout: f64,
    /// Threads serving the kernel's requests.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Let the kernel gather small writes in its page cache (much faster
    /// small writes; sizes and times other nodes change are not seen while
    /// the kernel keeps the file cached, and appends are atomic only on
    /// this node: for files this node alone writes and reads;
    /// docs/posix.md).
    #[arg(long = "writeback-cache")]
    writeback_cache: bool,
    /// Run in the background: return once mounted (`weft umount` ends it).
    #[arg(long)]
    daemon: bool,
    /// Where the background mount writes its messages (with --daemon).
    #[arg(long, requires = "daemon")]
    log: Option<PathBuf>,
}

#[derive(Args)]
pub struct UmountArgs {
    mountpoint: PathBuf,
}

fn secs(what: &str, v: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(v).with_context(|| format!("--{what} must be a number of seconds >= 0, got {v}"))
}

/// Mounts in the foreground until Ctrl-C (or `weft umount`), then unmounts.
pub fn mount(cluster: Option<&Path>, a: MountArgs) -> Result<()> {
    if !a.mountpoint.is_dir() {
        bail!("{} is not a directory", a.mountpoint.display());
    }
    if a.threads == 0 {
        bail!("--threads must be at least 1");
    }
    let opts = MountOptions { attr_timeout: secs("attr-timeout", a.attr_timeout)?, entry_timeout: secs("entry-timeout", a.entry_timeout)?, threads: a.threads, writeback_cache: a.writeback_cache };
    if a.daemon {
        return daemonize(cluster, &a);
    }
    let cluster_file = super::locate(cluster)?;
    let point_abs = std::fs::canonicalize(&a.mountpoint).unwrap_or_else(|_| a.mountpoint.clone());
    let client = super::connect(Some(&cluster_file))?;
    // Fail here, clearly, if the cluster is not there.
    client.stat("/").context("cannot reach the cluster's metadata service")?;
    let mut cfg = fuser::Config::default();
    // Every user of the node may use the mount; the kernel checks each
    // access against the files' modes (default_permissions), and files are
    // created as the user who asks.
    cfg.mount_options = vec![
        fuser::MountOption::FSName("weft".into()),
        fuser::MountOption::Subtype("weft".into()),
        fuser::MountOption::DefaultPermissions,
    ];
    cfg.acl = fuser::SessionACL::All;
    cfg.n_threads = Some(a.threads);
    // A mount of a batch job's cluster goes with the job (`weft job stop`);
    // registered before it mounts, so a stop right after `--daemon`
    // returns finds it (a failed mount's record goes with `job`).
    let mut job = match weft_launch::job::mounts::JobMount::register(&cluster_file, &point_abs) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("weft: {e}; `weft job stop` will not unmount this mount: unmount it yourself");
            None
        }
    };
    let fs = WeftFs::new(client, opts);
    let notifier = fs.notifier_slot();
    let session = fuser::spawn_mount(fs, &a.mountpoint, &cfg)
        .with_context(|| format!("cannot mount on {} (FUSE needs /dev/fuse and root or fusermount)", a.mountpoint.display()))?;
    let _ = notifier.set(session.notifier());
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("cannot install the Ctrl-C handler")?;
    eprintln!("weft mounted on {} (Ctrl-C or `weft umount {}` to unmount)", a.mountpoint.display(), a.mountpoint.display());
    // Until Ctrl-C, or until the session ends (an external umount).
    let ended = std::thread::spawn(move || session.join());
    let mut job_stopping: Option<std::time::Instant> = None;
    loop {
        let asked = rx.recv_timeout(Duration::from_millis(200)).is_ok();
        // Asked once; then tried again every 2 s until the session ends
        // (a detach that failed, e.g. while the kernel was busy).
        let job_ends = match job_stopping {
            None if job.as_mut().is_some_and(|j| j.asked_to_unmount()) => {
                eprintln!("weft: the job in {} is stopping; unmounting {}", job.as_ref().map(|j| j.dir().display().to_string()).unwrap_or_default(), a.mountpoint.display());
                true
            }
            Some(t) => t.elapsed() > Duration::from_secs(2) && is_mounted(&point_abs),
            None => false,
        };
        if job_ends {
            job_stopping = Some(std::time::Instant::now());
        }
        if (asked || job_ends)
            && let Err(e) = umount_path(&a.mountpoint)
        {
            // Busy (a program has a file open there): detach it now and let
            // the kernel finish when the last user leaves, rather than exit
            // and leave a dead mount behind.
            eprintln!("weft: {e}; detaching it (umount -l)");
            let _ = std::process::Command::new("umount").arg("-l").arg(&a.mountpoint).status();
        }
        if ended.is_finished() {
            break;
        }
    }
    ended.join().map_err(|_| anyhow::anyhow!("the FUSE session panicked"))?.context("FUSE session")?;
    // The registration goes only once the mount has (stop waits for it).
    drop(job);
    Ok(())
}

fn umount_path(p: &Path) -> Result<()> {
    let st = std::process::Command::new("umount").arg(p).status().context("cannot run umount")?;
    if !st.success() {
        bail!("umount {} failed ({st})", p.display());
    }
    Ok(())
}

/// Is `p` a mount point now (by /proc/mounts, which writes space, tab,
/// newline and backslash as octal escapes)?
fn is_mounted(p: &Path) -> bool {
    let want = p.to_string_lossy();
    let unescape = |f: &str| f.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\");
    std::fs::read_to_string("/proc/mounts").is_ok_and(|t| t.lines().any(|l| l.split_whitespace().nth(1).is_some_and(|f| unescape(f) == want)))
}

/// `--daemon`: runs this mount again, without `--daemon`, in a session of
/// its own (a new process rather than a fork: the client has threads), and
/// returns once the mount is there or the background process has failed.
fn daemonize(cluster: Option<&Path>, a: &MountArgs) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let point = std::fs::canonicalize(&a.mountpoint).with_context(|| format!("cannot resolve {}", a.mountpoint.display()))?;
    if is_mounted(&point) {
        bail!("{} is already a mount point", point.display());
    }
    let log_path = a.log.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("weft-mount-{}-{:08x}.log", std::process::id(), rand_suffix())));
    // A new file only (never through a link someone left in /tmp), private.
    let log = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().write(true).create_new(a.log.is_none()).create(true).truncate(true).mode(0o600).open(&log_path)
    }
    .with_context(|| format!("cannot create the log {}", log_path.display()))?;
    let mut cmd = std::process::Command::new(std::env::current_exe().context("cannot find the weft binary")?);
    if let Some(c) = cluster {
        cmd.arg("--cluster").arg(c);
    }
    cmd.arg("mount")
        .arg(&point)
        .args(["--attr-timeout", &a.attr_timeout.to_string(), "--entry-timeout", &a.entry_timeout.to_string(), "--threads", &a.threads.to_string()])
        .args(a.writeback_cache.then_some("--writeback-cache"))
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid is async-signal-safe; it detaches the child from this
    // terminal, so Ctrl-C here or a closed terminal does not reach it.
    unsafe {
        cmd.pre_exec(|| if libc::setsid() < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) });
    }
    let mut child = cmd.spawn().context("cannot start the background mount")?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if is_mounted(&point) {
            println!("weft mounted on {} (pid {}, log {}); `weft umount {}` to unmount", point.display(), child.id(), log_path.display(), point.display());
            return Ok(());
        }
        if let Some(st) = child.try_wait()? {
            let msg = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!("the background mount exited ({st}): {}", msg.trim());
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            // It may have mounted after all: leave no dead mount behind.
            let _ = std::process::Command::new("umount").arg("-l").arg(&point).status();
            bail!("{} was not mounted within 30 s; see {}", point.display(), log_path.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A few random bits for a file name nobody can guess ahead.
fn rand_suffix() -> u32 {
    weft_client::random_u64() as u32
}

/// Unmounts; a mount whose process died (the kernel then answers ENOTCONN)
/// or that is busy is detached (`umount -l`), so the directory is usable
/// again and a new mount can take it.
pub fn umount(a: UmountArgs) -> Result<()> {
    match umount_path(&a.mountpoint) {
        Ok(()) => Ok(()),
        Err(e) => {
            let st = std::process::Command::new("umount").arg("-l").arg(&a.mountpoint).status().context("cannot run umount")?;
            if !st.success() {
                return Err(e.context("and umount -l failed too"));
            }
            eprintln!("weft: {e}; detached it instead (umount -l)");
            Ok(())
        }
    }
}
