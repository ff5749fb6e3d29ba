//! Objects made ahead of need (Lustre's object precreation): a file's first
//! write takes an empty file made earlier and renames it to the object's
//! name, instead of creating one while the client waits.
//!
//! Why: creating a file allocates an inode, which on a busy local file
//! system costs far more than a rename (measured on this project's test
//! machine, ext4: 480-560 us a create against 21-30 us a rename and open, in
//! a directory of a few thousand files). A small file's write paid that on
//! every data server it touched.
//!
//! The spares are empty files `spare/<n>` beside `objects/`, made by a
//! thread of their own that keeps [`TARGET`] ready. A spare is renamed
//! with `RENAME_NOREPLACE`, so two first writes of the same object never
//! replace each other's file: the one that finds the name taken opens it
//! (and the spare waits for the next). Spares left by a crash are empty
//! (nothing writes a spare before its rename) and are taken at the next
//! start. When none is ready, the object is created as before.

use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::Duration;

/// Spares kept ready: enough for a burst of small files' first writes
/// while the thread catches up.
const TARGET: usize = 64;

/// The thread tops the spares up once fewer than this are left.
const LOW: usize = TARGET / 2;

/// How often the thread looks without being woken (to notice the service
/// has gone).
const LOOK_EVERY: Duration = Duration::from_secs(1);

pub struct Spares {
    dir: PathBuf,
    ready: Mutex<Ready>,
    wake: Condvar,
    /// This file system cannot rename without replacing (or across to the
    /// objects): spares are given up for good.
    off: std::sync::atomic::AtomicBool,
    /// Spares the thread tried to make (tests: it never spins).
    attempts: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Ready {
    names: VecDeque<u64>,
    /// The next spare's name.
    next: u64,
}

fn lock<X>(m: &Mutex<X>) -> std::sync::MutexGuard<'_, X> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Spares {
    /// The spares under `dir` (made if missing), those left from before
    /// taken up, and the thread that keeps them ready.
    pub fn start(dir: &Path) -> io::Result<Arc<Spares>> {
        std::fs::create_dir_all(dir)?;
        let mut ready = Ready::default();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let number = name.to_str().and_then(|n| n.parse::<u64>().ok());
            // New spares are numbered past every name seen, kept or not, so
            // none is made under a name being removed here.
            if let Some(n) = number {
                ready.next = ready.next.max(n.saturating_add(1));
            }
            // Anything else (a name not ours, a file with bytes) goes.
            match number {
                Some(n) if entry.metadata().is_ok_and(|m| m.is_file() && m.len() == 0) => ready.names.push_back(n),
                _ => {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let spares = Arc::new(Spares { dir: dir.to_path_buf(), ready: Mutex::new(ready), wake: Condvar::new(), off: Default::default(), attempts: Default::default() });
        let weak = Arc::downgrade(&spares);
        std::thread::Builder::new().name("weft-data-spares".into()).spawn(move || fill(weak))?;
        Ok(spares)
    }

    /// Opens object `path`, made from a spare when one is ready: `None`
    /// when none is (the caller creates it). An object that appeared
    /// meanwhile (another first write) is opened as it is.
    pub fn take_as(&self, path: &Path) -> io::Result<Option<File>> {
        if self.off.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(None);
        }
        let n = {
            let mut r = lock(&self.ready);
            let Some(n) = r.names.pop_front() else {
                self.wake.notify_one();
                return Ok(None);
            };
            if r.names.len() < LOW {
                self.wake.notify_one();
            }
            n
        };
        let spare = self.dir.join(n.to_string());
        use nix::errno::Errno;
        match renameat2(AT_FDCWD, &spare, AT_FDCWD, path, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => {}
            Err(Errno::EEXIST) => lock(&self.ready).names.push_front(n),
            // No rename without replacing here (some file systems), or the
            // objects on another one: no spares from now on.
            Err(e @ (Errno::EINVAL | Errno::EXDEV | Errno::ENOSYS | Errno::EPERM | Errno::EOPNOTSUPP)) => {
                tracing::warn!(target: "weft::data", error = %e, "spare objects cannot be renamed into place here; creating objects as they come");
                self.off.store(true, std::sync::atomic::Ordering::Relaxed);
                let _ = std::fs::remove_file(&spare);
                self.wake.notify_one();
                return Ok(None);
            }
            // This spare is unusable (removed by hand, say): it goes, and
            // the object is created as without spares.
            Err(e) => {
                tracing::warn!(target: "weft::data", spare = %spare.display(), error = %e, "cannot use a spare object");
                let _ = std::fs::remove_file(&spare);
                return Ok(None);
            }
        }
        OpenOptions::new().read(true).write(true).open(path).map(Some)
    }

    /// Makes one spare; false when it cannot (the disk full, say).
    fn make_one(&self) -> bool {
        self.attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let n = {
            let mut r = lock(&self.ready);
            let n = r.next;
            r.next = n.saturating_add(1);
            n
        };
        let made = OpenOptions::new().write(true).create_new(true).mode(0o600).open(self.dir.join(n.to_string()));
        match made {
            Ok(_) => {
                lock(&self.ready).names.push_back(n);
                true
            }
            Err(e) => {
                tracing::debug!(target: "weft::data", error = %e, "cannot make a spare object");
                false
            }
        }
    }
}

/// The thread: tops the spares up to [`TARGET`] whenever fewer than
/// [`LOW`] are left; ends once the service is gone or spares are off.
/// After a failure (a full disk, no inodes) it tries again only after
/// [`LOOK_EVERY`], never in a busy loop.
fn fill(spares: Weak<Spares>) {
    loop {
        let Some(s) = spares.upgrade() else { return };
        if s.off.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let wanted = TARGET.saturating_sub(lock(&s.ready).names.len());
        let failed = (0..wanted).any(|_| !s.make_one());
        let r = lock(&s.ready);
        if failed {
            drop(s.wake.wait_timeout(r, LOOK_EVERY));
        } else {
            drop(s.wake.wait_timeout_while(r, LOOK_EVERY, |r| r.names.len() >= LOW));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("weft-spares-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn until_ready(s: &Spares, n: usize) {
        for _ in 0..500 {
            if lock(&s.ready).names.len() >= n {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the spares were not made");
    }

    #[test]
    fn a_spare_becomes_the_object_and_a_taken_name_is_never_replaced() {
        let d = temp("take");
        let s = Spares::start(&d.join("spare")).unwrap();
        until_ready(&s, TARGET);
        let obj = d.join("obj");
        let mut f = s.take_as(&obj).unwrap().expect("a spare was ready");
        std::io::Write::write_all(&mut f, b"first").unwrap();
        // A second first write of the same object opens the first one's
        // file: its bytes stay.
        let again = s.take_as(&obj).unwrap().expect("opened");
        drop(again);
        assert_eq!(std::fs::read(&obj).unwrap(), b"first");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&obj).unwrap().permissions().mode() & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_thread_that_cannot_make_spares_waits_instead_of_spinning() {
        let d = temp("fail");
        let dir = d.join("spare");
        let s = Spares::start(&dir).unwrap();
        until_ready(&s, TARGET);
        // Its directory gone: every make fails from now on.
        std::fs::remove_dir_all(&dir).unwrap();
        let before = s.attempts.load(std::sync::atomic::Ordering::Relaxed);
        for k in 0..40 {
            // Objects' first writes use the spares up and wake the thread.
            let _ = s.take_as(&d.join(format!("o{k}")));
        }
        std::thread::sleep(Duration::from_millis(300));
        let tried = s.attempts.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(tried < 200, "the thread retried {tried} times in 300 ms: it spins");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn spares_left_from_before_are_taken_and_strays_removed() {
        let d = temp("restart");
        let dir = d.join("spare");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("7"), b"").unwrap();
        // Numbered after the kept spare: the thread, which starts at once,
        // must not make its first spare under this name.
        std::fs::write(dir.join("8"), b"not empty").unwrap();
        std::fs::write(dir.join("junk"), b"").unwrap();
        let s = Spares::start(&dir).unwrap();
        assert!(!dir.join("8").exists() && !dir.join("junk").exists(), "a spare with bytes or a stray name stayed");
        let first = lock(&s.ready).names.front().copied();
        assert_eq!(first, Some(7), "the empty spare from before comes first");
        until_ready(&s, TARGET);
        let names = lock(&s.ready).names.clone();
        let mut sorted: Vec<u64> = names.iter().copied().collect();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "names are never handed out twice");
        let _ = std::fs::remove_dir_all(&d);
    }
}
