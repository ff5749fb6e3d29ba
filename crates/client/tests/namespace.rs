//! Namespace operations through the metadata service, and their errors.

use weft_testkit::TestCluster;
use weft_client::{Client, ClientOptions, CreateOptions, Error, FileKind};
use weft_wire::Cred;

fn excl() -> CreateOptions {
    CreateOptions { exclusive: true, ..CreateOptions::default() }
}

#[test]
fn directories_files_and_their_errors() {
    let tc = TestCluster::start("ns", 2);
    let c = tc.client();
    c.mkdir("/d", 0o755).unwrap();
    c.mkdir("/d/e", 0o755).unwrap();
    assert!(matches!(c.mkdir("/d", 0o755), Err(Error::Exists(_))));
    assert!(matches!(c.mkdir("/nope/x", 0o755), Err(Error::NotFound(_))));
    c.create("/d/f", excl()).unwrap().write_at(0, b"hello").unwrap();
    assert!(matches!(c.create("/d/f", excl()), Err(Error::Exists(_))));
    // Non-exclusive create opens the existing file and keeps its data.
    let again = c.create("/d/f", CreateOptions::default()).unwrap();
    assert_eq!(again.size().unwrap(), 5);
    assert!(matches!(c.create("/d/f/g", excl()), Err(Error::NotDir(_))));
    assert!(matches!(c.open("/d", false), Err(Error::IsDir(_))));
    assert!(matches!(c.open("/d/missing", false), Err(Error::NotFound(_))));
    assert!(matches!(c.create("/d/../x", excl()), Err(Error::InvalidPath(_))));
    assert!(matches!(c.create("relative", excl()), Err(Error::InvalidPath(_))));
    assert!(matches!(c.create(&format!("/{}", "n".repeat(300)), excl()), Err(Error::InvalidPath(_))));

    let names: Vec<String> = c.readdir("/d").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, ["e", "f"]);
    let (attr, size) = c.stat("/d/f").unwrap();
    assert_eq!((attr.kind, size), (FileKind::File, 5));
    assert_eq!(attr.mode, 0o644);

    assert!(matches!(c.rmdir("/d"), Err(Error::NotEmpty(_))));
    assert!(matches!(c.unlink("/d/e"), Err(Error::IsDir(_))));
    assert!(matches!(c.rmdir("/d/f"), Err(Error::NotDir(_))));
    c.rmdir("/d/e").unwrap();
    c.unlink("/d/f").unwrap();
    assert!(matches!(c.stat("/d/f"), Err(Error::NotFound(_))));
    assert!(c.readdir("/d").unwrap().is_empty());
    c.rmdir("/d").unwrap();
}

#[test]
fn rename_moves_and_replaces_like_posix() {
    let tc = TestCluster::start("rename", 2);
    let c = tc.client();
    c.mkdir("/a", 0o755).unwrap();
    c.mkdir("/b", 0o755).unwrap();
    c.create("/a/x", excl()).unwrap().write_at(0, b"xxxx").unwrap();
    c.create("/b/y", excl()).unwrap().write_at(0, b"yy").unwrap();
    // Replacing a file: y's contents are gone, x's are at the new name.
    c.rename("/a/x", "/b/y").unwrap();
    assert!(matches!(c.stat("/a/x"), Err(Error::NotFound(_))));
    let f = c.open("/b/y", false).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(f.read_at(0, &mut buf).unwrap(), 4);
    assert_eq!(&buf[..4], b"xxxx");
    assert!(matches!(c.rename("/a", "/a/sub"), Err(Error::InvalidPath(_))));
    assert!(matches!(c.rename("/b/y", "/a"), Err(Error::IsDir(_))));
    assert!(matches!(c.rename("/nope", "/z"), Err(Error::NotFound(_))));
    // Issue 8: renaming a missing entry to itself succeeded.
    assert!(matches!(c.rename("/nope", "/nope"), Err(Error::NotFound(_))));
    c.rename("/b/y", "/b/y").unwrap();
    c.rename("/b", "/c").unwrap();
    assert_eq!(c.readdir("/c").unwrap()[0].name, "y");
    let root: Vec<String> = c.readdir("/").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(root, ["a", "c"]);
}

#[test]
fn permissions_are_checked_for_other_users() {
    let tc = TestCluster::start("perm", 2);
    let root = tc.client();
    root.mkdir("/private", 0o700).unwrap();
    root.mkdir("/shared", 0o777).unwrap();
    root.create("/shared/ro", CreateOptions { mode: 0o444, ..excl() }).unwrap();
    let user = Client::with_options(tc.cluster(), ClientOptions { cred: Cred::new(1000, 1000), ..ClientOptions::default() }).unwrap();
    assert!(matches!(user.create("/private/x", excl()), Err(Error::Permission(_))));
    assert!(matches!(user.readdir("/private"), Err(Error::Permission(_))));
    assert!(matches!(user.open("/shared/ro", true), Err(Error::Permission(_))));
    assert!(user.open("/shared/ro", false).is_ok());
    assert!(matches!(user.chmod("/shared/ro", 0o666), Err(Error::Permission(_))));
    let mine = user.create("/shared/mine", excl()).unwrap();
    assert_eq!((mine.attr().uid, mine.attr().gid), (1000, 1000));
    user.chmod("/shared/mine", 0o600).unwrap();
    root.chmod("/private", 0o755).unwrap();
    assert!(user.readdir("/private").is_ok());
}

/// With `root_squash`, a client asserting uid 0 is served as nobody: it
/// cannot read or remove another user's private files, nor chown, and
/// what it creates belongs to nobody. Without it, root can (the control).
#[test]
fn root_squash_serves_uid_0_as_nobody() {
    for squash in [false, true] {
        let tc = TestCluster::start_spec(&format!("squash-{squash}"), weft_launch::ClusterSpec { data_servers: 1, root_squash: squash, ..Default::default() });
        let alice = Client::with_options(tc.cluster(), ClientOptions { cred: Cred::new(1000, 1000), ..ClientOptions::default() }).unwrap();
        alice.mkdir("/alice", 0o700).unwrap();
        alice.create("/alice/secret", excl()).unwrap();
        let root = Client::with_options(tc.cluster(), ClientOptions { cred: Cred::new(0, 0), ..ClientOptions::default() }).unwrap();
        let read = root.open("/alice/secret", false);
        let chown = root.chown("/alice", 0, 0);
        let made = root.create("/by-root", excl()).unwrap();
        if squash {
            assert!(matches!(read, Err(Error::Permission(_))), "root read alice's private file");
            assert!(matches!(chown, Err(Error::Permission(_))), "{chown:?}");
            assert!(matches!(root.unlink("/alice/secret"), Err(Error::Permission(_))));
            assert_eq!((made.attr().uid, made.attr().gid), (65534, 65534));
        } else {
            assert!(read.is_ok() && chown.is_ok());
            assert_eq!(made.attr().uid, 0);
        }
    }
}

#[test]
fn layouts_follow_hints_and_rotate_over_servers() {
    let tc = TestCluster::start("layout", 4);
    let c = tc.client();
    let firsts: Vec<u32> = (0..8).map(|i| c.create(&format!("/s{i}"), CreateOptions { stripe_count: 1, ..excl() }).unwrap().attr().layout.as_ref().unwrap().servers[0].0).collect();
    // Small files start on every data server in turn (servers 1..=4).
    let mut distinct = firsts.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct, [1, 2, 3, 4], "first servers {firsts:?}");
    let f = c.create("/big", CreateOptions { stripe_size: 1 << 20, stripe_count: 3, ..excl() }).unwrap();
    assert_eq!((f.stripe_size(), f.stripe_count()), (1 << 20, 3));
    assert!(matches!(c.create("/toomany", CreateOptions { stripe_count: 9, ..excl() }), Err(Error::BadRequest(_))));
}

#[test]
fn readdir_pages_through_large_directories() {
    let tc = TestCluster::start("readdir", 1);
    let c = tc.client();
    c.mkdir("/many", 0o755).unwrap();
    let n = weft_wire::limits::MAX_DIR_PAGE + 37;
    for i in 0..n {
        c.mkdir(&format!("/many/{i:05}"), 0o755).unwrap();
    }
    let names: Vec<String> = c.readdir("/many").unwrap().into_iter().map(|e| e.name).collect();
    let want: Vec<String> = (0..n).map(|i| format!("{i:05}")).collect();
    assert_eq!(names, want);
}

/// Issue 8: a write to a file that another client had removed recreated
/// its objects, which nothing ever removed again.
#[test]
fn writes_to_a_removed_file_fail_and_leave_no_objects() {
    let mut tc = TestCluster::start("unlinked", 2);
    let (a, b) = (tc.client(), tc.client());
    let f = a.create("/doomed", excl()).unwrap();
    f.write_at(0, &[1u8; 200_000]).unwrap();
    b.unlink("/doomed").unwrap();
    assert_eq!(weft_testkit::objects_when(&b, |n| n == 0), 0, "the removed file's objects were not deleted");
    let r = f.write_at(0, &[2u8; 200_000]);
    assert!(matches!(r, Err(Error::NotFound(ref m)) if m.contains("deleted")), "{r:?}");
    let objects: u64 = b.status().into_iter().filter(|s| s.server.services.contains(&weft_net::Service::Data)).map(|s| s.stats.unwrap().objects).sum();
    assert_eq!(objects, 0, "an object of the removed file came back");
    // Remembered across a restart of the data servers.
    tc.lc.restart(1).unwrap();
    tc.lc.restart(2).unwrap();
    assert!(matches!(f.write_at(0, b"x"), Err(Error::NotFound(_))));
}

/// Issue 11: the sticky bit was stored but not enforced (bob deleted
/// alice's file in a mode 1777 directory).
#[test]
fn in_a_sticky_directory_only_owners_remove_or_rename() {
    let tc = TestCluster::start("sticky", 1);
    let root = tc.client();
    root.mkdir("/tmp", 0o1777).unwrap();
    let as_user = |uid: u32| Client::with_options(tc.cluster(), ClientOptions { cred: Cred::new(uid, uid), ..ClientOptions::default() }).unwrap();
    let (alice, bob) = (as_user(1001), as_user(1002));
    alice.create("/tmp/alice", excl()).unwrap();
    bob.create("/tmp/bob", excl()).unwrap();
    assert!(matches!(bob.unlink("/tmp/alice"), Err(Error::Permission(_))));
    assert!(matches!(bob.rename("/tmp/alice", "/tmp/stolen"), Err(Error::Permission(_))));
    assert!(matches!(bob.rename("/tmp/bob", "/tmp/alice"), Err(Error::Permission(_))), "replacing alice's file is removing it");
    assert!(root.stat("/tmp/alice").is_ok());
    bob.rename("/tmp/bob", "/tmp/bob2").unwrap();
    alice.unlink("/tmp/alice").unwrap();
    root.unlink("/tmp/bob2").unwrap();
    // Without the sticky bit, write permission on the directory suffices.
    root.mkdir("/open", 0o777).unwrap();
    alice.create("/open/a", excl()).unwrap();
    bob.unlink("/open/a").unwrap();
}

/// Issue 11: setgid directories pass their group on, and only root changes
/// owners (clearing setuid and setgid on files, as POSIX asks).
#[test]
fn setgid_directories_pass_their_group_and_only_root_gives_files_away() {
    let tc = TestCluster::start("setgid", 1);
    let root = tc.client();
    root.mkdir("/proj", 0o2777).unwrap();
    root.chown("/proj", 0, 500).unwrap();
    let alice = Client::with_options(tc.cluster(), ClientOptions { cred: Cred::new(1001, 1001), ..ClientOptions::default() }).unwrap();
    let f = alice.create("/proj/data", excl()).unwrap();
    assert_eq!((f.attr().uid, f.attr().gid), (1001, 500), "the file takes the directory's group");
    let sub = alice.mkdir("/proj/sub", 0o755).unwrap();
    assert_eq!((sub.gid, sub.mode & 0o2000), (500, 0o2000), "subdirectories inherit the setgid bit");
    assert_eq!(alice.create("/proj/sub/deeper", excl()).unwrap().attr().gid, 500);
    // Outside it, the creator's own group.
    root.mkdir("/plain", 0o777).unwrap();
    assert_eq!(alice.create("/plain/x", excl()).unwrap().attr().gid, 1001);
    // chown: another owner, or a group not her own, only by root (the
    // owner may move her file to a group of hers, as on Linux); it clears
    // setuid/setgid on a file.
    assert!(matches!(alice.chown("/proj/data", 1002, 1001), Err(Error::Permission(_))));
    assert!(matches!(alice.chown("/proj/data", 1001, 1002), Err(Error::Permission(_))));
    assert_eq!(alice.chown("/proj/data", 1001, 500).unwrap().gid, 500, "keeping a group she is not in");
    assert_eq!(alice.chown("/proj/data", 1001, 1001).unwrap().gid, 1001);
    root.chmod("/proj/data", 0o6755).unwrap();
    let a = root.chown("/proj/data", 1002, 1002).unwrap();
    assert_eq!((a.uid, a.gid, a.mode), (1002, 1002, 0o755));
}

/// A writer who is not the owner may drop a file's setuid and setgid bits
/// (what a write asks for) and nothing else: not another bit, not a
/// directory's setgid, not without write permission. Chown keeps an id
/// given as KEEP_ID. A directory's link count is 2 plus its
/// subdirectories through mkdir, rmdir and renames (also onto an empty
/// directory), and its times move when entries come and go.
#[test]
fn writers_drop_privileges_only_and_directories_count_their_links() {
    let tc = TestCluster::start("privs-links", 1);
    let root = tc.client();
    let bob = Client::with_options(tc.cluster(), ClientOptions { cred: Cred::new(1002, 1002), ..ClientOptions::default() }).unwrap();
    root.create("/f", excl()).unwrap();
    root.chmod("/f", 0o6666).unwrap();
    assert!(matches!(bob.chmod("/f", 0o6667), Err(Error::Permission(_))), "another bit");
    assert!(matches!(bob.chmod("/f", 0o0666 | 0o4000 | 0o1000), Err(Error::Permission(_))), "the sticky bit with it");
    assert_eq!(bob.chmod("/f", 0o2666).unwrap().mode, 0o2666, "setuid dropped");
    assert_eq!(bob.chmod("/f", 0o0666).unwrap().mode, 0o0666, "setgid dropped");
    root.chmod("/f", 0o6644).unwrap();
    assert!(matches!(bob.chmod("/f", 0o644), Err(Error::Permission(_))), "no write permission");
    root.mkdir("/shared", 0o2777).unwrap();
    assert!(matches!(bob.chmod("/shared", 0o777), Err(Error::Permission(_))), "a directory's setgid is its owner's");
    // chown -1.
    let a = root.chown("/f", 1002, weft_client::KEEP_ID).unwrap();
    assert_eq!((a.uid, a.gid), (1002, 0));
    let a = root.chown("/f", weft_client::KEEP_ID, 7).unwrap();
    assert_eq!((a.uid, a.gid), (1002, 7));
    // Link counts and times.
    let nlink = |p: &str| root.stat(p).unwrap().0.nlink;
    let mtime = |p: &str| root.stat(p).unwrap().0.mtime_ns;
    root.mkdir("/a", 0o755).unwrap();
    root.mkdir("/b", 0o755).unwrap();
    assert_eq!((nlink("/"), nlink("/a")), (5, 2));
    root.mkdir("/a/x", 0o755).unwrap();
    root.mkdir("/a/y", 0o755).unwrap();
    root.mkdir("/b/z", 0o755).unwrap();
    assert_eq!((nlink("/a"), nlink("/b")), (4, 3));
    root.rename("/a/x", "/b/x").unwrap();
    assert_eq!((nlink("/a"), nlink("/b")), (3, 4), "moved across");
    root.rename("/a/y", "/b/z").unwrap();
    assert_eq!((nlink("/a"), nlink("/b")), (2, 4), "onto an empty directory");
    root.rename("/b/x", "/b/x2").unwrap();
    root.rename("/b/x2", "/b/x2").unwrap();
    assert_eq!(nlink("/b"), 4, "within one directory, and onto itself");
    root.rmdir("/b/x2").unwrap();
    assert_eq!(nlink("/b"), 3);
    let before = mtime("/a");
    std::thread::sleep(std::time::Duration::from_millis(5));
    root.create("/a/file", excl()).unwrap();
    assert!(mtime("/a") > before, "a new entry moves the directory's time");
    assert_eq!(nlink("/a"), 2, "files do not count");
    // By id: changes follow the file through a rename; a stat by id is
    // root's (a mount's) only; a removed file is gone by id too.
    let id = root.stat("/a/file").unwrap().0.id;
    root.rename("/a/file", "/b/moved").unwrap();
    assert_eq!(root.change(id, weft_client::AttrChange::Mode(0o640)).unwrap().mode, 0o640);
    assert_eq!(root.stat("/b/moved").unwrap().0.mode, 0o640);
    assert!(matches!(bob.change(id, weft_client::AttrChange::Mode(0o777)), Err(Error::Permission(_))), "not bob's");
    root.chmod("/b/moved", 0o666).unwrap();
    assert!(matches!(bob.change(id, weft_client::AttrChange::Mtime(weft_client::TIME_NOW)), Err(Error::Permission(_))), "a writer who is not the owner changes by path only");
    root.chmod("/b/moved", 0o640).unwrap();
    assert_eq!(root.stat_id(id).unwrap().0.mode, 0o640);
    assert!(matches!(bob.stat_id(id), Err(Error::Permission(_))), "an id says nothing of the path's search rights");
    root.unlink("/b/moved").unwrap();
    assert!(matches!(root.change(id, weft_client::AttrChange::Mtime(weft_client::TIME_NOW)), Err(Error::NotFound(_))));
    assert!(matches!(root.stat_id(id), Err(Error::NotFound(_))));
    // Hard links, as Linux's protected hard links: another user links
    // only a regular file it may read and write, not setuid.
    root.mkdir("/pub", 0o777).unwrap();
    root.create("/pub/private", excl()).unwrap();
    root.chmod("/pub/private", 0o600).unwrap();
    assert!(matches!(bob.link("/pub/private", "/pub/mine"), Err(Error::Permission(_))));
    root.chmod("/pub/private", 0o4666).unwrap();
    assert!(matches!(bob.link("/pub/private", "/pub/mine"), Err(Error::Permission(_))), "setuid");
    root.chmod("/pub/private", 0o666).unwrap();
    assert_eq!(bob.link("/pub/private", "/pub/mine").unwrap().nlink, 2);
    assert!(matches!(root.link("/pub", "/pub2"), Err(Error::Permission(_))), "a directory");
    assert_eq!(root.mknod("/pub/fifo", 0o644, weft_client::FileKind::Fifo).unwrap().kind, weft_client::FileKind::Fifo);
    assert!(matches!(root.mknod("/pub/file", 0o644, weft_client::FileKind::File), Err(Error::BadRequest(_))));
    assert!(matches!(root.open("/pub/fifo", false), Err(Error::BadRequest(_))), "no data in Weft");
}

/// Mutations from many clients at once share commits (group commit) but
/// keep their own results, in some serial order: of 8 exclusive creates of
/// one name exactly one wins; 8 x 50 distinct creates all land, once.
#[test]
fn concurrent_mutations_each_get_their_own_result() {
    let tc = TestCluster::start("group-commit", 1);
    let clients: Vec<Client> = (0..8).map(|_| tc.client()).collect();
    let wins: Vec<bool> = std::thread::scope(|s| {
        let hs: Vec<_> = clients.iter().map(|c| s.spawn(move || c.create("/contested", excl()).is_ok())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(wins.iter().filter(|&&w| w).count(), 1, "{wins:?}");
    std::thread::scope(|s| {
        for (k, c) in clients.iter().enumerate() {
            s.spawn(move || {
                c.mkdir(&format!("/d{k}"), 0o755).unwrap();
                for i in 0..50 {
                    c.create(&format!("/d{k}/f{i}"), excl()).unwrap();
                }
            });
        }
    });
    for k in 0..8 {
        assert_eq!(clients[0].readdir(&format!("/d{k}")).unwrap().len(), 50);
    }
}

/// Symbolic links: kept with their target, never followed by the service,
/// removed and replaced like files; survive a restart of the service.
#[test]
fn symbolic_links_keep_their_target_and_are_not_followed() {
    let mut tc = TestCluster::start("symlinks", 2);
    let c = tc.client();
    c.mkdir("/d", 0o755).unwrap();
    c.create("/d/f", excl()).unwrap().write_at(0, b"data").unwrap();
    let a = c.symlink("f", "/d/rel").unwrap();
    assert_eq!(a.kind, FileKind::Symlink);
    assert!(a.layout.is_none());
    c.symlink("/nowhere/at/all", "/d/dangling").unwrap();
    assert_eq!(c.readlink("/d/rel").unwrap(), "f");
    // lstat's size is the target's length.
    assert_eq!(c.stat("/d/dangling").unwrap().1, "/nowhere/at/all".len() as u64);
    assert!(matches!(c.symlink("x", "/d/rel"), Err(Error::Exists(_))));
    assert!(matches!(c.symlink("x", "/d/f"), Err(Error::Exists(_))));
    assert!(matches!(c.create("/d/rel", CreateOptions::default()), Err(Error::Exists(_))));
    assert!(matches!(c.readlink("/d/f"), Err(Error::BadRequest(_))));
    // The service does not follow links: not as the file, not as a directory.
    assert!(c.open("/d/rel", false).is_err());
    c.symlink("/d", "/dirlink").unwrap();
    assert!(matches!(c.stat("/dirlink/f"), Err(Error::NotDir(_))));
    assert!(matches!(c.rmdir("/dirlink"), Err(Error::NotDir(_))));
    let kinds: Vec<(String, FileKind)> = c.readdir("/d").unwrap().into_iter().map(|e| (e.name, e.attr.kind)).collect();
    assert_eq!(kinds, [("dangling".into(), FileKind::Symlink), ("f".into(), FileKind::File), ("rel".into(), FileKind::Symlink)]);
    // Renamed over a file: the file's data go, the link takes its name.
    c.rename("/d/rel", "/d/f").unwrap();
    assert_eq!(c.readlink("/d/f").unwrap(), "f");
    // A file renamed over a link replaces it; the link's target goes too.
    c.create("/d/g", excl()).unwrap();
    c.rename("/d/g", "/d/dangling").unwrap();
    assert_eq!(c.stat("/d/dangling").unwrap().0.kind, FileKind::File);
    // A crash loses what no fsync covered (metadata window): sync first.
    c.sync_meta().unwrap();
    tc.lc.restart(0).unwrap();
    let c = tc.client();
    assert_eq!(c.readlink("/d/f").unwrap(), "f");
    assert_eq!(c.readlink("/dirlink").unwrap(), "/d");
    c.unlink("/d/f").unwrap();
    c.unlink("/dirlink").unwrap();
    assert!(matches!(c.readlink("/d/f"), Err(Error::NotFound(_))));
}

/// Supplementary groups count for group permission bits (as on POSIX).
#[test]
fn supplementary_groups_grant_group_access() {
    let tc = TestCluster::start("groups", 1);
    let root = tc.client();
    let user = |uid: u32, groups: &[u32]| Client::with_options(tc.cluster(), ClientOptions { cred: Cred::with_groups(uid, uid, groups), ..ClientOptions::default() }).unwrap();
    root.mkdir("/proj", 0o770).unwrap();
    root.chown("/proj", 1001, 2000).unwrap();
    let bob = user(1002, &[3000, 2000]);
    bob.create("/proj/bob", excl()).unwrap();
    let carol = user(1003, &[3000]);
    assert!(matches!(carol.create("/proj/carol", excl()), Err(Error::Permission(_))));
    assert!(matches!(carol.readdir("/proj"), Err(Error::Permission(_))));
    assert_eq!(bob.readdir("/proj").unwrap().len(), 1);
}

/// Requests the data servers served between two status reports, less the
/// reports themselves.
fn data_requests(c: &Client) -> u64 {
    c.status().into_iter().filter_map(|s| s.stats.ok()).filter(|s| s.services == 2).map(|s| s.requests).sum()
}

/// How many requests a stat of `path` sent the data servers, and its size.
fn stat_cost(c: &Client, path: &str, servers: u64) -> (u64, u64) {
    let before = data_requests(c);
    let (_, size) = c.stat(path).unwrap();
    (data_requests(c) - before - servers, size)
}

/// Stat answers from the metadata service alone once every writer closed,
/// and asks the data servers while one is open (or died without closing).
#[test]
fn stat_knows_sizes_without_the_data_servers_once_writers_close() {
    let tc = TestCluster::start("stat-sizes", 4);
    let c = tc.client();
    let f = c.create("/s", CreateOptions { stripe_size: 65536, ..Default::default() }).unwrap();
    f.write_at(0, &vec![1u8; 300_000]).unwrap();
    assert_eq!(stat_cost(&c, "/s", 4), (4, 300_000), "a writer is open: ask every data server");
    f.close().unwrap();
    assert_eq!(stat_cost(&c, "/s", 4), (0, 300_000), "every writer closed: the metadata service knows");
    // Two writers: the size is known again only when both closed.
    let g = c.open("/s", true).unwrap();
    let h = tc.client().open("/s", true).unwrap();
    g.write_at(400_000, &[2u8; 100_000]).unwrap();
    assert_eq!(stat_cost(&c, "/s", 4), (4, 500_000));
    g.close().unwrap();
    assert_eq!(stat_cost(&c, "/s", 4), (4, 500_000), "one writer still open");
    h.truncate(10).unwrap();
    h.close().unwrap();
    assert_eq!(stat_cost(&c, "/s", 4), (0, 10), "the last close reported the truncated size");
    // A writer that dies without closing: stats keep asking, and are right.
    let dead = c.open("/s", true).unwrap();
    dead.write_at(0, &[3u8; 20]).unwrap();
    drop(dead);
    assert_eq!(stat_cost(&c, "/s", 4), (4, 20));
    // A new file created and closed unwritten is known to be empty; a
    // read-only open changes nothing.
    c.create("/empty", CreateOptions::default()).unwrap().close().unwrap();
    c.open("/empty", false).unwrap().close().unwrap();
    assert_eq!(stat_cost(&c, "/empty", 4), (0, 0));
    // A removed and recreated name is a new file.
    c.unlink("/empty").unwrap();
    let again = c.create("/empty", CreateOptions::default()).unwrap();
    again.write_at(0, b"abc").unwrap();
    again.close().unwrap();
    // (The old file's deletion, by the metadata service, counted apart.)
    weft_testkit::data_servers_quiet(&c);
    assert_eq!(stat_cost(&c, "/empty", 4), (0, 3));
}

/// A handle that made its file (an exclusive create) and was its only
/// writer reports the size it knows with its close, asking no data server
/// and sending the metadata service one request; a closer that was not
/// alone, or that truncated, measures.
#[test]
fn a_sole_writer_that_made_its_file_closes_without_asking_the_data_servers() {
    let tc = TestCluster::start("close-sole", 4);
    let c = tc.client();
    let excl = CreateOptions { exclusive: true, stripe_size: 65536, ..Default::default() };
    let close_cost = |f: weft_client::File| {
        let before = data_requests(&c);
        f.close().unwrap();
        data_requests(&c) - before - 4
    };
    let f = c.create("/alone", excl).unwrap();
    f.write_at(100_000, &[1u8; 50_000]).unwrap();
    f.write_at(0, &[2u8; 10]).unwrap();
    assert_eq!(close_cost(f), 0, "the sole writer knew the size");
    // One request to the metadata service: no `SetSize` after the close
    // (a report's own request is counted as it arrives: the second's is
    // in the difference).
    let f = c.create("/alone-too", excl).unwrap();
    f.write_at(0, &[2u8; 70_000]).unwrap();
    let before = weft_testkit::meta_requests(&c);
    f.close().unwrap();
    assert_eq!(weft_testkit::meta_requests(&c) - before - 1, 1, "the size went with the close");
    assert_eq!(stat_cost(&c, "/alone-too", 4), (0, 70_000));
    assert_eq!(stat_cost(&c, "/alone", 4), (0, 150_000));
    // Another writer overlapped: the creator's close, the last, measures.
    let f = c.create("/shared", excl).unwrap();
    f.write_at(0, &[1u8; 100]).unwrap();
    let other = tc.client().open("/shared", true).unwrap();
    other.write_at(0, &[3u8; 300_000]).unwrap();
    other.close().unwrap();
    assert_eq!(close_cost(f), 4, "not alone: asked every data server");
    assert_eq!(stat_cost(&c, "/shared", 4), (0, 300_000), "the other writer's bytes count");
    // A truncate through the handle: measured.
    let f = c.create("/cut", excl).unwrap();
    f.write_at(0, &[1u8; 1000]).unwrap();
    f.truncate(7).unwrap();
    assert_eq!(close_cost(f), 4);
    assert_eq!(stat_cost(&c, "/cut", 4), (0, 7));
}

/// After a restart the metadata service cannot know writers that opened a
/// file before it: a writer open across the restart keeps writing while
/// another opens and closes, and stat still shows the first one's bytes.
#[test]
fn stat_after_a_metadata_restart_does_not_trust_earlier_files() {
    let mut tc = TestCluster::start("stat-restart", 2);
    let c = tc.client();
    let f = c.create("/old", CreateOptions::default()).unwrap();
    f.write_at(0, &[1u8; 1000]).unwrap();
    f.close().unwrap();
    let early = c.open("/old", true).unwrap();
    c.sync_meta().unwrap();
    tc.lc.restart(0).unwrap();
    let c2 = tc.client();
    let late = c2.open("/old", true).unwrap();
    late.write_at(0, &[3u8; 10]).unwrap();
    late.close().unwrap();
    early.write_at(0, &[2u8; 5000]).unwrap();
    assert_eq!(stat_cost(&c2, "/old", 2), (2, 5000), "a writer from before the restart is still open");
    // Files created since the restart are known again.
    c2.create("/new", CreateOptions::default()).unwrap().close().unwrap();
    assert_eq!(stat_cost(&c2, "/new", 2), (0, 0));
    drop(early);
}

/// A chown of a regular file clears setuid, and setgid when the file is
/// group-executable or the caller is neither root nor in its group, also
/// to the owner it has (Linux's rule, as a local file system applies it).
#[test]
fn chown_clears_setuid_and_setgid_as_linux_does() {
    let tc = TestCluster::start("chown-suid", 1);
    let root = tc.client();
    let mode_after = |mode: u32, by: &weft_client::Client, gid: u32| {
        root.chmod("/f", mode).unwrap();
        by.chown("/f", weft_wire::KEEP_ID, gid).unwrap();
        root.stat("/f").unwrap().0.mode & 0o7777
    };
    root.create("/f", excl()).unwrap().close().unwrap();
    root.chown("/f", 1000, 100).unwrap();
    assert_eq!(mode_after(0o6755, &root, 100), 0o755, "root, group-executable: both go");
    assert_eq!(mode_after(0o6745, &root, 100), 0o2745, "root, not group-executable: setgid stays");
    let owner_in_group = root.with_cred(weft_wire::Cred::new(1000, 100));
    assert_eq!(mode_after(0o6745, &owner_in_group, 100), 0o2745, "the owner, in the group: setgid stays");
    let owner_elsewhere = root.with_cred(weft_wire::Cred::new(1000, 200));
    assert_eq!(mode_after(0o6745, &owner_elsewhere, 100), 0o745, "the owner, not in the group: setgid goes");
    // Not a regular file: a directory keeps its setgid.
    root.mkdir("/d", 0o2755).unwrap();
    root.chown("/d", 1000, 100).unwrap();
    assert_eq!(root.stat("/d").unwrap().0.mode & 0o7777, 0o2755);
}

/// A file's attribute change is answered with its size when the metadata
/// service knows it (no writer open), so a mount's setattr needs no stat
/// after it; while a writer is open, or for a directory, none is given.
#[test]
fn an_attribute_change_says_the_size_only_when_no_writer_is_open() {
    let tc = TestCluster::start("change-sized", 2);
    let c = tc.client();
    let f = c.create("/sized", CreateOptions::default()).unwrap();
    f.write_at(0, &[5u8; 70_000]).unwrap();
    let id = f.id();
    let (_, while_open) = c.change_sized(id, weft_wire::AttrChange::Mode(0o640)).unwrap();
    assert_eq!(while_open, None, "a writer is open: only the data servers know the size");
    f.close().unwrap();
    let (a, closed) = c.change_sized(id, weft_wire::AttrChange::Mode(0o600)).unwrap();
    assert_eq!((a.mode & 0o7777, closed), (0o600, Some(70_000)));
    let (_, owner) = c.change_sized(id, weft_wire::AttrChange::Owner { uid: 7, gid: 8 }).unwrap();
    assert_eq!(owner, Some(70_000));
    let d = c.mkdir("/sized-dir", 0o755).unwrap();
    assert_eq!(c.change_sized(d.id, weft_wire::AttrChange::Mode(0o700)).unwrap().1, None);
}
