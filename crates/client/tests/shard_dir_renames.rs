//! Directory renames on a cluster of several metadata shards (issue 23,
//! item 4): the whole tree moves, every shard's copy follows, rename(2)'s
//! checks hold across shards, and a stop of any shard at any step leaves
//! the directory with exactly one name on every shard.

use weft_testkit::shards::{ask, dir_on_shard, excl, id_of, name_on, sharded, K};
use weft_testkit::TestCluster;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_client::{Client, ClientOptions, Error, FileId};
use weft_wire::shard::home_shard;
use weft_wire::{Cred, ErrorCode, MetaReq, Response};

fn names(c: &Client, dir: &str) -> Vec<String> {
    c.readdir(dir).unwrap().into_iter().map(|e| e.name).collect()
}

/// Fills directory `path` (id `id`) with a file on every shard, each
/// holding its own name; returns the names, sorted.
fn fill(c: &Client, path: &str, id: FileId) -> Vec<String> {
    let mut v: Vec<String> = (0..K).map(|s| name_on(id, s, "f")).collect();
    for n in &v {
        let f = c.create(&format!("{path}/{n}"), excl()).unwrap();
        f.write_at(0, n.as_bytes()).unwrap();
        f.close().unwrap();
    }
    v.sort();
    v
}

fn check_files(c: &Client, path: &str, files: &[String]) {
    for n in files {
        let f = c.open(&format!("{path}/{n}"), false).unwrap_or_else(|e| panic!("{path}/{n}: {e}"));
        let mut buf = vec![0; n.len()];
        f.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, n.as_bytes(), "{path}/{n}");
    }
}

#[test]
fn directories_rename_across_shards_with_their_trees() {
    let tc = sharded("dirmv");
    let c = tc.client();
    c.mkdir("/d", 0o777).unwrap();
    let d = id_of(&c, "/d");
    c.mkdir("/d/sub", 0o777).unwrap();
    let sub = id_of(&c, "/d/sub");
    let mut files = fill(&c, "/d/sub", sub);
    c.mkdir("/d/sub/inner", 0o755).unwrap();
    files.push("inner".into());
    files.sort();
    let ctime = c.stat("/d/sub").unwrap().0.ctime_ns;
    assert_eq!(c.stat("/d").unwrap().0.nlink, 3);
    // A name another shard keeps than the one that made /d/sub: its entry
    // and its home now differ.
    let new = name_on(d, (home_shard(sub, K) + 1) % K, "moved");
    c.rename("/d/sub", &format!("/d/{new}")).unwrap();
    let moved = format!("/d/{new}");
    // A fresh client (no directory ids cached) sees one name, the same
    // directory, the whole tree with its bytes.
    let fresh = tc.client();
    assert!(matches!(fresh.stat("/d/sub"), Err(Error::NotFound(_))));
    let (attr, _) = fresh.stat(&moved).unwrap();
    assert_eq!(attr.id, sub);
    assert!(attr.ctime_ns > ctime, "a renamed directory's ctime moves");
    assert_eq!(names(&fresh, &moved), files);
    check_files(&fresh, &moved, &files.iter().filter(|n| n.starts_with('f')).cloned().collect::<Vec<_>>());
    assert_eq!(names(&fresh, "/d"), std::slice::from_ref(&new));
    assert_eq!(fresh.stat("/d").unwrap().0.nlink, 3, "the parent keeps its link count");
    for s in 0..K {
        assert_eq!(dir_on_shard(&tc, s, "/d/sub"), Some(false), "shard {s} still has the old name");
        assert_eq!(dir_on_shard(&tc, s, &moved), Some(true), "shard {s} lacks the new name");
    }
    // Its stat is answered by its home, which knows of the entries made
    // there at once (its entry is on another shard now).
    let late = format!("{moved}/{}", name_on(sub, home_shard(sub, K), "late"));
    let made = c.create(&late, excl()).unwrap().attr().ctime_ns;
    assert!(fresh.stat(&moved).unwrap().0.mtime_ns >= made, "the renamed directory's times follow an entry made on its home");
    c.unlink(&late).unwrap();
    // Changes of the renamed directory are made by its home and reach
    // every shard.
    let user = Client::with_options(tc.cluster(), ClientOptions { cred: Cred::new(1000, 1000), ..ClientOptions::default() }).unwrap();
    c.chmod(&moved, 0o755).unwrap();
    for s in 0..K {
        let name = name_on(sub, s, "denied");
        assert!(matches!(user.create(&format!("{moved}/{name}"), excl()), Err(Error::Permission(_))), "shard {s} did not learn the chmod");
    }
    c.chmod(&moved, 0o777).unwrap();
    // The old name is free again.
    c.mkdir("/d/sub", 0o777).unwrap();
    // Into another directory, over an empty directory.
    c.mkdir("/e", 0o777).unwrap();
    let e = id_of(&c, "/e");
    let target = format!("/e/{}", name_on(e, 2, "t"));
    c.mkdir(&target, 0o777).unwrap();
    let replaced = id_of(&c, &target);
    c.rename(&moved, &target).unwrap();
    assert_eq!(id_of(&fresh, &target), sub);
    assert!(matches!(fresh.stat(&moved), Err(Error::NotFound(_))));
    assert!(matches!(fresh.stat_id(replaced), Err(Error::NotFound(_))), "the replaced directory is gone");
    assert_eq!((fresh.stat("/d").unwrap().0.nlink, fresh.stat("/e").unwrap().0.nlink), (3, 3));
    assert_eq!(names(&fresh, &target), files);
    // Over a directory an entry on any shard keeps: refused, nothing moved.
    let sub2 = id_of(&c, "/d/sub");
    for s in 0..K {
        let f = format!("/d/sub/{}", name_on(sub2, s, "keep"));
        c.create(&f, excl()).unwrap();
        assert!(matches!(c.rename(&target, "/d/sub"), Err(Error::NotEmpty(_))), "an entry on shard {s}");
        c.unlink(&f).unwrap();
    }
    // Over a file only its own shard (not shard 0) knows of.
    let file = format!("/e/{}", name_on(e, 1, "file"));
    c.create(&file, excl()).unwrap();
    assert!(matches!(c.rename(&target, &file), Err(Error::NotDir(_))));
    // Into itself.
    assert!(matches!(c.rename(&target, &format!("{target}/inner/x")), Err(Error::InvalidPath(_))));
    // A user may not move what a sticky directory's other users own.
    c.chmod("/e", 0o1777).unwrap();
    assert!(matches!(user.rename(&target, "/e/mine"), Err(Error::Permission(_))));
    assert_eq!(names(&fresh, &target), files, "the refused renames moved nothing");
    // Emptied, the renamed directory is removed through its home.
    for n in &files {
        let p = format!("{target}/{n}");
        if n == "inner" { c.rmdir(&p).unwrap() } else { c.unlink(&p).unwrap() }
    }
    c.rmdir(&target).unwrap();
    for s in 0..K {
        assert_eq!(dir_on_shard(&tc, s, &target), Some(false), "shard {s} kept the removed directory");
    }
}

/// Waits until every shard agrees that exactly one of `a` and `b` names
/// the directory; returns which.
fn one_name_everywhere(tc: &TestCluster, a: &str, b: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let views: Vec<(Option<bool>, Option<bool>)> = (0..K).map(|s| (dir_on_shard(tc, s, a), dir_on_shard(tc, s, b))).collect();
        if views.iter().all(|v| *v == (Some(true), Some(false))) {
            return a.into();
        }
        if views.iter().all(|v| *v == (Some(false), Some(true))) {
            return b.into();
        }
        assert!(Instant::now() < deadline, "shards disagree on the directory's name ({a}, {b}) per shard: {views:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The directory at `at` still holds every file, with its bytes.
fn whole(tc: &TestCluster, c: &Client, at: &str, files: &[String], when: &str) {
    let mut got = names(c, at);
    got.sort();
    if got != files {
        for s in 0..K {
            eprintln!("DEBUG shard {s}: {:?}", weft_testkit::shards::ask(tc, s, weft_wire::MetaReq::ReaddirShard { path: at.into(), after: String::new(), max: 100, shards: K }));
        }
    }
    assert_eq!(got, files, "{when}");
    check_files(c, at, files);
}

/// Whether shard 1, which keeps name `b`, holds it for a directory
/// rename: a rename of a missing name (`ghost`, also kept by shard 1) to
/// it is then refused `Busy` before the missing name is looked up.
fn held_by_shard_1(tc: &TestCluster, ghost: &str, b: &str) -> bool {
    match ask(tc, 1, MetaReq::Rename { from: ghost.into(), to: b.into() }) {
        Response::Error { code: ErrorCode::Busy, .. } => true,
        Response::Error { code: ErrorCode::NotFound, .. } => false,
        other => panic!("shard 1 answered {other:?}"),
    }
}

/// Renames until it works (shards just restarted may still be catching up).
fn rename_eventually(c: &Client, from: &str, to: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.rename(from, to) {
            Ok(()) => return,
            Err(e) if Instant::now() < deadline => {
                eprintln!("rename {from} -> {to}: {e}; again");
                std::thread::sleep(Duration::from_millis(300));
            }
            Err(e) => panic!("rename {from} -> {to} never worked again: {e}"),
        }
    }
}

#[test]
fn a_directory_rename_cut_by_a_stop_of_any_shard_leaves_exactly_one_name() {
    let mut tc = sharded("dirmv-crash");
    let c = tc.client_with_timeout(Duration::from_secs(3));
    c.mkdir("/d", 0o777).unwrap();
    let d = id_of(&c, "/d");
    // `a` is kept by shard 0, which makes every directory rename: a client
    // renaming from `a` asks it first, whichever other shard is stopped.
    let a = format!("/d/{}", name_on(d, 0, "a"));
    let b = format!("/d/{}", name_on(d, 1, "b"));
    let ghost = format!("/d/{}", name_on(d, 1, "ghost"));
    c.mkdir(&a, 0o777).unwrap();
    let files = fill(&c, &a, id_of(&c, &a));
    // Durable before any kill (a crash may lose the last sync window).
    c.sync_meta().unwrap();

    // Each other shard stopped while shard 0 waits for its vote, then
    // killed: the rename is refused and undone everywhere.
    for victim in 1..K {
        tc.lc.pause(victim as usize, true);
        let renaming = {
            let (c, a, b) = (tc.client_with_timeout(Duration::from_secs(20)), a.clone(), b.clone());
            std::thread::spawn(move || c.rename(&a, &b))
        };
        std::thread::sleep(Duration::from_millis(500));
        if victim == 2 {
            assert!(held_by_shard_1(&tc, &ghost, &b), "shard 1 voted and holds the new name while shard 0 waits for shard 2");
        }
        tc.lc.kill(victim as usize);
        let r = renaming.join().unwrap();
        assert!(r.is_err(), "shard {victim} never voted, yet the rename was made");
        tc.lc.restart(victim as usize).unwrap();
        assert_eq!(one_name_everywhere(&tc, &a, &b), a, "shard {victim} killed before its vote");
        assert!(!held_by_shard_1(&tc, &ghost, &b), "the abandoned rename's names are let go");
        whole(&tc, &c, &a, &files, &format!("shard {victim} killed before its vote"));
        // Nothing is left held: the rename is made once asked again.
        rename_eventually(&c, &a, &b);
        assert_eq!(one_name_everywhere(&tc, &a, &b), b);
        rename_eventually(&c, &b, &a);
    }

    // Shard 0 killed while it waits for the votes (shard 1 held, shard 2
    // does not answer): restarted, it abandons the rename and every shard
    // lets the names go.
    tc.lc.pause(2, true);
    let renaming = {
        let (c, a, b) = (tc.client_with_timeout(Duration::from_secs(20)), a.clone(), b.clone());
        std::thread::spawn(move || c.rename(&a, &b))
    };
    std::thread::sleep(Duration::from_millis(500));
    assert!(held_by_shard_1(&tc, &ghost, &b), "shard 1 holds the new name when shard 0 is killed");
    tc.lc.kill(0);
    assert!(renaming.join().unwrap().is_err());
    tc.lc.pause(2, false);
    tc.lc.restart(0).unwrap();
    assert_eq!(one_name_everywhere(&tc, &a, &b), a, "shard 0 killed between the steps");
    let deadline = Instant::now() + Duration::from_secs(30);
    while held_by_shard_1(&tc, &ghost, &b) {
        assert!(Instant::now() < deadline, "shard 0, restarted, never let shard 1's hold go");
        std::thread::sleep(Duration::from_millis(200));
    }
    whole(&tc, &c, &a, &files, "shard 0 killed between the steps");
    rename_eventually(&c, &a, &b);
    rename_eventually(&c, &b, &a);

    // Each shard killed at a moment of a stream of renames back and forth
    // (a different step each time): one name, then renames work again.
    for (victim, after_ms) in (0..K).flat_map(|v| [13, 40, 77, 131, 170].map(|ms| (v, ms))) {
        let stop = Arc::new(AtomicBool::new(false));
        let made_so_far = Arc::new(AtomicUsize::new(0));
        let renaming = {
            let (c, a, b, stop, made_so_far) = (tc.client_with_timeout(Duration::from_secs(3)), a.clone(), b.clone(), stop.clone(), made_so_far.clone());
            std::thread::spawn(move || {
                let (mut at, mut made) = (a.clone(), 0);
                while !stop.load(Ordering::Relaxed) {
                    let to = if at == a { b.clone() } else { a.clone() };
                    if c.rename(&at, &to).is_ok() {
                        made += 1;
                        made_so_far.store(made, Ordering::Relaxed);
                        at = to;
                    } else if c.stat(&to).is_ok() {
                        at = to;
                    }
                }
                made
            })
        };
        // Counted from the first rename made, so that a loaded machine
        // (a first rename slower than the pause) still kills mid-stream.
        let first_by = Instant::now() + Duration::from_secs(20);
        while made_so_far.load(Ordering::Relaxed) == 0 && Instant::now() < first_by {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(after_ms));
        tc.lc.kill(victim as usize);
        stop.store(true, Ordering::Relaxed);
        let made = renaming.join().unwrap();
        eprintln!("shard {victim} killed after {made} renames in {after_ms} ms");
        assert!(made > 0, "no rename was made before shard {victim} was killed: the kill hit no step");
        tc.lc.restart(victim as usize).unwrap();
        let now = one_name_everywhere(&tc, &a, &b);
        whole(&tc, &c, &now, &files, &format!("shard {victim} killed {after_ms} ms into renames"));
        let other = if now == a { b.clone() } else { a.clone() };
        rename_eventually(&c, &now, &other);
        assert_eq!(one_name_everywhere(&tc, &a, &b), other, "shard {victim} killed {after_ms} ms into renames");
        if other != a {
            rename_eventually(&c, &other, &a);
        }
    }
    // The tree came through every stop whole.
    one_name_everywhere(&tc, &a, &b);
    whole(&tc, &c, &a, &files, "at the end");
}
