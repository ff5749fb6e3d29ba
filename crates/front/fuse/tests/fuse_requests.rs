//! What the mount asks the metadata service per system call, counted by
//! the server itself: each round trip is most of what a small-file
//! operation costs through the mount (issue 21: `tar xf` sets the times,
//! owner and mode of every file it writes). Needs root and /dev/fuse
//! (CI runs as root).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use weft_testkit::mount::Mount;
use weft_testkit::{meta_quiet, meta_requests, TestCluster};

/// One test at a time: a process another test starts (`weft mount`,
/// `weft umount`) inherits this one's descriptors until its exec closes
/// them, and each such close is a close of the file (a flush).
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// chmod, utimens and chown of a file closed earlier each take one
/// request: the change, answered with the size the service knows, and no
/// stat after it; nor one before a chown (the kernel's refresh of the
/// mode to drop setuid itself, which the mount takes over:
/// `FUSE_HANDLE_KILLPRIV`).
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn an_attribute_change_of_a_closed_file_is_one_request() {
    let _alone = alone();
    let tc = TestCluster::start("fuse-requests", 2);
    let m = Mount::new(&tc, "mnt");
    let c = tc.client();
    let file = m.point.join("f");
    fs::write(&file, vec![7u8; 5000]).unwrap();
    // Looked up and closed everywhere before counting.
    assert_eq!(fs::metadata(&file).unwrap().len(), 5000);
    let cost = |what: &str, want: u64, change: &dyn Fn()| {
        let before = meta_quiet(&c);
        change();
        let after = meta_requests(&c);
        // The status request that read `after` counts itself.
        let n = after - before - 1;
        assert_eq!(n, want, "{what} asked the metadata service {n} times");
    };
    cost("chmod", 1, &|| fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap());
    cost("utimens", 1, &|| {
        let path = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
        let times = [libc::timespec { tv_sec: 1_000_000_000, tv_nsec: 0 }; 2];
        // SAFETY: a NUL-terminated path and two timespecs, as utimensat(2) takes.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) };
        assert_eq!(rc, 0, "utimensat: {}", std::io::Error::last_os_error());
    });
    cost("chown", 1, &|| std::os::unix::fs::chown(&file, Some(0), Some(0)).unwrap());
    let md = fs::metadata(&file).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((md.len(), md.permissions().mode() & 0o7777, md.mtime()), (5000, 0o600, 1_000_000_000), "the size, mode and time as changed");
    m.unmount();
}

/// This test alone in the process (`ALONE`), under the usual umask (022):
/// the tests expect the modes new files get under it.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    let guard = ALONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // SAFETY: umask(2) has no failure and touches no memory.
    #[allow(unsafe_code)]
    unsafe {
        libc::umask(0o022);
    }
    guard
}

/// What a file's metadata says, to compare a local file's with the
/// mount's and the metadata service's: mode, owner, group, mtime (ns).
type Attrs = (u32, u32, u32, i64);

fn local_attrs(f: &fs::File) -> Attrs {
    use std::os::unix::fs::MetadataExt;
    let md = f.metadata().unwrap();
    (md.mode() & 0o7777, md.uid(), md.gid(), md.mtime() * 1_000_000_000 + md.mtime_nsec())
}

/// `futimens(fd, {omit, mtime_s})`, as tar sets a file's time.
fn set_mtime(f: &fs::File, mtime_s: i64) {
    use std::os::fd::AsRawFd;
    let times = [libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT }, libc::timespec { tv_sec: mtime_s, tv_nsec: 0 }];
    // SAFETY: an open descriptor and two timespecs, as futimens(3) takes.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::futimens(f.as_raw_fd(), times.as_ptr()) };
    assert_eq!(rc, 0, "futimens: {}", std::io::Error::last_os_error());
}

/// tar sets the time, owner and mode of each file it writes, before its
/// close: for a file made here and still open the mount holds them
/// (`held_attrs`) and sends them as one request at the close. In the
/// orders that matter (a chown drops setuid, and setgid with group
/// execute), the mount and then the metadata service end up where a
/// local file does; this node sees the changes at once, even once the
/// kernel asks the mount again; another client sees them when the first
/// close returns (a duplicate descriptor still open: no release yet).
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn attribute_changes_of_a_file_made_here_go_with_its_close() {
    use std::os::unix::fs::{fchown, FileExt, MetadataExt, OpenOptionsExt};
    let _alone = alone();
    let tc = TestCluster::start("fuse-held-attrs", 2);
    let m = Mount::new(&tc, "mnt");
    let c = tc.client();
    let local = tc.scratch("local");
    fs::create_dir_all(&local).unwrap();
    type Step = fn(&fs::File);
    let orders: [(&str, [Step; 3]); 2] = [
        // tar's: the owner, then the mode, which keeps its setuid.
        ("tar", [|f| set_mtime(f, 1_000_000_000), |f| fchown(f, Some(1234), Some(1234)).unwrap(), |f| f.set_permissions(fs::Permissions::from_mode(0o4755)).unwrap()]),
        // The mode first: the chown then drops setuid and setgid.
        ("chown last", [|f| f.set_permissions(fs::Permissions::from_mode(0o6755)).unwrap(), |f| set_mtime(f, 1_200_000_000), |f| fchown(f, Some(4321), None).unwrap()]),
    ];
    for (i, (what, steps)) in orders.iter().enumerate() {
        let name = format!("f{i}");
        // Made as tar makes each file: private until its mode is set.
        let make = |path: std::path::PathBuf| fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).unwrap();
        let want = {
            let f = make(local.join(&name));
            f.write_all_at(b"tar's bytes", 0).unwrap();
            steps.iter().for_each(|s| s(&f));
            local_attrs(&f)
        };
        let f = make(m.point.join(&name));
        f.write_all_at(b"tar's bytes", 0).unwrap();
        let before = meta_quiet(&c);
        steps.iter().for_each(|s| s(&f));
        let n = meta_requests(&c) - before - 1;
        assert_eq!(n, 0, "{what}: the changes of a file made here and open asked the metadata service {n} times");
        assert_eq!(local_attrs(&f), want, "{what}: this node sees the changes at once");
        // Past the kernel's attribute time: it asks the mount, which
        // answers with the changes it holds.
        std::thread::sleep(std::time::Duration::from_millis(1200));
        let md = fs::metadata(m.point.join(&name)).unwrap();
        assert_eq!((md.mode() & 0o7777, md.uid(), md.gid(), md.mtime() * 1_000_000_000 + md.mtime_nsec()), want, "{what}: a stat by name after the attribute time");
        let kept = f.try_clone().unwrap();
        let before = meta_quiet(&c);
        drop(f);
        let n = meta_requests(&c) - before - 1;
        assert_eq!(n, 1, "{what}: the close sent the changes in {n} requests");
        let (a, _) = c.stat(&format!("/{name}")).unwrap();
        assert_eq!((a.mode & 0o7777, a.uid, a.gid, a.mtime_ns), want, "{what}: another client, after the first close");
        drop(kept);
    }
    // Closing a new file to others is never held: another client sees it
    // before the chmod returns.
    let f = fs::File::create_new(m.point.join("private")).unwrap();
    let before = meta_quiet(&c);
    f.set_permissions(fs::Permissions::from_mode(0o600)).unwrap();
    let n = meta_requests(&c) - before - 1;
    assert_eq!(n, 1, "a chmod taking rights from others asked the metadata service {n} times");
    assert_eq!(c.stat("/private").unwrap().0.mode & 0o777, 0o600, "another client, before the close");
    drop(f);
    m.unmount();
}

/// Creates in one directory one after another: the kernel asks for the
/// directory's attributes before each (`default_permissions`, and each
/// create makes it drop them); the mount answers from what the metadata
/// service told it moments ago and its own creates since (`dir_attrs`),
/// so each create is one request, and a stat of a file it made and still
/// writes none; likewise unlinks one after another (`rm -rf`), whose
/// answers carry the directory's new time. What it answers is what the
/// service says once asked again: the times of the newest entry or the
/// last removal, a link more for each subdirectory.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn creates_in_a_directory_do_not_each_ask_for_its_attributes() {
    use std::os::unix::fs::MetadataExt;
    let _alone = alone();
    let tc = TestCluster::start("fuse-dir-attrs", 2);
    // Long enough for the counted steps on a busy machine: the new
    // directory's names and kept attributes are trusted this long.
    let trust = std::time::Duration::from_secs(4);
    let m = Mount::with_args(&tc, "mnt", &["--attr-timeout", "4", "--entry-timeout", "4"]);
    let c = tc.client();
    let dir = m.point.join("d");
    fs::create_dir(&dir).unwrap();
    assert!(fs::metadata(&dir).unwrap().is_dir());
    let before = meta_quiet(&c);
    fs::create_dir(dir.join("sub")).unwrap();
    let inner = fs::File::create_new(dir.join("sub").join("inner")).unwrap();
    // Kept open: no close or release is counted.
    let open: Vec<fs::File> = (0..20).map(|i| fs::File::create_new(dir.join(format!("f{i}"))).unwrap()).collect();
    let n = meta_requests(&c) - before - 1;
    assert_eq!(n, 22, "a mkdir, a create below it and 20 creates asked the metadata service {n} times");
    // Written, then stat'ed, as git records each file it checks out: the
    // mount knows a file it made and has open (`held_attrs`).
    let before = meta_quiet(&c);
    for (i, f) in open.iter().enumerate() {
        use std::os::unix::fs::FileExt;
        f.write_all_at(&vec![1u8; i + 1], 0).unwrap();
        let md = f.metadata().unwrap();
        assert_eq!((md.len(), md.mode() & 0o7777, md.nlink()), (i as u64 + 1, 0o644, 1), "f{i} as written");
    }
    let n = meta_requests(&c) - before - 1;
    assert_eq!(n, 0, "stats of 20 files made here and open asked the metadata service {n} times");
    let told = |md: &fs::Metadata| (md.mode(), md.nlink(), md.mtime(), md.mtime_nsec(), md.ctime(), md.ctime_nsec());
    let said = told(&fs::metadata(&dir).unwrap());
    let newest = fs::metadata(dir.join("f19")).unwrap();
    assert_eq!((said.1, said.2, said.3), (3, newest.ctime(), newest.ctime_nsec()), "the directory's link count and time after the creates");
    // Past the attribute time: asked of the service.
    std::thread::sleep(trust + std::time::Duration::from_millis(200));
    assert_eq!(told(&fs::metadata(&dir).unwrap()), said, "the service says what the mount said");
    drop((open, inner));
    // Removed one after another, as `rm -rf` does (listed first, so the
    // kernel knows the names): each unlink's answer says the directory's
    // new time, so its permission check before the next needs no ask.
    meta_quiet(&c);
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 21);
    // The directory's attributes fresh here (kept by the mount as long).
    fs::metadata(&dir).unwrap();
    let before = meta_quiet(&c);
    for i in 0..20 {
        fs::remove_file(dir.join(format!("f{i}"))).unwrap();
    }
    let n = meta_requests(&c) - before - 1;
    assert_eq!(n, 20, "20 unlinks asked the metadata service {n} times");
    let said = told(&fs::metadata(&dir).unwrap());
    std::thread::sleep(trust + std::time::Duration::from_millis(200));
    assert_eq!(told(&fs::metadata(&dir).unwrap()), said, "after the unlinks, the service says what the mount said");
    m.unmount();
}

