//! The emulated cluster (issue 13): servers in network namespaces of their
//! own behind rate-capped links, reached through a bridge; everything it
//! creates is gone when the cluster stops, and a dead run's leftovers are
//! removed by the next one. Needs root and iproute2 (CI has both).

use weft_testkit::TestCluster;
use std::process::Command;
use std::time::Instant;
use weft_client::CreateOptions;
use weft_launch::{ClusterSpec, EmulateSpec};

/// One emulation test at a time: each new emulation removes the leftovers
/// of dead processes, which would race with a test that kills a `weft up`
/// and then looks at what it left.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A `weft up` child, stopped (SIGTERM, so it removes its network) if a
/// test fails while it runs.
struct Up(std::process::Child);

impl Drop for Up {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            // SAFETY: kill(2) of our own child.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(self.0.id() as i32, libc::SIGTERM);
            }
            let _ = self.0.wait();
        }
    }
}

fn ours(prefix: &str) -> Vec<String> {
    // Names of one emulation: `weft-<pid>s<seq>-n<k>`.
    weft_launch::emulate::namespaces().into_iter().filter(|n| n.starts_with(prefix)).collect()
}

fn link_exists(name: &str) -> bool {
    Command::new("ip").args(["link", "show", name]).output().is_ok_and(|o| o.status.success())
}

#[test]
#[ignore = "needs root: network namespaces (make test runs it as root)"]
fn an_emulated_cluster_caps_its_links_and_leaves_nothing_behind() {
    let _one = one_at_a_time();
    // Leftovers of a run that died (an owner pid that cannot exist).
    let dead = "weft-4194305s0-n0";
    assert!(Command::new("ip").args(["netns", "add", dead]).status().unwrap().success());
    // 80 Mbit/s: 10 MB/s per node, both ways.
    let spec = ClusterSpec { data_servers: 1, emulate: Some(EmulateSpec { link_bps: Some(80_000_000), disk_bps: None, client_nodes: 0 }), ..ClusterSpec::default() };
    let tc = TestCluster::start_spec("emulate", spec);
    assert!(!weft_launch::emulate::namespaces().contains(&dead.to_string()), "a dead run's namespace was left");
    // Other tests of this process may run emulations of their own at the
    // same time: count only this cluster's (its tag).
    let tag = tc.lc.emulation().expect("an emulated cluster").tag();
    let prefix = format!("weft-{tag}-");
    assert_eq!(ours(&prefix).len(), 2, "one namespace per server: {:?}", ours(&prefix));
    for s in &tc.cluster().servers {
        // The benchmarking range 198.18.0.0/15, nothing else.
        let std::net::IpAddr::V4(ip) = s.addr.ip() else { panic!("server {} at {}", s.id, s.addr) };
        assert!(ip.octets()[0] == 198 && ip.octets()[1] & 0xfe == 18, "server {} at {}", s.id, s.addr);
    }
    let c = tc.client();
    let f = c.create("/x", CreateOptions::default()).unwrap();
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    let t = Instant::now();
    f.write_at(0, &data).unwrap();
    let mb_s = data.len() as f64 / t.elapsed().as_secs_f64() / 1e6;
    // Loopback moves GB/s; a capped link about 10 MB/s (3x margin).
    assert!(mb_s < 30.0, "4 MiB crossed the 80 Mbit/s link at {mb_s:.0} MB/s: not capped");
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.read_at(0, &mut back).unwrap(), data.len());
    assert!(back == data);
    drop(c);
    drop(tc);
    assert!(ours(&prefix).is_empty(), "namespaces left: {:?}", ours(&prefix));
    assert!(!link_exists(&format!("wb{tag}")), "the bridge was left");
}

/// A node's disk cap: fsync'd writes of a server in the emulated cluster
/// go no faster than the cap (the virtual disk takes GB/s), and its
/// cgroup goes with the cluster.
#[test]
#[ignore = "needs root: network namespaces (make test runs it as root)"]
fn an_emulated_disk_caps_fsynced_writes() {
    let _one = one_at_a_time();
    let spec = ClusterSpec { data_servers: 1, emulate: Some(EmulateSpec { link_bps: None, disk_bps: Some(10 << 20), client_nodes: 0 }), ..ClusterSpec::default() };
    let tc = TestCluster::start_spec("emulate-disk", spec);
    let c = tc.client();
    let f = c.create("/d", CreateOptions::default()).unwrap();
    let data = vec![5u8; 8 << 20];
    let t = Instant::now();
    f.write_at(0, &data).unwrap();
    f.fsync().unwrap();
    let mb_s = data.len() as f64 / t.elapsed().as_secs_f64() / 1e6;
    assert!(mb_s < 31.0, "8 MiB written and fsync'd at {mb_s:.0} MB/s under a 10 MiB/s disk cap");
    let prefix = format!("weft-{}-", tc.lc.emulation().expect("an emulated cluster").tag());
    let cgroups = || std::fs::read_dir("/sys/fs/cgroup/blkio").unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&prefix)).count();
    assert!(cgroups() >= 2, "a disk cgroup per server");
    drop(c);
    drop(tc);
    assert_eq!(cgroups(), 0, "disk cgroups left behind");
}

/// Client nodes: a client process run on one (`ip netns exec`) reaches the
/// servers through its own capped link, so a file striped over two servers
/// (each behind 10 MB/s) reaches it at no more than its node's 10 MB/s,
/// as on a cluster's compute node; the node goes with the cluster.
#[test]
#[ignore = "needs root: network namespaces (make test runs it as root)"]
fn a_client_node_has_its_own_capped_link() {
    let _one = one_at_a_time();
    let spec = ClusterSpec { data_servers: 2, emulate: Some(EmulateSpec { link_bps: Some(80_000_000), disk_bps: None, client_nodes: 1 }), ..ClusterSpec::default() };
    let tc = TestCluster::start_spec("emulate-client", spec);
    assert_eq!(tc.lc.client_nodes(), 1);
    let node = tc.lc.client_node(0);
    assert_eq!(node[..3], ["ip", "netns", "exec"]);
    let ns = node[3].clone();
    let qdisc = Command::new("ip").args(["netns", "exec", &ns, "tc", "qdisc", "show", "dev", "eth0"]).output().unwrap();
    assert!(String::from_utf8_lossy(&qdisc.stdout).contains("tbf"), "the client node's link is not capped");
    let src = tc.scratch("client-src");
    std::fs::write(&src, vec![7u8; 8 << 20]).unwrap();
    let t = Instant::now();
    let out = Command::new(&node[0])
        .args(&node[1..])
        .arg(weft_testkit::weft())
        .args(["cp", "--stripe-count", "2"])
        .arg(&src)
        .arg("weft:/from-node")
        .env("WEFT_CLUSTER", tc.lc.cluster_file())
        .output()
        .unwrap();
    let mb_s = (8 << 20) as f64 / t.elapsed().as_secs_f64() / 1e6;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(mb_s < 15.0, "8 MiB left the 10 MB/s client node at {mb_s:.1} MB/s: its link is not the bound");
    assert_eq!(tc.client().stat("/from-node").unwrap().1, 8 << 20);
    drop(tc);
    assert!(!weft_launch::emulate::namespaces().contains(&ns), "the client node was left");
}

/// Cgroups (either hierarchy) named for an emulation with this prefix.
fn cgroups_with(prefix: &str) -> Vec<String> {
    ["/sys/fs/cgroup/blkio", "/sys/fs/cgroup"]
        .iter()
        .flat_map(|root| std::fs::read_dir(root).into_iter().flatten().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// `weft up --emulate` in the foreground, in `dir`; returns once it
/// recorded itself (its servers are up).
fn weft_up_emulated(dir: &std::path::Path, extra: &[&str]) -> Up {
    let mut child = Command::new(weft_testkit::weft())
        .args(["up", "--emulate", "--servers", "1", "--link", "100mbit", "--dir"])
        .arg(dir)
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !dir.join("up.pid").exists() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            panic!("weft up --emulate exited ({status}): {err}");
        }
        assert!(start.elapsed().as_secs() < 60, "weft up --emulate did not come up");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Up(child)
}

/// What `weft up --emulate` creates is removed by `weft down`, and after
/// a SIGKILL (which leaves it all behind: nothing runs to clean up) by the
/// next `weft up --emulate`.
#[test]
#[ignore = "needs root: network namespaces (make test runs it as root)"]
fn weft_down_and_the_next_weft_up_remove_an_emulated_cluster() {
    let _one = one_at_a_time();
    let scratch = std::env::temp_dir().join(format!("weft-emulate-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let (a, b) = (scratch.join("a"), scratch.join("b"));
    // With disk caps: each server in a cgroup of its own.
    let mut first = weft_up_emulated(&a, &["--disk", "50m"]);
    let first_pid = first.0.id();
    let first_prefix = format!("weft-{first_pid}s0-");
    assert_eq!(ours(&first_prefix).len(), 2, "a namespace per server: {:?}", ours(&first_prefix));
    assert_eq!(cgroups_with(&first_prefix).len(), 2, "a cgroup per server: {:?}", cgroups_with(&first_prefix));
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    assert_eq!(ours(&first_prefix).len(), 2, "a SIGKILL runs no clean-up: the namespaces stay until the next run");
    let mut second = weft_up_emulated(&b, &[]);
    assert!(ours(&first_prefix).is_empty(), "the killed run's namespaces were left: {:?}", ours(&first_prefix));
    assert!(cgroups_with(&first_prefix).is_empty(), "the killed run's cgroups were left: {:?}", cgroups_with(&first_prefix));
    assert!(!link_exists(&format!("wb{first_pid}s0")), "the killed run's bridge was left");
    let second_pid = second.0.id();
    let second_prefix = format!("weft-{second_pid}s0-");
    assert_eq!(ours(&second_prefix).len(), 2);
    // `weft down` stops a foreground cluster as Ctrl-C does.
    let down = Command::new(weft_testkit::weft()).args(["down", "--dir"]).arg(&b).output().unwrap();
    assert!(down.status.success(), "weft down: {}", String::from_utf8_lossy(&down.stderr));
    let status = second.0.wait().unwrap();
    assert!(status.success(), "weft up ended with {status}");
    assert!(ours(&second_prefix).is_empty(), "weft down left namespaces: {:?}", ours(&second_prefix));
    assert!(!link_exists(&format!("wb{second_pid}s0")), "weft down left the bridge");
    assert!(!b.join("up.pid").exists());
    let _ = std::fs::remove_dir_all(&scratch);
}

/// A start that fails after the network was made (a server cannot open
/// its directory) removes the network and the disk cgroups it made.
#[test]
#[ignore = "needs root: network namespaces (make test runs it as root)"]
fn a_failed_emulated_start_leaves_nothing_behind() {
    let _one = one_at_a_time();
    let dir = std::env::temp_dir().join(format!("weft-emulate-fail-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Data server 1's directory is a file.
    std::fs::write(dir.join("srv1"), b"in the way").unwrap();
    let child = Command::new(weft_testkit::weft())
        .args(["up", "--emulate", "--servers", "1", "--disk", "50m", "--dir"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "weft up should fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("server 1"), "the error should name the server that failed: {err}");
    let prefix = format!("weft-{pid}s");
    assert!(ours(&prefix).is_empty(), "namespaces left: {:?}", ours(&prefix));
    assert!(cgroups_with(&prefix).is_empty(), "cgroups left: {:?}", cgroups_with(&prefix));
    assert!(!link_exists(&format!("wb{pid}s0")), "the bridge was left");
    let _ = std::fs::remove_dir_all(&dir);
}
