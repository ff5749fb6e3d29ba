//! Hard links across metadata shards (issue 23): a link whose new name
//! another shard keeps names the same file, counted once, listed with the
//! file's own attributes, removed from every shard's view; a name's shard
//! that refuses leaves the count as it was; one that is down gets the
//! link when it returns.

mod common;

use common::shards::{ask, excl, id_of, name_on, sharded};
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

#[test]
fn a_link_to_another_shards_name_is_the_same_file_until_its_last_name_goes() {
    let tc = sharded("links-across");
    let c = tc.client();
    c.mkdir("/d", 0o777).unwrap();
    let d = id_of(&c, "/d");
    let f = format!("/d/{}", name_on(d, 0, "f"));
    let l = format!("/d/{}", name_on(d, 1, "l"));
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
    let on_l = ask(&tc, 1, MetaReq::Stat { path: l.clone() });
    assert!(matches!(on_l, Response::Route { shard: 0, .. }), "{on_l:?}");
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
    // A third name, linked from the second, on the third shard.
    let m = format!("/d/{}", name_on(d, 2, "m"));
    assert_eq!(c.link(&l, &m).unwrap().nlink, 3);
    assert!(matches!(c.rmdir("/d"), Err(Error::NotEmpty(_))));
    // Renames of such names, or over them, are not built: EXDEV (`mv`
    // copies), and nothing moves.
    let other = format!("/d/{}", name_on(d, 1, "o"));
    write_file(&c, &other, b"other");
    assert!(matches!(c.rename(&other, &l), Err(Error::CrossShard(_))));
    assert!(matches!(c.rename(&l, &format!("/d/{}", name_on(d, 1, "p"))), Err(Error::CrossShard(_))));
    assert_eq!(read_all(&c, &l), b"data+more");
    assert_eq!(read_all(&c, &other), b"other");
    c.unlink(&other).unwrap();
    // Names go one by one; the file stays until the last.
    c.unlink(&f).unwrap();
    assert_eq!(c.stat(&l).unwrap().0.nlink, 2);
    c.unlink(&l).unwrap();
    assert!(matches!(c.stat(&l), Err(Error::NotFound(_))));
    assert!(matches!(ask(&tc, 1, MetaReq::Stat { path: l.clone() }), Response::Error { code: weft_wire::ErrorCode::NotFound, .. }), "the stub is gone from its shard");
    assert_eq!(names(&c, "/d"), vec![m[3..].to_string()]);
    let (attr, size) = c.stat(&m).unwrap();
    assert_eq!((attr.id, attr.nlink, size), (id, 1, 9));
    c.unlink(&m).unwrap();
    assert!(names(&c, "/d").is_empty());
    c.rmdir("/d").unwrap();
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
    // Meanwhile the file is not removed under the link.
    assert!(matches!(c.unlink(&f), Err(Error::Busy { .. })));
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
}

#[test]
fn the_mount_links_names_on_different_shards() {
    if !common::mount::nix_is_root() && std::env::var_os("WEFT_TEST_SKIP_ROOT").is_some() {
        return;
    }
    let tc = sharded("links-mount");
    let c = tc.client();
    c.mkdir("/d", 0o777).unwrap();
    let d = id_of(&c, "/d");
    let (f, l) = (name_on(d, 0, "f"), name_on(d, 2, "l"));
    let m = common::mount::Mount::new(&tc, "mnt");
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
