//! Everyday tools on a FUSE mount of a real cluster, each checked against
//! what it does on a local directory: tar and cp -a (bytes, modes, times,
//! links), git (init, commit, gc, fsck, clone), sqlite3 with writers on two
//! mounts at once (fcntl locks through the lock service), dd with
//! O_DIRECT, h5py, and fio with verification. Needs root, /dev/fuse and the
//! tools (`scripts/install-deps.sh` installs them).

use weft_testkit::mount::Mount;
use weft_testkit::{pattern, TestCluster};
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, UNIX_EPOCH};

/// Runs `sh -c script` in `dir`; panics with its output if it fails.
fn sh(dir: &Path, script: &str) -> Output {
    let out = Command::new("sh").arg("-c").arg(script).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "`{script}` failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

/// A small source tree: nested directories, files of awkward sizes with
/// their own modes and times, a symbolic link.
fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("src/net/deep")).unwrap();
    fs::create_dir_all(root.join("docs")).unwrap();
    let files = [("README", 0usize, 0o644), ("src/main.rs", 1, 0o600), ("src/net/mod.rs", 4095, 0o640), ("src/net/deep/blob", 70_000, 0o755), ("docs/big", 300_001, 0o444)];
    for (k, (name, len, mode)) in files.iter().enumerate() {
        let p = root.join(name);
        fs::write(&p, pattern(k as u64, *len)).unwrap();
        let f = fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(UNIX_EPOCH + Duration::from_secs(1_500_000_000 + 86_400 * k as u64)).unwrap();
        drop(f);
        fs::set_permissions(&p, fs::Permissions::from_mode(*mode)).unwrap();
    }
    symlink("net/mod.rs", root.join("src/link")).unwrap();
}

/// Every entry under `root`: path, kind, mode, size, mtime (files), bytes
/// (files) or target (links); sorted.
fn snapshot(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let m = fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                out.push(format!("{rel} link -> {}", fs::read_link(&p).unwrap().display()));
            } else if m.is_dir() {
                out.push(format!("{rel} dir {:o}", m.mode() & 0o7777));
                stack.push(p);
            } else {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::hash::Hash::hash(&fs::read(&p).unwrap(), &mut h);
                out.push(format!("{rel} file {:o} {} {} {:x}", m.mode() & 0o7777, m.len(), m.mtime(), std::hash::Hasher::finish(&h)));
            }
        }
    }
    out.sort();
    out
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn tar_and_cp_a_carry_a_tree_there_and_back_unchanged() {
    let tc = TestCluster::start("tools-tar", 3);
    let m = Mount::new(&tc, "mnt");
    let local = tc.scratch("local");
    make_tree(&local.join("src-tree"));
    let want = snapshot(&local.join("src-tree"));
    let on = |p: &str| m.point.join(p);
    fs::create_dir_all(on("untarred")).unwrap();
    fs::create_dir_all(local.join("back")).unwrap();
    sh(&local, &format!("tar -C src-tree -cf - . | tar -C {} -xpf -", on("untarred").display()));
    assert_eq!(snapshot(&on("untarred")), want, "tar onto the mount");
    sh(&local, &format!("tar -C {} -cf - . | tar -C back -xpf -", on("untarred").display()));
    assert_eq!(snapshot(&local.join("back")), want, "tar back from the mount");
    sh(&local, &format!("cp -a src-tree {} && cp -a {} copied-back", on("copied").display(), on("copied").display()));
    assert_eq!(snapshot(&on("copied")), want, "cp -a onto the mount");
    assert_eq!(snapshot(&local.join("copied-back")), want, "cp -a back");
    m.unmount();
}

/// Everyday work on a real source tree (this repository's `crates`, a few
/// hundred files): untar it and read every file back at once, byte for
/// byte; clone it with git (file://) and compare the checkout at once;
/// `rm -rf` both; nothing may be left, hidden names included. Three rounds.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn untar_clone_read_back_at_once_and_rm_rf_leave_nothing() {
    let tc = TestCluster::start("tools-everyday", 4);
    let m = Mount::new(&tc, "mnt");
    let local = tc.scratch("local");
    fs::create_dir_all(&local).unwrap();
    let repo_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..").canonicalize().unwrap();
    sh(&repo_root, &format!("tar -cf {}/tree.tar crates", local.display()));
    sh(&local, "mkdir src && tar -C src -xf tree.tar && cd src && git init -q -b main && git add -A && git -c user.name=t -c user.email=t@example.org commit -q -m tree");
    let want = snapshot(&local.join("src/crates"));
    assert!(want.len() > 100, "the tree has {} entries", want.len());
    for round in 0..3 {
        let untarred = m.point.join(format!("untarred{round}"));
        fs::create_dir(&untarred).unwrap();
        sh(&local, &format!("tar -C {} -xf tree.tar", untarred.display()));
        assert_eq!(snapshot(&untarred.join("crates")), want, "round {round}: the tree read back right after tar xf");
        if round == 1 {
            // The kernel forgets the inodes (FORGET): the mount must find
            // every name again.
            std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
            assert_eq!(snapshot(&untarred.join("crates")), want, "round {round}: read back after the kernel forgot the inodes");
        }
        let cloned = m.point.join(format!("cloned{round}"));
        sh(&local, &format!("git clone -q file://{}/src {}", local.display(), cloned.display()));
        sh(&local, &format!("diff -r src/crates {}/crates", cloned.display()));
        sh(&m.point, &format!("rm -rf {} {}", untarred.display(), cloned.display()));
    }
    let left: Vec<String> = tc.client().readdir("/").unwrap().into_iter().map(|e| e.name).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    m.unmount();
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn git_commits_collects_garbage_and_clones_on_the_mount() {
    let tc = TestCluster::start("tools-git", 2);
    let m = Mount::new(&tc, "mnt");
    let home = tc.scratch("home");
    fs::create_dir_all(&home).unwrap();
    let git = |dir: &Path, args: &str| -> String {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("git {args}"))
            .current_dir(dir)
            .env("HOME", &home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.org")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.org")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let repo = m.point.join("repo");
    git(&m.point, "init -q -b main repo");
    make_tree(&repo);
    git(&repo, "add -A");
    git(&repo, "commit -q -m first");
    fs::write(repo.join("src/main.rs"), b"fn main() {}\n").unwrap();
    fs::remove_file(repo.join("docs/big")).unwrap();
    git(&repo, "commit -q -a -m second");
    git(&repo, "gc -q");
    git(&repo, "fsck --strict --no-progress");
    let clone_dir = tc.scratch("clone");
    git(clone_dir.parent().unwrap(), &format!("clone -q {} {}", repo.display(), clone_dir.display()));
    assert_eq!(git(&clone_dir, "log --format=%s"), "second\nfirst\n");
    assert_eq!(git(&repo, "status --porcelain"), "");
    assert_eq!(fs::read(clone_dir.join("src/main.rs")).unwrap(), b"fn main() {}\n");
    assert_eq!(fs::read_link(clone_dir.join("src/link")).unwrap(), PathBuf::from("net/mod.rs"));
    m.unmount();
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn sqlite_writers_on_two_mounts_lose_nothing() {
    const ROWS: usize = 60;
    let tc = TestCluster::start("tools-sqlite", 2);
    // As NFS asks for `noac` when programs coordinate through one file
    // from several nodes: no cached names or attributes.
    let fresh = ["--entry-timeout", "0", "--attr-timeout", "0"];
    let (m1, m2) = (Mount::with_args(&tc, "mnt1", &fresh), Mount::with_args(&tc, "mnt2", &fresh));
    sh(&m1.point, "sqlite3 db 'PRAGMA journal_mode=DELETE; CREATE TABLE t(w INTEGER, i INTEGER, UNIQUE(w, i));'");
    // Each writer commits one row per transaction, from its own mount; the
    // database's fcntl locks are all that keeps them apart.
    let writer = |point: &Path, w: usize| {
        let sql: String = (0..ROWS).map(|i| format!("INSERT INTO t VALUES({w}, {i});\n")).collect();
        let mut child = Command::new("sqlite3")
            .args(["-bail", "-cmd", ".timeout 60000", "db"])
            .current_dir(point)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        std::thread::spawn(move || std::io::Write::write_all(&mut stdin, sql.as_bytes()).unwrap());
        child
    };
    let (a, b) = (writer(&m1.point, 1), writer(&m2.point, 2));
    for c in [a, b] {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "a writer failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = sh(&m2.point, "sqlite3 db 'PRAGMA integrity_check; SELECT w, count(*) FROM t GROUP BY w;'");
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("ok\n1|{ROWS}\n2|{ROWS}\n"));
    m1.unmount();
    m2.unmount();
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn dd_direct_h5py_and_fio_verify_on_the_mount() {
    let tc = TestCluster::start("tools-io", 4);
    let m = Mount::new(&tc, "mnt");
    let local = tc.scratch("local");
    fs::create_dir_all(&local).unwrap();
    // dd with O_DIRECT, 1 MiB blocks, both ways.
    fs::write(local.join("src"), pattern(7, 9 << 20)).unwrap();
    sh(&local, &format!("dd if=src of={} bs=1M oflag=direct status=none", m.point.join("dd").display()));
    sh(&local, &format!("dd if={} of=back bs=1M iflag=direct status=none", m.point.join("dd").display()));
    assert!(fs::read(local.join("back")).unwrap() == fs::read(local.join("src")).unwrap(), "dd round trip differs");
    // h5py (serial HDF5): a chunked, compressed dataset and an attribute.
    let py = r#"
import sys, numpy as np, h5py
p = sys.argv[1]
a = np.arange(200 * 300, dtype=np.float64).reshape(200, 300) * 0.5
with h5py.File(p, "w") as f:
    d = f.create_dataset("x", data=a, chunks=(50, 60), compression="gzip")
    d.attrs["units"] = "m"
with h5py.File(p, "r") as f:
    assert (f["x"][...] == a).all() and f["x"].attrs["units"] == "m"
print("h5py ok")
"#;
    let out = Command::new("/usr/bin/python3").arg("-c").arg(py).arg(m.point.join("data.h5")).output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("h5py ok"), "h5py: {}", String::from_utf8_lossy(&out.stderr));
    // fio: sequential and random writes by several jobs, every block
    // verified (crc32c) when read back.
    let fio = |rw: &str| {
        sh(&m.point, &format!(
            "fio --name=v --directory=. --rw={rw} --bs=64k --size=4m --numjobs=3 --ioengine=psync --verify=crc32c --do_verify=1 --verify_fatal=1 --group_reporting --output-format=terse >/dev/null"
        ));
    };
    fio("write");
    fio("randwrite");
    m.unmount();
}

/// `ls -l` of a directory gets every entry's attributes with the listing
/// (readdirplus): far fewer metadata requests than a lookup per entry, and
/// the sizes right, including a file a writer still has open (its size is
/// not in the listing: the kernel asks for it).
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn ls_l_gets_attributes_with_the_listing() {
    let tc = TestCluster::start("fuse-ls", 2);
    let c = tc.client();
    c.mkdir("/d", 0o755).unwrap();
    let mut want = std::collections::BTreeMap::new();
    for i in 0..200usize {
        let f = c.create(&format!("/d/f{i}"), Default::default()).unwrap();
        f.write_at(0, &vec![7u8; i * 13]).unwrap();
        f.close().unwrap();
        want.insert(format!("f{i}"), (i * 13) as u64);
    }
    let writing = c.open("/d/f5", true).unwrap();
    writing.write_at(0, &[1u8; 99_999]).unwrap();
    want.insert("f5".into(), 99_999);
    let m = Mount::new(&tc, "m");
    let meta = || -> u64 { c.status().into_iter().filter_map(|s| s.stats.ok()).filter(|s| s.services & 1 != 0).map(|s| s.requests).sum() };
    let before = meta();
    let out = Command::new("ls").args(["-l", "--time-style=+"]).arg(m.point.join("d")).output().unwrap();
    let used = meta() - before - 1;
    assert!(out.status.success(), "ls -l: {}", String::from_utf8_lossy(&out.stderr));
    let got: std::collections::BTreeMap<String, u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with('-'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[f.len() - 1].to_string(), f[4].parse().unwrap())
        })
        .collect();
    assert_eq!(got, want, "ls -l sizes");
    assert!(used < 100, "ls -l of 200 files cost {used} metadata requests (a lookup per entry costs 200 or more)");
    writing.close().unwrap();
    m.unmount();
}

/// What `tar` does to each file it writes (times, owner, mode while open;
/// `chmod` by path after the close) asks only the metadata service: the
/// mount knows the sizes of the files it writes, the service those of
/// files closed. The sizes it answers
/// stay right, also after another handle of the mount grew the file.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn attribute_changes_while_writing_ask_no_data_server() {
    use std::os::fd::AsRawFd;
    let tc = TestCluster::start("fuse-setattr", 4);
    let c = tc.client();
    let m = Mount::new(&tc, "m");
    let data = || -> u64 { c.status().into_iter().filter_map(|s| s.stats.ok()).filter(|s| s.services & 2 != 0).map(|s| s.requests).sum() };
    let path = m.point.join("f");
    let f = fs::OpenOptions::new().write(true).create_new(true).open(&path).unwrap();
    let body = pattern(3, 10_000);
    std::io::Write::write_all(&mut &f, &body).unwrap();
    f.sync_all().unwrap();
    let before = data();
    let fd = f.as_raw_fd();
    for i in 0..20u32 {
        let t = [libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT }, libc::timespec { tv_sec: 1_000_000 + i64::from(i), tv_nsec: 0 }];
        assert_eq!(unsafe { libc::futimens(fd, t.as_ptr()) }, 0, "futimens");
        assert_eq!(unsafe { libc::fchown(fd, 0, 0) }, 0, "fchown");
        assert_eq!(unsafe { libc::fchmod(fd, if i % 2 == 0 { 0o600 } else { 0o644 }) }, 0, "fchmod");
        assert_eq!(f.metadata().unwrap().len(), 10_000, "the size after attribute changes");
    }
    let used = data() - before - 4;
    assert_eq!(used, 0, "60 attribute changes of a file being written asked the data servers {used} times");
    // Another handle of the mount grows the file: the first one's
    // attribute changes answer the new size.
    let g = fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&g, b"tail", 1 << 20).unwrap();
    assert_eq!(unsafe { libc::fchmod(fd, 0o640) }, 0);
    assert_eq!(f.metadata().unwrap().len(), (1 << 20) + 4, "the size answered to a change through the first handle");
    drop(g);
    drop(f);
    // After the close, a change by path (tar's directories, cp -p) knows
    // the size too; every byte is there. (The release, which measures the
    // size as the last writer, comes after close(2): waited for first.)
    let mut settled = data();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(20));
        let now = data();
        // Only the status asked itself (a request to each data server).
        let quiet = now == settled + 4;
        settled = now;
        if quiet {
            break;
        }
    }
    // Requests to the metadata and the data servers (a status asks each
    // server once: counted in the next one).
    let counts = || -> (u64, u64) {
        let stats: Vec<_> = c.status().into_iter().filter_map(|s| s.stats.ok()).collect();
        let of = |bit: u8| stats.iter().filter(|s| s.services & bit != 0).map(|s| s.requests).sum();
        (of(1), of(2))
    };
    let (meta_before, before) = counts();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap();
    let (meta_after, after) = counts();
    let (meta_used, used) = (meta_after - meta_before - 1, after - before - 4);
    assert_eq!(used, 0, "a chmod right after the close asked the data servers {used} times");
    // The change, and a stat (the metadata service knows the size since
    // the last writer's close; the mount keeps none of its own then).
    assert!(meta_used <= 2, "a chmod right after the close cost {meta_used} metadata requests");
    assert_eq!(fs::metadata(&path).unwrap().len(), (1 << 20) + 4);
    let (attr, size) = c.stat("/f").unwrap();
    assert_eq!((attr.mode & 0o777, size), (0o444, (1 << 20) + 4));
    let back = fs::read(&path).unwrap();
    assert_eq!(&back[..10_000], &body[..]);
    assert_eq!(&back[(1 << 20)..], b"tail");
    m.unmount();
}
