//! Names made in a directory this mount made moments ago (`fresh_dirs`):
//! no lookup before a create there, and never a name made through the
//! mount hidden. In a test binary of its own: it drops the kernel's
//! dentry cache, which would add lookups to other tests' counts. Needs
//! root and /dev/fuse (CI runs as root).

use std::fs;
use std::time::Duration;
use weft_testkit::mount::Mount;
use weft_testkit::{meta_quiet, meta_requests, TestCluster};

/// A name created in a directory made through this mount moments ago
/// needs no lookup first (`fresh_dirs`): one request, the create. And
/// nothing made through the mount is ever hidden by it, even once the
/// kernel has forgotten the names; a name another client made there is
/// seen once the directory's trusted time (the entry timeout) is over,
/// and an exclusive create of it fails at once.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn a_name_made_in_a_new_directory_needs_no_lookup_and_none_is_hidden() {
    let tc = TestCluster::start("fuse-fresh-dirs", 2);
    // Directories made here are trusted this long: the checks below must
    // run within it to test anything.
    let trust = Duration::from_secs(5);
    let m = Mount::with_args(&tc, "mnt", &["--entry-timeout", "5"]);
    let c = tc.client();
    // The same exclusive create in a directory another client made (its
    // entry already looked up here) and in one this mount made.
    let creates = |dir: &std::path::Path| {
        // The kernel's attributes of the directories on the way are fresh
        // (a mkdir made the parent's stale).
        fs::metadata(dir).unwrap();
        let before = meta_quiet(&c);
        let held = fs::File::create_new(dir.join("first")).unwrap();
        let n = meta_requests(&c) - before - 1;
        drop(held);
        n
    };
    c.mkdir("/theirs", 0o755).unwrap();
    assert!(fs::metadata(m.point.join("theirs")).unwrap().is_dir());
    let elsewhere = creates(&m.point.join("theirs"));
    let dir = m.point.join("new");
    fs::create_dir(&dir).unwrap();
    let made = std::time::Instant::now();
    let here = creates(&dir);
    assert_eq!(here + 1, elsewhere, "an exclusive create in a directory made here asks {here} times, elsewhere {elsewhere} (one lookup more)");
    // Every kind of name made here, then the kernel's dentries dropped
    // (it forgets them and looks each up again).
    for i in 0..50 {
        fs::write(dir.join(format!("f{i}")), b"x").unwrap();
    }
    fs::create_dir(dir.join("sub")).unwrap();
    std::os::unix::fs::symlink("f0", dir.join("link")).unwrap();
    fs::hard_link(dir.join("f1"), dir.join("hard")).unwrap();
    fs::write(m.point.join("outside"), b"moved").unwrap();
    fs::rename(m.point.join("outside"), dir.join("moved")).unwrap();
    fs::write("/proc/sys/vm/drop_caches", b"2").unwrap();
    assert!(made.elapsed() < trust, "too slow to check within the trusted time ({:?})", made.elapsed());
    let mut names: Vec<String> = (0..50).map(|i| format!("f{i}")).collect();
    names.extend(["first", "sub", "link", "hard", "moved"].map(String::from));
    for n in &names {
        assert!(fs::symlink_metadata(dir.join(n)).is_ok(), "{n}, made through the mount, is found at once");
    }
    // Another client's name: an exclusive create of it fails now, and it
    // is seen once the directory's trusted time is over.
    let other = m.point.join("other");
    fs::create_dir(&other).unwrap();
    drop(c.create("/other/theirs", weft_client::CreateOptions::default()).unwrap());
    let excl = fs::File::create_new(other.join("theirs"));
    assert_eq!(excl.map(|_| ()).map_err(|e| e.kind()), Err(std::io::ErrorKind::AlreadyExists));
    std::thread::sleep(trust + Duration::from_millis(100));
    assert!(fs::metadata(other.join("theirs")).is_ok(), "another client's name is seen after the entry timeout");
    m.unmount();
}
