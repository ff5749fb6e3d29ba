//! Several users on one mount (as on a shared login node): the mount
//! serves every user (allow_other), the kernel checks each access against
//! the files' modes, files are created as the user who asks, and
//! supplementary groups count. The same script, run as the same users
//! (`setpriv`) on a local directory, must observe the same. Needs root.

use weft_testkit::mount::Mount;
use weft_testkit::TestCluster;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Runs `script` in `dir` as `uid` (gid the same) with supplementary
/// `groups`; returns what it printed, stdout and stderr.
fn as_user(dir: &Path, uid: u32, groups: &str, script: &str) -> String {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}")).arg(format!("--regid={uid}"));
    if groups.is_empty() {
        cmd.arg("--clear-groups");
    } else {
        cmd.arg(format!("--groups={groups}"));
    }
    let out = cmd.args(["sh", "-c", script]).current_dir(dir).output().unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `as_user`'s output for one step, labelled with the uid.
fn step(root: &Path, uid: u32, groups: &str, script: &str) -> String {
    format!("{uid}: {}", as_user(root, uid, groups, script))
}

/// Root sets up a sticky shared directory and a project directory of
/// group 2000; then users 1001, 1002 (in group 2000) and 1003 act.
fn exercise(root: &Path) -> Vec<String> {
    fs::create_dir(root.join("shared")).unwrap();
    fs::set_permissions(root.join("shared"), fs::Permissions::from_mode(0o1777)).unwrap();
    fs::create_dir(root.join("proj")).unwrap();
    std::os::unix::fs::chown(root.join("proj"), Some(0), Some(2000)).unwrap();
    fs::set_permissions(root.join("proj"), fs::Permissions::from_mode(0o770)).unwrap();
    let step = |uid: u32, groups: &str, script: &str| step(root, uid, groups, script);
    vec![
        step(1001, "", "echo secret > shared/a && chmod 600 shared/a && stat -c '%u:%g %a' shared/a; mkdir shared/d1001 && stat -c '%u:%g' shared/d1001; ln -s a shared/l && stat -c '%u:%g' -L shared/l; touch proj/x || echo denied"),
        step(1002, "2000", "cat shared/a || echo no read; rm -f shared/a || echo no unlink; echo mine > proj/b && stat -c '%u:%g' proj/b; ls proj"),
        step(1003, "", "ls proj || echo no list; echo hi >> shared/a || echo no append; mv shared/a shared/taken || echo no rename"),
        step(1001, "", "cat shared/a; rm shared/a && echo removed own file"),
    ]
}

#[test]
#[ignore = "needs root: FUSE mounts and other users (make test runs it as root)"]
fn users_share_a_mount_with_their_own_identities() {
    let tc = TestCluster::start("fuse-users", 2);
    let m = Mount::new(&tc, "mnt");
    let local = tc.scratch("local");
    fs::create_dir_all(&local).unwrap();
    fs::set_permissions(&local, fs::Permissions::from_mode(0o755)).unwrap();
    let on_weft = exercise(&m.point);
    let on_local = exercise(&local);
    assert_eq!(on_weft, on_local);
    // The owner is Weft's record too, not only what the kernel was told.
    let c = tc.client();
    let (a, _) = c.stat("/proj/b").unwrap();
    assert_eq!((a.uid, a.gid), (1002, 1002));
    m.unmount();
}

/// Under root_squash the mount's own identity (root) is `nobody` to the
/// metadata service, so it must act as each user for everything, not only
/// creates: users' removals, renames, mode and time changes, listings and
/// an unlink while open must work as on a local directory. Root's own
/// requests are squashed (it cannot read a user's private file).
#[test]
#[ignore = "needs root: FUSE mounts and other users (make test runs it as root)"]
fn users_work_through_a_mount_under_root_squash() {
    let spec = weft_launch::ClusterSpec { data_servers: 2, root_squash: true, ..weft_launch::ClusterSpec::default() };
    let tc = TestCluster::start_spec("fuse-squash", spec);
    let m = Mount::new(&tc, "mnt");
    let local = tc.scratch("local");
    fs::create_dir_all(&local).unwrap();
    fs::set_permissions(&local, fs::Permissions::from_mode(0o777)).unwrap();
    let run = |root: &Path| {
        let step = |uid: u32, groups: &str, script: &str| step(root, uid, groups, script);
        vec![
            step(1001, "", "mkdir -m 700 home && cd home && echo one > f && mkdir d && echo two > d/g && ls && ls -l d | wc -l"),
            step(1001, "", "cd home && chmod 640 f && stat -c '%a' f && touch -d 2020-01-02 f && stat -c '%Y' f && truncate -s 2 f && cat f"),
            step(1001, "", "cd home && mv f f2 && mv d d2 && ls && rm d2/g && rmdir d2 && ls"),
            step(1001, "", "cd home && echo held > h && (exec 3<h; rm h; cat <&3; ls)"),
            // A write's close moves the mtime (done as the opener, not root).
            step(1001, "", "cd home && echo a > t && touch -d 2020-01-01 t && echo b >> t && [ $(stat -c %Y t) -gt 1700000000 ] && echo moved && rm t"),
            step(1002, "", "ls home || echo denied; cat home/f2 || echo denied"),
            step(1001, "", "cd home && rm f2 && cd .. && rmdir home && echo clean"),
        ]
    };
    let on_weft = run(&m.point);
    let on_local = run(&local);
    assert_eq!(on_weft, on_local);
    // Root itself is nobody: it cannot read a user's private file, which
    // root on a local disk could.
    as_user(&m.point, 1001, "", "echo private > p && chmod 600 p");
    let r = fs::read(m.point.join("p"));
    assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::PermissionDenied, "root read a private file despite root_squash");
    m.unmount();
}

/// A user's open handle lives on after root renames its file and then
/// removes it, past capability renewals (issue 25, item 2: a renewal walks
/// the file's name again, so the mount tells its handles the names it
/// gives their files; without that the renewal is refused and the read
/// fails with EACCES). Each step waits for the one before (markers).
#[test]
#[ignore = "needs root: FUSE mounts and other users (make test runs it as root)"]
fn a_users_open_handle_renews_after_the_mount_renames_and_removes_its_file() {
    const LIFETIME_S: u64 = 2;
    let spec = weft_launch::ClusterSpec { data_servers: 1, server_env: vec![("WEFT_CAP_LIFETIME_S".into(), LIFETIME_S.to_string())], ..Default::default() };
    let tc = TestCluster::start_spec("fuse-renew", spec);
    let m = Mount::new(&tc, "mnt");
    let marks = tc.scratch("marks");
    fs::create_dir_all(&marks).unwrap();
    fs::set_permissions(&marks, fs::Permissions::from_mode(0o777)).unwrap();
    fs::create_dir(m.point.join("pub")).unwrap();
    fs::set_permissions(m.point.join("pub"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(m.point.join("pub/f"), vec![7u8; 4 << 20]).unwrap();
    fs::set_permissions(m.point.join("pub/f"), fs::Permissions::from_mode(0o644)).unwrap();
    // Reads far apart (past the kernel's read-ahead; dd skips from where
    // the descriptor is), each past a renewal.
    let wait = |mark: &str| format!("n=0; while [ ! -e {}/{mark} ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done", marks.display());
    let script = format!(
        "exec 3<pub/f; touch {m}/opened; {w1}; sleep {s}; echo read1 $(dd bs=4096 skip=256 count=1 <&3 2>/dev/null | wc -c); {w2}; sleep {s}; echo read2 $(dd bs=4096 skip=511 count=1 <&3 2>/dev/null | wc -c)",
        m = marks.display(),
        w1 = wait("renamed"),
        w2 = wait("unlinked"),
        s = LIFETIME_S as f64 / 2.0 + 0.6
    );
    let point = m.point.clone();
    let reader = std::thread::spawn(move || as_user(&point, 1001, "", &script));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let until = |mark: &str| {
        while !marks.join(mark).exists() {
            assert!(std::time::Instant::now() < deadline, "the reader did not get to {mark}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    until("opened");
    fs::rename(m.point.join("pub/f"), m.point.join("pub/g")).unwrap();
    fs::write(marks.join("renamed"), b"").unwrap();
    // The reader's first read is past its renewal by the new name; then
    // the file is removed while open (set aside under a hidden name).
    std::thread::sleep(std::time::Duration::from_millis((LIFETIME_S * 1000) / 2 + 900));
    fs::remove_file(m.point.join("pub/g")).unwrap();
    fs::write(marks.join("unlinked"), b"").unwrap();
    let out = reader.join().unwrap();
    assert!(out.contains("read1 4096") && out.contains("read2 4096"), "the reader's handle failed after a rename or an unlink:\n{out}");
}

/// Under the kernel's writeback cache (`--writeback-cache`) the kernel
/// sends a file's times as explicit ones at fsync and close, also for a
/// writer who is not the owner, and reads a page in before a partial
/// write through the writer's own handle, also one that may not read.
/// A group member who may write a file but not read it (mode 0620)
/// patches bytes in a page, truncates another file by opening it
/// O_TRUNC, and touches a third, as on a local directory; an explicit
/// time stays the owner's alone. (Without the mount's rules each of
/// these failed with EPERM or EACCES.)
#[test]
#[ignore = "needs root: FUSE mounts and other users (make test runs it as root)"]
fn a_writer_who_is_not_the_owner_writes_under_the_writeback_cache() {
    let tc = TestCluster::start("fuse-users-wbc", 2);
    let m = Mount::with_args(&tc, "mnt", &["--writeback-cache"]);
    let local = tc.scratch("local");
    fs::create_dir_all(&local).unwrap();
    fs::set_permissions(&local, fs::Permissions::from_mode(0o755)).unwrap();
    let pattern: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let run = |root: &Path| {
        fs::create_dir(root.join("proj")).unwrap();
        std::os::unix::fs::chown(root.join("proj"), Some(1001), Some(2000)).unwrap();
        fs::set_permissions(root.join("proj"), fs::Permissions::from_mode(0o775)).unwrap();
        for name in ["f", "g", "h"] {
            fs::write(root.join("proj").join(name), &pattern).unwrap();
            std::os::unix::fs::chown(root.join("proj").join(name), Some(1001), Some(2000)).unwrap();
            fs::set_permissions(root.join("proj").join(name), fs::Permissions::from_mode(0o620)).unwrap();
        }
        let step = |uid: u32, groups: &str, script: &str| step(root, uid, groups, script);
        let seen = vec![
            step(1001, "", "touch -d 2020-01-01 proj/f proj/g proj/h && stat -c %Y proj/f"),
            step(1002, "2000", "printf XYZ | dd of=proj/f bs=1 seek=4097 conv=notrunc,fsync status=none && echo patched; cat proj/f >/dev/null 2>&1 || echo no read"),
            step(1002, "2000", "printf new > proj/g && echo truncated"),
            step(1002, "2000", "touch proj/h && echo touched; touch -d 2021-01-01 proj/h 2>/dev/null || echo no explicit time"),
            // The writer's times are the writes' own, not 2020's.
            step(1001, "", "for x in f g h; do [ $(stat -c %Y proj/$x) -gt 1700000000 ] && echo $x moved; done; stat -c '%s %U' proj/f proj/g proj/h"),
        ];
        let bytes: Vec<Vec<u8>> = ["f", "g", "h"].iter().map(|n| fs::read(root.join("proj").join(n)).unwrap()).collect();
        (seen, bytes)
    };
    let on_weft = run(&m.point);
    let on_local = run(&local);
    assert_eq!(on_weft.0, on_local.0);
    assert!(on_weft.1 == on_local.1, "the files' bytes differ from the local directory's");
    m.unmount();
}

/// Starts, as `uid` on a thread, a writer that opens `name` in `root`
/// read-write, writes `text` at its start and keeps it open, closing no
/// descriptor of it (every close sends the kernel's times as the closer):
/// bash builtins only, no fork, no redirection undone, waiting on a FIFO
/// that never speaks until `marks/done` exists (30 s at most). Returns
/// once it has written; make `done`, then join.
fn writer_holding_open(root: &Path, marks: &Path, uid: u32, name: &str, text: &str) -> std::thread::JoinHandle<String> {
    let fifo = marks.join("fifo");
    if !fifo.exists() {
        assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        fs::set_permissions(&fifo, fs::Permissions::from_mode(0o666)).unwrap();
    }
    let body = format!(
        "exec 5<>{fifo} 3<>{name} 1>&3; printf {text}; exec 4>{m}/written; n=0; while [ ! -e {m}/done ] && [ $n -lt 600 ]; do read -t 0.05 -u 5; n=$((n+1)); done; exec 1>&- 3>&-",
        fifo = fifo.display(),
        m = marks.display()
    );
    fs::write(marks.join("writer.sh"), body).unwrap();
    let script = format!("bash {}/writer.sh", marks.display());
    let point = root.to_path_buf();
    let writer = std::thread::spawn(move || as_user(&point, uid, "", &script));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !marks.join("written").exists() {
        assert!(std::time::Instant::now() < deadline, "the writer did not write");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    writer
}

/// Taken by the tests that depend on when the kernel writes a file's
/// times back: a `sync` in one (any test's) would send another's early.
static KERNEL_TIMES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A directory for [`writer_holding_open`]'s marks, open to every user.
fn marks_dir(tc: &TestCluster) -> std::path::PathBuf {
    let marks = tc.scratch("marks");
    fs::create_dir_all(&marks).unwrap();
    fs::set_permissions(&marks, fs::Permissions::from_mode(0o777)).unwrap();
    marks
}

/// Under root_squash and the writeback cache, the kernel's flusher sends
/// a file's times as root (`nobody` to the service) through the handle it
/// writes back through: refused to root, the mount sets them as the user
/// who opened that handle, so a `sync` while a user writes moves the
/// file's time at the metadata service, where other nodes read it (as
/// root alone they were refused, and lost: the kernel sends them once).
#[test]
#[ignore = "needs root: FUSE mounts and other users (make test runs it as root)"]
fn the_flushers_times_act_as_the_writer_under_root_squash_and_the_writeback_cache() {
    let spec = weft_launch::ClusterSpec { data_servers: 2, root_squash: true, ..weft_launch::ClusterSpec::default() };
    let _alone = KERNEL_TIMES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let tc = TestCluster::start_spec("fuse-squash-wbc", spec);
    let m = Mount::with_args(&tc, "mnt", &["--writeback-cache"]);
    let marks = marks_dir(&tc);
    // 0644 whatever the umask: nobody may not write it.
    as_user(&m.point, 1001, "", "echo old > f && chmod 644 f && touch -d 2020-01-01 f");
    let c = tc.client();
    let old = c.stat("/f").unwrap().0.mtime_ns;
    assert_eq!(old / 1_000_000_000, 1_577_836_800);
    let writer = writer_holding_open(&m.point, &marks, 1001, "f", "abc");
    // A few syncs, a moment apart (one CI run saw the first leave the
    // time unsent); the writer must still have the file open then (its
    // close sends the times as the writer).
    let mut synced = old;
    for _ in 0..20 {
        // SAFETY: sync(2) takes no arguments and cannot fail.
        unsafe { libc::sync() };
        synced = c.stat("/f").unwrap().0.mtime_ns;
        if synced != old {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let still_open = !writer.is_finished();
    fs::write(marks.join("done"), b"").unwrap();
    let out = writer.join().unwrap();
    assert!(synced > old && still_open, "the flusher's time did not reach the metadata service while the writer wrote (mtime {synced}, writer still open: {still_open}; {out})");
    assert_eq!(fs::read(m.point.join("f")).unwrap(), b"abc\n");
    m.unmount();
}

/// Under the writeback cache the kernel sends a file's times at any
/// close of it while another process's writes left them unsent, a
/// reader's close too, with the reader's uid and the writer's handle: a
/// reader who may not write the file closes it without an error (it got
/// EACCES from close(2) when the times were set as the reader).
#[test]
#[ignore = "needs root: FUSE mounts and other users (make test runs it as root)"]
fn a_readers_close_while_another_user_writes_succeeds_under_the_writeback_cache() {
    let _alone = KERNEL_TIMES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let tc = TestCluster::start("fuse-reader-wbc", 2);
    let m = Mount::with_args(&tc, "mnt", &["--writeback-cache"]);
    let marks = marks_dir(&tc);
    fs::create_dir(m.point.join("logs")).unwrap();
    fs::set_permissions(m.point.join("logs"), fs::Permissions::from_mode(0o777)).unwrap();
    as_user(&m.point, 1001, "", "echo old > logs/log && chmod 644 logs/log");
    let writer = writer_holding_open(&m.point, &marks, 1001, "logs/log", "new");
    let read = as_user(&m.point, 1003, "", "cat logs/log && echo closed fine");
    fs::write(marks.join("done"), b"").unwrap();
    writer.join().unwrap();
    assert_eq!(read, "new\nclosed fine\n", "a reader's close failed while another user wrote");
    m.unmount();
}
