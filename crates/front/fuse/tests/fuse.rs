//! The FUSE mount (`weft mount`) as everyday programs use it: the same
//! sequence of file operations on the mount and on a local directory must
//! observe the same results and leave the same tree, byte for byte; two
//! mounts of one cluster see each other's closed files (close-to-open);
//! symbolic links; files removed while open; unsupported operations fail
//! with a clear errno. Needs root and
//! /dev/fuse (CI runs as root).

use weft_testkit::mount::{mounted, Mount};
use weft_testkit::{TestCluster, weft};
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn kind(e: &std::io::Error) -> String {
    format!("{:?}", e.kind())
}

/// The operations, on `root`; returns what was observed, in order.
fn exercise(root: &Path) -> Vec<String> {
    let mut seen = Vec::new();
    let p = |n: &str| root.join(n);
    fs::write(p("a.txt"), b"hello world\n").unwrap();
    seen.push(format!("read {:?}", fs::read_to_string(p("a.txt")).unwrap()));
    // Append, truncate down and up, overwrite in the middle.
    OpenOptions::new().append(true).open(p("a.txt")).unwrap().write_all(b"appended\n").unwrap();
    let f = OpenOptions::new().read(true).write(true).open(p("a.txt")).unwrap();
    f.set_len(8).unwrap();
    f.set_len(12).unwrap();
    let mut f = f;
    f.seek(SeekFrom::Start(2)).unwrap();
    f.write_all(b"XY").unwrap();
    drop(f);
    seen.push(format!("after edits {:?} len {}", fs::read(p("a.txt")).unwrap(), fs::metadata(p("a.txt")).unwrap().len()));
    // O_EXCL, missing files, O_TRUNC.
    seen.push(format!("create_new existing: {}", kind(&OpenOptions::new().write(true).create_new(true).open(p("a.txt")).unwrap_err())));
    seen.push(format!("open missing: {}", kind(&fs::File::open(p("missing")).unwrap_err())));
    fs::write(p("a.txt"), b"short").unwrap();
    seen.push(format!("truncated by O_TRUNC: {:?}", fs::read(p("a.txt")).unwrap()));
    // Directories, renames (over a file, of a directory), listing.
    fs::create_dir_all(p("d/e/f")).unwrap();
    fs::write(p("d/e/f/deep"), b"deep").unwrap();
    fs::write(p("b.txt"), b"bbb").unwrap();
    fs::rename(p("b.txt"), p("a.txt")).unwrap();
    fs::rename(p("d"), p("dd")).unwrap();
    seen.push(format!("renamed: {:?} {:?}", fs::read(p("a.txt")).unwrap(), fs::read(p("dd/e/f/deep")).unwrap()));
    let mut names: Vec<String> = fs::read_dir(root).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    seen.push(format!("listing {names:?}"));
    seen.push(format!("rmdir non-empty: {}", kind(&fs::remove_dir(p("dd/e")).unwrap_err())));
    // Symbolic links: relative, to a directory, dangling; followed by the
    // kernel on the mount, never by Weft.
    use std::os::unix::fs::symlink;
    symlink("a.txt", p("link")).unwrap();
    symlink("dd/e", p("dirlink")).unwrap();
    symlink("no/such/target", p("dangling")).unwrap();
    seen.push(format!("readlink {:?} {:?}", fs::read_link(p("link")).unwrap(), fs::read_link(p("dangling")).unwrap()));
    let lm = fs::symlink_metadata(p("dangling")).unwrap();
    seen.push(format!("lstat link: symlink {} len {}", lm.file_type().is_symlink(), lm.len()));
    seen.push(format!("through links: {:?} {:?}", fs::read(p("link")).unwrap(), fs::read(p("dirlink/f/deep")).unwrap()));
    seen.push(format!("dangling: {}", kind(&fs::read(p("dangling")).unwrap_err())));
    seen.push(format!("link over existing: {}", kind(&symlink("x", p("link")).unwrap_err())));
    seen.push(format!("readlink of a file: {}", kind(&fs::read_link(p("a.txt")).unwrap_err())));
    fs::rename(p("link"), p("link2")).unwrap();
    fs::remove_file(p("dirlink")).unwrap();
    seen.push(format!("after rename and unlink: {:?} {}", fs::read(p("link2")).unwrap(), fs::metadata(p("dd/e")).unwrap().is_dir()));
    seen.push(format!("mkdir existing: {}", kind(&fs::create_dir(p("dd")).unwrap_err())));
    // Permissions.
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(p("a.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    // Times: one set on purpose stands (cp -p, tar); a later write moves it.
    let fixed = std::time::UNIX_EPOCH + Duration::from_secs(981_173_106);
    let f = OpenOptions::new().write(true).open(p("a.txt")).unwrap();
    f.set_modified(fixed).unwrap();
    drop(f);
    seen.push(format!("mtime set: {}", fs::metadata(p("a.txt")).unwrap().modified().unwrap() == fixed));
    OpenOptions::new().append(true).open(p("a.txt")).unwrap().write_all(b"!").unwrap();
    seen.push(format!("mtime after a write is later: {}", fs::metadata(p("a.txt")).unwrap().modified().unwrap() > fixed));
    seen.push(format!("mode {:o}", fs::metadata(p("a.txt")).unwrap().permissions().mode() & 0o7777));
    // A file larger than a stripe and than one FUSE request, random bytes.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    fs::write(p("dd/big"), &big).unwrap();
    let mut back = Vec::new();
    fs::File::open(p("dd/big")).unwrap().read_to_end(&mut back).unwrap();
    seen.push(format!("big same {} len {}", back == big, back.len()));
    // A few bytes in the middle of a page through a write-only descriptor
    // (under a writeback cache the kernel reads the page in first).
    {
        use std::os::unix::fs::FileExt;
        let w = OpenOptions::new().write(true).open(p("dd/big")).unwrap();
        w.write_all_at(b"XYZ", 1_000_100).unwrap();
    }
    let back = fs::read(p("dd/big")).unwrap();
    seen.push(format!("patched {:?} len {}", &back[1_000_098..1_000_105], back.len()));
    // Removal.
    fs::remove_file(p("dd/e/f/deep")).unwrap();
    fs::remove_dir(p("dd/e/f")).unwrap();
    seen.push(format!("removed: {}", kind(&fs::metadata(p("dd/e/f")).unwrap_err())));
    seen
}

/// Every file under `root` with its bytes, and every directory, sorted.
fn tree(root: &Path) -> Vec<(String, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_symlink() {
                out.push((rel, Some(format!("-> {}", fs::read_link(e.path()).unwrap().display()).into_bytes())));
            } else if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
                out.push((rel, None));
            } else {
                out.push((rel, Some(fs::read(e.path()).unwrap())));
            }
        }
    }
    out.sort();
    out
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn file_operations_through_the_mount_match_a_local_directory() {
    operations_match_a_local_directory("fuse-ops", &[]);
}

/// The same under the kernel's writeback cache (`--writeback-cache`):
/// appends placed by the kernel, times kept by it, pages sent late.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn file_operations_match_a_local_directory_under_the_writeback_cache() {
    operations_match_a_local_directory("fuse-ops-wbc", &["--writeback-cache"]);
}

fn operations_match_a_local_directory(name: &str, mount_args: &[&str]) {
    let tc = TestCluster::start(name, 4);
    let m = Mount::with_args(&tc, "mnt", mount_args);
    let local = tc.scratch("local");
    fs::create_dir_all(&local).unwrap();
    let on_weft = exercise(&m.point);
    let on_local = exercise(&local);
    assert_eq!(on_weft, on_local);
    assert!(tree(&m.point) == tree(&local), "the trees differ after the same operations");
    // statfs reports the data servers' real space (df would show zeros else).
    let out = Command::new("stat").args(["-f", "-c", "%b %f %c"]).arg(&m.point).output().unwrap();
    let v: Vec<u64> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert!(v[0] > 0 && v[1] > 0 && v[1] <= v[0] && v[2] > 0, "statfs: {v:?}");
    // The bytes are Weft's: the client API reads what the mount wrote.
    let f = tc.client().open("/dd/big", false).unwrap();
    assert_eq!(f.size().unwrap(), 3_000_000);
    m.unmount();
}

/// Files removed or replaced while open, on `root`: the open handles go on
/// reading and writing them; the names are gone at once.
fn exercise_open_files(root: &Path) -> Vec<String> {
    let mut seen = Vec::new();
    let p = |n: &str| root.join(n);
    fs::create_dir_all(p("o")).unwrap();
    fs::write(p("o/gone"), b"still here").unwrap();
    let mut f = OpenOptions::new().read(true).write(true).open(p("o/gone")).unwrap();
    let mut g = fs::File::open(p("o/gone")).unwrap();
    fs::remove_file(p("o/gone")).unwrap();
    seen.push(format!("name after unlink: {}", kind(&fs::metadata(p("o/gone")).unwrap_err())));
    let mut names: Vec<String> = fs::read_dir(p("o")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    seen.push(format!("listing after unlink {names:?}"));
    f.seek(SeekFrom::End(0)).unwrap();
    f.write_all(b", and more").unwrap();
    let mut s = String::new();
    g.read_to_string(&mut s).unwrap();
    seen.push(format!("read through the other handle {s:?} len {}", f.metadata().unwrap().len()));
    drop(f);
    let mut s = String::new();
    g.seek(SeekFrom::Start(0)).unwrap();
    g.read_to_string(&mut s).unwrap();
    seen.push(format!("after the first close {s:?}"));
    drop(g);
    seen.push(format!("a new file of that name: {}", kind(&OpenOptions::new().write(true).create_new(true).open(p("o/gone")).map(|_| ()).map_or_else(|e| e, |()| std::io::Error::other("created")))));
    // Renamed over while open: the old contents stay readable.
    fs::write(p("o/target"), b"old contents").unwrap();
    fs::write(p("o/source"), b"new contents").unwrap();
    let mut t = fs::File::open(p("o/target")).unwrap();
    fs::rename(p("o/source"), p("o/target")).unwrap();
    let mut s = String::new();
    t.read_to_string(&mut s).unwrap();
    seen.push(format!("renamed over: handle reads {s:?}, name reads {:?}", fs::read_to_string(p("o/target")).unwrap()));
    drop(t);
    let mut names: Vec<String> = fs::read_dir(p("o")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    seen.push(format!("listing at the end {names:?}"));
    seen
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn files_removed_while_open_stay_usable_until_closed() {
    let tc = TestCluster::start("fuse-open", 2);
    let m = Mount::new(&tc, "mnt");
    let local = tc.scratch("local");
    fs::create_dir_all(&local).unwrap();
    let on_weft = exercise_open_files(&m.point);
    let on_local = exercise_open_files(&local);
    assert_eq!(on_weft, on_local);
    // Nothing is left behind once the handles are closed (the kernel sends
    // release asynchronously after close: allow it a moment).
    let c = tc.client();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let names: Vec<String> = c.readdir("/o").unwrap().into_iter().map(|e| e.name).collect();
        if names == ["gone", "target"] {
            break;
        }
        assert!(Instant::now() < deadline, "hidden files left after their last close: {names:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    m.unmount();
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn a_file_closed_on_one_mount_is_seen_whole_by_an_open_on_another() {
    let tc = TestCluster::start("fuse-two", 2);
    let a = Mount::new(&tc, "a");
    let b = Mount::new(&tc, "b");
    // b reads a small version first, so its kernel holds the old size.
    fs::write(a.point.join("shared"), b"small").unwrap();
    assert_eq!(fs::read(b.point.join("shared")).unwrap(), b"small");
    let data: Vec<u8> = (0..1_500_000u32).map(|i| (i % 253) as u8).collect();
    fs::write(a.point.join("shared"), &data).unwrap();
    assert!(fs::read(b.point.join("shared")).unwrap() == data, "mount b did not see mount a's closed file whole");
    // fstat after fchmod shows the new mode.
    {
        use std::os::unix::fs::PermissionsExt;
        let f = fs::File::open(a.point.join("shared")).unwrap();
        f.set_permissions(fs::Permissions::from_mode(0o604)).unwrap();
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o7777, 0o604);
    }
    // A directory larger than one readdir reply lists every entry once.
    fs::create_dir(a.point.join("many")).unwrap();
    for i in 0..300 {
        fs::write(a.point.join(format!("many/entry-with-a-longish-name-{i:04}")), b"x").unwrap();
    }
    let mut names: Vec<String> = fs::read_dir(b.point.join("many")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    let want: Vec<String> = (0..300).map(|i| format!("entry-with-a-longish-name-{i:04}")).collect();
    assert_eq!(names, want);
    // A rename by the other mount: this mount sees the new name, not the old.
    fs::write(a.point.join("old-name"), b"moved").unwrap();
    assert_eq!(fs::read(b.point.join("old-name")).unwrap(), b"moved");
    fs::rename(a.point.join("old-name"), a.point.join("new-name")).unwrap();
    std::thread::sleep(Duration::from_millis(1100)); // past b's entry timeout
    assert_eq!(fs::metadata(b.point.join("old-name")).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(fs::read(b.point.join("new-name")).unwrap(), b"moved");
    // Writers in two threads, disjoint halves, one mount: both land.
    let half = data.len() / 2;
    let f = OpenOptions::new().write(true).open(b.point.join("shared")).unwrap();
    std::thread::scope(|s| {
        for k in 0..2 {
            let f = &f;
            s.spawn(move || {
                use std::os::unix::fs::FileExt;
                f.write_all_at(&vec![k as u8 + 1; half], (k * half) as u64).unwrap();
            });
        }
    });
    drop(f);
    let back = fs::read(a.point.join("shared")).unwrap();
    assert!(back[..half].iter().all(|&x| x == 1) && back[half..2 * half].iter().all(|&x| x == 2));
    assert_eq!(fs::metadata(a.point.join("missing")).unwrap_err().kind(), ErrorKind::NotFound);
    b.unmount();
    a.unmount();
}

/// F_SETLK (or, with `query`, F_GETLK) on `f`: "ok", "busy", or for a
/// query the type of the lock in the way ("unlocked", "read", "write").
fn fcntl_lock(f: &fs::File, typ: i32, start: i64, len: i64, query: bool) -> String {
    use std::os::fd::AsRawFd;
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = typ as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    let cmd = if query { libc::F_GETLK } else { libc::F_SETLK };
    // SAFETY: a valid descriptor and a flock the call fills in.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), cmd, &mut fl) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        assert!(matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)), "fcntl failed: {e}");
        return "busy".into();
    }
    if !query {
        return "ok".into();
    }
    match i32::from(fl.l_type) {
        libc::F_UNLCK => "unlocked".into(),
        libc::F_RDLCK => format!("read {}+{}", fl.l_start, fl.l_len),
        _ => format!("write {}+{}", fl.l_start, fl.l_len),
    }
}

/// A process taking record locks (run only when spawned by the lock test):
/// `WEFT_TEST_LOCKS` is "r|w start len" items separated by ';'; it prints
/// each result on a line, then, with `WEFT_TEST_HOLD`, holds its locks until
/// stdin closes (or it is killed).
#[test]
#[ignore = "run as a child process by record_locks_exclude_across_processes_and_mounts"]
fn lock_child() {
    use std::io::BufRead;
    let Ok(path) = std::env::var("WEFT_TEST_LOCK_FILE") else { return };
    let f = OpenOptions::new().read(true).write(true).open(path).unwrap();
    for item in std::env::var("WEFT_TEST_LOCKS").unwrap().split(';') {
        let v: Vec<&str> = item.split_whitespace().collect();
        let (start, len): (i64, i64) = (v[1].parse().unwrap(), v[2].parse().unwrap());
        if v[0] == "W" {
            // F_SETLKW: waits until granted.
            use std::os::fd::AsRawFd;
            let mut fl: libc::flock = unsafe { std::mem::zeroed() };
            fl.l_type = libc::F_WRLCK as libc::c_short;
            fl.l_whence = libc::SEEK_SET as libc::c_short;
            fl.l_start = start;
            fl.l_len = len;
            // SAFETY: a valid descriptor and flock.
            let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLKW, &mut fl) };
            println!("LOCK:{}", if rc == 0 { "ok" } else { "failed" });
            continue;
        }
        let typ = if v[0] == "w" { libc::F_WRLCK } else { libc::F_RDLCK };
        println!("LOCK:{}", fcntl_lock(&f, typ, start, len, false));
    }
    if std::env::var_os("WEFT_TEST_HOLD").is_some() {
        println!("LOCK:holding");
        let _ = std::io::stdin().lock().lines().count();
    }
}

/// Spawns [`lock_child`] and returns its results; a holding child is
/// returned alive (its locks held), the others have exited.
fn lock_process(file: &Path, locks: &str, hold: bool) -> (Option<Child>, Vec<String>) {
    use std::io::BufRead;
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "lock_child", "--ignored", "--test-threads=1", "--nocapture"])
        .env("WEFT_TEST_LOCK_FILE", file)
        .env("WEFT_TEST_LOCKS", locks)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    if hold {
        cmd.env("WEFT_TEST_HOLD", "1");
    }
    let mut child = cmd.spawn().unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    // The harness prints around the test's own lines, maybe on the same line.
    for l in out.lines().map(Result::unwrap) {
        if let Some((_, r)) = l.split_once("LOCK:") {
            lines.push(r.to_string());
            if r == "holding" {
                return (Some(child), lines);
            }
        }
    }
    assert!(child.wait().unwrap().success(), "the lock process failed");
    (None, lines)
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn record_locks_exclude_across_processes_and_mounts() {
    let tc = TestCluster::start("fuse-locks", 2);
    let (m1, m2) = (Mount::new(&tc, "mnt1"), Mount::new(&tc, "mnt2"));
    fs::write(m1.point.join("db"), vec![0u8; 4096]).unwrap();
    let (on1, on2) = (m1.point.join("db"), m2.point.join("db"));
    // Process A, on mount 1, holds a write lock on [0, 100).
    let (a, lines) = lock_process(&on1, "w 0 100", true);
    assert_eq!(lines, ["ok", "holding"]);
    let mut a = a.unwrap();
    // This process, on mount 2: the lock service says no for the bytes A
    // holds (a kernel keeping locks per mount would say yes), yes next to them.
    let f = OpenOptions::new().read(true).write(true).open(&on2).unwrap();
    assert_eq!(fcntl_lock(&f, libc::F_WRLCK, 50, 10, false), "busy");
    assert_eq!(fcntl_lock(&f, libc::F_RDLCK, 99, 1, false), "busy");
    assert_eq!(fcntl_lock(&f, libc::F_WRLCK, 50, 10, true), "write 50+10");
    assert_eq!(fcntl_lock(&f, libc::F_WRLCK, 100, 100, false), "ok");
    // Another process on A's own mount is kept out by A's lock (the
    // mount's own table), but not by this process's locks... of other bytes.
    let (_, lines) = lock_process(&on1, "r 0 10;w 120 10;r 300 10", false);
    assert_eq!(lines, ["busy", "busy", "ok"]);
    // Upgrade and split within one owner: read [200, 300), then write the
    // middle; others may still read the ends but not the middle.
    assert_eq!(fcntl_lock(&f, libc::F_RDLCK, 200, 100, false), "ok");
    assert_eq!(fcntl_lock(&f, libc::F_WRLCK, 240, 20, false), "ok");
    let (_, lines) = lock_process(&on1, "r 200 10;r 245 1;r 290 10;w 290 10", false);
    assert_eq!(lines, ["ok", "busy", "ok", "busy"]);
    // Unlocking a part splits the lock: [100, 150) freed, [150, 200) kept.
    assert_eq!(fcntl_lock(&f, libc::F_UNLCK, 100, 50, false), "ok");
    let (_, lines) = lock_process(&on1, "w 100 50;w 150 1", false);
    assert_eq!(lines, ["ok", "busy"]);
    // A holder that dies loses its locks (the kernel closes its files).
    a.kill().unwrap();
    a.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while fcntl_lock(&f, libc::F_WRLCK, 0, 100, false) != "ok" {
        assert!(Instant::now() < deadline, "the dead holder's lock was not released");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Closing any descriptor of the file drops this process's locks.
    let g = fs::File::open(&on2).unwrap();
    drop(g);
    let (_, lines) = lock_process(&on1, "w 0 300", false);
    assert_eq!(lines, ["ok"]);
    drop(f);
    m1.unmount();
    m2.unmount();
}

/// A record lock held through a restart of the lock service (the
/// metadata server, killed and started again) is taken back by its mount:
/// after the grace, another mount is still refused the bytes; once the
/// holder dies they are free.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn a_record_lock_outlives_a_restart_of_the_lock_service() {
    // As in atomic.rs: the restart must be over within the lease less a
    // renewal period.
    let ttl = Duration::from_millis(4_000);
    let spec = weft_launch::ClusterSpec { data_servers: 1, lock_ttl_ms: ttl.as_millis() as u64, ..weft_launch::ClusterSpec::default() };
    let mut tc = TestCluster::start_spec("fuse-reclaim", spec);
    let (m1, m2) = (Mount::new(&tc, "mnt1"), Mount::new(&tc, "mnt2"));
    fs::write(m1.point.join("db"), vec![0u8; 4096]).unwrap();
    let (a, lines) = lock_process(&m1.point.join("db"), "w 0 100", true);
    assert_eq!(lines, ["ok", "holding"]);
    let mut a = a.unwrap();
    tc.lc.restart(0).unwrap();
    // Past the grace (during it every try-lock is refused anyway).
    std::thread::sleep(ttl * 2);
    let f = OpenOptions::new().read(true).write(true).open(m2.point.join("db")).unwrap();
    assert_eq!(fcntl_lock(&f, libc::F_WRLCK, 50, 10, false), "busy", "another mount took bytes locked before the restart");
    assert_eq!(fcntl_lock(&f, libc::F_WRLCK, 100, 10, false), "ok");
    a.kill().unwrap();
    a.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while fcntl_lock(&f, libc::F_WRLCK, 0, 100, false) != "ok" {
        assert!(Instant::now() < deadline, "the dead holder's reclaimed lock was not released");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(f);
    m1.unmount();
    m2.unmount();
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn a_killed_background_mount_is_cleared_by_umount_and_a_dead_server_is_an_error() {
    use std::os::unix::fs::OpenOptionsExt;
    let tc = TestCluster::start("fuse-daemon", 2);
    let point = tc.scratch("mnt");
    fs::create_dir_all(&point).unwrap();
    let mount = || {
        let out = Command::new(weft()).arg("--cluster").arg(tc.lc.cluster_file()).args(["mount", "--daemon"]).arg(&point).env("WEFT_TIMEOUT_MS", "3000").env("WEFT_RECOVERY_MS", "2000").output().unwrap();
        assert!(out.status.success(), "weft mount --daemon: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let pid: i32 = text.split("(pid ").nth(1).and_then(|r| r.split(',').next()).and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no pid in {text:?}"));
        assert!(mounted(&point), "--daemon returned before the mount was there");
        pid
    };
    let pid = mount();
    fs::write(point.join("f"), b"survives the mount").unwrap();
    // SIGKILL: the kernel is left with a mount nobody serves.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "the mount process did not die");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The kernel answers for a mount whose server is gone.
    let dead = fs::metadata(point.join("f")).unwrap_err().raw_os_error();
    assert!(matches!(dead, Some(libc::ENOTCONN | libc::ECONNABORTED)), "{dead:?}");
    let st = Command::new(weft()).arg("umount").arg(&point).status().unwrap();
    assert!(st.success() && !mounted(&point), "weft umount did not clear the dead mount");
    let pid = mount();
    assert_eq!(fs::read(point.join("f")).unwrap(), b"survives the mount");
    // Every data server gone: reads fail with an error in bounded time, and
    // a write answered before it reached them fails the fsync and the close.
    let mut w = OpenOptions::new().write(true).open(point.join("f")).unwrap();
    let mut tc = tc;
    tc.lc.kill(1);
    tc.lc.kill(2);
    let t0 = Instant::now();
    // Answered once queued: its failure comes back at a later write of the
    // file or, at the latest, at close; never lost silently.
    match w.write_all(&[7u8; 100_000]) {
        Err(e) => {
            assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
            // Closed now: an open file would keep a detached mount (and
            // its process) alive after the umount below.
            drop(w);
        }
        Ok(()) => {
            let fd = std::os::fd::IntoRawFd::into_raw_fd(w);
            // SAFETY: `fd` is ours; closed once.
            let rc = unsafe { libc::close(fd) };
            let closed = std::io::Error::last_os_error();
            assert_eq!((rc, closed.raw_os_error()), (-1, Some(libc::EIO)), "close after a write no server took");
        }
    }
    let r = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(point.join("f")).and_then(|mut f| {
        let mut b = Vec::new();
        f.read_to_end(&mut b).map(|_| b)
    });
    let e = r.expect_err("a read with every data server down succeeded");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(15), "the error took {:?}", t0.elapsed());
    let st = Command::new(weft()).arg("umount").arg(&point).status().unwrap();
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "the mount process did not end after umount");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Is process `pid` running (a zombie nobody reaped yet counts as ended)?
fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
}

/// O_APPEND writers in several processes' worth of descriptors, on two
/// mounts, at once: every record lands whole, none over another.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn appends_from_two_mounts_at_once_lose_no_record() {
    const RECORDS: usize = 150;
    const LEN: usize = 1000;
    let tc = TestCluster::start("fuse-append", 2);
    let (m1, m2) = (Mount::new(&tc, "mnt1"), Mount::new(&tc, "mnt2"));
    fs::write(m1.point.join("log"), b"").unwrap();
    std::thread::scope(|s| {
        for (w, point) in [(0, &m1.point), (1, &m1.point), (2, &m2.point)] {
            s.spawn(move || {
                let mut f = OpenOptions::new().append(true).open(point.join("log")).unwrap();
                for i in 0..RECORDS {
                    let rec = format!("{w}:{i:>width$}\n", width = LEN - 3);
                    assert_eq!(rec.len(), LEN);
                    f.write_all(rec.as_bytes()).unwrap();
                }
            });
        }
    });
    let log = fs::read(m2.point.join("log")).unwrap();
    assert_eq!(log.len(), 3 * RECORDS * LEN, "records were lost or overwritten");
    let mut seen: Vec<String> = log.chunks(LEN).map(|r| String::from_utf8_lossy(r).into_owned()).collect();
    seen.sort();
    let mut want: Vec<String> = (0..3).flat_map(|w| (0..RECORDS).map(move |i| format!("{w}:{i:>width$}\n", width = LEN - 3))).collect();
    want.sort();
    assert!(seen == want, "torn or duplicated records");
    m1.unmount();
    m2.unmount();
}

/// Processes waiting in F_SETLKW (more than the mount has request threads)
/// do not stop the mount: other requests are served, and the waiters get
/// the lock once it is free.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn waiting_lockers_do_not_stop_the_mount() {
    let tc = TestCluster::start("fuse-lockwait", 2);
    let (m1, m2) = (Mount::new(&tc, "mnt1"), Mount::new(&tc, "mnt2"));
    fs::write(m1.point.join("db"), vec![0u8; 64]).unwrap();
    let held = OpenOptions::new().read(true).write(true).open(m2.point.join("db")).unwrap();
    assert_eq!(fcntl_lock(&held, libc::F_WRLCK, 0, 10, false), "ok");
    // Six waiters, each on its own 1-byte range inside the held one; the
    // mount has four request threads.
    let waiters: Vec<_> = (0..6)
        .map(|k| {
            let file = m1.point.join("db");
            std::thread::spawn(move || lock_process(&file, &format!("W {k} 1"), false).1)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // On a thread, so a mount that stalls fails the test instead of hanging it.
    let other = m1.point.join("other");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        fs::write(&other, b"served").unwrap();
        let _ = tx.send(fs::read(&other).unwrap());
    });
    let served = rx.recv_timeout(Duration::from_secs(10)).expect("the mount stalled behind waiting lockers");
    assert_eq!(served, b"served");
    drop(held);
    for w in waiters {
        assert_eq!(w.join().unwrap(), ["ok"]);
    }
    m1.unmount();
    m2.unmount();
}

/// flock(1) on two mounts: exclusive against exclusive, shared with
/// shared, and released when the holder dies.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn flock_excludes_across_mounts() {
    use std::io::BufRead;
    let tc = TestCluster::start("fuse-flock", 2);
    let (m1, m2) = (Mount::new(&tc, "mnt1"), Mount::new(&tc, "mnt2"));
    fs::write(m1.point.join("f"), b"x").unwrap();
    let try_lock = |point: &Path, mode: &str| Command::new("flock").args([mode, "-n"]).arg(point.join("f")).args(["-c", "true"]).status().unwrap().success();
    // In a process group of its own, so the whole group can be killed.
    let mut holder = Command::new("flock");
    holder.arg("-x").arg(m1.point.join("f")).args(["-c", "echo held; sleep 60"]).stdout(std::process::Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut holder, 0);
    let mut holder = holder.spawn().unwrap();
    let mut out = std::io::BufReader::new(holder.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "held\n");
    assert!(!try_lock(&m2.point, "-x"), "an exclusive flock on another mount was granted");
    assert!(!try_lock(&m2.point, "-s"), "a shared flock beside an exclusive one was granted");
    // The holder dies (flock, sh and sleep): its lock goes.
    // SAFETY: a plain signal to the process group we made.
    unsafe { libc::kill(-(holder.id() as i32), libc::SIGKILL) };
    let _ = holder.kill();
    holder.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !try_lock(&m2.point, "-x") {
        assert!(Instant::now() < deadline, "the dead holder's flock was not released");
        std::thread::sleep(Duration::from_millis(50));
    }
    m1.unmount();
    m2.unmount();
}

/// Issue 25, item 5: programs using the mount see no error while a data
/// server and then the metadata server are killed with -9 and started
/// again: files written, read back, renamed and listed through the mount
/// meanwhile are all there with the right bytes. (Each change durable
/// before its answer, `meta_sync_window_ms = 0`: a kill within a window
/// may otherwise lose the window's changes, as a crash of a local file
/// system loses its journal's last commit.)
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn the_mount_rides_through_server_restarts() {
    let mut tc = TestCluster::start_spec("fuse-ride", weft_launch::ClusterSpec { data_servers: 2, meta_sync_window_ms: 0, ..weft_launch::ClusterSpec::default() });
    let m = Mount::new(&tc, "mnt");
    let root = m.point.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let body = |i: usize| weft_testkit::pattern(i as u64, 100_000 + i);
    let worker = {
        let (root, stop) = (root.clone(), stop.clone());
        std::thread::spawn(move || -> Result<usize, String> {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 10_000 {
                let dir = root.join(format!("d{}", i / 20));
                if i % 20 == 0 {
                    fs::create_dir(&dir).map_err(|e| format!("mkdir {i}: {e}"))?;
                }
                let f = dir.join(format!("f{i}"));
                fs::write(&f, body(i)).map_err(|e| format!("write {i}: {e}"))?;
                if i > 0 {
                    let prev = root.join(format!("d{}", (i - 1) / 20)).join(format!("g{}", i - 1));
                    let back = fs::read(&prev).map_err(|e| format!("read {}: {e}", i - 1))?;
                    if back != body(i - 1) {
                        return Err(format!("file {} read back different", i - 1));
                    }
                }
                fs::rename(&f, dir.join(format!("g{i}"))).map_err(|e| format!("rename {i}: {e}"))?;
                fs::read_dir(&dir).map_err(|e| format!("list {i}: {e}"))?.count();
                i += 1;
            }
            Ok(i)
        })
    };
    tc.kill_and_restart(&[1, 0], Duration::from_millis(700), Duration::from_millis(1_000));
    std::thread::sleep(Duration::from_millis(700));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let files = worker.join().unwrap().unwrap_or_else(|e| panic!("a program on the mount saw a restart: {e}"));
    assert!(files > 20, "the workload went on: {files} files");
    for i in 0..files {
        let g = root.join(format!("d{}", i / 20)).join(format!("g{i}"));
        assert!(fs::read(&g).unwrap() == body(i), "file {i} after the restarts differs");
    }
    drop(m);
}
