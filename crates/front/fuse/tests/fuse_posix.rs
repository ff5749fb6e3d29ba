//! POSIX cases a conformance suite checks, on the mount and on a local
//! directory side by side: the same steps must observe the same errors,
//! sizes, modes, link counts and time changes. Errors: a 256-byte name
//! (ENAMETOOLONG), a path past PATH_MAX reached by relative names (works),
//! a trailing slash on a file (ENOTDIR), a file past the largest size
//! (EFBIG). A write by a non-owner drops setuid/setgid; truncates and
//! entries added or removed move times at once; a directory's link count
//! is 2 + its subdirectories; files closed then unlinked at once leave no
//! hidden name behind. Needs root and /dev/fuse (CI runs as root).

use weft_testkit::mount::Mount;
use weft_testkit::TestCluster;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

/// The errno's name of a result, or "ok".
fn said<T>(r: std::io::Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => match e.raw_os_error() {
            Some(libc::ENAMETOOLONG) => "ENAMETOOLONG".into(),
            Some(libc::ENOTDIR) => "ENOTDIR".into(),
            Some(libc::EISDIR) => "EISDIR".into(),
            Some(libc::EFBIG) => "EFBIG".into(),
            Some(libc::ENOENT) => "ENOENT".into(),
            Some(libc::EINVAL) => "EINVAL".into(),
            Some(libc::EPERM) => "EPERM".into(),
            Some(libc::EACCES) => "EACCES".into(),
            Some(libc::EIO) => "EIO".into(),
            other => format!("errno {other:?}"),
        },
    }
}

fn mtime(p: &Path) -> (i64, i64) {
    let m = fs::symlink_metadata(p).unwrap();
    (m.mtime(), m.mtime_nsec())
}

const LONG_AGO: u64 = 1_000_000_000;

/// Sets `p`'s times to long ago (so a change shows without waiting).
fn age(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let t = libc::timespec { tv_sec: LONG_AGO as libc::time_t, tv_nsec: 0 };
    // SAFETY: a NUL-terminated path and two valid timespecs.
    assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) }, 0, "utimensat {}", p.display());
}

fn moved(p: &Path) -> bool {
    mtime(p) != (LONG_AGO as i64, 0)
}

/// Makes `depth` nested directories of 250-byte names under `root` by
/// names relative to each directory (openat/mkdirat), then a file at the
/// bottom; returns what was observed and the full path's length.
fn deep(root: &Path, depth: usize) -> (Vec<String>, usize) {
    let name = CString::new("d".repeat(250)).unwrap();
    let c = CString::new(root.as_os_str().as_bytes()).unwrap();
    // SAFETY: plain syscalls on NUL-terminated names and descriptors this
    // function opened and closes.
    unsafe {
        let mut dir = libc::open(c.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY);
        assert!(dir >= 0);
        let mut seen = Vec::new();
        for level in 0..depth {
            if libc::mkdirat(dir, name.as_ptr(), 0o755) != 0 {
                seen.push(format!("mkdir at level {level}: {}", said::<()>(Err(std::io::Error::last_os_error()))));
                break;
            }
            let next = libc::openat(dir, name.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY);
            libc::close(dir);
            assert!(next >= 0, "openat at level {level}: {}", std::io::Error::last_os_error());
            dir = next;
        }
        let f = CString::new("bottom").unwrap();
        let fd = libc::openat(dir, f.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o644);
        seen.push(format!("create at the bottom: {}", if fd >= 0 { "ok".into() } else { said::<()>(Err(std::io::Error::last_os_error())) }));
        if fd >= 0 {
            let file = <File as std::os::fd::FromRawFd>::from_raw_fd(fd);
            file.write_all_at(b"deep bytes", 0).unwrap();
            let mut buf = [0u8; 10];
            file.read_exact_at(&mut buf, 0).unwrap();
            seen.push(format!("read back: {:?}", String::from_utf8_lossy(&buf)));
        }
        libc::close(dir);
        (seen, root.as_os_str().len() + depth * 251 + 7)
    }
}

/// Runs `script` in `dir` as uid/gid 1001.
fn as_user(dir: &Path, script: &str) -> String {
    let out = Command::new("setpriv").args(["--reuid=1001", "--regid=1001", "--clear-groups", "sh", "-c", script]).current_dir(dir).output().unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr).lines().count())
}

/// One change of a directory, by name.
type Step<'a> = Box<dyn Fn() + 'a>;

/// The steps, on `root`; returns what was observed, in order.
fn exercise(root: &Path) -> Vec<String> {
    let p = |n: &str| root.join(n);
    let mut seen = Vec::new();
    fs::write(p("file"), b"x").unwrap();
    // Names and paths.
    let long = "n".repeat(256);
    seen.push(format!("create 256-byte name: {}", said(File::create(p(&long)))));
    seen.push(format!("mkdir 256-byte name: {}", said(fs::create_dir(p(&long)))));
    seen.push(format!("stat 256-byte name: {}", said(fs::metadata(p(&long)))));
    seen.push(format!("255-byte name: {}", said(File::create(p(&"n".repeat(255))))));
    seen.push(format!("open file/: {}", said(File::open(p("file/")))));
    seen.push(format!("stat file/: {}", said(fs::metadata(p("file/")))));
    seen.push(format!("create new/: {}", said(File::create(p("new/")))));
    seen.push(format!("rename to file2/: {}", said(fs::rename(p("file"), p("file2/")))));
    seen.push(format!("unlink file/: {}", said(fs::remove_file(p("file/")))));
    seen.push(format!("mkdir file/x: {}", said(fs::create_dir(p("file/x")))));
    fs::create_dir(p("deep")).unwrap();
    let (d, len) = deep(&p("deep"), 20);
    assert!(len > 4096, "the deep path must pass PATH_MAX");
    seen.extend(d);
    // Truncate moves the times at once, and so does O_TRUNC.
    let f = OpenOptions::new().read(true).write(true).open(p("file")).unwrap();
    age(&p("file"));
    f.set_len(5000).unwrap();
    seen.push(format!("ftruncate up: size {}, times moved {}", f.metadata().unwrap().len(), moved(&p("file"))));
    age(&p("file"));
    f.set_len(10).unwrap();
    seen.push(format!("ftruncate down: size {}, times moved {}", fs::metadata(p("file")).unwrap().len(), moved(&p("file"))));
    drop(f);
    age(&p("file"));
    drop(OpenOptions::new().write(true).truncate(true).open(p("file")).unwrap());
    seen.push(format!("O_TRUNC: size {}, times moved {}", fs::metadata(p("file")).unwrap().len(), moved(&p("file"))));
    // Directories: times move when entries come and go; link counts.
    fs::create_dir(p("dir")).unwrap();
    let nlink = |n: &str| fs::metadata(p(n)).unwrap().nlink();
    seen.push(format!("new directory: nlink {}", nlink("dir")));
    let steps: [(&str, Step); 7] = [
        ("create", Box::new(|| drop(File::create(p("dir/f")).unwrap()))),
        ("mkdir", Box::new(|| fs::create_dir(p("dir/sub")).unwrap())),
        ("mkdir again", Box::new(|| fs::create_dir(p("dir/sub2")).unwrap())),
        ("rename within", Box::new(|| fs::rename(p("dir/f"), p("dir/g")).unwrap())),
        ("rename a directory away", Box::new(|| fs::rename(p("dir/sub2"), p("sub2")).unwrap())),
        ("unlink", Box::new(|| fs::remove_file(p("dir/g")).unwrap())),
        ("rmdir", Box::new(|| fs::remove_dir(p("dir/sub")).unwrap())),
    ];
    for (what, step) in steps {
        age(&p("dir"));
        step();
        seen.push(format!("{what}: directory times moved {}, nlink {} (parent {})", moved(&p("dir")), nlink("dir"), nlink(".")));
    }
    // A write by another user who may write drops setuid and setgid.
    fs::write(p("suid"), b"").unwrap();
    fs::set_permissions(p("suid"), fs::Permissions::from_mode(0o6777)).unwrap();
    fs::set_permissions(root, fs::Permissions::from_mode(0o777)).unwrap();
    seen.push(format!("write by uid 1001: errors {}", as_user(root, "echo appended >> suid")));
    let m = fs::metadata(p("suid")).unwrap();
    seen.push(format!("after: mode {:o}, size {}", m.mode() & 0o7777, m.len()));
    seen.push(format!("chmod by uid 1001: errors {}", as_user(root, "chmod 0777 suid")));
    // The same through the page cache (not an append).
    fs::write(p("suid2"), b"0123456789").unwrap();
    fs::set_permissions(p("suid2"), fs::Permissions::from_mode(0o6777)).unwrap();
    seen.push(format!("overwrite by uid 1001: errors {}", as_user(root, "printf abc 1<> suid2")));
    let m = fs::metadata(p("suid2")).unwrap();
    seen.push(format!("after: mode {:o}, bytes {:?}", m.mode() & 0o7777, fs::read_to_string(p("suid2")).unwrap()));
    // A truncate by another user who may write (ftruncate, and O_TRUNC)
    // drops them too; a chown drops setuid (and setgid with group
    // execute) even to the owner it has, also by root.
    for (name, how) in [("suid3", "truncate -s 2 suid3"), ("suid4", ": > suid4")] {
        fs::write(p(name), b"0123456789").unwrap();
        fs::set_permissions(p(name), fs::Permissions::from_mode(0o6777)).unwrap();
        seen.push(format!("{how} by uid 1001: errors {}", as_user(root, how)));
        let m = fs::metadata(p(name)).unwrap();
        seen.push(format!("after: mode {:o}, size {}", m.mode() & 0o7777, m.len()));
    }
    for mode in [0o6755, 0o6745] {
        fs::write(p("suid5"), b"x").unwrap();
        fs::set_permissions(p("suid5"), fs::Permissions::from_mode(mode)).unwrap();
        let (uid, gid) = (fs::metadata(p("suid5")).unwrap().uid(), fs::metadata(p("suid5")).unwrap().gid());
        std::os::unix::fs::chown(p("suid5"), Some(uid), Some(gid)).unwrap();
        seen.push(format!("chown {mode:o} to its own owner by root: mode {:o}", fs::metadata(p("suid5")).unwrap().mode() & 0o7777));
    }
    // A chown that keeps owner and group (-1, -1) drops setuid too.
    fs::write(p("suid6"), b"x").unwrap();
    fs::set_permissions(p("suid6"), fs::Permissions::from_mode(0o6755)).unwrap();
    std::os::unix::fs::chown(p("suid6"), None, None).unwrap();
    seen.push(format!("chown -1 -1 by root: mode {:o}", fs::metadata(p("suid6")).unwrap().mode() & 0o7777));
    // A directory's setgid stays.
    fs::create_dir(p("sgid-dir")).unwrap();
    fs::set_permissions(p("sgid-dir"), fs::Permissions::from_mode(0o2775)).unwrap();
    std::os::unix::fs::chown(p("sgid-dir"), None, None).unwrap();
    seen.push(format!("chown -1 -1 of a setgid directory: mode {:o}", fs::metadata(p("sgid-dir")).unwrap().mode() & 0o7777));
    // A write and then two truncates through one descriptor, by another
    // user: the first drops setuid; the truncates find it gone.
    fs::write(p("suid7"), b"0123456789").unwrap();
    fs::set_permissions(p("suid7"), fs::Permissions::from_mode(0o4777)).unwrap();
    let script = r#"perl -e 'open(F, "+<", "suid7") or die "open $!"; syswrite(F, "abc") or die "write $!"; truncate(F, 2) or die "t1 $!"; truncate(F, 1) or die "t2 $!"'"#;
    seen.push(format!("write and two ftruncates by uid 1001: {}", as_user(root, script)));
    let m = fs::metadata(p("suid7")).unwrap();
    seen.push(format!("after: mode {:o}, size {}", m.mode() & 0o7777, m.len()));
    // Setgid without group execute (Linux 6.2 on): a write by someone
    // outside the file's group drops it; by a member it stays.
    for (name, gid) in [("sgid-other", 0), ("sgid-member", 1001)] {
        fs::write(p(name), b"0123456789").unwrap();
        std::os::unix::fs::chown(p(name), None, Some(gid)).unwrap();
        fs::set_permissions(p(name), fs::Permissions::from_mode(0o2666)).unwrap();
        seen.push(format!("write to a 2666 file of group {gid} by uid/gid 1001: errors {}", as_user(root, &format!("printf abc 1<> {name}"))));
        seen.push(format!("after: mode {:o}", fs::metadata(p(name)).unwrap().mode() & 0o7777));
    }
    seen.extend(links_and_special_files(root));
    seen
}

/// Hard links, FIFOs and sockets, on `root`.
fn links_and_special_files(root: &Path) -> Vec<String> {
    use std::io::{Read, Write};
    let p = |n: &str| root.join(n);
    let mut seen = Vec::new();
    let nlink = |n: &str| fs::symlink_metadata(p(n)).map(|m| m.nlink());
    fs::write(p("orig"), b"linked bytes").unwrap();
    seen.push(format!("link: {}", said(fs::hard_link(p("orig"), p("second")))));
    seen.push(format!("nlink after link: {:?} {:?}", nlink("orig"), nlink("second")));
    fs::OpenOptions::new().append(true).open(p("second")).unwrap().write_all(b" and more").unwrap();
    seen.push(format!("read through the other name: {:?}", fs::read_to_string(p("orig")).unwrap()));
    seen.push(format!("link over an existing name: {}", said(fs::hard_link(p("orig"), p("second")))));
    seen.push(format!("link a directory: {}", said(fs::hard_link(p("dir"), p("dirlink")))));
    seen.push(format!("link a missing file: {}", said(fs::hard_link(p("missing"), p("x")))));
    fs::create_dir(p("ldir")).unwrap();
    fs::hard_link(p("orig"), p("ldir/third")).unwrap();
    seen.push(format!("three names: {:?}, the directory's links {:?}", nlink("orig"), nlink("ldir")));
    seen.push(format!("rename onto another name of itself: {}", said(fs::rename(p("orig"), p("second")))));
    seen.push(format!("both still there: {:?} {:?}", nlink("orig"), nlink("second")));
    fs::remove_file(p("orig")).unwrap();
    seen.push(format!("after unlink: {:?}, bytes {:?}", nlink("second"), fs::read_to_string(p("ldir/third")).unwrap()));
    fs::write(p("other"), b"replaced").unwrap();
    fs::rename(p("other"), p("second")).unwrap();
    seen.push(format!("renamed over one name: {:?} {:?}, {:?}", nlink("ldir/third"), fs::read_to_string(p("second")).unwrap(), fs::read_to_string(p("ldir/third")).unwrap()));
    fs::remove_file(p("ldir/third")).unwrap();
    fs::remove_dir(p("ldir")).unwrap();
    // A hard-linked file removed by one name while open, then seen by its
    // other name: the last close removes the removed name only.
    fs::write(p("kept"), b"held bytes").unwrap();
    fs::hard_link(p("kept"), p("held")).unwrap();
    let open = File::open(p("held")).unwrap();
    fs::remove_file(p("held")).unwrap();
    // A listing with attributes names the file by its other name.
    let mut listed: Vec<(String, u64)> = fs::read_dir(root).unwrap().map(|e| e.unwrap()).map(|e| (e.file_name().into_string().unwrap(), e.metadata().unwrap().nlink())).collect();
    listed.sort();
    seen.push(format!("listed while one name is open and removed: {listed:?}"));
    drop(open);
    seen.push(format!("after the last close: {:?} {:?}", fs::read_to_string(p("kept")).ok(), nlink("kept")));
    // A FIFO: the kernel makes the pipe; bytes pass through it.
    let fifo = CString::new(p("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    let made = unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) };
    seen.push(format!("mkfifo: {}", if made == 0 { "ok".into() } else { said::<()>(Err(std::io::Error::last_os_error())) }));
    let m = fs::symlink_metadata(p("fifo")).unwrap();
    seen.push(format!("fifo: is a fifo {}, mode {:o}, size {}", std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()), m.mode() & 0o7777, m.len()));
    let writer = std::thread::spawn({
        let path = p("fifo");
        move || fs::OpenOptions::new().write(true).open(path).unwrap().write_all(b"through the pipe").unwrap()
    });
    let mut got = String::new();
    File::open(p("fifo")).unwrap().read_to_string(&mut got).unwrap();
    writer.join().unwrap();
    seen.push(format!("fifo carried {got:?}"));
    seen.push(format!("mkfifo over it: {}", said(if unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) } == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) })));
    fs::remove_file(p("fifo")).unwrap();
    // A Unix socket bound on the mount: connect by its path.
    let sock = p("sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let m = fs::symlink_metadata(&sock).unwrap();
    seen.push(format!("socket: is a socket {}", std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())));
    let mut client = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    client.write_all(b"hello socket").unwrap();
    drop(client);
    let mut got = String::new();
    listener.accept().unwrap().0.read_to_string(&mut got).unwrap();
    seen.push(format!("socket carried {got:?}"));
    fs::remove_file(&sock).unwrap();
    seen
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn posix_cases_match_a_local_directory() {
    let tc = TestCluster::start("fuse-posix", 2);
    let m = Mount::new(&tc, "mnt");
    let local = tc.scratch("local");
    fs::create_dir_all(&local).unwrap();
    let on_weft = exercise(&m.point);
    let on_local = exercise(&local);
    for (w, l) in on_weft.iter().zip(&on_local) {
        assert_eq!(w, l, "mount (left) and local directory (right) differ");
    }
    let hidden: Vec<String> = tc.client().readdir("/").unwrap().into_iter().map(|e| e.name).filter(|n| n.starts_with(".weft-unlinked-")).collect();
    assert!(hidden.is_empty(), "set-aside names left behind: {hidden:?}");
    assert_eq!(on_weft.len(), on_local.len());
    // Past the largest file: EFBIG, and nothing changes (local file
    // systems' limits differ, so this is checked on the mount alone).
    let f = OpenOptions::new().read(true).write(true).open(m.point.join("file")).unwrap();
    assert_eq!(said(f.set_len(i64::MAX as u64)), "EFBIG");
    assert_eq!(said(f.write_at(b"x", 1 << 62)), "EFBIG");
    assert_eq!(f.metadata().unwrap().len(), 0);
    drop(f);
    // Device nodes stay refused (root may make them on a local disk).
    let dev = CString::new(m.point.join("dev").as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    let r = unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) };
    assert_eq!(said(if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }), "EPERM");
    // Within Weft's limit but past the data servers' file system's (ext4
    // keeps 16 TiB): EFBIG too, when the queued write fails (or at once
    // with O_SYNC), never a bare EIO.
    let f = OpenOptions::new().read(true).write(true).open(m.point.join("file")).unwrap();
    let r = f.write_at(b"x", 1 << 50).and_then(|_| f.sync_all());
    assert!(matches!(said(r).as_str(), "ok" | "EFBIG"), "a write past the servers' file size limit");
    drop(f);
    m.unmount();
}

/// Files written, closed and removed at once (the kernel sends their
/// releases after close returns, so each unlink may find the file still
/// open here), then their directory: `rm -rf` must succeed and no hidden
/// name stay behind.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn files_closed_then_removed_at_once_leave_nothing() {
    let tc = TestCluster::start("fuse-unlink", 2);
    let m = Mount::new(&tc, "mnt");
    // Four writers at once, so releases queue behind other requests.
    std::thread::scope(|s| {
        for t in 0..4 {
            let root = &m.point;
            s.spawn(move || {
                for round in 0..3 {
                    let dir = root.join(format!("d{t}-{round}"));
                    fs::create_dir(&dir).unwrap();
                    for k in 0..150 {
                        let p = dir.join(format!("f{k}"));
                        fs::write(&p, weft_testkit::pattern(k, 100)).unwrap();
                        fs::remove_file(&p).unwrap();
                    }
                    fs::remove_dir(&dir).unwrap();
                }
            });
        }
    });
    // Written files removed by rm -rf right away.
    let tree = m.point.join("tree");
    for d in 0..5 {
        fs::create_dir_all(tree.join(format!("d{d}"))).unwrap();
        for k in 0..40 {
            fs::write(tree.join(format!("d{d}/f{k}")), weft_testkit::pattern(k, 3000)).unwrap();
        }
    }
    let st = Command::new("rm").arg("-rf").arg(&tree).status().unwrap();
    assert!(st.success(), "rm -rf failed");
    // Nothing left, hidden names included (asked of the metadata service).
    let left: Vec<String> = tc.client().readdir("/").unwrap().into_iter().map(|e| e.name).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // Their objects too (the metadata service deletes them shortly after).
    m.unmount();
    assert_eq!(weft_testkit::objects_when(&tc.client(), |n| n == 0), 0, "objects of removed files stay on the data servers");
}

/// Attribute changes name the inode, not its path: after another client
/// renames a file open here and puts a new file at its old name, fchmod,
/// fchown, futimens and ftruncate through the open descriptor change the
/// renamed file and leave the new one alone.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn changes_through_a_descriptor_follow_the_file_not_its_old_name() {
    let tc = TestCluster::start("fuse-by-inode", 2);
    let m = Mount::new(&tc, "mnt");
    let c = tc.client();
    fs::write(m.point.join("a"), b"the first file").unwrap();
    let f = OpenOptions::new().read(true).write(true).open(m.point.join("a")).unwrap();
    // Another client moves it away and makes a new "a".
    c.rename("/a", "/b").unwrap();
    let mut newer = c.create("/a", weft_client::CreateOptions { mode: 0o644, exclusive: true, ..Default::default() }).unwrap();
    newer.write_at(0, b"the second file, longer").unwrap();
    newer.close().unwrap();
    newer = c.open("/a", false).unwrap();
    let before = c.stat("/a").unwrap();
    f.set_permissions(fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::fchown(&f, Some(1234), Some(5678)).unwrap();
    f.set_len(3).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(LONG_AGO)).unwrap();
    let (moved, moved_size) = c.stat("/b").unwrap();
    assert_eq!((moved.mode & 0o7777, moved.uid, moved.gid, moved.mtime_ns, moved_size), (0o600, 1234, 5678, LONG_AGO as i64 * 1_000_000_000, 3), "the file open here changed");
    let after = c.stat("/a").unwrap();
    assert_eq!((after.0.mode, after.0.uid, after.0.gid, after.0.mtime_ns, after.1), (before.0.mode, before.0.uid, before.0.gid, before.0.mtime_ns, before.1), "the new file at the old name is untouched");
    drop(newer);
    drop(f);
    m.unmount();
}

/// Under the kernel's writeback cache (`--writeback-cache`) the kernel
/// writes a file's pages back through the handle of it opened last, not
/// the one that wrote them: a queued write that fails is reported to
/// every handle of the file open then, so the fsync of the handle that
/// wrote fails (as the kernel reports a file's writeback errors to each
/// open file; reported to the handle it went through alone, it did not),
/// and so does the other handle's close; an O_DIRECT|O_SYNC write fails
/// itself. The failure: bytes past what the data servers' file system
/// keeps (ext4: 16 TiB; elsewhere the test has nothing to fail and says
/// so).
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn a_failed_write_back_is_reported_to_the_handle_that_wrote_under_the_writeback_cache() {
    let tc = TestCluster::start("fuse-wbc-errors", 2);
    // Only where the data servers' file system refuses such bytes.
    let c = tc.client();
    let probe = c.create("/probe", Default::default()).unwrap();
    if probe.write_at(1 << 50, b"x").is_ok() {
        eprintln!("the data servers' file system keeps bytes at 2^50: nothing to fail here");
        return;
    }
    let m = Mount::with_args(&tc, "mnt", &["--writeback-cache"]);
    fs::write(m.point.join("file"), b"start").unwrap();
    let writer = OpenOptions::new().read(true).write(true).open(m.point.join("file")).unwrap();
    let other = OpenOptions::new().write(true).open(m.point.join("file")).unwrap();
    writer.write_all_at(b"x", 1 << 50).unwrap();
    let synced = writer.sync_all();
    assert_ne!(said(synced), "ok", "the fsync of the handle that wrote missed its failed write-back");
    // SAFETY: closes a descriptor this test owns, once (into_raw_fd).
    let closed = unsafe { libc::close(std::os::fd::IntoRawFd::into_raw_fd(other)) };
    assert_eq!(closed, -1, "the other handle's close missed the failed write-back");
    drop(writer);
    // Direct I/O bypasses the kernel's cache and its fsync: O_SYNC there
    // still writes through, so the write itself fails.
    use std::os::unix::fs::OpenOptionsExt;
    let direct = OpenOptions::new().write(true).custom_flags(libc::O_DIRECT | libc::O_SYNC).open(m.point.join("file")).unwrap();
    assert_eq!(said(direct.write_at(&[7u8; 4096], 1 << 50)), "EFBIG", "an O_DIRECT|O_SYNC write was answered before it was written");
    drop(direct);
    m.unmount();
}
