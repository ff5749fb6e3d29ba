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
    let opts = MountOptions { attr_timeout: secs("attr-timeout", a.attr_timeout)?, entry_timeout: secs("entry-timeout", a.entry_timeout)? };
    let client = super::connect(cluster)?;
    // Fail here, clearly, if the cluster is not there.
    client.stat("/").context("cannot reach the cluster's metadata service")?;
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![fuser::MountOption::FSName("weft".into()), fuser::MountOption::Subtype("weft".into()), fuser::MountOption::DefaultPermissions];
    cfg.n_threads = Some(a.threads);
    let session = fuser::spawn_mount(WeftFs::new(client, opts), &a.mountpoint, &cfg)
        .with_context(|| format!("cannot mount on {} (FUSE needs /dev/fuse and root or fusermount)", a.mountpoint.display()))?;
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("cannot install the Ctrl-C handler")?;
    eprintln!("weft mounted on {} (Ctrl-C or `weft umount {}` to unmount)", a.mountpoint.display(), a.mountpoint.display());
    // Until Ctrl-C, or until the session ends (an external umount).
    let ended = std::thread::spawn(move || session.join());
    loop {
        if rx.recv_timeout(Duration::from_millis(200)).is_ok()
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
    Ok(())
}

fn umount_path(p: &Path) -> Result<()> {
    let st = std::process::Command::new("umount").arg(p).status().context("cannot run umount")?;
    if !st.success() {
        bail!("umount {} failed ({st})", p.display());
    }
    Ok(())
}

pub fn umount(a: UmountArgs) -> Result<()> {
    umount_path(&a.mountpoint)
}
