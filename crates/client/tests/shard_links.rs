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
    // A rename over such a name is not built: EXDEV (`mv` copies), and
    // nothing moves. (Renames of them are: see below.)
    let other = format!("/d/{}", name_on(d, 2, "o"));
    write_file(&c, &other, b"other");
    assert!(matches!(c.rename(&other, &l), Err(Error::CrossShard(_))));
    assert_eq!(read_all(&c, &l), b"data+more");
    assert_eq!(read_all(&c, &other), b"other");
    c.unlink(&other).unwrap();
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
    // Refused by the new name's shard (a name of another file, kept by a
    // third shard, there): nothing moves, and the copy of the new name the
    // file's shard made is taken back.
    let g = on(1, "g");
    write_file(&c, &g, b"other");
    let gl = on(2, "gl");
    c.link(&g, &gl).unwrap();
    assert!(matches!(c.rename(&p, &gl), Err(Error::CrossShard(_))));
    assert_eq!(listed(&c), want(&[&p, &q, &g, &gl]));
    let copy = ask(&tc, 0, MetaReq::Stat { path: gl.clone() });
    assert!(!matches!(copy, Response::Attr(ref a) if a.id == id), "no copy of the refused name is left on the file's shard: {copy:?}");
    assert_eq!(read_all(&c, &gl), b"other");
    assert_eq!(c.stat(&p).unwrap().0.nlink, 2, "the refused move left the file as it was");
    // All names go; so do the files.
    for path in [&p, &q, &g, &gl] {
        c.unlink(path).unwrap();
    }
    assert!(listed(&c).is_empty());
    assert_eq!(weft_testkit::objects_when(&c, |n| n == 0), 0);
    c.rmdir("/d").unwrap();
}
