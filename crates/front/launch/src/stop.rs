//! Stopping a cluster from another process (`weft down`): a detached one
//! by the pids it left in `DIR/pids`, a foreground `weft up` by the record
//! it keeps in `DIR/up.pid` while it runs (it then stops its servers and
//! removes its emulated network itself, as on Ctrl-C). A pid is signalled
//! only once it is known to still be the process recorded: pids are
//! reused, and `weft down` often runs as root.

use crate::{fail, munged, LaunchError, STOP_GRACE};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where a foreground `weft up` records itself.
fn foreground_file(dir: &Path) -> PathBuf {
    dir.join("up.pid")
}

/// A process as recorded: its pid and its start time (clock ticks since
/// boot, field 22 of `/proc/PID/stat`), which a reused pid does not share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Recorded {
    pid: i32,
    started: u64,
}

impl Recorded {
    fn parse(text: &str) -> Option<Self> {
        let mut words = text.split_whitespace();
        Some(Recorded { pid: words.next()?.parse().ok()?, started: words.next()?.parse().ok()? })
    }

    /// Still the process recorded, running (not a zombie), and a
    /// `weft ... up`.
    fn is_live_weft_up(self) -> bool {
        process_start(self.pid) == Some(self.started) && !is_zombie(self.pid) && {
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", self.pid)).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            args.first().is_some_and(|a| a.ends_with(b"weft")) && args.contains(&&b"up"[..])
        }
    }
}

/// The process group of `pid` (field 5 of `/proc/PID/stat`).
pub(crate) fn process_group(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.split_whitespace().nth(2)?.parse().ok()
}

/// Field 22 of `/proc/PID/stat` (after the command's closing parenthesis,
/// field 3 is the first).
pub(crate) fn process_start(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.split_whitespace().nth(19)?.parse().ok()
}

/// Records this process as the foreground `weft up` of `dir` until the
/// returned guard drops. Refused while another live `weft up` holds it.
pub fn record_foreground(dir: &Path) -> Result<ForegroundRecord, LaunchError> {
    let path = foreground_file(dir);
    if let Some(other) = std::fs::read_to_string(&path).ok().as_deref().and_then(Recorded::parse).filter(|r| r.is_live_weft_up()) {
        return Err(fail(format!("weft up (pid {}) already runs in {}", other.pid, dir.display())));
    }
    let me = std::process::id() as i32;
    let started = process_start(me).ok_or_else(|| fail("cannot read this process's start time from /proc"))?;
    // Written whole, then renamed: a reader never sees half a record.
    let tmp = dir.join(format!(".up.pid.{me}"));
    std::fs::write(&tmp, format!("{me} {started}\n")).and_then(|()| std::fs::rename(&tmp, &path)).map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
    Ok(ForegroundRecord { path, me: Recorded { pid: me, started } })
}

/// See [`record_foreground`].
pub struct ForegroundRecord {
    path: PathBuf,
    me: Recorded,
}

impl Drop for ForegroundRecord {
    fn drop(&mut self) {
        // Only this process's own record.
        if std::fs::read_to_string(&self.path).ok().as_deref().and_then(Recorded::parse) == Some(self.me) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Stops the foreground `weft up` of `dir` as Ctrl-C would (SIGTERM) and
/// waits until it is gone. `Ok(None)` if none runs there (a stale record
/// is removed).
fn stop_foreground(dir: &Path) -> Result<Option<usize>, LaunchError> {
    let path = foreground_file(dir);
    let Some(rec) = std::fs::read_to_string(&path).ok().as_deref().and_then(Recorded::parse) else { return Ok(None) };
    if !rec.is_live_weft_up() {
        let _ = std::fs::remove_file(&path);
        return Ok(None);
    }
    signal(rec.pid as u32, libc::SIGTERM).map_err(|e| fail(format!("cannot stop weft up (pid {}): {e}", rec.pid)))?;
    // It stops each server within STOP_GRACE, then its network.
    let start = Instant::now();
    while rec.is_live_weft_up() {
        if start.elapsed() > STOP_GRACE * 3 {
            return Err(fail(format!("weft up (pid {}) is still running {:?} after it was asked to stop", rec.pid, STOP_GRACE * 3)));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Some(1))
}

/// Stops a cluster started with `--detach` (the pids in `DIR/pids`), or
/// one running in the foreground in `DIR` (its `weft up`). Returns how
/// many processes were signalled.
pub fn stop_detached(dir: &Path) -> Result<usize, LaunchError> {
    if let Some(n) = stop_foreground(dir)? {
        return Ok(n);
    }
    let pid_file = dir.join("pids");
    let text = std::fs::read_to_string(&pid_file).map_err(|e| fail(format!("no cluster to stop in {}: {e}", dir.display())))?;
    let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    let munged_socket = munged::socket_path(&dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf()));
    let alive = |p: i32| is_weft_server(p) || is_munged_of(p, &munged_socket);
    let mut n = 0;
    for &p in &pids {
        if alive(p) {
            let _ = signal(p as u32, libc::SIGTERM);
            n += 1;
        }
    }
    let start = Instant::now();
    while pids.iter().any(|&p| alive(p)) && start.elapsed() < STOP_GRACE {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &p in &pids {
        if alive(p) {
            let _ = signal(p as u32, libc::SIGKILL);
        }
    }
    let _ = std::fs::remove_file(pid_file);
    Ok(n)
}

/// True if `pid` is a running (not zombie) `weft serve`: never signal a
/// recycled pid that now belongs to someone else.
fn is_weft_server(pid: i32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    !is_zombie(pid) && cmdline.split(|&b| b == 0).any(|a| a == b"serve")
}

pub(crate) fn is_zombie(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('Z'))
}

/// True if `pid` is the `munged` a cluster started on `socket`.
fn is_munged_of(pid: i32, socket: &Path) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let want = format!("--socket={}", socket.display());
    !is_zombie(pid) && cmdline.split(|&b| b == 0).next().is_some_and(|a| a.ends_with(b"munged")) && cmdline.split(|&b| b == 0).any(|a| a == want.as_bytes())
}

#[allow(unsafe_code)]
pub(crate) fn signal(pid: u32, sig: i32) -> std::io::Result<()> {
    // SAFETY: kill(2) has no memory effects; pid is one of our children or
    // a pid checked to be the process recorded.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// Signals the process group led by `pid` (a launcher started in a group of its own).
#[allow(unsafe_code)]
pub(crate) fn signal_group(pid: u32, sig: i32) -> std::io::Result<()> {
    // SAFETY: as in `signal`; a negative pid names the group.
    if unsafe { libc::kill(-(pid as libc::pid_t), sig) } == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_names_only_the_process_that_wrote_it() {
        let me = std::process::id() as i32;
        let started = process_start(me).expect("this process's start time");
        assert_eq!(Recorded::parse(&format!("{me} {started}\n")), Some(Recorded { pid: me, started }));
        assert_eq!(Recorded::parse("123"), None, "a record without a start time is no record");
        // This test binary is not `weft up`, and a pid reused by a process
        // started at another time is not the one recorded.
        assert!(!Recorded { pid: me, started }.is_live_weft_up());
        assert_ne!(process_start(1), None);
        assert!(!Recorded { pid: 1, started: started + 1 }.is_live_weft_up());
    }
}
