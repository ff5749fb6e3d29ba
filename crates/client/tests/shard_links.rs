//! Hard links across metadata shards (issue 23): a link whose new name
//! another shard keeps names the same file, counted once, listed with the
//! file's own attributes, removed from every shard's view; a name's shard
//! that refuses leaves the count as it was; one that is down gets the
//! link when it returns.

use weft_testkit::shards::{ask, ask_as, excl, id_of, name_on, sharded};
use std::time::{Duration, Instant};
use weft_client::{Client, Error};
use weft_wire::{MetaReq, Response};

fn write_file(c: &Client, path: &str, bytes: &[u8]) {
    let f = c.create(path, excl()).unwrap();
    f.write_at(0, bytes).unwrap();
    f.close().unwrap();
}

fn read_all(c: &Client, path: &str) -> Vec<u8> {
    let f = c.open(path, false).unwrap();
    let mut buf = vec![0; 64];
    let n = f.read_at(0, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// `path`'s link count once it is `want` (a shard takes a replaced
/// name's `Unlink` within about a second of its push), or as it is after
/// 20 s.
fn links_when(c: &Client, path: &str, want: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n = c.stat(path).unwrap().0.nlink;
        if n == want || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn names(c: &Client, dir: &str) -> Vec<String> {
    c.readdir(dir).unwrap().into_iter().map(|e| e.name).collect()
}

/// Data objects on every data server.
fn objects(c: &Client) -> u64 {
    c.status().into_iter().filter(|s| s.server.services.contains(&weft_net::Service::Data)).map(|s| s.stats.unwrap().objects).sum()
}

#[test]
fn a_link_to_another_shards_name_is_the_same_file_until_its_last_name_goes() {
    let tc = sharded("links-across");
    let c = tc.client();
    c.mkdir("/d", 0o777).unwrap();
    let d = id_of(&c, "/d");
    // The file on shard 1, the new name on shard 2: a client that knows no
    // directory asks shard 0 first, which sends it to the name's shard,
    // whose stub sends it to the file's.
    let f = format!("/d/{}", name_on(d, 1, "f"));
    let l = format!("/d/{}", name_on(d, 2, "l"));
    write_file(&c, &f, b"data");
    let linked = c.link(&f, &l).unwrap();
    assert_eq!(linked.nlink, 2);
    let id = id_of(&c, &f);
    // Both names, one file: its id, count and bytes, from a client that
    // knows no directory yet as well.
    let fresh = tc.client();
    let (attr, size) = fresh.stat(&l).unwrap();
    assert_eq!((attr.id, attr.nlink, size), (id, 2, 4));
    assert_eq!(read_all(&fresh, &l), b"data");
    let w = c.open(&l, true).unwrap();
    w.write_at(4, b"+more").unwrap();
    w.close().unwrap();
    assert_eq!(read_all(&c, &f), b"data+more");
    // The name's shard keeps a stub: it sends requests on the name to the
    // file's shard.
    let on_l = ask(&tc, 2, MetaReq::Stat { path: l.clone() });
    assert!(matches!(on_l, Response::Route { shard: 1, .. }), "{on_l:?}");
    // A path through the stub is not a directory (as through any file).
    let through = ask(&tc, 2, MetaReq::Stat { path: format!("{l}/x") });
    assert!(matches!(through, Response::Error { code: weft_wire::ErrorCode::NotDir, .. }), "{through:?}");
    // A change by either name is the file's; the listing shows the file's
    // attributes now, not as they were when the link was made.
    c.chmod(&l, 0o640).unwrap();
    assert_eq!(c.stat(&f).unwrap().0.mode & 0o7777, 0o640);
    let listed = c.readdir("/d").unwrap();
    assert_eq!(listed.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), {
        let mut v = vec![&f[3..], &l[3..]];
        v.sort();
        v
    });
    for e in &listed {
        assert_eq!((e.attr.id, e.attr.nlink, e.attr.mode & 0o7777, e.elsewhere), (id, 2, 0o640, false), "{}", e.name);
    }
    // A third name, linked from the second, in another directory, on
    // shard 0: that directory, which holds only the stub, is not empty.
    c.mkdir("/e", 0o777).unwrap();
    let e = id_of(&c, "/e");
    let m = format!("/e/{}", name_on(e, 0, "m"));
    assert_eq!(c.link(&l, &m).unwrap().nlink, 3);
    assert!(matches!(c.rmdir("/e"), Err(Error::NotEmpty(_))));
    // Names go one by one; the file stays until the last.
    c.unlink(&f).unwrap();
    assert_eq!(c.stat(&l).unwrap().0.nlink, 2);
    c.unlink(&l).unwrap();
    assert!(matches!(c.stat(&l), Err(Error::NotFound(_))));
    assert!(matches!(ask(&tc, 2, MetaReq::Stat { path: l.clone() }), Response::Error { code: weft_wire::ErrorCode::NotFound, .. }), "the stub is gone from its shard");
    assert!(names(&c, "/d").is_empty());
    let (attr, size) = c.stat(&m).unwrap();
    assert_eq!((attr.id, attr.nlink, size), (id, 1, 9));
    assert!(objects(&c) > 0);
    c.unlink(&m).unwrap();
    assert!(names(&c, "/e").is_empty());
    assert_eq!(weft_testkit::objects_when(&c, |n| n == 0), 0, "the file's data goes with its last name");
    c.rmdir("/d").unwrap();
    c.rmdir("/e").unwrap();
}

#[test]
fn a_link_the_names_shard_refuses_leaves_the_count_as_it_was() {
    let tc = sharded("links-refused");
    let c = tc.client();
    c.mkdir("/d", 0o777).unwrap();
    let d = id_of(&c, "/d");
    let f = format!("/d/{}", name_on(d, 0, "f"));
    let taken = format!("/d/{}", name_on(d, 1, "t"));
    write_file(&c, &f, b"mine");
    write_file(&c, &taken, b"theirs");
    assert!(matches!(c.link(&f, &taken), Err(Error::Exists(_))));
    assert_eq!(c.stat(&f).unwrap().0.nlink, 1, "the count is taken back");
    assert_eq!(read_all(&c, &taken), b"theirs");
    let mut want = vec![f[3..].to_string(), taken[3..].to_string()];
    want.sort();
    assert_eq!(names(&c, "/d"), want, "no name of the refused link anywhere");
    // The file is not held: it goes with its one name.
    c.unlink(&f).unwrap();
    c.unlink(&taken).unwrap();
    c.rmdir("/d").unwrap();
}

#[test]
fn a_link_to_a_shard_that_is_down_is_made_when_it_returns() {
    let mut tc = sharded("links-down");
    let c = tc.client_with_timeout(Duration::from_secs(3));
    c.mkdir("/d", 0o777).unwrap();
    let d = id_of(&c, "/d");
    let f = format!("/d/{}", name_on(d, 0, "f"));
    let l = format!("/d/{}", name_on(d, 1, "l"));
    write_file(&c, &f, b"kept");
    tc.lc.kill(1);
    let r = c.link(&f, &l);
    assert!(matches!(&r, Err(Error::Io { message, .. }) if message.contains("shard 1")), "{r:?}");
    // Meanwhile the file is not removed under the link, and its shard
    // does not answer on the name that is not made yet (it sends the
    // request to the name's shard).
    assert!(matches!(c.unlink(&f), Err(Error::Busy { .. })));
    let on_l = ask(&tc, 0, MetaReq::Stat { path: l.clone() });
    assert!(matches!(on_l, Response::Route { shard: 1, .. }), "{on_l:?}");
    tc.lc.restart(1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.stat(&l).is_err() {
        assert!(Instant::now() < deadline, "the link was never made");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(c.stat(&f).unwrap().0.nlink, 2);
    assert_eq!(read_all(&c, &l), b"kept");
    // Settled: the file changes again.
    c.unlink(&f).unwrap();
    assert_eq!(c.stat(&l).unwrap().0.nlink, 1);
    // The name removed while its shard is down: the file's shard answers
    // (not found) what that shard's stub still sends it, rather than
    // sending it back.
    let g = format!("/d/{}", name_on(d, 0, "g"));
    c.link(&l, &g).unwrap();
    tc.lc.kill(1);
    let removed = ask(&tc, 0, MetaReq::Unlink { path: l.clone() });
    assert!(matches!(removed, Response::Unlinked { file: None, .. }), "removed on the file's shard, told to the name's later: {removed:?}");
    let on_l = ask(&tc, 0, MetaReq::Stat { path: l.clone() });
    assert!(matches!(on_l, Response::Error { code: weft_wire::ErrorCode::NotFound, .. }), "{on_l:?}");
    tc.lc.restart(1).unwrap();
    assert!(matches!(c.stat(&l), Err(Error::NotFound(_))));
    assert_eq!(c.stat(&g).unwrap().0.nlink, 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !matches!(ask(&tc, 1, MetaReq::Stat { path: l.clone() }), Response::Error { code: weft_wire::ErrorCode::NotFound, .. }) {
        assert!(Instant::now() < deadline, "the stub was never removed");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_capability_opened_by_another_shards_name_is_renewed_by_that_name() {
    let tc = sharded("links-renew");
    let root = tc.client();
    root.mkdir("/d", 0o777).unwrap();
    let d = id_of(&root, "/d");
    let alice = tc.client().with_cred(weft_wire::Cred::new(1000, 1000));
    let (f, l) = (format!("/d/{}", name_on(d, 0, "f")), format!("/d/{}", name_on(d, 1, "l")));
    alice.create(&f, weft_client::CreateOptions { mode: 0o644, ..Default::default() }).unwrap().close().unwrap();
    alice.link(&f, &l).unwrap();
    let cap = alice.open(&l, false).unwrap().capability().unwrap();
    let renewed = |path: &str| ask_as(&tc, 0, weft_wire::Cred::new(1000, 1000), MetaReq::Renew { old: cap, path: path.into() });
    assert!(matches!(renewed(&l), Response::Cap(_)), "{:?}", renewed(&l));
    // Once that name is gone, the renewal by it is refused (reopen it).
    alice.unlink(&l).unwrap();
    assert!(matches!(renewed(&l), Response::Error { code: weft_wire::ErrorCode::Permission, .. }));
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn the_mount_links_names_on_different_shards() {
    let tc = sharded("links-mount");
    let c = tc.client();
    c.mkdir("/d", 0o777).unwrap();
    let d = id_of(&c, "/d");
    let (f, l) = (name_on(d, 0, "f"), name_on(d, 2, "l"));
    let m = weft_testkit::mount::Mount::new(&tc, "mnt");
    let dir = m.point.join("d");
    std::fs::write(dir.join(&f), b"through the mount").unwrap();
    std::fs::hard_link(dir.join(&f), dir.join(&l)).unwrap();
    use std::os::unix::fs::MetadataExt;
    let (a, b) = (std::fs::metadata(dir.join(&f)).unwrap(), std::fs::metadata(dir.join(&l)).unwrap());
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    assert_eq!(std::fs::read(dir.join(&l)).unwrap(), b"through the mount");
    let out = std::process::Command::new("ls").arg("-ln").arg(&dir).output().unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    assert_eq!(listing.lines().filter(|line| line.split_whitespace().nth(1) == Some("2")).count(), 2, "{listing}");
    // An editor's save: a new file renamed over the linked name (no EXDEV).
    let saved = name_on(d, 1, "save");
    std::fs::write(dir.join(&saved), b"saved").unwrap();
    std::fs::rename(dir.join(&saved), dir.join(&l)).unwrap();
    assert_eq!(std::fs::read(dir.join(&l)).unwrap(), b"saved");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::metadata(dir.join(&f)).unwrap().nlink() != 1 {
        assert!(Instant::now() < deadline, "the first file kept its second link");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(std::fs::read(dir.join(&f)).unwrap(), b"through the mount");
    let st = std::process::Command::new("rm").arg("-rf").arg(&dir).status().unwrap();
    assert!(st.success(), "rm -rf over names on two shards");
    assert_eq!(std::fs::read_dir(&m.point).unwrap().count(), 0);
    m.unmount();
}

#[test]
fn a_name_of_a_file_with_names_on_several_shards_is_renamed_anywhere() {
    let tc = sharded("links-rename");
    let c = tc.client();
    c.mkdir("/d", 0o777).unwrap();
    let d = id_of(&c, "/d");
    let on = |shard: u32, prefix: &str| format!("/d/{}", name_on(d, shard, prefix));
    let f = on(0, "f");
    write_file(&c, &f, b"payload");
    let id = id_of(&c, &f);
    let l = on(1, "l");
    c.link(&f, &l).unwrap();
    let listed = |c: &Client| {
        let mut v = names(c, "/d");
        v.sort();
        v
    };
    let want = |paths: &[&str]| {
        let mut v: Vec<String> = paths.iter().map(|p| p[3..].to_string()).collect();
        v.sort();
        v
    };
    // The stub's name to a third shard: the name moves, the file stays.
    let m = on(2, "m");
    c.rename(&l, &m).unwrap();
    assert!(matches!(c.stat(&l), Err(Error::NotFound(_))));
    assert!(matches!(ask(&tc, 1, MetaReq::Stat { path: l.clone() }), Response::Error { code: weft_wire::ErrorCode::NotFound, .. }), "the old stub is gone from its shard");
    let on_files_shard = ask(&tc, 0, MetaReq::Stat { path: l.clone() });
    assert!(!matches!(on_files_shard, Response::Attr(_)), "the file's shard's copy of the old name is gone too: {on_files_shard:?}");
    let (attr, size) = c.stat(&m).unwrap();
    assert_eq!((attr.id, attr.nlink, size), (id, 2, 7));
    assert_eq!(listed(&c), want(&[&f, &m]));
    // To a name the file's own shard keeps: a local rename there, and the
    // old name's shard drops its stub.
    let n = on(0, "n");
    c.rename(&m, &n).unwrap();
    assert!(matches!(ask(&tc, 2, MetaReq::Stat { path: m.clone() }), Response::Error { code: weft_wire::ErrorCode::NotFound, .. }));
    assert_eq!((id_of(&c, &n), c.stat(&n).unwrap().0.nlink), (id, 2));
    assert_eq!(listed(&c), want(&[&f, &n]));
    // The file's own first name to another shard (it has another name, so
    // the file does not move).
    let p = on(1, "p");
    c.rename(&f, &p).unwrap();
    assert!(matches!(c.stat(&f), Err(Error::NotFound(_))));
    assert_eq!((id_of(&c, &p), c.stat(&p).unwrap().0.nlink), (id, 2));
    assert_eq!(read_all(&c, &p), b"payload");
    // Over another file: it is replaced, and its data goes.
    let q = on(2, "q");
    write_file(&c, &q, b"old");
    let before = objects(&c);
    c.rename(&n, &q).unwrap();
    assert_eq!((id_of(&c, &q), c.stat(&q).unwrap().0.nlink), (id, 2));
    assert_eq!(read_all(&c, &q), b"payload");
    assert!(weft_testkit::objects_when(&c, |n| n < before) < before, "the replaced file's objects are deleted");
    assert_eq!(listed(&c), want(&[&p, &q]));
    // Onto another name of the same file: nothing happens (rename(2)).
    c.rename(&p, &q).unwrap();
    assert_eq!(listed(&c), want(&[&p, &q]));
    assert_eq!(c.stat(&p).unwrap().0.nlink, 2);
    // Over a name of another file, kept by a third shard (a stub there):
    // the name is this file's now, and the other file, kept elsewhere,
    // loses that link.
    let g = on(1, "g");
    write_file(&c, &g, b"other");
    let gl = on(2, "gl");
    c.link(&g, &gl).unwrap();
    c.rename(&p, &gl).unwrap();
    assert_eq!(listed(&c), want(&[&q, &g, &gl]));
    assert_eq!((id_of(&c, &gl), c.stat(&gl).unwrap().0.nlink), (id, 2));
    assert_eq!(read_all(&c, &gl), b"payload");
    assert_eq!(links_when(&c, &g, 1), 1, "the replaced name's file, kept by another shard, loses that link");
    assert_eq!(read_all(&c, &g), b"other");
    // Refused by the new name's shard (a sticky directory another user
    // owns, whose name is a stub): nothing moves, and the copy of the new
    // name the file's shard made is taken back.
    c.mkdir("/s", 0o1777).unwrap();
    c.chown("/s", 1000, 1000).unwrap();
    let s_dir = id_of(&c, "/s");
    let (sf, sl) = (format!("/s/{}", name_on(s_dir, 1, "f")), format!("/s/{}", name_on(s_dir, 2, "l")));
    write_file(&c, &sf, b"sticky");
    c.link(&sf, &sl).unwrap();
    let bob = tc.client().with_cred(weft_wire::Cred::new(1001, 1001));
    // Bob's file has two names, so one of them moves (the file stays).
    let (mine, mine2) = (format!("/s/{}", name_on(s_dir, 0, "b")), format!("/s/{}", name_on(s_dir, 0, "c")));
    write_file(&bob, &mine, b"bob's");
    bob.link(&mine, &mine2).unwrap();
    assert!(matches!(bob.rename(&mine, &sl), Err(Error::CrossShard(_))));
    let copy = ask(&tc, 0, MetaReq::Stat { path: sl.clone() });
    assert!(!matches!(copy, Response::Attr(ref a) if a.id == id_of(&c, &mine)), "no copy of the refused name is left on the file's shard: {copy:?}");
    assert_eq!(read_all(&c, &sl), b"sticky");
    assert_eq!(read_all(&c, &mine), b"bob's");
    assert_eq!((c.stat(&sf).unwrap().0.nlink, c.stat(&mine).unwrap().0.nlink), (2, 2), "the refused rename left both files as they were");
    // The directory's owner may.
    let owner = tc.client().with_cred(weft_wire::Cred::new(1000, 1000));
    owner.rename(&mine2, &sl).unwrap();
    assert_eq!(read_all(&c, &sl), b"bob's");
    assert_eq!(links_when(&c, &sf, 1), 1);
    for path in [&sf, &sl, &mine] {
        c.unlink(path).unwrap();
    }
    c.rmdir("/s").unwrap();
    // All names go; so do the files.
    for path in [&q, &g, &gl] {
        c.unlink(path).unwrap();
    }
    assert!(listed(&c).is_empty());
    assert_eq!(weft_testkit::objects_when(&c, |n| n == 0), 0);
    c.rmdir("/d").unwrap();
}

#[test]
fn a_rename_over_a_name_whose_file_another_shard_keeps_replaces_that_name() {
    let mut tc = sharded("links-replaced");
    let c = tc.client_with_timeout(Duration::from_secs(3));
    c.mkdir("/d", 0o777).unwrap();
    let d = id_of(&c, "/d");
    let on = |shard: u32, prefix: &str| format!("/d/{}", name_on(d, shard, prefix));
    // File F on shard 1, with a second name on shard 2 (a stub there).
    let (f, l) = (on(1, "f"), on(2, "l"));
    write_file(&c, &f, b"first");
    c.link(&f, &l).unwrap();
    // A rename on shard 2 over that stub: a local rename there, and the
    // file's shard drops the link.
    let other = on(2, "o");
    write_file(&c, &other, b"other");
    let other_id = id_of(&c, &other);
    c.rename(&other, &l).unwrap();
    assert_eq!(id_of(&c, &l), other_id);
    assert_eq!(read_all(&c, &l), b"other");
    assert!(matches!(c.stat(&other), Err(Error::NotFound(_))));
    assert_eq!(links_when(&c, &f, 1), 1, "the file kept by shard 1 lost the replaced name's link");
    assert_eq!(read_all(&c, &f), b"first");
    assert!(!matches!(ask(&tc, 1, MetaReq::Stat { path: l.clone() }), Response::Attr(ref a) if a.id != other_id), "no copy of the old name left on the file's shard");
    let mut want = vec![f[3..].to_string(), l[3..].to_string()];
    want.sort();
    assert_eq!(names(&c, "/d"), want);
    // A file moving between shards (its one name, on shard 0) over a stub
    // on shard 2 whose file, kept by shard 1, has no other name: that file
    // goes, data and all.
    let (g, gl) = (on(1, "g"), on(2, "gl"));
    write_file(&c, &g, b"doomed");
    c.link(&g, &gl).unwrap();
    c.unlink(&g).unwrap();
    assert_eq!(c.stat(&gl).unwrap().0.nlink, 1);
    let m = on(0, "m");
    write_file(&c, &m, b"mover");
    let m_id = id_of(&c, &m);
    let before = objects(&c);
    c.rename(&m, &gl).unwrap();
    assert_eq!((id_of(&c, &gl), read_all(&c, &gl)), (m_id, b"mover".to_vec()));
    assert!(weft_testkit::objects_when(&c, |n| n < before) < before, "the replaced file's objects are deleted with its last name");
    // With the file's shard down: the rename is made by the name's shard
    // alone, and the link is dropped when the file's shard returns.
    let (h, hl) = (on(1, "h"), on(2, "hl"));
    write_file(&c, &h, b"kept");
    c.link(&h, &hl).unwrap();
    let n = on(2, "n");
    write_file(&c, &n, b"new");
    tc.lc.kill(1);
    c.rename(&n, &hl).unwrap();
    assert_eq!(read_all(&c, &hl), b"new");
    tc.lc.restart(1).unwrap();
    assert_eq!(links_when(&c, &h, 1), 1, "the link is dropped once the file's shard is back");
    assert_eq!(read_all(&c, &h), b"kept");
    // Not made (EXDEV, `mv` copies): a name moving over a stub when both
    // files are kept by the same shard, whose copy of the old name stands
    // in the way; nothing changes.
    let (k, kl, x) = (on(1, "k"), on(0, "kl"), on(2, "x"));
    write_file(&c, &k, b"k");
    c.link(&k, &kl).unwrap();
    c.link(&h, &x).unwrap();
    assert!(matches!(c.rename(&kl, &x), Err(Error::CrossShard(_))));
    assert_eq!((read_all(&c, &x), c.stat(&h).unwrap().0.nlink, c.stat(&k).unwrap().0.nlink), (b"kept".to_vec(), 2, 2));
    for path in [&f, &l, &gl, &h, &hl, &k, &kl, &x] {
        c.unlink(path).unwrap();
    }
    assert!(names(&c, "/d").is_empty());
    assert_eq!(weft_testkit::objects_when(&c, |n| n == 0), 0);
    c.rmdir("/d").unwrap();
}

#[test]
fn a_name_replaced_while_it_moves_away_keeps_the_count_right_either_way() {
    let mut tc = sharded("links-replaced-moving");
    let c = tc.client_with_timeout(Duration::from_secs(3));
    c.mkdir("/d", 0o777).unwrap();
    let d = id_of(&c, "/d");
    let on = |shard: u32, prefix: &str| format!("/d/{}", name_on(d, shard, prefix));
    // File F on shard 1, named f there and n on shard 2 (a stub). n moves
    // to shard 0 while shard 0 is down; meanwhile shard 2 renames another
    // file over n.
    let (f, n) = (on(1, "f"), on(2, "n"));
    write_file(&c, &f, b"moving");
    c.link(&f, &n).unwrap();
    let m = on(0, "m");
    let over = |name: &str| {
        let x = on(2, name);
        write_file(&c, &x, b"over");
        c.rename(&x, &n).unwrap();
        assert_eq!(read_all(&c, &n), b"over");
    };
    // 1. The move is taken when shard 0 returns: n's link became m's.
    tc.lc.kill(0);
    assert!(c.rename(&n, &m).is_err(), "shard 0 is down: the move waits");
    over("x");
    // Shard 2 pushes its log every second: its `Unlink` reaches shard 1
    // while the move still waits.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(c.stat(&f).unwrap().0.nlink, 2, "the link waits for the move's answer");
    tc.lc.restart(0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.stat(&m).is_err() {
        assert!(Instant::now() < deadline, "the move was never made");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(c.stat(&f).unwrap().0.nlink, 2, "f and m: the replaced n's link moved to m");
    assert_eq!(read_all(&c, &m), b"moving");
    // 2. Refused when shard 0 returns (bob may not replace a name in a
    // sticky directory that is not his, whose name there is a stub of a
    // file of shard 2): n2's link goes then.
    c.unlink(&n).unwrap();
    let n2 = on(2, "n2");
    c.link(&f, &n2).unwrap();
    assert_eq!(c.stat(&f).unwrap().0.nlink, 3);
    c.mkdir("/s", 0o1777).unwrap();
    c.chown("/s", 1000, 1000).unwrap();
    let s_dir = id_of(&c, "/s");
    let (g, gs) = (format!("/s/{}", name_on(s_dir, 2, "g")), format!("/s/{}", name_on(s_dir, 0, "gs")));
    write_file(&c, &g, b"g");
    c.link(&g, &gs).unwrap();
    let bob = tc.client_with_timeout(Duration::from_secs(3)).with_cred(weft_wire::Cred::new(1001, 1001));
    // Bob's client learns the directories first (a client new to them
    // asks shard 0, which is about to stop).
    bob.stat(&n2).unwrap();
    bob.stat(&gs).unwrap();
    tc.lc.kill(0);
    let r = bob.rename(&n2, &gs);
    assert!(matches!(&r, Err(Error::Io { message, .. }) if message.contains("made or undone when that shard answers")), "{r:?}");
    let y = on(2, "y");
    write_file(&c, &y, b"over");
    c.rename(&y, &n2).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(c.stat(&f).unwrap().0.nlink, 3, "the link waits for the move's answer");
    tc.lc.restart(0).unwrap();
    assert_eq!(links_when(&c, &f, 2), 2, "f and m: the refused move left n2, whose stub was replaced, so its link went");
    assert_eq!((read_all(&c, &gs), c.stat(&g).unwrap().0.nlink), (b"g".to_vec(), 2), "the refused name is as it was");
    for path in [&g, &gs] {
        c.unlink(path).unwrap();
    }
    c.rmdir("/s").unwrap();
    // Nothing is lost: every name reads, and the file goes with its last.
    assert_eq!((read_all(&c, &f), read_all(&c, &m)), (b"moving".to_vec(), b"moving".to_vec()));
    c.unlink(&f).unwrap();
    assert_eq!(c.stat(&m).unwrap().0.nlink, 1);
    assert_eq!(read_all(&c, &m), b"moving");
    for path in [&m, &n2] {
        c.unlink(path).unwrap();
    }
    assert!(names(&c, "/d").is_empty());
    assert_eq!(weft_testkit::objects_when(&c, |n| n == 0), 0);
}
