//! Durability: what was acknowledged (data after fsync; every metadata
//! change with `meta_sync_window_ms = 0`, every one an fsync covered with
//! a window) survives `kill -9` of every server and a restart.

use weft_testkit::{pattern, TestCluster};
use weft_client::{CreateOptions, FileKind};
use weft_launch::ClusterSpec;

#[test]
fn data_and_namespace_survive_kill_9_of_every_server() {
    kill_9_and_restart(0);
}

/// With a window (a minute: nothing but fsync makes changes durable here),
/// the changes after the last fsync are lost in the crash, all of them
/// (never half), and ids handed out to lost files are not handed out again.
#[test]
fn with_a_metadata_window_what_fsync_covered_survives_kill_9_and_ids_are_not_reused() {
    kill_9_and_restart(60_000);
}

/// `kill -9` of every server, then each started again.
fn crash_and_restart_every_server(tc: &mut TestCluster) {
    let servers = tc.cluster().servers.len();
    for id in 0..servers {
        tc.lc.kill(id);
    }
    for id in 0..servers {
        tc.lc.restart(id).unwrap();
    }
}

fn kill_9_and_restart(meta_sync_window_ms: u64) {
    let mut tc = TestCluster::start_spec(&format!("persist-{meta_sync_window_ms}"), ClusterSpec { data_servers: 3, meta_sync_window_ms, ..ClusterSpec::default() });
    let c = tc.client();
    c.mkdir("/keep", 0o750).unwrap();
    let data = pattern(42, 3 << 20);
    let f = c.create("/keep/data", CreateOptions { stripe_size: 65536, ..CreateOptions::default() }).unwrap();
    f.write_at(0, &data).unwrap();
    f.fsync().unwrap();
    let lost = c.create("/keep/empty", CreateOptions::default()).unwrap().attr().id;
    c.rename("/keep/empty", "/keep/renamed").unwrap();
    crash_and_restart_every_server(&mut tc);
    // A new client: the old one's connections died with the servers.
    let c = tc.client();
    let names: Vec<(String, FileKind)> = c.readdir("/keep").unwrap().into_iter().map(|e| (e.name, e.attr.kind)).collect();
    if meta_sync_window_ms == 0 {
        assert_eq!(names, [("data".to_string(), FileKind::File), ("renamed".to_string(), FileKind::File)]);
    } else {
        assert_eq!(names, [("data".to_string(), FileKind::File)], "with a window, the changes after the last fsync are lost together");
    }
    assert_eq!(c.stat("/keep").unwrap().0.mode, 0o750);
    let f = c.open("/keep/data", false).unwrap();
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data, "data survived");
    // New files after the restart do not reuse old ids.
    let g = c.create("/keep/new", CreateOptions::default()).unwrap();
    assert!(g.attr().id > f.attr().id && g.attr().id > lost, "a new file must not get the id of one lost in the crash (its objects may exist)");
}

#[test]
fn an_old_client_reconnects_after_a_server_restart() {
    let mut tc = TestCluster::start("reconnect", 2);
    let c = tc.client();
    let f = c.create("/f", CreateOptions::default()).unwrap();
    f.write_at(0, b"before").unwrap();
    f.fsync().unwrap();
    for id in 0..3 {
        tc.lc.restart(id).unwrap();
    }
    // Same client, same handle: idle connections to the dead servers are
    // noticed and replaced on next use.
    let mut buf = [0u8; 6];
    assert_eq!(f.read_at(0, &mut buf).unwrap(), 6);
    assert_eq!(&buf, b"before");
    assert!(c.stat("/f").is_ok());
}

/// A removed file's objects are deleted by the metadata service only once
/// the removal is durable: after they are gone, a crash of every server
/// (with a window no flush would end in time) cannot bring the name back
/// without its data.
#[test]
fn objects_are_deleted_only_after_their_removal_is_durable() {
    let mut tc = TestCluster::start_spec("reap-durable", ClusterSpec { data_servers: 2, meta_sync_window_ms: 60_000, ..ClusterSpec::default() });
    let c = tc.client();
    let data = pattern(7, 300_000);
    let f = c.create("/gone", CreateOptions { stripe_size: 65536, ..CreateOptions::default() }).unwrap();
    f.write_at(0, &data).unwrap();
    f.fsync().unwrap();
    f.close().unwrap();
    assert!(weft_testkit::objects_when(&c, |n| n == 2) == 2, "the file has an object on each data server");
    c.unlink("/gone").unwrap();
    assert_eq!(weft_testkit::objects_when(&c, |n| n == 0), 0, "the removed file's objects were not deleted");
    crash_and_restart_every_server(&mut tc);
    let c = tc.client();
    match c.open("/gone", false) {
        Err(weft_client::Error::NotFound(_)) => {}
        Ok(f) => {
            let mut back = vec![0u8; data.len()];
            let n = f.read_at(0, &mut back).unwrap_or(0);
            panic!("the removed name came back after the crash, its data gone ({n} of {} bytes read back)", data.len());
        }
        Err(e) => panic!("{e}"),
    }
}

/// A data server down when files are removed gets their objects deleted
/// once it is back, also across a restart of the metadata service
/// meanwhile, and it holds up neither the other servers' deletions nor
/// files past the first round's (256): nothing is left behind.
#[test]
fn objects_on_a_data_server_that_was_down_are_deleted_when_it_is_back() {
    let mut tc = TestCluster::start("reap-down", 2);
    let c = tc.client();
    let files = 300;
    for i in 0..files {
        let f = c.create(&format!("/f{i}"), CreateOptions { stripe_size: 65536, ..CreateOptions::default() }).unwrap();
        f.write_at(0, &pattern(i, 65_537)).unwrap();
        f.close().unwrap();
    }
    assert_eq!(weft_testkit::objects_when(&c, |n| n == 2 * files), 2 * files);
    tc.lc.kill(2);
    for i in 0..files {
        c.unlink(&format!("/f{i}")).unwrap();
    }
    // A status reports the dead server at once (not after the client's
    // window for riding through restarts), though this client had reached it.
    let asked = std::time::Instant::now();
    let down = c.status().into_iter().filter(|s| s.stats.is_err()).count();
    assert!(down == 1 && asked.elapsed() < std::time::Duration::from_secs(10), "{down} servers reported down after {:?}", asked.elapsed());
    assert_eq!(weft_testkit::objects_when(&c, |n| n == 0), 0, "the objects on the server that is up were not all deleted");
    // Operators see them wait: the metadata server's gauge.
    assert_eq!(orphans_when(&tc, files as f64), files as f64, "weft_meta_orphans while a data server is down");
    // Recorded durably: a restart of the metadata service keeps it.
    c.sync_meta().unwrap();
    tc.lc.kill(0);
    tc.lc.restart(0).unwrap();
    tc.lc.restart(2).unwrap();
    let c = tc.client();
    assert_eq!(weft_testkit::objects_when(&c, |n| n == 0), 0, "objects on the server that was down stayed");
    assert_eq!(orphans_when(&tc, 0.0), 0.0, "weft_meta_orphans once every object is deleted");
    assert!(c.readdir("/").unwrap().is_empty());
}

/// The metadata server's `weft_meta_orphans` once it is `want`, or after
/// 10 s (its value then).
fn orphans_when(tc: &TestCluster, want: f64) -> f64 {
    let port = tc.cluster().servers[0].metrics.expect("test clusters name a metrics port");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, page) = weft_testkit::get(port, "/metrics");
        let got = weft_testkit::value(&page, "weft_meta_orphans{server=\"0\"}").unwrap_or(-1.0);
        if got == want || std::time::Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
